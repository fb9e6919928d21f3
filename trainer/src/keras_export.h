/* keras_export — a trained model as Keras files: the `.weights.h5` that Keras 3's
 * model.save_weights writes (HDF5, through libhdf5) and the `.keras` archive of
 * model.save (a zip, through libzip, of metadata.json, config.json and
 * model.weights.h5), which keras.saving.load_model (Keras 3) and tf-keras's load_model
 * open and model.load_weights takes in both.
 *
 * The weights file holds, as Keras lays it out, layers/<group>/vars/<i> for each layer
 * (a group with no datasets for a layer without weights), where the group is not the
 * layer's name (that is vars' attribute "name") but its class's snake-case stem counted
 * within the model: conv2d, conv2d_1, dense, ... in layer order. Conv2D's kernel (KH,
 * KW, C, F) is 0 and its bias 1, Dense's kernel (in, units) 0 and its bias 1, float32.
 * The trainer keeps them in those layouts already (layers.h), so each is one slice of
 * the parameter arena. config.json is a Sequential model of the trainer's
 * layers under their names (model.h), in the spelling both Keras 3 and tf-keras read:
 * an InputLayer with batch_input_shape and dtypes as strings. */
#ifndef KT_KERAS_EXPORT_H
#define KT_KERAS_EXPORT_H

#include <stddef.h>

#include "model.h"

/* The file kind a path's suffix asks for. */
typedef enum { KERAS_EXPORT_NONE = 0, KERAS_EXPORT_KERAS, KERAS_EXPORT_WEIGHTS } KerasExportKind;

/* KERAS_EXPORT_KERAS for "*.keras", KERAS_EXPORT_WEIGHTS for "*.weights.h5", else
 * KERAS_EXPORT_NONE. */
KerasExportKind keras_export_kind(const char *path);

/* Whether keras_export_write could write path: a known suffix, and a file can be
 * created in its directory, made first as mkdir -p does (tried with a temporary file,
 * removed again; the directory stays). Returns 0, or
 * a negative errno with one line in err saying what is wrong with path. */
int keras_export_check(const char *path, char *err, size_t errlen);

/* The Keras 3 model config (config.json) of m, as text the caller frees. */
char *keras_export_config(const Model *m);

/* The .weights.h5 of m with the parameter arena `params` (m->num_params floats), as an
 * in-memory HDF5 file image: returns 0 and *buf (the caller frees it) of *len bytes, or
 * a negative errno with one line in err. */
int keras_export_weights_image(const Model *m, const float *params, void **buf, size_t *len,
                               char *err, size_t errlen);

/* Writes m with `params` to path, as the suffix says (keras_export_kind), atomically: a
 * temporary file next to it, fsync, rename. Returns 0, or a negative errno with one line
 * in err naming path; a failed write leaves nothing at path that was not there. */
int keras_export_write(const Model *m, const float *params, const char *path, char *err,
                       size_t errlen);

#endif
