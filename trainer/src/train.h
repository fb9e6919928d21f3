/* train — the training loop: data -> model_step -> all-reduce -> optimizer, with the
 * metrics around it. The whole loop state is explicit in TrainState (plus the optimizer
 * state and the parameters), so a checkpoint hook can save it after any step and a
 * restore can put it back before the loop starts. */
#ifndef KT_TRAIN_H
#define KT_TRAIN_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#include "collective.h"
#include "config.h"
#include "data.h"
#include "metrics.h"
#include "model.h"
#include "optim.h"

typedef struct {
    int epoch;             /* 0-based epoch in progress */
    long step_in_epoch;    /* steps of that epoch already done */
    long global_step;      /* steps done in all (across epochs and restarts) */
    PipelineCursor cursor; /* the data stream after the last step */
} TrainState;

typedef struct Trainer Trainer;
struct GpuModel;

/* Called after every completed step (state already advanced), and for a state this rank
 * did not reach by a step of its own: the one the run starts from, and the one a live
 * recovery (TrainRecoverHook) hands over, which may be of a step this rank did not train
 * (seeked: an epoch's end is then the next epoch's step 0); returns 0, or a negative
 * errno with err filled and *exit_code set (it comes preset to KT_EXIT_DATA), which ends
 * the run with that error and code. */
typedef int (*TrainStepHook)(Trainer *t, void *ctx, int *exit_code, char *err, size_t errlen);

/* Live recovery (docs/design.md): called when a step's collective failed (coll_failed
 * set, the step discarded: parameters and optimizer are untouched until the all-reduce
 * completes). It replaces the collective (trainer_detach_collective,
 * trainer_attach_collective) and the run's state (trainer_seek and the epoch's
 * accumulators, from the rank with the newest state), then the loop goes on from there.
 * Returns 0, or a negative errno with err and *exit_code set, which ends the run. */
typedef int (*TrainRecoverHook)(Trainer *t, void *ctx, const char *why, int *exit_code, char *err,
                                size_t errlen);

/* The running sums of the epoch in progress, from which its means are logged: part of
 * the state a live recovery hands over, so the means stay those of an undisturbed run. */
typedef struct {
    double loss_sum, correct, count;
    long steps;
} EpochSums;

struct Trainer {
    Config cfg;
    Collective *coll;     /* borrowed */
    Model *model;
    Optimizer *opt;
    Source train, test;
    Pipeline *pipe;
    Metrics *metrics;
    int serving_metrics; /* metrics serves /metrics: this rank is rank 0 (metrics_serve) */
    TrainState st;
    long steps_per_epoch;
    int global_batch;     /* --global-batch, or --per-worker-batch x world */
    int local_batch;      /* the largest slice of it a rank takes: the activations' room */
    int rank, world;      /* the ranks the pipeline is cut for (a shrink changes them) */
    TrainStepHook after_step;
    void *hook_ctx;
    /* Graceful stop (SIGTERM): when *stop_request (borrowed, may be NULL) is set on any
     * rank, the flag rides in the step statistics' all-reduce, so every rank sees it
     * after the same step; `stopping` is then 1 while after_step runs (the chief saves
     * a checkpoint there) and trainer_run returns -EINTR with exit code 75. */
    volatile sig_atomic_t *stop_request;
    int stopping;
    /* With live recovery (recover set) the flag is a count: when fewer than all ranks
     * asked, those leave after the step (exit 75) and the others stay, for recover to
     * replace them; all of them asking, or recover NULL, stops every rank as above. */
    TrainRecoverHook recover;
    void *recover_ctx;
    /* Elastic growth (docs/design.md, "Elastic jobs"): when *regroup_request (borrowed,
     * may be NULL) is set on any rank, the flag rides in the step statistics like the
     * stop flag, and after that same step every rank calls regroup (with recover_ctx),
     * which forms the ring again among the workers the supervisor now names; not after
     * an epoch's last step (the request waits for the next one), so that the state it
     * syncs is never an epoch's end. Returns as recover does. */
    volatile sig_atomic_t *regroup_request;
    TrainRecoverHook regroup;
    /* NULL, or called (with recover_ctx) before each step reads *regroup_request, which
     * it may set: the watch of the members file, where no supervisor signals */
    void (*regroup_poll)(void *ctx);
    int coll_failed;       /* the last step failed in its collective (a lost peer) */
    int stop_asked;        /* this rank's share of the last step's stop count */
    EpochSums ep;          /* the epoch in progress */
    /* The newest checkpoint saved or resumed from: global step (0: none) and when it was
     * written (Unix seconds); reported on /metrics and in a failure's termination
     * message, from which the operator counts the steps a restart loses. */
    long ckpt_step;
    double ckpt_time;
    /* the last epoch's means, the run's result */
    double last_loss, last_accuracy;
    double seconds;
    /* The device step (make GPU=1 builds with --device gpu, or auto on a GPU): the model
     * lives on the device during trainer_run, and the host arenas (model->params,
     * opt->state) are current only after trainer_sync_host. NULL: the CPU path. */
    struct GpuModel *gpu;
    int gpu_device;
    int graph_logged;         /* the log said the step replays a CUDA graph */
    /* The next step's batch, already copied to the device while the last step computed
     * (gpu_preloaded), and the data stream's position after it. */
    int gpu_preloaded;
    PipelineCursor gpu_batch_next;
    int gpu_hook_failed;      /* the all-reduce started from the backward pass failed */
    /* The CPU path with more than one worker: the all-reduce overlapped with backward. */
    struct Overlap *overlap;
};

/* The CUDA device this rank trains on: 0 and *device = -1 for the CPU path, or 0 and
 * the device index (rank modulo the devices present); -ENODEV with one line in err when
 * cfg->device is "gpu" but this build has no CUDA or the machine no device. */
int trainer_pick_device(const Config *cfg, int rank, int *device, char *err, size_t errlen);

/* Brings the host parameter and optimizer arenas up to date with the device (a no-op on
 * the CPU path), e.g. before a checkpoint. Returns 0 or a negative errno with err. */
int trainer_sync_host(Trainer *t, char *err, size_t errlen);

/* The identity a checkpoint of model m trained with optimizer `kind` is matched against
 * (ckpt.h): the model's signature and the optimizer (whose state it holds), or their
 * hash when that is too long to store; out holds CKPT_SIGNATURE_MAX bytes. */
void trainer_checkpoint_signature(const Model *m, OptimizerKind kind, char *out);

/* The most examples a rank of `world` takes of a step (data_slice): the global batch over
 * world, rounded up. */
int trainer_largest_slice(const Config *cfg, int world);

/* Builds cfg's model (--model, --seed) within --max-model-memory-gib at the largest slice
 * of the global batch a rank of `world` takes, with cfg's optimizer. Returns 0, or a
 * negative errno with one line in err and *exit_code set: KT_EXIT_USAGE for an unknown
 * --model, else KT_EXIT_DATA. */
int trainer_create_model(Model **out, const Config *cfg, int world, int *exit_code, char *err,
                         size_t errlen);

/* Builds the model, optimizer, datasets and pipeline for cfg on collective coll (which
 * must outlive the trainer). Returns 0, or a negative errno with one line in err and
 * *exit_code set to KT_EXIT_USAGE or KT_EXIT_DATA; or, when the collective fails as the
 * trainer attaches it (trainer_attach_collective: a peer left the ring), KT_EXIT_RETRY
 * with *out the trainer all the same, coll its collective, for the caller to form
 * another ring (live recovery) or to free. Free with trainer_free. */
int trainer_create(Trainer **out, const Config *cfg, Collective *coll, int *exit_code, char *err,
                   size_t errlen);

/* Where a run stands as another process tells it (the root of a state sync), in the
 * unsigned fields of the wire, to be checked before they become a TrainState. */
typedef struct {
    uint64_t epoch, step_in_epoch, global_step, data_epoch, position, opt_iter;
} TrainPosition;

/* Whether p can be a state of t's run: an epoch that fits TrainState's int, a global step
 * and optimizer iterations that fit an int64, an epoch plus step in the epoch within the
 * global step (every epoch begun took a step), a data position inside one pass over the
 * training set (no stream is longer); with `live` (a running peer's state, not a
 * checkpoint's, which may come from a run with other flags) also an epoch up to --epochs
 * (the run's end) and a step in the epoch up to the steps per epoch. Returns 0, or
 * -EBADMSG with the field, its value and the bound in why. */
int trainer_check_position(const Trainer *t, const TrainPosition *p, int live, char *why,
                           size_t whylen);

/* Repositions the run at state st (after a restore of parameters and optimizer). A
 * state at the end of an epoch (step_in_epoch == steps per epoch, as saved by the
 * epoch-end checkpoint) becomes the start of the next epoch, so no empty epoch runs. */
void trainer_seek(Trainer *t, const TrainState *st);

/* The data cursor a checkpoint stores and a state sync hands over: t's for the one global
 * stream, (0, 0) for per-rank streams (file, off sharding), where each rank's differs and
 * trainer_seek computes it from the global step. */
PipelineCursor trainer_shared_cursor(const Trainer *t);

/* Lets go of the collective (stops the overlap thread, which is idle between steps), so
 * that the caller may destroy it; the gradient arena stays mapped, its contents kept. */
void trainer_detach_collective(Trainer *t);

/* Trains on collective c from now on: offers it the gradient arena and restarts the
 * overlap thread. A c of another rank or world (a shrink, docs/design.md "Elastic jobs")
 * cuts the global batch anew: the data pipeline is made again for c's rank, to be
 * positioned by trainer_seek. Returns 0 or a negative errno with err (the collective
 * failed; -ENOTSUP: another size on the GPU path). */
int trainer_attach_collective(Trainer *t, Collective *c, char *err, size_t errlen);

/* The host's parameter and optimizer arenas onto the device (a no-op on the CPU path),
 * after they were replaced. Returns 0 or a negative errno with err. */
int trainer_sync_device(Trainer *t, char *err, size_t errlen);

/* Runs the remaining epochs. Returns 0, or a negative errno with err filled and
 * *exit_code set (KT_EXIT_RETRY when the collective failed or the run was stopped
 * through stop_request, then -EINTR). */
int trainer_run(Trainer *t, int *exit_code, char *err, size_t errlen);

/* The sha256 of the parameter arena as 64 hex digits. */
void trainer_weights_hash(const Trainer *t, char out[65]);

/* Evaluates the model on the test set: mean loss and accuracy. */
void trainer_evaluate(Trainer *t, double *loss, double *accuracy);

void trainer_free(Trainer *t);

#endif
