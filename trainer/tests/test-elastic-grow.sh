#!/usr/bin/env bash
# An elastic job grown past its workers' TF_CONFIG (docs/design.md, "Elastic jobs",
# "Growing past TF_CONFIG"): the survivors' KUBETRAIN_MEMBERS_FILE names the new index
# with its address (`0,1,2=127.0.0.1:PORT`), the new worker starts with a TF_CONFIG of the
# larger cluster, and they form one ring at a step boundary. 2 workers whose TF_CONFIG
# names 2 grow to 3: no survivor restarted, no checkpoint read, every step's loss that of
# the undisturbed run within the tolerance of test-elastic.sh, one weights hash. 2
# workers whose TF_CONFIG names 3 grow to 4 with the two new workers started together and
# every file changed at its own time (the local cluster's kubectl scale 2 -> 4), either new
# worker's first. A worker whose TF_CONFIG names itself alone grows to 2 the same way.
# Lists that name an index past TF_CONFIG without its address, an index past the
# handshake's limit, or another address for an index TF_CONFIG names exit 2 naming the
# file.
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

skip_without_data "growing past TF_CONFIG" "$DATA"

# test-elastic.sh's bound for runs that change size on the way (docs/design.md).
LOSS_TOL=1e-4


args=(--model tutorial-cnn --epochs 1 --steps-per-epoch 50 --lr 0.05 --global-batch 26
      --checkpoint-every-steps 5 --print-weights-hash --rendezvous-timeout 60
      --recovery-timeout 20)
export KUBETRAIN_SECRET=s

# worker NAME I N: starts worker I with a TF_CONFIG of N workers on the ports from $base,
# its members file $tmp/NAME-I/members, the chief's step records in $tmp/NAME.json; its
# pid in wpids[I].
worker() {
  local name=$1 i=$2 n=$3 ports=()
  for ((k = 0; k < n; k++)); do ports+=($((base + k))); done
  TF_CONFIG=$(tf_config "$i" "${ports[@]}") \
    KUBETRAIN_MEMBERS_FILE=$tmp/$name-$i/members KUBETRAIN_TERMINATION_FILE=$tmp/$name-$i.term \
    "$BIN" "${args[@]}" --checkpoint-dir "$tmp/$name.ck" \
    --metrics-file "$tmp/$name.json" >>"$tmp/$name-$i.out" 2>>"$tmp/$name-$i.err" &
  wpids[i]=$!; pids+=($!)
}
# log_tail NAME: the last lines of the workers' logs but the steps, for a failure.
log_tail() {
  grep -hv '^kubetrain-trainer\[rank .\] \(epoch\|step\)' "$tmp/$1"-[012].err | tail -n 12
}

# --- the undisturbed run: 2 workers ----------------------------------------------------
base=$(free_ports 3)
for i in 0 1; do members_write "$tmp/ref-$i" "0,1"; worker ref "$i" 2; done
for i in 0 1; do finish "${wpids[$i]}"; ref_rc[i]=$rc; done
[[ ${ref_rc[*]} == "0 0" ]] || tap_fail "the undisturbed run" \
  "exit codes ${ref_rc[*]}: $(tail -n 3 "$tmp/ref-0.err")"

# --- 2 -> 3 past TF_CONFIG --------------------------------------------------------------
# Workers 0 and 1 (TF_CONFIG of 2) train; held after step 10 (on an idle machine they
# would finish before the growth is set up), worker 2 starts with a TF_CONFIG of 3 naming
# 0,1,2, and the survivors' files say 0,1,2 with index 2's address, worker 1's first,
# worker 0's a second later: they regroup at the step after rank 0's file changed.
base=$(free_ports 3)
for i in 0 1; do members_write "$tmp/grow-$i" "0,1"; worker grow "$i" 2; done
wait_for 120 test -e "$tmp/grow.ck/ckpt-10.kt"
kill -STOP "${wpids[0]}" "${wpids[1]}"
members_write "$tmp/grow-2" "0,1,2"
worker grow 2 3
members_write "$tmp/grow-1" "0,1,2=127.0.0.1:$((base + 2))"
sleep 1
members_write "$tmp/grow-0" "0,1,2=127.0.0.1:$((base + 2))"
kill -CONT "${wpids[0]}" "${wpids[1]}"
for i in 0 1 2; do finish "${wpids[$i]}"; got[i]=$rc; done
bad=()
[[ ${got[*]} == "0 0 0" ]] || bad+=("exit codes ${got[*]}")
for i in 0 1; do
  grep -q "elastic: growing from 2 to 3 workers (TF_CONFIG indices 0,1,2) in generation 2" \
    "$tmp/grow-$i.err" || bad+=("worker $i: no 'growing' line")
  grep -q "elastic: generation 2 of 3 workers goes on from step" "$tmp/grow-$i.err" ||
    bad+=("worker $i: no 'goes on' line")
done
grep -q "joined generation 2: state of step [0-9]* received from rank 0, no checkpoint read" \
  "$tmp/grow-2.err" || bad+=("worker 2 did not join generation 2")
grep -q "resuming from" "$tmp"/grow-[012].err && bad+=("a checkpoint was read")
[[ $(hashes "$tmp"/grow-[012].out | wc -l) -eq 1 ]] || bad+=("the workers' weights differ")
if [[ ${#bad[@]} -eq 0 ]]; then
  tap_ok "2 workers whose TF_CONFIG names 2 grow to 3 by their files naming index 2's address: \
no survivor restarted, no checkpoint read, one weights hash"
else
  tap_fail "2 -> 3 past TF_CONFIG" "${bad[*]}; $(log_tail grow)"
fi
if [[ -e $tmp/grow.json && -e $tmp/ref.json ]] &&
  close "$(losses "$tmp/grow.json")" "$(losses "$tmp/ref.json")" "$LOSS_TOL"; then
  tap_ok "2 -> 3 past TF_CONFIG: each of the 50 steps' loss within $LOSS_TOL relative of the \
undisturbed run (measured: $(python3 -c 'import sys
a, b = (list(map(float, x.split())) for x in sys.argv[1:3])
print("%.1e" % max(abs(x - y) / abs(y) for x, y in zip(a, b)))' "$(losses "$tmp/grow.json")" \
  "$(losses "$tmp/ref.json")"))"
else
  tap_fail "2 -> 3 past TF_CONFIG: losses" \
    "$(losses "$tmp/grow.json" 2>&1 | tail -n 1) vs $(losses "$tmp/ref.json" 2>&1 | tail -n 1)"
fi

# --- 2 -> 4 past TF_CONFIG, two new workers at once ----------------------------------
# The local cluster's `kubectl scale` 2 -> 4 (issue 46): workers 0 and 1, whose TF_CONFIG
# names 3, train as a ring of 2; workers 2 and 3 start together with a TF_CONFIG of 4,
# each naming the members and itself (0,1,2 and 0,1,3, as the operator makes them); the
# survivors' files say 0,1,2 and, 0.4 s later, 0,1,2,3 with index 3's address, worker 1's
# 0.2 s after worker 0's (held meanwhile, so that they take up the ring of 4 in one
# regroup, as the cluster's did); one new worker's file names 0,1,2,3 a second later, the
# other's only 4 s after that (the kubelet syncs each pod on its own), in either order.
# Until then the late one's attempts of its own list end the others' attempts of 0,1,2,3,
# so rank 0 ACKs a connection and then leaves that attempt (its dialer dials again), and
# a ring's setup breaks off on some ranks after others completed it: a rank that holds
# state and saw it break off proposes a lower generation than one that completed it, and
# is accepted as a process of that ring (docs/design.md, "Live recovery"); refused as of
# an earlier ring it left the four waiting out --recovery-timeout and the group restarted.
# grow_four NAME FIRST LATE: the case above, the file of worker FIRST changed before that
# of worker LATE.
grow_four() {
  local name=$1 first=$2 late=$3 i
  base=$(free_ports 4)
  for i in 0 1; do members_write "$tmp/$name-$i" "0,1"; worker "$name" "$i" 3; done
  wait_for 120 test -e "$tmp/$name.ck/ckpt-10.kt"
  kill -STOP "${wpids[0]}" "${wpids[1]}"
  members_write "$tmp/$name-2" "0,1,2"
  members_write "$tmp/$name-3" "0,1,3"
  worker "$name" 2 4
  worker "$name" 3 4
  local list="0,1,2,3=127.0.0.1:$((base + 3))"
  members_write "$tmp/$name-0" "0,1,2"; sleep 0.2; members_write "$tmp/$name-1" "0,1,2"
  sleep 0.2
  members_write "$tmp/$name-0" "$list"; sleep 0.2; members_write "$tmp/$name-1" "$list"
  kill -CONT "${wpids[0]}" "${wpids[1]}"
  sleep 1
  members_write "$tmp/$name-$first" "0,1,2,3"
  sleep 4
  members_write "$tmp/$name-$late" "0,1,2,3"
  for i in 0 1 2 3; do finish "${wpids[$i]}"; got[i]=$rc; done
  bad=()
  [[ ${got[*]} == "0 0 0 0" ]] || bad+=("exit codes ${got[*]}")
  for i in 0 1; do
    grep -q "elastic: growing from 2 to 4 workers (TF_CONFIG indices 0,1,2,3) in generation 2" \
      "$tmp/$name-$i.err" || bad+=("worker $i: no 'growing from 2 to 4' line")
  done
  for i in 2 3; do
    grep -q "joined generation [0-9]*: state of step [0-9]* received from rank 0, no checkpoint \
read" "$tmp/$name-$i.err" || bad+=("worker $i did not join")
  done
  grep -q "resuming from" "$tmp/$name"-[0-3].err && bad+=("a checkpoint was read")
  grep -q "earlier ring" "$tmp/$name"-[0-3].err &&
    bad+=("a worker of the ring refused as of an earlier one")
  [[ $(hashes "$tmp/$name"-[0-3].out | wc -l) -eq 1 ]] || bad+=("the workers' weights differ")
  [[ -e $tmp/$name.json && -e $tmp/ref.json ]] &&
    close "$(losses "$tmp/$name.json")" "$(losses "$tmp/ref.json")" "$LOSS_TOL" ||
    bad+=("losses not within $LOSS_TOL of the undisturbed run")
  local redials broken
  redials=$(cat "$tmp/$name"-[0-3].err |
    grep -c "closed this worker's connection after its handshake")
  broken=$(cat "$tmp/$name"-[0-3].err | grep -c "failed to form")
  if [[ ${#bad[@]} -eq 0 ]]; then
    tap_ok "2 -> 4 past TF_CONFIG with workers 2 and 3 started together, worker $first's file \
changed before worker $late's: all exit 0, no survivor restarted, no checkpoint read, one \
weights hash, every loss within $LOSS_TOL ($redials dial(s) again after a peer left an attempt \
it had ACKed, $broken setup(s) broken off)"
  else
    tap_fail "2 -> 4 past TF_CONFIG, two new workers at once, worker $first's file first" \
      "${bad[*]}; $(grep -hv '^kubetrain-trainer\[rank .\] \(epoch\|step\)' \
        "$tmp/$name"-[0-3].err | tail -n 16)"
  fi
}
grow_four four 3 2
grow_four fourb 2 3

# --- 1 -> 2 past TF_CONFIG --------------------------------------------------------------
# An elastic job of one worker: its TF_CONFIG names itself alone, yet it watches its file
# and keeps its listener, so a worker made for 2 joins it.
base=$(free_ports 3)
members_write "$tmp/one-0" "0"
worker one 0 1
wait_for 120 test -e "$tmp/one.ck/ckpt-5.kt"
kill -STOP "${wpids[0]}"
members_write "$tmp/one-1" "0,1"
worker one 1 2
members_write "$tmp/one-0" "0,1=127.0.0.1:$((base + 1))"
kill -CONT "${wpids[0]}"
for i in 0 1; do finish "${wpids[$i]}"; got[i]=$rc; done
bad=()
[[ "${got[0]} ${got[1]}" == "0 0" ]] || bad+=("exit codes ${got[0]} ${got[1]}")
grep -q "elastic: growing from 1 to 2 workers (TF_CONFIG indices 0,1)" "$tmp/one-0.err" ||
  bad+=("worker 0: no 'growing' line")
grep -q "joined generation 2: state of step [0-9]* received from rank 0, no checkpoint read" \
  "$tmp/one-1.err" || bad+=("worker 1 did not join generation 2")
grep -q "resuming from" "$tmp"/one-[01].err && bad+=("a checkpoint was read")
[[ $(hashes "$tmp"/one-[01].out | wc -l) -eq 1 ]] || bad+=("the workers' weights differ")
if [[ ${#bad[@]} -eq 0 ]]; then
  tap_ok "a worker whose TF_CONFIG names itself alone grows to 2 by its file naming index 1's \
address"
else
  tap_fail "1 -> 2 past TF_CONFIG" "${bad[*]}; $(log_tail one)"
fi

# --- lists a worker cannot take -----------------------------------------------------------
# bad_list NAME LIST WANT: worker 0 of a TF_CONFIG of 2 started with LIST exits 2 saying WANT.
bad_list() {
  base=$(free_ports 2)
  members_write "$tmp/$1-0" "$2"
  worker "$1" 0 2
  finish "${wpids[0]}"
  if [[ $rc -eq 2 ]] && grep -qF "KUBETRAIN_MEMBERS_FILE $tmp/$1-0/members" "$tmp/$1-0.err" &&
    grep -qF "$3" "$tmp/$1-0.err"; then
    tap_ok "members \"$2\": exit 2 naming the file ($(grep -oF "$3" "$tmp/$1-0.err"))"
  else tap_fail "members \"$2\"" "rc=$rc $(tail -n 2 "$tmp/$1-0.err")"; fi
}
bad_list noaddr "0,1,2" "names TF_CONFIG index 2 without its address, and this worker's \
TF_CONFIG names 2 workers; expected 2=HOST:PORT"
bad_list limit "0,1,4096=127.0.0.1:2222" "expected TF_CONFIG worker indices below 4096"
bad_list other "0,1=127.0.0.2:2222" "gives TF_CONFIG index 1 the address 127.0.0.2:2222"
bad_list badaddr "0,1,2=127.0.0.1" "the address of TF_CONFIG index 2: \"127.0.0.1\": expected \
host:port"

tap_done
