#!/usr/bin/env bash
# --initial-weights through the real binary: a .keras's weights are taken as its
# model.weights.h5's (the first step's loss is the same), and the file is read only where
# a run starts fresh: a run resumed from a checkpoint, on one worker and after a group
# restart under `launch --workers 2`, and a live recovery's replacement go on without it
# (the file deleted since), while a fresh start without it exits 3.
set -uo pipefail # no -e: a failed check is reported (not ok) and the test goes on
source e2e/lib/tap.sh
source trainer/tests/lib.sh
BIN=${TRAINER_OPT:-${BUILD:-build}/bin/kubetrain-trainer}
DATA=/usr/share/datasets/fashion-mnist
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export KUBETRAIN_TERMINATION_FILE=$tmp/termination OPENBLAS_NUM_THREADS=1
unset TF_CONFIG KUBETRAIN_DATA KUBETRAIN_EVAL_DATA KUBETRAIN_DATA_DIR KUBETRAIN_DATASET \
  KUBETRAIN_EXPORT KUBETRAIN_INITIAL_WEIGHTS KUBETRAIN_MODEL KUBETRAIN_CHECKPOINT_DIR

if [[ ! -x $BIN ]]; then
  tap_fail "the optimised trainer is built" "missing $BIN (make test builds it)"
  tap_done; exit
fi
skip_without_data "--initial-weights" "$DATA"

# run ARGS...: one short mlp run on Fashion-MNIST; its stderr in $tmp/err
run() {
  "$BIN" --data-dir "$DATA" --model mlp --per-worker-batch 8 --steps-per-epoch 2 --seed 7 \
    "$@" >/dev/null 2>"$tmp/err"
}

run --epochs 1 --export "$tmp/mlp.keras" || tap_fail "mlp exported" "$(tail -2 "$tmp/err")"
unzip -p "$tmp/mlp.keras" model.weights.h5 >"$tmp/mlp.weights.h5"

# first_loss ARGS...: the first step's loss of a run from scratch
first_loss() {
  rm -f "$tmp/m.jsonl"
  run --epochs 1 --metrics-file "$tmp/m.jsonl" "$@" && losses "$tmp/m.jsonl" | cut -d' ' -f1
}
want=$(first_loss --initial-weights "$tmp/mlp.weights.h5")
got=$(first_loss --initial-weights "$tmp/mlp.keras")
if [[ -n $want && $got == "$want" ]]; then
  tap_ok "a .keras's weights as its model.weights.h5's: the first loss is the same ($got)"
else
  tap_fail "a .keras's weights as its model.weights.h5's" "'$got' vs '$want': $(tail -2 "$tmp/err")"
fi
scratch=$(first_loss)
if [[ -n $scratch && $scratch != "$want" ]]; then
  tap_ok "without the weights the first loss is another ($scratch, $want)"
else tap_fail "without the weights the first loss is another" "'$scratch' vs '$want'"; fi

# resumed NAME PRE...: the first epoch from the weights with a checkpoint, the file
# deleted, the second epoch run (PRE before the flags: launch --workers 2) resumes
resumed() {
  local name=$1; shift
  local ck=$tmp/ck-$RANDOM w=$tmp/w-$RANDOM.weights.h5 rc
  cp "$tmp/mlp.weights.h5" "$w"
  run --epochs 1 --checkpoint-dir "$ck" --initial-weights "$w" ||
    tap_fail "$name: the first epoch" "$(tail -2 "$tmp/err")"
  rm -f "$w"
  "$BIN" "$@" --data-dir "$DATA" --model mlp --per-worker-batch 8 --steps-per-epoch 2 \
    --seed 7 --epochs 2 --checkpoint-dir "$ck" --initial-weights "$w" >/dev/null 2>"$tmp/err"
  rc=$?
  if [[ $rc -eq 0 ]] && grep -q 'resuming from .*global step 2$' "$tmp/err"; then
    tap_ok "$name: resumes from the checkpoint without reading the deleted file"
  else tap_fail "$name: resumes without the file" "rc=$rc: $(tail -2 "$tmp/err")"; fi
}
resumed "one worker"
resumed "launch --workers 2 (a group restart)" launch --workers 2

# A live recovery's replacement takes the peers' state: worker 1 SIGKILLed once the file is
# gone, started again alone by launch, joins without reading it.
w=$tmp/live.weights.h5
cp "$tmp/mlp.weights.h5" "$w"
"$BIN" launch --workers 2 --data-dir "$DATA" --model mlp --per-worker-batch 8 --seed 7 \
  --epochs 1 --steps-per-epoch 6000 --checkpoint-dir "$tmp/ck-live" --checkpoint-every-steps 25 \
  --recovery-timeout 20 --initial-weights "$w" >/dev/null 2>"$tmp/live.err" &
lpid=$!
# Any checkpoint will do: the trainer keeps only the newest few, so at full speed the
# first (ckpt-25) can be pruned before a poll sees it (seen in CI: the poll missed it,
# the job ran its 3000 steps to the end and the kill found no process).
ckpt_seen() { compgen -G "$tmp/ck-live/ckpt-*.kt" >/dev/null; }
for _ in $(seq 600); do ckpt_seen && break; sleep 0.05; done
rm -f "$w"
victim=$(sed -n 's/.*launch: worker 1: pid \([0-9]*\),.*/\1/p' "$tmp/live.err" | tail -1)
killed=no
[[ -n $victim ]] && kill -9 "$victim" 2>/dev/null && killed=yes
wait "$lpid"
rc=$?
if [[ $killed == no ]]; then
  tap_fail "a live recovery's replacement joins without the file" \
    "worker 1 (pid '$victim') was not there to kill: the run ended first (rc=$rc) or never
printed its pid; a checkpoint seen: $(ckpt_seen && echo yes || echo no)"
elif [[ $rc -eq 0 ]] && grep -q "live recovery: starting worker 1 again alone" "$tmp/live.err" &&
  grep -q "joined generation 2: state of step" "$tmp/live.err"; then
  tap_ok "a live recovery's replacement joins without reading the deleted file"
else tap_fail "a live recovery's replacement joins without the file" \
  "rc=$rc: $(grep -v '^\[worker .\] [0-9E]' "$tmp/live.err" | tail -4)"; fi

run --epochs 1 --checkpoint-dir "$tmp/ck-fresh" --initial-weights "$tmp/gone.weights.h5"
rc=$?
if [[ $rc -eq 3 ]] && grep -qF -- "--initial-weights $tmp/gone.weights.h5: cannot open" "$tmp/err"
then tap_ok "a fresh start without the file exits 3 naming it"
else tap_fail "a fresh start without the file exits 3" "rc=$rc: $(tail -2 "$tmp/err")"; fi
tap_done
