#include "initializer.h"

#include <cjson/cJSON.h>
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "util.h"

const Init init_glorot_uniform = {INIT_SCALING, INIT_FAN_AVG, INIT_DIST_UNIFORM, 1.0, 0.0};
const Init init_zeros = {INIT_CONSTANT, INIT_FAN_IN, INIT_DIST_TRUNCATED, 0.0, 0.0};
const Init init_ones = {INIT_CONSTANT, INIT_FAN_IN, INIT_DIST_TRUNCATED, 1.0, 0.0};

/* Each initializer under its Keras 3 class name and its tf-keras string alias, with the
 * config keys it takes (beside seed) and their defaults (Keras's). */
static const struct {
    const char *cls, *alias;
    Init init;
    const char *key_a, *key_b; /* the config keys of a and b, NULL: none */
} inits[] = {
    {"GlorotUniform",
     "glorot_uniform",
     {INIT_SCALING, INIT_FAN_AVG, INIT_DIST_UNIFORM, 1, 0},
     NULL,
     NULL},
    {"GlorotNormal",
     "glorot_normal",
     {INIT_SCALING, INIT_FAN_AVG, INIT_DIST_TRUNCATED, 1, 0},
     NULL,
     NULL},
    {"HeUniform", "he_uniform", {INIT_SCALING, INIT_FAN_IN, INIT_DIST_UNIFORM, 2, 0}, NULL, NULL},
    {"HeNormal", "he_normal", {INIT_SCALING, INIT_FAN_IN, INIT_DIST_TRUNCATED, 2, 0}, NULL, NULL},
    {"LecunUniform",
     "lecun_uniform",
     {INIT_SCALING, INIT_FAN_IN, INIT_DIST_UNIFORM, 1, 0},
     NULL,
     NULL},
    {"LecunNormal",
     "lecun_normal",
     {INIT_SCALING, INIT_FAN_IN, INIT_DIST_TRUNCATED, 1, 0},
     NULL,
     NULL},
    {"Zeros", "zeros", {INIT_CONSTANT, INIT_FAN_IN, INIT_DIST_TRUNCATED, 0, 0}, NULL, NULL},
    {"Ones", "ones", {INIT_CONSTANT, INIT_FAN_IN, INIT_DIST_TRUNCATED, 1, 0}, NULL, NULL},
    {"Constant",
     "constant",
     {INIT_CONSTANT, INIT_FAN_IN, INIT_DIST_TRUNCATED, 0, 0},
     "value",
     NULL},
    {"RandomNormal",
     "random_normal",
     {INIT_NORMAL, INIT_FAN_IN, INIT_DIST_TRUNCATED, 0, 0.05},
     "mean",
     "stddev"},
    {"RandomUniform",
     "random_uniform",
     {INIT_UNIFORM, INIT_FAN_IN, INIT_DIST_TRUNCATED, -0.05, 0.05},
     "minval",
     "maxval"},
    {"TruncatedNormal",
     "truncated_normal",
     {INIT_TRUNCATED, INIT_FAN_IN, INIT_DIST_TRUNCATED, 0, 0.05},
     "mean",
     "stddev"},
    {"VarianceScaling",
     "variance_scaling",
     {INIT_SCALING, INIT_FAN_IN, INIT_DIST_TRUNCATED, 1, 0},
     "scale",
     NULL},
};

static int fail(char *why, size_t whylen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int fail(char *why, size_t whylen, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, whylen, fmt, ap);
    va_end(ap);
    return -1;
}

/* A config number into *d: within FLT_MAX / 8, so that no draw (at most about 6 stddev
 * from the mean) leaves the range of a float, whose conversion would be undefined. */
static int number(const cJSON *c, double *d)
{
    if (!cJSON_IsNumber(c) || !(fabs(c->valuedouble) <= FLT_MAX / 8)) return -1;
    *d = c->valuedouble;
    return 0;
}

/* VarianceScaling's mode and distribution. */
static int scaling_key(const cJSON *c, Init *out)
{
    static const char *const modes[] = {"fan_in", "fan_out", "fan_avg"};
    static const char *const dists[] = {"truncated_normal", "untruncated_normal", "uniform"};
    const int mode = !strcmp(c->string, "mode");
    const char *const *names = mode ? modes : dists;
    for (int i = 0; i < 3 && cJSON_IsString(c); i++)
        if (!strcmp(c->valuestring, names[i])) {
            if (mode) out->mode = (InitMode)i;
            else out->dist = (InitDist)i;
            return 0;
        }
    return -1;
}

/* Keras's own class, not a custom one of the same name: module (when written) keras or
 * keras.*, registered_name (when written) null or the class. */
static int is_keras_object(const cJSON *v, const char *cls)
{
    if (!cJSON_IsObject(v)) return 1;
    const cJSON *module = cJSON_GetObjectItemCaseSensitive(v, "module");
    const cJSON *reg = cJSON_GetObjectItemCaseSensitive(v, "registered_name");
    if (module && !(cJSON_IsString(module) && !strncmp(module->valuestring, "keras", 5) &&
                    (!module->valuestring[5] || module->valuestring[5] == '.')))
        return 0;
    return !reg || cJSON_IsNull(reg) || (cJSON_IsString(reg) && !strcmp(reg->valuestring, cls));
}

int init_parse(const struct cJSON *v, Init *out, char *why, size_t whylen)
{
    const cJSON *cls = cJSON_IsString(v) ? v : cJSON_GetObjectItemCaseSensitive(v, "class_name");
    const cJSON *config = cJSON_IsObject(v) ? cJSON_GetObjectItemCaseSensitive(v, "config") : NULL;
    size_t i = 0, n = sizeof inits / sizeof inits[0];
    while (cJSON_IsString(cls) && i < n && strcmp(cls->valuestring, inits[i].cls) &&
           strcmp(cls->valuestring, inits[i].alias))
        i++;
    if (!cJSON_IsString(cls) || i == n)
        return fail(why, whylen, "%s is not supported: the trainer has %s",
                    cJSON_IsString(cls) ? cls->valuestring : "this initializer", INIT_SUPPORTED);
    if (!is_keras_object(v, cls->valuestring))
        return fail(why, whylen,
                    "%s: a custom initializer (module or registered_name not Keras's): the "
                    "trainer has %s",
                    cls->valuestring, INIT_SUPPORTED);
    *out = inits[i].init;
    if (config && !cJSON_IsNull(config) && !cJSON_IsObject(config))
        return fail(why, whylen, "%s: expected a config object", inits[i].cls);
    const int scaling = !strcmp(inits[i].cls, "VarianceScaling");
    for (const cJSON *c = config ? config->child : NULL; c; c = c->next) {
        const char *k = c->string;
        int bad;
        if (!strcmp(k, "seed")) /* other draws, not another distribution: --seed draws */
            bad = !cJSON_IsNull(c) && !cJSON_IsNumber(c);
        else if (!strcmp(k, "input_axes") || !strcmp(k, "output_axes")) /* Keras's defaults */
            bad = !cJSON_IsNull(c);
        else if (inits[i].key_a && !strcmp(k, inits[i].key_a)) bad = number(c, &out->a);
        else if (inits[i].key_b && !strcmp(k, inits[i].key_b)) bad = number(c, &out->b);
        else if (scaling && (!strcmp(k, "mode") || !strcmp(k, "distribution")))
            bad = scaling_key(c, out);
        else return fail(why, whylen, "%s: config key %s is not supported", inits[i].cls, k);
        if (bad)
            return fail(why, whylen, "%s: config %s is not one the trainer supports", inits[i].cls,
                        k);
    }
    if ((out->kind == INIT_NORMAL || out->kind == INIT_TRUNCATED) && !(out->b >= 0.0))
        return fail(why, whylen, "%s: expected a stddev >= 0", inits[i].cls);
    if (out->kind == INIT_UNIFORM && !(out->a <= out->b))
        return fail(why, whylen, "%s: expected minval <= maxval", inits[i].cls);
    if (scaling && !(out->a > 0.0))
        return fail(why, whylen, "%s: expected a scale > 0", inits[i].cls);
    return 0;
}

/* A standard normal draw (Box-Muller); 1 - u keeps the logarithm's argument in (0, 1]. */
static double normal(uint64_t *rng)
{
    const double u1 = 1.0 - (double)util_rand_float(rng), u2 = (double)util_rand_float(rng);
    return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

/* A standard normal draw within 2 (Keras's truncation), redrawn until it is. */
static double truncated(uint64_t *rng)
{
    double z;
    do z = normal(rng);
    while (fabs(z) > 2.0);
    return z;
}

void init_draw(const Init *in, float *w, size_t n, size_t fan_in, size_t fan_out, uint64_t *rng)
{
    double mean = in->a, sd = in->b;
    InitKind kind = in->kind;
    if (kind == INIT_SCALING) {
        /* Keras's variance: scale / fan; 2 * fan so that fan_avg's (in + out) / 2 stays an
         * integer, and Glorot-uniform's limit is the float sqrtf(6 / (in + out)) that the
         * trainer drew before initializers were configurable */
        const size_t twice = in->mode == INIT_FAN_IN    ? 2 * fan_in
                             : in->mode == INIT_FAN_OUT ? 2 * fan_out
                                                        : fan_in + fan_out;
        if (in->dist == INIT_DIST_UNIFORM) {
            const float limit = sqrtf((float)(6.0 * in->a) / (float)twice);
            for (size_t j = 0; j < n; j++) w[j] = (2.0f * util_rand_float(rng) - 1.0f) * limit;
            return;
        }
        mean = 0.0;
        sd = sqrt(2.0 * in->a / (double)twice);
        /* the stddev of a standard normal truncated at 2, so that the variance stays */
        if (in->dist == INIT_DIST_TRUNCATED) sd /= .87962566103423978;
        kind = in->dist == INIT_DIST_TRUNCATED ? INIT_TRUNCATED : INIT_NORMAL;
    }
    for (size_t j = 0; j < n; j++)
        w[j] = kind == INIT_CONSTANT  ? (float)in->a
               : kind == INIT_UNIFORM ? (float)(in->a + (in->b - in->a) * util_rand_float(rng))
               : kind == INIT_NORMAL  ? (float)(mean + sd * normal(rng))
                                      : (float)(mean + sd * truncated(rng));
}
