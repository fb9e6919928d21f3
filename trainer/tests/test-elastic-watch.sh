#!/usr/bin/env bash
# The trainer's watch of KUBETRAIN_MEMBERS_FILE (docs/design.md, "Elastic jobs", "How the
# members reach the pods"), as on a cluster: no supervisor, no signal, and each worker
# its own file, updated the way the kubelet updates a downwardAPI volume (a `..data`
# symlink swapped) and at its own time. A worker of 3 killed, the survivors' files
# rewritten one at a time 1.5 s apart: they disagree about the members meanwhile, wait
# for one another and form the smaller ring; the worker started again and the files
# rewritten so again, it joins them at a step boundary. No checkpoint read, every step's
# loss that of the undisturbed run within the tolerance of test-elastic.sh. A worker that
# starts naming 0,1,2 while worker 0 still waits in a rendezvous of 0,1 waits in its first
# rendezvous until their lists agree, and joins. Workers whose files drop an absent worker
# while they wait in their first rendezvous form the smaller ring, and one whose file
# names itself alone trains alone and lets a later worker join. A worker that meets
# another list, and then only a peer gone quiet, exits 75 at the deadline; one whose file
# never changes while another's does exits 2 there naming both lists.
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
unset TF_CONFIG KUBETRAIN_SECRET KUBETRAIN_SECRET_FILE KUBETRAIN_SHM KUBETRAIN_MEMBERS_FILE
export OPENBLAS_NUM_THREADS=1

skip_without_data "the members file watched" "$DATA"

# The bound for runs that change size on the way (docs/design.md "Within tolerance"):
# 1e-3 relative over these 50 steps, where test-elastic.sh's 40-step runs take 1e-4.
# The sizes' orders of summation differ by a few ulps a step and training amplifies
# that: in the cold CI run of 2026-12-01 the joining worker's run (cases 3 and 4) was
# within 1e-6 of the undisturbed one to step 31, then 4e-5 at step 47 and 1.6e-4 at step
# 50. The errors this check is for are far larger (measured with these flags, 3 workers):
# a global batch of 25 instead of 26 is over 1e-3 from the first step (1.4 at step 44),
# and the same run one step off differs by 1.2e-2 or more at every step.
LOSS_TOL=1e-3

# losses_check NAME OK FAIL: the chief's step losses of run NAME ($tmp/NAME.json) against
# the undisturbed run's within LOSS_TOL, reported as OK with the worst difference, or as
# FAIL with it and both lists.
losses_check() {
  local got=$tmp/$1.json worst=""
  if [[ -e $got && -e $tmp/ref.json ]] &&
    worst=$(close_worst "$(losses "$got")" "$(losses "$tmp/ref.json")" "$LOSS_TOL"); then
    tap_ok "$2 (worst $worst)"
  else
    tap_fail "$3" "worst ${worst:-<no records>}:
$(losses "$got" 2>&1 | tail -n 1) vs $(losses "$tmp/ref.json" 2>&1 | tail -n 1)"
  fi
}

args=(--model tutorial-cnn --epochs 1 --steps-per-epoch 50 --lr 0.05 --global-batch 26
      --checkpoint-every-steps 5 --print-weights-hash --rendezvous-timeout 60)
export KUBETRAIN_SECRET=s

# worker NAME I TIMEOUT: starts worker I of 3 on the ports from $base, its members file
# $tmp/NAME-I/members, the chief's step records in $tmp/NAME.json; its pid in wpids[I].
worker() {
  local name=$1 i=$2 timeout=$3
  TF_CONFIG=$(tf_config "$i" "$base" $((base + 1)) $((base + 2))) \
    KUBETRAIN_MEMBERS_FILE=$tmp/$name-$i/members KUBETRAIN_TERMINATION_FILE=$tmp/$name-$i.term \
    "$BIN" "${args[@]}" --recovery-timeout "$timeout" --checkpoint-dir "$tmp/$name.ck" \
    --metrics-file "$tmp/$name.json" >>"$tmp/$name-$i.out" 2>>"$tmp/$name-$i.err" &
  wpids[i]=$!; pids+=($!)
}
# start NAME TIMEOUT: 3 workers on fresh ports, each file naming all three.
start() {
  base=$(free_ports 3)
  for i in 0 1 2; do
    members_write "$tmp/$1-$i" "0,1,2"
    worker "$1" "$i" "$2"
  done
}

# --- the undisturbed run --------------------------------------------------------------
start ref 20
for i in 0 1 2; do finish "${wpids[$i]}"; ref_rc[i]=$rc; done
[[ ${ref_rc[*]} == "0 0 0" ]] || tap_fail "the undisturbed run" \
  "exit codes ${ref_rc[*]}: $(tail -n 3 "$tmp/ref-0.err")"

# --- 3 -> 2 -> 3, the survivors' files rewritten one at a time ---------------------------
# Shrink: worker 1 killed after step 10; worker 0's file says 0,2 a second later, worker
# 2's 1.5 s after that: they meet while they disagree (the rendezvous's watch). Grow:
# once they go on, worker 1 starts again naming 0,1,2, then worker 2's file changes, and
# worker 0's 1.5 s later, the two held meanwhile (the step's watch; rank 0's list is the
# one taken).
start sg 20
wait_for 120 test -e "$tmp/sg.ck/ckpt-10.kt"
{ kill -9 "${wpids[1]}"; wait "${wpids[1]}"; } 2>/dev/null # no "Killed" line
sleep 1
members_write "$tmp/sg-0" "0,2"
sleep 1.5
members_write "$tmp/sg-2" "0,2"
wait_for 60 grep -q "generation 2 of 2 workers goes on" "$tmp/sg-0.err"
# The survivors are held (SIGSTOP) while the growth is set up: on an idle machine they
# trained the 40 steps left in less time than it takes, and finished at 2. Resumed, they
# find the change at their next step boundary.
kill -STOP "${wpids[0]}" "${wpids[2]}"
members_write "$tmp/sg-1" "0,1,2"
worker sg 1 20
sleep 1
members_write "$tmp/sg-2" "0,1,2"
sleep 1.5
members_write "$tmp/sg-0" "0,1,2"
kill -CONT "${wpids[0]}" "${wpids[2]}"
for i in 0 1 2; do finish "${wpids[$i]}"; got[i]=$rc; done
bad=()
[[ ${got[*]} == "0 0 0" ]] || bad+=("exit codes ${got[*]}")
for i in 0 2; do
  log=$tmp/sg-$i.err
  grep -q "elastic: shrinking from 3 to 2 workers (TF_CONFIG indices 0,2)" "$log" ||
    bad+=("worker $i: no 'shrinking' line")
  grep -q "elastic: growing from 2 to 3 workers (TF_CONFIG indices 0,1,2)" "$log" ||
    bad+=("worker $i: no 'growing' line")
  [[ $(grep -c "elastic: generation [23] of [23] workers goes on from step" "$log") -eq 2 ]] ||
    bad+=("worker $i: not 2 'goes on' lines")
done
# worker 0's file changed first: it met worker 2 still naming 0,1,2 and waited for it
grep -q "(TF_CONFIG index 2) names the members 0,1,2, this worker (TF_CONFIG index 0) 0,2; \
reading" "$tmp/sg-0.err" || bad+=("worker 0 did not wait for worker 2's list")
grep -q "joined generation 3: state of step [0-9]* received from rank 0, no checkpoint read" \
  "$tmp/sg-1.err" || bad+=("worker 1 did not join generation 3")
grep -q "resuming from" "$tmp"/sg-[012].err && bad+=("a checkpoint was read")
[[ $(hashes "$tmp"/sg-[012].out | wc -l) -eq 1 ]] || bad+=("the workers' weights differ")
if [[ ${#bad[@]} -eq 0 ]]; then
  tap_ok "3 -> 2 -> 3 by the members files alone, changed 1.5 s apart: no signal, no survivor \
restarted, no checkpoint read"
else
  tap_fail "shrink and grow by the watched files" \
    "${bad[*]}; $(grep -hv '^kubetrain-trainer\[rank .\] \(epoch\|step\)' "$tmp"/sg-[012].err |
      tail -n 12)"
fi
losses_check sg "3 -> 2 -> 3 by the watched files: each of the 50 steps' loss within \
$LOSS_TOL relative of the undisturbed run" "3 -> 2 -> 3 by the watched files: losses"

# --- a worker that joins before the others' files change --------------------------------
# Its first rendezvous meets a peer whose list is still the old one: workers 0 and 1 train
# as a ring of 2 (files 0,1) and worker 1 is killed, so worker 0 waits in a rendezvous of
# 0,1; worker 2 starts naming 0,1,2 first, and only 2 s later worker 0's file says 0,1,2
# and worker 1 starts again naming it. Worker 2 waits for the lists to agree (it used to
# exit 2 at once) and the ring grows to 3.
base=$(free_ports 3)
for i in 0 1; do members_write "$tmp/join-$i" "0,1"; done
members_write "$tmp/join-2" "0,1,2"
for i in 0 1; do worker join "$i" 20; done
wait_for 120 test -e "$tmp/join.ck/ckpt-5.kt"
{ kill -9 "${wpids[1]}"; wait "${wpids[1]}"; } 2>/dev/null
worker join 2 20
sleep 2
members_write "$tmp/join-0" "0,1,2"
members_write "$tmp/join-1" "0,1,2"
worker join 1 20
for i in 0 1 2; do finish "${wpids[$i]}"; got[i]=$rc; done
bad=()
[[ ${got[*]} == "0 0 0" ]] || bad+=("exit codes ${got[*]}")
grep -q "(TF_CONFIG index 0) names the members 0,1, this worker (TF_CONFIG index 2) 0,1,2; \
reading" "$tmp/join-2.err" || bad+=("worker 2 did not meet worker 0's old list")
for i in 1 2; do
  grep -q "joined generation [0-9]*: state of step [0-9]* received from rank 0" \
    "$tmp/join-$i.err" ||
    bad+=("worker $i did not join")
done
grep -q "elastic: growing from 2 to 3 workers (TF_CONFIG indices 0,1,2)" "$tmp/join-0.err" ||
  bad+=("worker 0: no 'growing' line")
grep -q "resuming from" "$tmp"/join-[012].err && bad+=("a checkpoint was read")
[[ $(hashes "$tmp"/join-[012].out | wc -l) -eq 1 ]] || bad+=("the workers' weights differ")
if [[ ${#bad[@]} -eq 0 ]]; then
  tap_ok "a worker joins while worker 0 waits in a rendezvous naming 0,1: it waits for the \
lists to agree, the ring grows to 3, nobody exits 2"
else
  tap_fail "a worker that joins before the others' files change" \
    "${bad[*]}; $(grep -hv '^kubetrain-trainer\[rank .\] \(epoch\|step\)' "$tmp"/join-[012].err |
      tail -n 12)"
fi
losses_check join "the worker that waited to join: each of the 50 steps' loss within \
$LOSS_TOL relative of the undisturbed run" "the worker that waited to join: losses"

# --- an attempt that starts without a worker ---------------------------------------------
# As an elastic job's attempt whose worker 2 the scheduler cannot place: workers 0 and 1
# start naming 0,1,2 and wait in their first rendezvous for worker 2, which never comes;
# a second later their files say 0,1 (0.5 s apart), and they form the ring of 2 and train
# (with --rendezvous-timeout 60, not sooner, without the first rendezvous's watch). Held
# after step 10, worker 2 starts naming 0,1,2 and their files say it too: the ring grows
# to 3 at a step boundary, worker 2 receives the state.
base=$(free_ports 3)
for i in 0 1 2; do members_write "$tmp/start-$i" "0,1,2"; done
for i in 0 1; do worker start "$i" 20; done
sleep 1
members_write "$tmp/start-0" "0,1"
sleep 0.5
members_write "$tmp/start-1" "0,1"
wait_for 120 test -e "$tmp/start.ck/ckpt-10.kt"
kill -STOP "${wpids[0]}" "${wpids[1]}"
worker start 2 20
sleep 1
members_write "$tmp/start-1" "0,1,2"
sleep 0.5
members_write "$tmp/start-0" "0,1,2"
kill -CONT "${wpids[0]}" "${wpids[1]}"
for i in 0 1 2; do finish "${wpids[$i]}"; got[i]=$rc; done
bad=()
[[ ${got[*]} == "0 0 0" ]] || bad+=("exit codes ${got[*]}")
# Worker 0's file changed first: its watch took it up. Worker 1 takes it by its watch too,
# or by meeting worker 0's new list first (then it reads its file again).
grep -q "elastic: KUBETRAIN_MEMBERS_FILE names 0,1 now, before the first ring; forming that \
ring" "$tmp/start-0.err" || bad+=("worker 0 did not take 0,1 in its first rendezvous")
grep -q "names 0,1 now, before the first ring\|names the members 0,1, this worker (TF_CONFIG \
index 1) 0,1,2" "$tmp/start-1.err" || bad+=("worker 1 did not take 0,1 in its first rendezvous")
for i in 0 1; do
  grep -q "elastic: growing from 2 to 3 workers (TF_CONFIG indices 0,1,2)" "$tmp/start-$i.err" ||
    bad+=("worker $i: no 'growing' line")
done
grep -q "joined generation 2: state of step [0-9]* received from rank 0, no checkpoint read" \
  "$tmp/start-2.err" || bad+=("worker 2 did not join generation 2")
grep -q "resuming from" "$tmp"/start-[012].err && bad+=("a checkpoint was read")
[[ $(hashes "$tmp"/start-[012].out | wc -l) -eq 1 ]] || bad+=("the workers' weights differ")
if [[ ${#bad[@]} -eq 0 ]]; then
  tap_ok "workers 0 and 1 start without worker 2 when their files drop it during the first \
rendezvous, and grow to 3 when it comes"
else
  tap_fail "an attempt that starts without a worker" \
    "${bad[*]}; $(grep -hv '^kubetrain-trainer\[rank .\] \(epoch\|step\)' "$tmp"/start-[012].err |
      tail -n 12)"
fi
losses_check start "the attempt started at 2 and grown to 3: each of the 50 steps' loss \
within $LOSS_TOL relative of the undisturbed run" "the attempt started at 2: losses"

# Worker 0 alone (minWorkers 1): its file says 0 when it starts, so it trains on its own
# but keeps its listener; held after step 5, worker 1 starts naming 0,1 and worker 0's
# file says it too: the ring grows to 2.
base=$(free_ports 3)
members_write "$tmp/alone-0" "0"
members_write "$tmp/alone-1" "0,1"
worker alone 0 20
wait_for 120 test -e "$tmp/alone.ck/ckpt-5.kt"
kill -STOP "${wpids[0]}"
worker alone 1 20
sleep 1
members_write "$tmp/alone-0" "0,1"
kill -CONT "${wpids[0]}"
for i in 0 1; do finish "${wpids[$i]}"; got[i]=$rc; done
bad=()
[[ "${got[0]} ${got[1]}" == "0 0" ]] || bad+=("exit codes ${got[0]} ${got[1]}")
grep -q "elastic: growing from 1 to 2 workers (TF_CONFIG indices 0,1)" "$tmp/alone-0.err" ||
  bad+=("worker 0: no 'growing' line")
grep -q "joined generation 2: state of step [0-9]* received from rank 0, no checkpoint read" \
  "$tmp/alone-1.err" || bad+=("worker 1 did not join generation 2")
grep -q "resuming from" "$tmp"/alone-[01].err && bad+=("a checkpoint was read")
[[ $(hashes "$tmp"/alone-[01].out | wc -l) -eq 1 ]] || bad+=("the workers' weights differ")
if [[ ${#bad[@]} -eq 0 ]]; then
  tap_ok "a worker that starts alone (its file names itself) keeps listening: worker 1 joins it"
else
  tap_fail "a worker that starts alone" \
    "${bad[*]}; $(grep -hv '^kubetrain-trainer\[rank .\] \(epoch\|step\)' "$tmp"/alone-[01].err |
      tail -n 12)"
fi

# --- a disagreement that ends, then a wait that runs out ---------------------------------
# Worker 1 killed; worker 2's file says 0,2 at once, worker 0's still 0,1,2: dialing worker
# 0, worker 2 meets the old list. Then worker 0 is stopped (SIGSTOP): worker 2's next
# dials go unanswered until its 6 s deadline. The disagreement did not hold to the end
# (docs/design.md, "Elastic jobs"): worker 2 exits 75 for a group restart, not 2.
start ended 6
wait_for 120 test -e "$tmp/ended.ck/ckpt-5.kt"
{ kill -9 "${wpids[1]}"; wait "${wpids[1]}"; } 2>/dev/null
members_write "$tmp/ended-2" "0,2"
met="(TF_CONFIG index 0) names the members 0,1,2, this worker (TF_CONFIG index 2) 0,2; reading"
wait_for 60 grep -qF "$met" "$tmp/ended-2.err" && kill -STOP "${wpids[0]}"
finish "${wpids[2]}"
if [[ $rc -eq 75 ]] && grep -qF "$met" "$tmp/ended-2.err" &&
  grep -q "live recovery: no replacement for .* within 6s" "$tmp/ended-2.err" &&
  ! grep -q "still disagree" "$tmp/ended-2.err"; then
  tap_ok "worker 2 met worker 0's old list, then worker 0 went quiet: exit 75 at the 6 s \
deadline, not 2"
else tap_fail "a disagreement that ended" "rc=$rc $(tail -n 4 "$tmp/ended-2.err")"; fi
kill -CONT "${wpids[0]}"
finish "${wpids[0]}"

# --- a file that never changes ----------------------------------------------------------
# Worker 1 killed, worker 0's file says 0,2 and worker 2's stays 0,1,2: they disagree until
# the deadline (4 s), then worker 2 exits 2 naming both lists and the peer.
start stuck 4
wait_for 120 test -e "$tmp/stuck.ck/ckpt-5.kt"
{ kill -9 "${wpids[1]}"; wait "${wpids[1]}"; } 2>/dev/null
members_write "$tmp/stuck-0" "0,2"
finish "${wpids[2]}"
want="elastic: the members still disagree after --recovery-timeout 4s: rank 0"
want2="(TF_CONFIG index 0) names the members 0,2, this worker (TF_CONFIG index 2) 0,1,2"
if [[ $rc -eq 2 ]] && grep -qF "$want" "$tmp/stuck-2.err" && grep -qF "$want2" "$tmp/stuck-2.err"
then
  tap_ok "worker 2's file never changes while worker 0's does: exit 2 after the 4 s deadline \
($(grep -oF "$want2" "$tmp/stuck-2.err" | head -n 1))"
else tap_fail "the file that never changes" "rc=$rc $(tail -n 4 "$tmp/stuck-2.err")"; fi
finish "${wpids[0]}"

tap_done
