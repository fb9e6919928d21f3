/* util: the exit code a supervisor (launch, pergpu) reports for a child's wait status,
 * from real children: an exit, a kill, and a stop, which is neither. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "util.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

/* Forks a child that exits with `code`, or raises `sig` when it is not 0. */
static pid_t child(int code, int sig)
{
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        if (sig) raise(sig);
        _exit(code);
    }
    return pid;
}

static void test_exit_code_is_the_childs(void **state)
{
    (void)state;
    const int codes[] = {KT_EXIT_OK, 1, KT_EXIT_USAGE, KT_EXIT_DATA, KT_EXIT_RETRY, 255};
    for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++) {
        int status;
        pid_t pid = child(codes[i], 0);
        assert_int_equal(waitpid(pid, &status, 0), pid);
        assert_int_equal(util_exit_code(status), codes[i]);
    }
}

static void test_signal_is_128_plus_n(void **state)
{
    (void)state;
    const int sigs[] = {SIGKILL, SIGTERM, SIGUSR1};
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) {
        int status;
        pid_t pid = child(0, sigs[i]);
        assert_int_equal(waitpid(pid, &status, 0), pid);
        assert_int_equal(util_exit_code(status), 128 + sigs[i]);
    }
}

/* A status that is neither an exit nor a kill says nothing of the job: it must read as
 * retryable (>= 128), never as a failure for good such as 1. */
static void test_other_status_is_retryable(void **state)
{
    (void)state;
    int status;
    pid_t pid = child(0, SIGSTOP);
    assert_int_equal(waitpid(pid, &status, WUNTRACED), pid);
    assert_true(WIFSTOPPED(status));
    assert_int_equal(util_exit_code(status), 128);
    kill(pid, SIGKILL);
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_int_equal(util_exit_code(status), 128 + SIGKILL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_exit_code_is_the_childs),
        cmocka_unit_test(test_signal_is_128_plus_n),
        cmocka_unit_test(test_other_status_is_retryable),
    };
    return cmocka_run_group_tests_name("util", tests, NULL, NULL);
}
