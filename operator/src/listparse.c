/* listparse — a list body's items, one at a time; see listparse.h. */
#include "listparse.h"

#include "jsonx.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void listparse_init(ListParser *p, ListItemFn fn, void *ctx)
{
    memset(p, 0, sizeof *p);
    p->fn = fn;
    p->ctx = ctx;
    p->max_item = 64u << 20;
}

void listparse_free(ListParser *p)
{
    free(p->buf);
    cJSON_Delete(p->meta);
    p->buf = NULL;
    p->meta = NULL;
    p->len = p->cap = 0;
}

const cJSON *listparse_meta(const ListParser *p)
{
    return p->meta;
}

int listparse_finish(const ListParser *p)
{
    return p->done ? 0 : -EBADMSG;
}

static int push(ListParser *p, char c)
{
    if (p->len + 1 >= p->cap) {
        size_t cap = p->cap ? p->cap * 2 : 4096;
        char *b = realloc(p->buf, cap);
        if (!b) return -ENOMEM;
        p->buf = b;
        p->cap = cap;
    }
    if (p->len >= p->max_item) return -E2BIG;
    p->buf[p->len++] = c;
    return 0;
}

/* The captured value is complete: the metadata is kept, an item handed on. */
static int captured(ListParser *p)
{
    cJSON *v = cJSON_ParseWithLength(p->buf, p->len);
    int meta = p->capture_meta;
    size_t n = p->len;
    p->len = 0;
    p->capture = p->capture_meta = 0;
    if (!v && meta) return -EBADMSG;
    if (!v) {
        /* The brackets balance (structural checked them), so it is the depth, or bytes
         * that are not JSON. */
        char why[64] = "not valid JSON";
        if (jsonx_text_depth(p->buf, n) > CJSON_NESTING_LIMIT)
            snprintf(why, sizeof why, "nested deeper than %d levels", CJSON_NESTING_LIMIT);
        p->bad_items++;
        return p->skip ? p->skip(p->ctx, p->buf, n, why) : 0;
    }
    if (meta) {
        cJSON_Delete(p->meta);
        p->meta = v;
        return 0;
    }
    p->items++;
    return p->fn(p->ctx, v);
}

/* One byte outside any string. Returns 0 or -errno. */
static int structural(ListParser *p, char c, int *want_item)
{
    if (jsonx_is_space(c)) return 0;
    if (p->done) return -EBADMSG;
    if (p->depth == 0 && c != '{') return -EBADMSG;
    /* An element of "items" starts: objects are captured, anything else skipped. */
    if (*want_item && c != ']') {
        *want_item = 0;
        if (c != '{') p->bad_items++;
    }
    switch (c) {
    case '{':
    case '[':
        if (p->depth == 0) {
            p->want_key = 1;
        } else if (p->depth == 1 && !p->want_key) {
            if (c == '[' && strcmp(p->key, "items") == 0) {
                p->in_items = 1;
                *want_item = 1;
            } else if (c == '{' && strcmp(p->key, "metadata") == 0) {
                p->capture = 1;
                p->capture_meta = 1;
            }
        } else if (p->depth == 2 && p->in_items && c == '{' && !p->capture) {
            p->capture = 2;
        }
        p->depth++;
        return 0;
    case '}':
    case ']':
        if (--p->depth < 0) return -EBADMSG;
        if (p->depth == 1 && p->in_items && c == ']') p->in_items = 0;
        if (p->depth == 0) p->done = 1;
        return 0;
    case ':':
        if (p->depth == 1) p->want_key = 0;
        return 0;
    case ',':
        if (p->depth == 1) p->want_key = 1;
        if (p->depth == 2 && p->in_items) *want_item = 1;
        return 0;
    default:
        return 0;
    }
}

int listparse_feed(ListParser *p, const char *data, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        char c = data[i];
        int rc;
        if (p->in_str) {
            if (p->capture && (rc = push(p, c))) return rc;
            if (p->esc) {
                p->esc = 0;
            } else if (c == '\\') {
                p->esc = 1;
            } else if (c == '"') {
                p->in_str = 0;
            } else if (p->depth == 1 && p->want_key) {
                if (p->keylen + 1 < sizeof p->key) {
                    p->key[p->keylen++] = c;
                    p->key[p->keylen] = 0;
                } else {
                    p->key[0] = 0; /* too long to be one we want */
                }
            }
            continue;
        }
        if (c == '"') {
            if (p->done || p->depth == 0) return -EBADMSG;
            if (p->want_item) {
                p->want_item = 0;
                p->bad_items++;
            }
            p->in_str = 1;
            if (p->depth == 1 && p->want_key) p->keylen = 0, p->key[0] = 0;
            if (p->capture && (rc = push(p, c))) return rc;
            continue;
        }
        int was = p->capture;
        if ((rc = structural(p, c, &p->want_item))) return rc;
        if ((p->capture || was) && (rc = push(p, c))) return rc;
        if (p->capture && p->depth == p->capture && (c == '}' || c == ']') && (rc = captured(p)))
            return rc;
    }
    return 0;
}
