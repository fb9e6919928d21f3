#!/usr/bin/env python3
"""Loads models the trainer exported (--export, `export`) with real Keras and
evaluates them on Fashion-MNIST's test set, for test-keras-export.sh and
test-keras-batchnorm.sh.

  keras_check.py DATA_DIR (KERAS FILE MODEL_JSON WANT_LOSS WANT_ACCURACY)...

KERAS is keras3 (Keras 3) or tfkeras (tf-keras 2.x), per file: both are checked in one
process, since TensorFlow's import costs seconds of CPU; each is imported once, on its
first file. FILE is a .keras archive, opened with load_model
(MODEL_JSON unused), or a .weights.h5, loaded with load_weights into the model that
MODEL_JSON (Keras's model.to_json(), the file the trainer trained) describes. The model
is compiled with the trainer's loss (sparse categorical cross-entropy, from logits when
the last activation is linear) and evaluate()d on pixels / 255. Keras's loss includes
the regularization losses and the trainer's evaluation loss does not, so they are
subtracted. One line per FILE, in the order given: "ok: KERAS ..." when the loss is
WANT_LOSS within 1e-4 and the accuracy equals WANT_ACCURACY (as the trainer's --eval
wrote them), else "not ok: KERAS ...", both with the two values; a FILE Keras cannot
load is "not ok" with the exception."""
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
import numpy as np  # noqa: E402
from idx_read import idx  # noqa: E402


def check(keras, path, model_json, want_loss, want_acc, x, y):
    if path.endswith(".keras"):
        model = keras.models.load_model(path, compile=False)
    else:
        with open(model_json) as f:
            model = keras.models.model_from_json(f.read())
        model.load_weights(path)
    logits = model.layers[-1].get_config()["activation"] == "linear"
    model.compile(loss=keras.losses.SparseCategoricalCrossentropy(from_logits=logits),
                  metrics=["accuracy"])
    xs = x.reshape((-1,) + tuple(model.input_shape[1:]))
    loss, acc = model.evaluate(xs, y, batch_size=256, verbose=0)
    reg = float(sum(float(np.asarray(r)) for r in model.losses))
    loss -= reg
    ok = abs(loss - float(want_loss)) <= 1e-4 and round(acc, 4) == float(want_acc)
    return ok, "loss %.6f (regularization %.3g subtracted) accuracy %.4f, the trainer's %s %s" % (
        loss, reg, acc, want_loss, want_acc)


def load_keras(which):
    if which == "keras3":
        import keras
    elif which == "tfkeras":
        import tf_keras as keras
    else:
        raise ValueError("KERAS %r is neither keras3 nor tfkeras" % which)
    return keras


def main():
    data_dir = sys.argv[1]
    x = idx(os.path.join(data_dir, "t10k-images-idx3-ubyte.gz")).astype(np.float32) / 255.0
    y = idx(os.path.join(data_dir, "t10k-labels-idx1-ubyte.gz")).astype(np.int32)
    args = sys.argv[2:]
    kerases = {}
    for i in range(0, len(args), 5):
        which, path = args[i:i + 2]
        try:
            if which not in kerases:
                kerases[which] = load_keras(which)
            ok, what = check(kerases[which], *args[i + 1:i + 5], x, y)
        except Exception as e:  # noqa: BLE001  reported as the check's failure
            ok, what = False, "%s: %s" % (type(e).__name__, str(e).splitlines()[0][:300])
        print("%s: %s %s: %s" % ("ok" if ok else "not ok", which, os.path.basename(path), what),
              flush=True)


main()
