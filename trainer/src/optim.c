#include "optim.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gemm.h"
#include "pool.h"
#include "util.h"

static const char *const kind_names[] = {"sgd", "rmsprop", "adam", "adam-amsgrad"};

OptimizerConfig optim_defaults(OptimizerKind kind, float lr)
{
    return (OptimizerConfig){.kind = kind,
                             .lr = lr,
                             .momentum = 0.0f,
                             .nesterov = 0,
                             .rho = 0.9f,
                             .beta1 = 0.9f,
                             .beta2 = 0.999f,
                             .epsilon = 1e-7f};
}

int optim_parse_kind(const char *name, OptimizerKind *kind)
{
    for (int i = 0; i < 4; i++)
        if (strcmp(name, kind_names[i]) == 0) {
            *kind = (OptimizerKind)i;
            return 0;
        }
    return -EINVAL;
}

const char *optim_kind_name(OptimizerKind kind)
{
    return kind_names[kind];
}

size_t optim_state_per_param(const OptimizerConfig *cfg)
{
    switch (cfg->kind) {
    case OPT_SGD: return cfg->momentum != 0.0f ? 1 : 0;
    case OPT_RMSPROP: return cfg->momentum != 0.0f ? 2 : 1;
    case OPT_ADAM: return 2;
    case OPT_ADAM_AMSGRAD: return 3;
    }
    return 0;
}

Optimizer *optim_create(const OptimizerConfig *cfg, size_t n)
{
    Optimizer *o = xcalloc(1, sizeof *o);
    o->cfg = *cfg;
    o->n = n;
    o->state_floats = optim_state_per_param(cfg) * n;
    o->state = xcalloc(o->state_floats ? o->state_floats : 1, sizeof(float));
    return o;
}

void optim_free(Optimizer *o)
{
    if (!o) return;
    free(o->state);
    free(o);
}

/* Each rule below updates the elements [lo, hi) and reads nothing outside them, so a
 * step cut into ranges on several threads gives the same bits as one pass. */

static void sgd_step(const Optimizer *o, float *w, const float *g, size_t lo, size_t hi)
{
    const float lr = o->cfg.lr, mom = o->cfg.momentum;
    if (mom == 0.0f) {
        for (size_t i = lo; i < hi; i++) w[i] -= lr * g[i];
        return;
    }
    float *m = o->state;
    for (size_t i = lo; i < hi; i++) {
        m[i] = mom * m[i] - lr * g[i];
        w[i] += o->cfg.nesterov ? mom * m[i] - lr * g[i] : m[i];
    }
}

static void rmsprop_step(const Optimizer *o, float *w, const float *g, size_t lo, size_t hi)
{
    const float lr = o->cfg.lr, rho = o->cfg.rho, eps = o->cfg.epsilon, mom = o->cfg.momentum;
    float *v = o->state, *mo = o->state + o->n;
    for (size_t i = lo; i < hi; i++) {
        v[i] = rho * v[i] + (1.0f - rho) * g[i] * g[i];
        float inc = lr * g[i] / sqrtf(v[i] + eps);
        if (mom != 0.0f) {
            mo[i] = mom * mo[i] + inc;
            w[i] -= mo[i];
        } else {
            w[i] -= inc;
        }
    }
}

float optim_adam_alpha(const OptimizerConfig *c, int64_t iterations)
{
    const float t = (float)(iterations + 1);
    return c->lr * sqrtf(1.0f - powf(c->beta2, t)) / (1.0f - powf(c->beta1, t));
}

static void adam_step(const Optimizer *o, float *w, const float *g, size_t lo, size_t hi)
{
    const float b1 = o->cfg.beta1, b2 = o->cfg.beta2, eps = o->cfg.epsilon;
    const float alpha = optim_adam_alpha(&o->cfg, o->iterations);
    float *m = o->state, *v = o->state + o->n, *vh = o->state + 2 * o->n;
    /* two loops without a branch inside, so that both vectorize */
    if (o->cfg.kind == OPT_ADAM_AMSGRAD) {
        for (size_t i = lo; i < hi; i++) {
            m[i] += (g[i] - m[i]) * (1.0f - b1);
            v[i] += (g[i] * g[i] - v[i]) * (1.0f - b2);
            vh[i] = vh[i] > v[i] ? vh[i] : v[i];
            w[i] -= alpha * m[i] / (sqrtf(vh[i]) + eps);
        }
    } else {
        for (size_t i = lo; i < hi; i++) {
            m[i] += (g[i] - m[i]) * (1.0f - b1);
            v[i] += (g[i] * g[i] - v[i]) * (1.0f - b2);
            w[i] -= alpha * m[i] / (sqrtf(v[i]) + eps);
        }
    }
}

/* Below this many parameters a step runs on the caller alone. */
#define OPTIM_PARALLEL_MIN 65536

typedef struct {
    const Optimizer *o;
    float *w;
    const float *g;
    size_t chunk;
} StepJob;

static void step_range(void *ctx, int i)
{
    const StepJob *j = ctx;
    const Optimizer *o = j->o;
    size_t lo = (size_t)i * j->chunk, hi = lo + j->chunk < o->n ? lo + j->chunk : o->n;
    switch (o->cfg.kind) {
    case OPT_SGD: sgd_step(o, j->w, j->g, lo, hi); break;
    case OPT_RMSPROP: rmsprop_step(o, j->w, j->g, lo, hi); break;
    case OPT_ADAM:
    case OPT_ADAM_AMSGRAD: adam_step(o, j->w, j->g, lo, hi); break;
    }
}

void optim_step(Optimizer *o, float *params, const float *grads)
{
    /* one range per thread of the pool (the step is memory-bound: more ranges only
     * cost hand-offs), in multiples of 16 floats so that no two share a cache line */
    int parts = o->n < OPTIM_PARALLEL_MIN ? 1 : gemm_threads();
    StepJob j = {.o = o, .w = params, .g = grads};
    j.chunk = ((o->n + (size_t)parts - 1) / (size_t)parts + 15) / 16 * 16;
    if (j.chunk == 0) j.chunk = 16;
    parallel_for((int)((o->n + j.chunk - 1) / j.chunk), step_range, &j);
    o->iterations++;
}

int optim_plain_sgd(const Optimizer *o)
{
    return o->cfg.kind == OPT_SGD && o->cfg.momentum == 0.0f && o->cfg.lr > 0.0f;
}
