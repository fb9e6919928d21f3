/* gemm_floor — the compute floor of one tutorial-cnn training step: the same gemm()
 * calls that layers.c issues (same shapes, layouts and transposes, same backend as the
 * trainer it is built with), timed alone with nothing else in the step. Prints one JSON
 * object with the step and each call's share:
 *   {"backend":"blis","threads":1,"batch":64,"step_ms":...,"samples_per_sec":...,
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

int main(int argc, char **argv)
{
    const int b = argc > 1 ? atoi(argv[1]) : 64;
    const double secs = argc > 2 ? atof(argv[2]) : 5.0;
    const int threads = argc > 3 ? atoi(argv[3]) : 0;
    if (threads > 0) gemm_set_threads(threads);
    /* tutorial-cnn: conv 3x3x1->32 on 28x28 (26x26 out), dense 21632->128, dense 128->10 */
    const int m1 = b * 26 * 26, k1 = 9, f1 = 32, d_in = 21632, d1 = 128, d2 = 10;
    float *col = buf((size_t)m1 * k1), *wc = buf((size_t)k1 * f1), *conv = buf((size_t)m1 * f1),
          *dwc = buf((size_t)k1 * f1), *w1 = buf((size_t)d_in * d1), *h = buf((size_t)b * d1),
          *dw1 = buf((size_t)d_in * d1), *dconv = buf((size_t)b * d_in), *w2 = buf((size_t)d1 * d2),
          *o = buf((size_t)b * d2), *dw2 = buf((size_t)d1 * d2), *dh = buf((size_t)b * d1);
    double flops = 2.0 * m1 * k1 * f1 * 2 + 2.0 * b * d_in * d1 * 3 + 2.0 * b * d1 * d2 * 3;
    double spent[NCALLS] = {0};
    long steps = 0;
    double t0 = now(), t, c0, c1;
#define TIMED(id, call) (c0 = now(), (call), c1 = now(), spent[id] += c1 - c0)
    do {
        /* forward (bias already in C: beta 1, as layers.c does) */
        TIMED(CONV_FWD, gemm(GEMM_N, GEMM_N, m1, f1, k1, 1.0f, col, k1, wc, f1, 1.0f, conv, f1));
        TIMED(DENSE1_FWD, gemm(GEMM_N, GEMM_N, b, d1, d_in, 1.0f, conv, d_in, w1, d1, 1.0f, h, d1));
        TIMED(DENSE2_FWD, gemm(GEMM_N, GEMM_N, b, d2, d1, 1.0f, h, d1, w2, d2, 1.0f, o, d2));
        /* backward: dense 2 (weights and input), dense 1 (weights and input), conv (weights) */
        TIMED(DENSE2_DW, gemm(GEMM_T, GEMM_N, d1, d2, b, 1.0f, h, d1, o, d2, 0.0f, dw2, d2));
        TIMED(DENSE2_DX, gemm(GEMM_N, GEMM_T, b, d1, d2, 1.0f, o, d2, w2, d2, 0.0f, dh, d1));
        TIMED(DENSE1_DW,
              gemm(GEMM_T, GEMM_N, d_in, d1, b, 1.0f, conv, d_in, dh, d1, 0.0f, dw1, d1));
        TIMED(DENSE1_DX,
              gemm(GEMM_N, GEMM_T, b, d_in, d1, 1.0f, dh, d1, w1, d1, 0.0f, dconv, d_in));
        TIMED(CONV_DW, gemm(GEMM_T, GEMM_N, k1, f1, m1, 1.0f, col, k1, dconv, f1, 0.0f, dwc, f1));
        steps++;
        t = now() - t0;
    } while (t < secs || steps < 3);
#undef TIMED
    double step = t / steps;
    printf("{\"backend\":\"%s\",\"threads\":%d,\"batch\":%d,\"steps\":%ld,\"step_ms\":%.3f,"
           "\"samples_per_sec\":%.1f,\"gflops\":%.2f,\"calls_ms\":{",
           gemm_backend(), threads, b, steps, step * 1e3, b / step, flops / step * 1e-9);
    for (int i = 0; i < NCALLS; i++)
        printf("%s\"%s\":%.3f", i ? "," : "", call_names[i], spent[i] / steps * 1e3);
    printf("}}\n");
    free(col), free(wc), free(conv), free(dwc), free(w1), free(h), free(dw1), free(dconv);
    free(w2), free(o), free(dw2), free(dh);
    return 0;
}
