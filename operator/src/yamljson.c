/* yamljson — YAML to cJSON through libyaml's document loader. */
#include "yamljson.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <yaml.h>

/* Converts node `n` (depth-limited against alias bombs and cycles). */
static cJSON *convert(yaml_document_t *doc, yaml_node_t *n, int depth)
{
    if (!n || depth > 64) return NULL;
    if (n->type == YAML_SCALAR_NODE) {
        const char *v = (const char *)n->data.scalar.value;
        if (n->data.scalar.style == YAML_PLAIN_SCALAR_STYLE) {
            if (strcmp(v, "true") == 0) return cJSON_CreateTrue();
            if (strcmp(v, "false") == 0) return cJSON_CreateFalse();
        }
        return cJSON_CreateString(v);
    }
    if (n->type == YAML_SEQUENCE_NODE) {
        cJSON *a = cJSON_CreateArray();
        for (yaml_node_item_t *it = n->data.sequence.items.start;
             a && it < n->data.sequence.items.top; it++) {
            cJSON *v = convert(doc, yaml_document_get_node(doc, *it), depth + 1);
            if (!v || !cJSON_AddItemToArray(a, v)) {
                cJSON_Delete(v);
                cJSON_Delete(a);
                return NULL;
            }
        }
        return a;
    }
    if (n->type == YAML_MAPPING_NODE) {
        cJSON *o = cJSON_CreateObject();
        for (yaml_node_pair_t *p = n->data.mapping.pairs.start; o && p < n->data.mapping.pairs.top;
             p++) {
            yaml_node_t *k = yaml_document_get_node(doc, p->key);
            if (!k || k->type != YAML_SCALAR_NODE) continue; /* only string keys matter here */
            cJSON *v = convert(doc, yaml_document_get_node(doc, p->value), depth + 1);
            const char *key = (const char *)k->data.scalar.value;
            if (!v) {
                cJSON_Delete(o);
                return NULL;
            }
            cJSON_DeleteItemFromObjectCaseSensitive(o, key);
            if (!cJSON_AddItemToObject(o, key, v)) {
                cJSON_Delete(v);
                cJSON_Delete(o);
                return NULL;
            }
        }
        return o;
    }
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
    } else {
        *out = convert(&doc, root, 0);
        if (!*out) {
            snprintf(err, errlen, "YAML nested too deeply or out of memory");
            rc = -EINVAL;
        }
    }
    yaml_document_delete(&doc);
    yaml_parser_delete(&parser);
    return rc;
}
