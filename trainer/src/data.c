#include "data.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

#define PREFETCH 2
/* A source that holds records (source_holds) is offered the inputs that enter the shuffle
 * buffer up to this many steps beyond the batch being filled, so that each read-ahead
 * spans several steps' records (fewer, larger requests); and at most HOLD_SCAN inputs at a
 * time, which bounds a step's work while the source's budget is full. */
#define HOLD_AHEAD_STEPS 8
#define HOLD_SCAN 4096

static const char *const policy_names[] = {"auto", "data", "file", "off"};

int data_parse_shard_policy(const char *s, ShardPolicy *out)
{
    for (int i = 0; i < 4; i++)
        if (!strcmp(s, policy_names[i])) {
            *out = (ShardPolicy)i;
            return 0;
        }
    return -EINVAL;
}

const char *data_shard_policy_name(ShardPolicy p)
{
    return policy_names[p];
}

int data_shard_per_rank(ShardPolicy p)
{
    return p == SHARD_FILE || p == SHARD_OFF;
}

struct Pipeline {
    const Source *src;
    PipelineConfig cfg;
    size_t begin, n;       /* the stream's examples: source positions [begin, begin+n) */
    size_t take;           /* examples the stream advances per step */
    size_t offset;         /* this rank's slice within a step */
    size_t size;           /* and its length */
    size_t pixels;
    uint64_t stream_seed;
    /* producer state (touched by the thread only while it runs) */
    uint32_t *order;
    size_t *idx;           /* the examples of the batch being filled */
    uint64_t order_epoch;
    int order_valid;
    PipelineCursor produce_at;
    /* the read-ahead of a source that holds records: the inputs of data-epoch hold_epoch
     * below hold_next were offered to it; when[i] is input i's place in that epoch's
     * order (hold_order); base is where this producer started, from which its slices of
     * each step are counted */
    int holds, hold_valid;
    uint64_t hold_epoch;
    size_t hold_next;
    uint32_t *hold_order, *when;
    size_t *offer;
    PipelineCursor base;
    /* the prefetch ring */
    Batch slots[PREFETCH];
    int head, filled;      /* next slot to consume; number of filled slots */
    int held;              /* a slot is lent to the consumer */
    int stop;
    PipelineCursor consumed;
    int failed;            /* the producer could not read an example: why in fail_msg */
    int fail_code;         /* and the exit code of the contract for it */
    char fail_msg[1024];
    pthread_t thread;
    int running;
    pthread_mutex_t mu;
    pthread_cond_t cv;
};

/* The example indices of data-epoch e in stream order, n of them. */
static void epoch_order(const Pipeline *p, uint64_t e, uint32_t *order)
{
    /* tf.data's buffered shuffle: fill a buffer with the first `buffer` elements; emit
     * a uniformly chosen one and put the next input element in its place; when the
     * input is exhausted, drain the buffer the same way. */
    uint64_t rng = p->stream_seed ^ (0xD1B54A32D192ED03ull * (e + 1));
    util_rand_u64(&rng);
    size_t buf = p->cfg.shuffle_buffer < p->n ? p->cfg.shuffle_buffer : p->n;
    uint32_t *pool = xmalloc(buf * sizeof *pool);
    size_t next = 0, len = 0;
    for (; len < buf; len++) pool[len] = (uint32_t)(p->begin + next++);
    for (size_t out = 0; out < p->n; out++) {
        size_t j = (size_t)util_rand_below(&rng, len);
        order[out] = pool[j];
        if (next < p->n) pool[j] = (uint32_t)(p->begin + next++);
        else pool[j] = pool[--len];
    }
    free(pool);
}

int data_slice(int global, int world, int rank, int *start)
{
    /* in 64 bits: rank * global overflows an int for the largest batches */
    *start = (int)((int64_t)rank * global / world);
    return (int)((int64_t)(rank + 1) * global / world - *start);
}

/* The inputs that enter the shuffle buffer by HOLD_AHEAD_STEPS steps after the batch at c
 * and that this rank will read, offered to the source in input order: with tf.data's
 * buffered shuffle, output `out` of an epoch is emitted once inputs [0, buffer + out) have
 * entered, so however shuffled the outputs, the inputs come in the source's order, and
 * their records can be read together, as tf.data reads a file into its shuffle buffer.
 * 0, or -1 as fill_batch. */
static int hold_ahead(Pipeline *p, PipelineCursor c)
{
    const uint64_t n = p->n, buf = p->cfg.shuffle_buffer < p->n ? p->cfg.shuffle_buffer : p->n;
    const uint64_t first = c.position + p->offset;
    const uint64_t last = first + p->size - 1 + HOLD_AHEAD_STEPS * (uint64_t)p->take;
    const uint64_t base = p->base.data_epoch * n + p->base.position;
    const uint64_t from = c.data_epoch * n + c.position;
    for (uint64_t e = c.data_epoch + first / n; e <= c.data_epoch + last / n; e++) {
        if (p->hold_valid && p->hold_epoch > e) continue;
        if (!p->hold_valid || p->hold_epoch != e) {
            epoch_order(p, e, p->hold_order);
            for (size_t i = 0; i < p->n; i++) p->when[p->hold_order[i] - p->begin] = (uint32_t)i;
            p->hold_epoch = e, p->hold_next = 0, p->hold_valid = 1;
        }
        /* output `out` needs inputs [0, buffer + out): for the last one, out is last's place */
        const uint64_t upto =
            e == c.data_epoch + last / n ? buf + (c.data_epoch * n + last - e * n) : n;
        const size_t need = (size_t)(upto < n ? upto : n);
        while (p->hold_next < need) {
            const size_t end = need - p->hold_next > HOLD_SCAN ? p->hold_next + HOLD_SCAN : need;
            size_t m = 0, taken;
            for (size_t i = p->hold_next; i < end; i++) {
                const uint64_t at = e * n + p->when[i];
                if (at < from || (at - base) % p->take < p->offset ||
                    (at - base) % p->take >= p->offset + p->size)
                    continue;
                p->offer[m++] = p->begin + i;
            }
            const int rc =
                source_hold_examples(p->src, p->offer, m, &taken, p->fail_msg, sizeof p->fail_msg);
            if (rc) {
                p->fail_code = source_exit_code(rc);
                return -1;
            }
            if (taken < m) { /* the source's budget is full: offer the rest later */
                p->hold_next = p->offer[taken] - p->begin;
                return 0;
            }
            p->hold_next = end;
        }
    }
    return 0;
}

/* Fills b with the next batch; 0, or -1 with why in p->fail_msg and its exit code in
 * p->fail_code when an example cannot be read (a streamed file that changed since it was
 * opened, object storage out of retries). The batch's examples are read in one call, so
 * that a source reads their records together. */
static int fill_batch(Pipeline *p, Batch *b)
{
    const size_t bs = p->size;
    PipelineCursor c = p->produce_at;
    if (p->holds && hold_ahead(p, c)) return -1;
    for (size_t k = 0; k < bs; k++) {
        /* c.position < n (pipeline_seek), so this neither overflows nor walks */
        uint64_t pos = c.position + p->offset + k, e = c.data_epoch + pos / p->n;
        pos %= p->n;
        if (!p->order_valid || p->order_epoch != e) {
            epoch_order(p, e, p->order);
            p->order_epoch = e;
            p->order_valid = 1;
        }
        p->idx[k] = p->order[pos];
    }
    const int rc = source_read_examples(p->src, p->idx, bs, p->cfg.scale, b->x, b->y, p->fail_msg,
                                        sizeof p->fail_msg);
    if (rc) {
        p->fail_code = source_exit_code(rc);
        return -1;
    }
    c.position += p->take;
    c.data_epoch += c.position / p->n, c.position %= p->n;
    b->size = (int)bs;
    b->next = c;
    p->produce_at = c;
    return 0;
}

static void *prefetch_main(void *arg)
{
    Pipeline *p = arg;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->stop && p->filled + p->held >= PREFETCH) pthread_cond_wait(&p->cv, &p->mu);
        if (p->stop) break;
        int slot = (p->head + p->held + p->filled) % PREFETCH;
        pthread_mutex_unlock(&p->mu);
        int rc = fill_batch(p, &p->slots[slot]);
        pthread_mutex_lock(&p->mu);
        if (rc) {
            /* The consumer fails on its own thread once it has taken the batches before
             * this one: exiting here would run exit's handlers (OpenBLAS's among them)
             * under a step in flight. */
            p->failed = 1;
            pthread_cond_broadcast(&p->cv);
            while (!p->stop) pthread_cond_wait(&p->cv, &p->mu);
            break;
        }
        p->filled++;
        pthread_cond_broadcast(&p->cv);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

static void start(Pipeline *p)
{
    p->stop = 0;
    if (pthread_create(&p->thread, NULL, prefetch_main, p) != 0)
        util_fail(KT_EXIT_DATA, "cannot start the data prefetch thread");
    p->running = 1;
}

static void stop(Pipeline *p)
{
    if (!p->running) return;
    pthread_mutex_lock(&p->mu);
    p->stop = 1;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    pthread_join(p->thread, NULL);
    p->running = 0;
}

int pipeline_create(Pipeline **out, const Source *src, const PipelineConfig *cfg, char *err,
                    size_t errlen)
{
    if (cfg->batch < 1 || cfg->world < 1 || cfg->rank < 0 || cfg->rank >= cfg->world ||
        cfg->shuffle_buffer < 1 || cfg->global_batch < 0) {
        snprintf(err, errlen,
                 "pipeline: expected batch >= 1, global batch >= 0, shuffle buffer >= 1, "
                 "0 <= rank < world");
        return -EINVAL;
    }
    const int global = cfg->global_batch ? cfg->global_batch : cfg->batch * cfg->world;
    if (global < cfg->world) {
        snprintf(err, errlen,
                 "global batch %d over %d workers: expected at least one example per worker",
                 global, cfg->world);
        return -EINVAL;
    }
    int first, len = data_slice(global, cfg->world, cfg->rank, &first);
    Pipeline *p = xcalloc(1, sizeof *p);
    p->src = src;
    p->cfg = *cfg;
    p->pixels = source_example_size(src);
    p->stream_seed = cfg->seed;
    size_t b = (size_t)len, r = (size_t)cfg->rank;
    p->size = b;
    switch (cfg->policy) {
    case SHARD_AUTO:
    case SHARD_DATA:
        p->begin = 0, p->n = src->count, p->take = (size_t)global, p->offset = (size_t)first;
        break;
    case SHARD_FILE: /* the source holds this rank's files alone */
        p->begin = 0, p->n = src->count, p->take = b, p->offset = 0;
        break;
    case SHARD_OFF:
        p->begin = 0, p->n = src->count, p->take = b, p->offset = 0;
        p->stream_seed = cfg->seed + r;
        break;
    }
    if (p->n < p->take) {
        snprintf(err, errlen,
                 "dataset: %zu examples in this worker's stream, fewer than one step "
                 "takes (%zu); expected a smaller --per-worker-batch or --global-batch",
                 p->n, p->take);
        free(p);
        return -EINVAL;
    }
    p->order = xmalloc(p->n * sizeof *p->order);
    p->idx = xmalloc(b * sizeof *p->idx);
    if ((p->holds = source_holds(src))) {
        p->hold_order = xmalloc(p->n * sizeof *p->hold_order);
        p->when = xmalloc(p->n * sizeof *p->when);
        p->offer = xmalloc(HOLD_SCAN * sizeof *p->offer);
    }
    for (int i = 0; i < PREFETCH; i++) {
        p->slots[i].x = xmalloc(b * p->pixels * sizeof(float));
        p->slots[i].y = xmalloc(b * sizeof *p->slots[i].y);
    }
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    start(p);
    *out = p;
    return 0;
}

const Batch *pipeline_next(Pipeline *p)
{
    pthread_mutex_lock(&p->mu);
    if (p->held) {
        p->head = (p->head + 1) % PREFETCH;
        p->held = 0;
        pthread_cond_broadcast(&p->cv);
    }
    while (p->filled == 0 && !p->failed) pthread_cond_wait(&p->cv, &p->mu);
    if (p->filled == 0) {
        char msg[sizeof p->fail_msg];
        const int code = p->fail_code;
        snprintf(msg, sizeof msg, "%s", p->fail_msg);
        pthread_mutex_unlock(&p->mu);
        util_fail(code, "%s", msg);
    }
    p->filled--;
    p->held = 1;
    const Batch *b = &p->slots[p->head];
    p->consumed = b->next;
    pthread_mutex_unlock(&p->mu);
    return b;
}

PipelineCursor pipeline_cursor(const Pipeline *p)
{
    return p->consumed;
}

void pipeline_seek(Pipeline *p, PipelineCursor c)
{
    /* A position past the stream's end (a cursor of another sharding) continues in the
     * pass it falls in, counted out in one division rather than walked to. */
    c.data_epoch += c.position / p->n, c.position %= p->n;
    /* Where the pipeline stands already (a run's first seek, to where it was created):
     * its batches in flight are those the seek would make again, and a source's records
     * that they took would be read again. */
    pthread_mutex_lock(&p->mu);
    const int same = p->running && !p->failed && c.data_epoch == p->consumed.data_epoch &&
                     c.position == p->consumed.position;
    pthread_mutex_unlock(&p->mu);
    if (same) return;
    stop(p);
    p->head = p->filled = p->held = p->failed = 0;
    /* what is held stays good for the stream it was read for: from where the producer
     * started. Elsewhere (a resume, a resize) the read-ahead starts anew. */
    if (p->holds && (c.data_epoch != p->base.data_epoch || c.position != p->base.position))
        source_drop_held(p->src);
    p->produce_at = p->consumed = p->base = c;
    p->hold_valid = 0;
    start(p);
}

PipelineCursor pipeline_cursor_at_step(const Pipeline *p, uint64_t steps)
{
    /* steps * take examples, split as (steps / n) * n * take + (steps % n) * take so that
     * nothing overflows: the remainder's product is below n * take <= n^2 < 2^64 */
    const uint64_t n = p->n, rem = (steps % n) * p->take;
    return (PipelineCursor){.data_epoch = steps / n * p->take + rem / n, .position = rem % n};
}

size_t pipeline_steps_per_pass(const Pipeline *p)
{
    return p->n / p->take;
}

void pipeline_free(Pipeline *p)
{
    if (!p) return;
    stop(p);
    /* the records held stay with the source, for the pipeline that replaces this one */
    if (p->holds) source_log_held(p->src);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
    for (int i = 0; i < PREFETCH; i++) {
        free(p->slots[i].x);
        free(p->slots[i].y);
    }
    free(p->order);
    free(p->idx);
    free(p->hold_order);
    free(p->when);
    free(p->offer);
    free(p);
}
