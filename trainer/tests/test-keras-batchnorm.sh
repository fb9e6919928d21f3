#!/usr/bin/env bash
# BatchNormalization through the real binary (docs/design.md, "Models and data"), real
# Keras the judge where it can be:
# - a model with three BatchNormalization layers (keras_batchnorm.py: defaults, center
#   false, scale false), built and trained briefly by Keras 3 and by tf-keras and saved
#   as .keras, is trained on by the trainer: its first step's loss on a 32-example batch
#   equals Keras's training-mode loss (the batch's statistics) within 1e-4 relative, and
#   is not Keras's inference-mode loss (the moving ones);
# - the same model trained 20 steps under `launch --workers 2` from that .keras exports
#   a .keras (--export) and, from its checkpoint, a .weights.h5 (`export`): Keras 3 and
#   tf-keras load them and evaluate() the test set to the trainer's --eval loss within
#   1e-4 and its accuracy (keras_check.py), so the moving statistics the trainer
#   trained and kept are the ones Keras infers with;
# - a BatchNormalization spec under `launch --workers 2`: a run resumed from its
#   checkpoint at the end of epoch 1 ends with the uninterrupted run's weights hash (the
#   hash covers the moving statistics), and so does a run whose worker 1 is SIGKILLed
#   after step 50 (live recovery hands the moving statistics over); every rank ends
#   with the same hash.
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
skip_without_data "BatchNormalization" "$DATA"

# --- resume and live recovery with BatchNormalization in the model ----------------------
cat >"$tmp/bn.json" <<'EOF_SPEC'
{"input_shape": [28, 28, 1], "layers": [
 {"type": "Conv2D", "filters": 4, "kernel_size": 3, "use_bias": false},
 {"type": "BatchNormalization", "momentum": 0.9},
 {"type": "ReLU"},
 {"type": "MaxPooling2D"},
 {"type": "Flatten"},
 {"type": "Dense", "units": 16},
 {"type": "BatchNormalization", "center": false},
 {"type": "Dense", "units": 10}]}
EOF_SPEC
run=(launch --workers 2 --model "$tmp/bn.json" --steps-per-epoch 150 --per-worker-batch 16
     --optimizer adam --data-dir "$DATA" --print-weights-hash --checkpoint-every-steps 50)
"$BIN" "${run[@]}" --epochs 2 --checkpoint-dir "$tmp/ref" >"$tmp/ref.out" 2>"$tmp/ref.err"
REF=$(hashes "$tmp/ref.out")
if [[ $(wc -l <<<"$REF") -eq 1 && -n $REF ]]; then
  tap_ok "uninterrupted: both ranks end with one weights hash (${REF:0:12})"
else tap_fail "uninterrupted reference" "'$REF': $(tail -5 "$tmp/ref.err")"; fi

"$BIN" "${run[@]}" --epochs 1 --checkpoint-dir "$tmp/ck-r" >/dev/null 2>"$tmp/r1.err"
"$BIN" "${run[@]}" --epochs 2 --checkpoint-dir "$tmp/ck-r" >"$tmp/r2.out" 2>"$tmp/r2.err"
rc=$?
got=$(hashes "$tmp/r2.out")
if [[ $rc -eq 0 && $got == "$REF" ]] && grep -q "resuming from .*ckpt-150.kt" "$tmp/r2.err"; then
  tap_ok "resumed at step 150: the uninterrupted run's weights hash"
else tap_fail "resume with BatchNormalization" "rc=$rc '$got' vs '$REF': $(tail -5 "$tmp/r2.err")"
fi

"$BIN" "${run[@]}" --epochs 2 --checkpoint-dir "$tmp/ck-k" >"$tmp/k.out" 2>"$tmp/k.err" &
lpid=$!
for _ in $(seq 600); do [[ -e $tmp/ck-k/ckpt-50.kt ]] && break; sleep 0.05; done
victim=$(sed -n 's/.*launch: worker 1: pid \([0-9]*\),.*/\1/p' "$tmp/k.err" | tail -1)
[[ -n $victim ]] && kill -9 "$victim"
for _ in $(seq 1200); do kill -0 "$lpid" 2>/dev/null || break; sleep 0.05; done
kill -9 "$lpid" 2>/dev/null
wait "$lpid"; rc=$?
lpid=
got=$(hashes "$tmp/k.out")
if [[ $rc -eq 0 && $got == "$REF" ]] &&
   grep -q "live recovery: starting worker 1 again alone" "$tmp/k.err" &&
   ! grep -q "resuming from" "$tmp/k.err"; then
  tap_ok "worker 1 SIGKILLed after step 50: live recovery, no checkpoint read, the same hash"
else tap_fail "live recovery with BatchNormalization" \
  "rc=$rc '$got' vs '$REF': $(grep -v '^\[worker .\] [0-9E]' "$tmp/k.err" | tail -8)"; fi

# --- Keras's models in, trained, and back out ------------------------------------------
if ! py_has "$PY" keras tf_keras; then
  tap_skip "BatchNormalization against Keras" \
    "no Keras 3 and tf-keras in $PY (bash bench/pyvenv.sh venv-tf)"
  tap_done; exit
fi
short=(--epochs 1 --steps-per-epoch 20 --per-worker-batch 16 --seed 3 --eval --optimizer adam
       --data-dir "$DATA")
declare -A want
mkdir -p "$tmp/keras3" "$tmp/tfkeras"
# Both Kerases' models from one process: TensorFlow's import costs seconds of CPU.
"$PY" trainer/tests/keras_batchnorm.py keras3 "$tmp/keras3" tfkeras "$tmp/tfkeras" \
  >"$tmp/py.out" 2>"$tmp/py.err"
for flavour in keras3 tfkeras; do
  d=$tmp/$flavour
  kloss=$(sed -n "s/^$flavour loss: //p" "$tmp/py.out")
  kinfer=$(sed -n "s/^$flavour inference loss: //p" "$tmp/py.out")
  if [[ -z $kloss || -z $kinfer ]]; then
    tap_fail "$flavour builds and saves the BatchNormalization model" "$(tail -3 "$tmp/py.err")"
    continue
  fi
  "$BIN" --model "$d/$flavour.keras" --data "npz:$d/batch.npz" --per-worker-batch 32 \
    --epochs 1 --steps-per-epoch 1 --metrics-file "$d/first.jsonl" >/dev/null 2>"$tmp/err"
  got=$(losses "$d/first.jsonl")
  name="$flavour: the first step's loss is Keras's in training mode"
  if close "$got" "$kloss" 1e-4 && ! close "$got" "$kinfer" 1e-4; then
    tap_ok "$name ($got, Keras $kloss; inference mode $kinfer)"
  else tap_fail "$name" "'$got' vs Keras $kloss (inference $kinfer): $(tail -2 "$tmp/err")"; fi

  "$BIN" launch --workers 2 "${short[@]}" --model "$d/$flavour.keras" \
    --checkpoint-dir "$d/ck" --metrics-file "$d/m.jsonl" --export "$d/out.keras" \
    >"$d/run.out" 2>&1
  rc=$?
  "$BIN" export --checkpoint-dir "$d/ck" --model "$d/$flavour.keras" \
    --out "$d/out.weights.h5" 2>"$tmp/err"
  rc2=$?
  if [[ $rc -eq 0 && $rc2 -eq 0 && -s $d/out.keras && -s $d/out.weights.h5 ]]; then
    tap_ok "$flavour: launch --workers 2 trains from the .keras and exports both files"
  else
    tap_fail "$flavour: train and export" "rc=$rc/$rc2: $(tail -3 "$d/run.out") $(cat "$tmp/err")"
  fi
  want[$flavour]="$(values eval test_loss "$d/m.jsonl") $(values eval test_accuracy "$d/m.jsonl")"
done
# Both Kerases in one process (keras_check.py): TensorFlow's import costs seconds of CPU.
args=()
for flavour in keras3 tfkeras; do
  for from in keras3 tfkeras; do
    read -r loss acc <<<"${want[$from]:-0 0}"
    args+=("$flavour" "$tmp/$from/out.keras" - "$loss" "$acc")
  done
  read -r loss acc <<<"${want[$flavour]:-0 0}"
  args+=("$flavour" "$tmp/$flavour/out.weights.h5" "$tmp/$flavour/$flavour.json" "$loss" "$acc")
done
"$PY" trainer/tests/keras_check.py "$DATA" "${args[@]}" >"$tmp/check.out" 2>"$tmp/check.err"
while IFS= read -r line; do
  if [[ $line == "ok: "* ]]; then tap_ok "${line#ok: }"; else tap_fail "${line#not ok: }"; fi
done < <(grep -E '^(ok|not ok): ' "$tmp/check.out")
for flavour in keras3 tfkeras; do
  n=$(grep -cE "^(ok|not ok): $flavour " "$tmp/check.out")
  [[ $n -eq 3 ]] ||
    tap_fail "$flavour checks all 3 files" "$n lines: $(tail -5 "$tmp/check.err")"
done
tap_done
