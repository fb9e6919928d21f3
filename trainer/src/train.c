#include "train.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt.h"
#include "gemm.h"
#include "overlap.h"
#include "pool.h"
#include "util.h"
#ifdef KT_GPU
#include "gpu/coll_nccl.h"
#include "gpu/gpu.h"
#endif

int trainer_pick_device(const Config *cfg, int rank, int *device, char *err, size_t errlen)
{
    *device = -1;
    if (!strcmp(cfg->device, "cpu")) return 0;
#ifdef KT_GPU
    char why[256] = "";
    int n = gpu_device_count(why, sizeof why);
    if (n > 0) {
        *device = rank % n;
        return 0;
    }
    if (!strcmp(cfg->device, "auto")) return 0;
    snprintf(err, errlen, "--device gpu: no CUDA device on this machine (%s)", why);
#else
    (void)rank;
    if (!strcmp(cfg->device, "auto")) return 0;
    snprintf(err, errlen,
             "--device gpu: this trainer was built without CUDA (build it with "
             "make GPU=1)");
#endif
    return -ENODEV;
}

int trainer_sync_host(Trainer *t, char *err, size_t errlen)
{
#ifdef KT_GPU
    if (t->gpu) return gpu_model_download(t->gpu, t->model->params, t->opt->state, err, errlen);
#else
    (void)t, (void)err, (void)errlen;
#endif
    return 0;
}

/* The largest of the slices a global batch g is cut into over world ranks. */
static int largest_slice(int g, int world)
{
    return g / world + (g % world != 0);
}

int trainer_largest_slice(const Config *cfg, int world)
{
    return largest_slice(config_global_batch(cfg, world), world);
}

int trainer_create_model(Model **out, const Config *cfg, int world, int *exit_code, char *err,
                         size_t errlen)
{
    OptimizerConfig oc = optim_defaults(cfg->optimizer, (float)cfg->lr);
    oc.momentum = (float)cfg->momentum;
    const ModelBudget budget = {.batch = trainer_largest_slice(cfg, world),
                                .state_per_param = optim_state_per_param(&oc),
                                .limit = (size_t)(cfg->max_model_memory_gib * (1 << 30))};
    int rc = model_create_within(out, cfg->model, cfg->seed, &budget, err, errlen);
    *exit_code = rc == -ENOENT ? KT_EXIT_USAGE : KT_EXIT_DATA;
    if (rc == -E2BIG) {
        size_t n = strlen(err);
        snprintf(err + n, errlen - n,
                 " (--max-model-memory-gib %g): make the model or "
                 "--per-worker-batch (--global-batch) smaller, or raise --max-model-memory-gib "
                 "(KUBETRAIN_MAX_MODEL_MEMORY_GIB) where the machine has the memory",
                 cfg->max_model_memory_gib);
    }
    return rc;
}

/* Whether the images of src fit the model's input: an input_shape [h, w, c], [h, w]
 * when c = 1, or h * w * c values for a flat one. Every example is read as input_size
 * values, so another size would read past the images' buffer, and another shape of the
 * same size would train on scrambled pixels. Returns 0, or -EINVAL with err naming the
 * file and both shapes. */
static int check_images(const Source *src, const Model *m, char *err, size_t errlen)
{
    const int *in = m->input_shape;
    int fits = source_example_size(src) == m->input_size;
    if (m->input_rank >= 2) fits &= in[0] == src->h && in[1] == src->w;
    if (fits) return 0;
    char shape[64];
    int n = snprintf(shape, sizeof shape, "[%d", in[0]);
    for (int i = 1; i < m->input_rank; i++)
        n += snprintf(shape + n, sizeof shape - (size_t)n, ", %d", in[i]);
    snprintf(shape + n, sizeof shape - (size_t)n, "]");
    snprintf(err, errlen,
             "%s: %dx%dx%d images, but the model's input_shape is %s (%zu values per "
             "example): use --data with images of that shape, or a model whose input_shape "
             "is [%d, %d, %d]",
             src->images_at, src->h, src->w, src->c, shape, m->input_size, src->h, src->w, src->c);
    return -EINVAL;
}

/* Opens t's training source for rank `rank` of `world` into s: with file sharding only
 * that rank's files. Returns 0 or source_open's error. */
static int open_train(const Trainer *t, Source *s, int rank, int world, char *err, size_t errlen)
{
    const Config *cfg = &t->cfg;
    const int by_file = cfg->shard_policy == SHARD_FILE;
    const SourceOptions so = {
        .image_feature = cfg->image_feature,
        .label_feature = cfg->label_feature,
        .image_shape = {cfg->image_shape[0], cfg->image_shape[1], cfg->image_shape[2]},
        .file_shard = by_file ? rank : 0,
        .file_shards = by_file ? world : 0,
        .cache_bytes = (size_t)cfg->data_cache_mib << 20};
    return source_open(s, cfg->data, SOURCE_TRAIN, (int)t->model->num_classes, &so, err, errlen);
}

/* t's data pipeline for rank `rank` of `world` at t's global batch, replacing the one
 * it had; t->local_batch follows. Returns 0 or pipeline_create's error. */
static int make_pipeline(Trainer *t, int rank, int world, char *err, size_t errlen)
{
    const Config *cfg = &t->cfg;
    PipelineConfig pc = {.batch = cfg->per_worker_batch,
                         .global_batch = t->global_batch,
                         .shuffle_buffer = (size_t)cfg->shuffle_buffer,
                         .seed = cfg->seed,
                         .rank = rank,
                         .world = world,
                         .policy = cfg->shard_policy,
                         .scale = cfg->pixel_scale};
    Pipeline *p;
    int rc = pipeline_create(&p, &t->train, &pc, err, errlen);
    if (rc) return rc;
    pipeline_free(t->pipe);
    t->pipe = p;
    t->rank = rank, t->world = world;
    t->local_batch = largest_slice(t->global_batch, world);
    return 0;
}

int trainer_create(Trainer **out, const Config *cfg, Collective *coll, int *exit_code, char *err,
                   size_t errlen)
{
    Trainer *t = xcalloc(1, sizeof *t);
    int rc;
    t->cfg = *cfg;
    t->coll = coll;
    pool_flush_denormals();
    if (cfg->threads > 0) gemm_set_threads(cfg->threads);
    if ((rc = trainer_create_model(&t->model, cfg, coll->world, exit_code, err, errlen))) goto err;
    if (cfg->shard_policy == SHARD_FILE && cfg->steps_per_epoch == 0 && coll->world > 1) {
        /* as TensorFlow, which wants steps_per_epoch for shards of unequal lengths */
        snprintf(err, errlen,
                 "--steps-per-epoch 0 with --shard-policy file: the workers' files hold "
                 "different numbers of examples, so a pass over them has no common length; "
                 "give --steps-per-epoch N");
        *exit_code = KT_EXIT_USAGE;
        rc = -EINVAL;
        goto err;
    }
    *exit_code = KT_EXIT_DATA; /* for the data sets' errors below */
    const int k = (int)t->model->num_classes;
    const SourceOptions so = {
        .image_feature = cfg->image_feature,
        .label_feature = cfg->label_feature,
        .image_shape = {cfg->image_shape[0], cfg->image_shape[1], cfg->image_shape[2]},
        .cache_bytes = (size_t)cfg->data_cache_mib << 20};
    if ((rc = open_train(t, &t->train, coll->rank, coll->world, err, errlen)) ||
        (cfg->eval &&
         (rc = source_open(&t->test, cfg->eval_data, SOURCE_EVAL, k, &so, err, errlen)))) {
        if (rc == -EAGAIN) *exit_code = KT_EXIT_RETRY; /* object storage out of retries */
        goto err;
    }
    if ((rc = check_images(&t->train, t->model, err, errlen)) ||
        (cfg->eval && (rc = check_images(&t->test, t->model, err, errlen))))
        goto err;
    t->global_batch = config_global_batch(cfg, coll->world);
    if ((rc = make_pipeline(t, coll->rank, coll->world, err, errlen))) goto err;
    t->steps_per_epoch =
        cfg->steps_per_epoch > 0 ? cfg->steps_per_epoch : (long)pipeline_steps_per_pass(t->pipe);
    float lr = (float)cfg->lr * (cfg->scale_lr_by_workers ? (float)coll->world : 1.0f);
    OptimizerConfig oc = optim_defaults(cfg->optimizer, lr);
    oc.momentum = (float)cfg->momentum;
    oc.nesterov = cfg->nesterov;
    t->opt = optim_create(&oc, t->model->num_params);
    model_reserve(t->model, t->local_batch);
    if ((rc = trainer_pick_device(cfg, coll->rank, &t->gpu_device, err, errlen))) {
        *exit_code = KT_EXIT_USAGE;
        goto err;
    }
#ifdef KT_GPU
    const Layer *nogpu = t->gpu_device >= 0 ? model_gpu_unsupported(t->model) : NULL;
    if (nogpu) {
        const int whole = !model_gpu_has_layer(nogpu);
        snprintf(err, errlen,
                 "--device %s: layer \"%s\": %s %s%s has no CUDA kernel (the GPU path has the "
                 "activations " GPU_ACTIVATIONS " of Dense and Conv2D); train this model with "
                 "--device cpu",
                 cfg->device, nogpu->name, whole ? "a layer" : "activation",
                 whole ? model_layer_keras_stem(nogpu->type) : model_activation_name(nogpu->act),
                 !whole ? ""
                 : nogpu->type == LAYER_BATCHNORM
                     ? (nogpu->synchronized ? " (synchronized or not)" : "")
                 : nogpu->l1 != 0.0f                 ? " with an L1 kernel regularizer"
                 : nogpu->w_count && !nogpu->b_count ? " without bias (use_bias false)"
                                                     : "");
        *exit_code = KT_EXIT_DATA;
        rc = -ENOTSUP;
        goto err;
    }
    if (t->gpu_device >= 0) {
        if ((rc = gpu_model_create(&t->gpu, t->model, &oc, t->gpu_device, t->local_batch, err,
                                   errlen))) {
            *exit_code = KT_EXIT_RETRY;
            goto err;
        }
        gpu_model_use_graphs(t->gpu, cfg->cuda_graphs);
        char dev[256];
        gpu_device_describe(t->gpu_device, dev, sizeof dev);
        util_log("training on CUDA device %d of %d: %s", t->gpu_device, gpu_device_count(NULL, 0),
                 dev);
    }
#endif
    if ((rc = trainer_attach_collective(t, coll, err, errlen))) {
        /* the ring failed as the ranks set it up (a peer left it): the trainer stands, for
         * the caller to form another ring (live recovery) or free it */
        *exit_code = KT_EXIT_RETRY;
        *out = t;
        return rc;
    }
    *out = t;
    return 0;
err:
    trainer_free(t);
    return rc;
}

int trainer_check_position(const Trainer *t, const TrainPosition *p, int live, char *why,
                           size_t whylen)
{
    int rc;
    if (live && p->epoch > (uint64_t)t->cfg.epochs)
        snprintf(why, whylen, "epoch %" PRIu64 " out of range (at most %d)", p->epoch,
                 t->cfg.epochs);
    else if (live && p->step_in_epoch > (uint64_t)t->steps_per_epoch)
        snprintf(why, whylen, "step %" PRIu64 " of the epoch out of range (at most %ld)",
                 p->step_in_epoch, t->steps_per_epoch);
    else if ((rc = ckpt_check_counters(p->epoch, p->step_in_epoch, p->global_step, p->opt_iter, why,
                                       whylen)))
        return rc;
    else if (p->position >= (uint64_t)t->train.count)
        snprintf(why, whylen,
                 "data position %" PRIu64 " outside a pass over the %zu training examples",
                 p->position, t->train.count);
    else return 0;
    return -EBADMSG;
}

void trainer_seek(Trainer *t, const TrainState *st)
{
    t->st = *st;
    t->gpu_preloaded = 0; /* a batch preloaded on the device is not the one that follows */
    if (t->st.step_in_epoch >= t->steps_per_epoch) {
        t->st.epoch++;
        t->st.step_in_epoch = 0;
    }
    /* each rank's own stream is where its steps took it */
    if (data_shard_per_rank(t->cfg.shard_policy))
        t->st.cursor = pipeline_cursor_at_step(t->pipe, (uint64_t)st->global_step);
    pipeline_seek(t->pipe, t->st.cursor);
}

PipelineCursor trainer_shared_cursor(const Trainer *t)
{
    if (data_shard_per_rank(t->cfg.shard_policy)) return (PipelineCursor){0, 0};
    return t->st.cursor;
}

void trainer_detach_collective(Trainer *t)
{
    overlap_free(t->overlap);
    t->overlap = NULL;
}

int trainer_attach_collective(Trainer *t, Collective *c, char *err, size_t errlen)
{
    int rc;
    /* another size (a shrink): the global batch is cut anew over the ranks present */
    if (c->rank != t->rank || c->world != t->world) {
        if (t->gpu) {
            snprintf(err, errlen,
                     "the ring changed size (%d to %d ranks), which the GPU path cannot follow",
                     t->world, c->world);
            return -ENOTSUP;
        }
        if (t->cfg.shard_policy == SHARD_FILE) { /* another rank's files */
            Source s;
            if ((rc = open_train(t, &s, c->rank, c->world, err, errlen))) return rc;
            pipeline_free(t->pipe);
            t->pipe = NULL;
            source_free(&t->train);
            t->train = s;
        }
        if ((rc = make_pipeline(t, c->rank, c->world, err, errlen))) return rc;
        model_reserve(t->model, t->local_batch);
    }
    t->coll = c;
    /* /metrics follows rank 0 (a shrink that left out index 0, or index 0 back): closed
     * here, before the state sync, so that a process of index 0 joining on the same host
     * (launch) finds its port free when its run opens it after the sync. */
    const int serve = c->rank == 0 && t->cfg.metrics_port > 0;
    if (t->metrics && serve != t->serving_metrics) {
        char why[512];
        int failed = metrics_serve(t->metrics, serve ? t->cfg.metrics_port : 0, why, sizeof why);
        if (failed)
            util_log("warning: rank 0 now, but /metrics cannot be served: %s; training goes on "
                     "without it",
                     why);
        else if (serve)
            util_log("rank 0 now: training metrics for Prometheus on port %d: GET /metrics",
                     t->cfg.metrics_port);
        else
            util_log("rank %d now: /metrics on port %d closed, rank 0 serves it", c->rank,
                     t->cfg.metrics_port);
        t->serving_metrics = serve && !failed;
    }
    if (c->world > 1 && !c->device_buffers &&
        (rc = coll_share_arena(c, t->model->grads, t->model->grads_bytes, err, errlen)))
        return rc;
    if (!t->gpu && c->world > 1) {
        int slices = 1;
        for (int i = 0; i < t->model->num_layers; i++)
            slices += model_layer_floats(&t->model->layers[i]) > 0; /* each fires on_ready */
        t->overlap = overlap_create(c, t->model->grads, slices);
    }
    return 0;
}

void trainer_checkpoint_signature(const Model *m, OptimizerKind kind, char *out)
{
    int n =
        snprintf(out, CKPT_SIGNATURE_MAX, "%s|optimizer=%s", m->signature, optim_kind_name(kind));
    if (n >= CKPT_SIGNATURE_MAX)
        snprintf(out, CKPT_SIGNATURE_MAX, "sha256:%s|optimizer=%s", m->signature_sha256,
                 optim_kind_name(kind));
}

void trainer_weights_hash(const Trainer *t, char out[65])
{
    util_sha256_hex(t->model->params, t->model->num_params * sizeof(float), out);
}

void trainer_evaluate(Trainer *t, double *loss, double *accuracy)
{
    const int b = t->local_batch;
    const size_t pixels = t->model->input_size;
    float *x = xmalloc((size_t)b * pixels * sizeof *x);
    int32_t *y = xmalloc((size_t)b * sizeof *y);
    size_t *idx = xmalloc((size_t)b * sizeof *idx);
    double sum = 0.0, correct = 0.0, count = 0.0;
    for (size_t start = 0; start < t->test.count; start += (size_t)b) {
        int n = (int)(t->test.count - start < (size_t)b ? t->test.count - start : (size_t)b);
        for (int k = 0; k < n; k++) idx[k] = start + (size_t)k;
        source_examples(&t->test, idx, (size_t)n, t->cfg.pixel_scale, x, y);
        StepStats s;
#ifdef KT_GPU
        if (t->gpu) {
            char err[512];
            int rc = gpu_model_load_batch(t->gpu, x, y, n, err, sizeof err);
            if (rc || (rc = gpu_model_evaluate(t->gpu, &s, err, sizeof err)))
                util_fail(rc == -ENOTSUP ? KT_EXIT_DATA : KT_EXIT_RETRY,
                          "evaluation on the GPU: %s",
                          err); /* -ENOTSUP: no cuDNN algorithm for the last, smaller batch */
            sum += s.loss, correct += s.correct, count += s.count;
            continue;
        }
#endif
        model_evaluate(t->model, x, y, n, &s);
        sum += s.loss, correct += s.correct, count += s.count;
    }
    free(x);
    free(y);
    free(idx);
    *loss = count > 0 ? sum / count : 0.0;
    *accuracy = count > 0 ? correct / count : 0.0;
}

/* The dropout masks of a step depend on the seed, the global step and the rank only,
 * so a resumed run draws the same masks. */
static uint64_t dropout_seed(const Trainer *t)
{
    uint64_t s = t->cfg.seed ^ 0x6A09E667F3BCC909ull;
    s ^= (uint64_t)t->st.global_step * 0x9E3779B97F4A7C15ull;
    s ^= (uint64_t)t->coll->rank * 0xC2B2AE3D27D4EB4Full;
    return util_rand_u64(&s);
}

/* Where the chief writes its TensorBoard events: --tensorboard-dir, else <checkpoint
 * dir>/logs; "" (none) on the other ranks and without either flag. */
static void tensorboard_dir(const Trainer *t, char *out, size_t outlen)
{
    const Config *c = &t->cfg;
    out[0] = '\0';
    if (t->coll->rank != 0) return;
    if (c->tensorboard_dir[0]) snprintf(out, outlen, "%s", c->tensorboard_dir);
    else if (c->checkpoint_dir[0]) snprintf(out, outlen, "%s/logs", c->checkpoint_dir);
}

#ifdef KT_GPU
/* The gradient-ready hook with NCCL: each layer's slice is all-reduced on the
 * collective's stream while the backward pass goes on. */
static int nccl_slice_ready(void *ctx, size_t offset, size_t count, void *ready, char *err,
                            size_t errlen)
{
    Trainer *t = ctx;
    int rc = coll_nccl_allreduce_start(t->coll, gpu_model_grads(t->gpu) + offset, count, ready, err,
                                       errlen);
    if (rc) t->gpu_hook_failed = 1;
    return rc;
}

/* The next batch of the stream to the device (gpu_model_load_batch: the host copies it
 * to pinned memory, the copy stream takes it from there); t->gpu_batch_next is then
 * where the stream stands after it. */
static int gpu_load_next(Trainer *t, char *err, size_t errlen)
{
    const Batch *b = pipeline_next(t->pipe);
    t->gpu_batch_next = b->next;
    return gpu_model_load_batch(t->gpu, b->x, b->y, b->size, err, errlen);
}

/* One step on the device: its batch to the device (unless the last step did it),
 * forward/backward, the all-reduce of the device gradient arena (with NCCL on its own
 * stream, layer by layer during the backward pass when there are several ranks; staged
 * through the host arena for a host-only collective), the statistics copied to the host
 * arena's STAT_* slots and the optimizer update queued behind them. While the device
 * computes, the next step's batch goes to the device, unless an evaluation comes next
 * or the run ends (nothing for it to overwrite, nothing to read past the end) or this
 * rank asks to stop. The host waits once per step, for the statistics; with NCCL it
 * watches the communicator meanwhile (a lost peer fails the wait, never hangs it).
 * *cursor is the data stream's position after this step's batch. Returns 0, or a
 * negative errno with err naming the all-reduce or the device and *exit_code set:
 * KT_EXIT_DATA for -ENOTSUP (cuDNN offers no algorithm: trying again will not help),
 * else KT_EXIT_RETRY. */
static int gpu_train_step(Trainer *t, PipelineCursor *cursor, int *exit_code, char *err,
                          size_t errlen)
{
    Model *m = t->model;
    const size_t np = m->num_params, n = np + MODEL_STATS_FLOATS;
    GpuModel *g = t->gpu;
    t->stop_asked = t->stop_request && *t->stop_request;
    const float stop = t->stop_asked ? 1.0f : 0.0f;
    const int nccl = !strcmp(t->coll->name, "nccl"), overlap = nccl && t->coll->world > 1;
    const int no_preload = t->st.step_in_epoch + 1 == t->steps_per_epoch &&
                           (t->cfg.eval || t->st.epoch + 1 == t->cfg.epochs);
    char why[512];
    int rc, in_coll = 0; /* a failure now is the all-reduce's, else the device's */
    gpu_model_on_grad_ready(g, overlap ? nccl_slice_ready : NULL, t);
    if (!t->gpu_preloaded && (rc = gpu_load_next(t, why, sizeof why))) goto err;
    t->gpu_preloaded = 0;
    *cursor = t->gpu_batch_next;
    t->gpu_hook_failed = 0;
    if ((rc = gpu_model_step(g, t->global_batch, t->coll->world, dropout_seed(t), stop, why,
                             sizeof why))) {
        in_coll = t->gpu_hook_failed;
        goto err;
    }
    if (nccl) {
        /* overlapped: the slices went during the backward pass, the statistics go now;
         * at one rank the whole arena goes once the step is done */
        const size_t from = overlap ? np : 0;
        void *reduced;
        in_coll = 1;
        if ((rc = coll_nccl_allreduce_start(t->coll, gpu_model_grads(g) + from, n - from,
                                            gpu_model_step_event(g), why, sizeof why)) ||
            (rc = coll_nccl_allreduce_event(t->coll, &reduced, why, sizeof why)))
            goto err;
        in_coll = 0;
        if ((rc = gpu_model_wait_event(g, reduced, why, sizeof why))) goto err;
    } else if (t->coll->world > 1) {
        if ((rc = gpu_model_grads_to_host(g, m->grads, n, why, sizeof why))) goto err;
        in_coll = 1;
        if ((rc = coll_allreduce_sum(t->coll, m->grads, n, why, sizeof why))) goto err;
        in_coll = 0;
        if ((rc = gpu_model_grads_from_host(g, m->grads, n, why, sizeof why))) goto err;
    } /* one rank without NCCL: the sum is the arena itself */
    void *copied;
    if ((rc = gpu_model_finish_step(g, t->opt, &copied, why, sizeof why))) goto err;
    if (!no_preload && stop == 0.0f) {
        if ((rc = gpu_load_next(t, why, sizeof why))) goto err;
        t->gpu_preloaded = 1;
    }
    in_coll = nccl;
    if (nccl) rc = coll_nccl_wait_event(t->coll, copied, gpu_model_step_event(g), why, sizeof why);
    else rc = gpu_model_sync_event(copied, why, sizeof why);
    if (rc) goto err;
    gpu_model_copied_stats(g, m->grads + np);
    if (!t->graph_logged && gpu_model_graph_launches(g) > 0) {
        t->graph_logged = 1;
        util_log("the training step replays a CUDA graph from step %ld on (--cuda-graphs=false "
                 "turns this off)",
                 t->st.global_step + 1);
    }
    return 0;
err:
    t->coll_failed = in_coll;
    snprintf(err, errlen, in_coll ? "all-reduce at step %ld: %s" : "GPU step %ld: %s",
             t->st.global_step + 1, why);
    *exit_code = rc == -ENOTSUP ? KT_EXIT_DATA : KT_EXIT_RETRY;
    return rc;
}
#endif

/* A step's synchronized BatchNormalization sums (layers.h's BnSync) over t's collective:
 * through the overlap thread's queue where there is one, so that they keep their place
 * among the gradient all-reduces on every rank. */
typedef struct {
    Collective *coll;
    Overlap *overlap;
    char err[512];
} StepSums;

static int step_allreduce(void *ctx, float *buf, size_t n, char *err, size_t errlen)
{
    StepSums *s = ctx;
    if (s->overlap) return overlap_allreduce(s->overlap, buf, n, err, errlen);
    return coll_allreduce_sum(s->coll, buf, n, err, errlen);
}

static int step_sum(void *ctx, double *v, size_t n)
{
    StepSums *s = ctx;
    return coll_sum_doubles(v, n, s->coll->rank, s->coll->world, step_allreduce, s, s->err,
                            sizeof s->err);
}

/* One step on the CPU: the batch, forward and backward, the all-reduce of the gradients
 * with the statistics in their STAT_* slots, the update. With several workers the
 * gradients are all-reduced layer by layer while backward goes on (overlap.h), and
 * *allreduce_s is the time the step still waited for them; one worker with plain SGD
 * folds the update into the backward pass. *cursor is the data stream's position after
 * this step's batch. Returns 0, or a negative errno with err and *exit_code set
 * (KT_EXIT_RETRY: the all-reduce failed). */
static int cpu_train_step(Trainer *t, PipelineCursor *cursor, double *allreduce_s, int *exit_code,
                          char *err, size_t errlen)
{
    Model *m = t->model;
    const size_t np = m->num_params;
    float *stats = m->grads + np;
    const Batch *b = pipeline_next(t->pipe);
    *cursor = b->next;
    const int folded = t->coll->world == 1 && optim_plain_sgd(t->opt);
    StepStats ss;
    StepSums sums = {.coll = t->coll, .overlap = t->overlap};
    const BnSync sync = {.sum = step_sum, .ctx = &sums, .first = t->coll->rank == 0};
    char cerr[512];
    int rc = 0;
    if (folded) model_step_sgd(m, b->x, b->y, b->size, dropout_seed(t), t->opt->cfg.lr, &ss);
    else
        rc = model_step_sync(m, b->x, b->y, b->size, t->global_batch, t->coll->world,
                             dropout_seed(t), t->coll->world > 1 ? &sync : NULL,
                             t->overlap ? overlap_ready : NULL, t->overlap, &ss);
    if (rc) { /* a lost peer, as in the gradient all-reduce: the step is abandoned */
        if (t->overlap) (void)overlap_finish(t->overlap, 0, 0, cerr, sizeof cerr); /* idle */
        snprintf(err, errlen,
                 "all-reduce of a synchronized BatchNormalization's statistics "
                 "at step %ld: %s",
                 t->st.global_step + 1, sums.err);
        t->coll_failed = 1;
        *exit_code = KT_EXIT_RETRY;
        return rc;
    }
    stats[STAT_LOSS] = (float)ss.loss;
    stats[STAT_CORRECT] = (float)ss.correct;
    stats[STAT_COUNT] = (float)ss.count;
    t->stop_asked = t->stop_request && *t->stop_request;
    stats[STAT_STOP] = t->stop_asked ? 1.0f : 0.0f;
    if (t->regroup_poll) t->regroup_poll(t->recover_ctx);
    stats[STAT_REGROUP] = t->regroup_request && *t->regroup_request ? 1.0f : 0.0f;
    double a0 = util_now();
    if (t->overlap) rc = overlap_finish(t->overlap, np, MODEL_STATS_FLOATS, cerr, sizeof cerr);
    else rc = coll_allreduce_sum(t->coll, m->grads, np + MODEL_STATS_FLOATS, cerr, sizeof cerr);
    if (rc) {
        snprintf(err, errlen, "all-reduce at step %ld: %s", t->st.global_step + 1, cerr);
        t->coll_failed = 1;
        *exit_code = KT_EXIT_RETRY;
        return rc;
    }
    *allreduce_s = util_now() - a0;
    model_update_moving(m);
    if (folded) t->opt->iterations++;
    else optim_step(t->opt, m->params, m->grads);
    return 0;
}

/* One training step on the trainer's device; afterwards the gradient arena's STAT_*
 * slots hold the step statistics summed over the ranks. *allreduce_s: the time the CPU
 * step waited for the all-reduce (0 on the GPU, where it overlaps the step and is not
 * told apart). Returns 0, or a negative errno with err and *exit_code set. */
static int train_step(Trainer *t, PipelineCursor *cursor, double *allreduce_s, int *exit_code,
                      char *err, size_t errlen)
{
    *allreduce_s = 0.0;
    t->coll_failed = 0;
#ifdef KT_GPU
    if (t->gpu) return gpu_train_step(t, cursor, exit_code, err, errlen);
#endif
    return cpu_train_step(t, cursor, allreduce_s, exit_code, err, errlen);
}

int trainer_sync_device(Trainer *t, char *err, size_t errlen)
{
#ifdef KT_GPU
    if (t->gpu) return gpu_model_upload(t->gpu, t->model->params, t->opt->state, err, errlen);
#else
    (void)t, (void)err, (void)errlen;
#endif
    return 0;
}

/* The rest of the epoch in progress (t->st.epoch), step by step, each step's metrics
 * recorded and after_step called; then the epoch's means (t->last_loss,
 * t->last_accuracy) and, with --eval, the evaluation. A step whose collective fails goes
 * to t->recover where set; when the state it brings is of a later epoch (a peer had
 * finished this one), this one ends there, its means logged by that peer. Returns 0, or
 * a negative errno with err and *exit_code set: -EINTR when this rank was asked to stop
 * (see stop_request). */
/* The epoch's means into the metrics (its epoch record) and, with --eval, its
 * evaluation. */
static void epoch_end(Trainer *t, int epoch, double ep_start)
{
    const EpochSums *ep = &t->ep;
    double secs = util_now() - ep_start;
    t->last_loss = ep->steps ? ep->loss_sum / ep->steps : 0.0;
    t->last_accuracy = ep->count > 0 ? ep->correct / ep->count : 0.0;
    metrics_epoch_end(t->metrics, epoch, ep->steps, secs, t->last_loss, t->last_accuracy,
                      secs > 0 ? ep->count / secs : 0.0);
    if (t->cfg.eval) {
        double tl, ta;
        trainer_evaluate(t, &tl, &ta);
        metrics_eval(t->metrics, epoch, tl, ta);
    }
}

static int train_epoch(Trainer *t, int *exit_code, char *err, size_t errlen)
{
    const int epoch = t->st.epoch + 1;
    double ep_start = util_now();
    EpochSums *ep = &t->ep;
    int rc, ended = 0;
    metrics_epoch_begin(t->metrics, epoch);
    while (t->st.step_in_epoch < t->steps_per_epoch) {
        double s0 = util_now(), allreduce_s;
        PipelineCursor cursor;
        if ((rc = train_step(t, &cursor, &allreduce_s, exit_code, err, errlen))) {
            if (!t->coll_failed || !t->recover) return rc;
            if ((rc = t->recover(t, t->recover_ctx, err, exit_code, err, errlen))) return rc;
            /* The state handed over may sit on a checkpoint boundary this rank did not
             * train itself (it was a step behind the root). */
            *exit_code = KT_EXIT_DATA;
            if (t->after_step && (rc = t->after_step(t, t->hook_ctx, exit_code, err, errlen)))
                return rc;
            if (t->st.epoch + 1 != epoch) return 0;
            continue;
        }
        const float *stats = t->model->grads + t->model->num_params;
        const int stop_count = (int)(stats[STAT_STOP] + 0.5f);
        const int regroup = stats[STAT_REGROUP] > 0.5f && t->regroup;
        t->stopping = stop_count > 0;
        double step_loss = stats[STAT_LOSS];
        double step_acc = stats[STAT_CORRECT] / stats[STAT_COUNT];
        ep->loss_sum += step_loss, ep->correct += stats[STAT_CORRECT];
        ep->count += stats[STAT_COUNT];
        ep->steps++;
        t->st.step_in_epoch++;
        t->st.global_step++;
        t->st.cursor = cursor;
        double step_s = util_now() - s0;
        MetricsStep ms = {.loss = step_loss,
                          .accuracy = step_acc,
                          .samples_per_sec = t->global_batch / step_s,
                          .learning_rate = t->opt->cfg.lr,
                          .allreduce_seconds = allreduce_s,
                          .step_seconds = step_s};
        metrics_step(t->metrics, epoch, t->st.global_step, &ms);
        util_termination_progress(t->st.global_step, t->ckpt_step);
        /* The epoch's record before the step's hook, which may save the epoch-end
         * checkpoint or stop: a run resumed from that checkpoint starts the next epoch,
         * and carries this record over only if it was written first. */
        if (t->st.step_in_epoch == t->steps_per_epoch) {
            epoch_end(t, epoch, ep_start);
            ended = 1;
        }
        if (t->after_step && (rc = t->after_step(t, t->hook_ctx, exit_code, err, errlen)))
            return rc;
        t->stopping = 0;
        if (stop_count > 0 && (t->stop_asked || !t->recover || stop_count >= t->coll->world)) {
            snprintf(err, errlen,
                     "stopped by a signal after step %ld (epoch %d, step %ld of "
                     "%ld)",
                     t->st.global_step, epoch, t->st.step_in_epoch, t->steps_per_epoch);
            *exit_code = KT_EXIT_RETRY;
            return -EINTR;
        }
        if (stop_count > 0)
            util_log("%d rank(s) asked to stop after step %ld and leave; this one stays for "
                     "their replacements",
                     stop_count, t->st.global_step);
        if (regroup && t->st.step_in_epoch < t->steps_per_epoch) {
            if ((rc = t->regroup(t, t->recover_ctx, "the members changed", exit_code, err, errlen)))
                return rc;
            *exit_code = KT_EXIT_DATA;
            if (t->after_step && (rc = t->after_step(t, t->hook_ctx, exit_code, err, errlen)))
                return rc;
            if (t->st.epoch + 1 != epoch) return 0;
        }
    }
    /* An epoch whose last step this rank did not run (a live recovery handed it the
     * state at the epoch's end) ends here, with the sums it was handed. */
    if (!ended) epoch_end(t, epoch, ep_start);
    return 0;
}

int trainer_run(Trainer *t, int *exit_code, char *err, size_t errlen)
{
    char tbdir[sizeof t->cfg.checkpoint_dir + 8];
    int rc;
    double run_start = util_now();
    *exit_code = KT_EXIT_DATA;
    tensorboard_dir(t, tbdir, sizeof tbdir);
    MetricsOptions mo = {.epochs = t->cfg.epochs,
                         .path = t->cfg.metrics_file,
                         .tensorboard_dir = tbdir,
                         .prometheus_port = t->coll->rank == 0 ? t->cfg.metrics_port : 0,
                         .resume_step = t->st.global_step,
                         .steps_per_epoch = t->steps_per_epoch,
                         .checkpoint_step = t->ckpt_step,
                         .checkpoint_time = t->ckpt_time};
    if ((rc = metrics_open(&t->metrics, &mo, err, errlen))) {
        *exit_code = util_io_retryable(rc) ? KT_EXIT_RETRY : KT_EXIT_USAGE;
        return rc;
    }
    t->serving_metrics = mo.prometheus_port > 0;
    /* The kernels the CPU's products run on (gemm_select_kernels), once the job has proved
     * valid: a refused one says one line, its reason. */
    if (t->gpu_device < 0) {
        char kernels[512];
        gemm_describe(kernels, sizeof kernels);
        util_log("gemm: %s", kernels);
        if (gemm_kernels()->warning[0]) util_log("warning: gemm: %s", gemm_kernels()->warning);
    }
    if ((rc = trainer_sync_device(t, err, errlen))) {
        *exit_code = KT_EXIT_RETRY;
        goto err;
    }
    /* The state the run starts from may be one a live recovery handed this rank (a
     * replacement), on a checkpoint boundary it did not train itself. */
    if (t->after_step && (rc = t->after_step(t, t->hook_ctx, exit_code, err, errlen))) goto err;
    while (t->st.epoch < t->cfg.epochs) {
        const int epoch = t->st.epoch;
        if ((rc = train_epoch(t, exit_code, err, errlen))) goto err;
        if (t->st.epoch != epoch) continue; /* a recovery moved the run to a later epoch */
        t->st.epoch++, t->st.step_in_epoch = 0;
        memset(&t->ep, 0, sizeof t->ep);
    }
    t->seconds = util_now() - run_start;
    if ((rc = trainer_sync_host(t, err, errlen))) {
        *exit_code = KT_EXIT_RETRY;
        goto err;
    }
    char hash[65];
    trainer_weights_hash(t, hash);
    metrics_done(t->metrics, t->st.global_step, t->seconds, hash);
    rc = metrics_close(t->metrics, err, errlen);
    t->metrics = NULL;
    if (rc) *exit_code = util_io_retryable(rc) ? KT_EXIT_RETRY : KT_EXIT_USAGE;
    return rc;
err:
    metrics_abort(t->metrics);
    t->metrics = NULL;
    return rc ? rc : -EIO;
}

void trainer_free(Trainer *t)
{
    if (!t) return;
    metrics_abort(t->metrics);
    overlap_free(t->overlap);
#ifdef KT_GPU
    gpu_model_free(t->gpu);
#endif
    pipeline_free(t->pipe);
    optim_free(t->opt);
    model_free(t->model);
    source_free(&t->train);
    source_free(&t->test);
    free(t);
}
