#!/usr/bin/env python3
"""Keras's side of test-keras-syncbn.sh: a model with BatchNormalization(synchronized=True)
built in real Keras, a batch, and Keras's training-mode loss on it.

  keras_syncbn.py (KERAS OUT_DIR)...

KERAS is keras3 (Keras 3) or tfkeras (tf-keras 2.x); one process builds both, since
TensorFlow's import costs seconds of CPU. The model, on Fashion-MNIST's 28x28x1 inputs:
Conv2D(4, 3, no bias) -> BatchNormalization(synchronized) -> ReLU -> MaxPooling2D(2) ->
Flatten -> Dense(16) -> BatchNormalization(synchronized, center=False, momentum=0.9) ->
Dense(10), as Keras initialised it, is saved as OUT_DIR/KERAS.keras, its model.to_json()
as OUT_DIR/KERAS.json. tf-keras's get_config leaves `synchronized` out (its layer takes
the argument, its config does not write it), so its JSON is given the key back, as a user
of tf-keras would have to. 32 random images (uint8, N x H x W) and labels are written as
OUT_DIR/batch.npz (x_train/y_train). Printed for each: "KERAS loss: L", sparse
categorical cross-entropy from logits on the 32 (pixels / 255, the trainer's default) in
training mode, with the 32's own statistics: the global batch's, which a synchronized
layer normalises each worker's share with."""
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
import numpy as np  # noqa: E402
from flavours import build_each  # noqa: E402


def build(which, out):
    if which == "keras3":
        import keras
    else:
        import tf_keras as keras
    rng = np.random.default_rng(31 if which == "keras3" else 32)
    x = rng.integers(0, 256, (32, 28, 28), dtype=np.uint8)
    y = rng.integers(0, 10, 32).astype(np.int32)
    keras.utils.set_random_seed(4 if which == "keras3" else 5)
    L = keras.layers
    model = keras.Sequential([
        keras.Input(shape=(28, 28, 1)),
        L.Conv2D(4, 3, use_bias=False),
        L.BatchNormalization(synchronized=True),
        L.ReLU(),
        L.MaxPooling2D(2),
        L.Flatten(),
        L.Dense(16),
        L.BatchNormalization(synchronized=True, center=False, momentum=0.9),
        L.Dense(10),
    ])
    model.save(os.path.join(out, which + ".keras"))
    config = json.loads(model.to_json())
    for layer in config["config"]["layers"]:
        if layer["class_name"] == "BatchNormalization":
            layer["config"]["synchronized"] = True
    with open(os.path.join(out, which + ".json"), "w") as f:
        json.dump(config, f)
    np.savez(os.path.join(out, "batch.npz"), x_train=x, y_train=y.astype(np.uint8))
    xs = x.astype(np.float32).reshape(-1, 28, 28, 1) / 255.0
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    first = float(np.asarray(loss(y, model(xs, training=True))))
    print("%s loss: %.9g" % (which, first), flush=True)


build_each(build, sys.argv[1:])
