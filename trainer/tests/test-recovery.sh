#!/usr/bin/env bash
# Live recovery (docs/design.md, "Live recovery") under launch, on the ASan+UBSan build:
# SIGKILL of a random worker (the chief included) at a random step over the TCP ring and
# through shared memory, two kills in a row, a kill during a recovery, SIGTERM of one
# worker (the stop count), and the recovery timeout, alone and under launch. Every run
# must end with the uninterrupted run's weights hash, having started again only the
# process that died and read no checkpoint after the start — or, where a recovery cannot
# complete, fall back to the group restart; never hang (every wait is bounded).
# RECOVERY_SEED=N repeats the random choices of an earlier run.
set -uo pipefail # no -e: a failed check is reported (not ok) and the test goes on
source e2e/lib/tap.sh
source trainer/tests/lib.sh
BIN=${TRAINER:-build/san/bin/kubetrain-trainer}
DATA=/usr/share/datasets/fashion-mnist
tmp=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -CONT "$p" 2>/dev/null; kill -9 "$p" 2>/dev/null; done
  rm -rf "$tmp"
}
trap cleanup EXIT
export KUBETRAIN_TERMINATION_FILE=$tmp/termination
unset TF_CONFIG KUBETRAIN_SECRET KUBETRAIN_SECRET_FILE KUBETRAIN_SHM
export OPENBLAS_NUM_THREADS=1

skip_without_data "live recovery" "$DATA"

seed=${RECOVERY_SEED:-$(od -An -tu2 -N2 /dev/urandom | tr -d ' ')}
RANDOM=$seed
echo "# random choices from seed $seed (RECOVERY_SEED=$seed repeats them)"

# 600 steps of a small model, a checkpoint every 25: the kills land between 25 and 150,
# 450 steps or more before the end. A kill comes up to 140 ms after its checkpoint (the
# wait's 50 ms poll, then a random pause), and on an idle machine 50 steps took less:
# with 200 steps, kills after step 150 found the run over (the survivors had exited 0,
# and the replacement launch started waited for them until the test gave up). All 24
# checkpoints are kept: the tests wait for ckpt-50 and ckpt-150, which the default 5
# would prune 125 steps later (a fraction of a second, less than a stalled poll).
EVERY=25
STEPS=600
run=(--model mlp --epochs 2 --steps-per-epoch $((STEPS / 2)) --per-worker-batch 16
     --print-weights-hash --recovery-timeout 20 --checkpoint-every-steps "$EVERY"
     --keep-checkpoints $((STEPS / EVERY)))

# The uninterrupted runs: the ring and shared memory sum 3 ranks in other orders, so
# each path has its own reference.
declare -A REF
for shm in 0 1; do
  KUBETRAIN_SHM=$shm "$BIN" launch --workers 3 "${run[@]}" --checkpoint-dir "$tmp/ref$shm" \
    >"$tmp/ref$shm.out" 2>"$tmp/ref$shm.err"
  REF[$shm]=$(hashes "$tmp/ref$shm.out")
  [[ $(wc -l <<<"${REF[$shm]}") -eq 1 && -n ${REF[$shm]} ]] && continue
  tap_fail "uninterrupted reference (KUBETRAIN_SHM=$shm)" "$(tail -5 "$tmp/ref$shm.err")"
  tap_done
  exit
done

# The log of launch $1 without the progress lines, its last ${2:-15} lines.
log_of() { grep -v '^\[worker .\] [0-9E]' "$tmp/$1.err" | tail -"${2:-15}"; }
# go SHM NAME args...: 3 workers under launch, output in $tmp/NAME.{out,err}, checkpoints
# in $tmp/ck-NAME.
go() {
  local shm=$1 name=$2; shift 2
  KUBETRAIN_SHM=$shm start_launch "$tmp/$name.out" "$tmp/$name.err" --workers 3 "${run[@]}" \
    --checkpoint-dir "$tmp/ck-$name" "$@"
}
same_hash() { [[ $(hashes "$tmp/$1.out") == "${REF[$2]}" ]]; } # NAME SHM
start_launch() { # out err args...
  local out=$1 err=$2; shift 2
  : >"$out"; : >"$err"
  "$BIN" launch "$@" >"$out" 2>"$err" &
  lpid=$!; pids+=("$lpid")
}
worker_pid() { # err index: the newest pid the launcher reported for worker i
  sed -n "s/.*launch: worker $2: pid \([0-9]*\),.*/\1/p" "$1" | tail -1
}
spawns() { grep -c "launch: worker $2: pid " "$1"; } # err index
wait_for() { # seconds cmd...: polls cmd every 0.05 s
  local end=$((SECONDS + $1)); shift
  until "$@"; do [ $SECONDS -ge $end ] && return 1; sleep 0.05; done
}
# Waits for launch at most $1 seconds, then kills it; sets rc (124: it hung).
finish() {
  if wait_for "$1" bash -c "! kill -0 $lpid 2>/dev/null"; then wait "$lpid" 2>/dev/null; rc=$?
  else kill -9 "$lpid" 2>/dev/null; pkill -9 -P "$lpid" 2>/dev/null; rc=124; fi
}
# Every process started again, by index, as "i:n" for the workers started more than once.
respawned() { # err
  local i out=""
  for i in 0 1 2; do [[ $(spawns "$1" $i) -gt 1 ]] && out+="$i:$(spawns "$1" $i) "; done
  echo "${out% }"
}

# --- SIGKILL of a random worker at a random step, 20 trials ---------------------------
for trial in $(seq 1 20); do
  shm=$((trial % 2)); victim=$((RANDOM % 3)); at=$((EVERY * (1 + RANDOM % 6)))
  path=$([[ $shm -eq 1 ]] && echo "shared memory" || echo "TCP ring")
  rm -rf "$tmp/ck-k" "$tmp/k.jsonl"
  go "$shm" k --metrics-file "$tmp/k.jsonl"
  wait_for 60 test -e "$tmp/ck-k/ckpt-$at.kt"
  sleep "0.0$((RANDOM % 10))"
  kill -9 "$(worker_pid "$tmp/k.err" $victim)" 2>/dev/null
  finish 120
  name="trial $trial ($path): SIGKILL of worker $victim after step $at"
  got=$(hashes "$tmp/k.out")
  joined="joined generation 2: state of step [0-9]* received from rank [0-9], no checkpoint read"
  lost="lost rank [0-9] \(127\.0\.0\.1:[0-9]+\): .*; waiting up to 20s for a replacement"
  bad=()
  [[ $rc -eq 0 ]] || bad+=("rc=$rc")
  same_hash k "$shm" || bad+=("hash ${got:0:12} != ${REF[$shm]:0:12}")
  again=$(respawned "$tmp/k.err")
  [[ $again == "$victim:2" ]] || bad+=("started again: $again")
  grep -q "live recovery: starting worker $victim again alone" "$tmp/k.err" \
    || bad+=("no replacement line")
  grep -q "restart 1/" "$tmp/k.err" && bad+=("group restart")
  grep -q "resuming from" "$tmp/k.err" && bad+=("a checkpoint was read")
  grep -q "^\[worker $victim\] .*$joined" "$tmp/k.err" || bad+=("no 'joined generation 2' line")
  [[ $(grep -c "live recovery: generation 2 formed; state of step" "$tmp/k.err") -eq 3 ]] \
    || bad+=("not 3 'generation 2 formed' lines")
  grep -qE "$lost \(generation 2\)" "$tmp/k.err" || bad+=("no 'lost ... waiting up to' line")
  # The chief's replacement is the chief again: its metrics file carries the records
  # over and holds every step once, except, where the chief died one step behind the
  # rank that sent the state (docs/design.md, "Live recovery"), that step S's record.
  if [[ $victim -eq 0 ]]; then
    sent=$(sed -n 's/.*joined generation 2: state of step \([0-9]*\) .*/\1/p' "$tmp/k.err")
    steps=$(python3 -c 'import json, sys
s = [e["step"] for e in map(json.loads, open(sys.argv[1])) if e["event"] == "step"]
gap, n = int(sys.argv[2] or 0), int(sys.argv[3])
print("ok" if s in (list(range(1, n + 1)), [i for i in range(1, n + 1) if i != gap])
      else "steps %s..%s, %d records" % (s[:1], s[-1:], len(s)))' "$tmp/k.jsonl" "$sent" "$STEPS" \
      2>&1)
    [[ $steps == ok ]] || bad+=("metrics file: $steps")
    grep -q "^\[worker 0\] .*record(s) up to step" "$tmp/k.err" || bad+=("no records carried over")
  fi
  if [[ ${#bad[@]} -eq 0 ]]; then
    tap_ok "$name: only it started again, no checkpoint read, same hash"
  else tap_fail "$name" "${bad[*]}; $(log_of k)"; fi
done

echo "# ${SECONDS}s so far"
# --- two kills in a row ------------------------------------------------------------------
a=$((RANDOM % 3)); b=$((RANDOM % 3)); ck=$tmp/ck-t
go 1 t
wait_for 60 test -e "$ck/ckpt-50.kt"
kill -9 "$(worker_pid "$tmp/t.err" $a)" 2>/dev/null
wait_for 60 bash -c "[[ \$(grep -c 'generation 2 formed' '$tmp/t.err') -eq 3 ]]"
wait_for 60 test -e "$ck/ckpt-150.kt"
kill -9 "$(worker_pid "$tmp/t.err" $b)" 2>/dev/null
finish 120
if [[ $rc -eq 0 ]] && same_hash t 1 && ! grep -q "restart 1/" "$tmp/t.err" \
   && [[ $(grep -c "generation 3 formed" "$tmp/t.err") -eq 3 ]] \
   && ! grep -q "resuming from" "$tmp/t.err"; then
  tap_ok "two kills in a row (worker $a, then $b): generations 2 and 3, same hash, no ckpt read"
else tap_fail "two kills in a row ($a then $b)" "rc=$rc $(log_of t)"; fi

echo "# ${SECONDS}s so far"
# --- a kill during a recovery -------------------------------------------------------------
# The second kill lands while the survivors wait or sync: the run either recovers live or
# falls back to the group restart (from the checkpoint); either way the same hash. Links
# of two rendezvous can meet in one ring then, which only the recovery timeout (5 s here)
# or the ring's io timeout breaks; the replacements it takes are not what this checks,
# hence the larger --max-restarts budget.
a=$((RANDOM % 3)); b=$(((a + 1 + RANDOM % 2) % 3))
go 0 d --recovery-timeout 5 --max-restarts 10
wait_for 60 test -e "$tmp/ck-d/ckpt-50.kt"
kill -9 "$(worker_pid "$tmp/d.err" $a)" 2>/dev/null
wait_for 30 grep -q "live recovery: starting worker $a again" "$tmp/d.err"
sleep "0.$((RANDOM % 3))"
kill -9 "$(worker_pid "$tmp/d.err" $b)" 2>/dev/null
finish 150
how="recovered live"
grep -q "restart 1/" "$tmp/d.err" && how="fell back to the group restart"
if [[ $rc -eq 0 ]] && same_hash d 0; then
  tap_ok "a kill of worker $b during the recovery from worker $a's: $how, same hash"
else tap_fail "kill during a recovery ($a, then $b)" "rc=$rc ($how) $(log_of d)"; fi

echo "# ${SECONDS}s so far"
# --- SIGTERM of one worker: it leaves after the step, the others stay ---------------------
v=$((1 + RANDOM % 2))
go 1 s
wait_for 60 test -e "$tmp/ck-s/ckpt-50.kt"
kill -TERM "$(worker_pid "$tmp/s.err" $v)" 2>/dev/null
finish 120
stopped=$(sed -n "s/^\[worker $v\] .*stopped by a signal after step \([0-9]*\).*/\1/p" "$tmp/s.err")
stopped=${stopped%%$'\n'*}
stays="1 rank(s) asked to stop after step $stopped and leave; this one stays"
if [[ $rc -eq 0 && -n $stopped && $(respawned "$tmp/s.err") == "$v:2" ]] && same_hash s 1 \
   && grep -q "^\[worker 0\] .*checkpoint at step $stopped saved" "$tmp/s.err" \
   && [[ $(grep -c "$stays" "$tmp/s.err") -eq 2 ]] \
   && grep -q "worker $v exited with 75" "$tmp/s.err" && ! grep -q "restart 1/" "$tmp/s.err"; then
  tap_ok "SIGTERM of worker $v: it leaves after step $stopped (saved), the others stay, same hash"
else tap_fail "SIGTERM of one worker" "rc=$rc stopped=$stopped $(log_of s)"; fi

echo "# ${SECONDS}s so far"
# --- the recovery timeout ---------------------------------------------------------------
p0=$(free_port); p1=$(free_port); ck=$tmp/ck-alone
for i in 0 1; do
  TF_CONFIG=$(tf_config $i "$p0" "$p1") KUBETRAIN_SECRET=s KUBETRAIN_TERMINATION_FILE=$tmp/term$i \
    "$BIN" "${run[@]}" --recovery-timeout 2 --checkpoint-dir "$ck" \
    >"$tmp/a$i.out" 2>"$tmp/a$i.err" &
  ap[i]=$!; pids+=("${ap[i]}")
done
wait_for 60 test -e "$ck/ckpt-50.kt"
kill -9 "${ap[1]}" 2>/dev/null
wait "${ap[1]}" 2>/dev/null
t0=$SECONDS
lpid=${ap[0]}; finish 60
lost="lost rank 1 \(127\.0\.0\.1:$p1\): .*; waiting up to 2s for a replacement \(generation 2\)"
if [[ $rc -eq 75 && $((SECONDS - t0)) -le 30 ]] && grep -q '"recoveryTimedOut":true' "$tmp/term0" \
   && grep -qE "$lost" "$tmp/a0.err" \
   && grep -q "live recovery: no replacement for rank 1 .* within 2s" "$tmp/a0.err"; then
  tap_ok "no replacement within --recovery-timeout: the survivor exits 75, recoveryTimedOut said"
else tap_fail "recovery timeout" "rc=$rc $(cat "$tmp/term0") $(tail -5 "$tmp/a0.err")"; fi

# Under launch: launch held (SIGSTOP) while a worker dies, so no replacement can come;
# the survivors give up, and launch, let go, restarts the group from the checkpoint.
go 1 f --recovery-timeout 2
wait_for 60 test -e "$tmp/ck-f/ckpt-50.kt"
w0=$(worker_pid "$tmp/f.err" 0); w1=$(worker_pid "$tmp/f.err" 1)
kill -STOP "$lpid"
kill -9 "$(worker_pid "$tmp/f.err" 2)" 2>/dev/null
wait_for 30 bash -c "! kill -0 $w0 2>/dev/null && ! kill -0 $w1 2>/dev/null"
kill -CONT "$lpid"
finish 120
if [[ $rc -eq 0 ]] && same_hash f 1 \
   && grep -q "worker 0 exited with 75 (no replacement came in time)" "$tmp/f.err" \
   && grep -q "restart 1/3: the group starts again from the newest checkpoint" "$tmp/f.err" \
   && grep -q "resuming from" "$tmp/f.err"; then
  tap_ok "survivors that time out make launch restart the group from the checkpoint; same hash"
else tap_fail "timeout under launch: group restart" "rc=$rc $(log_of f)"; fi

# --recovery-timeout 0 is today's behaviour: every rank exits 75 and the group restarts.
go 1 o --recovery-timeout 0
wait_for 60 test -e "$tmp/ck-o/ckpt-50.kt"
kill -9 "$(worker_pid "$tmp/o.err" 1)" 2>/dev/null
finish 120
if [[ $rc -eq 0 ]] && same_hash o 1 && grep -q "restart 1/3" "$tmp/o.err" \
   && ! grep -q "live recovery" "$tmp/o.err"; then
  tap_ok "--recovery-timeout 0: the group restart of before, same hash"
else tap_fail "--recovery-timeout 0" "rc=$rc $(log_of o 10)"; fi

echo "# ${SECONDS}s so far"
leftover=$(find /dev/shm -maxdepth 1 -name 'kubetrain-*' -user "$(id -u)" 2>/dev/null |
  while read -r f; do
    pid=${f#/dev/shm/kubetrain-}; pid=${pid%%-*}; kill -0 "$pid" 2>/dev/null || echo "$f"
  done)
if [[ -z $leftover ]]; then tap_ok "no shared-memory object is left in /dev/shm"
else tap_fail "objects left in /dev/shm" "$leftover"; fi
tap_done
