#include "loss.h"

#include <math.h>
#include <stddef.h>

#define LOSS_EPS 1e-7f

static int row_argmax(const float *row, int c)
{
    int best = 0;
    for (int j = 1; j < c; j++)
        if (row[j] > row[best]) best = j;
    return best;
}

double loss_sce_logits(float *dlogits, int *correct, const float *logits, const int32_t *labels,
                       int b, int c, float scale)
{
    double total = 0.0;
    int ok = 0;
    for (int i = 0; i < b; i++) {
        const float *z = logits + (size_t)i * c;
        int y = labels[i], am = row_argmax(z, c);
        float mx = z[am];
        double sum = 0.0;
        for (int j = 0; j < c; j++) sum += exp((double)z[j] - mx);
        double lse = mx + log(sum);
        total += lse - z[y];
        ok += am == y;
        if (dlogits) {
            float *d = dlogits + (size_t)i * c;
            for (int j = 0; j < c; j++)
                d[j] = scale * ((float)exp((double)z[j] - lse) - (j == y ? 1.0f : 0.0f));
        }
    }
    if (correct) *correct = ok;
    return total;
}

double loss_sce_probs(float *dprobs, int *correct, const float *probs, const int32_t *labels, int b,
                      int c, float scale)
{
    double total = 0.0;
    int ok = 0;
    for (int i = 0; i < b; i++) {
        const float *p = probs + (size_t)i * c;
        int y = labels[i];
        double s = 0.0;
        for (int j = 0; j < c; j++) s += fmin(fmax(p[j], LOSS_EPS), 1.0 - LOSS_EPS);
        double py = fmin(fmax(p[y], LOSS_EPS), 1.0 - LOSS_EPS);
        total += -log(py / s);
        ok += row_argmax(p, c) == y;
        if (dprobs) {
            float *d = dprobs + (size_t)i * c;
            for (int j = 0; j < c; j++) {
                int clipped = p[j] < LOSS_EPS || p[j] > 1.0f - LOSS_EPS;
                double g = 1.0 / s - (j == y ? 1.0 / py : 0.0);
                d[j] = clipped ? 0.0f : (float)(scale * g);
            }
        }
    }
    if (correct) *correct = ok;
    return total;
}
