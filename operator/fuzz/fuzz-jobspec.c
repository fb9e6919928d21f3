/* libFuzzer target: a TrainingJob from the API server (jobspec_parse), and the pod,
 * Service and Secret the operator derives from a spec it accepts (desired_*), which
 * merge the user's pod template. */
#include "desired.h"
#include "jobspec.h"
#include "olog.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    olog_set_level(OLOG_ERROR);
    cJSON *job = cJSON_ParseWithLength((const char *)data, size);
    if (!job) return 0;
    JobSpec s;
    char err[512] = "";
    if (jobspec_parse(job, &s, err, sizeof err) == 0) {
        if (!s.name || s.workers < 1 || s.port < 1 || s.port > 65535) abort();
        static const DesiredConfig cfg = {.trainer_image = "kubetrain/trainer:fuzz",
                                          .cluster_domain = "cluster.local"};
        unsigned char key[32] = {0};
        /* The last replica of every role: the longest names, the role's template. */
        for (Role r = 0; r < ROLE_COUNT; r++) {
            if (!s.roles[r].replicas) continue;
            cJSON *pod = desired_pod(&s, &cfg, "fuzz-secret-x1y2z", r, s.roles[r].replicas - 1, 1);
            if (!pod) abort();
            cJSON_Delete(pod);
        }
        cJSON *svc = desired_service(&s);
        cJSON *sec = desired_secret(&s, key);
        if (!svc || !sec) abort();
        cJSON_Delete(svc);
        cJSON_Delete(sec);
    } else if (!err[0]) {
        abort();
    }
    cJSON_Delete(job);
    return 0;
}
