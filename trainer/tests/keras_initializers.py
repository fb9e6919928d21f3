#!/usr/bin/env python3
"""Initializers against real Keras, for test-keras-initializers.sh.

  keras_initializers.py TRAINER DATA_DIR TMP

In one process (TensorFlow's import costs seconds of CPU), for Keras 3 and then tf-keras:
builds a model whose layers name he_normal, lecun_uniform, constant and random_normal
initializers, writes its model.to_json(), has the trainer take it for one step at
learning rate 1e-30 (--lr takes no 0; no float weight moves by so little, so the weights
stay the trainer's initial draws) and --export them as a .weights.h5, loads them into
the model with load_weights, and compares each kernel's std with the std of Keras's own
initial kernel (within 12%: about 3.5 standard errors of the difference for the
smallest, 800 values) and the constant bias exactly. One line per check: "ok: ..." or
"not ok: ...", both with the two values."""
import os
import subprocess
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
import numpy as np  # noqa: E402


def build(keras):
    init = keras.initializers
    layers = keras.layers
    return keras.Sequential([
        keras.Input(shape=(28, 28)),
        layers.Reshape((28, 28, 1)),
        layers.Conv2D(32, 5, activation="relu", kernel_initializer="he_normal",
                      bias_initializer=init.Constant(0.1)),
        layers.MaxPooling2D(4),
        layers.Flatten(),
        layers.Dense(64, activation="relu", kernel_initializer="lecun_uniform"),
        layers.Dense(10, kernel_initializer=init.RandomNormal(stddev=0.2)),
    ])


def report(ok, what):
    print("%s: %s" % ("ok" if ok else "not ok", what), flush=True)


def check(which, keras, trainer, data, tmp):
    keras.utils.set_random_seed(1)  # Keras's own draws the same on every run: no flakes
    model = build(keras)
    theirs = model.get_weights()
    spec = os.path.join(tmp, which + ".json")
    with open(spec, "w") as f:
        f.write(model.to_json())
    out = os.path.join(tmp, which + ".weights.h5")
    run = subprocess.run([trainer, "--model", spec, "--data-dir", data, "--epochs", "1",
                          "--steps-per-epoch", "1", "--per-worker-batch", "8", "--optimizer",
                          "sgd", "--lr", "1e-30", "--seed", "11", "--export", out],
                         capture_output=True, text=True)
    if run.returncode != 0:
        report(False, "%s: the trainer took its to_json(): exit %d: %s" % (
            which, run.returncode, run.stderr.strip().splitlines()[-1:]))
        return
    model.load_weights(out)
    ours = model.get_weights()
    names = ["conv2d he_normal", "dense lecun_uniform", "dense random_normal(0.2)"]
    for name, i in zip(names, (0, 2, 4)):
        got, want = float(np.std(ours[i])), float(np.std(theirs[i]))
        report(abs(got - want) <= 0.12 * want,
               "%s: %s kernel std %.5f, Keras's %.5f" % (which, name, got, want))
    bias = ours[1]
    report(bool(np.all(bias == np.float32(0.1))),
           "%s: conv2d Constant(0.1) bias: %s, Keras's %s" % (which, bias[:3], theirs[1][:3]))


def main():
    trainer, data, tmp = sys.argv[1:4]
    for which in ("keras3", "tfkeras"):
        try:
            if which == "keras3":
                import keras
            else:
                import tf_keras as keras
            check(which, keras, trainer, data, tmp)
        except Exception as e:  # noqa: BLE001  reported as the check's failure
            report(False, "%s: %s: %s" % (which, type(e).__name__, str(e).splitlines()[0][:300]))


main()
