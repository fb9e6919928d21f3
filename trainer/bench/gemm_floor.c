/* gemm_floor — the compute floor of one tutorial-cnn training step: the same gemm()
 * calls that layers.c issues (same shapes, layouts and transposes, same backend as the
 * trainer it is built with), timed alone with nothing else in the step, and run the way
 * the trainer runs them (model.c): the conv products cut into gemm_batch_shards()
 * shards of examples, one parallel_for task each; the dense products on the whole batch,
 * gemm() cutting them into blocks. Prints one JSON object with the step and each call's
 * share, the kernels (gemm_select_kernels, as the trainer chooses them) and, given
 * peak_seconds, the compute roofline: the peak of the same gemm() on the same threads, a
 * 2048-cube product whose every block is large enough to run the kernels at full speed
 * (0 when not measured):
 *   {"backend":"openblas","library":"OpenBLAS 0.3.21","kernels":"Zen","kernels_origin":...,
 *    "cpu_flags":"avx2 fma avx sse3","threads":1,"batch":64,"shards":1,"step_ms":...,
 *    "samples_per_sec":...,"gflops":...,"flops_per_sample":...,"peak_gflops":...,
 *    "calls_ms":{"conv_fwd":...,...}}
 *
 *   gemm_floor [batch] [seconds] [threads] [peak_seconds]
 *                                         (64, 5, 0: the backend's default, 0: no peak) */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "gemm.h"
#include "pool.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static float *buf(size_t n)
{
    float *p = malloc(n * sizeof *p);
    if (!p) {
        fprintf(stderr, "gemm_floor: out of memory\n");
        exit(1);
    }
    for (size_t i = 0; i < n; i++) p[i] = (float)((i * 2654435761u) % 1000) * 1e-3f - 0.5f;
    return p;
}

enum {
    CONV_FWD,
    DENSE1_FWD,
    DENSE2_FWD,
    DENSE2_DW,
    DENSE2_DX,
    DENSE1_DW,
    DENSE1_DX,
    CONV_DW,
    NCALLS
};
static const char *const call_names[NCALLS] = {"conv_fwd",  "dense1_fwd", "dense2_fwd", "dense2_dw",
                                               "dense2_dx", "dense1_dw",  "dense1_dx",  "conv_dw"};

/* tutorial-cnn: conv 3x3x1->32 on 28x28 (26x26 out), dense 21632->128, dense 128->10 */
enum { K1 = 9, F1 = 32, D_IN = 21632, D1 = 128, D2 = 10, PIX = 26 * 26 };

/* The step's operands (the whole batch) and its shards. */
typedef struct {
    int b, shards;
    float *col, *wc, *conv, *dwc, *w1, *h, *dw1, *dconv, *w2, *o, *dw2, *dh;
    float **dwc_shard; /* shard s > 0's conv kernel gradient */
    int call;          /* the conv call the tasks run: CONV_FWD or CONV_DW */
} Step;

/* Shard s's part of a conv call: its examples' rows of col, conv and dconv. */
static void conv_task(void *arg, int s)
{
    Step *st = arg;
    const int lo = (int)((long)st->b * s / st->shards);
    const int m = ((int)((long)st->b * (s + 1) / st->shards) - lo) * PIX;
    const float *col = st->col + (size_t)lo * PIX * K1;
    if (st->call == CONV_FWD)
        gemm(GEMM_N, GEMM_N, m, F1, K1, 1.0f, col, K1, st->wc, F1, 1.0f,
             st->conv + (size_t)lo * PIX * F1, F1);
    else
        gemm(GEMM_T, GEMM_N, K1, F1, m, 1.0f, col, K1, st->dconv + (size_t)lo * PIX * F1, F1, 0.0f,
             s ? st->dwc_shard[s] : st->dwc, F1);
}

/* The roofline's product: large and square, so that the library's blocking, not the
 * operands' shape, bounds it. */
enum { PEAK_N = 2048 };

/* GFLOPS of gemm() on PEAK_N-cube products over about secs seconds (at least 2 products,
 * after one to warm the caches and the pool). */
static double peak_gflops(double secs)
{
    float *a = buf((size_t)PEAK_N * PEAK_N), *b = buf((size_t)PEAK_N * PEAK_N);
    float *c = buf((size_t)PEAK_N * PEAK_N);
    gemm(GEMM_N, GEMM_N, PEAK_N, PEAK_N, PEAK_N, 1.0f, a, PEAK_N, b, PEAK_N, 0.0f, c, PEAK_N);
    long n = 0;
    double t0 = now(), t;
    do {
        gemm(GEMM_N, GEMM_N, PEAK_N, PEAK_N, PEAK_N, 1.0f, a, PEAK_N, b, PEAK_N, 0.0f, c, PEAK_N);
        n++;
        t = now() - t0;
    } while (t < secs || n < 2);
    free(a), free(b), free(c);
    return 2.0 * PEAK_N * PEAK_N * PEAK_N * n / t * 1e-9;
}

int main(int argc, char **argv)
{
    gemm_select_kernels(argv); /* the trainer's kernels: this may run the program again */
    const int b = argc > 1 ? atoi(argv[1]) : 64;
    const double secs = argc > 2 ? atof(argv[2]) : 5.0;
    const int threads = argc > 3 ? atoi(argv[3]) : 0;
    const double peak_secs = argc > 4 ? atof(argv[4]) : 0;
    if (threads > 0) gemm_set_threads(threads);
    Step st = {.b = b, .shards = gemm_batch_shards(b)};
    const int m1 = b * PIX;
    st.col = buf((size_t)m1 * K1), st.wc = buf((size_t)K1 * F1), st.conv = buf((size_t)m1 * F1);
    st.dwc = buf((size_t)K1 * F1), st.w1 = buf((size_t)D_IN * D1), st.h = buf((size_t)b * D1);
    st.dw1 = buf((size_t)D_IN * D1), st.dconv = buf((size_t)b * D_IN);
    st.w2 = buf((size_t)D1 * D2), st.o = buf((size_t)b * D2), st.dw2 = buf((size_t)D1 * D2);
    st.dh = buf((size_t)b * D1);
    st.dwc_shard = calloc((size_t)st.shards, sizeof *st.dwc_shard);
    for (int s = 1; s < st.shards; s++) st.dwc_shard[s] = buf((size_t)K1 * F1);
    double flops = 2.0 * m1 * K1 * F1 * 2 + 2.0 * b * D_IN * D1 * 3 + 2.0 * b * D1 * D2 * 3;
    double spent[NCALLS] = {0};
    long steps = 0;
    double t0 = now(), t, c0, c1;
#define TIMED(id, call) (c0 = now(), (call), c1 = now(), spent[id] += c1 - c0)
#define CONV(id) (st.call = (id), parallel_for(st.shards, conv_task, &st))
    do {
        /* forward (bias already in C: beta 1, as layers.c does); conv per shard */
        TIMED(CONV_FWD, CONV(CONV_FWD));
        TIMED(DENSE1_FWD,
              gemm(GEMM_N, GEMM_N, b, D1, D_IN, 1.0f, st.conv, D_IN, st.w1, D1, 1.0f, st.h, D1));
        TIMED(DENSE2_FWD,
              gemm(GEMM_N, GEMM_N, b, D2, D1, 1.0f, st.h, D1, st.w2, D2, 1.0f, st.o, D2));
        /* backward: dense 2 (weights and input), dense 1 (weights and input), conv (weights) */
        TIMED(DENSE2_DW,
              gemm(GEMM_T, GEMM_N, D1, D2, b, 1.0f, st.h, D1, st.o, D2, 0.0f, st.dw2, D2));
        TIMED(DENSE2_DX,
              gemm(GEMM_N, GEMM_T, b, D1, D2, 1.0f, st.o, D2, st.w2, D2, 0.0f, st.dh, D1));
        TIMED(DENSE1_DW,
              gemm(GEMM_T, GEMM_N, D_IN, D1, b, 1.0f, st.conv, D_IN, st.dh, D1, 0.0f, st.dw1, D1));
        TIMED(DENSE1_DX,
              gemm(GEMM_N, GEMM_T, b, D_IN, D1, 1.0f, st.dh, D1, st.w1, D1, 0.0f, st.dconv, D_IN));
        TIMED(CONV_DW, CONV(CONV_DW));
        steps++;
        t = now() - t0;
    } while (t < secs || steps < 3);
#undef CONV
#undef TIMED
    double step = t / steps, peak = peak_secs > 0 ? peak_gflops(peak_secs) : 0;
    const GemmKernels *k = gemm_kernels();
    printf("{\"backend\":\"%s\",\"library\":\"%s\",\"kernels\":\"%s\",\"kernels_origin\":\"%s\","
           "\"cpu_flags\":\"%s\",\"threads\":%d,\"batch\":%d,\"shards\":%d,\"steps\":%ld,"
           "\"step_ms\":%.3f,\"samples_per_sec\":%.1f,\"gflops\":%.2f,\"flops_per_sample\":%.0f,"
           "\"peak_gflops\":%.2f,\"peak_shape\":\"%dx%dx%d\",\"calls_ms\":{",
           gemm_backend(), k->library, k->kernels, k->origin, k->cpu, threads, b, st.shards, steps,
           step * 1e3, b / step, flops / step * 1e-9, flops / b, peak, PEAK_N, PEAK_N, PEAK_N);
    for (int i = 0; i < NCALLS; i++)
        printf("%s\"%s\":%.3f", i ? "," : "", call_names[i], spent[i] / steps * 1e3);
    printf("}}\n");
    free(st.col), free(st.wc), free(st.conv), free(st.dwc), free(st.w1), free(st.h);
    free(st.dw1), free(st.dconv), free(st.w2), free(st.o), free(st.dw2), free(st.dh);
    for (int s = 1; s < st.shards; s++) free(st.dwc_shard[s]);
    free(st.dwc_shard);
    return 0;
}
