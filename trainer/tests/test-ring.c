/* Ring collective: 2, 3 and 4 forked workers on loopback, all-reduce on many sizes
 * (bit-identical on every rank, run to run, and equal to the sum), broadcast from every
 * root, barrier, mismatched calls, and peers that die or go silent mid-all-reduce; the
 * all-reduce also through shared memory (shm.h).
 * Every timeout and time bound is multiplied by KT_TEST_TIME_SCALE (timescale.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "fork_cluster.h"
#include "ring.h"
#include "shm.h"
#include "util.h"

#include <math.h>
#include <pthread.h>

static const size_t SIZES[] = {1, 2, 3, 5, 17, 1000, 4097, 65539, 262147, 300001, 1500007};
#define NSIZES (sizeof SIZES / sizeof SIZES[0])
#define SECRET "ring-test-secret"

typedef struct RankResult {
    int rc;
    char err[512];
    int done;                 /* sizes completed */
    char hash[NSIZES][65];    /* SHA-256 of each result */
    double maxerr[NSIZES];    /* max |result - exact sum| */
    int repeat_same[NSIZES];  /* a second run gave the same bits */
    int bcast_ok;             /* broadcasts from every root matched */
    double t_enter, t_exit;   /* barrier */
    double t_event;           /* kill/stop (victim) or failure (survivors) */
} RankResult;

typedef struct RingArg {
    RankResult *res;
    size_t segment_bytes;
    size_t max_size;
    size_t thread_min; /* RingOptions.thread_min_bytes */
    int victim;     /* rank that dies (SIGKILL) or stops (SIGSTOP); -1 none */
    int victim_sig;
    int mismatch;   /* rank 0 broadcasts while the others all-reduce */
    int shm;        /* wrap the ring in shm_wrap and all-reduce slices of a shared arena */
} RingArg;

static float input_value(uint64_t *st)
{
    return 2.0f * util_rand_float(st) - 1.0f;
}

static void fill_input(float *x, size_t n, int rank, size_t si)
{
    uint64_t st = (uint64_t)si * 1000003u + (uint64_t)rank;
    for (size_t i = 0; i < n; i++) x[i] = input_value(&st);
}

static void allreduce_rank(const Cluster *c, int rank, void *argp)
{
    RingArg *a = argp;
    RankResult *r = &a->res[rank];
    Collective *coll = cluster_ring(c, rank, SECRET, scaled(5.0), a->segment_bytes, a->thread_min,
                                    r->err, sizeof r->err);
    if (!coll) {
        r->rc = -1;
        return;
    }
    float *arena = NULL;
    size_t arena_bytes = 0;
    if (a->shm) {
        /* as the model's gradient arena: whole pages mapped alone, with room for the
         * slices' offsets */
        coll = shm_wrap(coll);
        arena_bytes = (SIZES[NSIZES - 1] + 64) * sizeof(float);
        arena_bytes = (arena_bytes + 4095) / 4096 * 4096;
        arena = mmap(NULL, arena_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        arena[0] = 42.0f;
        if ((r->rc = coll_share_arena(coll, arena, arena_bytes, r->err, sizeof r->err))) {
            coll_destroy(coll);
            return;
        }
        if (!shm_active(coll) || arena[0] != 42.0f) {
            snprintf(r->err, sizeof r->err, "shared memory not taken up (active %d, arena kept %d)",
                     shm_active(coll), arena[0] == 42.0f);
            r->rc = -1;
            coll_destroy(coll);
            return;
        }
    }
    for (size_t si = 0; si < NSIZES && SIZES[si] <= a->max_size; si++) {
        size_t n = SIZES[si];
        float *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y), *t = malloc(n * sizeof *t);
        double *exact = calloc(n, sizeof *exact);
        for (int k = 0; k < c->world; k++) {
            fill_input(t, n, k, si);
            for (size_t i = 0; i < n; i++) exact[i] += t[i];
        }
        /* shm: both runs on one slice of the arena, at an offset that varies with the size */
        float *xs = a->shm ? arena + si % 7 : x, *ys = a->shm ? xs : y;
        fill_input(xs, n, rank, si);
        r->rc = coll_allreduce_sum(coll, xs, n, r->err, sizeof r->err);
        memcpy(x, xs, n * sizeof *x);
        fill_input(ys, n, rank, si);
        if (r->rc < 0 || (r->rc = coll_allreduce_sum(coll, ys, n, r->err, sizeof r->err)) < 0) {
            free(x), free(y), free(t), free(exact);
            break;
        }
        memcpy(y, ys, n * sizeof *y);
        util_sha256_hex(x, n * sizeof *x, r->hash[si]);
        r->repeat_same[si] = memcmp(x, y, n * sizeof *x) == 0;
        double m = 0;
        for (size_t i = 0; i < n; i++) m = fmax(m, fabs((double)x[i] - exact[i]));
        r->maxerr[si] = m;
        r->done++;
        free(x), free(y), free(t), free(exact);
    }
    coll_destroy(coll);
    if (arena) munmap(arena, arena_bytes);
}

static void check_allreduce_opts(int world, size_t segment_bytes, size_t max_size,
                                 size_t thread_min, int shm)
{
    Cluster c;
    RankResult *res = cluster_shared(sizeof(RankResult) * CLUSTER_MAX);
    assert_non_null(res);
    assert_int_equal(cluster_listen(&c, world), 0);
    RingArg a = {.res = res,
                 .segment_bytes = segment_bytes,
                 .max_size = max_size,
                 .thread_min = thread_min,
                 .victim = -1,
                 .shm = shm};
    for (int r = 0; r < world; r++) cluster_start(&c, r, allreduce_rank, &a);
    assert_int_equal(cluster_wait(&c, scaled(120)), 0);
    size_t nsizes = 0;
    while (nsizes < NSIZES && SIZES[nsizes] <= max_size) nsizes++;
    for (int r = 0; r < world; r++) {
        if (res[r].rc != 0) fail_msg("rank %d: %s", r, res[r].err);
        assert_int_equal(res[r].done, (int)nsizes);
        for (size_t si = 0; si < nsizes; si++) {
            if (strcmp(res[r].hash[si], res[0].hash[si]) != 0)
                fail_msg("%zu floats: rank %d result %s differs from rank 0 %s", SIZES[si], r,
                         res[r].hash[si], res[0].hash[si]);
            if (!res[r].repeat_same[si])
                fail_msg("%zu floats: rank %d got different bits on a second run", SIZES[si], r);
            if (res[r].maxerr[si] > 1e-5)
                fail_msg("%zu floats: rank %d max error %g > 1e-5", SIZES[si], r,
                         res[r].maxerr[si]);
        }
    }
    munmap(res, sizeof(RankResult) * CLUSTER_MAX);
}

static void check_allreduce(int world, size_t segment_bytes, size_t max_size, size_t thread_min)
{
    check_allreduce_opts(world, segment_bytes, max_size, thread_min, 0);
}

/* Through shared memory (shm.h): slices at odd offsets of the arena, sizes on both
 * sides of SHM_MIN_BYTES and not multiples of the world; the same checks. */
static void test_shm_allreduce(void **state)
{
    (void)state;
    for (int world = 2; world <= 4; world++) check_allreduce_opts(world, 0, SIZE_MAX, 0, 1);
}

static void test_allreduce_2(void **state)
{
    (void)state;
    check_allreduce(2, 0, SIZE_MAX, 0);
}
static void test_allreduce_3(void **state)
{
    (void)state;
    check_allreduce(3, 0, SIZE_MAX, 0);
}
static void test_allreduce_4(void **state)
{
    (void)state;
    check_allreduce(4, 0, SIZE_MAX, 0);
}
/* Many small segments (1021 floats, a prime) exercise the pipelining bookkeeping. */
static void test_allreduce_small_segments(void **state)
{
    (void)state;
    check_allreduce(3, 1021 * sizeof(float), 300001, 0);
    check_allreduce(4, 4096, 65539, 0);
}

/* Both paths on every size: all on one thread, and the send thread even for 1 float. */
static void test_allreduce_single_thread_and_all_threaded(void **state)
{
    (void)state;
    check_allreduce(3, 0, SIZE_MAX, SIZE_MAX);
    check_allreduce(2, 0, SIZE_MAX, 4);
    check_allreduce(4, 4096, 300001, 4);
}

static void nap(double s)
{
    struct timespec ts = {.tv_sec = (time_t)s, .tv_nsec = (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

static void bcast_barrier_rank(const Cluster *c, int rank, void *argp)
{
    RingArg *a = argp;
    RankResult *r = &a->res[rank];
    Collective *coll = cluster_ring(c, rank, SECRET, scaled(5.0), a->segment_bytes, a->thread_min,
                                    r->err, sizeof r->err);
    if (!coll) {
        r->rc = -1;
        return;
    }
    static const size_t bsizes[] = {0, 1, 7, 4096, 3 * 1024 * 1024 + 3};
    int ok = 1;
    for (int root = 0; root < c->world && ok; root++)
        for (size_t k = 0; k < sizeof bsizes / sizeof bsizes[0] && ok; k++) {
            size_t n = bsizes[k];
            unsigned char *b = malloc(n + 1);
            for (size_t i = 0; i < n; i++)
                b[i] = rank == root ? (unsigned char)(i * 31 + (size_t)root + k) : 0xEE;
            if ((r->rc = coll_broadcast(coll, b, n, root, r->err, sizeof r->err)) < 0) ok = 0;
            for (size_t i = 0; i < n && ok; i++)
                if (b[i] != (unsigned char)(i * 31 + (size_t)root + k)) {
                    snprintf(r->err, sizeof r->err, "root %d, %zu bytes: byte %zu differs", root, n,
                             i);
                    ok = 0;
                }
            free(b);
        }
    r->bcast_ok = ok;
    if (ok) {
        nap(scaled(0.15) * rank); /* the ranks enter the barrier one after another */
        r->t_enter = util_now();
        r->rc = coll_barrier(coll, r->err, sizeof r->err);
        r->t_exit = util_now();
    }
    coll_destroy(coll);
}

static void check_bcast_barrier(int world, size_t segment_bytes)
{
    Cluster c;
    RankResult *res = cluster_shared(sizeof(RankResult) * CLUSTER_MAX);
    assert_int_equal(cluster_listen(&c, world), 0);
    RingArg a = {.res = res, .segment_bytes = segment_bytes, .victim = -1};
    for (int r = 0; r < world; r++) cluster_start(&c, r, bcast_barrier_rank, &a);
    assert_int_equal(cluster_wait(&c, scaled(60)), 0);
    double last_enter = 0;
    for (int r = 0; r < world; r++) {
        if (res[r].rc != 0 || !res[r].bcast_ok) fail_msg("rank %d: %s", r, res[r].err);
        last_enter = fmax(last_enter, res[r].t_enter);
    }
    for (int r = 0; r < world; r++)
        if (res[r].t_exit < last_enter)
            fail_msg("rank %d left the barrier at %.3f before the last rank entered at %.3f", r,
                     res[r].t_exit, last_enter);
    munmap(res, sizeof(RankResult) * CLUSTER_MAX);
}

static void test_broadcast_barrier_2(void **state)
{
    (void)state;
    check_bcast_barrier(2, 0);
}
static void test_broadcast_barrier_4(void **state)
{
    (void)state;
    check_bcast_barrier(4, 0);
    check_bcast_barrier(3, 1000);
}

static void *kill_self_soon(void *sig)
{
    nap(scaled(0.002));
    kill(getpid(), *(int *)sig);
    return NULL;
}

/* The victim all-reduces a few times, then SIGKILLs or SIGSTOPs itself from a thread
 * 2 ms (scaled) into its next all-reduce while the others keep all-reducing 4 MiB buffers. */
static void failure_rank(const Cluster *c, int rank, void *argp)
{
    RingArg *a = argp;
    RankResult *r = &a->res[rank];
    Collective *coll =
        cluster_ring(c, rank, SECRET, scaled(1.5), 0, a->thread_min, r->err, sizeof r->err);
    if (!coll) {
        r->rc = -1;
        return;
    }
    size_t n = 1 << 20;
    float *x = calloc(n, sizeof *x);
    for (int it = 0; it < 100000; it++) {
        if (rank == a->victim && it == 5) {
            /* die in the middle of the next all-reduce: after the header went out */
            r->t_event = util_now();
            pthread_t killer; /* a thread, not a child: nothing is left for init to reap */
            pthread_create(&killer, NULL, kill_self_soon, &a->victim_sig);
            for (;;) coll_allreduce_sum(coll, x, n, r->err, sizeof r->err);
        }
        if ((r->rc = coll_allreduce_sum(coll, x, n, r->err, sizeof r->err)) < 0) {
            r->t_event = util_now();
            break;
        }
    }
    /* a broken ring keeps failing, immediately */
    char err2[512];
    r->repeat_same[0] = coll_barrier(coll, err2, sizeof err2) < 0 && strcmp(err2, r->err) == 0;
    free(x);
    coll_destroy(coll);
}

static void check_failure_opts(int world, int victim, int sig, size_t thread_min)
{
    Cluster c;
    RankResult *res = cluster_shared(sizeof(RankResult) * CLUSTER_MAX);
    assert_int_equal(cluster_listen(&c, world), 0);
    RingArg a = {.res = res, .victim = victim, .victim_sig = sig, .thread_min = thread_min};
    for (int r = 0; r < world; r++) cluster_start(&c, r, failure_rank, &a);
    /* survivors must return; only a stopped victim is left to kill */
    for (int r = 0; r < world; r++) {
        if (r == victim) continue;
        double t0 = util_now();
        while (util_now() - t0 < scaled(30)) {
            if (waitpid(c.pid[r], &c.status[r], WNOHANG) == c.pid[r]) {
                c.pid[r] = 0;
                break;
            }
            struct timespec ts = {0, 10 * 1000 * 1000};
            nanosleep(&ts, NULL);
        }
    }
    int killed = cluster_wait(&c, scaled(1));
    assert_true(killed <= 1);
    int named = 0;
    for (int r = 0; r < world; r++) {
        if (r == victim) continue;
        if (res[r].rc == 0) fail_msg("rank %d did not notice rank %d's loss", r, victim);
        double dt = res[r].t_event - res[victim].t_event;
        print_message("# rank %d after %.2f s: %s\n", r, dt, res[r].err);
        if (dt > scaled(5.0))
            fail_msg("rank %d took %.2f s to fail, want <= %g", r, dt, scaled(5.0));
        if (!res[r].repeat_same[0]) fail_msg("rank %d: a call after the failure did not fail", r);
        char want[32];
        snprintf(want, sizeof want, "rank %d", victim);
        named += strstr(res[r].err, want) != NULL;
    }
    assert_true(named >= 1);
    munmap(res, sizeof(RankResult) * CLUSTER_MAX);
}

static void check_failure(int world, int victim, int sig)
{
    check_failure_opts(world, victim, sig, 0);
}

static void test_peer_killed(void **state)
{
    (void)state;
    check_failure(3, 2, SIGKILL);
    check_failure(2, 0, SIGKILL);
}

static void test_peer_silent(void **state)
{
    (void)state;
    check_failure(3, 1, SIGSTOP);
}

/* The same failures with everything on one thread. */
static void test_peer_lost_single_thread(void **state)
{
    (void)state;
    check_failure_opts(3, 0, SIGKILL, SIZE_MAX);
    check_failure_opts(2, 1, SIGSTOP, SIZE_MAX);
}

/* RingOptions.watch_next: in a ring of 3, rank 0 leaves at once (its ring closed), rank
 * 1 stays silent for 3 s, rank 2 waits in a broadcast from rank 1. With the watch rank 2
 * fails as soon as rank 0, its rank+1, is gone, naming it; without it only when rank 1
 * leaves too (what its rank-1 would wait for while rank 0 waited for rank 2 in its next
 * rendezvous: issue 46's stalled grow). */
static volatile int watch_on = 1;

static void watch_rank(const Cluster *c, int rank, void *argp)
{
    RingArg *a = argp;
    RankResult *r = &a->res[rank];
    RingOptions ro = {.io_timeout_s = scaled(20), .watch_next = &watch_on};
    Collective *coll = cluster_ring_opts(c, rank, SECRET, &ro, r->err, sizeof r->err);
    if (!coll) {
        r->rc = -1;
        return;
    }
    r->t_enter = util_now();
    if (rank == 1) nap(scaled(3));
    if (rank == 2) {
        int x = 0;
        r->rc = coll_broadcast(coll, &x, sizeof x, 1, r->err, sizeof r->err);
    }
    r->t_exit = util_now();
    coll_destroy(coll);
}

static double watch_case(int on, char *err, size_t errlen)
{
    Cluster c;
    RankResult *res = cluster_shared(sizeof(RankResult) * CLUSTER_MAX);
    assert_int_equal(cluster_listen(&c, 3), 0);
    watch_on = on;
    RingArg a = {.res = res, .victim = -1};
    for (int r = 0; r < 3; r++) cluster_start(&c, r, watch_rank, &a);
    assert_int_equal(cluster_wait(&c, scaled(30)), 0);
    assert_int_not_equal(res[2].rc, 0); /* rank 1 never sends */
    snprintf(err, errlen, "%s", res[2].err);
    double dt = res[2].t_exit - res[2].t_enter;
    munmap(res, sizeof(RankResult) * CLUSTER_MAX);
    return dt;
}

static void test_watch_next_sees_rank_plus_one_leave(void **state)
{
    (void)state;
    char err[512];
    double dt = watch_case(1, err, sizeof err);
    print_message("# watched: rank 2 failed after %.2f s: %s\n", dt, err);
    assert_non_null(strstr(err, "lost rank 0"));
    assert_non_null(strstr(err, "it left this ring"));
    if (dt > scaled(1.5))
        fail_msg("rank 2 took %.2f s to see rank 0 leave, want <= %g", dt, scaled(1.5));
    dt = watch_case(0, err, sizeof err);
    print_message("# not watched: rank 2 failed after %.2f s: %s\n", dt, err);
    assert_non_null(strstr(err, "lost rank 1"));
    assert_true(dt >= 2.5);
}

static void mismatch_rank(const Cluster *c, int rank, void *argp)
{
    RingArg *a = argp;
    RankResult *r = &a->res[rank];
    Collective *coll = cluster_ring(c, rank, SECRET, scaled(3.0), 0, 0, r->err, sizeof r->err);
    if (!coll) {
        r->rc = -1;
        return;
    }
    float x[100] = {0};
    if (rank == 0) r->rc = coll_broadcast(coll, x, sizeof x, 0, r->err, sizeof r->err);
    else r->rc = coll_allreduce_sum(coll, x, 100, r->err, sizeof r->err);
    coll_destroy(coll);
}

static void test_mismatched_calls(void **state)
{
    (void)state;
    Cluster c;
    RankResult *res = cluster_shared(sizeof(RankResult) * CLUSTER_MAX);
    assert_int_equal(cluster_listen(&c, 2), 0);
    RingArg a = {.res = res, .victim = -1};
    for (int r = 0; r < 2; r++) cluster_start(&c, r, mismatch_rank, &a);
    assert_int_equal(cluster_wait(&c, scaled(30)), 0);
    for (int r = 0; r < 2; r++) {
        print_message("# rank %d: %s\n", r, res[r].err);
        assert_int_not_equal(res[r].rc, 0);
    }
    assert_non_null(strstr(res[1].err, "different collectives"));
    munmap(res, sizeof(RankResult) * CLUSTER_MAX);
}
/* coll_sum_doubles (a synchronized BatchNormalization's sums) over the real ring: 3
 * ranks' doubles, of magnitudes far beyond a float's precision and range (1e300, a
 * subnormal 1e-310, 1 + 2^-52, a sum that cancels to 1), come back on every rank as exactly
 * their sum in rank order, bit for bit, though the ring sums floats in an order of its
 * own. */
enum { SUM_N = 6 };
static double sum_input(int rank, int i)
{
    const double v[SUM_N] = {1e300, 1e-310, -0.0, 1.0 + 0x1p-52, 3.14159, 1e20};
    if (i == 5) return rank == 0 ? v[i] : rank == 1 ? -v[i] : 1.0; /* cancels to 1 */
    return v[i] * (rank + 1);
}

static int ring_allreduce_fn(void *ctx, float *buf, size_t n, char *err, size_t errlen)
{
    return coll_allreduce_sum(ctx, buf, n, err, errlen);
}

static void sum_doubles_rank(const Cluster *c, int rank, void *argp)
{
    RingArg *a = argp;
    RankResult *r = &a->res[rank];
    Collective *coll = cluster_ring(c, rank, SECRET, scaled(5.0), 0, 0, r->err, sizeof r->err);
    if (!coll) {
        r->rc = -1;
        return;
    }
    double v[SUM_N];
    for (int i = 0; i < SUM_N; i++) v[i] = sum_input(rank, i);
    r->rc =
        coll_sum_doubles(v, SUM_N, rank, c->world, ring_allreduce_fn, coll, r->err, sizeof r->err);
    memcpy(r->maxerr, v, sizeof v);
    coll_destroy(coll);
}

static void test_sum_doubles_exact(void **state)
{
    (void)state;
    enum { WORLD = 3 };
    Cluster c;
    RankResult *res = cluster_shared(sizeof(RankResult) * CLUSTER_MAX);
    assert_non_null(res);
    assert_int_equal(cluster_listen(&c, WORLD), 0);
    RingArg a = {.res = res, .victim = -1};
    for (int r = 0; r < WORLD; r++) cluster_start(&c, r, sum_doubles_rank, &a);
    assert_int_equal(cluster_wait(&c, scaled(60)), 0);
    for (int i = 0; i < SUM_N; i++) {
        double want = sum_input(0, i);
        for (int r = 1; r < WORLD; r++) want += sum_input(r, i);
        for (int r = 0; r < WORLD; r++) {
            if (res[r].rc != 0) fail_msg("rank %d: %s", r, res[r].err);
            if (memcmp(&res[r].maxerr[i], &want, sizeof want) != 0)
                fail_msg("value %d: rank %d got %.17g, want %.17g", i, r, res[r].maxerr[i], want);
        }
    }
    assert_true(res[0].maxerr[5] == 1.0);
    munmap(res, sizeof(RankResult) * CLUSTER_MAX);
}

static void test_world_one_is_local(void **state)
{
    (void)state;
    NetRing none = {.prev_fd = -1, .next_fd = -1};
    Collective *c = ring_create(0, 1, &none, NULL);
    float x[3] = {1, 2, 3};
    char err[64];
    assert_string_equal(c->name, "local");
    assert_int_equal(coll_allreduce_sum(c, x, 3, err, sizeof err), 0);
    assert_true(x[0] == 1 && x[1] == 2 && x[2] == 3);
    coll_destroy(c);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    test_time_scale();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_world_one_is_local),
        cmocka_unit_test(test_sum_doubles_exact),
        cmocka_unit_test(test_allreduce_2),
        cmocka_unit_test(test_allreduce_3),
        cmocka_unit_test(test_allreduce_4),
        cmocka_unit_test(test_allreduce_small_segments),
        cmocka_unit_test(test_shm_allreduce),
        cmocka_unit_test(test_allreduce_single_thread_and_all_threaded),
        cmocka_unit_test(test_broadcast_barrier_2),
        cmocka_unit_test(test_broadcast_barrier_4),
        cmocka_unit_test(test_mismatched_calls),
        cmocka_unit_test(test_peer_killed),
        cmocka_unit_test(test_peer_silent),
        cmocka_unit_test(test_peer_lost_single_thread),
        cmocka_unit_test(test_watch_next_sees_rank_plus_one_leave),
    };
    return cmocka_run_group_tests_name("ring", tests, NULL, NULL);
}
