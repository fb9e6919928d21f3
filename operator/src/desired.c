/* desired — building the Secret, Service and worker pods of a TrainingJob. */
#include "desired.h"

#include "jsonx.h"

#include <errno.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void desired_service_name(const char *job, char *out, size_t n)
{
    snprintf(out, n, "%s-worker", job);
}

void desired_secret_prefix(const char *job, char *out, size_t n)
{
    snprintf(out, n, "%s-secret-", job);
}

void desired_pod_name(const char *job, Role role, int index, char *out, size_t n)
{
    snprintf(out, n, "%s-%s-%d", job, jobspec_role_name(role), index);
}

void desired_pod_group_name(const char *job, long long attempt, char *out, size_t n)
{
    snprintf(out, n, "%s-%lld", job, attempt);
}

int desired_gang_size(const JobSpec *s)
{
    return s->npods - s->roles[ROLE_EVALUATOR].replicas;
}

int desired_gang_min(const JobSpec *s)
{
    if (!desired_elastic(s)) return desired_gang_size(s);
    return s->roles[ROLE_CHIEF].replicas + s->min_workers + s->roles[ROLE_PS].replicas;
}

int desired_in_gang(Role role)
{
    return role != ROLE_EVALUATOR;
}

void desired_task_address(const JobSpec *s, const DesiredConfig *cfg, Role role, int index,
                          char *out, size_t n)
{
    int has_domain = cfg->cluster_domain && *cfg->cluster_domain;
    snprintf(out, n, "%s-%s-%d.%s-worker.%s.svc%s%s:%d", s->name, jobspec_role_name(role), index,
             s->name, s->ns, has_domain ? "." : "", has_domain ? cfg->cluster_domain : "", s->port);
}

char *desired_tf_config(const JobSpec *s, const DesiredConfig *cfg, Role role, int index)
{
    cJSON *root = cJSON_CreateObject();
    cJSON *cluster = jsonx_ensure_obj(root, "cluster");
    cJSON *task = cluster ? jsonx_ensure_obj(root, "task") : NULL;
    char *out = NULL;
    if (!task) goto done;
    /* The evaluator is never in the cluster: it trains nothing and talks to no task. */
    for (Role r = 0; r < ROLE_EVALUATOR; r++) {
        if (!s->roles[r].replicas) continue;
        const char *rn = jobspec_role_name(r);
        cJSON *list = cJSON_AddArrayToObject(cluster, rn);
        if (!list) goto done;
        for (int i = 0; i < s->roles[r].replicas; i++) {
            char host[512];
            desired_task_address(s, cfg, r, i, host, sizeof host);
            if (!cJSON_AddItemToArray(list, cJSON_CreateString(host))) goto done;
        }
    }
    if (!jsonx_set_str(task, "type", jobspec_role_name(role)) ||
        !jsonx_set_num(task, "index", index))
        goto done;
    out = cJSON_PrintUnformatted(root);
done:
    cJSON_Delete(root);
    return out;
}

int desired_cluster_shape_of(const JobSpec *s, int workers, char *out, size_t n)
{
    if (!s->roles[ROLE_CHIEF].replicas && !s->roles[ROLE_PS].replicas) return 0;
    snprintf(out, n, "chief=%d,worker=%d,ps=%d", s->roles[ROLE_CHIEF].replicas, workers,
             s->roles[ROLE_PS].replicas);
    return 1;
}

int desired_cluster_shape(const JobSpec *s, char *out, size_t n)
{
    return desired_cluster_shape_of(s, s->workers, out, n);
}

cJSON *desired_owner_ref(const JobSpec *s)
{
    cJSON *r = cJSON_CreateObject();
    if (!jsonx_set_str(r, "apiVersion", KT_API_VERSION) || !jsonx_set_str(r, "kind", KT_KIND) ||
        !jsonx_set_str(r, "name", s->name) || !jsonx_set_str(r, "uid", s->uid) ||
        !jsonx_set_bool(r, "controller", 1) || !jsonx_set_bool(r, "blockOwnerDeletion", 1)) {
        cJSON_Delete(r);
        return NULL;
    }
    return r;
}

cJSON *desired_job_labels(const JobSpec *s)
{
    cJSON *l = cJSON_CreateObject();
    if (!jsonx_set_str(l, LABEL_JOB_NAME, s->name) ||
        !jsonx_set_str(l, LABEL_MANAGED_BY, MANAGED_BY)) {
        cJSON_Delete(l);
        return NULL;
    }
    return l;
}

/* apiVersion, kind and metadata {name, namespace, labels, ownerReferences}. */
static cJSON *new_object(const JobSpec *s, const char *kind, const char *name)
{
    cJSON *o = cJSON_CreateObject();
    cJSON *md = jsonx_set(o, "metadata", cJSON_CreateObject());
    cJSON *refs = NULL;
    if (!jsonx_set_str(o, "apiVersion", "v1") || !jsonx_set_str(o, "kind", kind) || !md ||
        !jsonx_set_str(md, "name", name) || !jsonx_set_str(md, "namespace", s->ns) ||
        !jsonx_set(md, "labels", desired_job_labels(s)) ||
        !(refs = jsonx_set(md, "ownerReferences", cJSON_CreateArray())) ||
        !cJSON_AddItemToArray(refs, desired_owner_ref(s))) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

cJSON *desired_pod_group(const JobSpec *s, long long attempt, const char *api_version)
{
    char name[300], buf[32];
    desired_pod_group_name(s->name, attempt, name, sizeof name);
    snprintf(buf, sizeof buf, "%lld", attempt);
    cJSON *o = new_object(s, "PodGroup", name);
    cJSON *annots = o ? jsonx_ensure_obj(o, "metadata.annotations") : NULL;
    cJSON *gang = o ? jsonx_ensure_obj(o, "spec.schedulingPolicy.gang") : NULL;
    int beta = strcmp(api_version, POD_GROUP_V1BETA1) == 0;
    if (!annots || !gang || !jsonx_set_str(o, "apiVersion", api_version) ||
        !jsonx_set_str(annots, ANNOT_ATTEMPT, buf) ||
        !jsonx_set_num(gang, "minCount", desired_gang_min(s)) ||
        (beta && !jsonx_ensure_obj(o, "spec.disruptionMode.all"))) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

int desired_pod_join_group(cJSON *pod, const char *group)
{
    cJSON *g = jsonx_set(jsonx_ensure_obj(pod, "spec"), "schedulingGroup", cJSON_CreateObject());
    return g && jsonx_set_str(g, "podGroupName", group) ? 0 : -ENOMEM;
}

/* Base64 of n bytes into a new cJSON string. */
static cJSON *b64_string(const void *buf, size_t n)
{
    char *out = malloc(4 * ((n + 2) / 3) + 1);
    if (!out) return NULL;
    EVP_EncodeBlock((unsigned char *)out, buf, (int)n);
    cJSON *v = cJSON_CreateString(out);
    free(out);
    return v;
}

cJSON *desired_secret(const JobSpec *s, const unsigned char ring_key[32])
{
    char prefix[300];
    desired_secret_prefix(s->name, prefix, sizeof prefix);
    cJSON *o = new_object(s, "Secret", prefix);
    cJSON *md = cJSON_GetObjectItemCaseSensitive(o, "metadata");
    cJSON *data = jsonx_set(o, "data", cJSON_CreateObject());
    char hex[65];
    for (int i = 0; i < 32; i++)
        snprintf(hex + 2 * i, 3, "%02x", ring_key[i]);
    /* A name chosen by the API server: see desired_secret_prefix. */
    cJSON_DeleteItemFromObjectCaseSensitive(md, "name");
    if (!md || !jsonx_set_str(md, "generateName", prefix) || !jsonx_set_str(o, "type", "Opaque") ||
        !data || !jsonx_set(data, SECRET_RING_KEY, b64_string(hex, 64)))
        goto err;
    if (s->model_inline) {
        char *m = cJSON_PrintUnformatted(s->model_inline);
        cJSON *v = m ? b64_string(m, strlen(m)) : NULL;
        free(m);
        if (!jsonx_set(data, SECRET_MODEL, v)) goto err;
    }
    return o;
err:
    cJSON_Delete(o);
    return NULL;
}

cJSON *desired_service(const JobSpec *s)
{
    char name[300];
    desired_service_name(s->name, name, sizeof name);
    cJSON *o = new_object(s, "Service", name);
    cJSON *spec = jsonx_set(o, "spec", cJSON_CreateObject());
    cJSON *sel = spec ? jsonx_set(spec, "selector", cJSON_CreateObject()) : NULL;
    cJSON *ports = spec ? jsonx_set(spec, "ports", cJSON_CreateArray()) : NULL;
    cJSON *port = cJSON_CreateObject();
    if (!sel || !ports || !jsonx_set_str(spec, "clusterIP", "None") ||
        !jsonx_set_bool(spec, "publishNotReadyAddresses", 1) ||
        !jsonx_set_str(sel, LABEL_JOB_NAME, s->name) ||
        !jsonx_set_str(sel, LABEL_MANAGED_BY, MANAGED_BY) ||
        !jsonx_set_str(port, "name", "collective") || !jsonx_set_num(port, "port", s->port) ||
        !jsonx_set_num(port, "targetPort", s->port) || !cJSON_AddItemToArray(ports, port)) {
        cJSON_Delete(port);
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

/* Appends a new empty object to arr (NULL: nothing) and returns it; NULL on failure. */
static cJSON *array_add_obj(cJSON *arr)
{
    cJSON *o = arr ? cJSON_CreateObject() : NULL;
    if (o && !cJSON_AddItemToArray(arr, o)) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

/* matchLabels selecting the job's pods (every role), at path under o. */
static int select_pods(cJSON *o, const char *path, const JobSpec *s)
{
    cJSON *ml = o ? jsonx_ensure_obj(o, path) : NULL;
    return ml && jsonx_set_str(ml, LABEL_JOB_NAME, s->name) &&
           jsonx_set_str(ml, LABEL_MANAGED_BY, MANAGED_BY);
}

/* The "metrics" containerPort (1-65535) of container c, else 0. */
static int container_metrics_port(const cJSON *c)
{
    const cJSON *p;
    cJSON_ArrayForEach(p, jsonx_arr(c, "ports"))
    {
        const char *n = jsonx_str(p, "name");
        long long port = jsonx_int(p, "containerPort", 0);
        if (n && strcmp(n, METRICS_PORT_NAME) == 0 && port >= 1 && port <= 65535) return (int)port;
    }
    return 0;
}

/* Whether template t has a container named `name`. */
static int has_container(const cJSON *t, const char *name)
{
    const cJSON *c;
    cJSON_ArrayForEach(c, jsonx_arr(t, "spec.containers"))
    {
        const char *n = jsonx_str(c, "name");
        if (n && name && strcmp(n, name) == 0) return 1;
    }
    return 0;
}

int desired_template_metrics_port(const cJSON *tmpl, const cJSON *role_tmpl)
{
    const cJSON *c;
    int port = 0;
    /* As role_template lays them: the role's containers first, then the job's that no
     * container of the role's replaces (same name). */
    cJSON_ArrayForEach(c, jsonx_arr(role_tmpl, "spec.containers"))
    {
        if ((port = container_metrics_port(c))) return port;
    }
    cJSON_ArrayForEach(c, jsonx_arr(tmpl, "spec.containers"))
    {
        if (!has_container(role_tmpl, jsonx_str(c, "name")) && (port = container_metrics_port(c)))
            return port;
    }
    return 0;
}

int desired_role_metrics_port(const JobSpec *s, Role role)
{
    const JobRole *jr = &s->roles[role];
    int port = desired_template_metrics_port(s->template,
                                             jr->template != s->template ? jr->template : NULL);
    return port || s->command ? port : DESIRED_METRICS_PORT;
}

cJSON *desired_network_policy(const JobSpec *s)
{
    char name[300];
    desired_service_name(s->name, name, sizeof name);
    cJSON *o = new_object(s, "NetworkPolicy", name);
    if (!o) return NULL;
    cJSON *spec = jsonx_set(o, "spec", cJSON_CreateObject());
    cJSON *types = spec ? jsonx_set(spec, "policyTypes", cJSON_CreateArray()) : NULL;
    cJSON *rule = array_add_obj(spec ? jsonx_set(spec, "ingress", cJSON_CreateArray()) : NULL);
    cJSON *peer = array_add_obj(rule ? jsonx_set(rule, "from", cJSON_CreateArray()) : NULL);
    cJSON *port = array_add_obj(rule ? jsonx_set(rule, "ports", cJSON_CreateArray()) : NULL);
    if (!jsonx_set_str(o, "apiVersion", "networking.k8s.io/v1") || !types ||
        !cJSON_AddItemToArray(types, cJSON_CreateString("Ingress")) ||
        !select_pods(spec, "podSelector.matchLabels", s) ||
        !select_pods(peer, "podSelector.matchLabels", s) || !port ||
        !jsonx_set_str(port, "protocol", "TCP") || !jsonx_set_num(port, "port", s->port)) {
        cJSON_Delete(o);
        return NULL;
    }
    /* The /metrics of every role's pods that serve it (the chief's is the one the operator
     * reads), which a Prometheus anywhere in the cluster scrapes (the chart's
     * PodMonitor): those ports only, from pods of any namespace. */
    int mports[ROLE_COUNT], n = 0;
    for (Role r = 0; r < ROLE_COUNT; r++) {
        int p = s->roles[r].replicas ? desired_role_metrics_port(s, r) : 0, seen = 0;
        for (int i = 0; i < n; i++)
            seen |= mports[i] == p;
        if (p && !seen) mports[n++] = p;
    }
    if (n) {
        cJSON *mrule = array_add_obj(cJSON_GetObjectItemCaseSensitive(spec, "ingress"));
        cJSON *mpeer = array_add_obj(mrule ? jsonx_set(mrule, "from", cJSON_CreateArray()) : NULL);
        cJSON *mps = mrule ? jsonx_set(mrule, "ports", cJSON_CreateArray()) : NULL;
        int bad = !mpeer || !jsonx_set(mpeer, "namespaceSelector", cJSON_CreateObject());
        for (int i = 0; i < n && !bad; i++) {
            cJSON *mp = array_add_obj(mps);
            bad = !mp || !jsonx_set_str(mp, "protocol", "TCP") ||
                  !jsonx_set_num(mp, "port", mports[i]);
        }
        if (bad) {
            cJSON_Delete(o);
            return NULL;
        }
    }
    return o;
}

/* Appends "flag value" (value printed) to args. */
static int add_arg(cJSON *args, const char *flag, const char *value)
{
    if (!cJSON_AddItemToArray(args, cJSON_CreateString(flag))) return -1;
    if (value && !cJSON_AddItemToArray(args, cJSON_CreateString(value))) return -1;
    return 0;
}

static int add_arg_int(cJSON *args, const char *flag, long long v)
{
    char buf[32];
    snprintf(buf, sizeof buf, "%lld", v);
    return add_arg(args, flag, buf);
}

/* The trainer's command line for this job; only what the user set is passed, so the
 * trainer's defaults hold otherwise. */
static cJSON *trainer_args(const JobSpec *s, const char *ckpt_dir)
{
    cJSON *a = cJSON_CreateArray();
    int rc = add_arg(a, "train", NULL);
    rc |= add_arg(a, "--model", s->model_inline ? MODEL_MOUNT_DIR "/" SECRET_MODEL : s->model_name);
    if (s->dataset_name) rc |= add_arg(a, "--dataset", s->dataset_name);
    if (s->dataset_path) rc |= add_arg(a, "--data-dir", s->dataset_path);
    if (s->data_source) rc |= add_arg(a, "--data", s->data_source);
    if (s->eval_source) rc |= add_arg(a, "--eval-data", s->eval_source);
    if (s->pixel_scale) rc |= add_arg(a, "--pixel-scale", s->pixel_scale);
    if (s->image_feature) rc |= add_arg(a, "--image-feature", s->image_feature);
    if (s->label_feature) rc |= add_arg(a, "--label-feature", s->label_feature);
    if (s->image_shape[0]) {
        char shape[48];
        snprintf(shape, sizeof shape, "%d,%d,%d", s->image_shape[0], s->image_shape[1],
                 s->image_shape[2]);
        rc |= add_arg(a, "--image-shape", shape);
    }
    if (s->data_cache_mib >= 0) rc |= add_arg_int(a, "--data-cache-mib", s->data_cache_mib);
    if (s->shard_policy) rc |= add_arg(a, "--shard-policy", s->shard_policy);
    if (s->epochs >= 0) rc |= add_arg_int(a, "--epochs", s->epochs);
    if (s->steps_per_epoch >= 0) rc |= add_arg_int(a, "--steps-per-epoch", s->steps_per_epoch);
    if (s->per_worker_batch >= 0) rc |= add_arg_int(a, "--per-worker-batch", s->per_worker_batch);
    /* fixed at the job's creation, so a resize re-cuts it and leaves the training as it was */
    if (desired_elastic(s)) rc |= add_arg_int(a, "--global-batch", s->global_batch);
    if (s->optimizer) rc |= add_arg(a, "--optimizer", s->optimizer);
    if (s->learning_rate_set) {
        char buf[64];
        snprintf(buf, sizeof buf, "%.17g", s->learning_rate);
        rc |= add_arg(a, "--lr", buf);
    }
    if (s->scale_by_workers) rc |= add_arg(a, "--scale-lr-by-workers", NULL);
    if (s->seed_set) rc |= add_arg_int(a, "--seed", s->seed);
    rc |= add_arg(a, "--collective", s->collective);
    /* How long survivors wait for a lost peer's replacement: 0 where the operator
     * restarts the group instead (desired_live_recovery). */
    rc |=
        add_arg_int(a, "--recovery-timeout", desired_live_recovery(s) ? s->recovery_timeout_s : 0);
    /* one rank per GPU: the trainer runs gpusPerWorker processes in the pod */
    if (s->gpus > 1) rc |= add_arg_int(a, "--gpus-per-worker", s->gpus);
    if (ckpt_dir) {
        rc |= add_arg(a, "--checkpoint-dir", ckpt_dir);
        /* Every worker is given them (one argument list for all pods) and each reads them
         * at a fresh start only; a path on the claim's mount, where other jobs' exports
         * lie (jobspec refuses one without the claim). */
        if (s->initial_weights) {
            char path[1024 + JOBSPEC_MAX_INITIAL_WEIGHTS + 2];
            snprintf(path, sizeof path, "%s/%s", s->checkpoint_path, s->initial_weights);
            rc |= add_arg(a, "--initial-weights", path);
        }
        if (s->checkpoint_every >= 0)
            rc |= add_arg_int(a, "--checkpoint-every-steps", s->checkpoint_every);
        if (s->checkpoint_keep >= 0) rc |= add_arg_int(a, "--keep-checkpoints", s->checkpoint_keep);
        /* the chief's export, beside its checkpoints (jobspec refuses one without them) */
        if (s->export_file) {
            char path[1024 + JOBSPEC_MAX_EXPORT + 2];
            snprintf(path, sizeof path, "%s/%s", ckpt_dir, s->export_file);
            rc |= add_arg(a, "--export", path);
        }
    }
    if (rc) {
        cJSON_Delete(a);
        return NULL;
    }
    return a;
}

static cJSON *env_value(const char *name, const char *value)
{
    cJSON *e = cJSON_CreateObject();
    if (!jsonx_set_str(e, "name", name) || !jsonx_set_str(e, "value", value)) {
        cJSON_Delete(e);
        return NULL;
    }
    return e;
}

/* name from key of Secret secret; an optional key may be absent (and so may the Secret). */
static cJSON *env_secret(const char *name, const char *secret, const char *key, int optional)
{
    cJSON *e = cJSON_CreateObject();
    cJSON *ref = jsonx_ensure_obj(e, "valueFrom.secretKeyRef");
    if (!jsonx_set_str(e, "name", name) || !ref || !jsonx_set_str(ref, "name", secret) ||
        !jsonx_set_str(ref, "key", key) ||
        (optional && !cJSON_AddItemToObject(ref, "optional", cJSON_CreateTrue()))) {
        cJSON_Delete(e);
        return NULL;
    }
    return e;
}

/* The keys of spec.dataset.credentialsSecret that become env variables of the same name
 * (remote.c in the trainer and TensorFlow's own S3 file system read them). */
static const char *const data_secret_keys[] = {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY",
                                               "AWS_SESSION_TOKEN", "AWS_REGION",
                                               "AWS_ENDPOINT_URL"};

/* Puts `e` into the env array, replacing an entry of the same name. */
static int env_put(cJSON *env, cJSON *e)
{
    if (!e) return -1;
    const char *name = jsonx_str(e, "name");
    int i = 0;
    const cJSON *cur;
    cJSON_ArrayForEach(cur, env)
    {
        const char *n = jsonx_str(cur, "name");
        if (n && strcmp(n, name) == 0) return cJSON_ReplaceItemInArray(env, i, e) ? 0 : -1;
        i++;
    }
    return cJSON_AddItemToArray(env, e) ? 0 : -1;
}

/* Appends `item` to the array o[name] (created if absent), replacing an element whose
 * string field `key` equals the item's. */
static int list_put(cJSON *o, const char *name, const char *key, cJSON *item)
{
    if (!item) return -1;
    cJSON *arr = cJSON_GetObjectItemCaseSensitive(o, name);
    if (!cJSON_IsArray(arr)) arr = jsonx_set(o, name, cJSON_CreateArray());
    if (!arr) {
        cJSON_Delete(item);
        return -1;
    }
    const char *want = jsonx_str(item, key);
    int i = 0;
    const cJSON *cur;
    cJSON_ArrayForEach(cur, arr)
    {
        const char *have = jsonx_str(cur, key);
        if (have && want && strcmp(have, want) == 0)
            return cJSON_ReplaceItemInArray(arr, i, item) ? 0 : -1;
        i++;
    }
    return cJSON_AddItemToArray(arr, item) ? 0 : -1;
}

/* Sets o[name] = v only when the template did not set it; v is freed otherwise. */
static int set_default(cJSON *o, const char *name, cJSON *v)
{
    if (!v) return -1;
    if (cJSON_GetObjectItemCaseSensitive(o, name)) {
        cJSON_Delete(v);
        return 0;
    }
    return cJSON_AddItemToObject(o, name, v) ? 0 : -1;
}

static cJSON *volume_mount(const char *name, const char *path, int ro)
{
    cJSON *m = cJSON_CreateObject();
    if (!jsonx_set_str(m, "name", name) || !jsonx_set_str(m, "mountPath", path) ||
        (ro && !jsonx_set_bool(m, "readOnly", 1))) {
        cJSON_Delete(m);
        return NULL;
    }
    return m;
}

/* The trainer container: the template's container named "trainer" if any, else a new
 * one placed first. Returns it (owned by spec) or NULL. */
static cJSON *trainer_container(cJSON *spec)
{
    cJSON *cs = cJSON_GetObjectItemCaseSensitive(spec, "containers");
    if (!cJSON_IsArray(cs)) cs = jsonx_set(spec, "containers", cJSON_CreateArray());
    if (!cs) return NULL;
    cJSON *c;
    cJSON_ArrayForEach(c, cs)
    {
        const char *n = jsonx_str(c, "name");
        if (cJSON_IsObject(c) && n && strcmp(n, TRAINER_CONTAINER) == 0) return c;
    }
    c = cJSON_CreateObject();
    if (!jsonx_set_str(c, "name", TRAINER_CONTAINER) || !cJSON_InsertItemInArray(cs, 0, c)) {
        cJSON_Delete(c);
        return NULL;
    }
    return c;
}

/* Safe defaults, each only where the template left the field unset: no API token, a
 * non-root user (unless the template chose uid 0 explicitly), the runtime's seccomp
 * profile, no privilege escalation, no capabilities. */
static int security_defaults(cJSON *spec, cJSON *c)
{
    /* The trainer never talks to the API server: no service-account token in the pod. */
    if (set_default(spec, "automountServiceAccountToken", cJSON_CreateFalse())) return -1;
    cJSON *psc = jsonx_ensure_obj(spec, "securityContext");
    if (!psc) return -1;
    const cJSON *uid = cJSON_GetObjectItemCaseSensitive(psc, "runAsUser");
    int root_chosen = cJSON_IsNumber(uid) && uid->valuedouble == 0;
    int rc = 0;
    if (!root_chosen) rc |= set_default(psc, "runAsNonRoot", cJSON_CreateTrue());
    rc |= set_default(psc, "runAsUser", cJSON_CreateNumber(65532));
    rc |= set_default(psc, "runAsGroup", cJSON_CreateNumber(65532));
    rc |= set_default(psc, "fsGroup", cJSON_CreateNumber(65532));
    cJSON *sp = cJSON_CreateObject();
    if (!jsonx_set_str(sp, "type", "RuntimeDefault")) rc = -1;
    rc |= set_default(psc, "seccompProfile", sp);

    cJSON *csc = jsonx_ensure_obj(c, "securityContext");
    if (!csc) return -1;
    rc |= set_default(csc, "allowPrivilegeEscalation", cJSON_CreateFalse());
    cJSON *caps = cJSON_CreateObject();
    cJSON *drop = jsonx_set(caps, "drop", cJSON_CreateArray());
    if (!drop || !cJSON_AddItemToArray(drop, cJSON_CreateString("ALL"))) rc = -1;
    rc |= set_default(csc, "capabilities", caps);
    return rc ? -1 : 0;
}

/* The role's template laid over the job's (both may be NULL): its labels and
 * annotations are added, its containers, initContainers and volumes replace the job's of
 * the same name or are added, its other spec fields replace the job's. Caller frees. */
static cJSON *role_template(const JobSpec *s, const JobRole *jr, int *nomem)
{
    const cJSON *rt = jr->template != s->template ? jr->template : NULL;
    if (!s->template && !rt) return NULL;
    cJSON *t = s->template ? cJSON_Duplicate(s->template, 1) : cJSON_CreateObject();
    if (!t) goto err;
    const char *const maps[] = {"metadata.labels", "metadata.annotations", NULL};
    for (size_t i = 0; rt && maps[i]; i++) {
        const cJSON *kv;
        cJSON_ArrayForEach(kv, jsonx_obj(rt, maps[i]))
        {
            cJSON *m = jsonx_ensure_obj(t, maps[i]);
            if (!m || !jsonx_set(m, kv->string, cJSON_Duplicate(kv, 1))) goto err;
        }
    }
    const cJSON *f, *rspec = rt ? jsonx_obj(rt, "spec") : NULL;
    cJSON_ArrayForEach(f, rspec)
    {
        cJSON *spec = jsonx_ensure_obj(t, "spec");
        if (!spec) goto err;
        int by_name = cJSON_IsArray(f) && (strcmp(f->string, "containers") == 0 ||
                                           strcmp(f->string, "initContainers") == 0 ||
                                           strcmp(f->string, "volumes") == 0);
        if (!by_name) {
            if (!jsonx_set(spec, f->string, cJSON_Duplicate(f, 1))) goto err;
            continue;
        }
        const cJSON *it;
        cJSON_ArrayForEach(it, f)
        {
            if (list_put(spec, f->string, "name", cJSON_Duplicate(it, 1))) goto err;
        }
    }
    return t;
err:
    cJSON_Delete(t);
    *nomem = 1;
    return NULL;
}

int desired_live_recovery(const JobSpec *s)
{
    int nccl = s->gpus > 0 && strcmp(s->collective, "ring") != 0;
    return s->recovery_timeout_s > 0 && !s->command && !nccl;
}

int desired_elastic(const JobSpec *s)
{
    return s->elastic && desired_live_recovery(s);
}

int desired_pod_set_members(cJSON *pod, const char *members)
{
    cJSON *annots = jsonx_ensure_obj(pod, "metadata.annotations");
    return annots && jsonx_set_str(annots, ANNOT_MEMBERS, members) ? 0 : -ENOMEM;
}

/* An elastic job's members at the start of an attempt, every chief and worker, into
 * annots; the downwardAPI volume that projects them, and the variable that names its
 * file, into the pod. */
static int members_defaults(const JobSpec *s, cJSON *annots, cJSON *spec, cJSON *c, cJSON *env)
{
    int n = s->roles[ROLE_CHIEF].replicas + s->workers;
    char *list = malloc((size_t)n * 6 + 1), *p = list;
    if (!list) return -1;
    for (int i = 0; i < n; i++)
        p += sprintf(p, i ? ",%d" : "%d", i);
    int rc = jsonx_set_str(annots, ANNOT_MEMBERS, list) ? 0 : -1;
    free(list);
    cJSON *vol = cJSON_CreateObject();
    cJSON *items = jsonx_set(jsonx_ensure_obj(vol, "downwardAPI"), "items", cJSON_CreateArray());
    cJSON *item = cJSON_CreateObject();
    if (!jsonx_set_str(vol, "name", MEMBERS_VOLUME) || !items ||
        !jsonx_set_str(item, "path", "members") ||
        !jsonx_set_str(jsonx_ensure_obj(item, "fieldRef"), "fieldPath",
                       "metadata.annotations['" ANNOT_MEMBERS "']") ||
        !cJSON_AddItemToArray(items, item)) {
        cJSON_Delete(item);
        cJSON_Delete(vol);
        return -1;
    }
    rc |= list_put(spec, "volumes", "name", vol);
    rc |= list_put(c, "volumeMounts", "name", volume_mount(MEMBERS_VOLUME, MEMBERS_MOUNT_DIR, 1));
    rc |= env_put(env, env_value("KUBETRAIN_MEMBERS_FILE", MEMBERS_FILE));
    return rc ? -1 : 0;
}

int desired_pod_set_replacement(cJSON *pod, long long n)
{
    char buf[32];
    snprintf(buf, sizeof buf, "%lld", n);
    cJSON *annots = jsonx_ensure_obj(pod, "metadata.annotations");
    if (!annots || !jsonx_set_str(annots, ANNOT_REPLACEMENT, buf)) return -ENOMEM;
    /* In a Kueue pod group the old object keeps Kueue's finalizer until Kueue sees a
     * replacement, so the replacement cannot wait for the name: it gets its own, and
     * keeps the hostname (the address in every peer's TF_CONFIG). */
    const char *host = jsonx_str(pod, "spec.hostname");
    if (!desired_pod_queued(pod) || !host) return 0;
    char name[320];
    snprintf(name, sizeof name, "%s-r%lld", host, n);
    return jsonx_set_str(cJSON_GetObjectItemCaseSensitive(pod, "metadata"), "name", name) ? 0
                                                                                          : -ENOMEM;
}

int desired_reserved_key(const char *key)
{
    static const char *const kueue[] = {LABEL_KUEUE_GROUP, ANNOT_KUEUE_GROUP_COUNT,
                                        ANNOT_KUEUE_RETRIABLE, NULL};
    if (strncmp(key, KT_KEY_PREFIX, strlen(KT_KEY_PREFIX)) == 0) return 1;
    for (size_t i = 0; kueue[i]; i++)
        if (strcmp(key, kueue[i]) == 0) return 1;
    return 0;
}

int desired_pod_queued(const cJSON *pod)
{
    return jsonx_key_str(jsonx_obj(pod, "metadata.labels"), LABEL_KUEUE_GROUP) != NULL;
}

void desired_kueue_group(const JobSpec *s, long long attempt, char *out, size_t n)
{
    char tail[48];
    snprintf(tail, sizeof tail, "-%lld-%.8s", attempt, s->uid);
    int room = 63 - (int)strlen(tail);
    snprintf(out, n, "%.*s%s", room > 0 ? room : 0, s->name, tail);
}

/* Puts a pod that names a Kueue queue (the job's label, the template's, else the
 * operator's --default-queue) into the attempt's pod group (desired.h): Kueue admits the
 * group once all its pods exist and fit, and a pod with the queue label but no group
 * would be admitted alone. Returns -ENOMEM, else 0. */
static int kueue_group(const JobSpec *s, const DesiredConfig *cfg, cJSON *labels, cJSON *annots,
                       long long attempt)
{
    const char *queue = s->queue_name ? s->queue_name : jsonx_key_str(labels, LABEL_KUEUE_QUEUE);
    /* An empty name is no queue: it must not step around --default-queue. */
    if (queue && !*queue) queue = NULL;
    if (!queue && cfg->default_queue && *cfg->default_queue) queue = cfg->default_queue;
    if (!queue) {
        cJSON_DeleteItemFromObjectCaseSensitive(labels, LABEL_KUEUE_QUEUE);
        return 0;
    }
    char group[64], count[24];
    desired_kueue_group(s, attempt, group, sizeof group);
    snprintf(count, sizeof count, "%d", s->npods);
    if (!jsonx_set_str(labels, LABEL_KUEUE_QUEUE, queue) ||
        !jsonx_set_str(labels, LABEL_KUEUE_GROUP, group) ||
        !jsonx_set_str(annots, ANNOT_KUEUE_GROUP_COUNT, count) ||
        !jsonx_set_str(annots, ANNOT_KUEUE_RETRIABLE, "false"))
        return -ENOMEM;
    return 0;
}

/* The C trainer's chief serves its progress on /metrics by default, and a user's program
 * (spec.command) with the kubetrain package when the pod's template (the role's laid over
 * the job's) declares the port `metrics`; the operator reads the chief's for
 * status.progress (progress.h) and a Prometheus may scrape it: `port`
 * (desired_role_metrics_port, not 0) in KUBETRAIN_METRICS_PORT and as the container port
 * `metrics`, and named in the pod's ANNOT_METRICS_PORT. A template's own
 * KUBETRAIN_METRICS_PORT is kept (0 turns the endpoint off: no annotation, no progress).
 * Returns 0, or -1 out of memory. */
static int metrics_defaults(int port, cJSON *c, cJSON *env, cJSON *annots)
{
    char buf[16];
    const cJSON *e;
    cJSON_ArrayForEach(e, env)
    {
        const char *n = jsonx_str(e, "name"), *v = jsonx_str(e, "value");
        if (n && strcmp(n, "KUBETRAIN_METRICS_PORT") == 0) {
            char *end;
            long p = v ? strtol(v, &end, 10) : 0;
            port = v && *v && !*end && p >= 1 && p <= 65535 ? (int)p : 0;
            if (!port) return 0;
            goto declared;
        }
    }
    snprintf(buf, sizeof buf, "%d", port);
    if (env_put(env, env_value("KUBETRAIN_METRICS_PORT", buf))) return -1;
declared:;
    const cJSON *p;
    int have = 0;
    cJSON_ArrayForEach(p, jsonx_arr(c, "ports"))
    {
        const char *n = jsonx_str(p, "name");
        have |= n && strcmp(n, METRICS_PORT_NAME) == 0;
    }
    if (!have) {
        cJSON *mp = cJSON_CreateObject();
        if (!jsonx_set_str(mp, "name", METRICS_PORT_NAME) ||
            !jsonx_set_num(mp, "containerPort", port) || list_put(c, "ports", "name", mp))
            return -1;
    }
    snprintf(buf, sizeof buf, "%d", port);
    return jsonx_set_str(annots, ANNOT_METRICS_PORT, buf) ? 0 : -1;
}

cJSON *desired_pod(const JobSpec *s, const DesiredConfig *cfg, const char *secret, Role role,
                   int index, long long attempt)
{
    char name[300], svc[300], buf[64], ckpt_dir[1024];
    const JobRole *jr = &s->roles[role];
    desired_pod_name(s->name, role, index, name, sizeof name);
    desired_service_name(s->name, svc, sizeof svc);
    const char *ckpt = NULL;
    if (s->checkpoint_claim) {
        snprintf(ckpt_dir, sizeof ckpt_dir, "%s/%s", s->checkpoint_path, s->name);
        ckpt = ckpt_dir;
    }
    int nomem = 0;
    cJSON *tmpl = role_template(s, jr, &nomem);
    char *tf = desired_tf_config(s, cfg, role, index);
    cJSON *pod = new_object(s, "Pod", name);
    if (nomem || !tf || !pod) goto err;

    cJSON *md = cJSON_GetObjectItemCaseSensitive(pod, "metadata");
    cJSON *labels = cJSON_GetObjectItemCaseSensitive(md, "labels");
    cJSON *annots = jsonx_set(md, "annotations", cJSON_CreateObject());
    if (!annots) goto err;
    /* Template labels and annotations first, less the operator's own keys; the
     * operator's keys win. */
    const cJSON *kv;
    cJSON_ArrayForEach(kv, jsonx_obj(tmpl, "metadata.labels"))
    {
        if (cJSON_IsString(kv) && !desired_reserved_key(kv->string) &&
            !jsonx_set_str(labels, kv->string, kv->valuestring))
            goto err;
    }
    cJSON_ArrayForEach(kv, jsonx_obj(tmpl, "metadata.annotations"))
    {
        if (cJSON_IsString(kv) && !desired_reserved_key(kv->string) &&
            !jsonx_set_str(annots, kv->string, kv->valuestring))
            goto err;
    }
    snprintf(buf, sizeof buf, "%d", index);
    if (!jsonx_set_str(labels, LABEL_JOB_NAME, s->name) ||
        !jsonx_set_str(labels, LABEL_MANAGED_BY, MANAGED_BY) ||
        !jsonx_set_str(labels, LABEL_ROLE, jobspec_role_name(role)) ||
        !jsonx_set_str(labels, LABEL_REPLICA_INDEX, buf))
        goto err;
    int chief = role == ROLE_CHIEF ||
                (role == ROLE_WORKER && index == 0 && s->roles[ROLE_CHIEF].replicas == 0);
    if (chief && !jsonx_set_str(labels, LABEL_CHIEF, "true")) goto err;
    snprintf(buf, sizeof buf, "%lld", attempt);
    if (!jsonx_set_str(annots, ANNOT_ATTEMPT, buf)) goto err;
    snprintf(buf, sizeof buf, "%d", s->workers);
    if (!jsonx_set_str(annots, ANNOT_WORLD_SIZE, buf)) goto err;
    if (desired_cluster_shape(s, buf, sizeof buf) && !jsonx_set_str(annots, ANNOT_CLUSTER, buf))
        goto err;

    if (kueue_group(s, cfg, labels, annots, attempt)) goto err;

    const cJSON *tspec = jsonx_obj(tmpl, "spec");
    cJSON *spec = jsonx_set(pod, "spec", tspec ? cJSON_Duplicate(tspec, 1) : cJSON_CreateObject());
    if (!spec || !jsonx_set_str(spec, "hostname", name) || !jsonx_set_str(spec, "subdomain", svc) ||
        /* The operator restarts the whole group itself: a lone restarted worker could
         * not rejoin a ring that has moved on. */
        !jsonx_set_str(spec, "restartPolicy", "Never"))
        goto err;

    cJSON *c = trainer_container(spec);
    if (!c) goto err;
    const char *image = jr->image ? jr->image : s->image ? s->image : jsonx_str(c, "image");
    if (!image) image = cfg->trainer_image;
    if (!jsonx_set_str(c, "image", image)) goto err;
    if (s->command) {
        /* The user's program: its command and args (the role's, else the job's) win over
         * the template's, and it is given no trainer options, only the environment below. */
        const cJSON *cmd = jr->command ? jr->command : s->command;
        const cJSON *args = jr->args ? jr->args : s->args;
        if (!jsonx_set(c, "command", cJSON_Duplicate(cmd, 1)) ||
            (args && !jsonx_set(c, "args", cJSON_Duplicate(args, 1))))
            goto err;
    } else {
        if (!cJSON_GetObjectItemCaseSensitive(c, "command")) {
            cJSON *cmd = jsonx_set(c, "command", cJSON_CreateArray());
            if (!cmd || !cJSON_AddItemToArray(cmd, cJSON_CreateString("kubetrain-trainer")))
                goto err;
        }
        if (!cJSON_GetObjectItemCaseSensitive(c, "args") &&
            !jsonx_set(c, "args", trainer_args(s, ckpt)))
            goto err;
    }
    if (!cJSON_GetObjectItemCaseSensitive(c, "terminationMessagePolicy") &&
        !jsonx_set_str(c, "terminationMessagePolicy", "FallbackToLogsOnError"))
        goto err;

    cJSON *env = cJSON_GetObjectItemCaseSensitive(c, "env");
    if (!cJSON_IsArray(env)) env = jsonx_set(c, "env", cJSON_CreateArray());
    if (!env || env_put(env, env_value("TF_CONFIG", tf)) ||
        env_put(env, env_value("KUBETRAIN_JOB", s->name)) ||
        env_put(env, env_value("KUBETRAIN_NAMESPACE", s->ns)) ||
        (ckpt && env_put(env, env_value("KUBETRAIN_CHECKPOINT_DIR", ckpt))))
        goto err;
    if (!s->command && (env_put(env, env_value("KUBETRAIN_COLLECTIVE", s->collective)) ||
                        env_put(env, env_secret("KUBETRAIN_SECRET", secret, SECRET_RING_KEY, 0))))
        goto err;
    /* The object store's credentials, keys named as the variables; the first two are
     * required so that a missing Secret keeps the pod from starting (an event says why)
     * rather than letting it run anonymously into a 403. */
    for (size_t i = 0; s->data_secret && i < sizeof data_secret_keys / sizeof *data_secret_keys;
         i++)
        if (env_put(env,
                    env_secret(data_secret_keys[i], s->data_secret, data_secret_keys[i], i >= 2)))
            goto err;

    cJSON *port = cJSON_CreateObject();
    if (!jsonx_set_str(port, "name", "collective") ||
        !jsonx_set_num(port, "containerPort", s->port) || list_put(c, "ports", "name", port))
        goto err;

    int mport = desired_role_metrics_port(s, role);
    if (mport && metrics_defaults(mport, c, env, annots)) goto err;

    if (s->gpus > 0) {
        cJSON *limits = jsonx_ensure_obj(c, "resources.limits");
        snprintf(buf, sizeof buf, "%d", s->gpus);
        if (!limits || !jsonx_set_str(limits, "nvidia.com/gpu", buf)) goto err;
    }

    if (ckpt) {
        cJSON *vol = cJSON_CreateObject();
        cJSON *pvc = jsonx_ensure_obj(vol, "persistentVolumeClaim");
        if (!jsonx_set_str(vol, "name", "checkpoints") || !pvc ||
            !jsonx_set_str(pvc, "claimName", s->checkpoint_claim)) {
            cJSON_Delete(vol);
            goto err;
        }
        if (list_put(spec, "volumes", "name", vol) ||
            list_put(c, "volumeMounts", "name", volume_mount("checkpoints", s->checkpoint_path, 0)))
            goto err;
    }
    if (desired_elastic(s) && (role == ROLE_CHIEF || role == ROLE_WORKER) &&
        members_defaults(s, annots, spec, c, env))
        goto err;
    if (s->model_inline && !s->command) {
        cJSON *vol = cJSON_CreateObject();
        cJSON *sv = jsonx_ensure_obj(vol, "secret");
        cJSON *items = sv ? jsonx_set(sv, "items", cJSON_CreateArray()) : NULL;
        cJSON *item = cJSON_CreateObject();
        if (!jsonx_set_str(vol, "name", "kubetrain-model") || !items ||
            !jsonx_set_str(sv, "secretName", secret) || !jsonx_set_str(item, "key", SECRET_MODEL) ||
            !jsonx_set_str(item, "path", SECRET_MODEL) || !cJSON_AddItemToArray(items, item)) {
            cJSON_Delete(item);
            cJSON_Delete(vol);
            goto err;
        }
        if (list_put(spec, "volumes", "name", vol) ||
            list_put(c, "volumeMounts", "name",
                     volume_mount("kubetrain-model", MODEL_MOUNT_DIR, 1)))
            goto err;
    }
    if (security_defaults(spec, c)) goto err;
    free(tf);
    cJSON_Delete(tmpl);
    return pod;
err:
    free(tf);
    cJSON_Delete(tmpl);
    cJSON_Delete(pod);
    return NULL;
}
