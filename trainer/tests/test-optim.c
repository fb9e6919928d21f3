/* Optimizer steps against the Keras 3 update rules computed by hand (in double) for a
 * few steps on a fixed gradient sequence. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "gemm.h"
#include "optim.h"
#include "util.h"

#define N 3
static const float g_seq[3][N] = {{0.5f, -1.0f, 2.0f}, {0.25f, 0.5f, -1.5f}, {-0.1f, 0.3f, 0.0f}};
static const float w0[N] = {1.0f, -2.0f, 0.5f};

static void run(const OptimizerConfig *cfg, float w[N])
{
    Optimizer *o = optim_create(cfg, N);
    for (int i = 0; i < N; i++) w[i] = w0[i];
    for (int s = 0; s < 3; s++) optim_step(o, w, g_seq[s]);
    assert_int_equal(o->iterations, 3);
    optim_free(o);
}

static void expect(const float got[N], const double want[N])
{
    for (int i = 0; i < N; i++) {
        print_message("# w[%d] got %.8f want %.8f\n", i, got[i], want[i]);
        assert_float_equal(got[i], want[i], 1e-6 + 1e-5 * fabs(want[i]));
    }
}

static void test_sgd_plain(void **st)
{
    (void)st;
    OptimizerConfig c = optim_defaults(OPT_SGD, 0.1f);
    float w[N];
    run(&c, w);
    double want[N];
    for (int i = 0; i < N; i++) {
        double x = w0[i];
        for (int s = 0; s < 3; s++) x -= 0.1 * g_seq[s][i];
        want[i] = x;
    }
    expect(w, want);
}

static void sgd_momentum(int nesterov)
{
    OptimizerConfig c = optim_defaults(OPT_SGD, 0.1f);
    c.momentum = 0.9f;
    c.nesterov = nesterov;
    float w[N];
    run(&c, w);
    double want[N];
    for (int i = 0; i < N; i++) {
        double x = w0[i], m = 0;
        for (int s = 0; s < 3; s++) {
            m = 0.9 * m - 0.1 * g_seq[s][i];
            x += nesterov ? 0.9 * m - 0.1 * g_seq[s][i] : m;
        }
        want[i] = x;
    }
    expect(w, want);
}

static void test_sgd_momentum(void **st)
{
    (void)st;
    sgd_momentum(0);
}
static void test_sgd_nesterov(void **st)
{
    (void)st;
    sgd_momentum(1);
}

static void rmsprop(float momentum)
{
    OptimizerConfig c = optim_defaults(OPT_RMSPROP, 0.01f);
    c.momentum = momentum;
    assert_float_equal(c.rho, 0.9f, 0);
    assert_float_equal(c.epsilon, 1e-7f, 0);
    float w[N];
    run(&c, w);
    double want[N];
    for (int i = 0; i < N; i++) {
        double x = w0[i], v = 0, mo = 0;
        for (int s = 0; s < 3; s++) {
            double g = g_seq[s][i];
            v = 0.9 * v + 0.1 * g * g;
            double inc = 0.01 * g / sqrt(v + 1e-7); /* Keras 3: epsilon inside the root */
            if (momentum != 0.0f) {
                mo = momentum * mo + inc;
                x -= mo;
            } else {
                x -= inc;
            }
        }
        want[i] = x;
    }
    expect(w, want);
}

static void test_rmsprop(void **st)
{
    (void)st;
    rmsprop(0.0f);
}
static void test_rmsprop_momentum(void **st)
{
    (void)st;
    rmsprop(0.5f);
}

static void adam(int ams)
{
    OptimizerConfig c = optim_defaults(ams ? OPT_ADAM_AMSGRAD : OPT_ADAM, 0.01f);
    float w[N];
    run(&c, w);
    double want[N];
    for (int i = 0; i < N; i++) {
        double x = w0[i], m = 0, v = 0, vh = 0;
        for (int s = 0; s < 3; s++) {
            double g = g_seq[s][i], t = s + 1;
            double alpha = 0.01 * sqrt(1 - pow(0.999, t)) / (1 - pow(0.9, t));
            m += (g - m) * 0.1;
            v += (g * g - v) * 0.001;
            double vv = v;
            if (ams) vv = vh = fmax(vh, v);
            x -= alpha * m / (sqrt(vv) + 1e-7); /* epsilon outside the root */
        }
        want[i] = x;
    }
    expect(w, want);
}

static void test_adam(void **st)
{
    (void)st;
    adam(0);
}
static void test_adam_amsgrad(void **st)
{
    (void)st;
    adam(1);
}

static void test_amsgrad_differs(void **st)
{
    (void)st;
    /* a large then small gradient: amsgrad keeps the larger second moment */
    OptimizerConfig a = optim_defaults(OPT_ADAM, 0.01f),
                    b = optim_defaults(OPT_ADAM_AMSGRAD, 0.01f);
    float wa[N], wb[N];
    run(&a, wa);
    run(&b, wb);
    assert_true(wa[2] != wb[2]);
}

/* A large arena is updated in ranges on several threads: the same bits as one thread,
 * for every rule, over a few steps (state carried), with a size that leaves a ragged
 * last range. */
static void test_threads_same_bits(void **st)
{
    (void)st;
    const size_t n = 200003;
    const OptimizerKind kinds[] = {OPT_SGD, OPT_SGD, OPT_RMSPROP, OPT_ADAM, OPT_ADAM_AMSGRAD};
    float *g = xmalloc(3 * n * sizeof *g), *w[2];
    uint64_t r = 7;
    for (size_t i = 0; i < 3 * n; i++) g[i] = util_rand_float(&r) - 0.5f;
    for (int k = 0; k < 5; k++) {
        OptimizerConfig c = optim_defaults(kinds[k], 0.01f);
        if (k == 1) c.momentum = 0.9f;
        for (int t = 0; t < 2; t++) {
            gemm_set_threads(t == 0 ? 1 : 3);
            Optimizer *o = optim_create(&c, n);
            w[t] = xmalloc(n * sizeof *w[t]);
            for (size_t i = 0; i < n; i++) w[t][i] = (float)i / (float)n - 0.5f;
            for (int s = 0; s < 3; s++) optim_step(o, w[t], g + (size_t)s * n);
            optim_free(o);
        }
        print_message("# %s%s: 1 thread vs 3\n", optim_kind_name(kinds[k]),
                      k == 1 ? " (momentum)" : "");
        assert_memory_equal(w[0], w[1], n * sizeof(float));
        assert_true(w[0][n - 1] != (float)(n - 1) / (float)n - 0.5f); /* the last range moved */
        free(w[0]);
        free(w[1]);
    }
    free(g);
}

static void test_parse(void **st)
{
    (void)st;
    OptimizerKind k;
    assert_int_equal(optim_parse_kind("adam-amsgrad", &k), 0);
    assert_int_equal(k, OPT_ADAM_AMSGRAD);
    assert_int_not_equal(optim_parse_kind("adagrad", &k), 0);
    /* state sizes: what a checkpoint saves */
    OptimizerConfig c = optim_defaults(OPT_ADAM_AMSGRAD, 0.1f);
    Optimizer *o = optim_create(&c, 10);
    assert_int_equal(o->state_floats, 30);
    optim_free(o);
    c = optim_defaults(OPT_SGD, 0.1f);
    o = optim_create(&c, 10);
    assert_int_equal(o->state_floats, 0);
    optim_free(o);
    optim_free(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sgd_plain),         cmocka_unit_test(test_sgd_momentum),
        cmocka_unit_test(test_sgd_nesterov),      cmocka_unit_test(test_rmsprop),
        cmocka_unit_test(test_rmsprop_momentum),  cmocka_unit_test(test_adam),
        cmocka_unit_test(test_adam_amsgrad),      cmocka_unit_test(test_amsgrad_differs),
        cmocka_unit_test(test_threads_same_bits), cmocka_unit_test(test_parse),
    };
    return cmocka_run_group_tests_name("optim", tests, NULL, NULL);
}
