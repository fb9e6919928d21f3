/* Model specs: the built-in models' shapes and parameter counts (those Keras reports),
 * JSON and YAML spelling the same model, one-line errors that name the field, the
 * signature, seeded initialisation, and the bound on a model's memory. */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "assert_close.h"
#include "gemm.h"
#include "model.h"
#include "optim.h"
#include "util.h"

static void test_builtin_param_counts(void **s)
{
    (void)s;
    /* Keras's model.summary() totals */
    const struct {
        const char *name;
        size_t params;
        int layers;
    } want[] = {
        {"tutorial-cnn", 320 + 21632 * 128 + 128 + 1290, 5},
        {"tutorial-cnn-l2", 320 + 21632 * 128 + 128 + 1290, 5},
        {"cnn2", 320 + 18496 + 9216 * 64 + 64 + 650, 6},
        {"mlp", 784 * 128 + 128 + 1290, 4},
    };
    for (size_t i = 0; i < 4; i++) {
        Model *m;
        char err[256];
        assert_int_equal(model_create(&m, want[i].name, 1, err, sizeof err), 0);
        print_message("# %s: %zu params, %s\n", want[i].name, m->num_params, m->signature);
        assert_int_equal(m->num_params, want[i].params);
        assert_int_equal(m->num_layers, want[i].layers);
        assert_int_equal(m->num_classes, 10);
        assert_int_equal(m->input_size, 784);
        model_free(m);
    }
}

static void test_yaml_equals_json(void **s)
{
    (void)s;
    const char *yaml = "input_shape: [28, 28]\n"
                       "layers:\n"
                       "  - type: Reshape\n    target_shape: [28, 28, 1]\n"
                       "  - {type: Conv2D, filters: 32, kernel_size: 3, activation: relu,\n"
                       "     kernel_regularizer: {l2: 1.0e-5}}\n"
                       "  - type: Flatten\n"
                       "  - type: Dense\n    units: 128\n    activation: relu\n"
                       "    kernel_regularizer: {l2: 1.0e-5}\n"
                       "  - type: Dense\n    units: 10\n    kernel_regularizer: {l2: 1.0e-5}\n";
    Model *a, *b;
    char err[256];
    assert_int_equal(model_create_from_text(&a, yaml, "spec.yaml", 3, err, sizeof err), 0);
    assert_int_equal(model_create(&b, "tutorial-cnn-l2", 3, err, sizeof err), 0);
    assert_string_equal(a->signature, b->signature);
    assert_string_equal(a->signature_sha256, b->signature_sha256);
    assert_memory_equal(a->params, b->params, a->num_params * sizeof(float));
    model_free(a);
    model_free(b);
}

static void test_signature_distinguishes(void **s)
{
    (void)s;
    Model *a, *b;
    char err[256];
    assert_int_equal(model_create(&a, "tutorial-cnn", 1, err, sizeof err), 0);
    assert_int_equal(model_create(&b, "tutorial-cnn-l2", 1, err, sizeof err), 0);
    assert_string_not_equal(a->signature_sha256, b->signature_sha256);
    assert_non_null(strstr(a->signature, "params=2770634"));
    model_free(a);
    model_free(b);
}

static void test_seeded_init(void **s)
{
    (void)s;
    Model *a, *b, *c;
    char err[256];
    assert_int_equal(model_create(&a, "mlp", 1, err, sizeof err), 0);
    assert_int_equal(model_create(&b, "mlp", 1, err, sizeof err), 0);
    assert_int_equal(model_create(&c, "mlp", 2, err, sizeof err), 0);
    assert_memory_equal(a->params, b->params, a->num_params * sizeof(float));
    assert_memory_not_equal(a->params, c->params, a->num_params * sizeof(float));
    /* Glorot-uniform bounds of the first kernel, zero biases */
    float limit = sqrtf(6.0f / (784 + 128));
    const Layer *d = &a->layers[1];
    float mx = 0;
    for (size_t i = 0; i < d->w_count; i++) mx = fmaxf(mx, fabsf(a->params[d->w_off + i]));
    assert_true(mx <= limit && mx > 0.99f * limit);
    for (size_t i = 0; i < d->b_count; i++) assert_close_i(a->params[d->b_off + i], 0.0f, 0, i);
    model_free(a);
    model_free(b);
    model_free(c);
}

static void expect_error(const char *spec, const char *needle)
{
    Model *m = NULL;
    char err[1024] = "";
    int rc = model_create(&m, spec, 1, err, sizeof err);
    print_message("# %s\n", err);
    assert_true(rc < 0);
    assert_null(m);
    assert_non_null(strstr(err, needle));
    assert_null(strchr(err, '\n'));
}

/* One initializer's draws against Keras's formula: a kernel of a Dense 200 -> 300 (fans 200
 * and 300) or a Conv2D 5x5, 16 -> 32 channels (fans 400 and 800: the receptive field times
 * the channels). The sample's mean and std within 4 standard errors; min and max within
 * [lo, hi] and, for a bounded distribution, within 2% of the bounds (the sample reaches
 * them). Keras's truncated normals cut at 2 stddev; VarianceScaling's is rescaled by
 * 0.87962566103423978 (the std of a standard normal cut at 2) so its std is sqrt(scale/n). */
typedef struct {
    int conv;
    const char *init; /* the kernel_initializer's JSON */
    double mean, std, lo, hi;
} InitCase;

static void expect_draws(const InitCase *c)
{
    char spec[512], err[1024] = "";
    snprintf(spec, sizeof spec,
             c->conv ? "{\"input_shape\":[5,5,16],\"layers\":[{\"type\":\"Conv2D\",\"filters\":32,"
                       "\"kernel_size\":5,\"kernel_initializer\":%s},{\"type\":\"Flatten\"},"
                       "{\"type\":\"Dense\",\"units\":2}]}"
                     : "{\"input_shape\":[200],\"layers\":[{\"type\":\"Dense\",\"units\":300,"
                       "\"kernel_initializer\":%s}]}",
             c->init);
    Model *m = NULL;
    print_message("# %s %s\n", c->conv ? "Conv2D" : "Dense", c->init);
    const int rc = model_create(&m, spec, 9, err, sizeof err);
    if (rc) print_message("# %s\n", err);
    assert_int_equal(rc, 0);
    const Layer *l = &m->layers[0];
    const float *w = m->params + l->w_off;
    const size_t n = l->w_count;
    double sum = 0, sq = 0, lo = w[0], hi = w[0];
    for (size_t i = 0; i < n; i++) {
        sum += w[i];
        lo = fmin(lo, w[i]);
        hi = fmax(hi, w[i]);
    }
    const double mean = sum / (double)n;
    for (size_t i = 0; i < n; i++) sq += (w[i] - mean) * (w[i] - mean);
    const double std = sqrt(sq / (double)n);
    assert_close(mean, c->mean, 4 * c->std / sqrt((double)n));
    assert_close(std, c->std, 4 * c->std / sqrt(2.0 * (double)n));
    assert_true(lo >= c->lo - 1e-6 && hi <= c->hi + 1e-6);
    if (isfinite(c->lo)) {
        assert_close(lo, c->lo, 0.02 * (c->hi - c->lo));
        assert_close(hi, c->hi, 0.02 * (c->hi - c->lo));
    }
    model_free(m);
}

static void test_initializers(void **s)
{
    (void)s;
    const double t = 0.87962566103423978, inf = INFINITY;
    const double he_d = sqrt(2.0 / 200), he_c = sqrt(2.0 / 400);
    const InitCase cases[] = {
        {0, "\"he_normal\"", 0, he_d, -2 * he_d / t, 2 * he_d / t},
        {1, "{\"class_name\":\"HeNormal\",\"config\":{\"seed\":null}}", 0, he_c, -2 * he_c / t,
         2 * he_c / t},
        {1, "\"he_uniform\"", 0, sqrt(2.0 / 400), -sqrt(6.0 / 400), sqrt(6.0 / 400)},
        {0, "{\"class_name\":\"GlorotNormal\",\"config\":{\"seed\":3}}", 0, sqrt(2.0 / 500),
         -2 * sqrt(2.0 / 500) / t, 2 * sqrt(2.0 / 500) / t},
        {1, "\"glorot_uniform\"", 0, sqrt(2.0 / 1200), -sqrt(6.0 / 1200), sqrt(6.0 / 1200)},
        {0, "\"lecun_uniform\"", 0, sqrt(1.0 / 200), -sqrt(3.0 / 200), sqrt(3.0 / 200)},
        {1, "{\"class_name\":\"LecunNormal\",\"config\":{}}", 0, sqrt(1.0 / 400),
         -2 * sqrt(1.0 / 400) / t, 2 * sqrt(1.0 / 400) / t},
        {1,
         "{\"class_name\":\"VarianceScaling\",\"config\":{\"scale\":0.5,\"mode\":\"fan_out\","
         "\"distribution\":\"untruncated_normal\",\"seed\":null}}",
         0, sqrt(0.5 / 800), -inf, inf},
        {0,
         "{\"class_name\":\"VarianceScaling\",\"config\":{\"scale\":3,\"mode\":\"fan_avg\","
         "\"distribution\":\"uniform\"}}",
         0, sqrt(3.0 / 250), -sqrt(9.0 / 250), sqrt(9.0 / 250)},
        {0, "{\"class_name\":\"VarianceScaling\",\"config\":{\"mode\":\"fan_in\"}}", 0,
         sqrt(1.0 / 200), -2 * sqrt(1.0 / 200) / t, 2 * sqrt(1.0 / 200) / t},
        {0, "{\"class_name\":\"RandomNormal\",\"config\":{\"mean\":0.5,\"stddev\":0.2}}", 0.5, 0.2,
         -inf, inf},
        {0, "\"random_normal\"", 0, 0.05, -inf, inf},
        {1, "{\"class_name\":\"RandomUniform\",\"config\":{\"minval\":-0.3,\"maxval\":0.1}}", -0.1,
         0.4 / sqrt(12.0), -0.3, 0.1},
        {0, "{\"class_name\":\"TruncatedNormal\",\"config\":{\"mean\":1,\"stddev\":0.1}}", 1,
         0.1 * t, 0.8, 1.2},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) expect_draws(&cases[i]);
}

/* The constant initializers, exactly, on every variable that takes one. */
static void test_constant_initializers(void **s)
{
    (void)s;
    const char *spec =
        "{\"input_shape\":[6,6,2],\"layers\":["
        "{\"type\":\"Conv2D\",\"filters\":3,\"kernel_size\":3,\"kernel_initializer\":"
        "{\"class_name\":\"Constant\",\"config\":{\"value\":0.25}},\"bias_initializer\":\"ones\"},"
        "{\"type\":\"BatchNormalization\",\"gamma_initializer\":{\"class_name\":\"Constant\","
        "\"config\":{\"value\":-2}},\"beta_initializer\":\"ones\",\"moving_mean_initializer\":"
        "{\"class_name\":\"Ones\",\"config\":{}},\"moving_variance_initializer\":\"constant\"},"
        "{\"type\":\"Flatten\"},{\"type\":\"Dense\",\"units\":4,\"kernel_initializer\":"
        "{\"class_name\":\"Zeros\",\"config\":null},\"bias_initializer\":{\"class_name\":"
        "\"Constant\",\"config\":{\"value\":7}}}]}";
    Model *m = NULL;
    char err[1024] = "";
    int rc = model_create(&m, spec, 1, err, sizeof err);
    print_message("# %s\n", err);
    assert_int_equal(rc, 0);
    const Layer *conv = &m->layers[0], *bn = &m->layers[1], *dense = &m->layers[3];
    const float *p = m->params;
    for (size_t i = 0; i < conv->w_count; i++) assert_close_i(p[conv->w_off + i], 0.25, 0, i);
    for (size_t i = 0; i < conv->b_count; i++) assert_close_i(p[conv->b_off + i], 1, 0, i);
    assert_int_equal(bn->w_count, 3);
    for (size_t i = 0; i < 3; i++) {
        assert_close_i(p[bn->w_off + i], -2, 0, i);    /* gamma */
        assert_close_i(p[bn->b_off + i], 1, 0, i);     /* beta */
        assert_close_i(p[bn->s_off + i], 1, 0, i);     /* moving mean */
        assert_close_i(p[bn->s_off + 3 + i], 0, 0, i); /* moving variance: Constant's 0 */
    }
    for (size_t i = 0; i < dense->w_count; i++) assert_close_i(p[dense->w_off + i], 0, 0, i);
    for (size_t i = 0; i < dense->b_count; i++) assert_close_i(p[dense->b_off + i], 7, 0, i);
    model_free(m);
    expect_error("{\"input_shape\":[4],\"layers\":[{\"type\":\"Dense\",\"units\":2,"
                 "\"kernel_initializer\":\"orthogonal\"}]}",
                 "layers[0].kernel_initializer: expected an initializer as Keras writes it: "
                 "orthogonal is not supported: the trainer has GlorotUniform");
    expect_error("{\"input_shape\":[4],\"layers\":[{\"type\":\"Dense\",\"units\":2,"
                 "\"bias_initializer\":{\"class_name\":\"VarianceScaling\",\"config\":"
                 "{\"mode\":\"fan_sum\"}}}]}",
                 "layers[0].bias_initializer: expected an initializer as Keras writes it: "
                 "VarianceScaling: config mode is not one the trainer supports");
    /* a value beyond a float's range would make the float conversion undefined */
    expect_error("{\"input_shape\":[4],\"layers\":[{\"type\":\"Dense\",\"units\":2,"
                 "\"bias_initializer\":{\"class_name\":\"Constant\",\"config\":"
                 "{\"value\":1e39}}}]}",
                 "layers[0].bias_initializer: expected an initializer as Keras writes it: "
                 "Constant: config value is not one the trainer supports");
}

static void test_spec_errors(void **s)
{
    (void)s;
    expect_error("no-such-model", "expected tutorial-cnn, tutorial-cnn-l2, cnn2, mlp");
    expect_error("{\"layers\": [", "invalid JSON");
    expect_error("{\"layers\": []}", "layers: expected a non-empty list");
    expect_error("{\"layers\":[{\"type\":\"Flatten\"},{\"type\":\"Dense\",\"units\":0}]}",
                 "layers[1].units: expected an integer in [1,");
    expect_error("{\"layers\":[{\"type\":\"Flatten\"},{\"type\":\"Dense\",\"units\":\"ten\"}]}",
                 "layers[1].units");
    expect_error("{\"layers\":[{\"type\":\"Conv2D\",\"filters\":3,\"kernel_size\":3}]}",
                 "layers[0].type: expected Conv2D after a (height, width, channels) shape");
    expect_error("{\"input_shape\":[28,28,1],\"layers\":[{\"type\":\"Conv2D\",\"filters\":3,"
                 "\"kernel_size\":30},{\"type\":\"Flatten\"},{\"type\":\"Dense\",\"units\":2}]}",
                 "layers[0].kernel_size: expected a kernel no larger than the input");
    expect_error("{\"input_shape\":[28,28,1],\"layers\":[{\"type\":\"Conv2D\",\"filters\":3,"
                 "\"kernel_size\":3,\"padding\":\"full\"}]}",
                 "layers[0].padding: expected \"valid\" or \"same\"");
    expect_error("{\"layers\":[{\"type\":\"Flatten\"},{\"type\":\"Dense\",\"units\":10,"
                 "\"activation\":\"hard_sigmoid\"}]}",
                 "layers[1].activation: expected one of " MODEL_ACTIVATIONS);
    expect_error("{\"layers\":[{\"type\":\"Flatten\"},{\"type\":\"Dropout\",\"rate\":1.5},"
                 "{\"type\":\"Dense\",\"units\":10}]}",
                 "layers[1].rate: expected a number in [0, 1)");
    expect_error("{\"layers\":[{\"type\":\"Reshape\",\"target_shape\":[28,27,1]}]}",
                 "layers[0].target_shape: expected a shape with as many elements");
    expect_error("{\"layers\":[{\"type\":\"LSTM\"}]}", "layers[0].type: expected Input, Reshape");
    expect_error("{\"layers\":[{\"type\":\"Flatten\"},{\"type\":\"Dense\",\"units\":10,"
                 "\"kernel_regularizer\":{\"l3\":1}}]}",
                 "layers[1].kernel_regularizer: expected {\"l1\": F, \"l2\": F}");
    expect_error("{\"layers\":[{\"type\":\"Flatten\"},{\"type\":\"Dense\",\"units\":10,"
                 "\"kernel_regularizer\":{\"l1\":-1}}]}",
                 "layers[1].kernel_regularizer: expected {\"l1\": F, \"l2\": F}");
    expect_error("{\"layers\":[{\"type\":\"Flatten\"}]}", "layers: expected a last layer Dense");
    expect_error("{\"layers\":[{\"type\":\"Dense\",\"units\":10}]}",
                 "layers: expected a last layer Dense on a flat input");
    expect_error("{\"input_shape\":[4,4,1],\"layers\":[{\"type\":\"MaxPooling2D\","
                 "\"pool_size\":[5,1]},{\"type\":\"Flatten\"},{\"type\":\"Dense\",\"units\":2}]}",
                 "layers[0].pool_size: expected a pool no larger than the input");
    expect_error("{\"input_shape\":[4,4,1],\"layers\":[{\"type\":\"MaxPooling2D\","
                 "\"padding\":\"causal\"}]}",
                 "layers[0].padding: expected \"valid\" or \"same\"");
    expect_error("layers:\n  - type: Flatten\n  - {type: Dense, units: 10\n", "invalid YAML");
    /* a Keras option the trainer lacks is refused, not ignored */
    expect_error("{\"input_shape\":[28,28,1],\"layers\":[{\"type\":\"Conv2D\",\"filters\":2,"
                 "\"kernel_size\":3,\"dilation_rate\":2},{\"type\":\"Flatten\"},"
                 "{\"type\":\"Dense\",\"units\":10}]}",
                 "layers[0].dilation_rate: not a Conv2D option here (it takes: filters, "
                 "kernel_size, strides, padding, activation, use_bias, kernel_regularizer, "
                 "kernel_initializer, bias_initializer, name)");
    expect_error("{\"layers\":[{\"type\":\"Flatten\",\"data_format\":\"x\"},"
                 "{\"type\":\"Dense\",\"units\":10}]}",
                 "layers[0].data_format: not a Flatten option here (it takes: name)");
    /* Regressions (fuzz-model): sizes that overflowed an int or the arena's size_t. */
    expect_error("{\"input_shape\":[1048576,1048576,1048576],\"layers\":[{\"type\":\"Flatten\"},"
                 "{\"type\":\"Dense\",\"units\":2}]}",
                 "input_shape: expected at most 2^28 values per example");
    expect_error("{\"layers\":[{\"type\":\"Input\",\"shape\":[65536,65536]},"
                 "{\"type\":\"Flatten\"},{\"type\":\"Dense\",\"units\":2}]}",
                 "layers[0].shape: expected at most 2^28 values per example");
    expect_error("{\"input_shape\":[16384,16384],\"layers\":[{\"type\":\"Flatten\"},"
                 "{\"type\":\"Dense\",\"units\":1048576},{\"type\":\"Dense\",\"units\":2}]}",
                 "layers[1].type: expected a layer of at most 2^28 outputs");
    expect_error(
        "{\"input_shape\":[4096,4096,16],\"layers\":[{\"type\":\"Conv2D\",\"filters\":"
        "65536,\"kernel_size\":3},{\"type\":\"Flatten\"},{\"type\":\"Dense\",\"units\":2}]}",
        "layers[0].type: expected a layer of at most 2^28 outputs");
    expect_error("{\"input_shape\":[8192,16384],\"layers\":[{\"type\":\"Flatten\"},"
                 "{\"type\":\"Dense\",\"units\":2},{\"type\":\"Dense\",\"units\":2}]}",
                 "layers: expected at most 2^28 parameters in all");
}

/* model_memory adds up what model_create and model_reserve allocate and the optimizer's
 * state; model_create_within refuses a spec over its bound before allocating it. */
/* gelu and swish keep their input for the backward: one more output-sized buffer each,
 * counted by model_memory as model_reserve allocates it; the GPU path refuses them all. */
static void test_activation_buffers(void **s)
{
    (void)s;
    Model *m;
    char err[512];
    assert_int_equal(model_create(&m,
                                  "{\"input_shape\":[8],\"layers\":["
                                  "{\"type\":\"Dense\",\"units\":6,\"activation\":\"gelu\"},"
                                  "{\"type\":\"Dense\",\"units\":5,\"activation\":\"tanh\"},"
                                  "{\"type\":\"Dense\",\"units\":4,\"activation\":\"swish\"}]}",
                                  1, err, sizeof err),
                     0);
    ModelMemory mm = model_memory(m, 10, 0);
    /* outputs 6 + 5 + 4, pre-activations 6 + 4, two gradients of the widest (8 inputs) */
    assert_int_equal(mm.activations, 10 * (6 + 5 + 4 + 6 + 4 + 2 * 8) * 4);
    const Layer *l = model_gpu_unsupported(m);
    assert_non_null(l);
    assert_string_equal(l->name, "dense");
    assert_string_equal(model_activation_name(l->act), "gelu");
    model_free(m);
    assert_int_equal(model_create(&m,
                                  "{\"input_shape\":[8],\"layers\":[{\"type\":\"Dense\","
                                  "\"units\":6},{\"type\":\"ReLU\"},{\"type\":\"Dense\","
                                  "\"units\":4}]}",
                                  1, err, sizeof err),
                     0);
    assert_string_equal(model_gpu_unsupported(m)->name, "re_lu");
    model_free(m);
    /* the pooling layers and BatchNormalization the device has no kernel for: each refused
     * by name; max pooling (cnn2) trains there */
    static const char *const pools[] = {"AveragePooling2D", "GlobalAveragePooling2D",
                                        "GlobalMaxPooling2D", "BatchNormalization"};
    static const char *const stems[] = {"average_pooling2d", "global_average_pooling2d",
                                        "global_max_pooling2d", "batch_normalization"};
    for (int i = 0; i < 4; i++) {
        char spec[256];
        snprintf(spec, sizeof spec,
                 "{\"input_shape\":[4,4,2],\"layers\":[{\"type\":\"%s\"},"
                 "{\"type\":\"Flatten\"},{\"type\":\"Dense\",\"units\":3}]}",
                 pools[i]);
        assert_int_equal(model_create(&m, spec, 1, err, sizeof err), 0);
        assert_non_null(model_gpu_unsupported(m));
        assert_string_equal(model_gpu_unsupported(m)->name, stems[i]);
        assert_int_equal(model_gpu_has_layer(model_gpu_unsupported(m)), 0);
        model_free(m);
    }
    assert_int_equal(model_create(&m,
                                  "{\"input_shape\":[4],\"layers\":[{\"type\":\"Rescaling\","
                                  "\"scale\":0.5},{\"type\":\"Dense\",\"units\":3}]}",
                                  1, err, sizeof err),
                     0);
    assert_string_equal(model_gpu_unsupported(m)->name, "rescaling");
    model_free(m);
    assert_int_equal(model_create(&m,
                                  "{\"input_shape\":[4],\"layers\":[{\"type\":\"Dense\","
                                  "\"units\":3,\"use_bias\":false,\"name\":\"nb\"}]}",
                                  1, err, sizeof err),
                     0);
    assert_string_equal(model_gpu_unsupported(m)->name, "nb");
    model_free(m);
    assert_int_equal(model_create(&m,
                                  "{\"input_shape\":[4],\"layers\":[{\"type\":\"Dense\","
                                  "\"units\":3,\"kernel_regularizer\":{\"l1\":0.1}}]}",
                                  1, err, sizeof err),
                     0);
    assert_string_equal(model_gpu_unsupported(m)->name, "dense");
    model_free(m);
    assert_int_equal(model_create(&m, "cnn2", 1, err, sizeof err), 0);
    assert_null(model_gpu_unsupported(m));
    model_free(m);
    assert_int_equal(model_create(&m, "tutorial-cnn", 1, err, sizeof err), 0);
    assert_null(model_gpu_unsupported(m));
    model_free(m);
}

static void test_memory_bound(void **s)
{
    (void)s;
    Model *m;
    char err[512];
    assert_int_equal(model_create(&m, "mlp", 1, err, sizeof err), 0);
    const size_t P = 784 * 128 + 128 + 1290;
    /* batch 10: one shard; Dense(128) and Dropout outputs, Dropout's mask, Dense(10),
     * two activation gradients of the widest layer (the 784 inputs) */
    ModelMemory mm = model_memory(m, 10, 0);
    assert_int_equal(mm.weights, P * 4 + model_grads_bytes(P));
    assert_int_equal(mm.activations, (10 * 128 * 3 + 10 * 10 + 2 * 10 * 784) * 4);
    assert_int_equal(mm.total, mm.weights + mm.activations);
    model_free(m);
    /* tutorial-cnn with Adam at batch 64: two state floats per parameter, the Conv2D's
     * gradient in 3 more shards, each of the 4 shards' Conv2D scratch (a block of 3
     * examples' im2col and column gradient, 26x26 pixels x 9 each, and a kernel's room),
     * and a zeroed input gradient for the Dense layer after the relu Conv2D */
    assert_int_equal(model_create(&m, "tutorial-cnn", 1, err, sizeof err), 0);
    const size_t Q = m->num_params, conv = 26 * 26 * 32;
    mm = model_memory(m, 64, 2);
    assert_int_equal(mm.weights, Q * 4 * 3 + model_grads_bytes(Q) + 3 * 320 * 4);
    assert_int_equal(mm.activations,
                     (64 * (conv + 128 + 10 + 3 * conv) + 4 * (3 * 26 * 26 * 9 * 2 + 9 * 32)) *
                         sizeof(float));
    ModelBudget b = {.batch = 64, .state_per_param = 2, .limit = mm.total};
    model_free(m);
    m = NULL;
    assert_int_equal(model_create_within(&m, "tutorial-cnn", 1, &b, err, sizeof err), 0);
    model_free(m);
    m = NULL;
    b.limit--;
    assert_int_equal(model_create_within(&m, "tutorial-cnn", 1, &b, err, sizeof err), -E2BIG);
    assert_null(m);
    print_message("# %s\n", err);
    assert_non_null(strstr(err, "built-in model tutorial-cnn: the model needs 64.0 MiB"));
    assert_non_null(strstr(err, "over the limit of 64.0 MiB"));
    /* Legal layer by layer, 37.5 GiB in all at batch 64 (2^28 floats per layer at
     * most): refused before its 0.4 GiB of parameters are allocated */
    const char *big = "{\"input_shape\":[28,28,1],\"layers\":[{\"type\":\"Conv2D\","
                      "\"filters\":65536,\"kernel_size\":1},{\"type\":\"Flatten\"},"
                      "{\"type\":\"Dense\",\"units\":2}]}";
    b = (ModelBudget){.batch = 64, .state_per_param = 0, .limit = (size_t)4 << 30};
    assert_int_equal(model_create_within(&m, big, 1, &b, err, sizeof err), -E2BIG);
    assert_null(m);
    print_message("# %s\n", err);
    assert_non_null(strstr(err, "the model needs 37.5 GiB of memory (102891522 parameters"));
    assert_non_null(strstr(err, "activations of 64 examples per step: 36.8 GiB"));
    assert_non_null(strstr(err, "over the limit of 4.0 GiB"));
}

static void test_spec_file(void **s)
{
    (void)s;
    char path[] = "/tmp/kt-test-model-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    const char *spec = "layers:\n  - type: Input\n    shape: [28, 28]\n  - type: Flatten\n"
                       "  - type: Dense\n    units: 10\n    activation: softmax\n";
    FILE *f = fdopen(fd, "w");
    fputs(spec, f);
    fclose(f);
    Model *m;
    char err[256];
    assert_int_equal(model_create(&m, path, 1, err, sizeof err), 0);
    assert_int_equal(m->num_params, 7850);
    assert_false(m->from_logits);
    model_free(m);
    f = fopen(path, "w");
    fputs("layers:\n  - type: Flatten\n  - type: Dense\n    units: -3\n", f);
    fclose(f);
    m = NULL;
    assert_true(model_create(&m, path, 1, err, sizeof err) < 0);
    assert_non_null(strstr(err, path));
    assert_non_null(strstr(err, "layers[1].units"));
    unlink(path);
}

typedef struct {
    size_t next_end; /* ranges must come last to first, back to back */
    int calls, out_of_order;
} ReadyLog;

static void on_ready_log(void *ctx, size_t offset, size_t count)
{
    ReadyLog *r = ctx;
    if (offset + count != r->next_end) r->out_of_order++;
    r->next_end = offset;
    r->calls++;
}

/* One step cut into shards over 3 threads (model.c) equals the step on one thread: the
 * same dropout masks bit for bit, the same statistics, gradients equal up to the order
 * of the sums, every layer handed to on_ready last to first; and the sharded step is
 * reproducible. Covers a same-padded strided conv, pooling, dropout, a Dense on rank > 1
 * and L2. */
static void test_sharded_step_equals_one_thread(void **s)
{
    (void)s;
    const char *spec =
        "{\"input_shape\":[12,12,1],\"layers\":["
        "{\"type\":\"Conv2D\",\"filters\":4,\"kernel_size\":3,\"strides\":2,"
        "\"padding\":\"same\",\"activation\":\"relu\",\"kernel_regularizer\":{\"l2\":0.01}},"
        "{\"type\":\"MaxPooling2D\",\"pool_size\":2},"
        "{\"type\":\"Dropout\",\"rate\":0.3},"
        "{\"type\":\"Dense\",\"units\":5,\"activation\":\"relu\"},"
        "{\"type\":\"Flatten\"},"
        "{\"type\":\"Dropout\",\"rate\":0.2},"
        "{\"type\":\"Dense\",\"units\":10}]}";
    enum { B = 48 };
    char err[256];
    Model *m[3] = {NULL, NULL, NULL};
    for (int i = 0; i < 3; i++) {
        assert_int_equal(model_create(&m[i], spec, 7, err, sizeof err), 0);
        model_reserve(m[i], B);
    }
    float *x = malloc(sizeof(float) * B * 144);
    int32_t y[B];
    uint64_t rng = 3;
    for (int i = 0; i < B * 144; i++) x[i] = util_rand_float(&rng);
    for (int i = 0; i < B; i++) y[i] = (int32_t)util_rand_below(&rng, 10);

    StepStats st[3];
    ReadyLog log[3];
    for (int i = 0; i < 3; i++) {
        gemm_set_threads(i == 0 ? 1 : 3);
        log[i] = (ReadyLog){.next_end = m[i]->num_params};
        model_step(m[i], x, y, B, 2 * B, 2, 99, on_ready_log, &log[i], &st[i]);
        assert_int_equal(log[i].out_of_order, 0);
        assert_int_equal(log[i].next_end, 0);
        assert_int_equal(log[i].calls, 3);
    }
    gemm_set_threads(1);
    assert_close_lt(st[0].loss, st[1].loss, 1e-6 * fabs(st[0].loss));
    assert_close(st[0].correct, st[1].correct, 0);
    assert_close(st[1].count, B, 0);
    double gmax = 0.0, dmax = 0.0;
    for (size_t k = 0; k < m[0]->num_params; k++) {
        gmax = fmax(gmax, fabs(m[0]->grads[k]));
        dmax = fmax(dmax, fabs(m[0]->grads[k] - m[1]->grads[k]));
    }
    print_message("# sharded step: largest gradient %.3g, largest difference %.3g\n", gmax, dmax);
    assert_true(gmax > 0.0 && dmax <= 1e-5 * gmax);
    /* the second sharded run is the first, bit for bit */
    assert_memory_equal(m[1]->grads, m[2]->grads, m[1]->num_params * sizeof(float));
    assert_close(st[1].loss, st[2].loss, 0);
    for (int l = 0; l < m[0]->num_layers; l++)
        if (m[0]->masks[l])
            assert_memory_equal(m[0]->masks[l], m[1]->masks[l],
                                (size_t)B * m[0]->layers[l].out_size * sizeof(float));

    /* evaluation sharded the same way */
    StepStats e0, e1;
    gemm_set_threads(1);
    model_evaluate(m[0], x, y, B, &e0);
    gemm_set_threads(3);
    model_evaluate(m[1], x, y, B, &e1);
    gemm_set_threads(1);
    assert_close_lt(e0.loss, e1.loss, 1e-6 * fabs(e0.loss));
    assert_close(e0.correct, e1.correct, 0);
    free(x);
    for (int i = 0; i < 3; i++) model_free(m[i]);
}

/* A single worker's step with plain SGD folded into the backward (model_step_sgd) makes
 * the same update as model_step followed by optim_step: over three steps, with L2 on a
 * conv and on a Dense kernel, a BatchNormalization (its moving statistics, updated by
 * model_update_moving after either, are no trained weights), dropout, and shards on 3
 * threads; the statistics agree and the gradients it still writes (everything but the
 * Dense kernels) are the same. */
/* A Dense layer that feeds a relu Conv2D (through Flatten) adds its input gradient onto
 * a buffer the conv zeroes again as it reads it (model.h, dzero). The same step twice, on
 * the same weights and batch, must give the same gradients bit for bit, with one thread
 * and with shards, and a model_step_sgd between them must leave the buffer zero too. */
static void test_zeroed_gradient_buffer_stays_zero(void **s)
{
    (void)s;
    const char *spec = "{\"input_shape\":[14,14,1],\"layers\":["
                       "{\"type\":\"Conv2D\",\"filters\":6,\"kernel_size\":3,"
                       "\"activation\":\"relu\"},"
                       "{\"type\":\"Flatten\"},"
                       "{\"type\":\"Dense\",\"units\":12,\"activation\":\"relu\"},"
                       "{\"type\":\"Dense\",\"units\":10}]}";
    enum { B = 20 };
    char err[256];
    Model *m;
    assert_int_equal(model_create(&m, spec, 3, err, sizeof err), 0);
    model_reserve(m, B);
    assert_non_null(m->dzero);
    const size_t np = m->num_params, ng = np + MODEL_STATS_FLOATS;
    float *x = malloc(sizeof(float) * B * 196), *g1 = malloc(ng * sizeof *g1);
    float *p0 = malloc(np * sizeof *p0);
    int32_t y[B];
    uint64_t rng = 9;
    for (int i = 0; i < B * 196; i++) x[i] = util_rand_float(&rng);
    for (int i = 0; i < B; i++) y[i] = (int32_t)util_rand_below(&rng, 10);
    memcpy(p0, m->params, np * sizeof *p0);
    for (int threads = 1; threads <= 3; threads += 2) {
        gemm_set_threads(threads);
        StepStats st;
        model_step(m, x, y, B, B, 1, 1, NULL, NULL, &st);
        memcpy(g1, m->grads, np * sizeof *g1);
        for (int i = 0; i < (int)(B * m->dmax); i++) assert_close_i(m->dzero[i], 0.0f, 0, i);
        model_step_sgd(m, x, y, B, 1, 0.1f, &st); /* moves the weights; uses the buffer too */
        for (int i = 0; i < (int)(B * m->dmax); i++) assert_close_i(m->dzero[i], 0.0f, 0, i);
        memcpy(m->params, p0, np * sizeof *p0);
        model_step(m, x, y, B, B, 1, 1, NULL, NULL, &st);
        assert_memory_equal(g1, m->grads, np * sizeof *g1);
    }
    gemm_set_threads(1);
    free(x), free(g1), free(p0);
    model_free(m);
}

static void test_folded_sgd_equals_step_then_sgd(void **s)
{
    (void)s;
    const char *spec = "{\"input_shape\":[12,12,1],\"layers\":["
                       "{\"type\":\"Conv2D\",\"filters\":4,\"kernel_size\":3,"
                       "\"activation\":\"relu\",\"kernel_regularizer\":{\"l2\":0.01}},"
                       "{\"type\":\"MaxPooling2D\",\"pool_size\":2},"
                       "{\"type\":\"BatchNormalization\",\"momentum\":0.5},"
                       "{\"type\":\"Dropout\",\"rate\":0.3},"
                       "{\"type\":\"Flatten\"},"
                       "{\"type\":\"Dense\",\"units\":16,\"activation\":\"relu\","
                       "\"kernel_regularizer\":{\"l2\":0.02}},"
                       "{\"type\":\"Dense\",\"units\":10}]}";
    enum { B = 48 };
    const float lr = 0.05f;
    char err[256];
    Model *m[2] = {NULL, NULL};
    for (int i = 0; i < 2; i++) {
        assert_int_equal(model_create(&m[i], spec, 11, err, sizeof err), 0);
        model_reserve(m[i], B);
    }
    const size_t np = m[0]->num_params;
    float *p0 = malloc(np * sizeof *p0), *x = malloc(sizeof(float) * B * 144);
    memcpy(p0, m[0]->params, np * sizeof *p0);
    int32_t y[B];
    uint64_t rng = 5;
    OptimizerConfig c = optim_defaults(OPT_SGD, lr);
    Optimizer *o = optim_create(&c, np);
    assert_true(optim_plain_sgd(o));
    gemm_set_threads(3);
    for (int step = 0; step < 3; step++) {
        for (int i = 0; i < B * 144; i++) x[i] = util_rand_float(&rng);
        for (int i = 0; i < B; i++) y[i] = (int32_t)util_rand_below(&rng, 10);
        StepStats a, b;
        model_step(m[0], x, y, B, B, 1, 40 + step, NULL, NULL, &a);
        model_update_moving(m[0]);
        optim_step(o, m[0]->params, m[0]->grads);
        model_step_sgd(m[1], x, y, B, 40 + step, lr, &b);
        model_update_moving(m[1]);
        assert_close(a.loss, b.loss, 1e-5 * fabs(a.loss));
        assert_close(a.correct, b.correct, 0);
        assert_close(a.count, b.count, 0);
    }
    gemm_set_threads(1);
    double moved = 0.0, dmax = 0.0, gdiff = 0.0, gmax = 0.0;
    for (size_t k = 0; k < np; k++) {
        moved = fmax(moved, fabs(m[0]->params[k] - p0[k]));
        dmax = fmax(dmax, fabs(m[0]->params[k] - m[1]->params[k]));
    }
    for (int l = 0; l < m[0]->num_layers; l++) {
        const Layer *ly = &m[0]->layers[l];
        size_t from = ly->type == LAYER_DENSE ? ly->b_off : ly->w_off;
        for (size_t k = from; k < ly->b_off + ly->b_count; k++) {
            gmax = fmax(gmax, fabs(m[0]->grads[k]));
            gdiff = fmax(gdiff, fabs(m[0]->grads[k] - m[1]->grads[k]));
        }
    }
    print_message("# folded SGD: largest update %.3g, largest difference %.3g; gradients "
                  "written %.3g, differ by %.3g\n",
                  moved, dmax, gmax, gdiff);
    assert_true(moved > 0.0 && dmax <= 1e-4 * moved);
    assert_true(gmax > 0.0 && gdiff <= 1e-4 * gmax);
    optim_free(o);
    free(p0);
    free(x);
    for (int i = 0; i < 2; i++) model_free(m[i]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_builtin_param_counts),
        cmocka_unit_test(test_yaml_equals_json),
        cmocka_unit_test(test_signature_distinguishes),
        cmocka_unit_test(test_seeded_init),
        cmocka_unit_test(test_spec_errors),
        cmocka_unit_test(test_initializers),
        cmocka_unit_test(test_constant_initializers),
        cmocka_unit_test(test_spec_file),
        cmocka_unit_test(test_sharded_step_equals_one_thread),
        cmocka_unit_test(test_folded_sgd_equals_step_then_sgd),
        cmocka_unit_test(test_zeroed_gradient_buffer_stays_zero),
        cmocka_unit_test(test_memory_bound),
        cmocka_unit_test(test_activation_buffers),
    };
    return cmocka_run_group_tests_name("model", tests, NULL, NULL);
}
