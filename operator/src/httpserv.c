/* httpserv — tiny GET-only HTTP server for probes and metrics.
 *
 * One thread runs a poll loop over the listener, a wake pipe and up to HTTPSERV_MAX_CONNS
 * non-blocking connections. Why a poll loop rather than a thread per connection: a request
 * costs microseconds of work (a handler formats a little text), so all that is worth doing
 * concurrently is waiting, which one poll does for every connection at once; no thread is
 * created per client, no stack is held per stalled client, and the table of connections,
 * their deadlines and the cap belong to one thread, with no locks.
 *
 * Each connection gets one deadline when it is accepted: by then it has sent its request
 * and taken the answer, or it is closed. A deadline that restarted on every byte (the old
 * per-recv timeout) let a client that sends a byte a second hold the server for as long as
 * it liked. When the table is full a new connection takes the slot of the oldest one: a
 * probe needs its slot for a millisecond, so the oldest is the likeliest to be a client
 * that stalls, and refusing the newcomer instead would let a flood of idle connections
 * lock the probes out. */
#include "httpserv.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define REQUEST_MAX 4096

typedef struct Conn {
    int fd;             /* -1: a free slot */
    long long deadline; /* monotonic ms; the slot's age too, for eviction */
    size_t len;         /* bytes of the request read */
    char *out;          /* NULL while reading; then the whole answer, head and body */
    size_t out_len, out_off;
    char req[REQUEST_MAX + 1];
} Conn;

struct HttpServer {
    int fd, port;
    int wake[2]; /* httpserv_stop writes to wake[1]; the thread polls wake[0] */
    HttpHandler fn;
    void *ctx;
    pthread_t thread;
    Conn conns[HTTPSERV_MAX_CONNS]; /* owned by the thread */
};

static long long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void conn_close(Conn *c)
{
    if (c->fd < 0) return;
    close(c->fd);
    free(c->out);
    c->fd = -1;
    c->out = NULL;
    c->len = c->out_len = c->out_off = 0;
}

/* Sends what the socket takes of the answer; closes c once all of it is sent, or on an
 * error. */
static void conn_write(Conn *c)
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

/* Parses the request head in c->req, asks the handler and sends the answer. */
static void conn_answer(HttpServer *s, Conn *c)
{
    char method[8] = "", path[1024] = "";
    int code = 400;
    const char *ctype = "text/plain; charset=utf-8";
    char *body = NULL;
    if (sscanf(c->req, "%7s %1023s", method, path) == 2) {
        if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0) {
            code = 405;
        } else {
            char *q = strchr(path, '?');
            if (q) *q = 0;
            s->fn(s->ctx, path, &code, &ctype, &body);
        }
    }
    const char *text = code == 200   ? "OK"
                       : code == 404 ? "Not Found"
                       : code == 503 ? "Service Unavailable"
                       : code == 405 ? "Method Not Allowed"
                                     : "Bad Request";
    char fallback[64];
    if (!body) snprintf(fallback, sizeof fallback, "%s\n", text);
    const char *b = body ? body : fallback;
    size_t blen = strcmp(method, "HEAD") == 0 ? 0 : strlen(b);
    char head[256];
    int n = snprintf(head, sizeof head,
                     "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
                     "Connection: close\r\n\r\n",
                     code, text, ctype, strlen(b));
    c->out = malloc((size_t)n + blen);
    if (!c->out) {
        free(body);
        conn_close(c);
        return;
    }
    memcpy(c->out, head, (size_t)n);
    memcpy(c->out + n, b, blen);
    c->out_len = (size_t)n + blen;
    free(body);
    conn_write(c);
}

/* Reads what has arrived of the request; answers once the head is complete (or fills
 * the buffer), closes on end of file or an error. */
static void conn_read(HttpServer *s, Conn *c)
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
        c->req[c->len] = 0;
        if (c->len == REQUEST_MAX || strstr(c->req, "\r\n\r\n") || strstr(c->req, "\n\n")) {
            conn_answer(s, c);
            return;
        }
    }
}

/* Accepts what waits on the listener, each into a free slot or the oldest one's. A new
 * connection is read at once: a probe's request usually came with it, and is then
 * answered before a flood of connections behind it could take its slot. */
static void accept_all(HttpServer *s)
{
    for (int i = 0; i < HTTPSERV_MAX_CONNS; i++) {
        int fd = accept4(s->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) return; /* EAGAIN: none left; anything else: try at the next wakeup */
        Conn *c = NULL;
        for (int j = 0; j < HTTPSERV_MAX_CONNS; j++) {
            Conn *d = &s->conns[j];
            if (d->fd < 0) {
                c = d;
                break;
            }
            if (!c || d->deadline < c->deadline) c = d;
        }
        conn_close(c);
        c->fd = fd;
        c->deadline = now_ms() + HTTPSERV_DEADLINE_MS;
        conn_read(s, c);
    }
}

static void *serve(void *arg)
{
    HttpServer *s = arg;
    pthread_setname_np(pthread_self(), "kt-http"); /* as top -H, perf and gdb show it */
    struct pollfd p[2 + HTTPSERV_MAX_CONNS];
    p[0] = (struct pollfd){.fd = s->wake[0], .events = POLLIN};
    p[1] = (struct pollfd){.fd = s->fd, .events = POLLIN};
    for (;;) {
        long long now = now_ms(), next = -1;
        for (int i = 0; i < HTTPSERV_MAX_CONNS; i++) {
            Conn *c = &s->conns[i];
            if (c->fd >= 0 && c->deadline <= now) conn_close(c);
            p[2 + i] = (struct pollfd){.fd = c->fd, .events = c->out ? POLLOUT : POLLIN};
            if (c->fd >= 0 && (next < 0 || c->deadline < next)) next = c->deadline;
        }
        int timeout = next < 0 ? -1 : (int)(next - now);
        if (poll(p, 2 + HTTPSERV_MAX_CONNS, timeout) < 0) {
            if (errno == EINTR) continue;
            break;
        }
        if (p[0].revents) break;
        for (int i = 0; i < HTTPSERV_MAX_CONNS; i++) {
            Conn *c = &s->conns[i];
            if (c->fd < 0 || !p[2 + i].revents) continue;
            if (c->out)
                conn_write(c);
            else
                conn_read(s, c);
        }
        if (p[1].revents & POLLIN) accept_all(s);
    }
    for (int i = 0; i < HTTPSERV_MAX_CONNS; i++)
        conn_close(&s->conns[i]);
    return NULL;
}

HttpServer *httpserv_start(const char *addr, HttpHandler fn, void *ctx, char *err, size_t errlen)
{
    char host[256] = "";
    const char *colon = strrchr(addr, ':');
    if (!colon) {
        snprintf(err, errlen, "address \"%s\": expected [host]:port", addr);
        return NULL;
    }
    snprintf(host, sizeof host, "%.*s", (int)(colon - addr), addr);
    char *end;
    long port = strtol(colon + 1, &end, 10);
    if (*end || port < 0 || port > 65535) {
        snprintf(err, errlen, "address \"%s\": bad port", addr);
        return NULL;
    }
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    if (!*host || strcmp(host, "0.0.0.0") == 0)
        sa.sin_addr.s_addr = htonl(INADDR_ANY);
    else if (strcmp(host, "localhost") == 0)
        sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    else if (inet_pton(AF_INET, host, &sa.sin_addr) != 1) {
        snprintf(err, errlen, "address \"%s\": host must be an IPv4 address", addr);
        return NULL;
    }
    HttpServer *s = calloc(1, sizeof *s);
    if (!s) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    s->fn = fn;
    s->ctx = ctx;
    s->wake[0] = s->wake[1] = -1;
    for (int i = 0; i < HTTPSERV_MAX_CONNS; i++)
        s->conns[i].fd = -1;
    /* Non-blocking: the loop accepts until the queue is empty. */
    s->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int one = 1, rc;
    socklen_t sl = sizeof sa;
    if (s->fd < 0 || setsockopt(s->fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) ||
        bind(s->fd, (struct sockaddr *)&sa, sizeof sa) || listen(s->fd, 64) ||
        getsockname(s->fd, (struct sockaddr *)&sa, &sl) || pipe2(s->wake, O_CLOEXEC)) {
        snprintf(err, errlen, "listen on %s: %s", addr, strerror(errno));
        goto err;
    }
    s->port = ntohs(sa.sin_port);
    if ((rc = pthread_create(&s->thread, NULL, serve, s))) {
        snprintf(err, errlen, "listen on %s: cannot start the thread: %s", addr, strerror(rc));
        goto err;
    }
    return s;
err:
    if (s->fd >= 0) close(s->fd);
    if (s->wake[0] >= 0) close(s->wake[0]);
    if (s->wake[1] >= 0) close(s->wake[1]);
    free(s);
    return NULL;
}

int httpserv_port(const HttpServer *s)
{
    return s->port;
}

void httpserv_stop(HttpServer *s)
{
    if (!s) return;
    ssize_t w = write(s->wake[1], "x", 1);
    (void)w; /* a full pipe already wakes the thread */
    pthread_join(s->thread, NULL);
    close(s->fd);
    close(s->wake[0]);
    close(s->wake[1]);
    free(s);
}
