// device.cu — the GpuModel of gpu.h: the trainer's layers, losses and optimizers on a
// CUDA device. Each kernel names the CPU function whose math it follows.
#include "gpu/gpu.h"

#include <cerrno>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

// util.h's log line (util.h itself is C11: _Noreturn)
extern "C" void util_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

// ------------------------------------------------------------------------------------
// errors

static int fail(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return -EIO;
}

#define CU(call)                                                                           \
    do {                                                                                   \
        cudaError_t e_ = (call);                                                           \
        if (e_ != cudaSuccess)                                                             \
            return fail(err, errlen, "%s: %s (%s:%d)", #call, cudaGetErrorString(e_),      \
                        __FILE__, __LINE__);                                               \
    } while (0)
#define BLAS(call)                                                                         \
    do {                                                                                   \
        cublasStatus_t s_ = (call);                                                        \
        if (s_ != CUBLAS_STATUS_SUCCESS)                                                   \
            return fail(err, errlen, "%s: %s", #call, cublasGetStatusString(s_));          \
    } while (0)
#define DNN(call)                                                                          \
    do {                                                                                   \
        cudnnStatus_t s_ = (call);                                                         \
        if (s_ != CUDNN_STATUS_SUCCESS)                                                    \
            return fail(err, errlen, "%s: %s", #call, cudnnGetErrorString(s_));            \
    } while (0)
#define TRY(call)                                                                          \
    do {                                                                                   \
        int r_ = (call);                                                                   \
        if (r_) return r_;                                                                 \
    } while (0)
// After a kernel launch: a bad configuration shows up here, not at the next sync.
#define LAUNCHED() CU(cudaGetLastError())

static const int THREADS = 256;
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

// ------------------------------------------------------------------------------------
// kernels (grid-stride loops over flat arrays)

#define FOR_EACH(i, n) \
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (n); i += (size_t)gridDim.x * blockDim.x)

// bias_rows + activation_forward (relu): out (rows, cols) += bias, then relu.
__global__ void k_bias_act(float *out, const float *bias, size_t rows, int cols, int relu)
{
    FOR_EACH(i, rows * cols) {
        float v = out[i] + bias[i % cols];
        out[i] = relu ? (v > 0.0f ? v : 0.0f) : v;
    }
}

__global__ void k_relu(float *x, size_t n)
{
    FOR_EACH(i, n) x[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

// activation_backward (relu): d <- y > 0 ? d : 0.
__global__ void k_relu_backward(float *d, const float *y, size_t n)
{
    FOR_EACH(i, n) d[i] = y[i] > 0.0f ? d[i] : 0.0f;
}

// activation_forward (softmax), one thread per row.
__global__ void k_softmax_rows(float *x, size_t rows, int cols)
{
    FOR_EACH(r, rows) {
        float *row = x + r * cols, mx = row[0], sum = 0.0f;
        for (int j = 1; j < cols; j++) mx = row[j] > mx ? row[j] : mx;
        for (int j = 0; j < cols; j++) sum += row[j] = expf(row[j] - mx);
        for (int j = 0; j < cols; j++) row[j] /= sum;
    }
}

// activation_backward (softmax): d_i <- y_i (d_i - sum_j d_j y_j), one thread per row.
__global__ void k_softmax_backward_rows(float *d, const float *y, size_t rows, int cols)
{
    FOR_EACH(r, rows) {
        float *dr = d + r * cols;
        const float *yr = y + r * cols;
        float dot = 0.0f;
        for (int j = 0; j < cols; j++) dot += dr[j] * yr[j];
        for (int j = 0; j < cols; j++) dr[j] = yr[j] * (dr[j] - dot);
    }
}

// bias_grad: dbias[j] = sum_r dout[r, j]; one block per column.
__global__ void k_bias_grad(float *dbias, const float *dout, size_t rows, int cols)
{
    __shared__ float part[THREADS];
    const int j = blockIdx.x;
    float s = 0.0f;
    for (size_t r = threadIdx.x; r < rows; r += blockDim.x) s += dout[r * cols + j];
    part[threadIdx.x] = s;
    __syncthreads();
    for (int w = blockDim.x / 2; w > 0; w /= 2) {
        if ((int)threadIdx.x < w) part[threadIdx.x] += part[threadIdx.x + w];
        __syncthreads();
    }
    if (threadIdx.x == 0) dbias[j] = part[0];
}

// maxpool_forward: the first maximum of each window (its cells inside the input: padded
// cells never win) wins, argmax is the flat input index.
__global__ void k_maxpool(float *out, int32_t *argmax, const float *inp, PoolGeom g, int b)
{
    const int h = g.h, w = g.w, c = g.c, oh = g.oh, ow = g.ow;
    FOR_EACH(o, (size_t)b * oh * ow * c) {
        int ch = (int)(o % c), ox = (int)(o / c % ow), oy = (int)(o / c / ow % oh),
            n = (int)(o / c / ow / oh);
        int y0 = oy * g.sh - g.pad_top, y1 = y0 + g.ph, x0 = ox * g.sw - g.pad_left, x1 = x0 + g.pw;
        y0 = y0 < 0 ? 0 : y0, y1 = y1 > h ? h : y1, x0 = x0 < 0 ? 0 : x0, x1 = x1 > w ? w : x1;
        int best = -1;
        float bv = -INFINITY;
        for (int y = y0; y < y1; y++)
            for (int x = x0; x < x1; x++) {
                int idx = ((n * h + y) * w + x) * c + ch;
                if (best < 0 || inp[idx] > bv) bv = inp[idx], best = idx;
            }
        out[o] = bv;
        argmax[o] = best;
    }
}

// maxpool_backward: dinput (zeroed by the caller) += dout at each maximum.
__global__ void k_maxpool_backward(float *dinput, const float *dout, const int32_t *argmax,
                                   size_t n)
{
    FOR_EACH(o, n) atomicAdd(&dinput[argmax[o]], dout[o]);
}

// util_rand_u64 after `draw + 1` steps from state `seed`: splitmix64's state only adds
// its constant, so draw j of a sequence is computable on its own.
__device__ static float rand_float_at(uint64_t seed, uint64_t draw)
{
    uint64_t z = seed + (draw + 1) * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (float)(z >> 40) * (1.0f / 16777216.0f);
}

// What changes from one training step to the next and is not a buffer: the kernels read
// it from device memory, so a captured step (a CUDA graph) replays with this step's
// values. gpu_model_step copies it to the device before the step.
struct StepArgs {
    uint64_t dropout_seed;
    float stop_flag;
};

// dropout_forward with the CPU's masks: out = in * mask, the mask drawn as draws
// first..first+n-1 of the step's sequence.
__global__ void k_dropout(float *out, float *mask, const float *in, size_t n, float rate,
                          const StepArgs *args, uint64_t first)
{
    const float scale = 1.0f / (1.0f - rate);
    const uint64_t seed = args->dropout_seed;
    FOR_EACH(i, n) {
        mask[i] = rand_float_at(seed, first + i) >= rate ? scale : 0.0f;
        out[i] = in[i] * mask[i];
    }
}

__global__ void k_mul(float *d, const float *mask, size_t n)
{
    FOR_EACH(i, n) d[i] *= mask[i];
}

// (KH,KW,C,F) <-> (F,KH,KW,C): Keras's HWIO kernel and cuDNN's KRSC (NHWC filter).
__global__ void k_hwio_to_krsc(float *dst, const float *src, int rsc, int f)
{
    FOR_EACH(i, (size_t)rsc * f) {
        int fi = (int)(i % f), p = (int)(i / f);
        dst[(size_t)fi * rsc + p] = src[i];
    }
}
__global__ void k_krsc_to_hwio(float *dst, const float *src, int rsc, int f)
{
    FOR_EACH(i, (size_t)rsc * f) {
        int fi = (int)(i % f), p = (int)(i / f);
        dst[i] = src[(size_t)fi * rsc + p];
    }
}

// Zero padding of a NHWC batch into (B, H+ph, W+pw, C) at (top, left), for TensorFlow's
// SAME padding with an odd total, which cuDNN's symmetric padding cannot express.
__global__ void k_pad(float *dst, const float *src, int b, int h, int w, int c, int ph, int pw,
                      int top, int left)
{
    const int H = h + ph, W = w + pw;
    FOR_EACH(i, (size_t)b * H * W * c) {
        int ch = (int)(i % c), x = (int)(i / c % W), y = (int)(i / c / W % H), n = (int)(i / c / W / H);
        int sy = y - top, sx = x - left;
        dst[i] = sy >= 0 && sy < h && sx >= 0 && sx < w
                     ? src[(((size_t)n * h + sy) * w + sx) * c + ch] : 0.0f;
    }
}
// Its adjoint: the gradient of the unpadded input.
__global__ void k_crop(float *dst, const float *src, int b, int h, int w, int c, int ph, int pw,
                       int top, int left)
{
    const int H = h + ph, W = w + pw;
    FOR_EACH(i, (size_t)b * h * w * c) {
        int ch = (int)(i % c), x = (int)(i / c % w), y = (int)(i / c / w % h), n = (int)(i / c / w / h);
        dst[i] = src[(((size_t)n * H + y + top) * W + x + left) * c + ch];
    }
}

// loss_sce_logits, one thread per row: loss (double) and correct per row, dlogits.
__global__ void k_sce_logits(float *dlogits, double *loss, int *correct, const float *logits,
                             const uint8_t *labels, int b, int c, float scale)
{
    FOR_EACH(i, (size_t)b) {
        const float *z = logits + i * c;
        int y = labels[i], am = 0;
        for (int j = 1; j < c; j++)
            if (z[j] > z[am]) am = j;
        float mx = z[am];
        double sum = 0.0;
        for (int j = 0; j < c; j++) sum += exp((double)z[j] - mx);
        double lse = mx + log(sum);
        loss[i] = lse - z[y];
        correct[i] = am == y;
        if (dlogits) {
            float *d = dlogits + i * c;
            for (int j = 0; j < c; j++)
                d[j] = scale * ((float)exp((double)z[j] - lse) - (j == y ? 1.0f : 0.0f));
        }
    }
}

// loss_sce_probs, one thread per row.
__global__ void k_sce_probs(float *dprobs, double *loss, int *correct, const float *probs,
                            const uint8_t *labels, int b, int c, float scale)
{
    const float eps = 1e-7f;
    FOR_EACH(i, (size_t)b) {
        const float *p = probs + i * c;
        int y = labels[i], am = 0;
        double s = 0.0;
        for (int j = 0; j < c; j++) {
            s += fmin(fmax((double)p[j], (double)eps), 1.0 - (double)eps);
            if (p[j] > p[am]) am = j;
        }
        double py = fmin(fmax((double)p[y], (double)eps), 1.0 - (double)eps);
        loss[i] = -log(py / s);
        correct[i] = am == y;
        if (dprobs) {
            float *d = dprobs + i * c;
            for (int j = 0; j < c; j++) {
                int clipped = p[j] < eps || p[j] > 1.0f - eps;
                double gr = 1.0 / s - (j == y ? 1.0 / py : 0.0);
                d[j] = clipped ? 0.0f : (float)(scale * gr);
            }
        }
    }
}

// One block: acc[0] += sum loss, acc[1] += sum correct.
__global__ void k_sum_loss(double *acc, const double *loss, const int *correct, int b)
{
    __shared__ double pl[THREADS], pc[THREADS];
    double l = 0.0, c = 0.0;
    for (int i = threadIdx.x; i < b; i += blockDim.x) l += loss[i], c += correct[i];
    pl[threadIdx.x] = l;
    pc[threadIdx.x] = c;
    __syncthreads();
    for (int w = blockDim.x / 2; w > 0; w /= 2) {
        if ((int)threadIdx.x < w) pl[threadIdx.x] += pl[threadIdx.x + w], pc[threadIdx.x] += pc[threadIdx.x + w];
        __syncthreads();
    }
    if (threadIdx.x == 0) acc[0] += pl[0], acc[1] += pc[0];
}

// One block: *acc += l2 * sum w^2 (model_regularization, one layer).
__global__ void k_l2_sum(double *acc, const float *w, size_t n, float l2)
{
    __shared__ double part[THREADS];
    double s = 0.0;
    for (size_t i = threadIdx.x; i < n; i += blockDim.x) s += (double)w[i] * w[i];
    part[threadIdx.x] = s;
    __syncthreads();
    for (int k = blockDim.x / 2; k > 0; k /= 2) {
        if ((int)threadIdx.x < k) part[threadIdx.x] += part[threadIdx.x + k];
        __syncthreads();
    }
    if (threadIdx.x == 0) *acc += (double)l2 * part[0];
}

// The step statistics after the gradients, as train.c lays them out.
__global__ void k_stats(float *stats, const double *acc, int global_batch, int replicas, int b,
                        const StepArgs *args)
{
    stats[0] = (float)(acc[0] / global_batch + acc[2] / replicas);
    stats[1] = (float)acc[1];
    stats[2] = (float)b;
    stats[3] = args->stop_flag;
}

// dw += k * w (the L2 gradient).
__global__ void k_axpy(float *y, const float *x, float a, size_t n)
{
    FOR_EACH(i, n) y[i] += a * x[i];
}

// optim.c, one kernel per rule.
__global__ void k_sgd(float *w, const float *g, float *m, size_t n, float lr, float mom,
                      int nesterov)
{
    FOR_EACH(i, n) {
        if (mom == 0.0f) {
            w[i] += -lr * g[i];
        } else {
            m[i] = mom * m[i] - lr * g[i];
            w[i] += nesterov ? mom * m[i] - lr * g[i] : m[i];
        }
    }
}
__global__ void k_rmsprop(float *w, const float *g, float *v, float *mo, size_t n, float lr,
                          float rho, float eps, float mom)
{
    FOR_EACH(i, n) {
        v[i] = rho * v[i] + (1.0f - rho) * g[i] * g[i];
        float inc = lr * g[i] / sqrtf(v[i] + eps);
        if (mom != 0.0f) {
            mo[i] = mom * mo[i] + inc;
            w[i] -= mo[i];
        } else {
            w[i] -= inc;
        }
    }
}
__global__ void k_adam(float *w, const float *g, float *m, float *v, float *vh, size_t n,
                       float alpha, float b1, float b2, float eps, int amsgrad)
{
    FOR_EACH(i, n) {
        m[i] += (g[i] - m[i]) * (1.0f - b1);
        v[i] += (g[i] * g[i] - v[i]) * (1.0f - b2);
        float den = v[i];
        if (amsgrad) den = vh[i] = vh[i] > v[i] ? vh[i] : v[i];
        w[i] -= alpha * m[i] / (sqrtf(den) + eps);
    }
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
    uint8_t *y[2], *yh[2];
    cudaEvent_t copied[2], consumed[2];
    int slot;                // the slot of the loaded batch
    double *acc;             // loss sum, correct, regularization
    double *row_loss;
    int *row_correct;
    float *stats_h;          // pinned, MODEL_STATS_FLOATS
    double *acc_h;           // pinned, 3
    cudaEvent_t *ready;      // per layer: its gradient slice is final
    GpuGradReadyFn on_ready;
    void *ready_ctx;
    StepArgs *args_h, *args_d; // pinned and device copies of this step's StepArgs
    // The training step as CUDA graphs, one per batch slot (the step reads the slot's
    // buffers): a graph replays while the batch size, global batch, replica count and
    // workspace are those it was captured with. Used when no gradient-ready hook is set.
    struct StepGraph {
        cudaGraphExec_t exec;
        int b, global_batch, replicas;
        unsigned ws_gen;
        int warm;            // the step ran once without a graph at this key
    } graphs[2];
    int graphs_on;           // 0: KT_CUDA_GRAPHS=0, or a capture failed
    unsigned ws_gen;         // bumped when the workspace moves (graphs hold its address)
    long graph_launches;     // steps that ran as a graph replay
    void *blas_ws;           // cuBLAS's workspace (fixed, so cuBLAS allocates nothing in a capture)
};


// Workspace cuDNN may use per convolution call; algorithms that want more are skipped.
static const size_t WS_LIMIT = (size_t)512 << 20;
// cuBLAS's workspace, set by us so that a captured step allocates nothing (cuBLAS
// recommends 32 MiB on Hopper, 4 MiB before).
static const size_t BLAS_WS = (size_t)32 << 20;

// The launch geometry of an element-wise kernel on the compute stream.
#define GRID(n) blocks_for(n), THREADS, 0, g->compute

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
// math, else the first usable one; -1 when none.
template <typename Perf> static int pick_algo(const Perf *p, int n)
{
    int any = -1;
    for (int i = 0; i < n; i++) {
        if (p[i].status != CUDNN_STATUS_SUCCESS || p[i].memory > WS_LIMIT) continue;
        if (p[i].mathType == CUDNN_FMA_MATH) return i;
        if (any < 0) any = i;
    }
    return any;
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
    DNN(cudnnSetTensor4dDescriptor(p->y, CUDNN_TENSOR_NHWC, CUDNN_DATA_FLOAT, b, c->f, c->oh, c->ow));
    DNN(cudnnSetFilter4dDescriptor(p->w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NHWC, c->f, c->c, c->kh, c->kw));
    DNN(cudnnSetConvolution2dDescriptor(p->conv, padh, padw, c->sh, c->sw, 1, 1,
                                        CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    DNN(cudnnSetConvolutionMathType(p->conv, CUDNN_FMA_MATH));
    int on, oc, oh, ow;
    DNN(cudnnGetConvolution2dForwardOutputDim(p->conv, p->x, p->w, &on, &oc, &oh, &ow));
    if (on != b || oc != c->f || oh != c->oh || ow != c->ow)
        return fail(err, errlen, "layers[%d]: cuDNN computes a %dx%dx%dx%d output, the model "
                    "%dx%dx%dx%d", li, on, oh, ow, oc, b, c->oh, c->ow, c->f);

    enum { MAXALGO = 8 };
    int got = 0, i;
    size_t need = 0;
    cudnnConvolutionFwdAlgoPerf_t fp[MAXALGO];
    DNN(cudnnGetConvolutionForwardAlgorithm_v7(g->dnn, p->x, p->w, p->conv, p->y, MAXALGO, &got, fp));
    i = pick_algo(fp, got);
    if (i < 0) return fail(err, errlen, "layers[%d]: no cuDNN forward algorithm", li);
    p->fwd = fp[i].algo;
    need = fp[i].memory;
    cudnnConvolutionBwdDataAlgoPerf_t dp[MAXALGO];
    DNN(cudnnGetConvolutionBackwardDataAlgorithm_v7(g->dnn, p->w, p->y, p->conv, p->x, MAXALGO, &got, dp));
    i = pick_algo(dp, got);
    if (i < 0) return fail(err, errlen, "layers[%d]: no cuDNN backward-data algorithm", li);
    p->bwd_data = dp[i].algo;
    need = dp[i].memory > need ? dp[i].memory : need;
    cudnnConvolutionBwdFilterAlgoPerf_t wp[MAXALGO];
    DNN(cudnnGetConvolutionBackwardFilterAlgorithm_v7(g->dnn, p->x, p->y, p->conv, p->w, MAXALGO, &got, wp));
    i = pick_algo(wp, got);
    if (i < 0) return fail(err, errlen, "layers[%d]: no cuDNN backward-filter algorithm", li);
    p->bwd_filter = wp[i].algo;
    need = wp[i].memory > need ? wp[i].memory : need;
    TRY(ensure_workspace(g, need, err, errlen));
    p->b = b;
    return 0;
}

// Row-major C (M,N) = op(A) (M,K) @ op(B) (K,N) + beta C, as gemm.h has it: cuBLAS is
// column-major, so it computes C^T = op(B)^T op(A)^T.
static cublasStatus_t gemm_rm(cublasHandle_t h, int ta, int tb, int M, int N, int K,
                              const float *A, int lda, const float *B, int ldb, float beta,
                              float *C, int ldc)
{
    const float one = 1.0f;
    return cublasSgemm(h, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, N, M, K,
                       &one, B, ldb, A, lda, &beta, C, ldc);
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
    k_hwio_to_krsc<<<GRID((size_t)rsc * c->f)>>>(p->wt, w, rsc, c->f);
    LAUNCHED();
    const float *xin = in;
    if (p->explicit_pad) {
        k_pad<<<GRID((size_t)b * (c->h + p->ph) * (c->w + p->pw) * c->c)>>>(
            p->xpad, in, b, c->h, c->w, c->c, p->ph, p->pw, c->pad_top, c->pad_left);
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
    k_bias_grad<<<c->f, THREADS, 0, g->compute>>>(db, d, (size_t)b * c->oh * c->ow, c->f);
    LAUNCHED();
    DNN(cudnnConvolutionBackwardFilter(g->dnn, &one, p->x, p->explicit_pad ? p->xpad : in, p->y, d,
                                       p->conv, p->bwd_filter, g->ws, g->ws_size, &zero, p->w,
                                       p->dwt));
    k_krsc_to_hwio<<<GRID((size_t)rsc * c->f)>>>(dw, p->dwt, rsc, c->f);
    LAUNCHED();
    if (!din) return 0;
    DNN(cudnnConvolutionBackwardData(g->dnn, &one, p->w, p->wt, p->y, d, p->conv, p->bwd_data,
                                     g->ws, g->ws_size, &zero, p->x,
                                     p->explicit_pad ? p->dxpad : din));
    if (p->explicit_pad) {
        k_crop<<<GRID((size_t)b * c->h * c->w * c->c)>>>(din, p->dxpad, b, c->h, c->w, c->c, p->ph,
                                                         p->pw, c->pad_top, c->pad_left);
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
        case LAYER_FLATTEN: continue;
        case LAYER_CONV2D:
            TRY(conv_forward(g, i, out, in, w, b, err, errlen));
            k_bias_act<<<GRID(n)>>>(out, bias, n / l->conv.f, l->conv.f, act == ACT_RELU);
            LAUNCHED();
            if (act == ACT_RELU) act = ACT_LINEAR; // done
            break;
        case LAYER_DENSE: {
            // rows of the last axis: one per example, or more on a rank > 1 input
            const int rows = b * l->dense_rows;
            BLAS(gemm_rm(g->blas, 0, 0, rows, l->units, l->dense_in, in, l->dense_in, w,
                         l->units, 0.0f, out, l->units));
            k_bias_act<<<GRID(n)>>>(out, bias, (size_t)rows, l->units, act == ACT_RELU);
            LAUNCHED();
            if (act == ACT_RELU) act = ACT_LINEAR;
            break;
        }
        case LAYER_MAXPOOL:
            k_maxpool<<<GRID(n)>>>(out, g->argmax[i], in, l->pool, b);
            LAUNCHED();
            break;
        case LAYER_DROPOUT:
            if (training && m->dropout_enabled && l->rate > 0.0f) {
                k_dropout<<<GRID(n)>>>(out, g->masks[i], in, n, l->rate, g->args_d, draws);
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
        if (act == ACT_RELU) k_relu<<<GRID(n)>>>(out, n);
        else if (act == ACT_SOFTMAX) k_softmax_rows<<<GRID(srows)>>>(out, srows, scols);
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
        k_sce_logits<<<GRID((size_t)b)>>>(dout, g->row_loss, g->row_correct, out, g->y[g->slot], b,
                                          c, scale);
    else
        k_sce_probs<<<GRID((size_t)b)>>>(dout, g->row_loss, g->row_correct, out, g->y[g->slot], b,
                                         c, scale);
    LAUNCHED();
    CU(cudaMemsetAsync(g->acc, 0, 3 * sizeof *g->acc, g->compute));
    k_sum_loss<<<1, THREADS, 0, g->compute>>>(g->acc, g->row_loss, g->row_correct, b);
    LAUNCHED();
    return 0;
}

// model_step's backward, layers last to first.
static int backward(GpuModel *g, int num_replicas, char *err, size_t errlen)
{
    const Model *m = g->m;
    const int b = g->b;
    const float *x = g->x[g->slot];
    int first_param = m->num_layers, cur = 0;
    for (int i = 0; i < m->num_layers; i++)
        if (m->layers[i].w_count) {
            first_param = i;
            break;
        }
    float *d = g->dbuf[0];
    for (int i = m->num_layers - 1; i >= first_param; i--) {
        const Layer *l = &m->layers[i];
        const float *in = layer_out(g, x, i - 1), *out = layer_out(g, x, i);
        float *din = i > first_param ? g->dbuf[1 - cur] : NULL;
        const float *w = g->params + l->w_off;
        float *dw = g->grads + l->w_off, *db = g->grads + l->b_off;
        const size_t n = (size_t)b * l->out_size;
        const int last = i == m->num_layers - 1;
        if ((l->type == LAYER_CONV2D || l->type == LAYER_DENSE) && !(last && l->act == ACT_SOFTMAX)) {
            const size_t srows = l->type == LAYER_DENSE ? (size_t)b * l->dense_rows : (size_t)b;
            const int scols = l->type == LAYER_DENSE ? l->units : (int)l->out_size;
            if (l->act == ACT_RELU) k_relu_backward<<<GRID(n)>>>(d, out, n);
            else if (l->act == ACT_SOFTMAX)
                k_softmax_backward_rows<<<GRID(srows)>>>(d, out, srows, scols);
            LAUNCHED();
        }
        switch (l->type) {
        case LAYER_RESHAPE:
        case LAYER_FLATTEN: continue;
        case LAYER_DROPOUT:
            if (m->dropout_enabled && l->rate > 0.0f) {
                k_mul<<<GRID(n)>>>(d, g->masks[i], n);
                LAUNCHED();
            }
            continue;
        case LAYER_MAXPOOL:
            CU(cudaMemsetAsync(din, 0, (size_t)b * l->in_size * sizeof *din, g->compute));
            k_maxpool_backward<<<GRID(n)>>>(din, d, g->argmax[i], n);
            LAUNCHED();
            break;
        case LAYER_DENSE: {
            const int rows = b * l->dense_rows;
            k_bias_grad<<<l->units, THREADS, 0, g->compute>>>(db, d, (size_t)rows, l->units);
            LAUNCHED();
            BLAS(gemm_rm(g->blas, 1, 0, l->dense_in, l->units, rows, in, l->dense_in, d,
                         l->units, 0.0f, dw, l->units));
            if (din)
                BLAS(gemm_rm(g->blas, 0, 1, rows, l->dense_in, l->units, d, l->units, w, l->units,
                             0.0f, din, l->dense_in));
            break;
        }
        case LAYER_CONV2D: TRY(conv_backward(g, i, din, dw, db, d, in, b, err, errlen)); break;
        }
        if (l->w_count && l->l2 != 0.0f) {
            k_axpy<<<GRID(l->w_count)>>>(dw, w, 2.0f * l->l2 / (float)num_replicas, l->w_count);
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
    size_t dmax = m->input_size;
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
    }
    for (int k = 0; k < 2; k++) {
        CU(cudaMalloc(&g->dbuf[k], B * dmax * sizeof(float)));
        CU(cudaMalloc(&g->x[k], B * m->input_size * sizeof(float)));
        CU(cudaMalloc(&g->y[k], B));
        CU(cudaMallocHost(&g->xh[k], B * m->input_size * sizeof(float)));
        CU(cudaMallocHost(&g->yh[k], B));
        CU(cudaEventCreateWithFlags(&g->copied[k], cudaEventDisableTiming));
        CU(cudaEventCreateWithFlags(&g->consumed[k], cudaEventDisableTiming));
    }
    CU(cudaMalloc(&g->acc, 3 * sizeof(double)));
    CU(cudaMalloc(&g->row_loss, B * sizeof(double)));
    CU(cudaMalloc(&g->row_correct, B * sizeof(int)));
    CU(cudaMallocHost(&g->stats_h, MODEL_STATS_FLOATS * sizeof(float)));
    CU(cudaMallocHost(&g->acc_h, 3 * sizeof(double)));
    CU(cudaMallocHost(&g->args_h, sizeof *g->args_h));
    CU(cudaMalloc(&g->args_d, sizeof *g->args_d));
    CU(cudaMemset(g->args_d, 0, sizeof *g->args_d));
    // the memsets above ran on the legacy stream, which the compute stream does not wait for
    CU(cudaDeviceSynchronize());
    return 0;
}

extern "C" int gpu_model_create(GpuModel **out, const Model *m, const OptimizerConfig *oc,
                                int dev, int max_batch, char *err, size_t errlen)
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
    const char *graphs = getenv("KT_CUDA_GRAPHS");
    g->graphs_on = !(graphs && !strcmp(graphs, "0"));
    int rc = create(g, err, errlen);
    if (rc) {
        gpu_model_free(g);
        return rc;
    }
    *out = g;
    return 0;
}

extern "C" int gpu_model_upload(GpuModel *g, const float *params, const float *opt_state,
                                char *err, size_t errlen)
{
    CU(cudaMemcpyAsync(g->params, params, g->np * sizeof(float), cudaMemcpyHostToDevice, g->compute));
    if (g->state_floats && opt_state)
        CU(cudaMemcpyAsync(g->state, opt_state, g->state_floats * sizeof(float),
                           cudaMemcpyHostToDevice, g->compute));
    CU(cudaStreamSynchronize(g->compute));
    return 0;
}

extern "C" int gpu_model_download(GpuModel *g, float *params, float *opt_state, char *err,
                                  size_t errlen)
{
    CU(cudaMemcpyAsync(params, g->params, g->np * sizeof(float), cudaMemcpyDeviceToHost, g->compute));
    if (g->state_floats && opt_state)
        CU(cudaMemcpyAsync(opt_state, g->state, g->state_floats * sizeof(float),
                           cudaMemcpyDeviceToHost, g->compute));
    CU(cudaStreamSynchronize(g->compute));
    return 0;
}

extern "C" int gpu_model_load_batch(GpuModel *g, const float *x, const uint8_t *y, int b,
                                    char *err, size_t errlen)
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
    memcpy(g->yh[k], y, (size_t)b);
    CU(cudaMemcpyAsync(g->x[k], g->xh[k], xbytes, cudaMemcpyHostToDevice, g->copy));
    CU(cudaMemcpyAsync(g->y[k], g->yh[k], (size_t)b, cudaMemcpyHostToDevice, g->copy));
    CU(cudaEventRecord(g->copied[k], g->copy));
    g->slot = k;
    g->b = b;
    return 0;
}

// The training step after the batch and StepArgs are on their way: forward, loss,
// statistics, backward, all on the compute stream (recorded into a graph when the stream
// is capturing).
static int record_step(GpuModel *g, int global_batch, int num_replicas, char *err,
                       size_t errlen)
{
    TRY(forward(g, 1, err, errlen));
    TRY(loss(g, g->dbuf[0], 1.0f / (float)global_batch, err, errlen));
    const Model *m = g->m;
    for (int i = 0; i < m->num_layers; i++) {
        const Layer *l = &m->layers[i];
        if (l->l2 == 0.0f) continue;
        k_l2_sum<<<1, THREADS, 0, g->compute>>>(g->acc + 2, g->params + l->w_off, l->w_count, l->l2);
        LAUNCHED();
    }
    k_stats<<<1, 1, 0, g->compute>>>(g->grads + g->np, g->acc, global_batch, num_replicas, g->b,
                                     g->args_d);
    LAUNCHED();
    return backward(g, num_replicas, err, errlen);
}

// Captures record_step into slot s's graph. On failure (a call cuDNN or cuBLAS cannot
// record, say) graphs are turned off for this model with a log line and 1 is returned:
// the caller runs the step without one. Negative errno only for errors outside capture.
static int capture_step(GpuModel *g, GpuModel::StepGraph *s, int global_batch,
                        int num_replicas, char *err, size_t errlen)
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
             "step launches its kernels one by one", rc ? cerr : cudaGetErrorString(e));
    return 1;
}

// The step through slot g->slot's graph: the first step at a new key runs without one
// (it sets up cuDNN plans and workspaces and loads the kernels, none of which may happen
// while capturing), the second captures it, later ones replay it.
static int graph_step(GpuModel *g, int global_batch, int num_replicas, char *err,
                      size_t errlen)
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
    // args_h is free: the previous step synchronized the compute stream
    g->args_h->dropout_seed = dropout_seed;
    g->args_h->stop_flag = stop_flag;
    CU(cudaMemcpyAsync(g->args_d, g->args_h, sizeof *g->args_d, cudaMemcpyHostToDevice,
                       g->compute));
    CU(cudaStreamWaitEvent(g->compute, g->copied[g->slot], 0));
    // with a gradient-ready hook the step calls out to the collective as it goes: eager
    if (g->graphs_on && !g->on_ready) TRY(graph_step(g, global_batch, num_replicas, err, errlen));
    else TRY(record_step(g, global_batch, num_replicas, err, errlen));
    CU(cudaEventRecord(g->consumed[g->slot], g->compute));
    CU(cudaStreamSynchronize(g->compute));
    return 0;
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

extern "C" int gpu_model_grads_to_host(GpuModel *g, float *host, size_t n, char *err,
                                       size_t errlen)
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
    if (layer < 0 || layer >= g->m->num_layers || g->b < 1)
        return fail(err, errlen, "gpu: no activation of layer %d", layer);
    const float *src = layer_out(g, g->x[g->slot], layer);
    size_t n = (size_t)g->b * g->m->layers[layer].out_size;
    CU(cudaMemcpyAsync(host, src, n * sizeof(float), cudaMemcpyDeviceToHost, g->compute));
    CU(cudaStreamSynchronize(g->compute));
    return 0;
}

extern "C" int gpu_model_optim_step(GpuModel *g, Optimizer *o, char *err, size_t errlen)
{
    const OptimizerConfig *c = &o->cfg;
    const size_t n = g->np;
    if (o->n != n || o->state_floats != g->state_floats)
        return fail(err, errlen, "gpu: optimizer for %zu parameters and %zu state floats, the "
                    "device has %zu and %zu", o->n, o->state_floats, n, g->state_floats);
    float *w = g->params, *s = g->state;
    const float *gr = g->grads;
    switch (c->kind) {
    case OPT_SGD: k_sgd<<<GRID(n)>>>(w, gr, s, n, c->lr, c->momentum, c->nesterov); break;
    case OPT_RMSPROP:
        k_rmsprop<<<GRID(n)>>>(w, gr, s, s + n, n, c->lr, c->rho, c->epsilon, c->momentum);
        break;
    case OPT_ADAM:
    case OPT_ADAM_AMSGRAD: {
        const float t = (float)(o->iterations + 1);
        const float alpha = c->lr * sqrtf(1.0f - powf(c->beta2, t)) / (1.0f - powf(c->beta1, t));
        k_adam<<<GRID(n)>>>(w, gr, s, s + n, s + 2 * n, n, alpha, c->beta1, c->beta2, c->epsilon,
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
    TRY(forward(g, 0, err, errlen));
    TRY(loss(g, NULL, 1.0f, err, errlen));
    CU(cudaMemcpyAsync(g->acc_h, g->acc, 3 * sizeof(double), cudaMemcpyDeviceToHost, g->compute));
    CU(cudaEventRecord(g->consumed[g->slot], g->compute));
    CU(cudaStreamSynchronize(g->compute));
    st->loss = g->acc_h[0];
    st->correct = g->acc_h[1];
    st->count = g->b;
    return 0;
}

extern "C" int gpu_model_read_stats(GpuModel *g, float *out, char *err, size_t errlen)
{
    CU(cudaMemcpyAsync(g->stats_h, g->grads + g->np, MODEL_STATS_FLOATS * sizeof(float),
                       cudaMemcpyDeviceToHost, g->compute));
    CU(cudaStreamSynchronize(g->compute));
    memcpy(out, g->stats_h, MODEL_STATS_FLOATS * sizeof(float));
    return 0;
}
