#!/usr/bin/env bash
# Live recovery (docs/design.md, "Restart policies and counting") with kubetrain-operator
# (ASan+UBSan build) against a real kube-apiserver, etcd and kube-controller-manager, the
# Workload API served (up.sh api). Pods are objects whose status this test writes in the
# kubelet's place:
#   1. a worker pod deleted (held terminating by a finalizer of this test, as a kubelet
#      would hold it while the trainer leaves): counted once, the name not reused while
#      the old object is there; once gone, the same name again in the same attempt and
#      PodGroup, annotated replacement 1, the other pods untouched (same uid),
#      restarts.replaced 1, a WorkerReplaced event;
#   2. a worker killed (exit 137): replaced too, counted in restarts.application;
#   3. a survivor that gave up ("recoveryTimedOut": true in its termination message): the
#      group restarts (attempt 1, a new PodGroup, status.replacedPods cleared);
#   4. a user's program (spec.command): a deleted pod restarts the group.
set -uo pipefail # no -e: a failed check is reported (not ok) and the test goes on
cd "$(dirname "$0")/../../.." || exit 1
. e2e/lib/tap.sh
. operator/tests/integration/lib.sh

# uid NS POD: the pod's uid, "" when there is none.
uid() { jp "$1" "pod/$2" .metadata.uid; }
# uids NS JOB N: the uids of worker 0..N-1, space-separated.
uids() {
  local i out=
  for ((i = 0; i < $3; i++)); do out+="$(uid "$1" "$2-worker-$i") "; done
  echo "$out"
}
# replaced_events NS JOB: the messages of the job's WorkerReplaced events, one a line.
replaced_events() {
  k -n "$1" get events --field-selector "reason=WorkerReplaced,involvedObject.name=$2" \
    -o 'jsonpath={range .items[*]}{.message}{"\n"}{end}' 2>/dev/null
}
# groups NS JOB: the job's PodGroups, names sorted on one line.
groups() {
  k -n "$1" get podgroups -l "kubetrain.dev/job-name=$2" -o name 2>/dev/null | sort | tr '\n' ' '
}
# attempt NS JOB: status.attempt (absent before the first restart: 0).
attempt() { local a; a=$(jp "$1" "tj/$2" .status.attempt); echo "${a:-0}"; }
# Predicates for wait_until (it runs a command again; a $(...) argument is read once).
uid_changed() { local u; u=$(uid "$1" "$2"); [ -n "$u" ] && [ "$u" != "$3" ]; }
status_is() { is "$1" "tj/$2" "$3" "$4"; }
sanitizer_clean() {
  local pat='runtime error\|AddressSanitizer\|LeakSanitizer'
  if grep -q "$pat" "$1"; then
    tap_fail "no sanitizer report in the operator's log" "$(grep -A5 "$pat" "$1" | head -n 30)"
  else tap_ok "no sanitizer report in the operator's log"; fi
}

it_cluster opint-recovery
it_operator recovery
LOG=$IT_DIR/op-recovery.log

# === 1. a worker pod deleted ==============================================================
ns rec
job rec j 3
all_running rec j 3
wait_until 30 status_is rec j .status.phase Running
before=$(uids rec j 3)
old2=$(uid rec j-worker-2)
# The finalizer keeps the deleted object (deletionTimestamp set) as a kubelet would
# while the trainer finishes its step: the window in which the name cannot be reused.
k -n rec patch pod j-worker-2 --type merge \
  -p '{"metadata":{"finalizers":["kubetrain.dev/test-hold"]}}' >/dev/null
k -n rec delete pod j-worker-2 --wait=false >/dev/null
if wait_until 30 status_is rec j .status.restarts.replaced 1; then
  got="$(jp rec tj/j .status.restarts.disruption)/$(jp rec tj/j .status.restarts.application)"
  got+="/$(attempt rec j)/$(jp rec tj/j .status.phase)"
  if [ "$got" = 1/0/0/Running ]; then
    tap_ok "deleted worker: restarts.replaced 1, disruption 1, application 0, attempt 0, Running"
  else tap_fail "deleted worker: counts, attempt 0, Running" "$(jp rec tj/j .status)"; fi
else tap_fail "deleted worker: restarts.replaced 1" "$(jp rec tj/j .status)"; fi
want="pod j-worker-2 replaced; live recovery (worker 2: it was deleted)"
if wait_until 10 grep -qxF "$want" <(replaced_events rec j) ||
   [ "$(replaced_events rec j)" = "$want" ]; then
  tap_ok "a Normal WorkerReplaced event: '$want'"
else tap_fail "WorkerReplaced event" "$(k -n rec get events 2>&1 | tail -5)"; fi

# The trainer of the deleted pod exits 75 while the object is held: the same loss.
pod_exit rec j-worker-2 75 '{"error":"stopped by SIGTERM","step":40,"checkpoint_step":40}'
sleep 2
got="$(uid rec j-worker-2)/$(npods rec j)/$(jp rec tj/j .status.restarts.replaced)"
got+="/$(jp rec tj/j .status.restarts.application)/$(replaced_events rec j | grep -c .)"
if [ "$got" = "$old2/3/1/0/1" ]; then
  tap_ok "while the old object is terminating: no new pod, not counted again"
else tap_fail "terminating window: no new pod, counted once" \
  "uid/pods/replaced/application/events: $got (old uid $old2)"; fi

k -n rec patch pod j-worker-2 --type merge -p '{"metadata":{"finalizers":null}}' >/dev/null
if wait_until 30 uid_changed rec j-worker-2 "$old2"; then
  a='{.metadata.annotations.kubetrain\.dev/attempt}/'
  a+='{.metadata.annotations.kubetrain\.dev/replacement}/{.spec.schedulingGroup.podGroupName}'
  got=$(k -n rec get pod j-worker-2 -o "jsonpath=$a")
  if [ "$got" = 0/1/j-0 ]; then
    tap_ok "the same name again: attempt 0, replacement 1, PodGroup j-0"
  else tap_fail "replacement: attempt 0, replacement 1, PodGroup j-0" "$got"; fi
else tap_fail "j-worker-2 recreated" "$(k -n rec get pods 2>&1; tail -n 5 "$LOG")"; fi
after=$(uids rec j 3)
if [ "$(cut -d' ' -f1,2 <<<"$after")" = "$(cut -d' ' -f1,2 <<<"$before")" ]; then
  tap_ok "workers 0 and 1 untouched (same uid)"
else tap_fail "workers 0 and 1 untouched" "before: $before; after: $after"; fi
if [ "$(groups rec j)" = "podgroup.scheduling.k8s.io/j-0 " ]; then
  tap_ok "no new PodGroup: the replacement joined j-0"
else tap_fail "no new PodGroup" "$(groups rec j)"; fi
pod_running rec j-worker-2
sleep 1
got="$(jp rec tj/j .status.restarts.replaced)/$(attempt rec j)"
got+="/$(jp rec tj/j .status.phase)/$(jp rec tj/j '.status.replacedPods[0].launched')"
if [ "$got" = 1/0/Running/true ]; then
  tap_ok "the replacement runs: replaced still 1, attempt 0, Running, replacedPods launched"
else tap_fail "the replacement runs: steady" "$got"; fi

# === 2. a worker killed (137) =============================================================
before=$(uids rec j 3)
old1=$(uid rec j-worker-1)
pod_exit rec j-worker-1 137 ''
if wait_until 30 uid_changed rec j-worker-1 "$old1"; then
  got="$(jp rec tj/j .status.restarts.replaced)/$(jp rec tj/j .status.restarts.application)"
  got+="/$(attempt rec j)"
  got+="/$(jp rec pod/j-worker-1 '.metadata.annotations.kubetrain\.dev/replacement')"
  if [ "$got" = 2/1/0/1 ] && [ "$(uid rec j-worker-0)" = "$(cut -d' ' -f1 <<<"$before")" ] &&
     [ "$(uid rec j-worker-2)" = "$(cut -d' ' -f3 <<<"$before")" ]; then
    tap_ok "killed worker (137): replaced alone, replaced 2, application 1, attempt 0"
  else tap_fail "killed worker replaced alone" "replaced/application/attempt/annotation $got"; fi
else tap_fail "killed worker replaced" "$(k -n rec get pods 2>&1; jp rec tj/j .status)"; fi

# === 3. a survivor that gave up ===========================================================
pod_running rec j-worker-1
pod_exit rec j-worker-0 75 \
  '{"error":"lost j-worker-1: no replacement within 120 s","step":80,"recoveryTimedOut":true}'
if wait_until 30 attempt_pods rec j 1 3; then
  got="$(jp rec tj/j .status.restarts.replaced)/$(jp rec tj/j .status.restarts.application)"
  got+="/$(jp rec tj/j .status.replacedPods)/$(condition rec j Restarting reason)"
  if [ "$got" = 2/2//WorkerFailed ]; then
    tap_ok "recoveryTimedOut: the group restarts (attempt 1, application 2, replacedPods cleared)"
  else tap_fail "recoveryTimedOut: group restart" "$got"; fi
else tap_fail "recoveryTimedOut: the group restarts in attempt 1" \
  "$(k -n rec get pods 2>&1; jp rec tj/j .status)"; fi
if wait_until 10 status_is rec j .status.attempt 1 &&
   [ "$(groups rec j)" = "podgroup.scheduling.k8s.io/j-1 " ]; then
  tap_ok "attempt 1 has its own PodGroup j-1"
else tap_fail "attempt 1's PodGroup" "$(groups rec j)"; fi

# === 4. a user's program ==================================================================
job rec tf 2 "  image: tf:1
  command: [python3, train.py]"
all_running rec tf 2
wait_until 30 status_is rec tf .status.phase Running
k -n rec delete pod tf-worker-1 --wait=false >/dev/null
if wait_until 30 attempt_pods rec tf 1 2; then
  got="$(jp rec tj/tf .status.restarts.disruption)/$(jp rec tj/tf .status.restarts.replaced)"
  if [ "$got" = 1/ ]; then tap_ok "spec.command: a deleted pod restarts the group (attempt 1)"
  else tap_fail "spec.command: group restart, nothing replaced" "$got"; fi
else tap_fail "spec.command: group restart" "$(k -n rec get pods 2>&1)"; fi

sanitizer_clean "$LOG"
if it_stop "$IT_PID"; then tap_ok "SIGTERM: the operator exits 0 (no leak reported)"
else tap_fail "SIGTERM: the operator exits 0" "$(tail -n 20 "$LOG")"; fi
tap_done
