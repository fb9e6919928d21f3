#!/usr/bin/env python3
"""Keras's side of test-keras-finetune.sh: a model built and briefly trained in real
Keras, saved in every form the trainer reads, and Keras's loss on the batch the trainer
will take first.

  keras_finetune.py DATA_DIR (KERAS OUT_DIR)...

KERAS is keras3 (Keras 3) or tfkeras (tf-keras 2.x); one process builds both, since
TensorFlow's import costs seconds of CPU. The model, Conv2D(8, 3, relu) ->
MaxPooling2D(2) -> Flatten -> Dense(32, relu) -> Dense(10) on 28x28x1 (no Dropout, no
regularizer: the training loss is then the plain loss; another seed for each flavour),
trains one epoch of Adam on Fashion-MNIST's first 256 training images (pixels / 255),
then is saved in OUT_DIR as
KERAS.keras (model.save), KERAS-functional.keras (the same layers as a Functional
model), KERAS.weights.h5 (save_weights), KERAS.json (to_json) and, for tf-keras, KERAS.h5
(the legacy save_weights). OUT_DIR/batch.npz holds the next 32
images and labels (uint8, as keras.datasets' npz) under x_train/y_train: the trainer
reads it with --per-worker-batch 32, so its first batch is those 32 examples in its own
order, and the mean loss does not depend on the order. The line printed for each
is "KERAS loss: L", sparse categorical cross-entropy from logits of the saved model on
them."""
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
import numpy as np  # noqa: E402
from idx_read import idx  # noqa: E402
from flavours import build_each  # noqa: E402


def build(which, out, data_dir):
    if which == "keras3":
        import keras
    else:
        import tf_keras as keras
    x = idx(os.path.join(data_dir, "train-images-idx3-ubyte.gz"))[:288]
    y = idx(os.path.join(data_dir, "train-labels-idx1-ubyte.gz"))[:288].astype(np.int32)
    keras.utils.set_random_seed(4 if which == "keras3" else 5)  # two different models
    layers = keras.layers
    model = keras.Sequential([
        keras.Input(shape=(28, 28, 1)),
        layers.Conv2D(8, 3, activation="relu"),
        layers.MaxPooling2D(2),
        layers.Flatten(),
        layers.Dense(32, activation="relu"),
        layers.Dense(10),
    ])
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    model.compile(optimizer=keras.optimizers.Adam(1e-3), loss=loss)
    xs = x.astype(np.float32)[..., None] / 255.0
    model.fit(xs[:256], y[:256], batch_size=32, epochs=1, shuffle=False, verbose=0)
    model.save(os.path.join(out, which + ".keras"))
    # the same layers and weights as a Functional model, whose weights file also holds
    # the InputLayer's (empty) group
    keras.Model(model.inputs, model.outputs).save(os.path.join(out, which + "-functional.keras"))
    model.save_weights(os.path.join(out, which + ".weights.h5"))
    if which == "tfkeras":
        model.save_weights(os.path.join(out, which + ".h5"))
    with open(os.path.join(out, which + ".json"), "w") as f:
        f.write(model.to_json())
    np.savez(os.path.join(out, "batch.npz"), x_train=x[256:], y_train=y[256:].astype(np.uint8),
             x_test=x[256:], y_test=y[256:].astype(np.uint8))
    first = float(np.asarray(loss(y[256:], model(xs[256:], training=False))))
    print("%s loss: %.9g" % (which, first), flush=True)


build_each(lambda which, out: build(which, out, sys.argv[1]), sys.argv[2:])
