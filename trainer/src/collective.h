/* collective — the one interface through which workers agree: barrier, broadcast and
 * all-reduce. Implementations: the single-process one here (world size 1), the TCP
 * ring (ring.c) with its shared-memory path for ranks on one host (shm.c), and in
 * make GPU=1 builds NCCL (gpu/coll_nccl.h, coll_nccl_create). The training loop sees
 * only this header. */
#ifndef KT_COLLECTIVE_H
#define KT_COLLECTIVE_H

#include <stddef.h>

typedef struct Collective Collective;

/* Every operation returns 0, or a negative errno with a one-line reason in err (for
 * example naming the peer that was lost); the trainer then exits 75. */
struct Collective {
    int rank;
    int world;
    const char *name; /* "local", "ring", "nccl" */
    int device_buffers; /* 1: allreduce_sum takes CUDA device pointers too (nccl); 0: host
                           memory only, so a GPU trainer stages its gradients through it */
    /* Sums n floats across all ranks, in place; every rank ends with identical bits. */
    int (*allreduce_sum)(Collective *c, float *buf, size_t n, char *err, size_t errlen);
    /* Copies n bytes from rank `root` into buf on every other rank. */
    int (*broadcast)(Collective *c, void *buf, size_t n, int root, char *err, size_t errlen);
    /* Returns once every rank has entered. */
    int (*barrier)(Collective *c, char *err, size_t errlen);
    /* Optional (NULL: nothing to do). Offers the arena later all-reduces will come from
     * (page-aligned, `bytes` whole pages, mapped alone); a collective may move it into
     * memory shared with ranks on the same host (shm.h). Its contents are kept. Called
     * by every rank at the same point; returns 0 or a negative errno as above. */
    int (*share_arena)(Collective *c, float *arena, size_t bytes, char *err, size_t errlen);
    /* Closes connections and frees c. */
    void (*destroy)(Collective *c);
};

static inline int coll_allreduce_sum(Collective *c, float *buf, size_t n, char *err, size_t errlen)
{
    return c->allreduce_sum(c, buf, n, err, errlen);
}
static inline int coll_broadcast(Collective *c, void *buf, size_t n, int root, char *err,
                                 size_t errlen)
{
    return c->broadcast(c, buf, n, root, err, errlen);
}
static inline int coll_barrier(Collective *c, char *err, size_t errlen)
{
    return c->barrier(c, err, errlen);
}
static inline int coll_share_arena(Collective *c, float *arena, size_t bytes, char *err,
                                   size_t errlen)
{
    return c->share_arena ? c->share_arena(c, arena, bytes, err, errlen) : 0;
}
/* Frees c; NULL is a no-op. */
static inline void coll_destroy(Collective *c)
{
    if (c) c->destroy(c);
}

/* An all-reduce of n floats, in place: coll_allreduce_sum's, or one that keeps its place
 * among others (overlap.h's overlap_allreduce). */
typedef int (*CollAllreduceFn)(void *ctx, float *buf, size_t n, char *err, size_t errlen);

/* Sums n doubles over every rank of `world`, in place, exactly as doubles: rank `rank`'s
 * values go, each cut into three whole numbers below 2^22 (the top 22 bits of its
 * representation, then 21 and 21), into its own slots of a buffer of world x 3n floats,
 * zero elsewhere; allreduce(ctx, ...) sums that buffer, which gathers the ranks' values bit
 * for bit (a whole float plus zeros is that float, in any order), and every rank then
 * adds them in rank order, in double: the same bits on every rank. Returns 0, or
 * allreduce's negative errno with err. */
int coll_sum_doubles(double *v, size_t n, int rank, int world, CollAllreduceFn allreduce, void *ctx,
                     char *err, size_t errlen);

/* The world-size-1 collective: every operation is the identity. Caller frees with
 * coll_destroy. */
Collective *coll_local_create(void);

#endif
