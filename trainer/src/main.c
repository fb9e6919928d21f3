/* kubetrain-trainer — one worker of a synchronous data-parallel training job.
 *
 *   kubetrain-trainer [train] [options]     see config.h / --help
 *
 * Exit codes (shared/DESIGN.md): 0 done, 2 bad usage, 3 bad data or model, 75 retry. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "collective.h"
#include "config.h"
#include "train.h"
#include "util.h"

static int cmd_train(int argc, char **argv)
{
    Config cfg;
    char err[1024];
    int code;
    int rc = config_parse(&cfg, argc, argv, err, sizeof err);
    if (rc == 1) {
        config_usage(stdout);
        return KT_EXIT_OK;
    }
    if (rc) util_fail(KT_EXIT_USAGE, "%s", err);

    Collective *coll = coll_local_create();
    Trainer *t;
    if (trainer_create(&t, &cfg, coll, &code, err, sizeof err)) util_fail(code, "%s", err);
    if (trainer_run(t, &code, err, sizeof err)) util_fail(code, "%s", err);

    char hash[65];
    trainer_weights_hash(t, hash);
    if (cfg.print_weights_hash) printf("weights-sha256: %s\n", hash);
    cJSON *res = cJSON_CreateObject();
    cJSON_AddNumberToObject(res, "step", (double)t->st.global_step);
    cJSON_AddNumberToObject(res, "epoch", t->st.epoch);
    cJSON_AddNumberToObject(res, "loss", t->last_loss);
    cJSON_AddNumberToObject(res, "accuracy", t->last_accuracy);
    cJSON_AddStringToObject(res, "weights_sha256", hash);
    char *json = cJSON_PrintUnformatted(res);
    if (json) util_termination_write(json);
    free(json);
    cJSON_Delete(res);
    trainer_free(t);
    coll_destroy(coll);
    return KT_EXIT_OK;
}

int main(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "train")) return cmd_train(argc - 2, argv + 2);
    if (argc > 1 && strncmp(argv[1], "-", 1) != 0)
        util_fail(KT_EXIT_USAGE, "%s: unknown command (expected train)", argv[1]);
    return cmd_train(argc - 1, argv + 1);
}
