/*
 * pause: the process that holds a pod's namespaces (the sandbox container's command).
 *
 * It sleeps until SIGINT or SIGTERM and then exits 0. As PID 1 of a pod that shares its
 * PID namespace it is also the reaper: every SIGCHLD collects the exited children so no
 * zombie stays behind. Built static (docker/scratch-image.sh puts it alone in an image).
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static volatile sig_atomic_t stop_signal;

static void on_stop(int sig)
{
    stop_signal = sig;
}

static void on_child(int sig)
{
    int saved = errno;
    (void)sig;
    while (waitpid(-1, NULL, WNOHANG) > 0) {
    }
    errno = saved;
}

/* install: sets HANDLER for SIG with SA_RESTART and every signal blocked while it runs;
 * exits 1 with a message when the kernel refuses. */
static void install(int sig, void (*handler)(int))
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = handler;
    sa.sa_flags = SA_RESTART | (sig == SIGCHLD ? SA_NOCLDSTOP : 0);
    sigfillset(&sa.sa_mask);
    if (sigaction(sig, &sa, NULL) != 0) {
        fprintf(stderr, "pause: sigaction(%d): %s\n", sig, strerror(errno));
        exit(1);
    }
}

int main(int argc, char **argv)
{
    (void)argv;
    if (argc != 1) {
        fprintf(stderr, "usage: pause (takes no arguments; exits on SIGINT or SIGTERM)\n");
        return 2;
    }
    if (getpid() != 1) fprintf(stderr, "pause: warning: not PID 1, zombies are not mine to reap\n");
    install(SIGINT, on_stop);
    install(SIGTERM, on_stop);
    install(SIGCHLD, on_child);
    while (!stop_signal)
        pause();
    fprintf(stderr, "pause: signal %d, exiting\n", (int)stop_signal);
    return 0;
}
