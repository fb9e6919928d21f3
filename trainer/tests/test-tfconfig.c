/* TF_CONFIG: every form the tutorials use, the rank order with a chief, --index, and
 * each malformed case failing with -EINVAL and a message naming the field. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "tfconfig.h"

#include <errno.h>
#include <string.h>

static void test_absent_is_one_worker(void **state)
{
    (void)state;
    TfConfig c;
    char err[256];
    assert_int_equal(tfconfig_parse(NULL, -1, &c, err, sizeof err), 0);
    assert_int_equal(c.world, 1);
    assert_int_equal(c.rank, 0);
    tfconfig_free(&c);
    assert_int_equal(tfconfig_parse("", 0, &c, err, sizeof err), 0);
    assert_int_equal(c.world, 1);
    tfconfig_free(&c);
    assert_int_equal(tfconfig_parse(NULL, 1, &c, err, sizeof err), -EINVAL);
    assert_non_null(strstr(err, "--index 1"));
    tfconfig_free(NULL);
}

static void test_worker_list(void **state)
{
    (void)state;
    TfConfig c;
    char err[256];
    const char *j = "{\"cluster\":{\"worker\":[\"localhost:12345\",\"localhost:23456\"]},"
                    "\"task\":{\"type\":\"worker\",\"index\":1}}";
    assert_int_equal(tfconfig_parse(j, -1, &c, err, sizeof err), 0);
    assert_int_equal(c.world, 2);
    assert_int_equal(c.rank, 1);
    assert_string_equal(c.peers[0].host, "localhost");
    assert_int_equal(c.peers[0].port, 12345);
    assert_int_equal(c.peers[1].port, 23456);
    tfconfig_free(&c);
    /* --index overrides the task index */
    assert_int_equal(tfconfig_parse(j, 0, &c, err, sizeof err), 0);
    assert_int_equal(c.rank, 0);
    tfconfig_free(&c);
    assert_int_equal(tfconfig_parse(j, 2, &c, err, sizeof err), -EINVAL);
    assert_non_null(strstr(err, "--index 2"));
}

static void test_space_after_colon_and_dns_names(void **state)
{
    (void)state;
    TfConfig c;
    char err[256];
    const char *j = "{\"cluster\":{\"worker\":[\"localhost: 12345\","
                    "\"mnist-worker-1.mnist-worker.default.svc:2222\"]},"
                    "\"task\":{\"type\":\"worker\",\"index\":0}}";
    assert_int_equal(tfconfig_parse(j, -1, &c, err, sizeof err), 0);
    assert_int_equal(c.peers[0].port, 12345);
    assert_string_equal(c.peers[1].host, "mnist-worker-1.mnist-worker.default.svc");
    assert_int_equal(c.peers[1].port, 2222);
    tfconfig_free(&c);
}

static void test_ipv6(void **state)
{
    (void)state;
    TfConfig c;
    char err[256];
    const char *j = "{\"cluster\":{\"worker\":[\"[::1]:5000\",\"[fd00::2]:5001\"]},"
                    "\"task\":{\"type\":\"worker\",\"index\":1}}";
    assert_int_equal(tfconfig_parse(j, -1, &c, err, sizeof err), 0);
    assert_string_equal(c.peers[0].host, "::1");
    assert_int_equal(c.peers[0].port, 5000);
    assert_string_equal(c.peers[1].host, "fd00::2");
    tfconfig_free(&c);
}

static void test_chief_is_rank_zero(void **state)
{
    (void)state;
    TfConfig c;
    char err[256];
    const char *j = "{\"cluster\":{\"chief\":[\"c:1\"],\"worker\":[\"w0:2\",\"w1:3\"]},"
                    "\"task\":{\"type\":\"worker\",\"index\":1}}";
    assert_int_equal(tfconfig_parse(j, -1, &c, err, sizeof err), 0);
    assert_int_equal(c.world, 3);
    assert_int_equal(c.rank, 2);
    assert_string_equal(c.peers[0].host, "c");
    assert_string_equal(c.peers[1].host, "w0");
    assert_string_equal(c.peers[2].host, "w1");
    tfconfig_free(&c);
    const char *k = "{\"cluster\":{\"worker\":[\"w0:2\"],\"chief\":[\"c:1\"]},"
                    "\"task\":{\"type\":\"chief\",\"index\":0}}";
    assert_int_equal(tfconfig_parse(k, -1, &c, err, sizeof err), 0);
    assert_int_equal(c.rank, 0);
    assert_string_equal(c.peers[0].host, "c");
    tfconfig_free(&c);
    /* index omitted: 0 */
    const char *m = "{\"cluster\":{\"chief\":[\"c:1\"]},\"task\":{\"type\":\"chief\"}}";
    assert_int_equal(tfconfig_parse(m, -1, &c, err, sizeof err), 0);
    assert_int_equal(c.world, 1);
    tfconfig_free(&c);
}

/* Each case: the document and a fragment the error must contain. */
static const struct {
    const char *json, *want;
} BAD[] = {
    {"not json", "TF_CONFIG: not a JSON object"},
    {"[1,2]", "TF_CONFIG: not a JSON object"},
    {"{\"task\":{\"type\":\"worker\",\"index\":0}}", "cluster:"},
    {"{\"cluster\":[],\"task\":{}}", "cluster:"},
    {"{\"cluster\":{},\"task\":{\"type\":\"worker\",\"index\":0}}", "cluster.worker: missing"},
    {"{\"cluster\":{\"worker\":\"a:1\"},\"task\":{\"type\":\"worker\",\"index\":0}}",
     "cluster.worker: expected a list"},
    {"{\"cluster\":{\"worker\":[]},\"task\":{\"type\":\"worker\",\"index\":0}}",
     "cluster.worker: expected 1 to"},
    {"{\"cluster\":{\"worker\":[12]},\"task\":{\"type\":\"worker\",\"index\":0}}",
     "cluster.worker[0]: expected a \"host:port\" string"},
    {"{\"cluster\":{\"worker\":[\"a:1\",\"nohost\"]},\"task\":{\"type\":\"worker\",\"index\":0}}",
     "cluster.worker[1]: \"nohost\": expected host:port"},
    {"{\"cluster\":{\"worker\":[\"a:0\"]},\"task\":{\"type\":\"worker\",\"index\":0}}",
     "cluster.worker[0]: \"a:0\": port must be"},
    {"{\"cluster\":{\"worker\":[\"a:65536\"]},\"task\":{\"type\":\"worker\",\"index\":0}}",
     "port must be"},
    {"{\"cluster\":{\"worker\":[\"a:12x\"]},\"task\":{\"type\":\"worker\",\"index\":0}}",
     "port must be"},
    {"{\"cluster\":{\"worker\":[\":1\"]},\"task\":{\"type\":\"worker\",\"index\":0}}",
     "host is empty"},
    {"{\"cluster\":{\"worker\":[\"a b:1\"]},\"task\":{\"type\":\"worker\",\"index\":0}}",
     "invalid character"},
    {"{\"cluster\":{\"worker\":[\"::1:5\"]},\"task\":{\"type\":\"worker\",\"index\":0}}",
     "[address]:port"},
    {"{\"cluster\":{\"worker\":[\"[::1]5\"]},\"task\":{\"type\":\"worker\",\"index\":0}}",
     "expected [IPv6 address]:port"},
    {"{\"cluster\":{\"worker\":[\"a:1\",\"a:1\"]},\"task\":{\"type\":\"worker\",\"index\":0}}",
     "rank 0 and rank 1 are both a:1"},
    {"{\"cluster\":{\"worker\":[\"a:1\"],\"ps\":[\"p:2\"]},\"task\":{\"type\":\"worker\"}}",
     "cluster.ps: the trainer runs synchronous all-reduce only"},
    {"{\"cluster\":{\"worker\":[\"a:1\"],\"evaluator\":[\"e:2\"]},\"task\":{\"type\":\"worker\"}}",
     "cluster.evaluator: the trainer runs synchronous all-reduce only"},
    {"{\"cluster\":{\"worker\":[\"a:1\"],\"gpu\":[\"e:2\"]},\"task\":{\"type\":\"worker\"}}",
     "cluster.gpu: unknown task type"},
    {"{\"cluster\":{\"worker\":[\"a:1\"],\"chief\":[\"c:1\",\"d:1\"]},"
     "\"task\":{\"type\":\"worker\"}}",
     "cluster.chief: expected a list of exactly one"},
    {"{\"cluster\":{\"worker\":[\"a:1\"],\"chief\":\"c:1\"},\"task\":{\"type\":\"worker\"}}",
     "cluster.chief: expected a list"},
    {"{\"cluster\":{\"worker\":[\"a:1\"]}}", "task: expected an object"},
    {"{\"cluster\":{\"worker\":[\"a:1\"]},\"task\":\"worker\"}", "task: expected an object"},
    {"{\"cluster\":{\"worker\":[\"a:1\"]},\"task\":{\"index\":0}}", "task.type: expected"},
    {"{\"cluster\":{\"worker\":[\"a:1\"]},\"task\":{\"type\":3}}", "task.type: expected"},
    {"{\"cluster\":{\"worker\":[\"a:1\"]},\"task\":{\"type\":\"ps\",\"index\":0}}",
     "task.type \"ps\": the trainer runs synchronous all-reduce only"},
    {"{\"cluster\":{\"worker\":[\"a:1\"]},\"task\":{\"type\":\"evaluator\",\"index\":0}}",
     "task.type \"evaluator\": the trainer runs synchronous all-reduce only"},
    {"{\"cluster\":{\"worker\":[\"a:1\"]},\"task\":{\"type\":\"master\",\"index\":0}}",
     "task.type \"master\": expected"},
    {"{\"cluster\":{\"worker\":[\"a:1\"]},\"task\":{\"type\":\"chief\",\"index\":0}}",
     "cluster has no chief entry"},
    {"{\"cluster\":{\"worker\":[\"a:1\"]},\"task\":{\"type\":\"worker\",\"index\":\"0\"}}",
     "task.index: expected a non-negative integer"},
    {"{\"cluster\":{\"worker\":[\"a:1\"]},\"task\":{\"type\":\"worker\",\"index\":0.5}}",
     "task.index: expected a non-negative integer"},
    {"{\"cluster\":{\"worker\":[\"a:1\"]},\"task\":{\"type\":\"worker\",\"index\":-1}}",
     "task.index: expected a non-negative integer"},
    {"{\"cluster\":{\"worker\":[\"a:1\"]},\"task\":{\"type\":\"worker\",\"index\":1}}",
     "task.index 1: cluster.worker has 1 entry"},
};

static void test_malformed(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof BAD / sizeof BAD[0]; i++) {
        TfConfig c;
        char err[512] = "";
        int rc = tfconfig_parse(BAD[i].json, -1, &c, err, sizeof err);
        if (rc != -EINVAL)
            fail_msg("case %zu %s: returned %d, expected -EINVAL", i, BAD[i].json, rc);
        if (!strstr(err, BAD[i].want))
            fail_msg("case %zu %s: error \"%s\" lacks \"%s\"", i, BAD[i].json, err, BAD[i].want);
        assert_null(c.peers);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_absent_is_one_worker),
        cmocka_unit_test(test_worker_list),
        cmocka_unit_test(test_space_after_colon_and_dns_names),
        cmocka_unit_test(test_ipv6),
        cmocka_unit_test(test_chief_is_rank_zero),
        cmocka_unit_test(test_malformed),
    };
    return cmocka_run_group_tests_name("tfconfig", tests, NULL, NULL);
}
