#!/usr/bin/env bash
# Live recovery loses no step when it cannot complete (docs/design.md, "Live recovery"):
# a survivor that waits for a lost peer's replacement and is stopped by SIGTERM, or
# whose --recovery-timeout passes, saves the state of its last completed step before it
# exits 75 — the chief, or the other survivor when the chief is the one lost — and the
# run resumed from that checkpoint ends with the uninterrupted run's weights hash. And a
# chief handed a state that sits on a checkpoint boundary (here its replacement, whose
# every-N falls on the step it is handed) writes that checkpoint, which it used to skip
# because it had not trained that step itself. Two workers started by hand (TF_CONFIG),
# so that the test knows each one's pid and log; the ASan+UBSan build.
set -uo pipefail # no -e: a failed check is reported (not ok) and the test goes on
source e2e/lib/tap.sh
source trainer/tests/lib.sh
BIN=${TRAINER:-build/san/bin/kubetrain-trainer}
DATA=/usr/share/datasets/fashion-mnist
tmp=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
  rm -rf "$tmp"
}
trap cleanup EXIT
unset TF_CONFIG KUBETRAIN_SECRET KUBETRAIN_SECRET_FILE KUBETRAIN_SHM
export OPENBLAS_NUM_THREADS=1 KUBETRAIN_TERMINATION_FILE=$tmp/launch.term

skip_without_data "survivors save before they give up" "$DATA"

# 300 steps of a small model, a checkpoint every 50; the peer is lost past step 53, so
# the last completed step is not one a checkpoint was due at (about 4 ms a step here).
EVERY=50 PAST=53
run=(--model mlp --epochs 2 --steps-per-epoch 150 --per-worker-batch 16 --print-weights-hash)

"$BIN" launch --workers 2 "${run[@]}" --checkpoint-every-steps $EVERY \
  --checkpoint-dir "$tmp/ref" >"$tmp/ref.out" 2>"$tmp/ref.err"
REF=$(hashes "$tmp/ref.out")
if [[ $(wc -l <<<"$REF") -ne 1 || -z $REF ]]; then
  tap_fail "uninterrupted reference" "$(tail -5 "$tmp/ref.err")"
  tap_done
  exit
fi

wait_for() { # seconds cmd...: polls cmd every 0.02 s
  local end=$((SECONDS + $1)); shift
  until "$@"; do [ $SECONDS -ge $end ] && return 1; sleep 0.02; done
}
# The step records in the chief's metrics file while it runs (<file>.tmp.<pid>).
steps_done() { grep -c '"event":"step"' "$tmp/$1.jsonl.tmp.$2" 2>/dev/null; }
past() { [[ $(steps_done "$1" "$2") -ge $PAST ]]; } # NAME PID
# start NAME INDEX RECOVERY_TIMEOUT [flags]: one worker of the pair NAME on ports
# $port0/$port1, checkpoints in $tmp/ck-NAME; log $tmp/NAME.INDEX.err, termination
# message $tmp/NAME.INDEX.term; sets pid[INDEX].
start() {
  local name=$1 i=$2 rt=$3; shift 3
  TF_CONFIG=$(tf_config "$i" "$port0" "$port1") KUBETRAIN_SECRET=s \
    KUBETRAIN_TERMINATION_FILE="$tmp/$name.$i.term" \
    "$BIN" "${run[@]}" --checkpoint-every-steps $EVERY --recovery-timeout "$rt" \
    --checkpoint-dir "$tmp/ck-$name" --metrics-file "$tmp/$name.jsonl" "$@" \
    >>"$tmp/$name.$i.out" 2>>"$tmp/$name.$i.err" &
  pid[i]=$!; pids+=("${pid[i]}")
}
# Waits at most $2 seconds for pid $1 to end; sets rc (124: it did not).
finish() {
  if wait_for "$2" bash -c "! kill -0 $1 2>/dev/null"; then wait "$1" 2>/dev/null; rc=$?
  else kill -9 "$1" 2>/dev/null; rc=124; fi
}
# "step checkpoint_step recoveryTimedOut" of a termination message.
term() {
  python3 -c 'import json, sys
t = json.load(open(sys.argv[1]))
print(t.get("step"), t.get("checkpoint_step"), str(t.get("recoveryTimedOut", False)).lower())' \
    "$1" 2>/dev/null
}
# resume NAME: the pair resumed from $tmp/ck-NAME under launch; sets rc and got.
resume() {
  "$BIN" launch --workers 2 "${run[@]}" --checkpoint-every-steps $EVERY \
    --checkpoint-dir "$tmp/ck-$1" >"$tmp/$1.resume.out" 2>"$tmp/$1.resume.err"
  rc=$?
  got=$(hashes "$tmp/$1.resume.out")
}

# --- a survivor stopped, or timed out, while it waits --------------------------------
# give_up NAME VICTIM HOW: the pair, VICTIM SIGKILLed past step $PAST, then the other
# one, waiting for a replacement, gets SIGTERM (HOW=sigterm) or waits out a 3 s
# --recovery-timeout (HOW=timeout).
give_up() {
  local name=$1 victim=$2 how=$3 rt=60 bad=()
  local survivor=$((1 - victim))
  [[ $how == timeout ]] && rt=3
  port0=$(free_port); port1=$(free_port)
  start "$name" 0 $rt; start "$name" 1 $rt
  wait_for 60 past "$name" "${pid[0]}"
  kill -9 "${pid[victim]}" 2>/dev/null
  wait "${pid[victim]}" 2>/dev/null
  local err=$tmp/$name.$survivor.err
  wait_for 30 grep -q "waiting up to ${rt}s for a replacement" "$err"
  [[ $how == sigterm ]] && kill -TERM "${pid[survivor]}"
  finish "${pid[survivor]}" 30
  # The survivor's last completed step: the one before the step whose all-reduce failed.
  local failed last
  failed=$(sed -n 's/.*: all-reduce at step \([0-9]*\): .*waiting up to.*/\1/p' "$err" | head -1)
  last=$((${failed:-1} - 1))
  local t; t=$(term "$tmp/$name.$survivor.term")
  local want_mark=false; [[ $how == timeout ]] && want_mark=true
  [[ $rc -eq 75 ]] || bad+=("rc=$rc")
  [[ -n $failed ]] || bad+=("no 'lost ... waiting up to' line")
  ((last % EVERY != 0 && last % 150 != 0)) || bad+=("step $last was a checkpoint's anyway")
  [[ -e $tmp/ck-$name/ckpt-$last.kt ]] || bad+=("no ckpt-$last.kt: $(ls "$tmp/ck-$name")")
  grep -q "checkpoint at step $last saved" "$err" || bad+=("no 'checkpoint at step $last saved'")
  [[ $t == "$last $last $want_mark" ]] || bad+=("termination message: $t")
  resume "$name"
  [[ $rc -eq 0 ]] || bad+=("resumed: rc=$rc")
  [[ $got == "$REF" ]] || bad+=("resumed: hash ${got:0:12} != ${REF:0:12}")
  grep -q "resuming from $tmp/ck-$name/ckpt-$last.kt" "$tmp/$name.resume.err" \
    || bad+=("resumed not from ckpt-$last.kt")
  local what="worker $survivor, the survivor of worker $victim,"
  if [[ ${#bad[@]} -eq 0 ]]; then
    tap_ok "$what $([[ $how == sigterm ]] && echo "stopped by SIGTERM" || echo "timed out") \
while waiting: saved step $last, exit 75; resumed there, same hash"
  else tap_fail "$what $how while waiting" "${bad[*]}; $(tail -4 "$err")"; fi
}
give_up term1 1 sigterm
give_up term0 0 sigterm
give_up timeout1 1 timeout

# --- a chief handed a state on a checkpoint boundary -------------------------------------
# The chief is SIGKILLed past step $PAST; worker 1 waits at step S. The replacement
# chief checkpoints every S steps, so the state it is handed sits on its boundary.
port0=$(free_port); port1=$(free_port)
start hand 0 60; start hand 1 60
wait_for 60 past hand "${pid[0]}"
kill -9 "${pid[0]}" 2>/dev/null
wait "${pid[0]}" 2>/dev/null
wait_for 30 grep -q "waiting up to 60s for a replacement" "$tmp/hand.1.err"
failed=$(sed -n 's/.*: all-reduce at step \([0-9]*\): .*waiting up to.*/\1/p' "$tmp/hand.1.err")
S=$((${failed:-1} - 1))
: >"$tmp/hand.0.err"
start hand 0 60 --checkpoint-every-steps "$S"
finish "${pid[0]}" 60; rc0=$rc
finish "${pid[1]}" 60; rc1=$rc
got=$(hashes "$tmp/hand.0.out" "$tmp/hand.1.out")
bad=()
[[ $rc0 -eq 0 && $rc1 -eq 0 ]] || bad+=("rc=$rc0,$rc1")
[[ -n $failed ]] || bad+=("no 'lost ... waiting up to' line")
grep -q "joined generation 2: state of step $S received from rank 1" "$tmp/hand.0.err" \
  || bad+=("not handed step $S")
grep -q "checkpoint at step $S saved" "$tmp/hand.0.err" || bad+=("no 'checkpoint at step $S saved'")
[[ $got == "$REF" ]] || bad+=("hash ${got:0:12} != ${REF:0:12}")
if [[ ${#bad[@]} -eq 0 ]]; then
  tap_ok "a replacement chief handed step $S, a step its every-N falls on, saves it; same hash"
else
  tap_fail "replacement chief handed a boundary state" "${bad[*]}; $(tail -4 "$tmp/hand.0.err")"
fi
tap_done
