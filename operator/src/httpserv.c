/* httpserv — tiny GET-only HTTP server for probes and metrics. */
#include "httpserv.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

struct HttpServer {
    int fd, port;
    volatile int stop;
    HttpHandler fn;
    void *ctx;
    pthread_t thread;
};

static void send_all(int fd, const char *p, size_t n)
{
    while (n) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return;
        p += w;
        n -= (size_t)w;
    }
}

static void serve_one(HttpServer *s, int fd)
{
    char req[4096];
    size_t len = 0;
    /* Read the request head, waiting at most 2 s for a slow client. */
    while (len < sizeof req - 1) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 2000) <= 0) return;
        ssize_t r = recv(fd, req + len, sizeof req - 1 - len, 0);
        if (r <= 0) return;
        len += (size_t)r;
        req[len] = 0;
        if (strstr(req, "\r\n\r\n") || strstr(req, "\n\n")) break;
    }
    char method[8] = "", path[1024] = "";
    int code = 400;
    const char *ctype = "text/plain; charset=utf-8";
    char *body = NULL;
    if (sscanf(req, "%7s %1023s", method, path) == 2) {
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
    if (!body) {
        body = malloc(64);
        if (body) snprintf(body, 64, "%s\n", text);
    }
    size_t blen = body ? strlen(body) : 0;
    char head[256];
    int n = snprintf(head, sizeof head,
                     "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
                     "Connection: close\r\n\r\n",
                     code, text, ctype, blen);
    send_all(fd, head, (size_t)n);
    if (body && strcmp(method, "HEAD") != 0) send_all(fd, body, blen);
    free(body);
}

static void *serve(void *arg)
{
    HttpServer *s = arg;
    while (!s->stop) {
        struct pollfd p = {.fd = s->fd, .events = POLLIN};
        int r = poll(&p, 1, 200);
        if (r <= 0) continue;
        int c = accept(s->fd, NULL, NULL);
        if (c < 0) continue;
        serve_one(s, c);
        close(c);
    }
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
    s->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    socklen_t sl = sizeof sa;
    if (s->fd < 0 || setsockopt(s->fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) ||
        bind(s->fd, (struct sockaddr *)&sa, sizeof sa) || listen(s->fd, 64) ||
        getsockname(s->fd, (struct sockaddr *)&sa, &sl)) {
        snprintf(err, errlen, "listen on %s: %s", addr, strerror(errno));
        if (s->fd >= 0) close(s->fd);
        free(s);
        return NULL;
    }
    s->port = ntohs(sa.sin_port);
    int rc = pthread_create(&s->thread, NULL, serve, s);
    if (rc) {
        snprintf(err, errlen, "listen on %s: %s", addr, strerror(rc));
        close(s->fd);
        free(s);
        return NULL;
    }
    return s;
}

int httpserv_port(const HttpServer *s)
{
    return s->port;
}

void httpserv_stop(HttpServer *s)
{
    if (!s) return;
    s->stop = 1;
    pthread_join(s->thread, NULL);
    close(s->fd);
    free(s);
}
