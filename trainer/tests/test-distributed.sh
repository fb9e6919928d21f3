#!/usr/bin/env bash
# Several trainer processes on loopback (the ASan+UBSan build): identical weights on
# every rank, N x b == 1 x N*b, exact resume after SIGKILL of a random worker and after
# SIGTERM, a chief killed while writing checkpoints, a corrupt newest checkpoint, the
# wrong secret, malformed TF_CONFIG and every exit code of the contract.
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
export KUBETRAIN_TERMINATION_FILE=$tmp/termination
unset TF_CONFIG KUBETRAIN_SECRET KUBETRAIN_SECRET_FILE
export OPENBLAS_NUM_THREADS=1

skip_without_data "distributed trainer" "$DATA"

# A free port on 127.0.0.1 (the kernel's choice; closed again at once).
count_hashes() { grep -c 'weights-sha256: ' "$1"; }

mlp=(--model mlp --epochs 3 --steps-per-epoch 5 --per-worker-batch 16 --print-weights-hash)
cnn=(--model tutorial-cnn --epochs 2 --steps-per-epoch 6 --per-worker-batch 8 --print-weights-hash)

# --- identical weights on every rank -------------------------------------------------
for n in 2 4; do
  "$BIN" launch --workers $n "${mlp[@]}" >"$tmp/out$n" 2>"$tmp/err$n"; rc=$?
  if [[ $rc -eq 0 && $(count_hashes "$tmp/out$n") -eq $n && $(hashes "$tmp/out$n" | wc -l) -eq 1 ]]; then
    tap_ok "$n workers end with the same weights hash on every rank"
  else tap_fail "$n workers, same hash" "rc=$rc $(cat "$tmp/out$n" "$tmp/err$n" | tail -20)"; fi
done
H2=$(hashes "$tmp/out2")
"$BIN" launch --workers 2 "${mlp[@]}" >"$tmp/out2b" 2>&1
[[ -n $H2 && $(hashes "$tmp/out2b") == "$H2" ]] && tap_ok "2-worker runs are deterministic" \
  || tap_fail "2-worker runs are deterministic" "$H2 vs $(hashes "$tmp/out2b")"

# --- the shared-memory path and the TCP ring ------------------------------------------
# launch's workers share this host, so their all-reduces go through shared memory (shm.h);
# KUBETRAIN_SHM=0 keeps them on the ring. With 2 ranks each sum is one addition, so both
# paths give the same bits.
if grep -q "all-reduce through shared memory" "$tmp/err2" && grep -q "all-reduce through shared memory" "$tmp/err4"; then
  tap_ok "workers on one host all-reduce through shared memory (2 and 4 workers)"
else tap_fail "shared memory chosen on one host" "$(grep -i "all-reduce" "$tmp/err2" "$tmp/err4" | head -4)"; fi
KUBETRAIN_SHM=0 "$BIN" launch --workers 2 "${mlp[@]}" >"$tmp/tcp2" 2>"$tmp/tcp2e"; rc=$?
if [[ $rc -eq 0 && -n $H2 && $(hashes "$tmp/tcp2") == "$H2" && $(grep -c "all-reduce over TCP: KUBETRAIN_SHM=0" "$tmp/tcp2e") -eq 2 ]]; then
  tap_ok "KUBETRAIN_SHM=0: the TCP ring alone, same hash as through shared memory"
else tap_fail "TCP ring alone, same hash" "rc=$rc $H2 vs $(hashes "$tmp/tcp2") $(tail -5 "$tmp/tcp2e")"; fi
KUBETRAIN_SHM=0 "$BIN" launch --workers 4 "${mlp[@]}" >"$tmp/tcp4" 2>&1; rc=$?
[[ $rc -eq 0 && $(count_hashes "$tmp/tcp4") -eq 4 && $(hashes "$tmp/tcp4" | wc -l) -eq 1 ]] \
  && tap_ok "KUBETRAIN_SHM=0: 4 workers over the TCP ring end with the same hash on every rank" \
  || tap_fail "4 workers over TCP" "rc=$rc $(tail -8 "$tmp/tcp4")"
# a rank that cannot share (here: has it off) makes every rank keep the ring
p0=$(free_port); p1=$(free_port)
TF_CONFIG=$(tf_config 0 "$p0" "$p1") KUBETRAIN_SECRET=s "$BIN" "${mlp[@]}" >"$tmp/f0.out" 2>"$tmp/f0.err" & f0=$!; pids+=("$f0")
TF_CONFIG=$(tf_config 1 "$p0" "$p1") KUBETRAIN_SECRET=s KUBETRAIN_SHM=0 "$BIN" "${mlp[@]}" >"$tmp/f1.out" 2>"$tmp/f1.err"; rc1=$?
wait "$f0"; rc0=$?
if [[ $rc0 -eq 0 && $rc1 -eq 0 ]] && grep -q "all-reduce over TCP: rank 1 has no shared arena" "$tmp/f0.err" \
   && [[ $(cat "$tmp/f0.out" "$tmp/f1.out" | sed -n 's/weights-sha256: //p' | sort -u) == "$H2" ]]; then
  tap_ok "one rank without shared memory: every rank keeps the ring (said in the log), same hash"
else tap_fail "fallback to the ring" "rc=$rc0/$rc1 $(grep -i all-reduce "$tmp/f0.err" "$tmp/f1.err")"; fi
# a rank with a /dev/shm of its own, as a pod has (a private mount namespace; needs root)
if unshare -m true 2>/dev/null; then
  p0=$(free_port); p1=$(free_port)
  TF_CONFIG=$(tf_config 0 "$p0" "$p1") KUBETRAIN_SECRET=s "$BIN" "${mlp[@]}" >"$tmp/n0.out" 2>"$tmp/n0.err" & n0=$!; pids+=("$n0")
  TF_CONFIG=$(tf_config 1 "$p0" "$p1") KUBETRAIN_SECRET=s unshare -m sh -c 'mount -t tmpfs kt-shm /dev/shm && exec "$@"' sh \
    "$BIN" "${mlp[@]}" >"$tmp/n1.out" 2>"$tmp/n1.err"; rc1=$?
  wait "$n0"; rc0=$?
  if [[ $rc0 -eq 0 && $rc1 -eq 0 ]] && grep -q "all-reduce over TCP: a peer's shared memory .* is not here" "$tmp/n0.err" \
     && grep -q "all-reduce over TCP: a peer's shared memory .* is not here" "$tmp/n1.err" \
     && [[ $(cat "$tmp/n0.out" "$tmp/n1.out" | sed -n 's/weights-sha256: //p' | sort -u) == "$H2" ]]; then
    tap_ok "ranks with separate /dev/shm (as pods): both keep the ring and say why, same hash"
  else tap_fail "separate /dev/shm" "rc=$rc0/$rc1 $(grep -i all-reduce "$tmp/n0.err" "$tmp/n1.err")"; fi
else
  tap_skip "ranks with separate /dev/shm" "unshare -m is not allowed here (needs root)"
fi
leftover=$(find /dev/shm -maxdepth 1 -name 'kubetrain-*' -user "$(id -u)" 2>/dev/null | while read -r f; do
  pid=${f#/dev/shm/kubetrain-}; pid=${pid%%-*}; kill -0 "$pid" 2>/dev/null || echo "$f"; done)
[[ -z $leftover ]] && tap_ok "no shared-memory object is left in /dev/shm" || tap_fail "objects left in /dev/shm" "$leftover"

# --- N workers with batch b == one worker with batch N*b ----------------------------
"$BIN" launch --workers 2 --model tutorial-cnn --epochs 2 --steps-per-epoch 3 --per-worker-batch 8 \
  --metrics-file "$tmp/m2.jsonl" >/dev/null 2>&1
"$BIN" --model tutorial-cnn --epochs 2 --steps-per-epoch 3 --per-worker-batch 16 \
  --metrics-file "$tmp/m1.jsonl" >/dev/null 2>&1
python3 - "$tmp/m2.jsonl" "$tmp/m1.jsonl" <<'PY' && tap_ok "2 workers x batch 8 == 1 worker x batch 16 (losses within 1e-5)" || tap_fail "2x8 == 1x16"
import json, sys
a, b = ([json.loads(l) for l in open(f)] for f in sys.argv[1:3])
la = [e["loss"] for e in a if e["event"] == "step"]; lb = [e["loss"] for e in b if e["event"] == "step"]
assert len(la) == len(lb) == 6, (la, lb)
for x, y in zip(la, lb):
    assert abs(x - y) <= 1e-5 * max(1.0, abs(y)), (la, lb)
aa = [e["accuracy"] for e in a if e["event"] == "step"]; ab = [e["accuracy"] for e in b if e["event"] == "step"]
assert aa == ab, (aa, ab)
PY

# --- exact resume after SIGKILL of a random worker at a random step ------------------
# The group restart (--recovery-timeout 0); live recovery is test-recovery.sh's.
"$BIN" launch --workers 2 "${cnn[@]}" >"$tmp/ref" 2>&1
HC=$(hashes "$tmp/ref")
start_launch() { # out err args...
  local out=$1 err=$2; shift 2
  : >"$out"; : >"$err" # there before the first poll of them (the & redirects later)
  "$BIN" launch "$@" >"$out" 2>"$err" &
  lpid=$!; pids+=("$lpid")
}
worker_pid() { # err index: the newest pid the launcher reported for worker i
  sed -n "s/.*launch: worker $2: pid \([0-9]*\),.*/\1/p" "$1" | tail -1
}
ck=$tmp/ck-kill
# The kill must land before the last all-reduce (12 steps of tens of ms each): after the
# checkpoint of step 2, 4 or 6, plus 0-90 ms into the next step.
victim=$((RANDOM % 2)); at_step=$((2 * (1 + RANDOM % 3)))
start_launch "$tmp/kout" "$tmp/kerr" --workers 2 "${cnn[@]}" --recovery-timeout 0 --checkpoint-dir "$ck" --checkpoint-every-steps 2 \
  --metrics-file "$tmp/km.jsonl"
wait_for 60 test -e "$ck/ckpt-$at_step.kt"
sleep "0.0$((RANDOM % 10))"
vp=$(worker_pid "$tmp/kerr" $victim)
kill -9 "$vp" 2>/dev/null
wait "$lpid" 2>/dev/null; rc=$?
if [[ $rc -eq 0 && $(hashes "$tmp/kout") == "$HC" && -n $HC ]] && grep -q "restart 1/3" "$tmp/kerr"; then
  tap_ok "SIGKILL of worker $victim near step $at_step: the job restarts and ends with the uninterrupted hash"
else tap_fail "SIGKILL of a random worker" "rc=$rc ref=$HC got=$(hashes "$tmp/kout") $(tail -15 "$tmp/kerr")"; fi
# The metrics file of the restarted run holds the whole run: the records of the first
# attempt up to its checkpoint, then the resumed steps, each global step once, in order.
out=$(python3 - "$tmp/km.jsonl" <<'PY'
import json, sys
ev = [json.loads(l) for l in open(sys.argv[1])]
steps = [e["step"] for e in ev if e["event"] == "step"]
epochs = [e["epoch"] for e in ev if e["event"] == "epoch"]
bad = []
if steps != list(range(1, 13)): bad.append("steps %s" % steps)
if epochs != [1, 2]: bad.append("epochs %s" % epochs)
if ev[-1]["event"] != "done" or sum(e["event"] == "done" for e in ev) != 1: bad.append("done %s" % ev[-1])
print("; ".join(bad))
PY
)
leftover=$(compgen -G "$tmp/km.jsonl.*")
if [[ -z $out && -z $leftover ]] && grep -q "record(s) up to step" "$tmp/kerr"; then
  tap_ok "after the restart the metrics file holds the whole run: steps 1..12 once each, both epochs, one done, nothing left beside it"
else tap_fail "metrics file across a restart" "$out leftover=$leftover $(grep -i metrics "$tmp/kerr" | tail -3)"; fi

# A stop at an epoch's last step: its epoch record is written before the step's hook saves
# the checkpoint and stops, so the resumed run, which starts the next epoch, carries it
# over (it was lost, as it was when a SIGKILL landed between an epoch-end checkpoint and
# the record). With one step an epoch every stop lands on an epoch's last step.
ck=$tmp/ck-ep; em=$tmp/em.jsonl
ep1=(--model mlp --epochs 1000 --steps-per-epoch 1 --per-worker-batch 16 --checkpoint-dir "$ck"
     --checkpoint-every-steps 1 --metrics-file "$em")
"$BIN" "${ep1[@]}" >/dev/null 2>"$tmp/ep1.err" & epid=$!; pids+=("$epid")
wait_for 60 grep -q "checkpoint at step 3 saved" "$tmp/ep1.err"
kill -TERM "$epid"; wait "$epid" 2>/dev/null; rc1=$?
"$BIN" "${ep1[@]}" >/dev/null 2>"$tmp/ep2.err"; rc2=$?
stopped=$(sed -n 's/.*stopped by a signal after step \([0-9]*\).*/\1/p' "$tmp/ep1.err" | head -1)
got=$(python3 -c 'import json, sys
e = [r["epoch"] for r in map(json.loads, open(sys.argv[1])) if r["event"] == "epoch"]
print("ok" if e == list(range(1, 1001)) else "missing %s, %d records" %
      (sorted(set(range(1, 1001)) - set(e))[:5], len(e)))' "$em" 2>&1)
if [[ $rc1 -eq 75 && $rc2 -eq 0 && -n $stopped && $got == ok ]]; then
  tap_ok "SIGTERM at the last step of epoch $stopped: the resumed run's metrics file has every epoch record once"
else tap_fail "epoch record across a stop at an epoch's end" "rc=$rc1/$rc2 stopped=$stopped: $got"; fi
grep -qE "\[worker [01]\] .*(lost|closed|reset|EOF|exited|all-reduce)" "$tmp/kerr" \
  && tap_ok "the surviving worker names the lost peer" \
  || tap_fail "the surviving worker names the lost peer" "$(grep -v '^\[worker .\] [0-9]' "$tmp/kerr" | tail -10)"

# --- SIGTERM: finish the step, checkpoint, exit 75; the resume loses no step ----------
# A signal that lands after the last step (12) stops nothing mid-run, which is what this
# case is about: on a slow machine the steps can outrun it, so try again (at most 3 times).
for attempt in 1 2 3; do
  ck=$tmp/ck-term-$attempt
  start_launch "$tmp/tout" "$tmp/terr" --workers 2 "${cnn[@]}" --checkpoint-dir "$ck" --checkpoint-every-steps 100
  wait_for 60 grep -q "Epoch 1/2" "$tmp/tout"
  sleep "0.$((RANDOM % 3))"
  kill -TERM "$lpid"
  wait "$lpid" 2>/dev/null; rc=$?
  stopped=$(sed -n 's/.*stopped by a signal after step \([0-9]*\).*/\1/p' "$tmp/terr" | head -1)
  [[ -n $stopped && $stopped -lt 12 ]] && break
  echo "# attempt $attempt: the SIGTERM landed after step ${stopped:-none} (rc=$rc); trying again"
done
saved=$(ls "$ck" 2>/dev/null | sed -n 's/^ckpt-\([0-9]*\)\.kt$/\1/p' | sort -n | tail -1)
if [[ $rc -eq 75 && -n $stopped && $stopped == "$saved" ]]; then
  tap_ok "SIGTERM: every worker stops after step $stopped, the chief saves it, exit 75"
else tap_fail "SIGTERM stop" "rc=$rc stopped=$stopped saved=$saved $(tail -15 "$tmp/terr")"; fi
"$BIN" launch --workers 2 "${cnn[@]}" --checkpoint-dir "$ck" --metrics-file "$tmp/tm.jsonl" >"$tmp/tout2" 2>"$tmp/terr2"; rc=$?
first=$(python3 -c 'import json,sys; print([json.loads(l) for l in open(sys.argv[1])][0].get("step"))' "$tmp/tm.jsonl" 2>/dev/null)
if [[ $rc -eq 0 && $first == $((stopped + 1)) && $(hashes "$tmp/tout2") == "$HC" ]]; then
  tap_ok "after SIGTERM the run resumes at global step $first and ends with the uninterrupted hash"
else tap_fail "resume after SIGTERM" "rc=$rc first=$first stopped=$stopped $(tail -8 "$tmp/terr2")"; fi
# resuming from the checkpoint of an epoch's last step prints no empty epoch
ck=$tmp/ck-epoch
"$BIN" launch --workers 2 "${cnn[@]}" --epochs 1 --checkpoint-dir "$ck" >/dev/null 2>&1
"$BIN" launch --workers 2 "${cnn[@]}" --checkpoint-dir "$ck" >"$tmp/eout" 2>&1; rc=$?
if [[ $rc -eq 0 && $(hashes "$tmp/eout") == "$HC" ]] && ! grep -q "Epoch 1/2" "$tmp/eout" \
   && grep -q "^\[worker 0\] 6/6 " "$tmp/eout" && ! grep -q "0/6" "$tmp/eout"; then
  tap_ok "resume from an epoch-end checkpoint: next epoch, no empty epoch line, same hash"
else tap_fail "resume from epoch end" "rc=$rc $(tail -12 "$tmp/eout")"; fi

# another world size: weights and optimizer restored, the data re-sharded
ck=$tmp/ck-world
"$BIN" launch --workers 2 "${mlp[@]}" --epochs 1 --optimizer adam --checkpoint-dir "$ck" >/dev/null 2>&1
"$BIN" launch --workers 4 "${mlp[@]}" --optimizer adam --checkpoint-dir "$ck" >"$tmp/wout" 2>"$tmp/werr"; rc=$?
if [[ $rc -eq 0 && $(count_hashes "$tmp/wout") -eq 4 && $(hashes "$tmp/wout" | wc -l) -eq 1 ]] \
   && grep -q "written by 2 workers, this run has 4: weights and optimizer restored, data re-sharded" "$tmp/werr" \
   && grep -q "resuming from .*ckpt-5.kt" "$tmp/werr" && ! grep -q "^\[worker 0\] Epoch 1/3" "$tmp/wout"; then
  tap_ok "a checkpoint of 2 workers resumes on 4 (weights + optimizer restored, data re-sharded)"
else tap_fail "resume with another world size" "rc=$rc $(tail -8 "$tmp/werr")"; fi

# --- the chief killed while it writes checkpoints; a corrupt newest one ---------------
# The killed run is long (20 epochs of 150 steps), so that it cannot end before a write is
# caught (cnn's 12 steps once ended while the test still looked for a temporary file);
# it dies within its first steps, and the resume trains on to the end of epoch 1 only, as
# does its own uninterrupted reference (a resume may ask for other --epochs than the
# checkpoint's run: epoch-end and world-size resumes below ask for more).
long=(--model tutorial-cnn --epochs 1 --steps-per-epoch 150 --per-worker-batch 8 --print-weights-hash)
"$BIN" launch --workers 2 "${long[@]}" >"$tmp/lref" 2>/dev/null
HL=$(hashes "$tmp/lref")
ck=$tmp/ck-chief
p0=$(free_port); p1=$(free_port)
for i in 0 1; do
  TF_CONFIG=$(tf_config $i "$p0" "$p1") KUBETRAIN_SECRET=s3 "$BIN" "${long[@]}" --epochs 20 \
    --recovery-timeout 0 --checkpoint-dir "$ck" \
    --checkpoint-every-steps 1 --keep-checkpoints 3 >"$tmp/c$i.out" 2>"$tmp/c$i.err" &
  cp[i]=$!; pids+=("${cp[i]}")
done
wait_for 60 test -e "$ck/ckpt-3.kt"
# kill when a temporary file is open, i.e. in the middle of a write (else at the next step)
wait_for 10 compgen -G "$ck/.ckpt-*.tmp" >/dev/null
alive=0; kill -0 "${cp[0]}" 2>/dev/null && alive=1
kill -9 "${cp[0]}" 2>/dev/null
wait "${cp[0]}" 2>/dev/null; wait "${cp[1]}" 2>/dev/null; rc1=$?
if [[ $alive -eq 1 && $rc1 -eq 75 ]] && grep -q "rank 0" "$tmp/c1.err"; then
  tap_ok "the chief killed: the other worker exits 75 naming rank 0"
else tap_fail "the chief killed: other worker exits 75" "chief alive at the kill: $alive, rc=$rc1 $(tail -5 "$tmp/c1.err")"; fi
newest=$(ls "$ck" | sed -n 's/^ckpt-\([0-9]*\)\.kt$/\1/p' | sort -n | tail -1)
"$BIN" launch --workers 2 "${long[@]}" --checkpoint-dir "$ck" >"$tmp/cout" 2>"$tmp/cerr"; rc=$?
if [[ $rc -eq 0 && -n $HL && $(hashes "$tmp/cout") == "$HL" ]] && grep -q "resuming from .*ckpt-$newest.kt" "$tmp/cerr"; then
  tap_ok "after the chief died mid-write the previous complete checkpoint (step $newest) loads; same hash"
else tap_fail "resume after the chief died" "rc=$rc newest=$newest $(tail -8 "$tmp/cerr")"; fi
# truncate the newest checkpoint of a stopped run: it is reported and skipped
ck=$tmp/ck-corrupt
"$BIN" --model tutorial-cnn --epochs 1 --steps-per-epoch 4 --per-worker-batch 8 --checkpoint-dir "$ck" \
  --checkpoint-every-steps 2 >/dev/null 2>&1
truncate -s 1000 "$ck/ckpt-4.kt"
"$BIN" --model tutorial-cnn --epochs 1 --steps-per-epoch 4 --per-worker-batch 8 --checkpoint-dir "$ck" \
  --print-weights-hash >"$tmp/x1" 2>"$tmp/x1e"; rc=$?
"$BIN" --model tutorial-cnn --epochs 1 --steps-per-epoch 4 --per-worker-batch 8 --print-weights-hash >"$tmp/x2" 2>/dev/null
if [[ $rc -eq 0 && $(hashes "$tmp/x1") == "$(hashes "$tmp/x2")" ]] && grep -q "ckpt-4.kt" "$tmp/x1e" \
   && grep -q "resuming from .*ckpt-2.kt" "$tmp/x1e"; then
  tap_ok "a corrupt newest checkpoint is reported and skipped for the previous one"
else tap_fail "corrupt newest checkpoint" "rc=$rc $(cat "$tmp/x1e")"; fi

# --- the wrong secret ------------------------------------------------------------------
p0=$(free_port); p1=$(free_port); pi=$(free_port)
TF_CONFIG=$(tf_config 0 "$p0" "$p1") KUBETRAIN_SECRET=right "$BIN" "${mlp[@]}" --rendezvous-timeout 60 \
  >"$tmp/s0.out" 2>"$tmp/s0.err" & s0=$!; pids+=("$s0")
TF_CONFIG=$(tf_config 1 "$p0" "$pi") KUBETRAIN_SECRET=wrong "$BIN" "${mlp[@]}" --rendezvous-timeout 3 \
  >"$tmp/si.out" 2>"$tmp/si.err"; rci=$?
TF_CONFIG=$(tf_config 1 "$p0" "$p1") KUBETRAIN_SECRET=right "$BIN" "${mlp[@]}" >"$tmp/s1.out" 2>"$tmp/s1.err"; rc1=$?
wait "$s0"; rc0=$?
# The intruder cannot tell a colleague with another secret from another job's worker at
# a stale address, so it retries until its deadline and exits 75 (retryable), saying why.
if [[ $rci -eq 75 ]] && grep -q "could not prove the job secret" "$tmp/si.err" \
   && grep -qi "rejected connection" "$tmp/s0.err"; then
  tap_ok "a worker with the wrong secret is rejected (exit 75 at its deadline, a log line on both sides)"
else tap_fail "wrong secret rejected" "rci=$rci $(cat "$tmp/si.err" "$tmp/s0.err")"; fi
if [[ $rc0 -eq 0 && $rc1 -eq 0 && $(cat "$tmp/s0.out" "$tmp/s1.out" | sed -n 's/weights-sha256: //p' | sort -u) == "$H2" ]]; then
  tap_ok "the ring is unaffected by the intruder (same hash as an undisturbed run)"
else tap_fail "ring unaffected by the intruder" "rc0=$rc0 rc1=$rc1 $(tail -5 "$tmp/s0.err")"; fi

# --- malformed TF_CONFIG and the exit codes ----------------------------------------------
expect() { # name code needle env-TF_CONFIG args...
  local name=$1 code=$2 needle=$3 tfc=$4; shift 4
  local err rc
  err=$(TF_CONFIG=$tfc "$BIN" "$@" 2>&1 >/dev/null); rc=$?
  if [[ $rc -eq $code ]] && grep -qi -- "$needle" <<<"$err"; then tap_ok "$name: exit $code"
  else tap_fail "$name" "expected $code and '$needle', got $rc: $err"; fi
}
expect "TF_CONFIG not JSON" 2 "TF_CONFIG" '{"cluster":' "${mlp[@]}"
expect "TF_CONFIG without cluster.worker" 2 "worker" '{"cluster":{},"task":{"type":"worker","index":0}}' "${mlp[@]}"
expect "TF_CONFIG with a ps task" 2 "ps" '{"cluster":{"worker":["a:1"],"ps":["b:2"]},"task":{"type":"worker","index":0}}' "${mlp[@]}"
expect "TF_CONFIG index out of range" 2 "index" '{"cluster":{"worker":["a:1","b:2"]},"task":{"type":"worker","index":5}}' "${mlp[@]}"
expect "TF_CONFIG bad port" 2 "port" '{"cluster":{"worker":["a:99999","b:2"]},"task":{"type":"worker","index":0}}' "${mlp[@]}"
expect "--index beyond the cluster" 2 "index" "$(tf_config 0 1 2)" "${mlp[@]}" --index 7
expect "--collective nccl without NCCL" 2 "built without NCCL" "" "${mlp[@]}" --collective nccl
expect "peers never come" 75 "rank 1" "$(tf_config 0 "$(free_port)" "$(free_port)")" "${mlp[@]}" --rendezvous-timeout 1

# peers that disagree on the model: exit 2 naming both values
p0=$(free_port); p1=$(free_port)
TF_CONFIG=$(tf_config 0 "$p0" "$p1") "$BIN" "${mlp[@]}" --rendezvous-timeout 20 >/dev/null 2>"$tmp/d0" & d0=$!; pids+=("$d0")
TF_CONFIG=$(tf_config 1 "$p0" "$p1") "$BIN" "${cnn[@]}" --rendezvous-timeout 20 >/dev/null 2>"$tmp/d1"; rcd1=$?
wait "$d0"; rcd0=$?
if [[ $rcd0 -eq 2 || $rcd1 -eq 2 ]] && grep -q "dense" "$tmp/d0" "$tmp/d1" && grep -q "conv2d" "$tmp/d0" "$tmp/d1"; then
  tap_ok "workers with different models: exit 2 naming both signatures"
else tap_fail "model mismatch" "rc=$rcd0/$rcd1 $(cat "$tmp/d0" "$tmp/d1")"; fi

# checkpoint of another model: exit 3
ck=$tmp/ck-model
"$BIN" --model mlp --epochs 1 --steps-per-epoch 2 --per-worker-batch 8 --checkpoint-dir "$ck" >/dev/null 2>&1
expect "checkpoint of another model" 3 "another model" "" --model tutorial-cnn --epochs 1 --steps-per-epoch 2 --per-worker-batch 8 --checkpoint-dir "$ck"

# a lost peer mid-training without live recovery: exit 75 within seconds, naming the peer
p0=$(free_port); p1=$(free_port)
TF_CONFIG=$(tf_config 0 "$p0" "$p1") "$BIN" "${cnn[@]}" --epochs 50 --recovery-timeout 0 >/dev/null 2>"$tmp/l0" & l0=$!; pids+=("$l0")
TF_CONFIG=$(tf_config 1 "$p0" "$p1") "$BIN" "${cnn[@]}" --epochs 50 --recovery-timeout 0 >"$tmp/l1.out" 2>&1 & l1=$!; pids+=("$l1")
wait_for 60 grep -qs "Epoch 2/50" "$tmp/l1.out"
kill -9 "$l1"; t0=$SECONDS; wait "$l1" 2>/dev/null
wait "$l0" 2>/dev/null; rc=$?
if [[ $rc -eq 75 && $((SECONDS - t0)) -le 10 ]] && grep -q "rank 1" "$tmp/l0"; then
  tap_ok "a lost peer, --recovery-timeout 0: the other worker exits 75 within $((SECONDS - t0))s naming rank 1"
else tap_fail "lost peer" "rc=$rc after $((SECONDS - t0))s: $(tail -3 "$tmp/l0")"; fi

# launch: 0 on success (above), a non-retryable child code stops everything, 128+n
"$BIN" launch --workers 2 "${mlp[@]}" --model no-such-model >/dev/null 2>"$tmp/n1"; rc=$?
[[ $rc -eq 2 ]] && tap_ok "launch with a bad option exits 2" || tap_fail "launch bad option" "rc=$rc $(cat "$tmp/n1")"
start_launch "$tmp/gout" "$tmp/gerr" --workers 2 --max-restarts 0 "${cnn[@]}" --epochs 50
wait_for 60 grep -q "Epoch 2/50" "$tmp/gout"
kill -9 "$(worker_pid "$tmp/gerr" 0)"
wait "$lpid" 2>/dev/null; rc=$?
if [[ $rc -eq 137 ]] && grep -q "giving up after 0 restart" "$tmp/gerr"; then
  tap_ok "launch --max-restarts 0, chief SIGKILLed: exit 137 (128+9)"
else tap_fail "launch exit 128+n" "rc=$rc $(tail -5 "$tmp/gerr")"; fi
"$BIN" launch --workers 1 --max-restarts 1 "${mlp[@]}" --epochs 1 >"$tmp/one" 2>&1; rc=$?
[[ $rc -eq 0 && $(count_hashes "$tmp/one") -eq 1 ]] && tap_ok "launch --workers 1: exit 0" || tap_fail "launch one worker" "$(cat "$tmp/one")"
start_launch "$tmp/sout" "$tmp/serr" --workers 2 --max-restarts 1 "${cnn[@]}" --recovery-timeout 0
wait_for 60 grep -q "Epoch 2/2" "$tmp/sout"
kill -9 "$(worker_pid "$tmp/serr" 1)"
wait "$lpid" 2>/dev/null; rc=$?
if [[ $rc -eq 0 && $(hashes "$tmp/sout") == "$HC" ]] && grep -q "no --checkpoint-dir, so the group starts again from scratch" "$tmp/serr"; then
  tap_ok "without --checkpoint-dir a restart starts from scratch (said in the log) and ends with the same hash"
else tap_fail "restart from scratch" "rc=$rc $(tail -5 "$tmp/serr")"; fi
tap_done
