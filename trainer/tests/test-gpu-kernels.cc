/* The CUDA kernels of the GPU path (trainer/src/gpu/kernels.cuh) against the CPU
 * functions they follow (layers.c, loss.c, optim.c), run on the CPU under an emulation
 * of the CUDA grid (cuda_emul.h: blocks in turn, each block's threads as real threads).
 * There is no GPU on the machines that run make test; this checks the kernels' math and
 * indexing on every run. It does not check CUDA, cuDNN, cuBLAS, streams or graphs —
 * test-gpu.c does that on a device.
 *
 * Element-wise kernels are grid-stride loops and run with a small odd geometry (3 blocks
 * of 8 threads), so every thread strides; the block reductions run with THREADS threads,
 * as device.cu launches them. Equal means bit for bit where both sides do the same
 * float operations in the same order, else within the tolerance named. */
#include <cmath>
#include <cstdarg>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <setjmp.h>
#include <vector>

#include "cuda_emul.h"

extern "C" {
#include <cmocka.h>

#include "assert_close.h"
#include "layers.h"
#include "loss.h"
#include "optim.h"
/* util.h is C11 (_Noreturn); the two functions used here: */
uint64_t util_rand_skip(uint64_t state, uint64_t n);
float util_rand_float(uint64_t *state);
}

#include "gpu/kernels.cuh"

#define EW 3, 8 /* the geometry of element-wise launches */

static std::vector<float> randoms(size_t n, uint64_t seed, float lo = -1.0f, float hi = 1.0f)
{
    std::vector<float> v(n);
    for (auto &x : v) x = lo + (hi - lo) * util_rand_float(&seed);
    return v;
}

static void expect_equal(const char *what, const float *got, const float *want, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (memcmp(&got[i], &want[i], sizeof(float)) != 0) {
            print_message("# %s[%zu]: kernel %.9g, CPU %.9g\n", what, i, (double)got[i],
                          (double)want[i]);
            fail();
        }
}

static void expect_close(const char *what, const float *got, const float *want, size_t n,
                         double tol)
{
    double worst = 0.0, scale = 0.0;
    for (size_t i = 0; i < n; i++) {
        worst = fmax(worst, fabs((double)got[i] - want[i]));
        scale = fmax(scale, fabs((double)want[i]));
    }
    double rel = scale > 0.0 ? worst / scale : worst;
    if (rel > tol) {
        print_message("# %s: relative difference %.3g over %zu values (tolerance %.1g)\n", what,
                      rel, n, tol);
        fail();
    }
}

static void test_bias_activations(void **state)
{
    (void)state;
    const size_t rows = 13;
    const int cols = 7;
    const size_t n = rows * cols;
    auto bias = randoms(cols, 1);
    for (int relu = 0; relu < 2; relu++) {
        auto x = randoms(n, 2), want = x;
        for (size_t i = 0; i < n; i++) want[i] += bias[i % cols];
        activation_forward(want.data(), rows, cols, relu ? ACT_RELU : ACT_LINEAR);
        emul_launch(EW, k_bias_act, x.data(), (const float *)bias.data(), rows, cols, relu);
        expect_equal(relu ? "bias + relu" : "bias", x.data(), want.data(), n);
    }
    auto x = randoms(n, 3), want = x;
    activation_forward(want.data(), rows, cols, ACT_RELU);
    emul_launch(EW, k_relu, x.data(), n);
    expect_equal("relu", x.data(), want.data(), n);

    auto y = randoms(n, 4), d = randoms(n, 5), dwant = d;
    activation_forward(y.data(), rows, cols, ACT_RELU);
    activation_backward(dwant.data(), y.data(), nullptr, rows, cols, ACT_RELU);
    emul_launch(EW, k_relu_backward, d.data(), (const float *)y.data(), n);
    expect_equal("relu backward", d.data(), dwant.data(), n);

    /* softmax per row, forward and its Jacobian-vector product */
    auto s = randoms(n, 6, -4.0f, 4.0f), swant = s;
    activation_forward(swant.data(), rows, cols, ACT_SOFTMAX);
    emul_launch(EW, k_softmax_rows, s.data(), rows, cols);
    expect_close("softmax", s.data(), swant.data(), n, 1e-6);
    auto sd = randoms(n, 7), sdwant = sd;
    activation_backward(sdwant.data(), swant.data(), nullptr, rows, cols, ACT_SOFTMAX);
    emul_launch(EW, k_softmax_backward_rows, sd.data(), (const float *)swant.data(), rows, cols);
    expect_close("softmax backward", sd.data(), sdwant.data(), n, 1e-6);
}

static void check_pool(int h, int w, int c, int ph, int pw, int sh, int sw, int same)
{
    const int b = 3;
    PoolGeom g;
    assert_int_equal(pool_geom_init(&g, h, w, c, ph, pw, sh, sw, same), 0);
    print_message("# pool %dx%dx%d, window %dx%d, strides %d,%d, %s: output %dx%d\n", h, w, c, ph,
                  pw, sh, sw, same ? "same" : "valid", g.oh, g.ow);
    const size_t nin = (size_t)b * h * w * c, nout = (size_t)b * g.oh * g.ow * c;
    auto x = randoms(nin, 11);
    x[0] = x[c] = 2.0f; /* a tie for the top-left window's maximum: the first one wins */
    std::vector<float> out(nout), out_cpu(nout);
    std::vector<int32_t> am(nout), am_cpu(nout);
    maxpool_forward(out_cpu.data(), am_cpu.data(), x.data(), &g, b);
    emul_launch(EW, k_maxpool, out.data(), am.data(), (const float *)x.data(), g, b);
    expect_equal("maxpool", out.data(), out_cpu.data(), nout);
    assert_memory_equal(am.data(), am_cpu.data(), nout * sizeof(int32_t));

    auto dout = randoms(nout, 12);
    std::vector<float> din(nin, 0.0f), din_cpu(nin);
    maxpool_backward(din_cpu.data(), dout.data(), am_cpu.data(), &g, b);
    emul_launch(EW, k_maxpool_backward, din.data(), (const float *)dout.data(),
                (const int32_t *)am.data(), nout);
    /* overlapping windows add in another order */
    expect_close("maxpool backward", din.data(), din_cpu.data(), nin, 1e-6);
}

static void test_maxpool(void **state)
{
    (void)state;
    check_pool(8, 8, 2, 2, 2, 2, 2, 0);
    check_pool(9, 8, 2, 3, 2, 2, 1, 1); /* same, unequal strides, overlapping windows */
    check_pool(7, 5, 3, 3, 3, 2, 2, 1); /* same, padding at both ends */
}

static void test_dropout(void **state)
{
    (void)state;
    const size_t n = 1000;
    const float rate = 0.3f;
    const uint64_t seed = 0xFEEDFACEull;
    StepArgs args = {seed, 0.0f};
    /* the second layer of a step starts where the first one's draws ended */
    for (uint64_t first : {(uint64_t)0, (uint64_t)777}) {
        auto in = randoms(n, 13), want = in;
        std::vector<float> mask_cpu(n), out(n), mask(n);
        uint64_t rng = util_rand_skip(seed, first);
        dropout_forward(want.data(), mask_cpu.data(), n, rate, &rng);
        emul_launch(EW, k_dropout, out.data(), mask.data(), (const float *)in.data(), n, rate,
                    (const StepArgs *)&args, first);
        expect_equal("dropout mask", mask.data(), mask_cpu.data(), n);
        expect_equal("dropout", out.data(), want.data(), n);
        size_t kept = 0;
        for (float m : mask) kept += m != 0.0f;
        assert_true(kept > n / 2 && kept < n); /* it drops, and not everything */

        auto d = randoms(n, 14), dwant = d;
        dropout_backward(dwant.data(), mask_cpu.data(), n);
        emul_launch(EW, k_mul, d.data(), (const float *)mask.data(), n);
        expect_equal("dropout backward", d.data(), dwant.data(), n);
    }
}

static void test_kernel_layouts(void **state)
{
    (void)state;
    const int kh = 3, kw = 2, c = 4, f = 5, rsc = kh * kw * c;
    auto hwio = randoms((size_t)rsc * f, 15);
    std::vector<float> krsc((size_t)rsc * f), back((size_t)rsc * f);
    emul_launch(EW, k_hwio_to_krsc, krsc.data(), (const float *)hwio.data(), rsc, f);
    for (int y = 0; y < kh; y++)
        for (int x = 0; x < kw; x++)
            for (int ci = 0; ci < c; ci++)
                for (int fi = 0; fi < f; fi++) {
                    const int p = (y * kw + x) * c + ci;
                    assert_close_i(krsc[(size_t)fi * rsc + p], hwio[(size_t)p * f + fi], 0,
                                   (size_t)fi * rsc + p);
                }
    emul_launch(EW, k_krsc_to_hwio, back.data(), (const float *)krsc.data(), rsc, f);
    expect_equal("HWIO -> KRSC -> HWIO", back.data(), hwio.data(), hwio.size());
}

static void test_pad_crop(void **state)
{
    (void)state;
    const int b = 2, h = 5, w = 4, c = 3, ph = 1, pw = 3, top = 0, left = 1;
    const int H = h + ph, W = w + pw;
    const size_t n = (size_t)b * h * w * c, np = (size_t)b * H * W * c;
    auto x = randoms(n, 16), y = randoms(np, 17);
    std::vector<float> px(np, 7.0f), cy(n);
    emul_launch(EW, k_pad, px.data(), (const float *)x.data(), b, h, w, c, ph, pw, top, left);
    for (int i = 0; i < b; i++)
        for (int r = 0; r < H; r++)
            for (int s = 0; s < W; s++)
                for (int ch = 0; ch < c; ch++) {
                    const int sy = r - top, sx = s - left;
                    const float want = sy >= 0 && sy < h && sx >= 0 && sx < w
                                           ? x[(((size_t)i * h + sy) * w + sx) * c + ch]
                                           : 0.0f;
                    assert_close_i(px[(((size_t)i * H + r) * W + s) * c + ch], want, 0,
                                   (((size_t)i * H + r) * W + s) * c + ch);
                }
    /* crop is pad's adjoint: <pad x, y> == <x, crop y> */
    emul_launch(EW, k_crop, cy.data(), (const float *)y.data(), b, h, w, c, ph, pw, top, left);
    double lhs = 0.0, rhs = 0.0;
    for (size_t i = 0; i < np; i++) lhs += (double)px[i] * y[i];
    for (size_t i = 0; i < n; i++) rhs += (double)x[i] * cy[i];
    assert_close(lhs, rhs, 1e-9 * fmax(1.0, fabs(lhs)));
}

/* loss kernel + k_sum_loss against the CPU loss, over b rows of c classes */
static void check_loss(int probs, int b, int c)
{
    const float scale = 1.0f / 512.0f;
    auto z = randoms((size_t)b * c, 18, -3.0f, 3.0f);
    std::vector<int32_t> labels(b);
    uint64_t s = 19;
    for (auto &l : labels) l = (int32_t)(util_rand_float(&s) * (float)c);
    if (probs) { /* rows of probabilities, some at 0 and 1 so that clipping bites */
        activation_forward(z.data(), (size_t)b, (size_t)c, ACT_SOFTMAX);
        for (int j = 0; j < c; j++) z[j] = j == 0 ? 1.0f : 0.0f;
        labels[0] = 0;
        z[c + 1] = 0.0f;
    }
    std::vector<float> d_cpu((size_t)b * c), d((size_t)b * c);
    std::vector<double> row_loss(b);
    std::vector<int> row_correct(b);
    int correct_cpu = 0;
    const double sum_cpu =
        probs ? loss_sce_probs(d_cpu.data(), &correct_cpu, z.data(), labels.data(), b, c, scale)
              : loss_sce_logits(d_cpu.data(), &correct_cpu, z.data(), labels.data(), b, c, scale);
    if (probs)
        emul_launch(EW, k_sce_probs, d.data(), row_loss.data(), row_correct.data(),
                    (const float *)z.data(), (const int32_t *)labels.data(), b, c, scale);
    else
        emul_launch(EW, k_sce_logits, d.data(), row_loss.data(), row_correct.data(),
                    (const float *)z.data(), (const int32_t *)labels.data(), b, c, scale);
    double acc[3] = {0.5, 2.0, 0.0}; /* k_sum_loss adds onto what is there */
    emul_launch(1, THREADS, k_sum_loss, acc, (const double *)row_loss.data(),
                (const int *)row_correct.data(), b);
    print_message("# %s, %d rows of %d: loss sum %.9g (CPU %.9g), %g correct (CPU %d)\n",
                  probs ? "from probabilities" : "from logits", b, c, acc[0] - 0.5, sum_cpu,
                  acc[1] - 2.0, correct_cpu);
    assert_close(acc[0] - 0.5, sum_cpu, 1e-6 * fabs(sum_cpu));
    assert_close(acc[1] - 2.0, (double)correct_cpu, 0);
    for (int i = 0; i < b; i++) { /* each row's loss, against the CPU on that row alone */
        float drow[16];
        const float *zi = z.data() + (size_t)i * c;
        const double li = probs ? loss_sce_probs(drow, nullptr, zi, &labels[i], 1, c, scale)
                                : loss_sce_logits(drow, nullptr, zi, &labels[i], 1, c, scale);
        if (fabs(row_loss[i] - li) > 1e-9 * fabs(li)) {
            print_message("# row %d: loss %.12g, CPU %.12g\n", i, row_loss[i], li);
            fail();
        }
    }
    expect_close(probs ? "dprobs" : "dlogits", d.data(), d_cpu.data(), d.size(), 1e-5);
}

static void test_losses(void **state)
{
    (void)state;
    check_loss(0, 300, 10);
    check_loss(0, 5, 3);
    check_loss(1, 300, 10);
    check_loss(1, 7, 4);
}

static void test_l2_stats_axpy(void **state)
{
    (void)state;
    const size_t n = 1000;
    const float l2 = 0.01f;
    auto w = randoms(n, 20);
    double want = 0.0;
    for (float v : w) want += (double)v * v;
    want *= l2;
    double acc = 1.0;
    emul_launch(1, THREADS, k_l2_sum, &acc, (const float *)w.data(), n, l2);
    assert_close(acc - 1.0, want, 1e-12 * want);

    /* the statistics train.c reads: loss share, correct, examples, stop flag */
    const double sums[ACC_N] = {51.2, 30.0, 0.25};
    const StepArgs args = {0, 1.0f};
    float stats[MODEL_STATS_FLOATS];
    emul_launch(1, 1, k_stats, stats, sums, 128, 2, 64, &args);
    assert_close(stats[STAT_LOSS], (float)(51.2 / 128 + 0.25 / 2), 0);
    assert_close(stats[STAT_CORRECT], 30.0f, 0);
    assert_close(stats[STAT_COUNT], 64.0f, 0);
    assert_close(stats[STAT_STOP], 1.0f, 0);

    auto y = randoms(n, 21), yw = y;
    for (size_t i = 0; i < n; i++) yw[i] += 0.5f * w[i];
    emul_launch(EW, k_axpy, y.data(), (const float *)w.data(), 0.5f, n);
    expect_equal("axpy", y.data(), yw.data(), n);
}

/* Three updates of each rule against optim_step, with the state laid out as
 * gpu_model_optim_step passes it. */
static void test_optimizers(void **state)
{
    (void)state;
    struct {
        OptimizerKind kind;
        float mom;
        int nesterov;
    } cases[] = {{OPT_SGD, 0.0f, 0},         {OPT_SGD, 0.9f, 0},     {OPT_SGD, 0.9f, 1},
                 {OPT_RMSPROP, 0.0f, 0},     {OPT_RMSPROP, 0.5f, 0}, {OPT_ADAM, 0.0f, 0},
                 {OPT_ADAM_AMSGRAD, 0.0f, 0}};
    const size_t n = 500;
    for (auto &k : cases) {
        OptimizerConfig oc = optim_defaults(k.kind, 0.01f);
        oc.momentum = k.mom;
        oc.nesterov = k.nesterov;
        Optimizer *o = optim_create(&oc, n);
        auto w_cpu = randoms(n, 22), w = w_cpu;
        std::vector<float> st(o->state_floats + 1, 0.0f);
        float *s = st.data();
        for (int step = 0; step < 3; step++) {
            auto g = randoms(n, 30 + (uint64_t)step);
            const float *gr = g.data();
            const int64_t it = o->iterations;
            optim_step(o, w_cpu.data(), g.data());
            switch (k.kind) {
            case OPT_SGD:
                emul_launch(EW, k_sgd, w.data(), gr, s, n, oc.lr, oc.momentum, oc.nesterov);
                break;
            case OPT_RMSPROP:
                emul_launch(EW, k_rmsprop, w.data(), gr, s, s + n, n, oc.lr, oc.rho, oc.epsilon,
                            oc.momentum);
                break;
            case OPT_ADAM:
            case OPT_ADAM_AMSGRAD:
                emul_launch(EW, k_adam, w.data(), gr, s, s + n, s + 2 * n, n,
                            optim_adam_alpha(&oc, it), oc.beta1, oc.beta2, oc.epsilon,
                            (int)(k.kind == OPT_ADAM_AMSGRAD));
                break;
            }
        }
        print_message("# %s momentum %g%s\n", optim_kind_name(k.kind), (double)k.mom,
                      k.nesterov ? " nesterov" : "");
        expect_close("parameters", w.data(), w_cpu.data(), n, 1e-6);
        if (o->state_floats) expect_close("state", s, o->state, o->state_floats, 1e-6);
        optim_free(o);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bias_activations), cmocka_unit_test(test_maxpool),
        cmocka_unit_test(test_dropout),          cmocka_unit_test(test_kernel_layouts),
        cmocka_unit_test(test_pad_crop),         cmocka_unit_test(test_losses),
        cmocka_unit_test(test_l2_stats_axpy),    cmocka_unit_test(test_optimizers),
    };
    return cmocka_run_group_tests_name("gpu kernels (CPU emulation)", tests, NULL, NULL);
}
