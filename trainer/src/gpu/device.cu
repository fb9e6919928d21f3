// device.cu — the GpuModel of gpu.h: the trainer's layers, losses and optimizers on a
// CUDA device. Each kernel names the CPU function whose math it follows.
#include "gpu/gpu.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include "gpu/kernels.cuh"

// util.h's log line (util.h itself is C11: _Noreturn)
extern "C" void util_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

// ------------------------------------------------------------------------------------
// errors

static int fail(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int fail(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return -EIO;
}

#define CU(call)                                                                                   \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess)                                                                     \
            return fail(err, errlen, "%s: %s (%s:%d)", #call, cudaGetErrorString(e_), __FILE__,    \
                        __LINE__);                                                                 \
    } while (0)
#define BLAS(call)                                                                                 \
    do {                                                                                           \
        cublasStatus_t s_ = (call);                                                                \
        if (s_ != CUBLAS_STATUS_SUCCESS)                                                           \
            return fail(err, errlen, "%s: %s", #call, cublasGetStatusString(s_));                  \
    } while (0)
#define DNN(call)                                                                                  \
    do {                                                                                           \
        cudnnStatus_t s_ = (call);                                                                 \
        if (s_ != CUDNN_STATUS_SUCCESS)                                                            \
            return fail(err, errlen, "%s: %s", #call, cudnnGetErrorString(s_));                    \
    } while (0)
#define TRY(call)                                                                                  \
    do {                                                                                           \
        int r_ = (call);                                                                           \
        if (r_) return r_;                                                                         \
    } while (0)
// After a kernel launch: a bad configuration shows up here, not at the next sync.
#define LAUNCHED() CU(cudaGetLastError())

static unsigned blocks_for(size_t n)
{
    size_t b = (n + THREADS - 1) / THREADS;
    return (unsigned)(b < 65535u * 32u ? (b ? b : 1) : 65535u * 32u);
}

// ------------------------------------------------------------------------------------
// device queries

extern "C" int gpu_device_count(char *why, size_t whylen)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        if (why) snprintf(why, whylen, "%s", cudaGetErrorString(e));
        cudaGetLastError();
        return 0;
    }
    if (n == 0 && why) snprintf(why, whylen, "the CUDA runtime sees no device");
    return n;
}

extern "C" void gpu_device_describe(int dev, char *out, size_t outlen)
{
    cudaDeviceProp p;
    int drv = 0, rt = 0;
    cudaDriverGetVersion(&drv);
    cudaRuntimeGetVersion(&rt);
    if (cudaGetDeviceProperties(&p, dev) != cudaSuccess) {
        snprintf(out, outlen, "device %d (no properties), driver %d, runtime %d", dev, drv, rt);
        return;
    }
    snprintf(out, outlen, "%s, compute %d.%d, %.1f GiB, driver %d, runtime %d, cuDNN %zu", p.name,
             p.major, p.minor, (double)p.totalGlobalMem / (1 << 30), drv, rt, cudnnGetVersion());
}

extern "C" int gpu_device_bus_id(int dev, int pci[3], char *err, size_t errlen)
{
    cudaDeviceProp p;
    CU(cudaGetDeviceProperties(&p, dev));
    pci[0] = p.pciDomainID, pci[1] = p.pciBusID, pci[2] = p.pciDeviceID;
    return 0;
}

// ------------------------------------------------------------------------------------
// the model

// cuDNN state of one Conv2D layer for the batch size it was last set up for.
struct ConvPlan {
    int b; // 0: not set up
    cudnnTensorDescriptor_t x, y;
    cudnnFilterDescriptor_t w;
    cudnnConvolutionDescriptor_t conv;
    cudnnConvolutionFwdAlgo_t fwd;
    cudnnConvolutionBwdDataAlgo_t bwd_data;
    cudnnConvolutionBwdFilterAlgo_t bwd_filter;
    int ph, pw;        // total padding (SAME)
    int explicit_pad;  // odd total: pad into xpad instead of cuDNN's symmetric padding
    float *wt, *dwt;   // KRSC kernel and its gradient
    float *xpad, *dxpad; // (B, H+ph, W+pw, C) when explicit_pad
};

struct GpuModel {
    const Model *m;
    int dev, max_batch, b;   // b: examples of the loaded batch
    OptimizerConfig oc;
    size_t np, state_floats;
    cudaStream_t compute, copy;
    cublasHandle_t blas;
    cudnnHandle_t dnn;
    float *params, *grads, *state;
    float **acts, **masks;
    int32_t **argmax;
    ConvPlan *plans;
    float *dbuf[2];
    void *ws;
    size_t ws_size;
    // the double-buffered batch
    float *x[2], *xh[2];
    int32_t *y[2], *yh[2];
    cudaEvent_t copied[2], consumed[2];
    int slot;                // the slot of the loaded batch
    int ran_slot, ran_b;     // the slot and size of the batch the last step or evaluation read
    double *acc;             // ACC_N sums (kernels.cuh)
    double *row_loss;
    int *row_correct;
    float *stats_h;          // pinned, MODEL_STATS_FLOATS
    double *acc_h;           // pinned, ACC_N
    cudaEvent_t *ready;      // per layer: its gradient slice is final
    GpuGradReadyFn on_ready;
    void *ready_ctx;
    StepArgs *args_h, *args_d; // pinned and device copies of this step's StepArgs
    cudaEvent_t args_read;   // the last step's copy of args_h has run: args_h is free
    cudaEvent_t step_done;   // after the last step's backward pass (gpu_model_step_event)
    cudaEvent_t stats_copied; // after gpu_model_finish_step's copy to stats_h
    // The training step as CUDA graphs, one per batch slot (the step reads the slot's
    // buffers): a graph replays while the batch size, global batch, replica count and
    // workspace are those it was captured with. Used when no gradient-ready hook is set.
    struct StepGraph {
        cudaGraphExec_t exec;
        int b, global_batch, replicas;
        unsigned ws_gen;
        int warm;            // the step ran once without a graph at this key
    } graphs[2];
    int graphs_on;           // 0: turned off (gpu_model_use_graphs), or a capture failed
    unsigned ws_gen;         // bumped when the workspace moves (graphs hold its address)
    long graph_launches;     // steps that ran as a graph replay
    void *blas_ws; // cuBLAS's workspace (fixed, so cuBLAS allocates nothing in a capture)
    float *ones; // 1.0f for every row a bias gradient sums over (max_batch x the most
        // rows per example of any layer)
};

// Workspace cuDNN may use per convolution call; algorithms that want more are skipped.
static const size_t WS_LIMIT = (size_t)512 << 20;
// cuBLAS's workspace, set by us so that a captured step allocates nothing (cuBLAS
// recommends 32 MiB on Hopper, 4 MiB before).
static const size_t BLAS_WS = (size_t)32 << 20;

// Kernel launches: EW runs an element-wise (grid-stride) kernel over n elements on the
// compute stream, LAUNCH one with a fixed geometry. Built for the CPU emulation of the
// test (KT_CUDA_EMUL, trainer/tests/fakecuda) they go through its launcher instead.
#ifdef KT_CUDA_EMUL
#define LAUNCH(k, grid, block, stream, ...) emul_launch_on(stream, grid, block, k, __VA_ARGS__)
#define EW(k, n, ...)                                                                              \
    emul_launch_on(g->compute, blocks_for(n) < 2 ? blocks_for(n) : 2, 2, k, __VA_ARGS__)
#else
#define LAUNCH(k, grid, block, stream, ...) k<<<grid, block, 0, stream>>>(__VA_ARGS__)
#define EW(k, n, ...) k<<<blocks_for(n), THREADS, 0, g->compute>>>(__VA_ARGS__)
#endif

static int ensure_workspace(GpuModel *g, size_t need, char *err, size_t errlen)
{
    if (need <= g->ws_size) return 0;
    CU(cudaStreamSynchronize(g->compute));
    CU(cudaFree(g->ws));
    g->ws = NULL;
    g->ws_size = 0;
    CU(cudaMalloc(&g->ws, need));
    g->ws_size = need;
    g->ws_gen++;
    return 0;
}

// The first usable algorithm of cuDNN's ranking (fastest first) that runs in FP32 FMA
// math and is deterministic (cuDNN's algorithms that add with atomics are not: a run's
// bits would change from run to run, with graphs on or off, after a resume), else the
// first usable FMA one, *deterministic set to 0; -1 when none (the convolution
// descriptor asks for FMA math, so no other math type is taken).
template <typename Perf> static int pick_algo(const Perf *p, int n, int *deterministic)
{
    int any = -1;
    for (int i = 0; i < n; i++) {
        if (p[i].status != CUDNN_STATUS_SUCCESS || p[i].memory > WS_LIMIT ||
            p[i].mathType != CUDNN_FMA_MATH)
            continue;
        if (p[i].determinism == CUDNN_DETERMINISTIC) {
            *deterministic = 1;
            return i;
        }
        if (any < 0) any = i;
    }
    *deterministic = 0;
    return any;
}

// pick_algo's choice for the pass named what of layer li, told on stderr when it is not
// deterministic (unless quiet: the layer was planned before); -ENOTSUP when there is none.
template <typename Perf>
static int choose(const Perf *p, int n, int li, const char *what, int quiet, char *err,
                  size_t errlen)
{
    int det, i = pick_algo(p, n, &det);
    if (i < 0) {
        fail(err, errlen,
             "layers[%d]: cuDNN offers no FP32 (FMA math) %s algorithm within a "
             "%zu MiB workspace for this convolution on this device; train this model with "
             "--device cpu",
             li, what, WS_LIMIT >> 20);
        return -ENOTSUP;
    }
    if (!det && !quiet)
        fprintf(stderr,
                "kubetrain-trainer: layers[%d]: cuDNN offers no deterministic %s "
                "algorithm for this convolution: the last bits of the weights may differ "
                "between runs\n",
                li, what);
    return i;
}

// Descriptors and algorithms of conv layer li for batches of b (redone when b changes).
static int conv_plan(GpuModel *g, int li, int b, char *err, size_t errlen)
{
    const ConvGeom *c = &g->m->layers[li].conv;
    ConvPlan *p = &g->plans[li];
    if (p->b == b) return 0;
    int xh = c->h + (p->explicit_pad ? p->ph : 0), xw = c->w + (p->explicit_pad ? p->pw : 0);
    int padh = p->explicit_pad ? 0 : c->pad_top, padw = p->explicit_pad ? 0 : c->pad_left;
    DNN(cudnnSetTensor4dDescriptor(p->x, CUDNN_TENSOR_NHWC, CUDNN_DATA_FLOAT, b, c->c, xh, xw));
    DNN(cudnnSetTensor4dDescriptor(p->y, CUDNN_TENSOR_NHWC, CUDNN_DATA_FLOAT, b, c->f, c->oh,
                                   c->ow));
    DNN(cudnnSetFilter4dDescriptor(p->w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NHWC, c->f, c->c, c->kh,
                                   c->kw));
    DNN(cudnnSetConvolution2dDescriptor(p->conv, padh, padw, c->sh, c->sw, 1, 1,
                                        CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    DNN(cudnnSetConvolutionMathType(p->conv, CUDNN_FMA_MATH));
    int on, oc, oh, ow;
    DNN(cudnnGetConvolution2dForwardOutputDim(p->conv, p->x, p->w, &on, &oc, &oh, &ow));
    if (on != b || oc != c->f || oh != c->oh || ow != c->ow)
        return fail(err, errlen,
                    "layers[%d]: cuDNN computes a %dx%dx%dx%d output, the model "
                    "%dx%dx%dx%d",
                    li, on, oh, ow, oc, b, c->oh, c->ow, c->f);

    // cuDNN ranks as many algorithms as it has (its MaxCount); the workspace each choice
    // needs is asked again for that algorithm (the larger of the two is kept)
    int got = 0, max = 0, i;
    size_t need = 0, ws = 0;
    DNN(cudnnGetConvolutionForwardAlgorithmMaxCount(g->dnn, &max));
    std::vector<cudnnConvolutionFwdAlgoPerf_t> fp(std::max(max, 1));
    DNN(cudnnGetConvolutionForwardAlgorithm_v7(g->dnn, p->x, p->w, p->conv, p->y, (int)fp.size(),
                                               &got, fp.data()));
    if ((i = choose(fp.data(), got, li, "forward", p->b != 0, err, errlen)) < 0) return i;
    p->fwd = fp[i].algo;
    DNN(cudnnGetConvolutionForwardWorkspaceSize(g->dnn, p->x, p->w, p->conv, p->y, p->fwd, &ws));
    need = std::max(fp[i].memory, ws);
    // the first layer with parameters passes no gradient back (backward): no algorithm
    if (li > model_first_param_layer(g->m)) {
        DNN(cudnnGetConvolutionBackwardDataAlgorithmMaxCount(g->dnn, &max));
        std::vector<cudnnConvolutionBwdDataAlgoPerf_t> dp(std::max(max, 1));
        DNN(cudnnGetConvolutionBackwardDataAlgorithm_v7(g->dnn, p->w, p->y, p->conv, p->x,
                                                        (int)dp.size(), &got, dp.data()));
        if ((i = choose(dp.data(), got, li, "backward-data", p->b != 0, err, errlen)) < 0) return i;
        p->bwd_data = dp[i].algo;
        DNN(cudnnGetConvolutionBackwardDataWorkspaceSize(g->dnn, p->w, p->y, p->conv, p->x,
                                                         p->bwd_data, &ws));
        need = std::max({need, dp[i].memory, ws});
    }
    DNN(cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(g->dnn, &max));
    std::vector<cudnnConvolutionBwdFilterAlgoPerf_t> wp(std::max(max, 1));
    DNN(cudnnGetConvolutionBackwardFilterAlgorithm_v7(g->dnn, p->x, p->y, p->conv, p->w,
                                                      (int)wp.size(), &got, wp.data()));
    if ((i = choose(wp.data(), got, li, "backward-filter", p->b != 0, err, errlen)) < 0) return i;
    p->bwd_filter = wp[i].algo;
    DNN(cudnnGetConvolutionBackwardFilterWorkspaceSize(g->dnn, p->x, p->y, p->conv, p->w,
                                                       p->bwd_filter, &ws));
    need = std::max({need, wp[i].memory, ws});
    TRY(ensure_workspace(g, need, err, errlen));
    p->b = b;
    return 0;
}

// Row-major C (M,N) = op(A) (M,K) @ op(B) (K,N) + beta C, as gemm.h has it: cuBLAS is
// column-major, so it computes C^T = op(B)^T op(A)^T.
static cublasStatus_t gemm_rm(cublasHandle_t h, int ta, int tb, int M, int N, int K, const float *A,
                              int lda, const float *B, int ldb, float beta, float *C, int ldc)
{
    const float one = 1.0f;
    return cublasSgemm(h, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, N, M, K,
                       &one, B, ldb, A, lda, &beta, C, ldc);
}

// bias_grad: dbias (cols) = ones (1, rows) @ dout (rows, cols), through cuBLAS (coalesced
// and deterministic, where one block per column of a kernel would stride through dout).
static cublasStatus_t bias_grad(GpuModel *g, float *dbias, const float *dout, int rows, int cols)
{
    return gemm_rm(g->blas, 0, 0, 1, cols, rows, g->ones, rows, dout, cols, 0.0f, dbias, cols);
}

static const float *layer_out(const GpuModel *g, const float *x, int i)
{
    for (; i >= 0; i--)
        if (g->acts[i]) return g->acts[i];
    return x;
}

// conv2d_forward without the bias: out = conv(in, kernel).
static int conv_forward(GpuModel *g, int li, float *out, const float *in, const float *w, int b,
                        char *err, size_t errlen)
{
    const ConvGeom *c = &g->m->layers[li].conv;
    ConvPlan *p = &g->plans[li];
    TRY(conv_plan(g, li, b, err, errlen));
    const int rsc = c->kh * c->kw * c->c;
    EW(k_hwio_to_krsc, (size_t)rsc * c->f, p->wt, w, rsc, c->f);
    LAUNCHED();
    const float *xin = in;
    if (p->explicit_pad) {
        EW(k_pad, (size_t)b * (c->h + p->ph) * (c->w + p->pw) * c->c, p->xpad, in, b, c->h, c->w,
           c->c, p->ph, p->pw, c->pad_top, c->pad_left);
        LAUNCHED();
        xin = p->xpad;
    }
    const float one = 1.0f, zero = 0.0f;
    DNN(cudnnConvolutionForward(g->dnn, &one, p->x, xin, p->w, p->wt, p->conv, p->fwd, g->ws,
                                g->ws_size, &zero, p->y, out));
    return 0;
}

// conv2d_backward: dweight, dbias and (din != NULL) dinput from dout.
static int conv_backward(GpuModel *g, int li, float *din, float *dw, float *db, const float *d,
                         const float *in, int b, char *err, size_t errlen)
{
    const ConvGeom *c = &g->m->layers[li].conv;
    ConvPlan *p = &g->plans[li];
    const float one = 1.0f, zero = 0.0f;
    const int rsc = c->kh * c->kw * c->c;
    BLAS(bias_grad(g, db, d, b * c->oh * c->ow, c->f));
    DNN(cudnnConvolutionBackwardFilter(g->dnn, &one, p->x, p->explicit_pad ? p->xpad : in, p->y, d,
                                       p->conv, p->bwd_filter, g->ws, g->ws_size, &zero, p->w,
                                       p->dwt));
    EW(k_krsc_to_hwio, (size_t)rsc * c->f, dw, p->dwt, rsc, c->f);
    LAUNCHED();
    if (!din) return 0;
    DNN(cudnnConvolutionBackwardData(g->dnn, &one, p->w, p->wt, p->y, d, p->conv, p->bwd_data,
                                     g->ws, g->ws_size, &zero, p->x,
                                     p->explicit_pad ? p->dxpad : din));
    if (p->explicit_pad) {
        EW(k_crop, (size_t)b * c->h * c->w * c->c, din, p->dxpad, b, c->h, c->w, c->c, p->ph, p->pw,
           c->pad_top, c->pad_left);
        LAUNCHED();
    }
    return 0;
}

// model.c's forward on the loaded batch.
static int forward(GpuModel *g, int training, char *err, size_t errlen)
{
    const Model *m = g->m;
    const int b = g->b;
    const float *x = g->x[g->slot];
    uint64_t draws = 0;
    for (int i = 0; i < m->num_layers; i++) {
        const Layer *l = &m->layers[i];
        const float *in = layer_out(g, x, i - 1);
        float *out = g->acts[i];
        const float *w = g->params + l->w_off, *bias = g->params + l->b_off;
        const size_t n = (size_t)b * l->out_size;
        const int last = i == m->num_layers - 1;
        Activation act = last && l->act == ACT_SOFTMAX ? ACT_LINEAR : l->act;
        switch (l->type) {
        case LAYER_RESHAPE:
        case LAYER_FLATTEN:
        case LAYER_ACTIVATION: // refused before (model_gpu_unsupported)
        case LAYER_RELU:
        case LAYER_LEAKY_RELU:
        case LAYER_AVGPOOL:
        case LAYER_GLOBAL_AVGPOOL:
        case LAYER_GLOBAL_MAXPOOL:
        case LAYER_RESCALING:
        case LAYER_BATCHNORM: continue;
        case LAYER_CONV2D:
            TRY(conv_forward(g, i, out, in, w, b, err, errlen));
            EW(k_bias_act, n, out, bias, n / l->conv.f, l->conv.f, act == ACT_RELU);
            LAUNCHED();
            if (act == ACT_RELU) act = ACT_LINEAR; // done
            break;
        case LAYER_DENSE: {
            // rows of the last axis: one per example, or more on a rank > 1 input
            const int rows = b * l->dense_rows;
            BLAS(gemm_rm(g->blas, 0, 0, rows, l->units, l->dense_in, in, l->dense_in, w, l->units,
                         0.0f, out, l->units));
            EW(k_bias_act, n, out, bias, (size_t)rows, l->units, act == ACT_RELU);
            LAUNCHED();
            if (act == ACT_RELU) act = ACT_LINEAR;
            break;
        }
        case LAYER_MAXPOOL:
            EW(k_maxpool, n, out, g->argmax[i], in, l->pool, b);
            LAUNCHED();
            break;
        case LAYER_DROPOUT:
            if (training && m->dropout_enabled && l->rate > 0.0f) {
                EW(k_dropout, n, out, g->masks[i], in, n, l->rate, g->args_d, draws);
                LAUNCHED();
                draws += n;
            } else {
                CU(cudaMemcpyAsync(out, in, n * sizeof *out, cudaMemcpyDeviceToDevice, g->compute));
            }
            break;
        }
        // a softmax normalises each row of the last axis (a Dense's units)
        const size_t srows = l->type == LAYER_DENSE ? (size_t)b * l->dense_rows : (size_t)b;
        const int scols = l->type == LAYER_DENSE ? l->units : (int)l->out_size;
        if (act == ACT_RELU) EW(k_relu, n, out, n);
        else if (act == ACT_SOFTMAX) EW(k_softmax_rows, srows, out, srows, scols);
        LAUNCHED();
    }
    return 0;
}

// loss_of: per-row losses and (dout != NULL) the loss gradient; then sums into acc.
static int loss(GpuModel *g, float *dout, float scale, char *err, size_t errlen)
{
    const Model *m = g->m;
    const Layer *last = &m->layers[m->num_layers - 1];
    const float *out = layer_out(g, g->x[g->slot], m->num_layers - 1);
    const int c = (int)m->num_classes, b = g->b;
    if (last->act == ACT_LINEAR || last->act == ACT_SOFTMAX)
        EW(k_sce_logits, (size_t)b, dout, g->row_loss, g->row_correct, out, g->y[g->slot], b, c,
           scale);
    else
        EW(k_sce_probs, (size_t)b, dout, g->row_loss, g->row_correct, out, g->y[g->slot], b, c,
           scale);
    LAUNCHED();
    CU(cudaMemsetAsync(g->acc, 0, ACC_N * sizeof *g->acc, g->compute));
    LAUNCH(k_sum_loss, 1, THREADS, g->compute, g->acc, g->row_loss, g->row_correct, b);
    LAUNCHED();
    return 0;
}

// model_step's backward, layers last to first.
static int backward(GpuModel *g, int num_replicas, char *err, size_t errlen)
{
    const Model *m = g->m;
    const int b = g->b;
    const float *x = g->x[g->slot];
    const int first_param = model_first_param_layer(m);
    int cur = 0;
    float *d = g->dbuf[0];
    for (int i = m->num_layers - 1; i >= first_param; i--) {
        const Layer *l = &m->layers[i];
        const float *in = layer_out(g, x, i - 1), *out = layer_out(g, x, i);
        float *din = i > first_param ? g->dbuf[1 - cur] : NULL;
        const float *w = g->params + l->w_off;
        float *dw = g->grads + l->w_off, *db = g->grads + l->b_off;
        const size_t n = (size_t)b * l->out_size;
        const int last = i == m->num_layers - 1;
        if ((l->type == LAYER_CONV2D || l->type == LAYER_DENSE) &&
            !(last && l->act == ACT_SOFTMAX)) {
            const size_t srows = l->type == LAYER_DENSE ? (size_t)b * l->dense_rows : (size_t)b;
            const int scols = l->type == LAYER_DENSE ? l->units : (int)l->out_size;
            if (l->act == ACT_RELU) EW(k_relu_backward, n, d, out, n);
            else if (l->act == ACT_SOFTMAX)
                EW(k_softmax_backward_rows, srows, d, out, srows, scols);
            LAUNCHED();
        }
        switch (l->type) {
        case LAYER_RESHAPE:
        case LAYER_FLATTEN:
        case LAYER_ACTIVATION: // refused before (model_gpu_unsupported)
        case LAYER_RELU:
        case LAYER_LEAKY_RELU:
        case LAYER_AVGPOOL:
        case LAYER_GLOBAL_AVGPOOL:
        case LAYER_GLOBAL_MAXPOOL:
        case LAYER_RESCALING:
        case LAYER_BATCHNORM: continue;
        case LAYER_DROPOUT:
            if (m->dropout_enabled && l->rate > 0.0f) {
                EW(k_mul, n, d, g->masks[i], n);
                LAUNCHED();
            }
            continue;
        case LAYER_MAXPOOL:
            CU(cudaMemsetAsync(din, 0, (size_t)b * l->in_size * sizeof *din, g->compute));
            EW(k_maxpool_backward, n, din, d, g->argmax[i], n);
            LAUNCHED();
            break;
        case LAYER_DENSE: {
            const int rows = b * l->dense_rows;
            BLAS(bias_grad(g, db, d, rows, l->units));
            BLAS(gemm_rm(g->blas, 1, 0, l->dense_in, l->units, rows, in, l->dense_in, d, l->units,
                         0.0f, dw, l->units));
            if (din)
                BLAS(gemm_rm(g->blas, 0, 1, rows, l->dense_in, l->units, d, l->units, w, l->units,
                             0.0f, din, l->dense_in));
            break;
        }
        case LAYER_CONV2D: TRY(conv_backward(g, i, din, dw, db, d, in, b, err, errlen)); break;
        }
        if (l->w_count && l->l2 != 0.0f) {
            EW(k_axpy, l->w_count, dw, w, 2.0f * l->l2 / (float)num_replicas, l->w_count);
            LAUNCHED();
        }
        if (l->w_count && g->on_ready) {
            CU(cudaEventRecord(g->ready[i], g->compute));
            TRY(g->on_ready(g->ready_ctx, l->w_off, l->w_count + l->b_count, g->ready[i], err,
                            errlen));
        }
        d = din;
        cur = 1 - cur;
    }
    return 0;
}

// ------------------------------------------------------------------------------------
// the public functions

extern "C" void gpu_model_free(GpuModel *g)
{
    if (!g) return;
    if (g->compute) cudaStreamSynchronize(g->compute);
    if (g->copy) cudaStreamSynchronize(g->copy);
    for (int i = 0; g->acts && i < g->m->num_layers; i++) {
        cudaFree(g->acts[i]);
        cudaFree(g->masks[i]);
        cudaFree(g->argmax[i]);
        ConvPlan *p = &g->plans[i];
        if (p->x) cudnnDestroyTensorDescriptor(p->x);
        if (p->y) cudnnDestroyTensorDescriptor(p->y);
        if (p->w) cudnnDestroyFilterDescriptor(p->w);
        if (p->conv) cudnnDestroyConvolutionDescriptor(p->conv);
        cudaFree(p->wt);
        cudaFree(p->dwt);
        cudaFree(p->xpad);
        cudaFree(p->dxpad);
    }
    for (int i = 0; g->ready && i < g->m->num_layers; i++)
        if (g->ready[i]) cudaEventDestroy(g->ready[i]);
    for (int k = 0; k < 2; k++)
        if (g->graphs[k].exec) cudaGraphExecDestroy(g->graphs[k].exec);
    free(g->ready);
    free(g->acts);
    free(g->masks);
    free(g->argmax);
    free(g->plans);
    for (int k = 0; k < 2; k++) {
        cudaFree(g->dbuf[k]);
        cudaFree(g->x[k]);
        cudaFree(g->y[k]);
        if (g->xh[k]) cudaFreeHost(g->xh[k]);
        if (g->yh[k]) cudaFreeHost(g->yh[k]);
        if (g->copied[k]) cudaEventDestroy(g->copied[k]);
        if (g->consumed[k]) cudaEventDestroy(g->consumed[k]);
    }
    if (g->args_read) cudaEventDestroy(g->args_read);
    if (g->step_done) cudaEventDestroy(g->step_done);
    if (g->stats_copied) cudaEventDestroy(g->stats_copied);
    cudaFree(g->params);
    cudaFree(g->grads);
    cudaFree(g->state);
    cudaFree(g->ws);
    cudaFree(g->acc);
    cudaFree(g->row_loss);
    cudaFree(g->row_correct);
    if (g->stats_h) cudaFreeHost(g->stats_h);
    if (g->acc_h) cudaFreeHost(g->acc_h);
    if (g->args_h) cudaFreeHost(g->args_h);
    cudaFree(g->args_d);
    if (g->blas) cublasDestroy(g->blas);
    cudaFree(g->blas_ws);
    cudaFree(g->ones);
    if (g->dnn) cudnnDestroy(g->dnn);
    if (g->compute) cudaStreamDestroy(g->compute);
    if (g->copy) cudaStreamDestroy(g->copy);
    free(g);
}

static size_t optimizer_slots(const OptimizerConfig *oc)
{
    switch (oc->kind) {
    case OPT_SGD: return oc->momentum != 0.0f ? 1 : 0;
    case OPT_RMSPROP: return oc->momentum != 0.0f ? 2 : 1;
    case OPT_ADAM: return 2;
    case OPT_ADAM_AMSGRAD: return 3;
    }
    return 0;
}

static int create(GpuModel *g, char *err, size_t errlen)
{
    const Model *m = g->m;
    const size_t B = (size_t)g->max_batch;
    size_t dmax = m->input_size, rmax = 0;
    CU(cudaSetDevice(g->dev));
    CU(cudaStreamCreateWithFlags(&g->compute, cudaStreamNonBlocking));
    CU(cudaStreamCreateWithFlags(&g->copy, cudaStreamNonBlocking));
    BLAS(cublasCreate(&g->blas));
    BLAS(cublasSetStream(g->blas, g->compute));
    BLAS(cublasSetMathMode(g->blas, CUBLAS_DEFAULT_MATH));
    CU(cudaMalloc(&g->blas_ws, BLAS_WS));
    BLAS(cublasSetWorkspace(g->blas, g->blas_ws, BLAS_WS));
    DNN(cudnnCreate(&g->dnn));
    DNN(cudnnSetStream(g->dnn, g->compute));
    CU(cudaMalloc(&g->params, g->np * sizeof(float)));
    CU(cudaMalloc(&g->grads, (g->np + MODEL_STATS_FLOATS) * sizeof(float)));
    CU(cudaMemset(g->grads, 0, (g->np + MODEL_STATS_FLOATS) * sizeof(float)));
    CU(cudaMalloc(&g->state, (g->state_floats ? g->state_floats : 1) * sizeof(float)));
    CU(cudaMemset(g->state, 0, (g->state_floats ? g->state_floats : 1) * sizeof(float)));
    g->acts = (float **)calloc((size_t)m->num_layers, sizeof *g->acts);
    g->masks = (float **)calloc((size_t)m->num_layers, sizeof *g->masks);
    g->argmax = (int32_t **)calloc((size_t)m->num_layers, sizeof *g->argmax);
    g->plans = (ConvPlan *)calloc((size_t)m->num_layers, sizeof *g->plans);
    g->ready = (cudaEvent_t *)calloc((size_t)m->num_layers, sizeof *g->ready);
    if (!g->acts || !g->masks || !g->argmax || !g->plans || !g->ready)
        return fail(err, errlen, "out of host memory for %d layers", m->num_layers);
    for (int i = 0; i < m->num_layers; i++) {
        const Layer *l = &m->layers[i];
        if (l->type != LAYER_RESHAPE && l->type != LAYER_FLATTEN)
            CU(cudaMalloc(&g->acts[i], B * l->out_size * sizeof(float)));
        if (l->w_count) CU(cudaEventCreateWithFlags(&g->ready[i], cudaEventDisableTiming));
        if (l->type == LAYER_DROPOUT) CU(cudaMalloc(&g->masks[i], B * l->out_size * sizeof(float)));
        if (l->type == LAYER_MAXPOOL)
            CU(cudaMalloc(&g->argmax[i], B * l->out_size * sizeof(int32_t)));
        if (l->type == LAYER_CONV2D) {
            const ConvGeom *c = &l->conv;
            ConvPlan *p = &g->plans[i];
            DNN(cudnnCreateTensorDescriptor(&p->x));
            DNN(cudnnCreateTensorDescriptor(&p->y));
            DNN(cudnnCreateFilterDescriptor(&p->w));
            DNN(cudnnCreateConvolutionDescriptor(&p->conv));
            int ph = (c->oh - 1) * c->sh + c->kh - c->h, pw = (c->ow - 1) * c->sw + c->kw - c->w;
            p->ph = l->same && ph > 0 ? ph : 0;
            p->pw = l->same && pw > 0 ? pw : 0;
            p->explicit_pad = p->ph != 2 * c->pad_top || p->pw != 2 * c->pad_left;
            size_t wn = (size_t)c->kh * c->kw * c->c * c->f;
            CU(cudaMalloc(&p->wt, wn * sizeof(float)));
            CU(cudaMalloc(&p->dwt, wn * sizeof(float)));
            if (p->explicit_pad) {
                size_t xn = B * (c->h + p->ph) * (c->w + p->pw) * c->c;
                CU(cudaMalloc(&p->xpad, xn * sizeof(float)));
                CU(cudaMalloc(&p->dxpad, xn * sizeof(float)));
            }
        }
        dmax = l->out_size > dmax ? l->out_size : dmax;
        const size_t rows = l->type == LAYER_CONV2D  ? (size_t)l->conv.oh * l->conv.ow
                            : l->type == LAYER_DENSE ? (size_t)l->dense_rows
                                                     : 0;
        rmax = rows > rmax ? rows : rmax;
    }
    if (rmax) {
        std::vector<float> ones(B * rmax, 1.0f);
        CU(cudaMalloc(&g->ones, ones.size() * sizeof(float)));
        CU(cudaMemcpyAsync(g->ones, ones.data(), ones.size() * sizeof(float),
                           cudaMemcpyHostToDevice, g->compute));
        CU(cudaStreamSynchronize(g->compute));
    }
    for (int k = 0; k < 2; k++) {
        CU(cudaMalloc(&g->dbuf[k], B * dmax * sizeof(float)));
        CU(cudaMalloc(&g->x[k], B * m->input_size * sizeof(float)));
        CU(cudaMalloc(&g->y[k], B * sizeof(int32_t)));
        CU(cudaMallocHost(&g->xh[k], B * m->input_size * sizeof(float)));
        CU(cudaMallocHost(&g->yh[k], B * sizeof(int32_t)));
        CU(cudaEventCreateWithFlags(&g->copied[k], cudaEventDisableTiming));
        CU(cudaEventCreateWithFlags(&g->consumed[k], cudaEventDisableTiming));
    }
    CU(cudaMalloc(&g->acc, ACC_N * sizeof(double)));
    CU(cudaMalloc(&g->row_loss, B * sizeof(double)));
    CU(cudaMalloc(&g->row_correct, B * sizeof(int)));
    CU(cudaMallocHost(&g->stats_h, MODEL_STATS_FLOATS * sizeof(float)));
    CU(cudaMallocHost(&g->acc_h, ACC_N * sizeof(double)));
    CU(cudaMallocHost(&g->args_h, sizeof *g->args_h));
    CU(cudaMalloc(&g->args_d, sizeof *g->args_d));
    CU(cudaEventCreateWithFlags(&g->args_read, cudaEventDisableTiming));
    CU(cudaEventCreateWithFlags(&g->step_done, cudaEventDisableTiming));
    CU(cudaEventCreateWithFlags(&g->stats_copied, cudaEventDisableTiming));
    CU(cudaMemset(g->args_d, 0, sizeof *g->args_d));
    // the memsets above ran on the legacy stream, which the compute stream does not wait for
    CU(cudaDeviceSynchronize());
    return 0;
}

extern "C" int gpu_model_create(GpuModel **out, const Model *m, const OptimizerConfig *oc, int dev,
                                int max_batch, char *err, size_t errlen)
{
    if (max_batch < 1) {
        snprintf(err, errlen, "gpu: max_batch %d: expected at least 1", max_batch);
        return -EINVAL;
    }
    GpuModel *g = (GpuModel *)calloc(1, sizeof *g);
    if (!g) return fail(err, errlen, "gpu: out of host memory");
    g->m = m;
    g->dev = dev;
    g->max_batch = max_batch;
    g->oc = *oc;
    g->np = m->num_params;
    g->state_floats = optimizer_slots(oc) * m->num_params;
    g->graphs_on = 1;
    int rc = create(g, err, errlen);
    if (rc) {
        gpu_model_free(g);
        return rc;
    }
    *out = g;
    return 0;
}

extern "C" int gpu_model_upload(GpuModel *g, const float *params, const float *opt_state, char *err,
                                size_t errlen)
{
    CU(cudaMemcpyAsync(g->params, params, g->np * sizeof(float), cudaMemcpyHostToDevice,
                       g->compute));
    if (g->state_floats && opt_state)
        CU(cudaMemcpyAsync(g->state, opt_state, g->state_floats * sizeof(float),
                           cudaMemcpyHostToDevice, g->compute));
    CU(cudaStreamSynchronize(g->compute));
    return 0;
}

extern "C" int gpu_model_download(GpuModel *g, float *params, float *opt_state, char *err,
                                  size_t errlen)
{
    CU(cudaMemcpyAsync(params, g->params, g->np * sizeof(float), cudaMemcpyDeviceToHost,
                       g->compute));
    if (g->state_floats && opt_state)
        CU(cudaMemcpyAsync(opt_state, g->state, g->state_floats * sizeof(float),
                           cudaMemcpyDeviceToHost, g->compute));
    CU(cudaStreamSynchronize(g->compute));
    return 0;
}

extern "C" int gpu_model_load_batch(GpuModel *g, const float *x, const int32_t *y, int b, char *err,
                                    size_t errlen)
{
    if (b < 1 || b > g->max_batch) {
        snprintf(err, errlen, "gpu: batch of %d: expected 1..%d", b, g->max_batch);
        return -EINVAL;
    }
    const int k = 1 - g->slot;
    const size_t xbytes = (size_t)b * g->m->input_size * sizeof(float);
    // The pinned buffer is free once the step that read slot k (two loads ago) is done.
    CU(cudaEventSynchronize(g->consumed[k]));
    memcpy(g->xh[k], x, xbytes);
    memcpy(g->yh[k], y, (size_t)b * sizeof(int32_t));
    CU(cudaMemcpyAsync(g->x[k], g->xh[k], xbytes, cudaMemcpyHostToDevice, g->copy));
    CU(cudaMemcpyAsync(g->y[k], g->yh[k], (size_t)b * sizeof(int32_t), cudaMemcpyHostToDevice,
                       g->copy));
    CU(cudaEventRecord(g->copied[k], g->copy));
    g->slot = k;
    g->b = b;
    return 0;
}

// The training step after the batch and StepArgs are on their way: forward, loss,
// statistics, backward, all on the compute stream (recorded into a graph when the stream
// is capturing).
static int record_step(GpuModel *g, int global_batch, int num_replicas, char *err, size_t errlen)
{
    TRY(forward(g, 1, err, errlen));
    TRY(loss(g, g->dbuf[0], 1.0f / (float)global_batch, err, errlen));
    const Model *m = g->m;
    for (int i = 0; i < m->num_layers; i++) {
        const Layer *l = &m->layers[i];
        if (l->l2 == 0.0f) continue;
        LAUNCH(k_l2_sum, 1, THREADS, g->compute, g->acc + ACC_L2, g->params + l->w_off, l->w_count,
               l->l2);
        LAUNCHED();
    }
    LAUNCH(k_stats, 1, 1, g->compute, g->grads + g->np, g->acc, global_batch, num_replicas, g->b,
           g->args_d);
    LAUNCHED();
    return backward(g, num_replicas, err, errlen);
}

// Captures record_step into slot s's graph. On failure (a call cuDNN or cuBLAS cannot
// record, say) graphs are turned off for this model with a log line and 1 is returned:
// the caller runs the step without one. Negative errno only for errors outside capture.
static int capture_step(GpuModel *g, GpuModel::StepGraph *s, int global_batch, int num_replicas,
                        char *err, size_t errlen)
{
    char cerr[512] = "";
    cudaGraph_t graph = NULL;
    CU(cudaStreamBeginCapture(g->compute, cudaStreamCaptureModeThreadLocal));
    int rc = record_step(g, global_batch, num_replicas, cerr, sizeof cerr);
    cudaError_t e = cudaStreamEndCapture(g->compute, &graph);
    if (!rc && e == cudaSuccess) e = cudaGraphInstantiate(&s->exec, graph, 0);
    if (graph) cudaGraphDestroy(graph);
    if (!rc && e == cudaSuccess) return 0;
    cudaGetLastError(); // a failed capture's error is not sticky: clear it
    s->exec = NULL;
    g->graphs_on = 0;
    util_log("CUDA graphs off for this run: capturing the training step failed (%s); each "
             "step launches its kernels one by one",
             rc ? cerr : cudaGetErrorString(e));
    return 1;
}

// The step through slot g->slot's graph: the first step at a new key runs without one
// (it sets up cuDNN plans and workspaces and loads the kernels, none of which may happen
// while capturing), the second captures it, later ones replay it.
static int graph_step(GpuModel *g, int global_batch, int num_replicas, char *err, size_t errlen)
{
    const Model *m = g->m;
    for (int i = 0; i < m->num_layers; i++) // the plans a capture records (may move ws)
        if (m->layers[i].type == LAYER_CONV2D) TRY(conv_plan(g, i, g->b, err, errlen));
    GpuModel::StepGraph *s = &g->graphs[g->slot];
    if (s->b != g->b || s->global_batch != global_batch || s->replicas != num_replicas ||
        s->ws_gen != g->ws_gen) {
        if (s->exec) CU(cudaGraphExecDestroy(s->exec));
        s->exec = NULL;
        s->b = g->b, s->global_batch = global_batch, s->replicas = num_replicas;
        s->ws_gen = g->ws_gen;
        s->warm = 0;
    }
    if (!s->exec && !s->warm) {
        s->warm = 1;
        return record_step(g, global_batch, num_replicas, err, errlen);
    }
    if (!s->exec) {
        int rc = capture_step(g, s, global_batch, num_replicas, err, errlen);
        if (rc < 0) return rc;
        if (rc > 0) return record_step(g, global_batch, num_replicas, err, errlen);
    }
    CU(cudaGraphLaunch(s->exec, g->compute));
    g->graph_launches++;
    return 0;
}

extern "C" int gpu_model_step(GpuModel *g, int global_batch, int num_replicas,
                              uint64_t dropout_seed, float stop_flag, char *err, size_t errlen)
{
    if (g->b < 1) return fail(err, errlen, "gpu: gpu_model_step before gpu_model_load_batch");
    // args_h is free once the last step's copy of it has run (as a rule long before)
    CU(cudaEventSynchronize(g->args_read));
    g->args_h->dropout_seed = dropout_seed;
    g->args_h->stop_flag = stop_flag;
    CU(cudaMemcpyAsync(g->args_d, g->args_h, sizeof *g->args_d, cudaMemcpyHostToDevice,
                       g->compute));
    CU(cudaEventRecord(g->args_read, g->compute));
    CU(cudaStreamWaitEvent(g->compute, g->copied[g->slot], 0));
    // with a gradient-ready hook the step calls out to the collective as it goes: eager
    if (g->graphs_on && !g->on_ready) TRY(graph_step(g, global_batch, num_replicas, err, errlen));
    else TRY(record_step(g, global_batch, num_replicas, err, errlen));
    CU(cudaEventRecord(g->consumed[g->slot], g->compute));
    CU(cudaEventRecord(g->step_done, g->compute));
    g->ran_slot = g->slot;
    g->ran_b = g->b;
    return 0;
}

extern "C" void *gpu_model_step_event(GpuModel *g)
{
    return g->step_done;
}

extern "C" int gpu_model_wait_event(GpuModel *g, void *event, char *err, size_t errlen)
{
    CU(cudaStreamWaitEvent(g->compute, (cudaEvent_t)event, 0));
    return 0;
}

extern "C" int gpu_model_finish_step(GpuModel *g, Optimizer *o, void **copied, char *err,
                                     size_t errlen)
{
    CU(cudaMemcpyAsync(g->stats_h, g->grads + g->np, MODEL_STATS_FLOATS * sizeof(float),
                       cudaMemcpyDeviceToHost, g->compute));
    CU(cudaEventRecord(g->stats_copied, g->compute));
    TRY(gpu_model_optim_step(g, o, err, errlen));
    *copied = g->stats_copied;
    return 0;
}

extern "C" int gpu_model_sync_event(void *event, char *err, size_t errlen)
{
    CU(cudaEventSynchronize((cudaEvent_t)event));
    return 0;
}

extern "C" void gpu_model_copied_stats(const GpuModel *g, float *out)
{
    memcpy(out, g->stats_h, MODEL_STATS_FLOATS * sizeof(float));
}

extern "C" void gpu_model_use_graphs(GpuModel *g, int on)
{
    g->graphs_on = on;
}

extern "C" long gpu_model_graph_launches(const GpuModel *g)
{
    return g->graph_launches;
}

extern "C" void gpu_model_on_grad_ready(GpuModel *g, GpuGradReadyFn fn, void *ctx)
{
    g->on_ready = fn;
    g->ready_ctx = ctx;
}

extern "C" float *gpu_model_grads(GpuModel *g)
{
    return g->grads;
}

extern "C" int gpu_model_grads_to_host(GpuModel *g, float *host, size_t n, char *err, size_t errlen)
{
    if (n > g->np + MODEL_STATS_FLOATS) return fail(err, errlen, "gpu: %zu floats of gradients", n);
    CU(cudaMemcpyAsync(host, g->grads, n * sizeof(float), cudaMemcpyDeviceToHost, g->compute));
    CU(cudaStreamSynchronize(g->compute));
    return 0;
}

extern "C" int gpu_model_grads_from_host(GpuModel *g, const float *host, size_t n, char *err,
                                         size_t errlen)
{
    if (n > g->np + MODEL_STATS_FLOATS) return fail(err, errlen, "gpu: %zu floats of gradients", n);
    CU(cudaMemcpyAsync(g->grads, host, n * sizeof(float), cudaMemcpyHostToDevice, g->compute));
    CU(cudaStreamSynchronize(g->compute));
    return 0;
}

extern "C" int gpu_model_read_activation(GpuModel *g, int layer, float *host, char *err,
                                         size_t errlen)
{
    if (layer < 0 || layer >= g->m->num_layers || g->ran_b < 1)
        return fail(err, errlen, "gpu: no activation of layer %d", layer);
    // the batch that ran: another one may have been loaded since
    const float *src = layer_out(g, g->x[g->ran_slot], layer);
    size_t n = (size_t)g->ran_b * g->m->layers[layer].out_size;
    CU(cudaMemcpyAsync(host, src, n * sizeof(float), cudaMemcpyDeviceToHost, g->compute));
    CU(cudaStreamSynchronize(g->compute));
    return 0;
}

extern "C" int gpu_model_optim_step(GpuModel *g, Optimizer *o, char *err, size_t errlen)
{
    const OptimizerConfig *c = &o->cfg;
    const size_t n = g->np;
    if (o->n != n || o->state_floats != g->state_floats)
        return fail(err, errlen,
                    "gpu: optimizer for %zu parameters and %zu state floats, the "
                    "device has %zu and %zu",
                    o->n, o->state_floats, n, g->state_floats);
    float *w = g->params, *s = g->state;
    const float *gr = g->grads;
    switch (c->kind) {
    case OPT_SGD: EW(k_sgd, n, w, gr, s, n, c->lr, c->momentum, c->nesterov); break;
    case OPT_RMSPROP:
        EW(k_rmsprop, n, w, gr, s, s + n, n, c->lr, c->rho, c->epsilon, c->momentum);
        break;
    case OPT_ADAM:
    case OPT_ADAM_AMSGRAD: {
        const float alpha = optim_adam_alpha(c, o->iterations);
        EW(k_adam, n, w, gr, s, s + n, s + 2 * n, n, alpha, c->beta1, c->beta2, c->epsilon,
           c->kind == OPT_ADAM_AMSGRAD);
        break;
    }
    }
    LAUNCHED();
    o->iterations++;
    return 0;
}

extern "C" int gpu_model_evaluate(GpuModel *g, StepStats *st, char *err, size_t errlen)
{
    if (g->b < 1) return fail(err, errlen, "gpu: gpu_model_evaluate before gpu_model_load_batch");
    CU(cudaStreamWaitEvent(g->compute, g->copied[g->slot], 0));
    g->ran_slot = g->slot;
    g->ran_b = g->b;
    TRY(forward(g, 0, err, errlen));
    TRY(loss(g, NULL, 1.0f, err, errlen));
    CU(cudaMemcpyAsync(g->acc_h, g->acc, ACC_N * sizeof(double), cudaMemcpyDeviceToHost,
                       g->compute));
    CU(cudaEventRecord(g->consumed[g->slot], g->compute));
    CU(cudaStreamSynchronize(g->compute));
    st->loss = g->acc_h[ACC_LOSS];
    st->correct = g->acc_h[ACC_CORRECT];
    st->count = g->b;
    return 0;
}
