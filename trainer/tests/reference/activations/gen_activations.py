#!/usr/bin/env python3
"""Writes trainer/tests/reference/activations/activations.json: each activation the trainer
has, by the name its Keras config gives it, evaluated by Keras 3 and by tf-keras (the
activation function as `activation="name"` resolves it) at fixed float32 points, with its
derivative from tf.GradientTape. test-layers.c compares layers.c's forward and backward
with both.

Run: $KT_CACHE/venv-tf/bin/python trainer/tests/reference/activations/gen_activations.py
(make reference-activations); commit what it writes."""
import json
import os

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import tensorflow as tf  # noqa: E402
import keras  # noqa: E402
import tf_keras  # noqa: E402

# Both dialects' names: tf-keras writes swish, Keras 3 silu (each reads the other's).
NAMES = {
    "keras3": ["sigmoid", "tanh", "gelu", "silu", "elu", "leaky_relu", "relu", "linear"],
    "tfkeras": ["sigmoid", "tanh", "gelu", "swish", "elu", "leaky_relu", "relu", "linear"],
}
LIBS = {"keras3": keras.activations.get, "tfkeras": tf_keras.activations.get}


def main():
    # away from 0, where relu and leaky_relu have no derivative
    x = np.linspace(-6.0, 6.0, 48, dtype=np.float32) + np.float32(0.0625)
    out = {
        "x": x.tolist(),
        "versions": {"keras3": keras.__version__, "tfkeras": tf_keras.__version__},
    }
    for dialect, names in NAMES.items():
        out[dialect] = {}
        for name in names:
            fn = LIBS[dialect](name)
            t = tf.constant(x)
            with tf.GradientTape() as tape:
                tape.watch(t)
                y = fn(t)
            g = tape.gradient(y, t)
            out[dialect][name] = {
                "y": np.asarray(y, dtype=np.float32).tolist(),
                "dy": np.asarray(g, dtype=np.float32).tolist(),
            }
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "activations.json")
    with open(path, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    print("wrote", path)


if __name__ == "__main__":
    main()
