#include "npy.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zip.h>

#include "util.h"

#define NPY_MAX_HEADER ((size_t)1 << 20)
#define NPY_FIRST_CHUNK ((size_t)1 << 20)

static const char *const dtype_names[] = {"|u1", "<i4", "<i8", "<f4", "<f8"};
static const size_t dtype_sizes[] = {1, 4, 8, 4, 8};

const char *npy_dtype_name(NpyDtype d)
{
    return dtype_names[d];
}

/* The bytes of one array: a file or an archive member, read sequentially. */
typedef struct {
    FILE *f;
    zip_file_t *z;
} Reader;

/* Reads up to n bytes; returns how many it got (fewer: the end, or an error). */
static size_t read_some(Reader *r, void *buf, size_t n)
{
    if (r->f) return fread(buf, 1, n, r->f);
    size_t got = 0;
    while (got < n) {
        zip_int64_t k = zip_fread(r->z, (char *)buf + got, n - got);
        if (k <= 0) break;
        got += (size_t)k;
    }
    return got;
}

/* The header: a Python dict literal such as
 *     {'descr': '<f4', 'fortran_order': False, 'shape': (60000, 28, 28), }
 * Only the three keys NumPy writes, each once; values as NumPy writes them. */
typedef struct {
    const char *p, *end;
} Cursor;

static void skip_space(Cursor *c)
{
    while (c->p < c->end && isspace((unsigned char)*c->p)) c->p++;
}

static int accept(Cursor *c, char ch)
{
    skip_space(c);
    if (c->p < c->end && *c->p == ch) {
        c->p++;
        return 1;
    }
    return 0;
}

/* A quoted string into out; returns 0 or -EINVAL. */
static int parse_string(Cursor *c, char *out, size_t outlen)
{
    skip_space(c);
    if (c->p >= c->end || (*c->p != '\'' && *c->p != '"')) return -EINVAL;
    char q = *c->p++;
    size_t n = 0;
    while (c->p < c->end && *c->p != q) {
        if (n + 1 >= outlen) return -EINVAL;
        out[n++] = *c->p++;
    }
    if (c->p >= c->end) return -EINVAL;
    c->p++;
    out[n] = '\0';
    return 0;
}

static int parse_shape(Cursor *c, NpyArray *a)
{
    if (!accept(c, '(')) return -EINVAL;
    a->ndim = 0;
    a->count = 1;
    while (!accept(c, ')')) {
        skip_space(c);
        if (a->ndim == NPY_MAX_DIMS || c->p >= c->end || !isdigit((unsigned char)*c->p))
            return -EINVAL;
        uint64_t d = 0;
        while (c->p < c->end && isdigit((unsigned char)*c->p)) {
            if (d > (UINT64_MAX - 9) / 10) return -EINVAL;
            d = d * 10 + (uint64_t)(*c->p++ - '0');
        }
        if (d && a->count > SIZE_MAX / 8 / d) return -EINVAL; /* bytes fit a size_t */
        a->shape[a->ndim++] = d;
        a->count *= (size_t)d;
        if (!accept(c, ',')) {
            if (!accept(c, ')')) return -EINVAL;
            break;
        }
    }
    return 0;
}

/* Parses the header text into a's dtype and shape; returns 0 or -EINVAL with err. */
static int parse_header(const char *text, size_t len, NpyArray *a, const char *where, char *err,
                        size_t errlen)
{
    Cursor c = {text, text + len};
    char key[32], descr[32] = "";
    int have = 0, fortran = 0;
    if (!accept(&c, '{')) goto bad;
    while (!accept(&c, '}')) {
        if (parse_string(&c, key, sizeof key) || !accept(&c, ':')) goto bad;
        if (!strcmp(key, "descr") && !(have & 1)) {
            if (parse_string(&c, descr, sizeof descr)) {
                if (!accept(&c, '[')) goto bad;
                snprintf(err, errlen,
                         "%s: a structured dtype (expected a plain array of |u1, <i4, <i8, "
                         "<f4 or <f8)",
                         where);
                return -EINVAL;
            }
            have |= 1;
        } else if (!strcmp(key, "fortran_order") && !(have & 2)) {
            skip_space(&c);
            size_t rest = (size_t)(c.end - c.p);
            if (rest >= 4 && !strncmp(c.p, "True", 4)) fortran = 1, c.p += 4;
            else if (rest >= 5 && !strncmp(c.p, "False", 5)) c.p += 5;
            else goto bad;
            have |= 2;
        } else if (!strcmp(key, "shape") && !(have & 4)) {
            if (parse_shape(&c, a)) goto bad;
            have |= 4;
        } else {
            goto bad;
        }
        if (!accept(&c, ',')) {
            if (!accept(&c, '}')) goto bad;
            break;
        }
    }
    if (have != 7) goto bad;
    if (fortran) {
        snprintf(err, errlen,
                 "%s: fortran_order is True (expected C order: save "
                 "np.ascontiguousarray(a))",
                 where);
        return -EINVAL;
    }
    for (int i = 0; i < 5; i++)
        if (!strcmp(descr, dtype_names[i])) {
            a->dtype = (NpyDtype)i;
            return 0;
        }
    snprintf(err, errlen,
             "%s: dtype '%s' (expected |u1, <i4, <i8, <f4 or <f8: uint8, int32, int64, "
             "float32 or float64, little-endian)",
             where, descr);
    return -EINVAL;
bad:
    snprintf(err, errlen,
             "%s: malformed .npy header at byte %zu of its text (expected a dict of 'descr', "
             "'fortran_order' and 'shape' as NumPy writes it)",
             where, (size_t)(c.p - text));
    return -EINVAL;
}

/* Reads a whole .npy stream: magic, version, header, data, nothing after. */
static int read_array(Reader *r, const char *where, NpyArray *a, char *err, size_t errlen)
{
    uint8_t pre[12];
    char *text = NULL;
    memset(a, 0, sizeof *a);
    if (read_some(r, pre, 8) != 8 || memcmp(pre, "\x93NUMPY", 6) != 0) {
        snprintf(err, errlen, "%s: not a .npy array (expected the magic \\x93NUMPY)", where);
        return -EINVAL;
    }
    if (pre[6] < 1 || pre[6] > 3) {
        snprintf(err, errlen, "%s: .npy format version %u.%u (expected 1.0, 2.0 or 3.0)", where,
                 pre[6], pre[7]);
        return -EINVAL;
    }
    size_t lenbytes = pre[6] == 1 ? 2 : 4, hlen = 0;
    if (read_some(r, pre + 8, lenbytes) != lenbytes) {
        snprintf(err, errlen, "%s: truncated .npy header", where);
        return -EINVAL;
    }
    for (size_t i = lenbytes; i-- > 0;) hlen = hlen << 8 | pre[8 + i];
    if (hlen > NPY_MAX_HEADER) {
        snprintf(err, errlen, "%s: .npy header of %zu bytes (expected under %zu)", where, hlen,
                 NPY_MAX_HEADER);
        return -EINVAL;
    }
    text = xmalloc(hlen + 1);
    int rc = -EINVAL;
    if (read_some(r, text, hlen) != hlen) {
        snprintf(err, errlen, "%s: truncated .npy header (expected %zu bytes of text)", where,
                 hlen);
        goto out;
    }
    if ((rc = parse_header(text, hlen, a, where, err, errlen))) goto out;
    rc = -EINVAL;
    size_t total = a->count * dtype_sizes[a->dtype], got = 0;
    /* The buffer grows with the data actually read, so that a short file announcing a
     * huge shape costs what it holds, not what it claims. */
    size_t cap = total < NPY_FIRST_CHUNK ? total : NPY_FIRST_CHUNK;
    a->data = xmalloc(cap ? cap : 1);
    for (;;) {
        got += read_some(r, (char *)a->data + got, cap - got);
        if (got < cap || cap == total) break;
        cap = cap > total / 2 ? total : 2 * cap;
        void *grown = realloc(a->data, cap);
        if (!grown) {
            snprintf(err, errlen, "%s: out of memory for %zu bytes of array data", where, total);
            rc = -ENOMEM;
            goto out;
        }
        a->data = grown;
    }
    uint8_t extra;
    if (got != total) {
        snprintf(err, errlen, "%s: truncated array data: %zu of the %zu bytes its shape says",
                 where, got, total);
        goto out;
    }
    if (read_some(r, &extra, 1) != 0) {
        snprintf(err, errlen, "%s: trailing bytes after the %zu bytes its shape says", where,
                 total);
        goto out;
    }
    rc = 0;
out:
    free(text);
    if (rc) npy_free(a);
    return rc;
}

int npy_read(const char *path, NpyArray *a, char *err, size_t errlen)
{
    Reader r = {.f = fopen(path, "rb")};
    if (!r.f) {
        memset(a, 0, sizeof *a);
        int e = errno;
        snprintf(err, errlen, "%s: cannot open: %s", path, strerror(e));
        return -e;
    }
    int rc = read_array(&r, path, a, err, errlen);
    if (rc == -EINVAL && ferror(r.f)) {
        snprintf(err, errlen, "%s: read error", path);
        rc = -EIO;
    }
    fclose(r.f);
    return rc;
}

/* Lists the archive's members in err after what is there already. */
static void list_members(zip_t *z, char *err, size_t errlen)
{
    zip_int64_t n = zip_get_num_entries(z, 0);
    size_t len = strlen(err);
    for (zip_int64_t i = 0; i < n && len + 1 < errlen; i++) {
        const char *name = zip_get_name(z, (zip_uint64_t)i, 0);
        if (!name) continue;
        size_t nl = strlen(name);
        if (nl > 4 && !strcmp(name + nl - 4, ".npy")) nl -= 4;
        len += (size_t)snprintf(err + len, errlen - len, "%s%.*s", i ? ", " : "", (int)nl, name);
    }
    if (len + 1 < errlen) snprintf(err + len, errlen - len, "%s", n ? ")" : "none)");
}

int npz_read(const char *path, const char *key, NpyArray *a, char *err, size_t errlen)
{
    int zerr = 0;
    memset(a, 0, sizeof *a);
    zip_t *z = zip_open(path, ZIP_RDONLY, &zerr);
    if (!z) {
        zip_error_t ze;
        zip_error_init_with_code(&ze, zerr);
        snprintf(err, errlen, "%s: cannot open as .npz: %s", path, zip_error_strerror(&ze));
        zip_error_fini(&ze);
        return zerr == ZIP_ER_NOENT ? -ENOENT : -EINVAL;
    }
    char member[512], where[4600];
    snprintf(member, sizeof member, "%s.npy", key);
    snprintf(where, sizeof where, "%s:%s", path, key);
    int rc = -ENOENT;
    zip_int64_t idx = zip_name_locate(z, member, 0);
    if (idx < 0) {
        snprintf(err, errlen, "%s: no array '%s' in the archive (it has: ", path, key);
        list_members(z, err, errlen);
        goto out;
    }
    Reader r = {.z = zip_fopen_index(z, (zip_uint64_t)idx, 0)};
    if (!r.z) {
        snprintf(err, errlen, "%s: cannot read the member %s: %s", where, member, zip_strerror(z));
        rc = -EINVAL;
        goto out;
    }
    rc = read_array(&r, where, a, err, errlen);
    /* A damaged deflate stream or CRC shows as a short read above; say which. */
    zip_error_t *fe = zip_file_get_error(r.z);
    if (rc == -EINVAL && zip_error_code_zip(fe) != ZIP_ER_OK) {
        size_t n = strlen(err);
        snprintf(err + n, errlen - n, " (%s)", zip_error_strerror(fe));
    }
    zip_fclose(r.z);
out:
    zip_discard(z);
    return rc;
}

void npy_free(NpyArray *a)
{
    if (!a) return;
    free(a->data);
    memset(a, 0, sizeof *a);
}
