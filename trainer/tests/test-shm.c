/* shm (shm.h): the names of the shared-memory objects that ranks exchange. Two forked
 * ranks on loopback: rank 0 runs shm_wrap's exchange; rank 1 does too, or speaks the
 * exchange over the bare ring with a name of the test's choosing and claims to have
 * mapped rank 0's. A name that is not one a trainer makes (no NUL in its 64 bytes,
 * another prefix, a '/', "..", another length, uppercase hex) is refused before
 * shm_open: rank 0 opens nothing but its own object, keeps the ring, and logs the
 * sender's rank. shm_open is wrapped by a spy that records each name it is given and
 * calls the C library's (the only way to see which names reach it; nothing is faked).
 * Every timeout is multiplied by KT_TEST_TIME_SCALE (timescale.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "fork_cluster.h"
#include "shm.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <sys/stat.h>

#define SECRET "shm-test-secret"
#define NAME_BYTES 64 /* shm.c's */
#define MAX_OPENS 8
#define ARENA_BYTES (64 * 4096)

typedef struct Result {
    pid_t pid;
    int ran;                    /* coll_share_arena returned */
    int rc;                     /* its return */
    int active;                 /* shm_active after it */
    int opens;                  /* names given to shm_open */
    char opened[MAX_OPENS][80]; /* their first 79 bytes */
    char err[256];
} Result;

/* Set in a rank that records what it passes to shm_open. */
static Result *spy;

int shm_open(const char *name, int oflag, mode_t mode)
{
    static int (*libc_shm_open)(const char *, int, mode_t);
    if (!libc_shm_open) *(void **)&libc_shm_open = dlsym(RTLD_NEXT, "shm_open");
    if (spy && spy->opens < MAX_OPENS) {
        /* strlen reads the whole name: with ASan, an unterminated one is reported here */
        size_t n = strlen(name);
        snprintf(spy->opened[spy->opens++], sizeof spy->opened[0], "%.*s", (int)n, name);
    }
    return libc_shm_open(name, oflag, mode);
}

typedef struct Case {
    Result *res;           /* [2] */
    int honest_peer;       /* rank 1 runs shm_wrap too */
    char name[NAME_BYTES]; /* else the name rank 1 sends */
    int create;            /* rank 1 creates an object of that name, of the arena's size */
} Case;

static void *new_arena(void)
{
    void *a = mmap(NULL, ARENA_BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return a == MAP_FAILED ? NULL : a;
}

/* A rank as the trainer runs it: the ring wrapped by shm_wrap, the arena shared. */
static void honest_rank(const Cluster *c, int rank, void *argp)
{
    Case *k = argp;
    Result *r = &k->res[rank];
    r->pid = getpid();
    spy = r;
    Collective *coll = cluster_ring(c, rank, SECRET, scaled(5), 0, 0, r->err, sizeof r->err);
    if (!coll) return;
    coll = shm_wrap(coll);
    float *arena = new_arena();
    if (!arena) {
        snprintf(r->err, sizeof r->err, "no memory for the arena");
        return;
    }
    r->rc = coll_share_arena(coll, arena, ARENA_BYTES, r->err, sizeof r->err);
    r->active = shm_active(coll);
    r->ran = 1;
    coll_destroy(coll);
    munmap(arena, ARENA_BYTES);
}

/* shm_share_arena's exchange over the bare ring: every rank's name broadcast from it in
 * rank order, then the all-reduce of "mapped every peer" (claimed). */
static void crafted_rank(const Cluster *c, int rank, void *argp)
{
    Case *k = argp;
    Result *r = &k->res[rank];
    Collective *ring = cluster_ring(c, rank, SECRET, scaled(5), 0, 0, r->err, sizeof r->err);
    if (!ring) return;
    int fd = -1;
    if (k->create) {
        fd = shm_open(k->name, O_RDWR | O_CREAT | O_EXCL, 0600);
        if (fd < 0 || ftruncate(fd, ARENA_BYTES) != 0) {
            snprintf(r->err, sizeof r->err, "cannot create %s", k->name);
            goto out;
        }
    }
    char names[2][NAME_BYTES] = {{0}};
    memcpy(names[rank], k->name, NAME_BYTES);
    float all = 1.0f;
    for (int i = 0; i < 2 && r->rc == 0; i++)
        r->rc = coll_broadcast(ring, names[i], NAME_BYTES, i, r->err, sizeof r->err);
    if (r->rc == 0) r->rc = coll_allreduce_sum(ring, &all, 1, r->err, sizeof r->err);
    r->ran = 1;
out:
    if (fd >= 0) {
        close(fd);
        shm_unlink(k->name);
    }
    coll_destroy(ring);
}

/* Runs rank 0 honestly and rank 1 as k says; what they write to stderr goes to log. */
static void run_pair(Case *k, char *log, size_t loglen)
{
    Cluster c;
    k->res = cluster_shared(2 * sizeof(Result));
    assert_non_null(k->res);
    assert_int_equal(cluster_listen(&c, 2), 0);
    char path[] = "/tmp/kt-test-shm-XXXXXX";
    int logfd = mkstemp(path);
    assert_true(logfd >= 0);
    int saved = dup(2);
    dup2(logfd, 2);
    cluster_start(&c, 0, honest_rank, k);
    cluster_start(&c, 1, k->honest_peer ? honest_rank : crafted_rank, k);
    dup2(saved, 2);
    close(saved);
    assert_int_equal(cluster_wait(&c, scaled(30)), 0);
    ssize_t n = pread(logfd, log, loglen - 1, 0);
    log[n > 0 ? n : 0] = '\0';
    close(logfd);
    unlink(path);
    if (!WIFEXITED(c.status[0]) || WEXITSTATUS(c.status[0]) != 0 || !k->res[0].ran)
        fail_msg("rank 0 did not finish the exchange (wait status %#x): %s%s", c.status[0],
                 k->res[0].err, log);
    if (!k->res[1].ran) fail_msg("rank 1: %s", k->res[1].err);
}

/* Rank 1 sends `name` (NAME_BYTES bytes, terminated or not), which rank 0 must refuse
 * before shm_open, logging it as `shown`. */
static void expect_refused(const char *label, const char name[NAME_BYTES], int create,
                           const char *shown)
{
    Case k = {.create = create};
    memcpy(k.name, name, NAME_BYTES);
    char log[8192], own[32];
    run_pair(&k, log, sizeof log);
    const Result *r = &k.res[0];
    print_message("# %s: %s", label, log);
    assert_int_equal(r->rc, 0);
    if (r->active) fail_msg("%s: rank 0 all-reduces through the peer's object", label);
    /* its own object, created before the exchange, and nothing else */
    snprintf(own, sizeof own, "/kubetrain-%ld-", (long)r->pid);
    for (int i = 0; i < r->opens; i++)
        if (strncmp(r->opened[i], own, strlen(own)) != 0)
            fail_msg("%s: rank 0 passed \"%s\" to shm_open", label, r->opened[i]);
    assert_int_equal(r->opens, 1);
    const char *want = "all-reduce over TCP: rank 1 sent \"";
    if (!strstr(log, want) || !strstr(log, shown) || !strstr(log, "it is not opened"))
        fail_msg("%s: the log lacks \"%s\", \"%s\" or \"it is not opened\"", label, want, shown);
    munmap(k.res, 2 * sizeof(Result));
}

/* A name of NAME_BYTES bytes from text, NUL-padded. */
static void name_of(char name[NAME_BYTES], const char *text)
{
    memset(name, 0, NAME_BYTES);
    memcpy(name, text, strlen(text) < NAME_BYTES ? strlen(text) : NAME_BYTES);
}

#define HEX32 "0123456789abcdef0123456789abcdef"

/* The names a trainer makes are taken up: both ranks map each other's object. Without
 * this, a check that refused every name would pass the tests below. */
static void test_trainer_names_accepted(void **state)
{
    (void)state;
    Case k = {.honest_peer = 1};
    char log[8192];
    run_pair(&k, log, sizeof log);
    for (int rank = 0; rank < 2; rank++) {
        const Result *r = &k.res[rank];
        if (r->rc != 0 || !r->active)
            fail_msg("rank %d: rc %d, active %d: %s %s", rank, r->rc, r->active, r->err, log);
        /* its own and the peer's */
        assert_int_equal(r->opens, 2);
    }
    munmap(k.res, 2 * sizeof(Result));
}

/* 64 bytes of a well-formed start and no NUL: the old code read on past the buffer. */
static void test_unterminated_name_refused(void **state)
{
    (void)state;
    char name[NAME_BYTES];
    memset(name, 'a', NAME_BYTES);
    memcpy(name, "/kubetrain-12-", 14);
    expect_refused("unterminated", name, 0, "(unterminated)");
}

/* Another prefix, naming an object that exists, is this user's and has the arena's
 * size: the old code mapped it and all-reduced through it. */
static void test_foreign_object_refused(void **state)
{
    (void)state;
    char name[NAME_BYTES], text[NAME_BYTES];
    snprintf(text, sizeof text, "/kt-test-shm-%ld-" HEX32, (long)getpid());
    name_of(name, text);
    expect_refused("another prefix", name, 1, text);
}

static void test_paths_and_shapes_refused(void **state)
{
    (void)state;
    static const struct {
        const char *label, *text, *shown;
    } bad[] = {
        {"a path", "/kubetrain-1-/../../etc/passwd", "/kubetrain-1-/../../etc/passwd"},
        {"'..' for the pid", "/kubetrain-..-" HEX32, "/kubetrain-..-"},
        {"'/' for the '-'", "/kubetrain-1/" HEX32, "/kubetrain-1/"},
        {"33 hex digits", "/kubetrain-1-" HEX32 "0", HEX32 "0"},
        {"uppercase hex", "/kubetrain-1-0123456789ABCDEF0123456789abcdef", "ABCDEF"},
        {"an 11-digit pid", "/kubetrain-12345678901-" HEX32, "12345678901"},
        {"no leading '/'", "kubetrain-1-" HEX32, "\"kubetrain-1-"},
        {"a newline", "/kubetrain-1-\n23456789abcdef0123456789abcdef", "/kubetrain-1-\\x0a2345"},
    };
    char name[NAME_BYTES];
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        name_of(name, bad[i].text);
        expect_refused(bad[i].label, name, 0, bad[i].shown);
    }
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    test_time_scale();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_trainer_names_accepted),
        cmocka_unit_test(test_unterminated_name_refused),
        cmocka_unit_test(test_foreign_object_refused),
        cmocka_unit_test(test_paths_and_shapes_refused),
    };
    return cmocka_run_group_tests_name("shm", tests, NULL, NULL);
}
