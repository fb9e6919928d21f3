#include "shm.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/rand.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util.h"

/* An object's name: NAME_PREFIX, the creator's pid, '-' and NAME_RANDOM random bytes in
 * lowercase hex, NUL-terminated within NAME_BYTES (at most 11 + 10 + 1 + 32 + 1). */
#define NAME_BYTES 64
#define NAME_PREFIX "/kubetrain-"
#define NAME_RANDOM 16
#define BLOCK_FLOATS 2048 /* the running sum of world > 2 ranks, kept in L1 */

typedef struct Shm {
    Collective base;
    Collective *ring;
    float *arena;        /* this rank's arena, shared once active */
    size_t bytes;
    const float **views; /* [world]: views[rank] == arena, the others read-only maps */
    int active;
} Shm;

static Shm *shm_of(Collective *c)
{
    return (Shm *)c;
}

static int shm_broadcast(Collective *c, void *buf, size_t n, int root, char *err, size_t errlen)
{
    return coll_broadcast(shm_of(c)->ring, buf, n, root, err, errlen);
}

static int shm_barrier(Collective *c, char *err, size_t errlen)
{
    return coll_barrier(shm_of(c)->ring, err, errlen);
}

static void unmap_peers(Shm *s)
{
    for (int r = 0; s->views && r < s->base.world; r++)
        if (s->views[r] && r != s->base.rank) munmap((void *)(uintptr_t)s->views[r], s->bytes);
    free(s->views);
    s->views = NULL;
    s->active = 0;
}

/* dst[i] = sum over ranks k = 0..world-1 of views[k][off + i], added in rank order */
static void reduce_chunk(Shm *s, size_t off, size_t n)
{
    float *dst = s->arena + off;
    const int world = s->base.world;
    if (world == 2) {
        const float *a = s->views[0] + off, *b = s->views[1] + off;
        for (size_t i = 0; i < n; i++) dst[i] = a[i] + b[i];
        return;
    }
    float acc[BLOCK_FLOATS];
    for (size_t lo = 0; lo < n; lo += BLOCK_FLOATS) {
        const size_t m = n - lo < BLOCK_FLOATS ? n - lo : BLOCK_FLOATS;
        const float *a = s->views[0] + off + lo, *b = s->views[1] + off + lo;
        for (size_t i = 0; i < m; i++) acc[i] = a[i] + b[i];
        for (int k = 2; k < world; k++) {
            const float *v = s->views[k] + off + lo;
            for (size_t i = 0; i < m; i++) acc[i] += v[i];
        }
        memcpy(dst + lo, acc, m * sizeof *acc);
    }
}

static int shm_allreduce_sum(Collective *c, float *buf, size_t n, char *err, size_t errlen)
{
    Shm *s = shm_of(c);
    const size_t total = s->bytes / sizeof(float);
    if (!s->active || buf < s->arena || buf >= s->arena + total ||
        n > total - (size_t)(buf - s->arena) || n * sizeof(float) < SHM_MIN_BYTES)
        return coll_allreduce_sum(s->ring, buf, n, err, errlen);
    const size_t off = (size_t)(buf - s->arena);
    const int world = c->world, rank = c->rank;
#define CHUNK(r) (off + n * (size_t)(r) / (size_t)world)
    int rc;
    /* every rank's slice is final */
    if ((rc = coll_barrier(s->ring, err, errlen))) return rc;
    reduce_chunk(s, CHUNK(rank), CHUNK(rank + 1) - CHUNK(rank));
    /* every chunk is summed */
    if ((rc = coll_barrier(s->ring, err, errlen))) return rc;
    for (int r = 0; r < world; r++)
        if (r != rank)
            memcpy(s->arena + CHUNK(r), s->views[r] + CHUNK(r),
                   (CHUNK(r + 1) - CHUNK(r)) * sizeof(float));
    /* every rank has its copies: the slice may be written again */
    return coll_barrier(s->ring, err, errlen);
#undef CHUNK
}

/* 1 when a peer's name is one that share_own makes. A name is a file under /dev/shm,
 * so anything else — no NUL within NAME_BYTES, another prefix, a '/', "..", a length
 * of its own — is refused before shm_open: a rank of another trainer version, or a
 * bug, must not make this one open what it names. */
static int name_is_kubetrain(const char name[NAME_BYTES])
{
    const char *end = memchr(name, '\0', NAME_BYTES);
    const size_t plen = sizeof NAME_PREFIX - 1;
    if (!end || (size_t)(end - name) <= plen || memcmp(name, NAME_PREFIX, plen) != 0) return 0;
    const char *p = name + plen, *pid = p;
    while (p < end && *p >= '0' && *p <= '9') p++;
    if (p == pid || p - pid > 10 || p == end || *p++ != '-' || end - p != 2 * NAME_RANDOM) return 0;
    for (; p < end; p++)
        if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f'))) return 0;
    return 1;
}

/* The reason a peer's name is refused, in why, with the name's bytes as printable text. */
static void why_bad_name(int rank, const char name[NAME_BYTES], char *why, size_t whylen)
{
    char shown[4 * NAME_BYTES + 1];
    size_t n = 0;
    for (size_t i = 0; i < NAME_BYTES && name[i]; i++) {
        const unsigned char ch = (unsigned char)name[i];
        const int plain = ch >= 0x20 && ch < 0x7f && ch != '\\';
        n += (size_t)snprintf(shown + n, sizeof shown - n, plain ? "%c" : "\\x%02x", ch);
    }
    shown[n] = '\0';
    snprintf(why, whylen,
             "rank %d sent \"%s\"%s for its shared memory, not a name of the form " NAME_PREFIX
             "<pid>-<%d hex digits>; it is not opened (are all ranks "
             "the same trainer version?)",
             rank, shown, memchr(name, '\0', NAME_BYTES) ? "" : " (unterminated)", 2 * NAME_RANDOM);
}

/* Opens peer `name` read-only; NULL (reason in why) where this host has no such object
 * of this user's and this size. */
static const float *open_peer(const char *name, size_t bytes, char *why, size_t whylen)
{
    int fd = shm_open(name, O_RDONLY, 0);
    if (fd < 0 && errno == ENOENT) {
        snprintf(why, whylen,
                 "a peer's shared memory %s is not here (another host, or a "
                 "/dev/shm of its own as in a pod)",
                 name);
        return NULL;
    }
    if (fd < 0) {
        snprintf(why, whylen, "a peer's shared memory %s: %s", name, strerror(errno));
        return NULL;
    }
    struct stat st;
    const float *p = NULL;
    if (fstat(fd, &st) != 0 || st.st_uid != geteuid() || (size_t)st.st_size != bytes) {
        snprintf(why, whylen, "%s: not this job's (owner or size differs)", name);
    } else {
        void *m = mmap(NULL, bytes, PROT_READ, MAP_SHARED, fd, 0);
        if (m == MAP_FAILED) snprintf(why, whylen, "%s: mmap: %s", name, strerror(errno));
        else p = m;
    }
    close(fd);
    return p;
}

/* Moves arena into a new shared-memory object of this rank's, contents kept. Returns
 * its name in name, or a reason in why; a negative errno only where the arena itself
 * may be lost (its remapping failed). */
static int share_own(Shm *s, char name[NAME_BYTES], char *why, size_t whylen)
{
    unsigned char rnd[NAME_RANDOM];
    if (RAND_bytes(rnd, sizeof rnd) != 1) {
        snprintf(why, whylen, "no random bytes for a name");
        return 1;
    }
    int len = snprintf(name, NAME_BYTES, NAME_PREFIX "%ld-", (long)getpid());
    for (size_t i = 0; i < sizeof rnd; i++)
        len += snprintf(name + len, (size_t)(NAME_BYTES - len), "%02x", rnd[i]);
    int fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600);
    if (fd < 0) {
        snprintf(why, whylen, "shm_open %s: %s", name, strerror(errno));
        name[0] = '\0';
        return 1;
    }
    size_t done = 0;
    int bad = ftruncate(fd, (off_t)s->bytes) != 0;
    while (!bad && done < s->bytes) {
        ssize_t w = pwrite(fd, (const char *)s->arena + done, s->bytes - done, (off_t)done);
        if (w <= 0) bad = 1;
        else done += (size_t)w;
    }
    if (bad) {
        /* /dev/shm too small (a container's default is 64 MiB) */
        snprintf(why, whylen, "%s: %zu bytes: %s", name, s->bytes, strerror(errno));
        close(fd);
        shm_unlink(name);
        name[0] = '\0';
        return 1;
    }
    void *m = mmap(s->arena, s->bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0);
    int e = errno;
    close(fd);
    if (m == MAP_FAILED) {
        shm_unlink(name);
        return -e;
    }
    return 0;
}

static int shm_share_arena(Collective *c, float *arena, size_t bytes, char *err, size_t errlen)
{
    Shm *s = shm_of(c);
    const char *env = getenv("KUBETRAIN_SHM");
    const int off = env && !strcmp(env, "0");
    if (s->arena) return 0;
    s->arena = arena;
    s->bytes = bytes;
    const int world = c->world;
    char(*names)[NAME_BYTES] = xcalloc((size_t)world, NAME_BYTES);
    char why[512] = "KUBETRAIN_SHM=0 in the environment";
    /* off, it still takes part in the exchange (with no name), so that every rank
     * makes the same choice */
    int rc = off ? 1 : share_own(s, names[c->rank], why, sizeof why);
    if (rc < 0) {
        snprintf(err, errlen, "gradient arena into shared memory: %s", strerror(-rc));
        free(names);
        return rc;
    }
    float ok = rc == 0;
    for (int r = 0; r < world; r++)
        if ((rc = coll_broadcast(s->ring, names[r], NAME_BYTES, r, err, errlen))) goto out;
    s->views = xcalloc((size_t)world, sizeof *s->views);
    s->views[c->rank] = arena;
    for (int r = 0; r < world && ok > 0; r++) {
        if (r == c->rank) continue;
        if (!names[r][0]) {
            snprintf(why, sizeof why, "rank %d has no shared arena", r);
            ok = 0;
        } else if (!name_is_kubetrain(names[r])) {
            why_bad_name(r, names[r], why, sizeof why);
            ok = 0;
        } else if (!(s->views[r] = open_peer(names[r], bytes, why, sizeof why))) {
            ok = 0;
        }
    }
    /* once every rank has tried every peer the names may go */
    float all = ok;
    if ((rc = coll_allreduce_sum(s->ring, &all, 1, err, errlen))) goto out;
    s->active = all == (float)world;
    if (s->active)
        util_log("all-reduce through shared memory: the %d ranks share this host", world);
    else
        util_log("all-reduce over TCP: %s",
                 ok > 0 ? "another rank cannot map this one's shared memory" : why);
out:
    if (names[c->rank][0]) shm_unlink(names[c->rank]);
    if (!s->active) unmap_peers(s);
    free(names);
    return rc;
}

static void shm_destroy(Collective *c)
{
    Shm *s = shm_of(c);
    unmap_peers(s);
    coll_destroy(s->ring);
    free(s);
}

int shm_active(const Collective *c)
{
    return c->share_arena == shm_share_arena && ((const Shm *)c)->active;
}

Collective *shm_wrap(Collective *ring)
{
    Shm *s = xcalloc(1, sizeof *s);
    s->ring = ring;
    s->base = (Collective){.rank = ring->rank,
                           .world = ring->world,
                           .name = ring->name,
                           .device_buffers = 0,
                           .allreduce_sum = shm_allreduce_sum,
                           .broadcast = shm_broadcast,
                           .barrier = shm_barrier,
                           .share_arena = shm_share_arena,
                           .destroy = shm_destroy};
    return &s->base;
}
