/* yamljson — YAML to cJSON through libyaml's document loader. */
#include "yamljson.h"

#include <errno.h>
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
        if (n->data.scalar.style == YAML_PLAIN_SCALAR_STYLE && strcmp(v, "true") == 0)
            out = cJSON_CreateTrue();
        else if (n->data.scalar.style == YAML_PLAIN_SCALAR_STYLE && strcmp(v, "false") == 0)
            out = cJSON_CreateFalse();
        else
            out = cJSON_CreateString(v);
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

int yamljson_parse(const char *text, size_t len, cJSON **out, char *err, size_t errlen)
{
    yaml_parser_t parser;
    yaml_document_t doc;
    *out = NULL;
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
    yaml_node_t *root = yaml_document_get_root_node(&doc);
    int rc = 0;
    if (!root) {
        *out = cJSON_CreateObject();
        if (!*out) rc = -ENOMEM;
    } else {
        size_t nodes = (size_t)(doc.nodes.top - doc.nodes.start), own = 0;
        for (yaml_node_t *n = doc.nodes.start; n < doc.nodes.top; n++)
            own += node_cost(n);
        Conv cv = {.doc = &doc,
                   .seen = calloc(nodes, 1),
                   .err = err,
                   .errlen = errlen,
                   .limit = own + (own > ALIAS_SLACK ? own : ALIAS_SLACK)};
        if (cv.seen && !(*out = convert(&cv, root, 0))) rc = cv.nomem ? -ENOMEM : -EINVAL;
        if (!cv.seen) rc = -ENOMEM;
        free(cv.seen);
    }
    if (rc == -ENOMEM) snprintf(err, errlen, "out of memory");
    yaml_document_delete(&doc);
    yaml_parser_delete(&parser);
    return rc;
}
