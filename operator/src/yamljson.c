/* yamljson — YAML to cJSON through libyaml's document loader, and back through its
 * emitter. */
#include "yamljson.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

/* The loader makes an alias a second reference to the anchored node, so the tree copies
 * that node once per alias, and a few lines of aliases of aliases ("billion laughs")
 * stand for billions of nodes. Aliases stay allowed — PyYAML's yaml.dump writes &id001
 * anchors wherever it met one object twice, and kubectl reads them — but what their
 * copies add is bounded by the document's own size (every node once) or ALIAS_SLACK,
 * whichever is larger. Sizes are in bytes, roughly what the tree holds: a cJSON item
 * per node and each scalar's text. */
#define NODE_COST 64
#define ALIAS_SLACK ((size_t)1 << 20)
#define MAX_DEPTH 64

typedef struct {
    yaml_document_t *doc;
    unsigned char *seen;       /* [node index]: converted once already */
    size_t used, limit;        /* cost so far and the bound */
    const yaml_node_t *repeat; /* the outermost node being copied for an alias, or NULL */
    int nomem;
    int typed; /* plain scalars typed as kubectl types them (yamljson_parse_manifests) */
    char *err;
    size_t errlen;
} Conv;

static size_t node_cost(const yaml_node_t *n)
{
    return NODE_COST + (n->type == YAML_SCALAR_NODE ? n->data.scalar.length + 1 : 0);
}

/* Counts node n (a value or a key) against the bound; -1 with the reason in err when
 * it is spent. */
static int charge(Conv *cv, yaml_node_t *n, int depth)
{
    if (depth > MAX_DEPTH) {
        snprintf(cv->err, cv->errlen,
                 "line %zu: nested deeper than %d levels (or an alias inside the node it names)",
                 n->start_mark.line + 1, MAX_DEPTH);
        return -1;
    }
    cv->used += node_cost(n);
    if (cv->used <= cv->limit) return 0;
    const yaml_node_t *a = cv->repeat ? cv->repeat : n;
    snprintf(cv->err, cv->errlen,
             "line %zu: aliases of the node anchored there add more than the document's own "
             "size and more than %zu MiB (a \"billion laughs\"?); write the repeated parts out "
             "instead",
             a->start_mark.line + 1, ALIAS_SLACK >> 20);
    return -1;
}

/* Whether s is one of the NULL-terminated words. */
static int one_of(const char *s, const char *const *words)
{
    for (size_t i = 0; words[i]; i++)
        if (strcmp(s, words[i]) == 0) return 1;
    return 0;
}

/* A plain scalar as kubectl's YAML reader (YAML 1.1 resolution) reads it: null, a
 * boolean, a number, or NULL for a string. */
static cJSON *resolve_plain(const char *v)
{
    static const char *const nulls[] = {"", "~", "null", "Null", "NULL", NULL};
    static const char *const trues[] = {"true", "True", "TRUE", "yes", "Yes", "YES",
                                        "on",   "On",   "ON",   "y",   "Y",   NULL};
    static const char *const falses[] = {"false", "False", "FALSE", "no", "No", "NO",
                                         "off",   "Off",   "OFF",   "n",  "N",  NULL};
    if (one_of(v, nulls)) return cJSON_CreateNull();
    if (one_of(v, trues)) return cJSON_CreateTrue();
    if (one_of(v, falses)) return cJSON_CreateFalse();
    const char *p = v + (*v == '-' || *v == '+');
    if (!isdigit((unsigned char)*p) && !(*p == '.' && isdigit((unsigned char)p[1]))) return NULL;
    char *end;
    errno = 0;
    long long i = strtoll(v, &end, 0);
    if (!*end && !errno) return cJSON_CreateNumber((double)i);
    /* [-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)? and nothing else */
    size_t digits = strspn(p, "0123456789");
    p += digits;
    if (*p == '.') {
        size_t frac = strspn(p + 1, "0123456789");
        if (!digits && !frac) return NULL;
        p += 1 + frac;
    }
    if (*p == 'e' || *p == 'E') {
        p += 1 + (p[1] == '-' || p[1] == '+');
        size_t exp = strspn(p, "0123456789");
        if (!exp) return NULL;
        p += exp;
    }
    if (*p) return NULL;
    double d = strtod(v, &end);
    return *end || !isfinite(d) ? NULL : cJSON_CreateNumber(d);
}

/* Converts node n; NULL with the reason in cv->err. */
static cJSON *convert(Conv *cv, yaml_node_t *n, int depth)
{
    if (!n) {
        snprintf(cv->err, cv->errlen, "a node libyaml lost");
        return NULL;
    }
    if (charge(cv, n, depth)) return NULL;
    size_t i = (size_t)(n - cv->doc->nodes.start);
    const yaml_node_t *outer = cv->repeat;
    if (cv->seen[i] && !outer) cv->repeat = n;
    cv->seen[i] = 1;
    cJSON *out = NULL;
    if (n->type == YAML_SCALAR_NODE) {
        const char *v = (const char *)n->data.scalar.value;
        int plain = n->data.scalar.style == YAML_PLAIN_SCALAR_STYLE;
        if (plain && cv->typed)
            out = resolve_plain(v); /* NULL: a string */
        else if (plain && strcmp(v, "true") == 0)
            out = cJSON_CreateTrue();
        else if (plain && strcmp(v, "false") == 0)
            out = cJSON_CreateFalse();
        if (!out) out = cJSON_CreateString(v);
        if (!out) goto nomem;
    } else if (n->type == YAML_SEQUENCE_NODE) {
        if (!(out = cJSON_CreateArray())) goto nomem;
        for (yaml_node_item_t *it = n->data.sequence.items.start; it < n->data.sequence.items.top;
             it++) {
            cJSON *v = convert(cv, yaml_document_get_node(cv->doc, *it), depth + 1);
            if (!v) goto err;
            if (!cJSON_AddItemToArray(out, v)) {
                cJSON_Delete(v);
                goto nomem;
            }
        }
    } else if (n->type == YAML_MAPPING_NODE) {
        if (!(out = cJSON_CreateObject())) goto nomem;
        for (yaml_node_pair_t *p = n->data.mapping.pairs.start; p < n->data.mapping.pairs.top;
             p++) {
            yaml_node_t *k = yaml_document_get_node(cv->doc, p->key);
            if (!k || k->type != YAML_SCALAR_NODE) continue; /* only string keys matter here */
            if (charge(cv, k, depth + 1)) goto err;
            cJSON *v = convert(cv, yaml_document_get_node(cv->doc, p->value), depth + 1);
            const char *key = (const char *)k->data.scalar.value;
            if (!v) goto err;
            cJSON_DeleteItemFromObjectCaseSensitive(out, key);
            if (!cJSON_AddItemToObject(out, key, v)) {
                cJSON_Delete(v);
                goto nomem;
            }
        }
    } else {
        snprintf(cv->err, cv->errlen, "line %zu: an empty node", n->start_mark.line + 1);
        goto err;
    }
    cv->repeat = outer;
    return out;
nomem:
    snprintf(cv->err, cv->errlen, "out of memory");
    cv->nomem = 1;
err:
    cv->repeat = outer;
    cJSON_Delete(out);
    return NULL;
}

/* The tree of a loaded document into *out (an empty document: an empty object, or NULL
 * with skip_empty). Returns 0, -EINVAL with the reason in err, or -ENOMEM. */
static int document_tree(yaml_document_t *doc, int typed, int skip_empty, cJSON **out, char *err,
                         size_t errlen)
{
    yaml_node_t *root = yaml_document_get_root_node(doc);
    *out = NULL;
    if (!root ||
        (skip_empty && root->type == YAML_SCALAR_NODE &&
         root->data.scalar.style == YAML_PLAIN_SCALAR_STYLE && root->data.scalar.length == 0)) {
        if (skip_empty) return 0;
        *out = cJSON_CreateObject();
        return *out ? 0 : -ENOMEM;
    }
    size_t nodes = (size_t)(doc->nodes.top - doc->nodes.start), own = 0;
    for (yaml_node_t *n = doc->nodes.start; n < doc->nodes.top; n++)
        own += node_cost(n);
    Conv cv = {.doc = doc,
               .seen = calloc(nodes, 1),
               .typed = typed,
               .err = err,
               .errlen = errlen,
               .limit = own + (own > ALIAS_SLACK ? own : ALIAS_SLACK)};
    int rc = 0;
    if (!cv.seen)
        rc = -ENOMEM;
    else if (!(*out = convert(&cv, root, 0)))
        rc = cv.nomem ? -ENOMEM : -EINVAL;
    free(cv.seen);
    return rc;
}

/* Reads the events of the first document (every document with `all`) and refuses a node
 * nested deeper than MAX_DEPTH as soon as the parser reaches it, before the loader builds
 * the nodes: libyaml takes time quadratic in the depth to load "[[[[..." (a 100 KB
 * document took 12.8 s before the converter's depth check refused it). A node's depth is
 * what convert gives it (the root 0, a mapping's keys and values one below it). Returns 0,
 * or -EINVAL with "line L: problem" in err ("document N, line L: problem" with `all`);
 * syntax errors are left for the loader to report. */
static int depth_check(const char *text, size_t len, int all, char *err, size_t errlen)
{
    yaml_parser_t parser;
    if (!yaml_parser_initialize(&parser)) {
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
    int open = 0, doc = 0, rc = 0;
    for (;;) {
        yaml_event_t ev;
        if (!yaml_parser_parse(&parser, &ev)) break;
        yaml_event_type_t t = ev.type;
        size_t line = ev.start_mark.line + 1;
        /* numbered as yamljson_parse_manifests numbers them: an empty one is not counted */
        int empty = t == YAML_SCALAR_EVENT && ev.data.scalar.length == 0 &&
                    ev.data.scalar.style == YAML_PLAIN_SCALAR_STYLE;
        yaml_event_delete(&ev);
        if (t == YAML_STREAM_END_EVENT || (t == YAML_DOCUMENT_END_EVENT && !all)) break;
        if (t == YAML_SEQUENCE_END_EVENT || t == YAML_MAPPING_END_EVENT) open--;
        if (t != YAML_SCALAR_EVENT && t != YAML_ALIAS_EVENT && t != YAML_SEQUENCE_START_EVENT &&
            t != YAML_MAPPING_START_EVENT)
            continue;
        if (open == 0 && !empty) doc++;
        if (open > MAX_DEPTH) {
            char where[32] = "";
            if (all) snprintf(where, sizeof where, "document %d, ", doc);
            snprintf(err, errlen, "%sline %zu: nested deeper than %d levels", where, line,
                     MAX_DEPTH);
            rc = -EINVAL;
            break;
        }
        if (t == YAML_SEQUENCE_START_EVENT || t == YAML_MAPPING_START_EVENT) open++;
    }
    yaml_parser_delete(&parser);
    return rc;
}

int yamljson_parse(const char *text, size_t len, cJSON **out, char *err, size_t errlen)
{
    yaml_parser_t parser;
    yaml_document_t doc;
    *out = NULL;
    int rc = depth_check(text, len, 0, err, errlen);
    if (rc) return rc;
    if (!yaml_parser_initialize(&parser)) {
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
    if (!yaml_parser_load(&parser, &doc)) {
        snprintf(err, errlen, "line %zu: %s", parser.problem_mark.line + 1,
                 parser.problem ? parser.problem : "invalid YAML");
        yaml_parser_delete(&parser);
        return -EINVAL;
    }
    rc = document_tree(&doc, 0, 0, out, err, errlen);
    if (rc == -ENOMEM) snprintf(err, errlen, "out of memory");
    yaml_document_delete(&doc);
    yaml_parser_delete(&parser);
    return rc;
}

int yamljson_parse_manifests(const char *text, size_t len, cJSON **docs, char *err, size_t errlen)
{
    yaml_parser_t parser;
    *docs = NULL;
    int rc = depth_check(text, len, 1, err, errlen);
    if (rc) return rc;
    if (!yaml_parser_initialize(&parser)) {
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
    cJSON *all = cJSON_CreateArray();
    rc = all ? 0 : -ENOMEM;
    char why[512];
    for (int n = 1; rc == 0; n++) {
        yaml_document_t doc;
        if (!yaml_parser_load(&parser, &doc)) {
            snprintf(err, errlen, "document %d, line %zu: %s", n, parser.problem_mark.line + 1,
                     parser.problem ? parser.problem : "invalid YAML");
            rc = -EINVAL;
            break;
        }
        if (!yaml_document_get_root_node(&doc)) { /* the end of the stream */
            yaml_document_delete(&doc);
            break;
        }
        size_t line = doc.start_mark.line + 1;
        cJSON *tree = NULL;
        rc = document_tree(&doc, 1, 1, &tree, why, sizeof why);
        yaml_document_delete(&doc);
        if (rc == -EINVAL) {
            snprintf(err, errlen, "document %d (from line %zu): %s", n, line, why);
        } else if (rc == 0 && tree && !cJSON_AddItemToArray(all, tree)) {
            cJSON_Delete(tree);
            rc = -ENOMEM;
        } else if (rc == 0 && !tree) {
            n--; /* an empty document is not counted, as kubectl does not count it */
        }
    }
    if (rc == -ENOMEM) snprintf(err, errlen, "out of memory");
    yaml_parser_delete(&parser);
    if (rc)
        cJSON_Delete(all);
    else
        *docs = all;
    return rc;
}

/* ---- emitting --------------------------------------------------------------------- */

/* Whether the string s, written plain, would be read back as something else (a number,
 * a boolean, null, a date) by yamljson_parse_manifests or a YAML 1.1 reader. */
static int needs_quotes(const char *s)
{
    /* What starts with a digit may be a number, a date or a time in some reader unless a
     * letter none of those use shows otherwise (500m, 2Gi). */
    if (isdigit((unsigned char)*s)) return !s[strspn(s, "0123456789+-._: abcdefABCDEFxXoOtTzZ")];
    if (!*s || *s == '.') return 1;
    if ((*s == '-' || *s == '+') && (isdigit((unsigned char)s[1]) || s[1] == '.')) return 1;
    cJSON *v = resolve_plain(s);
    cJSON_Delete(v);
    return v != NULL;
}

static int emit_scalar(yaml_emitter_t *em, const char *s, yaml_scalar_style_t style)
{
    yaml_event_t ev;
    return yaml_scalar_event_initialize(&ev, NULL, NULL, (const yaml_char_t *)s, (int)strlen(s), 1,
                                        1, style) &&
           yaml_emitter_emit(em, &ev);
}

static int emit_string(yaml_emitter_t *em, const char *s)
{
    yaml_scalar_style_t style = YAML_ANY_SCALAR_STYLE;
    if (needs_quotes(s))
        style = YAML_DOUBLE_QUOTED_SCALAR_STYLE;
    else if (strchr(s, '\n'))
        style = YAML_LITERAL_SCALAR_STYLE;
    return emit_scalar(em, s, style);
}

/* Whether array a is short scalars only, written [a, b] on its key's line. */
static int flow_array(const cJSON *a)
{
    size_t width = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, a)
    {
        if (cJSON_IsArray(it) || cJSON_IsObject(it)) return 0;
        if (cJSON_IsString(it) && strchr(it->valuestring, '\n')) return 0;
        width += (cJSON_IsString(it) ? strlen(it->valuestring) : 8) + 4;
    }
    return width <= 64;
}

static int emit_node(yaml_emitter_t *em, const cJSON *v, int depth)
{
    yaml_event_t ev;
    char num[64];
    if (depth > MAX_DEPTH) return 0;
    if (cJSON_IsString(v)) return emit_string(em, v->valuestring);
    if (cJSON_IsBool(v))
        return emit_scalar(em, cJSON_IsTrue(v) ? "true" : "false", YAML_PLAIN_SCALAR_STYLE);
    if (cJSON_IsNull(v)) return emit_scalar(em, "null", YAML_PLAIN_SCALAR_STYLE);
    if (cJSON_IsNumber(v)) {
        double d = v->valuedouble;
        if (d == floor(d) && fabs(d) < 9007199254740992.0)
            snprintf(num, sizeof num, "%.0f", d);
        else
            snprintf(num, sizeof num, "%.17g", d);
        return emit_scalar(em, num, YAML_PLAIN_SCALAR_STYLE);
    }
    const cJSON *it;
    if (cJSON_IsArray(v)) {
        yaml_sequence_style_t style =
            flow_array(v) ? YAML_FLOW_SEQUENCE_STYLE : YAML_BLOCK_SEQUENCE_STYLE;
        if (!yaml_sequence_start_event_initialize(&ev, NULL, NULL, 1, style) ||
            !yaml_emitter_emit(em, &ev))
            return 0;
        cJSON_ArrayForEach(it, v)
        {
            if (!emit_node(em, it, depth + 1)) return 0;
        }
        return yaml_sequence_end_event_initialize(&ev) && yaml_emitter_emit(em, &ev);
    }
    if (!cJSON_IsObject(v)) return 0;
    if (!yaml_mapping_start_event_initialize(&ev, NULL, NULL, 1, YAML_BLOCK_MAPPING_STYLE) ||
        !yaml_emitter_emit(em, &ev))
        return 0;
    cJSON_ArrayForEach(it, v)
    {
        if (!it->string || !emit_string(em, it->string) || !emit_node(em, it, depth + 1)) return 0;
    }
    return yaml_mapping_end_event_initialize(&ev) && yaml_emitter_emit(em, &ev);
}

char *yamljson_emit(const cJSON *doc, char *err, size_t errlen)
{
    yaml_emitter_t em;
    yaml_event_t ev;
    char *buf = NULL;
    size_t size = 0;
    FILE *f = open_memstream(&buf, &size);
    if (!f || !yaml_emitter_initialize(&em)) {
        snprintf(err, errlen, "out of memory");
        if (f) fclose(f);
        free(buf);
        return NULL;
    }
    yaml_emitter_set_output_file(&em, f);
    yaml_emitter_set_unicode(&em, 1);
    yaml_emitter_set_width(&em, -1);
    int ok = yaml_stream_start_event_initialize(&ev, YAML_UTF8_ENCODING) &&
             yaml_emitter_emit(&em, &ev) &&
             yaml_document_start_event_initialize(&ev, NULL, NULL, NULL, 1) &&
             yaml_emitter_emit(&em, &ev) && emit_node(&em, doc, 0) &&
             yaml_document_end_event_initialize(&ev, 1) && yaml_emitter_emit(&em, &ev) &&
             yaml_stream_end_event_initialize(&ev) && yaml_emitter_emit(&em, &ev) &&
             yaml_emitter_flush(&em);
    if (!ok)
        snprintf(err, errlen, "cannot write YAML: %s",
                 em.problem ? em.problem : "nested too deeply or not JSON");
    yaml_emitter_delete(&em);
    if (fclose(f) != 0 && ok) {
        snprintf(err, errlen, "out of memory");
        ok = 0;
    }
    if (!ok) {
        free(buf);
        return NULL;
    }
    return buf;
}
