#include "source.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "idx.h"
#include "npy.h"
#include "remote.h"
#include "tfrecord.h"
#include "util.h"

#define SPEC_EXPECTED                                                                              \
    "expected idx:DIR, npz:FILE[?x=KEY&y=KEY], npy:IMAGES,LABELS or "                              \
    "tfrecord:PATTERN[,PATTERN...]"
#define KEY_MAX 256

typedef enum { KIND_IDX, KIND_NPZ, KIND_NPY, KIND_TFRECORD } Kind;

const SourceOptions source_default_options = {.image_feature = "image",
                                              .label_feature = "label",
                                              .cache_bytes = (size_t)SOURCE_CACHE_MIB_DEFAULT
                                                             << 20};

/* A SOURCE string taken apart: the scheme, the path(s) (tfrecord: the patterns as
 * given), the npz keys ("" unless given). */
typedef struct {
    Kind kind;
    char path[4096], path2[4096];
    char xkey[KEY_MAX], ykey[KEY_MAX];
} Spec;

/* Copies n bytes of src into out as a string; -EINVAL when empty or too long. */
static int take(char *out, size_t outlen, const char *src, size_t n)
{
    if (n == 0 || n >= outlen) return -EINVAL;
    memcpy(out, src, n);
    out[n] = '\0';
    return 0;
}

/* The npz query: x=KEY and y=KEY joined by '&', each at most once. */
static int parse_query(Spec *sp, const char *q, char *err, size_t errlen)
{
    while (*q) {
        size_t n = strcspn(q, "&");
        char *key = NULL;
        if (n > 2 && q[1] == '=' && (q[0] == 'x' || q[0] == 'y'))
            key = q[0] == 'x' ? sp->xkey : sp->ykey;
        if (!key || *key || take(key, KEY_MAX, q + 2, n - 2)) {
            snprintf(err, errlen,
                     "npz: '%.*s' in the query (expected x=KEY and y=KEY, once each, "
                     "joined by &)",
                     (int)n, q);
            return -EINVAL;
        }
        q += n + (q[n] == '&');
    }
    return 0;
}

static int parse_spec(const char *spec, Spec *sp, char *err, size_t errlen)
{
    memset(sp, 0, sizeof *sp);
    if (!strncmp(spec, "idx:", 4)) {
        sp->kind = KIND_IDX;
        if (!take(sp->path, sizeof sp->path, spec + 4, strlen(spec + 4))) return 0;
    } else if (!strncmp(spec, "npz:", 4)) {
        sp->kind = KIND_NPZ;
        const char *q = strchr(spec + 4, '?');
        size_t n = q ? (size_t)(q - spec - 4) : strlen(spec + 4);
        if (!take(sp->path, sizeof sp->path, spec + 4, n))
            return q ? parse_query(sp, q + 1, err, errlen) : 0;
    } else if (!strncmp(spec, "npy:", 4)) {
        sp->kind = KIND_NPY;
        const char *comma = strrchr(spec + 4, ',');
        if (comma && !take(sp->path, sizeof sp->path, spec + 4, (size_t)(comma - spec - 4)) &&
            !take(sp->path2, sizeof sp->path2, comma + 1, strlen(comma + 1)))
            return 0;
    } else if (!strncmp(spec, "tfrecord:", 9)) {
        sp->kind = KIND_TFRECORD;
        const char *p = spec + 9;
        int empty = !*p;
        for (const char *q = p; *q; q++) empty |= *q == ',' && (q == p || !q[1] || q[-1] == ',');
        if (!empty && !take(sp->path, sizeof sp->path, p, strlen(p))) return 0;
    }
    char shown[4096];
    remote_redact(spec, shown, sizeof shown);
    snprintf(err, errlen, "'%.200s': %s", shown, SPEC_EXPECTED);
    return -EINVAL;
}

static const char *spec_kind_name(Kind k)
{
    return k == KIND_IDX ? "idx" : k == KIND_NPZ ? "npz" : k == KIND_NPY ? "npy" : "tfrecord";
}

int source_check_spec(const char *spec, char *err, size_t errlen)
{
    Spec sp;
    return parse_spec(spec, &sp, err, errlen);
}

int source_eval_spec(const char *spec, char *out, size_t outlen)
{
    Spec sp;
    char err[256];
    if (parse_spec(spec, &sp, err, sizeof err) || sp.kind == KIND_NPY || sp.kind == KIND_TFRECORD)
        return -ENOENT;
    snprintf(out, outlen, "%s:%s", sp.kind == KIND_IDX ? "idx" : "npz", sp.path);
    return 0;
}

static int label_range_error(const Source *s, long long v, size_t i, int k, char *err,
                             size_t errlen)
{
    snprintf(err, errlen,
             "%s: label %lld of example %zu (expected in [0, %d), the model's classes)",
             s->labels_at, v, i, k);
    return -EINVAL;
}

static void shape_text(const NpyArray *a, char *out, size_t outlen)
{
    int n = snprintf(out, outlen, "(");
    for (int i = 0; i < a->ndim && (size_t)n < outlen; i++)
        n += snprintf(out + n, outlen - (size_t)n, "%s%llu", i ? ", " : "",
                      (unsigned long long)a->shape[i]);
    if ((size_t)n < outlen) snprintf(out + n, outlen - (size_t)n, "%s)", a->ndim == 1 ? "," : "");
}

/* Takes the images array x into s (its buffer, or a float32 copy of float64). */
static int take_images(Source *s, NpyArray *x, char *err, size_t errlen)
{
    char shape[160];
    shape_text(x, shape, sizeof shape);
    if (x->dtype != NPY_U1 && x->dtype != NPY_F4 && x->dtype != NPY_F8) {
        snprintf(err, errlen,
                 "%s: images of dtype '%s' (expected |u1, <f4 or <f8: uint8, float32 or "
                 "float64)",
                 s->images_at, npy_dtype_name(x->dtype));
        return -EINVAL;
    }
    int fits = x->ndim == 3 || x->ndim == 4;
    for (int i = 0; fits && i < x->ndim; i++)
        fits = x->shape[i] > 0 && (i == 0 || x->shape[i] <= INT_MAX);
    if (!fits) {
        snprintf(err, errlen,
                 "%s: images of shape %s (expected N x H x W or N x H x W x C, channels last, "
                 "every dimension > 0)",
                 s->images_at, shape);
        return -EINVAL;
    }
    s->count = (size_t)x->shape[0];
    s->h = (int)x->shape[1], s->w = (int)x->shape[2];
    s->c = x->ndim == 4 ? (int)x->shape[3] : 1;
    s->type = x->dtype == NPY_U1 ? SOURCE_U8 : SOURCE_F32;
    if (x->dtype == NPY_F8) {
        float *f = xmalloc(x->count * sizeof *f);
        const double *d = x->data;
        for (size_t i = 0; i < x->count; i++) f[i] = (float)d[i];
        s->images = f;
    } else {
        s->images = x->data;
        x->data = NULL;
    }
    return 0;
}

/* Converts the labels array y into s's int32 labels, checking the range. */
static int take_labels(Source *s, const NpyArray *y, int k, char *err, size_t errlen)
{
    char shape[160];
    shape_text(y, shape, sizeof shape);
    if (y->dtype != NPY_U1 && y->dtype != NPY_I4 && y->dtype != NPY_I8) {
        snprintf(err, errlen,
                 "%s: labels of dtype '%s' (expected |u1, <i4 or <i8: integer class indices)",
                 s->labels_at, npy_dtype_name(y->dtype));
        return -EINVAL;
    }
    if (!(y->ndim == 1 || (y->ndim == 2 && y->shape[1] == 1)) || y->shape[0] != s->count) {
        snprintf(err, errlen,
                 "%s: labels of shape %s for %zu images in %s (expected (%zu,) or (%zu, 1): "
                 "one label per image)",
                 s->labels_at, shape, s->count, s->images_at, s->count, s->count);
        return -EINVAL;
    }
    s->labels = xmalloc(s->count * sizeof *s->labels);
    for (size_t i = 0; i < s->count; i++) {
        long long v;
        if (y->dtype == NPY_U1) v = ((const uint8_t *)y->data)[i];
        else if (y->dtype == NPY_I4) v = ((const int32_t *)y->data)[i];
        else v = ((const int64_t *)y->data)[i];
        if (v < 0 || v >= k) return label_range_error(s, v, i, k, err, errlen);
        s->labels[i] = (int32_t)v;
    }
    return 0;
}

/* Reads a NumPy source's two arrays (from the archive when npz) into s. */
static int open_numpy(Source *s, const Spec *sp, SourceRole role, int k, char *err, size_t errlen)
{
    NpyArray x, y;
    int rc;
    if (sp->kind == KIND_NPZ) {
        const char *xk = *sp->xkey ? sp->xkey : role == SOURCE_TRAIN ? "x_train" : "x_test";
        const char *yk = *sp->ykey ? sp->ykey : role == SOURCE_TRAIN ? "y_train" : "y_test";
        snprintf(s->images_at, sizeof s->images_at, "%s:%s", sp->path, xk);
        snprintf(s->labels_at, sizeof s->labels_at, "%s:%s", sp->path, yk);
        if ((rc = npz_read(sp->path, xk, &x, err, errlen))) return rc;
        rc = npz_read(sp->path, yk, &y, err, errlen);
    } else {
        snprintf(s->images_at, sizeof s->images_at, "%s", sp->path);
        snprintf(s->labels_at, sizeof s->labels_at, "%s", sp->path2);
        if ((rc = npy_read(sp->path, &x, err, errlen))) return rc;
        rc = npy_read(sp->path2, &y, err, errlen);
    }
    if (!rc) rc = take_images(s, &x, err, errlen);
    if (!rc) rc = take_labels(s, &y, k, err, errlen);
    npy_free(&x);
    npy_free(&y);
    return rc;
}

int source_open(Source *s, const char *spec, SourceRole role, int num_classes,
                const SourceOptions *o, char *err, size_t errlen)
{
    Spec sp;
    int rc;
    memset(s, 0, sizeof *s);
    if ((rc = parse_spec(spec, &sp, err, errlen))) return rc;
    if (sp.kind != KIND_TFRECORD && o && o->file_shards > 1) {
        char shown[4096];
        remote_redact(spec, shown, sizeof shown);
        snprintf(err, errlen,
                 "%s: 1 file for %d workers (--shard-policy file gives each worker whole files, "
                 "and an %s source is one: use --shard-policy data, or TFRecord shards)",
                 shown, o->file_shards, spec_kind_name(sp.kind));
        return -EINVAL;
    }
    if (sp.kind == KIND_IDX) {
        if ((rc = idx_open(s, sp.path, role == SOURCE_TRAIN ? "train" : "t10k", err, errlen)))
            return rc;
        for (size_t i = 0; i < s->count && !rc; i++)
            if (s->labels[i] < 0 || s->labels[i] >= num_classes)
                rc = label_range_error(s, s->labels[i], i, num_classes, err, errlen);
    } else if (sp.kind == KIND_TFRECORD) {
        rc = tfrecord_open(s, sp.path, num_classes, o ? o : &source_default_options, err, errlen);
    } else {
        rc = open_numpy(s, &sp, role, num_classes, err, errlen);
    }
    if (rc) source_free(s);
    return rc;
}

size_t source_example_size(const Source *s)
{
    return (size_t)s->h * (size_t)s->w * (size_t)s->c;
}

void source_to_float(const void *values, SourceType t, size_t n, PixelScale scale, float *x)
{
    if (t == SOURCE_F32) {
        memcpy(x, values, n * sizeof *x);
        return;
    }
    const uint8_t *img = values;
    if (scale == PIXEL_UNIT)
        for (size_t j = 0; j < n; j++) x[j] = (float)img[j] / 255.0f;
    else
        for (size_t j = 0; j < n; j++) x[j] = (float)img[j];
}

int source_read_examples(const Source *s, const size_t *idx, size_t n, PixelScale scale, float *x,
                         int32_t *y, char *err, size_t errlen)
{
    if (s->records) return tfrecord_examples(s, idx, n, scale, x, y, err, errlen);
    const size_t values = source_example_size(s);
    const size_t bytes = s->type == SOURCE_F32 ? sizeof(float) : 1;
    for (size_t k = 0; k < n; k++) {
        source_to_float((const uint8_t *)s->images + idx[k] * values * bytes, s->type, values,
                        scale, x + k * values);
        y[k] = s->labels[idx[k]];
    }
    return 0;
}

int source_holds(const Source *s)
{
    return s->records && tfrecord_holds(s);
}

int source_hold_examples(const Source *s, const size_t *idx, size_t n, size_t *taken, char *err,
                         size_t errlen)
{
    *taken = n;
    return source_holds(s) ? tfrecord_hold(s, idx, n, taken, err, errlen) : 0;
}

void source_drop_held(const Source *s)
{
    if (s->records) tfrecord_drop_held(s);
}

void source_log_held(const Source *s)
{
    if (source_holds(s)) tfrecord_log_held(s);
}

int source_read_example(const Source *s, size_t i, PixelScale scale, float *x, int32_t *y,
                        char *err, size_t errlen)
{
    return source_read_examples(s, &i, 1, scale, x, y, err, errlen);
}

int source_exit_code(int rc)
{
    return rc == -EAGAIN ? KT_EXIT_RETRY : KT_EXIT_DATA;
}

void source_examples(const Source *s, const size_t *idx, size_t n, PixelScale scale, float *x,
                     int32_t *y)
{
    char err[1024];
    int rc = source_read_examples(s, idx, n, scale, x, y, err, sizeof err);
    if (rc) util_fail(source_exit_code(rc), "%s", err);
}

const char *source_type_name(SourceType t)
{
    return t == SOURCE_U8 ? "uint8" : "float32";
}

int source_parse_shape(const char *v, int shape[3])
{
    for (int i = 0; i < 3; i++) {
        char *end;
        errno = 0;
        long d = strtol(v, &end, 10);
        if (end == v || errno || d < 1 || d > 65535 || *end != (i < 2 ? ',' : '\0')) return -EINVAL;
        shape[i] = (int)d;
        v = end + 1;
    }
    return 0;
}

int source_parse_pixel_scale(const char *v, PixelScale *out)
{
    if (!strcmp(v, "unit")) *out = PIXEL_UNIT;
    else if (!strcmp(v, "raw")) *out = PIXEL_RAW;
    else return -EINVAL;
    return 0;
}

void source_free(Source *s)
{
    if (!s) return;
    free(s->images);
    free(s->labels);
    tfrecord_index_free(s->records);
    memset(s, 0, sizeof *s);
}
