/* model — a Keras-like Sequential model: its spec (JSON or YAML), the four built-in
 * models, the parameter and gradient arenas, and the training step.
 *
 * Every parameter lives in ONE contiguous arena `params` (and its gradient at the same
 * offset in `grads`), layer after layer, kernel then bias, in Keras's layouts; a
 * BatchNormalization's moving statistics, which are state and not trained, live there too
 * (model_update_moving), so that a checkpoint, a live recovery and the weights hash carry
 * them with the weights. The
 * distributed layer reduces `grads` as one buffer and a checkpoint writes `params` with
 * one write. */
#ifndef KT_MODEL_H
#define KT_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "initializer.h"
#include "layers.h"

typedef enum {
    LAYER_RESHAPE = 0,
    LAYER_CONV2D,
    LAYER_MAXPOOL,
    LAYER_FLATTEN,
    LAYER_DENSE,
    LAYER_DROPOUT,
    LAYER_ACTIVATION, /* Keras's Activation, ReLU and LeakyReLU: act (and slope) alone */
    LAYER_RELU,
    LAYER_LEAKY_RELU,
    LAYER_AVGPOOL,
    LAYER_GLOBAL_AVGPOOL, /* the pool's window the whole input: pool holds its geometry */
    LAYER_GLOBAL_MAXPOOL,
    LAYER_RESCALING,
    LAYER_BATCHNORM
} LayerType;

/* The bytes of a layer's name, NUL included. */
#define LAYER_NAME_MAX 128

typedef struct {
    LayerType type;
    Activation act;
    char name[LAYER_NAME_MAX]; /* Keras's name of the layer: the spec's "name", else the
                                  default Keras gives (conv2d, conv2d_1, ...); unique in
                                  the model, no '/' (Keras refuses one) */
    int in_shape[3], in_rank;   /* per example */
    int out_shape[3], out_rank;
    size_t in_size, out_size;   /* floats per example */
    ConvGeom conv;              /* conv2d */
    int units;                  /* dense */
    int dense_in, dense_rows;   /* dense: it maps the last axis (dense_in values) of each of
                                   dense_rows rows per example, as Keras's Dense does on an
                                   input of rank > 1 (rows 1 for a flat input) */
    PoolGeom pool;              /* the pooling layers */
    float rate;                 /* dropout */
    float slope;                /* leaky relu layer: its negative slope */
    float scale, offset;        /* rescaling */
    float l1, l2;               /* kernel regularizer factors (Keras's L1, L2, L1L2), 0 = none */
    int same;                   /* conv2d padding "same" */
    float momentum, epsilon;    /* batchnorm */
    int synchronized;           /* batchnorm: statistics of every rank's examples
                                   (model_step_sync) */
    /* slices of the arenas (counts 0: none): the kernel (a batchnorm's gamma), the bias
     * (its beta), and the non-trainable state (a batchnorm's moving mean then moving
     * variance), one after another */
    size_t w_off, w_count, b_off, b_count, s_off, s_count;
    /* how model_init_params draws them: the kernel (gamma), the bias (beta), the moving
     * mean, the moving variance; Keras's defaults unless the spec names others */
    Init init[4];
} Layer;

/* The step statistics, one float each at grads + num_params (after the gradients), so
 * that the all-reduce of the gradients sums them too: this worker's share of the loss,
 * its correct predictions and examples, the stop flag (1 on a rank asked to stop, so the
 * sum says whether any was) and the regroup flag (1 on a rank told that the members
 * changed, train.h). train.c writes them on the CPU, device.cu's k_stats on the GPU. */
enum { STAT_LOSS, STAT_CORRECT, STAT_COUNT, STAT_STOP, STAT_REGROUP, MODEL_STATS_FLOATS };

/* The bytes of the gradient arena's mapping for num_params parameters: the floats and
 * the statistics, rounded up to whole pages. */
size_t model_grads_bytes(size_t num_params);

typedef struct Model Model;
struct Model {
    int num_layers;
    Layer *layers;
    int input_shape[3], input_rank;
    size_t input_size, num_classes;
    int from_logits;        /* last activation linear: loss from logits */
    size_t num_params;
    float *params;          /* (num_params) the one parameter arena */
    float *grads;           /* (num_params + MODEL_STATS_FLOATS) gradients at the same
                               offsets, then room for the step statistics, so that one
                               all-reduce carries both; page-aligned, mapped alone
                               (model_grads_bytes) so that it can be shared (shm.h) */
    size_t grads_bytes;     /* its mapping's length, whole pages */
    float **sgrads;         /* (num_sgrads) gradient arenas of the step's shards after the
                               first (model.c: a batch is cut into shards run in parallel) */
    int num_sgrads;
    int dropout_enabled;    /* 1 by default; tests turn it off to compare with Keras */
    char *signature;        /* architecture + parameter count, one line */
    char signature_sha256[65];
    /* activation buffers for up to max_batch examples, allocated by model_reserve */
    int max_batch;
    float **acts;           /* acts[i]: output of layer i (aliases the input for reshapes) */
    float **masks;          /* dropout masks */
    int32_t **argmax;       /* max pooling's argmax */
    float **bnstats;        /* batchnorm: the last training forward's batch mean, variance
                               and 1/sqrt(variance + epsilon), channels floats each */
    double **moments;       /* a Conv2D before a BatchNormalization (conv_feeds_batchnorm):
                               its output's moments per example (BnMoments), 2 x filters
                               doubles per example; else NULL */
    float **pre;            /* output before the activation, kept for its backward where
                               activation_needs_input (gelu, swish), else NULL */
    float *dcol;            /* the conv layers' scratch (conv_scratch_size), colmax floats
                               per example: a shard's from its first example's */
    float *dbuf[2];         /* ping-pong activation gradients, dmax floats per example */
    float *dzero;           /* the input gradient a Dense layer writes for a relu Conv2D
                               (dense_feeds_relu_conv), dmax floats per example: all zero
                               between steps (the conv zeroes it again as it reads it), so
                               the Dense product adds onto it with no zeroing pass; NULL
                               when no layer needs it */
    size_t dmax, colmax;
};

/* Local statistics of one step or evaluation, to be summed across workers. */
typedef struct {
    double loss;     /* in a step: this worker's share of the scalar loss (sum of its
                        examples' losses / global batch + regularization / replicas) */
    double correct;  /* examples whose prediction equals the label */
    double count;    /* examples */
} StepStats;

/* Fired during the backward pass as soon as grads[offset, offset+count) is final
 * (layers last to first), so a collective can start on it while backward goes on. */
typedef void (*GradReadyFn)(void *ctx, size_t offset, size_t count);

/* The spec's layer types, in the messages. */
#define MODEL_LAYER_TYPES                                                                          \
    "Input, Reshape, Rescaling, Conv2D, MaxPooling2D, AveragePooling2D, GlobalAveragePooling2D, "  \
    "GlobalMaxPooling2D, Flatten, Dense, Dropout, Activation, ReLU, LeakyReLU or "                 \
    "BatchNormalization"

/* The activations' names, in the messages. */
#define MODEL_ACTIVATIONS                                                                          \
    "linear, relu, softmax, sigmoid, tanh, gelu, silu (or swish), elu, leaky_relu"

/* An activation's name, as a spec and Keras 3's config both write it ("relu", "silu", ...). */
const char *model_activation_name(Activation a);
/* The first layer the CUDA path (gpu/device.cu) lacks: an activation other than
 * GPU_ACTIVATIONS, or a layer model_gpu_has_layer says it has not. NULL when the model
 * trains on the GPU. */
#define GPU_ACTIVATIONS "linear, relu, softmax"
const Layer *model_gpu_unsupported(const Model *m);
/* 0 for a layer the CUDA path has no kernel for (the activation layers, average and
 * global pooling, Rescaling, a Conv2D or Dense without bias or with an L1 term), else 1. */
int model_gpu_has_layer(const Layer *l);
/* 1 for a layer of activation alone (Activation, ReLU, LeakyReLU). */
int model_activation_layer(const Layer *l);
/* The activation a spec or a Keras config (either dialect) names: 0, or -EINVAL. */
int model_activation_parse(const char *name, Activation *act);

/* Keras's snake-case name of the layer's class ("conv2d", "max_pooling2d", ...): the
 * stem of the default layer names, and of the groups a Keras weights file keeps the
 * layers' weights under (keras_export.h). */
const char *model_layer_keras_stem(LayerType type);

/* The group of layer i under a Keras weights file's layers/ (keras_export.h,
 * keras_import.h): not the layer's name but its class's stem counted within the model
 * (conv2d, conv2d_1, ... in layer order), which is where Keras 3 and tf-keras both look
 * for a layer's weights whatever it is called. */
void model_layer_keras_group(const Model *m, int i, char *out, size_t outlen);

/* The floats of layer l in the arena: its weights and its state. */
static inline size_t model_layer_floats(const Layer *l)
{
    return l->w_count + l->b_count + l->s_count;
}

/* One of a layer's variables as Keras keeps it (vars/0, vars/1, ... of its group in a
 * weights file): its name, its slice of the arena, its shape. */
typedef struct {
    const char *name; /* kernel, bias, gamma, beta, moving_mean, moving_variance */
    size_t off, count;
    int rank;
    int dims[4];
} LayerVar;

/* Layer l's variables in Keras's order (kernel, bias; gamma, beta, moving_mean,
 * moving_variance, gamma and beta each only with scale and center): into vars, their
 * number returned (0 for a layer without any). */
int model_layer_vars(const Layer *l, LayerVar vars[4]);

/* The names of the built-in models, NULL-terminated. */
extern const char *const model_builtin_names[];

/* Builds a model from `spec`: a built-in name, a path to a JSON or YAML file, or inline
 * JSON/YAML text; kubetrain's spec, or Keras's model.to_json() (keras_json.h).
 * Parameters are drawn from `seed` as the layers' initializers say (Keras's defaults:
 * Glorot-uniform kernels, zero biases); or a path to
 * a Keras .keras archive (told by content), whose config.json is the model and whose
 * model.weights.h5 the parameters (keras_import.h). 
 * Returns 0 and *out (free with model_free), or a negative errno with one line in err
 * naming the field (layers[2].filters) or file and what was expected. */
int model_create(Model **out, const char *spec, uint64_t seed, char *err, size_t errlen);

/* The same from text already in memory (JSON when it starts with '{' or '[', else YAML);
 * `what` names it in errors. */
int model_create_from_text(Model **out, const char *text, const char *what, uint64_t seed,
                           char *err, size_t errlen);

/* What a model asks of memory at start-up (model_memory), in bytes. */
typedef struct {
    size_t weights;     /* parameter and gradient arenas, the gradient arenas of the most
                           shards a step may cut the batch into, the optimizer state */
    size_t activations; /* model_reserve's buffers for the batch: outputs, dropout masks,
                           maxpool argmax, im2col columns, activation gradients,
                           pre-activations (model.h's pre), batchnorm statistics */
    size_t total;       /* their sum (SIZE_MAX when it does not fit a size_t) */
} ModelMemory;

/* What a model (its layers and num_params, nothing allocated needed) asks of memory
 * when it trains on batches of `batch` examples with state_per_param floats of optimizer
 * state per parameter: the host's share; a GPU holds about as much again. */
ModelMemory model_memory(const Model *m, int batch, size_t state_per_param);

/* A bound for model_create_within: the model at `batch` examples per step, with
 * state_per_param floats of optimizer state per parameter, may ask at most `limit`
 * bytes (model_memory's total). */
typedef struct {
    int batch;
    size_t state_per_param;
    size_t limit;
} ModelBudget;

/* model_create, refusing (-E2BIG, err giving the figures and the limit) a spec whose
 * model_memory exceeds budget->limit, before its arenas are allocated. A NULL budget
 * bounds nothing beyond the per-layer limits. */
int model_create_within(Model **out, const char *spec, uint64_t seed, const ModelBudget *budget,
                        char *err, size_t errlen);

void model_free(Model *m);

/* Re-initialises the parameters from seed: one splitmix64 stream, drawn layer after
 * layer, variable after variable in arena order, each by its Layer.init (initializer.h),
 * flat Keras layout. */
void model_init_params(Model *m, uint64_t seed);

/* Allocates the activation buffers for batches of up to max_batch examples. */
void model_reserve(Model *m, int max_batch);

/* One training step on local_batch examples x (B, input_size) in [0,1] and labels y:
 * forward (dropout drawn from dropout_seed), loss, and backward into m->grads, which
 * becomes the gradient of
 *     sum_{local examples} loss / global_batch + regularization / num_replicas
 * (tf.nn.scale_regularization_loss), so that the sum over replicas is the gradient of
 * the global mean loss; a BatchNormalization's state slots take its batch statistics
 * over this rank's examples divided by num_replicas (model_update_moving). on_ready (may
 * be NULL) fires per layer as its slice, state included, is final. Fills *st with this
 * worker's share. Needs model_reserve(m, >= local_batch). Every BatchNormalization runs
 * as unsynchronized here; model_step_sync takes the sums a synchronized one needs. */
void model_step(Model *m, const float *x, const int32_t *y, int local_batch, int global_batch,
                int num_replicas, uint64_t dropout_seed, GradReadyFn on_ready, void *ctx,
                StepStats *st);

/* model_step with sync (layers.h: the sums over every rank of the step, `first` on rank
 * 0; NULL: a step alone, every layer as unsynchronized, the same bits as model_step):
 * each synchronized BatchNormalization normalises with the statistics of the global
 * batch, every rank's examples, summing over the ranks in its forward and in its backward
 * (layers.h), so that the gradients summed over the ranks are those of one worker with
 * the whole global batch; its state slots take those statistics on the first rank and
 * zeros on the others, so that the gradient all-reduce gives every rank exactly them.
 * Every rank calls it for the same model in the same step: the sums are collectives.
 * Returns 0, or the negative errno of a sum that failed: the step is abandoned there
 * (m->grads and the activations undefined, the parameters untouched). */
int model_step_sync(Model *m, const float *x, const int32_t *y, int local_batch, int global_batch,
                    int num_replicas, uint64_t dropout_seed, const BnSync *sync,
                    GradReadyFn on_ready, void *ctx, StepStats *st);

/* After a step's gradients were summed over the ranks: each BatchNormalization's moving
 * statistics take the batch statistics its state slots of m->grads hold (the step
 * writes each rank's mean and variance divided by the ranks, so the sum is their mean
 * over the ranks, as MultiWorkerMirroredStrategy's MEAN aggregation of Keras's moving
 * variables gives; synchronized, model_step_sync writes the global batch's on the first
 * rank and zeros on the others, so the sum is exactly them), moving = moving * momentum +
 * batch * (1 - momentum), as Keras 3 computes it; then zeroes those slots, so that no
 * optimizer moves the state (a zero gradient leaves a parameter as it is under every
 * update optim.h has). */
void model_update_moving(Model *m);

/* model_step on one worker (global batch = batch, one replica) followed by plain SGD,
 * params -= lr * gradient (Keras's SGD with momentum 0; lr > 0): the same update as
 * model_step then optim_step, but each Dense kernel is updated inside its gradient's
 * product (dense_backward_sgd), so that its gradient is never written nor read back.
 * m->grads then holds the gradients of every parameter but the Dense kernels (their
 * slices are left as they were). The caller counts the optimizer's iteration. */
void model_step_sgd(Model *m, const float *x, const int32_t *y, int batch, uint64_t dropout_seed,
                    float lr, StepStats *st);

/* Inference (dropout off) on b examples: st->loss is the SUM of the examples' losses
 * (no regularization), st->correct and st->count as above. */
void model_evaluate(Model *m, const float *x, const int32_t *y, int b, StepStats *st);

/* The regularization loss sum_l l1_l * sum|kernel_l| + l2_l * |kernel_l|^2 of the current
 * parameters. */
double model_regularization(const Model *m);

/* The first layer with parameters or state (num_layers when none): backward stops
 * there, and that layer passes no gradient back. Inline, for device.cu's C++ too. */
static inline int model_first_param_layer(const Model *m)
{
    for (int i = 0; i < m->num_layers; i++)
        if (model_layer_floats(&m->layers[i])) return i;
    return m->num_layers;
}

#endif
