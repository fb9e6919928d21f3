/* gemm() on several threads against the product computed in double here: every
 * transpose, with alpha, beta and row strides wider than the matrices, for shapes that
 * gemm cuts along C's rows, along its columns and along the inner dimension (partial
 * sums added afterwards); and a cut product gives the same bits on every call. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "assert_close.h"
#include "gemm.h"
#include "pool.h"
#include "util.h"

typedef struct {
    int m, n, k;
    const char *cut; /* what gemm.c does with it on 3 threads, for the message */
} Shape;

/* The stored element (r, c) of op(X), X row-major with row stride ld. */
static double at(const float *x, int ld, GemmTrans t, int r, int c)
{
    return t == GEMM_N ? x[(size_t)r * ld + c] : x[(size_t)c * ld + r];
}

static void check(const Shape *s, GemmTrans ta, GemmTrans tb, float alpha, float beta)
{
    const int m = s->m, n = s->n, k = s->k;
    /* stored shapes: A is m x k (k x m when transposed), B k x n (n x k); pad each row */
    const int lda = (ta == GEMM_N ? k : m) + 3, ldb = (tb == GEMM_N ? n : k) + 5, ldc = n + 7;
    const size_t na = (size_t)(ta == GEMM_N ? m : k) * lda,
                 nb = (size_t)(tb == GEMM_N ? k : n) * ldb;
    float *a = xmalloc(na * sizeof *a), *b = xmalloc(nb * sizeof *b);
    float *c = xmalloc((size_t)m * ldc * sizeof *c), *c0 = xmalloc((size_t)m * ldc * sizeof *c0);
    uint64_t r = (uint64_t)m * 131 + (uint64_t)n * 7 + (uint64_t)k + ta * 2 + tb;
    for (size_t i = 0; i < na; i++) a[i] = util_rand_float(&r) - 0.5f;
    for (size_t i = 0; i < nb; i++) b[i] = util_rand_float(&r) - 0.5f;
    for (size_t i = 0; i < (size_t)m * ldc; i++) c0[i] = util_rand_float(&r) - 0.5f;
    memcpy(c, c0, (size_t)m * ldc * sizeof *c);

    gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);

    double worst = 0.0, worst_got = 0.0, worst_want = 0.0;
    int worst_i = 0, worst_j = 0;
    for (int i = 0; i < m; i++) {
        for (int j = 0; j < n; j++) {
            double want = 0.0, mag = 0.0;
            for (int q = 0; q < k; q++) {
                double p = at(a, lda, ta, i, q) * at(b, ldb, tb, q, j);
                want += p;
                mag += fabs(p);
            }
            want = alpha * want + beta * c0[(size_t)i * ldc + j];
            double err = fabs(c[(size_t)i * ldc + j] - want) / (fabs(alpha) * mag + 1e-30);
            if (err > worst) {
                worst = err, worst_got = c[(size_t)i * ldc + j], worst_want = want;
                worst_i = i, worst_j = j;
            }
        }
        /* the padding past n is never written */
        for (int j = n; j < ldc; j++)
            assert_close_i(c[(size_t)i * ldc + j], c0[(size_t)i * ldc + j], 0, (size_t)i * ldc + j);
    }
    print_message("# %dx%dx%d (%s) %c%c alpha %g beta %g: worst error %.2e of the terms' sum\n", m,
                  n, k, s->cut, ta == GEMM_N ? 'N' : 'T', tb == GEMM_N ? 'N' : 'T', (double)alpha,
                  (double)beta, worst);
    if (worst >= 1e-5)
        print_message("# the worst at C[%d][%d]: %.9g, want %.9g\n", worst_i, worst_j, worst_got,
                      worst_want);
    assert_true(worst < 1e-5);

    /* the same call again: the same bits */
    float *c2 = xmalloc((size_t)m * ldc * sizeof *c2);
    memcpy(c2, c0, (size_t)m * ldc * sizeof *c2);
    gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c2, ldc);
    assert_memory_equal(c, c2, (size_t)m * ldc * sizeof *c);
    free(a), free(b), free(c), free(c0), free(c2);
}

static void test_products_on_three_threads(void **st)
{
    (void)st;
    const Shape shapes[] = {
        {300, 40, 200, "rows"},
        {40, 300, 200, "columns"},
        {24, 40, 3000, "inner dimension"},
        {5, 7, 9, "one thread: too small to cut"},
    };
    const float ab[][2] = {{1.0f, 0.0f}, {-0.25f, 1.0f}, {2.0f, 0.5f}};
    gemm_set_threads(3);
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
        for (int t = 0; t < 4; t++)
            for (size_t q = 0; q < sizeof ab / sizeof *ab; q++)
                check(&shapes[s], (GemmTrans)(t >> 1), (GemmTrans)(t & 1), ab[q][0], ab[q][1]);
    gemm_set_threads(1);
}

/* beta == 0 ignores what C held, NaN included, also when the product is cut along k. */
static void test_beta_zero_ignores_nan(void **st)
{
    (void)st;
    enum { M = 16, N = 20, K = 2000 };
    float *a = xmalloc(sizeof(float) * M * K), *b = xmalloc(sizeof(float) * K * N);
    float c[M * N];
    uint64_t r = 9;
    for (int i = 0; i < M * K; i++) a[i] = util_rand_float(&r);
    for (int i = 0; i < K * N; i++) b[i] = util_rand_float(&r);
    for (int i = 0; i < M * N; i++) c[i] = NAN;
    gemm_set_threads(2);
    gemm(GEMM_N, GEMM_N, M, N, K, 1.0f, a, K, b, N, 0.0f, c, N);
    gemm_set_threads(1);
    for (int i = 0; i < M * N; i++) assert_true(isfinite(c[i]) && c[i] > 0.0f);
    free(a);
    free(b);
}

/* After pool_flush_denormals(), a product on the pool's threads flushes denormals as
 * TensorFlow's CPU threads do: a denormal operand counts as zero and a product under
 * FLT_MIN comes out as zero, on every thread that takes a block. */
static void test_denormals_flushed_on_every_thread(void **st)
{
    (void)st;
    pool_flush_denormals();
    volatile float tiny = 1e-39f, one = 1.0f, small = 1e-20f;
    if (tiny * one != 0.0f || small * small != 0.0f) {
        /* valgrind ignores FTZ and DAZ (it warns "unsupported action") */
        print_message("# SKIPPED: this CPU or emulator does not flush denormals\n");
        skip();
    }
    enum { M = 300, N = 40, K = 200 };
    float *a = xmalloc(sizeof(float) * M * K), *b = xmalloc(sizeof(float) * K * N);
    float *c = xmalloc(sizeof(float) * M * N);
    for (int i = 0; i < M * K; i++) a[i] = 1e-39f; /* denormal */
    for (int i = 0; i < K * N; i++) b[i] = 1.0f;
    gemm_set_threads(3); /* cut along C's rows: each thread a block */
    gemm(GEMM_N, GEMM_N, M, N, K, 1.0f, a, K, b, N, 0.0f, c, N);
    for (int i = 0; i < M * N; i++) assert_close_i(c[i], 0.0f, 0, i); /* 2e-37 unflushed */
    for (int i = 0; i < M * K; i++) a[i] = 1e-20f;
    for (int i = 0; i < K * N; i++) b[i] = 1e-20f;
    gemm(GEMM_N, GEMM_N, M, N, K, 1.0f, a, K, b, N, 0.0f, c, N);
    gemm_set_threads(1);
    for (int i = 0; i < M * N; i++) assert_close_i(c[i], 0.0f, 0, i);
    free(a), free(b), free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_products_on_three_threads),
        cmocka_unit_test(test_beta_zero_ignores_nan),
        cmocka_unit_test(test_denormals_flushed_on_every_thread),
    };
    return cmocka_run_group_tests_name("gemm", tests, NULL, NULL);
}
