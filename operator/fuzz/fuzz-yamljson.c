/* libFuzzer target: YAML to cJSON (yamljson_parse, yamljson_parse_manifests); what parses
 * must print as JSON that cJSON reads back, and each manifest must be written out as YAML
 * by yamljson_emit that reads back equal. */
#include "yamljson.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    cJSON *root = NULL, *docs = NULL, *doc;
    char err[256] = "";
    if (yamljson_parse((const char *)data, size, &root, err, sizeof err) == 0) {
        char *s = cJSON_PrintUnformatted(root);
        if (!s) abort();
        cJSON *back = cJSON_Parse(s);
        if (!back) abort();
        cJSON_Delete(back);
        free(s);
        cJSON_Delete(root);
    } else if (root || !err[0]) {
        abort();
    }
    err[0] = 0;
    if (yamljson_parse_manifests((const char *)data, size, &docs, err, sizeof err) != 0) {
        if (docs || !err[0]) abort();
        return 0;
    }
    cJSON_ArrayForEach(doc, docs)
    {
        char *y = yamljson_emit(doc, err, sizeof err);
        cJSON *again = NULL;
        /* a tree nested beyond the reader's depth is refused by the writer too */
        if (!y) continue;
        if (yamljson_parse_manifests(y, strlen(y), &again, err, sizeof err) != 0 ||
            !cJSON_Compare(cJSON_GetArrayItem(again, 0), doc, 1))
            abort();
        cJSON_Delete(again);
        free(y);
    }
    cJSON_Delete(docs);
    return 0;
}
