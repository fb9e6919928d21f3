"""Fashion-MNIST's training set in the formats bench_data.py compares, written by NumPy and
real TensorFlow (tf.io.encode_png, tf.train.Example, tf.io.TFRecordWriter) into OUT_DIR:

  fashion-mnist.npz          x_train, y_train, x_test, y_test (np.savez, as keras.datasets)
  png-00000-of-00001         60,000 PNG examples, one uncompressed file
  png-gz-0000N-of-00008      the same records in 8 GZIP shards (the issue's benchmark set)
  raw-00000-of-00001         raw uint8 bytes (28x28x1), one uncompressed file
  big/unit                   256 random 64x64x3 uint8 images as raw bytes (3 MiB), labels
                             i mod 10: the streaming RSS run's small set
  big/big-<M>mib-0000N-of-00004  with BIG_MIB M: 4 shards of copies of big/unit, M MiB in
                             all (a TFRecord file is its records one after another, so the
                             copies are a valid file); written when missing, deleted by
                             bench_data.py after its run

Features "image" and "label", as TFDS names them; the examples in the IDX order, so that
every source gives the same training. A file is written only when missing (PNG encoding
takes TensorFlow a minute or more on 2 cores): the set is cached between runs.

  make_data.py DATA_DIR OUT_DIR [BIG_MIB]
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from idx_numpy import read_idx  # noqa: E402


def example(tf, image, label):
    return tf.train.Example(features=tf.train.Features(feature={
        "image": tf.train.Feature(bytes_list=tf.train.BytesList(value=[image])),
        "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[int(label)]))}))


def write(tf, path, records, compression=None):
    """records into path through a temporary name, so that a cut run leaves no file."""
    opts = tf.io.TFRecordOptions(compression_type=compression) if compression else None
    with tf.io.TFRecordWriter(path + ".tmp", opts) as w:
        for r in records:
            w.write(r)
    os.replace(path + ".tmp", path)


def write_big(out, big_mib):
    """big/unit (by TensorFlow) and, with big_mib, the big shards of copies of it."""
    d = os.path.join(out, "big")
    os.makedirs(d, exist_ok=True)
    unit = os.path.join(d, "unit")
    if not os.path.exists(unit):
        import tensorflow as tf
        x = np.random.default_rng(7).integers(0, 256, (256, 64, 64, 3), dtype=np.uint8)
        write(tf, unit, (example(tf, x[i].tobytes(), i % 10).SerializeToString()
                         for i in range(len(x))))
    if not big_mib:
        return
    data = open(unit, "rb").read()
    copies = -(-big_mib * 2**20 // 4 // len(data))  # per shard, rounded up
    for s in range(4):
        path = os.path.join(d, "big-%dmib-%05d-of-00004" % (big_mib, s))
        if os.path.exists(path):
            continue
        with open(path + ".tmp", "wb") as f:
            for _ in range(copies):
                f.write(data)
        os.replace(path + ".tmp", path)


def main():
    data_dir, out = sys.argv[1:3]
    write_big(out, int(sys.argv[3]) if len(sys.argv) > 3 else 0)
    os.makedirs(out, exist_ok=True)
    x = {p: read_idx(os.path.join(data_dir, p + "-images-idx3-ubyte"), 16).reshape(-1, 28, 28)
         for p in ("train", "t10k")}
    y = {p: read_idx(os.path.join(data_dir, p + "-labels-idx1-ubyte"), 8) for p in ("train", "t10k")}
    npz = os.path.join(out, "fashion-mnist.npz")
    if not os.path.exists(npz):
        np.savez(npz + ".tmp.npz", x_train=x["train"], y_train=y["train"], x_test=x["t10k"],
                 y_test=y["t10k"])
        os.replace(npz + ".tmp.npz", npz)
    png = os.path.join(out, "png-00000-of-00001")
    gz = [os.path.join(out, "png-gz-%05d-of-00008" % s) for s in range(8)]
    raw = os.path.join(out, "raw-00000-of-00001")
    if all(os.path.exists(p) for p in [png, raw] + gz):
        return
    import tensorflow as tf
    xs, ys = x["train"], y["train"]
    if not os.path.exists(raw):
        write(tf, raw, (example(tf, xs[i].tobytes(), ys[i]).SerializeToString()
                        for i in range(len(xs))))
    if not os.path.exists(png) or not all(os.path.exists(p) for p in gz):
        recs = [example(tf, tf.io.encode_png(xs[i][:, :, None]).numpy(), ys[i]).SerializeToString()
                for i in range(len(xs))]
        write(tf, png, recs)
        per = (len(recs) + 7) // 8
        for s, path in enumerate(gz):
            write(tf, path, recs[s * per:(s + 1) * per], "GZIP")


if __name__ == "__main__":
    main()
