#include "layers.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gemm.h"
#include "util.h"

/* ----------------------------------------------------------------------------
 * Conv2D: im2col + one GEMM per direction */

int conv_geom_init(ConvGeom *g, int h, int w, int c, int kh, int kw, int f, int sh, int sw,
                   int same)
{
    if (h <= 0 || w <= 0 || c <= 0 || kh <= 0 || kw <= 0 || f <= 0 || sh <= 0 || sw <= 0)
        return -EINVAL;
    *g = (ConvGeom){.h = h, .w = w, .c = c, .kh = kh, .kw = kw, .f = f, .sh = sh, .sw = sw};
    if (same) {
        /* TensorFlow's SAME: output ceil(in/stride), the odd pixel of padding at the end. */
        g->oh = (h + sh - 1) / sh;
        g->ow = (w + sw - 1) / sw;
        int ph = (g->oh - 1) * sh + kh - h, pw = (g->ow - 1) * sw + kw - w;
        g->pad_top = ph > 0 ? ph / 2 : 0;
        g->pad_left = pw > 0 ? pw / 2 : 0;
    } else {
        if (h < kh || w < kw) return -EINVAL;
        g->oh = (h - kh) / sh + 1;
        g->ow = (w - kw) / sw + 1;
    }
    return 0;
}

size_t conv_col_size(const ConvGeom *g, int b)
{
    return (size_t)b * g->oh * g->ow * g->kh * g->kw * g->c;
}

/* col (B*OH*OW, KH*KW*C): row p holds the receptive field of output pixel p in (kh,kw,c)
 * order, so col @ weight(KH*KW*C, F) is the convolution. Padding reads as zero. */
static void im2col(float *col, const float *inp, const ConvGeom *g, int b)
{
    const int kc = g->kw * g->c;
    const size_t row = (size_t)g->w * g->c;
    for (int n = 0; n < b; n++) {
        const float *img = inp + (size_t)n * g->h * g->w * g->c;
        for (int oy = 0; oy < g->oh; oy++) {
            for (int ox = 0; ox < g->ow; ox++) {
                int iy0 = oy * g->sh - g->pad_top, ix0 = ox * g->sw - g->pad_left;
                if (kc <= 16 && iy0 >= 0 && iy0 + g->kh <= g->h && ix0 >= 0 &&
                    ix0 + g->kw <= g->w) {
                    /* the whole field inside, in rows of a few floats (3 for a 3x3
                     * kernel on one channel): copied inline */
                    const float *src = img + (size_t)iy0 * row + (size_t)ix0 * g->c;
                    if (kc == 3) /* three floats a row, unrolled */
                        for (int ky = 0; ky < g->kh; ky++, src += row, col += 3)
                            col[0] = src[0], col[1] = src[1], col[2] = src[2];
                    else
                        for (int ky = 0; ky < g->kh; ky++, src += row, col += kc)
                            for (int j = 0; j < kc; j++) col[j] = src[j];
                    continue;
                }
                for (int ky = 0; ky < g->kh; ky++) {
                    int iy = iy0 + ky;
                    if (iy < 0 || iy >= g->h) {
                        memset(col, 0, (size_t)kc * sizeof *col);
                    } else if (ix0 >= 0 && ix0 + g->kw <= g->w) {
                        memcpy(col, img + ((size_t)iy * g->w + ix0) * g->c,
                               (size_t)kc * sizeof *col);
                    } else {
                        for (int kx = 0; kx < g->kw; kx++) {
                            int ix = ix0 + kx;
                            float *dst = col + (size_t)kx * g->c;
                            if (ix < 0 || ix >= g->w) memset(dst, 0, (size_t)g->c * sizeof *dst);
                            else
                                memcpy(dst, img + ((size_t)iy * g->w + ix) * g->c,
                                       (size_t)g->c * sizeof *dst);
                        }
                    }
                    col += kc;
                }
            }
        }
    }
}

/* The adjoint of im2col: adds every column entry back onto its input pixel. */
static void col2im(float *dinp, const float *dcol, const ConvGeom *g, int b)
{
    memset(dinp, 0, (size_t)b * g->h * g->w * g->c * sizeof *dinp);
    for (int n = 0; n < b; n++) {
        float *img = dinp + (size_t)n * g->h * g->w * g->c;
        for (int oy = 0; oy < g->oh; oy++) {
            for (int ox = 0; ox < g->ow; ox++) {
                int iy0 = oy * g->sh - g->pad_top, ix0 = ox * g->sw - g->pad_left;
                for (int ky = 0; ky < g->kh; ky++) {
                    int iy = iy0 + ky;
                    for (int kx = 0; kx < g->kw; kx++) {
                        int ix = ix0 + kx;
                        if (iy >= 0 && iy < g->h && ix >= 0 && ix < g->w) {
                            float *dst = img + ((size_t)iy * g->w + ix) * g->c;
                            for (int ch = 0; ch < g->c; ch++) dst[ch] += dcol[ch];
                        }
                        dcol += g->c;
                    }
                }
            }
        }
    }
}

/* bias NULL (a layer without bias): out = 0; dbias NULL: nothing. */
static void bias_rows(float *out, const float *bias, size_t rows, size_t cols)
{
    if (!bias) {
        memset(out, 0, rows * cols * sizeof *out);
        return;
    }
    for (size_t r = 0; r < rows; r++)
        for (size_t j = 0; j < cols; j++) out[r * cols + j] = bias[j];
}

static void bias_grad(float *dbias, const float *dout, size_t rows, size_t cols)
{
    if (!dbias) return;
    memset(dbias, 0, cols * sizeof *dbias);
    for (size_t r = 0; r < rows; r++)
        for (size_t j = 0; j < cols; j++) dbias[j] += dout[r * cols + j];
}

/* Examples per block: a convolution runs block by block so that each block's output
 * (about CONV_BLOCK_FLOATS) is still in cache when its bias, relu and gradient passes
 * read it, instead of making several trips through memory over the whole batch. */
#define CONV_BLOCK_FLOATS (64 * 1024)
static int block_examples(const ConvGeom *g)
{
    const size_t per =
        (size_t)g->oh * g->ow * (g->f > g->kh * g->kw * g->c ? g->f : g->kh * g->kw * g->c);
    return per >= CONV_BLOCK_FLOATS ? 1 : (int)(CONV_BLOCK_FLOATS / per);
}

/* The block of nb examples from example n0: its rows of col, out and dout, its input.
 * for (ConvBlock blk = {0}; conv_block_next(g, b, &blk);) visits the blocks of a batch
 * of b in order. */
typedef struct ConvBlock {
    int n0, nb, m; /* m = nb*oh*ow rows */
    size_t col, out, in;
} ConvBlock;

static int conv_block_next(const ConvGeom *g, int b, ConvBlock *blk)
{
    const int n0 = blk->n0 + blk->nb, eb = block_examples(g);
    if (n0 >= b) return 0;
    const int nb = b - n0 < eb ? b - n0 : eb;
    const size_t rows = (size_t)n0 * g->oh * g->ow;
    *blk = (ConvBlock){.n0 = n0,
                       .nb = nb,
                       .m = nb * g->oh * g->ow,
                       .col = rows * g->kh * g->kw * g->c,
                       .out = rows * g->f,
                       .in = (size_t)n0 * g->h * g->w * g->c};
    return 1;
}

/* o += bias, row by row (restrict: the rows vectorize) */
static void bias_add_rows(float *restrict o, const float *restrict bias, size_t rows, size_t f)
{
    for (size_t r = 0; r < rows; r++, o += f)
        for (size_t j = 0; j < f; j++) o[j] += bias[j];
}

/* o = relu(o + bias), row by row (restrict: the rows vectorize); bias NULL: relu(o) */
static void relu_bias_rows(float *restrict o, const float *restrict bias, size_t rows, size_t f)
{
    if (!bias) {
        for (size_t i = 0; i < rows * f; i++) o[i] = o[i] > 0.0f ? o[i] : 0.0f;
        return;
    }
    for (size_t r = 0; r < rows; r++, o += f)
        for (size_t j = 0; j < f; j++) {
            const float v = o[j] + bias[j];
            o[j] = v > 0.0f ? v : 0.0f;
        }
}

/* d = relu'(y) d in place, and its column sums added onto dbias (unless NULL) */
static void relu_grad_rows(float *restrict d, float *restrict dbias, const float *restrict y,
                           size_t rows, size_t f)
{
    if (!dbias) {
        for (size_t i = 0; i < rows * f; i++) d[i] = y[i] > 0.0f ? d[i] : 0.0f;
        return;
    }
    for (size_t r = 0; r < rows; r++, d += f, y += f)
        for (size_t j = 0; j < f; j++) {
            d[j] = y[j] > 0.0f ? d[j] : 0.0f;
            dbias[j] += d[j];
        }
}

/* Each block: im2col, the product, then the bias (and relu) while the block is in cache. */
static void conv_forward(float *out, float *col, const float *inp, const float *weight,
                         const float *bias, const ConvGeom *g, int b, int relu)
{
    const int k = g->kh * g->kw * g->c;
    for (ConvBlock blk = {0}; conv_block_next(g, b, &blk);) {
        float *o = out + blk.out;
        im2col(col + blk.col, inp + blk.in, g, blk.nb);
        gemm(GEMM_N, GEMM_N, blk.m, g->f, k, 1.0f, col + blk.col, k, weight, g->f, 0.0f, o, g->f);
        if (relu) relu_bias_rows(o, bias, (size_t)blk.m, (size_t)g->f);
        else if (bias) bias_add_rows(o, bias, (size_t)blk.m, (size_t)g->f);
    }
}

void conv2d_forward(float *out, float *col, const float *inp, const float *weight,
                    const float *bias, const ConvGeom *g, int b)
{
    conv_forward(out, col, inp, weight, bias, g, b, 0);
}

void conv2d_forward_relu(float *out, float *col, const float *inp, const float *weight,
                         const float *bias, const ConvGeom *g, int b)
{
    conv_forward(out, col, inp, weight, bias, g, b, 1);
}

/* The kernel gradient (accumulated from the second block on) and the input gradient of
 * one block, from its dout before the activation. */
static void conv2d_backward_block(float *dinput, float *dweight, float *dcol, const float *dout,
                                  const float *col, const float *weight, const ConvGeom *g,
                                  const ConvBlock *blk)
{
    const int k = g->kh * g->kw * g->c;
    /* dweight (K,F) (+)= col^T (K,M) @ dout (M,F) */
    gemm(GEMM_T, GEMM_N, k, g->f, blk->m, 1.0f, col + blk->col, k, dout + blk->out, g->f,
         blk->n0 ? 1.0f : 0.0f, dweight, g->f);
    if (!dinput) return;
    /* dcol (M,K) = dout (M,F) @ weight^T (F,K) */
    gemm(GEMM_N, GEMM_T, blk->m, k, g->f, 1.0f, dout + blk->out, g->f, weight, g->f, 0.0f,
         dcol + blk->col, k);
    col2im(dinput + blk->in, dcol + blk->col, g, blk->nb);
}

void conv2d_backward_relu(float *dinput, float *dweight, float *dbias, float *dcol, float *dout,
                          const float *out, const float *col, const float *weight,
                          const ConvGeom *g, int b, int rezero)
{
    const size_t f = (size_t)g->f;
    if (dbias) memset(dbias, 0, f * sizeof *dbias);
    for (ConvBlock blk = {0}; conv_block_next(g, b, &blk);) {
        relu_grad_rows(dout + blk.out, dbias, out + blk.out, (size_t)blk.m, f);
        conv2d_backward_block(dinput, dweight, dcol, dout, col, weight, g, &blk);
        if (rezero) memset(dout + blk.out, 0, (size_t)blk.m * f * sizeof *dout);
    }
}

void conv2d_backward(float *dinput, float *dweight, float *dbias, float *dcol, const float *dout,
                     const float *col, const float *weight, const ConvGeom *g, int b)
{
    bias_grad(dbias, dout, (size_t)b * g->oh * g->ow, (size_t)g->f);
    for (ConvBlock blk = {0}; conv_block_next(g, b, &blk);) {
        conv2d_backward_block(dinput, dweight, dcol, dout, col, weight, g, &blk);
    }
}

/* ----------------------------------------------------------------------------
 * Dense */

void dense_forward(float *out, const float *inp, const float *weight, const float *bias, int b,
                   int in, int outn)
{
    bias_rows(out, bias, (size_t)b, (size_t)outn);
    gemm(GEMM_N, GEMM_N, b, outn, in, 1.0f, inp, in, weight, outn, 1.0f, out, outn);
}

void dense_backward(float *dinput, float *dweight, float *dbias, const float *dout,
                    const float *inp, const float *weight, int b, int in, int outn, int din_zero)
{
    bias_grad(dbias, dout, (size_t)b, (size_t)outn);
    gemm(GEMM_T, GEMM_N, in, outn, b, 1.0f, inp, in, dout, outn, 0.0f, dweight, outn);
    if (dinput)
        gemm(GEMM_N, GEMM_T, b, in, outn, 1.0f, dout, outn, weight, outn, din_zero ? 1.0f : 0.0f,
             dinput, in);
}

void dense_backward_sgd(float *dinput, float *dbias, const float *dout, const float *inp,
                        float *weight, int b, int in, int outn, float lr, float decay, int din_zero)
{
    bias_grad(dbias, dout, (size_t)b, (size_t)outn);
    if (dinput)
        gemm(GEMM_N, GEMM_T, b, in, outn, 1.0f, dout, outn, weight, outn, din_zero ? 1.0f : 0.0f,
             dinput, in);
    gemm(GEMM_T, GEMM_N, in, outn, b, -lr, inp, in, dout, outn, decay, weight, outn);
}

/* ----------------------------------------------------------------------------
 * MaxPooling2D */

int pool_geom_init(PoolGeom *g, int h, int w, int c, int ph, int pw, int sh, int sw, int same)
{
    *g = (PoolGeom){.h = h, .w = w, .c = c, .ph = ph, .pw = pw, .sh = sh, .sw = sw};
    if (same) {
        g->oh = (h + sh - 1) / sh;
        g->ow = (w + sw - 1) / sw;
        int pad_h = (g->oh - 1) * sh + ph - h, pad_w = (g->ow - 1) * sw + pw - w;
        g->pad_top = pad_h > 0 ? pad_h / 2 : 0;
        g->pad_left = pad_w > 0 ? pad_w / 2 : 0;
    } else {
        if (ph > h || pw > w) return -EINVAL;
        g->oh = (h - ph) / sh + 1;
        g->ow = (w - pw) / sw + 1;
    }
    return g->oh > 0 && g->ow > 0 ? 0 : -EINVAL;
}

/* The window of output cell (oy, ox) clipped to the input: rows [*y0, *y1), columns
 * [*x0, *x1). Padded cells are never read, so they never win a maximum nor count in a
 * mean. */
static void pool_window(const PoolGeom *g, int oy, int ox, int *y0, int *y1, int *x0, int *x1)
{
    *y0 = oy * g->sh - g->pad_top, *y1 = *y0 + g->ph;
    *x0 = ox * g->sw - g->pad_left, *x1 = *x0 + g->pw;
    *y0 = *y0 < 0 ? 0 : *y0, *y1 = *y1 > g->h ? g->h : *y1;
    *x0 = *x0 < 0 ? 0 : *x0, *x1 = *x1 > g->w ? g->w : *x1;
}

void maxpool_forward(float *out, int32_t *argmax, const float *inp, const PoolGeom *g, int b)
{
    const int h = g->h, w = g->w, c = g->c;
    for (int n = 0; n < b; n++)
        for (int oy = 0; oy < g->oh; oy++) {
            for (int ox = 0; ox < g->ow; ox++) {
                int y0, y1, x0, x1;
                pool_window(g, oy, ox, &y0, &y1, &x0, &x1);
                for (int ch = 0; ch < c; ch++) {
                    int best = -1;
                    float bv = -INFINITY;
                    for (int y = y0; y < y1; y++)
                        for (int x = x0; x < x1; x++) {
                            int idx = ((n * h + y) * w + x) * c + ch;
                            if (best < 0 || inp[idx] > bv) bv = inp[idx], best = idx;
                        }
                    size_t o = (((size_t)n * g->oh + oy) * g->ow + ox) * c + ch;
                    out[o] = bv;
                    argmax[o] = best;
                }
            }
        }
}

void maxpool_backward(float *dinput, const float *dout, const int32_t *argmax, const PoolGeom *g,
                      int b)
{
    memset(dinput, 0, (size_t)b * g->h * g->w * g->c * sizeof *dinput);
    for (size_t o = 0; o < (size_t)b * g->oh * g->ow * g->c; o++) dinput[argmax[o]] += dout[o];
}

void avgpool_forward(float *out, const float *inp, const PoolGeom *g, int b)
{
    const int w = g->w, c = g->c;
    for (int n = 0; n < b; n++)
        for (int oy = 0; oy < g->oh; oy++)
            for (int ox = 0; ox < g->ow; ox++) {
                int y0, y1, x0, x1;
                pool_window(g, oy, ox, &y0, &y1, &x0, &x1);
                float *o = out + (((size_t)n * g->oh + oy) * g->ow + ox) * c;
                memset(o, 0, (size_t)c * sizeof *o);
                for (int y = y0; y < y1; y++)
                    for (int x = x0; x < x1; x++) {
                        const float *in = inp + (((size_t)n * g->h + y) * w + x) * c;
                        for (int ch = 0; ch < c; ch++) o[ch] += in[ch];
                    }
                const float inv = 1.0f / (float)((y1 - y0) * (x1 - x0));
                for (int ch = 0; ch < c; ch++) o[ch] *= inv;
            }
}

void avgpool_backward(float *dinput, const float *dout, const PoolGeom *g, int b)
{
    const int w = g->w, c = g->c;
    memset(dinput, 0, (size_t)b * g->h * w * c * sizeof *dinput);
    for (int n = 0; n < b; n++)
        for (int oy = 0; oy < g->oh; oy++)
            for (int ox = 0; ox < g->ow; ox++) {
                int y0, y1, x0, x1;
                pool_window(g, oy, ox, &y0, &y1, &x0, &x1);
                const float *d = dout + (((size_t)n * g->oh + oy) * g->ow + ox) * c;
                const float inv = 1.0f / (float)((y1 - y0) * (x1 - x0));
                for (int y = y0; y < y1; y++)
                    for (int x = x0; x < x1; x++) {
                        float *di = dinput + (((size_t)n * g->h + y) * w + x) * c;
                        for (int ch = 0; ch < c; ch++) di[ch] += d[ch] * inv;
                    }
            }
}

/* ----------------------------------------------------------------------------
 * BatchNormalization: per-channel statistics over the rows */

void batchnorm_forward_train(float *out, float *mean, float *var, float *invstd, const float *inp,
                             const float *gamma, const float *beta, size_t rows, int c, float eps)
{
    const size_t cc = (size_t)c;
    double *acc = xcalloc(cc, sizeof *acc);
    for (size_t r = 0; r < rows; r++)
        for (size_t j = 0; j < cc; j++) acc[j] += inp[r * cc + j];
    for (size_t j = 0; j < cc; j++) mean[j] = (float)(acc[j] / (double)rows), acc[j] = 0.0;
    /* two passes, as tf.nn.moments: the mean first, then the squared deviations */
    for (size_t r = 0; r < rows; r++)
        for (size_t j = 0; j < cc; j++) {
            const double dev = (double)inp[r * cc + j] - mean[j];
            acc[j] += dev * dev;
        }
    for (size_t j = 0; j < cc; j++) {
        var[j] = (float)(acc[j] / (double)rows);
        invstd[j] = 1.0f / sqrtf(var[j] + eps);
    }
    free(acc);
    for (size_t r = 0; r < rows; r++)
        for (size_t j = 0; j < cc; j++) {
            const float xhat = (inp[r * cc + j] - mean[j]) * invstd[j];
            out[r * cc + j] = (gamma ? gamma[j] : 1.0f) * xhat + (beta ? beta[j] : 0.0f);
        }
}

void batchnorm_forward_infer(float *out, const float *inp, const float *gamma, const float *beta,
                             const float *mmean, const float *mvar, size_t rows, int c, float eps)
{
    const size_t cc = (size_t)c;
    for (size_t r = 0; r < rows; r++)
        for (size_t j = 0; j < cc; j++) {
            const float xhat = (inp[r * cc + j] - mmean[j]) / sqrtf(mvar[j] + eps);
            out[r * cc + j] = (gamma ? gamma[j] : 1.0f) * xhat + (beta ? beta[j] : 0.0f);
        }
}

void batchnorm_backward(float *dinput, float *dgamma, float *dbeta, const float *dout,
                        const float *inp, const float *mean, const float *invstd,
                        const float *gamma, size_t rows, int c)
{
    const size_t cc = (size_t)c;
    double *acc = xcalloc(2 * cc, sizeof *acc); /* sum dout, sum dout * xhat */
    for (size_t r = 0; r < rows; r++)
        for (size_t j = 0; j < cc; j++) {
            const float d = dout[r * cc + j];
            acc[j] += d;
            acc[cc + j] += (double)d * ((inp[r * cc + j] - mean[j]) * invstd[j]);
        }
    if (dbeta)
        for (size_t j = 0; j < cc; j++) dbeta[j] = (float)acc[j];
    if (dgamma)
        for (size_t j = 0; j < cc; j++) dgamma[j] = (float)acc[cc + j];
    if (dinput) {
        const double n = (double)rows;
        for (size_t r = 0; r < rows; r++)
            for (size_t j = 0; j < cc; j++) {
                const double xhat = (double)(inp[r * cc + j] - mean[j]) * invstd[j];
                const double k = (gamma ? gamma[j] : 1.0) * invstd[j] / n;
                dinput[r * cc + j] =
                    (float)(k * (n * dout[r * cc + j] - acc[j] - xhat * acc[cc + j]));
            }
    }
    free(acc);
}

void rescaling_forward(float *out, const float *inp, size_t n, float scale, float offset)
{
    for (size_t i = 0; i < n; i++) out[i] = inp[i] * scale + offset;
}

void rescaling_backward(float *d, size_t n, float scale)
{
    for (size_t i = 0; i < n; i++) d[i] *= scale;
}

/* ----------------------------------------------------------------------------
 * Dropout and activations */

void dropout_forward(float *x, float *mask, size_t n, float rate, uint64_t *rng)
{
    const float scale = 1.0f / (1.0f - rate);
    for (size_t i = 0; i < n; i++) {
        mask[i] = util_rand_float(rng) >= rate ? scale : 0.0f;
        x[i] *= mask[i];
    }
}

void dropout_backward(float *d, const float *mask, size_t n)
{
    for (size_t i = 0; i < n; i++) d[i] *= mask[i];
}

/* Keras's leaky_relu default negative slope (the activation, not the LeakyReLU layer) */
#define LEAKY_SLOPE 0.2f

static float sigmoidf(float x)
{
    return 1.0f / (1.0f + expf(-x));
}

/* The standard normal's distribution function, the factor of gelu's erf form. */
static float phif(float x)
{
    return 0.5f * (1.0f + erff(x * (float)M_SQRT1_2));
}

/* One value of an element-wise activation (relu and leaky_relu have loops of their own). */
static float act_value(float x, Activation act)
{
    switch (act) {
    case ACT_SIGMOID: return sigmoidf(x);
    case ACT_TANH: return tanhf(x);
    case ACT_GELU: return x * phif(x);
    case ACT_SWISH: return x * sigmoidf(x);
    case ACT_ELU: return x > 0.0f ? x : expm1f(x);
    default: return x;
    }
}

/* Its derivative, from the output y or (activation_needs_input) the input x. */
static float act_slope(float y, float x, Activation act)
{
    switch (act) {
    case ACT_SIGMOID: return y * (1.0f - y);
    case ACT_TANH: return 1.0f - y * y;
    case ACT_GELU: return phif(x) + x * expf(-0.5f * x * x) * (float)(0.5 * M_2_SQRTPI * M_SQRT1_2);
    case ACT_SWISH: {
        const float s = sigmoidf(x);
        return s * (1.0f + x * (1.0f - s));
    }
    case ACT_ELU: return y > 0.0f ? 1.0f : y + 1.0f;
    default: return 1.0f;
    }
}

void leaky_relu_forward(float *x, size_t n, float slope)
{
    for (size_t i = 0; i < n; i++) x[i] = x[i] > 0.0f ? x[i] : slope * x[i];
}

void leaky_relu_backward(float *d, const float *y, size_t n, float slope)
{
    for (size_t i = 0; i < n; i++) d[i] = y[i] > 0.0f ? d[i] : slope * d[i];
}

void activation_forward(float *x, size_t rows, size_t cols, Activation act)
{
    if (act == ACT_LEAKY_RELU) {
        leaky_relu_forward(x, rows * cols, LEAKY_SLOPE);
    } else if (act == ACT_RELU) {
        for (size_t i = 0; i < rows * cols; i++) x[i] = x[i] > 0.0f ? x[i] : 0.0f;
    } else if (act == ACT_SOFTMAX) {
        for (size_t r = 0; r < rows; r++) {
            float *row = x + r * cols, mx = row[0], sum = 0.0f;
            for (size_t j = 1; j < cols; j++) mx = row[j] > mx ? row[j] : mx;
            for (size_t j = 0; j < cols; j++) sum += row[j] = expf(row[j] - mx);
            for (size_t j = 0; j < cols; j++) row[j] /= sum;
        }
    } else if (act != ACT_LINEAR) {
        for (size_t i = 0; i < rows * cols; i++) x[i] = act_value(x[i], act);
    }
}

int activation_needs_input(Activation act)
{
    return act == ACT_GELU || act == ACT_SWISH;
}

void activation_backward(float *d, const float *y, const float *x, size_t rows, size_t cols,
                         Activation act)
{
    if (act == ACT_LEAKY_RELU) {
        leaky_relu_backward(d, y, rows * cols, LEAKY_SLOPE);
    } else if (act == ACT_RELU) {
        /* branch-free so that it vectorizes: the signs are unpredictable */
        for (size_t i = 0; i < rows * cols; i++) d[i] = y[i] > 0.0f ? d[i] : 0.0f;
    } else if (act == ACT_SOFTMAX) {
        for (size_t r = 0; r < rows; r++) {
            float *dr = d + r * cols;
            const float *yr = y + r * cols;
            float dot = 0.0f;
            for (size_t j = 0; j < cols; j++) dot += dr[j] * yr[j];
            for (size_t j = 0; j < cols; j++) dr[j] = yr[j] * (dr[j] - dot);
        }
    } else if (activation_needs_input(act)) {
        for (size_t i = 0; i < rows * cols; i++) d[i] *= act_slope(0.0f, x[i], act);
    } else if (act != ACT_LINEAR) {
        for (size_t i = 0; i < rows * cols; i++) d[i] *= act_slope(y[i], 0.0f, act);
    }
}
