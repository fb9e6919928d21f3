/* The list body splitter fed the same pages whole, cut at every byte position and in
 * random chunk sizes: the items and the metadata that come out are always the same,
 * and a body cut short or malformed is refused. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "jsonx.h"
#include "listparse.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct Seen {
    char log[4096];
    size_t len;
    int stop_after; /* return -EINTR after this many items; 0 never */
    int n;
} Seen;

static int record(void *ctx, cJSON *item)
{
    Seen *s = ctx;
    char *text = cJSON_PrintUnformatted(item);
    s->len += (size_t)snprintf(s->log + s->len, sizeof s->log - s->len, "%s\n", text);
    free(text);
    cJSON_Delete(item);
    s->n++;
    return s->stop_after && s->n >= s->stop_after ? -EINTR : 0;
}

/* Strings with brackets, escaped quotes and backslashes, a member named "items" inside
 * an item, an "items" member that is not the list's, elements that are not objects. */
static const char PAGE[] =
    "{\"kind\":\"PodList\",\"apiVersion\":\"v1\",\n"
    " \"metadata\":{\"resourceVersion\":\"42\",\"continue\":\"a\\\"{[b\"},\n"
    " \"items\":[{\"metadata\":{\"name\":\"p-0\",\"labels\":{\"x\":\"}]\"}},"
    "\"status\":{\"message\":\"say \\\"hi\\\\\\\" [ {\"}},\n"
    "  {\"metadata\":{\"name\":\"p-1\"},\"spec\":{\"items\":[1,{\"a\":[]}]}},\n"
    "  3, \"s\", [ {\"x\":1} ], null,\n"
    "  {\"metadata\":{\"name\":\"p-2\"}}\n"
    " ],\"extra\":{\"items\":[{\"metadata\":{\"name\":\"not-an-item\"}}]}}\n";

static const char WANT[] = "{\"metadata\":{\"name\":\"p-0\",\"labels\":{\"x\":\"}]\"}},"
                           "\"status\":{\"message\":\"say \\\"hi\\\\\\\" [ {\"}}\n"
                           "{\"metadata\":{\"name\":\"p-1\"},\"spec\":{\"items\":[1,{\"a\":[]}]}}\n"
                           "{\"metadata\":{\"name\":\"p-2\"}}\n";

/* Feeds PAGE in pieces of the sizes `cuts` gives (cycled; 0: all at once) and checks
 * what came out. */
static void check_fed(const size_t *cuts, size_t ncuts)
{
    Seen s = {0};
    ListParser p;
    listparse_init(&p, record, &s);
    size_t n = sizeof PAGE - 1, off = 0, k = 0;
    while (off < n) {
        size_t take = ncuts ? cuts[k++ % ncuts] : n;
        if (take > n - off) take = n - off;
        assert_int_equal(listparse_feed(&p, PAGE + off, take), 0);
        off += take;
    }
    assert_int_equal(listparse_finish(&p), 0);
    assert_string_equal(s.log, WANT);
    assert_int_equal(p.items, 3);
    assert_int_equal(p.bad_items, 4);
    assert_string_equal(jsonx_str(listparse_meta(&p), "resourceVersion"), "42");
    assert_string_equal(jsonx_str(listparse_meta(&p), "continue"), "a\"{[b");
    listparse_free(&p);
}

static void test_whole_page(void **state)
{
    (void)state;
    check_fed(NULL, 0);
}

static void test_every_cut(void **state)
{
    (void)state;
    for (size_t cut = 1; cut < sizeof PAGE - 1; cut++) {
        size_t cuts[2] = {cut, sizeof PAGE};
        check_fed(cuts, 2);
    }
    size_t one = 1;
    check_fed(&one, 1);
}

static void test_random_chunks(void **state)
{
    (void)state;
    srand(7);
    for (int round = 0; round < 200; round++) {
        size_t cuts[16];
        for (size_t i = 0; i < 16; i++)
            cuts[i] = 1 + (size_t)rand() % 40;
        check_fed(cuts, 16);
    }
}

/* The callback's value stops the parse and is returned. */
static void test_callback_stops(void **state)
{
    (void)state;
    Seen s = {.stop_after = 2};
    ListParser p;
    listparse_init(&p, record, &s);
    assert_int_equal(listparse_feed(&p, PAGE, sizeof PAGE - 1), -EINTR);
    assert_int_equal(s.n, 2);
    listparse_free(&p);
}

/* A body cut short is not a list; one that is not an object, or has bytes after its
 * end, or metadata that does not parse, is refused; an item over the limit too. */
static void test_refused(void **state)
{
    (void)state;
    static const char *const bad[] = {
        "[{\"metadata\":{}}]",
        "\"items\"",
        "{\"items\":[]} {",
        "{\"items\":[]}}",
        "{\"metadata\":{\"resourceVersion\":}, \"items\":[]}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        Seen s = {0};
        ListParser p;
        listparse_init(&p, record, &s);
        int rc = listparse_feed(&p, bad[i], strlen(bad[i]));
        if (rc == 0) rc = listparse_finish(&p);
        if (rc != -EBADMSG) fail_msg("%s: %d, want -EBADMSG", bad[i], rc);
        listparse_free(&p);
    }
    Seen s = {0};
    ListParser p;
    listparse_init(&p, record, &s);
    assert_int_equal(listparse_feed(&p, PAGE, 200), 0);
    assert_int_equal(listparse_finish(&p), -EBADMSG);
    listparse_free(&p);

    listparse_init(&p, record, &s);
    p.max_item = 16;
    assert_int_equal(listparse_feed(&p, PAGE, sizeof PAGE - 1), -E2BIG);
    listparse_free(&p);
}

/* Both callbacks' records: the items (record's Seen first, so that it reads the same
 * pointer) and what the skip callback saw of each skipped item. */
typedef struct Both {
    Seen seen;
    char skipped[1024];
    size_t len;
} Both;

static int record_skip(void *ctx, const char *text, size_t n, const char *why)
{
    Both *b = ctx;
    char ns[64], name[64], uid[64], gen[64];
    if (jsonx_text_str(text, n, "metadata.namespace", ns, sizeof ns)) snprintf(ns, sizeof ns, "-");
    if (jsonx_text_str(text, n, "metadata.name", name, sizeof name))
        snprintf(name, sizeof name, "-");
    if (jsonx_text_str(text, n, "metadata.uid", uid, sizeof uid)) snprintf(uid, sizeof uid, "-");
    if (jsonx_text_str(text, n, "metadata.generation", gen, sizeof gen))
        snprintf(gen, sizeof gen, "-");
    b->len += (size_t)snprintf(b->skipped + b->len, sizeof b->skipped - b->len, "%s/%s %s %s: %s\n",
                               ns, name, uid, gen, why);
    return 0;
}

/* Appends n times `open`, the scalar 1, and n times `close` to out at *len. */
static void nest(char *out, size_t *len, int n, const char *open, char close)
{
    for (int i = 0; i < n; i++) {
        memcpy(out + *len, open, strlen(open));
        *len += strlen(open);
    }
    out[(*len)++] = '1';
    for (int i = 0; i < n; i++)
        out[(*len)++] = close;
    out[*len] = 0;
}

/* One item nested deeper than cJSON reads (the API server stores 10,000 levels in fields
 * that keep unknown ones), one that is not JSON, between normal ones: both are skipped,
 * counted and handed to the skip callback, named from their text; the list goes on, its
 * other items and its metadata read, whole and cut into pieces. One nested exactly as
 * deep as cJSON reads is an item like the others. */
static void test_unparsable_items_skipped(void **state)
{
    (void)state;
    size_t cap = 64 * 1024, len = 0;
    char *page = malloc(cap);
    assert_non_null(page);
    len = (size_t)snprintf(page, cap,
                           "{\"metadata\":{\"resourceVersion\":\"9\"},\"items\":["
                           "{\"metadata\":{\"name\":\"a\"}},"
                           "{\"metadata\":{\"namespace\":\"team\",\"name\":\"deep\",\"uid\":"
                           "\"u-1\",\"generation\":3},\"spec\":{\"template\":");
    nest(page, &len, 1001, "{\"x\":", '}');
    len += (size_t)snprintf(page + len, cap - len,
                            "}},{\"metadata\":{\"name\":\"bad\"},\"a\":tru},"
                            "{\"metadata\":{\"name\":\"limit\"},\"s\":");
    nest(page, &len, 999, "[", ']');
    len += (size_t)snprintf(page + len, cap - len, "},{\"metadata\":{\"name\":\"b\"}}]}");
    static const size_t cuts[] = {0, 1, 7, 4096};
    for (size_t c = 0; c < sizeof cuts / sizeof *cuts; c++) {
        Both b = {0};
        ListParser p;
        listparse_init(&p, record, &b);
        p.skip = record_skip;
        for (size_t off = 0; off < len;) {
            size_t take = cuts[c] && cuts[c] < len - off ? cuts[c] : len - off;
            assert_int_equal(listparse_feed(&p, page + off, take), 0);
            off += take;
        }
        assert_int_equal(listparse_finish(&p), 0);
        assert_int_equal(p.items, 3);
        assert_int_equal(p.bad_items, 2);
        assert_int_equal(b.seen.n, 3);
        assert_non_null(strstr(b.seen.log, "{\"metadata\":{\"name\":\"a\"}}\n"));
        assert_non_null(strstr(b.seen.log, "{\"metadata\":{\"name\":\"limit\"},\"s\":[[[["));
        assert_non_null(strstr(b.seen.log, "{\"metadata\":{\"name\":\"b\"}}\n"));
        assert_string_equal(b.skipped, "team/deep u-1 3: nested deeper than 1000 levels\n"
                                       "-/bad - -: not valid JSON\n");
        assert_string_equal(jsonx_str(listparse_meta(&p), "resourceVersion"), "9");
        listparse_free(&p);
    }
    free(page);
}

/* An empty list, and one without items at all, are complete lists of nothing. */
static void test_empty(void **state)
{
    (void)state;
    static const char *const ok[] = {
        "{\"metadata\":{\"resourceVersion\":\"7\"},\"items\":[]}",
        "{\"metadata\":{\"resourceVersion\":\"7\"},\"items\":null}",
        " { \"metadata\" : { \"resourceVersion\" : \"7\" } } \n",
    };
    for (size_t i = 0; i < sizeof ok / sizeof *ok; i++) {
        Seen s = {0};
        ListParser p;
        listparse_init(&p, record, &s);
        assert_int_equal(listparse_feed(&p, ok[i], strlen(ok[i])), 0);
        assert_int_equal(listparse_finish(&p), 0);
        assert_int_equal(s.n, 0);
        assert_string_equal(jsonx_str(listparse_meta(&p), "resourceVersion"), "7");
        listparse_free(&p);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_whole_page),
        cmocka_unit_test(test_every_cut),
        cmocka_unit_test(test_random_chunks),
        cmocka_unit_test(test_callback_stops),
        cmocka_unit_test(test_refused),
        cmocka_unit_test(test_empty),
        cmocka_unit_test(test_unparsable_items_skipped),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
