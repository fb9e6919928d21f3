/* keras_export — a trained model as Keras's .weights.h5 and .keras (keras_export.h). */
#include "keras_export.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <zip.h>

#include "util.h"

/* The Keras release whose files these match, checked against what it writes and
 * loads (trainer/tests/test-keras-export.sh); metadata.json says it as Keras does. */
#define KERAS_EXPORT_VERSION "3.15.1"

/* The Sequential's name, as Keras names the first one it makes. */
#define KERAS_EXPORT_MODEL_NAME "sequential"

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n > k && !strcmp(s + n - k, suffix);
}

KerasExportKind keras_export_kind(const char *path)
{
    if (ends_with(path, ".weights.h5")) return KERAS_EXPORT_WEIGHTS;
    if (ends_with(path, ".keras")) return KERAS_EXPORT_KERAS;
    return KERAS_EXPORT_NONE;
}

/* The temporary name next to path that a write goes through. */
static void temp_name(const char *path, char *out, size_t outlen)
{
    snprintf(out, outlen, "%s.tmp-%ld", path, (long)getpid());
}

int keras_export_check(const char *path, char *err, size_t errlen)
{
    if (!keras_export_kind(path)) {
        snprintf(err, errlen, "%s: expected a file name ending in .keras or .weights.h5", path);
        return -EINVAL;
    }
    /* a job's export lands in its checkpoint directory, which the chief makes later */
    char dir[4200];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash && slash != dir) {
        *slash = '\0';
        int rc = util_mkdir_p(dir);
        if (rc) {
            snprintf(err, errlen, "%s: cannot create its directory: %s", path, strerror(-rc));
            return rc;
        }
    }
    char tmp[4200];
    temp_name(path, tmp, sizeof tmp);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) {
        int rc = -errno;
        snprintf(err, errlen, "%s: cannot create a file there: %s", path, strerror(errno));
        return rc;
    }
    close(fd);
    unlink(tmp);
    return 0;
}

/* ----------------------------------------------------------------------------
 * config.json */

/* A float as the shortest decimal that reads back as the same float (1e-05, not
 * 9.99999974737875e-06), so the config says what the spec said. */
static void add_float(cJSON *o, const char *key, float v)
{
    char buf[32];
    for (int digits = 6; digits <= 9; digits++) {
        snprintf(buf, sizeof buf, "%.*g", digits, (double)v);
        if (strtof(buf, NULL) == v) break;
    }
    cJSON_AddRawToObject(o, key, buf);
}

static cJSON *int_list(const int *v, int n)
{
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; i < n; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber(v[i]));
    return a;
}

/* {"module": "keras.layers", "class_name": cls, "config": {name, trainable, dtype}}:
 * returns the layer and, in *cfg, its config to add the class's fields to. */
static cJSON *layer_object(const char *cls, const char *name, cJSON **cfg)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "module", "keras.layers");
    cJSON_AddStringToObject(o, "class_name", cls);
    *cfg = cJSON_AddObjectToObject(o, "config");
    cJSON_AddStringToObject(*cfg, "name", name);
    cJSON_AddBoolToObject(*cfg, "trainable", 1);
    cJSON_AddStringToObject(*cfg, "dtype", "float32");
    cJSON_AddNullToObject(o, "registered_name");
    return o;
}

/* The kernel_regularizer of a layer with factors l1 and l2 (both 0: none): L1, L2 or
 * L1L2, as Keras names the one it was given. */
static void add_regularizer(cJSON *cfg, float l1, float l2)
{
    if (l1 == 0.0f && l2 == 0.0f) {
        cJSON_AddNullToObject(cfg, "kernel_regularizer");
        return;
    }
    cJSON *r = cJSON_AddObjectToObject(cfg, "kernel_regularizer");
    cJSON_AddStringToObject(r, "module", "keras.regularizers");
    cJSON_AddStringToObject(r, "class_name", l1 == 0.0f ? "L2" : l2 == 0.0f ? "L1" : "L1L2");
    cJSON *c = cJSON_AddObjectToObject(r, "config");
    if (l1 != 0.0f) add_float(c, "l1", l1);
    if (l2 != 0.0f) add_float(c, "l2", l2);
    cJSON_AddNullToObject(r, "registered_name");
}

static cJSON *layer_config(const Layer *l)
{
    cJSON *cfg, *o;
    switch (l->type) {
    case LAYER_RESHAPE:
        o = layer_object("Reshape", l->name, &cfg);
        cJSON_AddItemToObject(cfg, "target_shape", int_list(l->out_shape, l->out_rank));
        break;
    case LAYER_CONV2D: {
        const int k[2] = {l->conv.kh, l->conv.kw}, s[2] = {l->conv.sh, l->conv.sw}, one[2] = {1, 1};
        o = layer_object("Conv2D", l->name, &cfg);
        cJSON_AddNumberToObject(cfg, "filters", l->conv.f);
        cJSON_AddItemToObject(cfg, "kernel_size", int_list(k, 2));
        cJSON_AddItemToObject(cfg, "strides", int_list(s, 2));
        cJSON_AddStringToObject(cfg, "padding", l->same ? "same" : "valid");
        cJSON_AddStringToObject(cfg, "data_format", "channels_last");
        cJSON_AddItemToObject(cfg, "dilation_rate", int_list(one, 2));
        cJSON_AddStringToObject(cfg, "activation", model_activation_name(l->act));
        cJSON_AddBoolToObject(cfg, "use_bias", l->b_count != 0);
        add_regularizer(cfg, l->l1, l->l2);
        break;
    }
    case LAYER_MAXPOOL:
    case LAYER_AVGPOOL: {
        const int p[2] = {l->pool.ph, l->pool.pw}, s[2] = {l->pool.sh, l->pool.sw};
        o = layer_object(l->type == LAYER_MAXPOOL ? "MaxPooling2D" : "AveragePooling2D", l->name,
                         &cfg);
        cJSON_AddItemToObject(cfg, "pool_size", int_list(p, 2));
        cJSON_AddItemToObject(cfg, "strides", int_list(s, 2));
        cJSON_AddStringToObject(cfg, "padding", l->same ? "same" : "valid");
        cJSON_AddStringToObject(cfg, "data_format", "channels_last");
        break;
    }
    case LAYER_GLOBAL_AVGPOOL:
    case LAYER_GLOBAL_MAXPOOL:
        o = layer_object(l->type == LAYER_GLOBAL_AVGPOOL ? "GlobalAveragePooling2D"
                                                         : "GlobalMaxPooling2D",
                         l->name, &cfg);
        cJSON_AddStringToObject(cfg, "data_format", "channels_last");
        cJSON_AddBoolToObject(cfg, "keepdims", l->out_rank == 3);
        break;
    case LAYER_RESCALING:
        o = layer_object("Rescaling", l->name, &cfg);
        add_float(cfg, "scale", l->scale);
        add_float(cfg, "offset", l->offset);
        break;
    case LAYER_FLATTEN:
        o = layer_object("Flatten", l->name, &cfg);
        cJSON_AddStringToObject(cfg, "data_format", "channels_last");
        break;
    case LAYER_DENSE:
        o = layer_object("Dense", l->name, &cfg);
        cJSON_AddNumberToObject(cfg, "units", l->units);
        cJSON_AddStringToObject(cfg, "activation", model_activation_name(l->act));
        cJSON_AddBoolToObject(cfg, "use_bias", l->b_count != 0);
        add_regularizer(cfg, l->l1, l->l2);
        break;
    case LAYER_ACTIVATION:
        o = layer_object("Activation", l->name, &cfg);
        cJSON_AddStringToObject(cfg, "activation", model_activation_name(l->act));
        break;
    case LAYER_RELU: /* Keras 3 writes the defaults */
        o = layer_object("ReLU", l->name, &cfg);
        cJSON_AddNullToObject(cfg, "max_value");
        cJSON_AddNumberToObject(cfg, "negative_slope", 0.0);
        cJSON_AddNumberToObject(cfg, "threshold", 0.0);
        break;
    case LAYER_LEAKY_RELU: /* tf-keras's key: Keras 3 reads it too, tf-keras not Keras 3's */
        o = layer_object("LeakyReLU", l->name, &cfg);
        add_float(cfg, "alpha", l->slope);
        break;
    case LAYER_BATCHNORM: /* axis -1: tf-keras reads it as well as its own [3] */
        o = layer_object("BatchNormalization", l->name, &cfg);
        cJSON_AddNumberToObject(cfg, "axis", -1);
        add_float(cfg, "momentum", l->momentum);
        add_float(cfg, "epsilon", l->epsilon);
        cJSON_AddBoolToObject(cfg, "center", l->b_count != 0);
        cJSON_AddBoolToObject(cfg, "scale", l->w_count != 0);
        if (l->synchronized) /* only when set: the key is Keras's default otherwise */
            cJSON_AddTrueToObject(cfg, "synchronized");
        break;
    case LAYER_DROPOUT:
    default:
        o = layer_object("Dropout", l->name, &cfg);
        add_float(cfg, "rate", l->rate);
        break;
    }
    return o;
}

char *keras_export_config(const Model *m)
{
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "module", "keras");
    cJSON_AddStringToObject(root, "class_name", "Sequential");
    cJSON *cfg = cJSON_AddObjectToObject(root, "config");
    cJSON_AddStringToObject(cfg, "name", KERAS_EXPORT_MODEL_NAME);
    cJSON_AddBoolToObject(cfg, "trainable", 1);
    cJSON *layers = cJSON_AddArrayToObject(cfg, "layers");
    /* batch_input_shape, not Keras 3's batch_shape: Keras 3 reads both, tf-keras only
     * this one */
    cJSON *in = cJSON_CreateObject(), *icfg;
    cJSON_AddStringToObject(in, "module", "keras.layers");
    cJSON_AddStringToObject(in, "class_name", "InputLayer");
    icfg = cJSON_AddObjectToObject(in, "config");
    cJSON *shape = cJSON_AddArrayToObject(icfg, "batch_input_shape");
    cJSON_AddItemToArray(shape, cJSON_CreateNull());
    for (int i = 0; i < m->input_rank; i++)
        cJSON_AddItemToArray(shape, cJSON_CreateNumber(m->input_shape[i]));
    cJSON_AddStringToObject(icfg, "dtype", "float32");
    cJSON_AddStringToObject(icfg, "name", "input_layer");
    cJSON_AddNullToObject(in, "registered_name");
    cJSON_AddItemToArray(layers, in);
    for (int i = 0; i < m->num_layers; i++)
        cJSON_AddItemToArray(layers, layer_config(&m->layers[i]));
    cJSON_AddNullToObject(root, "registered_name");
    char *text = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    if (!text) util_fail(KT_EXIT_DATA, "out of memory printing the Keras config");
    return text;
}

/* ----------------------------------------------------------------------------
 * model.weights.h5 */

/* Sets the scalar attribute `name` of object obj to the string value, as h5py writes a
 * Python str: variable-length UTF-8. */
static int h5_name_attr(hid_t obj, const char *value)
{
    hid_t t = H5Tcopy(H5T_C_S1), sp = H5Screate(H5S_SCALAR), a = -1;
    int ok = t >= 0 && sp >= 0 && H5Tset_size(t, H5T_VARIABLE) >= 0 &&
             H5Tset_cset(t, H5T_CSET_UTF8) >= 0 &&
             (a = H5Acreate2(obj, "name", t, sp, H5P_DEFAULT, H5P_DEFAULT)) >= 0 &&
             H5Awrite(a, t, &value) >= 0;
    if (a >= 0) H5Aclose(a);
    if (sp >= 0) H5Sclose(sp);
    if (t >= 0) H5Tclose(t);
    return ok ? 0 : -EIO;
}

/* The creation properties of every group and dataset: no modification times (as h5py
 * writes them), so that the same weights make the same bytes. */
typedef struct {
    hid_t gcpl, dcpl;
} H5Props;

/* Dataset `name` of group g: rank dims, float32 little-endian, data. */
static int h5_floats(const H5Props *pr, hid_t g, const char *name, int rank, const hsize_t *dims,
                     const float *data)
{
    hid_t sp = H5Screate_simple(rank, dims, NULL), d = -1;
    int ok =
        sp >= 0 &&
        (d = H5Dcreate2(g, name, H5T_IEEE_F32LE, sp, H5P_DEFAULT, pr->dcpl, H5P_DEFAULT)) >= 0 &&
        H5Dwrite(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) >= 0;
    if (d >= 0) H5Dclose(d);
    if (sp >= 0) H5Sclose(sp);
    return ok ? 0 : -EIO;
}

/* <parent>/<group>/vars (parent/vars when group is NULL), its attribute "name" the
 * layer's (or model's) own name, as Keras 3 writes it: returns vars (close it and
 * *outer), or -1. */
static hid_t h5_vars_group(const H5Props *pr, hid_t parent, const char *group, const char *name,
                           hid_t *outer)
{
    hid_t g = group ? H5Gcreate2(parent, group, H5P_DEFAULT, pr->gcpl, H5P_DEFAULT) : -1;
    *outer = g;
    if (group && g < 0) return -1;
    hid_t v = H5Gcreate2(group ? g : parent, "vars", H5P_DEFAULT, pr->gcpl, H5P_DEFAULT);
    if (v >= 0 && h5_name_attr(v, name)) {
        H5Gclose(v);
        v = -1;
    }
    return v;
}

/* The layer's variables in vars as 0, 1, ... in Keras's order and shapes
 * (model_layer_vars: kernel and bias; gamma, beta, moving_mean, moving_variance). */
static int h5_layer_weights(const H5Props *pr, hid_t vars, const Layer *l, const float *params)
{
    LayerVar v[4];
    const int n = model_layer_vars(l, v);
    for (int k = 0; k < n; k++) {
        hsize_t dims[4];
        char name[16];
        for (int d = 0; d < v[k].rank; d++) dims[d] = (hsize_t)v[k].dims[d];
        snprintf(name, sizeof name, "%d", k);
        if (h5_floats(pr, vars, name, v[k].rank, dims, params + v[k].off)) return -EIO;
    }
    return 0;
}

/* Writes the groups and datasets into the open file f. */
static int h5_fill(const H5Props *pr, hid_t f, const Model *m, const float *params)
{
    hid_t layers = H5Gcreate2(f, "layers", H5P_DEFAULT, pr->gcpl, H5P_DEFAULT);
    if (layers < 0) return -EIO;
    int rc = 0;
    for (int i = 0; i < m->num_layers && !rc; i++) {
        char group[64];
        model_layer_keras_group(m, i, group, sizeof group);
        hid_t outer, vars = h5_vars_group(pr, layers, group, m->layers[i].name, &outer);
        rc = vars < 0 ? -EIO : h5_layer_weights(pr, vars, &m->layers[i], params);
        if (vars >= 0) H5Gclose(vars);
        if (outer >= 0) H5Gclose(outer);
    }
    H5Gclose(layers);
    if (rc) return rc;
    hid_t outer, vars = h5_vars_group(pr, f, NULL, KERAS_EXPORT_MODEL_NAME, &outer);
    if (vars < 0) return -EIO;
    H5Gclose(vars);
    return 0;
}

int keras_export_weights_image(const Model *m, const float *params, void **buf, size_t *len,
                               char *err, size_t errlen)
{
    /* the library's own error stack goes to stderr unless silenced; err says it */
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    *buf = NULL;
    /* in memory (the core driver, no backing file), so that the same image becomes a
     * file or an archive member */
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS), f = -1;
    H5Props pr = {H5Pcreate(H5P_GROUP_CREATE), H5Pcreate(H5P_DATASET_CREATE)};
    int rc = -EIO;
    if (fapl >= 0 && H5Pset_fapl_core(fapl, 1 << 16, 0) >= 0 && pr.gcpl >= 0 && pr.dcpl >= 0 &&
        H5Pset_obj_track_times(pr.gcpl, 0) >= 0 && H5Pset_obj_track_times(pr.dcpl, 0) >= 0)
        f = H5Fcreate("model.weights.h5", H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
    if (f >= 0 && !h5_fill(&pr, f, m, params) && H5Fflush(f, H5F_SCOPE_GLOBAL) >= 0) {
        ssize_t n = H5Fget_file_image(f, NULL, 0);
        if (n > 0) {
            *buf = xmalloc((size_t)n);
            if (H5Fget_file_image(f, *buf, (size_t)n) == n) *len = (size_t)n, rc = 0;
        }
    }
    if (f >= 0) H5Fclose(f);
    if (fapl >= 0) H5Pclose(fapl);
    if (pr.gcpl >= 0) H5Pclose(pr.gcpl);
    if (pr.dcpl >= 0) H5Pclose(pr.dcpl);
    if (rc) {
        free(*buf);
        *buf = NULL;
        snprintf(err, errlen, "libhdf5 failed to make the weights file in memory");
    }
    return rc;
}

/* ----------------------------------------------------------------------------
 * Files */

/* Writes len bytes of buf to a new file at path and fsyncs it. */
static int write_file(const char *path, const void *buf, size_t len)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return -errno;
    int rc = util_write_all(fd, buf, len);
    if (!rc && fsync(fd)) rc = -errno;
    if (close(fd) && !rc) rc = -errno;
    return rc;
}

/* Adds a member holding len bytes of buf (kept until zip_close) to za, stored: Keras
 * writes its archives uncompressed. */
static int archive_add(zip_t *za, const char *name, const void *buf, size_t len)
{
    zip_source_t *src = zip_source_buffer(za, buf, len, 0);
    if (!src) return -1;
    zip_int64_t idx = zip_file_add(za, name, src, ZIP_FL_ENC_UTF_8);
    if (idx < 0) {
        zip_source_free(src);
        return -1;
    }
    return zip_set_file_compression(za, (zip_uint64_t)idx, ZIP_CM_STORE, 0);
}

/* metadata.json: the Keras version and the time, as Keras writes them. */
static char *metadata_json(void)
{
    char date[32];
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(date, sizeof date, "%Y-%m-%d@%H:%M:%S", &tm);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "keras_version", KERAS_EXPORT_VERSION);
    cJSON_AddStringToObject(o, "date_saved", date);
    char *text = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    if (!text) util_fail(KT_EXIT_DATA, "out of memory printing the Keras metadata");
    return text;
}

/* The .keras archive at path (a new file) from the weights image h5 of len bytes. */
static int write_archive(const Model *m, const char *path, const void *h5, size_t len, char *err,
                         size_t errlen)
{
    int zerr;
    zip_t *za = zip_open(path, ZIP_CREATE | ZIP_TRUNCATE, &zerr);
    if (!za) {
        zip_error_t ze;
        zip_error_init_with_code(&ze, zerr);
        snprintf(err, errlen, "%s", zip_error_strerror(&ze));
        zip_error_fini(&ze);
        return -EIO;
    }
    char *meta = metadata_json(), *config = keras_export_config(m);
    int rc = 0;
    if (archive_add(za, "metadata.json", meta, strlen(meta)) ||
        archive_add(za, "config.json", config, strlen(config)) ||
        archive_add(za, "model.weights.h5", h5, len)) {
        snprintf(err, errlen, "%s", zip_strerror(za));
        zip_discard(za);
        rc = -EIO;
    } else if (zip_close(za)) {
        snprintf(err, errlen, "%s", zip_strerror(za));
        zip_discard(za);
        rc = -EIO;
    }
    free(meta);
    free(config);
    if (rc) return rc;
    /* libzip closes it without an fsync: the renamed file must hold its bytes */
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0 || fsync(fd)) rc = -errno;
    if (fd >= 0) close(fd);
    if (rc) snprintf(err, errlen, "%s", strerror(-rc));
    return rc;
}

int keras_export_write(const Model *m, const float *params, const char *path, char *err,
                       size_t errlen)
{
    KerasExportKind kind = keras_export_kind(path);
    if (!kind) return keras_export_check(path, err, errlen);
    void *h5;
    size_t len;
    char why[512], tmp[4200];
    int rc = keras_export_weights_image(m, params, &h5, &len, why, sizeof why);
    if (rc) {
        snprintf(err, errlen, "%s: %s", path, why);
        return rc;
    }
    temp_name(path, tmp, sizeof tmp);
    if (kind == KERAS_EXPORT_WEIGHTS) {
        rc = write_file(tmp, h5, len);
        if (rc) snprintf(why, sizeof why, "%s", strerror(-rc));
    } else {
        rc = write_archive(m, tmp, h5, len, why, sizeof why);
    }
    free(h5);
    if (!rc && rename(tmp, path)) {
        rc = -errno;
        snprintf(why, sizeof why, "renaming the temporary file onto it: %s", strerror(errno));
    }
    if (rc) {
        unlink(tmp);
        snprintf(err, errlen, "%s: %s", path, why);
    }
    return rc;
}
