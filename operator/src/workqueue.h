/* workqueue — the controller's queue of job keys ("namespace/name"), as in client-go:
 *  - deduplicated: a key waiting once is waiting; adding it again does nothing;
 *  - never two workers on one key: a key added while being processed is held back
 *    and queued again when its worker calls wq_done;
 *  - per-item exponential backoff for keys whose sync failed (wq_add_rate_limited),
 *    combined with an overall token bucket, like client-go's default controller limiter;
 *  - delayed adds (wq_add_after) for timers: deadlines, TTLs and backoff delays fire at
 *    their time, not at the next event. The earliest pending time for a key wins.
 * Thread-safe; wq_get blocks. Time comes from a clock function so tests can drive it. */
#ifndef KT_WORKQUEUE_H
#define KT_WORKQUEUE_H

#include <stddef.h>

typedef struct WorkQueue WorkQueue;

typedef struct WqOptions {
    double base_delay; /* first retry delay, seconds (e.g. 0.005) */
    double max_delay;  /* cap of the per-item backoff (e.g. 300) */
    double qps;        /* overall retry rate (<= 0: none) */
    int burst;
} WqOptions;

/* Returns NULL on allocation failure. */
WorkQueue *wq_new(const WqOptions *opt);

/* Frees the queue; call after wq_shutdown and after every worker has returned. */
void wq_free(WorkQueue *q);

/* Adds key now. Returns 0 or -ENOMEM. */
int wq_add(WorkQueue *q, const char *key);

/* Adds key after `delay` seconds (<= 0: now). An earlier pending time is kept. */
int wq_add_after(WorkQueue *q, const char *key, double delay);

/* Adds key after its backoff (base * 2^failures, capped), counting one failure. */
int wq_add_rate_limited(WorkQueue *q, const char *key);

/* Clears key's failure count (after a successful sync). */
void wq_forget(WorkQueue *q, const char *key);

/* Failures counted for key. */
int wq_failures(WorkQueue *q, const char *key);

/* Blocks until a key is ready and copies it into key (n bytes). Returns 0, or
 * -ESHUTDOWN once the queue is shut down and drained of ready keys. The caller must
 * call wq_done(key) when finished with it. */
int wq_get(WorkQueue *q, char *key, size_t n);

/* Like wq_get but gives up after timeout seconds with -ETIMEDOUT. */
int wq_get_timeout(WorkQueue *q, char *key, size_t n, double timeout);

/* Marks key finished; if it was added meanwhile it is queued again. */
void wq_done(WorkQueue *q, const char *key);

/* Wakes every waiting wq_get with -ESHUTDOWN; later adds are ignored. */
void wq_shutdown(WorkQueue *q);

/* Keys ready now (not counting delayed ones or those being processed). */
size_t wq_len(WorkQueue *q);

/* Keys waiting on a timer. */
size_t wq_delayed(WorkQueue *q);

#endif
