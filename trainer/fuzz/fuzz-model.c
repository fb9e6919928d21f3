/* libFuzzer target: the model spec (model_create_from_text), JSON or YAML. A model that
 * builds must be consistent: its layers chain, its arenas hold every slice. */
#include "model.h"
#include "model_invariants.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    memcpy(text, data, size);
    text[size] = '\0';
    Model *m = NULL;
    char err[512] = "";
    if (model_create_from_text(&m, text, "fuzz", 1, err, sizeof err) == 0) {
        if (m->num_layers < 1 || m->num_classes < 2 || !m->signature) abort();
        fuzz_check_model_layers(m);
        model_free(m);
    } else if (!err[0]) {
        abort();
    }
    free(text);
    return 0;
}
