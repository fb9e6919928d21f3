#!/usr/bin/env bash
# Fine-tuning from Keras's files through the real binary: a model built and trained one
# epoch in Keras 3 and in tf-keras (keras_finetune.py) is trained on by the trainer from
# its .keras (--model; Sequential, and Functional), its .weights.h5 and tf-keras's legacy
# .h5 (--initial-weights with --model the JSON), one worker and `launch --workers 2`: the
# first step's loss equals Keras's on the same batch within 1e-4 relative (the Keras
# reference tests' tolerance).
# The batch is the same because the data set is that batch: an npz of 32 examples read
# with a global batch of 32 (the mean loss does not depend on the order). Without the
# weights the loss is another. Bad files each exit 3 with one line naming the file, the
# variable and the layer, before any step.
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
  KUBETRAIN_EXPORT KUBETRAIN_INITIAL_WEIGHTS KUBETRAIN_MODEL

if [[ ! -x $BIN ]]; then
  tap_fail "the optimised trainer is built" "missing $BIN (make test builds it)"
  tap_done; exit
fi
skip_without_data "Keras fine-tuning" "$DATA"

# expect_refused NAME NEEDLE ARGS...: exit 3, no step, NEEDLE in the one-line message
expect_refused() {
  local name=$1 needle=$2; shift 2
  local out rc
  out=$("$BIN" --data-dir "$DATA" --epochs 1 --steps-per-epoch 1 --per-worker-batch 8 "$@" \
        2>"$tmp/err")
  rc=$?
  if [[ $rc -eq 3 && -z $out ]] && grep -qF -- "$needle" "$tmp/err"; then tap_ok "$name"
  else tap_fail "$name" "rc=$rc: $out $(tail -2 "$tmp/err")"; fi
}

# the trainer's own exports of two models: files Keras reads (test-keras-export.sh)
for m in mlp tutorial-cnn; do
  "$BIN" --data-dir "$DATA" --epochs 1 --steps-per-epoch 1 --per-worker-batch 8 --model "$m" \
    --export "$tmp/$m.keras" >/dev/null 2>"$tmp/err" ||
    tap_fail "$m exported" "$(tail -2 "$tmp/err")"
  unzip -p "$tmp/$m.keras" model.weights.h5 >"$tmp/$m.weights.h5"
  unzip -p "$tmp/$m.keras" config.json >"$tmp/$m.json"
done
size=$(stat -c %s "$tmp/mlp.keras")
head -c $((size / 2)) "$tmp/mlp.keras" >"$tmp/truncated.keras"
head -c 2000 "$tmp/mlp.weights.h5" >"$tmp/truncated.weights.h5"
python3 - "$tmp" <<'PY'
import sys, zipfile
d = sys.argv[1]
with zipfile.ZipFile(d + "/other.keras", "w") as z:  # mlp's config, tutorial-cnn's weights
    z.write(d + "/mlp.json", "config.json")
    z.write(d + "/tutorial-cnn.weights.h5", "model.weights.h5")
with zipfile.ZipFile(d + "/noweights.keras", "w") as z:
    z.write(d + "/mlp.json", "config.json")
PY

missing="layers/conv2d/vars: missing, where layer 1 \"conv2d\" (Conv2D) keeps its kernel"
shape="layers/dense/vars/0: shape [21632, 128], where layer 1 \"dense\" (Dense) has its kernel"
shape+=" [784, 128]"
expect_refused "--initial-weights of another model -> exit 3 naming the layer" \
  "--initial-weights $tmp/mlp.weights.h5: $missing and bias" \
  --model tutorial-cnn --initial-weights "$tmp/mlp.weights.h5"
expect_refused "--initial-weights with a kernel of another shape -> exit 3 naming both" \
  "--initial-weights $tmp/tutorial-cnn.weights.h5: $shape" \
  --model mlp --initial-weights "$tmp/tutorial-cnn.weights.h5"
expect_refused "--initial-weights truncated -> exit 3" \
  "--initial-weights $tmp/truncated.weights.h5: cannot open it as HDF5" \
  --model mlp --initial-weights "$tmp/truncated.weights.h5"
expect_refused "--model with a truncated .keras -> exit 3" \
  "$tmp/truncated.keras: not a readable .keras archive" --model "$tmp/truncated.keras"
expect_refused "--model with a .keras holding another model's weights -> exit 3" \
  "$tmp/other.keras: model.weights.h5: $shape" \
  --model "$tmp/other.keras"
expect_refused "--model with a .keras without weights -> exit 3" \
  "$tmp/noweights.keras: no model.weights.h5 in the archive" --model "$tmp/noweights.keras"

if ! py_has "$PY" keras tf_keras; then
  tap_skip "fine-tuning from Keras's files" \
    "no Keras 3 and tf-keras in $PY (bash bench/pyvenv.sh venv-tf)"
  tap_done; exit
fi

# first_loss DIR [launch --workers 2] ARGS...: the first step's loss on DIR/batch.npz
first_loss() {
  local dir=$1; shift
  local batch=32 pre=()
  if [[ ${1:-} == launch ]]; then pre=(launch --workers 2); batch=16; shift; fi
  rm -f "$tmp/m.jsonl"
  "$BIN" "${pre[@]}" --data "npz:$dir/batch.npz" --per-worker-batch "$batch" --epochs 1 \
    --steps-per-epoch 1 --metrics-file "$tmp/m.jsonl" "$@" >/dev/null 2>"$tmp/err" &&
    losses "$tmp/m.jsonl"
}

mkdir -p "$tmp/keras3" "$tmp/tfkeras"
# Both Kerases' models from one process: TensorFlow's import costs seconds of CPU.
"$PY" trainer/tests/keras_finetune.py "$DATA" keras3 "$tmp/keras3" tfkeras "$tmp/tfkeras" \
  >"$tmp/py.out" 2>"$tmp/py.err"
for flavour in keras3 tfkeras; do
  d=$tmp/$flavour
  want=$(sed -n "s/^$flavour loss: //p" "$tmp/py.out")
  if [[ -z $want ]]; then
    tap_fail "$flavour trains and saves the model" "$(tail -3 "$tmp/py.err")"
    continue
  fi
  runs=("--model $d/$flavour.keras" "--model $d/$flavour-functional.keras"
        "--model $d/$flavour.json --initial-weights $d/$flavour.weights.h5"
        "launch --model $d/$flavour.keras")
  [[ $flavour == tfkeras ]] && runs+=("--model $d/$flavour.json --initial-weights $d/$flavour.h5")
  for r in "${runs[@]}"; do
    read -ra args <<<"$r"
    got=$(first_loss "$d" "${args[@]}")
    name="$flavour: ${r//$d\//}: the first step's loss is Keras's on the same batch"
    name=${name/: launch /: launch --workers 2 }
    if close "$got" "$want" 1e-4; then tap_ok "$name ($got, Keras $want)"
    else tap_fail "$name" "'$got' vs Keras $want: $(tail -2 "$tmp/err")"; fi
  done
  got=$(first_loss "$d" --model "$d/$flavour.json")
  name="$flavour: without the weights the first loss is another"
  if [[ -n $got ]] && ! close "$got" "$want" 1e-2; then tap_ok "$name ($got, Keras $want)"
  else tap_fail "$name" "'$got' vs Keras $want"; fi
done
tap_done
