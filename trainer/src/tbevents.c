#include "tbevents.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "util.h"

struct TbWriter {
    FILE *f;
    char *path;
    int error;       /* first write error (positive errno), reported by flush/close */
    uint8_t *buf;    /* scratch: the encoded event, then the framed record */
    size_t len, cap;
};

/* ---------------------------------------------------------------------------------- */
/* CRC-32C */

/* Debian bookworm packages no C library for CRC-32C (there is no libcrc32c, and zlib's
 * crc32 uses the other polynomial), so this table-driven loop is the one piece of the
 * format written by hand. */
static uint32_t crc_table[256];
static int crc_table_ready;

static void crc_table_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        crc_table[i] = c;
    }
    crc_table_ready = 1;
}

uint32_t tbev_crc32c(uint32_t crc, const void *buf, size_t n)
{
    const uint8_t *p = buf;
    if (!crc_table_ready) crc_table_init();
    crc = ~crc;
    while (n--) crc = crc_table[(crc ^ *p++) & 0xFF] ^ (crc >> 8);
    return ~crc;
}

uint32_t tbev_mask_crc(uint32_t crc)
{
    return ((crc >> 15) | (crc << 17)) + 0xA282EAD8u;
}

/* ---------------------------------------------------------------------------------- */
/* TFRecord framing and protobuf encoding */

static void put_le32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static void put_le64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

size_t tbev_frame_record(uint8_t *out, const void *data, size_t n)
{
    put_le64(out, (uint64_t)n);
    put_le32(out + 8, tbev_mask_crc(tbev_crc32c(0, out, 8)));
    memcpy(out + 12, data, n);
    put_le32(out + 12 + n, tbev_mask_crc(tbev_crc32c(0, data, n)));
    return n + 16;
}

static void reserve(TbWriter *w, size_t more)
{
    if (w->len + more <= w->cap) return;
    size_t cap = w->cap ? w->cap : 256;
    while (cap < w->len + more) cap *= 2;
    uint8_t *b = xmalloc(cap);
    if (w->len) memcpy(b, w->buf, w->len);
    free(w->buf);
    w->buf = b;
    w->cap = cap;
}

static void put_bytes(TbWriter *w, const void *p, size_t n)
{
    reserve(w, n);
    memcpy(w->buf + w->len, p, n);
    w->len += n;
}

static void put_varint(TbWriter *w, uint64_t v)
{
    uint8_t b[10];
    size_t n = 0;
    do {
        b[n++] = (uint8_t)((v & 0x7F) | (v > 0x7F ? 0x80 : 0));
        v >>= 7;
    } while (v);
    put_bytes(w, b, n);
}

static size_t varint_size(uint64_t v)
{
    size_t n = 1;
    while (v > 0x7F) v >>= 7, n++;
    return n;
}

/* Field keys: (field number << 3) | wire type (0 varint, 1 64-bit, 2 bytes, 5 32-bit). */
#define KEY(field, wire) ((uint8_t)((field) << 3 | (wire)))

static void put_double_field(TbWriter *w, int field, double d)
{
    uint8_t b[9];
    uint64_t bits;
    memcpy(&bits, &d, sizeof bits);
    b[0] = KEY(field, 1);
    put_le64(b + 1, bits);
    put_bytes(w, b, sizeof b);
}

static void put_string_field(TbWriter *w, int field, const char *s, size_t n)
{
    uint8_t key = KEY(field, 2);
    put_bytes(w, &key, 1);
    put_varint(w, n);
    put_bytes(w, s, n);
}

/* Summary.Value{tag, simple_value}: its encoded size, then the encoding. */
static size_t value_size(const TbScalar *v)
{
    size_t tl = strlen(v->tag);
    return 1 + varint_size(tl) + tl + 5;
}

static void put_value(TbWriter *w, const TbScalar *v)
{
    uint8_t b[5];
    put_string_field(w, 1, v->tag, strlen(v->tag));
    float f = (float)v->value;
    uint32_t bits;
    memcpy(&bits, &f, sizeof bits);
    b[0] = KEY(2, 5);
    put_le32(b + 1, bits);
    put_bytes(w, b, sizeof b);
}

static double wall_time(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Frames the event in w->buf[0..len) and writes the record. */
static void write_event(TbWriter *w)
{
    size_t n = w->len;
    reserve(w, n + 16);
    size_t framed = tbev_frame_record(w->buf + n, w->buf, n);
    if (!w->error && fwrite(w->buf + n, 1, framed, w->f) != framed) w->error = errno ? errno : EIO;
    w->len = 0;
}

/* ---------------------------------------------------------------------------------- */
/* the writer */

int tbev_open(TbWriter **out, const char *dir, char *err, size_t errlen)
{
    int rc = util_mkdir_p(dir);
    if (rc) {
        snprintf(err, errlen, "--tensorboard-dir %s: cannot create the directory: %s", dir,
                 strerror(-rc));
        return rc;
    }
    char host[256] = "localhost";
    if (gethostname(host, sizeof host) < 0 || !host[0]) strcpy(host, "localhost");
    host[sizeof host - 1] = '\0';
    long secs = (long)wall_time();
    size_t plen = strlen(dir) + strlen(host) + 96;
    char *path = xmalloc(plen);
    int fd = -1;
    /* Exclusive creation: a second writer in the same second and process (a test)
     * takes the next suffix rather than truncating the first file. */
    for (int seq = 0; seq < 1000 && fd < 0; seq++) {
        snprintf(path, plen, "%s/events.out.tfevents.%ld.%s.%ld.%d.v2", dir, secs, host,
                 (long)getpid(), seq);
        fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        if (fd < 0 && errno != EEXIST) break;
    }
    FILE *f = fd >= 0 ? fdopen(fd, "wb") : NULL;
    if (!f) {
        rc = -errno;
        snprintf(err, errlen, "--tensorboard-dir %s: cannot create %s: %s", dir, path,
                 strerror(errno));
        if (fd >= 0) close(fd);
        free(path);
        return rc;
    }
    TbWriter *w = xcalloc(1, sizeof *w);
    w->f = f;
    w->path = path;
    put_double_field(w, 1, wall_time());
    put_string_field(w, 3, "brain.Event:2", strlen("brain.Event:2"));
    write_event(w);
    *out = w;
    return 0;
}

const char *tbev_path(const TbWriter *w)
{
    return w->path;
}

void tbev_scalars(TbWriter *w, int64_t step, const TbScalar *v, size_t n)
{
    size_t summary = 0;
    for (size_t i = 0; i < n; i++)
        summary += 1 + varint_size(value_size(&v[i])) + value_size(&v[i]);
    uint8_t key;
    put_double_field(w, 1, wall_time());
    key = KEY(2, 0);
    put_bytes(w, &key, 1);
    put_varint(w, (uint64_t)step);
    key = KEY(5, 2);
    put_bytes(w, &key, 1);
    put_varint(w, summary);
    for (size_t i = 0; i < n; i++) {
        key = KEY(1, 2);
        put_bytes(w, &key, 1);
        put_varint(w, value_size(&v[i]));
        put_value(w, &v[i]);
    }
    write_event(w);
}

int tbev_flush(TbWriter *w, char *err, size_t errlen)
{
    if (!w->error && fflush(w->f) != 0) w->error = errno ? errno : EIO;
    if (w->error) {
        snprintf(err, errlen, "TensorBoard events %s: cannot write: %s", w->path,
                 strerror(w->error));
        return -w->error;
    }
    return 0;
}

int tbev_close(TbWriter *w, char *err, size_t errlen)
{
    if (!w) return 0;
    int rc = tbev_flush(w, err, errlen);
    if (fclose(w->f) != 0 && !rc) {
        rc = -(errno ? errno : EIO);
        snprintf(err, errlen, "TensorBoard events %s: cannot close: %s", w->path, strerror(-rc));
    }
    free(w->path);
    free(w->buf);
    free(w);
    return rc;
}
