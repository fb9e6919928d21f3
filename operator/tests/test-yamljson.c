/* yamljson: typed reading of manifest streams (yamljson_parse_manifests) and emitting
 * (yamljson_emit), which convert-tfjob uses: scalars typed as kubectl types them, every
 * awkward string written so that it reads back the same, documents counted and empty ones
 * skipped, errors naming the document and line, aliases bounded per document; the
 * kubeconfig reader (yamljson_parse) keeps its strings. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "yamljson.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Plain scalars typed as kubectl types them; quoted ones stay strings. */
static void test_typed(void **state)
{
    (void)state;
    const char *in = "a: 3\nb: '3'\nc: yes\nd: 0x10\ne: 1.5e3\nf: ~\ng: \"true\"\nh: 500m\n"
                     "i: 2001-12-14\nj: -1\nk: .5\nl: 017\n";
    cJSON *docs;
    char err[256];
    assert_int_equal(yamljson_parse_manifests(in, strlen(in), &docs, err, sizeof err), 0);
    cJSON *want = cJSON_Parse("{\"a\":3,\"b\":\"3\",\"c\":true,\"d\":16,\"e\":1500,\"f\":null,"
                              "\"g\":\"true\",\"h\":\"500m\",\"i\":\"2001-12-14\",\"j\":-1,"
                              "\"k\":0.5,\"l\":15}");
    assert_true(cJSON_Compare(docs->child, want, 1));
    cJSON_Delete(want);
    cJSON_Delete(docs);
}

/* Every awkward string, number and key survives emit -> parse unchanged. */
static void test_round_trip(void **state)
{
    (void)state;
    cJSON *docs;
    char err[256];
    cJSON *o = cJSON_Parse(
        "{\"s\":[\"3\",\"yes\",\"on\",\"N\",\"null\",\"\",\"1e3\",\"0x1F\",\"2001-12-14\","
        "\"12:30\",\"500m\",\"1Gi\",\"a: b\",\"- x\",\"#c\",\"x #y\",\"multi\\nline\\n\","
        "\"trailing \",\"\\u00fcn\\u00ef\",\"-1\",\".inf\",\"@at\",\"*star\",\"!tag\","
        "\"{a}\",\"[b]\",\"'q'\",\"\\\"dq\\\"\",\"tab\\there\"],"
        "\"n\":[3,2.5,-1,1e300,0],\"b\":[true,false,null],\"e\":{\"x\":[],\"y\":{}},"
        "\"yes\":1,\"3\":2,\"key: colon\":3}");
    assert_non_null(o);
    char *y = yamljson_emit(o, err, sizeof err);
    assert_non_null(y);
    assert_int_equal(yamljson_parse_manifests(y, strlen(y), &docs, err, sizeof err), 0);
    if (!cJSON_Compare(docs->child, o, 1)) fail_msg("does not round-trip:\n%s", y);
    free(y);
    cJSON_Delete(docs);
    cJSON_Delete(o);
}

/* Documents are counted as kubectl counts them (empty ones skipped); an error names the
 * document and its line; a "billion laughs" in a later document is refused. */
static void test_stream(void **state)
{
    (void)state;
    cJSON *docs = NULL;
    char err[512];
    const char *three = "---\na: 1\n---\n---\n# only a comment\n---\nb: [x]\n...\n---\nc: {}\n";
    assert_int_equal(yamljson_parse_manifests(three, strlen(three), &docs, err, sizeof err), 0);
    assert_int_equal(cJSON_GetArraySize(docs), 3);
    assert_string_equal(docs->child->next->next->child->string, "c");
    cJSON_Delete(docs);

    const char *bad = "a: 1\n---\nb: 2\n---\nc: [1, 2\n";
    assert_int_equal(yamljson_parse_manifests(bad, strlen(bad), &docs, err, sizeof err), -EINVAL);
    assert_null(docs);
    printf("# %s\n", err);
    assert_non_null(strstr(err, "document 3, line 6"));

    char bomb[2048] = "a: 1\n---\na: &a [x, x, x, x, x, x, x, x, x, x]\n";
    for (char c = 'b'; c <= 'h'; c++) {
        size_t n = strlen(bomb);
        snprintf(bomb + n, sizeof bomb - n, "%c: &%c [", c, c);
        for (int i = 0; i < 10; i++) {
            n = strlen(bomb);
            snprintf(bomb + n, sizeof bomb - n, "*%c%s", c - 1, i < 9 ? ", " : "]\n");
        }
    }
    assert_int_equal(yamljson_parse_manifests(bomb, strlen(bomb), &docs, err, sizeof err), -EINVAL);
    printf("# %s\n", err);
    assert_non_null(strstr(err, "document 2 (from line 2): line "));
    assert_non_null(strstr(err, "billion laughs"));

    const char *empty = "---\n# nothing\n";
    assert_int_equal(yamljson_parse_manifests(empty, strlen(empty), &docs, err, sizeof err), 0);
    assert_int_equal(cJSON_GetArraySize(docs), 0);
    cJSON_Delete(docs);
}

/* The kubeconfig reader is unchanged: plain numbers stay strings, true is a boolean. */
static void test_kubeconfig_untyped(void **state)
{
    (void)state;
    cJSON *o;
    char err[256];
    const char *in = "port: 3\nok: true\nno: yes\n";
    assert_int_equal(yamljson_parse(in, strlen(in), &o, err, sizeof err), 0);
    cJSON *want = cJSON_Parse("{\"port\":\"3\",\"ok\":true,\"no\":\"yes\"}");
    assert_true(cJSON_Compare(o, want, 1));
    cJSON_Delete(want);
    cJSON_Delete(o);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_typed),
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_stream),
        cmocka_unit_test(test_kubeconfig_untyped),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
