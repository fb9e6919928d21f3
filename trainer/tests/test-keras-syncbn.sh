#!/usr/bin/env bash
# Synchronized BatchNormalization through the real binary (docs/design.md,
# "BatchNormalization"), real Keras the judge where it can be:
# - a model with BatchNormalization(synchronized=True) built by Keras 3 (its .keras) and
#   by tf-keras (its to_json(), given the key tf-keras's config leaves out, and its
#   weights), trained under `launch --workers 2` with 16 examples a worker: the first
#   step's loss is Keras's training-mode loss on the global batch of 32 within 1e-4
#   relative (Keras sums in float32 and takes the variance as E[x^2] - mean^2, the
#   trainer in double and from the squared deviations); the same from the JSON with
#   synchronized false (each worker's own statistics) is not;
# - N x b = 1 x N*b: 2 workers x 16 over TCP and over shared memory against 1 worker x
#   32, and 3 workers against 1 with --global-batch 31 (slices of 11, 10 and 10), the
#   loss of each of 20 Adam steps within 2e-5 relative: the losses are printed to 6
#   digits (two floats a few ulps apart can print 1e-5 apart) and the ranks' float
#   gradients are summed in another order than one worker's, which Adam carries on
#   (seen: 0 and 1e-6); the same runs unsynchronized differ by 0.19 and 0.39. One
#   worker synchronized or not ends with one weights hash;
# - a SIGKILLed worker's live recovery and a resume from the epoch-1 checkpoint end with
#   the uninterrupted run's weights hash, on every rank, over shared memory (the Dense
#   kernel is large enough for it). Where the survivor lost its peer, in a synchronized
#   BatchNormalization's sums (most steps' time: seen 4 of 5 kills) or in the gradient
#   all-reduce, is said in the result line; both are recovered alike.
set -uo pipefail # no -e: a failed check is reported (not ok) and the test goes on
source e2e/lib/tap.sh
source trainer/tests/lib.sh
BIN=${TRAINER_OPT:-${BUILD:-build}/bin/kubetrain-trainer}
DATA=/usr/share/datasets/fashion-mnist
PY=${KT_CACHE:-$HOME/.cache/kubetrain}/venv-tf/bin/python
tmp=$(mktemp -d)
lpid=
cleanup() {
  [[ -n $lpid ]] && kill -9 "$lpid" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
export KUBETRAIN_TERMINATION_FILE=$tmp/termination OPENBLAS_NUM_THREADS=1
unset TF_CONFIG KUBETRAIN_DATA KUBETRAIN_EVAL_DATA KUBETRAIN_DATA_DIR KUBETRAIN_DATASET \
  KUBETRAIN_EXPORT KUBETRAIN_INITIAL_WEIGHTS KUBETRAIN_MODEL KUBETRAIN_SHM

if [[ ! -x $BIN ]]; then
  tap_fail "the optimised trainer is built" "missing $BIN (make test builds it)"
  tap_done; exit
fi
skip_without_data "synchronized BatchNormalization" "$DATA"

cat >"$tmp/sync.json" <<'EOF_SPEC'
{"input_shape": [28, 28, 1], "layers": [
 {"type": "Conv2D", "filters": 4, "kernel_size": 3, "use_bias": false},
 {"type": "BatchNormalization", "momentum": 0.9, "synchronized": true},
 {"type": "ReLU"},
 {"type": "MaxPooling2D"},
 {"type": "Flatten"},
 {"type": "Dense", "units": 128},
 {"type": "BatchNormalization", "center": false, "synchronized": true},
 {"type": "Dense", "units": 10}]}
EOF_SPEC
sed 's/"synchronized": true/"synchronized": false/' "$tmp/sync.json" >"$tmp/unsync.json"

# max_rel A B: the largest relative difference of two metrics files' step losses (or
# "length" when their numbers of steps differ or are 0).
max_rel() {
  python3 -c 'import sys
a, b = (list(map(float, x.split())) for x in sys.argv[1:3])
print("%.3g" % max(abs(x - y) / abs(y) for x, y in zip(a, b)) if len(a) == len(b) > 0
      else "length")' "$(losses "$1")" "$(losses "$2")"
}
# under TOL D: whether D (from max_rel) is a number <= TOL.
under() { python3 -c 'import sys; sys.exit(0 if sys.argv[2] != "length" and
float(sys.argv[2]) <= float(sys.argv[1]) else 1)' "$1" "$2"; }

# --- N workers x b = 1 worker x N*b -----------------------------------------------------
steps=(--epochs 1 --steps-per-epoch 20 --optimizer adam --data-dir "$DATA" --print-weights-hash)
"$BIN" --model "$tmp/sync.json" "${steps[@]}" --per-worker-batch 32 \
  --metrics-file "$tmp/one.jsonl" >"$tmp/one.out" 2>"$tmp/one.err"
"$BIN" --model "$tmp/unsync.json" "${steps[@]}" --per-worker-batch 32 >"$tmp/oneu.out" 2>&1
h=$(hashes "$tmp/one.out" "$tmp/oneu.out")
if [[ -n $h && $(wc -l <<<"$h") -eq 1 ]]; then
  tap_ok "one worker: synchronized or not, one weights hash (${h:0:12})"
else tap_fail "one worker synchronized = unsynchronized" "'$h': $(tail -3 "$tmp/one.err")"; fi

for via in tcp shm; do
  KUBETRAIN_SHM=$([[ $via == tcp ]] && echo 0 || echo 1) "$BIN" launch --workers 2 \
    --model "$tmp/sync.json" "${steps[@]}" --per-worker-batch 16 \
    --metrics-file "$tmp/$via.jsonl" >"$tmp/$via.out" 2>"$tmp/$via.err"
  rc=$?
  d=$(max_rel "$tmp/$via.jsonl" "$tmp/one.jsonl")
  want=$([[ $via == tcp ]] && echo "all-reduce over TCP" || echo "through shared memory")
  if [[ $rc -eq 0 ]] && under 2e-5 "$d" && grep -q "$want" "$tmp/$via.err" &&
     [[ $(hashes "$tmp/$via.out" | wc -l) -eq 1 ]]; then
    tap_ok "2 workers x 16 = 1 worker x 32 over $via: 20 losses within 2e-5 (max $d)"
  else tap_fail "2 x 16 = 1 x 32 over $via" "rc=$rc max $d: $(tail -3 "$tmp/$via.err")"; fi
done
"$BIN" launch --workers 2 --model "$tmp/unsync.json" "${steps[@]}" --per-worker-batch 16 \
  --metrics-file "$tmp/u2.jsonl" >/dev/null 2>&1
d=$(max_rel "$tmp/u2.jsonl" "$tmp/one.jsonl")
if [[ $d != length ]] && ! under 1e-3 "$d"; then
  tap_ok "unsynchronized, 2 workers x 16 is not 1 worker x 32 (max $d)"
else tap_fail "unsynchronized 2 x 16 differs from 1 x 32" "max $d"; fi

"$BIN" --model "$tmp/sync.json" "${steps[@]}" --global-batch 31 \
  --metrics-file "$tmp/g1.jsonl" >/dev/null 2>&1
"$BIN" launch --workers 3 --model "$tmp/sync.json" "${steps[@]}" --global-batch 31 \
  --metrics-file "$tmp/g3.jsonl" >"$tmp/g3.out" 2>"$tmp/g3.err"
rc=$?
d=$(max_rel "$tmp/g3.jsonl" "$tmp/g1.jsonl")
if [[ $rc -eq 0 ]] && under 2e-5 "$d" && [[ $(hashes "$tmp/g3.out" | wc -l) -eq 1 ]]; then
  tap_ok "3 workers = 1 worker at --global-batch 31 (11, 10, 10): losses within 2e-5 (max $d)"
else tap_fail "3 workers = 1 at --global-batch 31" "rc=$rc max $d: $(tail -3 "$tmp/g3.err")"; fi
"$BIN" launch --workers 3 --model "$tmp/unsync.json" "${steps[@]}" --global-batch 31 \
  --metrics-file "$tmp/g3u.jsonl" >/dev/null 2>&1
d=$(max_rel "$tmp/g3u.jsonl" "$tmp/g1.jsonl")
if [[ $d != length ]] && ! under 1e-3 "$d"; then
  tap_ok "unsynchronized, 3 workers are not 1 at --global-batch 31 (max $d)"
else tap_fail "unsynchronized 3 workers differ from 1" "max $d"; fi

# --- resume and live recovery -----------------------------------------------------------
run=(launch --workers 2 --model "$tmp/sync.json" --steps-per-epoch 40 --per-worker-batch 16
     --optimizer adam --data-dir "$DATA" --print-weights-hash --checkpoint-every-steps 20)
"$BIN" "${run[@]}" --epochs 2 --checkpoint-dir "$tmp/ref" >"$tmp/ref.out" 2>"$tmp/ref.err"
REF=$(hashes "$tmp/ref.out")
if [[ $(wc -l <<<"$REF") -eq 1 && -n $REF ]] &&
   grep -q "through shared memory" "$tmp/ref.err"; then
  tap_ok "uninterrupted, over shared memory: both ranks end with one weights hash (${REF:0:12})"
else tap_fail "uninterrupted reference" "'$REF': $(tail -5 "$tmp/ref.err")"; fi

"$BIN" "${run[@]}" --epochs 1 --checkpoint-dir "$tmp/ck-r" >/dev/null 2>"$tmp/r1.err"
"$BIN" "${run[@]}" --epochs 2 --checkpoint-dir "$tmp/ck-r" >"$tmp/r2.out" 2>"$tmp/r2.err"
rc=$?
got=$(hashes "$tmp/r2.out")
if [[ $rc -eq 0 && $got == "$REF" ]] && grep -q "resuming from .*ckpt-40.kt" "$tmp/r2.err"; then
  tap_ok "resumed at step 40: the uninterrupted run's weights hash"
else tap_fail "resume with synchronized BatchNormalization" \
  "rc=$rc '$got' vs '$REF': $(tail -5 "$tmp/r2.err")"; fi

: >"$tmp/k.err"
"$BIN" "${run[@]}" --epochs 2 --checkpoint-dir "$tmp/ck-k" >"$tmp/k.out" 2>"$tmp/k.err" &
lpid=$!
for _ in $(seq 600); do [[ -e $tmp/ck-k/ckpt-20.kt ]] && break; sleep 0.05; done
victim=$(sed -n 's/.*launch: worker 1: pid \([0-9]*\),.*/\1/p' "$tmp/k.err" | tail -1)
[[ -n $victim ]] && kill -9 "$victim"
for _ in $(seq 1200); do kill -0 "$lpid" 2>/dev/null || break; sleep 0.05; done
kill -9 "$lpid" 2>/dev/null
wait "$lpid"; rc=$?
lpid=
got=$(hashes "$tmp/k.out")
where="the gradient all-reduce"
grep -q "lost .*synchronized BatchNormalization's statistics" "$tmp/k.err" &&
  where="a synchronized BatchNormalization's sums"
if [[ $rc -eq 0 && $got == "$REF" ]] &&
   grep -q "live recovery: starting worker 1 again alone" "$tmp/k.err" &&
   ! grep -q "resuming from" "$tmp/k.err"; then
  tap_ok "worker 1 SIGKILLed after step 20 (its peer lost in $where): live recovery, the same hash"
else tap_fail "live recovery with synchronized BatchNormalization" \
  "rc=$rc '$got' vs '$REF': $(grep -v '^\[worker .\] [0-9E]' "$tmp/k.err" | tail -8)"; fi

# --- Keras's models: the first step's loss is Keras's on the global batch ---------------
if ! py_has "$PY" keras tf_keras; then
  tap_skip "synchronized BatchNormalization against Keras" \
    "no Keras 3 and tf-keras in $PY (bash bench/pyvenv.sh venv-tf)"
  tap_done; exit
fi
mkdir -p "$tmp/keras3" "$tmp/tfkeras"
# Both Kerases' models from one process: TensorFlow's import costs seconds of CPU.
"$PY" trainer/tests/keras_syncbn.py keras3 "$tmp/keras3" tfkeras "$tmp/tfkeras" \
  >"$tmp/py.out" 2>"$tmp/py.err"
first=(--per-worker-batch 16 --epochs 1 --steps-per-epoch 1)
for flavour in keras3 tfkeras; do
  d=$tmp/$flavour
  kloss=$(sed -n "s/^$flavour loss: //p" "$tmp/py.out")
  if [[ -z $kloss ]]; then
    tap_fail "$flavour builds and saves the synchronized model" "$(tail -3 "$tmp/py.err")"
    continue
  fi
  # Keras 3's .keras says synchronized itself; tf-keras's is its JSON with the key put back
  if [[ $flavour == keras3 ]]; then model=(--model "$d/keras3.keras")
  else model=(--model "$d/tfkeras.json" --initial-weights "$d/tfkeras.keras"); fi
  "$BIN" launch --workers 2 "${model[@]}" --data "npz:$d/batch.npz" "${first[@]}" \
    --metrics-file "$d/first.jsonl" >/dev/null 2>"$tmp/err"
  got=$(losses "$d/first.jsonl")
  sed 's/"synchronized": true/"synchronized": false/g' "$d/$flavour.json" >"$d/unsync.json"
  "$BIN" launch --workers 2 --model "$d/unsync.json" --initial-weights "$d/$flavour.keras" \
    --data "npz:$d/batch.npz" "${first[@]}" --metrics-file "$d/unsync.jsonl" >/dev/null 2>&1
  unsync=$(losses "$d/unsync.jsonl")
  name="$flavour: 2 workers x 16, the first step's loss is Keras's on the 32"
  if close "$got" "$kloss" 1e-4 && [[ -n $unsync ]] && ! close "$unsync" "$kloss" 1e-4; then
    tap_ok "$name ($got, Keras $kloss; unsynchronized $unsync)"
  else tap_fail "$name" "'$got' vs Keras $kloss (unsynchronized '$unsync'): $(tail -2 "$tmp/err")"
  fi
done
tap_done
