#include "layers.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gemm.h"
#include "pool.h"
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

/* ----------------------------------------------------------------------------
 * Conv2D by Winograd's minimal filtering F(2x2, 3x3)
 *
 * A 2x2 tile of a 3x3, stride-1 convolution's output comes from a 4x4 tile d of its
 * input: Y = A^T [(G g G^T) . (B^T d B)] A per input channel, summed over the channels,
 * with g the channel's 3x3 kernel and . the element-wise product. The transforms only
 * add and halve, so per pair of channels a tile costs 16 products instead of 36. Summed
 * over the input channels, each of the 16 positions e of the 4x4 products is one matrix
 * product M_e (tiles, F) = V_e (tiles, C) @ U_e (C, F), where V_e holds position e of
 * every tile's B^T d B and U_e position e of every kernel's G g G^T: 16 products through
 * gemm() instead of one over kh*kw*C. Tiles past the output's edge read zeros and their
 * extra outputs are dropped, so any output size and padding works.
 *
 *   B^T = | 1  0 -1  0 |    G = |  1    0    0  |    A^T = | 1  1  1  0 |
 *         | 0  1  1  0 |        | 1/2  1/2  1/2 |          | 0  1 -1 -1 |
 *         | 0 -1  1  0 |        | 1/2 -1/2  1/2 |
 *         | 0  1  0 -1 |        |  0    0    1  |
 *
 * The kernel gradient is the adjoint: dU_e (C, F) = V_e^T @ dM_e summed over the tiles,
 * with dM the A dY A^T of each 2x2 tile of dout, then G^T dU G.
 *
 * Every output pixel and input gradient is a fixed function of its own example, the
 * kernel gradient a sum in a fixed order (tiles, then blocks): the same bits whatever
 * the threads. */

static ConvAlgo conv_algo = CONV_AUTO;

void conv_set_algo(ConvAlgo algo)
{
    conv_algo = algo;
}

int conv_algo_parse(const char *s, ConvAlgo *algo)
{
    if (!s || !*s || !strcmp(s, "auto")) *algo = CONV_AUTO;
    else if (!strcmp(s, "im2col")) *algo = CONV_IM2COL;
    else if (!strcmp(s, "winograd")) *algo = CONV_WINOGRAD;
    else return -EINVAL;
    return 0;
}

/* Whether a convolution with these sizes and cin input channels (the layer's for the
 * forward and the kernel gradient, its filters for the input gradient) runs by
 * Winograd: a 3x3 kernel with stride 1 (dilation is always 1, layers.h), and, chosen
 * automatically, at least CONV_WINOGRAD_MIN_CHANNELS channels in, below which the
 * transforms cost more than the products they spare. */
static int conv_winograd(const ConvGeom *g, int cin)
{
    if (g->kh != 3 || g->kw != 3 || g->sh != 1 || g->sw != 1) return 0;
    return conv_algo == CONV_WINOGRAD ||
           (conv_algo == CONV_AUTO && cin >= CONV_WINOGRAD_MIN_CHANNELS);
}

/* Whether the input gradient runs by Winograd: its convolution has the layer's filters
 * as channels in, and a layer that never takes one (ConvGeom.no_dinput) has no room for
 * it in its scratch. */
static int conv_winograd_dinput(const ConvGeom *g)
{
    return !g->no_dinput && conv_winograd(g, g->f);
}

/* An example's 2x2 tiles of the output. */
static size_t wino_tiles(const ConvGeom *g)
{
    return (size_t)((g->oh + 1) / 2) * ((g->ow + 1) / 2);
}

/* Floats from one position's matrix to the next in V, M or dM: a block's tiles by ch
 * channels and WINO_PAD more, so that the 16 rows a transform reads or writes at once
 * fall in different cache sets (the CIFAR model's matrices are a power of two in size:
 * unpadded, all 16 would map to one set). */
#define WINO_PAD 16
static size_t wino_plane(const ConvGeom *g, int nb, int ch)
{
    return (size_t)nb * wino_tiles(g) * (size_t)ch + WINO_PAD;
}

/* One example's floats of V and M. */
static size_t wino_floats(const ConvGeom *g)
{
    return 16 * (wino_tiles(g) * (size_t)(g->c + g->f) + 2 * WINO_PAD);
}

/* u (16, KC) = G k G^T per column: k (3, 3, KC) is a kernel in Keras's layout, KC its
 * channels in by out; u_e is then the (C, F) matrix of position e. */
static void wino_kernel(float *restrict u, const float *restrict k, size_t kc)
{
    for (size_t i = 0; i < kc; i++) {
        float t[4][3];
        for (int s = 0; s < 3; s++) {
            const float g0 = k[(0 + s) * kc + i], g1 = k[(3 + s) * kc + i],
                        g2 = k[(6 + s) * kc + i];
            t[0][s] = g0;
            t[1][s] = 0.5f * (g0 + g1 + g2);
            t[2][s] = 0.5f * (g0 - g1 + g2);
            t[3][s] = g2;
        }
        for (int r = 0; r < 4; r++) {
            u[(4 * r + 0) * kc + i] = t[r][0];
            u[(4 * r + 1) * kc + i] = 0.5f * (t[r][0] + t[r][1] + t[r][2]);
            u[(4 * r + 2) * kc + i] = 0.5f * (t[r][0] - t[r][1] + t[r][2]);
            u[(4 * r + 3) * kc + i] = t[r][2];
        }
    }
}

/* The transforms run over WINO_LANES channels at a time, gathered into local rows first,
 * so that each step is a few vector operations on whole rows. */
#define WINO_LANES 16

/* B^T d B of channels ch..ch+n-1 of one tile: p[16] its pixels (row-major), o its
 * position 0 in v, positions plane floats apart. The pointers stay as they are (moved on
 * instead, each would be stored and loaded again per chunk, and stall). */
static inline __attribute__((always_inline)) void wino_input_lanes(float *o, const float *const *p,
                                                                   size_t ch, size_t plane, int n)
{
    float d[16][WINO_LANES], r[16][WINO_LANES];
    for (int k = 0; k < 16; k++)
        for (int l = 0; l < n; l++) d[k][l] = p[k][ch + l];
    for (int j = 0; j < 4; j++) /* B^T d: rows */
        for (int l = 0; l < n; l++) {
            r[j][l] = d[j][l] - d[8 + j][l];
            r[4 + j][l] = d[4 + j][l] + d[8 + j][l];
            r[8 + j][l] = d[8 + j][l] - d[4 + j][l];
            r[12 + j][l] = d[4 + j][l] - d[12 + j][l];
        }
    for (int i = 0; i < 4; i++) /* (B^T d) B: columns */
        for (int l = 0; l < n; l++) {
            o[(4 * i + 0) * plane + l] = r[4 * i][l] - r[4 * i + 2][l];
            o[(4 * i + 1) * plane + l] = r[4 * i + 1][l] + r[4 * i + 2][l];
            o[(4 * i + 2) * plane + l] = r[4 * i + 2][l] - r[4 * i + 1][l];
            o[(4 * i + 3) * plane + l] = r[4 * i + 1][l] - r[4 * i + 3][l];
        }
}

/* v (16, T, C) = B^T d B for each of the T = nb * wino_tiles tiles d of the nb examples
 * of inp (nb, H, W, C), tile by tile in row-major order; pixels outside the input read
 * from zeros (C floats of zero). Built for AVX-512 and AVX2 too, as maxpool_forward:
 * additions only, the same results on each. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
__attribute__((target_clones("avx512f", "avx2", "default")))
#endif
static void
wino_input(float *v, const float *inp, const float *zeros, const ConvGeom *g, int nb)
{
    const int th = (g->oh + 1) / 2, tw = (g->ow + 1) / 2;
    const size_t c = (size_t)g->c, plane = wino_plane(g, nb, g->c);
    size_t t = 0;
    for (int n = 0; n < nb; n++) {
        const float *img = inp + (size_t)n * g->h * g->w * c;
        for (int ty = 0; ty < th; ty++)
            for (int tx = 0; tx < tw; tx++, t++) {
                const float *p[16];
                for (int i = 0; i < 4; i++)
                    for (int j = 0; j < 4; j++) {
                        const int iy = 2 * ty - g->pad_top + i, ix = 2 * tx - g->pad_left + j;
                        p[4 * i + j] = iy >= 0 && iy < g->h && ix >= 0 && ix < g->w
                                           ? img + ((size_t)iy * g->w + ix) * c
                                           : zeros;
                    }
                size_t ch = 0;
                for (; ch + WINO_LANES <= c; ch += WINO_LANES)
                    wino_input_lanes(v + t * c + ch, p, ch, plane, WINO_LANES);
                if (ch < c) wino_input_lanes(v + t * c + ch, p, ch, plane, (int)(c - ch));
            }
    }
}

/* A^T m A of channels j..j+n-1 of one tile: s its position 0 in m, positions plane
 * floats apart; q[4] its output pixels (row-major). */
static inline __attribute__((always_inline)) void wino_output_lanes(float *const *q, const float *s,
                                                                    size_t j, size_t plane, int n)
{
    float m[16][WINO_LANES], a[8][WINO_LANES];
    for (int k = 0; k < 16; k++)
        for (int l = 0; l < n; l++) m[k][l] = s[k * plane + l];
    for (int k = 0; k < 4; k++) /* A^T m: rows */
        for (int l = 0; l < n; l++) {
            a[k][l] = m[k][l] + m[4 + k][l] + m[8 + k][l];
            a[4 + k][l] = m[4 + k][l] - m[8 + k][l] - m[12 + k][l];
        }
    for (int i = 0; i < 2; i++) /* (A^T m) A: columns */
        for (int l = 0; l < n; l++) {
            q[2 * i][j + l] = a[4 * i][l] + a[4 * i + 1][l] + a[4 * i + 2][l];
            q[2 * i + 1][j + l] = a[4 * i + 1][l] - a[4 * i + 2][l] - a[4 * i + 3][l];
        }
}

/* out (nb, OH, OW, F) = A^T m A for each tile of m (16, T, F), the order of wino_input;
 * the outputs of a tile past the edge go to trash (F floats). Built as wino_input. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
__attribute__((target_clones("avx512f", "avx2", "default")))
#endif
static void
wino_output(float *out, const float *m, float *trash, const ConvGeom *g, int nb)
{
    const int th = (g->oh + 1) / 2, tw = (g->ow + 1) / 2;
    const size_t f = (size_t)g->f, plane = wino_plane(g, nb, g->f);
    size_t t = 0;
    for (int n = 0; n < nb; n++) {
        float *img = out + (size_t)n * g->oh * g->ow * f;
        for (int ty = 0; ty < th; ty++)
            for (int tx = 0; tx < tw; tx++, t++) {
                float *q[4];
                for (int i = 0; i < 2; i++)
                    for (int j = 0; j < 2; j++) {
                        const int oy = 2 * ty + i, ox = 2 * tx + j;
                        q[2 * i + j] =
                            oy < g->oh && ox < g->ow ? img + ((size_t)oy * g->ow + ox) * f : trash;
                    }
                size_t j = 0;
                for (; j + WINO_LANES <= f; j += WINO_LANES)
                    wino_output_lanes(q, m + t * f + j, j, plane, WINO_LANES);
                if (j < f) wino_output_lanes(q, m + t * f + j, j, plane, (int)(f - j));
            }
    }
}

/* A dY A^T of channels j..j+n-1 of one tile: q[4] its 2x2 of dout (row-major), o its
 * position 0 in dm, positions plane floats apart. The adjoint of wino_output_lanes. */
static inline __attribute__((always_inline)) void wino_dout_lanes(float *o, const float *const *q,
                                                                  size_t j, size_t plane, int n)
{
    float t[8][WINO_LANES];
    for (int i = 0; i < 2; i++) /* A dY: rows */
        for (int l = 0; l < n; l++) {
            const float y0 = q[i][j + l], y1 = q[2 + i][j + l];
            t[i][l] = y0;
            t[2 + i][l] = y0 + y1;
            t[4 + i][l] = y0 - y1;
            t[6 + i][l] = -y1;
        }
    for (int a = 0; a < 4; a++) /* (A dY) A^T: columns */
        for (int l = 0; l < n; l++) {
            const float t0 = t[2 * a][l], t1 = t[2 * a + 1][l];
            o[(4 * a + 0) * plane + l] = t0;
            o[(4 * a + 1) * plane + l] = t0 + t1;
            o[(4 * a + 2) * plane + l] = t0 - t1;
            o[(4 * a + 3) * plane + l] = -t1;
        }
}

/* dm (16, T, F) = A dY A^T for each tile dY of dout (nb, OH, OW, F), in the order of
 * wino_input; outputs past the edge read from zeros (F floats of zero). Built as
 * wino_input. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
__attribute__((target_clones("avx512f", "avx2", "default")))
#endif
static void
wino_dout(float *dm, const float *dout, const float *zeros, const ConvGeom *g, int nb)
{
    const int th = (g->oh + 1) / 2, tw = (g->ow + 1) / 2;
    const size_t f = (size_t)g->f, plane = wino_plane(g, nb, g->f);
    size_t t = 0;
    for (int n = 0; n < nb; n++) {
        const float *img = dout + (size_t)n * g->oh * g->ow * f;
        for (int ty = 0; ty < th; ty++)
            for (int tx = 0; tx < tw; tx++, t++) {
                const float *q[4];
                for (int i = 0; i < 2; i++)
                    for (int j = 0; j < 2; j++) {
                        const int oy = 2 * ty + i, ox = 2 * tx + j;
                        q[2 * i + j] =
                            oy < g->oh && ox < g->ow ? img + ((size_t)oy * g->ow + ox) * f : zeros;
                    }
                size_t j = 0;
                for (; j + WINO_LANES <= f; j += WINO_LANES)
                    wino_dout_lanes(dm + t * f + j, q, j, plane, WINO_LANES);
                if (j < f) wino_dout_lanes(dm + t * f + j, q, j, plane, (int)(f - j));
            }
    }
}

/* dw (3, 3, KC) = G^T du G per column of du (16, KC): the adjoint of wino_kernel. */
static void wino_kernel_grad(float *restrict dw, const float *restrict du, size_t kc)
{
    for (size_t i = 0; i < kc; i++) {
        float t[3][4];
        for (int b = 0; b < 4; b++) {
            const float u0 = du[(0 + b) * kc + i], u1 = du[(4 + b) * kc + i],
                        u2 = du[(8 + b) * kc + i], u3 = du[(12 + b) * kc + i];
            t[0][b] = u0 + 0.5f * (u1 + u2);
            t[1][b] = 0.5f * (u1 - u2);
            t[2][b] = 0.5f * (u1 + u2) + u3;
        }
        for (int r = 0; r < 3; r++) {
            dw[(3 * r + 0) * kc + i] = t[r][0] + 0.5f * (t[r][1] + t[r][2]);
            dw[(3 * r + 1) * kc + i] = 0.5f * (t[r][1] - t[r][2]);
            dw[(3 * r + 2) * kc + i] = 0.5f * (t[r][1] + t[r][2]) + t[r][3];
        }
    }
}

/* du (16, C, F) (+)= V_e^T dM_e for the nb examples of a block: the transformed kernel's
 * gradient, which wino_kernel_grad turns into the kernel's once every block is in.
 * accumulate 0: du is written. scratch: nb * wino_floats(g) floats; zeros: max(C, F)
 * floats of zero. */
static void wino_filter_grad(float *du, float *scratch, const float *inp, const float *dout,
                             const float *zeros, const ConvGeom *g, int nb, int accumulate)
{
    const int tiles = nb * (int)wino_tiles(g);
    const size_t c = (size_t)g->c, f = (size_t)g->f;
    const size_t vp = wino_plane(g, nb, g->c), mp = wino_plane(g, nb, g->f);
    float *v = scratch, *dm = scratch + 16 * vp;
    wino_input(v, inp, zeros, g, nb);
    wino_dout(dm, dout, zeros, g, nb);
    for (int e = 0; e < 16; e++)
        gemm(GEMM_T, GEMM_N, g->c, g->f, tiles, 1.0f, v + e * vp, g->c, dm + e * mp, g->f,
             accumulate ? 1.0f : 0.0f, du + e * c * f, g->f);
}

/* out (nb, OH, OW, F) = conv(inp (nb, H, W, C), the kernel whose transform is u (16, C, F)),
 * for a 3x3 stride-1 g. scratch: nb * wino_floats(g) floats; zeros: C floats of zero;
 * trash: F floats. */
static void wino_conv(float *out, float *scratch, const float *inp, const float *u,
                      const float *zeros, float *trash, const ConvGeom *g, int nb)
{
    const int tiles = nb * (int)wino_tiles(g);
    const size_t c = (size_t)g->c, f = (size_t)g->f;
    const size_t vp = wino_plane(g, nb, g->c), mp = wino_plane(g, nb, g->f);
    float *v = scratch, *m = scratch + 16 * vp;
    wino_input(v, inp, zeros, g, nb);
    for (int e = 0; e < 16; e++)
        gemm(GEMM_N, GEMM_N, tiles, g->f, g->c, 1.0f, v + e * vp, g->c, u + e * c * f, g->f, 0.0f,
             m + e * mp, g->f);
    wino_output(out, m, trash, g, nb);
}

/* Examples per block: a convolution runs block by block so that each block's im2col
 * and output (about CONV_BLOCK_FLOATS) are still in cache when its product, bias, relu
 * and gradient passes read them, instead of making several trips through memory over
 * the whole batch. The im2col is made again for the backward, block by block into the
 * same scratch, rather than kept from the forward: kept, it is kh*kw times the layer's
 * input, written to memory in the forward and read back in the backward, which costs
 * more than making it again from the input while the block is in cache. */
#define CONV_BLOCK_FLOATS (64 * 1024)

/* Whether the input gradient is the convolution of dout with the turned kernel
 * (conv_transposed_geom) rather than dout @ weight^T added back by col2im: with stride 1
 * (the transposed convolution is then one of stride 1 too) and no more filters than
 * channels, where its im2col of dout (kh*kw*f per input pixel) is no larger than the
 * column gradient (kh*kw*c per output pixel). */
static int conv_dinput_by_flip(const ConvGeom *g)
{
    return g->sh == 1 && g->sw == 1 && g->f <= g->c;
}

/* One example's floats of each part of the scratch: the im2col, and the column
 * gradient or the im2col of dout. */
static size_t conv_col_floats(const ConvGeom *g)
{
    return (size_t)g->oh * g->ow * g->kh * g->kw * g->c;
}

static size_t conv_dcol_floats(const ConvGeom *g)
{
    return conv_dinput_by_flip(g) ? (size_t)g->h * g->w * g->kh * g->kw * g->f : conv_col_floats(g);
}

/* The geometry of the input gradient's convolution (conv_transposed_geom, below). */
static ConvGeom conv_transposed_geom(const ConvGeom *g);

/* One example's floats of the scratch after its im2col: the column gradient or im2col
 * of dout, or the Winograd forward's or input gradient's V and M, whichever algorithm
 * conv_set_algo chooses later (the forward's start at the im2col's place). */
static size_t conv_work_floats(const ConvGeom *g)
{
    const ConvGeom t = conv_transposed_geom(g);
    const size_t col = conv_col_floats(g), fwd = wino_floats(g), bwd = wino_floats(&t);
    size_t n = conv_dcol_floats(g);
    if (conv_winograd(g, g->c) && fwd > n + col) n = fwd - col;
    if (conv_winograd_dinput(g) && bwd > n) n = bwd;
    return n;
}

/* Whether any pass of the layer runs by Winograd. */
static int conv_winograd_any(const ConvGeom *g)
{
    return conv_winograd(g, g->c) || conv_winograd_dinput(g);
}

/* The floats after the blocks' part of the scratch: a turned kernel (kh*kw per weight)
 * and, where a pass runs by Winograd, a transformed kernel and the gradient of one (16
 * per weight each), zeros and trash for wino_conv. */
static size_t conv_tail_floats(const ConvGeom *g)
{
    const size_t cf = (size_t)g->c * g->f, cmax = (size_t)(g->c > g->f ? g->c : g->f);
    return (size_t)g->kh * g->kw * cf + (conv_winograd_any(g) ? 32 * cf + 2 * cmax : 0);
}

static int block_examples(const ConvGeom *g)
{
    const size_t out = (size_t)g->oh * g->ow * g->f, col = conv_col_floats(g);
    const size_t per = out > col ? out : col;
    return per >= CONV_BLOCK_FLOATS ? 1 : (int)(CONV_BLOCK_FLOATS / per);
}

size_t conv_scratch_size(const ConvGeom *g, int b)
{
    const int eb = block_examples(g), nb = b < eb ? b : eb;
    return (size_t)nb * (conv_col_floats(g) + conv_work_floats(g)) + conv_tail_floats(g);
}

/* The tail of a scratch for b examples (conv_tail_floats). */
typedef struct {
    float *u, *du, *wflip, *zeros, *trash;
} ConvTail;

static ConvTail conv_tail(float *scratch, const ConvGeom *g, int b)
{
    const int eb = block_examples(g), nb = b < eb ? b : eb;
    const size_t cf = (size_t)g->c * g->f, cmax = (size_t)(g->c > g->f ? g->c : g->f);
    float *wflip = scratch + (size_t)nb * (conv_col_floats(g) + conv_work_floats(g));
    ConvTail t = {.wflip = wflip};
    if (!conv_winograd_any(g)) return t;
    t.u = wflip + (size_t)g->kh * g->kw * cf;
    t.du = t.u + 16 * cf;
    t.zeros = t.du + 16 * cf;
    t.trash = t.zeros + cmax;
    memset(t.zeros, 0, cmax * sizeof *t.zeros);
    return t;
}

/* The block of nb examples from example n0: its rows of out and dout, its input.
 * for (ConvBlock blk = {0}; conv_block_next(g, b, &blk);) visits the blocks of a batch
 * of b in order. */
typedef struct ConvBlock {
    int n0, nb, m; /* m = nb*oh*ow rows */
    size_t out, in;
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

/* Of each of the nb examples of a block's output o (rows x f each), the moments a
 * BatchNormalization after the layer takes (layers.h): per channel the sum, then the sum
 * of the squared deviations from the example's own mean (kept in between in mean, f
 * doubles), in double, while the block is in cache. Built for AVX-512 and AVX2 too, as
 * wino_input: its double sums ran two lanes wide in the SSE2 build; without contracted
 * multiply-adds (-std=c11) every clone gives the same bits. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
__attribute__((target_clones("avx512f", "avx2", "default")))
#endif
static void
conv_block_moments(double *restrict mom, double *restrict mean, const float *o, int nb, size_t rows,
                   size_t f)
{
    for (int n = 0; n < nb; n++, mom += 2 * f, o += rows * f) {
        double *restrict sum = mom, *restrict m2 = mom + f;
        for (size_t j = 0; j < f; j++) sum[j] = m2[j] = 0.0;
        for (size_t r = 0; r < rows; r++)
            for (size_t j = 0; j < f; j++) sum[j] += o[r * f + j];
        for (size_t j = 0; j < f; j++) mean[j] = sum[j] / (double)rows;
        for (size_t r = 0; r < rows; r++)
            for (size_t j = 0; j < f; j++) {
                const double dev = (double)o[r * f + j] - mean[j];
                m2[j] += dev * dev;
            }
    }
}

/* Each block: im2col into the scratch, the product, then the bias (and relu) and the
 * moments while the block is in cache. */
void conv2d_forward_moments(float *out, double *moments, float *scratch, const float *inp,
                            const float *weight, const float *bias, const ConvGeom *g, int b,
                            int relu)
{
    const int k = g->kh * g->kw * g->c, wino = conv_winograd(g, g->c);
    const size_t f = (size_t)g->f, rows = (size_t)g->oh * g->ow;
    double *mean = moments ? xmalloc(f * sizeof *mean) : NULL;
    const ConvTail tail = conv_tail(scratch, g, b);
    if (wino) wino_kernel(tail.u, weight, (size_t)g->c * f);
    for (ConvBlock blk = {0}; conv_block_next(g, b, &blk);) {
        float *o = out + blk.out;
        if (wino) {
            wino_conv(o, scratch, inp + blk.in, tail.u, tail.zeros, tail.trash, g, blk.nb);
        } else {
            im2col(scratch, inp + blk.in, g, blk.nb);
            gemm(GEMM_N, GEMM_N, blk.m, g->f, k, 1.0f, scratch, k, weight, g->f, 0.0f, o, g->f);
        }
        if (relu) relu_bias_rows(o, bias, (size_t)blk.m, f);
        else if (bias) bias_add_rows(o, bias, (size_t)blk.m, f);
        if (moments) conv_block_moments(moments + (size_t)blk.n0 * 2 * f, mean, o, blk.nb, rows, f);
    }
    free(mean);
}

void conv2d_forward(float *out, float *scratch, const float *inp, const float *weight,
                    const float *bias, const ConvGeom *g, int b)
{
    conv2d_forward_moments(out, NULL, scratch, inp, weight, bias, g, b, 0);
}

void conv2d_forward_relu(float *out, float *scratch, const float *inp, const float *weight,
                         const float *bias, const ConvGeom *g, int b)
{
    conv2d_forward_moments(out, NULL, scratch, inp, weight, bias, g, b, 1);
}

/* The input gradient of a stride-1 convolution is itself a convolution: of dout, padded
 * by kh-1-pad_top rows above and kw-1-pad_left columns to the left (so that it comes out
 * h x w), with the kernel turned half a turn and its channels swapped, wflip (KH,KW,F,C)
 * [ky][kx][j][ch] = weight[KH-1-ky][KW-1-kx][ch][j]. That convolution's geometry. */
static ConvGeom conv_transposed_geom(const ConvGeom *g)
{
    return (ConvGeom){.h = g->oh,
                      .w = g->ow,
                      .c = g->f,
                      .kh = g->kh,
                      .kw = g->kw,
                      .f = g->c,
                      .sh = 1,
                      .sw = 1,
                      .pad_top = g->kh - 1 - g->pad_top,
                      .pad_left = g->kw - 1 - g->pad_left,
                      .oh = g->h,
                      .ow = g->w};
}

static void conv_flip_kernel(float *wflip, const float *weight, const ConvGeom *g)
{
    const size_t c = (size_t)g->c, f = (size_t)g->f;
    for (int ky = 0; ky < g->kh; ky++)
        for (int kx = 0; kx < g->kw; kx++) {
            const float *src =
                weight + ((size_t)(g->kh - 1 - ky) * g->kw + (g->kw - 1 - kx)) * c * f;
            float *dst = wflip + ((size_t)ky * g->kw + kx) * f * c;
            for (size_t ch = 0; ch < c; ch++)
                for (size_t j = 0; j < f; j++) dst[j * c + ch] = src[ch * f + j];
        }
}

/* The scratch of a backward: the block's im2col (or the Winograd kernel gradient's V and
 * dM from there), then its column gradient (or im2col of dout, or the Winograd input
 * gradient's V and M), then the tail: the turned kernel and, by Winograd, its transform.
 * wino_dw: the kernel gradient by Winograd, into tail.du. */
typedef struct {
    float *col, *dcol, *wflip, *uflip;
    int wino_dw;
    ConvTail tail;
} ConvScratch;

static ConvScratch conv_scratch(float *scratch, const float *weight, const ConvGeom *g, int b,
                                const float *dinput)
{
    const int eb = block_examples(g), nb = b < eb ? b : eb;
    ConvScratch s = {.col = scratch,
                     .dcol = scratch + (size_t)nb * conv_col_floats(g),
                     .wino_dw = conv_winograd(g, g->c),
                     .tail = conv_tail(scratch, g, b)};
    if (dinput && conv_winograd_dinput(g)) {
        conv_flip_kernel(s.tail.wflip, weight, g);
        wino_kernel(s.tail.u, s.tail.wflip, (size_t)g->c * g->f);
        s.uflip = s.tail.u;
    } else if (dinput && conv_dinput_by_flip(g)) {
        s.wflip = s.tail.wflip;
        conv_flip_kernel(s.wflip, weight, g);
    }
    return s;
}

/* The kernel gradient (accumulated from the second block on) and the input gradient of
 * one block, from its dout before the activation. */
static void conv2d_backward_block(float *dinput, float *dweight, const ConvScratch *s,
                                  const float *dout, const float *inp, const float *weight,
                                  const ConvGeom *g, const ConvBlock *blk)
{
    const int k = g->kh * g->kw * g->c;
    if (s->wino_dw) {
        wino_filter_grad(s->tail.du, s->col, inp + blk->in, dout + blk->out, s->tail.zeros, g,
                         blk->nb, blk->n0 != 0);
    } else {
        im2col(s->col, inp + blk->in, g, blk->nb);
        /* dweight (K,F) (+)= col^T (K,M) @ dout (M,F) */
        gemm(GEMM_T, GEMM_N, k, g->f, blk->m, 1.0f, s->col, k, dout + blk->out, g->f,
             blk->n0 ? 1.0f : 0.0f, dweight, g->f);
    }
    if (!dinput) return;
    if (s->uflip) {
        const ConvGeom t = conv_transposed_geom(g);
        wino_conv(dinput + blk->in, s->dcol, dout + blk->out, s->uflip, s->tail.zeros,
                  s->tail.trash, &t, blk->nb);
        return;
    }
    if (s->wflip) {
        const ConvGeom t = conv_transposed_geom(g);
        const int kt = t.kh * t.kw * t.c;
        im2col(s->dcol, dout + blk->out, &t, blk->nb);
        /* dinput (nb*H*W, C) = im2col(dout) (nb*H*W, KH*KW*F) @ wflip (KH*KW*F, C) */
        gemm(GEMM_N, GEMM_N, blk->nb * g->h * g->w, g->c, kt, 1.0f, s->dcol, kt, s->wflip, g->c,
             0.0f, dinput + blk->in, g->c);
        return;
    }
    /* dcol (M,K) = dout (M,F) @ weight^T (F,K) */
    gemm(GEMM_N, GEMM_T, blk->m, k, g->f, 1.0f, dout + blk->out, g->f, weight, g->f, 0.0f, s->dcol,
         k);
    col2im(dinput + blk->in, s->dcol, g, blk->nb);
}

void conv2d_backward_relu(float *dinput, float *dweight, float *dbias, float *scratch, float *dout,
                          const float *out, const float *inp, const float *weight,
                          const ConvGeom *g, int b, int rezero)
{
    const size_t f = (size_t)g->f;
    const ConvScratch s = conv_scratch(scratch, weight, g, b, dinput);
    if (dbias) memset(dbias, 0, f * sizeof *dbias);
    for (ConvBlock blk = {0}; conv_block_next(g, b, &blk);) {
        relu_grad_rows(dout + blk.out, dbias, out + blk.out, (size_t)blk.m, f);
        conv2d_backward_block(dinput, dweight, &s, dout, inp, weight, g, &blk);
        if (rezero) memset(dout + blk.out, 0, (size_t)blk.m * f * sizeof *dout);
    }
    if (s.wino_dw) wino_kernel_grad(dweight, s.tail.du, (size_t)g->c * f);
}

void conv2d_backward(float *dinput, float *dweight, float *dbias, float *scratch, const float *dout,
                     const float *inp, const float *weight, const ConvGeom *g, int b)
{
    const ConvScratch s = conv_scratch(scratch, weight, g, b, dinput);
    bias_grad(dbias, dout, (size_t)b * g->oh * g->ow, (size_t)g->f);
    for (ConvBlock blk = {0}; conv_block_next(g, b, &blk);)
        conv2d_backward_block(dinput, dweight, &s, dout, inp, weight, g, &blk);
    if (s.wino_dw) wino_kernel_grad(dweight, s.tail.du, (size_t)g->c * g->f);
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

/* Per output cell, the window's first cell and then each later one, in rows then columns,
 * where it is larger: per channel the first maximum in that order, a channel's row of
 * values at a time (branch-free, so that it vectorizes). A window always holds a cell:
 * "same" pads less than the pool's size. */
/* Built for AVX-512 and AVX2 too, the one the CPU has chosen when the program loads (an
 * ifunc): compiled for any x86-64 (SSE2, without a blend) the per-channel select of the
 * value and its index stays scalar, and took 5 % of the CIFAR model's step; with AVX-512
 * 1 %. Comparisons and selects only: the same results on every one. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
__attribute__((target_clones("avx512f", "avx2", "default")))
#endif
void maxpool_forward(float *out, int32_t *argmax, const float *inp, const PoolGeom *g, int b)
{
    const int h = g->h, w = g->w, c = g->c;
    for (int n = 0; n < b; n++)
        for (int oy = 0; oy < g->oh; oy++) {
            for (int ox = 0; ox < g->ow; ox++) {
                int y0, y1, x0, x1;
                pool_window(g, oy, ox, &y0, &y1, &x0, &x1);
                const size_t o = (((size_t)n * g->oh + oy) * g->ow + ox) * c;
                float *restrict best = out + o;
                int32_t *restrict at = argmax + o;
                for (int y = y0; y < y1; y++)
                    for (int x = x0; x < x1; x++) {
                        const int idx = ((n * h + y) * w + x) * c;
                        const float *restrict in = inp + idx;
                        if (y == y0 && x == x0) {
                            for (int ch = 0; ch < c; ch++) best[ch] = in[ch], at[ch] = idx + ch;
                            continue;
                        }
                        for (int ch = 0; ch < c; ch++) {
                            const int gt = in[ch] > best[ch];
                            best[ch] = gt ? in[ch] : best[ch];
                            at[ch] = gt ? idx + ch : at[ch];
                        }
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
 * BatchNormalization: per-channel statistics over the rows
 *
 * Threads: a per-channel sum is cut by channels, each task summing its channels over all
 * the rows in row order; an element-wise pass is cut by rows. Every value is therefore
 * computed by the same operations in the same order whatever the threads, and the result
 * is the same bits on any thread count. */

/* Below this many values a pass runs on the caller alone: the hand-off would cost more. */
#define BN_PARALLEL_MIN 32768
/* The fewest channels a task sums: narrower tasks would mostly read each other's cache
 * lines. */
#define BN_MIN_CHANNELS 4

/* One BatchNormalization pass, shared by its tasks. Per channel (c each): center, the
 * mean subtracted from the input; by, what the difference is then multiplied by (the
 * batch's invstd) or, in inference, divided by (the moving deviation); scale and shift,
 * gamma (or 1) and beta (or 0); in the forward's sums, sum_d the sums of x (center NULL)
 * or of (x - center)^2; in the backward, sum_d and sum_dx, the sums of dout and dout *
 * xhat, and k = gamma * invstd / n. */
typedef struct {
    size_t rows, c;
    size_t part; /* channels (a sum) or rows (an element-wise pass) per task */
    const float *inp; /* (rows, c) the layer's input */
    const float *dout; /* backward: (rows, c) the output's gradient */
    const float *y; /* backward: the relu's output where fused (its sign masks dout) */
    int relu_x; /* backward: the relu fused, its mask made again from inp, scale and shift */
    float *out; /* forward: the output; backward: the input's gradient */
    const float *center, *by, *scale, *shift;
    int divide, relu;
    double n; /* backward: the rows the statistics are of (every rank's when synchronized) */
    double *acc; /* a sum's accumulators, 2 x `stride` doubles per task */
    size_t stride;
    double *sum_d, *sum_dx;
    const double *k;
} BnPass;

/* Runs fn over the rows x c pass's `units`, at least `min` a task: one task per thread
 * of the pool, one when the pass is small. A sum (sums != 0) runs over channels, and
 * each of its tasks gets two accumulators of part doubles. */
static void bn_run(BnPass *p, size_t units, size_t min, int sums, ParallelFn fn)
{
    size_t t = p->rows * p->c < BN_PARALLEL_MIN ? 1 : (size_t)gemm_threads();
    size_t part = (units + t - 1) / t;
    p->part = part < min ? min : part;
    const int tasks = (int)((units + p->part - 1) / p->part);
    if (sums) {
        /* a cache line between two tasks' accumulators: no line written by both at
         * every row */
        p->stride = (p->part + 7) / 8 * 8 + 8;
        p->acc = xmalloc(2 * (size_t)tasks * p->stride * sizeof *p->acc);
    }
    parallel_for(tasks, fn, p);
    free(p->acc);
    p->acc = NULL;
}

/* The channels [*j0, *j1) of task t of a sum. */
static void bn_channels(const BnPass *p, int t, size_t *j0, size_t *j1)
{
    *j0 = (size_t)t * p->part;
    *j1 = *j0 + p->part < p->c ? *j0 + p->part : p->c;
}

/* Of task t's channels, the sum over the rows of x (p->center NULL) or of the squared
 * deviations (x - center)^2, in double, into p->sum_d: the two passes of tf.nn.moments,
 * the mean first. */
static void batchnorm_forward_sums_task(void *ctx, int t)
{
    BnPass *p = ctx;
    size_t j0, j1;
    bn_channels(p, t, &j0, &j1);
    const size_t cc = p->c, w = j1 - j0;
    double *acc = p->acc + (size_t)t * p->stride;
    const float *x = p->inp + j0;
    for (size_t j = 0; j < w; j++) acc[j] = 0.0;
    if (!p->center) {
        for (size_t r = 0; r < p->rows; r++)
            for (size_t j = 0; j < w; j++) acc[j] += x[r * cc + j];
    } else {
        const float *mean = p->center + j0;
        for (size_t r = 0; r < p->rows; r++)
            for (size_t j = 0; j < w; j++) {
                const double dev = (double)x[r * cc + j] - mean[j];
                acc[j] += dev * dev;
            }
    }
    for (size_t j = 0; j < w; j++) p->sum_d[j0 + j] = acc[j];
}

/* The BatchNormalization passes below are built for AVX-512 and AVX2 too, as
 * maxpool_forward (an ifunc picks one at load): compiled for any x86-64 their double sums
 * ran two lanes wide. -std=c11 contracts no multiply-add, so every clone computes the same
 * operations in the same order: the same bits on each. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define BN_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define BN_CLONES
#endif

/* out = scale * xhat + shift (relu'd when fused) over task t's rows, xhat = (x - center)
 * * by, or / by in inference. */
BN_CLONES static void batchnorm_forward_apply_task(void *ctx, int t)
{
    const BnPass *p = ctx;
    const size_t cc = p->c, r0 = (size_t)t * p->part;
    const size_t r1 = r0 + p->part < p->rows ? r0 + p->part : p->rows;
    const float *restrict center = p->center, *restrict by = p->by;
    const float *restrict scale = p->scale, *restrict shift = p->shift;
    for (size_t r = r0; r < r1; r++) {
        const float *restrict x = p->inp + r * cc;
        float *restrict o = p->out + r * cc;
        if (p->divide)
            for (size_t j = 0; j < cc; j++)
                o[j] = scale[j] * ((x[j] - center[j]) / by[j]) + shift[j];
        else
            for (size_t j = 0; j < cc; j++)
                o[j] = scale[j] * ((x[j] - center[j]) * by[j]) + shift[j];
        if (p->relu)
            for (size_t j = 0; j < cc; j++) o[j] = o[j] > 0.0f ? o[j] : 0.0f;
    }
}

/* gamma (or 1) and beta (or 0) per channel, into sc (2c): the same products and sums
 * with and without them. */
static void bn_affine(float *sc, const float *gamma, const float *beta, size_t c)
{
    for (size_t j = 0; j < c; j++) {
        sc[j] = gamma ? gamma[j] : 1.0f;
        sc[c + j] = beta ? beta[j] : 0.0f;
    }
}

/* The forward's two sums per channel from the input's per-example moments (mom): the sum
 * of x, then (center != NULL) of (x - center)^2, each example's M2 + n_e (mean_e -
 * center)^2, the examples added in order. */
static void bn_moment_sums(double *sums, const BnMoments *mom, const float *center, size_t rows,
                           size_t c)
{
    const double ne = (double)(rows / mom->examples);
    for (size_t j = 0; j < c; j++) sums[j] = 0.0;
    for (size_t e = 0; e < mom->examples; e++) {
        const double *sum = mom->v + e * 2 * c, *m2 = sum + c;
        if (!center)
            for (size_t j = 0; j < c; j++) sums[j] += sum[j];
        else
            for (size_t j = 0; j < c; j++) {
                const double dev = sum[j] / ne - center[j];
                sums[j] += m2[j] + ne * dev * dev;
            }
    }
}

int batchnorm_forward_train_sync(float *out, float *mean, float *var, float *invstd,
                                 const float *inp, const float *gamma, const float *beta,
                                 size_t rows, int c, float eps, int relu, const BnSync *sync,
                                 const BnMoments *mom)
{
    const size_t cc = (size_t)c;
    float *sc = xmalloc(2 * cc * sizeof *sc);
    double *sums = xmalloc((cc + 1) * sizeof *sums); /* per channel, then the rows */
    int rc = 0;
    bn_affine(sc, gamma, beta, cc);
    BnPass p = {.rows = rows,
                .c = cc,
                .inp = inp,
                .out = out,
                .by = invstd,
                .scale = sc,
                .shift = sc + cc,
                .relu = relu,
                .sum_d = sums};
    if (mom) bn_moment_sums(sums, mom, NULL, rows, cc);
    else bn_run(&p, cc, BN_MIN_CHANNELS, 1, batchnorm_forward_sums_task);
    sums[cc] = (double)rows;
    if (sync && (rc = sync->sum(sync->ctx, sums, cc + 1))) goto out;
    const double n = sums[cc];
    for (size_t j = 0; j < cc; j++) mean[j] = (float)(sums[j] / n);
    p.center = mean;
    if (mom) bn_moment_sums(sums, mom, mean, rows, cc);
    else bn_run(&p, cc, BN_MIN_CHANNELS, 1, batchnorm_forward_sums_task);
    if (sync && (rc = sync->sum(sync->ctx, sums, cc))) goto out;
    for (size_t j = 0; j < cc; j++) {
        var[j] = (float)(sums[j] / n);
        invstd[j] = 1.0f / sqrtf(var[j] + eps);
    }
    bn_run(&p, rows, 1, 0, batchnorm_forward_apply_task);
out:
    free(sums);
    free(sc);
    return rc;
}

void batchnorm_forward_train(float *out, float *mean, float *var, float *invstd, const float *inp,
                             const float *gamma, const float *beta, size_t rows, int c, float eps)
{
    (void)batchnorm_forward_train_sync(out, mean, var, invstd, inp, gamma, beta, rows, c, eps, 0,
                                       NULL, NULL); /* no sync: nothing can fail */
}

void batchnorm_forward_train_relu(float *out, float *mean, float *var, float *invstd,
                                  const float *inp, const float *gamma, const float *beta,
                                  size_t rows, int c, float eps)
{
    (void)batchnorm_forward_train_sync(out, mean, var, invstd, inp, gamma, beta, rows, c, eps, 1,
                                       NULL, NULL);
}

static void bn_forward_infer(float *out, const float *inp, const float *gamma, const float *beta,
                             const float *mmean, const float *mvar, size_t rows, int c, float eps,
                             int relu)
{
    const size_t cc = (size_t)c;
    float *sc = xmalloc(3 * cc * sizeof *sc);
    bn_affine(sc, gamma, beta, cc);
    for (size_t j = 0; j < cc; j++) sc[2 * cc + j] = sqrtf(mvar[j] + eps);
    BnPass p = {.rows = rows,
                .c = cc,
                .inp = inp,
                .out = out,
                .center = mmean,
                .by = sc + 2 * cc,
                .scale = sc,
                .shift = sc + cc,
                .divide = 1,
                .relu = relu};
    bn_run(&p, rows, 1, 0, batchnorm_forward_apply_task);
    free(sc);
}

void batchnorm_forward_infer(float *out, const float *inp, const float *gamma, const float *beta,
                             const float *mmean, const float *mvar, size_t rows, int c, float eps)
{
    bn_forward_infer(out, inp, gamma, beta, mmean, mvar, rows, c, eps, 0);
}

void batchnorm_forward_infer_relu(float *out, const float *inp, const float *gamma,
                                  const float *beta, const float *mmean, const float *mvar,
                                  size_t rows, int c, float eps)
{
    bn_forward_infer(out, inp, gamma, beta, mmean, mvar, rows, c, eps, 1);
}

/* How a backward pass masks dout: not (no relu fused), by the relu's output y > 0, or by
 * the forward's output made again from the input, scale * xhat + shift > 0: the same
 * float operations as batchnorm_forward_apply_task's, so the same sign, and y never read. */
enum { BN_MASK_NONE = 0, BN_MASK_Y, BN_MASK_X };

/* dm = dout through the relu, n values of one row as mode says; every pointer at the
 * row's first channel (mean, invstd, scale, shift at channel 0). A loop of its own: beside
 * the double sums the float select did not vectorize. */
static inline __attribute__((always_inline)) void
bn_mask_row(float *restrict dm, const float *restrict dout, const float *restrict y,
            const float *restrict x, const float *restrict mean, const float *restrict invstd,
            const float *restrict scale, const float *restrict shift, size_t n, int mode)
{
    for (size_t j = 0; j < n; j++) {
        const float d = dout[j]; /* loaded whatever the mask: the select then vectorizes */
        if (mode == BN_MASK_Y) dm[j] = y[j] > 0.0f ? d : 0.0f;
        else dm[j] = scale[j] * ((x[j] - mean[j]) * invstd[j]) + shift[j] > 0.0f ? d : 0.0f;
    }
}

/* One row of w channels onto the sums of dout and dout * xhat. */
static inline __attribute__((always_inline)) void
bn_sums_row(double *restrict sd, double *restrict sdx, const float *restrict x,
            const float *restrict dout, const float *restrict mean, const float *restrict invstd,
            size_t w)
{
    for (size_t j = 0; j < w; j++) {
        sd[j] += dout[j];
        sdx[j] += (double)dout[j] * ((x[j] - mean[j]) * invstd[j]);
    }
}

/* The sums of task t's channels [j0, j0 + w) over every row in row order, dout masked as
 * mode says (a constant where this is inlined: each mask its own loops). */
static inline __attribute__((always_inline)) void
bn_sums_rows(const BnPass *p, double *sd, double *sdx, size_t j0, size_t w, float *dm, int mode)
{
    const size_t cc = p->c, rows = p->rows;
    const float *x = p->inp + j0, *dout = p->dout + j0, *mean = p->center + j0;
    const float *invstd = p->by + j0, *y = p->y ? p->y + j0 : NULL;
    const float *scale = p->scale ? p->scale + j0 : NULL, *shift = p->shift ? p->shift + j0 : NULL;
    for (size_t r = 0, at = 0; r < rows; r++, at += cc) {
        const float *d = dout + at;
        if (mode != BN_MASK_NONE) {
            bn_mask_row(dm, d, mode == BN_MASK_Y ? y + at : NULL, x + at, mean, invstd, scale,
                        shift, w, mode);
            d = dm;
        }
        bn_sums_row(sd, sdx, x + at, d, mean, invstd, w);
    }
}

/* sum dout and sum dout * xhat over the rows, of task t's channels (dout through the relu
 * where fused). */
BN_CLONES static void batchnorm_backward_sums_task(void *ctx, int t)
{
    BnPass *p = ctx;
    size_t j0, j1;
    bn_channels(p, t, &j0, &j1);
    const size_t w = j1 - j0;
    double *sd = p->acc + 2 * (size_t)t * p->stride, *sdx = sd + p->stride;
    float *dm = p->y || p->relu_x ? xmalloc(w * sizeof *dm) : NULL;
    for (size_t j = 0; j < w; j++) sd[j] = sdx[j] = 0.0;
    if (p->relu_x) bn_sums_rows(p, sd, sdx, j0, w, dm, BN_MASK_X);
    else if (p->y) bn_sums_rows(p, sd, sdx, j0, w, dm, BN_MASK_Y);
    else bn_sums_rows(p, sd, sdx, j0, w, dm, BN_MASK_NONE);
    for (size_t j = 0; j < w; j++) p->sum_d[j0 + j] = sd[j], p->sum_dx[j0 + j] = sdx[j];
    free(dm);
}

/* The input gradient over task t's rows, dout masked as mode says (as bn_sums_rows). */
static inline __attribute__((always_inline)) void bn_dinput_rows(const BnPass *p, int t, float *dm,
                                                                 int mode)
{
    const size_t cc = p->c, r0 = (size_t)t * p->part;
    const size_t r1 = r0 + p->part < p->rows ? r0 + p->part : p->rows;
    const double n = p->n;
    const double *restrict k = p->k, *restrict sd = p->sum_d, *restrict sdx = p->sum_dx;
    const float *restrict mean = p->center, *restrict invstd = p->by;
    for (size_t r = r0; r < r1; r++) {
        const float *restrict x = p->inp + r * cc, *restrict d = p->dout + r * cc;
        float *restrict din = p->out + r * cc;
        if (mode != BN_MASK_NONE) {
            bn_mask_row(dm, d, mode == BN_MASK_Y ? p->y + r * cc : NULL, x, mean, invstd, p->scale,
                        p->shift, cc, mode);
            d = dm;
        }
        for (size_t j = 0; j < cc; j++) {
            const double xhat = (double)(x[j] - mean[j]) * invstd[j];
            din[j] = (float)(k[j] * (n * d[j] - sd[j] - xhat * sdx[j]));
        }
    }
}

/* dinput = k * (rows * dout - sum_d - xhat * sum_dx) over task t's rows, in double (dout
 * through the relu where fused). */
BN_CLONES static void batchnorm_backward_dinput_task(void *ctx, int t)
{
    const BnPass *p = ctx;
    float *dm = p->y || p->relu_x ? xmalloc(p->c * sizeof *dm) : NULL;
    if (p->relu_x) bn_dinput_rows(p, t, dm, BN_MASK_X);
    else if (p->y) bn_dinput_rows(p, t, dm, BN_MASK_Y);
    else bn_dinput_rows(p, t, dm, BN_MASK_NONE);
    free(dm);
}

/* batchnorm_backward_sync, and with relu_x batchnorm_backward_relu_sync (the relu's mask
 * from inp, beta and the statistics; y NULL then). */
static int bn_backward(float *dinput, float *dgamma, float *dbeta, const float *dout,
                       const float *y, int relu_x, const float *inp, const float *mean,
                       const float *invstd, const float *gamma, const float *beta, size_t rows,
                       int c, const BnSync *sync)
{
    const size_t cc = (size_t)c;
    /* sum dout, sum dout * xhat, then k (the rows before it, for a sync) */
    double *sums = xmalloc((3 * cc + 1) * sizeof *sums);
    float *sc = relu_x ? xmalloc(2 * cc * sizeof *sc) : NULL;
    int rc = 0;
    if (sc) bn_affine(sc, gamma, beta, cc);
    BnPass p = {.rows = rows,
                .c = cc,
                .inp = inp,
                .dout = dout,
                .y = y,
                .relu_x = relu_x,
                .out = dinput,
                .center = mean,
                .by = invstd,
                .scale = sc,
                .shift = sc ? sc + cc : NULL,
                .sum_d = sums,
                .sum_dx = sums + cc,
                .k = sums + 2 * cc,
                .n = (double)rows};
    bn_run(&p, cc, BN_MIN_CHANNELS, 1, batchnorm_backward_sums_task);
    sums[2 * cc] = (double)rows;
    if (sync && (rc = sync->sum(sync->ctx, sums, 2 * cc + 1))) goto out;
    p.n = sums[2 * cc];
    /* the gradient all-reduce sums the ranks' gamma and beta gradients: each rank's own
     * share, or synchronized the global batch's from the first rank alone, which sums
     * exactly into them */
    const int zero = sync && !sync->first;
    if (dbeta)
        for (size_t j = 0; j < cc; j++) dbeta[j] = zero ? 0.0f : (float)sums[j];
    if (dgamma)
        for (size_t j = 0; j < cc; j++) dgamma[j] = zero ? 0.0f : (float)sums[cc + j];
    if (dinput) {
        for (size_t j = 0; j < cc; j++)
            sums[2 * cc + j] = (gamma ? gamma[j] : 1.0) * invstd[j] / p.n;
        bn_run(&p, rows, 1, 0, batchnorm_backward_dinput_task);
    }
out:
    free(sc);
    free(sums);
    return rc;
}

int batchnorm_backward_sync(float *dinput, float *dgamma, float *dbeta, const float *dout,
                            const float *y, const float *inp, const float *mean,
                            const float *invstd, const float *gamma, size_t rows, int c,
                            const BnSync *sync)
{
    return bn_backward(dinput, dgamma, dbeta, dout, y, 0, inp, mean, invstd, gamma, NULL, rows, c,
                       sync);
}

int batchnorm_backward_relu_sync(float *dinput, float *dgamma, float *dbeta, const float *dout,
                                 const float *inp, const float *mean, const float *invstd,
                                 const float *gamma, const float *beta, size_t rows, int c,
                                 const BnSync *sync)
{
    return bn_backward(dinput, dgamma, dbeta, dout, NULL, 1, inp, mean, invstd, gamma, beta, rows,
                       c, sync);
}

void batchnorm_backward(float *dinput, float *dgamma, float *dbeta, const float *dout,
                        const float *inp, const float *mean, const float *invstd,
                        const float *gamma, size_t rows, int c)
{
    (void)batchnorm_backward_sync(dinput, dgamma, dbeta, dout, NULL, inp, mean, invstd, gamma, rows,
                                  c, NULL); /* no sync: nothing can fail */
}

void batchnorm_backward_relu(float *dinput, float *dgamma, float *dbeta, const float *dout,
                             const float *out, const float *inp, const float *mean,
                             const float *invstd, const float *gamma, size_t rows, int c)
{
    (void)batchnorm_backward_sync(dinput, dgamma, dbeta, dout, out, inp, mean, invstd, gamma, rows,
                                  c, NULL);
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
