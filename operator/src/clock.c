/* clock — time sources and RFC 3339. */
#include "clock.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

double clock_wall(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

double clock_mono(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void clock_cond_init(pthread_cond_t *c)
{
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(c, &ca);
    pthread_condattr_destroy(&ca);
}

struct timespec clock_timespec(double t)
{
    struct timespec ts = {.tv_sec = (time_t)t};
    ts.tv_nsec = (long)((t - (double)ts.tv_sec) * 1e9);
    return ts;
}

void clock_stop_init(ClockStop *s)
{
    s->flag = 0;
    pthread_mutex_init(&s->mu, NULL);
    clock_cond_init(&s->cv);
}

void clock_stop_destroy(ClockStop *s)
{
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->mu);
}

int clock_stop_is_set(ClockStop *s)
{
    return __atomic_load_n(&s->flag, __ATOMIC_ACQUIRE);
}

void clock_stop_set(ClockStop *s, int v)
{
    pthread_mutex_lock(&s->mu);
    __atomic_store_n(&s->flag, v, __ATOMIC_RELEASE);
    if (v) pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

void clock_stop_wait(ClockStop *s, double secs)
{
    struct timespec until = clock_timespec(clock_mono() + secs);
    pthread_mutex_lock(&s->mu);
    while (!clock_stop_is_set(s) && pthread_cond_timedwait(&s->cv, &s->mu, &until) == 0)
        continue; /* woken, but not set: wait out the rest */
    pthread_mutex_unlock(&s->mu);
}

void clock_sleep(double s, volatile int *stop)
{
    double end = clock_mono() + s;
    for (;;) {
        if (stop && __atomic_load_n(stop, __ATOMIC_ACQUIRE)) return;
        double left = end - clock_mono();
        if (left <= 0) return;
        struct timespec ts = {0, (long)((left < 0.02 ? left : 0.02) * 1e9)};
        nanosleep(&ts, NULL);
    }
}

/* 10000-01-01T00:00:00Z */
#define CLOCK_YEAR_10000 253402300800.0

int clock_format_rfc3339(double t, char *out, size_t n)
{
    if (n) out[0] = 0;
    /* Checked before the cast: a double outside time_t's range makes it undefined. */
    if (!(t >= 0 && t < CLOCK_YEAR_10000)) return -ERANGE;
    time_t s = (time_t)t;
    struct tm tm;
    if (!gmtime_r(&s, &tm) || strftime(out, n, "%Y-%m-%dT%H:%M:%SZ", &tm) == 0) {
        if (n) out[0] = 0;
        return -ERANGE;
    }
    return 0;
}

int clock_parse_rfc3339(const char *s, double *t)
{
    if (!s) return -EINVAL;
    struct tm tm;
    memset(&tm, 0, sizeof tm);
    const char *p = strptime(s, "%Y-%m-%dT%H:%M:%S", &tm);
    if (!p) return -EINVAL;
    double frac = 0;
    if (*p == '.') {
        char *end;
        frac = strtod(p, &end);
        p = end;
    }
    long off = 0;
    if (*p == 'Z' || *p == 'z') {
        p++;
    } else if (*p == '+' || *p == '-') {
        int hh, mm;
        if (sscanf(p + 1, "%2d:%2d", &hh, &mm) != 2) return -EINVAL;
        off = (hh * 60L + mm) * 60L * (*p == '+' ? 1 : -1);
        p += 6;
    } else {
        return -EINVAL;
    }
    if (*p) return -EINVAL;
    *t = (double)(timegm(&tm) - off) + frac;
    return 0;
}
