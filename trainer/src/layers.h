/* layers — forward/backward pairs of the Sequential layers over flat float arrays.
 *
 * Conventions (llm.c style): outputs first, then inputs, then sizes. Activations are
 * NHWC (batch, height, width, channels), row-major; Conv2D kernels are HWIO and Dense
 * kernels (in, out), exactly Keras's layouts, so weights map one to one. Backward
 * functions ACCUMULATE nothing: they overwrite dweight/dbias/dinput. A NULL dinput means
 * "not needed" (the first layer) and skips that GEMM. All matrix products go through
 * gemm() (gemm.h: a BLAS library chosen at build time); the only loops here are the
 * element-wise ones, Winograd's transforms and BatchNormalization's per-channel sums.
 *
 * Threads: gemm() cuts its products over the pool's threads (pool.h), and so do the
 * BatchNormalization functions their passes; everything else runs on the calling thread
 * (model.c runs those layers on shards of the batch in parallel). Called from inside a
 * task of parallel_for, all of them run on that thread alone. */
#ifndef KT_LAYERS_H
#define KT_LAYERS_H

#include <stddef.h>
#include <stdint.h>

/* Keras's activations by their exact definitions: gelu is the erf form (Keras's default;
 * a config names no other), swish is silu, elu's alpha is 1 and leaky_relu's negative
 * slope 0.2 (keras.activations' defaults in both Keras 3 and tf-keras). */
typedef enum {
    ACT_LINEAR = 0,
    ACT_RELU,
    ACT_SOFTMAX,
    ACT_SIGMOID,
    ACT_TANH,
    ACT_GELU,
    ACT_SWISH,
    ACT_ELU,
    ACT_LEAKY_RELU
} Activation;

/* Geometry of one Conv2D: input (B,H,W,C) -> output (B,OH,OW,F), kernel (KH,KW,C,F). */
typedef struct {
    int h, w, c;    /* input */
    int kh, kw, f;  /* kernel size and filters */
    int sh, sw;     /* strides */
    int pad_top, pad_left;
    int oh, ow;     /* output */
    int no_dinput;  /* the backward is never asked for dinput (the model's first layer with
                     * parameters): the scratch keeps no room for a Winograd one */
} ConvGeom;

/* Fills g->oh/ow/pad_* for Keras "valid" (same == 0) or "same" (same != 0) padding.
 * Returns 0, or -EINVAL when the output would be empty. */
int conv_geom_init(ConvGeom *g, int h, int w, int c, int kh, int kw, int f, int sh, int sw,
                   int same);

/* How a Conv2D's passes are computed (docs/design.md, Conv2D's passes). CONV_AUTO, the
 * default: by Winograd's F(2x2, 3x3) where the kernel is 3x3 with stride 1 and the
 * convolution has at least CONV_WINOGRAD_MIN_CHANNELS channels in (the layer's for the
 * forward and the kernel gradient, its filters for the input gradient), else im2col and
 * one product. CONV_IM2COL: always im2col. CONV_WINOGRAD: Winograd wherever the kernel
 * and stride allow, whatever the channels (for tests). The trainer takes it from
 * KUBETRAIN_CONV (auto, im2col, winograd). */
typedef enum { CONV_AUTO = 0, CONV_IM2COL, CONV_WINOGRAD } ConvAlgo;
#define CONV_WINOGRAD_MIN_CHANNELS 8

/* Sets the algorithm for every Conv2D function called from now on; not while a pass
 * runs. conv_scratch_size is for the algorithm set when it is called: set it first (a
 * scratch sized under CONV_WINOGRAD holds any of them). */
void conv_set_algo(ConvAlgo algo);

/* "auto" (or NULL or ""), "im2col" or "winograd" into *algo; -EINVAL for anything
 * else. */
int conv_algo_parse(const char *s, ConvAlgo *algo);

/* Floats of the scratch the Conv2D functions below need for a batch of b (at most
 * b * conv_scratch_size(g, 1)): the im2col of a block of examples (the forward's, made
 * again by the backward rather than kept), the backward's column gradient or im2col of
 * dout, and a turned copy of the kernel. */
size_t conv_scratch_size(const ConvGeom *g, int b);

/* A layer without bias (Keras's use_bias false) passes bias and dbias NULL to the Conv2D
 * and Dense functions below: no bias is added, no bias gradient written. */

/* out (B,OH,OW,F) = conv(inp (B,H,W,C), weight (KH,KW,C,F)) + bias (F), by im2col or
 * Winograd (ConvAlgo). scratch: conv_scratch_size floats, nothing kept in it. */
void conv2d_forward(float *out, float *scratch, const float *inp, const float *weight,
                    const float *bias, const ConvGeom *g, int b);
/* dweight (KH,KW,C,F), dbias (F) and, when dinput != NULL, dinput (B,H,W,C) from
 * dout (B,OH,OW,F) and the forward's input inp. scratch: conv_scratch_size floats.
 * The kernel gradient is col^T @ dout, or by Winograd where ConvAlgo says so.
 * With stride 1 the input gradient is the convolution of dout with the turned kernel,
 * by Winograd where ConvAlgo says so, else with no more filters than channels by im2col
 * (one product with an inner dimension of kh*kw*f, straight into dinput); otherwise
 * dout @ weight^T, added back by col2im. */
void conv2d_backward(float *dinput, float *dweight, float *dbias, float *scratch, const float *dout,
                     const float *inp, const float *weight, const ConvGeom *g, int b);

/* The same with the layer's activation folded in, one pass over the output instead of
 * three: conv2d_forward_relu writes relu(conv + bias); conv2d_backward_relu takes dout
 * as the gradient of that relu output and out as the output itself, turns dout into the
 * gradient before the relu in place, and goes on as conv2d_backward. */
void conv2d_forward_relu(float *out, float *scratch, const float *inp, const float *weight,
                         const float *bias, const ConvGeom *g, int b);
/* conv2d_forward, or with relu conv2d_forward_relu, that also writes the moments of its
 * output that a BatchNormalization after the layer takes (BnMoments), made block by
 * block while the output is in cache instead of in two more passes over it: moments
 * (b, 2, F), for each example and channel the sum of its oh*ow values, then the sum of
 * their squared deviations from that example's mean, in double. moments NULL: none. */
void conv2d_forward_moments(float *out, double *moments, float *scratch, const float *inp,
                            const float *weight, const float *bias, const ConvGeom *g, int b,
                            int relu);
/* rezero: dout is left all zero (block by block, while the block is in cache), for a
 * product that adds onto it the next time (dense_backward's din_zero). */
void conv2d_backward_relu(float *dinput, float *dweight, float *dbias, float *scratch, float *dout,
                          const float *out, const float *inp, const float *weight,
                          const ConvGeom *g, int b, int rezero);

/* out (B,OUT) = inp (B,IN) @ weight (IN,OUT) + bias (OUT). */
void dense_forward(float *out, const float *inp, const float *weight, const float *bias, int b,
                   int in, int outn);
/* dweight (IN,OUT), dbias (OUT) and, when dinput != NULL, dinput (B,IN) from dout (B,OUT).
 * din_zero: dinput holds zeros already, so the product is added onto it and spared the
 * pass that would zero it. */
void dense_backward(float *dinput, float *dweight, float *dbias, const float *dout,
                    const float *inp, const float *weight, int b, int in, int outn, int din_zero);
/* dense_backward with a plain SGD update of the kernel folded into its gradient's
 * product: dinput (from the weights as they were) and dbias as above, then
 *     weight = decay * weight - lr * inp^T @ dout
 * in place, so that the kernel's gradient is never written (decay = 1 - lr * the
 * L2 term's factor). */
void dense_backward_sgd(float *dinput, float *dbias, const float *dout, const float *inp,
                        float *weight, int b, int in, int outn, float lr, float decay,
                        int din_zero);

/* Geometry of one pooling layer (max or average): input (B,H,W,C) -> output (B,OH,OW,C). */
typedef struct {
    int h, w, c;    /* input */
    int ph, pw;     /* pool size */
    int sh, sw;     /* strides */
    int pad_top, pad_left;
    int oh, ow;     /* output */
} PoolGeom;

/* Keras's output size and padding: "valid" (same == 0) OH = (H-PH)/SH+1; "same"
 * OH = ceil(H/SH), padded by max((OH-1)*SH+PH-H, 0) rows, the smaller half on top (as
 * TensorFlow does); padded cells never win. Returns 0, or -EINVAL when the output would
 * be empty. */
int pool_geom_init(PoolGeom *g, int h, int w, int c, int ph, int pw, int sh, int sw, int same);

/* Keras MaxPooling2D: out (B,OH,OW,C); argmax (B,OH,OW,C) keeps the flat input index of
 * each maximum for the backward. */
void maxpool_forward(float *out, int32_t *argmax, const float *inp, const PoolGeom *g, int b);
/* dinput (B,H,W,C) from dout (B,OH,OW,C): each gradient goes to its maximum. */
void maxpool_backward(float *dinput, const float *dout, const int32_t *argmax, const PoolGeom *g,
                      int b);

/* Keras AveragePooling2D: out (B,OH,OW,C), each the mean of its window's cells inside
 * the input (with "same" padding the padded cells are not counted, as TensorFlow's
 * avg_pool does). GlobalAveragePooling2D is this with the whole input as the window. */
void avgpool_forward(float *out, const float *inp, const PoolGeom *g, int b);
/* dinput (B,H,W,C) from dout (B,OH,OW,C): each gradient shared equally by the cells it
 * averaged. */
void avgpool_backward(float *dinput, const float *dout, const PoolGeom *g, int b);

/* Keras Rescaling: out = inp * scale + offset over n values (a product then a sum, in
 * float, as Keras computes it). */
void rescaling_forward(float *out, const float *inp, size_t n, float scale, float offset);
/* d <- d * scale, in place. */
void rescaling_backward(float *d, size_t n, float scale);

/* Keras BatchNormalization over the last axis of rows x c values (channels last; rows =
 * examples x the other axes). gamma NULL: scale false (1); beta NULL: center false (0).
 * Training: out = gamma * (x - mean) * invstd + beta with the batch's mean and biased
 * variance per channel, invstd = 1/sqrt(var + eps); mean, var and invstd (c each) are
 * written for the moving statistics and the backward. Sums in double.
 *
 * Threads: each runs on the pool's threads, a per-channel sum cut by channels (every
 * channel summed over the rows in row order by one task) and an element-wise pass by
 * rows, so the results are the same bits whatever the thread count. */
void batchnorm_forward_train(float *out, float *mean, float *var, float *invstd, const float *inp,
                             const float *gamma, const float *beta, size_t rows, int c, float eps);
/* Inference: the same with the moving mean and variance (c each) in place of the batch's. */
void batchnorm_forward_infer(float *out, const float *inp, const float *gamma, const float *beta,
                             const float *mmean, const float *mvar, size_t rows, int c, float eps);
/* From dout (rows, c), the input of the training forward and its mean and invstd:
 * dgamma = sum dout * xhat and dbeta = sum dout per channel (each skipped when NULL), and,
 * when dinput != NULL, dinput = gamma * invstd / rows * (rows * dout - dbeta - xhat * dgamma),
 * the gradient through the batch statistics. */
void batchnorm_backward(float *dinput, float *dgamma, float *dbeta, const float *dout,
                        const float *inp, const float *mean, const float *invstd,
                        const float *gamma, size_t rows, int c);

/* The same followed by a relu (a ReLU layer after the BatchNormalization), one pass over
 * the output instead of three: the forwards write relu(out), the same bits as the
 * batchnorm's output put through activation_forward's relu; batchnorm_backward_relu takes
 * dout as the gradient of that relu output and out as the output itself, and gives
 * what activation_backward's relu then batchnorm_backward give, without writing dout. */
void batchnorm_forward_train_relu(float *out, float *mean, float *var, float *invstd,
                                  const float *inp, const float *gamma, const float *beta,
                                  size_t rows, int c, float eps);
void batchnorm_forward_infer_relu(float *out, const float *inp, const float *gamma,
                                  const float *beta, const float *mmean, const float *mvar,
                                  size_t rows, int c, float eps);
void batchnorm_backward_relu(float *dinput, float *dgamma, float *dbeta, const float *dout,
                             const float *out, const float *inp, const float *mean,
                             const float *invstd, const float *gamma, size_t rows, int c);

/* A synchronized BatchNormalization (Keras's synchronized=True): its statistics are of
 * the step's global batch, every rank's rows, not of this rank's alone. sum(ctx, v, n)
 * replaces the n doubles of v by their sums over every rank of the step, the same bits on
 * every rank, and returns 0, or a negative errno, with which the pass stops at once (its
 * outputs then undefined). Every rank makes the same calls in the same order. */
typedef struct {
    int (*sum)(void *ctx, double *v, size_t n);
    void *ctx;
    int first; /* 1 on one rank of the step (rank 0), which writes what is of the global
                  batch and to be summed over the ranks; 0 on the others */
} BnSync;

/* The input's moments per example, as conv2d_forward_moments writes them: v (examples,
 * 2, c), rows / examples rows each. */
typedef struct {
    const double *v;
    size_t examples;
} BnMoments;

/* batchnorm_forward_train, or with relu batchnorm_forward_train_relu, with the statistics
 * of every rank's rows when sync != NULL: each channel's sum of x and the rows are summed
 * over the ranks (sync->sum) before the mean is taken, then the sums of the squared
 * deviations from that mean before the variance, the same two passes as on one rank. With
 * sync NULL the same bits as those. mom != NULL: the two sums come from the input's
 * moments (the examples' sums added in order, then each example's squared deviations
 * from the mean as M2_e + n_e (mean_e - mean)^2) instead of two passes over inp: the
 * same sums in double up to their rounding, and the same bits on any thread count.
 * Returns 0 or sync->sum's negative errno. */
int batchnorm_forward_train_sync(float *out, float *mean, float *var, float *invstd,
                                 const float *inp, const float *gamma, const float *beta,
                                 size_t rows, int c, float eps, int relu, const BnSync *sync,
                                 const BnMoments *mom);
/* batchnorm_backward, or with y (the relu's output) batchnorm_backward_relu, through the
 * statistics of every rank's rows when sync != NULL: the sums of dout and dout * xhat and
 * the rows are summed over the ranks (sync->sum), dinput formed from them, and dgamma and
 * dbeta are those global sums on the first rank and zeros on the others, so that the
 * gradient all-reduce sums them into exactly the global batch's. With sync NULL the same
 * bits as those. Returns 0 or sync->sum's negative errno. */
int batchnorm_backward_sync(float *dinput, float *dgamma, float *dbeta, const float *dout,
                            const float *y, const float *inp, const float *mean,
                            const float *invstd, const float *gamma, size_t rows, int c,
                            const BnSync *sync);
/* batchnorm_backward_sync with the relu fused, its mask made again from the input, beta
 * (NULL: center false) and the statistics instead of read from the relu's output: the
 * forward's very float operations, so the same bits as batchnorm_backward_sync given y,
 * with one array fewer to read in each of its two passes. gamma and beta must be those
 * of the forward. Returns 0 or sync->sum's negative errno. */
int batchnorm_backward_relu_sync(float *dinput, float *dgamma, float *dbeta, const float *dout,
                                 const float *inp, const float *mean, const float *invstd,
                                 const float *gamma, const float *beta, size_t rows, int c,
                                 const BnSync *sync);

/* Inverted dropout (Keras): keeps each of n values with probability 1-rate and scales
 * the kept ones by 1/(1-rate); mask (n) records the factor (0 or 1/(1-rate)). The mask
 * is drawn from *rng (splitmix64). In place on x. */
void dropout_forward(float *x, float *mask, size_t n, float rate, uint64_t *rng);
/* dx = dout * mask, in place on d. */
void dropout_backward(float *d, const float *mask, size_t n);

/* Keras's leaky relu with any negative slope >= 0, in place over n values (the
 * LeakyReLU layer; the leaky_relu activation is this with slope 0.2). */
void leaky_relu_forward(float *x, size_t n, float slope);
/* d <- d * slope where y <= 0 (y its output). */
void leaky_relu_backward(float *d, const float *y, size_t n, float slope);

/* In place activations over rows of `cols` values; softmax is per row. */
void activation_forward(float *x, size_t rows, size_t cols, Activation act);
/* 1 when the activation's gradient needs its input, not only its output (gelu and swish
 * are not monotonic: the output does not say the input). */
int activation_needs_input(Activation act);
/* d (rows,cols) <- d * act'(x) from the activation's output y, or from its input x where
 * activation_needs_input (x may be NULL elsewhere). Softmax's full Jacobian-vector
 * product: d_i <- y_i (d_i - sum_j d_j y_j). */
void activation_backward(float *d, const float *y, const float *x, size_t rows, size_t cols,
                         Activation act);

#endif
