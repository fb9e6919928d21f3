#!/usr/bin/env bash
# The real binary (ASan+UBSan build) end to end on a few steps: determinism of the
# weights hash, the metrics file and termination message, flag/env precedence, and
# the exit code and one-line message of bad flags, model specs, data files (images of
# another shape than the model's input) and models over the memory bound; --version.
set -uo pipefail # no -e: a failed check is reported (not ok) and the test goes on
source e2e/lib/tap.sh
source trainer/tests/lib.sh
BIN=${TRAINER:-build/san/bin/kubetrain-trainer}
DATA=/usr/share/datasets/fashion-mnist
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export KUBETRAIN_TERMINATION_FILE=$tmp/termination

# --version: the operator's form with the VERSION file's version, exit 0, on stdout alone;
# also after a command and options, as the operator takes it among its own
want="kubetrain-trainer $(cat VERSION)"
for args in "--version" "launch --workers 2 --version"; do
  # shellcheck disable=SC2086 # $args is a command line to split into its words
  out=$("$BIN" $args 2>"$tmp/stderr"); rc=$?
  if [[ $rc -eq 0 && $out == "$want" && ! -s $tmp/stderr ]]; then tap_ok "$args: '$out', exit 0"
  else tap_fail "$args: '$want', exit 0" "rc=$rc, stdout '$out', stderr '$(cat "$tmp/stderr")'"; fi
done

skip_without_data "trainer end to end" "$DATA"

short=(--epochs 2 --steps-per-epoch 2 --per-worker-batch 16 --print-weights-hash)
hash_of() { "$BIN" "${short[@]}" "$@" 2>"$tmp/stderr" | sed -n 's/^weights-sha256: //p'; }

h1=$(hash_of --seed 7 --model mlp --optimizer adam)
h2=$(hash_of --seed 7 --model mlp --optimizer adam)
h3=$(hash_of --seed 8 --model mlp --optimizer adam)
if [[ ${#h1} -eq 64 && $h1 == "$h2" ]]; then
  tap_ok "same seed, same weights hash (mlp with dropout)"
else tap_fail "same seed, same weights hash" "'$h1' vs '$h2': $(cat "$tmp/stderr")"; fi
if [[ ${#h3} -eq 64 && $h1 != "$h3" ]]; then tap_ok "different seed, different weights hash"
else tap_fail "different seed, different weights hash" "'$h1' vs '$h3'"; fi

c1=$(hash_of --seed 3 --model tutorial-cnn)
c2=$("$BIN" train "${short[@]}" --seed 3 --model tutorial-cnn 2>/dev/null |
     sed -n 's/^weights-sha256: //p')
c3=$(hash_of --seed 3 --model tutorial-cnn --shuffle-buffer 100)
[[ ${#c1} -eq 64 && $c1 == "$c2" ]] && tap_ok "tutorial-cnn deterministic (also as 'train')" ||
  tap_fail "tutorial-cnn deterministic" "$c1 vs $c2"
[[ $c1 != "$c3" ]] && tap_ok "shuffle buffer changes the stream" ||
  tap_fail "shuffle buffer changes the stream"

# the metrics file and the termination message of a successful run
out=$("$BIN" "${short[@]}" --model mlp --eval --metrics-file "$tmp/m.jsonl" 2>&1)
if python3 - "$tmp/m.jsonl" "$tmp/termination" <<'PY'
import json, sys
ev = [json.loads(l) for l in open(sys.argv[1])]
kinds = [e["event"] for e in ev]
assert kinds == ["step", "step", "epoch", "eval", "step", "step", "epoch", "eval", "done"], kinds
assert [e["step"] for e in ev if e["event"] == "step"] == [1, 2, 3, 4]
assert all(k in ev[0] for k in ("epoch", "loss", "accuracy", "samples_per_sec"))
assert 0 <= ev[3]["test_accuracy"] <= 1 and ev[3]["test_loss"] > 0
done = ev[-1]
t = json.load(open(sys.argv[2]))
assert t["weights_sha256"] == done["weights_sha256"] and t["step"] == 4 and t["epoch"] == 2, t
assert "export" not in t, t
PY
then tap_ok "metrics file and termination message"
else tap_fail "metrics file and termination message" "$out"; fi

# --export: its directory is made (a job's checkpoint directory does not exist yet) and
# the termination message names the file; a path too long for the message's 4096 bytes
# is left out of it, the rest of the result kept
term_has() { # FILE EXPORT: the termination message is step 4 with "export": EXPORT ("": none)
  python3 - "$1" "$2" <<'PY'
import json, os, sys
raw = open(sys.argv[1]).read()
t = json.loads(raw)
assert len(raw) <= 4096 and t["step"] == 4 and len(t["weights_sha256"]) == 64, raw[:300]
assert t.get("export", "") == sys.argv[2], (len(raw), t.get("export", "")[:300], sys.argv[2][:300])
PY
}
long=$tmp$(printf '/%0250d' $(seq 16) | tr 0 d)
for ex in "$tmp/job/sub/m.weights.h5" "$long/m.weights.h5"; do
  want=$ex; [[ $ex == "$long"* ]] && want=
  "$BIN" "${short[@]}" --model mlp --export "$ex" >/dev/null 2>"$tmp/ex.err"; rc=$?
  name="--export of ${#ex} bytes: written, termination message ${want:+names it}"
  [[ -z $want ]] && name+="without it"
  if [[ $rc -eq 0 && -s $ex ]] && term_has "$tmp/termination" "$want" 2>"$tmp/py.err"; then
    tap_ok "$name"
  else tap_fail "$name" "rc=$rc: $(tail -c 600 "$tmp/ex.err") $(tail -c 600 "$tmp/py.err")"; fi
done
grep -q "^Epoch 2/2" <<<"$out" &&
  grep -qE "^2/2 - [0-9.]+s - loss: [0-9.]+ - accuracy: [0-9.]+ - [0-9]+ samples/s" <<<"$out" &&
  tap_ok "Keras-like epoch lines" || tap_fail "Keras-like epoch lines" "$out"

# a metrics file named without a directory lands in the working directory
bin_abs=$(realpath -- "$BIN")
rc=0
(cd "$tmp" && "$bin_abs" "${short[@]}" --model mlp --metrics-file bare.jsonl >/dev/null \
   2>"$tmp/bare.err") || rc=$?
[[ $rc -eq 0 && $(grep -c '"event":"done"' "$tmp/bare.jsonl" 2>/dev/null) == 1 ]] &&
  tap_ok "--metrics-file without a directory" ||
  tap_fail "--metrics-file without a directory" "$(cat "$tmp/bare.err")"

# flags override env; env overrides defaults
e1=$(KUBETRAIN_SEED=8 hash_of --model mlp --optimizer adam)
e2=$(KUBETRAIN_SEED=8 hash_of --model mlp --optimizer adam --seed 7)
[[ $e1 == "$h3" && $e2 == "$h1" ]] && tap_ok "env sets, flags override" ||
  tap_fail "env sets, flags override" "$e1/$h3 $e2/$h1"

# bad input: exit code, one line naming the flag/field/file, termination message, no metrics file
expect_fail() { # name code needle args...
  local name=$1 code=$2 needle=$3; shift 3
  rm -f "$tmp/termination" "$tmp/bad.jsonl"
  local err rc
  err=$("$BIN" --metrics-file "$tmp/bad.jsonl" "$@" 2>&1 >/dev/null); rc=$?
  if [[ $rc -eq $code && $(wc -l <<<"$err") -eq 1 && $err == *"$needle"* && ! -e $tmp/bad.jsonl ]] \
     && grep -qF '"error"' "$tmp/termination"; then
    tap_ok "$name -> exit $code"
  else
    tap_fail "$name -> exit $code" "rc=$rc err=$err"
  fi
}
expect_fail "epochs 0" 2 "--epochs: expected an integer in [1" --epochs 0
expect_fail "lr not a number" 2 "--lr: expected a number" --lr fast
expect_fail "negative lr" 2 "--lr" --lr -1
expect_fail "unknown optimizer" 2 "--optimizer: expected sgd, rmsprop, adam or adam-amsgrad" \
  --optimizer adagrad
expect_fail "unknown flag" 2 "--bogus: unknown option" --bogus 1
expect_fail "missing value" 2 "--seed: expected a value" --seed
expect_fail "bad shard policy" 2 "--shard-policy: expected auto, data, file or off" \
  --shard-policy rows
KUBETRAIN_PER_WORKER_BATCH=x expect_fail "bad env" 2 \
  "KUBETRAIN_PER_WORKER_BATCH: expected an integer"
err=$("$BIN" frobnicate 2>&1); rc=$?
[[ $rc -eq 2 && $err == *"frobnicate: unknown command (expected train, launch or export)"* ]] &&
  tap_ok "unknown command -> exit 2" || tap_fail "unknown command -> exit 2" "rc=$rc $err"
expect_fail "unknown model" 2 "--model nope: expected tutorial-cnn" --model nope
printf 'layers:\n  - type: Flatten\n  - type: Dense\n    units: many\n' >"$tmp/bad.yaml"
expect_fail "bad model file" 3 "$tmp/bad.yaml: layers[1].units: expected an integer" \
  --model "$tmp/bad.yaml"
mkdir -p "$tmp/empty"
expect_fail "missing data" 3 "$tmp/empty/train-images-idx3-ubyte: cannot open" \
  --data-dir "$tmp/empty"
mkdir -p "$tmp/trunc"
head -c 5000 "$DATA/train-images-idx3-ubyte.gz" >"$tmp/trunc/train-images-idx3-ubyte.gz" \
  2>/dev/null ||
  head -c 5000 "$DATA/train-images-idx3-ubyte" >"$tmp/trunc/train-images-idx3-ubyte"
cp "$DATA"/train-labels-idx1-ubyte* "$tmp/trunc/"
expect_fail "truncated data" 3 "truncated IDX data" --data-dir "$tmp/trunc"
expect_fail "metrics dir missing" 2 "--metrics-file" --metrics-file "$tmp/nodir/m.jsonl" \
  --steps-per-epoch 1 --epochs 1
# every data file's image shape against the model's input, at start-up: test images of
# another size used to be read past their buffer at the first evaluation (SIGSEGV)
idx_file() { # FILE COUNT [ROWS COLS]: zero images (COUNT x ROWS x COLS) or labels 0..9
  python3 - "$@" <<'PY'
import struct, sys
path, dims = sys.argv[1], [int(d) for d in sys.argv[2:]]
head = struct.pack(">I", 0x800 + len(dims)) + b"".join(struct.pack(">I", d) for d in dims)
n = 1
for d in dims:
    n *= d
body = bytes(n) if len(dims) == 3 else bytes(i % 10 for i in range(n))
open(path, "wb").write(head + body)
PY
}
mkdir -p "$tmp/tiny-test" "$tmp/odd-train"
ln -s "$DATA"/train-* "$tmp/tiny-test/"
idx_file "$tmp/tiny-test/t10k-images-idx3-ubyte" 10 1 1
idx_file "$tmp/tiny-test/t10k-labels-idx1-ubyte" 10
expect_fail "--eval with 1x1 test images" 3 \
  "tiny-test/t10k-images-idx3-ubyte: 1x1x1 images, but the model's input_shape is [28, 28] (784" \
  --data-dir "$tmp/tiny-test" --eval --model mlp --epochs 1 --steps-per-epoch 1
# as many pixels in another shape: not the images the model was written for
ln -s "$DATA"/t10k-* "$tmp/odd-train/"
idx_file "$tmp/odd-train/train-images-idx3-ubyte" 20 14 56
idx_file "$tmp/odd-train/train-labels-idx1-ubyte" 20
expect_fail "14x56 training images for a 28x28 model" 3 \
  "odd-train/train-images-idx3-ubyte: 14x56x1 images, but the model's input_shape is [28, 28]" \
  --data-dir "$tmp/odd-train" --model mlp --epochs 1 --steps-per-epoch 1 --per-worker-batch 8

# the whole model's memory at the per-worker batch, bounded at start-up
# (Conv2D(65536, 1) keeps the 28x28 pixels: 51 million values per example)
big='{"input_shape":[28,28,1],"layers":[{"type":"Conv2D","filters":65536,"kernel_size":1},'
big+='{"type":"MaxPooling2D","pool_size":28},{"type":"Flatten"},{"type":"Dense","units":10}]}'
expect_fail "a legal spec needing 36.8 GiB" 3 "needs 36.8 GiB of memory (786442 parameters" \
  --model "$big" --per-worker-batch 64
grep -qF "activations of 64 examples per step: 36.8 GiB), over the limit of 4.0 GiB" \
  "$tmp/termination" && tap_ok "... its message gives the activations and the limit" ||
  tap_fail "... its message gives the activations and the limit" "$(cat "$tmp/termination")"
expect_fail "tutorial-cnn under a 0.01 GiB bound" 3 "the model needs 26.6 MiB of memory" \
  --model tutorial-cnn --per-worker-batch 16 --max-model-memory-gib 0.01
KUBETRAIN_MAX_MODEL_MEMORY_GIB=0.01 expect_fail "the bound from the environment" 3 \
  "over the limit of 10.2 MiB (--max-model-memory-gib 0.01)" \
  --model tutorial-cnn --per-worker-batch 16
m1=$(KUBETRAIN_MAX_MODEL_MEMORY_GIB=0.01 hash_of --seed 3 --model tutorial-cnn \
       --max-model-memory-gib 0.04)
[[ ${#m1} -eq 64 && $m1 == "$c1" ]] &&
  tap_ok "a raised --max-model-memory-gib accepts the model (flag over env; same weights)" ||
  tap_fail "a raised --max-model-memory-gib accepts the model" \
    "'$m1' vs '$c1': $(cat "$tmp/stderr")"

ok=$(KUBETRAIN_PER_WORKER_BATCH=x "$BIN" --per-worker-batch 8 --epochs 1 --steps-per-epoch 1 \
       --model mlp >/dev/null 2>&1; echo $?)
[[ $ok -eq 2 ]] && tap_ok "a malformed env value fails even when a flag overrides it" ||
  tap_fail "malformed env with flag" "rc=$ok"
tap_done
