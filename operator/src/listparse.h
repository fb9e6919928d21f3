/* listparse — splits a list response body ({"kind":..,"metadata":{..},"items":[..]},
 * delivered in chunks cut at arbitrary bytes) into its items as they arrive, so that a
 * page of 500 pods is never held as one parsed tree: only the item being read is
 * buffered, parsed alone and handed to the callback. The top-level "metadata" (the
 * list's resourceVersion and continue token) is kept parsed; every other top-level
 * member is skipped. Items that are not JSON objects are skipped and counted, and so are
 * objects cJSON cannot parse (nested deeper than CJSON_NESTING_LIMIT): one such item,
 * which whoever may create the resource in one namespace can write, must not fail the
 * whole list of every namespace. */
#ifndef KT_LISTPARSE_H
#define KT_LISTPARSE_H

#include <cjson/cJSON.h>
#include <stddef.h>

/* Called for each item of "items", in order; `item` is the caller's to keep or free.
 * A non-zero return stops the parse and is returned by listparse_feed. */
typedef int (*ListItemFn)(void *ctx, cJSON *item);

/* Called with the text of an item that is an object but does not parse (n bytes, not
 * NUL-terminated, valid for the call) and why ("nested deeper than 1000 levels"); the
 * item is skipped either way. A non-zero return stops the parse as ListItemFn's does. */
typedef int (*ListSkipFn)(void *ctx, const char *text, size_t n, const char *why);

typedef struct ListParser {
    ListItemFn fn;
    ListSkipFn skip; /* NULL: unparsable items are only counted */
    void *ctx;
    int depth;    /* containers open before the next byte */
    int in_str;   /* inside a string */
    int esc;      /* the byte before was a backslash inside a string */
    int want_key; /* at depth 1: the next string is a member name */
    char key[16]; /* the current top-level member name, "" when longer */
    size_t keylen;
    int in_items;  /* inside the top-level "items" array */
    int want_item; /* in "items", after '[' or ',': the next value is an element */
    int capture;   /* 0, or the depth the captured value closes at (item or metadata) */
    int capture_meta;
    int done; /* the top-level object closed */
    char *buf;
    size_t len, cap;
    size_t max_item;                /* a longer item fails the parse with -E2BIG; default 64 MiB */
    cJSON *meta;                    /* the top-level "metadata", once read */
    unsigned long items, bad_items; /* bad_items: not objects, or not parsable */
} ListParser;

void listparse_init(ListParser *p, ListItemFn fn, void *ctx);

/* Frees the buffer and the metadata. */
void listparse_free(ListParser *p);

/* Feeds n bytes. Returns 0, the callback's non-zero value, -ENOMEM, -E2BIG (an item
 * over max_item) or -EBADMSG (bytes that cannot be a list: not an object at the top,
 * unbalanced brackets, data after its end, metadata that does not parse). */
int listparse_feed(ListParser *p, const char *data, size_t n);

/* Returns 0 when the whole top-level object has been read, else -EBADMSG (the body
 * was cut short). */
int listparse_finish(const ListParser *p);

/* The list's metadata as read, or NULL; owned by the parser. */
const cJSON *listparse_meta(const ListParser *p);

#endif
