#include "config.h"

#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "remote.h"

typedef enum {
    OPT_STR,
    OPT_INT,
    OPT_U64,
    OPT_DOUBLE,
    OPT_BOOL,
    OPT_ENUM_OPTIMIZER,
    OPT_ENUM_SHARD,
    OPT_ENUM_COLLECTIVE,
    OPT_ENUM_DATASET,
    OPT_ENUM_DEVICE,
    OPT_ENUM_PIXEL_SCALE,
    OPT_SHAPE
} OptType;

typedef struct {
    const char *name; /* without the leading "--" */
    OptType type;
    size_t offset;
    size_t size;      /* strings: buffer size */
    double min, max;  /* numbers */
    const char *help;
} Option;

static const Option options[] = {
    {"model", OPT_STR, offsetof(Config, model), sizeof(((Config *)0)->model), 0, 0,
     "NAME|FILE  tutorial-cnn | tutorial-cnn-l2 | cnn2 | mlp | a model JSON/YAML file\n"
     "                             (Keras's model.to_json() too) | a Keras .keras archive\n"
     "                             (model.save: its config and its weights)"},
    {"dataset", OPT_ENUM_DATASET, offsetof(Config, dataset), sizeof(((Config *)0)->dataset), 0, 0,
     "NAME  fashion-mnist | mnist"},
    {"data-dir", OPT_STR, offsetof(Config, data_dir), sizeof(((Config *)0)->data_dir), 0, 0,
     "DIR  IDX files, .gz or raw"},
    {"data", OPT_STR, offsetof(Config, data), sizeof(((Config *)0)->data), 0, 0,
     "SOURCE  idx:DIR | npz:FILE[?x=KEY&y=KEY] | npy:IMAGES,LABELS |\n"
     "                             tfrecord:PATTERN[,PATTERN...]\n"
     "                             (default idx:<data-dir>; wins over --dataset/--data-dir)"},
    {"eval-data", OPT_STR, offsetof(Config, eval_data), sizeof(((Config *)0)->eval_data), 0, 0,
     "SOURCE  the --eval examples (default: idx:DIR's t10k files, npz:FILE's\n"
     "                             x_test/y_test; npy: and tfrecord: none, give one)"},
    {"pixel-scale", OPT_ENUM_PIXEL_SCALE, offsetof(Config, pixel_scale), 0, 0, 0,
     "unit|raw  uint8 values as v/255 (unit, the default) or 0..255 (raw)"},
    {"image-feature", OPT_STR, offsetof(Config, image_feature),
     sizeof(((Config *)0)->image_feature), 0, 0,
     "NAME  tfrecord: the image's feature, PNG/JPEG/raw bytes or floats (image)"},
    {"label-feature", OPT_STR, offsetof(Config, label_feature),
     sizeof(((Config *)0)->label_feature), 0, 0,
     "NAME  tfrecord: the label's feature, an int64_list (label)"},
    {"image-shape", OPT_SHAPE, offsetof(Config, image_shape), 0, 0, 0,
     "H,W,C  tfrecord: the shape of raw uint8 bytes or a float_list (unset:\n"
     "                             PNG or JPEG, their shape read from each image)"},
    {"data-cache-mib", OPT_INT, offsetof(Config, data_cache_mib), 0, 0, 1 << 30,
     "N  tfrecord: hold the examples in memory, each image decoded once, when\n"
     "                             they take at most N MiB decoded, else stream them, each\n"
     "                             read and decoded when used: files by pread, s3:// and\n"
     "                             http(s):// objects by ranged GETs, a batch's records\n"
     "                             at once (1024; 0: always stream)"},
    {"epochs", OPT_INT, offsetof(Config, epochs), 0, 1, 1e6, "N  (3)"},
    {"steps-per-epoch", OPT_INT, offsetof(Config, steps_per_epoch), 0, 0, 1e9,
     "N  (70); 0 = one pass over this worker's shard"},
    {"per-worker-batch", OPT_INT, offsetof(Config, per_worker_batch), 0, 1, 65536, "N  (64)"},
    {"global-batch", OPT_INT, offsetof(Config, global_batch), 0, 0, 4194304,
     "N  examples per step over all workers, re-cut over the workers present\n"
     "                             (0: --per-worker-batch x workers)"},
    {"optimizer", OPT_ENUM_OPTIMIZER, offsetof(Config, optimizer), 0, 0, 0,
     "NAME  sgd | rmsprop | adam | adam-amsgrad"},
    {"lr", OPT_DOUBLE, offsetof(Config, lr), 0, 0, 1e6, "F  learning rate (0.001)"},
    {"momentum", OPT_DOUBLE, offsetof(Config, momentum), 0, 0, 1, "F  sgd/rmsprop momentum (0)"},
    {"nesterov", OPT_BOOL, offsetof(Config, nesterov), 0, 0, 0, "  Nesterov momentum (sgd)"},
    {"scale-lr-by-workers", OPT_BOOL, offsetof(Config, scale_lr_by_workers), 0, 0, 0,
     "  multiply the learning rate by the number of workers"},
    {"shuffle-buffer", OPT_INT, offsetof(Config, shuffle_buffer), 0, 1, 1e9, "N  (60000)"},
    {"shard-policy", OPT_ENUM_SHARD, offsetof(Config, shard_policy), 0, 0, 0,
     "P  auto | data | file | off"},
    {"seed", OPT_U64, offsetof(Config, seed), 0, 0, 0, "N  (1)"},
    {"collective", OPT_ENUM_COLLECTIVE, offsetof(Config, collective),
     sizeof(((Config *)0)->collective), 0, 0, "NAME  auto | ring | nccl"},
    {"device", OPT_ENUM_DEVICE, offsetof(Config, device), sizeof(((Config *)0)->device), 0, 0,
     "D  auto | cpu | gpu (auto: a CUDA device when built with GPU=1 and one is present)"},
    {"cuda-graphs", OPT_BOOL, offsetof(Config, cuda_graphs), 0, 0, 0,
     "  replay the GPU step as a CUDA graph (true; =false: launch by launch)"},
    {"gpus-per-worker", OPT_INT, offsetof(Config, gpus_per_worker), 0, 0, 64,
     "N  > 1: N ranks in this worker, one per GPU, ranks = workers x N (make GPU=1 builds)"},
    {"checkpoint-dir", OPT_STR, offsetof(Config, checkpoint_dir),
     sizeof(((Config *)0)->checkpoint_dir), 0, 0, "DIR"},
    {"checkpoint-every-steps", OPT_INT, offsetof(Config, checkpoint_every_steps), 0, 0, 1e9, "N"},
    {"keep-checkpoints", OPT_INT, offsetof(Config, keep_checkpoints), 0, 1, 1e6, "N  (5)"},
    {"metrics-file", OPT_STR, offsetof(Config, metrics_file), sizeof(((Config *)0)->metrics_file),
     0, 0, "FILE  JSON lines, one per step and per epoch"},
    {"tensorboard-dir", OPT_STR, offsetof(Config, tensorboard_dir),
     sizeof(((Config *)0)->tensorboard_dir), 0, 0,
     "DIR  the chief's TensorBoard event files (default: <checkpoint-dir>/logs)"},
    {"metrics-port", OPT_INT, offsetof(Config, metrics_port), 0, 0, 65535,
     "N  the chief serves Prometheus text on GET /metrics there (0: off, the default)"},
    {"initial-weights", OPT_STR, offsetof(Config, initial_weights),
     sizeof(((Config *)0)->initial_weights), 0, 0,
     "FILE  start from these weights (fine-tuning): a Keras FILE.weights.h5\n"
     "                             (model.save_weights) or legacy .h5 of the --model's\n"
     "                             layers, or a .keras's; read only at a fresh start: a run\n"
     "                             resumed from a checkpoint or a live recovery's replacement\n"
     "                             takes the checkpoint's or the peers' weights"},
    {"export", OPT_STR, offsetof(Config, export_path), sizeof(((Config *)0)->export_path), 0, 0,
     "FILE  the chief writes the trained model there at the end: FILE.keras (Keras's\n"
     "                             model.save) or FILE.weights.h5 (model.save_weights)"},
    {"eval", OPT_BOOL, offsetof(Config, eval), 0, 0, 0,
     "  evaluate on the test set after each epoch"},
    {"index", OPT_INT, offsetof(Config, index), 0, 0, 1e6, "N  override TF_CONFIG's task index"},
    {"rendezvous-timeout", OPT_DOUBLE, offsetof(Config, rendezvous_timeout), 0, 0, 1e7,
     "S  how long to wait for peers, retrying wrong answers (300); then exit 75"},
    {"recovery-timeout", OPT_DOUBLE, offsetof(Config, recovery_timeout), 0, 0, 1e7,
     "S  live recovery: how long the survivors of a lost peer wait for its\n"
     "                             replacement (120); then, or with 0, every rank exits 75"},
    {"print-weights-hash", OPT_BOOL, offsetof(Config, print_weights_hash), 0, 0, 0,
     "  print \"weights-sha256: <hex>\" of the final parameters"},
    {"threads", OPT_INT, offsetof(Config, threads), 0, 0, 1024,
     "N  GEMM threads (0: OPENBLAS_NUM_THREADS, else the CPUs available)"},
    {"max-model-memory-gib", OPT_DOUBLE, offsetof(Config, max_model_memory_gib), 0, 0.001, 1e6,
     "F  refuse at start-up (exit 3) a model whose parameters,\n"
     "                             gradients, optimizer state and activations at\n"
     "                             --per-worker-batch need more GiB (4; the built-in models\n"
     "                             need 2 to 131 MiB at batch 64, tutorial-cnn 21 MiB plus\n"
     "                             0.4 MiB per example; a GPU holds about as much again)"},
};
#define NUM_OPTIONS (sizeof options / sizeof options[0])

static void defaults(Config *c)
{
    memset(c, 0, sizeof *c);
    strcpy(c->model, "tutorial-cnn");
    strcpy(c->dataset, "fashion-mnist");
    strcpy(c->image_feature, source_default_options.image_feature);
    strcpy(c->label_feature, source_default_options.label_feature);
    c->epochs = 3;
    c->steps_per_epoch = 70;
    c->per_worker_batch = 64;
    c->optimizer = OPT_SGD;
    c->lr = 0.001;
    c->shuffle_buffer = 60000;
    c->data_cache_mib = SOURCE_CACHE_MIB_DEFAULT;
    c->shard_policy = SHARD_AUTO;
    c->seed = 1;
    strcpy(c->collective, "auto");
    strcpy(c->device, "auto");
    c->cuda_graphs = 1;
    c->keep_checkpoints = 5;
    c->index = -1;
    c->rendezvous_timeout = 300;
    c->recovery_timeout = 120;
    c->max_model_memory_gib = 4;
}

/* Sets option o from text v; `who` names the flag or variable in errors. */
static int set_option(Config *c, const Option *o, const char *v, const char *who, char *err,
                      size_t errlen)
{
    char *base = (char *)c + o->offset, *end;
    errno = 0;
    switch (o->type) {
    case OPT_STR:
        if (!*v || strlen(v) >= o->size) {
            snprintf(err, errlen, "%s: expected a non-empty value under %zu bytes", who, o->size);
            return -EINVAL;
        }
        strcpy(base, v);
        return 0;
    case OPT_INT: {
        long n = strtol(v, &end, 10);
        if (!*v || *end || errno || n < o->min || n > o->max) {
            snprintf(err, errlen, "%s: expected an integer in [%.0f, %.0f], got '%s'", who, o->min,
                     o->max, v);
            return -EINVAL;
        }
        *(int *)(void *)base = (int)n;
        return 0;
    }
    case OPT_U64: {
        unsigned long long n = strtoull(v, &end, 10);
        if (!*v || *end || errno || *v == '-') {
            snprintf(err, errlen, "%s: expected a non-negative integer, got '%s'", who, v);
            return -EINVAL;
        }
        *(uint64_t *)(void *)base = n;
        return 0;
    }
    case OPT_DOUBLE: {
        double d = strtod(v, &end);
        if (!*v || *end || errno || !isfinite(d) || d < o->min || d > o->max ||
            (o->offset == offsetof(Config, lr) && d <= 0)) {
            snprintf(err, errlen, "%s: expected a number in %s%g, %g], got '%s'", who,
                     o->offset == offsetof(Config, lr) ? "(" : "[", o->min, o->max, v);
            return -EINVAL;
        }
        *(double *)(void *)base = d;
        return 0;
    }
    case OPT_BOOL:
        if (!strcmp(v, "1") || !strcmp(v, "true")) *(int *)(void *)base = 1;
        else if (!strcmp(v, "0") || !strcmp(v, "false")) *(int *)(void *)base = 0;
        else {
            snprintf(err, errlen, "%s: expected true/false or 1/0, got '%s'", who, v);
            return -EINVAL;
        }
        return 0;
    case OPT_ENUM_OPTIMIZER:
        if (optim_parse_kind(v, (OptimizerKind *)(void *)base) == 0) return 0;
        snprintf(err, errlen, "%s: expected sgd, rmsprop, adam or adam-amsgrad, got '%s'", who, v);
        return -EINVAL;
    case OPT_ENUM_SHARD:
        if (data_parse_shard_policy(v, (ShardPolicy *)(void *)base) == 0) return 0;
        snprintf(err, errlen, "%s: expected auto, data, file or off, got '%s'", who, v);
        return -EINVAL;
    case OPT_ENUM_COLLECTIVE:
        if (!strcmp(v, "auto") || !strcmp(v, "ring") || !strcmp(v, "nccl")) {
            strcpy(base, v);
            return 0;
        }
        snprintf(err, errlen, "%s: expected auto, ring or nccl, got '%s'", who, v);
        return -EINVAL;
    case OPT_ENUM_DATASET:
        if (!strcmp(v, "fashion-mnist") || !strcmp(v, "mnist")) {
            strcpy(base, v);
            return 0;
        }
        snprintf(err, errlen, "%s: expected fashion-mnist or mnist, got '%s'", who, v);
        return -EINVAL;
    case OPT_ENUM_DEVICE:
        if (!strcmp(v, "auto") || !strcmp(v, "cpu") || !strcmp(v, "gpu")) {
            strcpy(base, v);
            return 0;
        }
        snprintf(err, errlen, "%s: expected auto, cpu or gpu, got '%s'", who, v);
        return -EINVAL;
    case OPT_ENUM_PIXEL_SCALE:
        if (source_parse_pixel_scale(v, (PixelScale *)(void *)base) == 0) return 0;
        snprintf(err, errlen, "%s: expected unit or raw, got '%s'", who, v);
        return -EINVAL;
    case OPT_SHAPE:
        if (source_parse_shape(v, (int *)(void *)base) == 0) return 0;
        snprintf(err, errlen, "%s: expected H,W,C (three integers in [1, 65535]), got '%s'", who,
                 v);
        return -EINVAL;
    }
    return -EINVAL;
}

static void env_name(char *out, size_t outlen, const char *flag)
{
    size_t i = (size_t)snprintf(out, outlen, "KUBETRAIN_");
    for (; *flag && i + 1 < outlen; flag++) out[i++] = *flag == '-' ? '_' : (char)(*flag & ~0x20);
    out[i] = '\0';
}

/* Fills in the data sources from the short forms and checks their syntax; data_who and
 * eval_who name where --data and --eval-data came from ("" when not given). */
static int resolve_sources(Config *c, const char *data_who, const char *eval_who, char *err,
                           size_t errlen)
{
    char why[256];
    if (!*data_who) snprintf(c->data, sizeof c->data, "idx:%s", c->data_dir);
    else if (source_check_spec(c->data, why, sizeof why)) {
        snprintf(err, errlen, "%s: %s", data_who, why);
        return -EINVAL;
    }
    if (*eval_who) {
        if (!source_check_spec(c->eval_data, why, sizeof why)) return 0;
        snprintf(err, errlen, "%s: %s", eval_who, why);
        return -EINVAL;
    }
    if (source_eval_spec(c->data, c->eval_data, sizeof c->eval_data) && c->eval) {
        char shown[4096];
        remote_redact(c->data, shown, sizeof shown);
        snprintf(err, errlen,
                 "--eval: expected --eval-data SOURCE with %s %.200s (a pair of .npy files "
                 "or TFRecord files hold one set of examples)",
                 data_who, shown);
        return -EINVAL;
    }
    return 0;
}

/* Where option o came from, kept for the checks after parsing. */
static void note_source(const Option *o, const char *who, char *data_who, char *eval_who)
{
    if (o->offset == offsetof(Config, data)) snprintf(data_who, 80, "%s", who);
    if (o->offset == offsetof(Config, eval_data)) snprintf(eval_who, 80, "%s", who);
}

int config_parse(Config *c, int argc, char **argv, char *err, size_t errlen)
{
    int rc, data_dir_set = 0;
    char data_who[80] = "", eval_who[80] = "";
    defaults(c);
    for (size_t i = 0; i < NUM_OPTIONS; i++) {
        char name[64];
        env_name(name, sizeof name, options[i].name);
        const char *v = getenv(name);
        if (!v || !*v) continue;
        if ((rc = set_option(c, &options[i], v, name, err, errlen))) return rc;
        data_dir_set |= options[i].offset == offsetof(Config, data_dir);
        note_source(&options[i], name, data_who, eval_who);
    }
    for (int a = 0; a < argc; a++) {
        const char *arg = argv[a];
        if (!strcmp(arg, "--help") || !strcmp(arg, "-h")) return 1;
        if (strncmp(arg, "--", 2) != 0) {
            snprintf(err, errlen, "%s: expected an option starting with --", arg);
            return -EINVAL;
        }
        const char *eq = strchr(arg, '=');
        size_t nlen = eq ? (size_t)(eq - arg - 2) : strlen(arg + 2);
        const Option *o = NULL;
        for (size_t i = 0; i < NUM_OPTIONS; i++)
            if (strlen(options[i].name) == nlen && !strncmp(options[i].name, arg + 2, nlen))
                o = &options[i];
        if (!o) {
            snprintf(err, errlen, "%.*s: unknown option (see --help)", (int)(nlen + 2), arg);
            return -EINVAL;
        }
        char who[80];
        snprintf(who, sizeof who, "--%s", o->name);
        const char *v;
        if (eq) v = eq + 1;
        else if (o->type == OPT_BOOL) v = "1";
        else if (a + 1 < argc) v = argv[++a];
        else {
            snprintf(err, errlen, "%s: expected a value", who);
            return -EINVAL;
        }
        if ((rc = set_option(c, o, v, who, err, errlen))) return rc;
        data_dir_set |= o->offset == offsetof(Config, data_dir);
        note_source(o, who, data_who, eval_who);
    }
    if (!data_dir_set)
        snprintf(c->data_dir, sizeof c->data_dir, "/usr/share/datasets/%s", c->dataset);
    if ((rc = resolve_sources(c, data_who, eval_who, err, errlen))) return rc;
    if (c->nesterov && c->optimizer != OPT_SGD) {
        snprintf(err, errlen, "--nesterov: expected only with --optimizer sgd");
        return -EINVAL;
    }
    return 0;
}

int config_global_batch(const Config *c, int world)
{
    return c->global_batch > 0 ? c->global_batch : c->per_worker_batch * world;
}

void config_usage(FILE *f)
{
    fprintf(f, "usage: kubetrain-trainer [train] [options]\n"
               "       kubetrain-trainer export --checkpoint-dir DIR --model SPEC --out FILE\n"
               "       kubetrain-trainer --version\n"
               "       kubetrain-trainer --print-cpu      the kernels the products run on\n"
               "Options (each also as KUBETRAIN_<NAME> in the environment; flags win):\n");
    for (size_t i = 0; i < NUM_OPTIONS; i++)
        fprintf(f, "  --%-24s %s\n", options[i].name, options[i].help);
}
