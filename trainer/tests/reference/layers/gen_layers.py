#!/usr/bin/env python3
"""Writes trainer/tests/reference/layers/layers.json: the layers without weights that
the trainer took from Keras after its first models (AveragePooling2D,
GlobalAveragePooling2D, GlobalMaxPooling2D, Rescaling), as Keras 3 and tf-keras compute them, on a
fixed float32 batch (2, 5, 6, 3): for each layer config its output y and the gradient dx
of sum(y * r) for a fixed r (tf.GradientTape). test-layers.c builds each config as a
spec layer and compares its forward and backward with both.

BatchNormalization (BN_CASES) has weights and two modes: from fixed gamma, beta, moving
mean and variance, its training call (the batch's statistics) gives y, dx, dgamma and dbeta
and the moving statistics after it; its inference call (training=False, the moving
statistics) y and dx. tf-keras's moving variance takes the batch variance with Bessel's
correction (its fused kernel's), Keras 3's without: both are written, test-layers.c
follows Keras 3.

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

# BatchNormalization configs: Keras's defaults but the momentum; no center and no scale
BN_CASES = [
    {"momentum": 0.9},
    {"momentum": 0.5, "epsilon": 0.01, "center": False, "scale": False},
]


def batchnorm_case(rng, x, cfg):
    c = SHAPE[-1]
    start = {"gamma": rng.uniform(0.5, 1.5, c), "beta": rng.uniform(-0.5, 0.5, c),
             "moving_mean": rng.uniform(-0.2, 0.2, c),
             "moving_variance": rng.uniform(0.5, 1.5, c)}
    start = {k: v.astype(np.float32) for k, v in start.items()}
    r = rng.uniform(-1.0, 1.0, SHAPE).astype(np.float32)
    case = {"config": cfg, "r": r.ravel().tolist(),
            "start": {k: v.tolist() for k, v in start.items()}}
    for dialect, k in (("keras3", keras), ("tfkeras", tf_keras)):
        got = {}
        for mode, training in (("train", True), ("infer", False)):
            layer = k.layers.BatchNormalization(**cfg)
            layer.build(SHAPE)
            names = ["gamma"] * cfg.get("scale", True) + ["beta"] * cfg.get("center", True)
            layer.set_weights([start[n] for n in names + ["moving_mean", "moving_variance"]])
            t = tf.constant(x)
            with tf.GradientTape() as tape:
                tape.watch(t)
                y = layer(t, training=training)
                s = tf.reduce_sum(y * r)
            grads = tape.gradient(s, [t] + list(layer.trainable_weights))
            out = {"y": np.asarray(y).ravel().tolist(), "dx": np.asarray(grads[0]).ravel().tolist()}
            for n, g in zip(names, grads[1:]):
                out["d" + n] = np.asarray(g).ravel().tolist()
            w = layer.get_weights()
            out["moving_mean"] = np.asarray(w[-2]).tolist()
            out["moving_variance"] = np.asarray(w[-1]).tolist()
            got[mode] = out
        case[dialect] = got
    return case


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
    out["batchnorm"] = [batchnorm_case(rng, x, cfg) for cfg in BN_CASES]
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "layers.json")
    with open(path, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    print("wrote", path)


if __name__ == "__main__":
    main()
