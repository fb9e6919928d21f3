/* TensorBoard event files: CRC-32C against published vectors, the TFRecord layout, a
 * written file read back by an independent reader (framing, CRCs and the Event fields),
 * one flipped byte caught by the CRC, and a second writer in the same directory adding
 * a file without touching the first. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "assert_close.h"
#include "tbevents.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct {
    char dir[64];
    char sub[96]; /* dir/logs: tbev_open creates it */
} Fixture;

static int setup(void **state)
{
    Fixture *f = calloc(1, sizeof *f);
    snprintf(f->dir, sizeof f->dir, "/tmp/kt-test-tbevents-XXXXXX");
    if (!mkdtemp(f->dir)) return -1;
    snprintf(f->sub, sizeof f->sub, "%s/logs", f->dir);
    *state = f;
    return 0;
}

static void remove_files(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        char p[512];
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        unlink(p);
    }
    if (d) closedir(d);
    rmdir(dir);
}

static int teardown(void **state)
{
    Fixture *f = *state;
    remove_files(f->sub);
    remove_files(f->dir);
    free(f);
    return 0;
}

/* ---------------------------------------------------------------------------------- */
/* an independent reader: TFRecords, then the Event fields the writer uses */

#define MAX_VALUES 8

typedef struct {
    double wall_time;
    int64_t step;
    char file_version[32];
    int nvalues;
    char tags[MAX_VALUES][64];
    float values[MAX_VALUES];
} Event;

/* Bitwise CRC-32C, written separately from the table of tbevents.c. */
static uint32_t crc32c_bitwise(const uint8_t *p, size_t n)
{
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1)));
    }
    return ~c;
}

static uint32_t masked(uint32_t c)
{
    return ((c >> 15) | (c << 17)) + 0xA282EAD8u;
}

static uint64_t le(const uint8_t *p, int bytes)
{
    uint64_t v = 0;
    for (int i = bytes - 1; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

static int varint(const uint8_t **p, const uint8_t *end, uint64_t *v)
{
    *v = 0;
    for (int shift = 0; *p < end && shift < 64; shift += 7) {
        uint8_t b = *(*p)++;
        *v |= (uint64_t)(b & 0x7F) << shift;
        if (!(b & 0x80)) return 0;
    }
    return -1;
}

static int parse_value(const uint8_t *p, const uint8_t *end, Event *ev)
{
    int i = ev->nvalues++;
    if (i >= MAX_VALUES) return -1;
    while (p < end) {
        uint64_t key, len;
        if (varint(&p, end, &key)) return -1;
        if (key == (1 << 3 | 2)) {
            if (varint(&p, end, &len) || len >= sizeof ev->tags[i] || len > (uint64_t)(end - p))
                return -1;
            memcpy(ev->tags[i], p, len);
            ev->tags[i][len] = '\0';
            p += len;
        } else if (key == (2 << 3 | 5) && end - p >= 4) {
            uint32_t bits = (uint32_t)le(p, 4);
            memcpy(&ev->values[i], &bits, 4);
            p += 4;
        } else {
            return -1;
        }
    }
    return 0;
}

static int parse_event(const uint8_t *p, const uint8_t *end, Event *ev)
{
    memset(ev, 0, sizeof *ev);
    while (p < end) {
        uint64_t key, v, len;
        if (varint(&p, end, &key)) return -1;
        if (key == (1 << 3 | 1) && end - p >= 8) {
            uint64_t bits = le(p, 8);
            memcpy(&ev->wall_time, &bits, 8);
            p += 8;
        } else if (key == (2 << 3 | 0)) {
            if (varint(&p, end, &v)) return -1;
            ev->step = (int64_t)v;
        } else if (key == (3 << 3 | 2)) {
            if (varint(&p, end, &len) || len >= sizeof ev->file_version ||
                len > (uint64_t)(end - p))
                return -1;
            memcpy(ev->file_version, p, len);
            p += len;
        } else if (key == (5 << 3 | 2)) {
            if (varint(&p, end, &len) || len > (uint64_t)(end - p)) return -1;
            const uint8_t *s = p, *send = p + len;
            while (s < send) {
                uint64_t vkey, vlen;
                if (varint(&s, send, &vkey) || vkey != (1 << 3 | 2) || varint(&s, send, &vlen) ||
                    vlen > (uint64_t)(send - s) || parse_value(s, s + vlen, ev))
                    return -1;
                s += vlen;
            }
            p = send;
        } else {
            return -1;
        }
    }
    return 0;
}

/* Reads every record of path into evs (up to max); returns how many, or -EBADMSG on a
 * CRC mismatch, -EPROTO on a malformed event, -EIO on a truncated record. */
static int read_events(const char *path, Event *evs, int max)
{
    FILE *fp = fopen(path, "rb");
    assert_non_null(fp);
    uint8_t *buf = malloc(1 << 20);
    size_t n = fread(buf, 1, 1 << 20, fp);
    fclose(fp);
    int count = 0, rc = 0;
    size_t off = 0;
    while (off < n && rc == 0) {
        if (n - off < 12) {
            rc = -EIO;
            break;
        }
        uint64_t len = le(buf + off, 8);
        if ((uint32_t)le(buf + off + 8, 4) != masked(crc32c_bitwise(buf + off, 8))) {
            rc = -EBADMSG;
            break;
        }
        if (len > n - off - 12 || n - off - 12 - len < 4) {
            rc = -EIO;
            break;
        }
        const uint8_t *data = buf + off + 12;
        if ((uint32_t)le(data + len, 4) != masked(crc32c_bitwise(data, len))) {
            rc = -EBADMSG;
            break;
        }
        if (count >= max || parse_event(data, data + len, &evs[count])) {
            rc = -EPROTO;
            break;
        }
        count++;
        off += 12 + len + 4;
    }
    free(buf);
    return rc ? rc : count;
}

/* The event files in dir: their paths in out (up to max); returns how many. */
static int list_event_files(const char *dir, char out[][512], int max)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    int n = 0;
    assert_non_null(d);
    while ((e = readdir(d)))
        if (strstr(e->d_name, "tfevents") && n < max)
            snprintf(out[n++], 512, "%s/%s", dir, e->d_name);
    closedir(d);
    return n;
}

/* ---------------------------------------------------------------------------------- */

static void test_crc32c_vectors(void **state)
{
    (void)state;
    uint8_t zeros[32] = {0}, ones[32], inc[32], dec[32];
    memset(ones, 0xFF, sizeof ones);
    for (int i = 0; i < 32; i++) inc[i] = (uint8_t)i, dec[i] = (uint8_t)(31 - i);
    /* RFC 3720 (iSCSI), appendix B.4, and the usual check value */
    assert_int_equal(tbev_crc32c(0, "123456789", 9), 0xE3069283u);
    assert_int_equal(tbev_crc32c(0, zeros, 32), 0x8A9136AAu);
    assert_int_equal(tbev_crc32c(0, ones, 32), 0x62A8AB43u);
    assert_int_equal(tbev_crc32c(0, inc, 32), 0x46DD794Eu);
    assert_int_equal(tbev_crc32c(0, dec, 32), 0x113FDB5Cu);
    assert_int_equal(tbev_crc32c(0, "", 0), 0u);
    /* continued in pieces == all at once */
    assert_int_equal(tbev_crc32c(tbev_crc32c(0, inc, 13), inc + 13, 19), 0x46DD794Eu);
    assert_int_equal(tbev_mask_crc(0), 0xA282EAD8u);
    assert_int_equal(tbev_mask_crc(0x00008000u), 0x00000001u + 0xA282EAD8u);
    assert_int_equal(tbev_mask_crc(0x00000001u), 0x00020000u + 0xA282EAD8u);
}

static void test_frame_layout(void **state)
{
    (void)state;
    const char data[] = "hello, events";
    size_t n = sizeof data - 1;
    uint8_t out[64];
    assert_int_equal(tbev_frame_record(out, data, n), n + 16);
    assert_int_equal(le(out, 8), n);
    assert_int_equal((uint32_t)le(out + 8, 4), masked(crc32c_bitwise(out, 8)));
    assert_memory_equal(out + 12, data, n);
    assert_int_equal((uint32_t)le(out + 12 + n, 4), masked(crc32c_bitwise(out + 12, n)));
}

static void test_round_trip(void **state)
{
    Fixture *f = *state;
    TbWriter *w;
    char err[512];
    assert_int_equal(tbev_open(&w, f->sub, err, sizeof err), 0);
    const TbScalar step[] = {
        {"step/loss", 2.25}, {"step/accuracy", 0.125}, {"step/learning_rate", 0.001}};
    tbev_scalars(w, 1, step, 3);
    tbev_scalars(w, 300000000000LL, step, 1); /* a step past 32 bits: multi-byte varint */
    const TbScalar ep[] = {{"epoch/loss", -1.5e-3}};
    tbev_scalars(w, 2, ep, 1);
    assert_int_equal(tbev_close(w, err, sizeof err), 0);

    char files[4][512];
    assert_int_equal(list_event_files(f->sub, files, 4), 1);
    assert_non_null(strstr(files[0], "/events.out.tfevents."));
    Event evs[8];
    assert_int_equal(read_events(files[0], evs, 8), 4);
    assert_string_equal(evs[0].file_version, "brain.Event:2");
    assert_int_equal(evs[0].nvalues, 0);
    assert_true(evs[0].wall_time > 1.6e9); /* seconds since the epoch, not a monotonic clock */
    assert_int_equal(evs[1].step, 1);
    assert_int_equal(evs[1].nvalues, 3);
    assert_string_equal(evs[1].tags[0], "step/loss");
    assert_string_equal(evs[1].tags[2], "step/learning_rate");
    assert_close(evs[1].values[0], 2.25f, 0);
    assert_close(evs[1].values[1], 0.125f, 0);
    assert_close(evs[1].values[2], 0.001f, 0);
    assert_true(evs[1].wall_time >= evs[0].wall_time);
    assert_int_equal(evs[2].step, 300000000000LL);
    assert_int_equal(evs[3].step, 2);
    assert_string_equal(evs[3].tags[0], "epoch/loss");
    assert_close(evs[3].values[0], -1.5e-3f, 0);
}

static void test_flipped_byte_detected(void **state)
{
    Fixture *f = *state;
    TbWriter *w;
    char err[512], files[2][512];
    assert_int_equal(tbev_open(&w, f->sub, err, sizeof err), 0);
    const TbScalar v[] = {{"step/loss", 0.5}};
    tbev_scalars(w, 7, v, 1);
    assert_int_equal(tbev_close(w, err, sizeof err), 0);
    assert_int_equal(list_event_files(f->sub, files, 2), 1);
    Event evs[4];
    assert_int_equal(read_events(files[0], evs, 4), 2);

    struct stat st;
    assert_int_equal(stat(files[0], &st), 0);
    /* one byte of the last record's data (the float), then one of the first length */
    long offsets[] = {(long)st.st_size - 6, 0};
    for (int i = 0; i < 2; i++) {
        FILE *fp = fopen(files[0], "r+b");
        assert_non_null(fp);
        fseek(fp, offsets[i], SEEK_SET);
        int c = fgetc(fp);
        fseek(fp, offsets[i], SEEK_SET);
        fputc(c ^ 0x10, fp);
        fclose(fp);
        assert_int_equal(read_events(files[0], evs, 4), -EBADMSG);
        fp = fopen(files[0], "r+b");
        fseek(fp, offsets[i], SEEK_SET);
        fputc(c, fp);
        fclose(fp);
        assert_int_equal(read_events(files[0], evs, 4), 2);
    }
}

static void test_second_writer_adds_a_file(void **state)
{
    Fixture *f = *state;
    TbWriter *w1, *w2;
    char err[512], files[4][512];
    const TbScalar v[] = {{"step/loss", 1.0}};
    assert_int_equal(tbev_open(&w1, f->sub, err, sizeof err), 0);
    tbev_scalars(w1, 1, v, 1);
    assert_int_equal(tbev_close(w1, err, sizeof err), 0);
    assert_int_equal(list_event_files(f->sub, files, 4), 1);
    char first[512];
    strcpy(first, files[0]);
    struct stat before, after;
    assert_int_equal(stat(first, &before), 0);

    /* a resumed run in the same second, same process: a new name, the old file intact */
    assert_int_equal(tbev_open(&w2, f->sub, err, sizeof err), 0);
    assert_string_not_equal(tbev_path(w2), first);
    tbev_scalars(w2, 2, v, 1);
    assert_int_equal(tbev_flush(w2, err, sizeof err), 0);
    assert_int_equal(tbev_close(w2, err, sizeof err), 0);
    assert_int_equal(list_event_files(f->sub, files, 4), 2);
    assert_int_equal(stat(first, &after), 0);
    assert_int_equal(before.st_size, after.st_size);
    Event evs[4];
    assert_int_equal(read_events(first, evs, 4), 2);
    assert_int_equal(evs[1].step, 1);
}

static void test_bad_directory(void **state)
{
    Fixture *f = *state;
    char path[160], err[512];
    snprintf(path, sizeof path, "%s/file", f->dir);
    FILE *fp = fopen(path, "w");
    assert_non_null(fp);
    fclose(fp);
    strcat(path, "/logs"); /* under a regular file */
    TbWriter *w = NULL;
    assert_int_equal(tbev_open(&w, path, err, sizeof err), -ENOTDIR);
    assert_null(w);
    assert_non_null(strstr(err, "--tensorboard-dir"));
    assert_non_null(strstr(err, path));
    assert_int_equal(tbev_close(NULL, err, sizeof err), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_crc32c_vectors),
        cmocka_unit_test(test_frame_layout),
        cmocka_unit_test_setup_teardown(test_round_trip, setup, teardown),
        cmocka_unit_test_setup_teardown(test_flipped_byte_detected, setup, teardown),
        cmocka_unit_test_setup_teardown(test_second_writer_adds_a_file, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_directory, setup, teardown),
    };
    return cmocka_run_group_tests_name("tbevents", tests, NULL, NULL);
}
