/* The token bucket over a simulated clock: burst, steady rate, refill cap. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "clock.h"
#include "ratelimit.h"

#include <math.h>

#define NEAR(a, b) (fabs((a) - (b)) < 1e-9)

static void test_burst_then_rate(void **state)
{
    (void)state;
    RateLimit rl;
    ratelimit_init(&rl, 10, 5, 100.0);
    for (int i = 0; i < 5; i++)
        assert_true(ratelimit_reserve(&rl, 100.0) == 0);
    /* The 6th request at the same instant waits 1/qps, the 7th 2/qps. */
    double w6 = ratelimit_reserve(&rl, 100.0), w7 = ratelimit_reserve(&rl, 100.0);
    if (!NEAR(w6, 0.1) || !NEAR(w7, 0.2)) fail_msg("waits %g %g, want 0.1 0.2", w6, w7);
    ratelimit_destroy(&rl);
}

static void test_refill_is_capped_at_burst(void **state)
{
    (void)state;
    RateLimit rl;
    ratelimit_init(&rl, 2, 3, 0.0);
    for (int i = 0; i < 3; i++)
        ratelimit_reserve(&rl, 0.0);
    /* A long idle period refills only up to burst. */
    for (int i = 0; i < 3; i++)
        assert_true(ratelimit_reserve(&rl, 1000.0) == 0);
    double w = ratelimit_reserve(&rl, 1000.0);
    if (!NEAR(w, 0.5)) fail_msg("wait %g, want 0.5", w);
    ratelimit_destroy(&rl);
}

static void test_steady_rate_over_simulated_time(void **state)
{
    (void)state;
    /* Requests every 10 ms against qps 50: in 10 s of simulated time, exactly burst +
     * 50 * 10 of them are admitted without waiting beyond their arrival. */
    RateLimit rl;
    ratelimit_init(&rl, 50, 10, 0.0);
    double due_last = 0;
    int n = 0;
    for (int i = 0; i < 1000; i++) {
        double t = i * 0.01;
        double w = ratelimit_reserve(&rl, t);
        due_last = t + w;
        n++;
    }
    /* 1000 requests at 50/s with 10 up front: the last is due at (1000-10)/50 = 19.8 s. */
    if (!NEAR(due_last, 19.8)) fail_msg("last request due at %g, want 19.8", due_last);
    assert_int_equal(n, 1000);
    ratelimit_destroy(&rl);
}

static void test_unlimited_and_wait(void **state)
{
    (void)state;
    RateLimit rl;
    ratelimit_init(&rl, 0, 0, 0.0);
    for (int i = 0; i < 1000; i++)
        assert_true(ratelimit_reserve(&rl, 0.0) == 0);
    ratelimit_destroy(&rl);
    /* ratelimit_wait really sleeps: 3 tokens at qps 20 with burst 1 take >= 0.1 s. */
    ratelimit_init(&rl, 20, 1, clock_mono());
    double t0 = clock_mono();
    for (int i = 0; i < 3; i++)
        ratelimit_wait(&rl);
    double dt = clock_mono() - t0;
    if (dt < 0.099) fail_msg("3 tokens took %g s, want >= 0.1", dt);
    ratelimit_destroy(&rl);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_burst_then_rate),
        cmocka_unit_test(test_refill_is_capped_at_burst),
        cmocka_unit_test(test_steady_rate_over_simulated_time),
        cmocka_unit_test(test_unlimited_and_wait),
    };
    return cmocka_run_group_tests_name("ratelimit", tests, NULL, NULL);
}
