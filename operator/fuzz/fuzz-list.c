/* libFuzzer target: a list answer (listparse_feed) and the packed text the informer
 * caches each item as (jsonpack). The first byte sets the chunk size; the rest is the
 * response body. Fed whole and in chunks, the parser must hand over the same items and
 * end the same way; each item, printed as the cache prints it, must pack and unpack to
 * the same text. */
#include "jsonpack.h"
#include "listparse.h"
#include "olog.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

typedef struct Seen {
    unsigned long items;
    uint64_t hash; /* of the items' text, in order */
} Seen;

static int on_item(void *ctx, cJSON *item)
{
    Seen *s = ctx;
    char *text = cJSON_PrintUnformatted(item);
    if (!text) abort();
    char *packed = jsonpack_encode(text);
    size_t n = 0;
    char *back = packed ? jsonpack_decode(packed, &n) : NULL;
    if (!back || n != strlen(text) || strcmp(back, text) != 0) abort();
    for (const char *p = text; *p; p++)
        s->hash = (s->hash ^ (unsigned char)*p) * 1099511628211u;
    s->hash = (s->hash ^ 0xff) * 1099511628211u;
    free(back);
    free(packed);
    free(text);
    cJSON_Delete(item);
    s->items++;
    return 0;
}

/* Feeds the body in chunks; returns the first error or listparse_finish's answer. */
static int run(const char *body, size_t n, size_t chunk, size_t max_item, Seen *s)
{
    *s = (Seen){0, 14695981039346656037u};
    ListParser p;
    listparse_init(&p, on_item, s);
    if (max_item) p.max_item = max_item;
    int rc = 0;
    for (size_t off = 0; off < n && !rc; off += chunk)
        rc = listparse_feed(&p, body + off, n - off < chunk ? n - off : chunk);
    if (!rc) rc = listparse_finish(&p);
    listparse_free(&p);
    return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    olog_set_level(OLOG_ERROR);
    if (size < 1) return 0;
    size_t chunk = (size_t)data[0] % 64 + 1, n = size - 1;
    char *body = malloc(n ? n : 1);
    memcpy(body, data + 1, n);
    Seen whole, cut, small;
    int a = run(body, n, n ? n : 1, 0, &whole), b = run(body, n, chunk, 0, &cut);
    if (a != b || whole.items != cut.items || whole.hash != cut.hash) abort();
    int c = run(body, n, chunk, 48, &small);
    if (c != a && c != -E2BIG) abort();
    free(body);
    return 0;
}
