#include "idx.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "util.h"

#define IDX_MAX_BYTES ((size_t)1 << 31)
#define IDX_FIRST_CHUNK ((size_t)1 << 20)

/* Reads exactly n bytes; returns how many it got (fewer: end of file or error). */
static size_t gz_read_all(gzFile f, uint8_t *buf, size_t n)
{
    size_t got = 0;
    while (got < n) {
        size_t want = n - got > (1u << 30) ? (1u << 30) : n - got;
        int r = gzread(f, buf + got, (unsigned)want);
        if (r <= 0) break;
        got += (size_t)r;
    }
    return got;
}

int idx_read(const char *path, int ndims, uint8_t **data, uint32_t dims[3], char *err,
             size_t errlen)
{
    *data = NULL;
    gzFile f = gzopen(path, "rb");
    if (!f) {
        snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno ? errno : ENOENT));
        return -ENOENT;
    }
    int rc = -EINVAL;
    uint8_t head[4 + 4 * 3], extra;
    size_t head_len = 4 + 4 * (size_t)ndims, total = 1;
    if (gz_read_all(f, head, head_len) != head_len) {
        snprintf(err, errlen, "%s: truncated IDX header (expected %zu bytes)", path, head_len);
        goto out;
    }
    if (head[0] != 0 || head[1] != 0 || head[2] != 0x08 || head[3] != ndims) {
        snprintf(err, errlen,
                 "%s: bad IDX magic %02x%02x%02x%02x (expected 000008%02x: unsigned "
                 "bytes, %d dimensions)",
                 path, head[0], head[1], head[2], head[3], ndims, ndims);
        goto out;
    }
    for (int i = 0; i < ndims; i++) {
        const uint8_t *p = head + 4 + 4 * i;
        dims[i] = (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
        if (dims[i] == 0 || total > IDX_MAX_BYTES / dims[i]) {
            snprintf(err, errlen,
                     "%s: IDX dimension %d is %u (expected > 0 and under 2 GiB in all)", path, i,
                     dims[i]);
            goto out;
        }
        total *= dims[i];
    }
    /* The buffer grows with the data actually read, so that a short file announcing
     * 2 GiB costs what it holds, not what it claims. */
    size_t cap = total < IDX_FIRST_CHUNK ? total : IDX_FIRST_CHUNK, got = 0;
    *data = xmalloc(cap);
    for (;;) {
        got += gz_read_all(f, *data + got, cap - got);
        if (got < cap || cap == total) break;
        cap = cap > total / 2 ? total : 2 * cap;
        uint8_t *grown = realloc(*data, cap);
        if (!grown) {
            snprintf(err, errlen, "%s: out of memory for %zu bytes of IDX data", path, total);
            rc = -ENOMEM;
            goto out;
        }
        *data = grown;
    }
    if (got != total) {
        snprintf(err, errlen, "%s: truncated IDX data: %zu of %zu bytes", path, got, total);
        goto out;
    }
    if (gzread(f, &extra, 1) != 0) {
        snprintf(err, errlen, "%s: trailing bytes after the %zu bytes the IDX header announces",
                 path, total);
        goto out;
    }
    rc = 0;
out:
    gzclose(f);
    if (rc) {
        free(*data);
        *data = NULL;
    }
    return rc;
}

/* Picks "<dir>/<name>.gz" when it exists, else "<dir>/<name>". */
static void idx_path(char *out, size_t outlen, const char *dir, const char *name)
{
    snprintf(out, outlen, "%s/%s.gz", dir, name);
    if (access(out, R_OK) != 0) snprintf(out, outlen, "%s/%s", dir, name);
}

int idx_open(Source *s, const char *dir, const char *prefix, char *err, size_t errlen)
{
    char ipath[4096], lpath[4096], name[64];
    uint32_t idims[3], ldims[3];
    uint8_t *labels = NULL;
    int rc;
    memset(s, 0, sizeof *s);
    snprintf(name, sizeof name, "%s-images-idx3-ubyte", prefix);
    idx_path(ipath, sizeof ipath, dir, name);
    snprintf(name, sizeof name, "%s-labels-idx1-ubyte", prefix);
    idx_path(lpath, sizeof lpath, dir, name);
    uint8_t *images;
    if ((rc = idx_read(ipath, 3, &images, idims, err, errlen))) return rc;
    s->images = images;
    if ((rc = idx_read(lpath, 1, &labels, ldims, err, errlen))) goto err;
    if (idims[0] != ldims[0]) {
        snprintf(err, errlen, "%s: %u labels for %u images in %s (expected one label per image)",
                 lpath, ldims[0], idims[0], ipath);
        rc = -EINVAL;
        goto err;
    }
    s->labels = xmalloc(ldims[0] * sizeof *s->labels);
    for (uint32_t i = 0; i < ldims[0]; i++) s->labels[i] = labels[i];
    free(labels);
    s->count = idims[0];
    s->h = (int)idims[1];
    s->w = (int)idims[2];
    s->c = 1;
    s->type = SOURCE_U8;
    snprintf(s->images_at, sizeof s->images_at, "%s", ipath);
    snprintf(s->labels_at, sizeof s->labels_at, "%s", lpath);
    return 0;
err:
    free(labels);
    source_free(s);
    return rc;
}
