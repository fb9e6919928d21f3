#include "prom.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "net.h"
#include "util.h"

#define CLIENT_TIMEOUT_S 2
#define REQUEST_MAX 4096

struct Prom {
    int lfd;
    int wake[2];   /* prom_stop writes to wake[1]; the thread polls wake[0] */
    pthread_t thread;
    pthread_mutex_t mu;
    /* guarded by mu */
    long steps;
    int epoch;
    double loss, accuracy, samples_per_sec, lr, allreduce_s, allreduce_total, step_total;
    int evaluated;
    double test_loss, test_accuracy;
};

void prom_step(Prom *p, int epoch, long global_step, double loss, double accuracy,
               double samples_per_sec, double learning_rate, double allreduce_seconds,
               double step_seconds)
{
    pthread_mutex_lock(&p->mu);
    p->epoch = epoch;
    p->steps = global_step;
    p->loss = loss, p->accuracy = accuracy, p->samples_per_sec = samples_per_sec;
    p->lr = learning_rate;
    p->allreduce_s = allreduce_seconds;
    p->allreduce_total += allreduce_seconds;
    p->step_total += step_seconds;
    pthread_mutex_unlock(&p->mu);
}

void prom_eval(Prom *p, double test_loss, double test_accuracy)
{
    pthread_mutex_lock(&p->mu);
    p->evaluated = 1;
    p->test_loss = test_loss, p->test_accuracy = test_accuracy;
    pthread_mutex_unlock(&p->mu);
}

static void metric(FILE *f, const char *name, const char *type, const char *help, double v)
{
    fprintf(f, "# HELP %s %s\n# TYPE %s %s\n%s %.9g\n", name, help, name, type, name, v);
}

char *prom_format(Prom *p, size_t *len)
{
    char *text = NULL;
    FILE *f = open_memstream(&text, len);
    if (!f) util_fail(KT_EXIT_DATA, "prom_format: out of memory");
    pthread_mutex_lock(&p->mu);
    metric(f, "kubetrain_steps_total", "counter",
           "Training steps done, global across epochs and restarts.", (double)p->steps);
    metric(f, "kubetrain_epoch", "gauge", "The epoch in progress (1-based).", p->epoch);
    metric(f, "kubetrain_loss", "gauge", "Loss of the last step over the global batch.", p->loss);
    metric(f, "kubetrain_accuracy", "gauge", "Accuracy of the last step over the global batch.",
           p->accuracy);
    metric(f, "kubetrain_samples_per_second", "gauge",
           "Global samples per second of the last step.", p->samples_per_sec);
    metric(f, "kubetrain_learning_rate", "gauge", "The optimizer's learning rate.", p->lr);
    metric(f, "kubetrain_allreduce_seconds", "gauge",
           "Seconds of the last step's gradient all-reduce.", p->allreduce_s);
    metric(f, "kubetrain_allreduce_seconds_total", "counter",
           "Seconds spent in gradient all-reduces by this process.", p->allreduce_total);
    metric(f, "kubetrain_step_seconds_total", "counter",
           "Seconds spent in training steps by this process.", p->step_total);
    if (p->evaluated) {
        metric(f, "kubetrain_test_loss", "gauge", "Test-set loss of the last evaluation.",
               p->test_loss);
        metric(f, "kubetrain_test_accuracy", "gauge", "Test-set accuracy of the last evaluation.",
               p->test_accuracy);
    }
    pthread_mutex_unlock(&p->mu);
    if (fclose(f) != 0 || !text) util_fail(KT_EXIT_DATA, "prom_format: out of memory");
    return text;
}

static void write_all(int fd, const char *s, size_t n)
{
    while (n > 0) {
        ssize_t w = send(fd, s, n, MSG_NOSIGNAL);
        if (w <= 0) return;
        s += w, n -= (size_t)w;
    }
}

/* Reads one request head and answers it. */
static void serve(Prom *p, int fd)
{
    struct timeval tv = {.tv_sec = CLIENT_TIMEOUT_S};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    char req[REQUEST_MAX + 1];
    size_t n = 0;
    while (n < REQUEST_MAX) {
        ssize_t r = recv(fd, req + n, REQUEST_MAX - n, 0);
        if (r <= 0) return;
        n += (size_t)r;
        req[n] = '\0';
        if (strstr(req, "\r\n\r\n") || strstr(req, "\n\n")) break;
    }
    req[n] = '\0';
    char *body, head[256];
    const char *status = "200 OK", *type = "text/plain; version=0.0.4; charset=utf-8";
    size_t blen;
    int get = !strncmp(req, "GET ", 4), head_only = !strncmp(req, "HEAD ", 5);
    const char *path = get ? req + 4 : head_only ? req + 5 : NULL;
    if (path && (!strncmp(path, "/metrics ", 9) || !strncmp(path, "/metrics?", 9))) {
        body = prom_format(p, &blen);
    } else {
        status = path ? "404 Not Found" : "405 Method Not Allowed";
        type = "text/plain; charset=utf-8";
        body = xstrdup("kubetrain-trainer serves GET /metrics only\n");
        blen = strlen(body);
    }
    int hl = snprintf(head, sizeof head,
                      "HTTP/1.0 %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
                      "Connection: close\r\n\r\n", status, type, blen);
    write_all(fd, head, (size_t)hl);
    if (!head_only) write_all(fd, body, blen);
    free(body);
}

static void *server_main(void *arg)
{
    Prom *p = arg;
    struct pollfd pf[2] = {{.fd = p->lfd, .events = POLLIN}, {.fd = p->wake[0], .events = POLLIN}};
    for (;;) {
        if (poll(pf, 2, -1) < 0) {
            if (errno == EINTR) continue;
            break;
        }
        if (pf[1].revents) break;
        if (!(pf[0].revents & POLLIN)) continue;
        int fd = accept4(p->lfd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0) continue;
        serve(p, fd);
        close(fd);
    }
    return NULL;
}

int prom_start(Prom **out, int port, int *bound_port, char *err, size_t errlen)
{
    Prom *p = xcalloc(1, sizeof *p);
    int bound, rc;
    char lerr[256];
    if ((rc = net_listen(NULL, port, 0, &p->lfd, &bound, lerr, sizeof lerr))) {
        snprintf(err, errlen, "--metrics-port %d: %s", port, lerr);
        free(p);
        return rc;
    }
    if (pipe2(p->wake, O_CLOEXEC) < 0) {
        rc = -errno;
        snprintf(err, errlen, "--metrics-port %d: pipe: %s", port, strerror(errno));
        close(p->lfd);
        free(p);
        return rc;
    }
    pthread_mutex_init(&p->mu, NULL);
    if ((rc = pthread_create(&p->thread, NULL, server_main, p))) {
        snprintf(err, errlen, "--metrics-port %d: cannot start the thread: %s", port, strerror(rc));
        close(p->lfd);
        close(p->wake[0]);
        close(p->wake[1]);
        pthread_mutex_destroy(&p->mu);
        free(p);
        return -rc;
    }
    if (bound_port) *bound_port = bound;
    *out = p;
    return 0;
}

void prom_stop(Prom *p)
{
    if (!p) return;
    ssize_t w = write(p->wake[1], "x", 1);
    (void)w;
    pthread_join(p->thread, NULL);
    close(p->lfd);
    close(p->wake[0]);
    close(p->wake[1]);
    pthread_mutex_destroy(&p->mu);
    free(p);
}
