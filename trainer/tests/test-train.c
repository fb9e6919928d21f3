/* train: the check a state sync applies to the position a peer sends before it becomes
 * this rank's TrainState (trainer_check_position), on a Trainer that holds only what the
 * check reads: --epochs, the steps per epoch and the training set's size. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <string.h>

#include "train.h"

static Trainer run(void)
{
    Trainer t;
    memset(&t, 0, sizeof t);
    t.cfg.epochs = 3;
    t.steps_per_epoch = 10;
    t.train.count = 100;
    return t;
}

/* One position, checked live (a running peer's) and as a restored checkpoint's: the
 * result expected for each, and a part of the reason when refused. */
static void expect(const TrainPosition *p, int live_rc, int ckpt_rc, const char *why_part)
{
    Trainer t = run();
    char why[512] = "";
    int rc = trainer_check_position(&t, p, 1, why, sizeof why);
    print_message("# live: %d %s\n", rc, why);
    assert_int_equal(rc, live_rc);
    if (rc) assert_non_null(strstr(why, why_part));
    why[0] = '\0';
    rc = trainer_check_position(&t, p, 0, why, sizeof why);
    assert_int_equal(rc, ckpt_rc);
    if (rc) assert_non_null(strstr(why, why_part));
}

static void test_states_of_the_run_pass(void **s)
{
    (void)s;
    /* mid-run, the end of an epoch as the epoch-end checkpoint holds it, the run's end
     * as a recovery normalises it, the last position of a pass */
    expect(
        &(TrainPosition){
            .epoch = 1, .step_in_epoch = 4, .global_step = 14, .position = 3, .opt_iter = 14},
        0, 0, "");
    expect(&(TrainPosition){.epoch = 1, .step_in_epoch = 10, .global_step = 20, .opt_iter = 20}, 0,
           0, "");
    expect(&(TrainPosition){.epoch = 3, .global_step = 30, .position = 99, .opt_iter = 30}, 0, 0,
           "");
}

/* What the root of a sync sent that no rank can hold: exit 75 in state_sync. The
 * position 2^62 used to make the pipeline walk there pass by pass; the epoch 2^32 was
 * cast to an int. A checkpoint may come from a run with other --epochs or
 * --steps-per-epoch, so those bounds hold for a running peer's state only. */
static void test_hostile_states_refused(void **s)
{
    (void)s;
    expect(
        &(TrainPosition){.epoch = 1, .step_in_epoch = 4, .global_step = 14, .position = 1ull << 62},
        -EBADMSG, -EBADMSG, "data position 4611686018427387904 outside a pass over the 100");
    expect(&(TrainPosition){.epoch = 1, .global_step = 14, .position = 100}, -EBADMSG, -EBADMSG,
           "data position 100");
    expect(&(TrainPosition){.epoch = 1ull << 32, .global_step = 1ull << 40}, -EBADMSG, -EBADMSG,
           "epoch 4294967296 out of range");
    expect(&(TrainPosition){.epoch = 4, .global_step = 40}, -EBADMSG, 0, "epoch 4 out of range");
    expect(&(TrainPosition){.epoch = 1, .step_in_epoch = 11, .global_step = 21}, -EBADMSG, 0,
           "step 11 of the epoch out of range");
    expect(&(TrainPosition){.global_step = 1ull << 63}, -EBADMSG, -EBADMSG,
           "global step 9223372036854775808");
    expect(&(TrainPosition){.global_step = 5, .opt_iter = 1ull << 63}, -EBADMSG, -EBADMSG,
           "optimizer iterations 9223372036854775808");
    expect(&(TrainPosition){.epoch = 2, .step_in_epoch = 5, .global_step = 6}, -EBADMSG, -EBADMSG,
           "inconsistent position: epoch 2 and step 5 of it exceed global step 6");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_states_of_the_run_pass),
        cmocka_unit_test(test_hostile_states_refused),
    };
    return cmocka_run_group_tests_name("train", tests, NULL, NULL);
}
