#!/usr/bin/env bash
# TFRecord files too large for --data-cache-mib are streamed (docs/design.md "Models and
# data"; here the cache is 0): memory does not grow with the data. Real TensorFlow writes
# 256 random 64x64x3 raw-uint8 examples (3 MiB of records); the same records repeated
# make a 200 MB set of 4 shards. The trainer's peak RSS training on the 200 MB set stays
# within a margin of its peak on the 3 MiB one: what it keeps per example is 20 bytes of
# index and label, and a record is read when its example is wanted. The same records
# GZIP-compressed end with the weights hash of the streamed file, the 3 MiB and the 200
# MB set's shards, streamed in bounded memory too (inflated from an access point every
# 2 MiB, inflater.h), with no budget and with the shuffle buffer's records read ahead
# within --data-cache-mib 8. A file truncated under a running job exits 3 naming the
# file and the record's offset.
set -uo pipefail # no -e: a failed check is reported (not ok) and the test goes on
source e2e/lib/tap.sh
source trainer/tests/lib.sh
BIN=${TRAINER_OPT:-${BUILD:-build}/bin/kubetrain-trainer}
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
if ! "$PY" -c 'import tensorflow' 2>/dev/null; then
  tap_skip "TFRecord streaming" "no TensorFlow in $PY (bash bench/pyvenv.sh venv-tf makes it)"
  tap_done; exit
fi

TF_CPP_MIN_LOG_LEVEL=3 "$PY" - "$tmp" <<'PY' 2>"$tmp/tf.err" ||
import gzip, sys
import numpy as np
import tensorflow as tf
out = sys.argv[1]
x = np.random.default_rng(7).integers(0, 256, (256, 64, 64, 3), dtype=np.uint8)
with tf.io.TFRecordWriter(f"{out}/unit") as w:
    for i in range(len(x)):
        w.write(tf.train.Example(features=tf.train.Features(feature={
            "image": tf.train.Feature(bytes_list=tf.train.BytesList(value=[x[i].tobytes()])),
            "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[i % 10]))}))
            .SerializeToString())
unit = open(f"{out}/unit", "rb").read()
with open(f"{out}/unit.gz", "wb") as f:
    f.write(gzip.compress(unit))
for s in range(4):  # 4 shards of 16 copies: 200 MB, and the same GZIP-compressed
    with open(f"{out}/big-{s:05d}-of-00004", "wb") as f:
        for _ in range(16):
            f.write(unit)
    with open(f"{out}/gz-{s:05d}-of-00004", "wb") as f:
        f.write(gzip.compress(unit * 16, compresslevel=1))
PY
  { tap_fail "TensorFlow writes the TFRecords" "$(tail -3 "$tmp/tf.err")"; tap_done; exit; }

echo '{"input_shape": [64, 64, 3],
  "layers": [{"type": "Flatten"}, {"type": "Dense", "units": 10}]}' >"$tmp/model.json"
# --data-cache-mib 0: streamed, whatever the size (the default holds up to 1024 MiB).
args=(--model "$tmp/model.json" --image-shape "64,64,3" --epochs 1 --steps-per-epoch 40
      --per-worker-batch 32 --seed 7 --print-weights-hash --data-cache-mib 0)

small=$(peak_rss small "${args[@]}" --data "tfrecord:$tmp/unit")
big=$(peak_rss big "${args[@]}" --data "tfrecord:$tmp/big-*")
data_kib=$(( $(cat "$tmp"/big-* | wc -c) / 1024 ))
# The margin: the 200 MB set's own cost is its index (16,384 examples x 20 bytes, 320
# KiB), the read window of the pass at open (1 MiB) and the shuffle's order (64 KiB);
# 32 MiB leaves room for the allocator and is a sixth of the data, which a source read
# whole into memory adds entirely.
margin=$((32 * 1024))
if [[ $(cat "$tmp/small.rc") == 0 && $(cat "$tmp/big.rc") == 0 && -n $small && -n $big &&
      $big -lt $((small + margin)) ]]; then
  tap_ok "peak RSS streaming $((data_kib / 1024)) MiB of TFRecords: $((big / 1024)) MiB (3 MiB\
 of them: $((small / 1024)) MiB; bound: + $((margin / 1024)) MiB)"
else
  tap_fail "peak RSS streaming 200 MB stays within 32 MiB of 3 MiB's" \
    "big ${big:-?} KiB (rc $(cat "$tmp/big.rc")), small ${small:-?} KiB (rc $(cat \
    "$tmp/small.rc")): $(tail -2 "$tmp/big.err")"
fi

run_trainer unitgz "${args[@]}" --data "tfrecord:$tmp/unit.gz"
h1=$(run_hash small) h2=$(run_hash unitgz)
if [[ ${#h1} -eq 64 && $h1 == "$h2" ]]; then
  tap_ok "the same records plain and GZIP-compressed end with the same weights hash"
else tap_fail "plain == GZIP" "'$h1' vs '$h2': $(tail -2 "$tmp/unitgz.err")"; fi

# The 200 MB set GZIP-compressed: streamed as the uncompressed one is, within the same
# margin (its access points add 32 KiB per 2 MiB of records: 3 MiB), the same weights.
gz=$(peak_rss gz "${args[@]}" --data "tfrecord:$tmp/gz-*")
h1=$(run_hash big) h2=$(run_hash gz)
if [[ $(cat "$tmp/gz.rc") == 0 && -n $gz && $gz -lt $((small + margin)) && ${#h1} -eq 64 &&
      $h1 == "$h2" ]]; then
  tap_ok "peak RSS streaming $((data_kib / 1024)) MiB of GZIP TFRecords: $((gz / 1024)) MiB,\
 the weights hash of the uncompressed files"
else
  tap_fail "streaming 200 MB of GZIP TFRecords stays within 32 MiB of 3 MiB's, same weights" \
    "gz ${gz:-?} KiB (rc $(cat "$tmp/gz.rc")), small ${small:-?} KiB, '$h1' vs '$h2': $(tail -2 \
    "$tmp/gz.err")"
fi
# And with a budget: the shuffle buffer's records inflated in order as they enter it.
run_trainer gzahead "${args[@]}" --data-cache-mib 8 --data "tfrecord:$tmp/gz-*"
h2=$(run_hash gzahead)
ahead=$(grep -o '[0-9]* of the [0-9]* examples read from object storage or compressed files' \
  "$tmp/gzahead.err")
if [[ $h1 == "$h2" && -n $ahead && ${ahead%% *} -gt 0 ]]; then
  tap_ok "GZIP read ahead within --data-cache-mib 8 (${ahead%% read*} held when read): the\
 same weights"
else tap_fail "GZIP read ahead within --data-cache-mib 8: some held, the same weights" \
  "'$h1' vs '$h2', '${ahead:-}': $(tail -2 "$tmp/gzahead.err")"; fi

# A shard truncated while the job trains: the prefetch thread's next read of it fails.
# The job starts on the 200 MB set (its pass at open reads it all); once its first step
# is logged, every shard is cut to a few bytes, and the steps still to come need records.
"$BIN" "${args[@]}" --steps-per-epoch 2000 --metrics-file "$tmp/cut.jsonl" \
  --data "tfrecord:$tmp/big-*" >"$tmp/cut.out" 2>"$tmp/cut.err" &
pid=$!
first_step "$pid" "$tmp/cut.jsonl"
for f in "$tmp"/big-*; do truncate -s 100 "$f"; done
wait "$pid"
rc=$?
err=$(grep 'the file changed since the trainer opened it' "$tmp/cut.err")
if [[ $rc -eq 3 && $err == *"$tmp/big-0000"*": record at byte "* ]]; then
  tap_ok "a shard truncated under a running job: exit 3 ($err)"
else tap_fail "a shard truncated under a running job: exit 3 naming it" \
  "rc=$rc: $(tail -3 "$tmp/cut.err")"; fi
tap_done
