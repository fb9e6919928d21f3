#!/usr/bin/env bash
# Gang scheduling (docs/design.md, "Gang scheduling") with kubetrain-operator (ASan+UBSan
# build) against a real kube-apiserver, etcd and kube-controller-manager:
#   1. a cluster with the Workload API (up.sh api, the gates on), at each Kubernetes
#      release with its own version of that API: 1.37 (the default, v1.37.2) serves
#      scheduling.k8s.io/v1beta1, 1.36 (v1.36.3) served v1alpha2. Each attempt gets a
#      PodGroup <job>-<attempt> in that version, owned by the job with minCount = chief +
#      workers + ps (in v1beta1 with disruptionMode all), its pods linked (not the
#      evaluator); the previous attempt's group goes at a restart; Scheduled says why the
#      job waits once the pods are unschedulable (their PodScheduled written here in the
#      scheduler's place: this tier has none); gangScheduling: false makes no group; the
#      garbage collector takes the group with the job.
#   2. a cluster without it (KT_WORKLOAD_API=off): the pods are made as before, the job
#      says so in its GangScheduling condition and one event, not again at a restart.
set -uo pipefail # no -e: a failed check is reported (not ok) and the test goes on
cd "$(dirname "$0")/../../.." || exit 1
. e2e/lib/tap.sh
. operator/tests/integration/lib.sh

# groups NS JOB: "name minCount ownerKind/ownerUid/controller/blockOwnerDeletion" per
# PodGroup of the job (in the group version $GV), one a line, sorted.
groups() {
  local path='{range .items[*]}{.metadata.name} {.spec.schedulingPolicy.gang.minCount}'
  path+=' {.metadata.ownerReferences[0].kind}/{.metadata.ownerReferences[0].uid}'
  path+='/{.metadata.ownerReferences[0].controller}'
  path+='/{.metadata.ownerReferences[0].blockOwnerDeletion}{"\n"}{end}'
  k -n "$1" get "podgroups.${GV#*/}.${GV%/*}" -l "kubetrain.dev/job-name=$2" \
    -o "jsonpath=$path" 2>/dev/null | sort
}
# linked NS JOB: "pod group" per pod of the job ("-" for none), sorted.
linked() {
  local path='{range .items[*]}{.metadata.name} {.spec.schedulingGroup.podGroupName}{"\n"}{end}'
  k -n "$1" get pods -l "kubetrain.dev/job-name=$2" -o "jsonpath=$path" 2>/dev/null |
    awk '{print $1, ($2 == "" ? "-" : $2)}' | sort
}
# gang_events NS JOB: the job's GangSchedulingUnavailable events.
gang_events() {
  k -n "$1" get events --field-selector "reason=GangSchedulingUnavailable,involvedObject.name=$2" \
    -o name 2>/dev/null | grep -c .
}
# Predicates for wait_until, which runs a command again (a $(...) in its arguments
# would be read once).
groups_are() { [ "$(groups "$1" "$2")" = "$3" ]; }
cond_is() { [ "$(condition "$1" "$2" "$3" "$4")" = "$5" ]; }
events_at_least() { [ "$(gang_events "$1" "$2")" -ge "$3" ]; }
# sanitizer_clean LOG: a tap line, ok when the operator's log has no sanitizer report.
sanitizer_clean() {
  local pat='runtime error\|AddressSanitizer\|LeakSanitizer'
  if grep -q "$pat" "$1"; then
    tap_fail "no sanitizer report in the operator's log ($2)" "$(grep -A5 "$pat" "$1" | head -n 30)"
  else tap_ok "no sanitizer report in the operator's log ($2)"; fi
}
# unschedulable NS POD: the scheduler's verdict, written in its place.
unschedulable() {
  k -n "$1" patch pod "$2" --subresource status --type merge -p '{"status":{"conditions":[
    {"type":"PodScheduled","status":"False","reason":"Unschedulable",
     "message":"0/1 nodes are available: 1 Insufficient cpu."}]}}' >/dev/null
}

# === 1. the Workload API served ===========================================================
# served VERSION GV: part 1 on a cluster of Kubernetes VERSION, whose PodGroups are in
# group version GV; the checks' names say which ([1.37] ...).
served() {
local v=$1 tag="[${1%.*}]"
GV=$2
echo "# Kubernetes $v: PodGroups in $GV"
K8S_VERSION=$v it_cluster "opint-gang-${v//./-}"
it_operator "gang-$v"
LOG=$IT_DIR/op-gang-$v.log

if k get --raw "/apis/$GV" 2>/dev/null | grep -q '"name":"podgroups"'; then
  tap_ok "$tag the API server serves $GV podgroups (up.sh api)"
else tap_fail "$tag the API server serves $GV podgroups" \
  "$(k get --raw "/apis/$GV" 2>&1 | head -c 300)"; fi

ns gang
job gang j 3
wait_until 30 has_npods gang j 3
uid=$(jp gang tj/j .metadata.uid)
want="j-0 3 TrainingJob/$uid/true/true"
if wait_until 10 groups_are gang j "$want"; then
  tap_ok "$tag one PodGroup j-0, minCount 3, owned by the job (controller, blockOwnerDeletion)"
  # v1beta1: the gang is preempted whole (spec.disruptionMode.all, written by the
  # operator); v1alpha2: the operator writes none (the field needs a gate that is off)
  # and the API server fills in its default, Pod.
  dm=$(k -n gang get "podgroups.${GV#*/}.${GV%/*}" j-0 -o jsonpath='{.spec.disruptionMode}')
  case $GV in
    */v1beta1) want_dm='{"all":{}}' ;;
    *) want_dm=Pod ;;
  esac
  if [ "$dm" = "$want_dm" ]; then tap_ok "$tag disruptionMode '$dm'"
  else tap_fail "$tag disruptionMode" "got '$dm', want '$want_dm'"; fi
else tap_fail "$tag PodGroup j-0 with minCount 3 owned by the job" \
  "got '$(groups gang j)', want '$want'"; fi
want=$'j-worker-0 j-0\nj-worker-1 j-0\nj-worker-2 j-0'
if [ "$(linked gang j)" = "$want" ]; then
  tap_ok "$tag every pod names the group (spec.schedulingGroup.podGroupName)"
else tap_fail "$tag every pod names the group" "$(linked gang j)"; fi
if wait_until 10 cond_is gang j GangScheduling reason PodGroupCreated; then
  tap_ok "$tag condition GangScheduling True/PodGroupCreated"
else tap_fail "$tag condition GangScheduling PodGroupCreated" \
  "$(jp gang tj/j .status.conditions)"; fi

# No node has room: the job says why it waits, in the scheduler's words.
for i in 0 1 2; do unschedulable gang "j-worker-$i"; done
want="0/3 pods schedulable as a group: 0/1 nodes are available: 1 Insufficient cpu."
if wait_until 10 cond_is gang j Scheduled message "$want"; then
  got="$(condition gang j Scheduled reason)/$(jp gang tj/j .status.phase)"
  if [ "$got" = WaitingForGang/Pending ]; then
    tap_ok "$tag Scheduled False/WaitingForGang: '$want', phase Pending"
  else tap_fail "$tag Scheduled WaitingForGang, phase Pending" "$(jp gang tj/j .status)"; fi
else tap_fail "$tag Scheduled says why the job waits" "$(jp gang tj/j .status.conditions)"; fi

# A worker fails: attempt 1 gets its own group, attempt 0's goes.
all_running gang j 3
pod_exit gang j-worker-1 1 '{"error":"boom"}'
if wait_until 30 attempt_pods gang j 1 3 &&
   wait_until 30 groups_are gang j "j-1 3 TrainingJob/$uid/true/true"; then
  tap_ok "$tag restart: PodGroup j-1 for attempt 1, j-0 deleted"
else tap_fail "$tag restart: PodGroup j-1, j-0 deleted" \
  "$(groups gang j); $(k -n gang get pods 2>&1)"; fi
want=$'j-worker-0 j-1\nj-worker-1 j-1\nj-worker-2 j-1'
if [ "$(linked gang j)" = "$want" ]; then tap_ok "$tag attempt 1's pods name j-1"
else tap_fail "$tag attempt 1's pods name j-1" "$(linked gang j)"; fi

# Roles: minCount counts chief, workers and ps; the evaluator stays out of the group.
job gang roles 2 "  image: tf:1
  command: [python3, train.py]
  chief: {}
  ps: {replicas: 1}
  evaluator: {}"
wait_until 30 has_npods gang roles 5
want=$'roles-chief-0 roles-0\nroles-evaluator-0 -\nroles-ps-0 roles-0'
want+=$'\nroles-worker-0 roles-0\nroles-worker-1 roles-0'
if [ "$(groups gang roles | cut -d' ' -f1,2)" = "roles-0 4" ] &&
   [ "$(linked gang roles)" = "$want" ]; then
  tap_ok "$tag chief + 2 workers + ps: minCount 4, the evaluator not in the group"
else tap_fail "$tag roles: minCount 4, evaluator outside" \
  "$(groups gang roles); $(linked gang roles)"; fi

# gangScheduling: false: no group.
job gang solo 2 "  gangScheduling: false"
wait_until 30 has_npods gang solo 2
sleep 1
if [ -z "$(groups gang solo)" ] &&
   [ "$(linked gang solo)" = $'solo-worker-0 -\nsolo-worker-1 -' ]; then
  tap_ok "$tag gangScheduling: false: no PodGroup, no pod names one"
else tap_fail "$tag gangScheduling: false makes no group" \
  "$(groups gang solo); $(linked gang solo)"; fi

# The job deleted: the garbage collector takes its group (after the pods, whose
# reference the PodGroup protection finalizer waits for).
k -n gang delete tj roles --wait=false >/dev/null
if wait_until 90 groups_are gang roles ""; then tap_ok "$tag job deleted: its PodGroup is collected"
else tap_fail "$tag job deleted: its PodGroup is collected" \
  "$(k -n gang get podgroup/roles-0 tj/roles -o yaml 2>&1 |
     grep -E 'name:|deletion|finalizers|- ' | head -30)
$(k -n gang get pods -l kubetrain.dev/job-name=roles 2>&1)"; fi

sanitizer_clean "$LOG" "$tag with the API"
if it_stop "$IT_PID"; then tap_ok "$tag SIGTERM: the operator exits 0 (no leak reported)"
else tap_fail "$tag SIGTERM: the operator exits 0" "$(tail -n 20 "$LOG")"; fi
it_cleanup
IT_OP_PIDS=()
}
served v1.37.2 scheduling.k8s.io/v1beta1
served v1.36.3 scheduling.k8s.io/v1alpha2

# === 2. a cluster without the Workload API ================================================
KT_WORKLOAD_API=off it_cluster opint-gang-off
it_operator off
LOG=$IT_DIR/op-off.log
if k get --raw /apis/scheduling.k8s.io/v1beta1 2>/dev/null | grep -q '"podgroups"'; then
  tap_fail "KT_WORKLOAD_API=off: scheduling.k8s.io/v1beta1 serves no podgroups" "it does"
else tap_ok "KT_WORKLOAD_API=off: scheduling.k8s.io/v1beta1 serves no podgroups"; fi

ns nogang
job nogang j 2
if wait_until 30 has_npods nogang j 2 &&
   [ "$(linked nogang j)" = $'j-worker-0 -\nj-worker-1 -' ]; then
  tap_ok "pods made as before, naming no group"
else tap_fail "pods made as before" "$(linked nogang j); $(tail -n 5 "$LOG")"; fi
wait_until 10 cond_is nogang j GangScheduling reason GangSchedulingUnavailable
msg=$(condition nogang j GangScheduling message)
if [ "$(condition nogang j GangScheduling reason)" = GangSchedulingUnavailable ] &&
   [[ $msg == *scheduling.k8s.io/v1beta1* && $msg == *GenericWorkload* ]] &&
   [[ $msg == *scheduling.k8s.io/v1alpha2=true* ]]; then
  tap_ok "condition GangScheduling False/GangSchedulingUnavailable names the API and the gates"
else tap_fail "condition GangSchedulingUnavailable" "$(jp nogang tj/j .status.conditions)"; fi
wait_until 10 events_at_least nogang j 1
all_running nogang j 2
pod_exit nogang j-worker-0 1 '{"error":"boom"}'
wait_until 30 attempt_pods nogang j 1 2
sleep 1
if [ "$(gang_events nogang j)" = 1 ]; then
  tap_ok "one GangSchedulingUnavailable event, none again at the restart"
else tap_fail "one GangSchedulingUnavailable event" "$(gang_events nogang j) events"; fi
sanitizer_clean "$LOG" "without the API"
if it_stop "$IT_PID"; then tap_ok "SIGTERM: the operator exits 0 (no API)"
else tap_fail "SIGTERM: the operator exits 0 (no API)" "$(tail -n 20 "$LOG")"; fi
tap_done
