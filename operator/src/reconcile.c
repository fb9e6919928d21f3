/* reconcile — TrainingJob policies as a pure function; see reconcile.h. */
#include "reconcile.h"

#include "clock.h"
#include "jsonx.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_WORKERS 10000
/* An elastic job's members at most: its chief and workers (TF_CONFIG indices). */
#define MAX_MEMBERS (JOBSPEC_MAX_WORKERS + 1)
/* A task's "host:port" in TF_CONFIG (desired_task_address) at most. */
#define TEXT_ADDR_MAX 512
/* Disruption restarts and replacements in a row without the group ever running
 * (restarts.consecutiveDisruptions) after which the next disruption fails the job: a pod
 * the kubelet refuses at admission, or one that never starts for another reason outside
 * the program, would otherwise restart the group for ever. */
#define DISRUPTION_LIMIT 10

/* ------------------------------------------------------------------------------------
 * Plan */

static const char *const kind_names[] = {"create-secret",
                                         "create-service",
                                         "create-pod",
                                         "delete-pod",
                                         "update-status",
                                         "delete-job",
                                         "event",
                                         "force-delete-pod",
                                         "create-network-policy",
                                         "delete-network-policy",
                                         "create-pod-group",
                                         "delete-pod-group",
                                         "delete-stopped-pod",
                                         "patch-pod",
                                         "patch-pod-group"};

const char *action_kind_name(ActionKind kind)
{
    return kind_names[kind];
}

void plan_free(Plan *plan)
{
    if (!plan) return;
    for (size_t i = 0; i < plan->n; i++)
        cJSON_Delete(plan->actions[i].object);
    free(plan->actions);
    plan->actions = NULL;
    plan->n = plan->cap = 0;
}

/* Appends an action; takes ownership of object (freed on failure). */
static Action *plan_add(Plan *p, ActionKind kind, const char *name, cJSON *object)
{
    if (p->n == p->cap) {
        size_t cap = p->cap ? 2 * p->cap : 16;
        Action *a = realloc(p->actions, cap * sizeof *a);
        if (!a) {
            cJSON_Delete(object);
            return NULL;
        }
        p->actions = a;
        p->cap = cap;
    }
    Action *a = &p->actions[p->n++];
    memset(a, 0, sizeof *a);
    a->kind = kind;
    size_t len = name ? strnlen(name, sizeof a->name - 1) : 0; /* names fit: validated <= 63 */
    memcpy(a->name, name ? name : "", len);
    a->name[len] = 0;
    a->object = object;
    return a;
}

char *plan_describe(const Plan *plan)
{
    size_t cap = 64 + plan->n * 340, len = 0;
    char *out = malloc(cap);
    if (!out) return NULL;
    out[0] = 0;
    for (size_t i = 0; i < plan->n; i++) {
        const Action *a = &plan->actions[i];
        if (a->kind == ACTION_EVENT)
            len +=
                (size_t)snprintf(out + len, cap - len, "event %s %s\n", a->event_type, a->reason);
        else
            len += (size_t)snprintf(out + len, cap - len, "%s %s\n", kind_names[a->kind], a->name);
    }
    return out;
}

double reconcile_backoff_delay(const ReconcileConfig *cfg, long long n)
{
    if (n < 1) return 0;
    double d = cfg->backoff_base_s * pow(2.0, (double)(n - 1 < 60 ? n - 1 : 60));
    return d < cfg->backoff_max_s ? d : cfg->backoff_max_s;
}

/* ------------------------------------------------------------------------------------
 * Observed pods */

typedef struct PodView {
    const cJSON *pod;
    const char *name;
    Role role;             /* its role label; ROLE_COUNT when missing or unknown */
    int index;             /* replica index, -1 when the label is missing or malformed */
    int slot;              /* its place in the current spec (jobspec_slot), or -1 */
    const char *cluster;   /* the cluster shape it was made for (ANNOT_CLUSTER) or NULL */
    long long attempt;     /* -1 when the annotation is missing or malformed */
    long long replacement; /* ANNOT_REPLACEMENT, 0 when absent (the attempt's first pod) */
    int stale;         /* an older object of a pod replaced in this attempt (status.replacedPods) */
    long long world;   /* the world size the pod was created for, -1 unknown */
    int terminating;   /* deletionTimestamp set */
    const char *phase; /* Pending | Running | Succeeded | Failed | Unknown */
    int ready;
    const char *disruption; /* why the pod counts as disrupted, or NULL */
    int kueue_stopped;      /* Kueue stopped its group (KUEUE_STOPPED_CONDITION) */
    int kueue;              /* in a Kueue pod group (LABEL_KUEUE_GROUP) */
    int exit_code;          /* the trainer container's, -1 unknown */
    const char *message;    /* its termination message, or NULL */
    /* The init container that failed while the trainer never ran, or NULL: its exit code
     * and message are then exit_code and message (the application's failure). */
    const char *init_container;
    char why[256];      /* room for disruption's text */
    double started_at;  /* when the trainer container started, 0 unknown */
    double finished_at; /* when it terminated, 0 unknown (RFC 3339: whole seconds) */
    int foreign;        /* controlled by another object (an older job of that name) */
} PodView;

static long long parse_ll(const char *s, long long dflt)
{
    if (!s || !*s) return dflt;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    return (*end || errno || v < 0) ? dflt : v;
}

/* True when the pod's condition `type` has status "True". */
static int pod_condition(const cJSON *pod, const char *type)
{
    const cJSON *c;
    cJSON_ArrayForEach(c, jsonx_arr(pod, "status.conditions"))
    {
        const char *t = jsonx_str(c, "type"), *st = jsonx_str(c, "status");
        if (t && st && strcmp(t, type) == 0) return strcmp(st, "True") == 0;
    }
    return 0;
}

static void view_pod(const cJSON *pod, const char *job_uid, PodView *v)
{
    static const char *const disruptive_reasons[] = {
        "Evicted",  "Preempting",   "Preempted",  "NodeLost",
        "Shutdown", "NodeShutdown", "Terminated", "UnexpectedAdmissionError",
        NULL};
    memset(v, 0, sizeof *v);
    v->pod = pod;
    v->name = jsonx_str(pod, "metadata.name");
    const cJSON *labels = jsonx_obj(pod, "metadata.labels");
    const cJSON *annots = jsonx_obj(pod, "metadata.annotations");
    long long idx = parse_ll(jsonx_key_str(labels, LABEL_REPLICA_INDEX), -1);
    v->index = idx > MAX_WORKERS ? -1 : (int)idx;
    v->role = jobspec_role_of(jsonx_key_str(labels, LABEL_ROLE));
    v->slot = -1;
    v->cluster = jsonx_key_str(annots, ANNOT_CLUSTER);
    v->kueue = desired_pod_queued(pod);
    v->attempt = parse_ll(jsonx_key_str(annots, ANNOT_ATTEMPT), -1);
    v->replacement = parse_ll(jsonx_key_str(annots, ANNOT_REPLACEMENT), 0);
    v->world = parse_ll(jsonx_key_str(annots, ANNOT_WORLD_SIZE), -1);
    v->terminating = jsonx_str(pod, "metadata.deletionTimestamp") != NULL;
    v->phase = jsonx_str(pod, "status.phase");
    if (!v->phase) v->phase = "Pending";
    v->ready = pod_condition(pod, "Ready");
    const cJSON *ref;
    cJSON_ArrayForEach(ref, jsonx_arr(pod, "metadata.ownerReferences"))
    {
        const char *uid = jsonx_str(ref, "uid");
        if (jsonx_bool(ref, "controller", 0) && (!uid || !job_uid || strcmp(uid, job_uid) != 0))
            v->foreign = 1;
    }
    v->exit_code = -1;
    const cJSON *cs;
    cJSON_ArrayForEach(cs, jsonx_arr(pod, "status.containerStatuses"))
    {
        const char *n = jsonx_str(cs, "name");
        if (!n || strcmp(n, TRAINER_CONTAINER) != 0) continue;
        const cJSON *t = jsonx_obj(cs, "state.terminated");
        if (t) {
            v->exit_code = (int)jsonx_int(t, "exitCode", -1);
            v->message = jsonx_str(t, "message");
            if (clock_parse_rfc3339(jsonx_str(t, "finishedAt"), &v->finished_at))
                v->finished_at = 0;
        }
        const char *started =
            jsonx_str(cs, t ? "state.terminated.startedAt" : "state.running.startedAt");
        if (clock_parse_rfc3339(started, &v->started_at)) v->started_at = 0;
    }
    /* A pod that failed in its own init container never ran the trainer: that failure is
     * the program's setup failing, counted like the trainer's own. */
    cJSON_ArrayForEach(cs, jsonx_arr(pod, "status.initContainerStatuses"))
    {
        const cJSON *t = jsonx_obj(cs, "state.terminated");
        long long code = jsonx_int(t, "exitCode", 0);
        if (v->exit_code >= 0 || !t || code == 0) continue;
        v->exit_code = code > 0 && code < 256 ? (int)code : 1;
        v->init_container = jsonx_str(cs, "name") ? jsonx_str(cs, "name") : "?";
        v->message = jsonx_str(t, "message") ? jsonx_str(t, "message") : jsonx_str(t, "reason");
        break;
    }

    const char *reason = jsonx_str(pod, "status.reason");
    int succeeded = strcmp(v->phase, "Succeeded") == 0;
    int failed = strcmp(v->phase, "Failed") == 0;
    if (pod_condition(pod, "DisruptionTarget")) {
        v->disruption = "it was disrupted (DisruptionTarget)";
    } else if (pod_condition(pod, KUEUE_STOPPED_CONDITION)) {
        /* Kueue preempted or evicted the group: it sets this, then deletes the pods,
         * whose programs may exit non-zero on the SIGTERM before the pod is seen. */
        v->disruption = "Kueue stopped its pod group (" KUEUE_STOPPED_CONDITION ")";
        v->kueue_stopped = 1;
    } else if (reason && !succeeded) {
        for (size_t i = 0; disruptive_reasons[i]; i++)
            if (strcmp(reason, disruptive_reasons[i]) == 0) v->disruption = disruptive_reasons[i];
    }
    if (!v->disruption && failed && v->exit_code < 0) {
        /* Refused by the kubelet at admission (OutOfcpu, NodeAffinity...), or gone wrong
         * before any container ran: say what the kubelet said. */
        const char *m = jsonx_str(pod, "status.message");
        if (reason)
            snprintf(v->why, sizeof v->why, "it failed before the trainer ran (%s%s%.160s)", reason,
                     m ? ": " : "", m ? m : "");
        else
            snprintf(v->why, sizeof v->why, "it failed before the trainer ran");
        v->disruption = v->why;
    }
    if (!v->disruption && v->terminating && !succeeded && !failed) v->disruption = "it was deleted";
}

static int is_active(const PodView *v)
{
    return !v->terminating && strcmp(v->phase, "Succeeded") != 0 && strcmp(v->phase, "Failed") != 0;
}

/* True when obj has a controller owner reference to something other than uid. */
static int owned_by_other(const cJSON *obj, const char *uid)
{
    const cJSON *ref;
    cJSON_ArrayForEach(ref, jsonx_arr(obj, "metadata.ownerReferences"))
    {
        const char *u = jsonx_str(ref, "uid");
        if (jsonx_bool(ref, "controller", 0) && (!u || !uid || strcmp(u, uid) != 0)) return 1;
    }
    return 0;
}

/* ------------------------------------------------------------------------------------
 * Status */

typedef struct Ctx {
    const ReconcileConfig *cfg;
    const Observed *obs;
    Plan *plan;
    JobSpec spec;
    cJSON *status; /* the new status, owned */
    char now_str[32];
    int nomem;
} Ctx;

/* Sets the condition `type`; returns 1 when its status changed (a transition). */
static int set_condition(Ctx *c, const char *type, int value, const char *reason,
                         const char *message)
{
    cJSON *conds = cJSON_GetObjectItemCaseSensitive(c->status, "conditions");
    if (!cJSON_IsArray(conds)) conds = jsonx_set(c->status, "conditions", cJSON_CreateArray());
    if (!conds) {
        c->nomem = 1;
        return 0;
    }
    const char *st = value ? "True" : "False";
    cJSON *cond = NULL, *it;
    cJSON_ArrayForEach(it, conds)
    {
        const char *t = jsonx_str(it, "type");
        if (cJSON_IsObject(it) && t && strcmp(t, type) == 0) {
            cond = it;
            break;
        }
    }
    int changed = 1;
    if (!cond) {
        cond = cJSON_CreateObject();
        if (!cJSON_AddItemToArray(conds, cond)) {
            cJSON_Delete(cond);
            c->nomem = 1;
            return 0;
        }
        jsonx_set_str(cond, "type", type);
    } else {
        const char *old = jsonx_str(cond, "status");
        changed = !old || strcmp(old, st) != 0;
    }
    if (!jsonx_set_str(cond, "status", st) || !jsonx_set_str(cond, "reason", reason) ||
        !jsonx_set_str(cond, "message", message))
        c->nomem = 1;
    if (changed && !jsonx_set_str(cond, "lastTransitionTime", c->now_str)) c->nomem = 1;
    return changed;
}

/* The first condition of `type`, or NULL. */
static const cJSON *find_condition(const cJSON *status, const char *type)
{
    const cJSON *it;
    cJSON_ArrayForEach(it, jsonx_arr(status, "conditions"))
    {
        const char *t = jsonx_str(it, "type");
        if (t && strcmp(t, type) == 0) return it;
    }
    return NULL;
}

/* The condition if present with status True, else NULL. */
static const cJSON *true_condition(const cJSON *status, const char *type)
{
    const cJSON *it = find_condition(status, type);
    const char *st = jsonx_str(it, "status");
    return st && strcmp(st, "True") == 0 ? it : NULL;
}

/* The string `key` (reason, message) of condition `type`, or NULL. */
static const char *condition_str(const cJSON *status, const char *type, const char *key)
{
    return jsonx_str(find_condition(status, type), key);
}

static const char *condition_reason(const cJSON *status, const char *type)
{
    return condition_str(status, type, "reason");
}

/* Sets the condition to False only if it is present and True. */
static void clear_condition(Ctx *c, const char *type, const char *reason, const char *message)
{
    if (true_condition(c->status, type)) set_condition(c, type, 0, reason, message);
}

static void set_str(Ctx *c, const char *name, const char *v)
{
    if (!jsonx_set_str(c->status, name, v)) c->nomem = 1;
}

static void set_num(Ctx *c, cJSON *o, const char *name, double v)
{
    if (!jsonx_set_num(o, name, v)) c->nomem = 1;
}

static void event(Ctx *c, const char *type, const char *reason, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void event(Ctx *c, const char *type, const char *reason, const char *fmt, ...)
{
    Action *a = plan_add(c->plan, ACTION_EVENT, c->spec.name, NULL);
    if (!a) {
        c->nomem = 1;
        return;
    }
    snprintf(a->event_type, sizeof a->event_type, "%s", type);
    snprintf(a->reason, sizeof a->reason, "%s", reason);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(a->message, sizeof a->message, fmt, ap);
    va_end(ap);
}

static void add_action(Ctx *c, ActionKind kind, const char *name, cJSON *object)
{
    if (!plan_add(c->plan, kind, name, object)) c->nomem = 1;
}

/* Queues the status update when the status changed. */
static void emit_status(Ctx *c)
{
    const cJSON *old = jsonx_obj(c->obs->job, "status");
    cJSON *empty = cJSON_CreateObject();
    int same = cJSON_Compare(old ? old : empty, c->status, 1);
    cJSON_Delete(empty);
    if (same) return;
    cJSON *job = cJSON_Duplicate(c->obs->job, 1);
    if (!job || !jsonx_set(job, "status", cJSON_Duplicate(c->status, 1))) {
        cJSON_Delete(job);
        c->nomem = 1;
        return;
    }
    add_action(c, ACTION_UPDATE_STATUS, c->spec.name, job);
}

static void requeue(Ctx *c, double after)
{
    if (after < 0) after = 0;
    if (c->plan->requeue_after < 0 || after < c->plan->requeue_after)
        c->plan->requeue_after = after;
}

static void delete_pods(Ctx *c, const PodView *v, size_t n, int only_active)
{
    for (size_t i = 0; i < n; i++) {
        if (v[i].terminating || !v[i].name) continue;
        if (only_active && !is_active(&v[i])) continue;
        add_action(c, ACTION_DELETE_POD, v[i].name, NULL);
    }
}

/* ------------------------------------------------------------------------------------
 * Gang scheduling (docs/design.md, "Gang scheduling") */

#define GANG_UNAVAILABLE_MESSAGE                                                                   \
    "spec.gangScheduling is true but the cluster serves no PodGroups (neither "                    \
    "scheduling.k8s.io/v1beta1 nor v1alpha2): its pods are scheduled one by one. To schedule "     \
    "them as a group: on Kubernetes 1.37, the feature gate GenericWorkload (kube-apiserver, "      \
    "kube-scheduler, kube-controller-manager) and the API server's --runtime-config "              \
    "scheduling.k8s.io/v1beta1=true; on 1.36, the gates GenericWorkload and GangScheduling and "   \
    "--runtime-config scheduling.k8s.io/v1alpha2=true. Or set spec.gangScheduling: false"

const char *gang_api_version(GangApi api)
{
    switch (api) {
    case GANG_API_V1BETA1:
        return POD_GROUP_V1BETA1;
    case GANG_API_V1ALPHA2:
        return POD_GROUP_V1ALPHA2;
    default:
        return NULL;
    }
}

/* The name of the pod group this job's new pods join, into out, and 1; 0 when they join
 * none (spec.gangScheduling off, or the cluster has no PodGroups). */
static int gang_group(const Ctx *c, long long attempt, char *out, size_t n)
{
    if (!c->spec.gang_scheduling || !gang_api_version(c->obs->gang_api)) return 0;
    desired_pod_group_name(c->spec.name, attempt, out, n);
    return 1;
}

/* Deletes the PodGroup of `attempt` where the cluster has PodGroups, whatever the spec
 * says now (it may have been on then); the API server answers 404 when there is none.
 * Its finalizer keeps it until its pods are gone. */
static void delete_pod_group(Ctx *c, long long attempt)
{
    char name[300];
    if (!gang_api_version(c->obs->gang_api) || attempt < 0) return;
    desired_pod_group_name(c->spec.name, attempt, name, sizeof name);
    add_action(c, ACTION_DELETE_POD_GROUP, name, NULL);
}

/* Lines of a log tail, for failure_text: [start, end) of each, without the newline. */
typedef struct {
    const char *start[96], *end[96];
    int n;
} Lines;

static void split_lines(const char *s, Lines *l)
{
    l->n = 0;
    while (*s && l->n < (int)(sizeof l->start / sizeof l->start[0])) {
        const char *e = strchr(s, '\n');
        if (!e) e = s + strlen(s);
        const char *t = e;
        while (t > s && (t[-1] == '\r' || t[-1] == ' '))
            t--;
        l->start[l->n] = s;
        l->end[l->n++] = t;
        s = *e ? e + 1 : e;
    }
}

static int line_blank(const Lines *l, int i)
{
    return l->end[i] == l->start[i];
}
static int line_indented(const Lines *l, int i)
{
    return !line_blank(l, i) && (l->start[i][0] == ' ' || l->start[i][0] == '\t');
}
static int line_begins(const Lines *l, int i, const char *prefix)
{
    size_t k = strlen(prefix);
    return (size_t)(l->end[i] - l->start[i]) >= k && memcmp(l->start[i], prefix, k) == 0;
}

/* Whether line i is a Python exception line: at column 0 a dotted name whose last part
 * ends in Error, Exception, Exit or Interrupt, then ":" or nothing. */
static int exception_line(const Lines *l, int i)
{
    const char *p = l->start[i], *e = l->end[i], *name = p;
    if (p == e || !(isalpha((unsigned char)*p) || *p == '_')) return 0;
    while (p < e && (isalnum((unsigned char)*p) || *p == '_' || *p == '.'))
        p++;
    if (p < e && *p != ':') return 0;
    static const char *const suffixes[] = {"Error", "Exception", "Exit", "Interrupt"};
    for (size_t k = 0; k < sizeof suffixes / sizeof suffixes[0]; k++) {
        size_t m = strlen(suffixes[k]);
        if ((size_t)(p - name) >= m && memcmp(p - m, suffixes[k], m) == 0) return 1;
    }
    return 0;
}

/* The "error" of the trainer's termination message; else, from a program's log tail
 * (FallbackToLogsOnError: its last 2 KB or 80 lines), the Python exception it ended with,
 * with the first line of its details when it ends in ":" (TensorFlow's "Graph execution
 * error:" says what went wrong further down, after the op's stack); without one (the
 * tail may have cut it off), the last non-empty line, or where that is indented (the
 * "[[{{node ...}}]]" TensorFlow ends with) the first line of the paragraph above it. */
static void failure_text(const char *message, char *out, size_t n)
{
    out[0] = 0;
    if (!message) return;
    cJSON *m = cJSON_Parse(message);
    const char *e = jsonx_str(m, "error");
    if (e) {
        snprintf(out, n, "%s", e);
        for (char *p = out; *p; p++)
            if (*p == '\n') *p = ' ';
        cJSON_Delete(m);
        return;
    }
    cJSON_Delete(m);
    /* The tail's last 96 lines are enough (Kubernetes keeps at most 80). */
    size_t len = strlen(message);
    const char *from = message + len;
    for (int k = 0; from > message && k < 97; k++)
        for (from--; from > message && from[-1] != '\n';)
            from--;
    Lines l;
    split_lines(from, &l);
    int last = l.n - 1, ex = -1, detail = -1;
    while (last >= 0 && line_blank(&l, last))
        last--;
    if (last < 0) return;
    /* An exception line counts if nothing but its details follows: it is the last line at
     * column 0, or it ends in ":" (an earlier "ValueError: ..." the program logged and
     * went on from is not why it stopped). */
    int col0 = last;
    while (col0 >= 0 && (line_blank(&l, col0) || line_indented(&l, col0)))
        col0--;
    for (int i = col0; i >= 0 && ex < 0; i--)
        if (exception_line(&l, i) && (i == col0 || l.end[i][-1] == ':')) ex = i;
    if (ex >= 0 && l.end[ex][-1] == ':') {
        for (int i = ex + 1; i <= last && detail < 0; i++)
            if (!line_blank(&l, i) && !line_indented(&l, i) && !line_begins(&l, i, "Detected at"))
                detail = i;
    } else if (ex < 0 && line_indented(&l, last)) {
        int i = last;
        while (i > 0 && !line_blank(&l, i - 1) && !line_indented(&l, i - 1))
            i--;
        if (i < last) ex = i;
    }
    if (ex < 0) ex = last;
    snprintf(out, n, "%.*s", (int)(l.end[ex] - l.start[ex]), l.start[ex]);
    if (detail >= 0) {
        size_t k = strlen(out);
        if (k + 1 < n)
            snprintf(out + k, n - k, " %.*s", (int)(l.end[detail] - l.start[detail]),
                     l.start[detail]);
    }
}

/* Whether a trainer's termination message says that it gave up waiting for a lost
 * peer's replacement ("recoveryTimedOut": true): the group restarts then. */
static int recovery_timed_out(const char *message)
{
    cJSON *m = message ? cJSON_Parse(message) : NULL;
    int yes = cJSON_IsTrue(jsonx_at(m, "recoveryTimedOut"));
    cJSON_Delete(m);
    return yes;
}

/* ------------------------------------------------------------------------------------
 * Live replacement: status.replacedPods lists, per pod replaced inside this attempt,
 * {name, replacement, launched}: the number its new object carries (ANNOT_REPLACEMENT;
 * an object of the pod with a lower number is stale, never counted again) and whether
 * that object has been created. Written before the old object is deleted and cleared
 * with the attempt (reset_attempt). */

/* The entry of pod `name` in status.replacedPods, or NULL. */
static cJSON *replaced_entry(cJSON *status, const char *name)
{
    cJSON *it, *list = cJSON_GetObjectItemCaseSensitive(status, "replacedPods");
    if (!name || !cJSON_IsArray(list)) return NULL;
    cJSON_ArrayForEach(it, list)
    {
        const char *n = jsonx_str(it, "name");
        if (n && strcmp(n, name) == 0) return it;
    }
    return NULL;
}

/* The entry of the pod of `role` and `index` (named "<job>-<role>-<index>"), or NULL. */
static cJSON *role_entry(cJSON *status, const char *job, Role role, int index)
{
    char name[300];
    desired_pod_name(job, role, index, name, sizeof name);
    return replaced_entry(status, name);
}

/* The entry of the pod a view is an object of (by its role and index: a replacement in
 * a Kueue group has a name of its own), or NULL. */
static cJSON *view_entry(cJSON *status, const char *job, const PodView *v)
{
    if (v->role == ROLE_COUNT || v->index < 0) return replaced_entry(status, v->name);
    return role_entry(status, job, v->role, v->index);
}

/* The entry of the pod of slot `slot`, or NULL. */
static cJSON *slot_entry(const Ctx *c, int slot)
{
    Role r;
    int ri;
    jobspec_slot_role(&c->spec, slot, &r, &ri);
    return role_entry(c->status, c->spec.name, r, ri);
}

/* Records that pod `name` is replaced once more: its next object carries the number.
 * Returns 0 or -1 (out of memory). */
static int replaced_add(cJSON *status, const char *name)
{
    cJSON *e = replaced_entry(status, name);
    if (!e) {
        cJSON *list = cJSON_GetObjectItemCaseSensitive(status, "replacedPods");
        if (!cJSON_IsArray(list)) list = jsonx_set(status, "replacedPods", cJSON_CreateArray());
        e = cJSON_CreateObject();
        if (!list || !e || !cJSON_AddItemToArray(list, e)) {
            cJSON_Delete(e);
            return -1;
        }
        if (!jsonx_set_str(e, "name", name)) return -1;
    }
    return jsonx_set_num(e, "replacement", (double)(jsonx_int(e, "replacement", 0) + 1)) &&
                   jsonx_set_bool(e, "launched", 0)
               ? 0
               : -1;
}

/* ------------------------------------------------------------------------------------
 * Decisions */

/* Finished jobs: clean up pods per cleanPodPolicy, and the ps and evaluator pods
 * still running whatever it says (a ps task never exits on its own); delete the job
 * after its TTL. */
static void reconcile_finished(Ctx *c, const PodView *v, size_t n)
{
    CleanPodPolicy policy = c->spec.clean_pod_policy;
    for (size_t i = 0; i < n; i++) {
        int serves = v[i].role == ROLE_PS || v[i].role == ROLE_EVALUATOR;
        if (v[i].terminating || !v[i].name) continue;
        if (policy == CLEAN_ALL || ((policy == CLEAN_RUNNING || serves) && is_active(&v[i])))
            add_action(c, ACTION_DELETE_POD, v[i].name, NULL);
    }
    double done;
    if (c->spec.ttl_after_finished_s >= 0 &&
        clock_parse_rfc3339(jsonx_str(c->status, "completionTime"), &done) == 0) {
        double at = done + (double)c->spec.ttl_after_finished_s;
        if (c->obs->now >= at)
            add_action(c, ACTION_DELETE_JOB, c->spec.name, NULL);
        else
            requeue(c, at - c->obs->now);
    }
}

/* status.result.export's maxLength in the CRD (characters; a byte is at most one). */
#define RESULT_MAX_EXPORT 4096

/* The number `name` of m when it is finite and, for an integer, whole and in
 * [0, max]; NAN otherwise. */
static double result_num(const cJSON *m, const char *name, int integer, double max)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(m, name);
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble)) return NAN;
    double d = v->valuedouble;
    if (integer && (d != floor(d) || d < 0 || d > max)) return NAN;
    return d;
}

/* Copies a succeeded chief's termination message (a JSON object without "error") into
 * status.result: only the fields of the schema, each of its type and range (step an
 * int64, epoch an int32, loss and accuracy finite numbers, weights_sha256 1 to 64 hex
 * digits, as weightsSha256, export a string of 1 to RESULT_MAX_EXPORT bytes); any other
 * is left out. The message is the pod's to write:
 * one value the schema refuses had every status write of the job refused, the job stuck
 * for good. */
static void record_result(Ctx *c, const PodView *chief)
{
    if (!chief || !chief->message || strcmp(chief->phase, "Succeeded") != 0) return;
    cJSON *m = cJSON_Parse(chief->message);
    if (!cJSON_IsObject(m) || jsonx_at(m, "error")) {
        cJSON_Delete(m);
        return;
    }
    static const struct {
        const char *name;
        int integer;
        double max;
    } nums[] = {{"step", 1, 9007199254740992.0}, /* 2^53: exact in a double */
                {"epoch", 1, 2147483647.0},
                {"loss", 0, 0},
                {"accuracy", 0, 0}};
    cJSON *r = cJSON_CreateObject();
    int ok = r != NULL;
    for (size_t i = 0; ok && i < sizeof nums / sizeof nums[0]; i++) {
        double v = result_num(m, nums[i].name, nums[i].integer, nums[i].max);
        if (!isnan(v)) ok = jsonx_set_num(r, nums[i].name, v) != NULL;
    }
    const char *hash = jsonx_str(m, "weights_sha256");
    size_t len = hash ? strlen(hash) : 0;
    if (ok && len >= 1 && len <= 64 && strspn(hash, "0123456789abcdefABCDEF") == len)
        ok = jsonx_set_str(r, "weightsSha256", hash) != NULL;
    const char *exp = jsonx_str(m, "export");
    len = exp ? strlen(exp) : 0;
    if (ok && len >= 1 && len <= RESULT_MAX_EXPORT) ok = jsonx_set_str(r, "export", exp) != NULL;
    if (!ok) cJSON_Delete(r);
    if (!ok || !jsonx_set(c->status, "result", r)) c->nomem = 1;
    cJSON_Delete(m);
}

/* Ends the job: status first (the deletions that follow destroy the evidence), then
 * the event and the cleanup. */
static void finish(Ctx *c, int success, const char *reason, const char *message, const PodView *v,
                   size_t n, const PodView *chief)
{
    set_str(c, "phase", success ? "Succeeded" : "Failed");
    set_condition(c, success ? "Succeeded" : "Failed", 1, reason, message);
    clear_condition(c, "Running", reason, message);
    clear_condition(c, "Restarting", reason, message);
    set_str(c, "completionTime", c->now_str);
    /* A finished job trains no more, whatever pods cleanPodPolicy leaves. */
    set_num(c, c->status, "currentWorkers", 0);
    record_result(c, chief);
    emit_status(c);
    event(c, success ? "Normal" : "Warning", reason, "%s", message);
    reconcile_finished(c, v, n);
    delete_pod_group(c, jsonx_int(c->status, "attempt", 0));
}

/* Forgets what the pods of the attempt did (a new attempt starts): launched, the
 * succeeded workers, the per-role counts, an elastic job's members (the new pods name
 * every chief and worker); none of its workers runs yet. Returns 0 or -1
 * (out of memory). */
static int reset_attempt(cJSON *status)
{
    cJSON_DeleteItemFromObjectCaseSensitive(status, "roles");
    cJSON_DeleteItemFromObjectCaseSensitive(status, "replacedPods");
    cJSON_DeleteItemFromObjectCaseSensitive(status, "members");
    return jsonx_set_bool(status, "launched", 0) && jsonx_set_num(status, "currentWorkers", 0) &&
                   jsonx_set(status, "succeededIndexes", cJSON_CreateArray())
               ? 0
               : -1;
}

/* The backoff before the pods of a restart made for `reason` are created: after an
 * application failure (WorkerFailed) --backoff-base x 2^(n-1) for the n-th (at most
 * --backoff-max); after the n-th disruption in a row without the group running
 * (restarts.consecutiveDisruptions), none for the first, the same growth from the second;
 * else none. */
static double restart_delay(const Ctx *c, const char *reason)
{
    if (!reason) return 0;
    if (strcmp(reason, "WorkerFailed") == 0)
        return reconcile_backoff_delay(c->cfg, jsonx_int(c->status, "restarts.application", 1));
    if (strcmp(reason, "Disruption") == 0)
        return reconcile_backoff_delay(
            c->cfg, jsonx_int(c->status, "restarts.consecutiveDisruptions", 0) - 1);
    return 0;
}

/* Adds one to restarts.consecutiveDisruptions: a disruption restart or replacement. */
static void count_consecutive_disruption(Ctx *c)
{
    cJSON *r = jsonx_ensure_obj(c->status, "restarts");
    if (!r)
        c->nomem = 1;
    else
        set_num(c, r, "consecutiveDisruptions",
                (double)(jsonx_int(r, "consecutiveDisruptions", 0) + 1));
}

/* Restarts the whole group in a new attempt: status first, then delete every pod. */
static void restart(Ctx *c, const char *reason, const char *counter, const char *message,
                    const PodView *v, size_t n)
{
    long long attempt = jsonx_int(c->status, "attempt", 0);
    set_num(c, c->status, "attempt", (double)(attempt + 1));
    if (reset_attempt(c->status)) c->nomem = 1;
    cJSON *r = counter ? jsonx_ensure_obj(c->status, "restarts") : NULL;
    if (counter && !r) {
        c->nomem = 1;
        return;
    }
    if (counter) {
        /* The backoff counts from here: the Restarting condition's time moves only when
         * it turns True, not at a second restart before the group ran. */
        if (!jsonx_set_str(r, "lastRestartTime", c->now_str)) c->nomem = 1;
        set_num(c, r, counter, (double)(jsonx_int(r, counter, 0) + 1));
        if (!cJSON_GetObjectItemCaseSensitive(r, "application")) set_num(c, r, "application", 0);
        if (!cJSON_GetObjectItemCaseSensitive(r, "disruption")) set_num(c, r, "disruption", 0);
    }
    set_str(c, "phase", "Restarting");
    set_condition(c, "Restarting", 1, reason, message);
    clear_condition(c, "Running", reason, message);
    emit_status(c);
    event(c, "Warning", reason, "restarting all pods: %s", message);
    delete_pods(c, v, n, 0);
    delete_pod_group(c, attempt);
    double delay = restart_delay(c, reason);
    if (delay > 0) requeue(c, delay);
}

/* The pods of this attempt by state: status.workers counts every pod, and, when the
 * job has roles beside the workers, status.roles.<role> each role's; status.ready is
 * "<ready>/<pods of the job>", every role, for kubectl get's Ready column. done: per
 * slot. status.currentWorkers (the scale subresource's replicas) counts the worker pods
 * that are Running and not being deleted: the pods spec.workers asks for, so that it
 * compares with it (a separate chief is not one of them; worker 0 without one is), and
 * status.selector selects those pods for an autoscaler. */
static void set_pod_counts(Ctx *c, const PodView *v, size_t n, long long attempt,
                           const unsigned char *done)
{
    enum { ACTIVE, READY, SUCCEEDED, FAILED, NSTATES };
    static const char *const names[NSTATES] = {"active", "ready", "succeeded", "failed"};
    int count[ROLE_COUNT + 1][NSTATES] = {{0}}; /* [ROLE_COUNT]: every pod */
    int running = 0;
    const JobSpec *s = &c->spec;
    for (size_t i = 0; i < n; i++) {
        if (v[i].attempt != attempt || v[i].slot < 0 || v[i].stale) continue;
        if (v[i].role == ROLE_WORKER && is_active(&v[i]) && strcmp(v[i].phase, "Running") == 0)
            running++;
        int st = is_active(&v[i]) ? ACTIVE : strcmp(v[i].phase, "Failed") == 0 ? FAILED : -1;
        if (st < 0) continue;
        count[v[i].role][st]++, count[ROLE_COUNT][st]++;
        if (st == ACTIVE && v[i].ready) count[v[i].role][READY]++, count[ROLE_COUNT][READY]++;
    }
    for (int slot = 0; slot < s->npods; slot++) {
        Role r;
        int idx;
        jobspec_slot_role(s, slot, &r, &idx);
        if (done[slot]) count[r][SUCCEEDED]++, count[ROLE_COUNT][SUCCEEDED]++;
    }
    cJSON *w = jsonx_ensure_obj(c->status, "workers");
    if (!w) {
        c->nomem = 1;
        return;
    }
    for (int k = 0; k < NSTATES; k++)
        set_num(c, w, names[k], count[ROLE_COUNT][k]);
    char ready[32];
    snprintf(ready, sizeof ready, "%d/%d", count[ROLE_COUNT][READY], s->npods);
    set_str(c, "ready", ready);
    set_num(c, c->status, "currentWorkers", running);
    char selector[300];
    snprintf(selector, sizeof selector, "%s=%s,%s=%s", LABEL_JOB_NAME, s->name, LABEL_ROLE,
             jobspec_role_name(ROLE_WORKER));
    set_str(c, "selector", selector);
    if (s->npods == s->workers) return;
    cJSON *roles = jsonx_set(c->status, "roles", cJSON_CreateObject());
    for (Role r = 0; r < ROLE_COUNT; r++) {
        if (!s->roles[r].replicas) continue;
        cJSON *o = roles ? jsonx_ensure_obj(roles, jobspec_role_name(r)) : NULL;
        if (!o) {
            c->nomem = 1;
            return;
        }
        for (int k = 0; k < NSTATES; k++)
            set_num(c, o, names[k], count[r][k]);
    }
}

/* ------------------------------------------------------------------------------------
 * A job that has not finished: the decisions of docs/design.md, "Restart policies and
 * counting", in its order (deadline, success, resize, disruption, failure), then
 * progress. Each decide_* either settles the pass, the plan and the new status complete,
 * and returns 1, or changes nothing but a requeue and returns 0. */

/* The worker group as observed. */
typedef struct Group {
    const PodView *pods; /* every pod of the job, older attempts' too */
    size_t npods;
    long long attempt; /* status.attempt */
    int launched;      /* status.launched: every slot has had its pod */
    /* Per slot (spec.npods of them, jobspec_slot): succeeded in this attempt, also once
     * its pod is gone; and its pod in this attempt, or NULL. */
    unsigned char *done;
    const PodView **cur;
    int nsucceeded; /* slots done */
    int chief;      /* the slot whose exit decides ChiefCompleted */
    int resized;    /* a pod of this attempt was made for another world size or cluster */
    /* An elastic job's chief and worker slots outside its members (status.members), per
     * slot: dropped or still to join; NULL for a job that is not elastic. */
    unsigned char *outside;
    /* An elastic job's workers in its attempt's TF_CONFIG (the most any pod of the attempt
     * was made for): every pod it makes names them, or spec.workers where that is more (a
     * job grown past them), so that a pod made after a scale down names the cluster its
     * peers do; spec.workers when no pod says. */
    int cluster_workers;
    /* The fewest workers any chief or worker pod of the attempt names in its TF_CONFIG
     * (the attempt's first size, until a job grown past it has replaced all such pods):
     * the members past them carry their addresses (members_text). */
    int known_workers;
    int nmember_slots; /* of outside */
    int started;       /* status.startTime is set, to `start` */
    double start;
} Group;

static int members_read(const Ctx *c, const Group *g, int *idx);
static int member_slots(const JobSpec *s);

/* The slot whose exit completes the job (ChiefCompleted) and whose result is recorded:
 * the chief's slot, or, while an elastic job has left it out of its members, the lowest
 * member, which its trainer makes the chief (docs/design.md, "The chief."). */
static int chief_now(const Group *g)
{
    if (!g->outside || !g->outside[g->chief]) return g->chief;
    for (int slot = 0; slot < g->nmember_slots; slot++)
        if (!g->outside[slot]) return slot;
    return g->chief;
}

/* g->outside of an elastic job (desired_elastic). Returns 0, or -ENOMEM. */
static int elastic_observe(Ctx *c, Group *g)
{
    if (!desired_elastic(&c->spec)) return 0;
    g->cluster_workers = 0;
    g->known_workers = JOBSPEC_MAX_WORKERS + 1;
    for (size_t i = 0; i < g->npods; i++) {
        const PodView *p = &g->pods[i];
        if (p->attempt != g->attempt || p->stale || p->slot < 0 || p->world <= 0 ||
            p->world > JOBSPEC_MAX_WORKERS)
            continue;
        if (p->world > g->cluster_workers) g->cluster_workers = (int)p->world;
        if (p->world < g->known_workers) g->known_workers = (int)p->world;
    }
    if (!g->cluster_workers) g->cluster_workers = c->spec.workers;
    int idx[MAX_MEMBERS], n = members_read(c, g, idx), nslots = member_slots(&c->spec);
    g->outside = malloc((size_t)nslots);
    if (!g->outside) {
        c->nomem = 1;
        return -ENOMEM;
    }
    memset(g->outside, 1, (size_t)nslots);
    g->nmember_slots = nslots;
    for (int k = 0; k < n; k++)
        if (idx[k] < nslots) g->outside[idx[k]] = 0;
    return 0;
}

/* Fills *g from the status and the pods, and writes succeededIndexes, the pod counts
 * and the chief's result into the new status. Returns 0, or -ENOMEM; group_free(g)
 * either way. */
static int group_observe(Ctx *c, const PodView *v, size_t n, Group *g)
{
    const JobSpec *s = &c->spec;
    memset(g, 0, sizeof *g);
    g->pods = v;
    g->npods = n;
    g->attempt = jsonx_int(c->status, "attempt", 0);
    g->launched = jsonx_bool(c->status, "launched", 0);
    g->chief = jobspec_chief_slot(s);
    g->done = calloc((size_t)s->npods, 1);
    g->cur = calloc((size_t)s->npods, sizeof *g->cur);
    if (!g->done || !g->cur) {
        c->nomem = 1;
        return -ENOMEM;
    }
    /* What succeeded in this attempt, kept in status for when the pods are gone: the
     * worker indexes, and the chief and the evaluator in their roles' counts. */
    const cJSON *it;
    cJSON_ArrayForEach(it, jsonx_arr(c->status, "succeededIndexes"))
    {
        if (cJSON_IsNumber(it) && it->valuedouble >= 0 && it->valuedouble < s->workers)
            g->done[jobspec_slot(s, ROLE_WORKER, (int)it->valuedouble)] = 1;
    }
    const Role singles[] = {ROLE_CHIEF, ROLE_EVALUATOR};
    for (size_t k = 0; k < 2; k++) {
        char path[64];
        snprintf(path, sizeof path, "roles.%s.succeeded", jobspec_role_name(singles[k]));
        int slot = jobspec_slot(s, singles[k], 0);
        if (slot >= 0 && jsonx_int(c->status, path, 0) > 0) g->done[slot] = 1;
    }
    char shape[64];
    const char *want = desired_cluster_shape(s, shape, sizeof shape) ? shape : NULL;
    for (size_t i = 0; i < n; i++) {
        int slot = v[i].slot;
        if (v[i].attempt != g->attempt || slot < 0 || v[i].stale) continue;
        if (g->cur[slot]) continue; /* two pods claim one slot: the first one counts */
        g->cur[slot] = &v[i];
        /* The replacement's object is there: created (perhaps by a pass that stopped
         * before writing status). */
        cJSON *e = view_entry(c->status, s->name, &v[i]);
        if (e && !jsonx_bool(e, "launched", 0) &&
            v[i].replacement >= jsonx_int(e, "replacement", 0) && !jsonx_set_bool(e, "launched", 1))
            c->nomem = 1;
        if (strcmp(v[i].phase, "Succeeded") == 0) g->done[slot] = 1;
        /* An elastic job's size is its members' business (decide_elastic): its pods are
         * judged by their chief and ps counts alone. */
        const char *want_i = want;
        char own[64];
        if (want && desired_elastic(s) && v[i].world > 0 && v[i].world <= JOBSPEC_MAX_WORKERS) {
            desired_cluster_shape_of(s, (int)v[i].world, own, sizeof own);
            want_i = own;
        }
        if ((v[i].world != s->workers && !desired_elastic(s)) ||
            (want_i ? !v[i].cluster || strcmp(v[i].cluster, want_i) : v[i].cluster != NULL))
            g->resized = 1;
    }
    cJSON *idx = jsonx_set(c->status, "succeededIndexes", cJSON_CreateArray());
    for (int i = 0; i < s->npods; i++) {
        if (!g->done[i]) continue;
        g->nsucceeded++;
        Role r;
        int ri;
        jobspec_slot_role(s, i, &r, &ri);
        if (r == ROLE_WORKER && (!idx || !cJSON_AddItemToArray(idx, cJSON_CreateNumber(ri))))
            c->nomem = 1;
    }
    set_pod_counts(c, v, n, g->attempt, g->done);
    g->started = clock_parse_rfc3339(jsonx_str(c->status, "startTime"), &g->start) == 0;
    if (elastic_observe(c, g)) return -ENOMEM;
    /* Recorded as soon as the chief succeeds: with successPolicy AllWorkers its pod may be
     * garbage-collected before the job completes. */
    record_result(c, g->cur[chief_now(g)]);
    return 0;
}

static void group_free(Group *g)
{
    free(g->done);
    free(g->cur);
    free(g->outside);
}

/* activeDeadlineSeconds counts from startTime (reset on resume); before it passes, the
 * job is looked at again when it does. */
static int decide_deadline(Ctx *c, const Group *g)
{
    const JobSpec *s = &c->spec;
    if (!g->started || s->active_deadline_s < 0) return 0;
    double at = g->start + (double)s->active_deadline_s;
    if (c->obs->now < at) {
        requeue(c, at - c->obs->now);
        return 0;
    }
    char msg[512];
    snprintf(msg, sizeof msg, "the job ran longer than activeDeadlineSeconds=%lld",
             s->active_deadline_s);
    finish(c, 0, "DeadlineExceeded", msg, g->pods, g->npods, NULL);
    return 1;
}

/* ChiefCompleted: the chief (worker 0 without one; chief_now while an elastic job has
 * left its slot out) succeeded; AllWorkers: the chief and every worker of this attempt
 * did. The ps tasks and the evaluator never decide. */
static int decide_completion(Ctx *c, const Group *g)
{
    const JobSpec *s = &c->spec;
    int chief_only = s->success_policy == SUCCESS_CHIEF_COMPLETED;
    int has_chief = s->roles[ROLE_CHIEF].replicas > 0;
    int chief = chief_now(g), all_done = 1;
    for (int i = 0; i < s->roles[ROLE_CHIEF].replicas + s->workers; i++)
        all_done &= g->done[i];
    if (!(chief_only ? g->done[chief] : all_done)) return 0;
    char msg[128];
    Role r;
    int ri;
    jobspec_slot_role(s, chief, &r, &ri);
    if (chief_only && chief != g->chief)
        snprintf(msg, sizeof msg,
                 "the chief (worker %d, the lowest member while %s is left out) completed", ri,
                 has_chief ? "the chief task" : "worker 0");
    else
        snprintf(msg, sizeof msg, "%s",
                 chief_only ? (has_chief ? "the chief completed" : "the chief (worker 0) completed")
                 : has_chief ? "the chief and all workers completed"
                             : "all workers completed");
    finish(c, 1, "Completed", msg, g->pods, g->npods, g->cur[chief]);
    return 1;
}

/* The group restarts with the spec's cluster, counted in neither counter; `why` says
 * why it could not resize in place, NULL the cluster that changed. */
static void resize_restart(Ctx *c, const Group *g, const char *why)
{
    char msg[512];
    if (!why) {
        snprintf(msg, sizeof msg,
                 "the cluster changed (spec.workers %d, chief %d, ps %d); the group resumes from "
                 "its checkpoint with the new cluster",
                 c->spec.workers, c->spec.roles[ROLE_CHIEF].replicas,
                 c->spec.roles[ROLE_PS].replicas);
        why = msg;
    }
    restart(c, "WorkersChanged", NULL, why, g->pods, g->npods);
}

/* Pods made for another world size: the group restarts with the new one. */
static int decide_resize(Ctx *c, const Group *g)
{
    if (!g->resized) return 0;
    resize_restart(c, g, NULL);
    return 1;
}

/* An elastic job in a Kueue queue whose spec now asks for another number of pods than
 * the pod group Kueue admitted (its pods' ANNOT_KUEUE_GROUP_COUNT): Kueue v0.17.0 does
 * not resize a plain pod group (docs/kueue.md, "Elastic jobs in a queue": a pod beyond
 * the group's count is deleted as excess, and a pod deleted keeps its quota held until
 * the group ends), so every `spec.workers` change of such a job is a group restart at
 * the new size: a new group, a new Workload admitted anew. Lost and unplaced workers stay
 * decide_elastic's: they never add a pod to the group. */
static int decide_queued_resize(Ctx *c, const Group *g)
{
    const JobSpec *s = &c->spec;
    if (!desired_elastic(s)) return 0;
    for (int slot = 0; slot < s->npods; slot++) {
        const PodView *p = g->cur[slot];
        if (!p || !p->kueue) continue;
        const cJSON *labels = jsonx_obj(p->pod, "metadata.labels");
        const char *count =
            jsonx_key_str(jsonx_obj(p->pod, "metadata.annotations"), ANNOT_KUEUE_GROUP_COUNT);
        const char *queue = jsonx_key_str(labels, LABEL_KUEUE_QUEUE);
        const char *group = jsonx_key_str(labels, LABEL_KUEUE_GROUP);
        if (count && parse_ll(count, -1) == s->npods) return 0;
        char msg[512];
        snprintf(msg, sizeof msg,
                 "spec.workers is %d (%d pods) in Kueue queue %.63s, whose pod group %.63s was "
                 "admitted for %.16s pods: Kueue cannot resize a plain pod group, so the group "
                 "restarts at the new size in a new pod group that Kueue admits anew, and "
                 "resumes from its checkpoint",
                 s->workers, s->npods, queue ? queue : "(none)", group ? group : "(none)",
                 count ? count : "(none)");
        resize_restart(c, g, msg);
        return 1;
    }
    return 0;
}

/* ------------------------------------------------------------------------------------
 * Elastic jobs (desired_elastic, docs/design.md "Elastic jobs"): the members are the
 * TF_CONFIG indices of the chief and worker pods in the ring, which are their slots. */

/* The chief and worker slots of the spec: the TF_CONFIG indices a member may have. */
static int member_slots(const JobSpec *s)
{
    return s->roles[ROLE_CHIEF].replicas + s->workers;
}

/* Parses "0,2" (ascending indices, each perhaps with "=host:port": members_text) into
 * idx (room for max); returns the count, or -1 when text is not such a list of at most
 * max. */
static int members_parse(const char *text, int *idx, int max)
{
    int n = 0;
    const char *p = text;
    if (!p || !*p) return -1;
    for (;;) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 0 || v >= MAX_MEMBERS || n == max || (n && v <= idx[n - 1])) return -1;
        idx[n++] = (int)v;
        if (*end == '=') end += 1 + strcspn(end + 1, ",");
        if (!*end) return n;
        if (*end != ',') return -1;
        p = end + 1;
    }
}

/* idx[0..n) as "0,2" into out (room for 6 bytes an index). */
static void members_format(const int *idx, int n, char *out)
{
    *out = 0;
    for (int i = 0; i < n; i++)
        out += sprintf(out, i ? ",%d" : "%d", idx[i]);
}

/* The members of the attempt into idx (room for MAX_MEMBERS): status.members once a
 * resize wrote it, else the annotation of the attempt's first chief or worker pod (as
 * it was made), else every slot of the spec. Returns the count. */
static int members_read(const Ctx *c, const Group *g, int *idx)
{
    int n = members_parse(jsonx_str(c->status, "members"), idx, MAX_MEMBERS);
    for (int i = 0; n < 0 && i < member_slots(&c->spec); i++)
        if (g->cur[i])
            n = members_parse(
                jsonx_key_str(jsonx_obj(g->cur[i]->pod, "metadata.annotations"), ANNOT_MEMBERS),
                idx, MAX_MEMBERS);
    for (int i = 0; n < 0; i++)
        if (i == member_slots(&c->spec))
            n = i;
        else
            idx[i] = i;
    return n;
}

/* The members idx[0..n) as the pods' ANNOT_MEMBERS says them (docs/design.md, "How the
 * members reach the pods"): "0,1,2", and each index past the workers that some pod of the
 * attempt names in its TF_CONFIG (g->known_workers, the chief before them) with the
 * address the new pods' TF_CONFIG gives it, "0,1,2,3=job-worker-3.job-worker.ns.svc:2222",
 * so that a trainer made for fewer workers reaches those made for more. One text for
 * every pod. Returns a malloc'd string, or NULL (c->nomem set). */
static char *members_text(Ctx *c, const Group *g, const int *idx, int n)
{
    const JobSpec *s = &c->spec;
    const int chief = s->roles[ROLE_CHIEF].replicas;
    const size_t room = (size_t)n * (TEXT_ADDR_MAX + 8) + 1;
    char *text = malloc(room);
    if (!text) {
        c->nomem = 1;
        return NULL;
    }
    size_t len = 0;
    *text = 0;
    for (int k = 0; k < n; k++) {
        len += (size_t)snprintf(text + len, room - len, k ? ",%d" : "%d", idx[k]);
        /* the chief, index 0, is always among them: a member past them is a worker */
        if (idx[k] < chief + g->known_workers) continue;
        char addr[TEXT_ADDR_MAX];
        desired_task_address(s, &c->cfg->desired, ROLE_WORKER, idx[k] - chief, addr, sizeof addr);
        len += (size_t)snprintf(text + len, room - len, "=%s", addr);
    }
    return text;
}

/* Patches each pod of the attempt among idx[0..n) whose ANNOT_MEMBERS is not `list`,
 * with ANNOT_MEMBERS_AT now. A pod that has `list` since ANNOT_MEMBERS_AT is updated again
 * every MEMBERS_NUDGE_S seconds, MEMBERS_NUDGES times (ANNOT_MEMBERS_NUDGE counts them), and
 * the job looked at again for it: the kubelet refreshes a downwardAPI file when it syncs
 * the pod, and a refresh it missed would otherwise wait for the pod's periodic sync
 * (a resize seen to wait about a minute on the local cluster: docs/design.md). */
static void members_patch(Ctx *c, const Group *g, const int *idx, int n)
{
    char *list = members_text(c, g, idx, n);
    for (int k = 0; list && k < n; k++) {
        const PodView *p = idx[k] < member_slots(&c->spec) ? g->cur[idx[k]] : NULL;
        if (!p || p->terminating) continue;
        const cJSON *pa = jsonx_obj(p->pod, "metadata.annotations");
        const char *have = jsonx_key_str(pa, ANNOT_MEMBERS);
        char nudge[16] = "";
        if (have && strcmp(have, list) == 0) {
            double at;
            if (clock_parse_rfc3339(jsonx_key_str(pa, ANNOT_MEMBERS_AT), &at)) continue;
            double age = c->obs->now - at;
            if (age < 0 || age >= (MEMBERS_NUDGES + 1) * MEMBERS_NUDGE_S) continue;
            int due = (int)(age / MEMBERS_NUDGE_S), done = 0;
            const char *d = jsonx_key_str(pa, ANNOT_MEMBERS_NUDGE);
            if (d) done = atoi(d);
            if (due < MEMBERS_NUDGES) requeue(c, (due + 1) * MEMBERS_NUDGE_S - age);
            if (due == 0 || done >= due) continue;
            snprintf(nudge, sizeof nudge, "%d", due);
        } else {
            requeue(c, MEMBERS_NUDGE_S);
        }
        cJSON *patch = cJSON_CreateObject();
        cJSON *annots = jsonx_ensure_obj(patch, "metadata.annotations");
        const char *uid = jsonx_str(p->pod, "metadata.uid");
        int ok = annots != NULL;
        if (ok && *nudge)
            ok = jsonx_set_str(annots, ANNOT_MEMBERS_NUDGE, nudge) != NULL;
        else if (ok)
            ok = jsonx_set_str(annots, ANNOT_MEMBERS, list) &&
                 jsonx_set_str(annots, ANNOT_MEMBERS_AT, c->now_str) &&
                 jsonx_set_str(annots, ANNOT_MEMBERS_NUDGE, "0");
        if (!ok || (uid && !jsonx_set_str(jsonx_ensure_obj(patch, "metadata"), "uid", uid))) {
            cJSON_Delete(patch);
            c->nomem = 1;
            break;
        }
        add_action(c, ACTION_PATCH_POD, p->name, patch);
    }
    free(list);
}

static const char *unschedulable_message(const cJSON *pod, int *error);

/* Workers among the members idx[0..n) (the chief's slot, 0 where there is one, is not). */
static int member_workers(const JobSpec *s, const int *idx, int n)
{
    return n - (s->roles[ROLE_CHIEF].replicas && n && idx[0] == 0);
}

/* Writes down a resize in place from the members was[0..nwas) to idx[0..n), and tells
 * the members: status.members and the Resized condition (reason Shrank or Grew), the
 * event, then the member pods' annotations. The text counts workers, and names the
 * chief task where it leaves or joins ("shrank from 3 workers and the chief to 3
 * workers"). */
static void resize_in_place(Ctx *c, const Group *g, const int *was, int nwas, const int *idx, int n,
                            const char *reason, const char *why)
{
    const JobSpec *s = &c->spec;
    char list[6 * MAX_MEMBERS + 1], msg[600];
    int from = member_workers(s, was, nwas), to = member_workers(s, idx, n);
    int chief_was = s->roles[ROLE_CHIEF].replicas && nwas && was[0] == 0;
    int chief_is = s->roles[ROLE_CHIEF].replicas && n && idx[0] == 0;
    members_format(idx, n, list);
    if (chief_was != chief_is)
        snprintf(msg, sizeof msg, "%s from %d workers%s to %d workers%s (members %.200s): %.250s",
                 strcmp(reason, "Grew") == 0 ? "grew" : "shrank", from,
                 chief_was ? " and the chief" : "", to, chief_is ? " and the chief" : "", list,
                 why);
    else
        snprintf(msg, sizeof msg, "%s from %d to %d workers (members %.200s): %.250s",
                 strcmp(reason, "Grew") == 0 ? "grew" : "shrank", from, to, list, why);
    set_str(c, "members", list);
    set_condition(c, "Resized", 1, reason, msg);
    emit_status(c);
    event(c, "Normal", "Resized", "%s", msg);
    members_patch(c, g, idx, n);
}

/* The member slot (the chief's too) whose live replacement cannot run: Pending and
 * unschedulable, or not running replace_timeout_s after it was made (a requeue for then
 * otherwise). Returns the slot with the cause in why, or -1. */
static int replacement_stuck(Ctx *c, const Group *g, const int *idx, int n, char *why, size_t len)
{
    const JobSpec *s = &c->spec;
    for (int k = 0; k < n; k++) {
        int slot = idx[k];
        const PodView *p = g->cur[slot];
        const cJSON *e = slot_entry(c, slot);
        double created;
        int error;
        if (!p || !e || p->terminating || strcmp(p->phase, "Pending") != 0) continue;
        const char *m = unschedulable_message(p->pod, &error);
        if (m) {
            snprintf(why, len, "pod %s unschedulable: %.300s", p->name, m);
            return slot;
        }
        if (clock_parse_rfc3339(jsonx_str(p->pod, "metadata.creationTimestamp"), &created))
            continue;
        double at = created + (double)s->replace_timeout_s;
        if (c->obs->now < at) {
            requeue(c, at - c->obs->now);
            continue;
        }
        snprintf(why, len,
                 "pod %s not running %lld s (elastic.replaceTimeoutSeconds) after it "
                 "was made to replace a lost one",
                 p->name, s->replace_timeout_s);
        return slot;
    }
    return -1;
}

/* An attempt's first chief and worker pods that cannot be placed (docs/design.md,
 * "Elastic jobs", "An attempt's start"): the members whose pod (not a live replacement:
 * replacement_stuck) is Pending and unschedulable, or not running replace_timeout_s after
 * it was made (a requeue for then otherwise), while every other member's pod is placed
 * (bound to a node, or past Pending) and active. Writes the members left into left (*m
 * of them) and the causes into why; returns how many are left out, 0 when any other
 * member is not placed yet, so that the attempt waits as before. */
static int start_unplaced(Ctx *c, const Group *g, const int *idx, int n, int *left, int *m,
                          char *why, size_t len)
{
    const JobSpec *s = &c->spec;
    int out = 0;
    size_t used = 0;
    *m = 0;
    *why = '\0';
    for (int k = 0; k < n; k++) {
        int slot = idx[k], error;
        const PodView *p = g->cur[slot];
        if (!p || !is_active(p)) return 0;
        int pending = strcmp(p->phase, "Pending") == 0;
        const char *msg = pending ? unschedulable_message(p->pod, &error) : NULL;
        double created, at = 0;
        int late = 0;
        if (pending && !msg &&
            !clock_parse_rfc3339(jsonx_str(p->pod, "metadata.creationTimestamp"), &created)) {
            at = created + (double)s->replace_timeout_s;
            late = c->obs->now >= at;
        }
        if (!msg && !late) {
            if (pending && at > 0) requeue(c, at - c->obs->now);
            if (pending && !jsonx_str(p->pod, "spec.nodeName")) return 0; /* not placed yet */
            left[(*m)++] = slot;
            continue;
        }
        /* A live replacement is replacement_stuck's. */
        if (slot_entry(c, slot)) return 0;
        int w = msg ? snprintf(why + used, len - used, "%spod %s unschedulable: %.300s",
                               out ? "; " : "", p->name, msg)
                    : snprintf(why + used, len - used,
                               "%spod %s not running %lld s (elastic.replaceTimeoutSeconds) after "
                               "it was made",
                               out ? "; " : "", p->name, s->replace_timeout_s);
        if (w > 0) used = used + (size_t)w < len ? used + (size_t)w : len - 1;
        out++;
    }
    return out;
}

/* An elastic job whose spec.workers was lowered (kubectl scale) while at least
 * minWorkers stay: the members beyond the spec are dropped in place. Status first
 * (status.members, the Resized condition), the event, then the survivors' annotations
 * patched (their trainers form the smaller ring from the file the kubelet rewrites),
 * then the dropped pods deleted. Fewer than minWorkers left: the group restarts at the
 * new size. A raised spec.workers, past the attempt's TF_CONFIG too, is no decision here:
 * create_missing makes the new slots' pods, with the new cluster's TF_CONFIG, and each
 * joins once it runs (below), the others' members naming its address (members_text). */
static int decide_elastic(Ctx *c, const Group *g)
{
    const JobSpec *s = &c->spec;
    if (!desired_elastic(s)) return 0;
    int idx[MAX_MEMBERS], kept = 0;
    int n = members_read(c, g, idx), nslots = member_slots(s);
    while (kept < n && idx[kept] < nslots)
        kept++;
    if (kept < n) {
        char why[64];
        if (member_workers(s, idx, kept) < s->min_workers) {
            resize_restart(c, g, NULL);
            return 1;
        }
        snprintf(why, sizeof why, "spec.workers lowered to %d", s->workers);
        resize_in_place(c, g, idx, n, idx, kept, "Shrank", why);
        for (size_t i = 0; i < g->npods; i++) {
            const PodView *p = &g->pods[i];
            if (p->attempt == g->attempt && p->role == ROLE_WORKER && p->index >= s->workers &&
                !p->terminating && p->name)
                add_action(c, ACTION_DELETE_POD, p->name, NULL);
        }
        return 1;
    }
    /* The slots outside the ring: a pod of one that runs now joins it (a dropped
     * replacement, or a worker made for a raised spec.workers by create_missing). */
    for (int slot = 0, k = 0; slot < nslots; slot++) {
        if (k < n && idx[k] == slot) {
            k++;
            continue;
        }
        const PodView *p = g->cur[slot];
        if (!p || !is_active(p) || strcmp(p->phase, "Running") != 0) continue;
        int grown[MAX_MEMBERS], m = 0, j = 0;
        while (j < n && idx[j] < slot)
            grown[m++] = idx[j++];
        grown[m++] = slot;
        while (j < n)
            grown[m++] = idx[j++];
        char why[320];
        snprintf(why, sizeof why, "pod %s runs", p->name);
        resize_in_place(c, g, idx, n, grown, m, "Grew", why);
        return 1;
    }
    /* A member whose replacement cannot run leaves the ring while minWorkers stay. */
    char why[450];
    int left[MAX_MEMBERS], m = 0;
    int stuck = replacement_stuck(c, g, idx, n, why, sizeof why);
    if (stuck >= 0) {
        for (int j = 0; j < n; j++)
            if (idx[j] != stuck) left[m++] = idx[j];
        /* the chief task's slot is no worker: its loss leaves them all */
        if (member_workers(s, left, m) < s->min_workers) return 0;
        resize_in_place(c, g, idx, n, left, m, "Shrank", why);
        return 1;
    }
    /* An attempt that starts with workers the scheduler cannot place starts without them
     * while the placed ones number minWorkers; they join once they run (above). */
    if (!start_unplaced(c, g, idx, n, left, &m, why, sizeof why) ||
        member_workers(s, left, m) < s->min_workers)
        return 0;
    resize_in_place(c, g, idx, n, left, m, "Shrank", why);
    return 1;
}

/* "exited with code N: <why>", or for a pod whose init container failed "init container
 * C exited with code N: <why>", into out; <why> at most 300 bytes, so that it fits the
 * callers' 450 whole. */
static void exit_text(const PodView *p, char *out, size_t n)
{
    char text[301];
    failure_text(p->message, text, sizeof text);
    if (p->init_container)
        snprintf(out, n, "init container %.63s exited with code %d%s%s", p->init_container,
                 p->exit_code, *text ? ": " : "", text);
    else
        snprintf(out, n, "exited with code %d%s%s", p->exit_code, *text ? ": " : "", text);
}

/* What became of a chief or worker slot, for live recovery: fine (running, starting,
 * done, or its replacement yet to be made), lost (its pod deleted, disrupted or gone,
 * or the trainer failed with a retryable code, 75 or >= 128, and did not give up on a
 * recovery), or beyond live recovery (any other failure, or restartPolicy Never). A
 * lost slot's cause goes into why, and *failed says whether the trainer failed. */
typedef enum { SLOT_FINE, SLOT_LOST, SLOT_BEYOND } SlotLoss;
static SlotLoss slot_loss(const Ctx *c, const Group *g, int slot, char *why, size_t n, int *failed)
{
    const PodView *p = g->cur[slot];
    *failed = 0;
    if (!p) {
        const cJSON *e = slot_entry(c, slot);
        if (!g->launched || g->done[slot] || (e && !jsonx_bool(e, "launched", 0)) ||
            (g->outside && g->outside[slot]))
            return SLOT_FINE;
        snprintf(why, n, "its pod is gone");
        return SLOT_LOST;
    }
    if (strcmp(p->phase, "Succeeded") == 0) return SLOT_FINE;
    /* Kueue stops every pod of the group (preemption, eviction): the group restarts,
     * queued again. */
    if (p->kueue_stopped) return SLOT_BEYOND;
    if (p->disruption) {
        snprintf(why, n, "%s", p->disruption);
        return SLOT_LOST;
    }
    if (strcmp(p->phase, "Failed") != 0) return SLOT_FINE;
    /* Deleted, and the trainer stopped on the SIGTERM: a disruption (the object stays
     * while a finalizer, Kueue's, holds it). */
    if (p->terminating) {
        snprintf(why, n, "it was deleted");
        return SLOT_LOST;
    }
    int code = p->exit_code;
    if (c->spec.restart_policy == RESTART_NEVER || !(code == 75 || code >= 128) ||
        recovery_timed_out(p->message))
        return SLOT_BEYOND;
    exit_text(p, why, n);
    *failed = 1;
    return SLOT_LOST;
}

/* Whether the slot's pod is being replaced: its replacement not yet made, or made and
 * not yet running. */
static int slot_replacing(const Ctx *c, const Group *g, int slot)
{
    const cJSON *e = slot_entry(c, slot);
    const PodView *p = g->cur[slot];
    return e && (!jsonx_bool(e, "launched", 0) || (p && strcmp(p->phase, "Running") != 0));
}

/* A live replacement that can never rejoin: a chief or worker finished (exit 0) before
 * the replacement of another slot started, as when a pod is lost after the last step's
 * all-reduce and its peers go on to finish. The replacement would wait out its
 * rendezvous timeout for peers that are gone, so the group restarts at once and resumes
 * from the newest checkpoint (ReplacementStranded, counted in neither counter: the loss
 * was counted when the pod was replaced). A replacement that started before its peers
 * finished may have joined them and is left to finish; if it had not, it exits 75 after
 * its rendezvous timeout and the failure decision restarts the group. A replacement
 * an elastic job left out of its members strands no one. */
static int decide_stranded(Ctx *c, const Group *g)
{
    const JobSpec *s = &c->spec;
    if (!desired_live_recovery(s) || !g->launched || !g->nsucceeded) return 0;
    int nslots = s->roles[ROLE_CHIEF].replicas + s->workers;
    for (int i = 0; i < nslots; i++) {
        const PodView *p = g->cur[i];
        /* A slot an elastic job left out is waited for by no one. */
        if (g->done[i] || !slot_entry(c, i) || (g->outside && g->outside[i])) continue;
        double started = p ? p->started_at : 0;
        for (int j = 0; j < nslots; j++) {
            const PodView *q = g->cur[j];
            if (j == i || !g->done[j]) continue;
            /* A peer done by status alone (its pod gone) finished before now. */
            if (started > 0 && (!q || !q->finished_at || started <= q->finished_at)) continue;
            Role r, rq;
            int ri, rqi;
            char name[300], msg[512];
            jobspec_slot_role(s, i, &r, &ri);
            jobspec_slot_role(s, j, &rq, &rqi);
            desired_pod_name(s->name, r, ri, name, sizeof name);
            snprintf(msg, sizeof msg,
                     "the replacement of pod %s cannot rejoin: %s %d completed before it started",
                     name, jobspec_role_name(rq), rqi);
            restart(c, "ReplacementStranded", NULL, msg, g->pods, g->npods);
            return 1;
        }
    }
    return 0;
}

/* Live recovery (desired_live_recovery): exactly one chief or worker pod of the launched
 * attempt lost while no other is failed, lost or still being replaced, and none has
 * finished: only that pod is replaced, under its name, in the same attempt and PodGroup,
 * while the others keep running. Status first (restarts.replaced, the cause's counter,
 * status.replacedPods), then the event and the deletion of the old object; the new one
 * is made by create_missing once the name is free. A failure counts against
 * backoffLimit: once that is reached the failure decision fails the job. Anything else
 * (two pods lost, a survivor that gave up, a code that is not retried) goes on to the
 * group decisions. */
static int decide_replacement(Ctx *c, const Group *g)
{
    const JobSpec *s = &c->spec;
    if (!desired_live_recovery(s) || !g->launched || g->nsucceeded) return 0;
    int lost = -1, nlost = 0, busy = 0, failed = 0;
    char why[450] = "";
    for (int i = 0; i < s->npods; i++) {
        Role r;
        int ri, f;
        char w[sizeof why];
        jobspec_slot_role(s, i, &r, &ri);
        if (r != ROLE_CHIEF && r != ROLE_WORKER) continue;
        SlotLoss l = slot_loss(c, g, i, w, sizeof w, &f);
        if (l == SLOT_BEYOND) return 0;
        if (l == SLOT_LOST) {
            nlost++, lost = i, failed = f;
            memcpy(why, w, sizeof why);
        } else if (slot_replacing(c, g, i)) {
            busy = 1;
        }
    }
    if (nlost != 1 || busy) return 0;
    if (failed && jsonx_int(c->status, "restarts.application", 0) >= s->backoff_limit) return 0;
    /* At the limit, the disruption decision fails the job. */
    if (!failed && jsonx_int(c->status, "restarts.consecutiveDisruptions", 0) >= DISRUPTION_LIMIT)
        return 0;

    Role r;
    int ri;
    char name[300];
    jobspec_slot_role(s, lost, &r, &ri);
    desired_pod_name(s->name, r, ri, name, sizeof name);
    cJSON *rs = jsonx_ensure_obj(c->status, "restarts");
    if (!rs || replaced_add(c->status, name)) {
        c->nomem = 1;
        return 1;
    }
    const char *counters[] = {"replaced", failed ? "application" : "disruption"};
    for (size_t k = 0; k < 2; k++)
        set_num(c, rs, counters[k], (double)(jsonx_int(rs, counters[k], 0) + 1));
    if (!cJSON_GetObjectItemCaseSensitive(rs, "application")) set_num(c, rs, "application", 0);
    if (!cJSON_GetObjectItemCaseSensitive(rs, "disruption")) set_num(c, rs, "disruption", 0);
    if (!failed) count_consecutive_disruption(c);
    emit_status(c);
    event(c, "Normal", "WorkerReplaced", "pod %s replaced; live recovery (%s %d: %s)", name,
          jobspec_role_name(r), ri, why);
    const PodView *p = g->cur[lost];
    if (p && !p->terminating)
        add_action(c,
                   strcmp(p->phase, "Failed") == 0 ? ACTION_DELETE_STOPPED_POD : ACTION_DELETE_POD,
                   p->name, NULL);
    return 1;
}

/* The first chief, worker or ps task disrupted (view_pod says how), or whose pod is
 * gone after launch before it succeeded: the group restarts, counted in
 * restarts.disruption, without backoff. A succeeded task is never a disruption, nor is
 * anything that happens to the evaluator. */
static int decide_disruption(Ctx *c, const Group *g)
{
    const JobSpec *s = &c->spec;
    for (int i = 0; i < s->npods; i++) {
        Role r;
        int ri;
        jobspec_slot_role(s, i, &r, &ri);
        if (r == ROLE_EVALUATOR) continue;
        const PodView *p = g->cur[i];
        const cJSON *e = p ? NULL : slot_entry(c, i);
        /* a replacement to be made, or an elastic job's worker to join */
        int creating = (e && !jsonx_bool(e, "launched", 0)) ||
                       (g->outside && i < member_slots(s) && g->outside[i]);
        const char *why = p                                           ? p->disruption
                          : (g->launched && !g->done[i] && !creating) ? "its pod is gone"
                                                                      : NULL;
        if (!why || (p && strcmp(p->phase, "Succeeded") == 0)) continue;
        char msg[512];
        snprintf(msg, sizeof msg, "%s %d was disrupted: %s", jobspec_role_name(r), ri, why);
        /* Kueue stopping the group is its queueing at work, with its own backoff: not
         * counted toward the limit. */
        if (!(p && p->kueue_stopped)) {
            long long row = jsonx_int(c->status, "restarts.consecutiveDisruptions", 0);
            if (row >= DISRUPTION_LIMIT) {
                char m2[600];
                snprintf(m2, sizeof m2,
                         "%lld disruptions in a row and the group never ran; last: %s", row, msg);
                finish(c, 0, "DisruptionLimitExceeded", m2, g->pods, g->npods, NULL);
                return 1;
            }
            count_consecutive_disruption(c);
        }
        restart(c, "Disruption", "disruption", msg, g->pods, g->npods);
        return 1;
    }
    return 0;
}

/* The first chief, worker or ps task whose program exited non-zero: restartPolicy says
 * whether the code is retried; a retry restarts the group (restarts.application) until
 * backoffLimit, after which the job fails, as it does at once when the code is not
 * retried. A failed evaluator stays failed (status.roles.evaluator.failed). */
static int decide_failure(Ctx *c, const Group *g)
{
    const JobSpec *s = &c->spec;
    for (int i = 0; i < s->npods; i++) {
        Role r;
        int ri;
        jobspec_slot_role(s, i, &r, &ri);
        const PodView *p = g->cur[i];
        if (r == ROLE_EVALUATOR || !p || strcmp(p->phase, "Failed") != 0) continue;
        char msg[512], text[450];
        int code = p->exit_code;
        exit_text(p, text, sizeof text);
        snprintf(msg, sizeof msg, "%s %d %s", jobspec_role_name(r), ri, text);
        int retry = s->restart_policy == RESTART_ON_FAILURE ||
                    (s->restart_policy == RESTART_EXIT_CODE && (code == 75 || code >= 128));
        long long app = jsonx_int(c->status, "restarts.application", 0);
        if (!retry) {
            finish(c, 0,
                   s->restart_policy == RESTART_NEVER ? "WorkerFailed" : "NonRetryableExitCode",
                   msg, g->pods, g->npods, NULL);
        } else if (app >= s->backoff_limit) {
            char m2[600];
            snprintf(m2, sizeof m2, "backoffLimit=%d reached; last: %s", s->backoff_limit, msg);
            finish(c, 0, "BackoffLimitExceeded", m2, g->pods, g->npods, NULL);
        } else {
            restart(c, "WorkerFailed", "application", msg, g->pods, g->npods);
        }
        return 1;
    }
    return 0;
}

/* spec.startupDeadlineSeconds: a chief, worker or ps pod of this attempt still blocked
 * (pod_blocker: unschedulable, an image that cannot be pulled, a missing Secret...) that
 * long after it was created fails the job with the reason, StartupDeadlineExceeded; a
 * blocked pod not yet that old is looked at again when it would be. Not counted as a
 * restart: a restart would not fix it. */
static int pod_blocker(const PodView *p, char *out, size_t n);
static int decide_startup(Ctx *c, const Group *g)
{
    const JobSpec *s = &c->spec;
    if (s->startup_deadline_s < 0) return 0;
    for (int i = 0; i < s->npods; i++) {
        Role r;
        int ri;
        jobspec_slot_role(s, i, &r, &ri);
        const PodView *p = g->cur[i];
        char why[600], msg[800];
        double created;
        if (r == ROLE_EVALUATOR || g->done[i] || !pod_blocker(p, why, sizeof why) ||
            clock_parse_rfc3339(jsonx_str(p->pod, "metadata.creationTimestamp"), &created) != 0)
            continue;
        double at = created + (double)s->startup_deadline_s;
        if (c->obs->now < at) {
            requeue(c, at - c->obs->now);
            continue;
        }
        snprintf(msg, sizeof msg, "not started within startupDeadlineSeconds=%lld: %s",
                 s->startup_deadline_s, why);
        finish(c, 0, "StartupDeadlineExceeded", msg, g->pods, g->npods, NULL);
        return 1;
    }
    return 0;
}

/* Deletes the pods that are not their index's pod in this attempt (older attempts', a
 * second claim on an index, bad labels): their names block the new ones. Returns 1 when
 * new pods must wait: such a pod is there, or an older job's of this name (foreign), or
 * its Service or NetworkPolicy, which the garbage collector removes before ours are
 * made. */
static int delete_stale_pods(Ctx *c, const Group *g, int foreign)
{
    const Observed *o = c->obs;
    const JobSpec *s = &c->spec;
    int blocked = foreign || (o->service && owned_by_other(o->service, s->uid)) ||
                  (o->network_policy && owned_by_other(o->network_policy, s->uid));
    for (size_t i = 0; i < g->npods; i++) {
        const PodView *p = &g->pods[i];
        if (p->attempt == g->attempt && p->slot >= 0 && g->cur[p->slot] == p) continue;
        /* The old object of a pod replaced in a Kueue group blocks nothing once it has
         * failed: its replacement has another name, and Kueue takes its finalizer off
         * only when it sees the replacement. Before (running, or succeeded) Kueue would
         * count the replacement in excess of the group and delete it. */
        if (!(p->stale && p->kueue && p->attempt == g->attempt && strcmp(p->phase, "Failed") == 0))
            blocked = 1;
        if (!p->terminating && p->name) add_action(c, ACTION_DELETE_POD, p->name, NULL);
    }
    return blocked;
}

/* Returns 1, and requeues for its end, while the backoff of the latest restart runs
 * (restart_delay of the reason of `restarting`, the Restarting condition when True),
 * counted from restarts.lastRestartTime (else the condition's time). */
static int backoff_pending(Ctx *c, const cJSON *restarting)
{
    double since, delay = restarting ? restart_delay(c, jsonx_str(restarting, "reason")) : 0;
    if (delay <= 0) return 0;
    if (clock_parse_rfc3339(jsonx_str(c->status, "restarts.lastRestartTime"), &since) != 0 &&
        clock_parse_rfc3339(jsonx_str(restarting, "lastTransitionTime"), &since) != 0)
        return 0;
    /* Status times have one-second resolution: count from the end of that second so that
     * the delay is never cut short. */
    double at = since + 1 + delay;
    if (c->obs->now >= at) return 0;
    requeue(c, at - c->obs->now);
    return 1;
}

/* Creates what the pods need and is missing: the Secret, the Service, the NetworkPolicy
 * (deleted instead when spec.networkPolicy is off). Returns the Secret's name, or NULL
 * while it is being created: then *blocked is set, the pods wait for it. */
static const char *create_group_objects(Ctx *c, int *blocked)
{
    const Observed *o = c->obs;
    const JobSpec *s = &c->spec;
    char name[300];
    /* The ring key's Secret, created once per job under a name the API server generates:
     * a Secret made in advance by someone else (who would know the key) can never be
     * taken for the job's. Its name reaches status in this pass. */
    const char *secret = jsonx_str(c->status, "secretName");
    if (!secret || !*secret) {
        desired_secret_prefix(s->name, name, sizeof name);
        add_action(c, ACTION_CREATE_SECRET, name, desired_secret(s, o->ring_key));
        set_str(c, "secretName", "");
        secret = NULL;
        *blocked = 1;
    }
    if (!o->service) {
        desired_service_name(s->name, name, sizeof name);
        add_action(c, ACTION_CREATE_SERVICE, name, desired_service(s));
    }
    /* The policy goes before the pods, so that no worker runs unprotected. */
    if (s->network_policy && !o->network_policy) {
        desired_service_name(s->name, name, sizeof name);
        add_action(c, ACTION_CREATE_NETWORK_POLICY, name, desired_network_policy(s));
    } else if (!s->network_policy && o->network_policy &&
               !owned_by_other(o->network_policy, s->uid)) {
        add_action(c, ACTION_DELETE_NETWORK_POLICY, jsonx_str(o->network_policy, "metadata.name"),
                   NULL);
    }
    return secret;
}

/* An elastic job's pod of slot `slot` names the members and itself (a worker joining
 * them, or a member's replacement). Returns 0, or -ENOMEM. */
static int elastic_pod_members(Ctx *c, const Group *g, int slot, cJSON *pod)
{
    int n = member_slots(&c->spec), m = 0, idx[MAX_MEMBERS];
    for (int i = 0; i < n && m < MAX_MEMBERS; i++)
        if (!g->outside[i] || i == slot) idx[m++] = i;
    char *list = members_text(c, g, idx, m);
    int rc = list ? desired_pod_set_members(pod, list) : -ENOMEM;
    free(list);
    return rc;
}

/* Creates the pod of each slot that has none and has not succeeded, unless blocked;
 * with `group`, the attempt's PodGroup goes first (the previous attempt's is deleted)
 * and every pod but the evaluator joins it, except that a queued attempt's group is left
 * to group_after_admission (*deferred set). Counts into *present the slots with a pod
 * or done, into *running those whose pod runs (not done) or is a failed evaluator
 * (which stays so), and into created[role] the pods created. Returns how many were
 * created. */
static int create_pods(Ctx *c, const Group *g, const char *secret, const char *group, int blocked,
                       int *present, int *running, int created[ROLE_COUNT], int *deferred)
{
    const JobSpec *s = &c->spec;
    /* An elastic job's pods name the attempt's cluster, not a lowered spec.workers. */
    JobSpec cluster;
    const JobSpec *made_for = s;
    if (g->outside && g->cluster_workers > s->workers) {
        cluster = *s;
        cluster.workers = g->cluster_workers;
        cluster.roles[ROLE_WORKER].replicas = g->cluster_workers;
        made_for = &cluster;
    }
    int total = 0, group_made = 0;
    for (int i = 0; i < s->npods; i++) {
        const PodView *p = g->cur[i];
        Role r;
        int ri;
        jobspec_slot_role(s, i, &r, &ri);
        if (p || g->done[i]) {
            (*present)++;
            if (p && !g->done[i] &&
                ((is_active(p) && strcmp(p->phase, "Running") == 0) ||
                 (r == ROLE_EVALUATOR && strcmp(p->phase, "Failed") == 0)))
                (*running)++;
            continue;
        }
        if (blocked) continue;
        cJSON *pod = desired_pod(made_for, &c->cfg->desired, secret, r, ri, g->attempt);
        /* A pod replaced inside the attempt joins the group its first pods made. */
        cJSON *e = slot_entry(c, i);
        if (pod && group && desired_in_gang(r) && !group_made && !e) {
            delete_pod_group(c, g->attempt - 1);
            if (desired_pod_queued(pod))
                *deferred = 1;
            else
                add_action(c, ACTION_CREATE_POD_GROUP, group,
                           desired_pod_group(s, g->attempt, gang_api_version(c->obs->gang_api)));
            group_made = 1;
        }
        /* A replacement carries its number, and its entry says it was made. */
        if (pod && ((group && desired_in_gang(r) && desired_pod_join_group(pod, group)) ||
                    (g->outside && (r == ROLE_CHIEF || r == ROLE_WORKER) &&
                     elastic_pod_members(c, g, i, pod)) ||
                    (e && (desired_pod_set_replacement(pod, jsonx_int(e, "replacement", 1)) ||
                           !jsonx_set_bool(e, "launched", 1))))) {
            cJSON_Delete(pod);
            pod = NULL;
        }
        if (!pod) {
            c->nomem = 1;
            break;
        }
        add_action(c, ACTION_CREATE_POD, jsonx_str(pod, "metadata.name"), pod);
        created[r]++;
        total++;
        (*present)++;
    }
    return total;
}

/* "workers" for a job of workers only, else "pods": for messages. */
static const char *pods_word(const JobSpec *s)
{
    return s->npods == s->workers ? "workers" : "pods";
}

/* Writes down `created` (> 0) new pods, per role in by_role: an event, startTime on the
 * first launch (the deadline counts from then), the Created condition, the active
 * counts. */
static void record_created(Ctx *c, const Group *g, int created, const int by_role[ROLE_COUNT])
{
    const JobSpec *s = &c->spec;
    char msg[512];
    event(c, "Normal", "CreatedWorkers", "created %d %spod%s (attempt %lld)", created,
          s->npods == s->workers ? "worker " : "", created == 1 ? "" : "s", g->attempt);
    if (!g->started) {
        set_str(c, "startTime", c->now_str);
        if (s->active_deadline_s >= 0) requeue(c, (double)s->active_deadline_s);
    }
    snprintf(msg, sizeof msg, "created %d %s", s->npods,
             s->npods == s->workers ? "worker pods" : "pods");
    set_condition(c, "Created", 1, "PodsCreated", msg);
    /* The pods created here are active (Pending) once this status is written, so
     * the next pass, which observes them, need not write again. */
    cJSON *w = jsonx_ensure_obj(c->status, "workers");
    if (!w)
        c->nomem = 1;
    else
        set_num(c, w, "active", (double)(jsonx_int(w, "active", 0) + created));
    for (Role r = 0; r < ROLE_COUNT && s->npods != s->workers; r++) {
        if (!by_role[r]) continue;
        cJSON *o = jsonx_ensure_obj(c->status, "roles");
        o = o ? jsonx_ensure_obj(o, jobspec_role_name(r)) : NULL;
        if (!o)
            c->nomem = 1;
        else
            set_num(c, o, "active", (double)(jsonx_int(o, "active", 0) + by_role[r]));
    }
}

/* The minCount of the attempt's PodGroup `group` as made or last patched, which the
 * GangScheduling condition records ("(PodGroup <group>, <version>, minCount N"), or -1
 * when it names no group of that name made (none yet, one waiting for Kueue's admission,
 * another attempt's). Read before gang_condition rewrites it. */
static int gang_min_made(const Ctx *c, const char *group)
{
    const char *reason = condition_reason(c->status, "GangScheduling");
    const char *msg = condition_str(c->status, "GangScheduling", "message");
    char mark[320];
    if (!reason || strcmp(reason, "PodGroupCreated") != 0 || !msg) return -1;
    snprintf(mark, sizeof mark, "(PodGroup %s, ", group);
    const char *p = strstr(msg, mark);
    p = p ? strstr(p + strlen(mark), ", minCount ") : NULL;
    if (!p) return -1;
    p += strlen(", minCount ");
    char *end;
    long v = strtol(p, &end, 10);
    return end > p && v >= 1 && v <= INT_MAX ? (int)v : -1;
}

/* The GangScheduling condition, written when an attempt's pods are created and when its
 * group's minCount follows the spec: True naming the PodGroup and its minCount (reason
 * PodGroupAfterAdmission while a queued attempt's group waits for Kueue, `deferred`);
 * False, with a Warning event when the reason is new, where the cluster has no
 * PodGroups; False when spec.gangScheduling was turned off (only if the condition is
 * there). A group made in v1alpha2 keeps the minCount it was made with (immutable there):
 * the condition says it, and that the spec's takes effect at the next attempt's group. */
static void gang_condition(Ctx *c, const Group *g, const char *group, int deferred)
{
    const JobSpec *s = &c->spec;
    /* Read before set_condition replaces the string. */
    const char *old = condition_reason(c->status, "GangScheduling");
    int present = old != NULL, said = old && strcmp(old, "GangSchedulingUnavailable") == 0;
    char msg[512], who[160], later[160] = "";
    if (group) {
        int size = desired_gang_size(s), want = desired_gang_min(s), has = want;
        int made = gang_min_made(c, group);
        if (made >= 0 && made != want && c->obs->gang_api != GANG_API_V1BETA1) {
            has = made;
            snprintf(later, sizeof later,
                     "; minCount %d from the spec takes effect at the next attempt's group "
                     "(minCount cannot change in %s)",
                     want, gang_api_version(c->obs->gang_api));
        }
        const char *word = s->npods == s->workers ? "worker pods" : "chief, worker and ps pods";
        if (has >= size)
            snprintf(who, sizeof who,
                     "the %d %s of attempt %lld are scheduled all together or "
                     "not at all",
                     size, word, g->attempt);
        else
            snprintf(who, sizeof who,
                     "at least %d of the %d %s of attempt %lld are scheduled "
                     "together, or none (spec.elastic.minWorkers)",
                     has, size, word, g->attempt);
        snprintf(msg, sizeof msg, "%s (PodGroup %s, %s, minCount %d%s)%s", who, group,
                 gang_api_version(c->obs->gang_api), has,
                 deferred ? "; made once Kueue has admitted them all" : "", later);
        set_condition(c, "GangScheduling", 1,
                      deferred ? "PodGroupAfterAdmission" : "PodGroupCreated", msg);
    } else if (s->gang_scheduling && c->obs->gang_api == GANG_API_ABSENT) {
        set_condition(c, "GangScheduling", 0, "GangSchedulingUnavailable",
                      GANG_UNAVAILABLE_MESSAGE);
        if (!said) event(c, "Warning", "GangSchedulingUnavailable", "%s", GANG_UNAVAILABLE_MESSAGE);
    } else if (!s->gang_scheduling && present) {
        set_condition(c, "GangScheduling", 0, "GangSchedulingDisabled",
                      "spec.gangScheduling is false: the pods are scheduled one by one");
    }
}

/* The attempt's PodGroup, made in an earlier pass, follows the spec's minCount
 * (desired_gang_min: an elastic job's minWorkers changed, or spec.elastic) where the API
 * lets it: in scheduling.k8s.io/v1beta1 a merge patch of minCount, before the status
 * write whose GangScheduling condition records the new one (a pass stopped between
 * them patches again, to the same value). In v1alpha2 the group's policy is immutable
 * and cannot be made anew while its pods run (the pods' group name is immutable too):
 * it keeps its minCount until the next attempt's group, and the condition says so, or
 * stops saying so once the spec asks for the group's minCount again. */
static void gang_follow_min(Ctx *c, const Group *g, const char *group)
{
    int made = gang_min_made(c, group), want = desired_gang_min(&c->spec);
    if (made < 0) return;
    if (made != want && c->obs->gang_api == GANG_API_V1BETA1) {
        cJSON *patch = cJSON_CreateObject();
        cJSON *gang = jsonx_ensure_obj(patch, "spec.schedulingPolicy.gang");
        if (!gang || !jsonx_set_num(gang, "minCount", want)) {
            cJSON_Delete(patch);
            c->nomem = 1;
            return;
        }
        add_action(c, ACTION_PATCH_POD_GROUP, group, patch);
    }
    gang_condition(c, g, group, 0);
}

/* The PodGroup of a queued attempt, made once Kueue has admitted the attempt: every pod
 * that must run together exists and none carries a scheduling gate any more. Made with
 * the pods, the group let the scheduler try it as soon as Kueue had lifted the first
 * pod's gate (it lifts them one by one): that pod failed the gang's quorum, was written
 * Unschedulable and backed off until the others came (bench-gang-kueue). A pod without
 * its group waits in the scheduler's queue (PreEnqueue) and all of them are tried
 * together once it appears. The condition PodGroupCreated naming the group says it was
 * made; before that status is written a pass may post it again, which 409 answers. */
static void group_after_admission(Ctx *c, const Group *g, const char *group)
{
    const JobSpec *s = &c->spec;
    char mark[320];
    snprintf(mark, sizeof mark, "(PodGroup %s,", group);
    const char *reason = condition_reason(c->status, "GangScheduling");
    const char *msg = condition_str(c->status, "GangScheduling", "message");
    if (reason && strcmp(reason, "PodGroupCreated") == 0 && msg && strstr(msg, mark)) return;
    int queued = 0;
    for (int i = 0; i < s->npods; i++) {
        Role r;
        int ri;
        jobspec_slot_role(s, i, &r, &ri);
        if (!desired_in_gang(r)) continue;
        const PodView *p = g->cur[i];
        /* Missing, gated, or placed already (a group made by an earlier operator). */
        if (g->done[i] || !p || !is_active(p) || p->replacement ||
            cJSON_GetArraySize(jsonx_arr(p->pod, "spec.schedulingGates")) > 0 ||
            jsonx_str(p->pod, "spec.nodeName") ||
            !jsonx_str(p->pod, "spec.schedulingGroup.podGroupName"))
            return;
        queued |= p->kueue;
    }
    if (!queued) return;
    add_action(c, ACTION_CREATE_POD_GROUP, group,
               desired_pod_group(s, g->attempt, gang_api_version(c->obs->gang_api)));
    gang_condition(c, g, group, 0);
}

/* The scheduler's message when the pod's PodScheduled condition is False for reason
 * Unschedulable or SchedulerError, else NULL; *error says which (1: SchedulerError).
 * Kubernetes v1.37.2's scheduler reports some failures of a gang member that it used to
 * call Unschedulable (a missing PersistentVolumeClaim) as SchedulerError, in its group
 * cycle's words ("error in \"DynamicResources\" PodGroupPostFilter plugins: not found"):
 * the pod waits all the same, and the job says so with what the scheduler said. */
static const char *unschedulable_message(const cJSON *pod, int *error)
{
    const cJSON *it;
    cJSON_ArrayForEach(it, jsonx_arr(pod, "status.conditions"))
    {
        const char *t = jsonx_str(it, "type"), *st = jsonx_str(it, "status");
        const char *reason = jsonx_str(it, "reason"), *m = jsonx_str(it, "message");
        if (!t || !st || !reason || strcmp(t, "PodScheduled") != 0 || strcmp(st, "False") != 0)
            continue;
        *error = strcmp(reason, "SchedulerError") == 0;
        if (*error || strcmp(reason, "Unschedulable") == 0)
            return m && *m ? m : "the scheduler gave no reason";
    }
    return NULL;
}

/* Whether a scheduler message is only a gang's quorum count ("minCount (2) cannot be
 * satisfied: 0 scheduled, 1 remaining"): Kubernetes v1.37's group cycle stops at the
 * first member that does not fit, gives that one the cause ("Insufficient cpu") and the
 * others only the count, in whichever order it tried them. A job says the cause. */
static int quorum_only(const char *m)
{
    return m && strncmp(m, "minCount (", 10) == 0 &&
           (strstr(m, "cannot be satisfied") || strstr(m, "not yet satisfied"));
}

/* The Scheduled condition, over this attempt's pods that must run together (all but the
 * evaluator): False while one of them is Pending and the scheduler found no place for
 * it, with the scheduler's words ("0/4 pods schedulable as a group: 0/1 nodes are
 * available: 1 Insufficient cpu."); True again once every one is placed (only if the
 * condition is there: a job scheduled at once never gets it). */
static void scheduled_condition(Ctx *c, const Group *g)
{
    const JobSpec *s = &c->spec;
    int n = 0, placed = 0, gang = 0, error = 0;
    const char *why = NULL;
    for (int i = 0; i < s->npods; i++) {
        Role r;
        int ri;
        jobspec_slot_role(s, i, &r, &ri);
        if (!desired_in_gang(r)) continue;
        n++;
        const PodView *p = g->cur[i];
        if (g->done[i] ||
            (p && (strcmp(p->phase, "Pending") != 0 || jsonx_str(p->pod, "spec.nodeName") ||
                   pod_condition(p->pod, "PodScheduled")))) {
            placed++;
            continue;
        }
        if (!p) continue;
        if (jsonx_str(p->pod, "spec.schedulingGroup.podGroupName")) gang = 1;
        int e = 0;
        const char *m = unschedulable_message(p->pod, &e);
        if (m && (!why || (quorum_only(why) && !quorum_only(m)))) why = m, error = e;
    }
    char msg[512];
    if (why) {
        snprintf(msg, sizeof msg,
                 gang ? "%d/%d pods schedulable as a group: %s%.400s"
                      : "%d/%d pods scheduled, the others unschedulable: %s%.400s",
                 placed, n, error ? "scheduler error: " : "", why);
        set_condition(c, "Scheduled", 0, gang ? "WaitingForGang" : "Unschedulable", msg);
    } else if (placed == n && condition_reason(c->status, "Scheduled")) {
        snprintf(msg, sizeof msg, "all %d pods that must run together are scheduled", n);
        set_condition(c, "Scheduled", 1, "AllPodsScheduled", msg);
    }
}

/* Waiting reasons of a container that pass on their own: the kubelet is starting it. */
static int waiting_passes(const char *reason)
{
    return !reason || strcmp(reason, "ContainerCreating") == 0 ||
           strcmp(reason, "PodInitializing") == 0;
}

/* What keeps a Pending pod from starting, into out: the scheduler's words when it found no
 * place ("pod P is unschedulable: ..."), else a container's waiting reason that does not
 * pass on its own ("pod P: container C: ErrImagePull: ..."). Returns 1 when something
 * does, 2 when that is only a gang's quorum count (quorum_only), 0 when the pod is not
 * Pending or only starting. */
static int pod_blocker(const PodView *p, char *out, size_t n)
{
    if (!p || !p->name || strcmp(p->phase, "Pending") != 0) return 0;
    int error = 0;
    const char *why = unschedulable_message(p->pod, &error);
    if (why) {
        snprintf(out, n, "pod %s is unschedulable: %s%.400s", p->name,
                 error ? "scheduler error: " : "", why);
        return quorum_only(why) ? 2 : 1;
    }
    static const char *const lists[] = {"status.initContainerStatuses", "status.containerStatuses"};
    for (size_t k = 0; k < sizeof lists / sizeof *lists; k++) {
        const cJSON *cs;
        cJSON_ArrayForEach(cs, jsonx_arr(p->pod, lists[k]))
        {
            const cJSON *w = jsonx_obj(cs, "state.waiting");
            const char *reason = jsonx_str(w, "reason"), *m = jsonx_str(w, "message");
            if (!w || waiting_passes(reason)) continue;
            snprintf(out, n, "pod %s: container %s: %s%s%.400s", p->name,
                     jsonx_str(cs, "name") ? jsonx_str(cs, "name") : "?", reason,
                     m && *m ? ": " : "", m ? m : "");
            return 1;
        }
    }
    return 0;
}

/* The length of "pod <name>" at the start of a pod_blocker message, to tell whether the
 * blocked pod changed. */
static size_t blocker_pod_len(const char *msg)
{
    size_t i = 4;
    if (!msg || strncmp(msg, "pod ", 4) != 0) return 0;
    while (msg[i] && msg[i] != ' ' && msg[i] != ':')
        i++;
    return i;
}

/* While the job's pods are not all running: the first reason one of them (chief, worker
 * or ps, in slot order) cannot start goes into Running=False/PodsWaiting, passing over a
 * gang's bare quorum count for a later pod's cause (quorum_only), with a Warning event
 * when the blocked pod changes; once none is blocked any more the condition says the
 * pods are starting. */
static void waiting_condition(Ctx *c, const Group *g)
{
    const JobSpec *s = &c->spec;
    char msg[600] = "", next[600];
    int found = 0; /* pod_blocker's answer for msg */
    for (int i = 0; i < s->npods && found != 1; i++) {
        Role r;
        int ri;
        jobspec_slot_role(s, i, &r, &ri);
        if (r == ROLE_EVALUATOR || g->done[i]) continue;
        int b = pod_blocker(g->cur[i], next, sizeof next);
        if (b && (!found || b == 1)) found = b, snprintf(msg, sizeof msg, "%s", next);
    }
    const char *old = condition_reason(c->status, "Running");
    int was = old && strcmp(old, "PodsWaiting") == 0;
    if (*msg) {
        const char *om = condition_str(c->status, "Running", "message");
        size_t l = blocker_pod_len(msg);
        int same = was && om && blocker_pod_len(om) == l && strncmp(om, msg, l) == 0;
        if (!same) event(c, "Warning", "PodsWaiting", "%s", msg);
        set_condition(c, "Running", 0, "PodsWaiting", msg);
    } else if (was) {
        set_condition(c, "Running", 0, "PodsStarting",
                      "no pod is blocked any more; waiting for them to run");
    }
}

/* The attempt's PodGroup name is taken by an object that is not the job's: no pod is
 * made (they would join a group someone else sized), GangScheduling says why, with a
 * Warning event when that is new, and the job is looked at again in 30 s (PodGroups are
 * not watched). */
static void pod_group_conflict(Ctx *c)
{
    const char *old = condition_reason(c->status, "GangScheduling");
    int said = old && strcmp(old, "PodGroupConflict") == 0;
    set_condition(c, "GangScheduling", 0, "PodGroupConflict", c->obs->pod_group_conflict);
    if (!said) event(c, "Warning", "PodGroupConflict", "%s", c->obs->pod_group_conflict);
    requeue(c, 30);
}

/* Progress, when no decision settled the pass: pods of older attempts go first (their
 * names block the new ones), then what is missing is created, and the phase is set:
 * Running once every index not done runs. */
static void create_missing(Ctx *c, const Group *g, int foreign)
{
    const JobSpec *s = &c->spec;
    const cJSON *restarting = true_condition(c->status, "Restarting");
    /* A running job stays Running while one of its pods is replaced. */
    const char *phase = jsonx_str(c->status, "phase");
    int growing = 0;
    for (int i = 0; g->outside && i < member_slots(s); i++)
        growing |= g->outside[i];
    int live_replacing = phase && strcmp(phase, "Running") == 0 &&
                         (cJSON_GetArraySize(jsonx_at(c->status, "replacedPods")) > 0 || growing);
    /* A resize's patches that a stopped pass left undone. */
    int idx[MAX_MEMBERS];
    int nmembers = members_parse(jsonx_str(c->status, "members"), idx, MAX_MEMBERS);
    if (desired_elastic(s) && nmembers > 0) members_patch(c, g, idx, nmembers);
    int blocked = delete_stale_pods(c, g, foreign);
    blocked |= backoff_pending(c, restarting);
    const char *secret = create_group_objects(c, &blocked);
    char group[300];
    int gang = gang_group(c, g->attempt, group, sizeof group);
    if (gang && c->obs->pod_group_conflict) {
        pod_group_conflict(c);
        blocked = 1;
    } else if (gang) {
        gang_follow_min(c, g, group);
    }
    int present = 0, running = 0, by_role[ROLE_COUNT] = {0};
    int deferred = 0;
    int created = create_pods(c, g, secret, gang ? group : NULL, blocked, &present, &running,
                              by_role, &deferred);
    if (created) {
        record_created(c, g, created, by_role);
        gang_condition(c, g, gang ? group : NULL, deferred);
    } else if (gang && !blocked) {
        group_after_admission(c, g, group);
    }
    scheduled_condition(c, g);
    waiting_condition(c, g);
    if (present == s->npods && !g->launched && !jsonx_set_bool(c->status, "launched", 1))
        c->nomem = 1;

    if (present == s->npods && running > 0 && running + g->nsucceeded == s->npods) {
        char msg[512];
        set_str(c, "phase", "Running");
        snprintf(msg, sizeof msg, "all %d %s are running", s->npods, pods_word(s));
        set_condition(c, "Running", 1, "AllWorkersRunning", msg);
        clear_condition(c, "Restarting", "AllWorkersRunning", msg);
        /* The group ran: disruptions count from zero again. */
        if (jsonx_int(c->status, "restarts.consecutiveDisruptions", 0) > 0)
            set_num(c, jsonx_ensure_obj(c->status, "restarts"), "consecutiveDisruptions", 0);
    } else if (!restarting && !live_replacing) {
        set_str(c, "phase", "Pending");
    }
    emit_status(c);
}

/* A running (or pending) job: the first decision that settles the pass ends it, else
 * the job makes progress. */
static void reconcile_active(Ctx *c, const PodView *v, size_t n, int foreign)
{
    Group g;
    if (group_observe(c, v, n, &g) == 0) {
        int settled = decide_deadline(c, &g) || decide_completion(c, &g) ||
                      decide_queued_resize(c, &g) || decide_elastic(c, &g) ||
                      decide_resize(c, &g) || decide_stranded(c, &g) || decide_replacement(c, &g) ||
                      decide_disruption(c, &g) || decide_failure(c, &g) || decide_startup(c, &g);
        if (!settled) create_missing(c, &g, foreign);
    }
    group_free(&g);
}

/* Pods of the job (an older job's of the same name too: they block the names) whose
 * deletion has not finished force_delete_after_s after their grace period ended: the
 * kubelet that should confirm it is gone, as when a node dies. Without this such a pod
 * blocks the restarted group forever. The rest are looked at again when they are due. */
static void force_delete_stuck(Ctx *c)
{
    const Observed *o = c->obs;
    double after = c->cfg->force_delete_after_s;
    if (after <= 0) return;
    for (size_t i = 0; i < o->npods; i++) {
        const char *name = jsonx_str(o->pods[i], "metadata.name");
        double deadline;
        if (!name || clock_parse_rfc3339(jsonx_str(o->pods[i], "metadata.deletionTimestamp"),
                                         &deadline) != 0)
            continue;
        double at = deadline + after;
        if (o->now < at) {
            requeue(c, at - o->now);
            continue;
        }
        add_action(c, ACTION_FORCE_DELETE_POD, name, NULL);
        const char *node = jsonx_str(o->pods[i], "spec.nodeName");
        event(c, "Warning", "ForceDeleted",
              "pod %s is still terminating %.0f s after its grace period ended (node %s does not "
              "confirm it); deleted it with grace period 0 so that the job can go on",
              name, o->now - deadline, node ? node : "(none)");
    }
}

int reconcile(const ReconcileConfig *cfg, const Observed *obs, Plan *plan, char *err, size_t errlen)
{
    memset(plan, 0, sizeof *plan);
    plan->requeue_after = -1;
    if (!cJSON_IsObject(obs->job) || !jsonx_str(obs->job, "metadata.name")) {
        snprintf(err, errlen, "the TrainingJob object has no metadata.name");
        return -EINVAL;
    }
    if (jsonx_str(obs->job, "metadata.deletionTimestamp")) return 0; /* the GC owns it now */

    Ctx c = {.cfg = cfg, .obs = obs, .plan = plan};
    clock_format_rfc3339(obs->now, c.now_str, sizeof c.now_str);
    const cJSON *old = jsonx_obj(obs->job, "status");
    c.status = old ? cJSON_Duplicate(old, 1) : cJSON_CreateObject();
    PodView *views = calloc(obs->npods + 1, sizeof *views);
    if (!c.status || !views) {
        c.nomem = 1;
        goto out;
    }
    const char *uid = jsonx_str(obs->job, "metadata.uid");
    size_t nviews = 0;
    int foreign = 0;
    for (size_t i = 0; i < obs->npods; i++) {
        view_pod(obs->pods[i], uid, &views[nviews]);
        /* Pods of an older job of the same name are the garbage collector's; they only
         * block their names. */
        if (views[nviews].foreign)
            foreign = 1;
        else
            nviews++;
    }

    char perr[512];
    const char *invalid = NULL;
    if (jobspec_parse(obs->job, &c.spec, perr, sizeof perr) != 0) {
        c.spec.name = jsonx_str(obs->job, "metadata.name");
        invalid = "InvalidSpec";
    } else {
        for (Role r = 0; r < ROLE_COUNT && !invalid; r++) {
            const cJSON *t = c.spec.roles[r].template;
            if ((r != ROLE_WORKER && t == c.spec.template) ||
                podpolicy_check(cfg->template_policy, t, perr, sizeof perr) == 0)
                continue;
            invalid = "TemplateNotAllowed";
            /* The message names spec.template...: name the role's template instead. */
            if (r != ROLE_WORKER && strncmp(perr, "spec.template", 13) == 0) {
                char tmp[sizeof perr + 32];
                snprintf(tmp, sizeof tmp, "spec.%s.%s", jobspec_role_name(r), perr + 5);
                memcpy(perr, tmp, sizeof perr);
                perr[sizeof perr - 1] = 0;
            }
        }
    }
    if (invalid) {
        set_num(&c, c.status, "observedGeneration",
                (double)jsonx_int(obs->job, "metadata.generation", 0));
        if (set_condition(&c, "Invalid", 1, invalid, perr))
            event(&c, "Warning", invalid, "%s", perr);
        if (!jsonx_str(c.status, "phase")) set_str(&c, "phase", "Pending");
        emit_status(&c);
        goto out;
    }
    set_num(&c, c.status, "observedGeneration", (double)c.spec.generation);
    clear_condition(&c, "Invalid", "ValidSpec", "the spec is valid");
    /* An elastic job's global batch is written down before a pod is made with it, so that
     * a later spec.workers re-cuts it rather than changing it (jobspec reads it back). */
    if (desired_elastic(&c.spec) && !jsonx_at(c.status, "globalBatch"))
        set_num(&c, c.status, "globalBatch", (double)c.spec.global_batch);
    long long attempt = jsonx_int(c.status, "attempt", 0);
    for (size_t i = 0; i < nviews; i++) {
        views[i].slot = jobspec_slot(&c.spec, views[i].role, views[i].index);
        const cJSON *e = view_entry(c.status, c.spec.name, &views[i]);
        views[i].stale = e && views[i].attempt == attempt &&
                         views[i].replacement < jsonx_int(e, "replacement", 0);
    }

    const char *phase = jsonx_str(c.status, "phase");
    if (phase && (strcmp(phase, "Succeeded") == 0 || strcmp(phase, "Failed") == 0)) {
        reconcile_finished(&c, views, nviews);
        emit_status(&c);
        goto out;
    }

    if (c.spec.suspend) {
        if (!phase || strcmp(phase, "Suspended") != 0) {
            set_num(&c, c.status, "attempt", (double)(jsonx_int(c.status, "attempt", 0) + 1));
            if (reset_attempt(c.status)) c.nomem = 1;
            set_str(&c, "phase", "Suspended");
            set_condition(&c, "Suspended", 1, "Suspended", "spec.suspend is true");
            clear_condition(&c, "Running", "Suspended", "spec.suspend is true");
            clear_condition(&c, "Restarting", "Suspended", "spec.suspend is true");
            emit_status(&c);
            event(&c, "Normal", "Suspended", "job suspended: deleting its worker pods");
            delete_pods(&c, views, nviews, 0);
            delete_pod_group(&c, jsonx_int(c.status, "attempt", 1) - 1);
        } else {
            emit_status(&c);
            delete_pods(&c, views, nviews, 0);
        }
        goto out;
    }
    if (phase && strcmp(phase, "Suspended") == 0) {
        set_condition(&c, "Suspended", 0, "Resumed", "spec.suspend is false");
        set_str(&c, "phase", "Pending");
        cJSON_DeleteItemFromObjectCaseSensitive(c.status, "startTime");
        event(&c, "Normal", "Resumed", "job resumed: the workers restart from the checkpoint");
    }
    reconcile_active(&c, views, nviews, foreign);
out:
    if (!c.nomem) force_delete_stuck(&c);
    free(views);
    cJSON_Delete(c.status);
    if (c.nomem) {
        snprintf(err, errlen, "out of memory while reconciling");
        return -ENOMEM;
    }
    return 0;
}
