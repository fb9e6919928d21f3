/* gemm_floor — the compute floor of one tutorial-cnn training step: the same gemm()
 * calls that layers.c issues (same shapes, layouts and transposes, same backend as the
 * trainer it is built with), timed alone with nothing else in the step, and run the way
 * the trainer runs them: the batch cut into gemm_batch_shards() shards, each shard's
 * calls one parallel_for task on its own buffers (with one shard, the calls use gemm's
 * threads themselves). Prints one JSON object with the step and each call's share (of
 * shard 0, in its task):
 *   {"backend":"blis","threads":1,"batch":64,"shards":1,"step_ms":...,"samples_per_sec":...,
 *    "gflops":...,"calls_ms":{"conv_fwd":...,...}}
 *
 *   gemm_floor [batch] [seconds] [threads]     (64, 5, the backend's default) */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "gemm.h"

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
    for (size_t i = 0; i < n; i++)
        p[i] = (float)((i * 2654435761u) % 1000) * 1e-3f - 0.5f;
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

/* One shard's operands and the time its calls took. */
typedef struct {
    int b;
    float *col, *wc, *conv, *dwc, *w1, *h, *dw1, *dconv, *w2, *o, *dw2, *dh;
    double spent[NCALLS];
} Shard;

/* tutorial-cnn: conv 3x3x1->32 on 28x28 (26x26 out), dense 21632->128, dense 128->10 */
enum { K1 = 9, F1 = 32, D_IN = 21632, D1 = 128, D2 = 10 };

static void shard_init(Shard *sh, int b, float *w1)
{
    const int m1 = b * 26 * 26;
    *sh = (Shard){.b = b};
    sh->col = buf((size_t)m1 * K1), sh->wc = buf((size_t)K1 * F1), sh->conv = buf((size_t)m1 * F1);
    sh->dwc = buf((size_t)K1 * F1), sh->h = buf((size_t)b * D1), sh->dw1 = buf((size_t)D_IN * D1);
    sh->dconv = buf((size_t)b * D_IN), sh->w2 = buf((size_t)D1 * D2), sh->o = buf((size_t)b * D2);
    sh->dw2 = buf((size_t)D1 * D2), sh->dh = buf((size_t)b * D1);
    sh->w1 = w1; /* the weights are shared, as in the trainer */
}

static void shard_free(Shard *sh)
{
    free(sh->col), free(sh->wc), free(sh->conv), free(sh->dwc), free(sh->h), free(sh->dw1);
    free(sh->dconv), free(sh->w2), free(sh->o), free(sh->dw2), free(sh->dh);
}

/* The step's eight calls on one shard, in layers.c's order. */
static void shard_step(void *arg, int i)
{
    Shard *sh = (Shard *)arg + i;
    const int b = sh->b, m1 = b * 26 * 26;
    double c0, c1;
#define TIMED(id, call) (c0 = now(), (call), c1 = now(), sh->spent[id] += c1 - c0)
    /* forward (bias already in C: beta 1, as layers.c does) */
    TIMED(CONV_FWD, gemm(GEMM_N, GEMM_N, m1, F1, K1, 1.0f, sh->col, K1, sh->wc, F1, 1.0f,
                         sh->conv, F1));
    TIMED(DENSE1_FWD, gemm(GEMM_N, GEMM_N, b, D1, D_IN, 1.0f, sh->conv, D_IN, sh->w1, D1, 1.0f,
                           sh->h, D1));
    TIMED(DENSE2_FWD, gemm(GEMM_N, GEMM_N, b, D2, D1, 1.0f, sh->h, D1, sh->w2, D2, 1.0f, sh->o,
                           D2));
    /* backward: dense 2 (weights and input), dense 1 (weights and input), conv (weights) */
    TIMED(DENSE2_DW, gemm(GEMM_T, GEMM_N, D1, D2, b, 1.0f, sh->h, D1, sh->o, D2, 0.0f, sh->dw2,
                          D2));
    TIMED(DENSE2_DX, gemm(GEMM_N, GEMM_T, b, D1, D2, 1.0f, sh->o, D2, sh->w2, D2, 0.0f, sh->dh,
                          D1));
    TIMED(DENSE1_DW, gemm(GEMM_T, GEMM_N, D_IN, D1, b, 1.0f, sh->conv, D_IN, sh->dh, D1, 0.0f,
                          sh->dw1, D1));
    TIMED(DENSE1_DX, gemm(GEMM_N, GEMM_T, b, D_IN, D1, 1.0f, sh->dh, D1, sh->w1, D1, 0.0f,
                          sh->dconv, D_IN));
    TIMED(CONV_DW, gemm(GEMM_T, GEMM_N, K1, F1, m1, 1.0f, sh->col, K1, sh->dconv, F1, 0.0f,
                        sh->dwc, F1));
#undef TIMED
}

int main(int argc, char **argv)
{
    const int b = argc > 1 ? atoi(argv[1]) : 64;
    const double secs = argc > 2 ? atof(argv[2]) : 5.0;
    const int threads = argc > 3 ? atoi(argv[3]) : 0;
    if (threads > 0) gemm_set_threads(threads);
    const int nsh = gemm_batch_shards(b);
    float *w1 = buf((size_t)D_IN * D1);
    Shard *sh = calloc((size_t)nsh, sizeof *sh);
    if (!sh) return 1;
    for (int i = 0; i < nsh; i++)
        shard_init(&sh[i], (int)((long)b * (i + 1) / nsh - (long)b * i / nsh), w1);
    const int m1 = b * 26 * 26;
    double flops = 2.0 * m1 * K1 * F1 * 2 + 2.0 * b * D_IN * D1 * 3 + 2.0 * b * D1 * D2 * 3;
    long steps = 0;
    double t0 = now(), t;
    do {
        parallel_for(nsh, shard_step, sh);
        steps++;
        t = now() - t0;
    } while (t < secs || steps < 3);
    double step = t / steps;
    printf("{\"backend\":\"%s\",\"threads\":%d,\"batch\":%d,\"shards\":%d,\"steps\":%ld,"
           "\"step_ms\":%.3f,\"samples_per_sec\":%.1f,\"gflops\":%.2f,\"calls_ms\":{",
           gemm_backend(), threads, b, nsh, steps, step * 1e3, b / step, flops / step * 1e-9);
    for (int i = 0; i < NCALLS; i++)
        printf("%s\"%s\":%.3f", i ? "," : "", call_names[i], sh[0].spent[i] / steps * 1e3);
    printf("}}\n");
    for (int i = 0; i < nsh; i++) shard_free(&sh[i]);
    free(sh);
    free(w1);
    return 0;
}
