/* Finite-difference gradient checks of every layer, activation and loss, and of a whole
 * model (conv same/stride 2, conv valid, maxpool, dense, softmax, L2) through model_step.
 * Objective: L = sum(out * R) for a fixed random R, so dout = R. Central differences in
 * float with eps 1e-3 (2e-3 for the loss/model checks, accumulated in double); an
 * entry passes when |analytic - numeric| <= 2e-3 + 2e-2 |numeric|. */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>
#include <cmocka.h>

#include "assert_close.h"
#include "collective.h"
#include "gemm.h"
#include "layers.h"
#include "loss.h"
#include "model.h"
#include "util.h"

#define EPS 1e-3f

static uint64_t rng = 42;

static float *rand_array(size_t n, float scale)
{
    float *a = malloc(n * sizeof *a);
    for (size_t i = 0; i < n; i++) a[i] = (2.0f * util_rand_float(&rng) - 1.0f) * scale;
    return a;
}

static double dot(const float *a, const float *b, size_t n)
{
    double s = 0.0;
    for (size_t i = 0; i < n; i++) s += (double)a[i] * b[i];
    return s;
}

typedef double (*Objective)(void *ctx);

/* Compares analytic[i] with the central difference of f in x[i], for every i. */
static void check_grad(const char *what, float *x, const float *analytic, size_t n, Objective f,
                       void *ctx, float eps)
{
    int bad = 0;
    for (size_t i = 0; i < n; i++) {
        float keep = x[i];
        x[i] = keep + eps;
        double up = f(ctx);
        x[i] = keep - eps;
        double down = f(ctx);
        x[i] = keep;
        double num = (up - down) / (2.0 * eps);
        if (fabs(analytic[i] - num) > 2e-3 + 2e-2 * fabs(num)) {
            if (bad++ < 5)
                print_message("# %s[%zu]: analytic %.6f numeric %.6f\n", what, i, analytic[i], num);
        }
    }
    if (bad)
        fail_msg("%s: %d of %zu gradient entries differ from finite differences", what, bad, n);
}

/* ---- conv2d ---- */
typedef struct {
    ConvGeom g;
    int b;
    float *in, *w, *bias, *out, *col, *r;
} ConvCase;

static double conv_obj(void *p)
{
    ConvCase *c = p;
    conv2d_forward(c->out, c->col, c->in, c->w, c->bias, &c->g, c->b);
    return dot(c->out, c->r, (size_t)c->b * c->g.oh * c->g.ow * c->g.f);
}

static void conv_case(int h, int w, int ch, int k, int f, int stride, int same)
{
    ConvCase c = {.b = 2};
    assert_int_equal(conv_geom_init(&c.g, h, w, ch, k, k, f, stride, stride, same), 0);
    size_t nin = (size_t)c.b * h * w * ch, nw = (size_t)k * k * ch * f,
           nout = (size_t)c.b * c.g.oh * c.g.ow * f, ncol = conv_scratch_size(&c.g, c.b);
    c.in = rand_array(nin, 1), c.w = rand_array(nw, 0.5f), c.bias = rand_array((size_t)f, 0.5f);
    c.r = rand_array(nout, 1), c.out = malloc(nout * 4), c.col = malloc(ncol * 4);
    float *din = malloc(nin * 4), *dw = malloc(nw * 4), *db = malloc((size_t)f * 4),
          *dcol = malloc(ncol * 4);
    conv_obj(&c);
    conv2d_backward(din, dw, db, dcol, c.r, c.in, c.w, &c.g, c.b);
    check_grad("conv dinput", c.in, din, nin, conv_obj, &c, EPS);
    check_grad("conv dweight", c.w, dw, nw, conv_obj, &c, EPS);
    check_grad("conv dbias", c.bias, db, (size_t)f, conv_obj, &c, EPS);
    free(c.in), free(c.w), free(c.bias), free(c.r), free(c.out), free(c.col);
    free(din), free(dw), free(db), free(dcol);
}

static void test_conv_valid(void **s)
{
    (void)s;
    conv_case(6, 5, 2, 3, 3, 1, 0);
}
static void test_conv_same_stride2(void **s)
{
    (void)s;
    conv_case(7, 6, 3, 3, 2, 2, 1);
}
static void test_conv_same_even_kernel(void **s)
{
    (void)s;
    conv_case(5, 5, 1, 2, 2, 1, 1);
}
/* Stride 1 with no more filters than channels: the input gradient is the convolution
 * of dout with the turned kernel (layers.h), valid, same and same with an even kernel
 * (its padding uneven). */
static void test_conv_dinput_turned_kernel(void **s)
{
    (void)s;
    const uint64_t keep = rng; /* a seed of its own: the later tests' draws stay */
    rng = 13;
    conv_case(6, 5, 4, 3, 4, 1, 0);
    conv_case(6, 5, 3, 3, 2, 1, 1);
    conv_case(5, 6, 3, 2, 2, 1, 1);
    rng = keep;
}

/* A convolution's operands drawn from a seed of their own (the other tests' draws stay
 * as they were: their finite differences are checked away from relu's kink on those),
 * and the buffers of one pass over b examples. */
typedef struct {
    size_t nin, nw, nout, ncol;
    float *in, *wt, *bias, *r;                 /* drawn: input, kernel, bias, dout */
    float *out, *col, *dcol, *din, *dw, *db, *d; /* a pass's */
} ConvData;

static void conv_data_buffers(ConvData *c, const ConvGeom *g, int b)
{
    *c = (ConvData){0};
    c->nin = (size_t)b * g->h * g->w * g->c, c->nw = (size_t)g->kh * g->kw * g->c * g->f;
    c->nout = (size_t)b * g->oh * g->ow * g->f, c->ncol = conv_scratch_size(g, b);
    c->out = malloc(c->nout * 4), c->col = malloc(c->ncol * 4), c->dcol = malloc(c->ncol * 4);
    c->din = malloc(c->nin * 4), c->dw = malloc(c->nw * 4), c->db = malloc((size_t)g->f * 4);
    c->d = malloc(c->nout * 4);
}

static ConvData conv_data(const ConvGeom *g, int b, uint64_t seed)
{
    ConvData c;
    conv_data_buffers(&c, g, b);
    const uint64_t keep = rng;
    rng = seed;
    c.in = rand_array(c.nin, 1), c.wt = rand_array(c.nw, 0.5f);
    c.bias = rand_array((size_t)g->f, 0.5f), c.r = rand_array(c.nout, 1);
    rng = keep;
    return c;
}

static void conv_data_free(ConvData *c)
{
    free(c->in), free(c->wt), free(c->bias), free(c->r), free(c->out), free(c->col);
    free(c->dcol), free(c->din), free(c->dw), free(c->db), free(c->d);
}

/* One pass over c's b examples from in (the plain or the relu-fused convolution), with
 * dout = r (relu: taken through the relu in c->d). */
static void conv_pass(ConvData *c, const float *in, const float *r, const ConvGeom *g, int b,
                      int relu)
{
    memcpy(c->d, r, c->nout * 4);
    if (relu) {
        conv2d_forward_relu(c->out, c->col, in, c->wt, c->bias, g, b);
        conv2d_backward_relu(c->din, c->dw, c->db, c->dcol, c->d, c->out, in, c->wt, g, b, 0);
    } else {
        conv2d_forward(c->out, c->col, in, c->wt, c->bias, g, b);
        conv2d_backward(c->din, c->dw, c->db, c->dcol, c->d, in, c->wt, g, b);
    }
}

/* The fused relu conv equals conv2d_forward + relu, and its backward equals relu's
 * gradient + conv2d_backward, on a strided same-padded case. */
static void test_conv_relu_fused(void **s)
{
    (void)s;
    ConvGeom g;
    const int b = 3;
    assert_int_equal(conv_geom_init(&g, 7, 6, 2, 3, 3, 4, 2, 2, 1), 0);
    ConvData c1 = conv_data(&g, b, 7), c2;
    conv_data_buffers(&c2, &g, b);
    c2.wt = c1.wt, c2.bias = c1.bias;
    const size_t nout = c1.nout, row = nout / (size_t)b;
    conv2d_forward(c1.out, c1.col, c1.in, c1.wt, c1.bias, &g, b);
    activation_forward(c1.out, (size_t)b, row, ACT_RELU);
    memcpy(c1.d, c1.r, nout * 4);
    activation_backward(c1.d, c1.out, NULL, (size_t)b, row, ACT_RELU);
    conv2d_backward(c1.din, c1.dw, c1.db, c1.dcol, c1.d, c1.in, c1.wt, &g, b);
    conv_pass(&c2, c1.in, c1.r, &g, b, 1);
    int zeros = 0;
    for (size_t i = 0; i < nout; i++) {
        assert_close_i(c1.out[i], c2.out[i], 1e-6f * (1.0f + fabsf(c1.out[i])), i);
        zeros += c2.out[i] == 0.0f;
    }
    assert_true(zeros > 0 && zeros < (int)nout); /* the relu cut some and kept some */
    for (size_t i = 0; i < nout; i++) assert_close_i(c1.d[i], c2.d[i], 0, i);
    for (size_t i = 0; i < c1.nin; i++) assert_close_i(c1.din[i], c2.din[i], 1e-5f, i);
    for (size_t i = 0; i < c1.nw; i++) assert_close_i(c1.dw[i], c2.dw[i], 1e-5f, i);
    for (int i = 0; i < g.f; i++) assert_close_i(c1.db[i], c2.db[i], 1e-5f, i);
    c2.wt = c2.bias = NULL; /* c1's */
    conv_data_free(&c1), conv_data_free(&c2);
}

/* A batch large enough to be cut into cache-sized blocks of examples (layers.c: 28x28
 * outputs of 40 filters make blocks of 2, so 5 examples run as 2+2+1) gives what the
 * examples give one at a time: outputs and input gradients per example, kernel and bias
 * gradients summed over them; for the plain and the relu-fused convolution. */
/* A batch run in blocks of examples equals its examples run one by one, with each way
 * of taking the input gradient: col2im (more filters than channels) and the turned
 * kernel (layers.h). */
static void conv_blocks_case(int hw, int ch, int f, int same)
{
    ConvGeom g;
    const int b = 5;
    assert_int_equal(conv_geom_init(&g, hw, hw, ch, 3, 3, f, 1, 1, same), 0);
    ConvData all = conv_data(&g, b, 11), one;
    conv_data_buffers(&one, &g, 1);
    one.wt = all.wt, one.bias = all.bias;
    const size_t pin = all.nin / b, pout = all.nout / b, nw = all.nw;
    double *dws = malloc(nw * sizeof *dws), *dbs = malloc((size_t)g.f * sizeof *dbs);
    for (int relu = 0; relu < 2; relu++) {
        conv_pass(&all, all.in, all.r, &g, b, relu);
        memset(dws, 0, nw * sizeof *dws), memset(dbs, 0, (size_t)g.f * sizeof *dbs);
        for (int n = 0; n < b; n++) {
            conv_pass(&one, all.in + n * pin, all.r + n * pout, &g, 1, relu);
            /* Not bit for bit: the library's product may take another kernel for the
             * rows at the edge of a block than for a lone example (OpenBLAS under
             * valgrind does, where the CPU it sees has no AVX-512). */
            for (size_t i = 0; i < pout; i++)
                assert_close_i(all.out[n * pout + i], one.out[i],
                               1e-5f * (1.0f + fabsf(one.out[i])), i);
            for (size_t i = 0; i < pin; i++)
                assert_close_i(all.din[n * pin + i], one.din[i], 1e-5f * (1.0f + fabsf(one.din[i])),
                               i);
            for (size_t i = 0; i < nw; i++) dws[i] += one.dw[i];
            for (int i = 0; i < g.f; i++) dbs[i] += one.db[i];
        }
        for (size_t i = 0; i < nw; i++)
            if (fabs(all.dw[i] - dws[i]) > 1e-4 * (1.0 + fabs(dws[i])))
                fail_msg("relu %d: dweight[%zu] %g, per example %g", relu, i, all.dw[i], dws[i]);
        for (int i = 0; i < g.f; i++)
            if (fabs(all.db[i] - dbs[i]) > 1e-4 * (1.0 + fabs(dbs[i])))
                fail_msg("relu %d: dbias[%d] %g, per example %g", relu, i, all.db[i], dbs[i]);
    }
    one.wt = one.bias = NULL; /* all's */
    free(dws), free(dbs);
    conv_data_free(&all), conv_data_free(&one);
}

static void test_conv_blocks_equal_examples(void **s)
{
    (void)s;
    conv_blocks_case(30, 2, 40, 0);
    conv_blocks_case(20, 8, 6, 1);
}

/* Winograd F(2x2, 3x3) (ConvAlgo) against im2col on the same operands: the outputs,
 * input and kernel gradients agree within float32 rounding (relative to the largest
 * value, since a sum near zero may cancel), and the bias gradients, which both take the
 * same way, are the same bits. Odd and even sizes, same and valid padding, more and
 * fewer filters than channels, the CIFAR model's sizes. Prints the largest differences
 * found (docs/design.md quotes them). */
static void wino_case(int h, int w, int ch, int f, int same, int b, double abs_max[3],
                      double rel_max[3])
{
    ConvGeom g;
    assert_int_equal(conv_geom_init(&g, h, w, ch, 3, 3, f, 1, 1, same), 0);
    conv_set_algo(CONV_WINOGRAD); /* the scratch sized for it holds im2col's too */
    ConvData ref = conv_data(&g, b, 17), win;
    conv_data_buffers(&win, &g, b);
    win.wt = ref.wt, win.bias = ref.bias;
    conv_set_algo(CONV_IM2COL);
    conv_pass(&ref, ref.in, ref.r, &g, b, 0);
    conv_set_algo(CONV_WINOGRAD);
    conv_pass(&win, ref.in, ref.r, &g, b, 0);
    conv_set_algo(CONV_AUTO);
    const float *got[3] = {win.out, win.din, win.dw}, *want[3] = {ref.out, ref.din, ref.dw};
    const size_t n[3] = {ref.nout, ref.nin, ref.nw};
    for (int k = 0; k < 3; k++) {
        double top = 0.0, diff = 0.0;
        for (size_t i = 0; i < n[k]; i++) top = fmax(top, fabs(want[k][i]));
        for (size_t i = 0; i < n[k]; i++) {
            assert_close_i(got[k][i], want[k][i], 1e-5 * (1.0 + top), i);
            diff = fmax(diff, fabs((double)got[k][i] - want[k][i]));
        }
        abs_max[k] = fmax(abs_max[k], diff);
        rel_max[k] = fmax(rel_max[k], diff / top);
    }
    for (int i = 0; i < f; i++) assert_close_i(win.db[i], ref.db[i], 0, i);
    win.wt = win.bias = NULL; /* ref's */
    conv_data_free(&ref), conv_data_free(&win);
}

static void test_conv_winograd_matches_im2col(void **s)
{
    (void)s;
    double abs_max[3] = {0}, rel_max[3] = {0};
    wino_case(7, 5, 1, 1, 1, 3, abs_max, rel_max);
    wino_case(7, 5, 3, 2, 0, 3, abs_max, rel_max);
    wino_case(5, 9, 8, 16, 1, 3, abs_max, rel_max);
    wino_case(9, 7, 16, 8, 0, 3, abs_max, rel_max);
    wino_case(4, 6, 5, 3, 1, 2, abs_max, rel_max);
    wino_case(1, 3, 4, 4, 1, 2, abs_max, rel_max);
    wino_case(3, 3, 6, 5, 0, 2, abs_max, rel_max);
    wino_case(32, 32, 32, 32, 1, 2, abs_max, rel_max);
    wino_case(8, 8, 128, 128, 1, 2, abs_max, rel_max);
    const char *what[3] = {"output", "dinput", "dweight"};
    for (int k = 0; k < 3; k++)
        print_message("# winograd vs im2col, %s: max abs diff %.3g, max diff / max |value| %.3g\n",
                      what[k], abs_max[k], rel_max[k]);
}

/* Winograd's gradients against finite differences, and a batch in blocks against its
 * examples one by one (the relu-fused passes too), as for im2col above. */
static void test_conv_winograd_gradients(void **s)
{
    (void)s;
    const uint64_t keep = rng;
    rng = 19;
    conv_set_algo(CONV_WINOGRAD);
    conv_case(6, 5, 4, 3, 4, 1, 0);
    conv_case(7, 5, 3, 3, 2, 1, 1);
    conv_case(5, 5, 2, 3, 3, 1, 1);
    conv_blocks_case(20, 8, 6, 1);
    conv_blocks_case(9, 3, 10, 0);
    conv_set_algo(CONV_AUTO);
    rng = keep;
}

static void test_conv_algo_parse(void **s)
{
    (void)s;
    ConvAlgo a = CONV_IM2COL;
    assert_int_equal(conv_algo_parse(NULL, &a), 0);
    assert_int_equal(a, CONV_AUTO);
    assert_int_equal(conv_algo_parse("winograd", &a), 0);
    assert_int_equal(a, CONV_WINOGRAD);
    assert_int_equal(conv_algo_parse("im2col", &a), 0);
    assert_int_equal(a, CONV_IM2COL);
    assert_int_equal(conv_algo_parse("", &a), 0);
    assert_int_equal(a, CONV_AUTO);
    assert_int_equal(conv_algo_parse("fft", &a), -EINVAL);
}

static void test_conv_geometry(void **s)
{
    (void)s;
    ConvGeom g;
    assert_int_equal(conv_geom_init(&g, 28, 28, 1, 3, 3, 32, 1, 1, 0), 0);
    assert_int_equal(g.oh, 26);
    assert_int_equal(conv_geom_init(&g, 7, 6, 1, 3, 3, 1, 2, 2, 1), 0);
    assert_int_equal(g.oh, 4); /* ceil(7/2) */
    assert_int_equal(g.ow, 3);
    assert_int_equal(g.pad_top, 1); /* (4-1)*2+3-7 = 2 -> 1 before, 1 after */
    assert_int_equal(g.pad_left, 0); /* (3-1)*2+3-6 = 1 -> 0 before, 1 after (TF puts it last) */
    assert_int_equal(conv_geom_init(&g, 2, 2, 1, 3, 3, 1, 1, 1, 0), -22);
}

/* ---- dense ---- */
typedef struct {
    int b, in, out;
    float *x, *w, *bias, *y, *r;
} DenseCase;

static double dense_obj(void *p)
{
    DenseCase *c = p;
    dense_forward(c->y, c->x, c->w, c->bias, c->b, c->in, c->out);
    return dot(c->y, c->r, (size_t)c->b * c->out);
}

static void test_dense(void **s)
{
    (void)s;
    DenseCase c = {.b = 3, .in = 7, .out = 4};
    c.x = rand_array(21, 1), c.w = rand_array(28, 1), c.bias = rand_array(4, 1);
    c.r = rand_array(12, 1), c.y = malloc(12 * 4);
    float dx[21], dw[28], db[4];
    dense_obj(&c);
    dense_backward(dx, dw, db, c.r, c.x, c.w, c.b, c.in, c.out, 0);
    check_grad("dense dinput", c.x, dx, 21, dense_obj, &c, EPS);
    check_grad("dense dweight", c.w, dw, 28, dense_obj, &c, EPS);
    check_grad("dense dbias", c.bias, db, 4, dense_obj, &c, EPS);
    free(c.x), free(c.w), free(c.bias), free(c.r), free(c.y);
}

/* ---- maxpool ---- */
typedef struct {
    float *x, *y, *r;
    int32_t *am;
    PoolGeom g;
} PoolCase;

static double pool_obj(void *p)
{
    PoolCase *c = p;
    maxpool_forward(c->y, c->am, c->x, &c->g, 2);
    return dot(c->y, c->r, (size_t)2 * c->g.oh * c->g.ow * c->g.c);
}

/* Gradient check of a pool over a (2,5,4,3) batch, drawing from *stream. */
static void pool_case(int ph, int pw, int sh, int sw, int same, uint64_t *stream)
{
    PoolCase c;
    assert_int_equal(pool_geom_init(&c.g, 5, 4, 3, ph, pw, sh, sw, same), 0);
    size_t n = (size_t)2 * c.g.oh * c.g.ow * 3;
    c.x = malloc(120 * 4), c.y = malloc(n * 4), c.r = malloc(n * 4), c.am = malloc(n * 4);
    for (size_t i = 0; i < n; i++) c.r[i] = 2.0f * util_rand_float(stream) - 1.0f;
    /* distinct values 0.01 apart, shuffled, so no tie flips within eps */
    for (int i = 0; i < 120; i++) c.x[i] = 0.01f * (float)i;
    for (int i = 119; i > 0; i--) {
        int j = (int)util_rand_below(stream, (uint64_t)i + 1);
        float t = c.x[i];
        c.x[i] = c.x[j], c.x[j] = t;
    }
    float dx[120];
    pool_obj(&c);
    maxpool_backward(dx, c.r, c.am, &c.g, 2);
    check_grad("maxpool dinput", c.x, dx, 120, pool_obj, &c, EPS);
    free(c.x), free(c.y), free(c.r), free(c.am);
}

static void test_maxpool(void **s)
{
    (void)s;
    pool_case(2, 2, 2, 2, 0, &rng);
    /* the new cases draw from their own stream, so the tests after them see the data
     * they always saw */
    uint64_t own = 0x5eed;
    pool_case(3, 2, 2, 1, 1, &own); /* non-square, unequal strides, "same" */
    pool_case(2, 3, 1, 2, 0, &own);
}

/* TensorFlow's "same" padding for pooling: the smaller half of the padding on top/left,
 * padded cells never the maximum (worked by hand). */
static void test_maxpool_same_by_hand(void **s)
{
    (void)s;
    PoolGeom g;
    /* 3x3 (values 1..9), pool 2, stride 2: 2x2 out, padding 1 row/col at the bottom/right */
    assert_int_equal(pool_geom_init(&g, 3, 3, 1, 2, 2, 2, 2, 1), 0);
    assert_int_equal(g.oh, 2), assert_int_equal(g.ow, 2);
    assert_int_equal(g.pad_top, 0), assert_int_equal(g.pad_left, 0);
    float x[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9}, y[4];
    int32_t am[4];
    maxpool_forward(y, am, x, &g, 1);
    const float want[4] = {5, 6, 8, 9};
    for (int i = 0; i < 4; i++) assert_float_equal(y[i], want[i], 0);
    /* 4x4 with negative values, pool 3, stride 1: 4x4 out, one padded row/col each side */
    assert_int_equal(pool_geom_init(&g, 4, 4, 1, 3, 3, 1, 1, 1), 0);
    assert_int_equal(g.oh, 4), assert_int_equal(g.pad_top, 1), assert_int_equal(g.pad_left, 1);
    float x2[16], y2[16];
    int32_t am2[16];
    for (int i = 0; i < 16; i++) x2[i] = -(float)(i + 1); /* max = the upper-left cell */
    maxpool_forward(y2, am2, x2, &g, 1);
    for (int oy = 0; oy < 4; oy++)
        for (int ox = 0; ox < 4; ox++) {
            int y0 = oy > 0 ? oy - 1 : 0, x0 = ox > 0 ? ox - 1 : 0;
            assert_float_equal(y2[oy * 4 + ox], x2[y0 * 4 + x0], 0);
        }
    /* "valid" refuses a pool larger than the input; "same" takes it */
    assert_int_not_equal(pool_geom_init(&g, 2, 5, 1, 3, 1, 1, 1, 0), 0);
    assert_int_equal(pool_geom_init(&g, 2, 5, 1, 3, 1, 1, 1, 1), 0);
}

/* Ties: the gradient goes to the window's first maximum in rows-then-columns order, per
 * channel (as TensorFlow's MaxPoolGrad), whatever the other channels hold. One 2x2
 * window over 3 channels: all equal; the maximum last; two equal maxima, the second and
 * the fourth cells. */
static void test_maxpool_ties(void **s)
{
    (void)s;
    PoolGeom g;
    assert_int_equal(pool_geom_init(&g, 2, 2, 3, 2, 2, 2, 2, 0), 0);
    const float x[12] = {1, 0, 2, /* (0,0) */ 1, 1, 5, /* (0,1) */
                         1, 2, 3, /* (1,0) */ 1, 3, 5 /* (1,1) */};
    float y[3];
    int32_t am[3];
    maxpool_forward(y, am, x, &g, 1);
    const float want[3] = {1, 3, 5};
    const int32_t want_at[3] = {0, 10, 5};
    for (int i = 0; i < 3; i++) {
        assert_float_equal(y[i], want[i], 0);
        assert_int_equal(am[i], want_at[i]);
    }
}

/* ---- dropout ---- */
typedef struct {
    float *x, *y, *mask, *r;
} DropCase;

static double drop_obj(void *p)
{
    DropCase *c = p;
    uint64_t st = 99;
    memcpy(c->y, c->x, 50 * 4);
    dropout_forward(c->y, c->mask, 50, 0.3f, &st);
    return dot(c->y, c->r, 50);
}

static void test_dropout(void **s)
{
    (void)s;
    DropCase c = {
        .x = rand_array(50, 1), .y = malloc(200), .mask = malloc(200), .r = rand_array(50, 1)};
    drop_obj(&c);
    int zeros = 0;
    for (int i = 0; i < 50; i++) {
        zeros += c.mask[i] == 0.0f;
        if (c.mask[i] != 0.0f) assert_float_equal(c.mask[i], 1.0f / 0.7f, 1e-6);
    }
    assert_in_range(zeros, 5, 30); /* rate 0.3 of 50 */
    float d[50];
    memcpy(d, c.r, sizeof d);
    dropout_backward(d, c.mask, 50);
    check_grad("dropout dinput", c.x, d, 50, drop_obj, &c, EPS);
    free(c.x), free(c.y), free(c.mask), free(c.r);
}

/* ---- activations ---- */
typedef struct {
    float *x, *y, *r;
    Activation act;
} ActCase;

static double act_obj(void *p)
{
    ActCase *c = p;
    memcpy(c->y, c->x, 24 * 4);
    activation_forward(c->y, 4, 6, c->act);
    return dot(c->y, c->r, 24);
}

static void act_case(Activation act)
{
    ActCase c = {.x = rand_array(24, 2), .y = malloc(96), .r = rand_array(24, 1), .act = act};
    for (int i = 0; i < 24; i++)
        if (fabsf(c.x[i]) < 0.1f) c.x[i] = 0.5f; /* keep relu, elu away from their kinks */
    float d[24];
    act_obj(&c);
    memcpy(d, c.r, sizeof d);
    activation_backward(d, c.y, c.x, 4, 6, act);
    check_grad(model_activation_name(act), c.x, d, 24, act_obj, &c, EPS);
    free(c.x), free(c.y), free(c.r);
}

static void test_relu(void **s)
{
    (void)s;
    act_case(ACT_RELU);
}
static void test_softmax(void **s)
{
    (void)s;
    act_case(ACT_SOFTMAX);
}
static void test_linear(void **s)
{
    (void)s;
    act_case(ACT_LINEAR);
}
static void test_sigmoid(void **s)
{
    (void)s;
    act_case(ACT_SIGMOID);
}
static void test_tanh(void **s)
{
    (void)s;
    act_case(ACT_TANH);
}
static void test_gelu(void **s)
{
    (void)s;
    act_case(ACT_GELU);
}
static void test_swish(void **s)
{
    (void)s;
    act_case(ACT_SWISH);
}
static void test_elu(void **s)
{
    (void)s;
    act_case(ACT_ELU);
}
static void test_leaky_relu(void **s)
{
    (void)s;
    act_case(ACT_LEAKY_RELU);
}

/* Keras's definitions at a few points, by hand: gelu's erf form (not tanh's), elu's alpha
 * 1, leaky_relu's slope 0.2. */
static void test_activation_values(void **s)
{
    (void)s;
    static const struct {
        Activation act;
        float x, want;
    } cases[] = {
        {ACT_SIGMOID, 1.0f, 0.7310586f},
        {ACT_TANH, -0.5f, -0.46211716f},
        {ACT_GELU, 1.0f, 0.8413447f},
        {ACT_GELU, -2.0f, -0.04550026f},
        {ACT_SWISH, -1.0f, -0.26894142f},
        {ACT_ELU, -1.0f, -0.63212056f},
        {ACT_ELU, 2.0f, 2.0f},
        {ACT_LEAKY_RELU, -1.0f, -0.2f},
        {ACT_LEAKY_RELU, 3.0f, 3.0f},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        float x = cases[i].x;
        activation_forward(&x, 1, 1, cases[i].act);
        assert_close_i(x, cases[i].want, 1e-6, i);
    }
}

/* ---- losses ---- */
typedef struct {
    float *z;
    int32_t y[5];
    int probs;
} LossCase;

static double loss_obj(void *p)
{
    LossCase *c = p;
    return c->probs ? loss_sce_probs(NULL, NULL, c->z, c->y, 5, 4, 1.0f) * 0.25
                    : loss_sce_logits(NULL, NULL, c->z, c->y, 5, 4, 1.0f) * 0.25;
}

static void test_loss_logits(void **s)
{
    (void)s;
    LossCase c = {.z = rand_array(20, 3), .y = {0, 3, 2, 1, 3}};
    float d[20];
    int correct;
    loss_sce_logits(d, &correct, c.z, c.y, 5, 4, 0.25f);
    check_grad("sce logits", c.z, d, 20, loss_obj, &c, 2e-3f);
    /* stability: huge logits give a finite loss, ~0 when the label wins */
    float big[4] = {1000.0f, -1000.0f, 0.0f, 500.0f};
    int32_t y0 = 0, y1 = 1;
    assert_float_equal(loss_sce_logits(NULL, NULL, big, &y0, 1, 4, 1.0f), 0.0, 1e-6);
    assert_float_equal(loss_sce_logits(NULL, NULL, big, &y1, 1, 4, 1.0f), 2000.0, 1e-3);
    free(c.z);
}

static void test_loss_probs(void **s)
{
    (void)s;
    LossCase c = {.z = rand_array(20, 1), .y = {0, 3, 2, 1, 3}, .probs = 1};
    for (int i = 0; i < 20; i++) c.z[i] = 0.05f + 0.9f * fabsf(c.z[i]) / 4.0f;
    float d[20];
    loss_sce_probs(d, NULL, c.z, c.y, 5, 4, 0.25f);
    check_grad("sce probs", c.z, d, 20, loss_obj, &c, 2e-4f);
    /* a zero probability is clipped to 1e-7: a finite loss of -log(1e-7)-ish */
    float p[4] = {0.0f, 1.0f, 0.0f, 0.0f};
    int32_t y = 0;
    double l = loss_sce_probs(NULL, NULL, p, &y, 1, 4, 1.0f);
    assert_close_lt(l, 16.0, 1.0); /* finite, between 15 and 17 */
    /* a softmax output gives the same loss as its logits */
    float z[4] = {0.3f, -1.2f, 2.0f, 0.1f}, q[4];
    memcpy(q, z, sizeof q);
    activation_forward(q, 1, 4, ACT_SOFTMAX);
    int32_t y2 = 2;
    assert_float_equal(loss_sce_probs(NULL, NULL, q, &y2, 1, 4, 1.0f),
                       loss_sce_logits(NULL, NULL, z, &y2, 1, 4, 1.0f), 1e-5);
    free(c.z);
}

/* ---- a whole model through model_step ---- */
typedef struct {
    Model *m;
    float *x;
    int32_t y[3];
} ModelCase;

static double model_obj(void *p)
{
    ModelCase *c = p;
    StepStats st;
    model_step(c->m, c->x, c->y, 3, 3, 1, 0, NULL, NULL, &st);
    return st.loss;
}

typedef struct {
    size_t next_offset;
    int calls;
} ReadyLog;

static void on_ready(void *ctx, size_t offset, size_t count)
{
    ReadyLog *r = ctx;
    /* last layer first: every range ends where the previous one began */
    assert_int_equal(offset + count, r->next_offset);
    r->next_offset = offset;
    r->calls++;
}

static void test_model_grad(void **s)
{
    (void)s;
    const char *spec =
        "{\"input_shape\":[7,7,2],\"layers\":["
        "{\"type\":\"Conv2D\",\"filters\":3,\"kernel_size\":3,\"strides\":2,\"padding\":\"same\","
        "\"activation\":\"relu\",\"kernel_regularizer\":{\"l2\":0.01}},"
        "{\"type\":\"Conv2D\",\"filters\":2,\"kernel_size\":[2,1],\"activation\":\"relu\"},"
        "{\"type\":\"MaxPooling2D\",\"pool_size\":1},"
        "{\"type\":\"Flatten\"},"
        "{\"type\":\"Dropout\",\"rate\":0.5},"
        "{\"type\":\"Dense\",\"units\":4,\"activation\":\"softmax\",\"kernel_regularizer\":{\"l2\":"
        "0.01}}]}";
    char err[256];
    ModelCase c = {.y = {1, 3, 0}};
    assert_int_equal(model_create(&c.m, spec, 5, err, sizeof err), 0);
    c.m->dropout_enabled = 0;
    model_reserve(c.m, 3);
    c.x = rand_array(3 * 98, 1);
    for (size_t i = 0; i < c.m->num_params; i++) c.m->params[i] += 0.05f; /* biases off zero */
    ReadyLog log = {.next_offset = c.m->num_params};
    StepStats st;
    model_step(c.m, c.x, c.y, 3, 3, 1, 0, on_ready, &log, &st);
    assert_int_equal(log.calls, 3);
    assert_int_equal(log.next_offset, 0);
    float *g = malloc(c.m->num_params * sizeof *g);
    memcpy(g, c.m->grads, c.m->num_params * sizeof *g);
    check_grad("model params", c.m->params, g, c.m->num_params, model_obj, &c, 2e-3f);
    free(g);
    free(c.x);
    model_free(c.m);
}

/* floats of a JSON array of at most max numbers; returns how many */
static size_t json_floats(const cJSON *a, float *out, size_t max)
{
    size_t n = 0;
    for (const cJSON *v = a ? a->child : NULL; v && n < max; v = v->next)
        out[n++] = (float)v->valuedouble;
    return n;
}

/* Each activation's values and derivatives against Keras 3's and tf-keras's, by the name
 * each dialect's config gives it (reference/activations, gen_activations.py): within
 * 2e-6 + 2e-6 |value|, float32's last bits of different formulas. */
static void test_activations_against_keras(void **s)
{
    (void)s;
    FILE *f = fopen("trainer/tests/reference/activations/activations.json", "rb");
    if (!f) fail_msg("cannot open reference/activations/activations.json (run from the root)");
    static char text[1 << 17];
    size_t len = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[len] = '\0';
    cJSON *root = cJSON_Parse(text);
    assert_non_null(root);
    enum { N = 64 };
    float x[N], want[N], dwant[N], y[N], d[N];
    const size_t n = json_floats(cJSON_GetObjectItemCaseSensitive(root, "x"), x, N);
    assert_int_equal(n, 48);
    const char *dialects[] = {"keras3", "tfkeras"};
    int checked = 0;
    for (int k = 0; k < 2; k++) {
        const cJSON *acts = cJSON_GetObjectItemCaseSensitive(root, dialects[k]);
        for (const cJSON *a = acts ? acts->child : NULL; a; a = a->next) {
            Activation act;
            if (model_activation_parse(a->string, &act))
                fail_msg("%s: %s unknown", dialects[k], a->string);
            assert_int_equal(json_floats(cJSON_GetObjectItemCaseSensitive(a, "y"), want, N), n);
            assert_int_equal(json_floats(cJSON_GetObjectItemCaseSensitive(a, "dy"), dwant, N), n);
            memcpy(y, x, sizeof y);
            activation_forward(y, 1, n, act);
            for (size_t i = 0; i < n; i++) d[i] = 1.0f;
            activation_backward(d, y, x, 1, n, act);
            double worst = 0.0, dworst = 0.0;
            for (size_t i = 0; i < n; i++) {
                assert_close_i(y[i], want[i], 2e-6 + 2e-6 * fabsf(want[i]), i);
                assert_close_i(d[i], dwant[i], 2e-6 + 2e-6 * fabsf(dwant[i]), i);
                worst = fmax(worst, fabs((double)y[i] - want[i]));
                dworst = fmax(dworst, fabs((double)d[i] - dwant[i]));
            }
            print_message("# %s %s: largest difference %.2e, of the derivative %.2e\n", dialects[k],
                          a->string, worst, dworst);
            checked++;
        }
    }
    assert_int_equal(checked, 16);
    cJSON_Delete(root);
}

/* ---- average and global pooling ---- */
typedef struct {
    float *x, *y, *r;
    int32_t *am;
    PoolGeom g;
    int max;
} AvgCase;

static double avg_obj(void *p)
{
    AvgCase *c = p;
    if (c->max) maxpool_forward(c->y, c->am, c->x, &c->g, 2);
    else avgpool_forward(c->y, c->x, &c->g, 2);
    return dot(c->y, c->r, (size_t)2 * c->g.oh * c->g.ow * c->g.c);
}

/* Gradient check of average pooling (max: max pooling) of geometry g over a batch of 2. */
static void avg_case(PoolGeom g, int max)
{
    AvgCase c = {.g = g, .max = max};
    const size_t nin = (size_t)2 * g.h * g.w * g.c, n = (size_t)2 * g.oh * g.ow * g.c;
    c.x = rand_array(nin, 1), c.y = malloc(n * 4), c.r = rand_array(n, 1), c.am = malloc(n * 4);
    float *dx = malloc(nin * 4);
    avg_obj(&c);
    if (max) maxpool_backward(dx, c.r, c.am, &c.g, 2);
    else avgpool_backward(dx, c.r, &c.g, 2);
    check_grad(max ? "global maxpool dinput" : "avgpool dinput", c.x, dx, nin, avg_obj, &c, EPS);
    free(c.x), free(c.y), free(c.r), free(c.am), free(dx);
}

static void test_avgpool(void **s)
{
    (void)s;
    PoolGeom g;
    assert_int_equal(pool_geom_init(&g, 5, 4, 3, 2, 2, 2, 2, 0), 0);
    avg_case(g, 0);
    assert_int_equal(pool_geom_init(&g, 5, 4, 3, 3, 2, 2, 1, 1), 0); /* "same", edges */
    avg_case(g, 0);
    assert_int_equal(pool_geom_init(&g, 5, 4, 3, 5, 4, 1, 1, 0), 0); /* global */
    avg_case(g, 0);
    avg_case(g, 1);
    /* "same": a window at the edge averages only the cells inside the input (TensorFlow) */
    assert_int_equal(pool_geom_init(&g, 3, 3, 1, 2, 2, 2, 2, 1), 0);
    float x[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9}, y[4];
    avgpool_forward(y, x, &g, 1);
    const float want[4] = {3, 4.5f, 7.5f, 9};
    for (int i = 0; i < 4; i++) assert_close_i(y[i], want[i], 0, i);
}

/* AveragePooling2D, GlobalAveragePooling2D, GlobalMaxPooling2D and Rescaling against
 * Keras 3 and tf-keras (reference/layers, gen_layers.py): each config as a spec layer (so
 * the defaults, strides None and padding, are the spec's reading), its output and the
 * gradient of sum(y * r), within 1e-6. */
static void test_layers_against_keras(void **s)
{
    (void)s;
    FILE *f = fopen("trainer/tests/reference/layers/layers.json", "rb");
    if (!f) fail_msg("cannot open reference/layers/layers.json (run from the root)");
    static char text[1 << 18];
    size_t len = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[len] = '\0';
    cJSON *root = cJSON_Parse(text);
    assert_non_null(root);
    enum { NX = 2 * 5 * 6 * 3 };
    static float x[NX], y[NX], want[NX], r[NX], dx[NX], dwant[NX];
    assert_int_equal(json_floats(cJSON_GetObjectItemCaseSensitive(root, "x"), x, NX), NX);
    const char *dialects[] = {"keras3", "tfkeras"};
    int checked = 0;
    const cJSON *cases = cJSON_GetObjectItemCaseSensitive(root, "cases");
    for (const cJSON *c = cases ? cases->child : NULL; c; c = c->next) {
        cJSON *layer = cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(c, "config"), 1);
        const char *cls = cJSON_GetObjectItemCaseSensitive(c, "class")->valuestring;
        cJSON_AddStringToObject(layer, "type", cls);
        cJSON *spec = cJSON_CreateObject();
        cJSON_AddItemToObject(spec, "input_shape", cJSON_CreateIntArray((const int[]){5, 6, 3}, 3));
        cJSON *layers = cJSON_AddArrayToObject(spec, "layers");
        cJSON_AddItemToArray(layers, layer);
        cJSON_AddItemToArray(layers, cJSON_Parse("{\"type\":\"Flatten\"}"));
        cJSON_AddItemToArray(layers, cJSON_Parse("{\"type\":\"Dense\",\"units\":2}"));
        char *text_spec = cJSON_PrintUnformatted(spec), err[256];
        Model *m;
        if (model_create(&m, text_spec, 1, err, sizeof err)) fail_msg("%s: %s", text_spec, err);
        const Layer *l = &m->layers[0];
        const cJSON *shape = cJSON_GetObjectItemCaseSensitive(c, "out_shape");
        assert_int_equal(l->out_rank, cJSON_GetArraySize(shape) - 1);
        for (int d = 0; d < l->out_rank; d++)
            assert_int_equal(l->out_shape[d], cJSON_GetArrayItem(shape, d + 1)->valueint);
        const size_t n = json_floats(cJSON_GetObjectItemCaseSensitive(c, "r"), r, NX);
        assert_int_equal(n, 2 * l->out_size);
        static int32_t am[NX];
        const int max = l->type == LAYER_GLOBAL_MAXPOOL;
        if (l->type == LAYER_RESCALING) {
            rescaling_forward(y, x, NX, l->scale, l->offset);
            memcpy(dx, r, sizeof dx);
            rescaling_backward(dx, NX, l->scale);
        } else if (max) {
            maxpool_forward(y, am, x, &l->pool, 2);
            maxpool_backward(dx, r, am, &l->pool, 2);
        } else {
            avgpool_forward(y, x, &l->pool, 2);
            avgpool_backward(dx, r, &l->pool, 2);
        }
        for (int k = 0; k < 2; k++) {
            const cJSON *ref = cJSON_GetObjectItemCaseSensitive(c, dialects[k]);
            assert_int_equal(json_floats(cJSON_GetObjectItemCaseSensitive(ref, "y"), want, NX), n);
            assert_int_equal(json_floats(cJSON_GetObjectItemCaseSensitive(ref, "dx"), dwant, NX),
                             NX);
            for (size_t i = 0; i < n; i++) assert_close_i(y[i], want[i], 1e-6, i);
            for (size_t i = 0; i < NX; i++) assert_close_i(dx[i], dwant[i], 1e-6, i);
            print_message("# %s %s\n", dialects[k], m->signature);
            checked++;
        }
        model_free(m);
        free(text_spec);
        cJSON_Delete(spec);
    }
    assert_int_equal(checked, 16);
    cJSON_Delete(root);
}

/* Rescaling: its values by hand, its gradient by finite differences, alone and inside a
 * model (after a Conv2D, so its gradient is passed on). */
static double rescaling_obj(void *p)
{
    float **v = p, y[30];
    rescaling_forward(y, v[0], 30, -0.5f, 0.25f);
    return dot(y, v[1], 30);
}

static void test_rescaling(void **s)
{
    (void)s;
    float x[3] = {0, 255, 51}, y[3];
    rescaling_forward(y, x, 3, 1.0f / 255, -1.0f);
    assert_close(y[0], -1.0f, 0);
    assert_close(y[1], 255 * (1.0f / 255) - 1.0f, 0);
    assert_close(y[2], 51 * (1.0f / 255) - 1.0f, 0);
    float *in = rand_array(30, 1), *r = rand_array(30, 1), d[30];
    memcpy(d, r, sizeof d);
    rescaling_backward(d, 30, -0.5f);
    float *v[2] = {in, r};
    check_grad("rescaling dinput", in, d, 30, rescaling_obj, v, EPS);
    free(in), free(r);
    const char *spec = "{\"input_shape\":[5,5,2],\"layers\":["
                       "{\"type\":\"Rescaling\",\"scale\":0.5,\"offset\":0.1},"
                       "{\"type\":\"Conv2D\",\"filters\":3,\"kernel_size\":3},"
                       "{\"type\":\"Rescaling\",\"scale\":-2},"
                       "{\"type\":\"Flatten\"},"
                       "{\"type\":\"Dense\",\"units\":4}]}";
    char err[256];
    ModelCase c = {.y = {1, 3, 0}};
    if (model_create(&c.m, spec, 5, err, sizeof err)) fail_msg("%s", err);
    model_reserve(c.m, 3);
    c.x = rand_array(3 * 50, 1);
    StepStats st;
    model_step(c.m, c.x, c.y, 3, 3, 1, 0, NULL, NULL, &st);
    float *g = malloc(c.m->num_params * sizeof *g);
    memcpy(g, c.m->grads, c.m->num_params * sizeof *g);
    print_message("# %s\n", c.m->signature);
    check_grad("model params (rescaling)", c.m->params, g, c.m->num_params, model_obj, &c, 2e-3f);
    free(g);
    free(c.x);
    model_free(c.m);
}

/* Conv2D (relu folded in and not) and Dense without bias (use_bias false), through
 * model_step and model_step_sgd: the gradient of the kernels alone, and the SGD step
 * equals params - lr * that gradient. */
static void test_model_grad_no_bias(void **s)
{
    (void)s;
    const char *spec =
        "{\"input_shape\":[6,6,2],\"layers\":["
        "{\"type\":\"Conv2D\",\"filters\":3,\"kernel_size\":3,\"activation\":\"relu\","
        "\"use_bias\":false},"
        "{\"type\":\"Conv2D\",\"filters\":2,\"kernel_size\":2,\"use_bias\":false},"
        "{\"type\":\"Flatten\"},"
        "{\"type\":\"Dense\",\"units\":5,\"activation\":\"tanh\",\"use_bias\":false},"
        "{\"type\":\"Dense\",\"units\":4}]}";
    char err[256];
    ModelCase c = {.y = {1, 3, 0}};
    if (model_create(&c.m, spec, 5, err, sizeof err)) fail_msg("%s", err);
    assert_int_equal(c.m->num_params, 3 * 3 * 2 * 3 + 2 * 2 * 3 * 2 + 18 * 5 + 5 * 4 + 4);
    model_reserve(c.m, 3);
    c.x = rand_array(3 * 72, 1);
    StepStats st;
    model_step(c.m, c.x, c.y, 3, 3, 1, 0, NULL, NULL, &st);
    const size_t n = c.m->num_params;
    float *g = malloc(n * sizeof *g), *before = malloc(n * sizeof *g);
    memcpy(g, c.m->grads, n * sizeof *g);
    print_message("# %s\n", c.m->signature);
    check_grad("model params (no bias)", c.m->params, g, n, model_obj, &c, 2e-3f);
    memcpy(before, c.m->params, n * sizeof *g);
    model_step_sgd(c.m, c.x, c.y, 3, 0, 0.1f, &st);
    for (size_t i = 0; i < n; i++) assert_close_i(c.m->params[i], before[i] - 0.1f * g[i], 1e-5, i);
    free(g);
    free(before);
    free(c.x);
    model_free(c.m);
}

/* L1, L2 and L1L2 kernel regularizers through model_step (the loss's regularization
 * term by hand, its gradient by finite differences, with 2 replicas: both scaled by
 * 1/replicas) and model_step_sgd (a Dense with an L1 term is not folded). Kernels are
 * kept off 0, where |w| has no derivative. */
static double model_obj_2(void *p)
{
    ModelCase *c = p;
    StepStats st;
    model_step(c->m, c->x, c->y, 3, 3, 2, 0, NULL, NULL, &st);
    return st.loss;
}

static void test_model_grad_l1(void **s)
{
    (void)s;
    const char *spec =
        "{\"input_shape\":[5,5,1],\"layers\":["
        "{\"type\":\"Conv2D\",\"filters\":2,\"kernel_size\":3,\"activation\":\"relu\","
        "\"kernel_regularizer\":{\"l1\":0.05}},"
        "{\"type\":\"Flatten\"},"
        "{\"type\":\"Dense\",\"units\":4,\"kernel_regularizer\":{\"l1\":0.02,\"l2\":0.03}},"
        "{\"type\":\"Dense\",\"units\":3,\"kernel_regularizer\":{\"l2\":0.01}}]}";
    char err[256];
    ModelCase c = {.y = {1, 2, 0}};
    if (model_create(&c.m, spec, 5, err, sizeof err)) fail_msg("%s", err);
    const size_t n = c.m->num_params;
    for (size_t i = 0; i < n; i++)
        if (fabsf(c.m->params[i]) < 0.01f) c.m->params[i] = 0.02f;
    double want = 0.0;
    for (int i = 0; i < c.m->num_layers; i++) {
        const Layer *l = &c.m->layers[i];
        for (size_t j = 0; j < l->w_count; j++) {
            const double w = c.m->params[l->w_off + j];
            want += l->l1 * fabs(w) + l->l2 * w * w;
        }
    }
    assert_close(model_regularization(c.m), want, 1e-9);
    model_reserve(c.m, 3);
    c.x = rand_array(3 * 25, 1);
    StepStats st;
    model_step(c.m, c.x, c.y, 3, 3, 2, 0, NULL, NULL, &st);
    float *g = malloc(n * sizeof *g), *before = malloc(n * sizeof *g);
    memcpy(g, c.m->grads, n * sizeof *g);
    print_message("# %s\n", c.m->signature);
    check_grad("model params (L1, L1L2, L2)", c.m->params, g, n, model_obj_2, &c, 2e-3f);
    model_step(c.m, c.x, c.y, 3, 3, 1, 0, NULL, NULL, &st);
    memcpy(g, c.m->grads, n * sizeof *g);
    memcpy(before, c.m->params, n * sizeof *g);
    model_step_sgd(c.m, c.x, c.y, 3, 0, 0.1f, &st);
    for (size_t i = 0; i < n; i++) assert_close_i(c.m->params[i], before[i] - 0.1f * g[i], 1e-5, i);
    free(g);
    free(before);
    free(c.x);
    model_free(c.m);
}

/* The pooling layers inside a model, through model_step: average pooling with "same"
 * padding between convolutions, a global max and a global average (keepdims) pool, each
 * passing its gradient on. */
static void test_model_grad_pooling(void **s)
{
    (void)s;
    const char *specs[] = {
        "{\"input_shape\":[6,5,2],\"layers\":["
        "{\"type\":\"Conv2D\",\"filters\":3,\"kernel_size\":3,\"padding\":\"same\","
        "\"activation\":\"tanh\"},"
        "{\"type\":\"AveragePooling2D\",\"pool_size\":[3,2],\"strides\":[2,1],"
        "\"padding\":\"same\"},"
        "{\"type\":\"Conv2D\",\"filters\":3,\"kernel_size\":2},"
        "{\"type\":\"GlobalMaxPooling2D\"},"
        "{\"type\":\"Dense\",\"units\":4}]}",
        "{\"input_shape\":[6,5,2],\"layers\":["
        "{\"type\":\"Conv2D\",\"filters\":3,\"kernel_size\":2,\"activation\":\"sigmoid\"},"
        "{\"type\":\"AveragePooling2D\"},"
        "{\"type\":\"GlobalAveragePooling2D\",\"keepdims\":true},"
        "{\"type\":\"Flatten\"},"
        "{\"type\":\"Dense\",\"units\":4}]}"};
    for (int k = 0; k < 2; k++) {
        char err[256];
        ModelCase c = {.y = {1, 3, 0}};
        if (model_create(&c.m, specs[k], 5, err, sizeof err)) fail_msg("%s", err);
        model_reserve(c.m, 3);
        c.x = rand_array(3 * 60, 1);
        for (size_t i = 0; i < c.m->num_params; i++) c.m->params[i] += 0.05f;
        StepStats st;
        model_step(c.m, c.x, c.y, 3, 3, 1, 0, NULL, NULL, &st);
        float *g = malloc(c.m->num_params * sizeof *g);
        memcpy(g, c.m->grads, c.m->num_params * sizeof *g);
        print_message("# %s\n", c.m->signature);
        check_grad("model params (pooling)", c.m->params, g, c.m->num_params, model_obj, &c, 2e-3f);
        free(g);
        free(c.x);
        model_free(c.m);
    }
}

/* The activations whose gradient needs their input (gelu, swish) on Conv2D and Dense,
 * and the others, through model_step: the kept pre-activations are the right ones. */
static void test_model_grad_activations(void **s)
{
    (void)s;
    const char *spec =
        "{\"input_shape\":[5,5,2],\"layers\":["
        "{\"type\":\"Conv2D\",\"filters\":3,\"kernel_size\":3,\"activation\":\"gelu\"},"
        "{\"type\":\"Conv2D\",\"filters\":2,\"kernel_size\":2,\"activation\":\"elu\"},"
        "{\"type\":\"Flatten\"},"
        "{\"type\":\"Dense\",\"units\":5,\"activation\":\"swish\"},"
        "{\"type\":\"Dense\",\"units\":5,\"activation\":\"tanh\"},"
        "{\"type\":\"Dense\",\"units\":5,\"activation\":\"leaky_relu\"},"
        "{\"type\":\"Dense\",\"units\":4,\"activation\":\"sigmoid\"},"
        "{\"type\":\"Dense\",\"units\":4,\"activation\":\"softmax\"}]}";
    char err[256];
    ModelCase c = {.y = {1, 3, 0}};
    assert_int_equal(model_create(&c.m, spec, 5, err, sizeof err), 0);
    assert_int_equal(c.m->layers[3].act, ACT_SWISH);
    model_reserve(c.m, 3);
    assert_non_null(c.m->pre[0]);
    assert_null(c.m->pre[1]);
    assert_non_null(c.m->pre[3]);
    c.x = rand_array(3 * 50, 1);
    for (size_t i = 0; i < c.m->num_params; i++) c.m->params[i] += 0.05f;
    StepStats st;
    model_step(c.m, c.x, c.y, 3, 3, 1, 0, NULL, NULL, &st);
    float *g = malloc(c.m->num_params * sizeof *g);
    memcpy(g, c.m->grads, c.m->num_params * sizeof *g);
    check_grad("model params (every activation)", c.m->params, g, c.m->num_params, model_obj, &c,
               2e-3f);
    free(g);
    free(c.x);
    model_free(c.m);
}

/* The Activation (on a rank-3 output: softmax per last axis), ReLU and LeakyReLU layers
 * through model_step. */
static void test_model_grad_activation_layers(void **s)
{
    (void)s;
    const char *spec = "{\"input_shape\":[5,5,2],\"layers\":["
                       "{\"type\":\"Conv2D\",\"filters\":3,\"kernel_size\":2},"
                       "{\"type\":\"LeakyReLU\",\"negative_slope\":0.1},"
                       "{\"type\":\"Conv2D\",\"filters\":3,\"kernel_size\":2},"
                       "{\"type\":\"Activation\",\"activation\":\"softmax\"},"
                       "{\"type\":\"Flatten\"},"
                       "{\"type\":\"Dense\",\"units\":6},"
                       "{\"type\":\"ReLU\"},"
                       "{\"type\":\"Dense\",\"units\":6},"
                       "{\"type\":\"Activation\",\"activation\":\"gelu\"},"
                       "{\"type\":\"Dense\",\"units\":4}]}";
    char err[256];
    ModelCase c = {.y = {1, 3, 0}};
    if (model_create(&c.m, spec, 5, err, sizeof err)) fail_msg("%s", err);
    model_reserve(c.m, 3);
    c.x = rand_array(3 * 50, 1);
    for (size_t i = 0; i < c.m->num_params; i++) c.m->params[i] += 0.05f;
    StepStats st;
    model_step(c.m, c.x, c.y, 3, 3, 1, 0, NULL, NULL, &st);
    /* the softmax layer normalised each pixel's 3 channels */
    const float *sm = c.m->acts[3];
    for (int p = 0; p < 3 * 9; p++)
        assert_float_equal(sm[3 * p] + sm[3 * p + 1] + sm[3 * p + 2], 1.0f, 1e-5);
    float *g = malloc(c.m->num_params * sizeof *g);
    memcpy(g, c.m->grads, c.m->num_params * sizeof *g);
    check_grad("model params (activation layers)", c.m->params, g, c.m->num_params, model_obj, &c,
               2e-3f);
    free(g);
    free(c.x);
    model_free(c.m);
}

/* Keras's Dense on a rank > 1 input maps the last axis (and a softmax normalises each
 * row); a non-square "same" pool: the whole model's gradient. */
static void test_model_grad_nd_dense_and_pool(void **s)
{
    (void)s;
    const char *spec =
        "{\"input_shape\":[6,5,2],\"layers\":["
        "{\"type\":\"MaxPooling2D\",\"pool_size\":[3,2],\"strides\":[2,1],\"padding\":\"same\"},"
        "{\"type\":\"Dense\",\"units\":3,\"activation\":\"relu\"},"
        "{\"type\":\"Reshape\",\"target_shape\":[15,3]},"
        "{\"type\":\"Dense\",\"units\":2,\"activation\":\"softmax\"},"
        "{\"type\":\"Flatten\"},"
        "{\"type\":\"Dense\",\"units\":4}]}";
    char err[256];
    ModelCase c = {.y = {1, 3, 0}};
    assert_int_equal(model_create(&c.m, spec, 5, err, sizeof err), 0);
    /* shapes: pool (3,5,2) -> Dense (3,5,3) -> (15,3) -> Dense (15,2) -> 30 -> 4 */
    assert_int_equal(c.m->layers[0].out_shape[0], 3);
    assert_int_equal(c.m->layers[0].out_shape[1], 5);
    assert_int_equal(c.m->layers[1].out_rank, 3);
    assert_int_equal(c.m->layers[1].out_shape[2], 3);
    assert_int_equal(c.m->layers[1].w_count, 2 * 3);
    assert_int_equal(c.m->layers[3].w_count, 3 * 2);
    assert_int_equal(c.m->layers[5].w_count, 30 * 4);
    assert_non_null(strstr(c.m->signature, "maxpool(3x2,s2x1,same)"));
    assert_non_null(strstr(c.m->signature, "dense(15x3->2,softmax"));
    model_reserve(c.m, 3);
    c.x = rand_array(3 * 60, 1);
    for (size_t i = 0; i < c.m->num_params; i++) c.m->params[i] += 0.05f;
    StepStats st;
    model_step(c.m, c.x, c.y, 3, 3, 1, 0, NULL, NULL, &st);
    float *g = malloc(c.m->num_params * sizeof *g);
    memcpy(g, c.m->grads, c.m->num_params * sizeof *g);
    check_grad("model params (rank-3 Dense, same pool)", c.m->params, g, c.m->num_params, model_obj,
               &c, 2e-3f);
    /* the softmax Dense normalised each of its 15 rows per example */
    const float *sm = c.m->acts[3];
    for (int r = 0; r < 3 * 15; r++) assert_float_equal(sm[2 * r] + sm[2 * r + 1], 1.0f, 1e-5);
    free(g);
    free(c.x);
    model_free(c.m);
}

/* ---- BatchNormalization ---- */

/* The layer alone, training mode, on (rows, c) values: sum(out * r). */
typedef struct {
    float *in, *gamma, *beta, *out, *r, st[3 * 4];
    size_t rows;
    int c;
} BnCase;

static double bn_obj(void *p)
{
    BnCase *b = p;
    batchnorm_forward_train(b->out, b->st, b->st + b->c, b->st + 2 * b->c, b->in, b->gamma, b->beta,
                            b->rows, b->c, 1e-3f);
    return dot(b->out, b->r, b->rows * (size_t)b->c);
}

/* Its input, gamma and beta gradients (through the batch's statistics) against finite
 * differences, with scale and center and without. */
static void test_batchnorm_grad(void **s)
{
    (void)s;
    for (int plain = 0; plain < 2; plain++) {
        BnCase b = {.rows = 12, .c = 4};
        const size_t n = b.rows * 4;
        b.in = rand_array(n, 1), b.r = rand_array(n, 1), b.out = malloc(n * 4);
        b.gamma = plain ? NULL : rand_array(4, 1), b.beta = plain ? NULL : rand_array(4, 1);
        float *din = malloc(n * 4), dg[4], db[4];
        bn_obj(&b);
        batchnorm_backward(din, plain ? NULL : dg, plain ? NULL : db, b.r, b.in, b.st, b.st + 8,
                           b.gamma, b.rows, b.c);
        check_grad(plain ? "batchnorm dinput (no scale)" : "batchnorm dinput", b.in, din, n, bn_obj,
                   &b, EPS);
        if (!plain) {
            check_grad("batchnorm dgamma", b.gamma, dg, 4, bn_obj, &b, EPS);
            check_grad("batchnorm dbeta", b.beta, db, 4, bn_obj, &b, EPS);
        }
        free(b.in), free(b.r), free(b.out), free(b.gamma), free(b.beta), free(din);
    }
}

/* A model with BatchNormalization after a Conv2D (per channel over examples, rows and
 * columns; tanh after it, smooth where a relu's kinks would trip the differences) and
 * after a Dense (scale false), through model_step: the trainable
 * parameters' gradients are the finite differences' and the moving statistics', which
 * training does not read, are 0; on_ready hands every layer's whole slice, its state
 * included; the state slots hold the batch statistics divided by the replicas. */
static void test_model_grad_batchnorm(void **s)
{
    (void)s;
    const char *spec = "{\"input_shape\":[5,4,2],\"layers\":["
                       "{\"type\":\"Conv2D\",\"filters\":3,\"kernel_size\":2},"
                       "{\"type\":\"BatchNormalization\"},"
                       "{\"type\":\"Activation\",\"activation\":\"tanh\"},"
                       "{\"type\":\"Flatten\"},"
                       "{\"type\":\"Dense\",\"units\":5},"
                       "{\"type\":\"BatchNormalization\",\"scale\":false,\"momentum\":0.9},"
                       "{\"type\":\"Dense\",\"units\":4}]}";
    char err[256];
    ModelCase c = {.y = {1, 3, 0}};
    if (model_create(&c.m, spec, 5, err, sizeof err)) fail_msg("%s", err);
    model_reserve(c.m, 3);
    c.x = rand_array(3 * 40, 1);
    for (size_t i = 0; i < c.m->num_params; i++) c.m->params[i] += 0.05f;
    print_message("# %s\n", c.m->signature);
    const Layer *bn = &c.m->layers[1], *bn2 = &c.m->layers[5];
    assert_int_equal(bn->w_count, 3);
    assert_int_equal(bn->b_count, 3);
    assert_int_equal(bn->s_count, 6);
    assert_int_equal(bn2->w_count, 0);
    assert_int_equal(bn2->b_count, 5);
    assert_int_equal(bn2->s_count, 10);
    ReadyLog log = {.next_offset = c.m->num_params};
    StepStats st;
    model_step(c.m, c.x, c.y, 3, 3, 2, 0, on_ready, &log, &st);
    assert_int_equal(log.calls, 5);
    assert_int_equal(log.next_offset, 0);
    const float *stats = c.m->bnstats[1];
    for (int j = 0; j < 6; j++) assert_close_i(c.m->grads[bn->s_off + j], stats[j] / 2.0f, 0, j);
    model_step(c.m, c.x, c.y, 3, 3, 1, 0, NULL, NULL, &st);
    float *g = malloc(c.m->num_params * sizeof *g);
    memcpy(g, c.m->grads, c.m->num_params * sizeof *g);
    for (int i = 0; i < c.m->num_layers; i++)
        for (size_t j = 0; j < c.m->layers[i].s_count; j++) g[c.m->layers[i].s_off + j] = 0.0f;
    check_grad("model params (batchnorm)", c.m->params, g, c.m->num_params, model_obj, &c, 2e-3f);
    free(g);
    free(c.x);
    model_free(c.m);
}

/* Two ranks of two examples each: the moving statistics take the mean of the ranks'
 * batch statistics (model_update_moving after the sum), which every rank then holds,
 * and the state slots are zero again for the optimizer; evaluation uses them. */
static void test_batchnorm_moving_ranks(void **s)
{
    (void)s;
    const char *spec = "{\"input_shape\":[3,2],\"layers\":["
                       "{\"type\":\"BatchNormalization\",\"momentum\":0.75},"
                       "{\"type\":\"Flatten\"},"
                       "{\"type\":\"Dense\",\"units\":2}]}";
    char err[256];
    Model *m;
    if (model_create(&m, spec, 5, err, sizeof err)) fail_msg("%s", err);
    model_reserve(m, 4);
    float *x = rand_array(4 * 6, 1), sum[4] = {0}, want[4];
    const int32_t y[4] = {0, 1, 1, 0};
    const Layer *l = &m->layers[0];
    for (int r = 0; r < 2; r++) {
        StepStats st;
        model_step(m, x + r * 12, y + r * 2, 2, 4, 2, 0, NULL, NULL, &st);
        for (int j = 0; j < 4; j++) sum[j] += m->grads[l->s_off + j];
    }
    /* each rank's statistics by the layer itself, over its 2 x 3 rows */
    float st[2][6], out[12];
    for (int r = 0; r < 2; r++)
        batchnorm_forward_train(out, st[r], st[r] + 2, st[r] + 4, x + r * 12, NULL, NULL, 6, 2,
                                1e-3f);
    const float init[4] = {0.0f, 0.0f, 1.0f, 1.0f}; /* Keras's zeros and ones */
    for (int j = 0; j < 4; j++)
        want[j] = init[j] * 0.75f + (st[0][j] / 2.0f + st[1][j] / 2.0f) * 0.25f;
    memcpy(m->grads + l->s_off, sum, sizeof sum);
    model_update_moving(m);
    for (int j = 0; j < 4; j++) {
        assert_close_i(m->params[l->s_off + j], want[j], 0, j);
        assert_close_i(m->grads[l->s_off + j], 0.0f, 0, j);
    }
    StepStats ev;
    model_evaluate(m, x, y, 1, &ev);
    for (int k = 0; k < 6; k++) {
        const int j = k % 2;
        const float mv = m->params[l->s_off + 2 + j];
        assert_close_i(m->acts[0][k], (x[k] - m->params[l->s_off + j]) / sqrtf(mv + 1e-3f), 1e-6,
                       k);
    }
    free(x);
    model_free(m);
}

/* The passes run on the pool's threads: on 1 and on 3 threads the same bits, every
 * output, statistic and gradient; and with the relu fused in (batchnorm_*_relu) the same
 * bits as the batchnorm followed by activation_forward's and activation_backward's relu.
 * With gamma and beta and without, over enough values for the passes to be cut (more
 * than layers.c's BN_PARALLEL_MIN) and channels the threads do not divide evenly. */
static void test_batchnorm_threads_relu(void **s)
{
    (void)s;
    enum { ROWS = 1500, C = 37 };
    const size_t n = (size_t)ROWS * C, bytes = n * sizeof(float);
    float *x = rand_array(n, 2), *r = rand_array(n, 1), *gamma = rand_array(C, 1);
    float *beta = rand_array(C, 1), *mmean = rand_array(C, 1), *mvar = rand_array(C, 1);
    for (int j = 0; j < C; j++) mvar[j] = fabsf(mvar[j]) + 0.5f;
    float *out[2], *din[2], *inf[2], st[2][3 * C], dg[2][C], db[2][C];
    for (int t = 0; t < 2; t++)
        out[t] = malloc(bytes), din[t] = malloc(bytes), inf[t] = malloc(bytes);
    float *y = malloc(bytes), *dy = malloc(bytes);
    for (int affine = 0; affine < 2; affine++) {
        const float *g = affine ? gamma : NULL, *b = affine ? beta : NULL;
        for (int t = 0; t < 2; t++) {
            gemm_set_threads(t ? 3 : 1);
            batchnorm_forward_train(out[t], st[t], st[t] + C, st[t] + 2 * C, x, g, b, ROWS, C,
                                    1e-3f);
            batchnorm_backward(din[t], dg[t], db[t], r, x, st[t], st[t] + 2 * C, g, ROWS, C);
            batchnorm_forward_infer(inf[t], x, g, b, mmean, mvar, ROWS, C, 1e-3f);
        }
        assert_memory_equal(out[0], out[1], bytes);
        assert_memory_equal(st[0], st[1], sizeof st[0]);
        assert_memory_equal(din[0], din[1], bytes);
        assert_memory_equal(dg[0], dg[1], sizeof dg[0]);
        assert_memory_equal(db[0], db[1], sizeof db[0]);
        assert_memory_equal(inf[0], inf[1], bytes);

        /* the unfused reference: the batchnorm's output through the relu, and r back
         * through the relu then the batchnorm */
        memcpy(y, out[0], bytes);
        activation_forward(y, ROWS, C, ACT_RELU);
        memcpy(dy, r, bytes);
        activation_backward(dy, y, NULL, ROWS, C, ACT_RELU);
        batchnorm_backward(din[0], dg[0], db[0], dy, x, st[0], st[0] + 2 * C, g, ROWS, C);
        activation_forward(inf[0], ROWS, C, ACT_RELU);
        size_t cut = 0;
        for (size_t i = 0; i < n; i++) cut += y[i] == 0.0f;
        assert_true(cut > n / 4 && cut < 3 * n / 4); /* the relu cut some and kept some */
        for (int t = 0; t < 2; t++) {
            gemm_set_threads(t ? 3 : 1);
            batchnorm_forward_train_relu(out[1], st[1], st[1] + C, st[1] + 2 * C, x, g, b, ROWS, C,
                                         1e-3f);
            assert_memory_equal(out[1], y, bytes);
            assert_memory_equal(st[0], st[1], sizeof st[0]);
            batchnorm_backward_relu(din[1], dg[1], db[1], r, out[1], x, st[1], st[1] + 2 * C, g,
                                    ROWS, C);
            assert_memory_equal(din[0], din[1], bytes);
            assert_memory_equal(dg[0], dg[1], sizeof dg[0]);
            assert_memory_equal(db[0], db[1], sizeof db[0]);
            batchnorm_forward_infer_relu(inf[1], x, g, b, mmean, mvar, ROWS, C, 1e-3f);
            assert_memory_equal(inf[0], inf[1], bytes);
        }
        gemm_set_threads(1);
    }
    for (int t = 0; t < 2; t++) free(out[t]), free(din[t]), free(inf[t]);
    free(x), free(r), free(gamma), free(beta), free(mmean), free(mvar), free(y), free(dy);
}

/* batchnorm_backward_relu_sync, the relu's mask made again from the input, beta and the
 * statistics, gives the same bits as batchnorm_backward_relu reading the relu's output:
 * with and without gamma and beta, on 1 and 3 threads, channels in whole vectors and not
 * (layers.c's BN_LANES), over enough values for the passes to be cut. */
static void test_batchnorm_backward_relu_from_input(void **s)
{
    (void)s;
    enum { ROWS = 1500 };
    static const int widths[] = {37, 64};
    for (size_t wi = 0; wi < sizeof widths / sizeof *widths; wi++) {
        const int c = widths[wi];
        const size_t n = (size_t)ROWS * c, bytes = n * sizeof(float);
        float *x = rand_array(n, 2), *r = rand_array(n, 1), *gamma = rand_array(c, 1);
        float *beta = rand_array(c, 1), *y = malloc(bytes),
              *din[2] = {malloc(bytes), malloc(bytes)};
        float *st = malloc(3 * c * sizeof *st), *dg = malloc(2 * c * sizeof *dg);
        float *db = malloc(2 * c * sizeof *db);
        for (int affine = 0; affine < 2; affine++) {
            const float *g = affine ? gamma : NULL, *b = affine ? beta : NULL;
            for (int t = 0; t < 2; t++) {
                gemm_set_threads(t ? 3 : 1);
                batchnorm_forward_train_relu(y, st, st + c, st + 2 * c, x, g, b, ROWS, c, 1e-3f);
                size_t cut = 0;
                for (size_t i = 0; i < n; i++) cut += y[i] == 0.0f;
                assert_true(cut > n / 4 && cut < 3 * n / 4); /* the relu cut some, kept some */
                batchnorm_backward_relu(din[0], dg, db, r, y, x, st, st + 2 * c, g, ROWS, c);
                assert_int_equal(batchnorm_backward_relu_sync(din[1], dg + c, db + c, r, x, st,
                                                              st + 2 * c, g, b, ROWS, c, NULL),
                                 0);
                assert_memory_equal(din[0], din[1], bytes);
                assert_memory_equal(dg, dg + c, c * sizeof *dg);
                assert_memory_equal(db, db + c, c * sizeof *db);
            }
            gemm_set_threads(1);
        }
        free(x), free(r), free(gamma), free(beta), free(y), free(din[0]), free(din[1]);
        free(st), free(dg), free(db);
    }
}

/* Two ranks in one process for a synchronized BatchNormalization: each a thread, their
 * all-reduce of floats a sum in rank order through shared slots between barriers, under
 * coll_sum_doubles as the trainer's. */
enum { SYNC_RANKS = 2, SYNC_MAX = 1024 };
typedef struct {
    pthread_barrier_t bar;
    float slot[SYNC_RANKS][SYNC_MAX];
    int calls[SYNC_RANKS];
} SyncHub;
typedef struct {
    SyncHub *hub;
    int rank;
    size_t rows, c;
    const float *x, *dy, *gamma, *beta;
    float *out, *din, st[3 * 16], dg[16], db[16];
    int rc;
} SyncRank;

static int hub_allreduce(void *ctx, float *buf, size_t n, char *err, size_t errlen)
{
    SyncRank *r = ctx;
    SyncHub *h = r->hub;
    (void)err, (void)errlen;
    if (n > SYNC_MAX) return -E2BIG;
    memcpy(h->slot[r->rank], buf, n * sizeof *buf);
    pthread_barrier_wait(&h->bar);
    for (size_t i = 0; i < n; i++) {
        buf[i] = h->slot[0][i];
        for (int q = 1; q < SYNC_RANKS; q++) buf[i] += h->slot[q][i];
    }
    pthread_barrier_wait(&h->bar); /* every rank has read the slots */
    h->calls[r->rank]++;
    return 0;
}

static int hub_sum(void *ctx, double *v, size_t n)
{
    SyncRank *r = ctx;
    char err[64];
    return coll_sum_doubles(v, n, r->rank, SYNC_RANKS, hub_allreduce, r, err, sizeof err);
}

static void *sync_rank_main(void *arg)
{
    SyncRank *r = arg;
    const BnSync sync = {.sum = hub_sum, .ctx = r, .first = r->rank == 0};
    const size_t c = r->c;
    r->rc = batchnorm_forward_train_sync(r->out, r->st, r->st + c, r->st + 2 * c, r->x, r->gamma,
                                         r->beta, r->rows, (int)c, 1e-3f, 0, &sync, NULL);
    if (!r->rc)
        r->rc = batchnorm_backward_sync(r->din, r->dg, r->db, r->dy, NULL, r->x, r->st,
                                        r->st + 2 * c, r->gamma, r->rows, (int)c, &sync);
    return NULL;
}

/* A synchronized BatchNormalization on 2 ranks of 7 and 5 rows is the layer on the 12
 * rows at once: each rank's output and input gradient rows, the statistics (the same bits
 * on both ranks), and gamma and beta gradients that the first rank gives whole and the
 * other as zeros; 3 sums a step (the forward's two, the backward's one). Within 1e-6 +
 * 1e-6 |value|: the sums are added in another order (in double). Each rank alone, not
 * synchronized, gives other outputs, which the comparison would catch. */
/* A BatchNormalization after a Conv2D takes its statistics from the moments the
 * convolution wrote per example (conv2d_forward_moments): the same statistics and output
 * as its own two passes over the output, within the rounding of double sums, with and
 * without the relu folded into the convolution. The input is offset from zero (a large
 * bias), where a one-pass variance would lose digits. */
static void test_conv_moments_batchnorm(void **s)
{
    (void)s;
    ConvGeom g;
    const int b = 5;
    assert_int_equal(conv_geom_init(&g, 9, 7, 3, 3, 3, 6, 1, 1, 1), 0);
    for (int relu = 0; relu < 2; relu++) {
        ConvData cd = conv_data(&g, b, 17);
        for (int j = 0; j < g.f; j++) cd.bias[j] += 50.0f * (float)(j + 1);
        const size_t f = (size_t)g.f, rows = cd.nout / f;
        double *mom = malloc((size_t)b * 2 * f * sizeof *mom);
        conv2d_forward_moments(cd.out, mom, cd.col, cd.in, cd.wt, cd.bias, &g, b, relu);
        float *st1 = malloc(3 * f * 4), *st2 = malloc(3 * f * 4), *o1 = malloc(cd.nout * 4),
              *o2 = malloc(cd.nout * 4);
        const BnMoments bm = {.v = mom, .examples = (size_t)b};
        assert_int_equal(batchnorm_forward_train_sync(o1, st1, st1 + f, st1 + 2 * f, cd.out, NULL,
                                                      NULL, rows, g.f, 1e-3f, 0, NULL, NULL),
                         0);
        assert_int_equal(batchnorm_forward_train_sync(o2, st2, st2 + f, st2 + 2 * f, cd.out, NULL,
                                                      NULL, rows, g.f, 1e-3f, 0, NULL, &bm),
                         0);
        for (size_t j = 0; j < 3 * f; j++) assert_close_i(st1[j], st2[j], 1e-6f * fabsf(st1[j]), j);
        for (size_t i = 0; i < cd.nout; i++) assert_close_i(o1[i], o2[i], 1e-5f, i);
        free(mom), free(st1), free(st2), free(o1), free(o2);
        conv_data_free(&cd);
    }
}

static void test_batchnorm_synchronized(void **s)
{
    (void)s;
    enum { ROWS = 12, C = 5, SPLIT = 7 };
    float *x = rand_array(ROWS * C, 2), *dy = rand_array(ROWS * C, 1);
    float *gamma = rand_array(C, 1), *beta = rand_array(C, 1);
    for (int i = 0; i < ROWS * C; i++) x[i] += (float)(i % C); /* means far from 0 */
    float out[ROWS * C], din[ROWS * C], st[3 * C], dg[C], db[C];
    batchnorm_forward_train(out, st, st + C, st + 2 * C, x, gamma, beta, ROWS, C, 1e-3f);
    batchnorm_backward(din, dg, db, dy, x, st, st + 2 * C, gamma, ROWS, C);

    SyncHub hub = {0};
    pthread_barrier_init(&hub.bar, NULL, SYNC_RANKS);
    SyncRank rk[SYNC_RANKS];
    float rout[ROWS * C], rdin[ROWS * C];
    pthread_t th[SYNC_RANKS];
    for (int q = 0; q < SYNC_RANKS; q++) {
        const size_t lo = q ? SPLIT : 0;
        rk[q] = (SyncRank){.hub = &hub,
                           .rank = q,
                           .rows = q ? ROWS - SPLIT : SPLIT,
                           .c = C,
                           .x = x + lo * C,
                           .dy = dy + lo * C,
                           .gamma = gamma,
                           .beta = beta,
                           .out = rout + lo * C,
                           .din = rdin + lo * C};
        assert_int_equal(pthread_create(&th[q], NULL, sync_rank_main, &rk[q]), 0);
    }
    for (int q = 0; q < SYNC_RANKS; q++) pthread_join(th[q], NULL);
    pthread_barrier_destroy(&hub.bar);
    for (int q = 0; q < SYNC_RANKS; q++) {
        assert_int_equal(rk[q].rc, 0);
        assert_int_equal(hub.calls[q], 3);
    }
    assert_memory_equal(rk[0].st, rk[1].st, sizeof(float) * 3 * C);
    for (int j = 0; j < 3 * C; j++)
        assert_close_i(rk[0].st[j], st[j], 1e-6 + 1e-6 * fabsf(st[j]), j);
    for (int i = 0; i < ROWS * C; i++) {
        assert_close_i(rout[i], out[i], 1e-6 + 1e-6 * fabsf(out[i]), i);
        assert_close_i(rdin[i], din[i], 1e-6 + 1e-6 * fabsf(din[i]), i);
    }
    for (int j = 0; j < C; j++) {
        assert_close_i(rk[0].dg[j], dg[j], 1e-6 + 1e-6 * fabsf(dg[j]), j);
        assert_close_i(rk[0].db[j], db[j], 1e-6 + 1e-6 * fabsf(db[j]), j);
        assert_true(rk[1].dg[j] == 0.0f && rk[1].db[j] == 0.0f);
    }
    /* not synchronized, rank 0's rows alone normalise otherwise */
    float alone[SPLIT * C], ast[3 * C];
    batchnorm_forward_train(alone, ast, ast + C, ast + 2 * C, x, gamma, beta, SPLIT, C, 1e-3f);
    double diff = 0.0;
    for (int i = 0; i < SPLIT * C; i++) diff = fmax(diff, fabs((double)alone[i] - out[i]));
    assert_true(diff > 1e-3);
    free(x), free(dy), free(gamma), free(beta);
}

/* In a model a BatchNormalization and the relu layer after it (ReLU, Activation relu)
 * run as one pass, the batchnorm's own output never written; the model trains as the
 * same model with LeakyReLU(negative_slope 0) there, which runs apart: on 3 threads
 * (two shards), the same loss, gradients, relu outputs, moving statistics and
 * evaluation. */
static void test_model_batchnorm_relu_fused(void **s)
{
    (void)s;
    enum { B = 32 };
    static const char *const acts[2][2] = {
        {"{\"type\":\"ReLU\"}", "{\"type\":\"Activation\",\"activation\":\"relu\"}"},
        {"{\"type\":\"LeakyReLU\",\"negative_slope\":0}",
         "{\"type\":\"LeakyReLU\",\"negative_slope\":0}"}};
    Model *m[2];
    for (int k = 0; k < 2; k++) {
        char spec[1024], err[256];
        snprintf(spec, sizeof spec,
                 "{\"input_shape\":[8,8,3],\"layers\":["
                 "{\"type\":\"Conv2D\",\"filters\":16,\"kernel_size\":3,\"padding\":\"same\","
                 "\"use_bias\":false},"
                 "{\"type\":\"BatchNormalization\"},%s,"
                 "{\"type\":\"MaxPooling2D\"},{\"type\":\"Flatten\"},"
                 "{\"type\":\"Dense\",\"units\":12},"
                 "{\"type\":\"BatchNormalization\",\"momentum\":0.5},%s,"
                 "{\"type\":\"Dense\",\"units\":4}]}",
                 acts[k][0], acts[k][1]);
        if (model_create(&m[k], spec, 5, err, sizeof err)) fail_msg("%s", err);
        model_reserve(m[k], B);
    }
    assert_true(m[0]->acts[1] == NULL && m[0]->acts[6] == NULL); /* fused: never written */
    assert_true(m[1]->acts[1] != NULL && m[1]->acts[6] != NULL);
    assert_int_equal(m[0]->num_params, m[1]->num_params);
    float *x = rand_array((size_t)B * 192, 1);
    int32_t y[B];
    for (int i = 0; i < B; i++) y[i] = i % 4;
    StepStats st[2], ev[2];
    gemm_set_threads(3);
    for (int k = 0; k < 2; k++) model_step(m[k], x, y, B, B, 1, 0, NULL, NULL, &st[k]);
    for (int l = 2; l < 8; l += 5) { /* the relu outputs */
        const float *o = m[1]->acts[l], *o0 = m[0]->acts[l];
        for (size_t i = 0; i < (size_t)B * m[0]->layers[l].out_size; i++)
            assert_close_i(o[i], o0[i], 0, i);
    }
    for (size_t i = 0; i < m[0]->num_params; i++)
        assert_close_i(m[1]->grads[i], m[0]->grads[i], 0, i);
    for (int k = 0; k < 2; k++) {
        model_update_moving(m[k]);
        model_evaluate(m[k], x, y, B, &ev[k]);
    }
    for (size_t i = 0; i < m[0]->num_params; i++)
        assert_close_i(m[1]->params[i], m[0]->params[i], 0, i);
    gemm_set_threads(1);
    assert_close(st[1].loss, st[0].loss, 0);
    assert_close(ev[1].loss, ev[0].loss, 0);
    assert_close(ev[1].correct, ev[0].correct, 0);
    free(x);
    for (int k = 0; k < 2; k++) model_free(m[k]);
}

/* Against Keras 3 and tf-keras (reference/layers, gen_layers.py): from the same gamma,
 * beta and moving statistics, the training call's output, input gradient, gamma and
 * beta gradients and moving statistics after it, and the inference call's output,
 * within 1e-5 + 1e-5 |value|. tf-keras's moving variance takes Bessel's correction,
 * Keras 3's does not: the trainer follows Keras 3, and tf-keras's is checked as that
 * update with var * N / (N - 1). */
static void check_bn(const char *what, const float *got, const cJSON *want, size_t n)
{
    static float w[1024];
    assert_int_equal(json_floats(want, w, 1024), n);
    for (size_t i = 0; i < n; i++) {
        if (fabsf(got[i] - w[i]) > 1e-5f + 1e-5f * fabsf(w[i])) print_message("# %s\n", what);
        assert_close_i(got[i], w[i], 1e-5 + 1e-5 * fabs(w[i]), i);
    }
}

static void test_batchnorm_against_keras(void **s)
{
    (void)s;
    FILE *f = fopen("trainer/tests/reference/layers/layers.json", "rb");
    if (!f) fail_msg("cannot open reference/layers/layers.json (run from the root)");
    static char text[1 << 18];
    size_t len = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[len] = '\0';
    cJSON *root = cJSON_Parse(text);
    assert_non_null(root);
    enum { NX = 2 * 5 * 6 * 3, C = 3, ROWS = NX / C };
    static float x[NX], r[NX], dx[NX];
    assert_int_equal(json_floats(cJSON_GetObjectItemCaseSensitive(root, "x"), x, NX), NX);
    int checked = 0;
    const cJSON *cases = cJSON_GetObjectItemCaseSensitive(root, "batchnorm");
    for (const cJSON *c = cases ? cases->child : NULL; c; c = c->next) {
        cJSON *layer = cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(c, "config"), 1);
        cJSON_AddStringToObject(layer, "type", "BatchNormalization");
        char *text_spec, err[256];
        cJSON *spec = cJSON_CreateObject();
        cJSON_AddItemToObject(spec, "input_shape", cJSON_CreateIntArray((const int[]){5, 6, 3}, 3));
        cJSON *layers = cJSON_AddArrayToObject(spec, "layers");
        cJSON_AddItemToArray(layers, layer);
        cJSON_AddItemToArray(layers, cJSON_Parse("{\"type\":\"Flatten\"}"));
        cJSON_AddItemToArray(layers, cJSON_Parse("{\"type\":\"Dense\",\"units\":2}"));
        text_spec = cJSON_PrintUnformatted(spec);
        Model *m;
        if (model_create(&m, text_spec, 1, err, sizeof err)) fail_msg("%s: %s", text_spec, err);
        print_message("# %s\n", m->signature);
        const Layer *l = &m->layers[0];
        const cJSON *start = cJSON_GetObjectItemCaseSensitive(c, "start");
        float gamma[C], beta[C], mm[C], mv[C], st[3 * C], dg[C], db[C], moving[2 * C];
        json_floats(cJSON_GetObjectItemCaseSensitive(start, "gamma"), gamma, C);
        json_floats(cJSON_GetObjectItemCaseSensitive(start, "beta"), beta, C);
        json_floats(cJSON_GetObjectItemCaseSensitive(start, "moving_mean"), mm, C);
        json_floats(cJSON_GetObjectItemCaseSensitive(start, "moving_variance"), mv, C);
        assert_int_equal(json_floats(cJSON_GetObjectItemCaseSensitive(c, "r"), r, NX), NX);
        const float *g = l->w_count ? gamma : NULL, *b = l->b_count ? beta : NULL;
        float train_y[NX], infer_y[NX];
        batchnorm_forward_train(train_y, st, st + C, st + 2 * C, x, g, b, ROWS, C, l->epsilon);
        batchnorm_backward(dx, dg, db, r, x, st, st + 2 * C, g, ROWS, C);
        batchnorm_forward_infer(infer_y, x, g, b, mm, mv, ROWS, C, l->epsilon);
        memcpy(m->params + l->s_off, mm, sizeof mm);
        memcpy(m->params + l->s_off + C, mv, sizeof mv);
        memcpy(m->grads + l->s_off, st, 2 * C * sizeof(float));
        model_update_moving(m);
        memcpy(moving, m->params + l->s_off, sizeof moving);
        const char *dialects[] = {"keras3", "tfkeras"};
        for (int k = 0; k < 2; k++) {
            const cJSON *ref = cJSON_GetObjectItemCaseSensitive(c, dialects[k]);
            const cJSON *tr = cJSON_GetObjectItemCaseSensitive(ref, "train");
            const cJSON *in = cJSON_GetObjectItemCaseSensitive(ref, "infer");
            check_bn("y", train_y, cJSON_GetObjectItemCaseSensitive(tr, "y"), NX);
            check_bn("dx", dx, cJSON_GetObjectItemCaseSensitive(tr, "dx"), NX);
            if (g) check_bn("dgamma", dg, cJSON_GetObjectItemCaseSensitive(tr, "dgamma"), C);
            if (b) check_bn("dbeta", db, cJSON_GetObjectItemCaseSensitive(tr, "dbeta"), C);
            check_bn("moving_mean", moving, cJSON_GetObjectItemCaseSensitive(tr, "moving_mean"), C);
            float var[C];
            for (int j = 0; j < C; j++) {
                const float unbiased = st[C + j] * (float)ROWS / (float)(ROWS - 1);
                var[j] = k ? mv[j] * l->momentum + unbiased * (1.0f - l->momentum) : moving[C + j];
            }
            check_bn("moving_variance", var,
                     cJSON_GetObjectItemCaseSensitive(tr, "moving_variance"), C);
            check_bn("inference y", infer_y, cJSON_GetObjectItemCaseSensitive(in, "y"), NX);
            checked++;
        }
        model_free(m);
        free(text_spec);
        cJSON_Delete(spec);
    }
    assert_int_equal(checked, 4);
    cJSON_Delete(root);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_conv_blocks_equal_examples),
        cmocka_unit_test(test_conv_winograd_matches_im2col),
        cmocka_unit_test(test_conv_winograd_gradients),
        cmocka_unit_test(test_conv_algo_parse),
        cmocka_unit_test(test_conv_geometry),
        cmocka_unit_test(test_conv_valid),
        cmocka_unit_test(test_conv_relu_fused),
        cmocka_unit_test(test_conv_same_stride2),
        cmocka_unit_test(test_conv_same_even_kernel),
        cmocka_unit_test(test_conv_dinput_turned_kernel),
        cmocka_unit_test(test_dense),
        cmocka_unit_test(test_maxpool),
        cmocka_unit_test(test_dropout),
        cmocka_unit_test(test_relu),
        cmocka_unit_test(test_softmax),
        cmocka_unit_test(test_linear),
        cmocka_unit_test(test_loss_logits),
        cmocka_unit_test(test_loss_probs),
        cmocka_unit_test(test_model_grad),
        cmocka_unit_test(test_maxpool_same_by_hand),
        cmocka_unit_test(test_maxpool_ties),
        cmocka_unit_test(test_model_grad_nd_dense_and_pool),
        cmocka_unit_test(test_model_grad_activations),
        cmocka_unit_test(test_model_grad_activation_layers),
        cmocka_unit_test(test_sigmoid),
        cmocka_unit_test(test_tanh),
        cmocka_unit_test(test_gelu),
        cmocka_unit_test(test_swish),
        cmocka_unit_test(test_elu),
        cmocka_unit_test(test_leaky_relu),
        cmocka_unit_test(test_activation_values),
        cmocka_unit_test(test_activations_against_keras),
        cmocka_unit_test(test_avgpool),
        cmocka_unit_test(test_layers_against_keras),
        cmocka_unit_test(test_rescaling),
        cmocka_unit_test(test_model_grad_pooling),
        cmocka_unit_test(test_model_grad_no_bias),
        cmocka_unit_test(test_model_grad_l1),
        cmocka_unit_test(test_batchnorm_grad),
        cmocka_unit_test(test_model_grad_batchnorm),
        cmocka_unit_test(test_batchnorm_moving_ranks),
        cmocka_unit_test(test_batchnorm_against_keras),
        cmocka_unit_test(test_batchnorm_threads_relu),
        cmocka_unit_test(test_batchnorm_backward_relu_from_input),
        cmocka_unit_test(test_batchnorm_synchronized),
        cmocka_unit_test(test_conv_moments_batchnorm),
        cmocka_unit_test(test_model_batchnorm_relu_fused),
    };
    return cmocka_run_group_tests_name("layers", tests, NULL, NULL);
}
