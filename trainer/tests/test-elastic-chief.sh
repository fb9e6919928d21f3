#!/usr/bin/env bash
# The chief's slot of an elastic job (docs/design.md, "Elastic jobs", "The chief."), as
# on a cluster: no supervisor, each worker its own members file (the kubelet's way) and
# its own --metrics-port, as each pod has. /metrics follows rank 0: worker 0 of 3 killed
# and left out (files 1,2), worker 1, rank 0 now, serves the steps on its port while
# worker 2 serves nothing; worker 0 added back serves them again and worker 1 closes its
# port. A worker added back at the last steps: workers 1 and 2 (worker 0 left out from
# the start) held after step 49 of 50 while worker 0 starts and every file names 0,1,2:
# the ring does not grow at the last step, workers 1 and 2 finish, worker 0 finds the
# checkpoint of step 50 and exits 0 saying there is nothing to join, well before its
# --rendezvous-timeout; the export and the result are written once, by worker 1. One
# started after the run ended does the same.
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

skip_without_data "the chief's slot of an elastic job" "$DATA"

args=(--model tutorial-cnn --lr 0.05 --global-batch 26 --print-weights-hash
      --rendezvous-timeout 60 --recovery-timeout 20)
export KUBETRAIN_SECRET=s

# worker NAME I ARGS...: starts worker I of 3 on the ports from $base (its /metrics on
# $mbase + I), its members file $tmp/NAME-I/members; its pid in wpids[I].
worker() {
  local name=$1 i=$2; shift 2
  TF_CONFIG=$(tf_config "$i" "$base" $((base + 1)) $((base + 2))) \
    KUBETRAIN_MEMBERS_FILE=$tmp/$name-$i/members KUBETRAIN_TERMINATION_FILE=$tmp/$name-$i.term \
    "$BIN" "${args[@]}" --checkpoint-dir "$tmp/$name.ck" --metrics-port $((mbase + i)) "$@" \
    >>"$tmp/$name-$i.out" 2>>"$tmp/$name-$i.err" &
  wpids[i]=$!; pids+=($!)
}
# steps PORT: kubetrain_steps_total on localhost:PORT/metrics, or nothing when none answers.
steps() {
  python3 - "$1" <<'PY' 2>/dev/null
import sys, urllib.request
text = urllib.request.urlopen("http://127.0.0.1:%s/metrics" % sys.argv[1], timeout=2).read()
for line in text.decode().splitlines():
    if line.startswith("kubetrain_steps_total "):
        print(int(float(line.split()[1])))
PY
}
# serves_past PORT STEP: /metrics on PORT says a step past STEP.
serves_past() { local s; s=$(steps "$1"); [[ -n $s && $s -gt $2 ]]; }
log_tail() { grep -hv '^kubetrain-trainer\[rank .\] \(epoch\|step\)' "$@" | tail -n 12; }

# --- /metrics follows rank 0 -------------------------------------------------------------
# 3 epochs of 50 steps: time for the scrapes while the ring trains.
base=$(free_ports 3) mbase=$(free_ports 3)
for i in 0 1 2; do members_write "$tmp/mv-$i" "0,1,2"; done
for i in 0 1 2; do worker mv "$i" --epochs 3 --steps-per-epoch 50 --checkpoint-every-steps 5; done
wait_for 120 test -e "$tmp/mv.ck/ckpt-10.kt"
bad=()
serves_past "$mbase" 0 || bad+=("worker 0 (rank 0) serves no /metrics")
[[ -z $(steps $((mbase + 1))) ]] || bad+=("worker 1 (rank 1) serves /metrics")
{ kill -9 "${wpids[0]}"; wait "${wpids[0]}"; } 2>/dev/null # no "Killed" line
members_write "$tmp/mv-1" "1,2"
sleep 0.5
members_write "$tmp/mv-2" "1,2"
wait_for 60 grep -q "generation 2 of 2 workers goes on" "$tmp/mv-1.err" ||
  bad+=("workers 1 and 2 did not go on at 2")
at=$(steps $((mbase + 1)))
wait_for 60 serves_past $((mbase + 1)) "${at:-0}" ||
  bad+=("worker 1 (rank 0 now) serves no steps past ${at:-none}")
[[ -z $(steps $((mbase + 2))) ]] || bad+=("worker 2 (rank 1) serves /metrics")
grep -q "rank 0 now: training metrics for Prometheus on port $((mbase + 1))" "$tmp/mv-1.err" ||
  bad+=("worker 1: no 'rank 0 now' line")
shrunk=${at:-}
# Worker 0 added back: it joins at the next step boundary, rank 0 again. The others are
# held (SIGSTOP) while it is set up, so that a fast machine does not finish first.
kill -STOP "${wpids[1]}" "${wpids[2]}"
members_write "$tmp/mv-0" "0,1,2"
worker mv 0 --epochs 3 --steps-per-epoch 50 --checkpoint-every-steps 5
members_write "$tmp/mv-1" "0,1,2"
members_write "$tmp/mv-2" "0,1,2"
kill -CONT "${wpids[1]}" "${wpids[2]}"
wait_for 60 grep -q "joined generation 3" "$tmp/mv-0.err" || bad+=("worker 0 did not join")
wait_for 30 serves_past "$mbase" "${shrunk:-0}" ||
  bad+=("worker 0 (rank 0 again) serves no steps past ${shrunk:-none}")
wait_for 10 grep -q "rank 1 now: /metrics on port $((mbase + 1)) closed" "$tmp/mv-1.err" ||
  bad+=("worker 1: no 'closed' line")
[[ -z $(steps $((mbase + 1))) ]] || bad+=("worker 1 (rank 1 again) still serves /metrics")
for i in 0 1 2; do finish "${wpids[$i]}"; got[i]=$rc; done
[[ ${got[*]} == "0 0 0" ]] || bad+=("exit codes ${got[*]}")
if [[ ${#bad[@]} -eq 0 ]]; then
  tap_ok "/metrics follows rank 0: worker 1 serves the steps while worker 0 is out (from \
step ${shrunk:-?}), worker 0 again once it joins, never two at once; all exit 0"
else
  tap_fail "/metrics follows rank 0" "${bad[*]}; $(log_tail "$tmp"/mv-[012].err)"
fi

# --- a worker added back at the last steps ------------------------------------------------
# Workers 1 and 2, files 1,2 (worker 0 left out at the start), 50 steps, a checkpoint
# every 7: held (SIGSTOP) once the checkpoint of step 49 is there; worker 0 starts naming
# 0,1,2 and the others' files say so too; resumed, the ring sees the list before its last
# step and does not grow then.
late=(--epochs 1 --steps-per-epoch 50 --checkpoint-every-steps 7 --export "$tmp/late.keras")
base=$(free_ports 3) mbase=$(free_ports 3)
for i in 1 2; do members_write "$tmp/late-$i" "1,2"; worker late "$i" "${late[@]}"; done
# A busy wait: the last step and the final save take a few tens of milliseconds, which
# wait_for's 50 ms polls can miss; stopped processes prove the hold came before the end.
end=$((SECONDS + 120))
while [[ ! -e $tmp/late.ck/ckpt-49.kt ]] && ((SECONDS < end)); do :; done
held=0
kill -STOP "${wpids[1]}" "${wpids[2]}" 2>/dev/null && held=1
members_write "$tmp/late-0" "0,1,2"
worker late 0 "${late[@]}"
members_write "$tmp/late-1" "0,1,2"
members_write "$tmp/late-2" "0,1,2"
t0=$SECONDS
kill -CONT "${wpids[1]}" "${wpids[2]}"
for i in 0 1 2; do finish "${wpids[$i]}"; got[i]=$rc; done
took=$((SECONDS - t0))
bad=()
((held)) || bad+=("workers 1 and 2 had exited before the hold")
[[ ${got[*]} == "0 0 0" ]] || bad+=("exit codes ${got[*]}")
((took < 30)) || bad+=("${took}s to end, past half the --rendezvous-timeout")
grep -q "elastic: the run is over: $tmp/late.ck holds the checkpoint of step 50, its last, \
saved before this worker could join; nothing to join, exiting 0" "$tmp/late-0.err" ||
  bad+=("worker 0: no 'nothing to join' line")
[[ $(cat "$tmp/late-0.term" 2>/dev/null) == '{"step":50,"checkpoint_step":50}' ]] ||
  bad+=("worker 0's termination message: $(cat "$tmp/late-0.term" 2>/dev/null)")
[[ $(cat "$tmp"/late-[012].err | grep -c "exported the model to $tmp/late.keras") -eq 1 ]] ||
  bad+=("not one export")
grep -q '"weights_sha256"' "$tmp/late-1.term" || bad+=("worker 1 wrote no result")
[[ -s $tmp/late.keras ]] || bad+=("no $tmp/late.keras")
if [[ ${#bad[@]} -eq 0 ]]; then
  seen=$(cat "$tmp"/late-[12].err | grep -c "KUBETRAIN_MEMBERS_FILE names 0,1,2 now")
  tap_ok "worker 0 added back at step 49 of 50: the ring finishes without it ($seen of workers \
1 and 2 saw the list while training), worker 0 exits 0 with nothing to join ${took}s after the \
others resumed; one export, one result"
else
  tap_fail "a worker added back at the last steps" "${bad[*]}; $(log_tail "$tmp"/late-[012].err)"
fi

# --- a worker added back after the run ended ----------------------------------------------
t0=$SECONDS
worker late 0 "${late[@]}"
finish "${wpids[0]}"
took=$((SECONDS - t0))
said=$(grep -c "nothing to join, exiting 0" "$tmp/late-0.err")
if [[ $rc -eq 0 && $took -lt 30 && $said -eq 2 ]]; then
  tap_ok "worker 0 started after the run ended: exit 0 in ${took}s, nothing to join"
else
  tap_fail "a worker added back after the run ended" \
    "rc=$rc after ${took}s; $(log_tail "$tmp/late-0.err")"
fi

tap_done
