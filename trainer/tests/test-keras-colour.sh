#!/usr/bin/env bash
# Colour images (H x W x C, C = 3) through the real binary, with real Keras as the judge:
# a colour model built and briefly trained in Keras 3 and in tf-keras (keras_colour.py:
# Rescaling, Conv2D, AveragePooling2D, GlobalAveragePooling2D, Dense) is trained on by
# the trainer from its .keras, its data read from an .npz of N x H x W x 3 uint8 arrays
# and from a TFRecord of raw bytes (--image-shape 16,16,3), with --pixel-scale raw (the
# model rescales itself): the first step's loss equals Keras's on the same batch within
# 1e-4 relative. The batch is the same because the data set is that batch: 32 examples
# read with a global batch of 32 (the mean loss does not depend on the order). The same
# images with their channels reversed give a loss outside that tolerance, so the check
# sees the channel order (docs/design.md, "The example interface").
set -uo pipefail # no -e: a failed check is reported (not ok) and the test goes on
source e2e/lib/tap.sh
source trainer/tests/lib.sh
BIN=${TRAINER_OPT:-${BUILD:-build}/bin/kubetrain-trainer}
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
if ! py_has "$PY" keras tf_keras; then
  tap_skip "colour models from Keras" \
    "no Keras 3 and tf-keras in $PY (bash bench/pyvenv.sh venv-tf)"
  tap_done; exit
fi

# first_loss ARGS...: the first step's loss of one step over the whole 32-example batch
first_loss() {
  rm -f "$tmp/m.jsonl"
  "$BIN" --per-worker-batch 32 --epochs 1 --steps-per-epoch 1 --pixel-scale raw \
    --metrics-file "$tmp/m.jsonl" "$@" >/dev/null 2>"$tmp/err" && losses "$tmp/m.jsonl"
}

mkdir -p "$tmp/keras3" "$tmp/tfkeras"
# Both Kerases' models from one process: TensorFlow's import costs seconds of CPU.
"$PY" trainer/tests/keras_colour.py keras3 "$tmp/keras3" tfkeras "$tmp/tfkeras" \
  >"$tmp/py.out" 2>"$tmp/py.err"
for flavour in keras3 tfkeras; do
  d=$tmp/$flavour
  want=$(sed -n "s/^$flavour loss: //p" "$tmp/py.out")
  if [[ -z $want ]]; then
    tap_fail "$flavour builds and saves the colour model" "$(tail -3 "$tmp/py.err")"
    continue
  fi
  for data in "npz:$d/batch.npz" "tfrecord:$d/batch.tfrecord --image-shape 16,16,3"; do
    read -ra args <<<"--data $data"
    got=$(first_loss --model "$d/$flavour.keras" "${args[@]}")
    name="$flavour: ${data%% *}: the first step's loss is Keras's on the same colour batch"
    name=${name//$d\//}
    if close "$got" "$want" 1e-4; then tap_ok "$name ($got, Keras $want)"
    else tap_fail "$name" "'$got' vs Keras $want: $(tail -2 "$tmp/err")"; fi
  done
  got=$(first_loss --model "$d/$flavour.keras" --data "npz:$d/reversed.npz")
  name="$flavour: the channels reversed give another loss"
  if [[ -n $got ]] && ! close "$got" "$want" 1e-4; then tap_ok "$name ($got, Keras $want)"
  else tap_fail "$name" "'$got' vs Keras $want: $(tail -2 "$tmp/err")"; fi
done
tap_done
