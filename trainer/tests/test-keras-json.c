/* Keras model JSON (keras_json.c): what model.to_json() wrote, in Keras 3 and tf-keras
 * (trainer/tests/reference/keras/, gen_keras_json.py), builds the same layers as the
 * built-in model of the same name; what the trainer cannot train as written is refused
 * with one line naming the layer's index, name and class and the field. The bad models
 * are the real references with one field changed, so they keep each dialect's shape. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <cjson/cJSON.h>

#include "assert_close.h"

#include "keras_json.h"
#include "model.h"

#define REF_DIR "trainer/tests/reference/keras/"

/* The text of REF_DIR/name (free it). */
static char *read_ref(const char *name)
{
    char path[256];
    snprintf(path, sizeof path, REF_DIR "%s", name);
    FILE *f = fopen(path, "rb");
    if (!f) fail_msg("cannot open %s (run from the repository's root)", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *text = malloc((size_t)n + 1);
    assert_int_equal(fread(text, 1, (size_t)n, f), (size_t)n);
    text[n] = '\0';
    fclose(f);
    return text;
}

static void assert_same_layers(const Model *a, const Model *b)
{
    assert_int_equal(a->num_layers, b->num_layers);
    assert_int_equal(a->num_params, b->num_params);
    assert_int_equal(a->input_rank, b->input_rank);
    for (int d = 0; d < a->input_rank; d++) assert_int_equal(a->input_shape[d], b->input_shape[d]);
    for (int i = 0; i < a->num_layers; i++) {
        const Layer *x = &a->layers[i], *y = &b->layers[i];
        assert_int_equal(x->type, y->type);
        assert_int_equal(x->act, y->act);
        assert_int_equal(x->out_rank, y->out_rank);
        for (int d = 0; d < x->out_rank; d++) assert_int_equal(x->out_shape[d], y->out_shape[d]);
        assert_int_equal(x->w_count, y->w_count);
        assert_int_equal(x->b_count, y->b_count);
        assert_true(x->l2 == y->l2);
    }
    assert_string_equal(a->signature, b->signature);
}

static void test_references_equal_builtins(void **s)
{
    (void)s;
    static const char *const dialects[] = {"keras3", "tfkeras"};
    static const struct {
        const char *file, *builtin;
    } refs[] = {
        {"tutorial-cnn", "tutorial-cnn"},
        {"tutorial-cnn-l2", "tutorial-cnn-l2"},
        {"cnn2", "cnn2"},
        {"mlp", "mlp"},
        {"tutorial-cnn-functional", "tutorial-cnn"},
    };
    for (size_t d = 0; d < 2; d++)
        for (size_t r = 0; r < sizeof refs / sizeof refs[0]; r++) {
            char name[128], err[512] = "";
            snprintf(name, sizeof name, "%s-%s.json", dialects[d], refs[r].file);
            char *text = read_ref(name);
            Model *k = NULL, *b = NULL;
            int rc = model_create_from_text(&k, text, name, 1, err, sizeof err);
            if (rc) fail_msg("%s: %s", name, err);
            assert_int_equal(model_create(&b, refs[r].builtin, 1, err, sizeof err), 0);
            print_message("# %s: %zu params, %s\n", name, k->num_params, k->signature);
            assert_same_layers(k, b);
            model_free(k);
            model_free(b);
            free(text);
        }
}

/* The spec that the tf-keras tutorial CNN becomes: its InputLayer stays layer 0, so that
 * indices in messages are Keras's. */
static void test_spec_keeps_indices_and_names(void **s)
{
    (void)s;
    char *text = read_ref("tfkeras-tutorial-cnn.json");
    cJSON *root = cJSON_Parse(text);
    char err[512] = "";
    assert_true(keras_json_is_model(root));
    cJSON *spec = keras_json_to_spec(root, "t", err, sizeof err);
    if (!spec) fail_msg("%s", err);
    const cJSON *layers = cJSON_GetObjectItemCaseSensitive(spec, "layers");
    assert_int_equal(cJSON_GetArraySize(layers), 6);
    const cJSON *l0 = cJSON_GetArrayItem(layers, 0), *l2 = cJSON_GetArrayItem(layers, 2);
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(l0, "type")->valuestring, "InputLayer");
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(l2, "type")->valuestring, "Conv2D");
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(l2, "name")->valuestring, "conv2d");
    /* kubetrain's own spec is not taken for Keras's */
    cJSON *own = cJSON_Parse("{\"input_shape\":[28,28],\"layers\":[{\"type\":\"Flatten\"}]}");
    assert_false(keras_json_is_model(own));
    cJSON_Delete(own);
    cJSON_Delete(spec);
    cJSON_Delete(root);
    free(text);
}

/* Loads reference `file`, lets edit change it, and expects model_create_from_text to
 * refuse it with one line that holds every needle (NULL-terminated). */
typedef void (*EditFn)(cJSON *root);

static cJSON *layer_at(cJSON *root, int i)
{
    cJSON *config = cJSON_GetObjectItemCaseSensitive(root, "config");
    return cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(config, "layers"), i);
}

static cJSON *config_at(cJSON *root, int i)
{
    return cJSON_GetObjectItemCaseSensitive(layer_at(root, i), "config");
}

static void set(cJSON *o, const char *key, cJSON *v)
{
    if (cJSON_GetObjectItemCaseSensitive(o, key)) cJSON_ReplaceItemInObjectCaseSensitive(o, key, v);
    else cJSON_AddItemToObject(o, key, v);
}

/* model_create_from_text on reference `file` changed by edit (may be NULL). */
static int create_edited(Model **m, const char *file, EditFn edit, char *err, size_t errlen)
{
    char *text = read_ref(file);
    cJSON *root = cJSON_Parse(text);
    assert_non_null(root);
    if (edit) edit(root);
    char *changed = cJSON_PrintUnformatted(root);
    *m = NULL;
    int rc = model_create_from_text(m, changed, file, 1, err, errlen);
    free(changed);
    cJSON_Delete(root);
    free(text);
    return rc;
}

static void expect_refused(const char *file, EditFn edit, ...)
{
    Model *m;
    char err[512] = "";
    int rc = create_edited(&m, file, edit, err, sizeof err);
    print_message("# %s\n", err);
    assert_int_equal(rc, -22);
    assert_null(m);
    assert_null(strchr(err, '\n'));
    va_list ap;
    va_start(ap, edit);
    for (const char *needle; (needle = va_arg(ap, const char *));)
        if (!strstr(err, needle)) fail_msg("'%s' not in '%s'", needle, err);
    va_end(ap);
}

/* The reference changed by edit builds the built-in model `builtin`. */
static void expect_builtin(const char *file, EditFn edit, const char *builtin)
{
    Model *m, *b;
    char err[512] = "";
    if (create_edited(&m, file, edit, err, sizeof err)) fail_msg("%s: %s", file, err);
    assert_int_equal(model_create(&b, builtin, 1, err, sizeof err), 0);
    assert_same_layers(m, b);
    model_free(m);
    model_free(b);
}

static void edit_unknown_layer(cJSON *root)
{
    cJSON *l = layer_at(root, 4);
    set(l, "class_name", cJSON_CreateString("LSTM"));
}
static void edit_lambda(cJSON *root)
{
    set(layer_at(root, 1), "class_name", cJSON_CreateString("Lambda"));
}
/* The activation edit_activation gives the first Dense layer. */
static const char *activation_name;
static void edit_activation(cJSON *root)
{
    set(config_at(root, 4), "activation", cJSON_CreateString(activation_name));
}
static void edit_padding(cJSON *root)
{
    set(config_at(root, 2), "padding", cJSON_CreateString("causal"));
}
static void edit_no_layer_config(cJSON *root)
{
    cJSON_DeleteItemFromObjectCaseSensitive(layer_at(root, 2), "config");
}
static void edit_no_model_config(cJSON *root)
{
    cJSON_DeleteItemFromObjectCaseSensitive(root, "config");
}
static void edit_dilation(cJSON *root)
{
    int two[] = {2, 2};
    set(config_at(root, 2), "dilation_rate", cJSON_CreateIntArray(two, 2));
}
static void edit_no_bias(cJSON *root)
{
    set(config_at(root, 5), "use_bias", cJSON_CreateFalse());
}
static void edit_conv_no_bias(cJSON *root)
{
    set(config_at(root, 2), "use_bias", cJSON_CreateFalse());
}
static void edit_bias_string(cJSON *root)
{
    set(config_at(root, 5), "use_bias", cJSON_CreateString("no"));
}

/* use_bias false on Dense and Conv2D, in both dialects: the layer has no bias (its
 * parameters the kernel alone), and the signature says so. */
static void test_no_bias(void **s)
{
    (void)s;
    const char *files[] = {"keras3-tutorial-cnn.json", "tfkeras-tutorial-cnn.json"};
    for (int f = 0; f < 2; f++) {
        Model *m, *with;
        char err[512] = "";
        if (create_edited(&with, files[f], NULL, err, sizeof err)) fail_msg("%s", err);
        if (create_edited(&m, files[f], edit_no_bias, err, sizeof err)) fail_msg("%s", err);
        assert_int_equal(m->layers[4].b_count, 0);
        assert_int_equal(m->num_params, with->num_params - 10);
        model_free(m);
        if (create_edited(&m, files[f], edit_conv_no_bias, err, sizeof err)) fail_msg("%s", err);
        assert_int_equal(m->layers[1].b_count, 0);
        assert_int_equal(m->layers[1].w_count, with->layers[1].w_count);
        assert_int_equal(m->num_params, with->num_params - 32);
        print_message("# %s: %s\n", files[f], m->signature);
        assert_non_null(strstr(m->signature, "|conv2d(32,3x3,s1x1,valid,relu,l2=0,nobias)|"));
        model_free(m);
        model_free(with);
    }
}

static void edit_l1(cJSON *root)
{
    cJSON *reg = cJSON_GetObjectItemCaseSensitive(config_at(root, 4), "kernel_regularizer");
    set(reg, "class_name", cJSON_CreateString("L1"));
}
static void edit_orthogonal(cJSON *root)
{
    cJSON *init = cJSON_GetObjectItemCaseSensitive(config_at(root, 2), "kernel_initializer");
    set(init, "class_name", cJSON_CreateString("Orthogonal"));
}
static void edit_custom_initializer(cJSON *root)
{
    cJSON *init = cJSON_GetObjectItemCaseSensitive(config_at(root, 2), "kernel_initializer");
    set(init, "module", cJSON_CreateString("mypackage.initializers"));
}
static void edit_identity_bias(cJSON *root)
{
    set(config_at(root, 4), "bias_initializer", cJSON_CreateString("identity"));
}
static void edit_custom(cJSON *root)
{
    cJSON *l = layer_at(root, 4);
    set(l, "module", cJSON_CreateString("mypackage.layers"));
    set(l, "registered_name", cJSON_CreateString("Custom>Dense"));
}
static void edit_mixed_precision(cJSON *root)
{
    cJSON *dtype = cJSON_GetObjectItemCaseSensitive(config_at(root, 2), "dtype");
    set(cJSON_GetObjectItemCaseSensitive(dtype, "config"), "name",
        cJSON_CreateString("mixed_float16"));
}
static void edit_frozen(cJSON *root)
{
    set(config_at(root, 2), "trainable", cJSON_CreateFalse());
}
static void edit_channels_first(cJSON *root)
{
    set(config_at(root, 3), "data_format", cJSON_CreateString("channels_first"));
}
static void edit_unknown_field(cJSON *root)
{
    set(config_at(root, 4), "lora_alpha", cJSON_CreateNumber(8));
}
static void edit_kernel_too_large(cJSON *root)
{
    int big[] = {29, 3};
    set(config_at(root, 2), "kernel_size", cJSON_CreateIntArray(big, 2));
}
static void edit_variable_input(cJSON *root)
{
    cJSON *shape = cJSON_GetObjectItemCaseSensitive(config_at(root, 0), "batch_input_shape");
    cJSON_ReplaceItemInArray(shape, 1, cJSON_CreateNull());
}
static void edit_duplicate(cJSON *root)
{
    cJSON_AddItemToObject(config_at(root, 2), "filters", cJSON_CreateNumber(64));
}
static void edit_model_frozen(cJSON *root)
{
    set(cJSON_GetObjectItemCaseSensitive(root, "config"), "trainable", cJSON_CreateFalse());
}
static void edit_subclassed_model(cJSON *root)
{
    set(root, "class_name", cJSON_CreateString("MyModel"));
}

static void edit_no_input_layer(cJSON *root)
{
    cJSON_DeleteItemFromArray(cJSON_GetObjectItemCaseSensitive(
                                  cJSON_GetObjectItemCaseSensitive(root, "config"), "layers"),
                              0);
}
/* tf-keras's older form: the input's batch shape on the first layer */
static void edit_batch_input_shape_on_first(cJSON *root)
{
    edit_no_input_layer(root);
    int shape[] = {0, 28, 28};
    cJSON *b = cJSON_CreateIntArray(shape, 3);
    cJSON_ReplaceItemInArray(b, 0, cJSON_CreateNull());
    set(config_at(root, 0), "batch_input_shape", b);
}
static void edit_build_config_only(cJSON *root)
{
    edit_no_input_layer(root);
    cJSON_DeleteItemFromObjectCaseSensitive(cJSON_GetObjectItemCaseSensitive(root, "config"),
                                            "build_input_shape");
}
static void edit_no_input_shape(cJSON *root)
{
    edit_build_config_only(root);
    cJSON_DeleteItemFromObjectCaseSensitive(root, "build_config");
}
static void edit_l1_negative(cJSON *root)
{
    edit_l1(root);
    cJSON *reg = cJSON_GetObjectItemCaseSensitive(config_at(root, 4), "kernel_regularizer");
    cJSON *config = cJSON_GetObjectItemCaseSensitive(reg, "config");
    cJSON_DeleteItemFromObjectCaseSensitive(config, "l2");
    set(config, "l1", cJSON_CreateNumber(-1));
}

static void edit_l1l2_without_l1(cJSON *root)
{
    cJSON *reg = cJSON_GetObjectItemCaseSensitive(config_at(root, 2), "kernel_regularizer");
    set(reg, "class_name", cJSON_CreateString("L1L2"));
    set(cJSON_GetObjectItemCaseSensitive(reg, "config"), "l1", cJSON_CreateNumber(0));
}
static void edit_l1l2_with_l1(cJSON *root)
{
    edit_l1l2_without_l1(root);
    cJSON *reg = cJSON_GetObjectItemCaseSensitive(config_at(root, 2), "kernel_regularizer");
    set(cJSON_GetObjectItemCaseSensitive(reg, "config"), "l1", cJSON_CreateNumber(1e-4));
}
static void edit_glorot_axes(cJSON *root)
{
    cJSON *init = cJSON_GetObjectItemCaseSensitive(config_at(root, 4), "kernel_initializer");
    int axes[] = {0};
    set(cJSON_GetObjectItemCaseSensitive(init, "config"), "input_axes",
        cJSON_CreateIntArray(axes, 1));
}
static void edit_seeds(cJSON *root)
{
    cJSON *init = cJSON_GetObjectItemCaseSensitive(config_at(root, 2), "kernel_initializer");
    set(cJSON_GetObjectItemCaseSensitive(init, "config"), "seed", cJSON_CreateNumber(42));
    set(config_at(root, 3), "seed", cJSON_CreateNumber(7));
}

/* Where the input's shape may come from, and the options that are the same math as a
 * built-in model's. */
static void test_accepted_forms(void **s)
{
    (void)s;
    expect_builtin("tfkeras-tutorial-cnn.json", edit_batch_input_shape_on_first, "tutorial-cnn");
    expect_builtin("keras3-tutorial-cnn.json", edit_no_input_layer, "tutorial-cnn");
    expect_builtin("keras3-tutorial-cnn.json", edit_build_config_only, "tutorial-cnn");
    expect_refused("keras3-tutorial-cnn.json", edit_no_input_shape, "config.layers: no input shape",
                   NULL);
    expect_builtin("keras3-tutorial-cnn-l2.json", edit_l1l2_without_l1, "tutorial-cnn-l2");
    expect_refused("keras3-tutorial-cnn.json", edit_glorot_axes,
                   "(Dense).kernel_initializer: GlorotUniform: config input_axes is not one", NULL);
    /* a seed picks other draws, not another distribution: the trainer draws from --seed */
    expect_builtin("keras3-mlp.json", edit_seeds, "mlp");
}

/* Every activation by the name each dialect writes (tf-keras's swish is Keras 3's silu). */
static void test_activations(void **s)
{
    (void)s;
    static const struct {
        const char *name;
        Activation act;
    } names[] = {{"sigmoid", ACT_SIGMOID},      {"tanh", ACT_TANH},   {"gelu", ACT_GELU},
                 {"silu", ACT_SWISH},           {"swish", ACT_SWISH}, {"elu", ACT_ELU},
                 {"leaky_relu", ACT_LEAKY_RELU}};
    const char *files[] = {"keras3-tutorial-cnn.json", "tfkeras-tutorial-cnn.json"};
    for (size_t f = 0; f < 2; f++)
        for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
            Model *m;
            char err[512] = "";
            activation_name = names[i].name;
            if (create_edited(&m, files[f], edit_activation, err, sizeof err))
                fail_msg("%s with %s: %s", files[f], names[i].name, err);
            int d = 0;
            while (m->layers[d].type != LAYER_DENSE) d++;
            print_message("# %s: %s\n", files[f], names[i].name);
            assert_int_equal(m->layers[d].act, names[i].act);
            model_free(m);
        }
}

/* The Activation, ReLU and LeakyReLU layers as each dialect writes them (LeakyReLU's
 * negative_slope in Keras 3, alpha in tf-keras), and ReLU's options other than the plain
 * relu's refused naming the field. */
static void edit_relu6(cJSON *root)
{
    set(config_at(root, 2), "max_value", cJSON_CreateNumber(6));
}
static void edit_relu_threshold(cJSON *root)
{
    set(config_at(root, 2), "threshold", cJSON_CreateNumber(0.5));
}
static void edit_activation_layer(cJSON *root)
{
    set(config_at(root, 10), "activation", cJSON_CreateString(activation_name));
}

static void test_activation_layers(void **s)
{
    (void)s;
    Model *m[2];
    char err[512] = "";
    const char *files[] = {"keras3-activations.json", "tfkeras-activations.json"};
    static const LayerType types[] = {
        LAYER_CONV2D,     LAYER_RELU,       LAYER_CONV2D,     LAYER_FLATTEN, LAYER_DENSE,
        LAYER_LEAKY_RELU, LAYER_DENSE,      LAYER_LEAKY_RELU, LAYER_DENSE,   LAYER_ACTIVATION,
        LAYER_DENSE,      LAYER_ACTIVATION, LAYER_DENSE};
    static const Activation acts[] = {ACT_GELU,    ACT_RELU,       ACT_ELU,        ACT_LINEAR,
                                      ACT_SWISH,   ACT_LEAKY_RELU, ACT_TANH,       ACT_LEAKY_RELU,
                                      ACT_SIGMOID, ACT_GELU,       ACT_LEAKY_RELU, ACT_SOFTMAX,
                                      ACT_LINEAR};
    for (int f = 0; f < 2; f++) {
        if (create_edited(&m[f], files[f], NULL, err, sizeof err)) fail_msg("%s", err);
        assert_int_equal(m[f]->num_layers, 13);
        for (int i = 0; i < 13; i++) {
            assert_int_equal(m[f]->layers[i].type, types[i]);
            assert_int_equal(m[f]->layers[i].act, acts[i]);
        }
        assert_true(m[f]->layers[5].slope == 0.3f);
        assert_true(m[f]->layers[7].slope == 0.1f);
        assert_string_equal(m[f]->layers[1].name, "re_lu");
        assert_string_equal(m[f]->layers[5].name, "leaky_re_lu");
    }
    print_message("# %s\n", m[0]->signature);
    assert_same_layers(m[0], m[1]);
    model_free(m[0]);
    model_free(m[1]);
    expect_refused("keras3-activations.json", edit_relu6,
                   "layers[2] \"re_lu\" (ReLU).max_value: expected null (the plain relu)", NULL);
    expect_refused("tfkeras-activations.json", edit_relu_threshold,
                   "layers[2] \"re_lu\" (ReLU).threshold: expected 0 (the plain relu)", NULL);
    activation_name = "selu";
    expect_refused("keras3-activations.json", edit_activation_layer,
                   "(Activation).activation: \"selu\" is not supported", MODEL_ACTIVATIONS, NULL);
}

/* AveragePooling2D, GlobalAveragePooling2D and GlobalMaxPooling2D as each dialect writes
 * them (keepdims both ways) build the same layers; channels_first and a keepdims that is
 * not a boolean are refused naming the layer and the field. */
static void edit_avgpool_channels_first(cJSON *root)
{
    set(config_at(root, 2), "data_format", cJSON_CreateString("channels_first"));
}
static void edit_gap_channels_first(cJSON *root)
{
    set(config_at(root, 5), "data_format", cJSON_CreateString("channels_first"));
}
static void edit_keepdims_number(cJSON *root)
{
    set(config_at(root, 6), "keepdims", cJSON_CreateNumber(1));
}
static void edit_pool_unknown_field(cJSON *root)
{
    set(config_at(root, 3), "count_include_pad", cJSON_CreateTrue());
}

static void test_pooling(void **s)
{
    (void)s;
    Model *m[2];
    char err[512] = "";
    const char *files[] = {"keras3-pooling.json", "tfkeras-pooling.json"};
    static const LayerType types[] = {LAYER_CONV2D, LAYER_AVGPOOL,        LAYER_AVGPOOL,
                                      LAYER_CONV2D, LAYER_GLOBAL_AVGPOOL, LAYER_GLOBAL_MAXPOOL,
                                      LAYER_DENSE};
    for (int f = 0; f < 2; f++) {
        if (create_edited(&m[f], files[f], NULL, err, sizeof err)) fail_msg("%s", err);
        assert_int_equal(m[f]->num_layers, 7);
        for (int i = 0; i < 7; i++) assert_int_equal(m[f]->layers[i].type, types[i]);
        assert_string_equal(m[f]->layers[2].name, "average_pooling2d_1");
        assert_string_equal(m[f]->layers[4].name, "global_average_pooling2d");
    }
    print_message("# %s\n", m[0]->signature);
    assert_string_equal(m[0]->signature,
                        "sequential in=12x12x3|conv2d(4,3x3,s1x1,same,relu,l2=0)|"
                        "avgpool(2x2,s2x2,valid)|avgpool(3x3,s2x2,same)|"
                        "conv2d(6,1x1,s1x1,valid,linear,l2=0)|global_average_pooling2d(keepdims)|"
                        "global_max_pooling2d|dense(3,linear,l2=0)|params=163");
    assert_same_layers(m[0], m[1]);
    model_free(m[0]);
    model_free(m[1]);
    expect_refused("keras3-pooling.json", edit_avgpool_channels_first,
                   "layers[2] \"average_pooling2d\" (AveragePooling2D).data_format: expected "
                   "\"channels_last\"",
                   NULL);
    expect_refused("tfkeras-pooling.json", edit_gap_channels_first,
                   "layers[5] \"global_average_pooling2d\" (GlobalAveragePooling2D).data_format",
                   NULL);
    expect_refused("keras3-pooling.json", edit_keepdims_number,
                   "layers[6] \"global_max_pooling2d\" (GlobalMaxPooling2D).keepdims: expected "
                   "true or false",
                   NULL);
    expect_refused("tfkeras-pooling.json", edit_pool_unknown_field,
                   "layers[3] \"average_pooling2d_1\" (AveragePooling2D).count_include_pad: not "
                   "a AveragePooling2D field",
                   NULL);
}

/* Rescaling as each dialect writes it (a first layer's 1/255, a scale and an offset
 * inside the model); a per-channel scale or offset is refused naming the field. */
static void edit_scale_list(cJSON *root)
{
    cJSON *list = cJSON_CreateArray();
    for (int i = 0; i < 3; i++) cJSON_AddItemToArray(list, cJSON_CreateNumber(0.5));
    set(config_at(root, 1), "scale", list);
}
static void edit_offset_list(cJSON *root)
{
    cJSON *list = cJSON_CreateArray();
    for (int i = 0; i < 4; i++) cJSON_AddItemToArray(list, cJSON_CreateNumber(-1));
    set(config_at(root, 3), "offset", list);
}

static void test_rescaling(void **s)
{
    (void)s;
    Model *m[2];
    char err[512] = "";
    const char *files[] = {"keras3-rescaling.json", "tfkeras-rescaling.json"};
    for (int f = 0; f < 2; f++) {
        if (create_edited(&m[f], files[f], NULL, err, sizeof err)) fail_msg("%s", err);
        assert_int_equal(m[f]->num_layers, 5);
        assert_int_equal(m[f]->layers[0].type, LAYER_RESCALING);
        assert_int_equal(m[f]->layers[2].type, LAYER_RESCALING);
        assert_close(m[f]->layers[0].scale, (float)(1.0 / 255), 0);
        assert_close(m[f]->layers[0].offset, 0.0f, 0);
        assert_close(m[f]->layers[2].scale, 2.0f, 0);
        assert_close(m[f]->layers[2].offset, -1.0f, 0);
        assert_string_equal(m[f]->layers[2].name, "rescaling_1");
    }
    print_message("# %s\n", m[0]->signature);
    assert_same_layers(m[0], m[1]);
    model_free(m[0]);
    model_free(m[1]);
    expect_refused("keras3-rescaling.json", edit_scale_list,
                   "layers[1] \"rescaling\" (Rescaling).scale: expected a finite number",
                   "per-channel list is not supported", NULL);
    expect_refused("tfkeras-rescaling.json", edit_offset_list,
                   "layers[3] \"rescaling_1\" (Rescaling).offset: expected a finite number", NULL);
}

/* L1 and L1L2 as each dialect writes them: the layer's factors (L1's l1 and no l2). */
static void edit_l1_only(cJSON *root)
{
    edit_l1(root);
    cJSON *reg = cJSON_GetObjectItemCaseSensitive(config_at(root, 4), "kernel_regularizer");
    cJSON *config = cJSON_GetObjectItemCaseSensitive(reg, "config");
    cJSON_DeleteItemFromObjectCaseSensitive(config, "l2");
    set(config, "l1", cJSON_CreateNumber(0.002));
}

static void test_l1_regularizers(void **s)
{
    (void)s;
    const char *files[] = {"keras3-tutorial-cnn-l2.json", "tfkeras-tutorial-cnn-l2.json"};
    for (int f = 0; f < 2; f++) {
        Model *m;
        char err[512] = "";
        if (create_edited(&m, files[f], edit_l1l2_with_l1, err, sizeof err)) fail_msg("%s", err);
        assert_close(m->layers[1].l1, 1e-4f, 0);
        assert_close(m->layers[1].l2, 1e-5f, 0);
        print_message("# %s: %s\n", files[f], m->signature);
        assert_non_null(strstr(m->signature, "conv2d(32,3x3,s1x1,valid,relu,l2=1e-05,l1=0.0001)"));
        model_free(m);
        if (create_edited(&m, files[f], edit_l1_only, err, sizeof err)) fail_msg("%s", err);
        assert_close(m->layers[3].l1, 0.002f, 0);
        assert_close(m->layers[3].l2, 0.0f, 0);
        model_free(m);
    }
}

/* BatchNormalization as each dialect writes it (Keras 3's axis -1, tf-keras's [3] and
 * [1]): gamma and beta as kernel and bias, the moving statistics as state, synchronized
 * taken; what the trainer does not do is refused naming the field. */
static void edit_bn_synchronized(cJSON *root)
{
    set(config_at(root, 2), "synchronized", cJSON_CreateTrue());
}
static void edit_bn_synchronized_string(cJSON *root)
{
    set(config_at(root, 2), "synchronized", cJSON_CreateString("yes"));
}
static void edit_bn_axis(cJSON *root)
{
    set(config_at(root, 2), "axis", cJSON_CreateNumber(1));
}
static void edit_bn_axis_list(cJSON *root)
{
    set(config_at(root, 6), "axis", cJSON_CreateIntArray((const int[]){1, 3}, 2));
}
static void edit_bn_renorm(cJSON *root)
{
    set(config_at(root, 2), "renorm", cJSON_CreateTrue());
}
static void edit_bn_gamma_negative_stddev(cJSON *root)
{
    cJSON *init = cJSON_CreateObject(), *config = cJSON_AddObjectToObject(init, "config");
    cJSON_AddStringToObject(init, "class_name", "RandomNormal");
    cJSON_AddNumberToObject(config, "stddev", -1);
    set(config_at(root, 6), "gamma_initializer", init);
}
static void edit_bn_regularizer(cJSON *root)
{
    set(config_at(root, 2), "gamma_regularizer",
        cJSON_Parse("{\"class_name\":\"L2\","
                    "\"config\":{\"l2\":0.01}}"));
}

static void test_batchnorm(void **s)
{
    (void)s;
    Model *m[2];
    char err[512] = "";
    const char *files[] = {"keras3-batchnorm.json", "tfkeras-batchnorm.json"};
    for (int f = 0; f < 2; f++) {
        if (create_edited(&m[f], files[f], NULL, err, sizeof err)) fail_msg("%s", err);
        assert_int_equal(m[f]->num_layers, 7);
        const Layer *a = &m[f]->layers[1], *b = &m[f]->layers[5];
        assert_int_equal(a->type, LAYER_BATCHNORM);
        assert_int_equal(b->type, LAYER_BATCHNORM);
        assert_string_equal(b->name, "batch_normalization_1");
        assert_close(a->momentum, 0.99f, 0);
        assert_close(a->epsilon, 1e-3f, 0);
        assert_close(b->momentum, 0.9f, 0);
        assert_close(b->epsilon, 0.01f, 0);
        assert_int_equal(a->w_count + a->b_count + a->s_count, 4 * 4);
        assert_int_equal(b->w_count, 5);
        assert_int_equal(b->b_count, 0); /* center false */
        assert_int_equal(b->s_count, 2 * 5);
    }
    print_message("# %s\n", m[0]->signature);
    assert_string_equal(m[0]->signature,
                        "sequential in=8x8x3|conv2d(4,3x3,s1x1,valid,linear,l2=0,nobias)|"
                        "batchnorm(0.99000001,0.00100000005)|re_lu(relu)|flatten|"
                        "dense(5,linear,l2=0)|batchnorm(0.899999976,0.00999999978,nocenter)|"
                        "dense(3,linear,l2=0)|params=882");
    assert_same_layers(m[0], m[1]);
    model_free(m[0]);
    model_free(m[1]);
    /* synchronized true is taken (model_step_sync), and named by the signature */
    if (create_edited(&m[0], "keras3-batchnorm.json", edit_bn_synchronized, err, sizeof err))
        fail_msg("%s", err);
    assert_int_equal(m[0]->layers[1].synchronized, 1);
    assert_int_equal(m[0]->layers[5].synchronized, 0);
    assert_non_null(strstr(m[0]->signature, "|batchnorm(0.99000001,0.00100000005,synchronized)|"));
    model_free(m[0]);
    expect_refused("keras3-batchnorm.json", edit_bn_synchronized_string,
                   "layers[2] \"batch_normalization\" (BatchNormalization).synchronized: expected "
                   "true or false",
                   NULL);
    expect_refused("keras3-batchnorm.json", edit_bn_axis,
                   "layers[2] \"batch_normalization\" (BatchNormalization).axis: expected -1",
                   NULL);
    expect_refused("tfkeras-batchnorm.json", edit_bn_axis_list,
                   "layers[6] \"batch_normalization_1\" (BatchNormalization).axis: expected -1",
                   NULL);
    expect_refused("tfkeras-batchnorm.json", edit_bn_renorm,
                   "layers[2] \"batch_normalization\" (BatchNormalization).renorm: expected false",
                   "no batch renormalization", NULL);
    expect_refused("keras3-batchnorm.json", edit_bn_gamma_negative_stddev,
                   "layers[6] \"batch_normalization_1\" (BatchNormalization).gamma_initializer: "
                   "RandomNormal: expected a stddev >= 0",
                   NULL);
    expect_refused("tfkeras-batchnorm.json", edit_bn_regularizer,
                   "(BatchNormalization).gamma_regularizer: expected null", NULL);
}

static void test_refused(void **s)
{
    (void)s;
    const char *k3 = "keras3-tutorial-cnn.json", *tf = "tfkeras-tutorial-cnn.json";
    const char *supported = "InputLayer, Reshape, Rescaling, Conv2D, MaxPooling2D, "
                            "AveragePooling2D, GlobalAveragePooling2D, GlobalMaxPooling2D, "
                            "Flatten, Dense, Dropout";
    expect_refused(k3, edit_unknown_layer, "layers[4] \"dense\" (LSTM): not supported", supported,
                   NULL);
    expect_refused(tf, edit_lambda, "layers[1] \"reshape\" (Lambda): a Lambda layer", supported,
                   NULL);
    expect_refused("keras3-branching.json", NULL, "layers[3] \"dense_11\" (Dense).inbound_nodes",
                   "\"flatten_5\", not the layer before it (\"dense_10\")", "no branches", NULL);
    expect_refused("tfkeras-branching.json", NULL, "layers[3] \"dense_11\" (Dense).inbound_nodes",
                   NULL);
    activation_name = "hard_sigmoid";
    expect_refused(k3, edit_activation, "layers[4] \"dense\" (Dense).activation: \"hard_sigmoid\"",
                   MODEL_ACTIVATIONS, NULL);
    expect_refused(tf, edit_padding, "layers[2] \"conv2d\" (Conv2D).padding: \"causal\"",
                   "\"valid\" or \"same\"", NULL);
    expect_refused(k3, edit_no_layer_config, "layers[2] \"?\" (Conv2D).config: expected an object",
                   NULL);
    expect_refused(tf, edit_no_model_config, "config: expected the Sequential model's config",
                   NULL);
    expect_refused(k3, edit_dilation, "layers[2] \"conv2d\" (Conv2D).dilation_rate: expected 1",
                   NULL);
    expect_refused(tf, edit_bias_string,
                   "layers[5] \"dense_1\" (Dense).use_bias: expected true or false", NULL);
    expect_refused("tfkeras-tutorial-cnn-l2.json", edit_l1_negative,
                   "layers[4] \"dense_2\" (Dense).kernel_regularizer: L1 is not",
                   "L1(l1), L2(l2) and L1L2(l1, l2)", NULL);
    expect_refused(k3, edit_orthogonal, "(Conv2D).kernel_initializer: Orthogonal is not supported",
                   INIT_SUPPORTED, NULL);
    expect_refused(k3, edit_custom_initializer,
                   "(Conv2D).kernel_initializer: GlorotUniform: a custom initializer", NULL);
    expect_refused(tf, edit_identity_bias, "(Dense).bias_initializer: identity is not supported",
                   "VarianceScaling(scale, mode, distribution)", NULL);
    expect_refused(k3, edit_custom, "layers[4] \"dense\" (Dense): a custom object", supported,
                   NULL);
    expect_refused(k3, edit_mixed_precision, "(Conv2D).dtype", "float32", NULL);
    expect_refused(tf, edit_frozen, "layers[2] \"conv2d\" (Conv2D).trainable: expected true", NULL);
    expect_refused(k3, edit_channels_first, "layers[3] \"flatten\" (Flatten).data_format", NULL);
    expect_refused(k3, edit_unknown_field, "(Dense).lora_alpha: not a Dense field", NULL);
    /* what model.c refuses after the conversion names the same layer */
    expect_refused(tf, edit_kernel_too_large,
                   "layers[2] \"conv2d\" (Conv2D).kernel_size: expected a kernel no larger", NULL);
    expect_refused(tf, edit_variable_input, "layers[0] \"input_1\" (InputLayer).batch_input_shape",
                   "fixed size", NULL);
    expect_refused(k3, edit_duplicate, "layers[2] \"conv2d\" (Conv2D).filters: given twice", NULL);
    expect_refused(k3, edit_model_frozen, "config.trainable: expected true", NULL);
    expect_refused(k3, edit_subclassed_model, "class_name: \"MyModel\" is not supported", NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_references_equal_builtins),
        cmocka_unit_test(test_spec_keeps_indices_and_names),
        cmocka_unit_test(test_accepted_forms),
        cmocka_unit_test(test_refused),
        cmocka_unit_test(test_pooling),
        cmocka_unit_test(test_rescaling),
        cmocka_unit_test(test_batchnorm),
        cmocka_unit_test(test_no_bias),
        cmocka_unit_test(test_l1_regularizers),
        cmocka_unit_test(test_activations),
        cmocka_unit_test(test_activation_layers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
