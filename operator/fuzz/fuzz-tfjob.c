/* libFuzzer target: convert-tfjob over a YAML stream (tfjob_convert_stream). A conversion
 * either fails with a message and no output, or writes TrainingJobs that read back as
 * YAML manifests, one per document converted, each a TrainingJob. */
#include "tfjob.h"
#include "yamljson.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *yaml = NULL, err[1024] = "";
    cJSON *warnings = cJSON_CreateArray(), *docs = NULL, *doc;
    if (!warnings) return 0;
    int rc =
        tfjob_convert_stream((const char *)data, size, "fuzz", &yaml, warnings, err, sizeof err);
    if (rc != 0) {
        if (yaml || !err[0]) abort();
        cJSON_Delete(warnings);
        return 0;
    }
    if (!yaml || yamljson_parse_manifests(yaml, strlen(yaml), &docs, err, sizeof err) != 0 ||
        !docs->child)
        abort();
    cJSON_ArrayForEach(doc, docs)
    {
        const cJSON *kind = cJSON_GetObjectItemCaseSensitive(doc, "kind");
        if (!cJSON_IsString(kind) || strcmp(kind->valuestring, "TrainingJob") != 0) abort();
    }
    cJSON_Delete(docs);
    cJSON_Delete(warnings);
    free(yaml);
    return 0;
}
