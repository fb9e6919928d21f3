/* libFuzzer target: the Keras model JSON reader (keras_json_to_spec), then the spec it
 * makes, built as model.c builds any. A refusal says why; a conversion keeps the Keras
 * layers one for one (so that messages name Keras's indices), and a model that builds
 * from it is consistent: its layers chain, its arenas hold every slice. */
#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "keras_json.h"
#include "model.h"
#include "model_invariants.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    memcpy(text, data, size);
    text[size] = '\0';
    cJSON *root = cJSON_Parse(text);
    free(text);
    if (!root || !keras_json_is_model(root)) {
        cJSON_Delete(root);
        return 0;
    }
    char err[512] = "";
    cJSON *spec = keras_json_to_spec(root, "fuzz", err, sizeof err);
    if (!spec) {
        if (!err[0]) abort();
        cJSON_Delete(root);
        return 0;
    }
    const cJSON *keras_layers = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(root, "config"), "layers");
    const cJSON *layers = cJSON_GetObjectItemCaseSensitive(spec, "layers");
    if (cJSON_GetArraySize(layers) != cJSON_GetArraySize(keras_layers)) abort();
    char *printed = cJSON_PrintUnformatted(spec);
    Model *m = NULL;
    if (model_create_from_text(&m, printed, "fuzz", 1, err, sizeof err) == 0) {
        fuzz_check_model_layers(m);
        model_free(m);
    } else if (!err[0]) {
        abort();
    }
    free(printed);
    cJSON_Delete(spec);
    cJSON_Delete(root);
    return 0;
}
