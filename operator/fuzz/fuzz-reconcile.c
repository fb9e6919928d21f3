/* libFuzzer target: one reconcile over observed objects as the API server returns
 * them, including the chief's termination message (status.containerStatuses[].state
 * .terminated.message), which the operator parses as JSON. Input:
 *   {"job": {...}, "service": {...}, "pods": [{...}, ...], "now": N} */
#include "jsonx.h"
#include "olog.h"
#include "reconcile.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_PODS 64

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    olog_set_level(OLOG_ERROR);
    cJSON *root = cJSON_ParseWithLength((const char *)data, size);
    if (!root) return 0;
    /* Creating the group costs workers^2 (every pod's TF_CONFIG lists every worker): the
     * allowed 1024 take seconds under ASan, by design. Keep to small groups for speed. */
    if (jsonx_num(root, "job.spec.workers", 0) > 64) {
        cJSON_Delete(root);
        return 0;
    }
    static const ReconcileConfig cfg = {
        .desired = {.trainer_image = "kubetrain/trainer:fuzz", .cluster_domain = ""},
        .backoff_base_s = 10,
        .backoff_max_s = 300,
    };
    const cJSON *pods[MAX_PODS];
    size_t npods = 0;
    const cJSON *p;
    cJSON_ArrayForEach(p, jsonx_arr(root, "pods"))
    {
        if (npods < MAX_PODS) pods[npods++] = p;
    }
    Observed obs = {.job = jsonx_at(root, "job"),
                    .service = jsonx_at(root, "service"),
                    .pods = pods,
                    .npods = npods,
                    .now = jsonx_num(root, "now", 1800000000.0)};
    /* The time comes from the clock, not from the API server: keep it sane. */
    if (!(obs.now >= 0 && obs.now < 1e11)) obs.now = 1800000000.0;
    memset(obs.ring_key, 0xa5, sizeof obs.ring_key);
    Plan plan;
    char err[512] = "";
    int rc = reconcile(&cfg, &obs, &plan, err, sizeof err);
    if (rc == 0) {
        char *desc = plan_describe(&plan);
        if (!desc) abort();
        free(desc);
    } else if (!err[0]) {
        abort();
    }
    plan_free(&plan);
    cJSON_Delete(root);
    return 0;
}
