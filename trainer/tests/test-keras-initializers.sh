#!/usr/bin/env bash
# Initializers against real Keras (keras_initializers.py, one Python process): a model
# built in Keras 3 and in tf-keras with he_normal, lecun_uniform, Constant and
# RandomNormal initializers is taken by the trainer from its model.to_json(); its initial
# weights, exported after one step at learning rate 1e-30 (they do not move), have the
# std of Keras's own initial kernels within 12% and the constant bias exactly. The
# distributions' exact formulas are checked by test-model's test_initializers.
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
  KUBETRAIN_EXPORT KUBETRAIN_INITIAL_WEIGHTS KUBETRAIN_MODEL KUBETRAIN_SHM

if [[ ! -x $BIN ]]; then
  tap_fail "the optimised trainer is built" "missing $BIN (make test builds it)"
  tap_done; exit
fi
skip_without_data "initializers against Keras" "$DATA"
if ! py_has "$PY" keras tf_keras; then
  tap_skip "initializers against Keras" \
    "no Keras 3 and tf-keras in $PY (bash bench/pyvenv.sh venv-tf)"
  tap_done; exit
fi

n=0
while IFS= read -r line; do
  n=$((n + 1))
  case $line in
    "ok: "*) tap_ok "${line#ok: }" ;;
    *) tap_fail "${line#not ok: }" "$line" ;;
  esac
done < <("$PY" trainer/tests/keras_initializers.py "$BIN" "$DATA" "$tmp" 2>"$tmp/py.err")
[[ $n -eq 8 ]] || tap_fail "keras_initializers.py reported 8 checks" \
  "$n: $(tail -3 "$tmp/py.err")"
tap_done
