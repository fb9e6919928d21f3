/* Keras export (keras_export.c) without Keras: the layer names a model gets (model.c),
 * the config.json of a built-in model, the .weights.h5 read back with libhdf5 (Keras's
 * layout: layers/<name>/vars/<i>, HWIO and (in, out) kernels, the name attributes), the
 * .keras archive read back with libzip, and the path checks. That real Keras 3 and
 * tf-keras load these files and predict as the trainer does is
 * trainer/tests/test-keras-export.sh. */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <cmocka.h>
#include <hdf5.h>
#include <zip.h>

#include "assert_close.h"
#include "keras_export.h"
#include "keras_import.h"
#include "model.h"

static Model *build(const char *spec)
{
    Model *m;
    char err[512];
    if (model_create(&m, spec, 7, err, sizeof err)) fail_msg("%s: %s", spec, err);
    return m;
}

static void test_default_names_as_keras(void **state)
{
    (void)state;
    static const char *const want[] = {"conv2d",  "conv2d_1", "max_pooling2d",
                                       "flatten", "dense",    "dense_1"};
    Model *m = build("cnn2");
    assert_int_equal(m->num_layers, 6);
    for (int i = 0; i < 6; i++) assert_string_equal(m->layers[i].name, want[i]);
    model_free(m);
    /* a given name is kept, and a default steps past it */
    m = build("{\"input_shape\":[4],\"layers\":[{\"type\":\"Dense\",\"units\":3},"
              "{\"type\":\"Dense\",\"units\":2,\"name\":\"dense\"}]}");
    assert_string_equal(m->layers[0].name, "dense_1");
    assert_string_equal(m->layers[1].name, "dense");
    model_free(m);
}

static void test_bad_names_refused(void **state)
{
    (void)state;
    static const char *const specs[] = {
        "{\"input_shape\":[4],\"layers\":[{\"type\":\"Dense\",\"units\":3,\"name\":\"a\"},"
        "{\"type\":\"Dense\",\"units\":2,\"name\":\"a\"}]}",
        "{\"input_shape\":[4],\"layers\":[{\"type\":\"Dense\",\"units\":2,\"name\":\"a/b\"}]}",
    };
    static const char *const needle[] = {"layers[1] \"a\" (Dense).name: expected a name that no "
                                         "earlier layer has",
                                         "layers[0] \"a/b\" (Dense).name: expected a name of 1 to "
                                         "127 bytes without '/'"};
    for (int i = 0; i < 2; i++) {
        Model *m = NULL;
        char err[512] = "";
        assert_int_equal(model_create(&m, specs[i], 1, err, sizeof err), -EINVAL);
        if (!strstr(err, needle[i])) fail_msg("'%s' lacks '%s'", err, needle[i]);
    }
}

static const cJSON *at(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v) fail_msg("no \"%s\"", key);
    return v;
}

static void test_config_of_builtin(void **state)
{
    (void)state;
    Model *m = build("tutorial-cnn-l2");
    char *text = keras_export_config(m);
    cJSON *root = cJSON_Parse(text);
    assert_non_null(root);
    assert_string_equal(at(root, "class_name")->valuestring, "Sequential");
    const cJSON *layers = at(at(root, "config"), "layers");
    assert_int_equal(cJSON_GetArraySize(layers), 6);
    static const char *const cls[] = {"InputLayer", "Reshape", "Conv2D",
                                      "Flatten",    "Dense",   "Dense"};
    static const char *const names[] = {"input_layer", "reshape", "conv2d",
                                        "flatten",     "dense",   "dense_1"};
    for (int i = 0; i < 6; i++) {
        const cJSON *l = cJSON_GetArrayItem(layers, i);
        assert_string_equal(at(l, "class_name")->valuestring, cls[i]);
        assert_string_equal(at(l, "module")->valuestring, "keras.layers");
        assert_string_equal(at(at(l, "config"), "name")->valuestring, names[i]);
    }
    /* tf-keras reads batch_input_shape only */
    char *shape = cJSON_PrintUnformatted(
        at(at(cJSON_GetArrayItem(layers, 0), "config"), "batch_input_shape"));
    assert_string_equal(shape, "[null,28,28]");
    const cJSON *conv = at(cJSON_GetArrayItem(layers, 2), "config");
    char *k = cJSON_PrintUnformatted(at(conv, "kernel_size"));
    assert_string_equal(k, "[3,3]");
    assert_string_equal(at(conv, "activation")->valuestring, "relu");
    assert_string_equal(at(conv, "padding")->valuestring, "valid");
    assert_int_equal(at(conv, "filters")->valueint, 32);
    /* the factor as the spec said it, not float's 9.99999974737875e-06 */
    assert_non_null(strstr(text, "\"config\":{\"l2\":1e-05}"));
    assert_string_equal(at(at(cJSON_GetArrayItem(layers, 5), "config"), "activation")->valuestring,
                        "linear");
    free(shape);
    free(k);
    cJSON_Delete(root);
    free(text);
    model_free(m);
}

/* Each activation is written as Keras 3 names it (swish as "silu", which tf-keras reads
 * too) and the config read back gives the same activations. */
static void test_config_activations(void **state)
{
    (void)state;
    Model *m =
        build("{\"input_shape\":[6,6,1],\"layers\":["
              "{\"type\":\"Conv2D\",\"filters\":2,\"kernel_size\":3,\"activation\":\"gelu\"},"
              "{\"type\":\"Conv2D\",\"filters\":2,\"kernel_size\":2,\"activation\":\"elu\"},"
              "{\"type\":\"Flatten\"},"
              "{\"type\":\"Dense\",\"units\":4,\"activation\":\"swish\"},"
              "{\"type\":\"Dense\",\"units\":4,\"activation\":\"tanh\"},"
              "{\"type\":\"Dense\",\"units\":4,\"activation\":\"leaky_relu\"},"
              "{\"type\":\"Dense\",\"units\":3,\"activation\":\"sigmoid\"}]}");
    char *text = keras_export_config(m);
    cJSON *root = cJSON_Parse(text);
    const cJSON *layers = at(at(root, "config"), "layers");
    static const char *const want[] = {NULL,   "gelu", "elu",        NULL,
                                       "silu", "tanh", "leaky_relu", "sigmoid"};
    for (int i = 0; i < 8; i++) {
        if (!want[i]) continue;
        const cJSON *a = at(at(cJSON_GetArrayItem(layers, i), "config"), "activation");
        assert_string_equal(a->valuestring, want[i]);
    }
    Model *back;
    char err[512];
    if (model_create_from_text(&back, text, "exported", 7, err, sizeof err)) fail_msg("%s", err);
    assert_int_equal(back->num_layers, m->num_layers);
    for (int i = 0; i < m->num_layers; i++) assert_int_equal(back->layers[i].act, m->layers[i].act);
    model_free(back);
    cJSON_Delete(root);
    free(text);
    model_free(m);
}

/* The activation layers written as Keras writes them (LeakyReLU's slope as alpha, which
 * Keras 3 reads too), and read back as they were. */
static void test_config_activation_layers(void **state)
{
    (void)state;
    Model *m = build("{\"input_shape\":[8],\"layers\":["
                     "{\"type\":\"Dense\",\"units\":4},{\"type\":\"ReLU\"},"
                     "{\"type\":\"Dense\",\"units\":4},"
                     "{\"type\":\"LeakyReLU\",\"negative_slope\":0.1},"
                     "{\"type\":\"Dense\",\"units\":4},"
                     "{\"type\":\"Activation\",\"activation\":\"swish\"},"
                     "{\"type\":\"Dense\",\"units\":3}]}");
    char *text = keras_export_config(m);
    cJSON *root = cJSON_Parse(text);
    const cJSON *layers = at(at(root, "config"), "layers");
    const cJSON *relu = cJSON_GetArrayItem(layers, 2), *leaky = cJSON_GetArrayItem(layers, 4),
                *act = cJSON_GetArrayItem(layers, 6);
    assert_string_equal(at(relu, "class_name")->valuestring, "ReLU");
    assert_string_equal(at(at(relu, "config"), "name")->valuestring, "re_lu");
    assert_true(cJSON_IsNull(at(at(relu, "config"), "max_value")));
    assert_string_equal(at(leaky, "class_name")->valuestring, "LeakyReLU");
    assert_string_equal(at(at(leaky, "config"), "name")->valuestring, "leaky_re_lu");
    assert_non_null(strstr(text, "\"alpha\":0.1")); /* tf-keras's key, which both read */
    assert_string_equal(at(act, "class_name")->valuestring, "Activation");
    assert_string_equal(at(at(act, "config"), "activation")->valuestring, "silu");
    Model *back;
    char err[512];
    if (model_create_from_text(&back, text, "exported", 7, err, sizeof err)) fail_msg("%s", err);
    assert_string_equal(back->signature, m->signature);
    model_free(back);
    cJSON_Delete(root);
    free(text);
    model_free(m);
}

/* The pooling layers written as Keras 3 writes them (reference/keras/keras3-pooling.json:
 * the same fields and values), read back as the same model, and their weights file
 * (groups without variables for the pools) read back into it. */
static void test_config_pooling(void **state)
{
    (void)state;
    const char *ref = "trainer/tests/reference/keras/keras3-pooling.json";
    Model *m = build(ref);
    char *text = keras_export_config(m);
    cJSON *root = cJSON_Parse(text);
    FILE *f = fopen(ref, "rb");
    assert_non_null(f);
    static char reftext[1 << 16];
    reftext[fread(reftext, 1, sizeof reftext - 1, f)] = '\0';
    fclose(f);
    cJSON *want = cJSON_Parse(reftext);
    const cJSON *layers = at(at(root, "config"), "layers"),
                *wlayers = at(at(want, "config"), "layers");
    assert_int_equal(cJSON_GetArraySize(layers), cJSON_GetArraySize(wlayers));
    static const char *const keys[] = {"name",    "pool_size",   "strides",
                                       "padding", "data_format", "keepdims"};
    int pools = 0;
    for (int i = 0; i < cJSON_GetArraySize(layers); i++) {
        const cJSON *l = cJSON_GetArrayItem(layers, i), *w = cJSON_GetArrayItem(wlayers, i);
        const char *cls = at(w, "class_name")->valuestring;
        assert_string_equal(at(l, "class_name")->valuestring, cls);
        if (!strstr(cls, "Pooling")) continue;
        pools++;
        const cJSON *cfg = at(l, "config"), *wcfg = at(w, "config");
        for (size_t k = 0; k < sizeof keys / sizeof *keys; k++) {
            const cJSON *wv = cJSON_GetObjectItemCaseSensitive(wcfg, keys[k]);
            const cJSON *v = cJSON_GetObjectItemCaseSensitive(cfg, keys[k]);
            char *a = v ? cJSON_PrintUnformatted(v) : NULL,
                 *b = wv ? cJSON_PrintUnformatted(wv) : NULL;
            print_message("# %s.%s: %s (Keras: %s)\n", cls, keys[k], a ? a : "absent",
                          b ? b : "absent");
            assert_string_equal(a ? a : "absent", b ? b : "absent");
            free(a);
            free(b);
        }
    }
    assert_int_equal(pools, 4);
    Model *back;
    char err[512];
    if (model_create_from_text(&back, text, "exported", 7, err, sizeof err)) fail_msg("%s", err);
    assert_string_equal(back->signature, m->signature);
    void *img;
    size_t len;
    if (keras_export_weights_image(m, m->params, &img, &len, err, sizeof err)) fail_msg("%s", err);
    float *params = calloc(back->num_params, sizeof *params);
    if (keras_import_weights_image(back, params, img, len, "exported", err, sizeof err))
        fail_msg("%s", err);
    assert_memory_equal(params, m->params, m->num_params * sizeof *params);
    free(params);
    free(img);
    model_free(back);
    cJSON_Delete(want);
    cJSON_Delete(root);
    free(text);
    model_free(m);
}

/* Rescaling written as Keras writes it (scale and offset; the float's shortest
 * decimal, which Keras reads back as the same float32) and read back as it was. */
static void test_config_rescaling(void **state)
{
    (void)state;
    Model *m = build("trainer/tests/reference/keras/keras3-rescaling.json");
    char *text = keras_export_config(m);
    cJSON *root = cJSON_Parse(text);
    const cJSON *layers = at(at(root, "config"), "layers");
    const cJSON *r0 = cJSON_GetArrayItem(layers, 1), *r1 = cJSON_GetArrayItem(layers, 3);
    assert_string_equal(at(r0, "class_name")->valuestring, "Rescaling");
    assert_string_equal(at(at(r0, "config"), "name")->valuestring, "rescaling");
    assert_close((float)at(at(r0, "config"), "scale")->valuedouble, (float)(1.0 / 255), 0);
    assert_close(at(at(r0, "config"), "offset")->valuedouble, 0.0, 0);
    assert_string_equal(at(r1, "class_name")->valuestring, "Rescaling");
    assert_close(at(at(r1, "config"), "scale")->valuedouble, 2.0, 0);
    assert_close(at(at(r1, "config"), "offset")->valuedouble, -1.0, 0);
    Model *back;
    char err[512];
    if (model_create_from_text(&back, text, "exported", 7, err, sizeof err)) fail_msg("%s", err);
    print_message("# %s\n", back->signature);
    assert_string_equal(back->signature, m->signature);
    model_free(back);
    cJSON_Delete(root);
    free(text);
    model_free(m);
}

/* A layer without bias (use_bias false) is written as Keras writes it: use_bias false
 * in the config, its kernel alone in its vars (Keras keeps one variable); the file reads
 * back into the model of that config, and not into one with biases. */
static void test_no_bias(void **state)
{
    (void)state;
    Model *m = build("{\"input_shape\":[5,5,1],\"layers\":["
                     "{\"type\":\"Conv2D\",\"filters\":2,\"kernel_size\":3,\"use_bias\":false},"
                     "{\"type\":\"Flatten\"},"
                     "{\"type\":\"Dense\",\"units\":3,\"use_bias\":false}]}");
    char *text = keras_export_config(m);
    cJSON *root = cJSON_Parse(text);
    const cJSON *layers = at(at(root, "config"), "layers");
    assert_true(cJSON_IsFalse(at(at(cJSON_GetArrayItem(layers, 1), "config"), "use_bias")));
    assert_true(cJSON_IsFalse(at(at(cJSON_GetArrayItem(layers, 3), "config"), "use_bias")));
    void *img;
    size_t len;
    char err[512];
    if (keras_export_weights_image(m, m->params, &img, &len, err, sizeof err)) fail_msg("%s", err);
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    H5Pset_fapl_core(fapl, 1 << 16, 0);
    assert_true(H5Pset_file_image(fapl, img, len) >= 0);
    hid_t f = H5Fopen("image", H5F_ACC_RDONLY, fapl);
    assert_true(f >= 0);
    assert_true(H5Lexists(f, "layers/conv2d/vars/0", H5P_DEFAULT) > 0);
    assert_int_equal(H5Lexists(f, "layers/conv2d/vars/1", H5P_DEFAULT), 0);
    assert_int_equal(H5Lexists(f, "layers/dense/vars/1", H5P_DEFAULT), 0);
    H5Fclose(f);
    H5Pclose(fapl);
    Model *back;
    if (model_create_from_text(&back, text, "exported", 9, err, sizeof err)) fail_msg("%s", err);
    assert_string_equal(back->signature, m->signature);
    if (keras_import_weights_image(back, back->params, img, len, "exported", err, sizeof err))
        fail_msg("%s", err);
    assert_memory_equal(back->params, m->params, m->num_params * sizeof(float));
    model_free(back);
    back = build("{\"input_shape\":[5,5,1],\"layers\":["
                 "{\"type\":\"Conv2D\",\"filters\":2,\"kernel_size\":3},"
                 "{\"type\":\"Flatten\"},{\"type\":\"Dense\",\"units\":3,\"use_bias\":false}]}");
    assert_int_equal(
        keras_import_weights_image(back, back->params, img, len, "exported", err, sizeof err),
        -EINVAL);
    print_message("# %s\n", err);
    assert_non_null(strstr(err, "layers/conv2d/vars: 1 variables, where layer 0 \"conv2d\" "
                                "(Conv2D) has 2 (kernel and bias"));
    model_free(back);
    free(img);
    cJSON_Delete(root);
    free(text);
    model_free(m);
}

/* L1, L2 and L1L2 written as Keras names them, and read back as they were. */
static void test_config_regularizers(void **state)
{
    (void)state;
    Model *m = build("{\"input_shape\":[6],\"layers\":["
                     "{\"type\":\"Dense\",\"units\":4,\"kernel_regularizer\":{\"l1\":0.001}},"
                     "{\"type\":\"Dense\",\"units\":4,\"kernel_regularizer\":{\"l2\":0.002}},"
                     "{\"type\":\"Dense\",\"units\":3,"
                     "\"kernel_regularizer\":{\"l1\":0.003,\"l2\":0.004}}]}");
    char *text = keras_export_config(m);
    print_message("# %s\n", text);
    assert_non_null(strstr(text, "\"class_name\":\"L1\",\"config\":{\"l1\":0.001}"));
    assert_non_null(strstr(text, "\"class_name\":\"L2\",\"config\":{\"l2\":0.002}"));
    assert_non_null(strstr(text, "\"class_name\":\"L1L2\",\"config\":{\"l1\":0.003,\"l2\":0.004}"));
    Model *back;
    char err[512];
    if (model_create_from_text(&back, text, "exported", 7, err, sizeof err)) fail_msg("%s", err);
    assert_string_equal(back->signature, m->signature);
    model_free(back);
    free(text);
    model_free(m);
}

/* The string attribute "name" of object path in f. */
static void assert_name_attr(hid_t f, const char *path, const char *want)
{
    hid_t a = H5Aopen_by_name(f, path, "name", H5P_DEFAULT, H5P_DEFAULT);
    assert_true(a >= 0);
    hid_t t = H5Aget_type(a);
    assert_true(H5Tis_variable_str(t) > 0);
    assert_int_equal(H5Tget_cset(t), H5T_CSET_UTF8);
    char *got = NULL;
    assert_true(H5Aread(a, t, &got) >= 0);
    assert_string_equal(got, want);
    H5free_memory(got);
    H5Tclose(t);
    H5Aclose(a);
}

/* Dataset path of f: its shape is dims (rank) and its floats equal want. */
static void assert_floats(hid_t f, const char *path, int rank, const hsize_t *dims,
                          const float *want)
{
    hid_t d = H5Dopen2(f, path, H5P_DEFAULT);
    if (d < 0) fail_msg("no dataset %s", path);
    hid_t sp = H5Dget_space(d);
    hsize_t got[4];
    assert_int_equal(H5Sget_simple_extent_ndims(sp), rank);
    H5Sget_simple_extent_dims(sp, got, NULL);
    size_t n = 1;
    for (int i = 0; i < rank; i++) {
        assert_int_equal(got[i], dims[i]);
        n *= (size_t)dims[i];
    }
    hid_t t = H5Dget_type(d);
    assert_true(H5Tequal(t, H5T_IEEE_F32LE) > 0);
    float *v = malloc(n * sizeof *v);
    assert_true(H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, v) >= 0);
    assert_memory_equal(v, want, n * sizeof *v);
    free(v);
    H5Tclose(t);
    H5Sclose(sp);
    H5Dclose(d);
}

/* The weights of cnn2 in f, as Keras 3's save_weights lays them out. */
static void assert_cnn2_weights(hid_t f, const Model *m)
{
    const Layer *c0 = &m->layers[0], *c1 = &m->layers[1], *d0 = &m->layers[4];
    const hsize_t k0[] = {3, 3, 1, 32}, b0[] = {32}, k1[] = {3, 3, 32, 64}, b1[] = {64},
                  kd[] = {9216, 64}, bd[] = {64};
    assert_floats(f, "layers/conv2d/vars/0", 4, k0, m->params + c0->w_off);
    assert_floats(f, "layers/conv2d/vars/1", 1, b0, m->params + c0->b_off);
    assert_floats(f, "layers/conv2d_1/vars/0", 4, k1, m->params + c1->w_off);
    assert_floats(f, "layers/conv2d_1/vars/1", 1, b1, m->params + c1->b_off);
    assert_floats(f, "layers/dense/vars/0", 2, kd, m->params + d0->w_off);
    assert_floats(f, "layers/dense/vars/1", 1, bd, m->params + d0->b_off);
    assert_name_attr(f, "layers/conv2d_1/vars", "conv2d_1");
    assert_name_attr(f, "vars", "sequential");
    /* a layer without weights has its groups and no dataset */
    H5G_info_t gi;
    assert_true(H5Gget_info_by_name(f, "layers/max_pooling2d/vars", &gi, H5P_DEFAULT) >= 0);
    assert_int_equal(gi.nlinks, 0);
    assert_name_attr(f, "layers/max_pooling2d/vars", "max_pooling2d");
    assert_true(H5Gget_info_by_name(f, "layers", &gi, H5P_DEFAULT) >= 0);
    assert_int_equal(gi.nlinks, 6);
}

static void test_weights_file(void **state)
{
    (void)state;
    Model *m = build("cnn2");
    char dir[] = "/tmp/kt-test-export-XXXXXX", path[128], err[512];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/m.weights.h5", dir);
    if (keras_export_write(m, m->params, path, err, sizeof err)) fail_msg("%s", err);
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    assert_true(f >= 0);
    assert_cnn2_weights(f, m);
    H5Fclose(f);
    unlink(path);
    assert_int_equal(rmdir(dir), 0); /* no temporary left beside it */
    model_free(m);
}

/* Keras keeps a layer's weights under its class's stem counted in the model, whatever
 * the layer is called (what Keras 3.15 wrote for this model: layers/dense/vars named
 * "zzz", layers/dense_1/vars named "dense"). */
static void test_weights_groups_are_class_stems(void **state)
{
    (void)state;
    Model *m = build("{\"input_shape\":[4],\"layers\":[{\"type\":\"Dense\",\"units\":3,"
                     "\"name\":\"zzz\"},{\"type\":\"Dense\",\"units\":2,\"name\":\"dense\"}]}");
    void *img;
    size_t len;
    char err[512];
    if (keras_export_weights_image(m, m->params, &img, &len, err, sizeof err)) fail_msg("%s", err);
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    H5Pset_fapl_core(fapl, 1 << 16, 0);
    assert_true(H5Pset_file_image(fapl, img, len) >= 0);
    hid_t f = H5Fopen("image", H5F_ACC_RDONLY, fapl);
    assert_true(f >= 0);
    const hsize_t k0[] = {4, 3}, k1[] = {3, 2};
    assert_floats(f, "layers/dense/vars/0", 2, k0, m->params + m->layers[0].w_off);
    assert_floats(f, "layers/dense_1/vars/0", 2, k1, m->params + m->layers[1].w_off);
    assert_name_attr(f, "layers/dense/vars", "zzz");
    assert_name_attr(f, "layers/dense_1/vars", "dense");
    H5Fclose(f);
    H5Pclose(fapl);
    free(img);
    model_free(m);
}

/* The same weights make the same bytes (no modification times in the file), so that an
 * export of a checkpoint can be compared with the run's own export. */
static void test_weights_image_reproducible(void **state)
{
    (void)state;
    Model *m = build("mlp");
    void *a, *b;
    size_t na, nb;
    char err[512];
    if (keras_export_weights_image(m, m->params, &a, &na, err, sizeof err)) fail_msg("%s", err);
    sleep(1); /* into the next second of a time stamp */
    if (keras_export_weights_image(m, m->params, &b, &nb, err, sizeof err)) fail_msg("%s", err);
    assert_int_equal(na, nb);
    assert_memory_equal(a, b, na);
    free(a), free(b);
    model_free(m);
}

/* Member name of za: its bytes (free them), stored uncompressed as Keras stores them. */
static char *member(zip_t *za, const char *name, zip_uint64_t *len)
{
    zip_stat_t st;
    if (zip_stat(za, name, 0, &st)) fail_msg("no member %s", name);
    assert_int_equal(st.comp_method, ZIP_CM_STORE);
    char *buf = malloc(st.size + 1);
    zip_file_t *zf = zip_fopen(za, name, 0);
    assert_non_null(zf);
    assert_int_equal(zip_fread(zf, buf, st.size), (zip_int64_t)st.size);
    zip_fclose(zf);
    buf[st.size] = '\0';
    *len = st.size;
    return buf;
}

static void test_keras_archive(void **state)
{
    (void)state;
    Model *m = build("cnn2");
    char dir[] = "/tmp/kt-test-export-XXXXXX", path[128], err[512];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/m.keras", dir);
    if (keras_export_write(m, m->params, path, err, sizeof err)) fail_msg("%s", err);
    int zerr;
    zip_t *za = zip_open(path, ZIP_RDONLY, &zerr);
    assert_non_null(za);
    assert_int_equal(zip_get_num_entries(za, 0), 3);
    assert_string_equal(zip_get_name(za, 0, 0), "metadata.json");
    assert_string_equal(zip_get_name(za, 1, 0), "config.json");
    assert_string_equal(zip_get_name(za, 2, 0), "model.weights.h5");
    zip_uint64_t n;
    char *meta = member(za, "metadata.json", &n), *config = member(za, "config.json", &n);
    assert_non_null(strstr(meta, "\"keras_version\":\"3."));
    char *want = keras_export_config(m);
    assert_string_equal(config, want);
    char *h5 = member(za, "model.weights.h5", &n);
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    H5Pset_fapl_core(fapl, 1 << 16, 0);
    assert_true(H5Pset_file_image(fapl, h5, (size_t)n) >= 0);
    hid_t f = H5Fopen("member", H5F_ACC_RDONLY, fapl);
    assert_true(f >= 0);
    assert_cnn2_weights(f, m);
    H5Fclose(f);
    H5Pclose(fapl);
    zip_close(za);
    free(meta), free(config), free(want), free(h5);
    unlink(path);
    assert_int_equal(rmdir(dir), 0);
    model_free(m);
}

static void test_paths(void **state)
{
    (void)state;
    assert_int_equal(keras_export_kind("a/b.keras"), KERAS_EXPORT_KERAS);
    assert_int_equal(keras_export_kind("m.weights.h5"), KERAS_EXPORT_WEIGHTS);
    assert_int_equal(keras_export_kind("m.h5"), KERAS_EXPORT_NONE);
    assert_int_equal(keras_export_kind(".keras"), KERAS_EXPORT_NONE);
    char dir[] = "/tmp/kt-test-export-XXXXXX", path[128], err[512] = "";
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/m.keras", dir);
    assert_int_equal(keras_export_check(path, err, sizeof err), 0);
    assert_int_equal(rmdir(dir), 0); /* the trial file is gone again */
    /* the directory is made (a job's checkpoint directory comes later) */
    snprintf(path, sizeof path, "%s/sub/m.keras", dir);
    assert_int_equal(keras_export_check(path, err, sizeof err), 0);
    snprintf(path, sizeof path, "%s/sub", dir);
    assert_int_equal(rmdir(path), 0);
    /* under a regular file no directory can be made */
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0644);
    assert_true(fd >= 0);
    close(fd);
    char under[160];
    snprintf(under, sizeof under, "%s/m.keras", path);
    assert_int_equal(keras_export_check(under, err, sizeof err), -ENOTDIR);
    assert_non_null(strstr(err, under));
    assert_int_equal(keras_export_check("m.h5", err, sizeof err), -EINVAL);
    assert_non_null(strstr(err, "m.h5: expected a file name ending in .keras or .weights.h5"));
    /* a failed write leaves nothing at the path */
    Model *m = build("mlp");
    assert_true(keras_export_write(m, m->params, under, err, sizeof err) < 0);
    struct stat sb;
    assert_int_equal(stat(under, &sb), -1);
    model_free(m);
    assert_int_equal(unlink(path), 0);
    assert_int_equal(rmdir(dir), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_default_names_as_keras),
        cmocka_unit_test(test_bad_names_refused),
        cmocka_unit_test(test_config_of_builtin),
        cmocka_unit_test(test_config_activations),
        cmocka_unit_test(test_config_pooling),
        cmocka_unit_test(test_config_rescaling),
        cmocka_unit_test(test_no_bias),
        cmocka_unit_test(test_config_regularizers),
        cmocka_unit_test(test_config_activation_layers),
        cmocka_unit_test(test_weights_file),
        cmocka_unit_test(test_keras_archive),
        cmocka_unit_test(test_paths),
        cmocka_unit_test(test_weights_groups_are_class_stems),
        cmocka_unit_test(test_weights_image_reproducible),
    };
    return cmocka_run_group_tests_name("keras_export", tests, NULL, NULL);
}
