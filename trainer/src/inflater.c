#include "inflater.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "util.h"

/* What a deflate block may refer back to. */
#define WINDOW ((size_t)32 << 10)
/* Room made in the output buffer before each inflate call. */
#define OUT_CHUNK ((size_t)256 << 10)

typedef struct {
    uint64_t in;  /* the compressed byte the block starts in, or after when bits is 0 */
    uint64_t out; /* the output offset it starts at */
    int bits;     /* bits of byte in - 1 that belong to the block */
    size_t wlen;  /* the output before it: min(WINDOW, out) bytes */
    uint8_t *window;
} Point;

struct Inflater {
    int gzip;
    uint64_t clen;
    InflaterRead read;
    void *ctx;
    char *name;
    z_stream zs;
    int live; /* zs initialised */
    int raw;  /* zs restored at a point: a bare deflate stream, no header or trailer */
    uint8_t *in;
    uint64_t in_off; /* the compressed offset of in[0] */
    uint8_t *out;    /* output [out_start, out_start + out_len) */
    size_t out_cap, out_len;
    uint64_t out_start;
    int ended;     /* the data's end reached: out_start + out_len is its length */
    uint64_t size; /* the output's length, UINT64_MAX until known */
    Point *points;
    size_t npoints, points_cap;
};

static const char *kind(const Inflater *z)
{
    return z->gzip ? "GZIP" : "ZLIB";
}

/* The compressed offset of the next byte inflate takes. */
static uint64_t cpos(const Inflater *z)
{
    return z->in_off + (uint64_t)(z->zs.next_in - z->in);
}

static int fail(const Inflater *z, char *err, size_t errlen, const char *why)
{
    snprintf(err, errlen, "%s (%s): %s, at compressed byte %llu", z->name, kind(z), why,
             (unsigned long long)cpos(z));
    return -EINVAL;
}

/* Makes sure some compressed input is there, unless the data has ended. 0 or -errno. */
static int fill(Inflater *z, char *err, size_t errlen)
{
    if (z->zs.avail_in > 0) return 0;
    const uint64_t at = cpos(z);
    if (at >= z->clen) return 0;
    const size_t want = z->clen - at < INFLATER_IN ? (size_t)(z->clen - at) : INFLATER_IN;
    const ssize_t k = z->read(z->ctx, z->in, want, at, err, errlen);
    if (k < 0) return (int)k;
    z->in_off = at;
    z->zs.next_in = z->in;
    z->zs.avail_in = (uInt)k;
    if (k == 0) {
        snprintf(err, errlen, "%s (%s): shorter than its %llu bytes while being read", z->name,
                 kind(z), (unsigned long long)z->clen);
        return -EIO;
    }
    return 0;
}

/* Starts over at the data's first byte, with its header. */
static int start(Inflater *z, char *err, size_t errlen)
{
    if (z->live) inflateEnd(&z->zs);
    memset(&z->zs, 0, sizeof z->zs);
    z->live = inflateInit2(&z->zs, z->gzip ? 16 + MAX_WBITS : MAX_WBITS) == Z_OK;
    if (!z->live) {
        snprintf(err, errlen, "%s: cannot start zlib", z->name);
        return -ENOMEM;
    }
    z->raw = 0, z->in_off = 0, z->zs.next_in = z->in, z->zs.avail_in = 0;
    z->out_start = 0, z->out_len = 0, z->ended = 0;
    return 0;
}

/* Starts over at point pt, its window as the output before it. */
static int restore(Inflater *z, const Point *pt, char *err, size_t errlen)
{
    if (z->live) inflateEnd(&z->zs);
    memset(&z->zs, 0, sizeof z->zs);
    z->live = inflateInit2(&z->zs, -MAX_WBITS) == Z_OK;
    if (!z->live) {
        snprintf(err, errlen, "%s: cannot start zlib", z->name);
        return -ENOMEM;
    }
    z->raw = 1, z->ended = 0;
    z->in_off = pt->in - (pt->bits ? 1 : 0), z->zs.next_in = z->in, z->zs.avail_in = 0;
    int rc = fill(z, err, errlen);
    if (rc) return rc;
    if (pt->bits) {
        if (z->zs.avail_in == 0) return fail(z, err, errlen, "the compressed data ends early");
        const int byte = *z->zs.next_in++;
        z->zs.avail_in--;
        inflatePrime(&z->zs, pt->bits, byte >> (8 - pt->bits));
    }
    if (pt->wlen) inflateSetDictionary(&z->zs, pt->window, (uInt)pt->wlen);
    memcpy(z->out, pt->window, pt->wlen);
    z->out_start = pt->out - pt->wlen, z->out_len = pt->wlen;
    return 0;
}

/* A point at the block boundary inflate stopped at, when the last is INFLATER_SPAN
 * behind. */
static void add_point(Inflater *z)
{
    const uint64_t pos = z->out_start + z->out_len;
    const uint64_t last = z->npoints ? z->points[z->npoints - 1].out : 0;
    if (pos < last + INFLATER_SPAN) return;
    if (z->npoints == z->points_cap) {
        size_t cap = z->points_cap ? 2 * z->points_cap : 16;
        Point *p = realloc(z->points, cap * sizeof *p);
        if (!p) return; /* fewer points: slower reads, nothing else */
        z->points = p, z->points_cap = cap;
    }
    const size_t wlen = z->out_len < WINDOW ? z->out_len : WINDOW;
    uint8_t *w = malloc(wlen ? wlen : 1);
    if (!w) return;
    memcpy(w, z->out + z->out_len - wlen, wlen);
    z->points[z->npoints++] =
        (Point){.in = cpos(z), .out = pos, .bits = z->zs.data_type & 7, .wlen = wlen, .window = w};
}

/* Skips the n bytes of a member's trailer after a restored (raw) stream's end. */
static int skip(Inflater *z, size_t n, char *err, size_t errlen)
{
    while (n > 0) {
        int rc = fill(z, err, errlen);
        if (rc) return rc;
        if (z->zs.avail_in == 0) return fail(z, err, errlen, "the compressed data ends early");
        const size_t k = z->zs.avail_in < n ? z->zs.avail_in : n;
        z->zs.next_in += k, z->zs.avail_in -= (uInt)k, n -= k;
    }
    return 0;
}

/* The end of a deflate stream: the next GZIP member, or the data's end. */
static int stream_end(Inflater *z, char *err, size_t errlen)
{
    int rc;
    if (z->raw && (rc = skip(z, z->gzip ? 8 : 4, err, errlen))) return rc;
    if (z->zs.avail_in < 2 && cpos(z) + z->zs.avail_in < z->clen) {
        /* the next member's magic across two reads: read from it again */
        z->in_off = cpos(z), z->zs.next_in = z->in, z->zs.avail_in = 0;
    }
    if ((rc = fill(z, err, errlen))) return rc;
    if (z->zs.avail_in == 0) {
        z->ended = 1;
        z->size = z->out_start + z->out_len;
        return 0;
    }
    if (z->gzip && z->zs.avail_in >= 2 && z->zs.next_in[0] == 0x1f && z->zs.next_in[1] == 0x8b &&
        inflateReset2(&z->zs, 16 + MAX_WBITS) == Z_OK) {
        z->raw = 0;
        return 0;
    }
    return fail(z, err, errlen, "bytes after the end of the compressed data");
}

/* One inflate call into the output buffer (which has room); 0 or -errno. */
static int step(Inflater *z, char *err, size_t errlen)
{
    int rc = fill(z, err, errlen);
    if (rc) return rc;
    const size_t room0 = z->out_cap - z->out_len;
    const size_t room = room0 < ((size_t)1 << 30) ? room0 : (size_t)1 << 30;
    z->zs.next_out = z->out + z->out_len;
    z->zs.avail_out = (uInt)room;
    const int zrc = inflate(&z->zs, Z_BLOCK);
    z->out_len += room - z->zs.avail_out;
    if (zrc == Z_STREAM_END) return stream_end(z, err, errlen);
    if (zrc == Z_OK) {
        if ((z->zs.data_type & 128) && !(z->zs.data_type & 64)) add_point(z);
        return 0;
    }
    if (zrc == Z_BUF_ERROR && z->zs.avail_in == 0 && cpos(z) >= z->clen)
        return fail(z, err, errlen, "the compressed data ends early (a truncated file)");
    if (zrc == Z_BUF_ERROR) return 0;
    return fail(z, err, errlen, z->zs.msg ? z->zs.msg : "corrupt compressed data");
}

/* Room for OUT_CHUNK more bytes of output, keeping [keep, end) (and the window before
 * the end, for a point). */
static int make_room(Inflater *z, uint64_t keep, char *err, size_t errlen)
{
    const uint64_t end = z->out_start + z->out_len, window = end > WINDOW ? end - WINDOW : 0;
    if (keep > window) keep = window; /* the window stays, for a point */
    if (keep < z->out_start) keep = z->out_start;
    if (z->out_cap - z->out_len >= OUT_CHUNK) return 0;
    if (keep > z->out_start) {
        const size_t drop = (size_t)(keep - z->out_start);
        memmove(z->out, z->out + drop, z->out_len - drop);
        z->out_start = keep, z->out_len -= drop;
    }
    if (z->out_cap - z->out_len >= OUT_CHUNK) return 0;
    const size_t cap = z->out_len + 2 * OUT_CHUNK;
    uint8_t *o = realloc(z->out, cap);
    if (!o) {
        snprintf(err, errlen, "%s (%s): out of memory for %zu bytes", z->name, kind(z), cap);
        return -ENOMEM;
    }
    z->out = o, z->out_cap = cap;
    return 0;
}

ssize_t inflater_at(Inflater *z, uint64_t off, size_t n, const uint8_t **p, char *err,
                    size_t errlen)
{
    int rc = 0;
    if (z->size != UINT64_MAX && off >= z->size) return 0;
    /* the point to start from: the last at or before off, when off is behind what is
     * here, or a point lies between the end of what is here and off */
    const Point *pt = NULL;
    for (size_t i = 0; i < z->npoints && z->points[i].out <= off; i++) pt = &z->points[i];
    const uint64_t end = z->out_start + z->out_len;
    if (!z->live || off < z->out_start || (end < off && pt && pt->out > end)) {
        rc = pt ? restore(z, pt, err, errlen) : start(z, err, errlen);
        if (rc) return rc;
    }
    while (!z->ended && z->out_start + z->out_len < off + n) {
        if ((rc = make_room(z, off, err, errlen)) || (rc = step(z, err, errlen))) {
            z->live = 0; /* start again at the next call */
            inflateEnd(&z->zs);
            return rc;
        }
    }
    const uint64_t have = z->out_start + z->out_len;
    if (have <= off) return 0;
    *p = z->out + (off - z->out_start);
    return (ssize_t)(have - off < n ? have - off : n);
}

Inflater *inflater_new(int gzip, uint64_t clen, InflaterRead read, void *ctx, const char *name)
{
    Inflater *z = calloc(1, sizeof *z);
    if (!z) return NULL;
    *z = (Inflater){.gzip = gzip, .clen = clen, .read = read, .ctx = ctx, .size = UINT64_MAX};
    z->name = strdup(name);
    z->in = malloc(INFLATER_IN);
    z->out = malloc(z->out_cap = 2 * OUT_CHUNK);
    if (!z->name || !z->in || !z->out) {
        inflater_free(z);
        return NULL;
    }
    return z;
}

uint64_t inflater_size(const Inflater *z)
{
    return z->size;
}

size_t inflater_points(const Inflater *z, size_t *bytes)
{
    *bytes = 0;
    for (size_t i = 0; i < z->npoints; i++) *bytes += z->points[i].wlen + sizeof(Point);
    return z->npoints;
}

void inflater_free(Inflater *z)
{
    if (!z) return;
    if (z->live) inflateEnd(&z->zs);
    for (size_t i = 0; i < z->npoints; i++) free(z->points[i].window);
    free(z->points);
    free(z->in);
    free(z->out);
    free(z->name);
    free(z);
}
