/* gpu — the training step on a CUDA device (built with make GPU=1 only).
 *
 * A GpuModel mirrors a Model (model.h) on one device: ONE parameter arena, ONE gradient
 * arena (num_params + MODEL_STATS_FLOATS, same offsets and layouts as the host arenas,
 * so a checkpoint or an all-reduce sees the same bytes) and one optimizer-state arena
 * laid out as Optimizer.state. Convolutions run through cuDNN (forward, backward data,
 * backward filter; NHWC activations, the HWIO kernel transposed to cuDNN's KRSC), dense
 * layers through cuBLAS, everything else as CUDA kernels that follow layers.c, loss.c
 * and optim.c formula by formula (dropout draws the same splitmix64 masks as the CPU).
 * cuDNN is told to use FMA math only and cuBLAS its default FP32 math, so no TF32.
 *
 * Streams: batches go host -> pinned buffer -> device on a copy stream, double
 * buffered, so the copy of step i+1's batch can overlap step i on the compute stream
 * (the trainer loads it once step i is queued). gpu_model_step launches the step and
 * returns without waiting for it: a collective on another stream starts after
 * gpu_model_step_event, or, with a gradient-ready hook (gpu_model_on_grad_ready), each
 * layer's slice as soon as the backward pass has written it; gpu_model_wait_event makes
 * the compute stream wait for the collective. gpu_model_finish_step then queues the
 * copy of the statistics and the optimizer update, so the host waits once per step (for
 * the statistics) and the update runs while it prepares the next batch. The functions
 * that hand device memory to the host (grads_to_host, read_activation, download,
 * evaluate) wait for the compute stream themselves.
 *
 * CUDA graphs: without a gradient-ready hook the step (forward, loss, backward: some 40
 * launches for tutorial-cnn, which at small batches cost more than the kernels) is
 * captured once per batch slot and replayed, the per-step values (dropout seed, stop
 * flag) read from device memory. The first step at a batch size runs without a graph,
 * the second captures it. gpu_model_use_graphs(g, 0) (the trainer's --cuda-graphs=false)
 * turns graphs off; a capture that fails turns them off with a log line and the step
 * runs launch by launch.
 *
 * Every function returns 0 or a negative errno with one line in err naming the CUDA,
 * cuBLAS or cuDNN call that failed. The header is plain C; the implementation is
 * device.cu. */
#ifndef KT_GPU_H
#define KT_GPU_H

#include <stddef.h>
#include <stdint.h>

#include "model.h"
#include "optim.h"

#ifdef __cplusplus
extern "C" {
#endif

/* CUDA devices this process can use: 0 when there are none or no driver, then `why`
 * (may be NULL) gets the runtime's reason. Never fails otherwise. */
int gpu_device_count(char *why, size_t whylen);

/* "NVIDIA H100 80GB HBM3, compute 9.0, driver 12040, runtime 13020" for device dev. */
void gpu_device_describe(int dev, char *out, size_t outlen);

/* Device dev's PCI domain, bus and device numbers: with the host, what NCCL tells one GPU
 * by (the slices of a MIG-partitioned GPU have one bus id, as one process's device
 * numbers have none of their own). 0, or -EIO with the reason in err. */
int gpu_device_bus_id(int dev, int pci[3], char *err, size_t errlen);

typedef struct GpuModel GpuModel;

/* Mirrors m (borrowed: its layers must outlive g) on device `dev` for batches of up to
 * max_batch examples, with the optimizer described by oc (its state arena sized as
 * optim_create's). Nothing is copied yet: call gpu_model_upload. Free with
 * gpu_model_free. */
int gpu_model_create(GpuModel **out, const Model *m, const OptimizerConfig *oc, int dev,
                     int max_batch, char *err, size_t errlen);

/* Frees g and its device memory; NULL is a no-op. */
void gpu_model_free(GpuModel *g);

/* Host -> device: params (num_params floats) and opt_state (the optimizer's
 * state_floats; may be NULL when there are none). Synchronous. */
int gpu_model_upload(GpuModel *g, const float *params, const float *opt_state, char *err,
                     size_t errlen);

/* Device -> host, the same two arenas. Synchronous. */
int gpu_model_download(GpuModel *g, float *params, float *opt_state, char *err, size_t errlen);

/* Copies a batch (x: b * input_size floats, y: b labels; both read before it returns)
 * to the device on the copy stream; the next gpu_model_step or gpu_model_evaluate uses
 * it. b <= max_batch. */
int gpu_model_load_batch(GpuModel *g, const float *x, const int32_t *y, int b, char *err,
                         size_t errlen);

/* model_step on the loaded batch: forward (dropout drawn from dropout_seed exactly as
 * the CPU does), loss, backward into the device gradient arena, which then holds the
 * same quantity as Model.grads, and its last MODEL_STATS_FLOATS floats (model.h's STAT_*
 * slots): this worker's loss share, correct predictions, examples, and stop_flag.
 * Asynchronous: the arena is final once gpu_model_step_event has fired. -ENOTSUP: cuDNN
 * offers no usable algorithm for one of the model's convolutions (trying again will not
 * help). */
int gpu_model_step(GpuModel *g, int global_batch, int num_replicas, uint64_t dropout_seed,
                   float stop_flag, char *err, size_t errlen);

/* The event (a cudaEvent_t, owned by g) the last gpu_model_step recorded on the compute
 * stream after its backward pass: a collective's stream that waits for it reads final
 * gradients and statistics. */
void *gpu_model_step_event(GpuModel *g);

/* Makes the compute stream wait for `event` (a cudaEvent_t recorded on another stream of
 * this device, say after a collective's all-reduce) before whatever is queued next. */
int gpu_model_wait_event(GpuModel *g, void *event, char *err, size_t errlen);

/* Queues on the compute stream, behind everything there: the copy of the statistics
 * (the gradient arena's last MODEL_STATS_FLOATS floats) to pinned host memory, then the
 * update of gpu_model_optim_step. *copied (a cudaEvent_t, owned by g) fires between the
 * two: wait for it (gpu_model_sync_event, or a collective's watched wait), then
 * gpu_model_copied_stats gives the statistics. Asynchronous. */
int gpu_model_finish_step(GpuModel *g, Optimizer *o, void **copied, char *err, size_t errlen);

/* Waits on the host for `event` (a cudaEvent_t) to fire. */
int gpu_model_sync_event(void *event, char *err, size_t errlen);

/* The statistics copied by gpu_model_finish_step (once its event has fired) to out. */
void gpu_model_copied_stats(const GpuModel *g, float *out);

/* Called by gpu_model_step during the backward pass, layers last to first, as soon as the
 * device gradients [offset, offset + count) are final: `ready` (a cudaEvent_t) is
 * recorded on the compute stream right after the slice is written, so a collective can
 * start reducing the slice on its own stream while the backward pass goes on. Returns 0,
 * or a negative errno with err filled, which ends the step with that error. */
typedef int (*GpuGradReadyFn)(void *ctx, size_t offset, size_t count, void *ready, char *err,
                              size_t errlen);

/* Sets (fn NULL: clears) the hook of gpu_model_step. */
void gpu_model_on_grad_ready(GpuModel *g, GpuGradReadyFn fn, void *ctx);

/* Turns the step's CUDA graphs on (the default) or off. */
void gpu_model_use_graphs(GpuModel *g, int on);

/* How many steps so far ran as a replay of a captured graph. */
long gpu_model_graph_launches(const GpuModel *g);

/* The device gradient arena (num_params + MODEL_STATS_FLOATS floats), for a collective
 * that takes device pointers. */
float *gpu_model_grads(GpuModel *g);

/* The gradient arena, or its first n floats, to and from host memory (for collectives
 * over host buffers and for tests). Synchronous. */
int gpu_model_grads_to_host(GpuModel *g, float *host, size_t n, char *err, size_t errlen);
int gpu_model_grads_from_host(GpuModel *g, const float *host, size_t n, char *err, size_t errlen);

/* The output of layer i for the batch the last step or evaluation ran on (b * out_size
 * floats, or the input's for a reshape) to host, for comparisons with the CPU path. */
int gpu_model_read_activation(GpuModel *g, int layer, float *host, char *err, size_t errlen);

/* optim_step on the device arenas with o's configuration and iteration count; then
 * o->iterations += 1 (o->state on the host is not touched). Asynchronous. */
int gpu_model_optim_step(GpuModel *g, Optimizer *o, char *err, size_t errlen);

/* model_evaluate on the loaded batch (dropout off): st->loss is the sum of the
 * examples' losses. */
int gpu_model_evaluate(GpuModel *g, StepStats *st, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif

#endif
