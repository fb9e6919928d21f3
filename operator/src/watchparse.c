/* watchparse — newline-delimited JSON watch events. */
#include "watchparse.h"

#include "jsonx.h"
#include "olog.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void watchparse_init(WatchParser *p, WatchEventFn fn, void *ctx)
{
    memset(p, 0, sizeof *p);
    p->fn = fn;
    p->ctx = ctx;
    p->max_line = 64u << 20;
}

void watchparse_free(WatchParser *p)
{
    free(p->buf);
    p->buf = NULL;
    p->len = p->cap = 0;
}

void watchparse_reset(WatchParser *p)
{
    p->len = 0;
}

static int emit_line(WatchParser *p, const char *line, size_t n)
{
    while (n && (line[n - 1] == '\r' || line[n - 1] == ' '))
        n--;
    if (n == 0) return 0;
    cJSON *ev = cJSON_ParseWithLength(line, n);
    const char *type = jsonx_str(ev, "type");
    cJSON *obj = cJSON_GetObjectItemCaseSensitive(ev, "object");
    if (!cJSON_IsObject(obj)) obj = NULL;
    int rc = 0;
    if (!ev) {
        char why[64] = "not valid JSON";
        if (jsonx_text_depth(line, n) > CJSON_NESTING_LIMIT)
            snprintf(why, sizeof why, "nested deeper than %d levels", CJSON_NESTING_LIMIT);
        p->bad_lines++;
        if (p->skip)
            p->skip(p->ctx, line, n, why);
        else
            olog(OLOG_WARN, NULL, "watch: skipping a line of %zu bytes: %s", n, why);
    } else if (!type || !obj) {
        p->bad_lines++;
        olog(OLOG_WARN, NULL, "watch: skipping a line that is not an event object (%zu bytes)", n);
    } else {
        rc = p->fn(p->ctx, type, obj);
    }
    cJSON_Delete(ev);
    return rc;
}

int watchparse_feed(WatchParser *p, const char *data, size_t n)
{
    while (n) {
        const char *nl = memchr(data, '\n', n);
        size_t take = nl ? (size_t)(nl - data) : n;
        if (p->len == 0 && nl) {
            /* The whole line is in this chunk: no copy. */
            int rc = emit_line(p, data, take);
            if (rc) return rc;
        } else {
            if (p->len + take + 1 > p->cap) {
                size_t cap = p->cap ? p->cap : 4096;
                while (cap < p->len + take + 1)
                    cap *= 2;
                char *b = realloc(p->buf, cap);
                if (!b) return -ENOMEM;
                p->buf = b;
                p->cap = cap;
            }
            memcpy(p->buf + p->len, data, take);
            p->len += take;
            if (p->len > p->max_line) {
                olog(OLOG_WARN, NULL, "watch: dropping a line longer than %zu bytes", p->max_line);
                p->bad_lines++;
                p->len = 0;
                /* Skip to the end of this line. */
                if (!nl) return 0;
            } else if (nl) {
                size_t len = p->len;
                p->len = 0;
                int rc = emit_line(p, p->buf, len);
                if (rc) return rc;
            }
        }
        if (!nl) return 0;
        data = nl + 1;
        n -= take + 1;
    }
    return 0;
}
