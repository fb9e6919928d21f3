#!/usr/bin/env bash
# Elastic training (docs/design.md, "Elastic jobs") under launch, on the ASan+UBSan
# build: a fixed --global-batch re-cut over the ranks present trains the same at every
# size. Bit-exact where the slices and the sums are the same; at another size the
# gradient sums are formed in another order, so the weights and the losses agree within
# the tolerance the design states (WEIGHT_TOL, LOSS_TOL).
set -uo pipefail # no -e: a failed check is reported (not ok) and the test goes on
source e2e/lib/tap.sh
source trainer/tests/lib.sh
BIN=${TRAINER:-build/san/bin/kubetrain-trainer}
DATA=/usr/share/datasets/fashion-mnist
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export KUBETRAIN_TERMINATION_FILE=$tmp/termination
unset TF_CONFIG KUBETRAIN_SECRET KUBETRAIN_SECRET_FILE KUBETRAIN_SHM
export OPENBLAS_NUM_THREADS=1

skip_without_data "elastic training" "$DATA"

# docs/design.md, "Elastic jobs": 10 SGD steps of tutorial-cnn at lr 0.05 (measured:
# 3e-8 between 2 and 3 workers, weights up to 0.2).
WEIGHT_TOL=1e-6
LOSS_TOL=1e-5

# The largest |difference| of the parameters in the newest checkpoints of two
# directories (docs/design.md, "Checkpoints": the arena at 360, its size at 344), and
# whether it is within TOL: params_close DIR_A DIR_B TOL.
params_close() {
  python3 -c 'import array, glob, struct, sys
def params(d):
    newest = max(glob.glob(d + "/ckpt-*.kt"), key=lambda p: int(p.rsplit("-", 1)[1][:-3]))
    b = open(newest, "rb").read()
    n = struct.unpack_from("<Q", b, 344)[0]
    a = array.array("f")
    a.frombytes(b[360:360 + n])
    return newest.rsplit("/", 1)[1], a
(fa, a), (fb, b) = params(sys.argv[1]), params(sys.argv[2])
d = max(abs(x - y) for x, y in zip(a, b)) if len(a) == len(b) else float("inf")
print("%s and %s: %d and %d parameters, max |difference| %.3g (tolerance %s)"
      % (fa, fb, len(a), len(b), d, sys.argv[3]))
sys.exit(0 if fa == fb and d <= float(sys.argv[3]) else 1)' "$@"
}

cnn=(--model tutorial-cnn --epochs 2 --steps-per-epoch 5 --lr 0.05 --print-weights-hash)

# run NAME WORKERS ARGS...: launch's output in $tmp/NAME.out/.err, checkpoints in
# $tmp/NAME.ck, the chief's step records in $tmp/NAME.json; the exit code in $tmp/NAME.rc.
run() {
  local name=$1 n=$2; shift 2
  "$BIN" launch --workers "$n" "${cnn[@]}" --checkpoint-dir "$tmp/$name.ck" \
    --metrics-file "$tmp/$name.json" "$@" >"$tmp/$name.out" 2>"$tmp/$name.err"
  echo $? >"$tmp/$name.rc"
}
ran() { [[ $(cat "$tmp/$1.rc") == 0 && $(hashes "$tmp/$1.out" | wc -l) -eq 1 ]]; }

# --- the default global batch is --per-worker-batch x workers, as before ---------------
run pw2 2 --per-worker-batch 12
run g2 2 --per-worker-batch 5 --global-batch 24
if ran pw2 && ran g2 && [[ $(hashes "$tmp/g2.out") == "$(hashes "$tmp/pw2.out")" ]]; then
  tap_ok "--global-batch 24 on 2 workers: bit-exactly --per-worker-batch 12 (which it overrides)"
else
  tap_fail "--global-batch 24 = 2 x 12" \
    "$(hashes "$tmp/pw2.out") vs $(hashes "$tmp/g2.out"): $(tail -n 3 "$tmp/g2.err")"
fi

# --- the same global batch at 2, 3 and 4 workers, uneven slices ----------------------
# 26 examples a step: 13+13; 8+9+9; 6+6+7+7 (a world that does not divide it is held to
# one that does).
for n in 2 3 4; do run e$n $n --global-batch 26; done
for n in 2 4; do
  if ran e$n && ran e3 && out=$(params_close "$tmp/e$n.ck" "$tmp/e3.ck" "$WEIGHT_TOL"); then
    tap_ok "global batch 26 at $n and at 3 workers: the same weights within $WEIGHT_TOL ($out)"
  else
    tap_fail "global batch 26, $n vs 3 workers: weights" \
      "${out:-} $(tail -n 3 "$tmp/e$n.err" "$tmp/e3.err")"
  fi
  if close "$(losses "$tmp/e$n.json")" "$(losses "$tmp/e3.json")" "$LOSS_TOL"; then
    tap_ok "global batch 26 at $n and at 3 workers: every step's loss within $LOSS_TOL relative"
  else
    tap_fail "global batch 26, $n vs 3 workers: losses" \
      "$(losses "$tmp/e$n.json") vs $(losses "$tmp/e3.json")"
  fi
done
# the check can fail: another global batch trains differently
run f3 3 --global-batch 24
if ran f3 && ! params_close "$tmp/f3.ck" "$tmp/e3.ck" "$WEIGHT_TOL" >/dev/null; then
  tap_ok "global batch 24 and 26 at 3 workers end with weights that differ beyond $WEIGHT_TOL"
else tap_fail "24 vs 26 differ" "$(params_close "$tmp/f3.ck" "$tmp/e3.ck" "$WEIGHT_TOL")"; fi

# --- a global batch that leaves a worker no example ----------------------------------
"$BIN" launch --workers 3 "${cnn[@]}" --global-batch 2 >"$tmp/small.out" 2>"$tmp/small.err"; rc=$?
if [[ $rc -eq 2 ]] &&
  grep -q -- "--global-batch 2: fewer examples than the 3 workers" "$tmp/small.err"; then
  tap_ok "--global-batch 2 over 3 workers: exit 2 naming the flag"
else tap_fail "--global-batch below the world" "rc=$rc $(tail -n 3 "$tmp/small.err")"; fi

tap_done
