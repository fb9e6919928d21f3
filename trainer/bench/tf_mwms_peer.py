#!/usr/bin/env python3
"""The TensorFlow peer of the distributed benchmark: one worker of the multi-worker
tutorial's program under tf.distribute.MultiWorkerMirroredStrategy (TF_CONFIG from the
environment, as bench_distributed.py sets it for kubetrain's workers): tutorial-cnn,
per-worker batch 64 (global = 64 x workers), SGD(1e-3), 3 epochs x 70 steps, then the
test set evaluated. Prints one JSON object. The accuracy comparison runs it longer, with
Adam and a seed: --optimizer adam --epochs 2 --steps 0 (one pass over the training set per
epoch) --seed S.

  tf_mwms_peer.py DATA_DIR [--optimizer sgd|adam] [--lr F] [--epochs N] [--steps N] [--seed S]
"""
import argparse
import json
import os
import resource
import sys
import time


os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
# Keras 3's fit() cannot take MultiWorkerMirroredStrategy's per-replica batches; the
# tutorials' Keras 2 (tf-keras) can, so tf.keras is that one here.
os.environ["TF_USE_LEGACY_KERAS"] = "1"
import tensorflow as tf  # noqa: E402
from idx_numpy import load  # noqa: E402

PER_WORKER_BATCH = 64


class EpochTimer(tf.keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.seconds = []

    def on_epoch_begin(self, epoch, logs=None):
        self.t0 = time.perf_counter()

    def on_epoch_end(self, epoch, logs=None):
        self.seconds.append(time.perf_counter() - self.t0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("data_dir")
    ap.add_argument("--optimizer", default="sgd", choices=["sgd", "adam"])
    ap.add_argument("--lr", type=float, default=0.001)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--steps", type=int, default=70)
    ap.add_argument("--seed", type=int, default=None)
    a = ap.parse_args()
    data_dir = a.data_dir
    if a.seed is not None:
        tf.keras.utils.set_random_seed(a.seed)
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    workers = strategy.num_replicas_in_sync
    global_batch = PER_WORKER_BATCH * workers
    x, y = load(data_dir, "train")
    EPOCHS = a.epochs
    STEPS = a.steps if a.steps > 0 else len(x) // global_batch
    ds = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(60000).repeat().batch(global_batch)
    with strategy.scope():
        model = tf.keras.Sequential([
            tf.keras.Input(shape=(28, 28)),
            tf.keras.layers.Reshape(target_shape=(28, 28, 1)),
            tf.keras.layers.Conv2D(32, 3, activation="relu"),
            tf.keras.layers.Flatten(),
            tf.keras.layers.Dense(128, activation="relu"),
            tf.keras.layers.Dense(10),
        ])
        opt = (tf.keras.optimizers.Adam(learning_rate=a.lr) if a.optimizer == "adam"
               else tf.keras.optimizers.SGD(learning_rate=a.lr))
        model.compile(optimizer=opt,
                      loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                      metrics=["accuracy"])
    timer = EpochTimer()
    hist = model.fit(ds, epochs=EPOCHS, steps_per_epoch=STEPS, callbacks=[timer], verbose=0)
    xt, yt = load(data_dir, "t10k")
    test = tf.data.Dataset.from_tensor_slices((xt, yt)).batch(global_batch)
    test_loss, test_acc = model.evaluate(test, verbose=0)
    out = {"tensorflow": tf.__version__, "workers": workers, "global_batch": global_batch,
           "epoch_seconds": timer.seconds,
           "steps_per_epoch": STEPS,
           "samples_per_sec": (STEPS * global_batch * (EPOCHS - 1) / sum(timer.seconds[1:])
                               if EPOCHS > 1 else STEPS * global_batch / timer.seconds[0]),
           "train_accuracy": float(hist.history["accuracy"][-1]),
           "test_loss": float(test_loss), "test_accuracy": float(test_acc),
           "max_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0}
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
