/* clock — wall and monotonic time, and the RFC 3339 timestamps of the Kubernetes API. */
#ifndef KT_CLOCK_H
#define KT_CLOCK_H

#include <pthread.h>
#include <stddef.h>
#include <time.h>

/* Seconds since the epoch (CLOCK_REALTIME). */
double clock_wall(void);

/* Seconds on CLOCK_MONOTONIC. */
double clock_mono(void);

/* Initialises c to time its waits on CLOCK_MONOTONIC, so that pthread_cond_timedwait
 * takes clock_timespec(clock_mono() + s) and a change of the wall clock moves nothing. */
void clock_cond_init(pthread_cond_t *c);

/* t, seconds on CLOCK_MONOTONIC (t >= 0), as the timespec pthread_cond_timedwait takes. */
struct timespec clock_timespec(double t);

/* A stop flag whose waiters are woken when it is set, rather than polling it. */
typedef struct ClockStop {
    volatile int flag; /* read with clock_stop_is_set */
    pthread_mutex_t mu;
    pthread_cond_t cv;
} ClockStop;

/* Initialises s, not set. */
void clock_stop_init(ClockStop *s);
void clock_stop_destroy(ClockStop *s);

/* Whether s is set (an atomic load). */
int clock_stop_is_set(ClockStop *s);

/* Sets s (v 1) and wakes every clock_stop_wait on it, or clears it (v 0). */
void clock_stop_set(ClockStop *s, int v);

/* Waits secs seconds, or until s is set. */
void clock_stop_wait(ClockStop *s, double secs);

/* Sleeps s seconds, or less: it returns within 20 ms once *stop (when stop is not NULL)
 * is non-zero, so that a thread told to stop is never held up by its wait. It polls: for
 * a wait that recurs for the life of the process, wait on a ClockStop instead. The
 * informers keep it for their back-off, as their watch polls the same flag. */
void clock_sleep(double s, volatile int *stop);

/* Formats t (epoch seconds, truncated) as "2006-01-02T15:04:05Z" into out (>= 21 bytes).
 * Returns 0, or -ERANGE with out "" when t is not a time from 1970 to the end of year 9999
 * (NaN, infinite, negative or later: RFC 3339 has four-digit years). */
int clock_format_rfc3339(double t, char *out, size_t n);

/* Parses "YYYY-MM-DDTHH:MM:SS[.frac](Z|+hh:mm|-hh:mm)"; returns 0 and *t, or -EINVAL. */
int clock_parse_rfc3339(const char *s, double *t);

#endif
