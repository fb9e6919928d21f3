#!/usr/bin/env python3
"""Writes the Keras model JSON references of trainer/tests/reference/keras/: what
`model.to_json()` gives for the built-in models (docs/design.md, "Models and data"),
in both dialects the trainer reads, plus the models its tests expect to be refused and
one with every activation and activation layer (activations), and one with the
average and global pooling layers (pooling), one with Rescaling (rescaling), and one
with BatchNormalization after a Conv2D and after a Dense (batchnorm).

Written by Keras 3.15.1 and tf-keras 2.21.0 on TensorFlow 2.21.0 (the venv
$KT_CACHE/venv-tf that bench/pyvenv.sh makes). test-keras-json.c loads each accepted
file and compares it with the built-in model of the same name; test-keras-import.sh
trains from them.

Run: $KT_CACHE/venv-tf/bin/python trainer/tests/reference/keras/gen_keras_json.py
(writes beside itself; commit the result)."""
import json
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import keras  # noqa: E402  Keras 3
import tf_keras  # noqa: E402  tf-keras 2.x, what TF_USE_LEGACY_KERAS=1 gives as tf.keras

OUT = os.path.dirname(os.path.abspath(__file__))


def builtins(k):
    """The built-in models (trainer/src/model.c) written with Keras module k."""
    L = k.layers

    def tutorial_cnn(reg=None):
        return k.Sequential([
            k.Input(shape=(28, 28)),
            L.Reshape(target_shape=(28, 28, 1)),
            L.Conv2D(32, 3, activation="relu", kernel_regularizer=reg),
            L.Flatten(),
            L.Dense(128, activation="relu", kernel_regularizer=reg),
            L.Dense(10, kernel_regularizer=reg),
        ])

    return {
        "tutorial-cnn": tutorial_cnn(),
        "tutorial-cnn-l2": tutorial_cnn(k.regularizers.L2(1e-5)),
        "cnn2": k.Sequential([
            k.Input(shape=(28, 28, 1)),
            L.Conv2D(32, 3, activation="relu"),
            L.Conv2D(64, 3, activation="relu"),
            L.MaxPooling2D(2),
            L.Flatten(),
            L.Dense(64, activation="relu"),
            L.Dense(10, activation="softmax"),
        ]),
        "mlp": k.Sequential([
            k.Input(shape=(28, 28)),
            L.Flatten(),
            L.Dense(128, activation="relu"),
            L.Dropout(0.2),
            L.Dense(10),
        ]),
    }


def functional(k):
    """tutorial-cnn as a Functional chain (accepted) and a branching model (refused)."""
    L = k.layers
    x = inp = k.Input(shape=(28, 28), name="pixels")
    x = L.Reshape((28, 28, 1))(x)
    x = L.Conv2D(32, 3, activation="relu")(x)
    x = L.Flatten()(x)
    x = L.Dense(128, activation="relu")(x)
    chain = k.Model(inp, L.Dense(10)(x), name="chain")
    inp = k.Input(shape=(28, 28))
    f = L.Flatten()(inp)
    a = L.Dense(16, activation="relu")(f)
    b = L.Dense(16, activation="relu")(f)
    branch = k.Model(inp, L.Dense(10)(L.Add()([a, b])), name="branch")
    return {"tutorial-cnn-functional": chain, "branching": branch}


def activations(k):
    """Every activation on Dense and Conv2D, and the Activation, ReLU and LeakyReLU layers
    (LeakyReLU's slope is negative_slope in Keras 3, alpha in tf-keras)."""
    L = k.layers
    return {"activations": k.Sequential([
        k.Input(shape=(6, 6, 1)),
        L.Conv2D(3, 3, activation="gelu"),
        L.ReLU(),
        L.Conv2D(2, 2, activation="elu"),
        L.Flatten(),
        L.Dense(8, activation="swish"),
        L.LeakyReLU(),
        L.Dense(8, activation="tanh"),
        L.LeakyReLU(0.1),
        L.Dense(8, activation="sigmoid"),
        L.Activation("gelu"),
        L.Dense(8, activation="leaky_relu"),
        L.Activation("softmax"),
        L.Dense(3),
    ])}


def pooling(k):
    """A colour CNN with the average and global pooling layers."""
    L = k.layers
    return {"pooling": k.Sequential([
        k.Input(shape=(12, 12, 3)),
        L.Conv2D(4, 3, padding="same", activation="relu"),
        L.AveragePooling2D(2),
        L.AveragePooling2D(3, strides=2, padding="same"),
        L.Conv2D(6, 1),
        L.GlobalAveragePooling2D(keepdims=True),
        L.GlobalMaxPooling2D(),
        L.Dense(3),
    ])}


def rescaling(k):
    """Rescaling as a model's first layer (1/255) and inside it (scale and offset)."""
    L = k.layers
    return {"rescaling": k.Sequential([
        k.Input(shape=(8, 8, 3)),
        L.Rescaling(1.0 / 255),
        L.Conv2D(4, 3, activation="relu"),
        L.Rescaling(2.0, offset=-1.0),
        L.Flatten(),
        L.Dense(3),
    ])}


def batchnorm(k):
    """BatchNormalization with Keras's defaults after a Conv2D, and without center after
    a Dense, with another momentum and epsilon."""
    L = k.layers
    return {"batchnorm": k.Sequential([
        k.Input(shape=(8, 8, 3)),
        L.Conv2D(4, 3, use_bias=False),
        L.BatchNormalization(),
        L.ReLU(),
        L.Flatten(),
        L.Dense(5),
        L.BatchNormalization(momentum=0.9, epsilon=0.01, center=False),
        L.Dense(3),
    ])}


def write(name, model):
    with open(os.path.join(OUT, name + ".json"), "w") as f:
        json.dump(json.loads(model.to_json()), f, indent=1, sort_keys=True)
        f.write("\n")


for dialect, k in (("keras3", keras), ("tfkeras", tf_keras)):
    for name, model in {**builtins(k), **functional(k), **activations(k),
                        **pooling(k), **rescaling(k), **batchnorm(k)}.items():
        write("%s-%s" % (dialect, name), model)
