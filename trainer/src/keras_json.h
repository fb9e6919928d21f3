/* keras_json — the model config Keras writes (model.to_json(); later also a .keras
 * archive's config.json), Keras 3 and tf-keras 2.x, read into kubetrain's own model spec
 * (model.h: {"input_shape": [...], "layers": [{"type": ...}, ...]}), which model.c then
 * builds as any other spec.
 *
 * Strict: a layer class, a field or a field value the trainer does not implement as
 * Keras defines it is refused, never ignored, with one line naming the layer's index,
 * name and class and the field, and what is supported (docs/design.md, "Models and
 * data"). The spec's layers keep the Keras layers' indices and names, so that what
 * model.c refuses later (shapes that do not chain) names the same layer. */
#ifndef KT_KERAS_JSON_H
#define KT_KERAS_JSON_H

#include <cjson/cJSON.h>
#include <stddef.h>

/* 1 when root is a Keras model config: an object with a string class_name at the top
 * (kubetrain's spec has none); keras_json_to_spec then requires its config. */
int keras_json_is_model(const cJSON *root);

/* The kubetrain spec of the Keras model config root (keras_json_is_model), a new tree
 * the caller frees with cJSON_Delete; NULL with one line in err naming `what` (the
 * file), the layer and the field when the model is not one the trainer can train. */
cJSON *keras_json_to_spec(const cJSON *root, const char *what, char *err, size_t errlen);

#endif
