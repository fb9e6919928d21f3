#include "ring.h"

#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

enum { OP_ALLREDUCE = 1, OP_BROADCAST = 2, OP_BARRIER = 3 };
static const char *const OP_NAMES[] = {"?", "all-reduce", "broadcast", "barrier"};

#define HDR_BYTES 24 /* "KTRO" | u32 op (| root << 8) | u64 sequence | u64 size */

typedef struct Ring {
    Collective base;
    int prev_fd, next_fd;
    /* In a ring of two, rank 1's own connection to rank 0, kept open until the first
     * collective completes (ring_create); -1 otherwise. */
    int spare_fd;
    char prev_name[NET_NAME_MAX], next_name[NET_NAME_MAX];
    double io_timeout_s;
    const volatile int *watch_next; /* RingOptions.watch_next */
    size_t seg_bytes;
    uint64_t seq;
    float *stage; /* one received segment waiting to be added */
    int broken;
    char broken_msg[512];
    /* The send thread, for collectives of at least thread_min_bytes: it streams to next
     * while this thread receives and reduces, so both directions' copies run at once.
     * Guarded by mu: job, recv_done, send_rc, abort, quit. */
    size_t thread_min_bytes;
    int has_sender;
    pthread_t sender;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct Plan *job;
    uint32_t job_op;
    int recv_done;   /* segments the receiver has completed in the current job */
    int send_rc;     /* 1 running, 0 done, negative errno failed */
    int abort, quit;
    int wake[2];     /* the sender writes a byte here when it fails */
    char send_err[512];
} Ring;

/* One collective as two ordered streams of segments: what this rank sends to next and
 * what it receives from prev. Send segment g may go once receive segment g - dep has
 * completed (dep < 0: no dependency), which is what pipelines the ring. */
typedef struct Plan {
    Ring *r;
    int op;
    char *base;
    size_t n; /* elements of the whole buffer */
    size_t elem;
    int nsend, nrecv, nseg, dep;
    /* all-reduce geometry */
    int rank, world;
    size_t seg_elems;
    int threaded; /* sends are the send thread's */
} Plan;

/* all-reduce: step t sends chunk (rank - t) and receives chunk (rank - t - 1); steps
 * 0..W-2 reduce (add), W-1..2W-3 gather (copy). */
static size_t chunk_off(const Plan *p, int c)
{
    size_t w = (size_t)p->world, k = (size_t)c; /* floor(n * c / w) without overflow */
    return p->n / w * k + p->n % w * k / w;
}

static void ar_segment(const Plan *p, int g, int sending, char **ptr, size_t *len, int *add)
{
    int t = g / p->nseg, k = g % p->nseg, w = p->world;
    int c = ((p->rank - t - (sending ? 0 : 1)) % w + w) % w;
    size_t lo = chunk_off(p, c), hi = chunk_off(p, c + 1);
    size_t s = lo + (size_t)k * p->seg_elems;
    size_t e = s + p->seg_elems;
    if (s > hi) s = hi;
    if (e > hi) e = hi;
    *ptr = p->base + s * p->elem;
    *len = (e - s) * p->elem;
    *add = !sending && t < w - 1;
}

static void bc_segment(const Plan *p, int g, char **ptr, size_t *len)
{
    size_t s = (size_t)g * p->seg_elems, e = s + p->seg_elems;
    if (e > p->n) e = p->n;
    *ptr = p->base + s;
    *len = e - s;
}

static void segment(const Plan *p, int g, int sending, char **ptr, size_t *len, int *add)
{
    *add = 0;
    if (p->op == OP_BROADCAST) bc_segment(p, g, ptr, len);
    else ar_segment(p, g, sending, ptr, len, add);
}

static void reduce_add(float *restrict dst, const float *restrict src, size_t n)
{
    for (size_t i = 0; i < n; i++) dst[i] += src[i];
}

static void put_hdr(unsigned char *h, uint32_t op, uint64_t seq, uint64_t n)
{
    memcpy(h, "KTRO", 4);
    for (int i = 0; i < 4; i++) h[4 + i] = (unsigned char)(op >> (8 * i));
    for (int i = 0; i < 8; i++) h[8 + i] = (unsigned char)(seq >> (8 * i));
    for (int i = 0; i < 8; i++) h[16 + i] = (unsigned char)(n >> (8 * i));
}

static int fail(Ring *r, int rc, char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static int fail(Ring *r, int rc, char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->broken_msg, sizeof r->broken_msg, fmt, ap);
    va_end(ap);
    r->broken = rc;
    snprintf(err, errlen, "%s", r->broken_msg);
    return rc;
}

static int check_hdr(Ring *r, const unsigned char *h, uint32_t op, uint64_t n, char *err,
                     size_t errlen)
{
    unsigned char want[HDR_BYTES];
    put_hdr(want, op, r->seq, n);
    if (memcmp(h, want, HDR_BYTES) == 0) return 0;
    uint32_t gop = 0;
    uint64_t gseq = 0, gn = 0;
    for (int i = 0; i < 4; i++) gop |= (uint32_t)h[4 + i] << (8 * i);
    for (int i = 0; i < 8; i++) gseq |= (uint64_t)h[8 + i] << (8 * i);
    for (int i = 0; i < 8; i++) gn |= (uint64_t)h[16 + i] << (8 * i);
    if (memcmp(h, "KTRO", 4) != 0)
        return fail(r, -EPROTO, err, errlen, "%s sent bytes that are not a collective header",
                    r->prev_name);
    return fail(r, -EPROTO, err, errlen,
                "%s is in %s #%llu of %llu units (root %u), this rank in %s #%llu of %llu "
                "(root %u): the workers called different collectives",
                r->prev_name, OP_NAMES[(gop & 0xff) <= 3 ? gop & 0xff : 0],
                (unsigned long long)gseq, (unsigned long long)gn, gop >> 8, OP_NAMES[op & 0xff],
                (unsigned long long)r->seq, (unsigned long long)n, op >> 8);
}

/* ---------------------------------------------------------------------------------- */
/* the send thread */

/* Sends len bytes to next, waiting for the socket with poll; fails after io_timeout_s
 * without progress or when the receiver aborted. Returns 0 or a negative errno with
 * r->send_err set. */
static int sender_write(Ring *r, const char *src, size_t len, const Plan *p)
{
    double last = util_now();
    while (len > 0) {
        ssize_t w = send(r->next_fd, src, len, MSG_NOSIGNAL);
        if (w > 0) {
            src += w, len -= (size_t)w;
            last = util_now();
            continue;
        }
        if (errno != EAGAIN && errno != EINTR) {
            snprintf(r->send_err, sizeof r->send_err, "lost %s during %s: %s", r->next_name,
                     OP_NAMES[p->op], strerror(errno));
            return -ECONNRESET;
        }
        if (util_now() - last > r->io_timeout_s) {
            snprintf(r->send_err, sizeof r->send_err,
                     "lost %s during %s: it accepted no data for %.1f s", r->next_name,
                     OP_NAMES[p->op], r->io_timeout_s);
            return -ETIMEDOUT;
        }
        pthread_mutex_lock(&r->mu);
        int aborted = r->abort;
        pthread_mutex_unlock(&r->mu);
        if (aborted) return -ECANCELED;
        struct pollfd pf = {.fd = r->next_fd, .events = POLLOUT};
        poll(&pf, 1, 50);
    }
    return 0;
}

static int sender_run(Ring *r, const Plan *p, uint32_t hdr_op)
{
    unsigned char hdr[HDR_BYTES];
    put_hdr(hdr, hdr_op, r->seq, p->n);
    int rc = sender_write(r, (const char *)hdr, HDR_BYTES, p);
    for (int g = 0; rc == 0 && g < p->nsend; g++) {
        char *ptr;
        size_t len;
        int add;
        segment(p, g, 1, &ptr, &len, &add);
        if (len == 0) continue;
        if (p->dep >= 0) {
            pthread_mutex_lock(&r->mu);
            while (r->recv_done <= g - p->dep && !r->abort) pthread_cond_wait(&r->cv, &r->mu);
            int aborted = r->abort;
            pthread_mutex_unlock(&r->mu);
            if (aborted) return -ECANCELED;
        }
        rc = sender_write(r, ptr, len, p);
    }
    return rc;
}

static void *sender_main(void *arg)
{
    Ring *r = arg;
    pthread_mutex_lock(&r->mu);
    for (;;) {
        while (!r->job && !r->quit) pthread_cond_wait(&r->cv, &r->mu);
        if (r->quit) break;
        Plan *p = r->job;
        uint32_t op = r->job_op;
        pthread_mutex_unlock(&r->mu);
        int rc = sender_run(r, p, op);
        pthread_mutex_lock(&r->mu);
        r->job = NULL;
        r->send_rc = rc;
        pthread_cond_broadcast(&r->cv);
        if (rc < 0 && write(r->wake[1], "x", 1) < 0) r->abort = 1;
    }
    pthread_mutex_unlock(&r->mu);
    return NULL;
}

/* Receiver side: tells the sender that segment count `done` has been received. */
static void publish_recv(Ring *r, int done)
{
    pthread_mutex_lock(&r->mu);
    r->recv_done = done;
    pthread_cond_signal(&r->cv);
    pthread_mutex_unlock(&r->mu);
}

/* Ends the sender's job: on failure (rc < 0) aborts it first; waits until it stops.
 * Returns the sender's own result when rc is 0. */
static int sender_finish(Ring *r, int rc)
{
    pthread_mutex_lock(&r->mu);
    if (rc < 0) {
        r->abort = 1;
        pthread_cond_broadcast(&r->cv);
    }
    while (r->send_rc == 1) pthread_cond_wait(&r->cv, &r->mu);
    int src = r->send_rc;
    pthread_mutex_unlock(&r->mu);
    return src;
}

/* The poll loop: sends (unless the send thread does) and receives until both streams
 * have ended. The header goes first on both. */
static int run_loop(Plan *p, uint32_t hdr_op, char *err, size_t errlen)
{
    Ring *r = p->r;
    unsigned char shdr[HDR_BYTES], rhdr[HDR_BYTES];
    put_hdr(shdr, hdr_op, r->seq, p->n);
    size_t shdr_off = 0, rhdr_off = 0, soff = 0, roff = 0;
    int sg = 0, rg = 0;
    if (p->threaded) shdr_off = HDR_BYTES, sg = p->nsend;
    double last = util_now();
    for (;;) {
        int progress = 0;
        char *ptr;
        size_t len;
        int add;
        /* skip empty segments on both streams */
        while (sg < p->nsend && (segment(p, sg, 1, &ptr, &len, &add), len == 0)) sg++;
        int skipped = 0;
        while (rhdr_off == HDR_BYTES && rg < p->nrecv &&
               (segment(p, rg, 0, &ptr, &len, &add), len == 0))
            rg++, skipped = 1;
        if (skipped && p->threaded) publish_recv(r, rg);
        int want_send = shdr_off < HDR_BYTES || (sg < p->nsend && (p->dep < 0 || rg > sg - p->dep));
        int want_recv = rhdr_off < HDR_BYTES || rg < p->nrecv;
        if (shdr_off == HDR_BYTES && sg >= p->nsend && !want_recv) break;

        if (want_send) {
            const char *src;
            size_t left;
            if (shdr_off < HDR_BYTES) src = (char *)shdr + shdr_off, left = HDR_BYTES - shdr_off;
            else segment(p, sg, 1, &ptr, &len, &add), src = ptr + soff, left = len - soff;
            ssize_t w = send(r->next_fd, src, left, MSG_NOSIGNAL);
            if (w > 0) {
                progress = 1;
                if (shdr_off < HDR_BYTES) shdr_off += (size_t)w;
                else if ((soff += (size_t)w) == len) soff = 0, sg++;
            } else if (errno != EAGAIN && errno != EINTR) {
                return fail(r, -ECONNRESET, err, errlen, "lost %s during %s: %s", r->next_name,
                            OP_NAMES[p->op], strerror(errno));
            }
        }
        if (want_recv) {
            char *dst;
            size_t left;
            add = 0;
            if (rhdr_off < HDR_BYTES) dst = (char *)rhdr + rhdr_off, left = HDR_BYTES - rhdr_off;
            else {
                segment(p, rg, 0, &ptr, &len, &add);
                dst = (add ? (char *)r->stage : ptr) + roff, left = len - roff;
            }
            ssize_t got = recv(r->prev_fd, dst, left, 0);
            if (got > 0) {
                progress = 1;
                if (rhdr_off < HDR_BYTES) {
                    if ((rhdr_off += (size_t)got) == HDR_BYTES &&
                        check_hdr(r, rhdr, hdr_op, p->n, err, errlen) < 0)
                        return r->broken;
                } else if ((roff += (size_t)got) == len) {
                    if (add) reduce_add((float *)(void *)ptr, r->stage, len / sizeof(float));
                    roff = 0, rg++;
                    if (p->threaded) publish_recv(r, rg);
                }
            } else if (got == 0) {
                return fail(r, -ECONNRESET, err, errlen, "lost %s during %s: connection closed",
                            r->prev_name, OP_NAMES[p->op]);
            } else if (errno != EAGAIN && errno != EINTR) {
                return fail(r, -ECONNRESET, err, errlen, "lost %s during %s: %s", r->prev_name,
                            OP_NAMES[p->op], strerror(errno));
            }
        }
        double now = util_now();
        if (progress) {
            last = now;
            continue;
        }
        if (now - last > r->io_timeout_s) {
            const char *who = want_recv ? r->prev_name : r->next_name;
            return fail(r, -ETIMEDOUT, err, errlen, "lost %s during %s: %s for %.1f s", who,
                        OP_NAMES[p->op], want_recv ? "no data" : "it accepted no data",
                        r->io_timeout_s);
        }
        struct pollfd pf[4];
        int np = 0, hup = -1;
        if (want_recv) pf[np++] = (struct pollfd){.fd = r->prev_fd, .events = POLLIN};
        if (want_send) pf[np++] = (struct pollfd){.fd = r->next_fd, .events = POLLOUT};
        if (r->watch_next && *r->watch_next && r->next_fd != r->prev_fd) {
            hup = np;
            pf[np++] = (struct pollfd){.fd = r->next_fd, .events = POLLRDHUP};
        }
        if (p->threaded) pf[np++] = (struct pollfd){.fd = r->wake[0], .events = POLLIN};
        int ms = (int)((r->io_timeout_s - (now - last)) * 1000) + 1;
        if (poll(pf, (nfds_t)np, ms) < 0 && errno != EINTR)
            return fail(r, -errno, err, errlen, "poll: %s", strerror(errno));
        if (hup >= 0 && (pf[hup].revents & (POLLRDHUP | POLLHUP | POLLERR)))
            return fail(r, -ECONNRESET, err, errlen,
                        "lost %s during %s: it closed the connection (it left this ring)",
                        r->next_name, OP_NAMES[p->op]);
        if (p->threaded && (pf[np - 1].revents & POLLIN)) {
            char b;
            if (read(r->wake[0], &b, 1) == 1) return -ECANCELED; /* the sender's error wins */
        }
    }
    return 0;
}

/* Runs a plan to completion, with the send thread when p->threaded. */
static int run_plan(Plan *p, uint32_t hdr_op, char *err, size_t errlen)
{
    Ring *r = p->r;
    if (p->threaded) {
        pthread_mutex_lock(&r->mu);
        r->job = p, r->job_op = hdr_op, r->recv_done = 0, r->send_rc = 1;
        pthread_cond_broadcast(&r->cv);
        pthread_mutex_unlock(&r->mu);
    }
    int rc = run_loop(p, hdr_op, err, errlen);
    if (p->threaded) {
        int src = sender_finish(r, rc);
        if (src < 0 && src != -ECANCELED && (rc == 0 || rc == -ECANCELED))
            rc = fail(r, src, err, errlen, "%s", r->send_err);
    }
    if (rc < 0) return rc;
    r->seq++;
    if (r->spare_fd >= 0) close(r->spare_fd), r->spare_fd = -1; /* rank 0 has formed it too */
    return 0;
}

static int ring_check(Ring *r, char *err, size_t errlen)
{
    if (!r->broken) return 0;
    snprintf(err, errlen, "%s", r->broken_msg);
    return r->broken;
}

static int ring_allreduce_op(Ring *r, float *buf, size_t n, uint32_t op, char *err, size_t errlen)
{
    if (ring_check(r, err, errlen) < 0) return r->broken;
    Plan p = {.r = r,
              .op = (int)op,
              .base = (char *)buf,
              .n = n,
              .elem = sizeof(float),
              .rank = r->base.rank,
              .world = r->base.world,
              .seg_elems = r->seg_bytes / sizeof(float)};
    size_t maxchunk = (n + (size_t)p.world - 1) / (size_t)p.world;
    p.nseg = (int)((maxchunk + p.seg_elems - 1) / p.seg_elems);
    if (p.nseg == 0) p.nseg = 1;
    p.nsend = p.nrecv = 2 * (p.world - 1) * p.nseg;
    p.dep = p.nseg;
    p.threaded = r->has_sender && n * sizeof(float) >= r->thread_min_bytes;
    return run_plan(&p, op, err, errlen);
}

static int ring_allreduce_sum(Collective *c, float *buf, size_t n, char *err, size_t errlen)
{
    return ring_allreduce_op((Ring *)c, buf, n, OP_ALLREDUCE, err, errlen);
}

static int ring_broadcast(Collective *c, void *buf, size_t n, int root, char *err, size_t errlen)
{
    Ring *r = (Ring *)c;
    if (ring_check(r, err, errlen) < 0) return r->broken;
    if (root < 0 || root >= c->world) {
        snprintf(err, errlen, "broadcast: root %d is not a rank of %d", root, c->world);
        return -EINVAL;
    }
    Plan p = {
        .r = r, .op = OP_BROADCAST, .base = buf, .n = n, .elem = 1, .seg_elems = r->seg_bytes};
    p.nseg = (int)((n + p.seg_elems - 1) / p.seg_elems);
    int next = (c->rank + 1) % c->world;
    p.nrecv = c->rank == root ? 0 : p.nseg;
    p.nsend = next == root ? 0 : p.nseg;
    p.dep = c->rank == root ? -1 : 0;
    return run_plan(&p, OP_BROADCAST | (uint32_t)root << 8, err, errlen);
}

static int ring_barrier(Collective *c, char *err, size_t errlen)
{
    /* An all-reduce's result depends on every rank's input, so no rank finishes it before
     * all have entered. */
    float one = 1.0f;
    return ring_allreduce_op((Ring *)c, &one, 1, OP_BARRIER, err, errlen);
}

static void ring_destroy(Collective *c)
{
    Ring *r = (Ring *)c;
    if (r->has_sender) {
        pthread_mutex_lock(&r->mu);
        r->quit = 1;
        pthread_cond_broadcast(&r->cv);
        pthread_mutex_unlock(&r->mu);
        pthread_join(r->sender, NULL);
        close(r->wake[0]);
        close(r->wake[1]);
    }
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->cv);
    if (r->prev_fd >= 0) close(r->prev_fd);
    if (r->next_fd >= 0 && r->next_fd != r->prev_fd) close(r->next_fd);
    if (r->spare_fd >= 0) close(r->spare_fd);
    free(r->stage);
    free(r);
}

Collective *ring_create(int rank, int world, const NetRing *conn, const RingOptions *opt)
{
    if (world <= 1) return coll_local_create();
    Ring *r = xcalloc(1, sizeof *r);
    r->base.rank = rank;
    r->base.world = world;
    r->base.name = "ring";
    r->base.allreduce_sum = ring_allreduce_sum;
    r->base.broadcast = ring_broadcast;
    r->base.barrier = ring_barrier;
    r->base.destroy = ring_destroy;
    r->prev_fd = conn->prev_fd;
    r->next_fd = conn->next_fd;
    r->spare_fd = -1;
    if (world == 2) {
        /* Both neighbours are the one peer: keep only the connection rank 0 opened and
         * use it both ways, so that data and ACKs share packets as in any duplex
         * stream; the other connection is closed on both sides. Rank 1 closes its own
         * only once a collective has gone through: rank 0, still in its rendezvous,
         * takes that connection closed as rank 1 having left the attempt (net.c,
         * link_closed). */
        if (rank == 0) close(r->prev_fd), r->prev_fd = r->next_fd;
        else r->spare_fd = r->next_fd, r->next_fd = r->prev_fd;
    }
    snprintf(r->prev_name, sizeof r->prev_name, "%s", conn->prev_name);
    snprintf(r->next_name, sizeof r->next_name, "%s", conn->next_name);
    r->io_timeout_s = opt && opt->io_timeout_s > 0 ? opt->io_timeout_s : 10.0;
    r->watch_next = opt ? opt->watch_next : NULL;
    r->seg_bytes = opt && opt->segment_bytes >= sizeof(float) ? opt->segment_bytes : 1u << 20;
    r->seg_bytes -= r->seg_bytes % sizeof(float);
    r->stage = xmalloc(r->seg_bytes);
    r->thread_min_bytes = opt && opt->thread_min_bytes ? opt->thread_min_bytes : 1u << 20;
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->cv, NULL);
    /* without a thread (none could be started, or never wanted) everything runs inline */
    if (r->thread_min_bytes != SIZE_MAX && pipe2(r->wake, O_CLOEXEC | O_NONBLOCK) == 0) {
        if (pthread_create(&r->sender, NULL, sender_main, r) == 0) r->has_sender = 1;
        else close(r->wake[0]), close(r->wake[1]);
    }
    return &r->base;
}
