#!/usr/bin/env python3
"""Keras's side of test-keras-colour.sh: a colour model built in real Keras, its data in
the forms the trainer reads, and Keras's loss on them.

  keras_colour.py (KERAS OUT_DIR)...

KERAS is keras3 (Keras 3) or tfkeras (tf-keras 2.x); one process builds both, since
TensorFlow's import costs seconds of CPU. The model, on 16x16x3 inputs:
Rescaling(1/255) -> Conv2D(8, 3, relu, same) -> AveragePooling2D(2) -> Conv2D(8, 3,
relu) -> GlobalAveragePooling2D -> Dense(10), trained one epoch of Adam on 64 random
colour images (so that its biases are not zero), is saved as OUT_DIR/KERAS.keras. 32
other random colour images (uint8, N x H x W x C, channels last) and their labels are
written as OUT_DIR/batch.npz (x_train/y_train), as OUT_DIR/reversed.npz (the same
images with their channels in the other order) and as OUT_DIR/batch.tfrecord
(tf.train.Example: `image` the raw bytes, `label` an int64), all in the same order.
The line printed for each is "KERAS loss: L", sparse categorical cross-entropy from
logits of the saved model on the 32 images, whose pixels it takes as 0..255 (the trainer's
--pixel-scale raw)."""
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from flavours import build_each  # noqa: E402


def build(which, out):
    if which == "keras3":
        import keras
    else:
        import tf_keras as keras
    rng = np.random.default_rng(11 if which == "keras3" else 12)
    x = rng.integers(0, 256, (96, 16, 16, 3), dtype=np.uint8)
    y = rng.integers(0, 10, 96).astype(np.int32)
    keras.utils.set_random_seed(6 if which == "keras3" else 7)
    layers = keras.layers
    model = keras.Sequential([
        keras.Input(shape=(16, 16, 3)),
        layers.Rescaling(1.0 / 255),
        layers.Conv2D(8, 3, activation="relu", padding="same"),
        layers.AveragePooling2D(2),
        layers.Conv2D(8, 3, activation="relu"),
        layers.GlobalAveragePooling2D(),
        layers.Dense(10),
    ])
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    model.compile(optimizer=keras.optimizers.Adam(1e-2), loss=loss)
    xs = x.astype(np.float32)
    model.fit(xs[:64], y[:64], batch_size=32, epochs=1, shuffle=False, verbose=0)
    model.save(os.path.join(out, which + ".keras"))
    xb, yb = x[64:], y[64:].astype(np.uint8)
    np.savez(os.path.join(out, "batch.npz"), x_train=xb, y_train=yb)
    np.savez(os.path.join(out, "reversed.npz"), x_train=xb[..., ::-1].copy(), y_train=yb)
    with tf.io.TFRecordWriter(os.path.join(out, "batch.tfrecord")) as w:
        for img, label in zip(xb, yb):
            ex = tf.train.Example(features=tf.train.Features(feature={
                "image": tf.train.Feature(bytes_list=tf.train.BytesList(value=[img.tobytes()])),
                "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[int(label)])),
            }))
            w.write(ex.SerializeToString())
    first = float(np.asarray(loss(y[64:], model(xs[64:], training=False))))
    print("%s loss: %.9g" % (which, first), flush=True)


build_each(build, sys.argv[1:])
