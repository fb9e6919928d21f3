#include "gpu/pergpu.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tfconfig.h"
#include "util.h"

#define PERGPU_MAX 64
#define STOP_GRACE_S 60.0

static volatile sig_atomic_t forwarded;

static void on_signal(int sig)
{
    forwarded = sig;
}

/* The TF_CONFIG of the W*G ranks, task index `index`. Caller frees. */
static char *expanded_tf_config(const TfConfig *tf, int g, int index)
{
    cJSON *root = cJSON_CreateObject(), *cluster = cJSON_AddObjectToObject(root, "cluster");
    cJSON *workers = cJSON_AddArrayToObject(cluster, "worker"),
          *task = cJSON_AddObjectToObject(root, "task");
    for (int w = 0; w < tf->world; w++)
        for (int l = 0; l < g; l++) {
            char addr[TFCONFIG_HOST_MAX + 16];
            const char *h = tf->peers[w].host;
            snprintf(addr, sizeof addr, strchr(h, ':') ? "[%s]:%d" : "%s:%d", h,
                     tf->peers[w].port + l);
            cJSON_AddItemToArray(workers, cJSON_CreateString(addr));
        }
    cJSON_AddStringToObject(task, "type", "worker");
    cJSON_AddNumberToObject(task, "index", index);
    char *s = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    if (!s) util_fail(KT_EXIT_USAGE, "--gpus-per-worker: out of memory for TF_CONFIG");
    return s;
}

int pergpu_main(int gpus_per_worker, int index_override, int argc, char **argv)
{
    const int g = gpus_per_worker;
    char err[1024];
    const char *json = getenv("TF_CONFIG");
    if (g < 2 || g > PERGPU_MAX)
        util_fail(KT_EXIT_USAGE, "--gpus-per-worker %d: expected 2..%d here", g, PERGPU_MAX);
    if (!json || !*json)
        util_fail(KT_EXIT_USAGE,
                  "--gpus-per-worker %d: needs TF_CONFIG (on one machine, run "
                  "`kubetrain-trainer launch --workers N`: each local worker takes its own GPU)",
                  g);
    TfConfig tf;
    if (tfconfig_parse(json, index_override, &tf, err, sizeof err))
        util_fail(KT_EXIT_USAGE, "TF_CONFIG: %s", err);
    for (int w = 0; w < tf.world; w++)
        if (tf.peers[w].port + g - 1 > 65535)
            util_fail(KT_EXIT_USAGE, "--gpus-per-worker %d: worker %d's port %d + %d passes 65535",
                      g, w, tf.peers[w].port, g - 1);

    pid_t pid[PERGPU_MAX];
    int code[PERGPU_MAX];
    util_on_stop_signals(on_signal);
    for (int l = 0; l < g; l++) {
        const int index = tf.rank * g + l;
        char *tfj = expanded_tf_config(&tf, g, index);
        char idx[16];
        snprintf(idx, sizeof idx, "%d", index);
        pid[l] = fork();
        if (pid[l] < 0) util_fail(KT_EXIT_RETRY, "--gpus-per-worker: fork: %s", strerror(errno));
        if (pid[l] == 0) {
            signal(SIGTERM, SIG_DFL);
            signal(SIGINT, SIG_DFL);
            signal(SIGPIPE, SIG_DFL);
            setenv("TF_CONFIG", tfj, 1);
            if (l != 0) setenv("KUBETRAIN_TERMINATION_FILE", "/dev/null", 1);
            char **av = xcalloc((size_t)argc + 7, sizeof *av);
            int n = 0;
            av[n++] = (char *)"kubetrain-trainer";
            av[n++] = (char *)"train";
            for (int i = 0; i < argc; i++) av[n++] = argv[i];
            av[n++] = (char *)"--index";
            av[n++] = idx;
            av[n++] = (char *)"--gpus-per-worker";
            av[n++] = (char *)"1";
            execv("/proc/self/exe", av);
            fprintf(stderr, "kubetrain-trainer: exec /proc/self/exe: %s\n", strerror(errno));
            _exit(KT_EXIT_USAGE);
        }
        free(tfj);
        code[l] = -1;
        util_log("rank %d (local rank %d of worker %d): pid %d, port %d", index, l, tf.rank,
                 (int)pid[l], tf.peers[tf.rank].port + l);
    }
    tfconfig_free(&tf);

    int running = g, first_fail = -1, stopping = 0, killed = 0;
    double stop_at = 0.0;
    while (running > 0) {
        int status;
        pid_t p = waitpid(-1, &status, WNOHANG);
        int sig = forwarded;
        if (sig) {
            forwarded = 0;
            util_log("forwarding signal %d to the ranks", sig);
            for (int l = 0; l < g; l++)
                if (code[l] < 0) kill(pid[l], sig);
            if (!stopping) stop_at = util_now();
            stopping = 1;
        }
        if (p < 0 && errno != EINTR)
            util_fail(KT_EXIT_RETRY, "--gpus-per-worker: waitpid: %s", strerror(errno));
        for (int l = 0; p > 0 && l < g; l++) {
            if (pid[l] != p) continue;
            code[l] = util_exit_code(status);
            running--;
            if (code[l] != 0 && first_fail < 0) {
                first_fail = l;
                util_log("local rank %d exited with %d: stopping the others", l, code[l]);
                for (int k = 0; k < g; k++)
                    if (code[k] < 0) kill(pid[k], SIGTERM);
                if (!stopping) stop_at = util_now();
                stopping = 1;
            }
        }
        if (stopping && !killed && running > 0 && util_now() - stop_at > STOP_GRACE_S) {
            util_log("ranks still running %.0fs after SIGTERM: killing them", STOP_GRACE_S);
            for (int l = 0; l < g; l++)
                if (code[l] < 0) kill(pid[l], SIGKILL);
            killed = 1;
        }
        if (p <= 0) usleep(100 * 1000);
    }
    return code[0] != 0 || first_fail < 0 ? code[0] : code[first_fail];
}
