/* jsonx — typed reads of cJSON trees; see jsonx.h. */
#include "jsonx.h"

#include "olog.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

/* Walks a dotted path; *bad is set when a step exists but is not an object. */
static const cJSON *walk(const cJSON *o, const char *path, int *bad)
{
    const cJSON *cur = o;
    const char *p = path;
    char name[256];
    *bad = 0;
    while (cur) {
        const char *dot = strchr(p, '.');
        size_t n = dot ? (size_t)(dot - p) : strlen(p);
        if (n >= sizeof name) return NULL;
        memcpy(name, p, n);
        name[n] = 0;
        if (!cJSON_IsObject(cur)) {
            *bad = 1;
            return NULL;
        }
        cur = cJSON_GetObjectItemCaseSensitive(cur, name);
        if (!dot) return cur;
        p = dot + 1;
    }
    return NULL;
}

static void wrong_type(const char *path, const char *want)
{
    olog(OLOG_WARN, NULL, "field %s: expected %s, ignoring it", path, want);
}

const cJSON *jsonx_at(const cJSON *o, const char *path)
{
    int bad;
    return walk(o, path, &bad);
}

const cJSON *jsonx_obj(const cJSON *o, const char *path)
{
    int bad;
    const cJSON *v = walk(o, path, &bad);
    if (bad || (v && !cJSON_IsObject(v) && !cJSON_IsNull(v))) wrong_type(path, "an object");
    return cJSON_IsObject(v) ? v : NULL;
}

const cJSON *jsonx_arr(const cJSON *o, const char *path)
{
    int bad;
    const cJSON *v = walk(o, path, &bad);
    if (bad || (v && !cJSON_IsArray(v) && !cJSON_IsNull(v))) wrong_type(path, "an array");
    return cJSON_IsArray(v) ? v : NULL;
}

const char *jsonx_str(const cJSON *o, const char *path)
{
    int bad;
    const cJSON *v = walk(o, path, &bad);
    if (bad || (v && !cJSON_IsString(v) && !cJSON_IsNull(v))) wrong_type(path, "a string");
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

const char *jsonx_key_str(const cJSON *o, const char *key)
{
    if (!cJSON_IsObject(o)) return NULL;
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (v && !cJSON_IsString(v) && !cJSON_IsNull(v)) wrong_type(key, "a string");
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

long long jsonx_int(const cJSON *o, const char *path, long long dflt)
{
    int bad;
    const cJSON *v = walk(o, path, &bad);
    if (!bad && (!v || cJSON_IsNull(v))) return dflt;
    if (bad || !cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) ||
        fabs(v->valuedouble) > 9.0e15) {
        wrong_type(path, "an integer");
        return dflt;
    }
    return (long long)v->valuedouble;
}

double jsonx_num(const cJSON *o, const char *path, double dflt)
{
    int bad;
    const cJSON *v = walk(o, path, &bad);
    if (!bad && (!v || cJSON_IsNull(v))) return dflt;
    if (bad || !cJSON_IsNumber(v)) {
        wrong_type(path, "a number");
        return dflt;
    }
    return v->valuedouble;
}

int jsonx_bool(const cJSON *o, const char *path, int dflt)
{
    int bad;
    const cJSON *v = walk(o, path, &bad);
    if (!bad && (!v || cJSON_IsNull(v))) return dflt;
    if (bad || !cJSON_IsBool(v)) {
        wrong_type(path, "a boolean");
        return dflt;
    }
    return cJSON_IsTrue(v);
}

const char *jsonx_enum(const cJSON *o, const char *path, const char *const *allowed,
                       const char *dflt)
{
    int bad;
    const cJSON *v = walk(o, path, &bad);
    if (!bad && (!v || cJSON_IsNull(v))) return dflt;
    if (bad || !cJSON_IsString(v)) return NULL;
    for (size_t i = 0; allowed[i]; i++)
        if (strcmp(v->valuestring, allowed[i]) == 0) return allowed[i];
    return NULL;
}

cJSON *jsonx_ensure_obj(cJSON *o, const char *path)
{
    cJSON *cur = o;
    const char *p = path;
    char name[256];
    for (;;) {
        const char *dot = strchr(p, '.');
        size_t n = dot ? (size_t)(dot - p) : strlen(p);
        if (n >= sizeof name) return NULL;
        memcpy(name, p, n);
        name[n] = 0;
        cJSON *next = cJSON_GetObjectItemCaseSensitive(cur, name);
        if (!cJSON_IsObject(next)) {
            next = jsonx_set(cur, name, cJSON_CreateObject());
            if (!next) return NULL;
        }
        cur = next;
        if (!dot) return cur;
        p = dot + 1;
    }
}

cJSON *jsonx_set(cJSON *o, const char *name, cJSON *v)
{
    if (!v) return NULL;
    if (!cJSON_IsObject(o)) {
        cJSON_Delete(v);
        return NULL;
    }
    if (cJSON_GetObjectItemCaseSensitive(o, name)) {
        if (!cJSON_ReplaceItemInObjectCaseSensitive(o, name, v)) {
            cJSON_Delete(v);
            return NULL;
        }
        return v;
    }
    if (!cJSON_AddItemToObject(o, name, v)) {
        cJSON_Delete(v);
        return NULL;
    }
    return v;
}

cJSON *jsonx_set_str(cJSON *o, const char *name, const char *s)
{
    return jsonx_set(o, name, cJSON_CreateString(s));
}

cJSON *jsonx_set_num(cJSON *o, const char *name, double v)
{
    return jsonx_set(o, name, cJSON_CreateNumber(v));
}

cJSON *jsonx_set_bool(cJSON *o, const char *name, int v)
{
    return jsonx_set(o, name, cJSON_CreateBool(v));
}

size_t jsonx_text_depth(const char *s, size_t n)
{
    size_t depth = 0, deepest = 0;
    int in_str = 0, esc = 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (in_str) {
            if (esc)
                esc = 0;
            else if (c == '\\')
                esc = 1;
            else if (c == '"')
                in_str = 0;
        } else if (c == '"') {
            in_str = 1;
        } else if (c == '{' || c == '[') {
            if (++depth > deepest) deepest = depth;
        } else if ((c == '}' || c == ']') && depth) {
            depth--;
        }
    }
    return deepest;
}

/* The end of the string whose opening quote is s[i] (the index of its closing quote, or
 * n), and whether it holds an escape. */
static size_t string_end(const char *s, size_t n, size_t i, int *escaped)
{
    *escaped = 0;
    for (i++; i < n && s[i] != '"'; i++)
        if (s[i] == '\\') {
            *escaped = 1;
            i++;
        }
    return i < n ? i : n;
}

int jsonx_text_str(const char *s, size_t n, const char *path, char *out, size_t outlen)
{
    const char *comp[16];
    size_t clen[16], k = 0;
    for (const char *p = path; k < 16; k++) {
        const char *dot = strchr(p, '.');
        comp[k] = p;
        clen[k] = dot ? (size_t)(dot - p) : strlen(p);
        if (!dot) {
            k++;
            break;
        }
        p = dot + 1;
    }
    /* depth: containers open; on_path: how many of the outermost of them were entered
     * through the path's names (the root object counts as one); want: what the value
     * after the name just read is to the path (1 the target, 2 an object on it). */
    size_t depth = 0, on_path = 0;
    int want = 0;
    char prev = 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (c == ' ' || c == '\t' || c == '\n' || c == '\r') continue;
        int w = prev == ':' ? want : 0; /* what the value starting here is to the path */
        if (prev == ':') want = 0;
        if (w == 1) {
            size_t from = i, end = i;
            int escaped = 0;
            if (c == '"') {
                end = string_end(s, n, i, &escaped);
                from = i + 1;
            } else if (c == '-' || (c >= '0' && c <= '9')) {
                while (end < n && !strchr(",}] \t\r\n", s[end]))
                    end++;
            }
            if (end == from || end >= n || escaped) return -ENOENT;
            snprintf(out, outlen, "%.*s", (int)(end - from), s + from);
            return 0;
        }
        if (c == '"') {
            int escaped;
            size_t end = string_end(s, n, i, &escaped);
            if (depth && on_path == depth && depth <= k && (prev == '{' || prev == ',') &&
                end - i - 1 == clen[depth - 1] &&
                memcmp(s + i + 1, comp[depth - 1], clen[depth - 1]) == 0)
                want = depth == k ? 1 : 2;
            i = end;
            prev = '"';
            continue;
        }
        if (c == '{' || c == '[') {
            if (c == '{' && (depth == 0 || w == 2)) on_path++;
            depth++;
        } else if ((c == '}' || c == ']') && depth) {
            if (on_path == depth) on_path--;
            depth--;
        }
        prev = c;
    }
    return -ENOENT;
}

int jsonx_is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}
