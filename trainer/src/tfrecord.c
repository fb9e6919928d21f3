#include "tfrecord.h"

#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "image.h"
#include "inflater.h"
#include "remote.h"
#include "util.h"

/* ---------------------------------------------------------------- CRC-32C */

static uint32_t crc_table[256];
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;

static void crc_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ 0x82f63b78u : c >> 1;
        crc_table[i] = c;
    }
}

uint32_t tfrecord_crc32c(const void *p, size_t n)
{
    pthread_once(&crc_once, crc_init);
    const uint8_t *b = p;
    uint32_t c = 0xffffffffu;
    for (size_t i = 0; i < n; i++) c = crc_table[(c ^ b[i]) & 0xff] ^ (c >> 8);
    return c ^ 0xffffffffu;
}

uint32_t tfrecord_masked_crc(const void *p, size_t n)
{
    uint32_t c = tfrecord_crc32c(p, n);
    return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

/* ---------------------------------------------------------------- records */

static uint64_t le64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

static uint32_t le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Checks the 12-byte header of a record at p, left bytes before the end of its file: 0
 * with its data's length in *len, or -EINVAL with one line in err. */
static int check_header(const uint8_t *p, size_t left, uint64_t *len, char *err, size_t errlen)
{
    if (left < 12) {
        snprintf(err, errlen,
                 "truncated record: %zu bytes at the end (expected 12 or more: a length, its "
                 "CRC, the data and its CRC)",
                 left);
        return -EINVAL;
    }
    *len = le64(p);
    const uint32_t want = le32(p + 8), got = tfrecord_masked_crc(p, 8);
    if (want != got) {
        snprintf(err, errlen,
                 "corrupt record: the length's masked CRC-32C is %08x, the file says %08x", got,
                 want);
        return -EINVAL;
    }
    if (*len > left - 12 || left - 12 - *len < 4) {
        snprintf(err, errlen,
                 "truncated record: %zu bytes after its header (expected %llu of data and 4 "
                 "of CRC)",
                 left - 12, (unsigned long long)*len);
        return -EINVAL;
    }
    return 0;
}

/* Checks the masked CRC-32C in the 4 bytes after the n bytes of data at p. */
static int check_data(const uint8_t *p, size_t n, char *err, size_t errlen)
{
    const uint32_t want = le32(p + n), got = tfrecord_masked_crc(p, n);
    if (want == got) return 0;
    snprintf(err, errlen, "corrupt record: the data's masked CRC-32C is %08x, the file says %08x",
             got, want);
    return -EINVAL;
}

int tfrecord_next(TfrecordReader *r, const uint8_t **data, size_t *n, char *err, size_t errlen)
{
    const size_t left = r->len - r->pos;
    const uint8_t *p = r->buf + r->pos;
    uint64_t len;
    if (left == 0) return 0;
    if (check_header(p, left, &len, err, errlen) || check_data(p + 12, (size_t)len, err, errlen))
        return -EINVAL;
    *data = p + 12;
    *n = (size_t)len;
    r->pos += 12 + (size_t)len + 4;
    return 1;
}

/* ---------------------------------------------------------------- protobuf wire format */

typedef struct {
    const uint8_t *p, *end;
} Wire;

typedef struct {
    uint32_t number;
    int type;         /* 0 varint, 1 fixed64, 2 length-delimited, 5 fixed32 */
    uint64_t v;       /* a varint's value */
    const uint8_t *s; /* the bytes of the others */
    size_t n;
} Field;

static int read_varint(const uint8_t **p, const uint8_t *end, uint64_t *v)
{
    uint64_t x = 0;
    for (int i = 0; i < 10 && *p < end; i++) {
        const uint8_t b = *(*p)++;
        x |= (uint64_t)(b & 0x7f) << (7 * i);
        if (!(b & 0x80)) {
            *v = x;
            return 0;
        }
    }
    return -1;
}

/* The next field of w into f: 1, 0 at the end, -1 with *why when malformed. */
static int wire_next(Wire *w, Field *f, const char **why)
{
    uint64_t tag, len;
    if (w->p == w->end) return 0;
    f->v = 0, f->s = NULL, f->n = 0;
    if (read_varint(&w->p, w->end, &tag)) {
        *why = "a truncated or overlong tag";
        return -1;
    }
    f->number = (uint32_t)(tag >> 3);
    f->type = (int)(tag & 7);
    if (tag >> 3 == 0 || tag >> 3 > 0x1fffffff) {
        *why = "a field number of 0 or over 2^29";
        return -1;
    }
    const size_t left = (size_t)(w->end - w->p);
    switch (f->type) {
    case 0:
        if (!read_varint(&w->p, w->end, &f->v)) return 1;
        *why = "a truncated or overlong varint";
        return -1;
    case 1:
    case 5:
        f->n = f->type == 1 ? 8 : 4;
        if (left < f->n) break;
        f->s = w->p;
        w->p += f->n;
        return 1;
    case 2:
        if (read_varint(&w->p, w->end, &len)) {
            *why = "a truncated or overlong length";
            return -1;
        }
        if (len > (size_t)(w->end - w->p)) break;
        f->s = w->p, f->n = (size_t)len;
        w->p += len;
        return 1;
    default: *why = "a group or an unknown wire type (tf.train.Example has neither)"; return -1;
    }
    *why = "a field that runs past the end of its message";
    return -1;
}

/* The values of a feature: field 1 of each list message of its kind, in order. */
typedef struct {
    Wire feature, list;
    TfrKind kind;
} Values;

static Values values_of(const TfrFeature *f)
{
    return (Values){.feature = {f->p, f->p + f->n}, .list = {NULL, NULL}, .kind = f->kind};
}

/* The next value field into f: 1, 0 at the end, -1 with *why when malformed. */
static int values_next(Values *it, Field *f, const char **why)
{
    for (;;) {
        int r;
        while ((r = wire_next(&it->list, f, why)) > 0)
            if (f->number == 1) return 1;
        if (r < 0) return r;
        Field l;
        do r = wire_next(&it->feature, &l, why);
        while (r > 0 && l.number != (uint32_t)it->kind);
        if (r <= 0) return r;
        it->list = (Wire){l.s, l.s + l.n};
    }
}

/* Counts the values of f, checking their wire types: -1 with *why when malformed. */
static int count_values(TfrFeature *f, const char **why)
{
    Values it = values_of(f);
    Field v;
    int r;
    f->count = 0;
    while ((r = values_next(&it, &v, why)) > 0) {
        if (f->kind == TFR_BYTES_LIST && v.type == 2) {
            f->count++;
        } else if (f->kind == TFR_FLOAT_LIST && (v.type == 5 || v.type == 2)) {
            if (v.type == 2 && v.n % 4) {
                *why = "a packed float_list whose size is not a multiple of 4";
                return -1;
            }
            f->count += v.type == 5 ? 1 : v.n / 4;
        } else if (f->kind == TFR_INT64_LIST && (v.type == 0 || v.type == 2)) {
            if (v.type == 0) {
                f->count++;
                continue;
            }
            const uint8_t *p = v.s, *end = v.s + v.n;
            uint64_t x;
            for (; p < end; f->count++)
                if (read_varint(&p, end, &x)) {
                    *why = "a packed int64_list with a truncated or overlong varint";
                    return -1;
                }
        } else {
            *why = "a list value of the wrong wire type";
            return -1;
        }
    }
    return r;
}

/* A Feature message: the kind of its last list field, and where that kind's last run of
 * fields begins (an earlier field of another kind is cleared by it, as protobuf's oneof). */
static int parse_feature(const uint8_t *p, size_t n, TfrFeature *out, const char **why)
{
    Wire w = {p, p + n};
    Field f;
    int r;
    memset(out, 0, sizeof *out);
    const uint8_t *at = w.p;
    while ((r = wire_next(&w, &f, why)) > 0) {
        if (f.number >= 1 && f.number <= 3) {
            if (f.type != 2) {
                *why = "a Feature list that is not a message";
                return -1;
            }
            if ((TfrKind)f.number != out->kind) {
                out->kind = (TfrKind)f.number;
                out->p = at, out->n = (size_t)(p + n - at);
            }
        }
        at = w.p;
    }
    if (r < 0) return r;
    return out->kind == TFR_MISSING ? 0 : count_values(out, why);
}

/* One Features.feature map entry: its key and, when it is one of names, its Feature. */
static int parse_entry(const uint8_t *p, size_t n, const char *const *names, size_t count,
                       TfrFeature *out, const char **why)
{
    Wire w = {p, p + n};
    Field f;
    int r;
    const uint8_t *key = NULL, *val = NULL;
    size_t klen = 0, vlen = 0;
    while ((r = wire_next(&w, &f, why)) > 0) {
        if ((f.number == 1 || f.number == 2) && f.type != 2) {
            *why = "a feature map entry whose key or value is not length-delimited";
            return -1;
        }
        if (f.number == 1) key = f.s, klen = f.n;
        if (f.number == 2) val = f.s, vlen = f.n;
    }
    if (r < 0) return r;
    for (size_t i = 0; i < count; i++) {
        if (strlen(names[i]) != klen || (klen && memcmp(names[i], key, klen))) continue;
        if (val) return parse_feature(val, vlen, &out[i], why);
        memset(&out[i], 0, sizeof out[i]); /* an empty Feature: no kind */
        return 0;
    }
    return 0;
}

int tfrecord_parse_example(const uint8_t *ex, size_t n, const char *const *names, size_t count,
                           TfrFeature *out, char *err, size_t errlen)
{
    const char *why = NULL;
    Wire w = {ex, ex + n};
    Field f, g;
    int r;
    memset(out, 0, count * sizeof *out);
    while ((r = wire_next(&w, &f, &why)) > 0) {
        if (f.number != 1) continue;
        if (f.type != 2) {
            why = "Example.features is not a message";
            break;
        }
        Wire fw = {f.s, f.s + f.n};
        while ((r = wire_next(&fw, &g, &why)) > 0) {
            if (g.number != 1) continue;
            if (g.type != 2) {
                why = "a Features.feature entry that is not a message";
                r = -1;
            } else {
                r = parse_entry(g.s, g.n, names, count, out, &why);
            }
            if (r < 0) break;
        }
        if (r < 0) break;
    }
    if (!why) return 0;
    snprintf(err, errlen, "not a tf.train.Example: %s", why);
    return -EINVAL;
}

void tfrecord_bytes(const TfrFeature *f, size_t i, const uint8_t **p, size_t *n)
{
    Values it = values_of(f);
    Field v;
    const char *why;
    for (size_t k = 0; values_next(&it, &v, &why) > 0; k++)
        if (k == i) {
            *p = v.s, *n = v.n;
            return;
        }
    *p = NULL, *n = 0;
}

void tfrecord_floats(const TfrFeature *f, float *out)
{
    Values it = values_of(f);
    Field v;
    const char *why;
    while (values_next(&it, &v, &why) > 0)
        for (size_t k = 0; k < v.n; k += 4) {
            const uint32_t bits = le32(v.s + k);
            memcpy(out++, &bits, sizeof bits);
        }
}

void tfrecord_int64s(const TfrFeature *f, int64_t *out)
{
    Values it = values_of(f);
    Field v;
    const char *why;
    while (values_next(&it, &v, &why) > 0) {
        if (v.type == 0) {
            *out++ = (int64_t)v.v;
            continue;
        }
        const uint8_t *p = v.s, *end = v.s + v.n;
        uint64_t x;
        while (p < end && !read_varint(&p, end, &x)) *out++ = (int64_t)x;
    }
}

const char *tfrecord_kind_name(TfrKind k)
{
    static const char *const names[] = {"missing", "bytes_list", "float_list", "int64_list"};
    return names[k];
}

/* ---------------------------------------------------------------- files */

/* An image is at most this many pixels (a 4096 x 4096 photograph), so that a header
 * cannot ask for gigabytes. */
#define MAX_IMAGE_PIXELS ((size_t)1 << 24)
#define READ_CHUNK ((size_t)1 << 20)
/* Records of an object this close to each other are read in one range: a gap this small
 * costs less to read than a request of its own. */
#define MERGE_GAP ((size_t)64 << 10)

typedef enum { COMP_NONE = 0, COMP_GZIP, COMP_ZLIB } Compression;

/* The bytes [start, start + n) of a streamed file, read a chunk at a time for the pass at
 * open. */
typedef struct {
    uint8_t *buf;
    size_t cap, start, n;
} Window;

/* One file of the source. An uncompressed local file is streamed: fd stays open and an
 * example's record is read with pread when the example is wanted; so is an uncompressed
 * object of object storage, by ranged GETs (obj). A GZIP or ZLIB file or object is
 * streamed through zin (inflater.h), which reads its compressed bytes the same way and
 * inflates them from an access point. An object whose server ignores Range is held: buf
 * keeps its (inflated) records. */
typedef struct {
    char *path;
    char *name; /* the path for messages: a URL as remote_redact shows it */
    Compression comp;
    int fd;            /* >= 0: streamed from the file */
    RemoteObject *obj; /* else non-NULL: streamed from object storage */
    Inflater *zin;     /* and compressed: its records inflated from fd's or obj's bytes */
    uint8_t *buf;      /* else held: its uncompressed records, len bytes */
    size_t len;        /* the records' bytes (uncompressed; at open's end for zin) */
    /* while the open inflates a compressed object: its compressed bytes read ahead,
     * REMOTE_RANGE_BYTES a request (the first of them the open's own), so that the pass
     * costs a GET per 8 MiB, not one per INFLATER_IN */
    Window ahead;
} File;

/* Where an example's record is: its file, the byte offset of its header (in the
 * uncompressed data) and its data's length. */
typedef struct {
    uint64_t off;
    uint32_t file, len;
} RecordAt;

struct TfrecordIndex {
    File *files;
    size_t nfiles;
    RecordAt *at; /* one per example of the source */
    size_t at_cap;
    char *image_feature, *label_feature;
    int image_shape[3];
    /* Records of objects and compressed files read ahead for the pipeline
     * (tfrecord_hold): held[i] is example
     * i's whole record (16 + len bytes) until tfrecord_examples takes it; held_bytes of
     * them, at most budget (SourceOptions.cache_bytes). */
    pthread_mutex_t held_mu;
    pthread_mutex_t zin_mu; /* one caller at a time in the files' inflaters */
    uint8_t **held; /* slots of them, one per example, made by the first hold */
    size_t slots, held_bytes, budget;
    size_t reads, hits; /* their examples read, and of them held when read */
    RemoteStats opened; /* object storage's account when the open ended */
};

/* Grows *buf (of *cap bytes) to hold at least need bytes; -ENOMEM when it cannot. */
static int grow(uint8_t **buf, size_t *cap, size_t need)
{
    if (need <= *cap) return 0;
    size_t c = *cap ? *cap : READ_CHUNK;
    while (c < need) {
        if (c > SIZE_MAX / 2) return -ENOMEM;
        c *= 2;
    }
    uint8_t *b = realloc(*buf, c);
    if (!b) return -ENOMEM;
    *buf = b, *cap = c;
    return 0;
}

/* Up to n bytes at byte off of fd into buf: the count (short at the end of the file), or
 * a negative errno. */
static ssize_t read_at(int fd, uint8_t *buf, size_t n, uint64_t off)
{
    size_t got = 0;
    while (got < n) {
        ssize_t k = pread(fd, buf + got, n - got, (off_t)(off + got));
        if (k < 0 && errno == EINTR) continue;
        if (k < 0) return -errno;
        if (k == 0) break;
        got += (size_t)k;
    }
    return (ssize_t)got;
}

static int read_whole(File *f, char *err, size_t errlen)
{
    if (remote_is_url(f->path)) return remote_read(f->path, &f->buf, &f->len, err, errlen);
    FILE *fp = fopen(f->path, "rb");
    if (!fp) {
        int e = errno;
        snprintf(err, errlen, "%s: cannot open: %s", f->name, strerror(e));
        return -e;
    }
    size_t cap = 0;
    int rc = 0;
    f->len = 0;
    for (;;) {
        if ((rc = grow(&f->buf, &cap, f->len + READ_CHUNK))) break;
        size_t k = fread(f->buf + f->len, 1, READ_CHUNK, fp);
        f->len += k;
        if (k < READ_CHUNK) break;
    }
    if (!rc && ferror(fp)) rc = errno ? -errno : -EIO;
    fclose(fp);
    if (rc) snprintf(err, errlen, "%s: cannot read: %s", f->name, strerror(-rc));
    return rc;
}

/* Compression by content (TensorFlow needs compression_type given; one option fewer
 * here): a file whose first 12 bytes are a length with its masked CRC is uncompressed,
 * else GZIP's magic or a ZLIB header says which. Anything else is read as uncompressed,
 * so that a corrupt first record is reported as one. */
static Compression detect(const uint8_t *b, size_t n)
{
    if (n >= 12 && tfrecord_masked_crc(b, 8) == le32(b + 8)) return COMP_NONE;
    if (n >= 3 && b[0] == 0x1f && b[1] == 0x8b && b[2] == 8) return COMP_GZIP;
    if (n >= 2 && (b[0] & 0x0f) == 8 && b[0] >> 4 <= 7 && (b[0] << 8 | b[1]) % 31 == 0)
        return COMP_ZLIB;
    return COMP_NONE;
}

static const char *comp_name(Compression c)
{
    return c == COMP_GZIP ? "GZIP" : "ZLIB";
}

/* Replaces f->buf by its inflated content. Concatenated GZIP members (gzip's own
 * multi-member files) are read one after the other. */
static int inflate_file(File *f, char *err, size_t errlen)
{
    z_stream z;
    memset(&z, 0, sizeof z);
    if (inflateInit2(&z, f->comp == COMP_GZIP ? 16 + MAX_WBITS : MAX_WBITS) != Z_OK) {
        snprintf(err, errlen, "%s: cannot start zlib", f->name);
        return -ENOMEM;
    }
    uint8_t *out = NULL;
    size_t cap = 0, len = 0, in = 0;
    int rc = 0, zrc = Z_OK;
    const char *why = NULL;
    for (;;) {
        if (grow(&out, &cap, len + READ_CHUNK)) {
            rc = -ENOMEM;
            why = "out of memory";
            break;
        }
        size_t in_chunk = f->len - in < READ_CHUNK ? f->len - in : READ_CHUNK;
        z.next_in = f->buf + in, z.avail_in = (uInt)in_chunk;
        /* zlib counts in uInt: at most a chunk of input and 1 GiB of output a call. */
        const size_t room = cap - len < ((size_t)1 << 30) ? cap - len : (size_t)1 << 30;
        z.next_out = out + len, z.avail_out = (uInt)room;
        zrc = inflate(&z, Z_NO_FLUSH);
        in += in_chunk - z.avail_in;
        len += room - z.avail_out;
        if (zrc == Z_STREAM_END) {
            if (in == f->len) break;
            if (f->comp == COMP_GZIP && f->len - in >= 2 && f->buf[in] == 0x1f &&
                f->buf[in + 1] == 0x8b && inflateReset(&z) == Z_OK)
                continue;
            why = "bytes after the end of the compressed data";
        } else if (zrc == Z_OK || (zrc == Z_BUF_ERROR && in < f->len)) {
            continue;
        } else if (zrc == Z_BUF_ERROR) {
            why = "the compressed data ends early (a truncated file)";
        } else {
            why = z.msg ? z.msg : "corrupt compressed data";
        }
        rc = -EINVAL;
        break;
    }
    inflateEnd(&z);
    if (rc) {
        snprintf(err, errlen, "%s (%s): %s, at compressed byte %zu", f->name, comp_name(f->comp),
                 why, in);
        free(out);
        return rc;
    }
    free(f->buf);
    f->buf = out, f->len = len;
    return 0;
}

/* ---------------------------------------------------------------- the source */

/* The source being built, and where its first example came from. While the examples
 * decoded still fit cache_bytes, held collects them (held_len bytes); past it, held is
 * freed and the source streams. */
typedef struct {
    Source *s;
    TfrecordIndex *ix;
    int num_classes;
    size_t labels_cap; /* bytes */
    char first_at[512];
    size_t cache_bytes;
    int holding;
    uint8_t *held;
    size_t held_len, held_cap;
} Build;

/* Where a record is, and the feature a message is about: "FILE: record at byte N:
 * feature 'NAME': <fmt>" into err. Returns -EINVAL. */
static int fail_at(char *err, size_t errlen, const File *f, size_t off, const char *feature,
                   const char *fmt, ...) __attribute__((format(printf, 6, 7)));
static int fail_at(char *err, size_t errlen, const File *f, size_t off, const char *feature,
                   const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(err, errlen, "%s: record at byte %zu%s%s%s%s%s: %s", f->name, off,
             f->comp ? " of the uncompressed " : "", f->comp ? comp_name(f->comp) : "",
             f->comp ? " data" : "", feature ? ": feature " : "", feature ? feature : "", msg);
    return -EINVAL;
}

static void quote(char *out, size_t outlen, const char *name)
{
    snprintf(out, outlen, "'%.200s'", name);
}

/* An example's image: its shape and type, and its uint8 values, decoded (the caller
 * frees decoded) or the raw bytes inside the record; a float_list's values are read
 * from the feature with tfrecord_floats. */
typedef struct {
    int h, w, c;
    SourceType type;
    const uint8_t *u8;
    uint8_t *decoded;
} Image;

/* The image feature of one record as ix's options describe it, checked and decoded. */
static int image_of(const TfrecordIndex *ix, const File *f, size_t off, const TfrFeature *feat,
                    Image *im, char *err, size_t errlen)
{
    char name[210];
    quote(name, sizeof name, ix->image_feature);
    const int *shape = ix->image_shape;
    const size_t want = (size_t)shape[0] * (size_t)shape[1] * (size_t)shape[2];
    const uint8_t *p = NULL;
    size_t n = 0;
    *im = (Image){.h = shape[0], .w = shape[1], .c = shape[2]};
    im->type = feat->kind == TFR_FLOAT_LIST ? SOURCE_F32 : SOURCE_U8;
    if (feat->kind == TFR_MISSING)
        return fail_at(err, errlen, f, off, name,
                       "missing (name the image's feature with --image-feature)");
    if (feat->kind == TFR_INT64_LIST)
        return fail_at(err, errlen, f, off, name,
                       "an int64_list (expected a bytes_list: PNG, JPEG or raw bytes, or a "
                       "float_list)");
    if (feat->kind == TFR_BYTES_LIST && feat->count != 1)
        return fail_at(err, errlen, f, off, name,
                       "a bytes_list of %zu values (expected 1: one encoded image)", feat->count);
    if (feat->kind == TFR_BYTES_LIST) tfrecord_bytes(feat, 0, &p, &n);
    if (!want && feat->kind == TFR_FLOAT_LIST)
        return fail_at(err, errlen, f, off, name,
                       "a float_list of %zu values (give its shape with --image-shape H,W,C)",
                       feat->count);
    if (want && (feat->kind == TFR_FLOAT_LIST ? feat->count : n) != want) {
        const ImageFormat format = image_format(p, n);
        return fail_at(err, errlen, f, off, name,
                       "a %s of %zu values, but --image-shape %d,%d,%d makes %zu%s",
                       tfrecord_kind_name(feat->kind),
                       feat->kind == TFR_FLOAT_LIST ? feat->count : n, shape[0], shape[1], shape[2],
                       want, format ? " (it is an encoded image: leave --image-shape out)" : "");
    }
    im->u8 = p;
    if (want) return 0;
    const ImageFormat format = image_format(p, n);
    if (image_decode(p, n, MAX_IMAGE_PIXELS, &im->decoded, &im->h, &im->w, &im->c, err, errlen) <
        0) {
        char why[400];
        snprintf(why, sizeof why, "%s", err);
        return fail_at(err, errlen, f, off, name, "%s%s", why,
                       format ? "" : " (raw pixels need --image-shape H,W,C)");
    }
    im->u8 = im->decoded;
    return 0;
}

/* Appends the values of image im (of feature feat) to b->held while they fit the cache;
 * the first that does not (or finds no memory) stops holding, so that the open never
 * holds more than the cache and the source streams. */
static void hold_image(Build *b, const TfrFeature *feat, const Image *im)
{
    const size_t n = (size_t)im->h * (size_t)im->w * (size_t)im->c,
                 bytes = n * (im->type == SOURCE_F32 ? sizeof(float) : 1);
    if (b->holding && (b->held_len + bytes > b->cache_bytes ||
                       grow(&b->held, &b->held_cap, b->held_len + bytes))) {
        free(b->held);
        b->held = NULL, b->held_len = b->held_cap = 0, b->holding = 0;
    }
    if (!b->holding) return;
    if (im->type == SOURCE_F32) tfrecord_floats(feat, (float *)(void *)(b->held + b->held_len));
    else memcpy(b->held + b->held_len, im->u8, bytes);
    b->held_len += bytes;
}

/* Checks one example's image at open: it decodes, and has the first example's shape and
 * type. Its values are kept in b->held while the cache holds them; else the example is
 * read again when it is wanted. */
static int check_image(Build *b, const File *f, size_t off, const TfrFeature *feat, char *err,
                       size_t errlen)
{
    Source *s = b->s;
    Image im;
    int rc = image_of(b->ix, f, off, feat, &im, err, errlen);
    if (rc) return rc;
    if (s->count == 0) {
        s->h = im.h, s->w = im.w, s->c = im.c, s->type = im.type;
        snprintf(b->first_at, sizeof b->first_at, "%.300s, record at byte %zu", f->name, off);
    } else if (im.h != s->h || im.w != s->w || im.c != s->c || im.type != s->type) {
        char name[210];
        quote(name, sizeof name, b->ix->image_feature);
        rc = fail_at(err, errlen, f, off, name,
                     "a %dx%dx%d %s image, but the first example's (%s) is %dx%dx%d %s: every "
                     "example needs the same shape",
                     im.h, im.w, im.c, source_type_name(im.type), b->first_at, s->h, s->w, s->c,
                     source_type_name(s->type));
    }
    if (!rc) hold_image(b, feat, &im);
    free(im.decoded);
    return rc;
}

static int add_label(Build *b, const File *f, size_t off, const TfrFeature *feat, char *err,
                     size_t errlen)
{
    char name[210];
    quote(name, sizeof name, b->ix->label_feature);
    if (feat->kind == TFR_MISSING)
        return fail_at(err, errlen, f, off, name,
                       "missing (name the label's feature with --label-feature)");
    if (feat->kind != TFR_INT64_LIST || feat->count != 1)
        return fail_at(err, errlen, f, off, name,
                       "a %s of %zu values (expected an int64_list of 1: the class index)",
                       tfrecord_kind_name(feat->kind), feat->count);
    int64_t v;
    tfrecord_int64s(feat, &v);
    if (v < 0 || v >= b->num_classes)
        return fail_at(err, errlen, f, off, name,
                       "label %lld of example %zu (expected in [0, %d), the model's classes)",
                       (long long)v, b->s->count, b->num_classes);
    uint8_t *buf = (uint8_t *)b->s->labels;
    if (grow(&buf, &b->labels_cap, (b->s->count + 1) * sizeof(int32_t)))
        return fail_at(err, errlen, f, off, name, "out of memory");
    b->s->labels = (int32_t *)(void *)buf;
    b->s->labels[b->s->count] = (int32_t)v;
    return 0;
}

/* One record of the last file of ix, at byte off: checks its example, keeps its label and
 * where it is. */
static int add_record(Build *b, size_t off, const uint8_t *rec, size_t n, char *err, size_t errlen)
{
    TfrecordIndex *ix = b->ix;
    const File *f = &ix->files[ix->nfiles - 1];
    const char *names[2] = {ix->image_feature, ix->label_feature};
    TfrFeature feats[2];
    char why[400];
    int rc;
    if (n > UINT32_MAX)
        return fail_at(err, errlen, f, off, NULL,
                       "a record of %zu bytes (a tf.train.Example is under 2 GiB)", n);
    if (tfrecord_parse_example(rec, n, names, 2, feats, why, sizeof why))
        return fail_at(err, errlen, f, off, NULL, "%s", why);
    if ((rc = check_image(b, f, off, &feats[0], err, errlen)) ||
        (rc = add_label(b, f, off, &feats[1], err, errlen)))
        return rc;
    uint8_t *at = (uint8_t *)ix->at;
    if (grow(&at, &ix->at_cap, (b->s->count + 1) * sizeof *ix->at))
        return fail_at(err, errlen, f, off, NULL, "out of memory for %zu examples", b->s->count);
    ix->at = (RecordAt *)(void *)at;
    ix->at[b->s->count] =
        (RecordAt){.off = off, .file = (uint32_t)(ix->nfiles - 1), .len = (uint32_t)n};
    b->s->count++;
    return 0;
}

/* Up to n bytes at byte off of streamed file f (its compressed bytes for zin) into buf:
 * the count (short at the end of the file), or a negative errno with one line in err
 * (remote_read_ranges's for an object). */
static ssize_t file_read(const File *f, uint8_t *buf, size_t n, uint64_t off, char *err,
                         size_t errlen)
{
    if (f->obj) {
        RemoteRange r = {.obj = f->obj, .off = off, .len = n, .buf = buf};
        const int rc = remote_read_ranges(&r, 1, err, errlen);
        return rc ? rc : (ssize_t)r.got;
    }
    const ssize_t k = read_at(f->fd, buf, n, off);
    if (k < 0)
        snprintf(err, errlen, "%s: cannot read at byte %zu: %s", f->name, (size_t)off,
                 strerror((int)-k));
    return k;
}

/* Bytes [off, off + need) of streamed file f (0 < need <= f->len - off) from w into *p,
 * read a chunk at a time (an object's in REMOTE_RANGE_BYTES) when they are not there.
 * Returns 0, or a negative errno with one line in err when the file cannot be read or
 * has shrunk. */
static int window_at(Window *w, const File *f, size_t off, size_t need, const uint8_t **p,
                     char *err, size_t errlen)
{
    if (off >= w->start && off + need <= w->start + w->n) {
        *p = w->buf + (off - w->start);
        return 0;
    }
    const size_t chunk = f->obj ? REMOTE_RANGE_BYTES : READ_CHUNK;
    size_t want = need > chunk ? need : chunk;
    if (want > f->len - off) want = f->len - off;
    if (grow(&w->buf, &w->cap, want)) {
        snprintf(err, errlen, "%s: out of memory for %zu bytes at byte %zu", f->name, want, off);
        return -ENOMEM;
    }
    const ssize_t k = file_read(f, w->buf, want, off, err, errlen);
    w->start = off, w->n = k < 0 ? 0 : (size_t)k;
    if (k < 0) return (int)k;
    if ((size_t)k < need) {
        snprintf(err, errlen, "%s: shorter than its %zu bytes while being read (at byte %zu)",
                 f->name, f->len, off);
        return -EIO;
    }
    *p = w->buf;
    return 0;
}

/* file_read as the inflaters read; through f->ahead while it is there (an object's
 * open). */
static ssize_t compressed_read(void *ctx, uint8_t *buf, size_t n, uint64_t off, char *err,
                               size_t errlen)
{
    File *f = ctx;
    const uint8_t *p = NULL;
    if (!f->ahead.buf) return file_read(f, buf, n, off, err, errlen);
    if (off >= f->len) return 0;
    if (n > f->len - off) n = f->len - off;
    const int rc = window_at(&f->ahead, f, (size_t)off, n, &p, err, errlen);
    if (rc) return rc;
    memcpy(buf, p, n);
    return (ssize_t)n;
}

/* Every record of streamed file f, read in order through w and checked as tfrecord_next
 * does. */
static int scan_streamed(Build *b, const File *f, Window *w, char *err, size_t errlen)
{
    char why[400];
    int rc = 0;
    for (size_t off = 0; off < f->len && !rc;) {
        const size_t left = f->len - off;
        uint64_t len;
        const uint8_t *p;
        if ((rc = window_at(w, f, off, left < 12 ? left : 12, &p, err, errlen))) break;
        if (check_header(p, left, &len, why, sizeof why))
            rc = fail_at(err, errlen, f, off, NULL, "%s", why);
        else if ((rc = window_at(w, f, off, 16 + (size_t)len, &p, err, errlen))) break;
        else if (check_data(p + 12, (size_t)len, why, sizeof why))
            rc = fail_at(err, errlen, f, off, NULL, "%s", why);
        else rc = add_record(b, off, p + 12, (size_t)len, err, errlen);
        if (!rc) off += 16 + (size_t)len;
    }
    return rc;
}

/* Every record of compressed file f, inflated in order through f->zin and checked as
 * tfrecord_next does; f->len becomes the uncompressed length. */
static int scan_compressed(Build *b, File *f, char *err, size_t errlen)
{
    char why[400];
    size_t off = 0;
    for (;;) {
        const uint8_t *p;
        uint64_t len;
        ssize_t k = inflater_at(f->zin, off, 12, &p, err, errlen);
        if (k < 0) return (int)k;
        if (k == 0) break;
        /* the length first (its CRC: not a length to inflate gigabytes for), then the
         * record whole */
        if (k < 12 || check_header(p, SIZE_MAX, &len, why, sizeof why)) {
            if (k < 12) check_header(p, (size_t)k, &len, why, sizeof why);
            return fail_at(err, errlen, f, off, NULL, "%s", why);
        }
        if (len > UINT32_MAX)
            return fail_at(err, errlen, f, off, NULL,
                           "a record of %llu bytes (a tf.train.Example is under 2 GiB)",
                           (unsigned long long)len);
        if ((k = inflater_at(f->zin, off, 16 + (size_t)len, &p, err, errlen)) < 0) return (int)k;
        if (check_header(p, (size_t)k, &len, why, sizeof why) ||
            check_data(p + 12, (size_t)len, why, sizeof why))
            return fail_at(err, errlen, f, off, NULL, "%s", why);
        const int rc = add_record(b, off, p + 12, (size_t)len, err, errlen);
        if (rc) return rc;
        off += 16 + (size_t)len;
    }
    f->len = off;
    return 0;
}

/* Every record of held file f. */
static int scan_held(Build *b, const File *f, char *err, size_t errlen)
{
    TfrecordReader r = {f->buf, f->len, 0};
    const uint8_t *rec;
    size_t n;
    char why[400];
    for (;;) {
        const size_t off = r.pos;
        int rc = tfrecord_next(&r, &rec, &n, why, sizeof why);
        if (rc < 0) return fail_at(err, errlen, f, off, NULL, "%s", why);
        if (rc == 0) return 0;
        if ((rc = add_record(b, off, rec, n, err, errlen))) return rc;
    }
}

/* Streams compressed file f (its fd or obj open, clen bytes) through an inflater. */
static int open_inflater(File *f, uint64_t clen, char *err, size_t errlen)
{
    f->zin = inflater_new(f->comp == COMP_GZIP, clen, compressed_read, f, f->name);
    if (f->zin) return 0;
    snprintf(err, errlen, "%s: out of memory", f->name);
    return -ENOMEM;
}

/* Opens local file f: streamed (f->fd, its first bytes in w) when it is uncompressed,
 * else held (f->buf). */
static int open_local(File *f, Window *w, char *err, size_t errlen)
{
    struct stat st;
    const uint8_t *head;
    int rc;
    f->fd = open(f->path, O_RDONLY | O_CLOEXEC);
    if (f->fd < 0 || fstat(f->fd, &st) < 0) {
        int e = errno;
        snprintf(err, errlen, "%s: cannot open: %s", f->name, strerror(e));
        return -e;
    }
    f->len = (size_t)st.st_size;
    if (f->len == 0) return 0;
    if ((rc = window_at(w, f, 0, f->len < 12 ? f->len : 12, &head, err, errlen))) return rc;
    if ((f->comp = detect(head, w->n)) == COMP_NONE) return 0;
    return open_inflater(f, (uint64_t)st.st_size, err, errlen);
}

/* Opens object f: streamed by ranged GETs (f->obj, its first bytes in w) when it is
 * uncompressed and its server answers ranges, else held (f->buf). */
static int open_remote(File *f, Window *w, char *err, size_t errlen)
{
    uint8_t *head;
    size_t n;
    int rc = remote_object_open(f->path, &f->obj, &head, &n, err, errlen);
    if (rc) return rc;
    f->len = (size_t)remote_object_size(f->obj);
    if (remote_object_ranged(f->obj)) {
        if ((f->comp = detect(head, n)) == COMP_NONE) {
            *w = (Window){.buf = head, .cap = n, .start = 0, .n = n};
            return 0;
        }
        f->ahead = (Window){.buf = head, .cap = n, .start = 0, .n = n};
        return open_inflater(f, f->len, err, errlen);
    }
    remote_object_close(f->obj);
    f->obj = NULL;
    if (n == f->len) {
        f->buf = head;
        return 0;
    }
    free(head);
    return read_whole(f, err, errlen);
}

/* Opens file path of the source (name: as messages show it) as its next file, streamed
 * or held, and indexes its records. */
static int add_file(Build *b, const char *path, const char *name, char *err, size_t errlen)
{
    TfrecordIndex *ix = b->ix;
    File *f = &ix->files[ix->nfiles++];
    *f = (File){.path = xstrdup(path), .name = xstrdup(name), .fd = -1};
    Window w = {0};
    int rc = remote_is_url(path) ? open_remote(f, &w, err, errlen) : open_local(f, &w, err, errlen);
    if (!rc && f->zin) rc = scan_compressed(b, f, err, errlen);
    else if (!rc && (f->fd >= 0 || f->obj)) rc = scan_streamed(b, f, &w, err, errlen);
    free(w.buf);
    free(f->ahead.buf); /* later reads of a compressed object are an access point's */
    f->ahead = (Window){0};
    if (rc || f->fd >= 0 || f->obj) return rc;
    f->comp = detect(f->buf, f->len);
    if (f->comp && (rc = inflate_file(f, err, errlen))) return rc;
    return scan_held(b, f, err, errlen);
}

/* The records of the examples idx[0..n) of an object, in the order of the files and
 * their bytes, and the range each is read in. */
typedef struct {
    size_t k;
    const RecordAt *at;
    size_t range;
} Wanted;

static int by_place(const void *a, const void *b)
{
    const RecordAt *x = ((const Wanted *)a)->at, *y = ((const Wanted *)b)->at;
    if (x->file != y->file) return x->file < y->file ? -1 : 1;
    return x->off < y->off ? -1 : x->off > y->off;
}

/* Reads the records of the examples idx[0..n) that are in objects and not in hand (rec[k]
 * NULL: the caller sets it to a record it holds), all at once: the records of an object
 * that lie within MERGE_GAP of each other in one range (of at most REMOTE_RANGE_BYTES),
 * the others in ranges of their own. rec[k] gets where example k's record is and
 * avail[k] how many of its bytes were read (NULL and 0 for an example of a file);
 * *ranges (*nr of them; free each buf and the array) holds the bytes. Returns 0 or
 * remote_read_ranges's error. */
static int fetch_objects(const TfrecordIndex *ix, const size_t *idx, size_t n, const uint8_t **rec,
                         size_t *avail, RemoteRange **ranges, size_t *nr, char *err, size_t errlen)
{
    Wanted *w = xmalloc((n ? n : 1) * sizeof *w);
    size_t m = 0, q = 0;
    for (size_t k = 0; k < n; k++) {
        const RecordAt *at = &ix->at[idx[k]];
        if (rec[k]) continue;
        avail[k] = 0;
        if (ix->files[at->file].obj && !ix->files[at->file].zin)
            w[m++] = (Wanted){.k = k, .at = at};
    }
    qsort(w, m, sizeof *w, by_place);
    RemoteRange *r = xcalloc(m ? m : 1, sizeof *r);
    for (size_t j = 0; j < m; j++) {
        const RecordAt *at = w[j].at;
        const uint64_t end = at->off + 16 + at->len;
        RemoteObject *o = ix->files[at->file].obj;
        RemoteRange *last = q ? &r[q - 1] : NULL;
        if (last && last->obj == o && at->off <= last->off + last->len + MERGE_GAP &&
            end - last->off <= REMOTE_RANGE_BYTES) {
            if (end > last->off + last->len) last->len = (size_t)(end - last->off);
        } else {
            r[q++] = (RemoteRange){.obj = o, .off = at->off, .len = 16 + (size_t)at->len};
        }
        w[j].range = q - 1;
    }
    for (size_t i = 0; i < q; i++) r[i].buf = xmalloc(r[i].len);
    const int rc = remote_read_ranges(r, q, err, errlen);
    for (size_t j = 0; j < m && !rc; j++) {
        const RemoteRange *g = &r[w[j].range];
        const size_t at = (size_t)(w[j].at->off - g->off);
        rec[w[j].k] = g->buf + at;
        avail[w[j].k] = g->got > at ? g->got - at : 0;
    }
    free(w);
    *ranges = r, *nr = q;
    return rc;
}

/* Example i of s: its record (fetched: avail bytes of it read from its object, for an
 * example of an object) read again when its file is streamed (its framing and CRCs
 * checked again: the file may have changed since open), its image decoded into x. */
static int read_example(const Source *s, size_t i, const uint8_t *fetched, size_t avail,
                        PixelScale scale, float *x, int32_t *y, char *err, size_t errlen)
{
    const TfrecordIndex *ix = s->records;
    const RecordAt *r = &ix->at[i];
    const File *f = &ix->files[r->file];
    const size_t total = 16 + (size_t)r->len;
    uint8_t *own = NULL;
    const uint8_t *p = f->buf ? f->buf + r->off : fetched;
    size_t have = avail;
    char why[400] = "";
    if (!fetched && f->zin) {
        TfrecordIndex *w = s->records;
        const uint8_t *q;
        pthread_mutex_lock(&w->zin_mu);
        const ssize_t k = inflater_at(f->zin, r->off, total, &q, err, errlen);
        if (k >= 0 && (own = malloc(k ? (size_t)k : 1))) memcpy(own, q, (size_t)k);
        pthread_mutex_unlock(&w->zin_mu);
        if (k < 0) return (int)k;
        if (!own) {
            snprintf(err, errlen, "%s: out of memory for a record", f->name);
            return -ENOMEM;
        }
        p = own, have = (size_t)k;
    } else if (!fetched && f->fd >= 0) {
        own = malloc(total);
        const ssize_t k = own ? read_at(f->fd, own, total, r->off) : -ENOMEM;
        if (k < 0) {
            snprintf(err, errlen, "%s: cannot read the record at byte %zu: %s", f->name,
                     (size_t)r->off, strerror((int)-k));
            free(own);
            return (int)k;
        }
        p = own, have = (size_t)k;
    }
    if (!f->buf) {
        uint64_t len;
        if (have < total) snprintf(why, sizeof why, "%zu of its %zu bytes are left", have, total);
        else if (!check_header(p, total, &len, why, sizeof why) && len != r->len)
            snprintf(why, sizeof why, "its length says %llu bytes of data, it had %u",
                     (unsigned long long)len, r->len);
        else if (!*why) check_data(p + 12, r->len, why, sizeof why);
    }
    const char *names[2] = {ix->image_feature, ix->label_feature};
    TfrFeature feats[2];
    Image im = {0};
    if (!*why && tfrecord_parse_example(p + 12, r->len, names, 2, feats, why, sizeof why) == 0 &&
        image_of(ix, f, r->off, &feats[0], &im, why, sizeof why) == 0) {
        int64_t label = -1;
        if (feats[1].kind == TFR_INT64_LIST && feats[1].count == 1)
            tfrecord_int64s(&feats[1], &label);
        if (im.h != s->h || im.w != s->w || im.c != s->c || im.type != s->type)
            snprintf(why, sizeof why, "a %dx%dx%d %s image where it had %dx%dx%d %s", im.h, im.w,
                     im.c, source_type_name(im.type), s->h, s->w, s->c, source_type_name(s->type));
        else if (label != s->labels[i])
            snprintf(why, sizeof why, "label %lld where it had %d", (long long)label, s->labels[i]);
    }
    if (!*why) {
        if (im.type == SOURCE_F32) tfrecord_floats(&feats[0], x);
        else source_to_float(im.u8, SOURCE_U8, source_example_size(s), scale, x);
        *y = s->labels[i];
    }
    free(im.decoded);
    free(own);
    if (!*why) return 0;
    return fail_at(err, errlen, f, r->off, NULL,
                   "the %s changed since the trainer opened it (%s): a job's data %s must not "
                   "change while it runs",
                   f->obj ? "object" : "file", why, f->obj ? "objects" : "files");
}

int tfrecord_examples(const Source *s, const size_t *idx, size_t n, PixelScale scale, float *x,
                      int32_t *y, char *err, size_t errlen)
{
    TfrecordIndex *ix = s->records;
    const uint8_t **rec = xcalloc(n, sizeof *rec);
    uint8_t **own = xcalloc(n, sizeof *own);
    size_t *avail = xcalloc(n, sizeof *avail), nr;
    RemoteRange *ranges;
    const size_t pixels = source_example_size(s);
    /* the records held for the pipeline, each taken once: an example twice in one batch
     * (a source smaller than a step) is read the second time */
    pthread_mutex_lock(&ix->held_mu);
    for (size_t k = 0; k < n && ix->held; k++) {
        const File *f = &ix->files[ix->at[idx[k]].file];
        ix->reads += f->obj || f->zin;
        if (!(own[k] = ix->held[idx[k]])) continue;
        ix->hits++;
        ix->held[idx[k]] = NULL;
        avail[k] = 16 + (size_t)ix->at[idx[k]].len;
        ix->held_bytes -= avail[k];
        rec[k] = own[k];
    }
    pthread_mutex_unlock(&ix->held_mu);
    int rc = fetch_objects(ix, idx, n, rec, avail, &ranges, &nr, err, errlen);
    for (size_t k = 0; k < n && !rc; k++)
        rc = read_example(s, idx[k], rec[k], avail[k], scale, x + k * pixels, &y[k], err, errlen);
    for (size_t i = 0; i < nr; i++) free(ranges[i].buf);
    for (size_t k = 0; k < n; k++) free(own[k]);
    free(ranges);
    free(own);
    free(rec);
    free(avail);
    return rc;
}

int tfrecord_holds(const Source *s)
{
    const TfrecordIndex *ix = s->records;
    for (size_t i = 0; ix && ix->budget && i < ix->nfiles; i++)
        if (ix->files[i].obj || ix->files[i].zin) return 1;
    return 0;
}

int tfrecord_hold(const Source *s, const size_t *idx, size_t n, size_t *taken, char *err,
                  size_t errlen)
{
    TfrecordIndex *ix = s->records;
    size_t *want = xmalloc((n ? n : 1) * sizeof *want), m = 0, k = 0;
    pthread_mutex_lock(&ix->held_mu);
    if (!ix->held) ix->held = xcalloc(ix->slots = s->count, sizeof *ix->held);
    size_t bytes = ix->held_bytes;
    for (; k < n; k++) {
        const RecordAt *at = &ix->at[idx[k]];
        const size_t total = 16 + (size_t)at->len;
        const File *f = &ix->files[at->file];
        if ((!f->obj && !f->zin) || ix->held[idx[k]]) continue;
        if (bytes > ix->budget || total > ix->budget - bytes) break;
        bytes += total;
        want[m++] = idx[k];
    }
    pthread_mutex_unlock(&ix->held_mu);
    *taken = k;
    const uint8_t **rec = xcalloc(m ? m : 1, sizeof *rec);
    size_t *avail = xcalloc(m ? m : 1, sizeof *avail), nr;
    RemoteRange *ranges;
    int rc = fetch_objects(ix, want, m, rec, avail, &ranges, &nr, err, errlen);
    /* a compressed file's records, inflated in order: one pass for the lot */
    uint8_t **inflated = xcalloc(m ? m : 1, sizeof *inflated);
    pthread_mutex_lock(&ix->zin_mu);
    for (size_t j = 0; j < m && !rc; j++) {
        const RecordAt *at = &ix->at[want[j]];
        const File *f = &ix->files[at->file];
        const uint8_t *q;
        if (!f->zin) continue;
        const ssize_t got = inflater_at(f->zin, at->off, 16 + (size_t)at->len, &q, err, errlen);
        if (got < 0) rc = (int)got;
        else if ((inflated[j] = malloc(got ? (size_t)got : 1))) {
            memcpy(inflated[j], q, (size_t)got);
            rec[j] = inflated[j], avail[j] = (size_t)got;
        }
    }
    pthread_mutex_unlock(&ix->zin_mu);
    pthread_mutex_lock(&ix->held_mu);
    for (size_t j = 0; j < m && !rc; j++) {
        const size_t total = 16 + (size_t)ix->at[want[j]].len;
        /* a record cut short (the object shrank) is left to its read, which says so */
        if (avail[j] < total || ix->held[want[j]]) continue;
        /* an inflated record is already a copy of its own; a range's is cut out of it */
        uint8_t *copy = inflated[j] ? inflated[j] : malloc(total);
        if (!copy) break;
        if (!inflated[j]) memcpy(copy, rec[j], total);
        inflated[j] = NULL;
        ix->held[want[j]] = copy;
        ix->held_bytes += total;
    }
    pthread_mutex_unlock(&ix->held_mu);
    for (size_t i = 0; i < nr; i++) free(ranges[i].buf);
    for (size_t j = 0; j < m; j++) free(inflated[j]);
    free(inflated);
    free(ranges);
    free(rec);
    free(avail);
    free(want);
    if (rc) *taken = 0;
    return rc;
}

/* The requests made of object storage since *since, if any, logged as what of them. */
static void log_remote(const RemoteStats *since, const char *what)
{
    RemoteStats now;
    remote_stats(&now);
    if (now.requests == since->requests) return;
    util_log("tfrecord: object storage %s: %llu requests, %.1f MiB received, %.2f s waited", what,
             (unsigned long long)(now.requests - since->requests),
             (double)(now.bytes - since->bytes) / (1 << 20), now.seconds - since->seconds);
}

void tfrecord_log_held(const Source *s)
{
    TfrecordIndex *ix = s->records;
    if (!ix) return;
    log_remote(&ix->opened, "since the open (the prefetch thread's reads)");
    remote_stats(&ix->opened);
    pthread_mutex_lock(&ix->held_mu);
    if (ix->reads)
        util_log("tfrecord: %zu of the %zu examples read from object storage or compressed "
                 "files came from the read-ahead of the shuffle buffer (%.0f%%; held within "
                 "--data-cache-mib %zu, the rest read when used)",
                 ix->hits, ix->reads, 100.0 * (double)ix->hits / (double)ix->reads,
                 ix->budget >> 20);
    ix->reads = ix->hits = 0;
    pthread_mutex_unlock(&ix->held_mu);
}

void tfrecord_drop_held(const Source *s)
{
    TfrecordIndex *ix = s->records;
    if (!ix) return;
    pthread_mutex_lock(&ix->held_mu);
    for (size_t i = 0; i < ix->slots; i++) {
        free(ix->held[i]);
        ix->held[i] = NULL;
    }
    ix->held_bytes = 0;
    pthread_mutex_unlock(&ix->held_mu);
}

void tfrecord_index_free(TfrecordIndex *ix)
{
    if (!ix) return;
    for (size_t i = 0; i < ix->nfiles; i++) {
        if (ix->files[i].fd >= 0) close(ix->files[i].fd);
        inflater_free(ix->files[i].zin);
        remote_object_close(ix->files[i].obj);
        free(ix->files[i].buf);
        free(ix->files[i].path);
        free(ix->files[i].name);
    }
    free(ix->files);
    free(ix->at);
    for (size_t i = 0; i < ix->slots; i++) free(ix->held[i]);
    free(ix->held);
    pthread_mutex_destroy(&ix->held_mu);
    pthread_mutex_destroy(&ix->zin_mu);
    free(ix->image_feature);
    free(ix->label_feature);
    free(ix);
}

static int by_name(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Appends a copy of name to the growing array *v of *n (room for *cap). */
static void push_name(char ***v, size_t *n, size_t *cap, const char *name)
{
    if (*n == *cap) {
        *cap = *cap ? *cap * 2 : 16;
        char **w = realloc(*v, *cap * sizeof *w);
        if (!w) util_fail(KT_EXIT_DATA, "tfrecord: out of memory listing %zu files", *n);
        *v = w;
    }
    (*v)[(*n)++] = xstrdup(name);
}

/* The files of one pattern, sorted by name (bytes, whatever the locale), appended to *v.
 * after_url: the pattern followed an http(s) URL in the list, so a comma may have cut
 * one in two. */
static int expand(const char *pattern, int after_url, char ***v, size_t *n, size_t *cap, char *err,
                  size_t errlen)
{
    glob_t g = {0};
    int rc = glob(pattern, GLOB_NOSORT, NULL, &g);
    if (rc == GLOB_NOMATCH) {
        snprintf(err, errlen, "tfrecord: '%s' matches no file%s", pattern,
                 after_url ? " (a comma separates patterns: inside a URL, write it as %2C)" : "");
        return -ENOENT;
    }
    if (rc) {
        snprintf(err, errlen, "tfrecord: '%s': cannot list the files (%s)", pattern,
                 rc == GLOB_NOSPACE ? "out of memory" : "a directory could not be read");
        return -EIO;
    }
    qsort(g.gl_pathv, g.gl_pathc, sizeof *g.gl_pathv, by_name);
    for (size_t i = 0; i < g.gl_pathc; i++) push_name(v, n, cap, g.gl_pathv[i]);
    globfree(&g);
    return 0;
}

/* Every file of patterns, in the source's order, into *names (*n of them; free each and
 * the array). The whole list comes first, so that a pattern that matches nothing fails
 * before any file is read and file sharding knows the count. */
static int list_files(const char *patterns, char ***names, size_t *n, char *err, size_t errlen)
{
    char pattern[4096];
    size_t cap = 0;
    int rc = 0, after_url = 0;
    *names = NULL, *n = 0;
    for (const char *p = patterns; *p && !rc;) {
        size_t len = strcspn(p, ",");
        snprintf(pattern, sizeof pattern, "%.*s", (int)len, p);
        p += len + (p[len] == ',');
        if (remote_is_url(pattern)) {
            char **urls;
            size_t count;
            if ((rc = remote_list(pattern, &urls, &count, err, errlen))) break;
            for (size_t i = 0; i < count; i++) push_name(names, n, &cap, urls[i]);
            remote_free_urls(urls, count);
        } else {
            rc = expand(pattern, after_url, names, n, &cap, err, errlen);
        }
        after_url = remote_is_url(pattern) && strncmp(pattern, "s3://", 5);
    }
    return rc;
}

/* Ends the open of b's source: its examples held decoded in s->images when they all fit
 * the cache (the files closed, the index freed), else streamed; says which. */
static void hold_or_stream(Build *b, const char *shown)
{
    Source *s = b->s;
    const double mib = 1 << 20, bytes = (double)(s->count * source_example_size(s)) *
                                        (s->type == SOURCE_F32 ? sizeof(float) : 1);
    if (b->holding) {
        s->images = b->held;
        tfrecord_index_free(s->records);
        s->records = NULL;
    }
    util_log("tfrecord:%.200s: %zu examples, %.1f MiB decoded: %s (--data-cache-mib %.0f)", shown,
             s->count, bytes / mib,
             b->holding ? "held in memory, decoded once" : "streamed, decoded when read",
             (double)b->cache_bytes / mib);
}

int tfrecord_open(Source *s, const char *patterns, int num_classes, const SourceOptions *o,
                  char *err, size_t errlen)
{
    TfrecordIndex *ix = xcalloc(1, sizeof *ix);
    ix->image_feature = xstrdup(o->image_feature);
    ix->label_feature = xstrdup(o->label_feature);
    memcpy(ix->image_shape, o->image_shape, sizeof ix->image_shape);
    pthread_mutex_init(&ix->held_mu, NULL);
    pthread_mutex_init(&ix->zin_mu, NULL);
    ix->budget = o->cache_bytes;
    s->records = ix;
    Build b = {.s = s,
               .ix = ix,
               .num_classes = num_classes,
               .cache_bytes = o->cache_bytes,
               .holding = o->cache_bytes > 0};
    char shown[4096];
    remote_redact(patterns, shown, sizeof shown);
    snprintf(s->images_at, sizeof s->images_at, "tfrecord:%.4000s feature '%.200s'", shown,
             o->image_feature);
    snprintf(s->labels_at, sizeof s->labels_at, "tfrecord:%.4000s feature '%.200s'", shown,
             o->label_feature);
    char **names;
    size_t files;
    RemoteStats before;
    remote_stats(&before);
    int rc = list_files(patterns, &names, &files, err, errlen);
    const size_t step = o->file_shards > 1 ? (size_t)o->file_shards : 1;
    const size_t first = step > 1 ? (size_t)o->file_shard : 0;
    if (!rc && files < step) {
        snprintf(err, errlen,
                 "tfrecord:%.4000s: %zu files for %zu workers (--shard-policy file gives each "
                 "worker whole files: expected at least one file per worker, or --shard-policy "
                 "data)",
                 shown, files, step);
        rc = -EINVAL;
    }
    if (!rc) ix->files = xcalloc((files - first + step - 1) / step, sizeof *ix->files);
    size_t mine = 0, used = 0;
    char which[128] = "";
    for (size_t i = first; i < files && !rc; i += step, mine++) {
        if (used < sizeof which - 24)
            used +=
                (size_t)snprintf(which + used, sizeof which - used, "%s%zu", mine ? ", " : "", i);
        else if (!strstr(which, "..."))
            used += (size_t)snprintf(which + used, sizeof which - used, ", ...");
        char name[4096];
        remote_redact(names[i], name, sizeof name);
        rc = add_file(&b, names[i], name, err, errlen);
    }
    if (!rc && step > 1)
        util_log("file sharding: worker %zu of %zu reads files [%s] of %zu (by number from 0, "
                 "in name order): %zu examples",
                 first, step, which, files, s->count);
    for (size_t i = 0; i < files; i++) free(names[i]);
    free(names);
    if (!rc && s->count == 0) {
        snprintf(err, errlen, "tfrecord:%.4000s: no records in its %zu files", shown, mine);
        rc = -EINVAL;
    }
    if (!rc) log_remote(&before, "at open");
    if (!rc) hold_or_stream(&b, shown);
    else free(b.held);
    if (!rc && s->records) remote_stats(&ix->opened);
    return rc;
}
