#include "overlap.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "pool.h"
#include "util.h"

struct Overlap {
    Collective *coll;
    float *buf;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    /* the step's chunks, queued [head, tail) under mu; reset by overlap_finish */
    size_t *off, *cnt;
    int cap, head, tail;
    int busy, quit;
    /* gathered on the caller's thread, not yet queued */
    size_t pend_off, pend_cnt;
    int rc;
    char err[256];
};

static void *overlap_thread(void *arg)
{
    Overlap *o = arg;
    pool_flush_denormals();
    pthread_mutex_lock(&o->mu);
    for (;;) {
        while (o->head == o->tail && !o->quit) pthread_cond_wait(&o->cv, &o->mu);
        if (o->head == o->tail) break;
        size_t off = o->off[o->head], cnt = o->cnt[o->head];
        int failed = o->rc != 0;
        o->busy = 1;
        pthread_mutex_unlock(&o->mu);
        char err[256];
        int rc = failed ? 0 : coll_allreduce_sum(o->coll, o->buf + off, cnt, err, sizeof err);
        pthread_mutex_lock(&o->mu);
        if (rc && !o->rc) {
            o->rc = rc;
            snprintf(o->err, sizeof o->err, "%s", err);
        }
        o->head++;
        o->busy = 0;
        pthread_cond_broadcast(&o->cv);
    }
    pthread_mutex_unlock(&o->mu);
    return NULL;
}

Overlap *overlap_create(Collective *c, float *buf, int max_slices)
{
    Overlap *o = xcalloc(1, sizeof *o);
    o->coll = c;
    o->buf = buf;
    o->cap = max_slices + 1;
    o->off = xcalloc((size_t)o->cap, sizeof *o->off);
    o->cnt = xcalloc((size_t)o->cap, sizeof *o->cnt);
    pthread_mutex_init(&o->mu, NULL);
    pthread_cond_init(&o->cv, NULL);
    if (pthread_create(&o->thread, NULL, overlap_thread, o))
        util_fail(KT_EXIT_RETRY, "cannot start the gradient all-reduce thread (out of threads?)");
    return o;
}

static void enqueue(Overlap *o, size_t off, size_t cnt)
{
    pthread_mutex_lock(&o->mu);
    if (o->tail == o->cap) util_fail(KT_EXIT_USAGE, "overlap: more slices than announced");
    o->off[o->tail] = off;
    o->cnt[o->tail] = cnt;
    o->tail++;
    pthread_cond_broadcast(&o->cv);
    pthread_mutex_unlock(&o->mu);
}

void overlap_ready(void *ctx, size_t offset, size_t count)
{
    Overlap *o = ctx;
    if (o->pend_cnt && offset + count != o->pend_off) { /* not back to back: send apart */
        enqueue(o, o->pend_off, o->pend_cnt);
        o->pend_cnt = 0;
    }
    o->pend_off = offset;
    o->pend_cnt += count;
    if (o->pend_cnt >= OVERLAP_CHUNK_FLOATS) {
        enqueue(o, o->pend_off, o->pend_cnt);
        o->pend_cnt = 0;
    }
}

int overlap_finish(Overlap *o, size_t offset, size_t count, char *err, size_t errlen)
{
    if (o->pend_cnt) enqueue(o, o->pend_off, o->pend_cnt);
    o->pend_cnt = 0;
    if (count) enqueue(o, offset, count);
    pthread_mutex_lock(&o->mu);
    while (o->head != o->tail || o->busy) pthread_cond_wait(&o->cv, &o->mu);
    o->head = o->tail = 0;
    int rc = o->rc;
    if (rc) snprintf(err, errlen, "%s", o->err);
    o->rc = 0;
    pthread_mutex_unlock(&o->mu);
    return rc;
}

int overlap_allreduce(void *ctx, float *buf, size_t n, char *err, size_t errlen)
{
    Overlap *o = ctx;
    pthread_mutex_lock(&o->mu);
    while (o->head != o->tail || o->busy) pthread_cond_wait(&o->cv, &o->mu);
    int rc = o->rc;
    if (rc) snprintf(err, errlen, "%s", o->err);
    pthread_mutex_unlock(&o->mu);
    if (rc) return rc;
    if ((rc = coll_allreduce_sum(o->coll, buf, n, err, errlen))) {
        pthread_mutex_lock(&o->mu);
        o->rc = rc;
        snprintf(o->err, sizeof o->err, "%s", err);
        pthread_mutex_unlock(&o->mu);
    }
    return rc;
}

void overlap_free(Overlap *o)
{
    if (!o) return;
    pthread_mutex_lock(&o->mu);
    o->quit = 1;
    pthread_cond_broadcast(&o->cv);
    pthread_mutex_unlock(&o->mu);
    pthread_join(o->thread, NULL);
    pthread_mutex_destroy(&o->mu);
    pthread_cond_destroy(&o->cv);
    free(o->off);
    free(o->cnt);
    free(o);
}
