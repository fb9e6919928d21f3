/* gemm_floor — the compute floor of one tutorial-cnn training step: the same OpenBLAS
 * GEMMs that layers.c issues (same shapes, layouts and transposes), timed alone with
 * nothing else in the step. Prints one JSON object:
 *   {"batch":64,"step_ms":...,"samples_per_sec":...,"gflops":...}
 *
 *   gemm_floor [batch] [seconds]     (64, 5) */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

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

int main(int argc, char **argv)
{
    const int b = argc > 1 ? atoi(argv[1]) : 64;
    const double secs = argc > 2 ? atof(argv[2]) : 5.0;
    /* tutorial-cnn: conv 3x3x1->32 on 28x28 (26x26 out), dense 21632->128, dense 128->10 */
    const int m1 = b * 26 * 26, k1 = 9, f1 = 32, d_in = 21632, d1 = 128, d2 = 10;
    float *col = buf((size_t)m1 * k1), *wc = buf((size_t)k1 * f1), *conv = buf((size_t)m1 * f1),
          *dwc = buf((size_t)k1 * f1), *w1 = buf((size_t)d_in * d1), *h = buf((size_t)b * d1),
          *dw1 = buf((size_t)d_in * d1), *dconv = buf((size_t)b * d_in), *w2 = buf((size_t)d1 * d2),
          *o = buf((size_t)b * d2), *dw2 = buf((size_t)d1 * d2), *dh = buf((size_t)b * d1);
    double flops = 2.0 * m1 * k1 * f1 * 2 + 2.0 * b * d_in * d1 * 3 + 2.0 * b * d1 * d2 * 3;
    long steps = 0;
    double t0 = now(), t;
    do {
        /* forward */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m1, f1, k1, 1.0f, col, k1, wc, f1,
                    1.0f, conv, f1);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, b, d1, d_in, 1.0f, conv, d_in, w1, d1,
                    1.0f, h, d1);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, b, d2, d1, 1.0f, h, d1, w2, d2, 1.0f,
                    o, d2);
        /* backward: dense 2 (weights and input), dense 1 (weights and input), conv (weights) */
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, d1, d2, b, 1.0f, h, d1, o, d2, 0.0f,
                    dw2, d2);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, b, d1, d2, 1.0f, o, d2, w2, d2, 0.0f,
                    dh, d1);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, d_in, d1, b, 1.0f, conv, d_in, dh, d1,
                    0.0f, dw1, d1);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, b, d_in, d1, 1.0f, dh, d1, w1, d1, 0.0f,
                    dconv, d_in);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, k1, f1, m1, 1.0f, col, k1, dconv, f1,
                    0.0f, dwc, f1);
        steps++;
        t = now() - t0;
    } while (t < secs || steps < 3);
    double step = t / steps;
    printf("{\"batch\":%d,\"steps\":%ld,\"step_ms\":%.3f,\"samples_per_sec\":%.1f,\"gflops\":%.2f}\n",
           b, steps, step * 1e3, b / step, flops / step * 1e-9);
    free(col), free(wc), free(conv), free(dwc), free(w1), free(h), free(dw1), free(dconv);
    free(w2), free(o), free(dw2), free(dh);
    return 0;
}
