/* The TFRecord source (tfrecord.c, image.c, source.c): CRC-32C against its published
 * vectors (RFC 3720) and a header TensorFlow wrote; the tf.train.Example reader on
 * messages built here in the wire format, each way TensorFlow or another protobuf writer
 * may lay them out (packed and unpacked lists, any field order, unknown fields of every
 * wire type, a repeated key, a oneof changed midway) and malformed ones; and the files
 * in trainer/tests/reference/tfrecord/, written by TensorFlow (gen_tfrecord.py): the
 * trainer reads the examples tf.data read, in its order (SHA-256 per example; PNG, raw
 * and float bit-exact, JPEG within 1 of TensorFlow's decode), and refuses bad records
 * naming the file, the record's offset and the feature. End-to-end: test-tfrecord-data.sh. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <cmocka.h>
#include <zlib.h>

#include "inflater.h"
#include "source.h"
#include "tfrecord.h"
#include "util.h"

#define REF "trainer/tests/reference/tfrecord/"

static char dir[64];

static int setup(void **s)
{
    (void)s;
    strcpy(dir, "/tmp/kt-test-tfrecord-XXXXXX");
    return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **s)
{
    (void)s;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    return system(cmd);
}

/* ------------------------------------------------------------ a protobuf writer */

typedef struct {
    uint8_t b[4096];
    size_t n;
} Buf;

static void put_varint(Buf *m, uint64_t v)
{
    do {
        m->b[m->n++] = (uint8_t)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
        v >>= 7;
    } while (v);
}

static void put_tag(Buf *m, uint32_t field, int type)
{
    put_varint(m, (uint64_t)field << 3 | (uint64_t)type);
}

static void put_bytes(Buf *m, uint32_t field, const void *p, size_t n)
{
    put_tag(m, field, 2);
    put_varint(m, n);
    memcpy(m->b + m->n, p, n);
    m->n += n;
}

static void put_msg(Buf *m, uint32_t field, const Buf *sub)
{
    put_bytes(m, field, sub->b, sub->n);
}

/* Unknown fields of every wire type, as a newer writer's would be. */
static void put_unknown(Buf *m)
{
    put_tag(m, 9, 0);
    put_varint(m, 300);
    put_tag(m, 10, 1);
    memcpy(m->b + m->n, "\1\2\3\4\5\6\7\10", 8), m->n += 8;
    put_bytes(m, 11, "xyz", 3);
    put_tag(m, 12, 5);
    memcpy(m->b + m->n, "\1\2\3\4", 4), m->n += 4;
}

/* A map entry; value_first puts the value before the key. */
static void put_entry(Buf *features, const char *key, const Buf *feature, int value_first)
{
    Buf e = {.n = 0};
    if (value_first) put_msg(&e, 2, feature);
    put_bytes(&e, 1, key, strlen(key));
    if (!value_first) put_msg(&e, 2, feature);
    put_unknown(&e);
    put_msg(features, 1, &e);
}

static void example_of(Buf *ex, const Buf *features)
{
    ex->n = 0;
    put_unknown(ex);
    put_msg(ex, 1, features);
}

/* ------------------------------------------------------------ CRC-32C */

static void test_crc32c(void **state)
{
    (void)state;
    uint8_t zeros[32] = {0}, ones[32], inc[32];
    memset(ones, 0xff, sizeof ones);
    for (int i = 0; i < 32; i++) inc[i] = (uint8_t)i;
    assert_int_equal(tfrecord_crc32c("123456789", 9), 0xe3069283u);
    assert_int_equal(tfrecord_crc32c(zeros, 32), 0x8a9136aau);
    assert_int_equal(tfrecord_crc32c(ones, 32), 0x62a8ab43u);
    assert_int_equal(tfrecord_crc32c(inc, 32), 0x46dd794eu);
    assert_int_equal(tfrecord_crc32c("", 0), 0);
    /* The mask, on a length header TensorFlow wrote. */
    uint8_t head[12];
    FILE *f = fopen(REF "float.tfrecord", "rb");
    assert_non_null(f);
    assert_int_equal(fread(head, 1, 12, f), 12);
    fclose(f);
    uint32_t want = (uint32_t)head[8] | (uint32_t)head[9] << 8 | (uint32_t)head[10] << 16 |
                    (uint32_t)head[11] << 24;
    assert_int_equal(tfrecord_masked_crc(head, 8), want);
}

/* ------------------------------------------------------------ the Example reader */

static const char *const names[] = {"image", "label", "w"};

static void parse(const Buf *ex, TfrFeature out[3])
{
    char err[256] = "";
    int rc = tfrecord_parse_example(ex->b, ex->n, names, 3, out, err, sizeof err);
    if (rc) print_message("# %s\n", err);
    assert_int_equal(rc, 0);
}

static void test_example_layouts(void **state)
{
    (void)state;
    Buf bl = {.n = 0}, il = {.n = 0}, fl = {.n = 0}, f_img = {.n = 0}, f_lab = {.n = 0},
        f_w = {.n = 0}, feats = {.n = 0}, ex;
    /* image: a bytes_list of two values, with an unknown field between them */
    put_bytes(&bl, 1, "abc", 3);
    put_unknown(&bl);
    put_bytes(&bl, 1, "", 0);
    put_msg(&f_img, 1, &bl);
    /* label: an int64_list, unpacked then packed, a negative value (ten bytes) */
    put_tag(&il, 1, 0);
    put_varint(&il, 7);
    Buf packed = {.n = 0};
    put_varint(&packed, (uint64_t)-2);
    put_varint(&packed, 300);
    put_bytes(&il, 1, packed.b, packed.n);
    put_unknown(&f_lab);
    put_msg(&f_lab, 3, &il);
    /* w: a float_list, packed then unpacked */
    float v[3] = {1.5f, -2.0f, 0.25f};
    put_bytes(&fl, 1, v, 8);
    put_tag(&fl, 1, 5);
    memcpy(fl.b + fl.n, &v[2], 4), fl.n += 4;
    put_msg(&f_w, 2, &fl);
    put_unknown(&feats);
    put_entry(&feats, "w", &f_w, 1);
    put_entry(&feats, "other", &f_img, 0);
    put_entry(&feats, "label", &f_lab, 1);
    put_entry(&feats, "image", &f_img, 0);
    example_of(&ex, &feats);

    TfrFeature out[3];
    parse(&ex, out);
    assert_int_equal(out[0].kind, TFR_BYTES_LIST);
    assert_int_equal(out[0].count, 2);
    const uint8_t *p;
    size_t n;
    tfrecord_bytes(&out[0], 0, &p, &n);
    assert_int_equal(n, 3);
    assert_memory_equal(p, "abc", 3);
    tfrecord_bytes(&out[0], 1, &p, &n);
    assert_int_equal(n, 0);
    assert_int_equal(out[1].kind, TFR_INT64_LIST);
    assert_int_equal(out[1].count, 3);
    int64_t iv[3];
    tfrecord_int64s(&out[1], iv);
    assert_int_equal(iv[0], 7);
    assert_int_equal(iv[1], -2);
    assert_int_equal(iv[2], 300);
    assert_int_equal(out[2].kind, TFR_FLOAT_LIST);
    assert_int_equal(out[2].count, 3);
    float fv[3];
    tfrecord_floats(&out[2], fv);
    assert_memory_equal(fv, v, sizeof v);

    /* A key given twice: the last entry wins. A Feature whose oneof changes midway:
     * its last kind, with only the values after the change. Two Example.features
     * fields merge. */
    Buf f2 = {.n = 0}, il2 = {.n = 0}, feats2 = {.n = 0};
    put_msg(&f2, 1, &bl);
    put_tag(&il2, 1, 0);
    put_varint(&il2, 4);
    put_msg(&f2, 3, &il2);
    put_msg(&f2, 3, &il2);
    put_entry(&feats2, "label", &f2, 0);
    Buf ex2 = ex;
    put_msg(&ex2, 1, &feats2);
    parse(&ex2, out);
    assert_int_equal(out[0].kind, TFR_BYTES_LIST);
    assert_int_equal(out[1].kind, TFR_INT64_LIST);
    assert_int_equal(out[1].count, 2);
    tfrecord_int64s(&out[1], iv);
    assert_int_equal(iv[0], 4);
    assert_int_equal(iv[1], 4);

    /* Missing: no such key; and an empty Example. */
    Buf empty = {.n = 0};
    parse(&empty, out);
    assert_int_equal(out[0].kind, TFR_MISSING);
    assert_int_equal(out[2].kind, TFR_MISSING);
}

static void expect_malformed(const uint8_t *p, size_t n, const char *needle)
{
    TfrFeature out[3];
    char err[256] = "";
    assert_int_equal(tfrecord_parse_example(p, n, names, 3, out, err, sizeof err), -EINVAL);
    if (!strstr(err, needle)) print_message("# '%s' lacks '%s'\n", err, needle);
    assert_non_null(strstr(err, needle));
}

static void test_example_malformed(void **state)
{
    (void)state;
    expect_malformed((const uint8_t *)"\x0a\x05\x01", 3, "past the end");
    expect_malformed((const uint8_t *)"\x08\xff\xff", 3, "truncated or overlong varint");
    expect_malformed((const uint8_t *)"\x0b\x0c", 2, "group");
    expect_malformed((const uint8_t *)"\x00\x01", 2, "field number of 0");
    expect_malformed((const uint8_t *)"\x08\x01", 2, "Example.features is not a message");
    /* A packed float_list of 5 bytes, under the wanted key. */
    Buf fl = {.n = 0}, f = {.n = 0}, feats = {.n = 0}, ex;
    put_bytes(&fl, 1, "12345", 5);
    put_msg(&f, 2, &fl);
    put_entry(&feats, "image", &f, 0);
    example_of(&ex, &feats);
    expect_malformed(ex.b, ex.n, "not a multiple of 4");
    /* The same under a key nobody asked for is not looked into. */
    feats.n = 0;
    put_entry(&feats, "unwanted", &f, 0);
    example_of(&ex, &feats);
    TfrFeature out[3];
    char err[256];
    assert_int_equal(tfrecord_parse_example(ex.b, ex.n, names, 3, out, err, sizeof err), 0);
}

/* ------------------------------------------------------------ TensorFlow's files */

static cJSON *manifest(void)
{
    static char text[65536];
    FILE *f = fopen(REF "manifest.json", "rb");
    assert_non_null(f);
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = '\0';
    cJSON *m = cJSON_Parse(text);
    assert_non_null(m);
    return m;
}

/* Example i of s as the source holds it (uint8 or float32 bytes) into out: read through
 * source_read_example with PIXEL_RAW, whose floats are the values themselves. */
static void example_bytes(const Source *s, size_t i, uint8_t *out)
{
    const size_t n = source_example_size(s);
    float *x = malloc(n * sizeof *x);
    int32_t y;
    char err[512] = "";
    int rc = source_read_example(s, i, PIXEL_RAW, x, &y, err, sizeof err);
    if (rc) print_message("# example %zu: %s\n", i, err);
    assert_int_equal(rc, 0);
    assert_int_equal(y, s->labels[i]);
    if (s->type == SOURCE_F32) memcpy(out, x, n * sizeof *x);
    else
        for (size_t k = 0; k < n; k++) out[k] = (uint8_t)x[k];
    free(x);
}

/* Opens spec and checks it against the manifest's entry key: count, shape, labels, and
 * each example's SHA-256 (when hashes). */
static void check_source(const cJSON *m, const char *key, const char *spec, const SourceOptions *o,
                         Source *s, int hashes)
{
    char err[512] = "";
    int rc = source_open(s, spec, SOURCE_TRAIN, 10, o, err, sizeof err);
    if (rc) print_message("# %s: %s\n", spec, err);
    assert_int_equal(rc, 0);
    const cJSON *e = cJSON_GetObjectItem(m, key);
    const cJSON *labels = cJSON_GetObjectItem(e, "labels"), *sha = cJSON_GetObjectItem(e, "sha256");
    const cJSON *shape = cJSON_GetObjectItem(e, "shape");
    assert_int_equal(s->count, cJSON_GetArraySize(labels));
    assert_int_equal(s->h, cJSON_GetArrayItem(shape, 0)->valueint);
    assert_int_equal(s->w, cJSON_GetArrayItem(shape, 1)->valueint);
    assert_int_equal(s->c, cJSON_GetArrayItem(shape, 2)->valueint);
    assert_string_equal(source_type_name(s->type), cJSON_GetObjectItem(e, "dtype")->valuestring);
    const size_t size = source_example_size(s) * (s->type == SOURCE_F32 ? 4 : 1);
    uint8_t *bytes = malloc(size);
    for (size_t i = 0; i < s->count; i++) {
        assert_int_equal(s->labels[i], cJSON_GetArrayItem(labels, (int)i)->valueint);
        if (!hashes) continue;
        char hex[65];
        example_bytes(s, i, bytes);
        util_sha256_hex(bytes, size, hex);
        assert_string_equal(hex, cJSON_GetArrayItem(sha, (int)i)->valuestring);
    }
    free(bytes);
}

static void test_tensorflow_files(void **state)
{
    (void)state;
    cJSON *m = manifest();
    Source s;
    /* Three shards, uncompressed, GZIP and ZLIB, recognised by content. */
    check_source(m, "fmnist", "tfrecord:" REF "fmnist-*-of-00003", NULL, &s, 1);
    source_free(&s);
    SourceOptions raw = {
        .image_feature = "pixels", .label_feature = "class", .image_shape = {4, 5, 3}};
    check_source(m, "raw", "tfrecord:" REF "raw.tfrecord", &raw, &s, 1);
    source_free(&s);
    SourceOptions fl = {
        .image_feature = "image", .label_feature = "label", .image_shape = {3, 3, 2}};
    check_source(m, "float", "tfrecord:" REF "float.tfrecord", &fl, &s, 1);
    source_free(&s);
    /* JPEG: against TensorFlow's own decode, within 1 per value. */
    static const char *const jpegs[] = {"rgb-jpeg", "gray-jpeg"};
    for (int j = 0; j < 2; j++) {
        char spec[256], u8[256];
        snprintf(spec, sizeof spec, "tfrecord:" REF "%s.tfrecord", jpegs[j]);
        snprintf(u8, sizeof u8, REF "%s.u8", jpegs[j]);
        check_source(m, jpegs[j], spec, NULL, &s, 0);
        const size_t size = source_example_size(&s), n = s.count * size;
        uint8_t *tf = malloc(n), *ours = malloc(n);
        FILE *f = fopen(u8, "rb");
        assert_non_null(f);
        assert_int_equal(fread(tf, 1, n, f), n);
        fclose(f);
        for (size_t i = 0; i < s.count; i++) example_bytes(&s, i, ours + i * size);
        int worst = 0;
        for (size_t i = 0; i < n; i++) {
            int d = abs((int)ours[i] - (int)tf[i]);
            worst = d > worst ? d : worst;
        }
        print_message("# %s: largest difference from TensorFlow's decode %d\n", jpegs[j], worst);
        assert_in_range(worst, 0, 1);
        free(tf);
        free(ours);
        source_free(&s);
    }
    /* Patterns in the order given, each one's matches by name. */
    char err[512];
    assert_int_equal(
        source_open(&s, "tfrecord:" REF "fmnist-00002-of-00003," REF "fmnist-0000[01]-of-00003",
                    SOURCE_TRAIN, 10, NULL, err, sizeof err),
        0);
    const cJSON *labels = cJSON_GetObjectItem(cJSON_GetObjectItem(m, "fmnist"), "labels");
    assert_int_equal(s.count, 48);
    for (int i = 0; i < 48; i++)
        assert_int_equal(s.labels[i], cJSON_GetArrayItem(labels, (i + 32) % 48)->valueint);
    source_free(&s);
    cJSON_Delete(m);
}

/* ------------------------------------------------------------ bad input */

static const char *path_of(const char *name)
{
    static char path[256];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return path;
}

static uint8_t *read_ref(const char *name, size_t *n)
{
    static uint8_t buf[65536];
    FILE *f = fopen(name, "rb");
    assert_non_null(f);
    *n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    return buf;
}

static void write_file(const char *name, const void *p, size_t n)
{
    FILE *f = fopen(path_of(name), "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(p, 1, n, f), n);
    fclose(f);
}

/* A TFRecord file of the given records, framed as TensorFlow frames them. */
static void write_records(const char *name, const Buf *recs, int count)
{
    static uint8_t out[16384];
    size_t n = 0;
    for (int i = 0; i < count; i++) {
        uint64_t len = recs[i].n;
        for (int k = 0; k < 8; k++) out[n + (size_t)k] = (uint8_t)(len >> (8 * k));
        uint32_t c = tfrecord_masked_crc(out + n, 8);
        memcpy(out + n + 8, &c, 4);
        memcpy(out + n + 12, recs[i].b, recs[i].n);
        c = tfrecord_masked_crc(recs[i].b, recs[i].n);
        memcpy(out + n + 12 + len, &c, 4);
        n += 16 + len;
    }
    write_file(name, out, n);
}

static void expect_refused(const char *spec, const SourceOptions *o, int k, const char *needle)
{
    Source s;
    char err[1024] = "";
    int rc = source_open(&s, spec, SOURCE_TRAIN, k, o, err, sizeof err);
    if (rc == 0 || !strstr(err, needle))
        print_message("# rc %d, '%s' lacks '%s'\n", rc, err, needle);
    assert_int_not_equal(rc, 0);
    assert_non_null(strstr(err, needle));
    assert_null(s.images);
}

static Buf example(const char *image_key, const Buf *image, const char *label_key, int64_t label)
{
    Buf il = {.n = 0}, fl = {.n = 0}, feats = {.n = 0}, ex;
    put_tag(&il, 1, 0);
    put_varint(&il, (uint64_t)label);
    put_msg(&fl, 3, &il);
    put_entry(&feats, image_key, image, 0);
    put_entry(&feats, label_key, &fl, 0);
    example_of(&ex, &feats);
    return ex;
}

static void test_bad_records(void **state)
{
    (void)state;
    char spec[512];
    size_t n;
    uint8_t *f = read_ref(REF "raw.tfrecord", &n);
    const SourceOptions raw = {
        .image_feature = "pixels", .label_feature = "class", .image_shape = {4, 5, 3}};
    /* Each record of raw.tfrecord is 132 bytes long (16 of framing). */
    const size_t rec = 132;
    assert_int_equal(n, 10 * rec);
    snprintf(spec, sizeof spec, "tfrecord:%s", path_of("bad"));
    f[3 * rec + 40] ^= 1;
    write_file("bad", f, n);
    expect_refused(spec, &raw, 10, "/bad: record at byte 396: corrupt record: the data's masked");
    f[3 * rec + 40] ^= 1;
    f[2 * rec + 2] ^= 0x10;
    write_file("bad", f, n);
    expect_refused(spec, &raw, 10, "/bad: record at byte 264: corrupt record: the length's");
    f[2 * rec + 2] ^= 0x10;
    write_file("bad", f, n - 1);
    expect_refused(spec, &raw, 10, "/bad: record at byte 1188: truncated record: 119 bytes");
    write_file("bad", f, n - rec + 5);
    expect_refused(spec, &raw, 10, "/bad: record at byte 1188: truncated record: 5 bytes");
    write_file("bad", f, n);
    expect_refused(spec, &raw, 7,
                   "/bad: record at byte 0: feature 'class': label 9 of example 0 "
                   "(expected in [0, 7)");
    const SourceOptions other = {
        .image_feature = "image", .label_feature = "class", .image_shape = {4, 5, 3}};
    expect_refused(spec, &other, 10, "/bad: record at byte 0: feature 'image': missing");
    const SourceOptions mistyped = {
        .image_feature = "pixels", .label_feature = "note", .image_shape = {4, 5, 3}};
    expect_refused(spec, &mistyped, 10,
                   "feature 'note': a float_list of 2 values (expected an int64_list of 1");
    const SourceOptions shape = {
        .image_feature = "pixels", .label_feature = "class", .image_shape = {4, 5, 2}};
    expect_refused(spec, &shape, 10, "a bytes_list of 60 values, but --image-shape 4,5,2 makes 40");
    expect_refused(spec, NULL, 10, "feature 'image': missing");

    /* PNG: a corrupt one, and one of another shape than the first. */
    uint8_t *png = read_ref(REF "fmnist-00000-of-00003", &n);
    const uint8_t *at = memmem(png, n, "\x89PNG", 4);
    assert_non_null(at);
    Buf img = {.n = 0}, bl = {.n = 0};
    const uint8_t *iend = memmem(at, n - (size_t)(at - png), "IEND", 4);
    assert_non_null(iend);
    const size_t png_len = (size_t)(iend - at) + 8;
    put_bytes(&bl, 1, at, png_len);
    put_msg(&img, 1, &bl);
    Buf recs[2] = {example("image", &img, "label", 1), example("image", &img, "label", 2)};
    write_records("png", recs, 2);
    snprintf(spec, sizeof spec, "tfrecord:%s", path_of("png"));
    Source s;
    char err[512];
    assert_int_equal(source_open(&s, spec, SOURCE_TRAIN, 10, NULL, err, sizeof err), 0);
    assert_int_equal(s.count, 2);
    source_free(&s);
    bl.n = 0, img.n = 0;
    uint8_t bad[4096];
    memcpy(bad, at, png_len);
    bad[png_len - 20] ^= 0xff; /* in IDAT: its CRC no longer matches */
    put_bytes(&bl, 1, bad, png_len);
    put_msg(&img, 1, &bl);
    recs[1] = example("image", &img, "label", 2);
    write_records("png", recs, 2);
    expect_refused(spec, NULL, 10, "/png: record at byte ");
    expect_refused(spec, NULL, 10, ": feature 'image': corrupt PNG (libspng: ");
    snprintf(spec, sizeof spec, "tfrecord:" REF "fmnist-00000-of-00003," REF "rgb-jpeg.tfrecord");
    expect_refused(spec, NULL, 10,
                   "rgb-jpeg.tfrecord: record at byte 0: feature 'image': a 20x24x3 uint8 "
                   "image, but the first example's (" REF
                   "fmnist-00000-of-00003, record at byte 0) is 28x28x1 uint8");
    /* A GZIP file cut short, and one whose compressed data is damaged. */
    uint8_t *gz = read_ref(REF "fmnist-00001-of-00003", &n);
    write_file("gz", gz, n - 100);
    snprintf(spec, sizeof spec, "tfrecord:%s", path_of("gz"));
    expect_refused(spec, NULL, 10, "/gz (GZIP): the compressed data ends early (a truncated file)");
    gz[n / 2] ^= 0xff;
    write_file("gz", gz, n);
    /* inflated as it is read: the damage shows in the record it falls in, before the
     * member's CRC at its end */
    expect_refused(spec, NULL, 10,
                   "/gz: record at byte 4184 of the uncompressed GZIP data: corrupt record: the "
                   "data's masked CRC-32C");
    gz[n / 2] ^= 0xff;
    write_file("gz", gz, n);
    assert_int_equal(source_open(&s, spec, SOURCE_TRAIN, 10, NULL, err, sizeof err), 0);
    assert_int_equal(s.count, 16);
    source_free(&s);
    /* Patterns that match nothing, and files that hold no records. */
    snprintf(spec, sizeof spec, "tfrecord:" REF "fmnist-*," REF "nothing-*");
    expect_refused(spec, NULL, 10, "tfrecord: '" REF "nothing-*' matches no file");
    write_file("empty", "", 0);
    snprintf(spec, sizeof spec, "tfrecord:%s", path_of("empty"));
    expect_refused(spec, NULL, 10, "no records in its 1 files");
    /* Syntax. */
    expect_refused("tfrecord:", NULL, 10, "expected idx:DIR");
    expect_refused("tfrecord:a,,b", NULL, 10, "expected idx:DIR");
    expect_refused("tfrecord:a,", NULL, 10, "expected idx:DIR");
}

/* Reads example i of s, expecting an error that contains needle. */
static void expect_unreadable(const Source *s, size_t i, const char *needle)
{
    float x[60];
    int32_t y;
    char err[1024] = "";
    int rc = source_read_example(s, i, PIXEL_RAW, x, &y, err, sizeof err);
    if (rc == 0 || !strstr(err, needle))
        print_message("# rc %d, '%s' lacks '%s'\n", rc, err, needle);
    assert_int_not_equal(rc, 0);
    assert_non_null(strstr(err, needle));
}

/* An uncompressed file is read again by pread when an example is wanted: a file
 * changed or cut short since the source was opened is an error naming the file and the
 * record's offset, never other bytes taken for the example. A GZIP file is held in
 * memory, so it is read whole at open and no longer needed after. */
static void test_changed_after_open(void **state)
{
    (void)state;
    size_t n;
    uint8_t *f = read_ref(REF "raw.tfrecord", &n);
    const SourceOptions raw = {
        .image_feature = "pixels", .label_feature = "class", .image_shape = {4, 5, 3}};
    const size_t rec = 132; /* each record of raw.tfrecord, 16 of framing */
    char spec[512], err[512] = "";
    snprintf(spec, sizeof spec, "tfrecord:%s", path_of("live"));
    write_file("live", f, n);
    Source s;
    assert_int_equal(source_open(&s, spec, SOURCE_TRAIN, 10, &raw, err, sizeof err), 0);
    assert_null(s.images);
    uint8_t ex[60];
    example_bytes(&s, 9, ex);
    f[3 * rec + 40] ^= 1;
    write_file("live", f, n);
    expect_unreadable(&s, 3,
                      "/live: record at byte 396: the file changed since the trainer opened it "
                      "(corrupt record: the data's masked CRC-32C");
    f[3 * rec + 40] ^= 1;
    uint8_t swapped[2 * 132];
    memcpy(swapped, f + rec, rec);
    memcpy(swapped + rec, f, rec);
    memcpy(f, swapped, 2 * rec);
    write_file("live", f, n);
    expect_unreadable(&s, 0,
                      "/live: record at byte 0: the file changed since the trainer opened "
                      "it (label 8 where it had 9)");
    write_file("live", f, n - 1);
    expect_unreadable(&s, 9,
                      "/live: record at byte 1188: the file changed since the trainer "
                      "opened it (131 of its 132 bytes are left)");
    example_bytes(&s, 5, ex); /* the records before the cut are as they were */
    source_free(&s);

    uint8_t *gz = read_ref(REF "fmnist-00001-of-00003", &n);
    write_file("held.gz", gz, n);
    snprintf(spec, sizeof spec, "tfrecord:%s", path_of("held.gz"));
    assert_int_equal(source_open(&s, spec, SOURCE_TRAIN, 10, NULL, err, sizeof err), 0);
    assert_int_equal(unlink(path_of("held.gz")), 0);
    uint8_t img[784];
    for (size_t i = 0; i < s.count; i++) example_bytes(&s, i, img);
    source_free(&s);
}

/* data compressed as GZIP (two members, split at half: gzip -c a b > c's kind) or ZLIB
 * (one stream) into a malloc'd buffer; *n its length. */
static uint8_t *deflated(const uint8_t *data, size_t len, int gzip, size_t *n)
{
    size_t cap = len + len / 10 + 4096, used = 0;
    uint8_t *out = malloc(cap);
    assert_non_null(out);
    const size_t parts = gzip ? 2 : 1;
    for (size_t part = 0; part < parts; part++) {
        const size_t from = len * part / parts, to = len * (part + 1) / parts;
        z_stream z;
        memset(&z, 0, sizeof z);
        assert_int_equal(deflateInit2(&z, 6, Z_DEFLATED, gzip ? 16 + MAX_WBITS : MAX_WBITS, 8,
                                      Z_DEFAULT_STRATEGY),
                         Z_OK);
        z.next_out = out + used, z.avail_out = (uInt)(cap - used);
        /* a block every 64 KiB of input, as data that does not repeat gets (this data
         * repeats: left alone, deflate makes blocks of megabytes) */
        for (size_t at = from; at < to; at += 65536) {
            const size_t k = to - at < 65536 ? to - at : 65536;
            z.next_in = (uint8_t *)(uintptr_t)(data + at), z.avail_in = (uInt)k;
            assert_int_equal(deflate(&z, at + k < to ? Z_BLOCK : Z_FINISH),
                             at + k < to ? Z_OK : Z_STREAM_END);
        }
        used = cap - z.avail_out;
        deflateEnd(&z);
    }
    *n = used;
    return out;
}

/* The compressed bytes of test_compressed_stream's inflater: a buffer. */
typedef struct {
    const uint8_t *p;
    size_t n;
} Mem;

static ssize_t mem_read(void *ctx, uint8_t *buf, size_t n, uint64_t off, char *err, size_t errlen)
{
    (void)err, (void)errlen;
    const Mem *m = ctx;
    if (off >= m->n) return 0;
    const size_t k = m->n - off < n ? m->n - (size_t)off : n;
    memcpy(buf, m->p + off, k);
    return (ssize_t)k;
}

/* A GZIP or ZLIB file past the cache is streamed: inflated at open in bounded memory,
 * then each record read again from an access point (one every 2 MiB of output), in any
 * order, the same bytes as the uncompressed file's; and a member whose CRC does not
 * match the data is refused at open. */
static void test_compressed_stream(void **state)
{
    (void)state;
    size_t n;
    const uint8_t *one = read_ref(REF "raw.tfrecord", &n);
    const size_t copies = 4000, len = copies * n; /* 5.3 MB: 2 points past the start */
    uint8_t *plain = malloc(len);
    assert_non_null(plain);
    for (size_t i = 0; i < copies; i++) memcpy(plain + i * n, one, n);
    write_file("big.raw", plain, len);
    const SourceOptions raw = {.image_feature = "pixels",
                               .label_feature = "class",
                               .image_shape = {4, 5, 3},
                               .cache_bytes = 0};
    char spec[512], err[512] = "";
    Source ref, s;
    snprintf(spec, sizeof spec, "tfrecord:%s", path_of("big.raw"));
    assert_int_equal(source_open(&ref, spec, SOURCE_TRAIN, 10, &raw, err, sizeof err), 0);
    for (int gzip = 1; gzip >= 0; gzip--) {
        size_t zn;
        uint8_t *z = deflated(plain, len, gzip, &zn);
        const char *name = gzip ? "big.gz" : "big.zz";
        write_file(name, z, zn);
        snprintf(spec, sizeof spec, "tfrecord:%s", path_of(name));
        int rc = source_open(&s, spec, SOURCE_TRAIN, 10, &raw, err, sizeof err);
        if (rc) print_message("# %s\n", err);
        assert_int_equal(rc, 0);
        assert_null(s.images);
        assert_int_equal(s.count, ref.count);
        uint8_t a[60], b[60];
        /* forward, far back, far ahead, the last, the first */
        uint64_t rng = 7;
        for (int k = 0; k < 120; k++) {
            size_t i = k < 40    ? (size_t)k * 7
                       : k < 110 ? (size_t)util_rand_below(&rng, s.count)
                       : k < 115 ? s.count - 1 - (size_t)(k - 110)
                                 : (size_t)(k - 115);
            example_bytes(&s, i, a);
            example_bytes(&ref, i, b);
            assert_memory_equal(a, b, sizeof a);
        }
        source_free(&s);
        /* the inflater itself: a point every 2 MiB of output, and any bytes from them */
        Mem m = {z, zn};
        Inflater *in = inflater_new(gzip, zn, mem_read, &m, name);
        const uint8_t *p;
        assert_int_equal(inflater_at(in, len - 10, 10, &p, err, sizeof err), 10);
        assert_memory_equal(p, plain + len - 10, 10);
        assert_int_equal(inflater_at(in, len, 1, &p, err, sizeof err), 0);
        assert_int_equal(inflater_size(in), len);
        size_t bytes, points = inflater_points(in, &bytes);
        /* at the first block boundary INFLATER_SPAN past the last */
        assert_int_equal(points, len / INFLATER_SPAN);
        assert_in_range(bytes, points * (32 << 10), points * (33 << 10));
        for (int k = 0; k < 60; k++) {
            const uint64_t off = util_rand_below(&rng, len), want = 1 + (off * 31) % 40000;
            const ssize_t got = inflater_at(in, off, want, &p, err, sizeof err);
            assert_int_equal(got, off + want <= len ? want : len - off);
            assert_memory_equal(p, plain + off, (size_t)got);
        }
        assert_int_equal(inflater_at(in, len, 1, &p, err, sizeof err), 0);
        inflater_free(in);
        /* the last member's CRC-32 (its trailer's first 4 bytes), or the Adler-32 */
        z[zn - (gzip ? 8 : 4)] ^= 0xff;
        write_file(name, z, zn);
        expect_refused(spec, &raw, 10,
                       gzip ? "(GZIP): incorrect data check, at compressed byte"
                            : "(ZLIB): incorrect data check, at compressed byte");
        free(z);
    }
    source_free(&ref);
    free(plain);
}

/* The cache rule: a source whose examples, decoded, fit cache_bytes is held in memory
 * (no index, no open file), one byte more is streamed, 0 always streams; held and
 * streamed give the same examples bit for bit (PNG, uint8 bytes, a float_list). */
static void test_cache_or_stream(void **state)
{
    (void)state;
    static const struct {
        const char *spec;
        SourceOptions o;
        size_t bytes; /* of the examples decoded */
    } cases[] = {
        {"tfrecord:" REF "fmnist-*-of-00003",
         {.image_feature = "image", .label_feature = "label"},
         48 * 784},
        {"tfrecord:" REF "raw.tfrecord",
         {.image_feature = "pixels", .label_feature = "class", .image_shape = {4, 5, 3}},
         10 * 60},
        {"tfrecord:" REF "float.tfrecord",
         {.image_feature = "image", .label_feature = "label", .image_shape = {3, 3, 2}},
         6 * 18 * sizeof(float)},
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        char err[512] = "";
        Source streamed, held, over;
        SourceOptions o = cases[c].o;
        assert_int_equal(
            source_open(&streamed, cases[c].spec, SOURCE_TRAIN, 10, &o, err, sizeof err), 0);
        assert_non_null(streamed.records);
        assert_null(streamed.images);
        const size_t n = source_example_size(&streamed);
        const size_t bytes = cases[c].bytes;
        assert_int_equal(streamed.count * n * (streamed.type == SOURCE_F32 ? 4 : 1), bytes);
        o.cache_bytes = bytes;
        assert_int_equal(source_open(&held, cases[c].spec, SOURCE_TRAIN, 10, &o, err, sizeof err),
                         0);
        assert_null(held.records);
        assert_non_null(held.images);
        o.cache_bytes = bytes - 1;
        assert_int_equal(source_open(&over, cases[c].spec, SOURCE_TRAIN, 10, &o, err, sizeof err),
                         0);
        assert_non_null(over.records);
        assert_null(over.images);
        assert_int_equal(held.count, streamed.count);
        assert_int_equal(held.type, streamed.type);
        float *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b);
        for (size_t i = 0; i < streamed.count; i++) {
            int32_t ya, yb;
            assert_int_equal(source_read_example(&streamed, i, PIXEL_UNIT, a, &ya, err, sizeof err),
                             0);
            assert_int_equal(source_read_example(&held, i, PIXEL_UNIT, b, &yb, err, sizeof err), 0);
            assert_int_equal(ya, yb);
            assert_memory_equal(a, b, n * sizeof *a);
        }
        free(a);
        free(b);
        source_free(&streamed);
        source_free(&held);
        source_free(&over);
    }
}

/* File sharding: worker i of N reads files i, i + N, ... of the source's, in name order;
 * fewer files than workers is refused naming both counts. */
static void test_file_shards(void **state)
{
    (void)state;
    cJSON *m = manifest();
    const cJSON *labels = cJSON_GetObjectItem(cJSON_GetObjectItem(m, "fmnist"), "labels");
    /* the three shards hold the manifest's examples 0-15, 16-31 and 32-47 */
    static const struct {
        int shard, shards, count, first[3];
    } cases[] = {{0, 2, 32, {0, 32}}, {1, 2, 16, {16}}, {2, 3, 16, {32}}, {0, 1, 48, {0, 16, 32}}};
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        SourceOptions o = source_default_options;
        o.file_shard = cases[c].shard, o.file_shards = cases[c].shards;
        Source s;
        char err[512] = "";
        assert_int_equal(source_open(&s, "tfrecord:" REF "fmnist-*-of-00003", SOURCE_TRAIN, 10, &o,
                                     err, sizeof err),
                         0);
        assert_int_equal(s.count, cases[c].count);
        for (int i = 0; i < cases[c].count; i++)
            assert_int_equal(s.labels[i],
                             cJSON_GetArrayItem(labels, cases[c].first[i / 16] + i % 16)->valueint);
        source_free(&s);
    }
    SourceOptions o = source_default_options;
    o.file_shard = 3, o.file_shards = 4;
    expect_refused("tfrecord:" REF "fmnist-*-of-00003", &o, 10,
                   "fmnist-*-of-00003: 3 files for 4 workers (--shard-policy file gives each "
                   "worker whole files");
    o.file_shard = 1, o.file_shards = 2;
    expect_refused("idx:/data/fashion-mnist", &o, 10,
                   "idx:/data/fashion-mnist: 1 file for 2 workers (--shard-policy file gives each "
                   "worker whole files, and an idx source is one");
    expect_refused("npz:/data/mnist.npz", &o, 10, "1 file for 2 workers");
    cJSON_Delete(m);
}

static void test_shape_option(void **state)
{
    (void)state;
    int shape[3];
    assert_int_equal(source_parse_shape("28,28,1", shape), 0);
    assert_int_equal(shape[0], 28);
    assert_int_equal(shape[2], 1);
    assert_int_equal(source_parse_shape("28,28", shape), -EINVAL);
    assert_int_equal(source_parse_shape("28,28,0", shape), -EINVAL);
    assert_int_equal(source_parse_shape("28,28,1,", shape), -EINVAL);
    assert_int_equal(source_parse_shape("28,x,1", shape), -EINVAL);
    assert_int_equal(source_parse_shape("65536,1,1", shape), -EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_crc32c),
        cmocka_unit_test(test_example_layouts),
        cmocka_unit_test(test_example_malformed),
        cmocka_unit_test(test_tensorflow_files),
        cmocka_unit_test(test_bad_records),
        cmocka_unit_test(test_changed_after_open),
        cmocka_unit_test(test_cache_or_stream),
        cmocka_unit_test(test_compressed_stream),
        cmocka_unit_test(test_shape_option),
        cmocka_unit_test(test_file_shards),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
