/* clock — wall and monotonic time, and the RFC 3339 timestamps of the Kubernetes API. */
#ifndef KT_CLOCK_H
#define KT_CLOCK_H

#include <stddef.h>

/* Seconds since the epoch (CLOCK_REALTIME). */
double clock_wall(void);

/* Seconds on CLOCK_MONOTONIC. */
double clock_mono(void);

/* Sleeps s seconds, or less: it returns within 20 ms once *stop (when stop is not NULL)
 * is non-zero, so that a thread told to stop is never held up by its wait. */
void clock_sleep(double s, volatile int *stop);

/* Formats t (epoch seconds, truncated) as "2006-01-02T15:04:05Z" into out (>= 21 bytes). */
void clock_format_rfc3339(double t, char *out, size_t n);

/* Parses "YYYY-MM-DDTHH:MM:SS[.frac](Z|+hh:mm|-hh:mm)"; returns 0 and *t, or -EINVAL. */
int clock_parse_rfc3339(const char *s, double *t);

#endif
