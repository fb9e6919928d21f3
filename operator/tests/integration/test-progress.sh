#!/usr/bin/env bash
# status.progress, status.checkpoint and the steps each restart lost, written by
# kubetrain-operator (ASan+UBSan build, progress.c) against a real kube-apiserver, from a
# real trainer's /metrics. This tier runs no pods: the test plays the kubelet, writing the
# chief pod's status with podIP 127.0.0.1, and runs kubetrain-trainer itself on this
# machine, listening on the port the pod's kubetrain.dev/metrics-port annotation names
# (the job's template sets KUBETRAIN_METRICS_PORT to a free port, so that worktrees side
# by side do not collide). What is real: the operator's scrape over HTTP, its merge patch
# of the status subresource through RBAC-free admin credentials, the CRD's schema (an
# unknown field would be pruned) and printer column, and the trainer's numbers.
#  - a running job gets status.progress (step growing, totalSteps, percent, epoch, loss,
#    accuracy, samplesPerSecond, an estimate once two scrapes exist) and
#    status.checkpoint, and `kubectl get tj` prints PROGRESS as N%;
#  - SIGTERM: the trainer saves and exits 75; with its termination message on the pod the
#    operator restarts the group, and the first scrape of the new attempt records
#    restarts.lastStepsLost 0;
#  - killed without a save (exit 137, no message) and resumed from scratch: the steps it
#    had trained are lost, at least the last step the status showed;
#  - a user's program (spec.command) gets no status.progress.
set -uo pipefail # no -e: a failed check is reported (not ok) and the test goes on
cd "$(dirname "$0")/../../.." || exit 1
. e2e/lib/tap.sh
. operator/tests/integration/lib.sh
. trainer/tests/lib.sh

TRAINER=${TRAINER:-build/bin/kubetrain-trainer}
DATA=/usr/share/datasets/fashion-mnist
if [ ! -x "$TRAINER" ]; then
  tap_skip "progress from the chief's /metrics" "$TRAINER is not built"; tap_done; exit 0
fi
if [ ! -f "$DATA/train-labels-idx1-ubyte.gz" ] && [ ! -f "$DATA/train-labels-idx1-ubyte" ]; then
  tap_skip "progress from the chief's /metrics" "no Fashion-MNIST in $DATA"; tap_done; exit 0
fi
it_cluster opint-progress
it_operator main --progress-interval 1 --progress-qps 20
LOG=$IT_DIR/op-main.log
TPID=
stop_trainer() { [ -n "$TPID" ] && kill -9 "$TPID" 2>/dev/null; wait "$TPID" 2>/dev/null; TPID=; }
trap 'stop_trainer; it_cleanup' EXIT

port=$(free_port)
ckpt=$IT_DIR/ckpt
rm -rf "$ckpt"
export KUBETRAIN_TERMINATION_FILE=$IT_DIR/termination OPENBLAS_NUM_THREADS=1
unset TF_CONFIG
# start_trainer: one worker, long enough to outlive the test, a checkpoint every 40 steps.
start_trainer() {
  rm -f "$KUBETRAIN_TERMINATION_FILE"
  "$TRAINER" --model mlp --per-worker-batch 16 --epochs 2 --steps-per-epoch 20000 \
    --checkpoint-dir "$ckpt" --checkpoint-every-steps 40 --metrics-port "$port" \
    >>"$IT_DIR/trainer.log" 2>&1 &
  TPID=$!
}
# chief_up: the kubelet's part for the chief, with the pod IP the operator dials.
chief_up() {
  all_running prog j 2 &&
    k -n prog patch pod j-worker-0 --subresource status --type merge \
      -p '{"status":{"podIP":"127.0.0.1","podIPs":[{"ip":"127.0.0.1"}]}}' >/dev/null
}
prog() { jp prog tj/j "$1"; }
step_past() { [ "$(prog .status.progress.step)" -gt "$1" ] 2>/dev/null; }

ns prog
# Live recovery off: the steps a group restart loses are what is measured.
job prog j 2 "  recoveryTimeoutSeconds: 0
  training: {epochs: 2, stepsPerEpoch: 20000, perWorkerBatchSize: 16}
  template:
    spec:
      containers:
        - name: trainer
          env: [{name: KUBETRAIN_METRICS_PORT, value: \"$port\"}]"
ns user
job user u 1 "  image: python:3
  command: [python, train.py]"

# --- live progress --------------------------------------------------------------------
start_trainer
chief_up
annot=$(jp prog pod/j-worker-0 '.metadata.annotations.kubetrain\.dev/metrics-port')
if wait_until 60 step_past 45; then
  s1=$(prog .status.progress.step)
  if wait_until 30 step_past "$s1"; then
    tap_ok "status.progress.step grows ($s1 -> $(prog .status.progress.step)); annotation $annot"
  else tap_fail "status.progress.step grows" "stuck at $s1; $(tail -n 5 "$LOG")"; fi
else
  tap_fail "status.progress appears" \
    "annotation '$annot'; $(k -n prog get tj j -o yaml | tail -n 30; tail -n 5 "$LOG")"
fi
# The threads carry their names (design.md: top -H, perf, gdb).
names=$(cat /proc/"$IT_PID"/task/*/comm 2>/dev/null | sort -u | tr '\n' ' ')
want="kt-http kt-progress kt-reconcile kt-signals kt-w-pods kt-w-trainingjo"
missing=$(for n in $want; do [[ " $names" == *" $n "* ]] || echo -n "$n "; done)
if [ -z "$missing" ]; then tap_ok "the operator's threads are named: $names"
else tap_fail "the operator's threads are named" "missing $missing; /proc says: $names"; fi
wait_until 30 test -n "$(prog .status.progress.estimatedCompletionTime)"
k -n prog get tj j -o json >"$IT_DIR/job.json"
res=$(python3 - "$IT_DIR/job.json" <<'PY'
import datetime, json, sys
st = json.load(open(sys.argv[1]))["status"]
p, c, bad = st.get("progress", {}), st.get("checkpoint", {}), []
if p.get("totalSteps") != 40000: bad.append(f"totalSteps {p.get('totalSteps')}")
if p.get("percent") != f"{p.get('step', 0) * 100 // 40000}%":
    bad.append(f"percent {p.get('percent')}")
if p.get("epoch") != 1: bad.append(f"epoch {p.get('epoch')}")
for k in ("loss", "accuracy", "samplesPerSecond"):
    if not isinstance(p.get(k), (int, float)) or p[k] <= 0: bad.append(f"{k} {p.get(k)}")
if p.get("attempt") != 0: bad.append(f"attempt {p.get('attempt')}")
now = datetime.datetime.now(datetime.timezone.utc)
def t(s): return datetime.datetime.fromisoformat(s.replace("Z", "+00:00"))
try:
    if t(p["estimatedCompletionTime"]) <= now: bad.append("estimate in the past")
    if abs((t(p["updateTime"]) - now).total_seconds()) > 30: bad.append("updateTime not now")
    if abs((t(c["time"]) - now).total_seconds()) > 60: bad.append("checkpoint.time not now")
except (KeyError, ValueError) as e:
    bad.append(f"time field {e}")
if not (c.get("step", 0) >= 40 and c["step"] % 40 == 0 and c["step"] <= p.get("step", 0)):
    bad.append(f"checkpoint.step {c.get('step')}")
print("; ".join(bad) or "ok")
PY
)
what="status.progress: totalSteps, percent, epoch, loss, accuracy, samples/s, an ETA;"
what+=" status.checkpoint step and time"
if [ "$res" = ok ]; then tap_ok "$what"
else tap_fail "$what" "$res $(cat "$IT_DIR/job.json")"; fi
out=$(k -n prog get tj j 2>&1)
col=$(awk 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == "PROGRESS") c = i }
  NR == 2 { print $c }' <<<"$out")
if [[ $col =~ ^[0-9]+%$ ]]; then tap_ok "kubectl get tj: PROGRESS $col"
else tap_fail "kubectl get tj prints PROGRESS as N%" "$out"; fi

# --- a SIGTERM: saved, nothing lost -----------------------------------------------------
kill -TERM "$TPID"; wait "$TPID"; rc=$?; TPID=
msg=$(cat "$KUBETRAIN_TERMINATION_FILE" 2>/dev/null)
pod_exit prog j-worker-0 "$rc" "$msg"
wait_until 30 is prog tj/j .status.attempt 1
start_trainer
chief_up
if wait_until 60 is prog tj/j .status.progress.attempt 1 &&
  is prog tj/j .status.restarts.lastStepsLost 0 && is prog tj/j .status.restarts.stepsLost 0; then
  tap_ok "SIGTERM (exit $rc, $msg): attempt 1 resumed from its checkpoint, lastStepsLost 0"
else
  tap_fail "SIGTERM: lastStepsLost 0" \
    "rc=$rc msg=$msg status: $(jp prog tj/j .status.restarts) $(prog .status.progress)"
fi

# --- killed without a save, resumed from scratch ---------------------------------------
wait_until 60 step_past "$(prog .status.checkpoint.step)"
seen=$(prog .status.progress.step)
stop_trainer
pod_exit prog j-worker-0 137
rm -rf "$ckpt"
wait_until 30 is prog tj/j .status.attempt 2
start_trainer
chief_up
if wait_until 60 is prog tj/j .status.progress.attempt 2; then
  lost=$(prog .status.restarts.lastStepsLost) total=$(prog .status.restarts.stepsLost)
  if [ "${lost:-0}" -ge "$seen" ] && [ "$total" = "$lost" ]; then
    tap_ok "killed at step >= $seen, resumed from step 0: lastStepsLost $lost, stepsLost $total"
  else tap_fail "killed without a save: steps lost" "lost=$lost total=$total, want >= $seen"; fi
else tap_fail "killed without a save: attempt 2 scraped" "$(prog .status)"; fi
stop_trainer

# --- a user's program: nothing to read ------------------------------------------------
wait_until 30 has_npods user u 1 && pod_running user u-worker-0
k -n user patch pod u-worker-0 --subresource status --type merge \
  -p '{"status":{"podIP":"127.0.0.1","podIPs":[{"ip":"127.0.0.1"}]}}' >/dev/null
sleep 3
if [ -z "$(jp user tj/u .status.progress)" ] &&
  [ -z "$(jp user pod/u-worker-0 '.metadata.annotations.kubetrain\.dev/metrics-port')" ]; then
  tap_ok "a user's program (spec.command): no metrics annotation, no status.progress"
else tap_fail "a user's program gets no status.progress" "$(jp user tj/u .status)"; fi

if grep -q '"level":"error"' "$LOG"; then
  tap_fail "no error in the operator's log" "$(grep error "$LOG" | head -n 3)"
else tap_ok "no error in the operator's log"; fi
tap_done
