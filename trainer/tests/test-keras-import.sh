#!/usr/bin/env bash
# --model with the JSON that Keras's model.to_json() writes (trainer/tests/reference/keras,
# Keras 3 and tf-keras), through the real binary: a few steps from each reference leave
# the same weights (--print-weights-hash) as the built-in model it describes, with the
# same seed (the layers, the Glorot-uniform draws and the signature are the same); a
# model the trainer cannot train as written exits 3 with one line naming the layer.
set -uo pipefail # no -e: a failed check is reported (not ok) and the test goes on
source e2e/lib/tap.sh
source trainer/tests/lib.sh
BIN=${TRAINER_OPT:-${BUILD:-build}/bin/kubetrain-trainer}
DATA=/usr/share/datasets/fashion-mnist
REF=trainer/tests/reference/keras
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export KUBETRAIN_TERMINATION_FILE=$tmp/termination OPENBLAS_NUM_THREADS=1
unset TF_CONFIG

if [[ ! -x $BIN ]]; then
  tap_fail "the optimised trainer is built" "missing $BIN (make test builds it)"
  tap_done; exit
fi

short=(--epochs 1 --steps-per-epoch 2 --per-worker-batch 16 --seed 5 --print-weights-hash)
hash_of() { "$BIN" "${short[@]}" --data-dir "$DATA" --model "$1" 2>"$tmp/err" \
  | sed -n 's/^weights-sha256: //p'; }

if ! have_data "$DATA"; then
  tap_skip "Keras JSON trains as the built-in model" "no Fashion-MNIST in $DATA"
else
  for builtin in tutorial-cnn tutorial-cnn-l2 cnn2 mlp; do
    want=$(hash_of "$builtin")
    files=("$REF/keras3-$builtin.json" "$REF/tfkeras-$builtin.json")
    [[ $builtin == tutorial-cnn ]] && files+=("$REF/keras3-tutorial-cnn-functional.json"
                                              "$REF/tfkeras-tutorial-cnn-functional.json")
    for f in "${files[@]}"; do
      got=$(hash_of "$f")
      name="$(basename "$f"): the same weights as $builtin after 2 steps"
      if [[ ${#want} -eq 64 && $got == "$want" ]]; then tap_ok "$name"
      else tap_fail "$name" "'$got' vs '$want': $(cat "$tmp/err")"; fi
    done
  done
fi

# refused at start-up: exit 3, one line naming the layer, the termination message
for dialect in keras3 tfkeras; do
  f=$REF/$dialect-branching.json
  rm -f "$tmp/termination"
  err=$("$BIN" --model "$f" --data-dir "$tmp" 2>&1 >/dev/null)
  rc=$?
  needle="layers[3] \"dense_11\" (Dense).inbound_nodes: its input is \"flatten_5\""
  name="$dialect branching Functional model -> exit 3 naming the layer"
  if [[ $rc -eq 3 && $(wc -l <<<"$err") -eq 1 && $err == *"$needle"* ]] \
     && grep -qF 'dense_11' "$tmp/termination"; then tap_ok "$name"
  else tap_fail "$name" "rc=$rc: $err"; fi
done
tap_done
