/* The NumPy sources (npy.c, source.c) on .npy and .npz files the test writes as NumPy
 * would (the header NumPy's format module writes; the archive through libzip): good
 * arrays of each dtype and rank, the npz keys, and bad input, each refused naming the
 * file and what was expected: truncated header and data, trailing bytes, another dtype,
 * Fortran order, a malformed header, images and labels of different counts, labels out
 * of range, a missing key, a SOURCE of bad syntax. Real NumPy files: test-numpy-data.sh. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zip.h>

#include <cmocka.h>

#include "npy.h"
#include "source.h"

static char dir[64];

/* Under ASan, one allocation over 256 MiB kills the test: the reader must not trust a
 * header's shape before the data is there. */
const char *__asan_default_options(void);
const char *__asan_default_options(void)
{
    return "max_allocation_size_mb=256";
}

static int setup(void **s)
{
    (void)s;
    strcpy(dir, "/tmp/kt-test-npy-XXXXXX");
    return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **s)
{
    (void)s;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    return system(cmd);
}

static const char *path_of(const char *name)
{
    static char path[2][256];
    static int k;
    k ^= 1;
    snprintf(path[k], sizeof path[k], "%s/%s", dir, name);
    return path[k];
}

/* A .npy file's bytes as NumPy 1.0 writes them: magic, version, u16 header length, the
 * header dict `head` padded with spaces to a multiple of 64 bytes ending in a newline,
 * the data. *len gets the size; free the result. */
static uint8_t *npy_text_bytes(const char *head, const void *data, size_t n, size_t *len)
{
    int h = (int)strlen(head);
    size_t total_head = ((size_t)10 + (size_t)h + 1 + 63) / 64 * 64;
    size_t hlen = total_head - 10;
    uint8_t *buf = malloc(total_head + n);
    memcpy(buf, "\x93NUMPY\x01\x00", 8);
    buf[8] = (uint8_t)(hlen & 0xff), buf[9] = (uint8_t)(hlen >> 8);
    memset(buf + 10, ' ', hlen);
    memcpy(buf + 10, head, (size_t)h);
    buf[10 + hlen - 1] = '\n';
    if (n) memcpy(buf + total_head, data, n);
    *len = total_head + n;
    return buf;
}

static uint8_t *npy_bytes(const char *descr, const char *fortran, const char *shape,
                          const void *data, size_t n, size_t *len)
{
    char head[256];
    snprintf(head, sizeof head, "{'descr': '%s', 'fortran_order': %s, 'shape': %s, }", descr,
             fortran, shape);
    return npy_text_bytes(head, data, n, len);
}

static void write_file(const char *name, const void *buf, size_t n)
{
    FILE *f = fopen(path_of(name), "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(buf, 1, n, f), n);
    fclose(f);
}

static void write_npy(const char *name, const char *descr, const char *fortran, const char *shape,
                      const void *data, size_t n)
{
    size_t len;
    uint8_t *buf = npy_bytes(descr, fortran, shape, data, n, &len);
    write_file(name, buf, len);
    free(buf);
}

/* An archive of members KEY.npy, stored (compress 0) or deflated, as np.savez and
 * np.savez_compressed write them. */
typedef struct {
    const char *key, *descr, *shape;
    const void *data;
    size_t n;
} Member;

static void write_npz(const char *name, const Member *m, int count, int compress)
{
    unlink(path_of(name));
    int zerr;
    zip_t *z = zip_open(path_of(name), ZIP_CREATE | ZIP_TRUNCATE, &zerr);
    assert_non_null(z);
    for (int i = 0; i < count; i++) {
        size_t len;
        uint8_t *buf = npy_bytes(m[i].descr, "False", m[i].shape, m[i].data, m[i].n, &len);
        zip_source_t *src = zip_source_buffer(z, buf, len, 1);
        assert_non_null(src);
        char member[64];
        snprintf(member, sizeof member, "%s.npy", m[i].key);
        zip_int64_t idx = zip_file_add(z, member, src, 0);
        assert_true(idx >= 0);
        assert_int_equal(zip_set_file_compression(z, (zip_uint64_t)idx,
                                                  compress ? ZIP_CM_DEFLATE : ZIP_CM_STORE, 0),
                         0);
    }
    assert_int_equal(zip_close(z), 0);
}

static void expect_error(int rc, const char *err, const char *needle)
{
    print_message("# error: %s\n", err);
    assert_true(rc < 0);
    if (!strstr(err, needle)) fail_msg("expected \"%s\" in \"%s\"", needle, err);
}

static uint8_t img_u8[2 * 3 * 2];
static int64_t lab_i8[2] = {7, 2};

static void test_npy_uint8_images_int64_labels(void **s)
{
    (void)s;
    for (int i = 0; i < 12; i++) img_u8[i] = (uint8_t)(i * 20);
    write_npy("x.npy", "|u1", "False", "(2, 3, 2)", img_u8, sizeof img_u8);
    write_npy("y.npy", "<i8", "False", "(2,)", lab_i8, sizeof lab_i8);
    char spec[300], err[512] = "";
    snprintf(spec, sizeof spec, "npy:%s,%s", path_of("x.npy"), path_of("y.npy"));
    Source src;
    assert_int_equal(source_open(&src, spec, SOURCE_TRAIN, 10, NULL, err, sizeof err), 0);
    assert_int_equal(src.count, 2);
    assert_int_equal(src.h, 3);
    assert_int_equal(src.w, 2);
    assert_int_equal(src.c, 1);
    assert_int_equal(src.type, SOURCE_U8);
    float x[6];
    int32_t y;
    source_examples(&src, (const size_t[]){1}, 1, PIXEL_UNIT, x, &y);
    assert_int_equal(y, 2);
    assert_float_equal(x[5], (float)220 / 255.0f, 0);
    source_examples(&src, (const size_t[]){1}, 1, PIXEL_RAW, x, &y);
    assert_float_equal(x[5], 220.0f, 0);
    source_free(&src);
    source_free(&src); /* freeing twice (emptied) is a no-op */
}

/* N x H x W x C float32 and float64 (narrowed), labels int32 and uint8 of shape (N, 1). */
static void test_npy_float_channels(void **s)
{
    (void)s;
    float f[2 * 1 * 2 * 3];
    double d[12];
    for (int i = 0; i < 12; i++) f[i] = (float)i / 3.0f, d[i] = (double)i / 3.0;
    int32_t l4[2] = {0, 4};
    uint8_t l1[2] = {1, 3};
    write_npy("f4.npy", "<f4", "False", "(2, 1, 2, 3)", f, sizeof f);
    write_npy("f8.npy", "<f8", "False", "(2, 1, 2, 3)", d, sizeof d);
    write_npy("l4.npy", "<i4", "False", "(2,)", l4, sizeof l4);
    write_npy("l1.npy", "|u1", "False", "(2, 1)", l1, sizeof l1);
    const char *pairs[2][2] = {{"f4.npy", "l4.npy"}, {"f8.npy", "l1.npy"}};
    for (int k = 0; k < 2; k++) {
        char spec[300], err[512] = "";
        snprintf(spec, sizeof spec, "npy:%s,%s", path_of(pairs[k][0]), path_of(pairs[k][1]));
        Source src;
        assert_int_equal(source_open(&src, spec, SOURCE_TRAIN, 5, NULL, err, sizeof err), 0);
        assert_int_equal(src.h, 1);
        assert_int_equal(src.w, 2);
        assert_int_equal(src.c, 3);
        assert_int_equal(src.type, SOURCE_F32);
        float x[6];
        int32_t y;
        /* float32 passes unchanged */
        source_examples(&src, (const size_t[]){1}, 1, PIXEL_UNIT, x, &y);
        assert_int_equal(y, k ? 3 : 4);
        for (int j = 0; j < 6; j++) assert_float_equal(x[j], f[6 + j], 0);
        source_free(&src);
    }
}

/* Keys as keras.datasets writes them: x_train/y_train for training, x_test/y_test for
 * evaluation, or others from the query; stored and deflated members. */
static void test_npz_keys(void **s)
{
    (void)s;
    uint8_t test_img[3 * 3 * 2] = {0};
    int64_t test_lab[3] = {1, 1, 1};
    const Member m[] = {
        {"x_train", "|u1", "(2, 3, 2)", img_u8, sizeof img_u8},
        {"y_train", "<i8", "(2,)", lab_i8, sizeof lab_i8},
        {"x_test", "|u1", "(3, 3, 2)", test_img, sizeof test_img},
        {"y_test", "<i8", "(3,)", test_lab, sizeof test_lab},
    };
    for (int compress = 0; compress < 2; compress++) {
        write_npz("d.npz", m, 4, compress);
        char spec[300], err[512] = "";
        snprintf(spec, sizeof spec, "npz:%s", path_of("d.npz"));
        Source src;
        assert_int_equal(source_open(&src, spec, SOURCE_TRAIN, 10, NULL, err, sizeof err), 0);
        assert_int_equal(src.count, 2);
        assert_int_equal(src.labels[0], 7);
        assert_int_equal(((uint8_t *)src.images)[11], 220);
        source_free(&src);
        assert_int_equal(source_open(&src, spec, SOURCE_EVAL, 10, NULL, err, sizeof err), 0);
        assert_int_equal(src.count, 3);
        source_free(&src);
        snprintf(spec, sizeof spec, "npz:%s?x=x_test&y=y_test", path_of("d.npz"));
        assert_int_equal(source_open(&src, spec, SOURCE_TRAIN, 10, NULL, err, sizeof err), 0);
        assert_int_equal(src.count, 3);
        source_free(&src);
    }
    char spec[300], err[512];
    Source src;
    snprintf(spec, sizeof spec, "npz:%s?x=images&y=y_test", path_of("d.npz"));
    expect_error(source_open(&src, spec, SOURCE_TRAIN, 10, NULL, err, sizeof err), err,
                 "no array 'images' in the archive (it has: x_train, y_train, x_test, y_test)");
    snprintf(spec, sizeof spec, "npz:%s", path_of("x.npy"));
    expect_error(source_open(&src, spec, SOURCE_TRAIN, 10, NULL, err, sizeof err), err,
                 "cannot open as .npz");
}

static void test_bad_headers(void **s)
{
    (void)s;
    char err[512];
    NpyArray a;
    write_file("t.npy", "\x93NUMPY\x01\x00\x76", 9);
    expect_error(npy_read(path_of("t.npy"), &a, err, sizeof err), err, "truncated .npy header");
    write_file("t.npy", "\x93NUMPY\x01\x00\x76\x00{'descr'", 17);
    expect_error(npy_read(path_of("t.npy"), &a, err, sizeof err), err,
                 "truncated .npy header (expected 118 bytes of text)");
    write_file("t.npy", "PK\x03\x04", 4);
    expect_error(npy_read(path_of("t.npy"), &a, err, sizeof err), err, "not a .npy array");
    write_file("t.npy", "\x93NUMPY\x04\x00\x00\x00", 10);
    expect_error(npy_read(path_of("t.npy"), &a, err, sizeof err), err, "format version 4.0");
    write_npy("t.npy", "<f4", "True", "(2, 3)", NULL, 0);
    expect_error(npy_read(path_of("t.npy"), &a, err, sizeof err), err, "fortran_order is True");
    write_npy("t.npy", ">f4", "False", "(2, 3)", NULL, 0);
    expect_error(npy_read(path_of("t.npy"), &a, err, sizeof err), err, "dtype '>f4' (expected");
    write_npy("t.npy", "<f4", "Maybe", "(2, 3)", NULL, 0);
    expect_error(npy_read(path_of("t.npy"), &a, err, sizeof err), err, "malformed .npy header");
    write_npy("t.npy", "<f4", "False", "(2, x)", NULL, 0);
    expect_error(npy_read(path_of("t.npy"), &a, err, sizeof err), err, "malformed .npy header");
    size_t len;
    uint8_t *buf = npy_text_bytes(
        "{'descr': [('a', '<f4'), ('b', '<i8')], 'fortran_order': False, 'shape': (2,), }", NULL, 0,
        &len);
    write_file("t.npy", buf, len);
    free(buf);
    expect_error(npy_read(path_of("t.npy"), &a, err, sizeof err), err, "a structured dtype");
    write_npy("t.npy", "<f4-and-a-description-longer-than-any-dtype", "False", "(2,)", NULL, 0);
    expect_error(npy_read(path_of("t.npy"), &a, err, sizeof err), err, "malformed .npy header");
    assert_null(a.data);
}

/* Regression guard: a header announcing 60000 x 200 x 200 float64 (19 GB) over a few
 * bytes of data is reported as truncated without allocating what it claims. */
static void test_bad_data_lengths(void **s)
{
    (void)s;
    char err[512];
    NpyArray a;
    write_npy("t.npy", "|u1", "False", "(2, 3, 2)", img_u8, sizeof img_u8 - 1);
    expect_error(npy_read(path_of("t.npy"), &a, err, sizeof err), err,
                 "truncated array data: 11 of the 12 bytes");
    uint8_t more[13] = {0};
    write_npy("t.npy", "|u1", "False", "(2, 3, 2)", more, sizeof more);
    expect_error(npy_read(path_of("t.npy"), &a, err, sizeof err), err, "trailing bytes");
    write_npy("t.npy", "<f8", "False", "(60000, 200, 200)", more, sizeof more);
    expect_error(npy_read(path_of("t.npy"), &a, err, sizeof err), err,
                 "truncated array data: 13 of the 19200000000 bytes");
    assert_null(a.data);
}

static void test_bad_sources(void **s)
{
    (void)s;
    char spec[300], err[512];
    Source src;
    int64_t three[3] = {0, 1, 2}, neg[2] = {1, -1}, big[2] = {0, (int64_t)1 << 40};
    write_npy("x.npy", "|u1", "False", "(2, 3, 2)", img_u8, sizeof img_u8);
    write_npy("y3.npy", "<i8", "False", "(3,)", three, sizeof three);
    snprintf(spec, sizeof spec, "npy:%s,%s", path_of("x.npy"), path_of("y3.npy"));
    expect_error(source_open(&src, spec, SOURCE_TRAIN, 10, NULL, err, sizeof err), err,
                 "y3.npy: labels of shape (3,) for 2 images in");
    write_npy("yn.npy", "<i8", "False", "(2,)", neg, sizeof neg);
    snprintf(spec, sizeof spec, "npy:%s,%s", path_of("x.npy"), path_of("yn.npy"));
    expect_error(source_open(&src, spec, SOURCE_TRAIN, 10, NULL, err, sizeof err), err,
                 "yn.npy: label -1 of example 1 (expected in [0, 10)");
    write_npy("yb.npy", "<i8", "False", "(2,)", big, sizeof big);
    snprintf(spec, sizeof spec, "npy:%s,%s", path_of("x.npy"), path_of("yb.npy"));
    expect_error(source_open(&src, spec, SOURCE_TRAIN, 10, NULL, err, sizeof err), err,
                 "label 1099511627776 of example 1");
    snprintf(spec, sizeof spec, "npy:%s,%s", path_of("x.npy"), path_of("y.npy"));
    expect_error(source_open(&src, spec, SOURCE_TRAIN, 7, NULL, err, sizeof err), err,
                 "y.npy: label 7 of example 0 (expected in [0, 7)");
    /* labels where images go and images where labels go */
    snprintf(spec, sizeof spec, "npy:%s,%s", path_of("y.npy"), path_of("x.npy"));
    expect_error(source_open(&src, spec, SOURCE_TRAIN, 10, NULL, err, sizeof err), err,
                 "y.npy: images of dtype '<i8' (expected |u1, <f4 or <f8");
    float f[2] = {0, 1};
    write_npy("yf.npy", "<f4", "False", "(2,)", f, sizeof f);
    snprintf(spec, sizeof spec, "npy:%s,%s", path_of("x.npy"), path_of("yf.npy"));
    expect_error(source_open(&src, spec, SOURCE_TRAIN, 10, NULL, err, sizeof err), err,
                 "yf.npy: labels of dtype '<f4' (expected |u1, <i4 or <i8");
    write_npy("x2.npy", "|u1", "False", "(2, 6)", img_u8, sizeof img_u8);
    snprintf(spec, sizeof spec, "npy:%s,%s", path_of("x2.npy"), path_of("y.npy"));
    expect_error(source_open(&src, spec, SOURCE_TRAIN, 10, NULL, err, sizeof err), err,
                 "x2.npy: images of shape (2, 6) (expected N x H x W or N x H x W x C");
    snprintf(spec, sizeof spec, "npy:%s,%s", path_of("x.npy"), path_of("none.npy"));
    expect_error(source_open(&src, spec, SOURCE_TRAIN, 10, NULL, err, sizeof err), err,
                 "none.npy: cannot open: No such file or directory");
    assert_null(src.images);
    assert_null(src.labels);
}

static void test_spec_syntax(void **s)
{
    (void)s;
    char err[512], out[SOURCE_NAME_MAX];
    const char *good[] = {"idx:/d",
                          "npz:/a.npz",
                          "npz:/a.npz?x=i&y=l",
                          "npz:/a.npz?y=l",
                          "npy:/a,b.npy,/c.npy",
                          "tfrecord:/x",
                          "tfrecord:/a-*,/b/c-[0-9]"};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++)
        assert_int_equal(source_check_spec(good[i], err, sizeof err), 0);
    const char *bad[] = {"/data",        "idx:",     "tfrecord:",          "npy:/a.npy",
                         "npy:/a.npy,",  "npz:?x=a", "npz:/a.npz?x=a&x=b", "npz:/a.npz?z=a",
                         "npz:/a.npz?x="};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int rc = source_check_spec(bad[i], err, sizeof err);
        print_message("# %s: %s\n", bad[i], err);
        assert_int_equal(rc, -EINVAL);
    }
    assert_int_equal(source_eval_spec("npz:/a.npz?x=i&y=l", out, sizeof out), 0);
    assert_string_equal(out, "npz:/a.npz");
    assert_int_equal(source_eval_spec("idx:/d", out, sizeof out), 0);
    assert_string_equal(out, "idx:/d");
    assert_int_equal(source_eval_spec("npy:/a,/b", out, sizeof out), -ENOENT);
    assert_int_equal(source_eval_spec("tfrecord:/a", out, sizeof out), -ENOENT);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_npy_uint8_images_int64_labels),
        cmocka_unit_test(test_npy_float_channels),
        cmocka_unit_test(test_npz_keys),
        cmocka_unit_test(test_bad_headers),
        cmocka_unit_test(test_bad_data_lengths),
        cmocka_unit_test(test_bad_sources),
        cmocka_unit_test(test_spec_syntax),
    };
    return cmocka_run_group_tests_name("npy", tests, setup, teardown);
}
