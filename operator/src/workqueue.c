/* workqueue — deduplicating, rate-limited, delaying work queue; see workqueue.h. */
#include "workqueue.h"

#include "clock.h"
#include "metrics.h"
#include "ratelimit.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define NBUCKETS 4096

typedef struct Item {
    struct Item *next_hash;
    struct Item *next_ready; /* FIFO of ready keys */
    int queued;              /* in the ready FIFO */
    int processing;          /* a worker holds it */
    int dirty;               /* added while processing: queue again on done */
    int failures;
    int timers;      /* heap entries pointing here (the item lives while any do) */
    double due;      /* pending timer (monotonic), 0 none */
    double added_at; /* when it became ready, for the queue-latency histogram */
    char key[];
} Item;

typedef struct Timer {
    double due;
    Item *item;
} Timer;

struct WorkQueue {
    pthread_mutex_t mu;
    pthread_cond_t cond;
    WqOptions opt;
    RateLimit overall;
    Item *buckets[NBUCKETS];
    Item *head, *tail;
    size_t nready;
    Timer *heap; /* min-heap on due; entries whose item->due differs are stale */
    size_t nheap, capheap;
    size_t ndelayed;
    int shutdown;
};

static uint64_t hash(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

WorkQueue *wq_new(const WqOptions *opt)
{
    WorkQueue *q = calloc(1, sizeof *q);
    if (!q) return NULL;
    pthread_mutex_init(&q->mu, NULL);
    clock_cond_init(&q->cond);
    q->opt = *opt;
    ratelimit_init(&q->overall, opt->qps, opt->burst, clock_mono());
    return q;
}

void wq_free(WorkQueue *q)
{
    if (!q) return;
    for (size_t b = 0; b < NBUCKETS; b++) {
        Item *it = q->buckets[b];
        while (it) {
            Item *next = it->next_hash;
            free(it);
            it = next;
        }
    }
    free(q->heap);
    ratelimit_destroy(&q->overall);
    pthread_cond_destroy(&q->cond);
    pthread_mutex_destroy(&q->mu);
    free(q);
}

static Item *find(WorkQueue *q, const char *key, int create)
{
    size_t b = hash(key) % NBUCKETS;
    for (Item *it = q->buckets[b]; it; it = it->next_hash)
        if (strcmp(it->key, key) == 0) return it;
    if (!create) return NULL;
    size_t n = strlen(key);
    Item *it = calloc(1, sizeof *it + n + 1);
    if (!it) return NULL;
    memcpy(it->key, key, n + 1);
    it->next_hash = q->buckets[b];
    q->buckets[b] = it;
    return it;
}

/* Drops an item that holds no state, so that deleted jobs leave nothing behind. */
static void maybe_release(WorkQueue *q, Item *it)
{
    if (it->queued || it->processing || it->dirty || it->due > 0 || it->failures || it->timers)
        return;
    size_t b = hash(it->key) % NBUCKETS;
    for (Item **pp = &q->buckets[b]; *pp; pp = &(*pp)->next_hash) {
        if (*pp == it) {
            *pp = it->next_hash;
            free(it);
            return;
        }
    }
}

static void push_ready(WorkQueue *q, Item *it)
{
    it->queued = 1;
    it->added_at = clock_mono();
    it->next_ready = NULL;
    if (q->tail)
        q->tail->next_ready = it;
    else
        q->head = it;
    q->tail = it;
    q->nready++;
    __atomic_store_n(&g_metrics.wq_depth, (long long)q->nready, __ATOMIC_RELAXED);
    pthread_cond_signal(&q->cond);
}

/* Makes the item ready unless it is already waiting or being processed. */
static void make_ready(WorkQueue *q, Item *it)
{
    if (it->due > 0) {
        it->due = 0; /* the timer is superseded; its heap entry goes stale */
        q->ndelayed--;
    }
    if (it->queued) return;
    if (it->processing) {
        it->dirty = 1;
        return;
    }
    push_ready(q, it);
}

static int heap_push(WorkQueue *q, double due, Item *it)
{
    if (q->nheap == q->capheap) {
        size_t cap = q->capheap ? 2 * q->capheap : 64;
        Timer *h = realloc(q->heap, cap * sizeof *h);
        if (!h) return -ENOMEM;
        q->heap = h;
        q->capheap = cap;
    }
    size_t i = q->nheap++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (q->heap[p].due <= due) break;
        q->heap[i] = q->heap[p];
        i = p;
    }
    q->heap[i] = (Timer){due, it};
    it->timers++;
    return 0;
}

static void heap_pop(WorkQueue *q)
{
    q->heap[0].item->timers--;
    Timer last = q->heap[--q->nheap];
    size_t i = 0;
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        double md = last.due;
        if (l < q->nheap && q->heap[l].due < md) m = l, md = q->heap[l].due;
        if (r < q->nheap && q->heap[r].due < md) m = r;
        if (m == i) break;
        q->heap[i] = q->heap[m];
        i = m;
    }
    if (q->nheap) q->heap[i] = last;
}

/* Moves due timers to the ready FIFO; returns the next due time or 0. */
static double promote_due(WorkQueue *q, double now)
{
    while (q->nheap) {
        Timer t = q->heap[0];
        if (t.item->due != t.due) { /* stale entry */
            heap_pop(q);
            maybe_release(q, t.item);
            continue;
        }
        if (t.due > now) return t.due;
        heap_pop(q);
        make_ready(q, t.item);
    }
    return 0;
}

int wq_add(WorkQueue *q, const char *key)
{
    pthread_mutex_lock(&q->mu);
    int rc = 0;
    if (!q->shutdown) {
        Item *it = find(q, key, 1);
        if (!it) {
            rc = -ENOMEM;
        } else {
            __atomic_fetch_add(&g_metrics.wq_adds, 1, __ATOMIC_RELAXED);
            make_ready(q, it);
        }
    }
    pthread_mutex_unlock(&q->mu);
    return rc;
}

static int add_after_locked(WorkQueue *q, const char *key, double delay)
{
    if (q->shutdown) return 0;
    Item *it = find(q, key, 1);
    if (!it) return -ENOMEM;
    __atomic_fetch_add(&g_metrics.wq_adds, 1, __ATOMIC_RELAXED);
    if (delay <= 0) {
        make_ready(q, it);
        return 0;
    }
    if (it->queued) return 0; /* it runs sooner anyway */
    double due = clock_mono() + delay;
    if (it->due > 0 && it->due <= due) return 0;
    if (heap_push(q, due, it)) return -ENOMEM;
    if (it->due == 0) q->ndelayed++;
    it->due = due;
    pthread_cond_broadcast(&q->cond); /* a waiter may need to wake earlier */
    return 0;
}

int wq_add_after(WorkQueue *q, const char *key, double delay)
{
    pthread_mutex_lock(&q->mu);
    int rc = add_after_locked(q, key, delay);
    pthread_mutex_unlock(&q->mu);
    return rc;
}

int wq_add_rate_limited(WorkQueue *q, const char *key)
{
    pthread_mutex_lock(&q->mu);
    Item *it = find(q, key, 1);
    int rc = -ENOMEM;
    if (it) {
        double d = q->opt.base_delay * pow(2.0, it->failures < 60 ? it->failures : 60);
        if (d > q->opt.max_delay) d = q->opt.max_delay;
        it->failures++;
        double o = ratelimit_reserve(&q->overall, clock_mono());
        __atomic_fetch_add(&g_metrics.wq_retries, 1, __ATOMIC_RELAXED);
        rc = add_after_locked(q, key, d > o ? d : o);
    }
    pthread_mutex_unlock(&q->mu);
    return rc;
}

void wq_forget(WorkQueue *q, const char *key)
{
    pthread_mutex_lock(&q->mu);
    Item *it = find(q, key, 0);
    if (it) {
        it->failures = 0;
        maybe_release(q, it);
    }
    pthread_mutex_unlock(&q->mu);
}

int wq_failures(WorkQueue *q, const char *key)
{
    pthread_mutex_lock(&q->mu);
    Item *it = find(q, key, 0);
    int n = it ? it->failures : 0;
    pthread_mutex_unlock(&q->mu);
    return n;
}

static int get_locked(WorkQueue *q, char *key, size_t n, double deadline)
{
    for (;;) {
        double now = clock_mono();
        double next = promote_due(q, now);
        if (q->head) {
            Item *it = q->head;
            q->head = it->next_ready;
            if (!q->head) q->tail = NULL;
            q->nready--;
            __atomic_store_n(&g_metrics.wq_depth, (long long)q->nready, __ATOMIC_RELAXED);
            it->queued = 0;
            it->processing = 1;
            hist_observe(&g_metrics.wq_queue_seconds, now - it->added_at);
            size_t len = strlen(it->key);
            if (len >= n) len = n - 1;
            memcpy(key, it->key, len);
            key[len] = 0;
            return 0;
        }
        if (q->shutdown) return -ESHUTDOWN;
        double until = next;
        if (deadline > 0 && (until == 0 || deadline < until)) until = deadline;
        if (deadline > 0 && now >= deadline) return -ETIMEDOUT;
        if (until > 0) {
            struct timespec ts = clock_timespec(until);
            pthread_cond_timedwait(&q->cond, &q->mu, &ts);
        } else {
            pthread_cond_wait(&q->cond, &q->mu);
        }
    }
}

int wq_get(WorkQueue *q, char *key, size_t n)
{
    pthread_mutex_lock(&q->mu);
    int rc = get_locked(q, key, n, 0);
    pthread_mutex_unlock(&q->mu);
    return rc;
}

int wq_get_timeout(WorkQueue *q, char *key, size_t n, double timeout)
{
    pthread_mutex_lock(&q->mu);
    int rc = get_locked(q, key, n, clock_mono() + timeout);
    pthread_mutex_unlock(&q->mu);
    return rc;
}

void wq_done(WorkQueue *q, const char *key)
{
    pthread_mutex_lock(&q->mu);
    Item *it = find(q, key, 0);
    if (it) {
        it->processing = 0;
        if (it->dirty) {
            it->dirty = 0;
            if (!q->shutdown) push_ready(q, it);
        }
        maybe_release(q, it);
    }
    pthread_mutex_unlock(&q->mu);
}

void wq_shutdown(WorkQueue *q)
{
    pthread_mutex_lock(&q->mu);
    q->shutdown = 1;
    pthread_cond_broadcast(&q->cond);
    pthread_mutex_unlock(&q->mu);
}

size_t wq_len(WorkQueue *q)
{
    pthread_mutex_lock(&q->mu);
    size_t n = q->nready;
    pthread_mutex_unlock(&q->mu);
    return n;
}

size_t wq_delayed(WorkQueue *q)
{
    pthread_mutex_lock(&q->mu);
    size_t n = q->ndelayed;
    pthread_mutex_unlock(&q->mu);
    return n;
}
