/* libFuzzer target: the watch stream (watchparse_feed). The first byte sets the chunk
 * size; the rest is the response body. Fed whole and in chunks, the parser must hand
 * over the same events; with a tiny line limit it must only drop lines. */
#include "olog.h"
#include "watchparse.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

typedef struct Seen {
    unsigned long events;
    uint64_t hash; /* of the types and objects, in order */
} Seen;

static int on_event(void *ctx, const char *type, cJSON *object)
{
    Seen *s = ctx;
    if (!type || !cJSON_IsObject(object)) abort();
    char *o = cJSON_PrintUnformatted(object);
    if (!o) abort();
    for (const char *p = type; *p; p++)
        s->hash = (s->hash ^ (unsigned char)*p) * 1099511628211u;
    for (const char *p = o; *p; p++)
        s->hash = (s->hash ^ (unsigned char)*p) * 1099511628211u;
    free(o);
    s->events++;
    return 0;
}

static Seen run(const char *body, size_t n, size_t chunk, size_t max_line)
{
    Seen s = {0, 14695981039346656037u};
    WatchParser p;
    watchparse_init(&p, on_event, &s);
    if (max_line) p.max_line = max_line;
    for (size_t off = 0; off < n; off += chunk)
        if (watchparse_feed(&p, body + off, n - off < chunk ? n - off : chunk) != 0) abort();
    watchparse_free(&p);
    return s;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    olog_set_level(OLOG_ERROR);
    if (size < 1) return 0;
    size_t chunk = (size_t)data[0] % 64 + 1, n = size - 1;
    char *body = malloc(n ? n : 1);
    memcpy(body, data + 1, n);
    Seen whole = run(body, n, n ? n : 1, 0), cut = run(body, n, chunk, 0);
    if (whole.events != cut.events || whole.hash != cut.hash) abort();
    run(body, n, chunk, 48);
    free(body);
    return 0;
}
