/* The watch stream parser fed the same events cut at every byte position and in
 * random chunk sizes: the events that come out are always the same. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "jsonx.h"
#include "watchparse.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct Seen {
    char log[8192];
    size_t len;
    int stop_after; /* return 1 after this many events; 0 never */
    int n;
} Seen;

static int record(void *ctx, const char *type, cJSON *obj)
{
    Seen *s = ctx;
    const char *name = jsonx_str(obj, "metadata.name");
    const char *rv = jsonx_str(obj, "metadata.resourceVersion");
    s->len += (size_t)snprintf(s->log + s->len, sizeof s->log - s->len, "%s %s %s\n", type,
                               name ? name : "-", rv ? rv : "-");
    s->n++;
    return s->stop_after && s->n >= s->stop_after ? 1 : 0;
}

static const char STREAM[] =
    "{\"type\":\"ADDED\",\"object\":{\"kind\":\"Pod\",\"metadata\":{\"name\":\"a\","
    "\"resourceVersion\":\"10\"},\"status\":{\"message\":\"multi\\nline \\u00e9 \xc3\xa9\"}}}\n"
    "{\"type\":\"MODIFIED\",\"object\":{\"metadata\":{\"name\":\"a\",\"resourceVersion\":\"11\"}}}"
    "\r\n"
    "\n"
    "this is not json\n"
    "{\"type\":\"BOOKMARK\",\"object\":{\"metadata\":{\"resourceVersion\":\"12\"}}}\n"
    "{\"type\":\"DELETED\",\"object\":{\"metadata\":{\"name\":\"b\",\"resourceVersion\":\"13\"}}}\n"
    "{\"type\":\"ERROR\",\"object\":{\"kind\":\"Status\",\"code\":410,\"reason\":\"Expired\"}}\n"
    "{\"type\":\"ADDED\",\"object\":{\"metadata\":{\"name\":\"partial\"";

static const char WANT[] = "ADDED a 10\nMODIFIED a 11\nBOOKMARK - 12\nDELETED b 13\nERROR - -\n";

static void test_whole_stream(void **state)
{
    (void)state;
    Seen s = {0};
    WatchParser p;
    watchparse_init(&p, record, &s);
    assert_int_equal(watchparse_feed(&p, STREAM, sizeof STREAM - 1), 0);
    assert_string_equal(s.log, WANT);
    assert_int_equal(p.bad_lines, 1);
    /* The partial last event waits for more bytes, then completes. */
    assert_int_equal(watchparse_feed(&p, ",\"resourceVersion\":\"14\"}}}\n", 27), 0);
    assert_string_equal(s.log + strlen(WANT), "ADDED partial 14\n");
    watchparse_free(&p);
}

static void test_split_at_every_byte(void **state)
{
    (void)state;
    size_t n = sizeof STREAM - 1;
    for (size_t cut1 = 0; cut1 <= n; cut1++) {
        for (size_t cut2 = cut1; cut2 <= n; cut2 += 7) {
            Seen s = {0};
            WatchParser p;
            watchparse_init(&p, record, &s);
            assert_int_equal(watchparse_feed(&p, STREAM, cut1), 0);
            assert_int_equal(watchparse_feed(&p, STREAM + cut1, cut2 - cut1), 0);
            assert_int_equal(watchparse_feed(&p, STREAM + cut2, n - cut2), 0);
            if (strcmp(s.log, WANT) != 0)
                fail_msg("cuts at %zu and %zu gave:\n%s", cut1, cut2, s.log);
            watchparse_free(&p);
        }
    }
}

static void test_random_chunks_and_one_byte_feeds(void **state)
{
    (void)state;
    uint64_t x = 88172645463325252ull;
    size_t n = sizeof STREAM - 1;
    for (int round = 0; round < 500; round++) {
        Seen s = {0};
        WatchParser p;
        watchparse_init(&p, record, &s);
        size_t off = 0;
        while (off < n) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            size_t k = round == 0 ? 1 : 1 + (size_t)(x % 40);
            if (k > n - off) k = n - off;
            assert_int_equal(watchparse_feed(&p, STREAM + off, k), 0);
            off += k;
        }
        assert_string_equal(s.log, WANT);
        watchparse_free(&p);
    }
}

static void test_callback_stops_and_reset_drops_partial(void **state)
{
    (void)state;
    Seen s = {.stop_after = 2};
    WatchParser p;
    watchparse_init(&p, record, &s);
    assert_int_equal(watchparse_feed(&p, STREAM, sizeof STREAM - 1), 1);
    assert_int_equal(s.n, 2);
    watchparse_reset(&p);
    s = (Seen){0};
    /* A cut mid-object followed by a fresh stream: the fragment is discarded. */
    assert_int_equal(watchparse_feed(&p, "{\"type\":\"ADDED\",\"obj", 19), 0);
    watchparse_reset(&p);
    assert_int_equal(watchparse_feed(&p, STREAM, 200), 0);
    assert_string_equal(s.log, "ADDED a 10\n");
    watchparse_free(&p);

    /* Over-long lines are dropped, and the stream goes on. */
    s = (Seen){0};
    watchparse_init(&p, record, &s);
    p.max_line = 64;
    char big[300];
    memset(big, 'x', sizeof big);
    assert_int_equal(watchparse_feed(&p, big, sizeof big), 0);
    assert_int_equal(watchparse_feed(&p, "\n", 1), 0);
    assert_int_equal(
        watchparse_feed(&p, "{\"type\":\"ADDED\",\"object\":{\"metadata\":{\"name\":\"z\"}}}\n",
                        52),
        0);
    assert_string_equal(s.log, "ADDED z -\n");
    assert_true(p.bad_lines >= 1);
    watchparse_free(&p);
}

/* Both callbacks' records (record's Seen first, so that it reads the same pointer). */
typedef struct Both {
    Seen seen;
    char skipped[512];
} Both;

static void record_skip(void *ctx, const char *line, size_t n, const char *why)
{
    Both *b = ctx;
    char type[16], name[64], rv[16];
    if (jsonx_text_str(line, n, "type", type, sizeof type)) snprintf(type, sizeof type, "-");
    if (jsonx_text_str(line, n, "object.metadata.name", name, sizeof name))
        snprintf(name, sizeof name, "-");
    if (jsonx_text_str(line, n, "object.metadata.resourceVersion", rv, sizeof rv))
        snprintf(rv, sizeof rv, "-");
    size_t len = strlen(b->skipped);
    snprintf(b->skipped + len, sizeof b->skipped - len, "%s %s %s: %s\n", type, name, rv, why);
}

/* An event whose object is nested deeper than cJSON reads, between two others: handed to
 * the skip callback (which names it from the text) and counted; the others come through.
 * A line that is not JSON is skipped the same way. */
static void test_unparsable_event_skipped(void **state)
{
    (void)state;
    size_t cap = 16 * 1024, len;
    char *stream = malloc(cap);
    assert_non_null(stream);
    len = (size_t)snprintf(stream, cap,
                           "{\"type\":\"ADDED\",\"object\":{\"metadata\":{\"name\":\"a\"}}}\n"
                           "{\"type\":\"MODIFIED\",\"object\":{\"metadata\":{\"name\":\"deep\","
                           "\"resourceVersion\":\"20\"},\"spec\":");
    for (int i = 0; i < 1001; i++)
        len += (size_t)snprintf(stream + len, cap - len, "{\"x\":");
    stream[len++] = '1';
    for (int i = 0; i < 1001; i++)
        stream[len++] = '}';
    len += (size_t)snprintf(stream + len, cap - len,
                            "}}\nnot json {\n"
                            "{\"type\":\"ADDED\",\"object\":{\"metadata\":{\"name\":\"b\"}}}\n");
    Both b = {0};
    WatchParser p;
    watchparse_init(&p, record, &b);
    p.skip = record_skip;
    assert_int_equal(watchparse_feed(&p, stream, len), 0);
    assert_string_equal(b.seen.log, "ADDED a -\nADDED b -\n");
    assert_string_equal(b.skipped, "MODIFIED deep 20: nested deeper than 1000 levels\n"
                                   "- - -: not valid JSON\n");
    assert_int_equal(p.bad_lines, 2);
    watchparse_free(&p);
    free(stream);
}

/* Keeps the object of each event, printed (unformatted), one per line. */
static int keep(void *ctx, const char *type, cJSON *obj)
{
    (void)type;
    Seen *s = ctx;
    char *t = cJSON_PrintUnformatted(obj);
    s->len += (size_t)snprintf(s->log + s->len, sizeof s->log - s->len, "%s\n", t ? t : "?");
    free(t);
    s->n++;
    return 0;
}

/* The object's metadata.managedFields is cut from the text before parsing, wherever it
 * lies in the metadata (with the comma beside it) and whatever it holds; the same name
 * inside a string, or under spec, is kept; and a stream cut at every byte gives the same. */
static void test_managed_fields_cut(void **state)
{
    (void)state;
    static const char in[] =
        "{\"type\":\"MODIFIED\",\"object\":{\"metadata\":{\"name\":\"a\",\"managedFields\":"
        "[{\"manager\":\"op\",\"fieldsV1\":{\"f:status\":{\"f:x\":{}}},\"s\":\"]}\\\"[{\"}],"
        "\"resourceVersion\":\"5\"},\"spec\":{\"managedFields\":[1]}}}\n"
        "{\"type\":\"MODIFIED\",\"object\":{\"metadata\":{\"managedFields\":[],\"name\":\"b\"}}}\n"
        "{\"type\":\"MODIFIED\",\"object\":{\"metadata\":{\"name\":\"c\" , \"managedFields\" : "
        "[ [] ] }}}\n"
        "{\"type\":\"ADDED\",\"object\":{\"metadata\":{\"managedFields\":[{}]}}}\n"
        "{\"type\":\"ADDED\",\"object\":{\"metadata\":{\"name\":\"d\",\"annotations\":{\"j\":"
        "\"{\\\"metadata\\\":{\\\"managedFields\\\":[]}}\"},\"managedFields\":null}}}\n"
        "{\"type\":\"BOOKMARK\",\"object\":{\"kind\":\"X\",\"metadata\":{\"resourceVersion\":\"9\"}"
        "}}\n";
    static const char want[] =
        "{\"metadata\":{\"name\":\"a\",\"resourceVersion\":\"5\"},\"spec\":{\"managedFields\":[1]}}"
        "\n"
        "{\"metadata\":{\"name\":\"b\"}}\n"
        "{\"metadata\":{\"name\":\"c\"}}\n"
        "{\"metadata\":{}}\n"
        "{\"metadata\":{\"name\":\"d\",\"annotations\":{\"j\":"
        "\"{\\\"metadata\\\":{\\\"managedFields\\\":[]}}\"},\"managedFields\":null}}\n"
        "{\"kind\":\"X\",\"metadata\":{\"resourceVersion\":\"9\"}}\n";
    for (size_t cut = 0; cut < sizeof in - 1; cut++) {
        Seen s = {0};
        WatchParser p;
        watchparse_init(&p, keep, &s);
        assert_int_equal(watchparse_feed(&p, in, cut), 0);
        assert_int_equal(watchparse_feed(&p, in + cut, sizeof in - 1 - cut), 0);
        assert_string_equal(s.log, want);
        assert_int_equal(p.bad_lines, 0);
        watchparse_free(&p);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_whole_stream),
        cmocka_unit_test(test_split_at_every_byte),
        cmocka_unit_test(test_random_chunks_and_one_byte_feeds),
        cmocka_unit_test(test_callback_stops_and_reset_drops_partial),
        cmocka_unit_test(test_unparsable_event_skipped),
        cmocka_unit_test(test_managed_fields_cut),
    };
    return cmocka_run_group_tests_name("watchparse", tests, NULL, NULL);
}
