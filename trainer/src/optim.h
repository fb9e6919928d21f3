/* optim — the Keras 3 optimizers, with Keras's defaults and update rules, over the
 * one parameter arena. Their whole state is one float arena plus an iteration counter,
 * so a checkpoint saves it with one write. */
#ifndef KT_OPTIM_H
#define KT_OPTIM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" { /* also called from the GPU path's device.cu */
#endif

typedef enum { OPT_SGD = 0, OPT_RMSPROP, OPT_ADAM, OPT_ADAM_AMSGRAD } OptimizerKind;

typedef struct {
    OptimizerKind kind;
    float lr;
    float momentum;  /* sgd, rmsprop; Keras default 0 */
    int nesterov;    /* sgd */
    float rho;       /* rmsprop, default 0.9 */
    float beta1, beta2; /* adam, defaults 0.9, 0.999 */
    float epsilon;   /* rmsprop, adam: 1e-7 */
} OptimizerConfig;

typedef struct {
    OptimizerConfig cfg;
    size_t n;          /* parameters */
    float *state;      /* state_floats floats: the slots below, one after another */
    size_t state_floats;
    int64_t iterations; /* updates applied so far (Keras's optimizer.iterations) */
} Optimizer;

/* Keras's defaults for `kind` with learning rate lr. */
OptimizerConfig optim_defaults(OptimizerKind kind, float lr);

/* Parses "sgd", "rmsprop", "adam", "adam-amsgrad"; returns 0 or -EINVAL. */
int optim_parse_kind(const char *name, OptimizerKind *kind);
const char *optim_kind_name(OptimizerKind kind);

/* The floats of state an optimizer of cfg keeps per parameter (its slots: 0 to 3). */
size_t optim_state_per_param(const OptimizerConfig *cfg);

/* An optimizer for n parameters with zeroed state. Caller frees with optim_free. */
Optimizer *optim_create(const OptimizerConfig *cfg, size_t n);
void optim_free(Optimizer *o);

/* One update: params (n) -= f(grads (n), state); iterations += 1.
 *  sgd:      m = mom*m - lr*g; w += nesterov ? mom*m - lr*g : m   (w -= lr*g when mom == 0)
 *  rmsprop:  v = rho*v + (1-rho)*g^2; inc = lr*g / sqrt(v + eps);
 *            w -= inc, or with momentum: mo = mom*mo + inc; w -= mo
 *  adam:     t = iterations+1; a = lr*sqrt(1-b2^t)/(1-b1^t); m += (g-m)(1-b1);
 *            v += (g^2-v)(1-b2); [amsgrad: vh = max(vh, v), use vh]; w -= a*m/(sqrt(v)+eps)
 * A large arena is cut into ranges on the pool's threads (parallel_for); the result is the
 * same bits for any number of threads. */
void optim_step(Optimizer *o, float *params, const float *grads);

/* Whether o's update is plain SGD (sgd, momentum 0, lr > 0), which a single worker's
 * step folds into its backward pass (model_step_sgd). */
int optim_plain_sgd(const Optimizer *o);

/* Adam's step size a (optim_step's formula) for the update after `iterations` updates;
 * the GPU path's Adam kernel takes it from here too. */
float optim_adam_alpha(const OptimizerConfig *c, int64_t iterations);

#ifdef __cplusplus
}
#endif

#endif
