/* tfjob — TFJob to TrainingJob; see tfjob.h. */
#include "tfjob.h"

#include "desired.h"
#include "jobspec.h"
#include "olog.h"
#include "podpolicy.h"
#include "yamljson.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define FAIL(...)                                                                                  \
    do {                                                                                           \
        snprintf(cv->err, cv->errlen, __VA_ARGS__);                                                \
        return -EINVAL;                                                                            \
    } while (0)

/* A TFJob's replica spec, read and made into a TrainingJob role. */
typedef struct Replica {
    const char *key;  /* as written in tfReplicaSpecs ("Worker", "worker") */
    const char *name; /* TensorFlow's: "Chief" (for Master too), "Worker", "PS", "Evaluator" */
    Role role;
    int replicas;
    const char *restart;         /* Never | OnFailure | ExitCode | Always */
    const char *image;           /* owned by owned[0] */
    const cJSON *command, *args; /* args may be NULL */
    cJSON *owned[3];             /* image, command and args, taken out of the template */
    int port;
    cJSON *template; /* owned: container trainer, without image/command/args/tfjob-port */
    char path[128];  /* "spec.tfReplicaSpecs.<key>" */
} Replica;

typedef struct Conv {
    cJSON *warnings;
    char *err;
    size_t errlen;
    int nomem;
} Conv;

/* Appends one formatted warning; a failed allocation is remembered in cv->nomem. */
__attribute__((format(printf, 2, 3))) static void warn(Conv *cv, const char *fmt, ...)
{
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (!cJSON_AddItemToArray(cv->warnings, cJSON_CreateString(line))) cv->nomem = 1;
}

static cJSON *get(const cJSON *o, const char *key)
{
    return cJSON_IsObject(o) ? cJSON_GetObjectItemCaseSensitive(o, key) : NULL;
}

/* Adds a copy of v to o under key, remembering a failed allocation. */
static void put(Conv *cv, cJSON *o, const char *key, const cJSON *v)
{
    cJSON *c = v ? cJSON_Duplicate(v, 1) : NULL;
    if (!o || !c || !cJSON_AddItemToObject(o, key, c)) {
        cJSON_Delete(c);
        cv->nomem = 1;
    }
}

static cJSON *put_obj(Conv *cv, cJSON *o, const char *key)
{
    cJSON *c = o ? cJSON_AddObjectToObject(o, key) : NULL;
    if (!c) cv->nomem = 1;
    return c;
}

/* An optional integer o[key] in [lo, hi] into *out; 0 when absent (*out untouched),
 * 1 when read, -EINVAL naming path.key. */
static int read_int(Conv *cv, const cJSON *o, const char *key, const char *path, long long lo,
                    long long hi, long long *out)
{
    const cJSON *v = get(o, key);
    if (!v || cJSON_IsNull(v)) return 0;
    /* the range first: casting a double beyond long long is undefined */
    if (!cJSON_IsNumber(v) || !(v->valuedouble >= (double)lo && v->valuedouble <= (double)hi) ||
        v->valuedouble != (double)(long long)v->valuedouble)
        FAIL("%s.%s: expected an integer in [%lld, %lld]", path, key, lo, hi);
    *out = (long long)v->valuedouble;
    return 1;
}

/* An optional string o[key] that is one of `allowed`; NULL when absent. */
static int read_enum(Conv *cv, const cJSON *o, const char *key, const char *path,
                     const char *const *allowed, const char **out)
{
    const cJSON *v = get(o, key);
    *out = NULL;
    if (!v || cJSON_IsNull(v)) return 0;
    for (size_t i = 0; cJSON_IsString(v) && allowed[i]; i++)
        if (strcmp(v->valuestring, allowed[i]) == 0) {
            *out = allowed[i];
            return 0;
        }
    char list[256] = "";
    for (size_t i = 0; allowed[i]; i++) {
        strncat(list, i ? ", " : "", sizeof list - strlen(list) - 1);
        strncat(list, allowed[i], sizeof list - strlen(list) - 1);
    }
    FAIL("%s.%s: expected one of %s", path, key, list);
}

/* An optional array of strings o[key]; NULL when absent. */
static int read_strings(Conv *cv, const cJSON *o, const char *key, const char *path,
                        const cJSON **out)
{
    const cJSON *v = get(o, key), *it;
    *out = NULL;
    if (!v || cJSON_IsNull(v)) return 0;
    if (!cJSON_IsArray(v)) FAIL("%s.%s: expected an array of strings", path, key);
    cJSON_ArrayForEach(it, v)
    {
        if (!cJSON_IsString(it)) FAIL("%s.%s: expected an array of strings", path, key);
    }
    *out = v;
    return 0;
}

/* The element of array a whose string "name" is `name`, or NULL. */
static cJSON *by_name(const cJSON *a, const char *name)
{
    cJSON *it;
    if (!cJSON_IsArray(a)) return NULL;
    cJSON_ArrayForEach(it, a)
    {
        const cJSON *n = get(it, "name");
        if (cJSON_IsString(n) && strcmp(n->valuestring, name) == 0) return it;
    }
    return NULL;
}

/* ---- replica specs ------------------------------------------------------------------ */

/* The tensorflow container of r->template: its image, command and args become the role's
 * and its tfjob-port spec.port; what stays is renamed trainer. */
static int take_container(Conv *cv, Replica *r)
{
    char cpath[192];
    cJSON *spec = get(r->template, "spec");
    cJSON *cs = get(spec, "containers");
    if (!cJSON_IsArray(cs))
        FAIL("%s.template.spec.containers: required, with a container named " TFJOB_CONTAINER,
             r->path);
    cJSON *c = by_name(cs, TFJOB_CONTAINER);
    if (!c)
        FAIL("%s.template.spec.containers: no container named " TFJOB_CONTAINER " (the one "
             "the training operator runs and kubetrain runs as " TRAINER_CONTAINER ")",
             r->path);
    if (by_name(cs, TRAINER_CONTAINER))
        FAIL("%s.template.spec.containers: a container is named " TRAINER_CONTAINER ", the "
             "name the " TFJOB_CONTAINER " container takes in the TrainingJob; rename it",
             r->path);
    snprintf(cpath, sizeof cpath, "%s.template.spec.containers[" TFJOB_CONTAINER "]", r->path);
    const cJSON *image = get(c, "image");
    if (!cJSON_IsString(image) || !*image->valuestring)
        FAIL("%s.image: required (the TrainingJob's spec.image)", cpath);
    r->image = image->valuestring;
    if (read_strings(cv, c, "command", cpath, &r->command) ||
        read_strings(cv, c, "args", cpath, &r->args))
        return -EINVAL;
    if (!r->command || cJSON_GetArraySize(r->command) == 0)
        FAIL("%s.command: not set, so the image's entrypoint runs; a TrainingJob runs your "
             "program only with spec.command: write the entrypoint (and its arguments) as "
             "command in the TFJob and convert again",
             cpath);
    r->port = 2222;
    cJSON *ports = get(c, "ports"), *p;
    if (!cJSON_IsArray(ports)) ports = NULL;
    cJSON_ArrayForEach(p, ports)
    {
        const cJSON *n = get(p, "name");
        if (!cJSON_IsString(n) || strcmp(n->valuestring, TFJOB_PORT_NAME) != 0) continue;
        long long port = 0;
        char ppath[256];
        snprintf(ppath, sizeof ppath, "%s.ports[" TFJOB_PORT_NAME "]", cpath);
        if (read_int(cv, p, "containerPort", ppath, 1, 65535, &port) < 0) return -EINVAL;
        if (port) r->port = (int)port;
        /* The operator declares the port itself, as "collective". */
        cJSON_DetachItemViaPointer(ports, p);
        cJSON_Delete(p);
        break;
    }
    if (cJSON_IsArray(ports) && cJSON_GetArraySize(ports) == 0)
        cJSON_DeleteItemFromObjectCaseSensitive(c, "ports");
    /* The values are the role's, kept apart from the template. */
    r->owned[0] = cJSON_DetachItemFromObjectCaseSensitive(c, "image");
    r->owned[1] = cJSON_DetachItemFromObjectCaseSensitive(c, "command");
    r->owned[2] = cJSON_DetachItemFromObjectCaseSensitive(c, "args");
    if (!cJSON_ReplaceItemInObjectCaseSensitive(c, "name", cJSON_CreateString(TRAINER_CONTAINER)))
        cv->nomem = 1;
    return 0;
}

/* r->template from the replica's template: metadata keeps labels and annotations (what
 * the operator reads of a template), spec loses restartPolicy (the operator's own). */
static int take_template(Conv *cv, Replica *r, const cJSON *rs)
{
    const cJSON *t = get(rs, "template");
    if (!cJSON_IsObject(t))
        FAIL("%s.template: required (the pod template with the " TFJOB_CONTAINER " container)",
             r->path);
    if (!cJSON_IsObject(get(t, "spec"))) FAIL("%s.template.spec: expected an object", r->path);
    if (!(r->template = cJSON_Duplicate(t, 1))) {
        cv->nomem = 1;
        return -ENOMEM;
    }
    cJSON *md = get(r->template, "metadata"), *f = md ? md->child : NULL;
    if (md && !cJSON_IsObject(md)) FAIL("%s.template.metadata: expected an object", r->path);
    while (f) {
        cJSON *next = f->next;
        int keep = strcmp(f->string, "labels") == 0 || strcmp(f->string, "annotations") == 0;
        if (keep && !cJSON_IsObject(f))
            FAIL("%s.template.metadata.%s: expected an object", r->path, f->string);
        /* creationTimestamp: null is what `kubectl get -o yaml` shows of every template */
        if (!keep && strcmp(f->string, "creationTimestamp") != 0)
            warn(cv,
                 "%s.template.metadata.%s: not carried over (a TrainingJob's pod templates "
                 "give their pods labels and annotations only)",
                 r->path, f->string);
        if (!keep) cJSON_Delete(cJSON_DetachItemViaPointer(md, f));
        f = next;
    }
    if (md && !md->child) cJSON_DeleteItemFromObjectCaseSensitive(r->template, "metadata");
    cJSON_DeleteItemFromObjectCaseSensitive(get(r->template, "spec"), "restartPolicy");
    return take_container(cv, r);
}

static const char *const replica_types[] = {"Chief", "Master", "Worker", "PS", "Evaluator", NULL};

/* Reads spec.tfReplicaSpecs into reps[ROLE_*] (replicas 0 where a type is absent). */
static int read_replicas(Conv *cv, const cJSON *spec, Replica reps[ROLE_COUNT])
{
    static const char *const restarts[] = {"Never", "OnFailure", "ExitCode", "Always", NULL};
    const cJSON *all = get(spec, "tfReplicaSpecs"), *rs;
    if (!cJSON_IsObject(all) || !all->child)
        FAIL("spec.tfReplicaSpecs: required, an object of replica specs (Chief, Worker, PS, "
             "Evaluator)");
    cJSON_ArrayForEach(rs, all)
    {
        size_t t = 0;
        while (replica_types[t] && strcasecmp(rs->string, replica_types[t]) != 0)
            t++;
        if (!replica_types[t])
            FAIL("spec.tfReplicaSpecs.%s: unknown replica type (Chief, Master, Worker, PS or "
                 "Evaluator)",
                 rs->string);
        const char *name = t == 1 ? "Chief" : replica_types[t];
        Role role = t <= 1 ? ROLE_CHIEF : t == 2 ? ROLE_WORKER : t == 3 ? ROLE_PS : ROLE_EVALUATOR;
        Replica *r = &reps[role];
        if (r->key)
            FAIL("spec.tfReplicaSpecs.%s: a second %s replica spec (beside %s)", rs->string, name,
                 r->key);
        r->key = rs->string;
        r->name = name;
        r->role = role;
        snprintf(r->path, sizeof r->path, "spec.tfReplicaSpecs.%s", rs->string);
        if (!cJSON_IsObject(rs)) FAIL("%s: expected an object", r->path);
        long long n = 1, max = role == ROLE_PS       ? JOBSPEC_MAX_PS
                               : role == ROLE_WORKER ? JOBSPEC_MAX_WORKERS
                                                     : 1;
        if (read_int(cv, rs, "replicas", r->path, 0, max, &n) < 0 ||
            read_enum(cv, rs, "restartPolicy", r->path, restarts, &r->restart) ||
            take_template(cv, r, rs))
            return -EINVAL;
        r->replicas = (int)n;
        if (!r->restart) r->restart = "Never"; /* the training operator's default */
        const cJSON *f;
        cJSON_ArrayForEach(f, rs)
        {
            if (strcmp(f->string, "replicas") && strcmp(f->string, "restartPolicy") &&
                strcmp(f->string, "template"))
                warn(cv, "%s.%s: not a field of a TFJob replica spec; not carried over", r->path,
                     f->string);
        }
    }
    return 0;
}

/* ---- roles ---------------------------------------------------------------------------- */

/* What the workers' template sets that a role's lacks, in a role template laid over it
 * (desired.c, role_template): an empty value takes these back out. */
static cJSON *empty_like(const char *field, const cJSON *v)
{
    static const char *const strings[] = {
        "priorityClassName", "schedulerName", "nodeName", "serviceAccountName",
        "serviceAccount",    "dnsPolicy",     NULL};
    if (cJSON_IsArray(v)) return cJSON_CreateArray();
    if (cJSON_IsObject(v) && strcmp(field, "os") != 0) return cJSON_CreateObject();
    for (size_t i = 0; cJSON_IsString(v) && strings[i]; i++)
        if (strcmp(field, strings[i]) == 0) return cJSON_CreateString("");
    return NULL;
}

/* The map of labels or annotations (`which`) of role r's template that the base lacks. */
static void overlay_map(Conv *cv, const Replica *base, const Replica *r, const char *which,
                        cJSON *ov)
{
    const cJSON *rm = get(get(r->template, "metadata"), which);
    const cJSON *bm = get(get(base->template, "metadata"), which), *kv;
    cJSON_ArrayForEach(kv, rm)
    {
        if (cJSON_Compare(kv, get(bm, kv->string), 1)) continue;
        cJSON *md = get(ov, "metadata"), *m = get(md, which);
        if (!md) md = put_obj(cv, ov, "metadata");
        if (!m) m = put_obj(cv, md, which);
        put(cv, m, kv->string, kv);
    }
    cJSON_ArrayForEach(kv, bm)
    {
        if (!get(rm, kv->string))
            warn(cv,
                 "%s.template.metadata.%s: the %s pods also get the %s's %.*s \"%s\" (a "
                 "role's template adds to spec.template and cannot take from it)",
                 r->path, which, r->name, base->name, (int)strlen(which) - 1, which, kv->string);
    }
}

/* The role's template as an overlay of the base's: only what differs. NULL when nothing
 * does (or on allocation failure, in cv->nomem). */
static cJSON *overlay_template(Conv *cv, const Replica *base, const Replica *r)
{
    static const char *const lists[] = {"containers", "initContainers", "volumes", NULL};
    static const char *const kinds[] = {"container", "init container", "volume", NULL};
    cJSON *ov = cJSON_CreateObject();
    if (!ov) {
        cv->nomem = 1;
        return NULL;
    }
    overlay_map(cv, base, r, "labels", ov);
    overlay_map(cv, base, r, "annotations", ov);
    const cJSON *rs = get(r->template, "spec"), *bs = get(base->template, "spec"), *f;
    cJSON *os = NULL;
#define OV_SPEC() (os ? os : (os = put_obj(cv, ov, "spec")))
    cJSON_ArrayForEach(f, rs)
    {
        size_t l = 0;
        while (lists[l] && strcmp(f->string, lists[l]) != 0)
            l++;
        if (!lists[l]) {
            if (!cJSON_Compare(f, get(bs, f->string), 1)) put(cv, OV_SPEC(), f->string, f);
            continue;
        }
        const cJSON *it, *items = cJSON_IsArray(f) ? f : NULL;
        cJSON_ArrayForEach(it, items)
        {
            const cJSON *n = get(it, "name");
            const cJSON *same =
                cJSON_IsString(n) ? by_name(get(bs, f->string), n->valuestring) : NULL;
            if (same && cJSON_Compare(it, same, 1)) continue;
            cJSON *dst = get(OV_SPEC(), f->string);
            if (!dst && !(dst = cJSON_AddArrayToObject(OV_SPEC(), f->string))) cv->nomem = 1;
            cJSON *c = cJSON_Duplicate(it, 1);
            if (!dst || !c || !cJSON_AddItemToArray(dst, c)) {
                cJSON_Delete(c);
                cv->nomem = 1;
            }
        }
    }
    cJSON_ArrayForEach(f, bs)
    {
        size_t l = 0;
        while (lists[l] && strcmp(f->string, lists[l]) != 0)
            l++;
        if (lists[l]) {
            const cJSON *it, *items = cJSON_IsArray(f) ? f : NULL;
            cJSON_ArrayForEach(it, items)
            {
                const cJSON *n = get(it, "name");
                if (cJSON_IsString(n) && !by_name(get(rs, f->string), n->valuestring))
                    warn(cv,
                         "%s.template.spec.%s: the %s pods also get the %s's %s \"%s\" (a "
                         "role's template adds to spec.template and cannot take from it)",
                         r->path, f->string, r->name, base->name, kinds[l], n->valuestring);
            }
            continue;
        }
        if (get(rs, f->string)) continue;
        cJSON *e = empty_like(f->string, f);
        if (e) {
            if (!cJSON_AddItemToObject(OV_SPEC(), f->string, e)) {
                cJSON_Delete(e);
                cv->nomem = 1;
            }
        } else {
            warn(cv,
                 "%s.template.spec: the %s pods also get the %s's %s (a role's template "
                 "cannot unset it); set it in the %s template to the value the %s pods need",
                 r->path, r->name, base->name, f->string, r->name, r->name);
        }
    }
#undef OV_SPEC
    if (!ov->child) {
        cJSON_Delete(ov);
        return NULL;
    }
    return ov;
}

/* spec.chief, spec.ps or spec.evaluator from replica r: replicas, and the image,
 * command, args and template where they differ from the base's. */
static void write_role(Conv *cv, cJSON *spec, const Replica *base, const Replica *r)
{
    cJSON *o = put_obj(cv, spec, jobspec_role_name(r->role));
    if (!o) return;
    if (!cJSON_AddNumberToObject(o, "replicas", r->replicas)) cv->nomem = 1;
    if (strcmp(r->image, base->image) != 0 && !cJSON_AddStringToObject(o, "image", r->image))
        cv->nomem = 1;
    int same_cmd = cJSON_Compare(r->command, base->command, 1);
    if (!same_cmd) put(cv, o, "command", r->command);
    /* Absent args are the role's own [] here: the job's would be inherited. */
    cJSON *none = cJSON_CreateArray();
    const cJSON *ra = r->args ? r->args : none, *ba = base->args ? base->args : none;
    if (!none)
        cv->nomem = 1;
    else if (!cJSON_Compare(ra, ba, 1))
        put(cv, o, "args", ra);
    cJSON_Delete(none);
    if (r->port != base->port)
        warn(cv,
             "%s: " TFJOB_PORT_NAME " %d differs from the %s's %d: every task of a TrainingJob "
             "listens on spec.port (%d), the port TF_CONFIG gives it",
             r->path, r->port, base->name, base->port, base->port);
    cJSON *ov = overlay_template(cv, base, r);
    if (ov && !cJSON_AddItemToObject(o, "template", ov)) {
        cJSON_Delete(ov);
        cv->nomem = 1;
    }
}

/* Whether a template holds nothing but the trainer container's name. */
static int template_empty(const cJSON *t)
{
    const cJSON *spec = get(t, "spec"), *cs = get(spec, "containers");
    return !get(t, "metadata") && spec && spec->child == cs && !cs->next &&
           cJSON_GetArraySize(cs) == 1 && cs->child->child && !cs->child->child->next;
}

/* The one restartPolicy of the group from the replicas' (the evaluator is never
 * restarted), warning where the replicas differ or Always is asked for. */
static const char *group_restart(Conv *cv, const Replica reps[ROLE_COUNT])
{
    static const char *const order[] = {"Never", "ExitCode", "OnFailure", "Always", NULL};
    int best = 0, differ = 0;
    const char *first = NULL;
    char list[256] = "";
    for (Role ro = 0; ro < ROLE_EVALUATOR; ro++) {
        const Replica *r = &reps[ro];
        if (!r->key || !r->replicas) continue;
        int rank = 0;
        while (order[rank] && strcmp(order[rank], r->restart) != 0)
            rank++;
        if (rank > best) best = rank;
        if (first && strcmp(first, r->restart) != 0) differ = 1;
        if (!first) first = r->restart;
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s %s", *list ? ", " : "",
                 r->key, r->restart);
        if (strcmp(r->restart, "Always") == 0)
            warn(cv,
                 "%s.restartPolicy: Always becomes OnFailure: a TrainingJob never runs again a "
                 "task that succeeded, and a failure restarts the whole group from its "
                 "checkpoint",
                 r->path);
    }
    if (differ)
        warn(cv,
             "spec.tfReplicaSpecs.*.restartPolicy: the replicas differ (%s); a TrainingJob has "
             "one restartPolicy for the whole group, here the most permissive: %s",
             list, best == 3 ? "OnFailure" : order[best]);
    const Replica *ev = &reps[ROLE_EVALUATOR];
    if (ev->key && ev->replicas && strcmp(ev->restart, "Never") != 0)
        warn(cv,
             "%s.restartPolicy: %s not carried over: a TrainingJob never restarts its "
             "evaluator, and the evaluator's exit decides nothing",
             ev->path, ev->restart);
    return best == 3 ? "OnFailure" : order[best];
}

/* ---- run policy ----------------------------------------------------------------------- */

/* The run policy's field `key`: spec.runPolicy.<key>, else spec.<key> (where the first
 * kubeflow.org/v1 TFJobs had it, inline). path gets the one found. */
static const cJSON *run_policy(const cJSON *spec, const char *key, char *path, size_t n)
{
    const cJSON *rp = get(spec, "runPolicy");
    if (get(rp, key)) {
        snprintf(path, n, "spec.runPolicy");
        return rp;
    }
    snprintf(path, n, "spec");
    return spec;
}

static int convert_run_policy(Conv *cv, const cJSON *spec, cJSON *out, const char *restart)
{
    static const char *const cleans[] = {"None", "Running", "All", NULL};
    char path[64];
    const cJSON *o;
    const char *clean;
    long long v;
    int rc;
    if (get(spec, "runPolicy") && !cJSON_IsObject(get(spec, "runPolicy")))
        FAIL("spec.runPolicy: expected an object");
    o = run_policy(spec, "backoffLimit", path, sizeof path);
    if ((rc = read_int(cv, o, "backoffLimit", path, 0, 1000000, &v)) < 0) return rc;
    if (rc) {
        if (!cJSON_AddNumberToObject(out, "backoffLimit", (double)v)) cv->nomem = 1;
    } else if (strcmp(restart, "Never") != 0) {
        warn(cv, "spec.runPolicy.backoffLimit: not set (no limit in a TFJob); a TrainingJob fails "
                 "after 6 group restarts unless spec.backoffLimit says otherwise");
    }
    o = run_policy(spec, "activeDeadlineSeconds", path, sizeof path);
    if ((rc = read_int(cv, o, "activeDeadlineSeconds", path, 1, 1LL << 40, &v)) < 0) return rc;
    if (rc && !cJSON_AddNumberToObject(out, "activeDeadlineSeconds", (double)v)) cv->nomem = 1;
    o = run_policy(spec, "ttlSecondsAfterFinished", path, sizeof path);
    if ((rc = read_int(cv, o, "ttlSecondsAfterFinished", path, 0, 2147483647, &v)) < 0) return rc;
    if (rc && !cJSON_AddNumberToObject(out, "ttlSecondsAfterFinished", (double)v)) cv->nomem = 1;
    o = run_policy(spec, "cleanPodPolicy", path, sizeof path);
    if (read_enum(cv, o, "cleanPodPolicy", path, cleans, &clean)) return -EINVAL;
    /* The training operator's default is None; the TrainingJob's is Running. */
    if (!cJSON_AddStringToObject(out, "cleanPodPolicy", clean ? clean : "None")) cv->nomem = 1;

    const cJSON *rp = get(spec, "runPolicy");
    const cJSON *su = get(rp, "suspend");
    if (su && !cJSON_IsNull(su) && !cJSON_IsBool(su))
        FAIL("spec.runPolicy.suspend: expected a boolean");
    if (cJSON_IsTrue(su) && !cJSON_AddTrueToObject(out, "suspend")) cv->nomem = 1;

    o = run_policy(spec, "schedulingPolicy", path, sizeof path);
    const cJSON *sp = get(o, "schedulingPolicy"), *f;
    if (sp && !cJSON_IsObject(sp)) FAIL("%s.schedulingPolicy: expected an object", path);
    cJSON_ArrayForEach(f, sp)
    {
        const char *s = cJSON_IsString(f) ? f->valuestring : "...";
        if (strcmp(f->string, "queue") == 0)
            warn(cv,
                 "%s.schedulingPolicy.queue: \"%s\" not carried over: kubetrain does not queue "
                 "jobs yet; Kueue's queue is named by the label kueue.x-k8s.io/queue-name: %s "
                 "on the TrainingJob, which takes effect once kubetrain integrates with Kueue",
                 path, s, s);
        else if (strcmp(f->string, "priorityClass") == 0)
            warn(cv,
                 "%s.schedulingPolicy.priorityClass: \"%s\" not carried over: give the pods "
                 "that priority with spec.template.spec.priorityClassName: %s",
                 path, s, s);
        else if (strcmp(f->string, "minAvailable") == 0)
            warn(cv,
                 "%s.schedulingPolicy.minAvailable: not carried over: kubetrain creates every "
                 "pod of the group at once and has no gang scheduling yet; pods that cannot "
                 "all be scheduled wait Pending",
                 path);
        else
            warn(cv,
                 "%s.schedulingPolicy.%s: not carried over (kubetrain has no gang "
                 "scheduling yet)",
                 path, f->string);
    }
    cJSON_ArrayForEach(f, rp)
    {
        static const char *const known[] = {"backoffLimit",
                                            "activeDeadlineSeconds",
                                            "ttlSecondsAfterFinished",
                                            "cleanPodPolicy",
                                            "suspend",
                                            "schedulingPolicy",
                                            NULL};
        size_t k = 0;
        while (known[k] && strcmp(known[k], f->string) != 0)
            k++;
        if (known[k]) continue;
        if (strcmp(f->string, "managedBy") == 0)
            warn(cv, "spec.runPolicy.managedBy: not carried over: kubetrain-operator manages "
                     "every TrainingJob");
        else
            warn(cv,
                 "spec.runPolicy.%s: not a run policy field kubetrain knows; not carried "
                 "over",
                 f->string);
    }
    return 0;
}

/* ---- the whole job -------------------------------------------------------------------- */

/* metadata: name, generateName, namespace, labels and annotations; what the API server
 * wrote goes silently, anything else with a warning. */
static int convert_metadata(Conv *cv, const cJSON *job, cJSON *out)
{
    static const char *const keep[] = {"name",   "generateName", "namespace",
                                       "labels", "annotations",  NULL};
    static const char *const server[] = {"uid",
                                         "resourceVersion",
                                         "generation",
                                         "creationTimestamp",
                                         "managedFields",
                                         "selfLink",
                                         "deletionTimestamp",
                                         "deletionGracePeriodSeconds",
                                         NULL};
    const cJSON *md = get(job, "metadata"), *f;
    if (!cJSON_IsObject(md)) FAIL("metadata: required, an object with a name");
    const cJSON *name = get(md, "name"), *gen = get(md, "generateName");
    if (!cJSON_IsString(name) && !cJSON_IsString(gen)) FAIL("metadata.name: required");
    cJSON *omd = put_obj(cv, out, "metadata");
    cJSON_ArrayForEach(f, md)
    {
        size_t k = 0, s = 0;
        while (keep[k] && strcmp(keep[k], f->string) != 0)
            k++;
        while (server[s] && strcmp(server[s], f->string) != 0)
            s++;
        if (server[s]) continue;
        if (!keep[k]) {
            warn(cv, "metadata.%s: not carried over", f->string);
            continue;
        }
        if (k < 3 && !cJSON_IsString(f)) FAIL("metadata.%s: expected a string", f->string);
        if (k >= 3 && !cJSON_IsObject(f)) FAIL("metadata.%s: expected an object", f->string);
        if (k < 3) {
            put(cv, omd, f->string, f);
            continue;
        }
        cJSON *m = put_obj(cv, omd, f->string);
        const cJSON *kv;
        cJSON_ArrayForEach(kv, f)
        {
            /* kubectl's record of the TFJob it applied, meaningless on a TrainingJob */
            if (strcmp(kv->string, "kubectl.kubernetes.io/last-applied-configuration") != 0)
                put(cv, m, kv->string, kv);
        }
        if (m && !m->child) cJSON_DeleteItemFromObjectCaseSensitive(omd, f->string);
    }
    return 0;
}

/* The workers of the TrainingJob: the TFJob's Worker replicas, or a lone Chief. */
static int pick_base(Conv *cv, Replica reps[ROLE_COUNT], Replica **base)
{
    Replica *w = &reps[ROLE_WORKER], *c = &reps[ROLE_CHIEF];
    int chief = c->key && c->replicas, ps = reps[ROLE_PS].key && reps[ROLE_PS].replicas;
    if (ps && !chief)
        FAIL("%s: parameter servers without a Chief: a TrainingJob's ps tasks need a chief, "
             "which coordinates the training (TensorFlow 2's ParameterServerStrategy runs its "
             "coordinator there); add a Chief replica spec",
             reps[ROLE_PS].path);
    if (w->key && w->replicas) {
        *base = w;
        return 0;
    }
    if (!chief || ps)
        FAIL("spec.tfReplicaSpecs: no Worker replicas%s; a TrainingJob has at least one worker "
             "(spec.workers >= 1): add a Worker replica spec",
             ps ? " beside the Chief and PS" : "");
    /* A Chief alone is a one-task cluster: as worker 0, which TensorFlow takes for the chief
     * when the cluster has none, it trains the same. */
    warn(cv,
         "%s: a Chief without Workers becomes the TrainingJob's one worker (spec.workers: 1): "
         "TF_CONFIG names it worker 0, which TensorFlow treats as the chief when the cluster "
         "has none; a program that tests task_type == \"chief\" must also accept worker 0",
         c->path);
    cJSON_Delete(w->template); /* a Worker spec with replicas: 0 */
    for (size_t i = 0; i < 3; i++)
        cJSON_Delete(w->owned[i]);
    *w = *c;
    w->role = ROLE_WORKER;
    memset(c, 0, sizeof *c);
    *base = w;
    return 0;
}

/* Warnings about what the pods get that TFJob pods did not: a user id, no checkpoints,
 * and what the operator's template policy will refuse. */
static void check_pods(Conv *cv, const cJSON *tj, const Replica *base)
{
    const cJSON *spec = get(tj, "spec"), *t = get(spec, "template");
    const cJSON *c = by_name(get(get(t, "spec"), "containers"), TRAINER_CONTAINER);
    if (!get(get(get(t, "spec"), "securityContext"), "runAsUser") &&
        !get(get(c, "securityContext"), "runAsUser"))
        warn(cv,
             "%s.template: the pods run as uid 65532, non-root (TFJob pods run as the "
             "image's user); set spec.template.spec.securityContext.runAsUser (0 for root) "
             "if the image needs another",
             base->path);
    const cJSON *m, *v;
    const char *hint = "";
    char buf[512];
    cJSON_ArrayForEach(m, get(c, "volumeMounts"))
    {
        const cJSON *mn = get(m, "name"), *mp = get(m, "mountPath");
        v = cJSON_IsString(mn) ? by_name(get(get(t, "spec"), "volumes"), mn->valuestring) : NULL;
        const cJSON *claim = get(get(v, "persistentVolumeClaim"), "claimName");
        if (cJSON_IsString(claim) && cJSON_IsString(mp)) {
            snprintf(buf, sizeof buf,
                     "; if the program keeps its checkpoints on claim %s (mounted at %s), "
                     "spec.checkpoint: {claimName: %s, path: %s} mounts it in its place",
                     claim->valuestring, mp->valuestring, claim->valuestring, mp->valuestring);
            hint = buf;
            break;
        }
    }
    warn(cv,
         "spec.checkpoint: none (a TFJob names no checkpoint claim): with spec.checkpoint"
         ".claimName (a ReadWriteMany claim) every pod gets KUBETRAIN_CHECKPOINT_DIR there, "
         "where Keras's BackupAndRestore resumes after a group restart (docs/tensorflow.md)%s",
         hint);
    char err[512];
    if (podpolicy_check(PODPOLICY_BASELINE, t, err, sizeof err) != 0)
        warn(cv,
             "%s.template: the operator's default --template-policy baseline will refuse "
             "the job: %s",
             base->path, err);
    for (Role r = 0; r < ROLE_COUNT; r++) {
        const cJSON *rt =
            r == ROLE_WORKER ? NULL : get(get(spec, jobspec_role_name(r)), "template");
        if (rt && podpolicy_check(PODPOLICY_BASELINE, rt, err, sizeof err) != 0)
            warn(cv,
                 "spec.%s.template: the operator's default --template-policy baseline "
                 "will refuse the job: %s",
                 jobspec_role_name(r), err);
    }
}

/* What the operator would make of the result: a job it marks Invalid is an error here. */
static int check_spec(Conv *cv, const cJSON *tj)
{
    cJSON *copy = cJSON_Duplicate(tj, 1);
    cJSON *md = get(copy, "metadata");
    if (!copy || !md) {
        cJSON_Delete(copy);
        cv->nomem = 1;
        return -ENOMEM;
    }
    const cJSON *gen = get(md, "generateName");
    char name[300];
    if (!get(md, "name") && cJSON_IsString(gen)) {
        /* The API server appends five random characters to generateName: stand-ins of
         * that length let jobspec_parse check the name's length as it will be. */
        snprintf(name, sizeof name, "%sxxxxx", gen->valuestring);
        cJSON_AddStringToObject(md, "name", name);
    }
    if (!get(md, "namespace")) cJSON_AddStringToObject(md, "namespace", "default");
    cJSON_AddStringToObject(md, "uid", "convert-tfjob");
    JobSpec js;
    char why[512];
    int rc = jobspec_parse(copy, &js, why, sizeof why);
    cJSON_Delete(copy);
    if (rc) FAIL("the TrainingJob would be refused by the operator: %s", why);
    return 0;
}

static int convert(Conv *cv, const cJSON *job, cJSON *out, Replica reps[ROLE_COUNT])
{
    const cJSON *api = get(job, "apiVersion"), *kind = get(job, "kind"), *f;
    if (!cJSON_IsString(kind) || strcmp(kind->valuestring, TFJOB_KIND) != 0)
        FAIL("kind: %s%s%s is not a TFJob (convert-tfjob reads " TFJOB_API_VERSION " TFJobs only)",
             cJSON_IsString(kind) ? "\"" : "", cJSON_IsString(kind) ? kind->valuestring : "none",
             cJSON_IsString(kind) ? "\"" : "");
    if (!cJSON_IsString(api) || strcmp(api->valuestring, TFJOB_API_VERSION) != 0)
        FAIL("apiVersion: expected " TFJOB_API_VERSION ", got %s%s%s (an older TFJob keeps "
             "its fields elsewhere: let the training operator upgrade it, then convert the "
             "stored v1 object)",
             cJSON_IsString(api) ? "\"" : "", cJSON_IsString(api) ? api->valuestring : "none",
             cJSON_IsString(api) ? "\"" : "");
    if (!cJSON_AddStringToObject(out, "apiVersion", KT_API_VERSION) ||
        !cJSON_AddStringToObject(out, "kind", KT_KIND))
        cv->nomem = 1;
    if (convert_metadata(cv, job, out)) return -EINVAL;
    cJSON_ArrayForEach(f, job)
    {
        static const char *const known[] = {"apiVersion", "kind",   "metadata",
                                            "spec",       "status", NULL};
        size_t k = 0;
        while (known[k] && strcmp(known[k], f->string) != 0)
            k++;
        if (!known[k]) warn(cv, "%s: not a field of a TFJob; not carried over", f->string);
    }
    const cJSON *spec = get(job, "spec");
    if (!cJSON_IsObject(spec)) FAIL("spec: required, an object");
    Replica *base;
    if (read_replicas(cv, spec, reps) || pick_base(cv, reps, &base)) return -EINVAL;

    cJSON *os = put_obj(cv, out, "spec");
    if (!os) return -ENOMEM;
    cJSON_AddNumberToObject(os, "workers", base->replicas);
    cJSON_AddStringToObject(os, "image", base->image);
    put(cv, os, "command", base->command);
    if (base->args && cJSON_GetArraySize(base->args)) put(cv, os, "args", base->args);
    if (base->port != 2222) cJSON_AddNumberToObject(os, "port", base->port);
    for (Role r = 0; r < ROLE_COUNT; r++) {
        if (r != ROLE_WORKER && reps[r].key && reps[r].replicas)
            write_role(cv, os, base, &reps[r]);
        else if (r != ROLE_WORKER && reps[r].key)
            warn(cv, "%s.replicas: 0, so no %s in the TrainingJob", reps[r].path,
                 jobspec_role_name(r));
    }
    const char *restart = group_restart(cv, reps);
    if (!cJSON_AddStringToObject(os, "restartPolicy", restart)) cv->nomem = 1;
    if (convert_run_policy(cv, spec, os, restart)) return -EINVAL;

    static const char *const successes[] = {"", "AllWorkers", NULL};
    const char *success;
    if (read_enum(cv, spec, "successPolicy", "spec", successes, &success)) return -EINVAL;
    /* "" (the default) completes with the chief, or worker 0 without one: ChiefCompleted */
    if (success && *success && !cJSON_AddStringToObject(os, "successPolicy", success))
        cv->nomem = 1;
    const cJSON *dyn = get(spec, "enableDynamicWorker");
    if (dyn && !cJSON_IsNull(dyn) && !cJSON_IsBool(dyn))
        FAIL("spec.enableDynamicWorker: expected a boolean");
    if (cJSON_IsTrue(dyn))
        warn(cv, "spec.enableDynamicWorker: not carried over: a TrainingJob's workers change "
                 "only when spec.workers does, which restarts the group with the new cluster "
                 "from its checkpoint");
    cJSON_ArrayForEach(f, spec)
    {
        static const char *const known[] = {"tfReplicaSpecs",   "runPolicy",
                                            "successPolicy",    "enableDynamicWorker",
                                            "backoffLimit",     "activeDeadlineSeconds",
                                            "cleanPodPolicy",   "ttlSecondsAfterFinished",
                                            "schedulingPolicy", NULL};
        size_t k = 0;
        while (known[k] && strcmp(known[k], f->string) != 0)
            k++;
        if (!known[k])
            warn(cv, "spec.%s: not a TFJob field kubetrain knows; not carried over", f->string);
    }
    if (!template_empty(base->template)) put(cv, os, "template", base->template);
    if (cv->nomem) return -ENOMEM;
    check_pods(cv, out, base);
    return check_spec(cv, out);
}

int tfjob_convert(const cJSON *tfjob, cJSON **out, cJSON *warnings, char *err, size_t errlen)
{
    Conv cv = {.warnings = warnings, .err = err, .errlen = errlen};
    Replica reps[ROLE_COUNT];
    memset(reps, 0, sizeof reps);
    *out = cJSON_CreateObject();
    int rc = *out ? convert(&cv, tfjob, *out, reps) : -ENOMEM;
    if (cv.nomem) rc = -ENOMEM;
    for (Role r = 0; r < ROLE_COUNT; r++) {
        cJSON_Delete(reps[r].template);
        for (size_t i = 0; i < 3; i++)
            cJSON_Delete(reps[r].owned[i]);
    }
    if (rc == -ENOMEM) snprintf(err, errlen, "out of memory");
    if (rc) {
        cJSON_Delete(*out);
        *out = NULL;
    }
    return rc;
}

/* ---- the command ------------------------------------------------------------------------ */

/* "document N (kind K, name M)" of doc into buf, for messages. */
static void describe(const cJSON *doc, int n, char *buf, size_t len)
{
    const cJSON *name = get(get(doc, "metadata"), "name"), *kind = get(doc, "kind");
    snprintf(buf, len, "document %d (%s%s%s)", n,
             cJSON_IsString(kind) ? kind->valuestring : "no kind", cJSON_IsString(name) ? " " : "",
             cJSON_IsString(name) ? name->valuestring : "");
}

/* Appends s to the growing text *buf (length *n); -ENOMEM. */
static int append(char **buf, size_t *n, const char *s)
{
    size_t k = strlen(s);
    char *b = realloc(*buf, *n + k + 1);
    if (!b) return -ENOMEM;
    memcpy(b + *n, s, k + 1);
    *buf = b;
    *n += k;
    return 0;
}

int tfjob_convert_stream(const char *text, size_t len, const char *source, char **yaml,
                         cJSON *warnings, char *err, size_t errlen)
{
    cJSON *docs = NULL, *doc, *mine = cJSON_CreateArray();
    char why[1024], what[300];
    char *outbuf = NULL;
    size_t outlen = 0;
    int rc, n = 0;
    *yaml = NULL;
    if (!mine) return -ENOMEM;
    if ((rc = yamljson_parse_manifests(text, len, &docs, why, sizeof why)) != 0) {
        snprintf(err, errlen, "%s: %s", source, why);
        goto done;
    }
    if (!docs->child) {
        snprintf(err, errlen, "%s: no document (expected a " TFJOB_KIND ")", source);
        rc = -EINVAL;
        goto done;
    }
    cJSON_ArrayForEach(doc, docs)
    {
        describe(doc, ++n, what, sizeof what);
        cJSON *tj = NULL, *w;
        cJSON_Delete(mine);
        if (!(mine = cJSON_CreateArray())) {
            rc = -ENOMEM;
            goto done;
        }
        if (!cJSON_IsObject(doc)) {
            snprintf(err, errlen, "%s: document %d: expected an object (a " TFJOB_KIND ")", source,
                     n);
            rc = -EINVAL;
            goto done;
        }
        if ((rc = tfjob_convert(doc, &tj, mine, why, sizeof why)) != 0) {
            snprintf(err, errlen, "%s: %s: %s", source, what, why);
            goto done;
        }
        cJSON_ArrayForEach(w, mine)
        {
            snprintf(why, sizeof why, "%s: %s: %s", source, what, w->valuestring);
            if (!cJSON_AddItemToArray(warnings, cJSON_CreateString(why))) rc = -ENOMEM;
        }
        const cJSON *md = get(doc, "metadata"), *name = get(md, "name"), *ns = get(md, "namespace");
        if (!cJSON_IsString(name)) name = get(md, "generateName");
        snprintf(why, sizeof why,
                 "%s# TrainingJob from TFJob %s%s%s by kubetrain-operator convert-tfjob "
                 "(docs/tensorflow.md)\n",
                 n > 1 ? "---\n" : "", cJSON_IsString(ns) ? ns->valuestring : "",
                 cJSON_IsString(ns) ? "/" : "", name->valuestring);
        char *y = yamljson_emit(tj, err, errlen);
        cJSON_Delete(tj);
        if (!y || append(&outbuf, &outlen, why) || append(&outbuf, &outlen, y)) rc = -ENOMEM;
        free(y);
        if (rc) goto done;
    }
    *yaml = outbuf;
    outbuf = NULL;
done:
    if (rc == -ENOMEM) snprintf(err, errlen, "out of memory");
    free(outbuf);
    cJSON_Delete(mine);
    cJSON_Delete(docs);
    return rc;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: kubetrain-operator convert-tfjob [FILE|-]\n"
               "  Writes each Kubeflow TFJob (" TFJOB_API_VERSION ") of FILE (default: the "
               "standard input) as a\n"
               "  TrainingJob on stdout, and one warning line on stderr for each thing it "
               "could not\n"
               "  carry over. Exit 0, or 2 for input it cannot convert (docs/tensorflow.md).\n");
}

/* The whole of f into a malloc'd buffer; NULL with errno. */
static char *read_all(FILE *f, size_t *len)
{
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        n += fread(buf + n, 1, cap - n, f);
        if (n < cap) break;
        if (cap >= (size_t)64 << 20) { /* far beyond any manifest */
            errno = EFBIG;
            free(buf);
            return NULL;
        }
        char *b = realloc(buf, cap *= 2);
        if (!b) free(buf);
        buf = b;
    }
    if (buf && ferror(f)) {
        free(buf);
        return NULL;
    }
    *len = n;
    return buf;
}

int tfjob_main(int argc, char **argv)
{
    const char *prog = "kubetrain-operator convert-tfjob";
    if (argc == 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
        usage(stdout);
        return 0;
    }
    if (argc > 2 || (argc == 2 && argv[1][0] == '-' && argv[1][1])) {
        fprintf(stderr, "%s: expected one file name or -, got %s\n", prog,
                argc > 2 ? "more" : argv[1]);
        usage(stderr);
        return 2;
    }
    const char *path = argc == 2 ? argv[1] : "-";
    int from_stdin = strcmp(path, "-") == 0;
    FILE *f = from_stdin ? stdin : fopen(path, "rb");
    size_t len = 0;
    char *text = f ? read_all(f, &len) : NULL;
    int read_errno = errno;
    if (f && !from_stdin) fclose(f);
    if (!text) {
        fprintf(stderr, "%s: %s: %s\n", prog, from_stdin ? "standard input" : path,
                strerror(read_errno));
        return 2;
    }
    /* jobspec's checks of the result log wrong types as warnings; its own message says it */
    olog_set_level(OLOG_ERROR);
    cJSON *warnings = cJSON_CreateArray();
    char err[2048], *yaml = NULL;
    int rc = warnings ? tfjob_convert_stream(text, len, from_stdin ? "-" : path, &yaml, warnings,
                                             err, sizeof err)
                      : -ENOMEM;
    free(text);
    const cJSON *w;
    cJSON_ArrayForEach(w, warnings)
    {
        fprintf(stderr, "%s: warning: %s\n", prog, w->valuestring);
    }
    cJSON_Delete(warnings);
    if (rc) {
        fprintf(stderr, "%s: %s\n", prog, rc == -ENOMEM ? "out of memory" : err);
        return rc == -ENOMEM ? 1 : 2;
    }
    int ok = fputs(yaml, stdout) >= 0 && fflush(stdout) == 0;
    free(yaml);
    if (!ok) fprintf(stderr, "%s: cannot write stdout: %s\n", prog, strerror(errno));
    return ok ? 0 : 1;
}
