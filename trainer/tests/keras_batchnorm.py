#!/usr/bin/env python3
"""Keras's side of test-keras-batchnorm.sh: a model with BatchNormalization built in real
Keras, a batch to train on, and Keras's training-mode loss on it.

  keras_batchnorm.py (KERAS OUT_DIR)...

KERAS is keras3 (Keras 3) or tfkeras (tf-keras 2.x); one process builds both, since
TensorFlow's import costs seconds of CPU. The model, on Fashion-MNIST's
28x28x1 inputs: Conv2D(8, 3, no bias) -> BatchNormalization -> ReLU -> MaxPooling2D(2)
-> Conv2D(8, 3) -> BatchNormalization(center=False, momentum=0.9) -> ReLU ->
GlobalAveragePooling2D -> Dense(16) -> BatchNormalization(scale=False, momentum=0.8,
epsilon=0.01) -> Dense(10), trained one epoch of Adam on 64 random images (so that
gamma, beta and the moving statistics are none of their initial values), is saved as
OUT_DIR/KERAS.keras, its model.to_json() as OUT_DIR/KERAS.json. 32 other random images
(uint8, N x H x W) and labels are written as OUT_DIR/batch.npz (x_train/y_train). The
lines printed for each: "KERAS loss: L", sparse categorical cross-entropy from logits of
the saved model on those images (pixels / 255, the trainer's default) in training mode:
with the batch's own statistics, as the trainer's first step on them computes it; then
"KERAS inference loss: L", the same with the moving statistics (training=False), which
the first step's loss must not be."""
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
    rng = np.random.default_rng(21 if which == "keras3" else 22)
    x = rng.integers(0, 256, (96, 28, 28), dtype=np.uint8)
    y = rng.integers(0, 10, 96).astype(np.int32)
    keras.utils.set_random_seed(8 if which == "keras3" else 9)
    L = keras.layers
    model = keras.Sequential([
        keras.Input(shape=(28, 28, 1)),
        L.Conv2D(8, 3, use_bias=False),
        L.BatchNormalization(),
        L.ReLU(),
        L.MaxPooling2D(2),
        L.Conv2D(8, 3),
        L.BatchNormalization(center=False, momentum=0.9),
        L.ReLU(),
        L.GlobalAveragePooling2D(),
        L.Dense(16),
        L.BatchNormalization(scale=False, momentum=0.8, epsilon=0.01),
        L.Dense(10),
    ])
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    model.compile(optimizer=keras.optimizers.Adam(1e-2), loss=loss)
    xs = x.astype(np.float32).reshape(-1, 28, 28, 1) / 255.0
    model.fit(xs[:64], y[:64], batch_size=16, epochs=1, shuffle=False, verbose=0)
    model.save(os.path.join(out, which + ".keras"))
    with open(os.path.join(out, which + ".json"), "w") as f:
        f.write(model.to_json())
    np.savez(os.path.join(out, "batch.npz"), x_train=x[64:], y_train=y[64:].astype(np.uint8))
    first = float(np.asarray(loss(y[64:], model(xs[64:], training=True))))
    infer = float(np.asarray(loss(y[64:], model(xs[64:], training=False))))
    print("%s loss: %.9g" % (which, first), flush=True)
    print("%s inference loss: %.9g" % (which, infer), flush=True)


build_each(build, sys.argv[1:])
