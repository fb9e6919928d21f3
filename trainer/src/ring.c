#include "ring.h"

#include "util.h"

#include <errno.h>
#include <stdarg.h>
#include <poll.h>
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
    char prev_name[NET_NAME_MAX], next_name[NET_NAME_MAX];
    double io_timeout_s;
    size_t seg_bytes;
    uint64_t seq;
    float *stage; /* one received segment waiting to be added */
    int broken;
    char broken_msg[512];
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
} Plan;

/* all-reduce: step t sends chunk (rank - t) and receives chunk (rank - t - 1); steps
 * 0..W-2 reduce (add), W-1..2W-3 gather (copy). */
static size_t chunk_off(const Plan *p, int c)
{
    return (size_t)((unsigned __int128)p->n * (unsigned)c / (unsigned)p->world);
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
                (unsigned long long)gseq, (unsigned long long)gn, gop >> 8,
                OP_NAMES[op & 0xff], (unsigned long long)r->seq, (unsigned long long)n, op >> 8);
}

/* Runs a plan to completion. The header is exchanged first on both streams. */
static int run_plan(Plan *p, uint32_t hdr_op, char *err, size_t errlen)
{
    Ring *r = p->r;
    unsigned char shdr[HDR_BYTES], rhdr[HDR_BYTES];
    put_hdr(shdr, hdr_op, r->seq, p->n);
    size_t shdr_off = 0, rhdr_off = 0, soff = 0, roff = 0;
    int sg = 0, rg = 0;
    double last = util_now();
    for (;;) {
        int progress = 0;
        char *ptr;
        size_t len;
        int add;
        /* skip empty segments on both streams */
        while (sg < p->nsend && (segment(p, sg, 1, &ptr, &len, &add), len == 0)) sg++;
        while (rhdr_off == HDR_BYTES && rg < p->nrecv &&
               (segment(p, rg, 0, &ptr, &len, &add), len == 0))
            rg++;
        int want_send = shdr_off < HDR_BYTES ||
                        (sg < p->nsend && (p->dep < 0 || rg > sg - p->dep));
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
            return fail(r, -ETIMEDOUT, err, errlen,
                        "lost %s during %s: %s for %.1f s", who, OP_NAMES[p->op],
                        want_recv ? "no data" : "it accepted no data", r->io_timeout_s);
        }
        struct pollfd pf[2];
        int np = 0;
        if (want_recv) pf[np++] = (struct pollfd){.fd = r->prev_fd, .events = POLLIN};
        if (want_send) pf[np++] = (struct pollfd){.fd = r->next_fd, .events = POLLOUT};
        int ms = (int)((r->io_timeout_s - (now - last)) * 1000) + 1;
        if (poll(pf, (nfds_t)np, ms) < 0 && errno != EINTR)
            return fail(r, -errno, err, errlen, "poll: %s", strerror(errno));
    }
    r->seq++;
    return 0;
}

static int ring_check(Ring *r, char *err, size_t errlen)
{
    if (!r->broken) return 0;
    snprintf(err, errlen, "%s", r->broken_msg);
    return r->broken;
}

static int ring_allreduce_op(Ring *r, float *buf, size_t n, uint32_t op, char *err,
                             size_t errlen)
{
    if (ring_check(r, err, errlen) < 0) return r->broken;
    Plan p = {.r = r, .op = (int)op, .base = (char *)buf, .n = n, .elem = sizeof(float),
              .rank = r->base.rank, .world = r->base.world,
              .seg_elems = r->seg_bytes / sizeof(float)};
    size_t maxchunk = (n + (size_t)p.world - 1) / (size_t)p.world;
    p.nseg = (int)((maxchunk + p.seg_elems - 1) / p.seg_elems);
    if (p.nseg == 0) p.nseg = 1;
    p.nsend = p.nrecv = 2 * (p.world - 1) * p.nseg;
    p.dep = p.nseg;
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
    Plan p = {.r = r, .op = OP_BROADCAST, .base = buf, .n = n, .elem = 1,
              .seg_elems = r->seg_bytes};
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
    if (r->prev_fd >= 0) close(r->prev_fd);
    if (r->next_fd >= 0) close(r->next_fd);
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
    snprintf(r->prev_name, sizeof r->prev_name, "%s", conn->prev_name);
    snprintf(r->next_name, sizeof r->next_name, "%s", conn->next_name);
    r->io_timeout_s = opt && opt->io_timeout_s > 0 ? opt->io_timeout_s : 10.0;
    r->seg_bytes = opt && opt->segment_bytes >= sizeof(float) ? opt->segment_bytes : 1u << 20;
    r->seg_bytes -= r->seg_bytes % sizeof(float);
    r->stage = xmalloc(r->seg_bytes);
    return &r->base;
}
