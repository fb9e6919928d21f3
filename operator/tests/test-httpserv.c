/* The probes/metrics listener and the Prometheus text it serves; probes answered at once
 * beside clients that trickle their requests or just hold connections open, and tricklers
 * cut at the deadline. Time bounds on this side (not the server's deadline) are multiplied
 * by KT_TEST_TIME_SCALE (timescale.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "../../trainer/tests/timescale.h"
#include "httpserv.h"
#include "metrics.h"

#include <arpa/inet.h>
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

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
    /* Bounded, so that a server that never answers fails the test instead of hanging it. */
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, (long)scaled(1500));
    long code = 0;
    if (curl_easy_perform(h) == CURLE_OK) curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code);
    curl_easy_cleanup(h);
    return code;
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* A TCP connection to 127.0.0.1:port, non-blocking once connected. */
static int dial(int port)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0)
        fail_msg("connect to 127.0.0.1:%d: %s", port, strerror(errno));
    int fl = fcntl(fd, F_GETFL);
    assert_int_equal(fcntl(fd, F_SETFL, fl | O_NONBLOCK), 0);
    return fd;
}

/* Sends byte i of a request head that never ends (a slow-loris client). Returns 0, or -1
 * once the server has closed the connection (an error or end of file on it). */
static int trickle(int fd, int i)
{
    static const char line[] = "GET /healthz HTTP/1.1\r\nX-Slow: ";
    char c = i < (int)sizeof line - 1 ? line[i] : 'a';
    if (send(fd, &c, 1, MSG_NOSIGNAL) != 1 && errno != EAGAIN) return -1;
    struct pollfd p = {.fd = fd, .events = POLLIN};
    if (poll(&p, 1, 0) == 1) {
        char buf[256];
        ssize_t r = recv(fd, buf, sizeof buf, 0);
        if (r == 0 || (r < 0 && errno != EAGAIN)) return -1;
    }
    return 0;
}

/* GET /healthz, timed: fails unless it answers 200 within 100 ms. */
static void probe_fast(int port, const char *while_what)
{
    static Buf b;
    double t0 = now_ms();
    long code = get(port, "/healthz", &b);
    double ms = now_ms() - t0;
    if (code != 200 || ms > scaled(100))
        fail_msg("/healthz while %s: HTTP %ld after %.0f ms, want 200 within %.0f ms", while_what,
                 code, ms, scaled(100));
}

/* Clients that send a byte every 100 ms (each byte once restarted the server's 2 s
 * timeout, and it served one connection at a time) do not delay the probes. */
static void test_trickling_clients_do_not_block_probes(void **state)
{
    (void)state;
    char err[256];
    HttpServer *s = httpserv_start("127.0.0.1:0", handler, NULL, err, sizeof err);
    if (!s) fail_msg("%s", err);
    int port = httpserv_port(s), fds[4];
    for (int k = 0; k < 4; k++)
        fds[k] = dial(port);
    /* Rounds of 100 ms for 1 s at most: inside the deadline, so the tricklers stay open. */
    double t0 = now_ms();
    for (int i = 0; i < 10 && now_ms() - t0 < HTTPSERV_DEADLINE_MS / 2; i++) {
        for (int k = 0; k < 4; k++)
            if (trickle(fds[k], i) != 0) fail_msg("trickler %d cut after %d bytes", k, i);
        probe_fast(port, "4 clients trickle their requests");
        usleep(100 * 1000);
    }
    for (int k = 0; k < 4; k++)
        close(fds[k]);
    httpserv_stop(s);
}

/* A trickling client is closed at the deadline counted from its accept, not from its
 * last byte. */
static void test_trickler_cut_at_deadline(void **state)
{
    (void)state;
    char err[256];
    HttpServer *s = httpserv_start("127.0.0.1:0", handler, NULL, err, sizeof err);
    if (!s) fail_msg("%s", err);
    int fd = dial(httpserv_port(s));
    double t0 = now_ms(), cut = -1, limit = HTTPSERV_DEADLINE_MS + scaled(1000);
    /* A byte every 50 ms, until cut or for a second past the deadline. */
    for (int i = 0; i < 200 && cut < 0 && now_ms() - t0 < limit; i++) {
        if (trickle(fd, i) != 0) cut = now_ms() - t0;
        usleep(50 * 1000);
    }
    close(fd);
    httpserv_stop(s);
    if (cut < 0)
        fail_msg("a client sending a byte every 50 ms was still open after %.0f ms", limit);
    if (cut < HTTPSERV_DEADLINE_MS - 100 || cut > HTTPSERV_DEADLINE_MS + scaled(500))
        fail_msg("trickler cut after %.0f ms, want %d to %.0f", cut, HTTPSERV_DEADLINE_MS,
                 HTTPSERV_DEADLINE_MS + scaled(500));
    print_message("trickler cut after %.0f ms (deadline %d ms)\n", cut, HTTPSERV_DEADLINE_MS);
}

/* More idle connections than the server keeps: the oldest make room, and the probe is
 * answered at once. */
static void test_connection_flood(void **state)
{
    (void)state;
    char err[256];
    HttpServer *s = httpserv_start("127.0.0.1:0", handler, NULL, err, sizeof err);
    if (!s) fail_msg("%s", err);
    enum { N = HTTPSERV_MAX_CONNS + 16 };
    int fds[N];
    for (int k = 0; k < N; k++)
        fds[k] = dial(httpserv_port(s));
    probe_fast(httpserv_port(s), "more idle connections than the cap are open");
    /* Stopping does not wait for them either. */
    double t0 = now_ms();
    httpserv_stop(s);
    double ms = now_ms() - t0;
    for (int k = 0; k < N; k++)
        close(fds[k]);
    if (ms > scaled(100)) fail_msg("httpserv_stop took %.0f ms with idle clients open", ms);
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
    test_time_scale();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_serves_metrics_and_probes),
        cmocka_unit_test(test_trickling_clients_do_not_block_probes),
        cmocka_unit_test(test_trickler_cut_at_deadline),
        cmocka_unit_test(test_connection_flood),
    };
    return cmocka_run_group_tests_name("httpserv", tests, NULL, NULL);
}
