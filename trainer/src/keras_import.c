/* keras_import — Keras's weights and .keras archives into a model (keras_import.h). */
#include "keras_import.h"

#include <errno.h>
#include <hdf5.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zip.h>

#include "util.h"

/* A .keras member's largest size: config.json as a model file (model.c), the weights
 * as the largest arena (2^28 floats) with room for HDF5's own structures. */
#define ARCHIVE_CONFIG_MAX ((zip_uint64_t)1 << 20)
#define ARCHIVE_WEIGHTS_MAX (((zip_uint64_t)1 << 30) + ((zip_uint64_t)1 << 24))

/* One import: the model, the staged copy of its arena that becomes params only when
 * every variable was read, and where errors go. */
typedef struct {
    const Model *m;
    float *staged;
    const char *what;
    char *err;
    size_t errlen;
} Import;

/* ----------------------------------------------------------------------------
 * Variables */

/* The Keras shape of a variable. */
static int var_shape(const LayerVar *v, hsize_t dims[4])
{
    for (int k = 0; k < v->rank; k++) dims[k] = (hsize_t)v->dims[k];
    return v->rank;
}

static void shape_text(const hsize_t *dims, int rank, char *out, size_t outlen)
{
    int n = snprintf(out, outlen, "[");
    for (int i = 0; i < rank && (size_t)n < outlen; i++)
        n += snprintf(out + n, outlen - (size_t)n, "%s%llu", i ? ", " : "",
                      (unsigned long long)dims[i]);
    if ((size_t)n < outlen) snprintf(out + n, outlen - (size_t)n, "]");
}

/* `layer 2 "conv2d_1" (Conv2D)`: the model's layer i as errors name it. */
static void layer_text(const Model *m, int i, char *out, size_t outlen)
{
    const Layer *l = &m->layers[i];
    snprintf(out, outlen, "layer %d \"%s\" (%s)", i, l->name,
             l->type == LAYER_CONV2D  ? "Conv2D"
             : l->type == LAYER_DENSE ? "Dense"
                                      : "BatchNormalization");
}

/* Reads dataset `path` of loc, layer i's variable `which` (model_layer_vars' order), into
 * the staged arena after checking that it is floating point of the variable's shape. */
static int read_var(Import *im, hid_t loc, const char *path, int i, int which)
{
    const Layer *l = &im->m->layers[i];
    LayerVar vars[4];
    model_layer_vars(l, vars);
    hsize_t want[4], got[H5S_MAX_RANK];
    const int rank = var_shape(&vars[which], want);
    char layer[LAYER_NAME_MAX + 48], ws[96], gs[96];
    layer_text(im->m, i, layer, sizeof layer);
    shape_text(want, rank, ws, sizeof ws);
    const char *var = vars[which].name;
    hid_t d = H5Dopen2(loc, path, H5P_DEFAULT), sp = -1, t = -1;
    int rc = -EINVAL;
    if (d < 0) {
        snprintf(im->err, im->errlen,
                 "%s: %s: missing, where %s keeps its %s %s (weights of another model?)", im->what,
                 path, layer, var, ws);
        return rc;
    }
    sp = H5Dget_space(d);
    t = H5Dget_type(d);
    int n = sp >= 0 ? H5Sget_simple_extent_ndims(sp) : -1;
    if (n < 0 || n > H5S_MAX_RANK || H5Sget_simple_extent_dims(sp, got, NULL) < 0 || t < 0) {
        snprintf(im->err, im->errlen, "%s: %s: unreadable (a damaged file?)", im->what, path);
    } else if (H5Tget_class(t) != H5T_FLOAT) {
        snprintf(im->err, im->errlen, "%s: %s: not floating point, where %s keeps its %s", im->what,
                 path, layer, var);
    } else if (n != rank || memcmp(got, want, (size_t)rank * sizeof *got)) {
        shape_text(got, n, gs, sizeof gs);
        snprintf(im->err, im->errlen,
                 "%s: %s: shape %s, where %s has its %s %s (weights of another model?)", im->what,
                 path, gs, layer, var, ws);
    } else if (H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT,
                       im->staged + vars[which].off) < 0) {
        snprintf(im->err, im->errlen, "%s: %s: cannot read its data (a truncated or damaged file?)",
                 im->what, path);
    } else {
        rc = 0;
    }
    if (t >= 0) H5Tclose(t);
    if (sp >= 0) H5Sclose(sp);
    H5Dclose(d);
    return rc;
}

/* The variables of a layer with weights: its kernel, and its bias unless use_bias was
 * false (Keras then keeps one variable); a BatchNormalization's two to four. */
static int layer_vars(const Layer *l)
{
    LayerVar vars[4];
    return model_layer_vars(l, vars);
}
/* Their names, "kernel and bias", "gamma, beta, moving_mean and moving_variance", ... */
static const char *layer_vars_text(const Layer *l, char *buf, size_t len)
{
    LayerVar vars[4];
    const int n = model_layer_vars(l, vars);
    size_t at = 0;
    buf[0] = '\0';
    for (int k = 0; k < n && at < len; k++)
        at += (size_t)snprintf(buf + at, len - at, "%s%s",
                               k == 0       ? ""
                               : k == n - 1 ? " and "
                                            : ", ",
                               vars[k].name);
    if (l->type != LAYER_BATCHNORM && !l->b_count && at < len)
        snprintf(buf + at, len - at, " (no bias)");
    return buf;
}

/* The number of links in group `path` of loc; -1 when there is no such group. */
static long group_links(hid_t loc, const char *path)
{
    if (H5Lexists(loc, path, H5P_DEFAULT) <= 0) return -1;
    H5G_info_t info;
    if (H5Gget_info_by_name(loc, path, &info, H5P_DEFAULT) < 0) return -1;
    return (long)info.nlinks;
}

/* ----------------------------------------------------------------------------
 * Keras 3's .weights.h5 */

static int import_keras3(Import *im, hid_t f)
{
    const Model *m = im->m;
    char path[320], group[64], layer[LAYER_NAME_MAX + 48], vt[96];
    for (int i = 0; i < m->num_layers; i++) {
        if (!model_layer_floats(&m->layers[i])) continue;
        model_layer_keras_group(m, i, group, sizeof group);
        snprintf(path, sizeof path, "layers/%s/vars", group);
        long n = group_links(f, path);
        const Layer *l = &m->layers[i];
        if (n != layer_vars(l)) {
            layer_text(m, i, layer, sizeof layer);
            if (n < 0)
                snprintf(im->err, im->errlen,
                         "%s: %s: missing, where %s keeps its %s (weights of another model?)",
                         im->what, path, layer, layer_vars_text(l, vt, sizeof vt));
            else
                snprintf(im->err, im->errlen,
                         "%s: %s: %ld variables, where %s has %d (%s; weights of another "
                         "model?)",
                         im->what, path, n, layer, layer_vars(l),
                         layer_vars_text(l, vt, sizeof vt));
            return -EINVAL;
        }
        for (int which = 0; which < layer_vars(l); which++) {
            snprintf(path, sizeof path, "layers/%s/vars/%d", group, which);
            if (read_var(im, f, path, i, which)) return -EINVAL;
        }
    }
    /* a group with weights that no layer of the model took: a file of another model */
    H5G_info_t info;
    if (H5Gget_info_by_name(f, "layers", &info, H5P_DEFAULT) < 0) {
        snprintf(im->err, im->errlen, "%s: layers: unreadable (a damaged file?)", im->what);
        return -EINVAL;
    }
    for (hsize_t k = 0; k < info.nlinks; k++) {
        char name[256];
        if (H5Lget_name_by_idx(f, "layers", H5_INDEX_NAME, H5_ITER_INC, k, name, sizeof name,
                               H5P_DEFAULT) < 0)
            continue;
        int taken = 0;
        for (int i = 0; i < m->num_layers && !taken; i++) {
            model_layer_keras_group(m, i, group, sizeof group);
            taken = model_layer_floats(&m->layers[i]) && !strcmp(group, name);
        }
        snprintf(path, sizeof path, "layers/%s/vars", name);
        if (!taken && group_links(f, path) > 0) {
            snprintf(im->err, im->errlen,
                     "%s: layers/%s: weights of a layer the model does not have (weights of "
                     "another model?)",
                     im->what, name);
            return -EINVAL;
        }
    }
    return 0;
}

/* ----------------------------------------------------------------------------
 * tf-keras's legacy .h5 */

/* The strings of attribute attr of object `path` of loc (fixed-length, as h5py writes
 * a list of bytes, or variable-length), as *n new strings in *out (free each and the
 * list); -1 when there is no such attribute or it is not strings. */
static int read_strings(hid_t loc, const char *path, const char *attr, char ***out, int *n)
{
    *out = NULL, *n = 0;
    if (H5Aexists_by_name(loc, path, attr, H5P_DEFAULT) <= 0) return -1;
    hid_t a = H5Aopen_by_name(loc, path, attr, H5P_DEFAULT, H5P_DEFAULT);
    hid_t t = a >= 0 ? H5Aget_type(a) : -1, sp = a >= 0 ? H5Aget_space(a) : -1, mt = -1;
    hssize_t count = sp >= 0 ? H5Sget_simple_extent_npoints(sp) : -1;
    int rc = -1;
    if (count == 0) {
        /* numpy's array of an empty list, as h5py writes it: float64, no strings */
        *out = xcalloc(1, sizeof **out);
        rc = 0;
    } else if (t >= 0 && H5Tget_class(t) == H5T_STRING && count > 0 && count < (1 << 20)) {
        char **list = xcalloc((size_t)count + 1, sizeof *list);
        if (H5Tis_variable_str(t) > 0) {
            mt = H5Tcopy(H5T_C_S1);
            if (mt >= 0 && H5Tset_size(mt, H5T_VARIABLE) >= 0 && H5Aread(a, mt, list) >= 0) {
                for (hssize_t i = 0; i < count; i++) {
                    char *s = list[i];
                    list[i] = xstrdup(s ? s : "");
                    H5free_memory(s);
                }
                rc = 0;
            }
        } else {
            const size_t size = H5Tget_size(t);
            char *raw = xcalloc((size_t)count * size + 1, 1);
            mt = H5Tcopy(H5T_C_S1);
            /* NUL-padded, so that a name filling the size keeps its last byte */
            if (mt >= 0 && H5Tset_size(mt, size) >= 0 && H5Tset_strpad(mt, H5T_STR_NULLPAD) >= 0 &&
                H5Aread(a, mt, raw) >= 0) {
                for (hssize_t i = 0; i < count; i++) {
                    list[i] = xcalloc(size + 1, 1);
                    memcpy(list[i], raw + (size_t)i * size, size);
                }
                rc = 0;
            }
            free(raw);
        }
        if (rc) {
            for (hssize_t i = 0; i < count; i++) free(list[i]);
            free(list);
        } else {
            *out = list, *n = (int)count;
        }
    }
    if (mt >= 0) H5Tclose(mt);
    if (sp >= 0) H5Sclose(sp);
    if (t >= 0) H5Tclose(t);
    if (a >= 0) H5Aclose(a);
    return rc;
}

static void free_strings(char **list, int n)
{
    for (int i = 0; i < n; i++) free(list[i]);
    free(list);
}

/* The weight_names of layer group `group` of the legacy file (see read_strings). */
static int weight_names(Import *im, hid_t f, const char *group, char ***wn, int *nw)
{
    if (!read_strings(f, group, "weight_names", wn, nw)) return 0;
    snprintf(im->err, im->errlen, "%s: %s: attribute weight_names unreadable", im->what, group);
    return -EINVAL;
}

/* The path of the legacy file's layer `name` under root ("" or "model_weights"). */
static void legacy_group(const char *root, const char *name, char *out, size_t outlen)
{
    snprintf(out, outlen, "%s%s%s", root, *root ? "/" : "", name);
}

/* The layers with weights of the legacy file under root ("" the top, or
 * "model_weights"), matched in order with the model's layers with weights, as tf-keras's
 * load_weights does: first their numbers, then each one's two weights. */
static int import_legacy(Import *im, hid_t f, const char *root)
{
    const Model *m = im->m;
    char **names, **wn, group[1200], layer[LAYER_NAME_MAX + 48], where[64], vt[96];
    int nnames, nw, rc = 0, want = 0, have = 0;
    snprintf(where, sizeof where, "attribute layer_names%s%s", *root ? " of " : "", root);
    if (read_strings(f, *root ? root : ".", "layer_names", &names, &nnames)) {
        snprintf(im->err, im->errlen, "%s: %s unreadable", im->what, where);
        return -EINVAL;
    }
    for (int i = 0; i < m->num_layers; i++) want += model_layer_floats(&m->layers[i]) > 0;
    for (int k = 0; k < nnames && !rc; k++) {
        legacy_group(root, names[k], group, sizeof group);
        if (!(rc = weight_names(im, f, group, &wn, &nw))) {
            have += nw > 0;
            free_strings(wn, nw);
        }
    }
    if (!rc && have != want) {
        snprintf(im->err, im->errlen,
                 "%s: %d layers with weights (%s), the model has %d (weights of another model?)",
                 im->what, have, where, want);
        rc = -EINVAL;
    }
    for (int k = 0, li = 0; k < nnames && !rc; k++) {
        legacy_group(root, names[k], group, sizeof group);
        if ((rc = weight_names(im, f, group, &wn, &nw))) continue;
        if (!nw) {
            free_strings(wn, nw);
            continue;
        }
        while (!model_layer_floats(&m->layers[li])) li++;
        const Layer *l = &m->layers[li];
        if (nw != layer_vars(l)) {
            layer_text(m, li, layer, sizeof layer);
            snprintf(im->err, im->errlen,
                     "%s: %s: %d weights, where %s has %d (%s; weights of another model?)",
                     im->what, group, nw, layer, layer_vars(l), layer_vars_text(l, vt, sizeof vt));
            rc = -EINVAL;
        }
        for (int w = 0; w < layer_vars(l) && !rc; w++) {
            char var[2400];
            snprintf(var, sizeof var, "%s/%s", group, wn[w]);
            rc = read_var(im, f, var, li, w);
        }
        li++;
        free_strings(wn, nw);
    }
    free_strings(names, nnames);
    return rc;
}

/* ----------------------------------------------------------------------------
 * Files */

/* Reads the open file f into params as its content says (Keras 3's layers/ group, or a
 * legacy layer_names attribute at the top or in model_weights). */
static int import_open_file(const Model *m, float *params, hid_t f, const char *what, char *err,
                            size_t errlen)
{
    Import im = {.m = m,
                 .staged = xmalloc(m->num_params * sizeof(float)),
                 .what = what,
                 .err = err,
                 .errlen = errlen};
    memcpy(im.staged, params, m->num_params * sizeof(float));
    int rc;
    if (group_links(f, "layers") >= 0) rc = import_keras3(&im, f);
    else if (H5Aexists(f, "layer_names") > 0) rc = import_legacy(&im, f, "");
    else if (group_links(f, "model_weights") >= 0) rc = import_legacy(&im, f, "model_weights");
    else {
        snprintf(err, errlen,
                 "%s: neither Keras 3's weights (no group layers/) nor a legacy Keras .h5 (no "
                 "attribute layer_names, no group model_weights)",
                 what);
        rc = -EINVAL;
    }
    if (!rc) memcpy(params, im.staged, m->num_params * sizeof(float));
    free(im.staged);
    return rc;
}

/* The weights inside the .keras archive at path (its model.weights.h5; its config.json
 * is not read: the weights are matched against m as a .weights.h5's are). */
static int import_archive_weights(const Model *m, float *params, const char *path, char *err,
                                  size_t errlen)
{
    char *config, what[4200];
    void *h5;
    size_t len;
    int rc = keras_import_archive(path, &config, &h5, &len, err, errlen);
    if (rc) return rc;
    snprintf(what, sizeof what, "%s: model.weights.h5", path);
    rc = keras_import_weights_image(m, params, h5, len, what, err, errlen);
    free(config);
    free(h5);
    return rc;
}

int keras_import_weights(const Model *m, float *params, const char *path, char *err, size_t errlen)
{
    if (keras_import_is_archive(path)) return import_archive_weights(m, params, path, err, errlen);
    /* the library's own error stack goes to stderr unless silenced; err says it */
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    /* no file lock: the file is only read, and libhdf5's flock fails on a file another
     * process holds (h5py while it writes) and on volumes without flock */
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS), f = -1;
    if (fapl >= 0 && H5Pset_file_locking(fapl, 0, 1) >= 0) f = H5Fopen(path, H5F_ACC_RDONLY, fapl);
    if (fapl >= 0) H5Pclose(fapl);
    if (f < 0) {
        snprintf(
            err, errlen,
            "%s: cannot open it as HDF5 (missing, not a Keras weights file, or a truncated one)",
            path);
        return -EINVAL;
    }
    int rc = import_open_file(m, params, f, path, err, errlen);
    H5Fclose(f);
    return rc;
}

int keras_import_weights_image(const Model *m, float *params, const void *buf, size_t len,
                               const char *what, char *err, size_t errlen)
{
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS), f = -1;
    if (fapl >= 0 && H5Pset_fapl_core(fapl, 1 << 16, 0) >= 0 &&
        H5Pset_file_image(fapl, (void *)(uintptr_t)buf, len) >= 0)
        f = H5Fopen("model.weights.h5", H5F_ACC_RDONLY, fapl);
    if (fapl >= 0) H5Pclose(fapl);
    if (f < 0) {
        snprintf(err, errlen,
                 "%s: cannot open it as HDF5 (not a Keras weights file, or a truncated one)", what);
        return -EINVAL;
    }
    int rc = import_open_file(m, params, f, what, err, errlen);
    H5Fclose(f);
    return rc;
}

/* ----------------------------------------------------------------------------
 * .keras archives */

int keras_import_is_archive(const char *path)
{
    unsigned char magic[4];
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    int is = fread(magic, 1, 4, f) == 4 && !memcmp(magic, "PK\3\4", 4);
    fclose(f);
    return is;
}

/* Member `name` of za, at most max bytes, into a new buffer (*out, *len bytes and a NUL
 * after them). */
static int read_member(zip_t *za, const char *path, const char *name, zip_uint64_t max, void **out,
                       size_t *len, char *err, size_t errlen)
{
    zip_stat_t st;
    zip_stat_init(&st);
    if (zip_stat(za, name, 0, &st) || !(st.valid & ZIP_STAT_SIZE)) {
        snprintf(err, errlen, "%s: no %s in the archive (not a .keras archive, or a damaged one)",
                 path, name);
        return -EINVAL;
    }
    if (st.size > max) {
        snprintf(err, errlen, "%s: %s: %llu bytes, more than the %llu a model can have", path, name,
                 (unsigned long long)st.size, (unsigned long long)max);
        return -EINVAL;
    }
    zip_file_t *zf = zip_fopen(za, name, 0);
    char *buf = xmalloc((size_t)st.size + 1);
    zip_int64_t n = zf ? zip_fread(zf, buf, st.size) : -1;
    /* a short read or a CRC mismatch (libzip checks it at the end) is a damaged member */
    int ok = n >= 0 && (zip_uint64_t)n == st.size;
    if (!ok)
        snprintf(err, errlen, "%s: %s: cannot read it: %s (a truncated or damaged archive?)", path,
                 name, zf ? zip_file_strerror(zf) : zip_strerror(za));
    if (zf) zip_fclose(zf);
    if (!ok) {
        free(buf);
        return -EINVAL;
    }
    buf[st.size] = '\0';
    *out = buf, *len = (size_t)st.size;
    return 0;
}

int keras_import_archive(const char *path, char **config, void **weights, size_t *len, char *err,
                         size_t errlen)
{
    *config = NULL, *weights = NULL, *len = 0;
    int zerr;
    zip_t *za = zip_open(path, ZIP_RDONLY | ZIP_CHECKCONS, &zerr);
    if (!za) {
        zip_error_t ze;
        zip_error_init_with_code(&ze, zerr);
        snprintf(err, errlen, "%s: not a readable .keras archive: %s (a truncated or damaged zip?)",
                 path, zip_error_strerror(&ze));
        zip_error_fini(&ze);
        return -EINVAL;
    }
    void *cfg;
    size_t cfglen;
    int rc = read_member(za, path, "config.json", ARCHIVE_CONFIG_MAX, &cfg, &cfglen, err, errlen);
    if (!rc) {
        rc = read_member(za, path, "model.weights.h5", ARCHIVE_WEIGHTS_MAX, weights, len, err,
                         errlen);
        if (rc) free(cfg);
        else *config = cfg;
    }
    zip_discard(za);
    return rc;
}
