/* Leader election: the pure lease decision, and two candidates against the in-memory
 * API server — exactly one holds the lease; a release hands it over at once; a holder
 * that stops renewing loses it once the lease duration has passed. The candidates'
 * durations, the pauses and the time bounds are all multiplied by KT_TEST_TIME_SCALE
 * (timescale.h), rounded up to a whole number since a lease's duration is whole seconds. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "clock.h"
#include "fakeapi.h"
#include "jsonx.h"
#include "leader.h"
#include "metrics.h"
#include "../../trainer/tests/timescale.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define NOW 1800000000.0

static void test_decide(void **state)
{
    (void)state;
    cJSON *out = NULL;
    /* No lease: take it. */
    assert_int_equal(leader_lease_decide(NULL, "ns", "l", "a", 15, NOW, -1, &out), 1);
    assert_string_equal(jsonx_str(out, "spec.holderIdentity"), "a");
    assert_string_equal(jsonx_str(out, "spec.renewTime"), "2027-01-15T08:00:00.000000Z");
    assert_string_equal(jsonx_str(out, "spec.acquireTime"), "2027-01-15T08:00:00.000000Z");
    assert_int_equal(jsonx_int(out, "spec.leaseTransitions", -1), 0);
    assert_int_equal(jsonx_int(out, "spec.leaseDurationSeconds", -1), 15);
    cJSON_Delete(out);

    cJSON *held =
        cJSON_Parse("{\"metadata\":{\"name\":\"l\",\"resourceVersion\":\"7\"},\"spec\":"
                    "{\"holderIdentity\":\"b\",\"leaseDurationSeconds\":15,"
                    "\"acquireTime\":\"2027-01-15T07:00:00.000000Z\","
                    "\"renewTime\":\"2027-01-15T07:59:50.000000Z\",\"leaseTransitions\":3}}");
    /* Held by b, renewed 10 s ago, 15 s lease: not ours. */
    assert_int_equal(leader_lease_decide(held, "ns", "l", "a", 15, NOW, -1, &out), 0);
    assert_null(out);
    /* 16 s later it has expired: taken, one more transition, the resourceVersion kept. */
    assert_int_equal(leader_lease_decide(held, "ns", "l", "a", 15, NOW + 6, -1, &out), 1);
    assert_string_equal(jsonx_str(out, "spec.holderIdentity"), "a");
    assert_int_equal(jsonx_int(out, "spec.leaseTransitions", -1), 4);
    assert_string_equal(jsonx_str(out, "metadata.resourceVersion"), "7");
    cJSON_Delete(out);
    /* b renews its own lease: acquireTime and transitions unchanged. */
    assert_int_equal(leader_lease_decide(held, "ns", "l", "b", 15, NOW, -1, &out), 1);
    assert_string_equal(jsonx_str(out, "spec.acquireTime"), "2027-01-15T07:00:00.000000Z");
    assert_int_equal(jsonx_int(out, "spec.leaseTransitions", -1), 3);
    cJSON_Delete(out);
    /* By this process's own observation: renewTime says expired (clocks skewed), but the
     * record changed only 10 s ago here, so the 15 s lease still holds; after 16 s it
     * does not. */
    assert_int_equal(leader_lease_decide(held, "ns", "l", "a", 15, NOW + 600, 10, &out), 0);
    assert_int_equal(leader_lease_decide(held, "ns", "l", "a", 15, NOW - 600, 16, &out), 1);
    cJSON_Delete(out);
    /* Released (no holder): anyone takes it at once. */
    jsonx_set_str(jsonx_ensure_obj(held, "spec"), "holderIdentity", "");
    assert_int_equal(leader_lease_decide(held, "ns", "l", "a", 15, NOW, -1, &out), 1);
    cJSON_Delete(out);
    /* Malformed fields read as absent: an unparseable renewTime counts as expired. */
    cJSON *bad = cJSON_Parse("{\"spec\":{\"holderIdentity\":\"b\",\"renewTime\":5,"
                             "\"leaseDurationSeconds\":\"x\"}}");
    assert_int_equal(leader_lease_decide(bad, "ns", "l", "a", 15, NOW, -1, &out), 1);
    cJSON_Delete(out);
    cJSON_Delete(bad);
    cJSON_Delete(held);
}

typedef struct Candidate {
    Leader *l;
    ClockStop stop;
    volatile int acquired;
    volatile pid_t tid;
    double at;
} Candidate;

static void *acquire_main(void *arg)
{
    Candidate *c = arg;
    __atomic_store_n(&c->tid, (pid_t)syscall(SYS_gettid), __ATOMIC_RELEASE);
    if (leader_acquire(c->l, &c->stop) == 0) {
        c->at = clock_mono();
        c->acquired = 1;
    }
    return NULL;
}

static void nap(double s)
{
    struct timespec ts = {.tv_sec = (time_t)s, .tv_nsec = (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

/* A client of a fake API server started for the test, in *api. */
static KubeClient *fake_client(FakeApi **api)
{
    metrics_init();
    *api = fakeapi_start();
    assert_non_null(*api);
    char server[64], err[256];
    snprintf(server, sizeof server, "http://127.0.0.1:%d", fakeapi_port(*api));
    KubeConfig cfg = {.server = server};
    KubeClient *client = kclient_new(&cfg, 0, 0, err, sizeof err);
    assert_non_null(client);
    return client;
}

static void test_two_candidates(void **state)
{
    (void)state;
    const double s = ceil(test_time_scale());
    FakeApi *api = NULL;
    KubeClient *client = fake_client(&api);
    /* a's lease (4 s) is long next to the 0.1 s retry, so "b took over on its next try
     * after a released" and "b waited for expiry" stay apart on a loaded machine; b's
     * own lease is short so that the abandoned-lease case below runs quickly. */
    LeaderConfig la = {.ns = "default",
                       .name = "kt",
                       .identity = "a",
                       .lease_s = 4 * s,
                       .renew_deadline_s = 3 * s,
                       .retry_s = 0.1 * s};
    LeaderConfig lb = la;
    lb.identity = "b";
    lb.lease_s = 1 * s;
    lb.renew_deadline_s = 0.8 * s;
    Candidate a = {.l = leader_new(client, &la)}, b = {.l = leader_new(client, &lb)};
    clock_stop_init(&a.stop);
    clock_stop_init(&b.stop);
    pthread_t ta, tb;
    pthread_create(&ta, NULL, acquire_main, &a);
    pthread_join(ta, NULL);
    assert_true(a.acquired);
    assert_int_equal(leader_start_renewing(a.l, NULL, NULL), 0);
    pthread_create(&tb, NULL, acquire_main, &b);
    /* While a renews, b waits well past the lease duration. */
    nap(2.0 * s);
    assert_false(b.acquired);
    cJSON *lease = fakeapi_get(api, "/apis/coordination.k8s.io/v1/namespaces/default/leases/kt");
    assert_string_equal(jsonx_str(lease, "spec.holderIdentity"), "a");
    cJSON_Delete(lease);
    /* a releases: b takes over on its next try, long before a's 4 s lease would run out. */
    double t0 = clock_mono();
    leader_release(a.l);
    pthread_join(tb, NULL);
    assert_true(b.acquired);
    if (b.at - t0 > 2.5 * s)
        fail_msg("takeover after release took %g s, want <= %g", b.at - t0, 2.5 * s);

    /* b stops renewing without releasing (as if killed): a takes over once b's 1 s lease
     * has run out by a's own clock, not before (the upper bound only allows for load). */
    a.acquired = 0;
    t0 = clock_mono();
    pthread_create(&ta, NULL, acquire_main, &a);
    pthread_join(ta, NULL);
    assert_true(a.acquired);
    double dt = a.at - t0;
    if (dt < 0.95 * s || dt > 6.0 * s)
        fail_msg("takeover of an abandoned lease after %g s, want %g..%g", dt, 0.95 * s, 6.0 * s);
    lease = fakeapi_get(api, "/apis/coordination.k8s.io/v1/namespaces/default/leases/kt");
    assert_string_equal(jsonx_str(lease, "spec.holderIdentity"), "a");
    assert_int_equal(jsonx_int(lease, "spec.leaseTransitions", -1), 2);
    cJSON_Delete(lease);

    /* Stopping a waiting candidate. */
    clock_stop_set(&b.stop, 0);
    b.acquired = 0;
    pthread_create(&tb, NULL, acquire_main, &b);
    nap(0.3 * s);
    clock_stop_set(&b.stop, 1);
    pthread_join(tb, NULL);
    assert_false(b.acquired);

    leader_release(a.l);
    leader_free(a.l);
    leader_free(b.l);
    clock_stop_destroy(&a.stop);
    clock_stop_destroy(&b.stop);
    kclient_free(client);
    fakeapi_stop(api);
}

/* Context switches of thread tid of this process so far (voluntary and not), or -1. */
static long switches(pid_t tid)
{
    char path[64], line[128];
    snprintf(path, sizeof path, "/proc/self/task/%d/status", (int)tid);
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    long n = 0, v;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "voluntary_ctxt_switches: %ld", &v) == 1 ||
            sscanf(line, "nonvoluntary_ctxt_switches: %ld", &v) == 1)
            n += v;
    fclose(f);
    return n;
}

/* The thread of this process named name, or 0. */
static pid_t thread_named(const char *name)
{
    DIR *d = opendir("/proc/self/task");
    if (!d) return 0;
    pid_t found = 0;
    struct dirent *e;
    while (!found && (e = readdir(d))) {
        char path[300], comm[32] = "";
        snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
        FILE *f = fopen(path, "r");
        if (!f) continue;
        if (fgets(comm, sizeof comm, f) && strncmp(comm, name, strlen(name)) == 0 &&
            comm[strlen(name)] == '\n')
            found = (pid_t)atoi(e->d_name);
        fclose(f);
    }
    closedir(d);
    return found;
}

/* Between tries the holder's renewal thread and a standby wait on their stop rather than
 * polling it: over a second with no try due, each wakes a handful of times at most (a
 * 20 ms poll wakes 50), and each still ends at once when told to stop. */
static void test_waits_without_polling(void **state)
{
    (void)state;
    const double s = ceil(test_time_scale());
    FakeApi *api = NULL;
    KubeClient *client = fake_client(&api);
    LeaderConfig la = {.ns = "default",
                       .name = "quiet",
                       .identity = "a",
                       .lease_s = 600,
                       .renew_deadline_s = 500,
                       .retry_s = 300};
    LeaderConfig lc = la;
    lc.identity = "c";
    Candidate a = {.l = leader_new(client, &la)}, c = {.l = leader_new(client, &lc)};
    clock_stop_init(&a.stop);
    clock_stop_init(&c.stop);
    assert_int_equal(leader_acquire(a.l, &a.stop), 0);
    assert_int_equal(leader_start_renewing(a.l, NULL, NULL), 0);
    pthread_t tc;
    pthread_create(&tc, NULL, acquire_main, &c);
    nap(0.5 * s); /* c has tried once and waits; a's thread waits for its next renewal */
    pid_t renewer = thread_named("kt-leader"), standby = __atomic_load_n(&c.tid, __ATOMIC_ACQUIRE);
    assert_true(renewer > 0);
    assert_true(standby > 0);
    long r0 = switches(renewer), s0 = switches(standby);
    nap(1.0);
    long r1 = switches(renewer), s1 = switches(standby);
    assert_true(r0 >= 0 && s0 >= 0 && r1 >= 0 && s1 >= 0);
    if (r1 - r0 > 5) fail_msg("the renewal thread woke %ld times in 1 s, want <= 5", r1 - r0);
    if (s1 - s0 > 5) fail_msg("the standby woke %ld times in 1 s, want <= 5", s1 - s0);

    double t0 = clock_mono();
    clock_stop_set(&c.stop, 1);
    pthread_join(tc, NULL);
    assert_false(c.acquired);
    double stopped = clock_mono() - t0;
    t0 = clock_mono();
    leader_release(a.l);
    double released = clock_mono() - t0;
    if (stopped > 1.0 * s) fail_msg("a stopped standby returned after %g s", stopped);
    if (released > 1.0 * s) fail_msg("release took %g s", released);
    cJSON *lease = fakeapi_get(api, "/apis/coordination.k8s.io/v1/namespaces/default/leases/quiet");
    assert_string_equal(jsonx_str(lease, "spec.holderIdentity"), "");
    cJSON_Delete(lease);

    leader_free(a.l);
    leader_free(c.l);
    clock_stop_destroy(&a.stop);
    clock_stop_destroy(&c.stop);
    kclient_free(client);
    fakeapi_stop(api);
}

int main(void)
{
    test_time_scale();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_decide),
        cmocka_unit_test(test_two_candidates),
        cmocka_unit_test(test_waits_without_polling),
    };
    return cmocka_run_group_tests_name("leader", tests, NULL, NULL);
}
