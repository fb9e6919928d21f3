#!/usr/bin/env bash
# NumPy data through the real binary (the optimised build): Fashion-MNIST's IDX arrays
# written by real NumPy as .npz (np.savez as keras.datasets' mnist.npz holds them,
# np.savez_compressed under other keys, float32 x/255) and as .npy train to the same
# weights hash as the IDX files, one worker and two (the same examples in the same
# order give the same training, docs/design.md "The example interface"); --eval reads
# x_test/y_test of the same file; --pixel-scale raw changes the first loss; bad sources
# exit 2 (syntax) or 3 (content) naming the file and key.
set -uo pipefail # no -e: a failed check is reported (not ok) and the test goes on
source e2e/lib/tap.sh
source trainer/tests/lib.sh
BIN=${TRAINER_OPT:-${BUILD:-build}/bin/kubetrain-trainer}
DATA=/usr/share/datasets/fashion-mnist
PY=${KT_CACHE:-$HOME/.cache/kubetrain}/venv-tf/bin/python
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export KUBETRAIN_TERMINATION_FILE=$tmp/termination OPENBLAS_NUM_THREADS=1
unset TF_CONFIG KUBETRAIN_DATA KUBETRAIN_EVAL_DATA KUBETRAIN_DATA_DIR KUBETRAIN_DATASET

if [[ ! -x $BIN ]]; then
  tap_fail "the optimised trainer is built" "missing $BIN (make test builds it)"
  tap_done; exit
fi
skip_without_data "NumPy data sources" "$DATA"
if ! "$PY" -c 'import numpy' 2>/dev/null; then
  tap_skip "NumPy data sources" "no NumPy in $PY (bash bench/pyvenv.sh venv-tf makes it)"
  tap_done; exit
fi

"$PY" - "$DATA" "$tmp" <<'PY' || { tap_fail "NumPy writes the data" "see above"; tap_done; exit; }
import gzip, sys
import numpy as np
src, out = sys.argv[1:3]
def idx(name, offset):
    with gzip.open(f"{src}/{name}.gz") as f:
        return np.frombuffer(f.read(), np.uint8, offset=offset)
x_train = idx("train-images-idx3-ubyte", 16).reshape(-1, 28, 28)
y_train = idx("train-labels-idx1-ubyte", 8)
x_test = idx("t10k-images-idx3-ubyte", 16).reshape(-1, 28, 28)
y_test = idx("t10k-labels-idx1-ubyte", 8)
np.savez(f"{out}/fm.npz", x_train=x_train, y_train=y_train, x_test=x_test, y_test=y_test)
np.savez(f"{out}/fm-f32.npz", x_train=x_train.astype(np.float32) / 255,
         y_train=y_train.astype(np.int32))
np.savez_compressed(f"{out}/fm-keys.npz", images=x_train[..., None],
                    labels=y_train.astype(np.int64)[:, None])
np.save(f"{out}/x.npy", x_train)
np.save(f"{out}/y.npy", y_train.astype(np.int64))
np.save(f"{out}/wide.npy", x_train[:64].reshape(64, 14, 56))
np.save(f"{out}/y64.npy", y_train[:64])
np.save(f"{out}/xf.npy", np.asfortranarray(x_train[:64]))
PY

short=(--epochs 1 --steps-per-epoch 3 --per-worker-batch 16 --seed 7 --print-weights-hash)

run_trainer idx "${short[@]}" --data "idx:$DATA"
ref=$(run_hash idx)
if [[ ${#ref} -eq 64 ]]; then tap_ok "idx:DIR trains"
else tap_fail "idx:DIR trains" "$(cat "$tmp/idx.err")"; fi

# same_as_idx NAME DESCRIPTION ARGS...
same_as_idx() {
  local name=$1 what=$2; shift 2
  run_trainer "$name" "$@"
  local h; h=$(run_hash "$name")
  if [[ -n $ref && $h == "$ref" ]]; then tap_ok "$what: the weights hash of idx:DIR"
  else
    tap_fail "$what: the weights hash of idx:DIR" "'$h' vs '$ref': $(tail -3 "$tmp/$name.err")"
  fi
}
same_as_idx default "the default (--dataset fashion-mnist's directory)" "${short[@]}"
same_as_idx npz "npz:FILE (np.savez, uint8)" "${short[@]}" --data "npz:$tmp/fm.npz"
KUBETRAIN_DATA="npz:$tmp/fm.npz" same_as_idx env "KUBETRAIN_DATA=npz:FILE" "${short[@]}"
same_as_idx npy "npy:IMAGES,LABELS (int64 labels)" "${short[@]}" --data "npy:$tmp/x.npy,$tmp/y.npy"
same_as_idx keys "npz:FILE?x=images&y=labels (compressed, N x 28 x 28 x 1, labels N x 1)" \
  "${short[@]}" --data "npz:$tmp/fm-keys.npz?x=images&y=labels"
same_as_idx f32 "float32 x/255 with --pixel-scale unit" "${short[@]}" --data "npz:$tmp/fm-f32.npz"
same_as_idx wins "--data wins over --data-dir" "${short[@]}" --data-dir /nonexistent \
  --data "npz:$tmp/fm.npz"

# Two workers walk one shuffled stream whatever holds it.
two=(launch --workers 2 --epochs 1 --steps-per-epoch 3 --per-worker-batch 8 --seed 7
     --print-weights-hash)
run_trainer idx2 "${two[@]}" --data "idx:$DATA"
run_trainer npz2 "${two[@]}" --data "npz:$tmp/fm.npz"
h1=$(run_hash idx2) h2=$(run_hash npz2)
if [[ ${#h1} -eq 64 && $h1 == "$h2" && $(grep -c weights-sha256 "$tmp/npz2.out") -eq 2 ]]; then
  tap_ok "2 workers: npz:FILE ends with the weights hash of idx:DIR on both ranks"
else tap_fail "2 workers npz == idx" "'$h1' vs '$h2': $(tail -3 "$tmp/npz2.err")"; fi

# --eval reads x_test/y_test of the same file: the same evaluation as the t10k files.
run_trainer evidx --epochs 1 --steps-per-epoch 2 --per-worker-batch 64 --eval --data "idx:$DATA"
run_trainer evnpz --epochs 1 --steps-per-epoch 2 --per-worker-batch 64 --eval \
  --data "npz:$tmp/fm.npz"
e1=$(grep '^eval' "$tmp/evidx.out") e2=$(grep '^eval' "$tmp/evnpz.out")
if [[ -n $e1 && $e1 == "$e2" ]]; then tap_ok "--eval with npz:FILE evaluates x_test/y_test ($e2)"
else tap_fail "--eval with npz:FILE" "'$e1' vs '$e2': $(tail -3 "$tmp/evnpz.err")"; fi

# --pixel-scale raw hands the model 0..255: another first loss.
first_loss() { sed -n 's/.* - loss: \([^ ]*\) .*/\1/p' "$tmp/$1.out" | head -1; }
one=(--epochs 1 --steps-per-epoch 1 --per-worker-batch 16 --seed 7)
run_trainer unit "${one[@]}" --data "npz:$tmp/fm.npz" --pixel-scale unit
run_trainer raw "${one[@]}" --data "npz:$tmp/fm.npz" --pixel-scale raw
l1=$(first_loss unit) l2=$(first_loss raw)
if [[ -n $l1 && -n $l2 && $l1 != "$l2" ]]; then
  tap_ok "--pixel-scale raw changes the first loss ($l1 unit, $l2 raw)"
else tap_fail "--pixel-scale raw changes the first loss" "'$l1' vs '$l2': $(cat "$tmp/raw.err")"; fi

expect_exit "missing npz key" 3 "fm.npz: no array 'images' in the archive (it has: x_train" \
  "${one[@]}" --data "npz:$tmp/fm.npz?x=images"
expect_exit "eval keys missing" 3 "fm-f32.npz: no array 'x_test'" \
  "${one[@]}" --eval --data "npz:$tmp/fm-f32.npz"
expect_exit "another shape than the model's input" 3 "wide.npy: 14x56x1 images, but the model" \
  "${one[@]}" --data "npy:$tmp/wide.npy,$tmp/y64.npy"
expect_exit "Fortran order" 3 "xf.npy: fortran_order is True" \
  "${one[@]}" --data "npy:$tmp/xf.npy,$tmp/y64.npy"
expect_exit "npy without --eval-data" 2 "--eval: expected --eval-data SOURCE with --data npy:" \
  "${one[@]}" --eval --data "npy:$tmp/x.npy,$tmp/y.npy"
expect_exit "unknown scheme" 2 "--data: 'parquet:/x': expected idx:DIR, npz:FILE" \
  "${one[@]}" --data parquet:/x
KUBETRAIN_PIXEL_SCALE=half expect_exit "bad pixel scale" 2 \
  "KUBETRAIN_PIXEL_SCALE: expected unit or raw, got 'half'" "${one[@]}"
tap_done
