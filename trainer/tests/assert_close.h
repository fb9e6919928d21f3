/* assert_close — test helper: floating-point comparisons that say what differed. A
 * failing assert_true(fabsf(a[i] - b[i]) <= tol) prints only its expression; these print
 * both values, their difference, the tolerance and, in a loop, the index:
 *
 *   assert_close(got, want, tol)        |got - want| <= tol
 *   assert_close_i(got, want, tol, i)   the same, naming index i (a size_t or an int)
 *   assert_close_lt(got, want, tol)     |got - want| <  tol (where the test says "<")
 *
 * Values are compared as doubles, so floats are compared exactly; tol 0 is equality.
 * NaN is never close to anything. Include after <cmocka.h>. The operator's tests
 * include this same file. */
#ifndef KT_TEST_ASSERT_CLOSE_H
#define KT_TEST_ASSERT_CLOSE_H

#include <math.h>
#include <stdio.h>

#define assert_close(got, want, tol)                                                               \
    assert_close_at((double)(got), (double)(want), (double)(tol), 0, -1, #got, #want, __FILE__,    \
                    __LINE__)
#define assert_close_i(got, want, tol, i)                                                          \
    assert_close_at((double)(got), (double)(want), (double)(tol), 0, (long long)(i), #got, #want,  \
                    __FILE__, __LINE__)
#define assert_close_lt(got, want, tol)                                                            \
    assert_close_at((double)(got), (double)(want), (double)(tol), 1, -1, #got, #want, __FILE__,    \
                    __LINE__)

/* The check behind the macros: fails the test at FILE:LINE unless |got - want| <= tol
 * (< tol when strict); index >= 0 is printed as [index]. */
static inline void assert_close_at(double got, double want, double tol, int strict, long long index,
                                   const char *got_expr, const char *want_expr, const char *file,
                                   int line)
{
    double diff = fabs(got - want);
    if (strict ? diff < tol : diff <= tol) return;
    char at[32] = "";
    if (index >= 0) snprintf(at, sizeof at, " at [%lld]", index);
    print_error("%s = %.9g, %s = %.9g%s: they differ by %.3g; the test allows %s %.3g\n", got_expr,
                got, want_expr, want, at, diff, strict ? "<" : "<=", tol);
    _fail(file, line);
}

#endif
