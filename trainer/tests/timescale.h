/* timescale — test helper: KT_TEST_TIME_SCALE, a factor (a number >= 1, default 1) by
 * which the tests that measure time multiply every timeout, deadline and "within N s"
 * bound, so that they keep their meaning under a slowdown such as valgrind's (`make
 * valgrind` sets it). Unset, every bound is exactly the one written in the test.
 * The operator's tests (test-controller, test-leader) include this same file. */
#ifndef KT_TEST_TIMESCALE_H
#define KT_TEST_TIMESCALE_H

#include <stdio.h>
#include <stdlib.h>

/* The factor, read from the environment on the first call (make that call before any
 * thread or child is started); a value that is not a number >= 1 ends the program. */
static inline double test_time_scale(void)
{
    static double scale;
    if (scale == 0) {
        const char *s = getenv("KT_TEST_TIME_SCALE");
        char *end = NULL;
        double v = s && *s ? strtod(s, &end) : 1.0;
        if (s && *s && (*end != '\0' || !(v >= 1.0 && v <= 1000.0))) {
            fprintf(stderr, "KT_TEST_TIME_SCALE=%s: expected a number from 1 to 1000\n", s);
            exit(2);
        }
        if (v != 1.0) {
            printf("# KT_TEST_TIME_SCALE=%g: every time bound of this test x%g\n", v, v);
            fflush(stdout);
        }
        scale = v;
    }
    return scale;
}

/* s seconds times the factor. */
static inline double scaled(double s)
{
    return s * test_time_scale();
}

#endif
