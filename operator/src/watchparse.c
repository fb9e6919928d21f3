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
    free(p->cut);
    p->buf = p->cut = NULL;
    p->len = p->cap = p->cut_cap = 0;
}

void watchparse_reset(WatchParser *p)
{
    p->len = 0;
}

/* The bytes [*from, *to) of line s[0..n) that hold the event's object's
 * metadata.managedFields (the member, its array and one comma beside it): returns 1, or
 * 0 when it has none. One pass that skips strings (escapes and all), so the name inside
 * a string (an annotation holding JSON) is never taken for the member, and only a member
 * of the object's "metadata" counts: depth 3, in the event, its object and its metadata
 * (a "managedFields" under spec or status is kept). */
static int find_managed_fields(const char *s, size_t n, size_t *from, size_t *to)
{
    static const char key[] = "\"managedFields\"", md[] = "\"metadata\"";
    size_t str = 0, str_end = 0, cut = 0; /* the last string token, quotes included */
    int depth = 0, in_md = 0, cutting = 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (c == '"') {
            size_t j = i + 1;
            while (j < n && s[j] != '"')
                j += s[j] == '\\' ? 2 : 1;
            if (j >= n) return 0;
            str = i;
            str_end = j + 1;
            i = j;
            if (!cutting && in_md && depth == 3 && str_end - str == sizeof key - 1 &&
                memcmp(s + str, key, sizeof key - 1) == 0) {
                size_t k = str_end;
                while (k < n && jsonx_is_space(s[k]))
                    k++;
                if (k < n && s[k] == ':') {
                    k++;
                    while (k < n && jsonx_is_space(s[k]))
                        k++;
                    if (k < n && s[k] == '[') {
                        cut = str;
                        cutting = 1;
                    }
                }
            }
        } else if (c == '{' || c == '[') {
            if (c == '{' && depth == 2)
                in_md = str_end - str == sizeof md - 1 && memcmp(s + str, md, sizeof md - 1) == 0;
            depth++;
        } else if (c == '}' || c == ']') {
            depth--;
            if (depth == 2) in_md = 0;
            if (cutting && depth == 3) {
                size_t end = i + 1, k = end;
                while (k < n && jsonx_is_space(s[k]))
                    k++;
                if (k < n && s[k] == ',') {
                    *from = cut;
                    *to = k + 1;
                    return 1;
                }
                k = cut;
                while (k > 0 && jsonx_is_space(s[k - 1]))
                    k--;
                *from = k > 0 && s[k - 1] == ',' ? k - 1 : cut;
                *to = end;
                return 1;
            }
        }
    }
    return 0;
}

static int emit_line(WatchParser *p, const char *line, size_t n)
{
    while (n && (line[n - 1] == '\r' || line[n - 1] == ' '))
        n--;
    if (n == 0) return 0;
    /* Every object's managedFields is dropped unread; they are about half of a
     * TrainingJob's text, and parsing the watch's events was an eighth of the
     * operator's CPU under progress writes (perf, bench-progress). Cut from the text. */
    size_t from, to;
    if (find_managed_fields(line, n, &from, &to)) {
        size_t m = n - (to - from);
        if (m > p->cut_cap) {
            char *b = realloc(p->cut, m);
            if (b) {
                p->cut = b;
                p->cut_cap = m;
            }
        }
        if (m <= p->cut_cap) {
            memcpy(p->cut, line, from);
            memcpy(p->cut + from, line + to, n - to);
            line = p->cut;
            n = m;
        }
    }
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
