#!/usr/bin/env python3
"""The TensorFlow/Keras peer of the trainer benchmark: the reference notebook's
single-worker program (same model, tf.data pipeline, batch, loss and metrics), reading
the same Debian Fashion-MNIST files. Prints one JSON object.

  tf_peer.py throughput DATA_DIR   SGD(1e-3), 3 epochs x 70 steps, samples/s of epochs 2-3
  tf_peer.py accuracy DATA_DIR [SEED]  Adam(1e-3), 2 epochs over the training set, test
                                   accuracy (SEED: tf.keras.utils.set_random_seed)
  tf_peer.py tfrecord PATTERN EPOCHS STEPS cache|decode
      SGD(1e-3) on GZIP TFRecords of PNG Examples ("image", "label") through tf.data:
      TFRecordDataset -> parse_single_example -> decode_png -> /255, then shuffle(60000),
      repeat, batch, prefetch(AUTOTUNE). cache: decoded once, kept by .cache() before the
      shuffle (as the trainer holds a set that fits); decode: the records shuffled and
      each decoded when the batch wants it (map with num_parallel_calls=AUTOTUNE).
      samples/s and CPU of epochs 2..EPOCHS (make bench-data, bench_data.py)
"""
import json
import os
import resource
import sys
import time


os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import tensorflow as tf  # noqa: E402
from idx_numpy import load  # noqa: E402

BATCH = 64


def build(optimizer):
    model = tf.keras.Sequential([
        tf.keras.Input(shape=(28, 28)),
        tf.keras.layers.Reshape(target_shape=(28, 28, 1)),
        tf.keras.layers.Conv2D(32, 3, activation="relu"),
        tf.keras.layers.Flatten(),
        tf.keras.layers.Dense(128, activation="relu"),
        tf.keras.layers.Dense(10),
    ])
    model.compile(optimizer=optimizer,
                  loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    return model


class EpochTimer(tf.keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.seconds = []
        self.cpu_seconds = []  # CPU time of the whole process (all threads) per epoch

    def on_epoch_begin(self, epoch, logs=None):
        self.t0 = time.perf_counter()
        self.c0 = time.process_time()

    def on_epoch_end(self, epoch, logs=None):
        self.seconds.append(time.perf_counter() - self.t0)
        self.cpu_seconds.append(time.process_time() - self.c0)


def tfrecord_dataset(pattern, cache):
    """The tf.data pipeline of the tfrecord mode (the module docstring)."""
    feature = {"image": tf.io.FixedLenFeature([], tf.string),
               "label": tf.io.FixedLenFeature([], tf.int64)}

    def parse(record):
        ex = tf.io.parse_single_example(record, feature)
        image = tf.io.decode_png(ex["image"], channels=1)
        return tf.reshape(tf.cast(image, tf.float32) / 255.0, (28, 28)), ex["label"]

    files = sorted(tf.io.gfile.glob(pattern))
    if not files:
        sys.exit("tf_peer.py: %s matches no file" % pattern)
    ds = tf.data.TFRecordDataset(files, compression_type="GZIP")
    if cache:
        ds = ds.map(parse, num_parallel_calls=tf.data.AUTOTUNE).cache().shuffle(60000).repeat()
    else:
        ds = ds.shuffle(60000).repeat().map(parse, num_parallel_calls=tf.data.AUTOTUNE)
    return ds.batch(BATCH).prefetch(tf.data.AUTOTUNE)


def tfrecord(pattern, epochs, steps, how):
    if how not in ("cache", "decode"):
        sys.exit("tf_peer.py tfrecord: expected cache or decode, got %r" % how)
    ds = tfrecord_dataset(pattern, how == "cache")
    timer = EpochTimer()
    model = build(tf.keras.optimizers.SGD(learning_rate=0.001))
    model.fit(ds, epochs=epochs, steps_per_epoch=steps, callbacks=[timer], verbose=0)
    samples = steps * BATCH * (epochs - 1)
    return {"tensorflow": tf.__version__, "mode": "tfrecord", "pipeline": how, "batch": BATCH,
            "epoch_seconds": timer.seconds, "epoch_cpu_seconds": timer.cpu_seconds,
            "samples_per_sec": samples / sum(timer.seconds[1:]),
            "cpu_ms_per_sample": 1e3 * sum(timer.cpu_seconds[1:]) / samples,
            "max_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0}


def main():
    mode, data_dir = sys.argv[1], sys.argv[2]
    if mode == "tfrecord":
        print(json.dumps(tfrecord(data_dir, int(sys.argv[3]), int(sys.argv[4]), sys.argv[5])))
        return
    if len(sys.argv) > 3:
        tf.keras.utils.set_random_seed(int(sys.argv[3]))
    x, y = load(data_dir, "train")
    ds = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(60000).repeat().batch(BATCH)
    timer = EpochTimer()
    out = {"tensorflow": tf.__version__, "mode": mode, "batch": BATCH}
    if mode == "throughput":
        steps, epochs = 70, 3
        model = build(tf.keras.optimizers.SGD(learning_rate=0.001))
        model.fit(ds, epochs=epochs, steps_per_epoch=steps, callbacks=[timer], verbose=0)
        out["epoch_seconds"] = timer.seconds
        out["epoch_cpu_seconds"] = timer.cpu_seconds
        out["cpu_ms_per_sample"] = 1e3 * sum(timer.cpu_seconds[1:]) / (steps * BATCH * (epochs - 1))
        out["samples_per_sec"] = steps * BATCH * (epochs - 1) / sum(timer.seconds[1:])
    else:
        steps, epochs = len(x) // BATCH, 2
        model = build(tf.keras.optimizers.Adam(learning_rate=0.001))
        model.fit(ds, epochs=epochs, steps_per_epoch=steps, callbacks=[timer], verbose=0)
        xt, yt = load(data_dir, "t10k")
        loss, acc = model.evaluate(xt, yt, batch_size=BATCH, verbose=0)
        out.update(epoch_seconds=timer.seconds, steps_per_epoch=steps, test_loss=loss,
                   test_accuracy=acc)
    out["max_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    print(json.dumps(out))


if __name__ == "__main__":
    main()
