/* httpserv — a minimal HTTP/1.1 listener for /metrics, /healthz and /readyz: GET only,
 * one request per connection, answered from a handler in the listener's thread.
 *
 * Connections are served concurrently by one poll loop, so a slow or stalled client
 * never delays a kubelet probe: each connection must have sent its request and taken its
 * answer within HTTPSERV_DEADLINE_MS of being accepted, however it paces its bytes, and
 * at most HTTPSERV_MAX_CONNS are open at once (a new one then replaces the oldest). */
#ifndef KT_HTTPSERV_H
#define KT_HTTPSERV_H

#include <stddef.h>

/* The whole exchange of one connection, from accept to the last byte of the answer. */
#define HTTPSERV_DEADLINE_MS 2000
/* Connections held open at once, per server. */
#define HTTPSERV_MAX_CONNS 64

/* Fills *code, *content_type and *body (malloc'd; the server frees it) for `path`. */
typedef void (*HttpHandler)(void *ctx, const char *path, int *code, const char **content_type,
                            char **body);

typedef struct HttpServer HttpServer;

/* Listens on addr (":8080", "127.0.0.1:8081", port 0 picks a free one). Returns NULL with
 * err set on failure. */
HttpServer *httpserv_start(const char *addr, HttpHandler fn, void *ctx, char *err, size_t errlen);

/* The port actually bound. */
int httpserv_port(const HttpServer *s);

/* Stops listening, closes every open connection, joins the thread and frees s; returns
 * at once whatever the clients do. NULL is a no-op. */
void httpserv_stop(HttpServer *s);

#endif
