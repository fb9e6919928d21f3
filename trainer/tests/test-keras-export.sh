#!/usr/bin/env bash
# --export and `export` through the real binary, with real Keras as the judge: five
# models (the built-in tutorial-cnn, Keras 3's JSON of cnn2, tf-keras's JSON of
# tutorial-cnn-l2, a spec with every activation and activation layer and one with
# Rescaling, the average and global pooling layers, use_bias false and L1L2: their .keras
# only)
# train 10 steps of Adam under `launch --workers 2` with --eval; the chief
# exports one file (--export) and `export` turns the run's checkpoint into the other
# kind. Keras 3 and tf-keras each load every .keras (load_model) and every .weights.h5
# (load_weights into the model of the trained JSON, in each one's own dialect) and
# evaluate() the test set: the loss equals the trainer's --eval loss within 1e-4 and the
# accuracy equals it (keras_check.py). The checkpoint's export holds the same weights
# file, byte for byte, as the --export archive's member. An --export that cannot be
# written exits 2 before training; `export` with another model than the checkpoint's
# exits 3 naming it.
set -uo pipefail # no -e: a failed check is reported (not ok) and the test goes on
source e2e/lib/tap.sh
source trainer/tests/lib.sh
BIN=${TRAINER_OPT:-${BUILD:-build}/bin/kubetrain-trainer}
DATA=/usr/share/datasets/fashion-mnist
REF=trainer/tests/reference/keras
PY=${KT_CACHE:-$HOME/.cache/kubetrain}/venv-tf/bin/python
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export KUBETRAIN_TERMINATION_FILE=$tmp/termination OPENBLAS_NUM_THREADS=1
unset TF_CONFIG KUBETRAIN_DATA KUBETRAIN_EVAL_DATA KUBETRAIN_DATA_DIR KUBETRAIN_DATASET \
  KUBETRAIN_EXPORT

if [[ ! -x $BIN ]]; then
  tap_fail "the optimised trainer is built" "missing $BIN (make test builds it)"
  tap_done; exit
fi
skip_without_data "Keras export" "$DATA"

short=(--epochs 1 --steps-per-epoch 10 --per-worker-batch 16 --seed 3 --eval --optimizer adam
       --data-dir "$DATA")

# refused at start-up: exit 2 naming the flag, nothing trained
touch "$tmp/file"
out=$("$BIN" "${short[@]}" --export "$tmp/file/m.keras" 2>"$tmp/err"); rc=$?
name="--export into a path that cannot be created -> exit 2 before training"
if [[ $rc -eq 2 && -z $out ]] && grep -qF -- "--export $tmp/file/m.keras: cannot create" \
   "$tmp/err"; then tap_ok "$name"
else tap_fail "$name" "rc=$rc: $out $(cat "$tmp/err")"; fi
out=$("$BIN" "${short[@]}" --export "$tmp/m.h5" 2>"$tmp/err"); rc=$?
name="--export with another suffix -> exit 2 before training"
if [[ $rc -eq 2 && -z $out ]] && grep -qF "expected a file name ending in .keras or .weights.h5" \
   "$tmp/err"; then tap_ok "$name"
else tap_fail "$name" "rc=$rc: $out $(cat "$tmp/err")"; fi

# every activation and activation layer (Keras's load_model reads their config back)
cat >"$tmp/ac.json" <<'EOF_SPEC'
{"input_shape": [28, 28], "layers": [
 {"type": "Reshape", "target_shape": [28, 28, 1]},
 {"type": "Conv2D", "filters": 4, "kernel_size": 3, "strides": 2, "activation": "gelu"},
 {"type": "ReLU"},
 {"type": "Conv2D", "filters": 4, "kernel_size": 3, "activation": "elu"},
 {"type": "Flatten"},
 {"type": "Dense", "units": 16, "activation": "swish"},
 {"type": "LeakyReLU", "negative_slope": 0.1},
 {"type": "Dense", "units": 16, "activation": "tanh"},
 {"type": "Activation", "activation": "sigmoid"},
 {"type": "Dense", "units": 16, "activation": "leaky_relu"},
 {"type": "Activation", "activation": "gelu"},
 {"type": "Dense", "units": 10}]}
EOF_SPEC
# Rescaling, the average and global pooling layers, a Conv2D without bias and an L1L2
# regularizer, as Keras's load_model reads them
cat >"$tmp/pl.json" <<'EOF_SPEC'
{"input_shape": [28, 28, 1], "layers": [
 {"type": "Rescaling", "scale": 2, "offset": -1},
 {"type": "Conv2D", "filters": 8, "kernel_size": 3, "padding": "same", "activation": "relu"},
 {"type": "AveragePooling2D", "pool_size": 2},
 {"type": "AveragePooling2D", "pool_size": 3, "strides": 2, "padding": "same"},
 {"type": "Conv2D", "filters": 16, "kernel_size": 3, "activation": "relu", "use_bias": false},
 {"type": "GlobalAveragePooling2D", "keepdims": true},
 {"type": "GlobalMaxPooling2D"},
 {"type": "Dense", "units": 10, "kernel_regularizer": {"l1": 1e-4, "l2": 1e-4}}]}
EOF_SPEC

# train: name, --model, the file --export writes, the one `export` makes of the checkpoint
runs=("ac $tmp/ac.json ac.keras ac.weights.h5"
      "pl $tmp/pl.json pl.keras pl.weights.h5"
      "tc tutorial-cnn tc.weights.h5 tc.keras"
      "k3 $REF/keras3-cnn2.json k3.keras k3.weights.h5"
      "tf $REF/tfkeras-tutorial-cnn-l2.json tf.keras tf.weights.h5")
declare -A want json3 jsontf
json3=([tc]=$REF/keras3-tutorial-cnn.json [k3]=$REF/keras3-cnn2.json
       [tf]=$REF/keras3-tutorial-cnn-l2.json)
jsontf=([tc]=$REF/tfkeras-tutorial-cnn.json [k3]=$REF/tfkeras-cnn2.json
        [tf]=$REF/tfkeras-tutorial-cnn-l2.json)
for r in "${runs[@]}"; do
  read -r id model exported converted <<<"$r"
  "$BIN" launch --workers 2 "${short[@]}" --model "$model" --checkpoint-dir "$tmp/ck-$id" \
    --metrics-file "$tmp/$id.jsonl" --export "$tmp/$exported" >"$tmp/$id.out" 2>&1
  rc=$?
  if [[ $rc -eq 0 && -s $tmp/$exported ]]; then tap_ok "$id: launch --workers 2 exports $exported"
  else tap_fail "$id: launch --workers 2 exports $exported" "rc=$rc: $(tail -5 "$tmp/$id.out")"
  fi
  want[$id]="$(values eval test_loss "$tmp/$id.jsonl")"
  want[$id]+=" $(values eval test_accuracy "$tmp/$id.jsonl")"
  "$BIN" export --checkpoint-dir "$tmp/ck-$id" --model "$model" --out "$tmp/$converted" \
    2>"$tmp/err"
  rc=$?
  if [[ $rc -eq 0 && -s $tmp/$converted ]]; then tap_ok "$id: export of the checkpoint"
  else tap_fail "$id: export of the checkpoint" "rc=$rc: $(cat "$tmp/err")"; fi
  keras=$tmp/$exported weights=$tmp/$converted
  [[ $exported == *.weights.h5 ]] && keras=$tmp/$converted weights=$tmp/$exported
  name="$id: the archive's model.weights.h5 is the .weights.h5, byte for byte"
  if unzip -p "$keras" model.weights.h5 | cmp -s - "$weights"; then tap_ok "$name"
  else tap_fail "$name" "$(unzip -l "$keras" 2>&1)"; fi
done

out=$("$BIN" export --checkpoint-dir "$tmp/ck-tc" --model mlp --out "$tmp/x.keras" 2>&1); rc=$?
name="export with another model than the checkpoint's -> exit 3 naming it"
if [[ $rc -eq 3 && $out == *"--model mlp is not the checkpoint's"* && ! -e $tmp/x.keras ]]; then
  tap_ok "$name"
else tap_fail "$name" "rc=$rc: $out"; fi

if ! py_has "$PY" keras tf_keras; then
  tap_skip "Keras loads the exports" "no Keras 3 and tf-keras in $PY (bash bench/pyvenv.sh venv-tf)"
  tap_done; exit
fi
# Both Kerases in one process (keras_check.py): TensorFlow's import costs seconds of CPU.
args=()
for flavour in keras3 tfkeras; do
  read -r loss acc <<<"${want[ac]}"
  args+=("$flavour" "$tmp/ac.keras" - "$loss" "$acc")
  read -r loss acc <<<"${want[pl]}"
  args+=("$flavour" "$tmp/pl.keras" - "$loss" "$acc")
  for id in tc k3 tf; do
    read -r loss acc <<<"${want[$id]}"
    json=${json3[$id]}
    [[ $flavour == tfkeras ]] && json=${jsontf[$id]}
    args+=("$flavour" "$tmp/$id.keras" - "$loss" "$acc"
           "$flavour" "$tmp/$id.weights.h5" "$json" "$loss" "$acc")
  done
done
"$PY" trainer/tests/keras_check.py "$DATA" "${args[@]}" >"$tmp/check.out" 2>"$tmp/check.err"
while IFS= read -r line; do
  if [[ $line == "ok: "* ]]; then tap_ok "${line#ok: }"; else tap_fail "${line#not ok: }"; fi
done < <(grep -E '^(ok|not ok): ' "$tmp/check.out")
for flavour in keras3 tfkeras; do
  n=$(grep -cE "^(ok|not ok): $flavour " "$tmp/check.out")
  [[ $n -eq 8 ]] ||
    tap_fail "$flavour checks all 8 files" "$n lines: $(tail -5 "$tmp/check.err")"
done
tap_done
