/* keras_import — Keras's weights into a model the trainer built from the same layers:
 * the `.weights.h5` of Keras 3's (and tf-keras's) model.save_weights, the legacy `.h5`
 * of tf-keras's save_weights or model.save (HDF5, through libhdf5), and the `.keras`
 * archive of model.save (a zip, through libzip: its config.json is the model,
 * keras_json.h, and its model.weights.h5 the weights).
 *
 * A `.weights.h5` holds layers/<group>/vars/<i> as keras_export.h writes it; each layer
 * of the model with weights takes vars/0 (kernel) and vars/1 (bias) of its group
 * (model_layer_keras_group), whatever the layer is called, as Keras 3 matches them.
 * Groups of layers without weights (a Functional model's input_layer) are passed
 * over; optimizer state is not read (training starts a fresh optimizer). A legacy `.h5`
 * (the root's or model_weights' attribute layer_names, each layer's weight_names) is
 * matched as tf-keras's load_weights does: the layers with weights, in order.
 *
 * Strict: a layer with weights whose variables are missing, of another shape or not
 * floating point, a layer's weights the model does not have, or a file that is not
 * HDF5 (a truncated one) is refused with one line naming the file, the variable's path
 * in it and the layer (index, name, class) with the shape it expected. Nothing is
 * written to the parameters unless every variable was read. */
#ifndef KT_KERAS_IMPORT_H
#define KT_KERAS_IMPORT_H

#include <stddef.h>

#include "model.h"

/* Reads the weights file at path (a .weights.h5, a legacy .h5, or the model.weights.h5
 * of a .keras archive, told apart by content) into params (m->num_params floats, the
 * arena's layout). Returns 0, or -EINVAL with one line in err naming path, and params
 * untouched. */
int keras_import_weights(const Model *m, float *params, const char *path, char *err, size_t errlen);

/* The same from an HDF5 file image of len bytes in memory (a .keras archive's member),
 * named `what` in errors. */
int keras_import_weights_image(const Model *m, float *params, const void *buf, size_t len,
                               const char *what, char *err, size_t errlen);

/* 1 when the file at path begins as a zip archive does (a .keras), else 0. */
int keras_import_is_archive(const char *path);

/* The members of the .keras archive at path: *config (config.json, NUL-terminated) and
 * *weights (model.weights.h5, *len bytes), both new buffers the caller frees. Returns 0,
 * or -EINVAL with one line in err naming path (not a zip, a truncated or damaged one,
 * a member missing or too large). */
int keras_import_archive(const char *path, char **config, void **weights, size_t *len, char *err,
                         size_t errlen);

#endif
