/* The probes/metrics listener and the Prometheus text it serves. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "httpserv.h"
#include "metrics.h"

#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void handler(void *ctx, const char *path, int *code, const char **ctype, char **body)
{
    (void)ctx;
    if (strcmp(path, "/metrics") == 0) {
        *body = metrics_render();
        *code = 200;
        *ctype = "text/plain; version=0.0.4";
    } else if (strcmp(path, "/healthz") == 0) {
        *code = 200;
        *body = strdup("ok\n");
    } else {
        *code = 404;
    }
}

typedef struct Buf {
    char data[65536];
    size_t len;
} Buf;

static size_t on_data(char *p, size_t size, size_t n, void *ud)
{
    Buf *b = ud;
    size_t k = size * n;
    if (b->len + k >= sizeof b->data) return 0;
    memcpy(b->data + b->len, p, k);
    b->len += k;
    b->data[b->len] = 0;
    return k;
}

static long get(int port, const char *path, Buf *b)
{
    char url[256];
    snprintf(url, sizeof url, "http://127.0.0.1:%d%s", port, path);
    CURL *h = curl_easy_init();
    b->len = 0;
    b->data[0] = 0;
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, b);
    long code = 0;
    if (curl_easy_perform(h) == CURLE_OK) curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code);
    curl_easy_cleanup(h);
    return code;
}

static void test_serves_metrics_and_probes(void **state)
{
    (void)state;
    metrics_init();
    metrics_count_reconcile(1, 0.002);
    metrics_count_reconcile(1, 0.003);
    metrics_count_reconcile(0, 5);
    metrics_count_api("POST", 201, 0.01);
    metrics_count_api("POST", 201, 0.01);
    metrics_count_api("PUT", 409, 0.01);
    metrics_count_pods(3, 1);
    long long phases[7] = {1, 2, 0, 4, 0, 0, 0};
    metrics_set_job_phases(phases);

    char err[256];
    HttpServer *s = httpserv_start("127.0.0.1:0", handler, NULL, err, sizeof err);
    if (!s) fail_msg("%s", err);
    static Buf b;
    assert_int_equal(get(httpserv_port(s), "/healthz", &b), 200);
    assert_string_equal(b.data, "ok\n");
    assert_int_equal(get(httpserv_port(s), "/nope", &b), 404);
    assert_int_equal(get(httpserv_port(s), "/metrics?x=1", &b), 200);
    const char *want[] = {
        "kubetrain_reconcile_total{result=\"success\"} 2\n",
        "kubetrain_reconcile_total{result=\"error\"} 1\n",
        "kubetrain_api_requests_total{verb=\"POST\",code=\"201\"} 2\n",
        "kubetrain_api_requests_total{verb=\"PUT\",code=\"409\"} 1\n",
        "kubetrain_jobs{phase=\"Running\"} 2\n",
        "kubetrain_jobs{phase=\"Succeeded\"} 4\n",
        "kubetrain_pods_created_total 3\n",
        "kubetrain_pods_deleted_total 1\n",
        /* 0.002 and 0.003 fall under 0.004; 5 only under +Inf. */
        "kubetrain_reconcile_duration_seconds_bucket{le=\"0.004\"} 2\n",
        "kubetrain_reconcile_duration_seconds_bucket{le=\"+Inf\"} 3\n",
        "kubetrain_reconcile_duration_seconds_count 3\n",
        "# TYPE kubetrain_workqueue_depth gauge\n",
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        if (!strstr(b.data, want[i])) fail_msg("/metrics lacks: %s", want[i]);
    httpserv_stop(s);
    httpserv_stop(NULL);

    assert_null(httpserv_start("nohost", handler, NULL, err, sizeof err));
    assert_non_null(strstr(err, "expected [host]:port"));
    assert_null(httpserv_start("example.com:80", handler, NULL, err, sizeof err));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_serves_metrics_and_probes),
    };
    return cmocka_run_group_tests_name("httpserv", tests, NULL, NULL);
}
