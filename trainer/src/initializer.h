/* initializer — how a variable's first values are drawn: Keras's initializers (Zeros, Ones,
 * Constant, RandomNormal, RandomUniform, TruncatedNormal, VarianceScaling and the named
 * forms of the last, Glorot/He/Lecun uniform and normal), read from the notation both
 * Keras 3 and tf-keras write ({"class_name": ..., "config": {...}} or a string alias such
 * as "he_normal") and drawn from the trainer's seeded splitmix64 stream, so every worker
 * draws the same values from --seed. A config's seed is accepted and unused (the stream is
 * --seed's); Keras's own random draws are not reproduced, their distribution is. */
#ifndef KT_INITIALIZER_H
#define KT_INITIALIZER_H

#include <stddef.h>
#include <stdint.h>

/* The initializers, for messages. */
#define INIT_SUPPORTED                                                                             \
    "GlorotUniform, GlorotNormal, HeUniform, HeNormal, LecunUniform, LecunNormal, Zeros, "         \
    "Ones, Constant(value), RandomNormal(mean, stddev), RandomUniform(minval, maxval), "           \
    "TruncatedNormal(mean, stddev), VarianceScaling(scale, mode, distribution)"

struct cJSON; /* cjson/cJSON.h: not included, so that model.h's CUDA users need not */

typedef enum {
    INIT_CONSTANT, /* a: the value (Zeros, Ones, Constant) */
    INIT_NORMAL,   /* a: mean, b: stddev */
    INIT_TRUNCATED, /* a: mean, b: stddev; redrawn beyond 2 stddev, as Keras does */
    INIT_UNIFORM,  /* [a, b) */
    INIT_SCALING   /* VarianceScaling: a: scale; mode, dist */
} InitKind;

typedef enum { INIT_FAN_IN, INIT_FAN_OUT, INIT_FAN_AVG } InitMode;
typedef enum { INIT_DIST_TRUNCATED, INIT_DIST_NORMAL, INIT_DIST_UNIFORM } InitDist;

typedef struct {
    InitKind kind;
    InitMode mode;
    InitDist dist;
    double a, b;
} Init;

/* The defaults of the trainer's layers: Keras's for a kernel, a bias (and beta and the
 * moving mean), and gamma (and the moving variance). */
extern const Init init_glorot_uniform, init_zeros, init_ones;

/* Reads v, an initializer as Keras writes it, into *out: 0, or -1 with why (a phrase
 * naming the class or config key and what is supported) in why. */
int init_parse(const struct cJSON *v, Init *out, char *why, size_t whylen);

/* Fills w (n floats, a variable whose Keras fans are fan_in and fan_out) from *rng.
 * Constants take no draws; random ones take two per value (a uniform one: one), more for
 * each truncated value redrawn. */
void init_draw(const Init *in, float *w, size_t n, size_t fan_in, size_t fan_out, uint64_t *rng);

#endif
