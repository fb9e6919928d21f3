/* httpserv — a minimal HTTP/1.1 listener for /metrics, /healthz and /readyz: GET only,
 * one request per connection, answered from a handler in the listener's thread. */
#ifndef KT_HTTPSERV_H
#define KT_HTTPSERV_H

#include <stddef.h>

/* Fills *code, *content_type and *body (malloc'd; the server frees it) for `path`. */
typedef void (*HttpHandler)(void *ctx, const char *path, int *code, const char **content_type,
                            char **body);

typedef struct HttpServer HttpServer;

/* Listens on addr (":8080", "127.0.0.1:8081", port 0 picks a free one). Returns NULL with
 * err set on failure. */
HttpServer *httpserv_start(const char *addr, HttpHandler fn, void *ctx, char *err, size_t errlen);

/* The port actually bound. */
int httpserv_port(const HttpServer *s);

/* Stops listening, joins the thread and frees s; NULL is a no-op. */
void httpserv_stop(HttpServer *s);

#endif
