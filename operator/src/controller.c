/* controller — informers -> work queue -> reconcile -> API actions. */
#include "controller.h"

#include "clock.h"
#include "informer.h"
#include "jsonx.h"
#include "metrics.h"
#include "olog.h"
#include "workqueue.h"

#include <errno.h>
#include <openssl/rand.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_WORKER_THREADS 64
#define MAX_POD_PARALLELISM 64
/* How long what discovery said about PodGroups holds before it is asked again: the
 * feature gates change only when the control plane restarts. */
#define GANG_API_RECHECK_S 300.0
/* Jobs that do not parse, remembered until marked Invalid (see Unreadable). */
#define UNREADABLE_MAX 128

/* A TrainingJob the informer skipped because it does not parse: the worker marks it
 * Invalid once per uid and generation. The oldest is forgotten when more come, which at
 * worst marks one again. */
typedef struct Unreadable {
    char key[520], uid[64], generation[24], rv[64], why[64];
    int marked;
} Unreadable;

struct Controller {
    KubeClient *client;
    ControllerConfig cfg;
    char *ns, *identity;
    WorkQueue *queue;
    Informer *jobs, *pods, *services, *netpols; /* never Secrets: see reconcile.h */
    Progress *progress;
    pthread_t threads[MAX_WORKER_THREADS];
    int nthreads;
    /* Whether the cluster serves PodGroups, and when it was learned (clock_mono);
     * shared by the workers. */
    pthread_mutex_t gang_lock;
    GangApi gang_api;
    double gang_checked;
    pthread_mutex_t unreadable_lock;
    Unreadable unreadable[UNREADABLE_MAX];
    size_t unreadable_next; /* the slot a new key takes */
};

/* ------------------------------------------------------------------------------------
 * Event handlers */

static void on_job(void *ctx, const char *type, const cJSON *obj)
{
    Controller *c = ctx;
    char key[512];
    (void)type;
    if (informer_key(obj, key, sizeof key) == 0) wq_add(c->queue, key);
}

/* A job the informer could not parse: remembered, and queued so that a worker marks it
 * Invalid (controller_sync). A DELETED one, or one without a name or uid, is only
 * logged and counted (by the informer). */
static void on_job_skipped(void *ctx, const InformerSkip *s)
{
    Controller *c = ctx;
    if (strcmp(s->event, "DELETED") == 0 || !*s->name || !*s->uid) return;
    char key[520];
    snprintf(key, sizeof key, "%s/%s", s->ns, s->name);
    pthread_mutex_lock(&c->unreadable_lock);
    Unreadable *u = NULL;
    for (size_t i = 0; i < UNREADABLE_MAX && !u; i++)
        if (strcmp(c->unreadable[i].key, key) == 0) u = &c->unreadable[i];
    int again =
        u && u->marked && strcmp(u->uid, s->uid) == 0 && strcmp(u->generation, s->generation) == 0;
    if (!u) {
        u = &c->unreadable[c->unreadable_next];
        c->unreadable_next = (c->unreadable_next + 1) % UNREADABLE_MAX;
    }
    if (!again) {
        snprintf(u->key, sizeof u->key, "%s", key);
        snprintf(u->uid, sizeof u->uid, "%s", s->uid);
        snprintf(u->generation, sizeof u->generation, "%s", s->generation);
        snprintf(u->why, sizeof u->why, "%s", s->why);
        u->marked = 0;
    }
    snprintf(u->rv, sizeof u->rv, "%s", s->resource_version);
    pthread_mutex_unlock(&c->unreadable_lock);
    if (!again) wq_add(c->queue, key);
}

/* Maps an owned object to its job: the controller owner reference of kind
 * TrainingJob, else the job-name label. */
static void on_owned(void *ctx, const char *type, const cJSON *obj)
{
    Controller *c = ctx;
    (void)type;
    const char *ns = jsonx_str(obj, "metadata.namespace");
    const char *job = NULL;
    const cJSON *ref;
    cJSON_ArrayForEach(ref, jsonx_arr(obj, "metadata.ownerReferences"))
    {
        const char *kind = jsonx_str(ref, "kind"), *api = jsonx_str(ref, "apiVersion");
        if (jsonx_bool(ref, "controller", 0) && kind && strcmp(kind, KT_KIND) == 0 && api &&
            strncmp(api, KT_GROUP "/", strlen(KT_GROUP) + 1) == 0)
            job = jsonx_str(ref, "name");
    }
    if (!job) job = jsonx_key_str(jsonx_obj(obj, "metadata.labels"), LABEL_JOB_NAME);
    if (!job || !ns) return;
    char key[512];
    snprintf(key, sizeof key, "%s/%s", ns, job);
    wq_add(c->queue, key);
}

/* Pods also tell the progress scraper the step a chief reached when it exited. */
static void on_pod(void *ctx, const char *type, const cJSON *obj)
{
    Controller *c = ctx;
    on_owned(ctx, type, obj);
    progress_observe_pod(c->progress, obj);
}

/* Keeps only the members of o named in keep (NULL-terminated). */
static void keep_only(cJSON *o, const char *const *keep)
{
    cJSON *it = cJSON_IsObject(o) ? o->child : NULL;
    while (it) {
        cJSON *next = it->next;
        int wanted = 0;
        for (size_t i = 0; keep[i] && !wanted; i++)
            wanted = it->string && strcmp(it->string, keep[i]) == 0;
        if (!wanted) cJSON_Delete(cJSON_DetachItemViaPointer(o, it));
        it = next;
    }
}

static const char *const METADATA_KEPT[] = {"name",
                                            "namespace",
                                            "uid",
                                            "resourceVersion",
                                            "creationTimestamp",
                                            "labels",
                                            "annotations",
                                            "ownerReferences",
                                            "deletionTimestamp",
                                            NULL};

/* Pods as cached: what reconcile reads (metadata with the creation time, which
 * startupDeadlineSeconds counts from, and the phase, reason, conditions and container
 * states of the status, init containers' too) and the IP the progress scraper dials; the
 * spec it never compares. Of a condition, the type, status, reason and message: its
 * times are never read and were a fifth of a Running pod as cached (4 conditions, 250 of
 * 1,270 bytes). */
static void prune_pod(cJSON *pod)
{
    static const char *const top[] = {"metadata", "spec", "status", NULL};
    /* nodeName: named when forcing a deletion; all three: whether a pod waits for a
     * place, and (schedulingGates) whether Kueue has admitted it */
    static const char *const spec[] = {"nodeName", "schedulingGroup", "schedulingGates", NULL};
    static const char *const status[] = {
        "phase", "reason", "conditions", "containerStatuses", "initContainerStatuses",
        "podIP", NULL};
    static const char *const cstatus[] = {"name", "state", NULL};
    static const char *const condition[] = {"type", "status", "reason", "message", NULL};
    keep_only(pod, top);
    keep_only(cJSON_GetObjectItemCaseSensitive(pod, "metadata"), METADATA_KEPT);
    keep_only(cJSON_GetObjectItemCaseSensitive(pod, "spec"), spec);
    cJSON *st = cJSON_GetObjectItemCaseSensitive(pod, "status");
    keep_only(st, status);
    static const char *const lists[] = {"containerStatuses", "initContainerStatuses"};
    for (size_t k = 0; k < sizeof lists / sizeof *lists; k++) {
        cJSON *cs = cJSON_GetObjectItemCaseSensitive(st, lists[k]), *c;
        if (!cJSON_IsArray(cs)) continue;
        cJSON_ArrayForEach(c, cs) keep_only(c, cstatus);
    }
    cJSON *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(st, "conditions"))
        keep_only(c, condition);
}

/* Services and NetworkPolicies matter only as present and owned: no spec. */
static void prune_owned(cJSON *obj)
{
    static const char *const top[] = {"metadata", NULL};
    keep_only(obj, top);
    keep_only(cJSON_GetObjectItemCaseSensitive(obj, "metadata"), METADATA_KEPT);
}

Controller *controller_new(KubeClient *client, const ControllerConfig *cfg, char *err,
                           size_t errlen)
{
    Controller *c = calloc(1, sizeof *c);
    if (!c) goto nomem;
    c->client = client;
    c->cfg = *cfg;
    pthread_mutex_init(&c->gang_lock, NULL);
    pthread_mutex_init(&c->unreadable_lock, NULL);
    c->ns = strdup(cfg->namespace ? cfg->namespace : "");
    c->identity = strdup(cfg->identity ? cfg->identity : "kubetrain-operator");
    if (!c->ns || !c->identity) goto nomem;
    c->cfg.namespace = c->ns;
    c->cfg.identity = c->identity;
    if (c->cfg.workers < 1) c->cfg.workers = 1;
    if (c->cfg.workers > MAX_WORKER_THREADS) c->cfg.workers = MAX_WORKER_THREADS;
    if (c->cfg.pod_parallelism < 1) c->cfg.pod_parallelism = 1;
    if (c->cfg.pod_parallelism > MAX_POD_PARALLELISM) c->cfg.pod_parallelism = MAX_POD_PARALLELISM;
    /* client-go's default controller limiter: 5 ms .. 1000 s per item, 10 qps burst 100. */
    WqOptions wo = {.base_delay = 0.005, .max_delay = 1000, .qps = 10, .burst = 100};
    c->queue = wq_new(&wo);
    InformerOptions jo = {.group_version = KT_API_VERSION,
                          .plural = KT_PLURAL,
                          .ns = c->ns,
                          .handler = on_job,
                          .skipped = on_job_skipped,
                          .ctx = c,
                          .quiet_paths = progress_quiet_paths};
    InformerOptions po = {.group_version = "v1",
                          .ns = c->ns,
                          .label_selector = LABEL_MANAGED_BY "=" MANAGED_BY,
                          .handler = on_owned,
                          .ctx = c};
    c->jobs = informer_new(client, &jo);
    po.plural = "pods";
    po.transform = prune_pod;
    po.handler = on_pod;
    c->pods = informer_new(client, &po);
    po.handler = on_owned;
    po.transform = prune_owned;
    po.plural = "services";
    c->services = informer_new(client, &po);
    po.group_version = "networking.k8s.io/v1";
    po.plural = "networkpolicies";
    c->netpols = informer_new(client, &po);
    if (!c->queue || !c->jobs || !c->pods || !c->services || !c->netpols) goto nomem;
    c->progress = progress_new(client, c->jobs, c->pods, &c->cfg.progress, err, errlen);
    if (!c->progress) {
        controller_free(c);
        return NULL;
    }
    return c;
nomem:
    snprintf(err, errlen, "out of memory creating the controller");
    controller_free(c);
    return NULL;
}

void controller_free(Controller *c)
{
    if (!c) return;
    progress_free(c->progress);
    informer_free(c->jobs);
    informer_free(c->pods);
    informer_free(c->services);
    informer_free(c->netpols);
    wq_free(c->queue);
    pthread_mutex_destroy(&c->gang_lock);
    pthread_mutex_destroy(&c->unreadable_lock);
    free(c->ns);
    free(c->identity);
    free(c);
}

int controller_start_informers(Controller *c)
{
    int rc;
    if ((rc = informer_start(c->jobs)) || (rc = informer_start(c->pods)) ||
        (rc = informer_start(c->services)) || (rc = informer_start(c->netpols)))
        return rc;
    return 0;
}

int controller_synced(Controller *c)
{
    return informer_synced(c->jobs) && informer_synced(c->pods) && informer_synced(c->services) &&
           informer_synced(c->netpols);
}

/* ------------------------------------------------------------------------------------
 * Discovery: does the cluster serve PodGroups? */

/* Asks discovery whether `version` lists podgroups: 1 yes, 0 no (or the group version is
 * not served: 404), -errno with err on any other failure. */
static int gang_api_serves(Controller *c, const char *version, char *err, size_t errlen)
{
    char path[128];
    snprintf(path, sizeof path, "/apis/%s", version);
    KubeResponse r = {0};
    int rc = kclient_request(c->client, "GET", path, NULL, NULL, &r, err, errlen);
    if (rc == 0) {
        const cJSON *res;
        cJSON_ArrayForEach(res, jsonx_arr(r.body, "resources"))
        {
            const char *name = jsonx_str(res, "name");
            if (name && strcmp(name, "podgroups") == 0) rc = 1;
        }
    } else if (rc == -ENOENT) {
        rc = 0;
    }
    kresp_free(&r);
    return rc;
}

/* Which Workload API serves podgroups, asked again after GANG_API_RECHECK_S (or at once
 * after forget): scheduling.k8s.io/v1beta1 (Kubernetes 1.37, where it is beta) is asked
 * first, then v1alpha2 (1.36); each is listed when the API server runs with the feature
 * gates and the group version enabled. A cluster upgraded from 1.36 to 1.37 moves from
 * one to the other at the next look: a running attempt keeps its pods (their group
 * reference is a name), the next attempt's PodGroup is made in the new version. On any
 * failure but 404 the last answer holds; with none yet, returns -errno with err (the key
 * is retried), so that a job never loses its group to a passing error. */
static int gang_api_lookup(Controller *c, GangApi *out, char *err, size_t errlen)
{
    pthread_mutex_lock(&c->gang_lock);
    double now = clock_mono();
    if (c->gang_api != GANG_API_UNKNOWN && now - c->gang_checked < GANG_API_RECHECK_S) {
        *out = c->gang_api;
        pthread_mutex_unlock(&c->gang_lock);
        return 0;
    }
    GangApi found = GANG_API_UNKNOWN;
    int rc = gang_api_serves(c, POD_GROUP_V1BETA1, err, errlen);
    if (rc == 1) {
        found = GANG_API_V1BETA1;
    } else if (rc == 0) {
        rc = gang_api_serves(c, POD_GROUP_V1ALPHA2, err, errlen);
        if (rc >= 0) found = rc == 1 ? GANG_API_V1ALPHA2 : GANG_API_ABSENT;
    }
    if (found != GANG_API_UNKNOWN) {
        if (found != c->gang_api) {
            const char *v = gang_api_version(found);
            if (v)
                olog(OLOG_INFO, NULL,
                     "the cluster serves %s PodGroups: jobs with spec.gangScheduling get one "
                     "per attempt in that version",
                     v);
            else
                olog(OLOG_INFO, NULL,
                     "the cluster serves no PodGroups (neither " POD_GROUP_V1BETA1
                     " nor " POD_GROUP_V1ALPHA2 "): pods are scheduled one by one (feature "
                     "gate GenericWorkload and the group version's runtime-config are off)");
        }
        c->gang_api = found;
        c->gang_checked = now;
        rc = 0;
    } else if (c->gang_api != GANG_API_UNKNOWN) {
        olog(OLOG_WARN, NULL, "discovery of the Workload API failed, keeping the last answer: %s",
             err);
        c->gang_checked = now - GANG_API_RECHECK_S + 10; /* ask again in 10 s */
        rc = 0;
    }
    *out = c->gang_api;
    pthread_mutex_unlock(&c->gang_lock);
    return rc;
}

/* The group version PodGroups are served in now, into out (at least 64 bytes); 0, or
 * -ENOENT when none is (known). */
static int gang_api_now(Controller *c, char *out, size_t n)
{
    pthread_mutex_lock(&c->gang_lock);
    const char *v = gang_api_version(c->gang_api);
    snprintf(out, n, "%s", v ? v : "");
    pthread_mutex_unlock(&c->gang_lock);
    return v ? 0 : -ENOENT;
}

/* Makes the next lookup ask the API server (a PodGroup request got 404). */
static void gang_api_forget(Controller *c)
{
    pthread_mutex_lock(&c->gang_lock);
    c->gang_checked = clock_mono() - GANG_API_RECHECK_S;
    pthread_mutex_unlock(&c->gang_lock);
}

/* ------------------------------------------------------------------------------------
 * Carrying out a plan */

static void post_event(Controller *c, const cJSON *job, const Action *a)
{
    char ts[40], path[512], err[512];
    double now = clock_wall();
    clock_format_rfc3339(now, ts, sizeof ts);
    const char *ns = jsonx_str(job, "metadata.namespace");
    cJSON *ev = cJSON_CreateObject();
    cJSON *md = jsonx_ensure_obj(ev, "metadata");
    cJSON *inv = jsonx_ensure_obj(ev, "involvedObject");
    cJSON *src = jsonx_ensure_obj(ev, "source");
    char gen[300];
    snprintf(gen, sizeof gen, "%s.", a->name);
    if (!md || !inv || !src || !jsonx_set_str(ev, "apiVersion", "v1") ||
        !jsonx_set_str(ev, "kind", "Event") || !jsonx_set_str(md, "generateName", gen) ||
        !jsonx_set_str(md, "namespace", ns) || !jsonx_set_str(inv, "apiVersion", KT_API_VERSION) ||
        !jsonx_set_str(inv, "kind", KT_KIND) || !jsonx_set_str(inv, "name", a->name) ||
        !jsonx_set_str(inv, "namespace", ns) ||
        !jsonx_set_str(inv, "uid", jsonx_str(job, "metadata.uid")) ||
        !jsonx_set_str(ev, "type", a->event_type) || !jsonx_set_str(ev, "reason", a->reason) ||
        !jsonx_set_str(ev, "message", a->message) || !jsonx_set_str(src, "component", MANAGED_BY) ||
        !jsonx_set_str(ev, "firstTimestamp", ts) || !jsonx_set_str(ev, "lastTimestamp", ts) ||
        !jsonx_set_num(ev, "count", 1) || !jsonx_set_str(ev, "reportingComponent", MANAGED_BY) ||
        !jsonx_set_str(ev, "reportingInstance", c->identity)) {
        cJSON_Delete(ev);
        return;
    }
    kpath(path, sizeof path, "v1", ns, "events", NULL, NULL);
    if (kclient_request(c->client, "POST", path, ev, NULL, NULL, err, sizeof err) != 0)
        olog(OLOG_WARN, NULL, "event %s %s not recorded: %s", a->reason, a->name, err);
    cJSON_Delete(ev);
}

/* DeleteOptions that only delete the object we observed (same uid). */
static cJSON *delete_options(const char *uid, const char *propagation)
{
    cJSON *o = cJSON_CreateObject();
    if (!jsonx_set_str(o, "apiVersion", "v1") || !jsonx_set_str(o, "kind", "DeleteOptions")) {
        cJSON_Delete(o);
        return NULL;
    }
    if (uid) {
        cJSON *pre = jsonx_ensure_obj(o, "preconditions");
        if (!pre || !jsonx_set_str(pre, "uid", uid)) {
            cJSON_Delete(o);
            return NULL;
        }
    }
    if (propagation && !jsonx_set_str(o, "propagationPolicy", propagation)) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

static const char *pod_uid(const cJSON *pods, const char *name)
{
    const cJSON *p;
    cJSON_ArrayForEach(p, pods)
    {
        const char *n = jsonx_str(p, "metadata.name");
        if (n && strcmp(n, name) == 0) return jsonx_str(p, "metadata.uid");
    }
    return NULL;
}

/* Whether the PodGroup `pg` is the job's (its controller owner reference has the job's
 * uid); its controller, "Kind/name uid U" or "none", into owner. */
static int pod_group_ours(const cJSON *pg, const char *job_uid, char *owner, size_t n)
{
    const cJSON *ref;
    snprintf(owner, n, "none");
    cJSON_ArrayForEach(ref, jsonx_arr(pg, "metadata.ownerReferences"))
    {
        if (!jsonx_bool(ref, "controller", 0)) continue;
        const char *kind = jsonx_str(ref, "kind"), *name = jsonx_str(ref, "name");
        const char *uid = jsonx_str(ref, "uid");
        snprintf(owner, n, "%.40s/%.100s uid %.64s", kind ? kind : "?", name ? name : "?",
                 uid ? uid : "?");
        return uid && job_uid && strcmp(uid, job_uid) == 0;
    }
    return 0;
}

/* GETs PodGroup `name` (group version `version`) of the job's namespace into *r: 0,
 * -ENOENT or -errno with err. */
static int pod_group_get(Controller *c, const cJSON *job, const char *version, const char *name,
                         KubeResponse *r, char *err, size_t errlen)
{
    char path[1024];
    const char *ns = jsonx_str(job, "metadata.namespace");
    kpath(path, sizeof path, version, ns, "podgroups", name, NULL);
    return kclient_request(c->client, "GET", path, NULL, NULL, r, err, errlen);
}

/* Carries out one action. Returns 0 or -errno with err. `secret` (at least 254 bytes)
 * carries the name the API server gave the Secret this plan created to the plan's
 * status update. */
static int execute(Controller *c, const cJSON *job, const cJSON *pods, const Action *a,
                   const char *key, char *secret, char *err, size_t errlen)
{
    const char *ns = jsonx_str(job, "metadata.namespace");
    char path[1024];
    KubeResponse r = {0};
    int rc = 0;
    switch (a->kind) {
    case ACTION_CREATE_SECRET: {
        kpath(path, sizeof path, "v1", ns, "secrets", NULL, NULL);
        rc = kclient_request(c->client, "POST", path, a->object, NULL, &r, err, errlen);
        const char *name = rc == 0 ? jsonx_str(r.body, "metadata.name") : NULL;
        if (rc == 0 && (!name || strlen(name) > 253)) {
            snprintf(err, errlen, "creating the Secret %s*: the answer has no metadata.name",
                     a->name);
            rc = -EPROTO;
        } else if (rc == 0) {
            snprintf(secret, 254, "%s", name);
            olog(OLOG_INFO, key, "created secrets %s", name);
        } else if (rc == -EEXIST) {
            /* No free generated name: an error like any other, retried; the Secret of
             * that name is not ours. */
            char why[512];
            snprintf(why, sizeof why, "%s", err);
            snprintf(err, errlen,
                     "creating the Secret %s*: the API server found no free generated name "
                     "(%s); retrying with another",
                     a->name, why);
        }
        break;
    }
    case ACTION_CREATE_SERVICE:
    case ACTION_CREATE_POD: {
        const char *plural = a->kind == ACTION_CREATE_POD ? "pods" : "services";
        Informer *inf = a->kind == ACTION_CREATE_POD ? c->pods : c->services;
        kpath(path, sizeof path, "v1", ns, plural, NULL, NULL);
        rc = kclient_request(c->client, "POST", path, a->object, NULL, &r, err, errlen);
        if (rc == 0) {
            informer_store(inf, r.body);
            if (a->kind == ACTION_CREATE_POD) metrics_count_pods(1, 0);
            olog(OLOG_INFO, key, "created %s %s", plural, a->name);
        } else if (rc == -EEXIST) {
            rc = 0; /* created by an earlier pass whose event has not arrived yet */
        }
        break;
    }
    case ACTION_DELETE_POD:
    case ACTION_DELETE_STOPPED_POD:
    case ACTION_FORCE_DELETE_POD: {
        /* A forced deletion (a pod stuck terminating) skips the grace period, as does
         * that of a pod whose trainer has already stopped. */
        const int force = a->kind != ACTION_DELETE_POD;
        kpath(path, sizeof path, "v1", ns, "pods", a->name, NULL);
        cJSON *opts = delete_options(pod_uid(pods, a->name), NULL);
        if (!opts || (force && !jsonx_set_num(opts, "gracePeriodSeconds", 0))) {
            cJSON_Delete(opts);
            snprintf(err, errlen, "deleting pod %s: out of memory", a->name);
            rc = -ENOMEM;
            break;
        }
        rc = kclient_request(c->client, "DELETE", path, opts, NULL, &r, err, errlen);
        cJSON_Delete(opts);
        if (rc == 0) {
            /* No write-through: the pod may be gone already, and its DELETED event may
             * have been handled before this answer; the watch brings the truth. */
            metrics_count_pods(0, 1);
            if (a->kind == ACTION_FORCE_DELETE_POD)
                olog(OLOG_WARN, key, "force-deleted (stuck terminating) pod %s", a->name);
            else
                olog(OLOG_INFO, key, "deleted pod %s%s", a->name,
                     force ? " (its trainer has stopped: no grace period)" : "");
        } else if (rc == -ENOENT) {
            rc = 0;
        }
        break;
    }
    case ACTION_UPDATE_STATUS:
        if (*secret &&
            !jsonx_set_str(jsonx_ensure_obj(a->object, "status"), "secretName", secret)) {
            snprintf(err, errlen, "recording the Secret %s: out of memory", secret);
            rc = -ENOMEM;
            break;
        }
        kpath(path, sizeof path, KT_API_VERSION, ns, KT_PLURAL, a->name, "status");
        rc = kclient_request(c->client, "PUT", path, a->object, NULL, &r, err, errlen);
        if (rc == 0) {
            informer_store(c->jobs, r.body);
            const char *phase = jsonx_str(a->object, "status.phase");
            olog(OLOG_DEBUG, key, "status updated (phase %s)", phase ? phase : "-");
        }
        break;
    case ACTION_DELETE_JOB: {
        kpath(path, sizeof path, KT_API_VERSION, ns, KT_PLURAL, a->name, NULL);
        cJSON *opts = delete_options(jsonx_str(job, "metadata.uid"), "Background");
        rc = kclient_request(c->client, "DELETE", path, opts, NULL, &r, err, errlen);
        cJSON_Delete(opts);
        if (rc == -ENOENT) rc = 0;
        if (rc == 0) olog(OLOG_INFO, key, "deleted the job: ttlSecondsAfterFinished elapsed");
        break;
    }
    case ACTION_CREATE_NETWORK_POLICY:
        kpath(path, sizeof path, "networking.k8s.io/v1", ns, "networkpolicies", NULL, NULL);
        rc = kclient_request(c->client, "POST", path, a->object, NULL, &r, err, errlen);
        if (rc == 0) {
            informer_store(c->netpols, r.body);
            olog(OLOG_INFO, key, "created networkpolicies %s", a->name);
        } else if (rc == -EEXIST) {
            rc = 0;
        }
        break;
    case ACTION_DELETE_NETWORK_POLICY:
        kpath(path, sizeof path, "networking.k8s.io/v1", ns, "networkpolicies", a->name, NULL);
        rc = kclient_request(c->client, "DELETE", path, NULL, NULL, &r, err, errlen);
        if (rc == -ENOENT) rc = 0;
        if (rc == 0) olog(OLOG_INFO, key, "deleted networkpolicies %s", a->name);
        break;
    case ACTION_CREATE_POD_GROUP: {
        /* In the version the plan was made for (the object's apiVersion). */
        const char *version = jsonx_str(a->object, "apiVersion");
        kpath(path, sizeof path, version, ns, "podgroups", NULL, NULL);
        rc = kclient_request(c->client, "POST", path, a->object, NULL, &r, err, errlen);
        if (rc == 0) {
            olog(OLOG_INFO, key, "created podgroups %s (%s)", a->name, version);
        } else if (rc == -EEXIST) {
            /* An earlier pass made it and stopped before the pods; or someone else did at
             * the predictable name (one with a huge minCount would hold the pods for
             * ever): only the job's own is taken. -EEXIST: controller_sync has reconcile
             * say so. */
            char owner[256];
            kresp_free(&r);
            rc = pod_group_get(c, job, version, a->name, &r, err, errlen);
            if (rc == -ENOENT) {
                snprintf(err, errlen, "PodGroup %s: 409 on create, then gone; retrying", a->name);
                rc = -EAGAIN;
            } else if (rc == 0 && !pod_group_ours(r.body, jsonx_str(job, "metadata.uid"), owner,
                                                  sizeof owner)) {
                snprintf(err, errlen,
                         "PodGroup %s already exists and is not this job's (controller: %s): "
                         "the pods wait until it is deleted",
                         a->name, owner);
                rc = -EEXIST;
            }
        } else if (rc == -ENOENT) {
            /* The API went away (the control plane restarted without the gates): the
             * retry finds out and makes the pods without a group. */
            gang_api_forget(c);
        }
        break;
    }
    case ACTION_DELETE_POD_GROUP: {
        /* Only the job's own, and that very object (a uid precondition): the name is
         * predictable, and PodGroups are not watched. In the version served now: after
         * an upgrade from 1.36 the old attempt's v1alpha2 object is not served any more
         * (docs/design.md, "Gang scheduling"). */
        char owner[256], uid[128], version[64];
        if (gang_api_now(c, version, sizeof version)) break;
        rc = pod_group_get(c, job, version, a->name, &r, err, errlen);
        if (rc == -ENOENT) {
            rc = 0;
            break;
        }
        if (rc) break;
        if (!pod_group_ours(r.body, jsonx_str(job, "metadata.uid"), owner, sizeof owner)) {
            olog(OLOG_WARN, key, "podgroups %s is not this job's (controller: %s): left alone",
                 a->name, owner);
            break;
        }
        snprintf(uid, sizeof uid, "%s",
                 jsonx_str(r.body, "metadata.uid") ? jsonx_str(r.body, "metadata.uid") : "");
        kresp_free(&r);
        cJSON *opts = delete_options(*uid ? uid : NULL, NULL);
        if (!opts) {
            snprintf(err, errlen, "deleting podgroups %s: out of memory", a->name);
            rc = -ENOMEM;
            break;
        }
        kpath(path, sizeof path, version, ns, "podgroups", a->name, NULL);
        rc = kclient_request(c->client, "DELETE", path, opts, NULL, &r, err, errlen);
        cJSON_Delete(opts);
        /* Gone, or replaced since the GET (the uid precondition failed): not ours now. */
        if (rc == -ENOENT || rc == -ESTALE)
            rc = 0;
        else if (rc == 0)
            olog(OLOG_DEBUG, key, "deleted podgroups %s", a->name);
        break;
    }
    case ACTION_PATCH_POD_GROUP: {
        /* Only the job's own, and that very object (its uid in the merge patch is a
         * precondition): the name is predictable and PodGroups are not watched. */
        char owner[256], version[64];
        if (gang_api_now(c, version, sizeof version)) break;
        rc = pod_group_get(c, job, version, a->name, &r, err, errlen);
        if (rc == -ENOENT) {
            olog(OLOG_WARN, key, "podgroups %s is gone: its minCount is not changed", a->name);
            rc = 0;
            break;
        }
        if (rc) break;
        if (!pod_group_ours(r.body, jsonx_str(job, "metadata.uid"), owner, sizeof owner)) {
            olog(OLOG_WARN, key, "podgroups %s is not this job's (controller: %s): left alone",
                 a->name, owner);
            break;
        }
        const char *uid = jsonx_str(r.body, "metadata.uid");
        cJSON *patch = cJSON_Duplicate(a->object, 1);
        if (!patch || (uid && !jsonx_set_str(jsonx_ensure_obj(patch, "metadata"), "uid", uid))) {
            cJSON_Delete(patch);
            snprintf(err, errlen, "patching podgroups %s: out of memory", a->name);
            rc = -ENOMEM;
            break;
        }
        kresp_free(&r);
        kpath(path, sizeof path, version, ns, "podgroups", a->name, NULL);
        rc = kclient_request(c->client, "PATCH", path, patch, "application/merge-patch+json", &r,
                             err, errlen);
        cJSON_Delete(patch);
        if (rc == 0)
            olog(OLOG_INFO, key, "patched podgroups %s: minCount %lld", a->name,
                 jsonx_int(a->object, "spec.schedulingPolicy.gang.minCount", -1));
        else if (rc == -ENOENT || rc == -ESTALE) /* gone, or made anew since the GET */
            rc = 0;
        break;
    }
    case ACTION_PATCH_POD:
        kpath(path, sizeof path, "v1", ns, "pods", a->name, NULL);
        rc = kclient_request(c->client, "PATCH", path, a->object, "application/merge-patch+json",
                             &r, err, errlen);
        if (rc == 0) {
            informer_store(c->pods, r.body);
            const cJSON *an = jsonx_obj(a->object, "metadata.annotations");
            const char *m = jsonx_key_str(an, ANNOT_MEMBERS);
            const char *nudge = jsonx_key_str(an, ANNOT_MEMBERS_NUDGE);
            if (m)
                olog(OLOG_INFO, key, "patched pod %s: members %s", a->name, m);
            else
                olog(OLOG_DEBUG, key,
                     "updated pod %s again (" ANNOT_MEMBERS_NUDGE " %s) for the kubelet to "
                     "refresh its members file",
                     a->name, nudge ? nudge : "?");
        } else if (rc == -ENOENT || rc == -EINVAL) {
            /* Gone, or made anew under the name (the uid differs, 422): the next pass sees
             * the pod as it is now. */
            rc = 0;
        }
        break;
    case ACTION_EVENT:
        olog(strcmp(a->event_type, "Warning") == 0 ? OLOG_WARN : OLOG_INFO, key, "%s: %s",
             a->reason, a->message);
        post_event(c, job, a);
        break;
    }
    kresp_free(&r);
    return rc;
}

/* ------------------------------------------------------------------------------------
 * Pod requests at once
 *
 * A run of consecutive creations, or deletions, of pods in a plan is carried out on up
 * to cfg.pod_parallelism threads. A worker that sends its requests one after another
 * makes at most 10 a second when the API server answers in 100 ms, whatever the
 * client's limit (issue 28: 4 workers made 40 a second against a limit of 100 at 8,000
 * pods). Nothing in such a run depends on another action of it (the Secret, Service,
 * NetworkPolicy and PodGroup come before the pods, one at a time), and each pod is
 * level-triggered on its own: the next pass creates or deletes whatever this one left,
 * as when the operator stops between two actions. The plan goes on only when the
 * whole run succeeded, so the event and status write after the pods still follow them. */

/* A run of actions of one kind, shared by the threads that carry it out. */
typedef struct PodRun {
    Controller *c;
    const cJSON *job, *pods;
    const char *key;
    char *secret;          /* the plan's (execute); no pod action reads or writes it */
    const Action *actions; /* [n] */
    size_t n;
    size_t next;   /* the next action not yet taken (atomic) */
    int *rc;       /* [n] each action's result */
    char *errs;    /* [n * errlen] each action's message where it failed */
    size_t errlen; /* the caller's err size */
} PodRun;

static void *pod_run_main(void *arg)
{
    PodRun *r = arg;
    size_t i;
    pthread_setname_np(pthread_self(), "kt-pods"); /* as top -H, perf and gdb show it */
    while ((i = __atomic_fetch_add(&r->next, 1, __ATOMIC_RELAXED)) < r->n)
        r->rc[i] = execute(r->c, r->job, r->pods, &r->actions[i], r->key, r->secret,
                           r->errs + i * r->errlen, r->errlen);
    return NULL;
}

/* How many actions from plan->actions[k] go at once: the run of creations, or deletions,
 * of pods starting there; 1 for any other action or with a parallelism of 1. */
static size_t pod_run_length(const Controller *c, const Plan *plan, size_t k)
{
    ActionKind kind = plan->actions[k].kind;
    size_t n = 1;
    if (c->cfg.pod_parallelism < 2 || (kind != ACTION_CREATE_POD && kind != ACTION_DELETE_POD))
        return 1;
    while (k + n < plan->n && plan->actions[k + n].kind == kind)
        n++;
    return n;
}

/* Carries out actions[0..n) (pod_run_length's run) on the calling thread and up to
 * cfg.pod_parallelism - 1 more, each taking the next action not yet taken, and returns
 * once every one was attempted: 0, or the first failure in the actions' order with its
 * message in err, as one after another would have returned it. A thread that cannot be
 * started leaves its share to the others. */
static int execute_pods(Controller *c, const cJSON *job, const cJSON *pods, const Action *actions,
                        size_t n, const char *key, char *secret, char *err, size_t errlen)
{
    PodRun r = {.c = c,
                .job = job,
                .pods = pods,
                .key = key,
                .secret = secret,
                .actions = actions,
                .n = n,
                .rc = calloc(n, sizeof *r.rc),
                .errs = malloc(n * errlen),
                .errlen = errlen};
    pthread_t helpers[MAX_POD_PARALLELISM - 1];
    size_t nhelpers = 0,
           want = n < (size_t)c->cfg.pod_parallelism ? n : (size_t)c->cfg.pod_parallelism;
    int rc = 0;
    if (!r.rc || !r.errs) {
        snprintf(err, errlen, "out of memory for %zu pod requests", n);
        rc = -ENOMEM;
        goto out;
    }
    while (nhelpers + 1 < want && pthread_create(&helpers[nhelpers], NULL, pod_run_main, &r) == 0)
        nhelpers++;
    pod_run_main(&r);
    for (size_t i = 0; i < nhelpers; i++)
        pthread_join(helpers[i], NULL);
    for (size_t i = 0; i < n && !rc; i++)
        if ((rc = r.rc[i])) snprintf(err, errlen, "%s", r.errs + i * errlen);
out:
    free(r.rc);
    free(r.errs);
    return rc;
}

/* A job not in the cache: when the informer skipped it as unreadable and it is not
 * marked yet, its status gets the Invalid condition (reason Unreadable), as a job whose
 * spec cannot run does, by a merge patch that names the uid and resourceVersion seen
 * (a job replaced or changed since is left to its own event). Returns 0 or -errno. */
static int mark_unreadable(Controller *c, const char *key, const char *ns, const char *name,
                           char *err, size_t errlen)
{
    Unreadable u = {0};
    pthread_mutex_lock(&c->unreadable_lock);
    for (size_t i = 0; i < UNREADABLE_MAX; i++)
        if (!c->unreadable[i].marked && strcmp(c->unreadable[i].key, key) == 0)
            u = c->unreadable[i];
    pthread_mutex_unlock(&c->unreadable_lock);
    if (!*u.key) return 0; /* deleted, or marked already */
    char msg[512], now[40], path[1024];
    snprintf(msg, sizeof msg,
             "the operator cannot read this TrainingJob (%s); nothing of it is reconciled: "
             "replace its spec with one nested less deeply, or delete it",
             u.why);
    clock_format_rfc3339(clock_wall(), now, sizeof now);
    cJSON *patch = cJSON_Parse("{\"metadata\":{},\"status\":{\"conditions\":[{\"type\":"
                               "\"Invalid\",\"status\":\"True\",\"reason\":\"Unreadable\"}]}}");
    cJSON *md = cJSON_GetObjectItemCaseSensitive(patch, "metadata");
    cJSON *st = cJSON_GetObjectItemCaseSensitive(patch, "status");
    cJSON *cond = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(st, "conditions"), 0);
    char *end;
    double gen = strtod(u.generation, &end);
    int ok = cond && jsonx_set_str(md, "uid", u.uid) &&
             (!*u.rv || jsonx_set_str(md, "resourceVersion", u.rv)) &&
             (!*u.generation || *end || jsonx_set_num(st, "observedGeneration", gen)) &&
             jsonx_set_str(cond, "message", msg) && jsonx_set_str(cond, "lastTransitionTime", now);
    if (!ok) {
        cJSON_Delete(patch);
        snprintf(err, errlen, "marking the unreadable job: out of memory");
        return -ENOMEM;
    }
    kpath(path, sizeof path, KT_API_VERSION, ns, KT_PLURAL, name, "status");
    int rc = kclient_request(c->client, "PATCH", path, patch, "application/merge-patch+json", NULL,
                             err, errlen);
    cJSON_Delete(patch);
    /* 404: deleted. A 409 (replaced or changed since) is retried with what its newer event
     * recorded. */
    if (rc != 0 && rc != -ENOENT) return rc;
    if (rc == 0) olog(OLOG_WARN, key, "marked Invalid (Unreadable): %s", u.why);
    pthread_mutex_lock(&c->unreadable_lock);
    for (size_t i = 0; i < UNREADABLE_MAX; i++) {
        Unreadable *x = &c->unreadable[i];
        if (strcmp(x->key, key) == 0 && strcmp(x->uid, u.uid) == 0 &&
            strcmp(x->generation, u.generation) == 0)
            x->marked = 1;
    }
    pthread_mutex_unlock(&c->unreadable_lock);
    return 0;
}

int controller_sync(Controller *c, const char *key, double *requeue_after, char *err, size_t errlen)
{
    char ns[256], name[256];
    *requeue_after = -1;
    const char *slash = strchr(key, '/');
    if (!slash || (size_t)(slash - key) >= sizeof ns || strlen(slash + 1) >= sizeof name) {
        snprintf(err, errlen, "bad key \"%s\"", key);
        return -EINVAL;
    }
    memcpy(ns, key, (size_t)(slash - key));
    ns[slash - key] = 0;
    snprintf(name, sizeof name, "%s", slash + 1);

    cJSON *job = informer_get(c->jobs, ns, name);
    /* Deleted (the garbage collector removes what it owned), or unreadable. */
    if (!job) return mark_unreadable(c, key, ns, name, err, errlen);
    char vname[300], secret[254] = "";
    desired_service_name(name, vname, sizeof vname);
    cJSON *pods = informer_list(c->pods, ns, LABEL_JOB_NAME, name);
    cJSON *service = informer_get(c->services, ns, vname);
    cJSON *netpol = informer_get(c->netpols, ns, vname);
    size_t npods = (size_t)cJSON_GetArraySize(pods);
    const cJSON **pv = calloc(npods + 1, sizeof *pv);
    Plan plan = {0};
    int rc = 0;
    if (!pods || !pv) {
        snprintf(err, errlen, "out of memory");
        rc = -ENOMEM;
        goto out;
    }
    size_t i = 0;
    const cJSON *p;
    cJSON_ArrayForEach(p, pods) pv[i++] = p;
    Observed obs = {.job = job,
                    .service = service,
                    .network_policy = netpol,
                    .pods = pv,
                    .npods = npods,
                    .now = clock_wall()};
    rc = gang_api_lookup(c, &obs.gang_api, err, errlen);
    if (rc) goto out;
    if (RAND_bytes(obs.ring_key, sizeof obs.ring_key) != 1) {
        snprintf(err, errlen, "no random bytes for the ring key");
        rc = -EIO;
        goto out;
    }
    /* A PodGroup of another owner at the attempt's name (-EEXIST from its create): the
     * job is reconciled again knowing it, which says so and makes no pods. */
    char conflict[512] = "";
    for (int round = 0;; round++) {
        obs.pod_group_conflict = *conflict ? conflict : NULL;
        rc = reconcile(&c->cfg.reconcile, &obs, &plan, err, errlen);
        if (rc) goto out;
        size_t k = 0, run;
        for (; k < plan.n; k += run) {
            run = pod_run_length(c, &plan, k);
            rc = run > 1
                     ? execute_pods(c, job, pods, &plan.actions[k], run, key, secret, err, errlen)
                     : execute(c, job, pods, &plan.actions[k], key, secret, err, errlen);
            if (rc) break;
        }
        if (rc == -EEXIST && round == 0 && plan.actions[k].kind == ACTION_CREATE_POD_GROUP) {
            snprintf(conflict, sizeof conflict, "%s", err);
            plan_free(&plan);
            continue;
        }
        if (rc) goto out;
        break;
    }
    *requeue_after = plan.requeue_after;
out:
    plan_free(&plan);
    free(pv);
    cJSON_Delete(pods);
    cJSON_Delete(service);
    cJSON_Delete(netpol);
    cJSON_Delete(job);
    return rc;
}

static void *worker_main(void *arg)
{
    Controller *c = arg;
    char key[512], err[1024];
    pthread_setname_np(pthread_self(), "kt-reconcile"); /* as top -H, perf and gdb show it */
    while (wq_get(c->queue, key, sizeof key) == 0) {
        double t0 = clock_mono(), requeue;
        err[0] = 0;
        int rc = controller_sync(c, key, &requeue, err, sizeof err);
        metrics_count_reconcile(rc == 0, clock_mono() - t0);
        if (rc) {
            olog(rc == -ESTALE ? OLOG_INFO : OLOG_WARN, key, "sync failed, retrying: %s", err);
            wq_add_rate_limited(c->queue, key);
        } else {
            wq_forget(c->queue, key);
            /* A small margin so that the timer finds its time passed. */
            if (requeue >= 0) wq_add_after(c->queue, key, requeue + 0.05);
        }
        wq_done(c->queue, key);
    }
    return NULL;
}

int controller_start_workers(Controller *c)
{
    for (int i = 0; i < c->cfg.workers; i++) {
        int rc = pthread_create(&c->threads[i], NULL, worker_main, c);
        if (rc) return -rc;
        c->nthreads++;
    }
    return progress_start(c->progress);
}

void controller_stop_workers(Controller *c)
{
    if (!c) return;
    progress_stop(c->progress);
    wq_shutdown(c->queue);
    for (int i = 0; i < c->nthreads; i++)
        pthread_join(c->threads[i], NULL);
    c->nthreads = 0;
}

void controller_stop(Controller *c)
{
    if (!c) return;
    controller_stop_workers(c);
    informer_request_stop(c->jobs);
    informer_request_stop(c->pods);
    informer_request_stop(c->services);
    informer_request_stop(c->netpols);
    informer_stop(c->jobs);
    informer_stop(c->pods);
    informer_stop(c->services);
    informer_stop(c->netpols);
}

static void count_phase(void *ctx, const cJSON *job)
{
    long long *counts = ctx;
    counts[metrics_phase_index(jsonx_str(job, "status.phase"))]++;
}

void controller_update_phase_metrics(Controller *c)
{
    long long counts[7] = {0};
    informer_foreach(c->jobs, count_phase, counts);
    metrics_set_job_phases(counts);
}
