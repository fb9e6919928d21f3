// kernels.cuh — the CUDA kernels of device.cu, each following the CPU function it names
// (layers.c, loss.c, optim.c) formula by formula. Included by device.cu, and by
// trainer/tests/test-gpu-kernels.cc, which runs them on the CPU under an emulation of
// the CUDA grid (trainer/tests/cuda_emul.h) against those CPU functions.
//
// Every element-wise kernel is a grid-stride loop, so any launch geometry computes the
// same result; the block reductions (k_sum_loss, k_l2_sum) need blockDim.x == THREADS.
// Bias gradients are a cuBLAS product with a vector of ones (device.cu's bias_grad).
#ifndef KT_GPU_KERNELS_CUH
#define KT_GPU_KERNELS_CUH

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "layers.h"
#include "model.h"

// Threads per block of the block reductions and element-wise launches (the CPU
// emulation of test-gpu-emul builds with fewer: each emulated thread is a real one).
#ifndef KT_GPU_THREADS
#define KT_GPU_THREADS 256
#endif
static const int THREADS = KT_GPU_THREADS;

#define FOR_EACH(i, n)                                                                             \
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (n);                        \
         i += (size_t)gridDim.x * blockDim.x)

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
        int ch = (int)(i % c), x = (int)(i / c % W), y = (int)(i / c / W % H),
            n = (int)(i / c / W / H);
        int sy = y - top, sx = x - left;
        dst[i] = sy >= 0 && sy < h && sx >= 0 && sx < w
                     ? src[(((size_t)n * h + sy) * w + sx) * c + ch]
                     : 0.0f;
    }
}
// Its adjoint: the gradient of the unpadded input.
__global__ void k_crop(float *dst, const float *src, int b, int h, int w, int c, int ph, int pw,
                       int top, int left)
{
    const int H = h + ph, W = w + pw;
    FOR_EACH(i, (size_t)b * h * w * c) {
        int ch = (int)(i % c), x = (int)(i / c % w), y = (int)(i / c / w % h),
            n = (int)(i / c / w / h);
        dst[i] = src[(((size_t)n * H + y + top) * W + x + left) * c + ch];
    }
}

// loss_sce_logits, one thread per row: loss (double) and correct per row, dlogits.
__global__ void k_sce_logits(float *dlogits, double *loss, int *correct, const float *logits,
                             const int32_t *labels, int b, int c, float scale)
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
                            const int32_t *labels, int b, int c, float scale)
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

// The device's sums of a step or an evaluation, in doubles: the examples' losses, their
// correct predictions and the L2 regularization (k_stats makes the statistics of them).
enum { ACC_LOSS, ACC_CORRECT, ACC_L2, ACC_N };

// One block: the batch's loss and correct predictions added to acc.
__global__ void k_sum_loss(double *acc, const double *loss, const int *correct, int b)
{
    __shared__ double pl[THREADS], pc[THREADS];
    double l = 0.0, c = 0.0;
    for (int i = threadIdx.x; i < b; i += blockDim.x) l += loss[i], c += correct[i];
    pl[threadIdx.x] = l;
    pc[threadIdx.x] = c;
    __syncthreads();
    for (int w = blockDim.x / 2; w > 0; w /= 2) {
        if ((int)threadIdx.x < w)
            pl[threadIdx.x] += pl[threadIdx.x + w], pc[threadIdx.x] += pc[threadIdx.x + w];
        __syncthreads();
    }
    if (threadIdx.x == 0) acc[ACC_LOSS] += pl[0], acc[ACC_CORRECT] += pc[0];
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

// The step statistics after the gradients (model.h's STAT_* slots), as train.c writes them
// on the CPU.
__global__ void k_stats(float *stats, const double *acc, int global_batch, int replicas, int b,
                        const StepArgs *args)
{
    stats[STAT_LOSS] = (float)(acc[ACC_LOSS] / global_batch + acc[ACC_L2] / replicas);
    stats[STAT_CORRECT] = (float)acc[ACC_CORRECT];
    stats[STAT_COUNT] = (float)b;
    stats[STAT_STOP] = args->stop_flag;
    stats[STAT_REGROUP] = 0.0f; // the GPU path does not follow a change of size
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

#endif
