#!/usr/bin/env bash
# TFRecord data through the real binary (the optimised build). Real TensorFlow writes
# the first 4,000 images of Fashion-MNIST's training set as PNG TFRecords
# (tf.io.encode_png, tf.train.Example, tf.io.TFRecordWriter, 4 shards of which one GZIP
# and one ZLIB) and NumPy the same 4,000 as IDX files; one worker (the TFRecords held
# decoded, and streamed with --data-cache-mib 0) and `launch --workers 2`
# train to the weights hash of those IDX files (the same examples in the same order give
# the same training, docs/design.md "The example interface"). A subset, because encoding
# all 60,000 as PNG took TensorFlow minutes on 2 cores. Bad
# input each exits 3 naming the file, the record's byte offset and the feature: a flipped
# byte (CRC), a truncated last record, a missing and a mistyped feature, a corrupt PNG,
# a pattern that matches no file. That the examples are those tf.data reads, in its
# order: test-tfrecord.c on the references TensorFlow wrote.
set -uo pipefail # no -e: a failed check is reported (not ok) and the test goes on
source e2e/lib/tap.sh
source trainer/tests/lib.sh
BIN=${TRAINER_OPT:-${BUILD:-build}/bin/kubetrain-trainer}
DATA=/usr/share/datasets/fashion-mnist
PY=${KT_CACHE:-$HOME/.cache/kubetrain}/venv-tf/bin/python
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export KUBETRAIN_TERMINATION_FILE=$tmp/termination OPENBLAS_NUM_THREADS=1
unset TF_CONFIG KUBETRAIN_DATA KUBETRAIN_EVAL_DATA KUBETRAIN_DATA_DIR KUBETRAIN_DATASET \
  KUBETRAIN_IMAGE_FEATURE KUBETRAIN_LABEL_FEATURE KUBETRAIN_IMAGE_SHAPE

if [[ ! -x $BIN ]]; then
  tap_fail "the optimised trainer is built" "missing $BIN (make test builds it)"
  tap_done; exit
fi
skip_without_data "TFRecord data sources" "$DATA"
if ! py_has "$PY" tensorflow; then
  tap_skip "TFRecord data sources" "no TensorFlow in $PY (bash bench/pyvenv.sh venv-tf makes it)"
  tap_done; exit
fi

mkdir "$tmp/idx"
TF_CPP_MIN_LOG_LEVEL=3 "$PY" - "$DATA" "$tmp" <<'PY' 2>"$tmp/tf.err" ||
import gzip, sys
import numpy as np
import tensorflow as tf
src, out = sys.argv[1:3]
def idx(name, offset):
    with gzip.open(f"{src}/{name}.gz") as f:
        return np.frombuffer(f.read(), np.uint8, offset=offset)
N = 4000
x = idx("train-images-idx3-ubyte", 16).reshape(-1, 28, 28, 1)[:N]
y = idx("train-labels-idx1-ubyte", 8)[:N]
def write_idx(path, a):  # IDX: 0, 0, type 8 (uint8), rank; each dimension big-endian
    with open(path, "wb") as f:
        f.write(bytes([0, 0, 8, a.ndim]) + b"".join(d.to_bytes(4, "big") for d in a.shape))
        f.write(a.tobytes())
write_idx(f"{out}/idx/train-images-idx3-ubyte", x.reshape(-1, 28, 28))
write_idx(f"{out}/idx/train-labels-idx1-ubyte", y)
tx = idx("t10k-images-idx3-ubyte", 16).reshape(-1, 28, 28)[:1000]
write_idx(f"{out}/idx/t10k-images-idx3-ubyte", tx)
write_idx(f"{out}/idx/t10k-labels-idx1-ubyte", idx("t10k-labels-idx1-ubyte", 8)[:1000])
png = tf.data.Dataset.from_tensor_slices(x).map(tf.io.encode_png, num_parallel_calls=4)
def example(img, label, name="image"):
    return tf.train.Example(features=tf.train.Features(feature={
        name: tf.train.Feature(bytes_list=tf.train.BytesList(value=[img])),
        "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[int(label)]))}))
def writer(path, comp=None):
    return tf.io.TFRecordWriter(path, tf.io.TFRecordOptions(compression_type=comp))
shards, per = 4, len(y) // 4
comps = [None, "GZIP", "ZLIB", None]
ws = [writer(f"{out}/train-{s:05d}-of-{shards:05d}", comps[s]) for s in range(shards)]
for i, img in enumerate(png.as_numpy_iterator()):
    ws[i // per].write(example(img, y[i]).SerializeToString())
for w in ws:
    w.close()
# Small files for the bad cases: 5 examples each.
first = [tf.io.encode_png(x[i]).numpy() for i in range(5)]
with writer(f"{out}/small") as w:
    for i in range(5):
        w.write(example(first[i], y[i]).SerializeToString())
with writer(f"{out}/renamed") as w:
    for i in range(5):
        w.write(example(first[i], y[i], "img").SerializeToString())
with writer(f"{out}/mistyped") as w:
    for i in range(5):
        ex = example(first[i], y[i])
        ex.features.feature["label"].CopyFrom(
            tf.train.Feature(float_list=tf.train.FloatList(value=[float(y[i])])))
        w.write(ex.SerializeToString())
with writer(f"{out}/badpng") as w:
    for i in range(5):
        b = bytearray(first[i])
        if i == 3:
            b[len(b) // 2] ^= 0xff  # inside IDAT: its CRC no longer matches
        w.write(example(bytes(b), y[i]).SerializeToString())
PY
  { tap_fail "TensorFlow writes the TFRecords" "$(tail -3 "$tmp/tf.err")"; tap_done; exit; }

short=(--epochs 1 --steps-per-epoch 3 --per-worker-batch 16 --seed 7 --print-weights-hash)

run_trainer idx "${short[@]}" --data "idx:$tmp/idx"
run_trainer tfr "${short[@]}" --data "tfrecord:$tmp/train-*"
h1=$(run_hash idx) h2=$(run_hash tfr)
if [[ ${#h1} -eq 64 && $h1 == "$h2" ]]; then
  tap_ok "PNG TFRecords (4 shards: plain, GZIP, ZLIB) end with the weights hash of idx:DIR"
else tap_fail "PNG TFRecords == idx:DIR" "'$h2' vs '$h1': $(tail -3 "$tmp/tfr.err")"; fi

# 3 MiB decoded fit the default --data-cache-mib: held, each PNG decoded once; with 0 the
# same files stream, each PNG decoded when read. The same examples, so the same weights.
run_trainer streamed "${short[@]}" --data-cache-mib 0 --data "tfrecord:$tmp/train-*"
h4=$(run_hash streamed)
held=$(grep -o 'held in memory, decoded once (--data-cache-mib 1024)' "$tmp/tfr.err")
streamed=$(grep -o 'streamed, decoded when read (--data-cache-mib 0)' "$tmp/streamed.err")
if [[ ${#h4} -eq 64 && $h4 == "$h2" && -n $held && -n $streamed ]]; then
  tap_ok "PNG TFRecords held decoded (the default cache) and streamed (--data-cache-mib 0)\
 end with the same weights hash"
else tap_fail "held == streamed" "'$h2' ('$held') vs '$h4' ('$streamed'):\
 $(tail -3 "$tmp/streamed.err")"; fi

# Two patterns in the order given make the same sequence as one glob's sorted matches.
run_trainer two "${short[@]}" --data "tfrecord:$tmp/train-0000[01]-*,$tmp/train-0000[23]-*"
h3=$(run_hash two)
if [[ -n $h1 && $h3 == "$h1" ]]; then tap_ok "tfrecord:PATTERN,PATTERN: the same sequence"
else tap_fail "tfrecord:PATTERN,PATTERN" "'$h3' vs '$h1': $(tail -3 "$tmp/two.err")"; fi

two=(launch --workers 2 --epochs 1 --steps-per-epoch 3 --per-worker-batch 8 --seed 7
     --print-weights-hash)
run_trainer idx2 "${two[@]}" --data "idx:$tmp/idx"
run_trainer tfr2 "${two[@]}" --data "tfrecord:$tmp/train-*"
h1=$(run_hash idx2) h2=$(run_hash tfr2)
if [[ ${#h1} -eq 64 && $h1 == "$h2" && $(grep -c weights-sha256 "$tmp/tfr2.out") -eq 2 ]]; then
  tap_ok "launch --workers 2: PNG TFRecords end with the weights hash of idx:DIR on both ranks"
else tap_fail "2 workers tfrecord == idx" "'$h2' vs '$h1': $(tail -3 "$tmp/tfr2.err")"; fi

one=(--epochs 1 --steps-per-epoch 1 --per-worker-batch 4 --seed 7)
# Offsets: each record of small is 16 bytes of framing and an Example; find the 3rd's.
off3=$(python3 - "$tmp/small" <<'PY'
import struct, sys
b, pos = open(sys.argv[1], "rb").read(), 0
for _ in range(2):
    pos += 16 + struct.unpack("<Q", b[pos:pos + 8])[0]
print(pos)
PY
)
cp "$tmp/small" "$tmp/flipped"
printf '\x55' | dd of="$tmp/flipped" bs=1 seek=$((off3 + 40)) conv=notrunc status=none
expect_exit "flipped byte" 3 "$tmp/flipped: record at byte $off3: corrupt record: the data's" \
  "${one[@]}" --data "tfrecord:$tmp/flipped"
size=$(stat -c %s "$tmp/small")
head -c $((size - 3)) "$tmp/small" >"$tmp/truncated"
expect_exit "truncated last record" 3 "$tmp/truncated: record at byte" \
  "${one[@]}" --data "tfrecord:$tmp/truncated"
grep -q "truncated record" "$tmp/truncated last record.err" &&
  tap_ok "truncated last record: said so" || tap_fail "truncated last record: said so" \
  "$(cat "$tmp/truncated last record.err")"
expect_exit "missing feature" 3 \
  "$tmp/renamed: record at byte 0: feature 'image': missing (name the image's feature" \
  "${one[@]}" --data "tfrecord:$tmp/renamed"
run_trainer renamed "${short[@]}" --data "tfrecord:$tmp/renamed" --image-feature img \
  --per-worker-batch 1
if [[ $(cat "$tmp/renamed.rc") == 0 ]]; then tap_ok "--image-feature img reads it"
else tap_fail "--image-feature img reads it" "$(tail -2 "$tmp/renamed.err")"; fi
expect_exit "mistyped feature" 3 \
  "$tmp/mistyped: record at byte 0: feature 'label': a float_list of 1 values (expected an int64" \
  "${one[@]}" --data "tfrecord:$tmp/mistyped"
expect_exit "corrupt PNG" 3 "$tmp/badpng: record at byte" \
  "${one[@]}" --data "tfrecord:$tmp/badpng"
grep -q "feature 'image': corrupt PNG" "$tmp/corrupt PNG.err" &&
  tap_ok "corrupt PNG: named the feature" || tap_fail "corrupt PNG: named the feature" \
  "$(cat "$tmp/corrupt PNG.err")"
expect_exit "empty glob" 3 "tfrecord: '$tmp/nothing-*' matches no file" \
  "${one[@]}" --data "tfrecord:$tmp/train-*,$tmp/nothing-*"
echo '{"input_shape": [32, 32, 3],
  "layers": [{"type": "Flatten"}, {"type": "Dense", "units": 10}]}' >"$tmp/rgb32.json"
expect_exit "another shape than the model's input" 3 \
  "feature 'image': 28x28x1 images, but the model's input_shape is [32, 32, 3]" \
  "${one[@]}" --data "tfrecord:$tmp/small" --model "$tmp/rgb32.json"
expect_exit "tfrecord without --eval-data" 2 "--eval: expected --eval-data SOURCE" \
  "${one[@]}" --eval --data "tfrecord:$tmp/small"
expect_exit "bad --image-shape" 2 "--image-shape: expected H,W,C" \
  "${one[@]}" --data "tfrecord:$tmp/small" --image-shape 28,28
tap_done
