/* The IDX reader on fixture files made at run time in a temporary directory: good files
 * (raw and gzip), truncated header and data, wrong magic, wrong dimensions, trailing
 * bytes, labels/images count mismatch, out-of-range labels. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include <cmocka.h>

#include "idx.h"

static char dir[64];

/* Under ASan, one allocation over 256 MiB kills the test: the reader must not trust a
 * header's sizes before the data is there (found by fuzzing, trainer/fuzz/fuzz-idx.c). */
const char *__asan_default_options(void);
const char *__asan_default_options(void)
{
    return "max_allocation_size_mb=256";
}

static void put_be32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24), p[1] = (uint8_t)(v >> 16), p[2] = (uint8_t)(v >> 8),
    p[3] = (uint8_t)v;
}

/* Writes an IDX file of unsigned bytes: header for dims, then `payload` bytes of data
 * (the value i % 7 at i), optionally gzip-compressed. magic3 is the ndims byte. */
static void write_idx(const char *name, int ndims, const uint32_t *dims, size_t payload, int gz,
                      uint8_t type)
{
    char path[256];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    size_t n = 4 + 4 * (size_t)ndims + payload;
    uint8_t *buf = malloc(n);
    buf[0] = 0, buf[1] = 0, buf[2] = type, buf[3] = (uint8_t)ndims;
    for (int i = 0; i < ndims; i++) put_be32(buf + 4 + 4 * i, dims[i]);
    for (size_t i = 0; i < payload; i++) buf[4 + 4 * ndims + i] = (uint8_t)(i % 7);
    if (gz) {
        gzFile f = gzopen(path, "wb");
        assert_non_null(f);
        assert_int_equal(gzwrite(f, buf, (unsigned)n), (int)n);
        gzclose(f);
    } else {
        FILE *f = fopen(path, "wb");
        assert_non_null(f);
        assert_int_equal(fwrite(buf, 1, n, f), n);
        fclose(f);
    }
    free(buf);
}

static void write_pair(uint32_t nimg, uint32_t nlab, int gz)
{
    uint32_t idims[3] = {nimg, 4, 3}, ldims[1] = {nlab};
    write_idx(gz ? "train-images-idx3-ubyte.gz" : "train-images-idx3-ubyte", 3, idims,
              (size_t)nimg * 12, gz, 0x08);
    write_idx(gz ? "train-labels-idx1-ubyte.gz" : "train-labels-idx1-ubyte", 1, ldims, nlab, gz,
              0x08);
}

static int setup(void **s)
{
    (void)s;
    strcpy(dir, "/tmp/kt-test-idx-XXXXXX");
    return mkdtemp(dir) ? 0 : -1;
}

static void clean(void)
{
    const char *names[] = {"train-images-idx3-ubyte", "train-labels-idx1-ubyte",
                           "train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz", "f"};
    char path[256];
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        unlink(path);
    }
}

static int teardown(void **s)
{
    (void)s;
    clean();
    return rmdir(dir);
}

static void expect_error(int rc, const char *err, const char *needle)
{
    print_message("# error: %s\n", err);
    assert_true(rc < 0);
    assert_non_null(strstr(err, needle));
}

static void test_good_raw_and_gzip(void **s)
{
    (void)s;
    for (int gz = 0; gz < 2; gz++) {
        clean();
        write_pair(5, 5, gz);
        Source ds;
        char err[512] = "";
        assert_int_equal(idx_open(&ds, dir, "train", err, sizeof err), 0);
        assert_int_equal(ds.count, 5);
        assert_int_equal(ds.h, 4);
        assert_int_equal(ds.w, 3);
        assert_int_equal(ds.c, 1);
        assert_int_equal(ds.type, SOURCE_U8);
        assert_int_equal(((uint8_t *)ds.images)[13], 13 % 7);
        assert_int_equal(ds.labels[4], 4);
        source_free(&ds);
        source_free(&ds); /* freeing twice (emptied) is a no-op */
    }
}

static void test_truncated_data(void **s)
{
    (void)s;
    clean();
    uint32_t dims[3] = {5, 4, 3};
    write_idx("f", 3, dims, 59, 1, 0x08);
    char path[256], err[512];
    snprintf(path, sizeof path, "%s/f", dir);
    uint8_t *data;
    uint32_t d[3];
    expect_error(idx_read(path, 3, &data, d, err, sizeof err), err, "truncated IDX data: 59 of 60");
    assert_null(data);
}

/* Regression (fuzz-idx): a 16-byte file whose header announces 60000x200x170 images
 * (2 GB) is reported as truncated without allocating what it claims. */
static void test_huge_header_short_file(void **s)
{
    (void)s;
    clean();
    uint32_t dims[3] = {60000, 200, 170};
    char path[256], err[512];
    snprintf(path, sizeof path, "%s/f", dir);
    uint8_t *data;
    uint32_t d[3];
    for (int gz = 0; gz < 2; gz++) {
        write_idx("f", 3, dims, 10, gz, 0x08);
        expect_error(idx_read(path, 3, &data, d, err, sizeof err), err,
                     "truncated IDX data: 10 of 2040000000");
        assert_null(data);
    }
}

static void test_truncated_header(void **s)
{
    (void)s;
    clean();
    char path[256], err[512];
    snprintf(path, sizeof path, "%s/f", dir);
    FILE *f = fopen(path, "wb");
    fwrite("\0\0\x08\x03\0\0", 1, 6, f);
    fclose(f);
    uint8_t *data;
    uint32_t d[3];
    expect_error(idx_read(path, 3, &data, d, err, sizeof err), err, "truncated IDX header");
}

static void test_wrong_magic(void **s)
{
    (void)s;
    clean();
    uint32_t dims[3] = {5, 4, 3};
    char path[256], err[512];
    snprintf(path, sizeof path, "%s/f", dir);
    uint8_t *data;
    uint32_t d[3];
    write_idx("f", 3, dims, 60, 0, 0x0D); /* float type */
    expect_error(idx_read(path, 3, &data, d, err, sizeof err), err, "bad IDX magic 00000d03");
    write_idx("f", 3, dims, 60, 0, 0x08);
    expect_error(idx_read(path, 1, &data, d, err, sizeof err), err,
                 "bad IDX magic"); /* 3 dims, 1 expected */
}

static void test_zero_dimension_and_trailing(void **s)
{
    (void)s;
    clean();
    char path[256], err[512];
    snprintf(path, sizeof path, "%s/f", dir);
    uint8_t *data;
    uint32_t d[3], zero[3] = {5, 0, 3}, dims[3] = {5, 4, 3};
    write_idx("f", 3, zero, 0, 0, 0x08);
    expect_error(idx_read(path, 3, &data, d, err, sizeof err), err, "dimension 1 is 0");
    write_idx("f", 3, dims, 61, 0, 0x08);
    expect_error(idx_read(path, 3, &data, d, err, sizeof err), err, "trailing bytes");
}

static void test_count_mismatch(void **s)
{
    (void)s;
    clean();
    write_pair(5, 4, 0);
    Source ds;
    char err[512];
    expect_error(idx_open(&ds, dir, "train", err, sizeof err), err, "4 labels for 5 images");
}

static void test_label_range_and_missing(void **s)
{
    (void)s;
    clean();
    write_pair(9, 9, 0); /* labels are i % 7: up to 6 */
    Source ds;
    char err[512], spec[300];
    snprintf(spec, sizeof spec, "idx:%s", dir);
    expect_error(source_open(&ds, spec, SOURCE_TRAIN, 5, NULL, err, sizeof err), err,
                 "label 5 of example 5");
    expect_error(source_open(&ds, spec, SOURCE_EVAL, 10, NULL, err, sizeof err), err,
                 "cannot open");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_good_raw_and_gzip),
        cmocka_unit_test(test_truncated_data),
        cmocka_unit_test(test_huge_header_short_file),
        cmocka_unit_test(test_truncated_header),
        cmocka_unit_test(test_wrong_magic),
        cmocka_unit_test(test_zero_dimension_and_trailing),
        cmocka_unit_test(test_count_mismatch),
        cmocka_unit_test(test_label_range_and_missing),
    };
    return cmocka_run_group_tests_name("idx", tests, setup, teardown);
}
