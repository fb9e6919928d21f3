#!/usr/bin/env python3
"""Generates trainer/tests/reference/reference.json: the losses TensorFlow/Keras computes
for the first optimizer steps of each built-in model on a fixed batch, starting from the
weights kubetrain's model_init_params draws (splitmix64 + Glorot-uniform, recomputed
here bit for bit). test-reference.c recomputes everything in C and compares.

Run: $KT_CACHE/venv-tf/bin/python trainer/tests/reference/gen_reference.py [DATA_DIR]
(make -f ... reference does this; the venv holds tensorflow-cpu from PyPI)."""
import gzip
import json
import os
import sys

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import tensorflow as tf  # noqa: E402
import keras  # noqa: E402

MASK = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15
BATCH = 64
STEPS = 5


def splitmix_floats(seed, start, n):
    """util_rand_float for draws start+1 .. start+n of a splitmix64 stream seeded `seed`."""
    with np.errstate(over="ignore"):
        k = np.arange(start + 1, start + n + 1, dtype=np.uint64)
        z = np.uint64(seed) + k * np.uint64(GOLDEN)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    return (z >> np.uint64(40)).astype(np.float32) * np.float32(1.0 / 16777216.0)


def init_weights(model, seed):
    """Glorot-uniform kernels in layer order from one splitmix64 stream, zero biases."""
    drawn = 0
    for layer in model.layers:
        ws = layer.get_weights()
        if not ws:
            continue
        k = ws[0]
        if k.ndim == 4:
            rf = k.shape[0] * k.shape[1]
            fan_in, fan_out = rf * k.shape[2], rf * k.shape[3]
        else:
            fan_in, fan_out = k.shape
        limit = np.sqrt(np.float32(6.0) / np.float32(fan_in + fan_out)).astype(np.float32)
        u = splitmix_floats(seed, drawn, k.size)
        drawn += k.size
        kernel = ((np.float32(2.0) * u - np.float32(1.0)) * limit).astype(np.float32)
        layer.set_weights([kernel.reshape(k.shape), np.zeros_like(ws[1])])


# A spec beyond the built-ins, for the layer options they do not use: a non-square
# MaxPooling2D with unequal strides and "same" padding, and a Dense on a rank-3 input
# (Keras maps its last axis). test-reference.c holds the same JSON text.
SHAPES_SPEC = ('{"input_shape":[28,28],"layers":[{"type":"Reshape","target_shape":[28,28,1]},'
               '{"type":"MaxPooling2D","pool_size":[3,2],"strides":[2,1],"padding":"same"},'
               '{"type":"Dense","units":8,"activation":"relu"},{"type":"Flatten"},'
               '{"type":"Dense","units":10}]}')


def build(name):
    L = keras.layers
    if name == SHAPES_SPEC:
        return keras.Sequential([
            keras.Input(shape=(28, 28)),
            L.Reshape(target_shape=(28, 28, 1)),
            L.MaxPooling2D(pool_size=(3, 2), strides=(2, 1), padding="same"),
            L.Dense(8, activation="relu"),
            L.Flatten(),
            L.Dense(10),
        ]), True
    reg = keras.regularizers.L2(1e-5) if name == "tutorial-cnn-l2" else None
    if name in ("tutorial-cnn", "tutorial-cnn-l2"):
        return keras.Sequential([
            keras.Input(shape=(28, 28)),
            L.Reshape(target_shape=(28, 28, 1)),
            L.Conv2D(32, 3, activation="relu", kernel_regularizer=reg),
            L.Flatten(),
            L.Dense(128, activation="relu", kernel_regularizer=reg),
            L.Dense(10, kernel_regularizer=reg),
        ]), True
    if name == "cnn2":
        return keras.Sequential([
            keras.Input(shape=(28, 28, 1)),
            L.Conv2D(32, 3, activation="relu"),
            L.Conv2D(64, 3, activation="relu"),
            L.MaxPooling2D(2),
            L.Flatten(),
            L.Dense(64, activation="relu"),
            L.Dense(10, activation="softmax"),
        ]), False
    if name == "mlp":
        return keras.Sequential([
            keras.Input(shape=(28, 28)),
            L.Flatten(),
            L.Dense(128, activation="relu"),
            L.Dropout(0.2),
            L.Dense(10),
        ]), True
    raise ValueError(name)


def optimizer(spec):
    kind, lr = spec["optimizer"], spec["lr"]
    mom = spec.get("momentum", 0.0)
    if kind == "sgd":
        return keras.optimizers.SGD(learning_rate=lr, momentum=mom, nesterov=spec.get("nesterov", False))
    if kind == "rmsprop":
        return keras.optimizers.RMSprop(learning_rate=lr, momentum=mom)
    if kind == "adam":
        return keras.optimizers.Adam(learning_rate=lr)
    if kind == "adam-amsgrad":
        return keras.optimizers.Adam(learning_rate=lr, amsgrad=True)
    raise ValueError(kind)


def load_batch(data_dir):
    def read(name, offset, count, item):
        path = os.path.join(data_dir, name)
        opener = gzip.open if os.path.exists(path + ".gz") else open
        with opener(path + ".gz" if opener is gzip.open else path, "rb") as f:
            raw = f.read(offset + count * item)
        return np.frombuffer(raw[offset:], dtype=np.uint8)
    x = read("train-images-idx3-ubyte", 16, BATCH, 784).reshape(BATCH, 28, 28)
    y = read("train-labels-idx1-ubyte", 8, BATCH, 1)
    return x.astype(np.float32) / np.float32(255), y.astype(np.int64)


RUNS = [
    {"model": "tutorial-cnn", "optimizer": "sgd", "lr": 0.01},
    {"model": "tutorial-cnn", "optimizer": "adam", "lr": 0.001},
    {"model": "tutorial-cnn-l2", "optimizer": "rmsprop", "lr": 0.001},
    {"model": "tutorial-cnn-l2", "optimizer": "sgd", "lr": 0.01, "momentum": 0.9, "nesterov": True},
    {"model": "cnn2", "optimizer": "adam-amsgrad", "lr": 0.001},
    {"model": "cnn2", "optimizer": "sgd", "lr": 0.01, "momentum": 0.9},
    {"model": "mlp", "optimizer": "adam", "lr": 0.001},
    {"model": "mlp", "optimizer": "rmsprop", "lr": 0.001, "momentum": 0.5},
    {"model": SHAPES_SPEC, "optimizer": "adam", "lr": 0.001},
    {"model": SHAPES_SPEC, "optimizer": "sgd", "lr": 0.05, "momentum": 0.9},
]


def run(spec, x, y, seed):
    model, from_logits = build(spec["model"])
    init_weights(model, seed)
    opt = optimizer(spec)
    lossf = keras.losses.SparseCategoricalCrossentropy(from_logits=from_logits)
    # Dropout is the only random layer; its masks cannot match TensorFlow's RNG, so the
    # mlp runs with training=False (dropout off) here and dropout_enabled = 0 in C.
    training = spec["model"] != "mlp"
    losses = []
    for _ in range(STEPS):
        with tf.GradientTape() as tape:
            out = model(x, training=training)
            loss = lossf(y, out) + (tf.add_n(model.losses) if model.losses else 0.0)
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        losses.append(float(loss))
    flat = np.concatenate([w.numpy().ravel() for w in model.trainable_variables]).astype(np.float64)
    return dict(spec, seed=seed, losses=losses, final_abs_sum=float(np.abs(flat).sum()))


def main():
    data_dir = sys.argv[1] if len(sys.argv) > 1 else "/usr/share/datasets/fashion-mnist"
    x, y = load_batch(data_dir)
    out = {
        "generator": "trainer/tests/reference/gen_reference.py",
        "tensorflow": tf.__version__,
        "keras": keras.__version__,
        "batch": {"data": "fashion-mnist train, first %d examples" % BATCH, "size": BATCH},
        "steps": STEPS,
        "runs": [run(spec, x, y, seed=7) for spec in RUNS],
    }
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "reference.json")
    with open(path, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    print("wrote", path)


if __name__ == "__main__":
    main()
