#!/usr/bin/env bash
# File sharding (--shard-policy file, tf.data's AutoShardPolicy.FILE) through the real
# binary (the optimised build) under launch: five TFRecord files of 30, 50, 70, 90 and
# 111 Fashion-MNIST images (raw bytes, written here by a few lines of Python), so that the
# two workers' streams differ in length. Worker 0 reads files 0, 2, 4 (211 examples) and
# worker 1 files 1, 3 (140); six workers for five files exit 3 naming both counts, as
# TensorFlow raises; an idx source (one file) for two workers exits 3; --steps-per-epoch
# 0 exits 2 (the workers' passes differ in length). A SIGKILLed worker, the group
# restarted from the newest checkpoint and a live recovery's replacement, each end with
# the uninterrupted run's weights hash: every rank resumes at its own place in its own
# stream, not at the chief's. A shrink from 3 workers to 2 re-reads each survivor's files.
set -uo pipefail # no -e: a failed check is reported (not ok) and the test goes on
source e2e/lib/tap.sh
source trainer/tests/lib.sh
BIN=${TRAINER_OPT:-${BUILD:-build}/bin/kubetrain-trainer}
DATA=/usr/share/datasets/fashion-mnist
tmp=$(mktemp -d)
lpid=
cleanup() {
  [[ -n $lpid ]] && { kill -9 "$lpid" 2>/dev/null; pkill -9 -P "$lpid" 2>/dev/null; }
  rm -rf "$tmp"
}
trap cleanup EXIT
export KUBETRAIN_TERMINATION_FILE=$tmp/termination OPENBLAS_NUM_THREADS=1
unset TF_CONFIG KUBETRAIN_SECRET KUBETRAIN_SECRET_FILE KUBETRAIN_DATA KUBETRAIN_DATA_DIR \
  KUBETRAIN_DATASET KUBETRAIN_SHARD_POLICY

if [[ ! -x $BIN ]]; then
  tap_fail "the optimised trainer is built" "missing $BIN (make test builds it)"
  tap_done; exit
fi
skip_without_data "file sharding" "$DATA"

python3 - "$DATA" "$tmp" <<'PY' || { tap_fail "write the TFRecord files"; tap_done; exit; }
import gzip, struct, sys
src, out = sys.argv[1:3]
with gzip.open(f"{src}/train-images-idx3-ubyte.gz") as f:
    x = f.read()[16:]
with gzip.open(f"{src}/train-labels-idx1-ubyte.gz") as f:
    y = f.read()[8:]
POLY = 0x82F63B78  # CRC-32C, reflected
TABLE = []
for i in range(256):
    c = i
    for _ in range(8):
        c = (c >> 1) ^ POLY if c & 1 else c >> 1
    TABLE.append(c)
def masked_crc(b):
    c = 0xFFFFFFFF
    for ch in b:
        c = TABLE[(c ^ ch) & 0xFF] ^ (c >> 8)
    c ^= 0xFFFFFFFF
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF
def varint(v):
    o = b""
    while True:
        if v < 0x80:
            return o + bytes([v])
        o += bytes([v & 0x7F | 0x80])
        v >>= 7
def field(num, payload):  # a length-delimited protobuf field
    return varint(num << 3 | 2) + varint(len(payload)) + payload
def feature(key, feat):
    return field(1, field(1, key.encode()) + field(2, feat))
def example(img, label):  # tf.train.Example: image as bytes_list, label as int64_list
    feats = feature("image", field(1, field(1, img)))
    feats += feature("label", field(3, field(1, varint(label))))
    return field(1, feats)
at = 0
for s, n in enumerate([30, 50, 70, 90, 111]):
    with open(f"{out}/train-{s:05d}-of-00005", "wb") as f:
        for i in range(at, at + n):
            r = example(x[i * 784:(i + 1) * 784], y[i])
            head = struct.pack("<Q", len(r))
            f.write(head + struct.pack("<I", masked_crc(head)))
            f.write(r + struct.pack("<I", masked_crc(r)))
    at += n
PY

run=(--model mlp --shard-policy file --data "tfrecord:$tmp/train-*" --image-shape "28,28,1"
     --epochs 2 --steps-per-epoch 200 --per-worker-batch 16 --seed 5 --print-weights-hash
     --checkpoint-every-steps 20)
# the log of launch NAME without the progress lines
log_of() { grep -v '^\[worker .\] [0-9E]' "$tmp/$1.err"; }

# --- each worker reads exactly its files --------------------------------------------
"$BIN" launch --workers 2 "${run[@]}" --checkpoint-dir "$tmp/ck-ref" >"$tmp/ref.out" \
  2>"$tmp/ref.err"
want=$(hashes "$tmp/ref.out")
if [[ $? -eq 0 && $(wc -l <<<"$want") -eq 1 && ${#want} -eq 64 ]]; then
  tap_ok "two workers train with file sharding (the reference hash)"
else tap_fail "two workers train with file sharding" "$(log_of ref | tail -5)"; fi
for w in "0:0, 2, 4:211" "1:1, 3:140"; do
  IFS=: read -r i files n <<<"$w"
  line="file sharding: worker $i of 2 reads files [$files] of 5 (by number from 0, in name"
  line+=" order): $n examples"
  if log_of ref | grep -qF "[worker $i] kubetrain-trainer[rank $i]: $line"; then
    tap_ok "worker $i reads files $files: $n examples"
  else tap_fail "worker $i reads files $files ($n examples)" "$(log_of ref | grep -i shard)"; fi
done

# --- refused ------------------------------------------------------------------------
# launch_exit NAME CODE NEEDLE ARGS...: launch exits CODE, a worker's log line holding NEEDLE
launch_exit() {
  local name=$1 code=$2 needle=$3 rc; shift 3
  "$BIN" launch "$@" >"$tmp/$name.out" 2>"$tmp/$name.err"; rc=$?
  if [[ $rc -eq $code ]] && grep -qF -- "$needle" "$tmp/$name.err"; then
    tap_ok "$name: exit $code ($(grep -F -m1 -- "$needle" "$tmp/$name.err"))"
  else tap_fail "$name: exit $code with '$needle'" "rc=$rc: $(log_of "$name" | tail -4)"; fi
}
one=(--model mlp --shard-policy file --image-shape "28,28,1" --epochs 1 --steps-per-epoch 1
     --per-worker-batch 4)
launch_exit "six workers, five files" 3 \
  "tfrecord:$tmp/train-*: 5 files for 6 workers (--shard-policy file gives each worker whole" \
  --workers 6 "${one[@]}" --data "tfrecord:$tmp/train-*"
launch_exit "an idx source for two workers" 3 \
  "idx:$DATA: 1 file for 2 workers (--shard-policy file gives each worker whole files" \
  --workers 2 "${one[@]}" --data "idx:$DATA"
launch_exit "--steps-per-epoch 0" 2 \
  "--steps-per-epoch 0 with --shard-policy file: the workers' files hold different numbers" \
  --workers 2 "${one[@]}" --data "tfrecord:$tmp/train-*" --steps-per-epoch 0

# --- exact resume ---------------------------------------------------------------------
worker_pid() { # err index: the newest pid the launcher reported for worker i
  sed -n "s/.*launch: worker $2: pid \([0-9]*\),.*/\1/p" "$1" | tail -1
}
# killed NAME DESC ARGS...: launch with ARGS, SIGKILL of worker 1 once the checkpoint of
# step 60 is written (its stream has wrapped: 140 examples, 16 a step), the hash compared.
killed() {
  local name=$1 desc=$2 rc; shift 2
  "$BIN" launch --workers 2 "${run[@]}" --checkpoint-dir "$tmp/ck-$name" "$@" \
    >"$tmp/$name.out" 2>"$tmp/$name.err" &
  lpid=$!
  wait_for 120 test -e "$tmp/ck-$name/ckpt-60.kt"
  kill -9 "$(worker_pid "$tmp/$name.err" 1)" 2>/dev/null
  wait "$lpid"; rc=$?; lpid=
  local got spawns
  got=$(hashes "$tmp/$name.out")
  spawns=$(grep -c "launch: worker 1: pid " "$tmp/$name.err")
  if [[ $rc -eq 0 && $got == "$want" && $spawns -eq 2 ]]; then
    tap_ok "$desc: the uninterrupted run's weights hash"
  else tap_fail "$desc" "rc=$rc, '$got' vs '$want', $spawns starts: $(log_of "$name" | tail -6)"
  fi
}
killed restart "SIGKILL of worker 1, the group restarted from the checkpoint" \
  --recovery-timeout 0 --max-restarts 1
killed live "SIGKILL of worker 1, a live recovery" --recovery-timeout 30

# --- a shrink -----------------------------------------------------------------------
# Three workers (files [0, 3], [1, 4], [2]); worker 2 killed with no restart left and
# --min-workers 2: the two others go on as ranks 0 and 1 of 2, each reading the files of
# its new rank.
"$BIN" launch --workers 3 --max-restarts 0 --min-workers 2 "${run[@]}" --recovery-timeout 30 \
  --checkpoint-dir "$tmp/ck-shrink" >"$tmp/shrink.out" 2>"$tmp/shrink.err" &
lpid=$!
wait_for 120 test -e "$tmp/ck-shrink/ckpt-60.kt"
kill -9 "$(worker_pid "$tmp/shrink.err" 2)" 2>/dev/null
wait "$lpid"; rc=$?; lpid=
bad=()
[[ $rc -eq 0 ]] || bad+=("rc=$rc")
grep -q "elastic: shrinking from 3 to 2 workers" "$tmp/shrink.err" || bad+=("no shrink")
for w in "0:0, 2, 4:211" "1:1, 3:140"; do
  IFS=: read -r i files n <<<"$w"
  grep -qF "[worker $i] kubetrain-trainer[rank $i]: file sharding: worker $i of 2 reads files \
[$files] of 5 (by number from 0, in name order): $n examples" "$tmp/shrink.err" ||
    bad+=("worker $i did not read files $files")
done
[[ $(hashes "$tmp/shrink.out" | wc -l) -eq 1 ]] || bad+=("the survivors' weights differ")
if [[ ${#bad[@]} -eq 0 ]]; then
  tap_ok "a shrink from 3 to 2 workers: the survivors read the files of their new ranks"
else tap_fail "a shrink from 3 to 2 workers" "${bad[*]}: $(log_of shrink | tail -8)"; fi
tap_done
