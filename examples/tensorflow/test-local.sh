#!/usr/bin/env bash
# The TensorFlow examples run for real, without a cluster: local processes with the
# TF_CONFIG a pod would get, on loopback ports. MultiWorkerMirroredStrategy on 2 workers
# (worker 1 SIGTERMed in epoch 2, then both restarted: BackupAndRestore resumes them at
# epoch 2, where worker 0 stopped for 20 s outlasts TensorFlow's default heartbeat
# timeout), then ParameterServerStrategy (chief + 2 workers + 1 ps) with the sidecar
# evaluator reading the chief's checkpoints. Prints TAP; part of make test (about 90 s
# on 2 cores), alone with make test-tensorflow.
#
#   bash examples/tensorflow/test-local.sh            TensorFlow, tf-keras and
#                                                     prometheus_client from PyPI in
#                                                     $KT_CACHE/venv-tf, made on first use
#   TF_PYTHON=PYTHON bash ...                         a Python that has the three
# The kubetrain package (mwms.py's ProgressCallback) is python/src's, on PYTHONPATH.
#   TF_IMAGE=kubetrain/tensorflow:VERSION bash ...    in the image (docker run --network host)
set -uo pipefail # no -e: a failed check is reported (not ok) and the test goes on
source e2e/lib/tap.sh
source trainer/tests/lib.sh
EX=examples/tensorflow
PY=${TF_PYTHON:-}
IMAGE=${TF_IMAGE:-}
DATA=${KUBETRAIN_DATA_DIR:-/usr/share/datasets/fashion-mnist}
unset TF_CONFIG KUBETRAIN_CHECKPOINT_DIR
tmp=$(mktemp -d)
# The image's user (uid 65532) writes here too.
chmod 777 "$tmp"
declare -A pid
cleanup() {
  local n
  for n in "${!pid[@]}"; do signal "$n" KILL; done
  wait 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT

if [ -n "$IMAGE" ]; then
  if ! docker image inspect "$IMAGE" >/dev/null 2>&1; then
    tap_skip "TensorFlow examples" "no image $IMAGE (make image-tensorflow)"; tap_done; exit
  fi
  DATA=/data
else
  if [ -z "$PY" ] &&
     ! PY=$(bash bench/pyvenv.sh venv-tf 2>"$tmp/venv.err"); then
    tap_skip "TensorFlow examples" "no TensorFlow venv: $(tail -1 "$tmp/venv.err")"; tap_done; exit
  fi
  skip_without_data "TensorFlow examples" "$DATA"
fi

# start NAME TYPE INDEX PROGRAM ARGS...: one task in the background, with TF_CONFIG from
# $cluster (a JSON object) and KUBETRAIN_CHECKPOINT_DIR=$ckpt; output in $tmp/NAME.log.
start() {
  local name=$1 type=$2 index=$3 prog=$4; shift 4
  local tf="{\"cluster\":$cluster,\"task\":{\"type\":\"$type\",\"index\":$index}}"
  mkdir -p "$tmp/tmpdir"; chmod 777 "$tmp/tmpdir"
  if [ -n "$IMAGE" ]; then
    docker run --rm --name "kt-tftest-$$-$name" --network host -e TF_CONFIG="$tf" \
        -e KUBETRAIN_CHECKPOINT_DIR="$ckpt" -e TMPDIR="$tmp/tmpdir" -v "$tmp:$tmp" \
        "$IMAGE" python3 "/opt/kubetrain/examples/$prog" "$@" >"$tmp/$name.log" 2>&1 &
  else
    # PID 1 of its own pid namespace, as in a pod's container, where it can (as root).
    local ns=()
    [ "$(id -u)" = 0 ] && unshare --pid --fork true 2>/dev/null && ns=(unshare --pid --fork)
    TF_CONFIG=$tf KUBETRAIN_CHECKPOINT_DIR=$ckpt TMPDIR=$tmp/tmpdir KUBETRAIN_DATA_DIR=$DATA \
        PYTHONPATH=$PWD/python/src "${ns[@]}" "$PY" "$EX/$prog" "$@" >"$tmp/$name.log" 2>&1 &
  fi
  pid[$name]=$!
}

# signal NAME SIG: the task's process (under unshare, its child), or its container.
signal() {
  local p
  if [ -n "$IMAGE" ]; then docker kill -s "$2" "kt-tftest-$$-$1" >/dev/null 2>&1; return; fi
  p=$(pgrep -P "${pid[$1]}" 2>/dev/null | head -n 1)
  kill -s "$2" "${p:-${pid[$1]}}" 2>/dev/null
}

alive() { kill -0 "${pid[$1]}" 2>/dev/null; }

# finish NAME SECONDS: waits for the task and sets rc to its exit status, or to 124
# after killing it when it ran past SECONDS. Quiet: bash's "Killed" notice of a task
# this script killed is expected.
finish() {
  local i
  for ((i = 0; i < $2 * 5; i++)); do alive "$1" || break; sleep 0.2; done
  if alive "$1"; then
    signal "$1" KILL; wait "${pid[$1]}"; rc=124
  else
    wait "${pid[$1]}"; rc=$?
  fi
  unset "pid[$1]"
} 2>/dev/null

# wait_log NAME REGEX SECONDS: whether the task's log matches within SECONDS.
wait_log() {
  local i
  for ((i = 0; i < $3 * 5; i++)); do
    grep -qE "$2" "$tmp/$1.log" 2>/dev/null && return 0
    sleep 0.2
  done
  return 1
}

# The log without TensorFlow's C++ and gRPC chatter, for failure reports.
show() { grep -vE '^[IWE][0-9]{4} |^WARNING: All log|retracing' "$tmp/$1.log" | tail "-${2:-15}"; }

# ports N: N loopback addresses as JSON strings, comma-separated.
ports() {
  local n
  for ((n = 0; n < $1; n++)); do
    printf '"127.0.0.1:%s"%s' "$(free_port)" "$([ "$n" -lt $(($1 - 1)) ] && echo ,)"
  done
}

# --- MultiWorkerMirroredStrategy: 2 workers, a kill, a resume -------------------------
ckpt=$tmp/mwms
mwms=(mwms.py --epochs 3 --steps-per-epoch 30 --per-worker-batch 32)
cluster="{\"worker\":[$(ports 2)]}"
start w0 worker 0 "${mwms[@]}"
start w1 worker 1 "${mwms[@]}"
if wait_log w0 'replicas in sync: 2;' 180 && wait_log w1 'replicas in sync: 2;' 30 &&
   grep -q 'task worker/0 (chief)' "$tmp/w0.log" && grep -q 'task worker/1;' "$tmp/w1.log"; then
  tap_ok "mwms: both workers see 2 replicas in sync, worker 0 as chief"
else tap_fail "mwms: both workers see 2 replicas in sync" "$(show w0; show w1)"; fi

# "Epoch 2/3" is printed after every callback's epoch end: the backup of epoch 1 is done.
if wait_log w0 '^Epoch 2/3' 180 && [ -f "$ckpt/ckpt/ckpt-1.index" ] &&
   [ -d "$ckpt/backup/chief" ]; then
  tap_ok "mwms: epoch 1 backed up and checkpointed by the chief"
else tap_fail "mwms: epoch 1 backed up" "$(show w0; ls -R "$ckpt" 2>&1 | head)"; fi

# Worker 1 is stopped as Kubernetes stops a deleted pod, with SIGTERM: it must exit at
# once (TensorFlow's runtime catches SIGTERM and would train on, and PID 1 ignores a
# signal left at its default action; tutorial.exit_on_sigterm).
# A lost peer fails the survivor's collective: the whole group stops, as the operator
# will then restart it.
signal w1 TERM
finish w1 10
if [ "$rc" = 143 ] && ! grep -q 'mwms: done' "$tmp/w1.log"; then
  tap_ok "mwms: worker 1 SIGTERMed in epoch 2 exits at once (143)"
else tap_fail "mwms: worker 1 SIGTERMed in epoch 2 exits at once (143)" "exit $rc; $(show w1)"; fi
finish w0 60
if [ "$rc" != 0 ] && [ "$rc" != 124 ] && ! grep -q 'mwms: done' "$tmp/w0.log"; then
  tap_ok "mwms: worker 0 fails on its own without its peer (exit $rc)"
else tap_fail "mwms: worker 0 fails after worker 1's exit" "exit $rc; $(show w0)"; fi

cluster="{\"worker\":[$(ports 2)]}"
start r0 worker 0 "${mwms[@]}"
start r1 worker 1 "${mwms[@]}"
if wait_log r0 'resuming at epoch 2/3' 180 && wait_log r1 'resuming at epoch 2/3' 30 &&
   ! grep -q '^Epoch 1/3' "$tmp/r0.log" "$tmp/r1.log"; then
  tap_ok "mwms: the restarted group resumes at epoch 2/3 from BackupAndRestore"
else tap_fail "mwms: restarted group resumes at epoch 2" "$(show r0; show r1)"; fi
# A task that stalls past TensorFlow's default heartbeat timeout (10 s) fails the whole
# group ("The following tasks are unhealthy"): a pod starved of CPU on a busy node did,
# in the final model.save. mwms.py gives the coordination service 120 s. Worker 0, the
# service's leader, is stopped for 20 s in epoch 2.
signal r0 STOP; sleep 20; signal r0 CONT
finish r0 180; rc0=$rc
finish r1 30; rc1=$rc
if [ "$rc0" = 0 ] && [ "$rc1" = 0 ] &&
   ! grep -qE 'unhealthy|heartbeat timeout' "$tmp/r0.log" "$tmp/r1.log"; then
  tap_ok "mwms: worker 0 stopped for 20 s in epoch 2: no heartbeat timeout, both exit 0"
else tap_fail "mwms: worker 0 stopped for 20 s: no heartbeat timeout" \
  "exits $rc0 $rc1; $(grep -hE -m2 'unhealthy|heartbeat timeout' "$tmp/r0.log" "$tmp/r1.log")"; fi
if [ "$rc0" = 0 ] && [ "$rc1" = 0 ] && grep -q 'mwms: done' "$tmp/r0.log" &&
   grep -q 'replicas in sync: 2;' "$tmp/r0.log" &&
   grep -q 'replicas in sync: 2;' "$tmp/r1.log"; then
  tap_ok "mwms: both restarted workers finish (exit 0) with 2 replicas in sync"
else tap_fail "mwms: restarted workers finish" "exits $rc0 $rc1; $(show r0; show r1)"; fi

# Only the chief's copy of the model is kept; the other worker's went to a temporary
# directory it deleted, and no BackupAndRestore state is left after a finished fit.
left=$(find "$ckpt" -mindepth 1 -maxdepth 1; find "$ckpt/backup" "$tmp/tmpdir" -mindepth 1 -type d)
left=$(echo "$left" | sed "s|^$tmp/||" | sort | tr '\n' ' ')
if [ -f "$ckpt/model/saved_model.pb" ] && [ -f "$ckpt/ckpt/ckpt-3.index" ] &&
   [ "$left" = "mwms/backup mwms/ckpt mwms/model " ]; then
  tap_ok "mwms: the chief alone saved the model; no temporary or backup files left"
else tap_fail "mwms: the chief alone saved the model" "left: $left"; fi

# --- ParameterServerStrategy: chief + 2 workers + 1 ps, and the evaluator ---------------
ckpt=$tmp/pss
cluster="{\"chief\":[$(ports 1)],\"worker\":[$(ports 2)],\"ps\":[$(ports 1)]}"
start ps0 ps 0 ps.py
start pw0 worker 0 ps.py
start pw1 worker 1 ps.py
start chief chief 0 ps.py --epochs 3 --steps-per-epoch 10
start eval evaluator 0 evaluator.py --epochs 3 --eval-steps 5 --timeout 240
finish chief 300
if [ "$rc" = 0 ] && grep -q 'ps: done' "$tmp/chief.log" &&
   grep -q 'task chief/0 (coordinator); workers: 2; ps: 1;' "$tmp/chief.log"; then
  tap_ok "ps: the chief coordinates 2 workers and 1 ps through 3 epochs and exits 0"
else tap_fail "ps: the chief finishes" "exit $rc; $(show chief 25)"; fi

if alive ps0 && alive pw0 && alive pw1 && grep -q 'ps/0 serving' "$tmp/ps0.log" &&
   grep -q 'worker/1 serving' "$tmp/pw1.log"; then
  tap_ok "ps: the workers and the ps task still serve after the chief exits"
else tap_fail "ps: workers and ps serve on" "$(show ps0 5; show pw0 5; show pw1 5)"; fi

finish eval 120
if [ "$rc" = 0 ] && grep -q 'evaluator: ckpt-3 (epoch 3/3): test loss' "$tmp/eval.log" &&
   grep -q 'evaluator: task evaluator/0;' "$tmp/eval.log"; then
  tap_ok "evaluator: evaluates the chief's checkpoints up to the final one and exits 0"
else tap_fail "evaluator: evaluates the final checkpoint" "exit $rc; $(show eval)"; fi

tap_done
