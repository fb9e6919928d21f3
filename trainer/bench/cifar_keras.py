#!/usr/bin/env python3
"""make bench-cifar's Keras side: the CIFAR-shaped Conv-BatchNorm model, defined here once,
its synthetic data, and TensorFlow/Keras's `fit` on them (the TensorFlow peer).

  cifar_keras.py prepare DIR
      DIR/cifar.json: the model's model.to_json(), as a user hands it to the trainer;
      DIR/cifar.npz: N_EXAMPLES random colour images (x_train, uint8, N x 32 x 32 x 3,
      channels last) and labels (y_train, uint8, 0..9), drawn from a fixed seed
  cifar_keras.py throughput DIR EPOCHS STEPS
      the model compiled with SGD(LR, momentum MOMENTUM) and sparse categorical
      cross-entropy from logits, fit on DIR/cifar.npz at batch 64 through tf.data
      (shuffled, cast to float32; the model rescales itself); prints one JSON object with
      samples/s and CPU time per sample of epochs 2..EPOCHS (epoch 1 traces the step)

The data are random: what is measured is the step's cost, which does not depend on the
pixel values (no layer of the model has a data-dependent cost).
"""
import json
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

BATCH = 64
N_EXAMPLES = 8192
LR, MOMENTUM = 0.01, 0.9  # the classic CIFAR setting; the same in every runner
FILTERS = (32, 32, "pool", 64, 64, "pool", 128)


def build():
    """The benchmark's model: Conv-BatchNorm-ReLU blocks, pooling, GlobalAveragePooling2D,
    Dropout, Dense (logits). Convolutions have no bias: the BatchNormalization after
    each has one (beta), as CIFAR models are usually written."""
    layers = tf.keras.layers
    stack = [tf.keras.Input(shape=(32, 32, 3)), layers.Rescaling(1.0 / 255)]
    for f in FILTERS:
        if f == "pool":
            stack.append(layers.MaxPooling2D(2))
            continue
        stack += [layers.Conv2D(f, 3, padding="same", use_bias=False),
                  layers.BatchNormalization(), layers.ReLU()]
    stack += [layers.GlobalAveragePooling2D(), layers.Dropout(0.3), layers.Dense(10)]
    return tf.keras.Sequential(stack, name="cifar_bench")


def prepare(out):
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "cifar.json"), "w") as f:
        f.write(build().to_json())
    rng = np.random.default_rng(32)
    x = rng.integers(0, 256, (N_EXAMPLES, 32, 32, 3), dtype=np.uint8)
    y = rng.integers(0, 10, N_EXAMPLES, dtype=np.uint8)
    np.savez(os.path.join(out, "cifar.npz"), x_train=x, y_train=y)


class EpochTimer(tf.keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.seconds, self.cpu_seconds = [], []

    def on_epoch_begin(self, epoch, logs=None):
        self.t0, self.c0 = time.perf_counter(), time.process_time()

    def on_epoch_end(self, epoch, logs=None):
        self.seconds.append(time.perf_counter() - self.t0)
        self.cpu_seconds.append(time.process_time() - self.c0)


def throughput(data, epochs, steps):
    with np.load(os.path.join(data, "cifar.npz")) as z:
        x, y = z["x_train"], z["y_train"].astype(np.int32)
    ds = (tf.data.Dataset.from_tensor_slices((x, y)).shuffle(len(x)).repeat().batch(BATCH)
          .map(lambda a, b: (tf.cast(a, tf.float32), b)).prefetch(2))
    tf.keras.utils.set_random_seed(1)
    model = build()
    model.compile(optimizer=tf.keras.optimizers.SGD(learning_rate=LR, momentum=MOMENTUM),
                  loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    timer = EpochTimer()
    model.fit(ds, epochs=epochs, steps_per_epoch=steps, callbacks=[timer], verbose=0)
    timed = steps * BATCH * (epochs - 1)
    return {"tensorflow": tf.__version__, "keras": tf.keras.__version__, "batch": BATCH,
            "epochs": epochs, "steps_per_epoch": steps, "epoch_seconds": timer.seconds,
            "epoch_cpu_seconds": timer.cpu_seconds,
            "samples_per_sec": timed / sum(timer.seconds[1:]),
            "cpu_ms_per_sample": 1e3 * sum(timer.cpu_seconds[1:]) / timed}


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "prepare":
        prepare(sys.argv[2])
    elif len(sys.argv) == 5 and sys.argv[1] == "throughput":
        epochs, steps = int(sys.argv[3]), int(sys.argv[4])
        if epochs < 2 or steps < 1:
            sys.exit("cifar_keras.py: EPOCHS must be >= 2 (the first is not timed), STEPS >= 1")
        print(json.dumps(throughput(sys.argv[2], epochs, steps)))
    else:
        sys.exit("usage: cifar_keras.py prepare DIR | throughput DIR EPOCHS STEPS")


if __name__ == "__main__":
    main()
