/* Keras import (keras_import.c) without Keras: the weights keras_export.c writes (the
 * layout Keras 3 writes and reads, trainer/tests/test-keras-export.sh) come back into
 * another draw of the same model; a legacy tf-keras .h5 made here with libhdf5 as h5py
 * lays it out; a .keras archive through --model; and every refusal names the file, the
 * variable and the layer and leaves the parameters as they were. That real Keras's
 * files train on from Keras's loss is trainer/tests/test-keras-finetune.sh. */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

#include <cmocka.h>
#include <hdf5.h>
#include <zip.h>

#include "keras_export.h"
#include "keras_import.h"
#include "model.h"
#include "util.h"

/* Dense(4 -> 3) -> Dense(2), the same with a first layer of 5 units, and with a third
 * layer: the files of "another model" below. */
#define SPEC_A                                                                                     \
    "{\"input_shape\":[4],\"layers\":[{\"type\":\"Dense\",\"units\":3},{\"type\":"                 \
    "\"Dense\",\"units\":2}]}"
#define SPEC_WIDER                                                                                 \
    "{\"input_shape\":[4],\"layers\":[{\"type\":\"Dense\",\"units\":5},{\"type\":"                 \
    "\"Dense\",\"units\":2}]}"
#define SPEC_DEEPER                                                                                \
    "{\"input_shape\":[4],\"layers\":[{\"type\":\"Dense\",\"units\":3},{\"type\":"                 \
    "\"Dense\",\"units\":2},{\"type\":\"Dense\",\"units\":2}]}"
#define SPEC_LAST4                                                                                 \
    "{\"input_shape\":[4],\"layers\":[{\"type\":\"Dense\",\"units\":3},{\"type\":"                 \
    "\"Dense\",\"units\":4}]}"

static Model *build(const char *spec, uint64_t seed)
{
    Model *m;
    char err[512];
    if (model_create(&m, spec, seed, err, sizeof err)) fail_msg("%s: %s", spec, err);
    return m;
}

/* m's weights as a .weights.h5 image (free it). */
static void *image_of(const Model *m, size_t *len)
{
    void *img;
    char err[512];
    if (keras_export_weights_image(m, m->params, &img, len, err, sizeof err)) fail_msg("%s", err);
    return img;
}

static void assert_params_equal(const Model *a, const Model *b)
{
    assert_int_equal(a->num_params, b->num_params);
    for (size_t i = 0; i < a->num_params; i++)
        if (a->params[i] != b->params[i])
            fail_msg("params[%zu]: %g, want %g", i, (double)a->params[i], (double)b->params[i]);
}

/* Importing the image of `from` into a model of spec `into` fails naming `needle`, and
 * leaves its parameters as drawn. */
static void assert_refused(const char *from, const char *into, const char *needle)
{
    Model *src = build(from, 3), *dst = build(into, 4), *orig = build(into, 4);
    size_t len;
    void *img = image_of(src, &len);
    char err[1024] = "";
    assert_int_equal(
        keras_import_weights_image(dst, dst->params, img, len, "w.h5", err, sizeof err), -EINVAL);
    if (!strstr(err, needle)) fail_msg("'%s' lacks '%s'", err, needle);
    assert_params_equal(dst, orig);
    free(img);
    model_free(src), model_free(dst), model_free(orig);
}

static void test_weights_round_trip(void **state)
{
    (void)state;
    static const char *const specs[] = {"cnn2", "tutorial-cnn", "mlp"};
    for (int s = 0; s < 3; s++) {
        Model *src = build(specs[s], 7), *dst = build(specs[s], 8);
        size_t len;
        void *img = image_of(src, &len);
        char err[512];
        if (keras_import_weights_image(dst, dst->params, img, len, "w.h5", err, sizeof err))
            fail_msg("%s: %s", specs[s], err);
        assert_params_equal(dst, src);
        free(img);
        model_free(src), model_free(dst);
    }
}

/* BatchNormalization's variables, Keras's four (three without center) in its order: a
 * round trip keeps every one, the moving statistics included, and a file whose layer has
 * another set is refused naming them. */
#define SPEC_BN(center)                                                                            \
    "{\"input_shape\":[5,5,2],\"layers\":[{\"type\":\"Conv2D\",\"filters\":3,"                     \
    "\"kernel_size\":2},{\"type\":\"BatchNormalization\",\"center\":" center "},"                  \
    "{\"type\":\"Flatten\"},{\"type\":\"Dense\",\"units\":2}]}"

static void test_batchnorm_weights(void **state)
{
    (void)state;
    Model *src = build(SPEC_BN("true"), 7), *dst = build(SPEC_BN("true"), 8);
    const Layer *l = &src->layers[1];
    uint64_t rng = 9;
    for (size_t j = 0; j < model_layer_floats(l); j++)
        src->params[l->w_off + j] = util_rand_float(&rng) + 0.5f;
    size_t len;
    void *img = image_of(src, &len);
    char err[1024];
    if (keras_import_weights_image(dst, dst->params, img, len, "w.h5", err, sizeof err))
        fail_msg("%s", err);
    assert_params_equal(dst, src);
    free(img);
    model_free(src), model_free(dst);
    assert_refused(SPEC_BN("false"), SPEC_BN("true"),
                   "w.h5: layers/batch_normalization/vars: 3 variables, where layer 1 "
                   "\"batch_normalization\" (BatchNormalization) has 4 (gamma, beta, moving_mean "
                   "and moving_variance");
}

static void test_weights_file_and_truncated(void **state)
{
    (void)state;
    Model *src = build("cnn2", 7), *dst = build("cnn2", 8), *orig = build("cnn2", 8);
    char dir[] = "/tmp/kt-test-import-XXXXXX", path[128], err[1024];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/m.weights.h5", dir);
    if (keras_export_write(src, src->params, path, err, sizeof err)) fail_msg("%s", err);
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fclose(f);
    assert_int_equal(truncate(path, size / 2), 0);
    assert_int_equal(keras_import_weights(dst, dst->params, path, err, sizeof err), -EINVAL);
    char want[256];
    snprintf(want, sizeof want, "%s: cannot open it as HDF5", path);
    if (!strstr(err, want)) fail_msg("'%s' lacks '%s'", err, want);
    assert_params_equal(dst, orig);
    unlink(path);
    if (keras_export_write(src, src->params, path, err, sizeof err)) fail_msg("%s", err);
    if (keras_import_weights(dst, dst->params, path, err, sizeof err)) fail_msg("%s", err);
    assert_params_equal(dst, src);
    unlink(path);
    assert_int_equal(keras_import_weights(dst, dst->params, path, err, sizeof err), -EINVAL);
    rmdir(dir);
    model_free(src), model_free(dst), model_free(orig);
}

/* A file another process holds locked (h5py keeps a lock while it writes; a volume
 * without flock refuses every lock): the trainer only reads it, and takes none. */
static void test_weights_file_locked_elsewhere(void **state)
{
    (void)state;
    Model *src = build("mlp", 7), *dst = build("mlp", 8);
    char dir[] = "/tmp/kt-test-import-XXXXXX", path[128], err[1024];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/m.weights.h5", dir);
    if (keras_export_write(src, src->params, path, err, sizeof err)) fail_msg("%s", err);
    int fd = open(path, O_RDWR);
    assert_true(fd >= 0);
    assert_int_equal(flock(fd, LOCK_EX | LOCK_NB), 0);
    if (keras_import_weights(dst, dst->params, path, err, sizeof err)) fail_msg("%s", err);
    assert_params_equal(dst, src);
    close(fd);
    unlink(path);
    rmdir(dir);
    model_free(src), model_free(dst);
}

static void test_another_model_refused(void **state)
{
    (void)state;
    assert_refused(SPEC_A, SPEC_WIDER,
                   "w.h5: layers/dense/vars/0: shape [4, 3], where layer 0 \"dense\" (Dense) "
                   "has its kernel [4, 5]");
    /* the first layer matches: the second's mismatch still leaves it as drawn */
    assert_refused(SPEC_A, SPEC_LAST4,
                   "w.h5: layers/dense_1/vars/0: shape [3, 2], where layer 1 \"dense_1\" "
                   "(Dense) has its kernel [3, 4]");
    assert_refused(SPEC_A, SPEC_DEEPER,
                   "w.h5: layers/dense_2/vars: missing, where layer 2 \"dense_2\" (Dense) keeps "
                   "its kernel and bias");
    assert_refused(SPEC_DEEPER, SPEC_A,
                   "w.h5: layers/dense_2: weights of a layer the model does not have");
    assert_refused("mlp", "tutorial-cnn",
                   "w.h5: layers/conv2d/vars: missing, where layer 1 "
                   "\"conv2d\" (Conv2D) keeps its kernel and bias");
}

static void test_not_weights_refused(void **state)
{
    (void)state;
    Model *m = build(SPEC_A, 1);
    char junk[4096], err[512];
    memset(junk, 'x', sizeof junk);
    assert_int_equal(
        keras_import_weights_image(m, m->params, junk, sizeof junk, "j.h5", err, sizeof err),
        -EINVAL);
    if (!strstr(err, "j.h5: cannot open it as HDF5")) fail_msg("'%s'", err);
    model_free(m);
}

/* ----------------------------------------------------------------------------
 * legacy .h5, laid out as tf-keras's save_weights writes it through h5py */

/* Attribute `name` of obj: the strings as one fixed-length type (numpy's S dtype), or,
 * for none, an empty float64 array (numpy's dtype of an empty list). */
static void strings_attr(hid_t obj, const char *name, const char *const *v, size_t n)
{
    size_t size = 1;
    for (size_t i = 0; i < n; i++)
        if (strlen(v[i]) > size) size = strlen(v[i]);
    char *raw = calloc(n ? n : 1, size);
    for (size_t i = 0; i < n; i++) memcpy(raw + (size_t)i * size, v[i], strlen(v[i]));
    hid_t t = n ? H5Tcopy(H5T_C_S1) : H5Tcopy(H5T_IEEE_F64LE);
    if (n) H5Tset_size(t, size), H5Tset_strpad(t, H5T_STR_NULLPAD);
    hsize_t dims[1] = {n};
    hid_t sp = H5Screate_simple(1, dims, NULL);
    hid_t a = H5Acreate2(obj, name, t, sp, H5P_DEFAULT, H5P_DEFAULT);
    assert_true(a >= 0);
    if (n) assert_true(H5Awrite(a, t, raw) >= 0);
    H5Aclose(a), H5Sclose(sp), H5Tclose(t);
    free(raw);
}

static void floats(hid_t loc, const char *path, int rank, const hsize_t *dims, const float *v)
{
    hid_t lcpl = H5Pcreate(H5P_LINK_CREATE);
    H5Pset_create_intermediate_group(lcpl, 1);
    hid_t sp = H5Screate_simple(rank, dims, NULL);
    hid_t d = H5Dcreate2(loc, path, H5T_IEEE_F32LE, sp, lcpl, H5P_DEFAULT, H5P_DEFAULT);
    assert_true(d >= 0);
    assert_true(H5Dwrite(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, v) >= 0);
    H5Dclose(d), H5Sclose(sp), H5Pclose(lcpl);
}

/* A legacy file of mlp's layers (Flatten, Dense 128, Dropout, Dense 10) with m's
 * weights, under model_weights (model.save) or at the top (save_weights); `drop_last`
 * leaves the last Dense out (a file of another model). */
static void write_legacy(const char *path, const Model *m, int under_model_weights, int drop_last)
{
    hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    assert_true(f >= 0);
    hid_t root = under_model_weights
                     ? H5Gcreate2(f, "model_weights", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)
                     : f;
    const char *const names[] = {"flatten", "dense", "dropout", "dense_1"};
    strings_attr(root, "layer_names", names, drop_last ? 3 : 4);
    for (int i = 0; i < (drop_last ? 3 : 4); i++) {
        hid_t g = H5Gcreate2(root, names[i], H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        const Layer *l = &m->layers[i];
        if (!l->w_count) {
            strings_attr(g, "weight_names", NULL, 0);
        } else {
            char k[64], b[64];
            snprintf(k, sizeof k, "%s/kernel:0", names[i]);
            snprintf(b, sizeof b, "%s/bias:0", names[i]);
            const char *const wn[] = {k, b};
            strings_attr(g, "weight_names", wn, 2);
            const hsize_t kd[] = {(hsize_t)l->dense_in, (hsize_t)l->units}, bd[] = {l->b_count};
            floats(g, k, 2, kd, m->params + l->w_off);
            floats(g, b, 1, bd, m->params + l->b_off);
        }
        H5Gclose(g);
    }
    if (under_model_weights) H5Gclose(root);
    H5Fclose(f);
}

static void test_legacy_h5(void **state)
{
    (void)state;
    Model *src = build("mlp", 7), *dst = build("mlp", 8), *orig = build("mlp", 8);
    char dir[] = "/tmp/kt-test-import-XXXXXX", path[128], err[1024];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/m.h5", dir);
    for (int under = 0; under < 2; under++) {
        write_legacy(path, src, under, 0);
        memcpy(dst->params, orig->params, dst->num_params * sizeof(float));
        if (keras_import_weights(dst, dst->params, path, err, sizeof err)) fail_msg("%s", err);
        assert_params_equal(dst, src);
    }
    write_legacy(path, src, 1, 1);
    memcpy(dst->params, orig->params, dst->num_params * sizeof(float));
    assert_int_equal(keras_import_weights(dst, dst->params, path, err, sizeof err), -EINVAL);
    char want[256];
    snprintf(want, sizeof want,
             "%s: 1 layers with weights (attribute layer_names of model_weights), the model "
             "has 2",
             path);
    if (!strstr(err, want)) fail_msg("'%s' lacks '%s'", err, want);
    assert_params_equal(dst, orig);
    /* as many layers with weights as mlp, the first narrower */
    Model *narrow = build("{\"input_shape\":[28,28],\"layers\":[{\"type\":\"Flatten\"},"
                          "{\"type\":\"Dense\",\"units\":64},{\"type\":\"Dense\",\"units\":10}]}",
                          1);
    write_legacy(path, src, 0, 0);
    assert_int_equal(keras_import_weights(narrow, narrow->params, path, err, sizeof err), -EINVAL);
    snprintf(want, sizeof want,
             "%s: dense/dense/kernel:0: shape [784, 128], where layer 1 \"dense\" (Dense) has "
             "its kernel [784, 64]",
             path);
    if (!strstr(err, want)) fail_msg("'%s' lacks '%s'", err, want);
    unlink(path);
    rmdir(dir);
    model_free(narrow), model_free(src), model_free(dst), model_free(orig);
}

/* ----------------------------------------------------------------------------
 * .keras archives through --model */

/* A zip at path with the members given as name, text pairs (NULL ends them). */
static void write_zip(const char *path, ...)
{
    int zerr;
    zip_t *za = zip_open(path, ZIP_CREATE | ZIP_TRUNCATE, &zerr);
    assert_non_null(za);
    va_list ap;
    va_start(ap, path);
    for (const char *name; (name = va_arg(ap, const char *));) {
        const void *buf = va_arg(ap, const void *);
        size_t len = va_arg(ap, size_t);
        zip_source_t *src = zip_source_buffer(za, buf, len, 0);
        assert_true(zip_file_add(za, name, src, 0) >= 0);
    }
    va_end(ap);
    assert_int_equal(zip_close(za), 0);
}

static void assert_model_refused(const char *path, const char *needle)
{
    Model *m = NULL;
    char err[1024] = "";
    assert_int_equal(model_create(&m, path, 1, err, sizeof err), -EINVAL);
    assert_null(m);
    if (!strstr(err, needle)) fail_msg("'%s' lacks '%s'", err, needle);
}

static void test_keras_archive_as_model(void **state)
{
    (void)state;
    Model *src = build("cnn2", 7);
    char dir[] = "/tmp/kt-test-import-XXXXXX", path[128], err[1024], want[256];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/m.keras", dir);
    if (keras_export_write(src, src->params, path, err, sizeof err)) fail_msg("%s", err);
    assert_int_equal(keras_import_is_archive(path), 1);
    Model *m = build(path, 8); /* the archive's weights, not seed 8's draw */
    assert_string_equal(m->signature, src->signature);
    assert_params_equal(m, src);
    model_free(m);

    /* a truncated archive: its central directory is gone */
    FILE *f = fopen(path, "rb");
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fclose(f);
    assert_int_equal(truncate(path, size - 30), 0);
    snprintf(want, sizeof want, "%s: not a readable .keras archive", path);
    assert_model_refused(path, want);

    /* no weights, and another model's weights */
    char *config = keras_export_config(src);
    write_zip(path, "config.json", config, strlen(config), (const char *)NULL);
    snprintf(want, sizeof want, "%s: no model.weights.h5 in the archive", path);
    assert_model_refused(path, want);
    Model *other = build("tutorial-cnn", 1);
    size_t len;
    void *img = image_of(other, &len);
    write_zip(path, "config.json", config, strlen(config), "model.weights.h5", img, len,
              (const char *)NULL);
    /* the same first kernel: the first difference is conv2d_1, which other lacks */
    snprintf(want, sizeof want,
             "%s: model.weights.h5: layers/conv2d_1/vars: missing, where layer 1 \"conv2d_1\" "
             "(Conv2D) keeps its kernel and bias",
             path);
    assert_model_refused(path, want);
    /* a config that is not a model the trainer can train: the reader's message */
    write_zip(path, "config.json", "{\"class_name\":\"Sequential\"}", (size_t)27,
              "model.weights.h5", img, len, (const char *)NULL);
    snprintf(want, sizeof want, "%s: config.json", path);
    assert_model_refused(path, want);
    unlink(path);
    rmdir(dir);
    free(img), free(config);
    model_free(other), model_free(src);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_weights_round_trip),
        cmocka_unit_test(test_batchnorm_weights),
        cmocka_unit_test(test_weights_file_and_truncated),
        cmocka_unit_test(test_weights_file_locked_elsewhere),
        cmocka_unit_test(test_another_model_refused),
        cmocka_unit_test(test_not_weights_refused),
        cmocka_unit_test(test_legacy_h5),
        cmocka_unit_test(test_keras_archive_as_model),
    };
    return cmocka_run_group_tests_name("keras_import", tests, NULL, NULL);
}
