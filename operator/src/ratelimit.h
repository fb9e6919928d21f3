/* ratelimit — a token bucket: `qps` tokens per second, at most `burst` saved up. The
 * client takes one token per API request, as client-go's QPS/burst limiter does, and
 * the work queue uses another for its overall rate. Thread-safe. */
#ifndef KT_RATELIMIT_H
#define KT_RATELIMIT_H

#include <pthread.h>

typedef struct RateLimit {
    pthread_mutex_t mu;
    double qps; /* <= 0: unlimited */
    double burst;
    double tokens; /* may go negative: tokens promised to waiting callers */
    double last;   /* time of the last refill */
} RateLimit;

/* Starts full (burst tokens) at time `now`. burst < 1 is taken as 1. */
void ratelimit_init(RateLimit *rl, double qps, double burst, double now);
void ratelimit_destroy(RateLimit *rl);

/* Takes a token at time `now` and returns how long the caller must wait before
 * using it (0 when one was available). Pure apart from the bucket: used by tests. */
double ratelimit_reserve(RateLimit *rl, double now);

/* Takes a token, sleeping (monotonic clock) until it is due. */
void ratelimit_wait(RateLimit *rl);

#endif
