#!/usr/bin/env python3
"""Writes trainer/tests/reference/layers/layers.json: the layers without weights that
the trainer took from Keras after its first models (AveragePooling2D,
GlobalAveragePooling2D, GlobalMaxPooling2D, Rescaling), as Keras 3 and tf-keras compute them, on a
fixed float32 batch (2, 5, 6, 3): for each layer config its output y and the gradient dx
of sum(y * r) for a fixed r (tf.GradientTape). test-layers.c builds each config as a
spec layer and compares its forward and backward with both.

Run: $KT_CACHE/venv-tf/bin/python trainer/tests/reference/layers/gen_layers.py
(make reference-layers); commit what it writes."""
import json
import os

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import tensorflow as tf  # noqa: E402
import keras  # noqa: E402
import tf_keras  # noqa: E402

SHAPE = (2, 5, 6, 3)
# (class, config): valid and same padding, a non-square pool, unequal strides
CASES = [
    ("AveragePooling2D", {"pool_size": 2}),
    ("AveragePooling2D", {"pool_size": [3, 2], "strides": [2, 1], "padding": "same"}),
    ("AveragePooling2D", {"pool_size": 3, "strides": 2, "padding": "valid"}),
    ("AveragePooling2D", {"pool_size": 2, "strides": 2, "padding": "same"}),
    ("GlobalAveragePooling2D", {}),
    ("GlobalMaxPooling2D", {}),
    ("Rescaling", {"scale": 1.0 / 255}),
    ("Rescaling", {"scale": 2.0, "offset": -1.0}),
]


def main():
    rng = np.random.default_rng(7)
    x = rng.uniform(-1.0, 1.0, SHAPE).astype(np.float32)
    out = {
        "shape": list(SHAPE),
        "x": x.ravel().tolist(),
        "versions": {"keras3": keras.__version__, "tfkeras": tf_keras.__version__},
        "cases": [],
    }
    for cls, cfg in CASES:
        out_shape = getattr(keras.layers, cls)(**cfg).compute_output_shape(SHAPE)
        r = rng.uniform(-1.0, 1.0, out_shape).astype(np.float32)
        case = {"class": cls, "config": cfg, "out_shape": list(out_shape), "r": r.ravel().tolist()}
        for dialect, k in (("keras3", keras), ("tfkeras", tf_keras)):
            layer = getattr(k.layers, cls)(**cfg)
            t = tf.constant(x)
            with tf.GradientTape() as tape:
                tape.watch(t)
                y = layer(t)
                s = tf.reduce_sum(y * r)
            case[dialect] = {"y": np.asarray(y).ravel().tolist(),
                             "dx": np.asarray(tape.gradient(s, t)).ravel().tolist()}
        out["cases"].append(case)
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "layers.json")
    with open(path, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    print("wrote", path)


if __name__ == "__main__":
    main()
