/* The cache's packed text: every text packs and unpacks to itself (objects as cached,
 * texts made of the fragments cut anywhere and mixed with other bytes), each fragment
 * is taken at its first byte where it matches, longest first (as a plain scan of the
 * whole table would), a Running pod packs to well under half, and text holding a byte
 * the codes use is refused. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "jsonpack.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A Running pod as the pod informer caches it (labels are kept apart). */
static const char POD[] =
    "{\"metadata\":{\"name\":\"job-0001-worker-0\",\"namespace\":\"kt\",\"ownerReferences\":[{"
    "\"apiVersion\":\"kubetrain.dev/v1alpha1\",\"kind\":\"TrainingJob\",\"name\":\"job-0001\","
    "\"uid\":\"1b7e1f6a-3c2d-4e5f-8a9b-123456789abc\",\"controller\":true,"
    "\"blockOwnerDeletion\":true}],\"annotations\":{\"kubetrain.dev/attempt\":\"0\","
    "\"kubetrain.dev/world-size\":\"8\",\"kubetrain.dev/metrics-port\":\"9090\"},\"uid\":"
    "\"0b7e1f6a-3c2d-4e5f-8a9b-123456789abc\",\"creationTimestamp\":\"2026-11-27T12:13:42Z\","
    "\"resourceVersion\":\"136\"},\"spec\":{\"nodeName\":\"kwok-node-0\"},\"status\":{\"phase\":"
    "\"Running\",\"conditions\":[{\"type\":\"Initialized\",\"status\":\"True\"},{\"type\":"
    "\"Ready\",\"status\":\"True\"},{\"type\":\"ContainersReady\",\"status\":\"True\"},{\"type\":"
    "\"PodScheduled\",\"status\":\"True\"}],\"podIP\":\"10.1.0.0\",\"containerStatuses\":[{"
    "\"name\":\"trainer\",\"state\":{\"running\":{\"startedAt\":\"2026-11-27T12:00:01Z\"}}}]}}";

static const char JOB[] =
    "{\"apiVersion\":\"kubetrain.dev/v1alpha1\",\"kind\":\"TrainingJob\",\"metadata\":{\"name\":"
    "\"job-0000\",\"namespace\":\"kt\",\"uid\":\"uid-1\",\"generation\":1,\"creationTimestamp\":"
    "\"2026-11-27T12:13:41Z\",\"resourceVersion\":\"451\"},\"spec\":{\"workers\":8},\"status\":{"
    "\"observedGeneration\":1,\"phase\":\"Running\",\"conditions\":[{\"type\":\"Created\","
    "\"status\":\"True\",\"reason\":\"PodsCreated\",\"message\":\"created 8 worker pods\","
    "\"lastTransitionTime\":\"2026-11-27T12:13:43Z\"}]}}";

/* Packs and unpacks text, failing the test unless it comes back the same; returns the
 * packed size. */
static size_t round_trip(const char *text)
{
    char *p = jsonpack_encode(text);
    assert_non_null(p);
    size_t n = 0, packed = strlen(p);
    char *back = jsonpack_decode(p, &n);
    assert_non_null(back);
    if (strcmp(back, text) != 0) fail_msg("packed and unpacked:\n%s\nwant:\n%s", back, text);
    assert_int_equal(n, strlen(text));
    for (const unsigned char *c = (const unsigned char *)p; *c; c++)
        if (*c >= 0x20 && !strchr(text, (char)*c)) fail_msg("byte 0x%02x not in the text", *c);
    free(p);
    free(back);
    return packed;
}

static void test_cached_objects(void **state)
{
    (void)state;
    size_t pod = round_trip(POD), job = round_trip(JOB);
    if (pod * 100 > (sizeof POD - 1) * 40)
        fail_msg("the pod packs to %zu of %zu bytes, want at most 40 %%", pod, sizeof POD - 1);
    assert_true(job < sizeof JOB - 1);
    assert_int_equal(round_trip(""), 0);
    round_trip("{}");
    /* Parsed back, the object is the same. */
    char *p = jsonpack_encode(POD);
    size_t n;
    char *back = jsonpack_decode(p, &n);
    cJSON *a = cJSON_Parse(POD), *b = cJSON_ParseWithLength(back, n);
    assert_true(cJSON_Compare(a, b, 1));
    cJSON_Delete(a);
    cJSON_Delete(b);
    free(p);
    free(back);
}

/* The fragments, read back through the codec: code c unpacks to fragment c - 1. */
static char *frag[32];
static size_t nfrag;

static void read_fragments(void)
{
    for (nfrag = 0; nfrag < 31; nfrag++) {
        char code[2] = {(char)(nfrag + 1), 0};
        size_t n;
        frag[nfrag] = jsonpack_decode(code, &n);
        assert_non_null(frag[nfrag]);
        if (n == 1 && frag[nfrag][0] == code[0]) { /* not a code: the table ended */
            free(frag[nfrag]);
            break;
        }
        assert_true(n >= 2);
    }
    assert_true(nfrag >= 20);
}

/* The packing by a scan of every fragment at every byte, keeping the longest match:
 * what the codec's index must agree with. */
static char *plain_pack(const char *text)
{
    size_t n = strlen(text), o = 0;
    char *out = malloc(n + 1);
    assert_non_null(out);
    for (size_t i = 0; i < n;) {
        size_t best = nfrag, best_len = 0;
        for (size_t k = 0; k < nfrag; k++) {
            size_t len = strlen(frag[k]);
            if (len > best_len && len <= n - i && memcmp(text + i, frag[k], len) == 0)
                best = k, best_len = len;
        }
        if (best == nfrag) {
            out[o++] = text[i++];
        } else {
            out[o++] = (char)(best + 1);
            i += best_len;
        }
    }
    out[o] = 0;
    return out;
}

/* Texts of random pieces of the two objects (so fragments come whole, cut short,
 * overlapping and back to back) and random bytes (UTF-8 too) come back the same. */
static void test_random_texts(void **state)
{
    (void)state;
    srand(11);
    read_fragments();
    char text[4096];
    for (int round = 0; round < 5000; round++) {
        size_t len = 0, want = (size_t)rand() % 1500;
        while (len < want) {
            int kind = rand() % 4;
            if (kind < 2) {
                const char *src = kind ? POD : JOB;
                size_t sl = strlen(src), at = (size_t)rand() % sl, k = 1 + (size_t)rand() % 60;
                if (k > sl - at) k = sl - at;
                if (k > sizeof text - 1 - len) k = sizeof text - 1 - len;
                memcpy(text + len, src + at, k);
                len += k;
            } else {
                text[len++] = (char)(0x20 + rand() % 0xe0); /* 0x20 .. 0xff */
            }
            if (len >= sizeof text - 1) break;
        }
        text[len] = 0;
        round_trip(text);
        char *got = jsonpack_encode(text), *plain = plain_pack(text);
        assert_string_equal(got, plain);
        free(got);
        free(plain);
    }
    for (size_t k = 0; k < nfrag; k++)
        free(frag[k]);
}

/* A byte the codes use is refused; cJSON prints such a byte in a string escaped, so
 * what it prints always packs. */
static void test_control_bytes(void **state)
{
    (void)state;
    for (int c = 1; c < 0x20; c++) {
        char text[8] = {'{', '"', (char)c, '"', '}', 0};
        assert_null(jsonpack_encode(text));
    }
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "s\x01", "a\x1f\tb\n\x02");
    char *printed = cJSON_PrintUnformatted(o);
    round_trip(printed);
    free(printed);
    cJSON_Delete(o);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cached_objects),
        cmocka_unit_test(test_random_texts),
        cmocka_unit_test(test_control_bytes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
