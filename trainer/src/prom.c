#include "prom.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "gemm.h"
#include "net.h"
#include "util.h"

#define REQUEST_MAX 4096

typedef struct PromConn {
    int fd;             /* -1: a free slot */
    long long deadline; /* monotonic ms; the slot's age too, for eviction */
    size_t len;         /* bytes of the request read */
    char *out;          /* NULL while reading; then the whole answer, head and body */
    size_t out_len, out_off;
    char req[REQUEST_MAX + 1];
} PromConn;

struct Prom {
    int lfd;
    int wake[2];   /* prom_stop writes to wake[1]; the thread polls wake[0] */
    pthread_t thread;
    PromConn conns[PROM_MAX_CONNS]; /* owned by the thread */
    pthread_mutex_t mu;
    /* guarded by mu */
    long steps;
    int epoch;
    double loss, accuracy, samples_per_sec, lr, allreduce_s, allreduce_total, step_total;
    int evaluated;
    double test_loss, test_accuracy;
    long total_steps, start_step;
    long ckpt_step; /* -1: no checkpoint yet */
    double ckpt_time;
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

void prom_checkpoint(Prom *p, long step, double unix_time)
{
    pthread_mutex_lock(&p->mu);
    p->ckpt_step = step, p->ckpt_time = unix_time;
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
    metric(f, "kubetrain_total_steps", "gauge", "Global steps of the whole run.",
           (double)p->total_steps);
    metric(f, "kubetrain_start_step", "gauge",
           "The global step this process resumed at (0: from scratch).", (double)p->start_step);
    if (p->ckpt_step >= 0) {
        metric(f, "kubetrain_checkpoint_step", "gauge",
               "Global step of the newest checkpoint saved or resumed from.", (double)p->ckpt_step);
        /* %.9g would round today's Unix time to 10 s; a timestamp wants whole seconds. */
        fprintf(f,
                "# HELP kubetrain_checkpoint_timestamp_seconds When that checkpoint was written "
                "(Unix seconds).\n# TYPE kubetrain_checkpoint_timestamp_seconds gauge\n"
                "kubetrain_checkpoint_timestamp_seconds %.3f\n",
                p->ckpt_time);
    }
    pthread_mutex_unlock(&p->mu);
    /* Label values without quotes or backslashes: names of OpenBLAS core types and of
     * our CPU flags. */
    const GemmKernels *k = gemm_kernels();
    fprintf(f,
            "# HELP kubetrain_gemm_info The matrix products' backend, library and kernel set, "
            "and the CPU's feature flags (always 1).\n# TYPE kubetrain_gemm_info gauge\n"
            "kubetrain_gemm_info{backend=\"%s\",library=\"%s\",kernels=\"%s\",cpu=\"%s\"} 1\n",
            gemm_backend(), k->library, k->kernels, k->cpu);
    if (fclose(f) != 0 || !text) util_fail(KT_EXIT_DATA, "prom_format: out of memory");
    return text;
}

/* The server: one thread, one poll loop over the listener, the wake pipe and up to
 * PROM_MAX_CONNS non-blocking connections. A poll loop rather than a thread per
 * connection: answering costs microseconds (prom_format), so only the waiting needs to be
 * concurrent, and one poll waits on every connection at once; and prom_stop has a single
 * thread to wake, which is never blocked on a client, so a finished run exits at once
 * whatever its scrapers do. Each connection has one deadline, PROM_DEADLINE_MS from its
 * accept, for the request and the answer together (a timeout that restarted on every byte
 * let a client sending one byte a second hold the server, and the trainer's exit, for
 * hours). When all slots are taken a new connection replaces the oldest: a scrape needs its
 * slot for a millisecond, so the oldest is the likeliest to be a client that stalls. */
static long long now_ms(void)
{
    return (long long)(util_now() * 1e3);
}

static void conn_close(PromConn *c)
{
    if (c->fd < 0) return;
    close(c->fd);
    free(c->out);
    c->fd = -1;
    c->out = NULL;
    c->len = c->out_len = c->out_off = 0;
}

/* Sends what the socket takes of the answer; closes c once it is all sent, or on error. */
static void conn_write(PromConn *c)
{
    while (c->out_off < c->out_len) {
        ssize_t w = send(c->fd, c->out + c->out_off, c->out_len - c->out_off, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
        if (w <= 0) break;
        c->out_off += (size_t)w;
    }
    conn_close(c);
}

/* Answers the request head in c->req and starts sending. */
static void conn_answer(Prom *p, PromConn *c)
{
    char *body, head[256];
    const char *status = "200 OK", *type = "text/plain; version=0.0.4; charset=utf-8";
    size_t blen;
    const char *req = c->req;
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
                      "Connection: close\r\n\r\n",
                      status, type, blen);
    size_t send_body = head_only ? 0 : blen;
    c->out = xmalloc((size_t)hl + send_body);
    memcpy(c->out, head, (size_t)hl);
    memcpy(c->out + hl, body, send_body);
    c->out_len = (size_t)hl + send_body;
    free(body);
    conn_write(c);
}

/* Reads what has arrived of the request head; answers once it is complete (or fills
 * the buffer), closes on end of file or error. */
static void conn_read(Prom *p, PromConn *c)
{
    for (;;) {
        ssize_t r = recv(c->fd, c->req + c->len, REQUEST_MAX - c->len, 0);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
        if (r <= 0) {
            conn_close(c);
            return;
        }
        c->len += (size_t)r;
        c->req[c->len] = '\0';
        if (c->len == REQUEST_MAX || strstr(c->req, "\r\n\r\n") || strstr(c->req, "\n\n")) {
            conn_answer(p, c);
            return;
        }
    }
}

/* Accepts the queued connections, each into a free slot or the oldest one's, and reads
 * each at once (a scrape's request usually came with it). */
static void accept_all(Prom *p)
{
    for (int i = 0; i < PROM_MAX_CONNS; i++) {
        int fd = accept4(p->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) return; /* EAGAIN: none left; anything else: try at the next wakeup */
        PromConn *c = NULL;
        for (int j = 0; j < PROM_MAX_CONNS; j++) {
            PromConn *d = &p->conns[j];
            if (d->fd < 0) {
                c = d;
                break;
            }
            if (!c || d->deadline < c->deadline) c = d;
        }
        conn_close(c);
        c->fd = fd;
        c->deadline = now_ms() + PROM_DEADLINE_MS;
        conn_read(p, c);
    }
}

static void *server_main(void *arg)
{
    Prom *p = arg;
    struct pollfd pf[2 + PROM_MAX_CONNS];
    pf[0] = (struct pollfd){.fd = p->wake[0], .events = POLLIN};
    pf[1] = (struct pollfd){.fd = p->lfd, .events = POLLIN};
    for (;;) {
        long long now = now_ms(), next = -1;
        for (int i = 0; i < PROM_MAX_CONNS; i++) {
            PromConn *c = &p->conns[i];
            if (c->fd >= 0 && c->deadline <= now) conn_close(c);
            pf[2 + i] = (struct pollfd){.fd = c->fd, .events = c->out ? POLLOUT : POLLIN};
            if (c->fd >= 0 && (next < 0 || c->deadline < next)) next = c->deadline;
        }
        if (poll(pf, 2 + PROM_MAX_CONNS, next < 0 ? -1 : (int)(next - now)) < 0) {
            if (errno == EINTR) continue;
            break;
        }
        if (pf[0].revents) break;
        for (int i = 0; i < PROM_MAX_CONNS; i++) {
            PromConn *c = &p->conns[i];
            if (c->fd < 0 || !pf[2 + i].revents) continue;
            if (c->out) conn_write(c);
            else conn_read(p, c);
        }
        if (pf[1].revents & POLLIN) accept_all(p);
    }
    for (int i = 0; i < PROM_MAX_CONNS; i++) conn_close(&p->conns[i]);
    return NULL;
}

int prom_start(Prom **out, int port, long total_steps, long start_step, int *bound_port, char *err,
               size_t errlen)
{
    Prom *p = xcalloc(1, sizeof *p);
    p->total_steps = total_steps, p->start_step = start_step, p->steps = start_step;
    int bound, rc;
    char lerr[256];
    if ((rc = net_listen(NULL, port, 0, &p->lfd, &bound, lerr, sizeof lerr))) {
        snprintf(err, errlen, "--metrics-port %d: %s", port, lerr);
        free(p);
        return rc;
    }
    /* Non-blocking: the loop accepts until the queue is empty. */
    int fl = fcntl(p->lfd, F_GETFL);
    if (fl < 0 || fcntl(p->lfd, F_SETFL, fl | O_NONBLOCK) < 0 || pipe2(p->wake, O_CLOEXEC) < 0) {
        rc = -errno;
        snprintf(err, errlen, "--metrics-port %d: %s", port, strerror(errno));
        close(p->lfd);
        free(p);
        return rc;
    }
    for (int i = 0; i < PROM_MAX_CONNS; i++) p->conns[i].fd = -1;
    p->ckpt_step = -1;
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
