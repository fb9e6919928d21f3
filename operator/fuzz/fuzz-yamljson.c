/* libFuzzer target: YAML to cJSON (yamljson_parse); what parses must print as JSON
 * that cJSON reads back. */
#include "yamljson.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    cJSON *root = NULL;
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
    return 0;
}
