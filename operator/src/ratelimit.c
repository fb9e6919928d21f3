/* ratelimit — token bucket. */
#include "ratelimit.h"

#include "clock.h"

#include <time.h>

void ratelimit_init(RateLimit *rl, double qps, double burst, double now)
{
    pthread_mutex_init(&rl->mu, NULL);
    rl->qps = qps;
    rl->burst = burst < 1 ? 1 : burst;
    rl->tokens = rl->burst;
    rl->last = now;
}

void ratelimit_destroy(RateLimit *rl)
{
    pthread_mutex_destroy(&rl->mu);
}

double ratelimit_reserve(RateLimit *rl, double now)
{
    if (rl->qps <= 0) return 0;
    pthread_mutex_lock(&rl->mu);
    if (now > rl->last) {
        rl->tokens += (now - rl->last) * rl->qps;
        if (rl->tokens > rl->burst) rl->tokens = rl->burst;
        rl->last = now;
    }
    rl->tokens -= 1;
    double wait = rl->tokens >= 0 ? 0 : -rl->tokens / rl->qps;
    pthread_mutex_unlock(&rl->mu);
    return wait;
}

void ratelimit_wait(RateLimit *rl)
{
    double wait = ratelimit_reserve(rl, clock_mono());
    if (wait <= 0) return;
    struct timespec ts = {.tv_sec = (time_t)wait,
                          .tv_nsec = (long)((wait - (double)(time_t)wait) * 1e9)};
    while (nanosleep(&ts, &ts) != 0) {
    }
}
