/* The work queue: deduplication, no two workers on one key, delayed adds that fire
 * at their time (never before), per-item exponential backoff, and shutdown. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "clock.h"
#include "metrics.h"
#include "workqueue.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static const WqOptions OPT = {.base_delay = 0.02, .max_delay = 0.2, .qps = 0, .burst = 0};

static int setup(void **state)
{
    (void)state;
    metrics_init();
    return 0;
}

static void test_dedup_fifo(void **state)
{
    (void)state;
    WorkQueue *q = wq_new(&OPT);
    char k[64];
    wq_add(q, "ns/a");
    wq_add(q, "ns/b");
    wq_add(q, "ns/a");
    wq_add(q, "ns/c");
    wq_add(q, "ns/b");
    assert_int_equal(wq_len(q), 3);
    assert_int_equal(wq_get(q, k, sizeof k), 0);
    assert_string_equal(k, "ns/a");
    assert_int_equal(wq_get(q, k, sizeof k), 0);
    assert_string_equal(k, "ns/b");
    assert_int_equal(wq_get(q, k, sizeof k), 0);
    assert_string_equal(k, "ns/c");
    assert_int_equal(wq_len(q), 0);
    wq_done(q, "ns/a");
    wq_done(q, "ns/b");
    wq_done(q, "ns/c");
    assert_int_equal(wq_get_timeout(q, k, sizeof k, 0.01), -ETIMEDOUT);
    wq_shutdown(q);
    wq_free(q);
}

static void test_add_while_processing_is_held(void **state)
{
    (void)state;
    WorkQueue *q = wq_new(&OPT);
    char k[64];
    wq_add(q, "ns/a");
    assert_int_equal(wq_get(q, k, sizeof k), 0);
    wq_add(q, "ns/a");
    wq_add(q, "ns/a");
    /* Held back while a worker has it: nobody else can take it. */
    assert_int_equal(wq_len(q), 0);
    assert_int_equal(wq_get_timeout(q, k, sizeof k, 0.02), -ETIMEDOUT);
    wq_done(q, "ns/a");
    assert_int_equal(wq_len(q), 1);
    assert_int_equal(wq_get(q, k, sizeof k), 0);
    assert_string_equal(k, "ns/a");
    wq_done(q, "ns/a");
    assert_int_equal(wq_len(q), 0);
    wq_shutdown(q);
    wq_free(q);
}

typedef struct Stress {
    WorkQueue *q;
    int inflight[10];
    int max_inflight;
    int processed;
    pthread_mutex_t mu;
} Stress;

static void *stress_worker(void *arg)
{
    Stress *s = arg;
    char k[64];
    while (wq_get(s->q, k, sizeof k) == 0) {
        int i = k[3] - '0';
        int now = __atomic_add_fetch(&s->inflight[i], 1, __ATOMIC_SEQ_CST);
        pthread_mutex_lock(&s->mu);
        if (now > s->max_inflight) s->max_inflight = now;
        s->processed++;
        pthread_mutex_unlock(&s->mu);
        struct timespec ts = {0, 200000};
        nanosleep(&ts, NULL);
        __atomic_sub_fetch(&s->inflight[i], 1, __ATOMIC_SEQ_CST);
        wq_done(s->q, k);
    }
    return NULL;
}

static void test_never_two_workers_on_one_key(void **state)
{
    (void)state;
    Stress s = {.q = wq_new(&OPT)};
    pthread_mutex_init(&s.mu, NULL);
    pthread_t th[4];
    for (int i = 0; i < 4; i++)
        pthread_create(&th[i], NULL, stress_worker, &s);
    uint64_t x = 12345;
    for (int n = 0; n < 3000; n++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        char k[16];
        snprintf(k, sizeof k, "ns/%d", (int)(x % 10));
        if (n % 3 == 0)
            wq_add_after(s.q, k, 0.001 * (double)(x % 3));
        else
            wq_add(s.q, k);
        if (n % 50 == 0) {
            struct timespec ts = {0, 1000000};
            nanosleep(&ts, NULL);
        }
    }
    /* Let everything drain, then stop. */
    double t0 = clock_mono();
    while ((wq_len(s.q) || wq_delayed(s.q)) && clock_mono() - t0 < 10) {
        struct timespec ts = {0, 5000000};
        nanosleep(&ts, NULL);
    }
    wq_shutdown(s.q);
    for (int i = 0; i < 4; i++)
        pthread_join(th[i], NULL);
    assert_int_equal(s.max_inflight, 1);
    assert_true(s.processed >= 10);
    assert_true(s.processed <= 3000);
    wq_free(s.q);
}

static void test_delayed_add_fires_on_time(void **state)
{
    (void)state;
    WorkQueue *q = wq_new(&OPT);
    char k[64];
    double t0 = clock_mono();
    wq_add_after(q, "ns/t", 0.15);
    assert_int_equal(wq_delayed(q), 1);
    assert_int_equal(wq_get_timeout(q, k, sizeof k, 0.05), -ETIMEDOUT);
    assert_int_equal(wq_get_timeout(q, k, sizeof k, 5), 0);
    double dt = clock_mono() - t0;
    assert_string_equal(k, "ns/t");
    if (dt < 0.15 || dt > 2.0) fail_msg("fired after %g s, want >= 0.15 (and not late)", dt);
    wq_done(q, "ns/t");

    /* The earliest pending time wins, both ways. */
    t0 = clock_mono();
    wq_add_after(q, "ns/e", 30);
    wq_add_after(q, "ns/e", 0.05);
    wq_add_after(q, "ns/e", 20);
    assert_int_equal(wq_delayed(q), 1);
    assert_int_equal(wq_get_timeout(q, k, sizeof k, 5), 0);
    dt = clock_mono() - t0;
    if (dt < 0.05 || dt > 2.0) fail_msg("fired after %g s, want >= 0.05", dt);
    wq_done(q, "ns/e");
    assert_int_equal(wq_get_timeout(q, k, sizeof k, 0.1), -ETIMEDOUT);

    /* An immediate add supersedes a timer. */
    wq_add_after(q, "ns/i", 30);
    wq_add(q, "ns/i");
    assert_int_equal(wq_delayed(q), 0);
    assert_int_equal(wq_get_timeout(q, k, sizeof k, 0.01), 0);
    wq_done(q, "ns/i");

    /* A waiter blocked on a far timer wakes for a nearer one added later. */
    wq_add_after(q, "ns/far", 30);
    wq_add_after(q, "ns/near", 0.05);
    t0 = clock_mono();
    assert_int_equal(wq_get_timeout(q, k, sizeof k, 5), 0);
    assert_string_equal(k, "ns/near");
    wq_done(q, "ns/near");
    wq_shutdown(q);
    wq_free(q);
}

static void test_rate_limited_backoff(void **state)
{
    (void)state;
    WorkQueue *q = wq_new(&OPT);
    char k[64];
    double want[] = {0.02, 0.04, 0.08, 0.16, 0.2, 0.2};
    for (int i = 0; i < 6; i++) {
        double t0 = clock_mono();
        wq_add_rate_limited(q, "ns/f");
        assert_int_equal(wq_failures(q, "ns/f"), i + 1);
        assert_int_equal(wq_get_timeout(q, k, sizeof k, 5), 0);
        double dt = clock_mono() - t0;
        if (dt < want[i] - 1e-3 || dt > want[i] + 1.5)
            fail_msg("retry %d after %g s, want %g", i + 1, dt, want[i]);
        wq_done(q, "ns/f");
    }
    wq_forget(q, "ns/f");
    assert_int_equal(wq_failures(q, "ns/f"), 0);
    assert_true(g_metrics.wq_retries >= 6);
    wq_shutdown(q);
    wq_free(q);
}

static void *blocked_get(void *arg)
{
    char k[64];
    static int rc;
    rc = wq_get(arg, k, sizeof k);
    return &rc;
}

static void test_shutdown_wakes_waiters(void **state)
{
    (void)state;
    WorkQueue *q = wq_new(&OPT);
    pthread_t th;
    pthread_create(&th, NULL, blocked_get, q);
    struct timespec ts = {0, 20000000};
    nanosleep(&ts, NULL);
    wq_shutdown(q);
    void *ret;
    pthread_join(th, &ret);
    assert_int_equal(*(int *)ret, -ESHUTDOWN);
    assert_int_equal(wq_add(q, "ns/x"), 0);
    assert_int_equal(wq_len(q), 0);
    wq_free(q);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dedup_fifo),
        cmocka_unit_test(test_add_while_processing_is_held),
        cmocka_unit_test(test_never_two_workers_on_one_key),
        cmocka_unit_test(test_delayed_add_fires_on_time),
        cmocka_unit_test(test_rate_limited_backoff),
        cmocka_unit_test(test_shutdown_wakes_waiters),
    };
    return cmocka_run_group_tests_name("workqueue", tests, setup, NULL);
}
