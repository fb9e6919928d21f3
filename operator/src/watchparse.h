/* watchparse — splits a watch response body (newline-delimited JSON events, delivered
 * in chunks cut at arbitrary bytes) into whole events. Bytes are buffered until a
 * newline ends the line; each complete line is parsed and handed to the callback as
 * (type, object). A line that is not a JSON event object is reported and skipped; one
 * that does not parse (an object nested deeper than CJSON_NESTING_LIMIT) is also handed
 * to the skip callback, so that the object can be named. The object's
 * metadata.managedFields is left out: cut from the text before parsing. */
#ifndef KT_WATCHPARSE_H
#define KT_WATCHPARSE_H

#include <cjson/cJSON.h>
#include <stddef.h>

/* Called for each event: type is ADDED | MODIFIED | DELETED | BOOKMARK | ERROR;
 * `object` is lent for the call: the callback may change it (the informer slims it in
 * place rather than copy it), and the parser frees it after. A non-zero return stops
 * feeding and is returned by watchparse_feed. */
typedef int (*WatchEventFn)(void *ctx, const char *type, cJSON *object);

/* Called with a line that does not parse (n bytes, not NUL-terminated, valid for the
 * call) and why ("nested deeper than 1000 levels", "not valid JSON"). */
typedef void (*WatchSkipFn)(void *ctx, const char *line, size_t n, const char *why);

typedef struct WatchParser {
    char *buf;
    size_t len, cap;
    /* The line without its object's metadata.managedFields, which no reader reads: cut
     * from the text before parsing, into this buffer, kept for the next line. */
    char *cut;
    size_t cut_cap;
    size_t max_line; /* a longer line is dropped (reported), default 64 MiB */
    WatchEventFn fn;
    WatchSkipFn skip; /* NULL: unparsable lines are only logged and counted */
    void *ctx;
    unsigned long bad_lines;
} WatchParser;

void watchparse_init(WatchParser *p, WatchEventFn fn, void *ctx);

/* Frees the buffer; the parser may be initialised again. */
void watchparse_free(WatchParser *p);

/* Feeds n bytes. Returns 0, the callback's non-zero value, or -ENOMEM. */
int watchparse_feed(WatchParser *p, const char *data, size_t n);

/* Drops a partial line (the stream was cut; the next watch starts afresh). */
void watchparse_reset(WatchParser *p);

#endif
