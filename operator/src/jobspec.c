/* jobspec — TrainingJob spec reading and validation. */
#include "jobspec.h"

#include "jsonx.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#define FAIL(...)                                                                                  \
    do {                                                                                           \
        snprintf(err, errlen, __VA_ARGS__);                                                        \
        return -EINVAL;                                                                            \
    } while (0)

/* Reads an optional integer field in [lo, hi]; absent gives dflt. */
static int read_int(const cJSON *spec, const char *path, long long lo, long long hi, long long dflt,
                    long long *out, char *err, size_t errlen)
{
    const cJSON *v = jsonx_at(spec, path);
    if (!v || cJSON_IsNull(v)) {
        *out = dflt;
        return 0;
    }
    long long x = jsonx_int(spec, path, lo - 1);
    if (!cJSON_IsNumber(v) || x < lo || x > hi)
        FAIL("spec.%s: expected an integer in [%lld, %lld]", path, lo, hi);
    *out = x;
    return 0;
}

/* Reads an optional string field; a present non-string is an error. */
static int read_str(const cJSON *spec, const char *path, const char **out, char *err, size_t errlen)
{
    const cJSON *v = jsonx_at(spec, path);
    *out = NULL;
    if (!v || cJSON_IsNull(v)) return 0;
    if (!cJSON_IsString(v)) FAIL("spec.%s: expected a string", path);
    *out = v->valuestring;
    return 0;
}

/* 1 when s is a DNS-1123 subdomain, as a Secret's name must be: 1..253 of [a-z0-9-.],
 * starting and ending alphanumeric. */
static int dns1123_subdomain(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 253 || !isalnum((unsigned char)s[0]) || !isalnum((unsigned char)s[n - 1]))
        return 0;
    for (const char *c = s; *c; c++)
        if (!(islower((unsigned char)*c) || isdigit((unsigned char)*c) || *c == '-' || *c == '.'))
            return 0;
    return 1;
}

/* 1 when the relative path p has a ".." component. */
static int has_dotdot(const char *p)
{
    for (const char *c = p; (c = strstr(c, "..")); c += 2)
        if ((c == p || c[-1] == '/') && (c[2] == '\0' || c[2] == '/')) return 1;
    return 0;
}

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && !strcmp(s + n - k, suffix);
}

/* Reads spec.training.export as the CRD's rules have it (for an object that missed
 * them): a .keras or .weights.h5 file inside the job's checkpoint directory, so a
 * checkpoint claim is needed, and the C trainer's (a user's program saves its own).
 * Call after the command and the checkpoint are read. */
static int read_export(const cJSON *spec, JobSpec *s, char *err, size_t errlen)
{
    if (read_str(spec, "training.export", &s->export_file, err, errlen)) return -EINVAL;
    const char *f = s->export_file;
    if (!f) return 0;
    if (!*f || strlen(f) > JOBSPEC_MAX_EXPORT)
        FAIL("spec.training.export: expected 1 to %d bytes", JOBSPEC_MAX_EXPORT);
    if (!ends_with(f, ".keras") && !ends_with(f, ".weights.h5"))
        FAIL("spec.training.export: a file name ending in .keras or .weights.h5, got \"%s\"", f);
    if (f[0] == '/' || has_dotdot(f))
        FAIL("spec.training.export: a path relative to the job's checkpoint directory, without "
             "a leading / or a .. component, got \"%s\"",
             f);
    if (!s->checkpoint_claim)
        FAIL("spec.training.export: needs spec.checkpoint.claimName (the claim the chief "
             "writes it to)");
    if (s->command)
        FAIL("spec.training.export: the C trainer's; a program in spec.command saves its own "
             "model");
    return 0;
}

/* Reads spec.training.initialWeights as the CRD's rules have it (for an object that
 * missed them): a .keras or .h5 file on the checkpoint claim, relative to its mount so
 * that another job's export can be named, and the C trainer's (a user's program loads
 * its own). Call after the command and the checkpoint are read. */
static int read_initial_weights(const cJSON *spec, JobSpec *s, char *err, size_t errlen)
{
    if (read_str(spec, "training.initialWeights", &s->initial_weights, err, errlen)) return -EINVAL;
    const char *f = s->initial_weights;
    if (!f) return 0;
    if (!*f || strlen(f) > JOBSPEC_MAX_INITIAL_WEIGHTS)
        FAIL("spec.training.initialWeights: expected 1 to %d bytes", JOBSPEC_MAX_INITIAL_WEIGHTS);
    if (!ends_with(f, ".keras") && !ends_with(f, ".h5"))
        FAIL("spec.training.initialWeights: a file name ending in .keras, .weights.h5 or .h5, "
             "got \"%s\"",
             f);
    if (f[0] == '/' || has_dotdot(f))
        FAIL("spec.training.initialWeights: a path relative to the checkpoint claim's mount "
             "(spec.checkpoint.path), without a leading / or a .. component, got \"%s\"",
             f);
    if (!s->checkpoint_claim)
        FAIL("spec.training.initialWeights: needs spec.checkpoint.claimName (the claim the "
             "weights are read from)");
    if (s->command)
        FAIL("spec.training.initialWeights: the C trainer's; a program in spec.command loads "
             "its own weights");
    return 0;
}

/* Reads spec.elastic as the CRD's rules have it (for an object that missed them):
 * minWorkers required, 1..workers; replaceTimeoutSeconds 1..JOBSPEC_REPLACE_TIMEOUT_MAX.
 * Call after spec.workers is read. */
static int read_elastic(const cJSON *spec, JobSpec *s, char *err, size_t errlen)
{
    const cJSON *e = jsonx_at(spec, "elastic");
    long long v;
    if (!e || cJSON_IsNull(e)) return 0;
    if (!cJSON_IsObject(e)) FAIL("spec.elastic: expected an object");
    const cJSON *m = jsonx_at(e, "minWorkers");
    if (!m || cJSON_IsNull(m)) FAIL("spec.elastic.minWorkers: required with spec.elastic");
    if (read_int(spec, "elastic.minWorkers", 1, JOBSPEC_MAX_WORKERS, 1, &v, err, errlen))
        return -EINVAL;
    if (v > s->workers)
        FAIL("spec.elastic.minWorkers: must be at most spec.workers (%d), got %lld", s->workers, v);
    s->min_workers = (int)v;
    if (read_int(spec, "elastic.replaceTimeoutSeconds", 1, JOBSPEC_REPLACE_TIMEOUT_MAX,
                 JOBSPEC_REPLACE_TIMEOUT_DEFAULT, &s->replace_timeout_s, err, errlen))
        return -EINVAL;
    s->elastic = 1;
    return 0;
}

/* An elastic job's global batch: the one status.globalBatch recorded, else the world
 * times the per-worker batch of this spec. Call after the roles and the training are
 * read. The trainer's limit holds for both. */
static int read_global_batch(const cJSON *job, JobSpec *s, char *err, size_t errlen)
{
    if (!s->elastic) return 0;
    const cJSON *g = jsonx_at(job, "status.globalBatch");
    if (g && !cJSON_IsNull(g)) {
        long long v = jsonx_int(job, "status.globalBatch", 0);
        if (!cJSON_IsNumber(g) || v < 1 || v > JOBSPEC_MAX_GLOBAL_BATCH)
            FAIL("status.globalBatch: expected an integer in [1, %d]", JOBSPEC_MAX_GLOBAL_BATCH);
        s->global_batch = v;
        return 0;
    }
    long long world = s->roles[ROLE_CHIEF].replicas + s->workers;
    long long batch =
        s->per_worker_batch >= 0 ? s->per_worker_batch : JOBSPEC_PER_WORKER_BATCH_DEFAULT;
    if (world * batch > JOBSPEC_MAX_GLOBAL_BATCH)
        FAIL("spec.elastic: the global batch, %lld workers x perWorkerBatchSize %lld = %lld, "
             "exceeds the trainer's %d",
             world, batch, world * batch, JOBSPEC_MAX_GLOBAL_BATCH);
    s->global_batch = world * batch;
    return 0;
}

/* The C trainer refuses --steps-per-epoch 0 under --shard-policy file with more than one
 * rank (the workers' files hold different numbers of examples, so one pass has no common
 * length): the CRD's rule refuses it at the apiserver, and this for an object that missed
 * it. Call after the command, the roles, the dataset and the training are read. */
static int check_file_shards(const JobSpec *s, char *err, size_t errlen)
{
    long long world = s->roles[ROLE_CHIEF].replicas + s->workers;
    if (s->command || !s->shard_policy || strcmp(s->shard_policy, "file") != 0 ||
        s->steps_per_epoch != 0 || world <= 1)
        return 0;
    FAIL("spec.training.stepsPerEpoch: 0 (one pass over a worker's files) with "
         "spec.dataset.shardPolicy file needs a single worker, got %lld: the workers' files "
         "hold different numbers of examples, so a pass has no common length; give "
         "stepsPerEpoch N, or shardPolicy data",
         world);
}

/* Reads an optional [H, W, C] of integers in [1, 65535] (the trainer's --image-shape);
 * absent leaves shape zero. */
static int read_shape(const cJSON *spec, const char *path, int shape[3], char *err, size_t errlen)
{
    const cJSON *v = jsonx_at(spec, path);
    shape[0] = shape[1] = shape[2] = 0;
    if (!v || cJSON_IsNull(v)) return 0;
    int ok = cJSON_IsArray(v) && cJSON_GetArraySize(v) == 3;
    for (int i = 0; ok && i < 3; i++) {
        const cJSON *d = cJSON_GetArrayItem(v, i);
        ok = cJSON_IsNumber(d) && d->valuedouble >= 1 && d->valuedouble <= 65535 &&
             d->valuedouble == (double)(int)d->valuedouble;
        if (ok) shape[i] = (int)d->valuedouble;
    }
    if (!ok) FAIL("spec.%s: expected [H, W, C], three integers in [1, 65535]", path);
    return 0;
}

/* Reads an optional enum; returns the canonical string or dflt. */
static int read_enum(const cJSON *spec, const char *path, const char *const *allowed,
                     const char *dflt, const char **out, char *err, size_t errlen)
{
    *out = jsonx_enum(spec, path, allowed, dflt);
    if (*out) return 0;
    char list[256] = "";
    for (size_t i = 0; allowed[i]; i++) {
        strncat(list, i ? " | " : "", sizeof list - strlen(list) - 1);
        strncat(list, allowed[i], sizeof list - strlen(list) - 1);
    }
    FAIL("spec.%s: expected one of %s", path, list);
}

/* Reads an optional array of strings; with nonempty, an empty array is an error. */
static int read_str_list(const cJSON *spec, const char *path, int nonempty, const cJSON **out,
                         char *err, size_t errlen)
{
    const cJSON *v = jsonx_at(spec, path), *it;
    *out = NULL;
    if (!v || cJSON_IsNull(v)) return 0;
    if (!cJSON_IsArray(v)) FAIL("spec.%s: expected an array of strings", path);
    if (nonempty && cJSON_GetArraySize(v) == 0) FAIL("spec.%s: must not be empty", path);
    cJSON_ArrayForEach(it, v)
    {
        if (!cJSON_IsString(it)) FAIL("spec.%s: expected an array of strings", path);
    }
    *out = v;
    return 0;
}

/* Pod hostnames are DNS labels (<= 63, [a-z0-9-], alphanumeric at both ends) and the
 * Service name an RFC 1035 label (starting with a letter). */
static int check_name(const JobSpec *s, char *err, size_t errlen)
{
    const char *name = s->name;
    size_t n = strlen(name);
    if (n == 0 || !islower((unsigned char)name[0]))
        FAIL("metadata.name: must start with a lowercase letter to name the worker Service, "
             "got \"%s\"",
             name);
    for (size_t i = 0; i < n; i++)
        if (!(islower((unsigned char)name[i]) || isdigit((unsigned char)name[i]) || name[i] == '-'))
            FAIL("metadata.name: worker hostnames allow only [a-z0-9-], got \"%s\"", name);
    for (Role r = 0; r < ROLE_COUNT; r++) {
        if (s->roles[r].replicas == 0) continue;
        char last[32];
        int lastlen =
            snprintf(last, sizeof last, "-%s-%d", jobspec_role_name(r), s->roles[r].replicas - 1);
        if (n + (size_t)lastlen > 63)
            FAIL("metadata.name: \"%s\" is too long: the hostname \"%s%s\" exceeds 63 "
                 "characters",
                 name, name, last);
    }
    return 0;
}

/* A PodTemplateSpec at spec.<path> (the job's or a role's), checked for the shapes
 * desired.c reads. */
static int check_template(const cJSON *t, const char *path, char *err, size_t errlen)
{
    if (!cJSON_IsObject(t)) FAIL("spec.%s: expected a PodTemplateSpec object", path);
    const cJSON *ts = jsonx_at(t, "spec");
    if (ts && !cJSON_IsObject(ts)) FAIL("spec.%s.spec: expected an object", path);
    const cJSON *cs = jsonx_at(t, "spec.containers");
    if (cs && !cJSON_IsArray(cs)) FAIL("spec.%s.spec.containers: expected an array", path);
    const cJSON *c;
    cJSON_ArrayForEach(c, cs)
    {
        if (!cJSON_IsObject(c) || !cJSON_IsString(jsonx_at(c, "name")))
            FAIL("spec.%s.spec.containers: each container needs a string name", path);
    }
    const char *const lists[] = {"spec.volumes", "spec.initContainers", NULL};
    for (size_t i = 0; lists[i]; i++) {
        const cJSON *l = jsonx_at(t, lists[i]);
        if (l && !cJSON_IsArray(l)) FAIL("spec.%s.%s: expected an array", path, lists[i]);
    }
    const char *const maps[] = {"metadata", "metadata.labels", "metadata.annotations",
                                "spec.securityContext", NULL};
    for (size_t i = 0; maps[i]; i++) {
        const cJSON *m = jsonx_at(t, maps[i]);
        if (m && !cJSON_IsObject(m)) FAIL("spec.%s.%s: expected an object", path, maps[i]);
    }
    return 0;
}

static const char *const role_names[ROLE_COUNT] = {"chief", "worker", "ps", "evaluator"};

const char *jobspec_role_name(Role role)
{
    return role >= 0 && role < ROLE_COUNT ? role_names[role] : NULL;
}

Role jobspec_role_of(const char *name)
{
    for (Role r = 0; r < ROLE_COUNT; r++)
        if (name && strcmp(name, role_names[r]) == 0) return r;
    return ROLE_COUNT;
}

int jobspec_slot(const JobSpec *s, Role role, int index)
{
    if (role < 0 || role >= ROLE_COUNT || index < 0 || index >= s->roles[role].replicas) return -1;
    int slot = index;
    for (Role r = 0; r < role; r++)
        slot += s->roles[r].replicas;
    return slot;
}

void jobspec_slot_role(const JobSpec *s, int slot, Role *role, int *index)
{
    Role r = 0;
    while (r < ROLE_COUNT - 1 && slot >= s->roles[r].replicas)
        slot -= s->roles[r++].replicas;
    *role = r;
    *index = slot;
}

int jobspec_chief_slot(const JobSpec *s)
{
    return s->roles[ROLE_CHIEF].replicas ? jobspec_slot(s, ROLE_CHIEF, 0)
                                         : jobspec_slot(s, ROLE_WORKER, 0);
}

/* spec.chief, spec.ps or spec.evaluator into *r: replicas (default 1 once the role is
 * given, at most max) and what layers over the job's. */
static int read_role(const cJSON *spec, Role role, int max, JobRole *r, char *err, size_t errlen)
{
    const char *name = role_names[role];
    const cJSON *o = jsonx_at(spec, name);
    char path[64];
    long long v;
    memset(r, 0, sizeof *r);
    if (!o || cJSON_IsNull(o)) return 0;
    if (!cJSON_IsObject(o)) FAIL("spec.%s: expected an object", name);
    snprintf(path, sizeof path, "%s.replicas", name);
    if (read_int(spec, path, 0, max, 1, &v, err, errlen)) return -EINVAL;
    r->replicas = (int)v;
    snprintf(path, sizeof path, "%s.image", name);
    if (read_str(spec, path, &r->image, err, errlen)) return -EINVAL;
    if (r->image && !*r->image) r->image = NULL;
    snprintf(path, sizeof path, "%s.command", name);
    if (read_str_list(spec, path, 1, &r->command, err, errlen)) return -EINVAL;
    snprintf(path, sizeof path, "%s.args", name);
    if (read_str_list(spec, path, 0, &r->args, err, errlen)) return -EINVAL;
    snprintf(path, sizeof path, "%s.template", name);
    const cJSON *t = jsonx_at(spec, path);
    if (t && !cJSON_IsNull(t)) {
        if (check_template(t, path, err, errlen)) return -EINVAL;
        r->template = t;
    }
    return 0;
}

/* The roles beside the workers, and what TensorFlow and the C trainer make of them. */
static int read_roles(const cJSON *spec, JobSpec *s, char *err, size_t errlen)
{
    JobRole *w = &s->roles[ROLE_WORKER];
    w->replicas = s->workers;
    w->image = s->image;
    w->command = s->command;
    w->args = s->args;
    w->template = s->template;
    if (read_role(spec, ROLE_CHIEF, 1, &s->roles[ROLE_CHIEF], err, errlen) ||
        read_role(spec, ROLE_PS, JOBSPEC_MAX_PS, &s->roles[ROLE_PS], err, errlen) ||
        read_role(spec, ROLE_EVALUATOR, 1, &s->roles[ROLE_EVALUATOR], err, errlen))
        return -EINVAL;
    for (Role r = 0; r < ROLE_COUNT; r++) {
        const JobRole *jr = &s->roles[r];
        s->npods += jr->replicas;
        if (r == ROLE_WORKER) continue;
        if (jr->command && !s->command)
            FAIL("spec.%s.command: needs spec.command (without it every pod runs the C "
                 "trainer)",
                 role_names[r]);
        if (jr->args && !s->command)
            FAIL("spec.%s.args: needs spec.command (the trainer's arguments come from the "
                 "spec)",
                 role_names[r]);
    }
    if (!s->command) {
        if (s->roles[ROLE_PS].replicas)
            FAIL("spec.ps: the C trainer runs chief and workers only; set spec.command to run "
                 "your own program with parameter servers");
        if (s->roles[ROLE_EVALUATOR].replicas)
            FAIL("spec.evaluator: the C trainer runs chief and workers only; set spec.command "
                 "to run your own program with an evaluator");
    }
    if (s->roles[ROLE_PS].replicas && !s->roles[ROLE_CHIEF].replicas)
        FAIL("spec.ps: parameter servers need a chief (spec.chief), which coordinates the "
             "training");
    return 0;
}

int jobspec_parse(const cJSON *job, JobSpec *s, char *err, size_t errlen)
{
    static const char *const collectives[] = {"auto", "ring", "nccl", NULL};
    static const char *const restarts[] = {"Never", "OnFailure", "ExitCode", NULL};
    static const char *const cleans[] = {"None", "Running", "All", NULL};
    static const char *const successes[] = {"ChiefCompleted", "AllWorkers", NULL};
    static const char *const shards[] = {"auto", "data", "file", "off", NULL};
    static const char *const scales[] = {"unit", "raw", NULL};
    long long v;
    const char *e;

    memset(s, 0, sizeof *s);
    s->name = jsonx_str(job, "metadata.name");
    s->ns = jsonx_str(job, "metadata.namespace");
    s->uid = jsonx_str(job, "metadata.uid");
    if (!s->name || !s->ns || !s->uid) FAIL("metadata: name, namespace and uid must be strings");
    s->generation = jsonx_int(job, "metadata.generation", 0);
    s->queue_name = jsonx_key_str(jsonx_obj(job, "metadata.labels"), LABEL_KUEUE_QUEUE);
    if (s->queue_name && !*s->queue_name) s->queue_name = NULL; /* "" names no queue */

    const cJSON *spec = jsonx_at(job, "spec");
    if (!cJSON_IsObject(spec)) FAIL("spec: expected an object");

    /* The CRD's maximum: every pod's TF_CONFIG lists every worker, so a reconcile that
     * creates the group writes workers^2 addresses (2300 workers: 26 s of CPU under ASan
     * in fuzz-reconcile). */
    if (read_int(spec, "workers", 1, JOBSPEC_MAX_WORKERS, 1, &v, err, errlen)) return -EINVAL;
    s->workers = (int)v;
    if (read_str(spec, "image", &s->image, err, errlen)) return -EINVAL;
    if (s->image && !*s->image) s->image = NULL;
    if (read_str_list(spec, "command", 1, &s->command, err, errlen) ||
        read_str_list(spec, "args", 0, &s->args, err, errlen))
        return -EINVAL;
    if (s->command && !s->image)
        FAIL("spec.image: required with spec.command (the image that holds the program)");
    if (s->args && !s->command)
        FAIL("spec.args: needs spec.command (the trainer's arguments come from the spec)");
    if (read_int(spec, "port", 1, 65535, 2222, &v, err, errlen)) return -EINVAL;
    s->port = (int)v;
    if (read_enum(spec, "collective", collectives, "auto", &s->collective, err, errlen))
        return -EINVAL;
    if (read_int(spec, "gpusPerWorker", 0, 64, 0, &v, err, errlen)) return -EINVAL;
    s->gpus = (int)v;
    if (strcmp(s->collective, "nccl") == 0 && s->gpus == 0)
        FAIL("spec.collective: nccl needs spec.gpusPerWorker > 0");

    const cJSON *model = jsonx_at(spec, "model");
    if (!model || cJSON_IsNull(model)) {
        s->model_name = "tutorial-cnn";
    } else if (cJSON_IsString(model) && *model->valuestring) {
        s->model_name = model->valuestring;
        for (const char *p = s->model_name; *p; p++)
            if (!(isalnum((unsigned char)*p) || *p == '-' || *p == '_' || *p == '.'))
                FAIL("spec.model: a built-in model name is [A-Za-z0-9._-], got \"%s\"",
                     s->model_name);
    } else if (cJSON_IsObject(model) && cJSON_IsArray(jsonx_at(model, "layers")) &&
               cJSON_GetArraySize(jsonx_at(model, "layers")) > 0) {
        s->model_inline = model;
    } else if (cJSON_IsObject(model) && cJSON_IsString(jsonx_at(model, "class_name")) &&
               cJSON_IsObject(jsonx_at(model, "config"))) {
        /* Keras's model.to_json(): the trainer reads it and names what it refuses */
        s->model_inline = model;
    } else {
        FAIL("spec.model: expected a built-in model name, an object with a non-empty "
             "layers array, or a Keras model's to_json() (an object with class_name and "
             "config)");
    }

    if (jsonx_at(spec, "dataset") && !cJSON_IsObject(jsonx_at(spec, "dataset")))
        FAIL("spec.dataset: expected an object");
    if (read_str(spec, "dataset.name", &s->dataset_name, err, errlen)) return -EINVAL;
    if (read_str(spec, "dataset.path", &s->dataset_path, err, errlen)) return -EINVAL;
    if (read_str(spec, "dataset.source", &s->data_source, err, errlen)) return -EINVAL;
    if (read_str(spec, "dataset.evalSource", &s->eval_source, err, errlen)) return -EINVAL;
    if (jsonx_at(spec, "dataset.pixelScale") &&
        read_enum(spec, "dataset.pixelScale", scales, NULL, &s->pixel_scale, err, errlen))
        return -EINVAL;
    if (read_str(spec, "dataset.imageFeature", &s->image_feature, err, errlen)) return -EINVAL;
    if (read_str(spec, "dataset.labelFeature", &s->label_feature, err, errlen)) return -EINVAL;
    if (read_shape(spec, "dataset.imageShape", s->image_shape, err, errlen)) return -EINVAL;
    if (read_int(spec, "dataset.cacheMiB", 0, 1 << 30, -1, &v, err, errlen)) return -EINVAL;
    s->data_cache_mib = (int)v;
    if (read_str(spec, "dataset.credentialsSecret", &s->data_secret, err, errlen)) return -EINVAL;
    if (s->data_secret && !dns1123_subdomain(s->data_secret))
        FAIL("spec.dataset.credentialsSecret: expected a Secret's name (lowercase letters, "
             "digits, '-' and '.', at most 253), got \"%.64s\"",
             s->data_secret);
    if (jsonx_at(spec, "dataset.shardPolicy")) {
        if (read_enum(spec, "dataset.shardPolicy", shards, NULL, &s->shard_policy, err, errlen))
            return -EINVAL;
    }

    if (jsonx_at(spec, "training") && !cJSON_IsObject(jsonx_at(spec, "training")))
        FAIL("spec.training: expected an object");
    if (read_int(spec, "training.epochs", 1, 1000000, -1, &v, err, errlen)) return -EINVAL;
    s->epochs = (int)v;
    if (read_int(spec, "training.stepsPerEpoch", 0, 1000000000, -1, &v, err, errlen))
        return -EINVAL;
    s->steps_per_epoch = (int)v;
    if (read_int(spec, "training.perWorkerBatchSize", 1, 1000000, -1, &v, err, errlen))
        return -EINVAL;
    s->per_worker_batch = (int)v;
    if (read_str(spec, "training.optimizer.name", &s->optimizer, err, errlen)) return -EINVAL;
    const cJSON *lr = jsonx_at(spec, "training.optimizer.learningRate");
    if (lr && !cJSON_IsNull(lr)) {
        if (!cJSON_IsNumber(lr) || !(lr->valuedouble > 0))
            FAIL("spec.training.optimizer.learningRate: expected a number > 0");
        s->learning_rate = lr->valuedouble;
        s->learning_rate_set = 1;
    }
    const cJSON *sc = jsonx_at(spec, "training.optimizer.scaleByWorkers");
    if (sc && !cJSON_IsNull(sc) && !cJSON_IsBool(sc))
        FAIL("spec.training.optimizer.scaleByWorkers: expected a boolean");
    s->scale_by_workers = cJSON_IsTrue(sc);
    if (jsonx_at(spec, "training.seed")) {
        if (read_int(spec, "training.seed", 0, 9000000000000000LL, 0, &s->seed, err, errlen))
            return -EINVAL;
        s->seed_set = 1;
    }

    if (jsonx_at(spec, "checkpoint") && !cJSON_IsObject(jsonx_at(spec, "checkpoint")))
        FAIL("spec.checkpoint: expected an object");
    if (read_str(spec, "checkpoint.claimName", &s->checkpoint_claim, err, errlen)) return -EINVAL;
    if (s->checkpoint_claim && !*s->checkpoint_claim) s->checkpoint_claim = NULL;
    if (read_str(spec, "checkpoint.path", &s->checkpoint_path, err, errlen)) return -EINVAL;
    if (!s->checkpoint_path) s->checkpoint_path = "/checkpoints";
    if (s->checkpoint_path[0] != '/')
        FAIL("spec.checkpoint.path: expected an absolute path, got \"%s\"", s->checkpoint_path);
    if (read_int(spec, "checkpoint.everySteps", 1, 1000000000, -1, &v, err, errlen)) return -EINVAL;
    s->checkpoint_every = (int)v;
    if (read_int(spec, "checkpoint.keep", 1, 1000, -1, &v, err, errlen)) return -EINVAL;
    s->checkpoint_keep = (int)v;
    if (read_export(spec, s, err, errlen)) return -EINVAL;
    if (read_initial_weights(spec, s, err, errlen)) return -EINVAL;

    if (read_enum(spec, "restartPolicy", restarts, "OnFailure", &e, err, errlen)) return -EINVAL;
    s->restart_policy = e == restarts[0]   ? RESTART_NEVER
                        : e == restarts[1] ? RESTART_ON_FAILURE
                                           : RESTART_EXIT_CODE;
    if (read_int(spec, "backoffLimit", 0, 1000000, 6, &v, err, errlen)) return -EINVAL;
    s->backoff_limit = (int)v;
    if (read_int(spec, "recoveryTimeoutSeconds", 0, 86400, 120, &s->recovery_timeout_s, err,
                 errlen))
        return -EINVAL;
    if (read_elastic(spec, s, err, errlen)) return -EINVAL;
    if (read_int(spec, "activeDeadlineSeconds", 1, 1LL << 40, -1, &s->active_deadline_s, err,
                 errlen))
        return -EINVAL;
    if (read_int(spec, "startupDeadlineSeconds", 1, 1LL << 40, -1, &s->startup_deadline_s, err,
                 errlen))
        return -EINVAL;
    if (read_int(spec, "ttlSecondsAfterFinished", 0, 1LL << 40, -1, &s->ttl_after_finished_s, err,
                 errlen))
        return -EINVAL;
    if (read_enum(spec, "cleanPodPolicy", cleans, "Running", &e, err, errlen)) return -EINVAL;
    s->clean_pod_policy = e == cleans[0] ? CLEAN_NONE : e == cleans[1] ? CLEAN_RUNNING : CLEAN_ALL;
    if (read_enum(spec, "successPolicy", successes, "ChiefCompleted", &e, err, errlen))
        return -EINVAL;
    s->success_policy = e == successes[0] ? SUCCESS_CHIEF_COMPLETED : SUCCESS_ALL_WORKERS;
    const cJSON *su = jsonx_at(spec, "suspend");
    if (su && !cJSON_IsNull(su) && !cJSON_IsBool(su)) FAIL("spec.suspend: expected a boolean");
    s->suspend = cJSON_IsTrue(su);
    const cJSON *np = jsonx_at(spec, "networkPolicy");
    if (np && !cJSON_IsNull(np) && !cJSON_IsBool(np))
        FAIL("spec.networkPolicy: expected a boolean");
    s->network_policy = cJSON_IsTrue(np);
    const cJSON *gs = jsonx_at(spec, "gangScheduling");
    if (gs && !cJSON_IsNull(gs) && !cJSON_IsBool(gs))
        FAIL("spec.gangScheduling: expected a boolean");
    s->gang_scheduling = !cJSON_IsFalse(gs);

    const cJSON *t = jsonx_at(spec, "template");
    if (t && !cJSON_IsNull(t)) {
        if (check_template(t, "template", err, errlen)) return -EINVAL;
        s->template = t;
    }
    if (read_roles(spec, s, err, errlen) || check_name(s, err, errlen) ||
        read_global_batch(job, s, err, errlen) || check_file_shards(s, err, errlen))
        return -EINVAL;
    return 0;
}
