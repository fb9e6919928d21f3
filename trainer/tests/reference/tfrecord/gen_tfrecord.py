#!/usr/bin/env python3
"""Writes the TFRecord references of trainer/tests/test-tfrecord.c with real TensorFlow,
and what tf.data reads back from them: manifest.json (per source: the shape, dtype,
labels and each example's SHA-256, in tf.data's order) and jpeg-*.u8 (TensorFlow's own
decode of the JPEG examples, for the comparison within a tolerance).

  fmnist-0000{0,1,2}-of-00003  the first 48 Fashion-MNIST test images as PNG
                               (tf.io.encode_png), 16 a shard: uncompressed, GZIP, ZLIB
  rgb-jpeg.tfrecord            8 colour 20x24 images, tf.io.encode_jpeg (quality 90)
  gray-jpeg.tfrecord           4 greyscale 16x16 images, tf.io.encode_jpeg
  raw.tfrecord                 10 4x5x3 uint8 images as raw bytes, features named
                               pixels/class, and an extra feature the reader skips
  float.tfrecord               6 3x3x2 float_list images

Run: $KT_CACHE/venv-tf/bin/python trainer/tests/reference/tfrecord/gen_tfrecord.py
(make reference-tfrecord); commit what it writes."""
import gzip
import hashlib
import json
import os
import sys

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import tensorflow as tf  # noqa: E402

OUT = os.path.dirname(os.path.abspath(__file__))
FASHION = sys.argv[1] if len(sys.argv) > 1 else "/usr/share/datasets/fashion-mnist"


def feature_bytes(b):
    return tf.train.Feature(bytes_list=tf.train.BytesList(value=[b]))


def feature_int64(v):
    return tf.train.Feature(int64_list=tf.train.Int64List(value=[int(v)]))


def feature_floats(a):
    return tf.train.Feature(float_list=tf.train.FloatList(value=a.ravel().tolist()))


def write(name, examples, compression=None):
    opts = tf.io.TFRecordOptions(compression_type=compression) if compression else None
    with tf.io.TFRecordWriter(os.path.join(OUT, name), opts) as w:
        for feats in examples:
            ex = tf.train.Example(features=tf.train.Features(feature=feats))
            w.write(ex.SerializeToString())


def read(files, image, label, decode):
    """What tf.data reads from files (each with its compression), in order."""
    parts = [tf.data.TFRecordDataset(os.path.join(OUT, f), compression_type=c)
             for f, c in files]
    ds = parts[0]
    for p in parts[1:]:
        ds = ds.concatenate(p)
    spec = {image: decode[0], label: tf.io.FixedLenFeature([], tf.int64)}
    xs, ys = [], []
    for rec in ds:
        ex = tf.io.parse_single_example(rec, spec)
        xs.append(decode[1](ex[image]).numpy())
        ys.append(int(ex[label].numpy()))
    return xs, ys


def entry(xs, ys):
    return {"shape": list(xs[0].shape), "dtype": str(xs[0].dtype), "labels": ys,
            "sha256": [hashlib.sha256(x.astype(x.dtype.newbyteorder("<")).tobytes())
                       .hexdigest() for x in xs]}


def main():
    manifest = {"tensorflow": tf.__version__}
    encoded = (tf.io.FixedLenFeature([], tf.string), None)

    with gzip.open(os.path.join(FASHION, "t10k-images-idx3-ubyte.gz")) as f:
        x = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 28, 28, 1)[:48]
    with gzip.open(os.path.join(FASHION, "t10k-labels-idx1-ubyte.gz")) as f:
        y = np.frombuffer(f.read(), np.uint8, offset=8)[:48]
    shards = [("fmnist-00000-of-00003", None), ("fmnist-00001-of-00003", "GZIP"),
              ("fmnist-00002-of-00003", "ZLIB")]
    for s, (name, comp) in enumerate(shards):
        write(name, [{"image": feature_bytes(tf.io.encode_png(x[i]).numpy()),
                      "label": feature_int64(y[i])} for i in range(16 * s, 16 * s + 16)], comp)
    xs, ys = read(shards, "image", "label", (encoded[0], tf.io.decode_png))
    manifest["fmnist"] = entry(xs, ys)

    rng = np.random.default_rng(45)
    for name, n, h, w, c in (("rgb-jpeg", 8, 20, 24, 3), ("gray-jpeg", 4, 16, 16, 1)):
        yy, xx = np.mgrid[0:h, 0:w]
        imgs = []
        for i in range(n):
            base = np.stack([(xx * 9 + i * 20) % 256, (yy * 11 + i * 7) % 256,
                             ((xx + yy) * 5 + i * 30) % 256], -1)[..., :c]
            noise = rng.integers(0, 24, size=(h, w, c))
            imgs.append(np.clip(base + noise, 0, 255).astype(np.uint8))
        write(name + ".tfrecord",
              [{"image": feature_bytes(tf.io.encode_jpeg(im, quality=90).numpy()),
                "label": feature_int64(i % 10)} for i, im in enumerate(imgs)])
        xs, ys = read([(name + ".tfrecord", None)], "image", "label",
                      (encoded[0], tf.io.decode_jpeg))
        manifest[name] = entry(xs, ys)
        np.stack(xs).tofile(os.path.join(OUT, name + ".u8"))

    raw = rng.integers(0, 256, size=(10, 4, 5, 3), dtype=np.uint8)
    write("raw.tfrecord", [{"class": feature_int64(9 - i), "note": feature_floats(np.ones(2)),
                            "pixels": feature_bytes(raw[i].tobytes())} for i in range(10)])
    xs, ys = read([("raw.tfrecord", None)], "pixels", "class",
                  (encoded[0], lambda b: tf.reshape(tf.io.decode_raw(b, tf.uint8), [4, 5, 3])))
    manifest["raw"] = entry(xs, ys)

    fl = rng.standard_normal((6, 3, 3, 2)).astype(np.float32)
    write("float.tfrecord", [{"image": feature_floats(fl[i]), "label": feature_int64(i)}
                             for i in range(6)])
    xs, ys = read([("float.tfrecord", None)], "image", "label",
                  (tf.io.FixedLenFeature([3, 3, 2], tf.float32), lambda t: t))
    manifest["float"] = entry(xs, ys)

    with open(os.path.join(OUT, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
