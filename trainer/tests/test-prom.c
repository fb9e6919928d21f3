/* The --metrics-port server (prom.c) over loopback: a scrape is answered at once beside
 * clients that trickle their requests or hold connections open past the cap; a trickler
 * is cut at the deadline counted from its accept; prom_stop returns at once whatever the
 * clients do (the trainer's exit waits on it). Time bounds on this side (not the server's
 * deadline) are multiplied by KT_TEST_TIME_SCALE (timescale.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "gemm.h"
#include "prom.h"
#include "timescale.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static Prom *start(int *port)
{
    Prom *p = NULL;
    char err[256];
    int rc = prom_start(&p, 0, 210, 70, port, err, sizeof err);
    if (rc) fail_msg("prom_start: %s", err);
    prom_step(p, 1, 42, 0.5, 0.75, 1000, 0.001, 0.01, 0.02);
    return p;
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

/* Sends byte i of a request head that never ends. Returns 0, or -1 once the server has
 * closed the connection (an error or end of file on it). */
static int trickle(int fd, int i)
{
    static const char line[] = "GET /metrics HTTP/1.1\r\nX-Slow: ";
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

/* GET /metrics; fails unless the whole answer, with the recorded step, arrives within
 * 100 ms. */
static void scrape_fast(int port, const char *while_what)
{
    double t0 = now_ms(), limit = scaled(100);
    int fd = dial(port);
    static const char req[] = "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n";
    assert_int_equal(send(fd, req, sizeof req - 1, MSG_NOSIGNAL), (ssize_t)(sizeof req - 1));
    char buf[8192];
    size_t n = 0;
    for (;;) {
        double left = limit - (now_ms() - t0);
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (left <= 0 || poll(&p, 1, (int)left + 1) != 1) break;
        ssize_t r = recv(fd, buf + n, sizeof buf - 1 - n, 0);
        if (r <= 0) break;
        n += (size_t)r;
    }
    buf[n] = '\0';
    double ms = now_ms() - t0;
    close(fd);
    if (!strstr(buf, "HTTP/1.0 200 OK") || !strstr(buf, "\nkubetrain_steps_total 42\n") ||
        ms > limit)
        fail_msg("GET /metrics while %s: %zu bytes after %.0f ms, want the metrics within "
                 "%.0f ms; got: %.80s",
                 while_what, n, ms, limit, buf);
}

/* prom_stop returns within 100 ms. */
static void stop_fast(Prom *p, const char *while_what)
{
    double t0 = now_ms();
    prom_stop(p);
    double ms = now_ms() - t0;
    if (ms > scaled(100))
        fail_msg("prom_stop while %s took %.0f ms, want %.0f at most", while_what, ms, scaled(100));
}

/* Three clients send a byte every 100 ms (each byte once restarted a 2 s timeout, and
 * the server served one client at a time): scrapes beside them are answered at once,
 * and stopping does not wait for them. */
static void test_trickling_clients(void **state)
{
    (void)state;
    int port, fds[3];
    Prom *p = start(&port);
    for (int k = 0; k < 3; k++) fds[k] = dial(port);
    /* Rounds of 100 ms for 1 s at most: inside the deadline, so the tricklers stay open. */
    double t0 = now_ms();
    for (int i = 0; i < 10 && now_ms() - t0 < PROM_DEADLINE_MS / 2; i++) {
        for (int k = 0; k < 3; k++)
            if (trickle(fds[k], i) != 0) fail_msg("trickler %d cut after %d bytes", k, i);
        scrape_fast(port, "3 clients trickle their requests");
        usleep(100 * 1000);
    }
    stop_fast(p, "3 clients trickle their requests");
    for (int k = 0; k < 3; k++) close(fds[k]);
}

/* A trickler is closed at the deadline counted from its accept, not from its last byte. */
static void test_trickler_cut_at_deadline(void **state)
{
    (void)state;
    int port;
    Prom *p = start(&port);
    int fd = dial(port);
    double t0 = now_ms(), cut = -1, limit = PROM_DEADLINE_MS + scaled(1000);
    /* A byte every 50 ms, until cut or for a second past the deadline. */
    for (int i = 0; i < 200 && cut < 0 && now_ms() - t0 < limit; i++) {
        if (trickle(fd, i) != 0) cut = now_ms() - t0;
        usleep(50 * 1000);
    }
    close(fd);
    stop_fast(p, "a trickler was cut");
    if (cut < 0)
        fail_msg("a client sending a byte every 50 ms was still open after %.0f ms", limit);
    if (cut < PROM_DEADLINE_MS - 100 || cut > PROM_DEADLINE_MS + scaled(500))
        fail_msg("trickler cut after %.0f ms, want %d to %.0f", cut, PROM_DEADLINE_MS,
                 PROM_DEADLINE_MS + scaled(500));
    print_message("trickler cut after %.0f ms (deadline %d ms)\n", cut, PROM_DEADLINE_MS);
}

/* More idle connections than the server keeps: the oldest make room for the scrape. */
static void test_connection_flood(void **state)
{
    (void)state;
    int port;
    Prom *p = start(&port);
    enum { N = PROM_MAX_CONNS + 8 };
    int fds[N];
    for (int k = 0; k < N; k++) fds[k] = dial(port);
    scrape_fast(port, "more idle connections than the cap are open");
    stop_fast(p, "more idle connections than the cap are open");
    for (int k = 0; k < N; k++) close(fds[k]);
}

/* The value of sample `name` in exposition text, or NAN when absent. */
static double sample(const char *text, const char *name)
{
    size_t n = strlen(name);
    for (const char *l = text; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL)
        if (!strncmp(l, name, n) && l[n] == ' ') return strtod(l + n + 1, NULL);
    return NAN;
}

/* From the first answer on, the run's extent and where this process started are there,
 * and the steps done are the start's until the first step: a scrape before it must not
 * read as a run restarted at step 0 (the operator takes the steps a restart lost from
 * kubetrain_start_step). */
static void test_first_answer_knows_the_start(void **state)
{
    (void)state;
    Prom *p = NULL;
    char err[256];
    int port;
    if (prom_start(&p, 0, 210, 70, &port, err, sizeof err)) fail_msg("prom_start: %s", err);
    size_t len;
    char *text = prom_format(p, &len);
    assert_true(sample(text, "kubetrain_total_steps") == 210);
    assert_true(sample(text, "kubetrain_start_step") == 70);
    assert_true(sample(text, "kubetrain_steps_total") == 70);
    free(text);
    prom_stop(p);
}

/* What the operator reads for status.progress and status.checkpoint: the run's extent
 * and start, and the checkpoint gauges, absent until a checkpoint exists, then the
 * newest one with its time to the second (a %.9g timestamp would be off by seconds). */
static void test_progress_gauges(void **state)
{
    (void)state;
    int port;
    Prom *p = start(&port);
    size_t len;
    char *text = prom_format(p, &len);
    assert_true(sample(text, "kubetrain_total_steps") == 210);
    assert_true(sample(text, "kubetrain_start_step") == 70);
    assert_true(sample(text, "kubetrain_steps_total") == 42);
    assert_true(isnan(sample(text, "kubetrain_checkpoint_step")));
    assert_null(strstr(text, "kubetrain_checkpoint_timestamp_seconds"));
    free(text);
    prom_checkpoint(p, 100, 1764072000.25);
    prom_checkpoint(p, 150, 1764072012.5);
    text = prom_format(p, &len);
    assert_true(sample(text, "kubetrain_checkpoint_step") == 150);
    double ts = sample(text, "kubetrain_checkpoint_timestamp_seconds");
    if (fabs(ts - 1764072012.5) > 1e-3)
        fail_msg("checkpoint timestamp %.3f, want 1764072012.5", ts);
    assert_non_null(strstr(text, "# TYPE kubetrain_checkpoint_timestamp_seconds gauge\n"));
    assert_non_null(strstr(text, "# TYPE kubetrain_checkpoint_step gauge\n"));
    free(text);
    prom_stop(p);
}

/* The kernels the products run on are a label of kubetrain_gemm_info, so that a
 * dashboard's throughput is never read without them. */
static void test_gemm_info(void **state)
{
    (void)state;
    int port;
    Prom *p = start(&port);
    size_t len;
    char *text = prom_format(p, &len);
    const GemmKernels *k = gemm_kernels();
    char want[512];
    snprintf(want, sizeof want,
             "\nkubetrain_gemm_info{backend=\"%s\",library=\"%s\",kernels=\"%s\",cpu=\"%s\"} 1\n",
             gemm_backend(), k->library, k->kernels, k->cpu);
    const char *got = strstr(text, "\nkubetrain_gemm_info");
    assert_non_null(got);
    char line[512];
    snprintf(line, sizeof line, "%.*s", (int)strlen(want), got);
    assert_string_equal(line, want);
    assert_non_null(strstr(text, "# TYPE kubetrain_gemm_info gauge\n"));
    assert_true(k->kernels[0] != '\0');
    free(text);
    prom_stop(p);
}

int main(void)
{
    test_time_scale();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_trickling_clients),
        cmocka_unit_test(test_trickler_cut_at_deadline),
        cmocka_unit_test(test_connection_flood),
        cmocka_unit_test(test_progress_gauges),
        cmocka_unit_test(test_first_answer_knows_the_start),
        cmocka_unit_test(test_gemm_info),
    };
    return cmocka_run_group_tests_name("prom", tests, NULL, NULL);
}
