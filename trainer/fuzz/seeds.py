#!/usr/bin/env python3
"""Writes the trainer's fuzz seeds into OUT/<target>/: the repo's own examples and the
forms its unit tests use, generated so that no binary seed is committed.
Usage: seeds.py OUT"""
import gzip
import io
import json
import os
import re
import struct
import sys
import zipfile
import zlib

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
FASHION = "/usr/share/datasets/fashion-mnist"


def write(out, target, name, data):
    d = os.path.join(out, target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def tfconfig(out):
    docs = [
        '{"cluster":{"worker":["localhost:12345","localhost:23456"]},"task":{"type":"worker","index":0}}',
        '{"cluster":{"worker":["localhost: 12345","localhost:23456"]},"task":{"type":"worker","index":1}}',
        '{"cluster":{"worker":["[::1]:5000","[fd00::2]:5001"]},"task":{"type":"worker","index":1}}',
        '{"cluster":{"chief":["c:1"],"worker":["w0:2","w1:3"]},"task":{"type":"worker","index":1}}',
        '{"cluster":{"chief":["c:1"]},"task":{"type":"chief"}}',
        '{"cluster":{"worker":["mnist-worker-0.mnist-worker.default.svc:2222",'
        '"mnist-worker-1.mnist-worker.default.svc:2222"]},"task":{"type":"worker","index":0}}',
        '{"cluster":{"worker":["a:1"],"ps":["p:2"]},"task":{"type":"worker","index":0}}',
    ]
    for i, d in enumerate(docs):
        # The first byte picks the --index override: 0 = none.
        write(out, "tfconfig", "seed-%d" % i, b"\x00" + d.encode())
    write(out, "tfconfig", "seed-index1", b"\x02" + docs[0].encode())


def builtin_specs():
    """The built-in models' JSON, read from the string literals of model.c."""
    src = open(os.path.join(ROOT, "trainer/src/model.c")).read()
    block = src[src.index("builtin_specs[] = {"):]
    block = block[:block.index("};")]
    specs = []
    for group in re.split(r"\n\s*\n", block):
        lits = re.findall(r'"((?:[^"\\]|\\.)*)"', group)
        if lits:
            specs.append("".join(lits).replace('\\"', '"'))
    return specs


def model(out):
    for i, s in enumerate(builtin_specs()):
        write(out, "model", "builtin-%d.json" % i, s)
    write(out, "model", "mlp.yaml",
          "input_shape: [28, 28]\nlayers:\n  - type: Flatten\n"
          "  - {type: Dense, units: 64, activation: relu, kernel_regularizer: {l2: 0.0001}}\n"
          "  - type: Dropout\n    rate: 0.1\n  - {type: Dense, units: 10, activation: softmax}\n")
    # Regressions: sizes that overflowed (now refused with a message).
    write(out, "model", "regress-flatten-2^60.json",
          '{"input_shape":[1048576,1048576,1048576],"layers":[{"type":"Flatten"},'
          '{"type":"Dense","units":2}]}')
    write(out, "model", "regress-conv-params.json",
          '{"input_shape":[4096,4096,64],"layers":[{"type":"Conv2D","filters":65536,'
          '"kernel_size":3},{"type":"Flatten"},{"type":"Dense","units":2}]}')
    write(out, "model", "cnn.yaml",
          "layers:\n  - {type: Input, shape: [8, 8, 2]}\n"
          "  - {type: Conv2D, filters: 3, kernel_size: [3, 2], strides: 2, padding: same}\n"
          "  - {type: MaxPooling2D, pool_size: 2}\n  - {type: Reshape, target_shape: [6]}\n"
          "  - {type: Dense, units: 2}\n")
    write(out, "model", "batchnorm.yaml",
          "layers:\n  - {type: Input, shape: [6, 6, 3]}\n"
          "  - {type: Conv2D, filters: 4, kernel_size: 3, use_bias: false}\n"
          "  - {type: BatchNormalization, momentum: 0.9, epsilon: 0.01, center: false}\n"
          "  - {type: Flatten}\n  - {type: BatchNormalization, axis: [1], scale: false}\n"
          "  - {type: Dense, units: 2}\n")


def keras(out):
    """The Keras model.to_json() references (both dialects), compact, as the trainer's
    tests use them."""
    ref = os.path.join(ROOT, "trainer/tests/reference/keras")
    for name in sorted(os.listdir(ref)):
        if name.endswith(".json"):
            with open(os.path.join(ref, name)) as f:
                doc = json.load(f)
            write(out, "keras", name, json.dumps(doc, separators=(",", ":")))


def idx(out):
    def header(ndims, dims):
        return bytes([0, 0, 8, ndims]) + b"".join(struct.pack(">I", d) for d in dims)

    imgs = header(3, [2, 4, 3]) + bytes(range(24))
    labels = header(1, [2]) + bytes([3, 7])
    write(out, "idx", "images.raw", imgs)
    # Regression: a header announcing 2 GB over a 10-byte body (allocated up front once).
    write(out, "idx", "regress-huge-header.raw", header(3, [60000, 200, 170]) + bytes(10))
    write(out, "idx", "labels.raw", labels)
    write(out, "idx", "images.gz", gzip.compress(imgs))
    write(out, "idx", "labels.gz", gzip.compress(labels))
    # The head of the real data set: 3 images and 3 labels, raw and gzip.
    for kind, nd, item in (("images", 3, 784), ("labels", 1, 1)):
        path = os.path.join(FASHION, "t10k-%s-idx%d-ubyte.gz" % (kind, nd))
        if not os.path.exists(path):
            continue
        with gzip.open(path) as f:
            head = f.read(4 + 4 * nd)
            body = f.read(3 * item)
        head = head[:4] + struct.pack(">I", 3) + head[8:]
        write(out, "idx", "fashion-%s.raw" % kind, head + body)
        write(out, "idx", "fashion-%s.gz" % kind, gzip.compress(head + body))


def npy_bytes(descr, shape, body, fortran="False", version=1):
    """A .npy file as NumPy's format module writes it (header padded to 64 bytes)."""
    text = "{'descr': '%s', 'fortran_order': %s, 'shape': %s, }" % (descr, fortran, shape)
    pre = 10 if version == 1 else 12
    hlen = (pre + len(text) + 1 + 63) // 64 * 64 - pre
    text = text.ljust(hlen - 1) + "\n"
    size = struct.pack("<H", hlen) if version == 1 else struct.pack("<I", hlen)
    return b"\x93NUMPY" + bytes([version, 0]) + size + text.encode() + body


def npy(out):
    arrays = {
        "u1-3d": npy_bytes("|u1", "(2, 3, 2)", bytes(range(12))),
        "f4-4d": npy_bytes("<f4", "(1, 2, 2, 3)", struct.pack("<12f", *range(12))),
        "f8-v2": npy_bytes("<f8", "(2, 1, 1)", struct.pack("<2d", 0.5, 1.0), version=2),
        "i8-labels": npy_bytes("<i8", "(3,)", struct.pack("<3q", 0, 9, 4)),
        "i4-n1": npy_bytes("<i4", "(2, 1)", struct.pack("<2i", 1, 2)),
        "fortran": npy_bytes("<f4", "(2, 2)", bytes(16), fortran="True"),
        # Regression guard: a shape of 19 GB over a few bytes of data.
        "huge-shape": npy_bytes("<f8", "(60000, 200, 200)", bytes(13)),
    }
    for name, data in arrays.items():
        write(out, "npy", name + ".npy", data)
    for compress in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w", compress) as z:
            z.writestr("x.npy", arrays["u1-3d"])
            z.writestr("y.npy", arrays["i8-labels"])
        write(out, "npy", "savez-%d.npz" % compress, buf.getvalue())


def tfrecord(out):
    """TensorFlow's reference files (trainer/tests/reference/tfrecord), each after the
    mode byte fuzz-tfrecord reads first: 1 for the raw and float ones (--image-shape),
    0 for PNG and JPEG; and a raw file's first Example alone."""
    ref = os.path.join(ROOT, "trainer/tests/reference/tfrecord")
    for name, mode in (("raw.tfrecord", 1), ("float.tfrecord", 1), ("gray-jpeg.tfrecord", 0),
                       ("fmnist-00001-of-00003", 0), ("fmnist-00002-of-00003", 0)):
        with open(os.path.join(ref, name), "rb") as f:
            body = f.read()
        write(out, "tfrecord", name, bytes([mode]) + body)
    with open(os.path.join(ref, "raw.tfrecord"), "rb") as f:
        head = f.read(12)
        length = struct.unpack("<Q", head[:8])[0]
        write(out, "tfrecord", "example", b"\x01" + f.read(length))
    # Regression (UBSan, clang): an unpacked int64 label, whose field has no bytes.
    write(out, "tfrecord", "regress-unpacked-int64",
          b"\x00\x0a\x0f\x0a\x0d\x0a\x05label\x12\x04\x1a\x02\x08\x07")


def ckpt_file(sig, world, fields, params, opt):
    h = bytearray(360)
    h[0:8] = b"KTCKPT\x00\n"
    h[8:16] = struct.pack("<II", 1, 360)
    h[16:16 + len(sig)] = sig
    h[272:280] = struct.pack("<II", world, 0)
    h[280:360] = struct.pack("<10Q", *fields, len(params), len(opt))
    body = bytes(h) + params + opt
    return body + struct.pack("<I", zlib.crc32(body))


def ckpt(out):
    # The fuzz target loads a model "fuzz" of 64 parameter and 32 optimizer bytes.
    p, o = bytes(range(64)), bytes(range(100, 132))
    write(out, "ckpt", "valid", ckpt_file(b"fuzz", 2, (1, 5, 75, 42, 7, 1, 320, 75), p, o))
    write(out, "ckpt", "no-opt", ckpt_file(b"fuzz", 1, (0, 1, 1, 1, 1, 0, 64, 1), p, b""))
    write(out, "ckpt", "other-model", ckpt_file(b"sequential in=28x28|params=16", 2,
                                                (0, 0, 2, 1, 1, 0, 0, 2), p[:16], b""))


def hello(kind, world, rank, batch, sig, dataset):
    """A HELLO (kind 1) or CHALLENGE (2) of generation 1 without state, whose ring is
    the whole cluster of `world` workers (the members bitmap, net.h), of incarnation 1."""
    s, d = sig.encode(), dataset.encode()
    bits = bytearray((world + 7) // 8)
    for i in range(world):
        bits[i // 8] |= 1 << (i % 8)
    return (b"KTH1" + bytes([kind]) + bytes(range(32)) + struct.pack("<IIQ", world, rank, batch)
            + struct.pack("<H", len(s)) + s + struct.pack("<H", len(d)) + d
            + struct.pack("<IBH", 1, 0, world) + bytes(bits) + struct.pack("<Q", 1))


def handshake(out):
    sig = "sequential in=28x28|reshape(28x28x1)|conv2d(32,3x3,s1x1,valid,relu,l2=0)|flatten" \
          "|dense(128,relu,l2=0)|dense(10,linear,l2=0)|params=2770634"
    write(out, "handshake", "hello", hello(1, 2, 1, 128, sig, "fashion-mnist"))
    write(out, "handshake", "challenge", hello(2, 4, 0, 256, "cnn", "mnist") + bytes(32))
    write(out, "handshake", "empty-strings", hello(1, 1, 0, 0, "", ""))


def main():
    out = sys.argv[1]
    for gen in (tfconfig, model, keras, idx, npy, tfrecord, ckpt, handshake):
        gen(out)


if __name__ == "__main__":
    main()
