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
#      An elastic job's group has minCount = minWorkers (+ chief); a lowered minWorkers
#      is patched into the live group in v1beta1, whose API server takes it, while
#      v1alpha2's refuses it (checked on a group of nobody's) and the group keeps its
#      minCount until the next attempt's, the job saying so.
#   2. a cluster without it (KT_WORKLOAD_API=off): the pods are made as before, the job
#      says so in its GangScheduling condition and one event, not again at a restart.
#   3. 1.37 with kube-scheduler (its gang plugin on) and one kwok node with room for 2
#      pods: a 3-worker job gets none bound, an elastic one with minWorkers 2 gets 2.
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
# cond_ends NS JOB TYPE TEXT: the condition's message ends with TEXT.
cond_ends() { [[ $(condition "$1" "$2" "$3" message) == *"$4" ]]; }
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

# An elastic job (issue 46): minCount is minWorkers (+ chief), not every worker, so that
# the scheduler places it at its minimum when a worker's room is gone.
job gang el 3 "  elastic: {minWorkers: 2}"
wait_until 30 has_npods gang el 3
eluid=$(jp gang tj/el .metadata.uid)
if wait_until 10 groups_are gang el "el-0 2 TrainingJob/$eluid/true/true"; then
  tap_ok "$tag elastic, 3 workers, minWorkers 2: PodGroup el-0 with minCount 2"
else tap_fail "$tag elastic: PodGroup el-0 with minCount 2" "$(groups gang el)"; fi
# The API's own rule for a live group's minCount, on a group of nobody's: v1beta1 takes a
# change (the field "is mutable to support workload scaling"), v1alpha2 refuses any
# (spec.schedulingPolicy is immutable there).
k -n gang create -f - >/dev/null <<EOF
apiVersion: $GV
kind: PodGroup
metadata: {name: probe}
spec: {schedulingPolicy: {gang: {minCount: 3}}}
EOF
out=$(k -n gang patch "podgroups.${GV#*/}.${GV%/*}" probe --type merge \
  -p '{"spec":{"schedulingPolicy":{"gang":{"minCount":2}}}}' 2>&1)
got=$(k -n gang get "podgroups.${GV#*/}.${GV%/*}" probe \
  -o jsonpath='{.spec.schedulingPolicy.gang.minCount}' 2>&1)
case $GV in
  */v1beta1)
    if [ "$got" = 2 ]; then
      tap_ok "$tag the API server lets a live group's minCount change (3 -> 2)"
    else tap_fail "$tag the API server lets minCount change" "$out; minCount $got"; fi ;;
  *)
    if [ "$got" = 3 ] && [[ $out == *"spec.schedulingPolicy"*"field is immutable"* ]]; then
      tap_ok "$tag the API server refuses a live group's new minCount: '${out#*: }'"
    else tap_fail "$tag the API server refuses a new minCount" "$out; minCount $got"; fi ;;
esac
# minWorkers lowered on the running job: v1beta1's group follows, v1alpha2's keeps its
# minCount and the job says so; the next attempt's group takes the new one either way.
all_running gang el 3
k -n gang patch tj el --type merge -p '{"spec":{"elastic":{"minWorkers":1}}}' >/dev/null
case $GV in
  */v1beta1)
    want="at least 1 of the 3 worker pods of attempt 0 are scheduled together, or none"
    want+=" (spec.elastic.minWorkers) (PodGroup el-0, $GV, minCount 1)"
    if wait_until 10 groups_are gang el "el-0 1 TrainingJob/$eluid/true/true" &&
       wait_until 10 cond_is gang el GangScheduling message "$want"; then
      tap_ok "$tag minWorkers 2 -> 1: the operator patches el-0 to minCount 1, condition too"
    else tap_fail "$tag minWorkers 2 -> 1: el-0 patched to minCount 1" \
      "$(groups gang el); $(condition gang el GangScheduling message)"; fi ;;
  *)
    want="minCount 1 from the spec takes effect at the next attempt's group (minCount cannot"
    want+=" change in $GV)"
    if wait_until 10 cond_ends gang el GangScheduling "$want" &&
       [ "$(groups gang el)" = "el-0 2 TrainingJob/$eluid/true/true" ]; then
      tap_ok "$tag minWorkers 2 -> 1: el-0 keeps minCount 2 and the condition says why"
    else tap_fail "$tag minWorkers 2 -> 1: el-0 keeps minCount 2, the condition says why" \
      "$(groups gang el); $(condition gang el GangScheduling message)"; fi ;;
esac
pod_exit gang el-worker-1 1 '{"error":"boom"}'
if wait_until 30 attempt_pods gang el 1 3 &&
   wait_until 30 groups_are gang el "el-1 1 TrainingJob/$eluid/true/true"; then
  tap_ok "$tag restart: attempt 1's group el-1 has minCount 1"
else tap_fail "$tag restart: el-1 with minCount 1" "$(groups gang el)"; fi

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
it_cleanup
IT_OP_PIDS=()

# === 3. kube-scheduler places an elastic job at its minimum ===============================
# 1.37 only: this tier builds kube-scheduler for the default release (the scale test's);
# v1.36.3's would be a build of its own.
# bound NS JOB: how many of the job's pods are bound to a node.
bound() {
  local path='{range .items[*]}{.spec.nodeName}{"\n"}{end}'
  k -n "$1" get pods -l "kubetrain.dev/job-name=$2" -o "jsonpath=$path" 2>/dev/null | grep -c .
}
# refused NS JOB: how many of the job's pods the scheduler wrote PodScheduled
# False/Unschedulable (not SchedulerError: an error is no verdict on the room).
refused() {
  local path='{range .items[*]}{.status.conditions[?(@.type=="PodScheduled")].status}/'
  path+='{.status.conditions[?(@.type=="PodScheduled")].reason}{"\n"}{end}'
  k -n "$1" get pods -l "kubetrain.dev/job-name=$2" -o "jsonpath=$path" 2>/dev/null |
    grep -cx False/Unschedulable
}
# why NS JOB: the scheduler's messages on the job's pods, one a line.
why() {
  local path='{range .items[*]}{.status.conditions[?(@.type=="PodScheduled")].message}{"\n"}{end}'
  k -n "$1" get pods -l "kubetrain.dev/job-name=$2" -o "jsonpath=$path" 2>/dev/null | grep .
}
placed_is() { [ "$(bound "$1" "$2")" = "$3" ] && [ "$(refused "$1" "$2")" = "$4" ]; }
# quorum_failed NS JOB N: none of the job's N pods bound, all Unschedulable, and the
# scheduler's words say the gang did not reach minCount with 2 placed (the room).
quorum_failed() {
  placed_is "$1" "$2" 0 "$3" &&
    why "$1" "$2" | grep -q "minCount ($3) cannot be satisfied: 2 scheduled"
}
# room_short NS JOB: 2 of the job's pods bound, the third Unschedulable for the room.
room_short() {
  placed_is "$1" "$2" 2 1 && [ "$(why "$1" "$2")" = "0/1 nodes are available: 1 Too many pods." ]
}
# untainted NODE: the node has no taint (the node lifecycle controller lifts not-ready
# after kwok reports it Ready; until then the scheduler refuses it for the taint).
untainted() { [ -z "$(k get node "$1" -o jsonpath='{.spec.taints}' 2>/dev/null)" ]; }
# sjob NAME WORKERS [SPEC-YAML-LINES]: a TrainingJob in namespace sched without a checkpoint
# volume (this cluster has no PersistentVolumes: a claim would leave every pod unschedulable).
sjob() {
  k -n sched create -f - >/dev/null <<EOF
apiVersion: kubetrain.dev/v1alpha1
kind: TrainingJob
metadata: {name: $1}
spec:
  workers: $2
${3:-}
EOF
}
K8S_VERSION=v1.37.2 it_cluster opint-gang-sched
GV=scheduling.k8s.io/v1beta1
if ! err=$(bash e2e/cluster/build-kwok.sh 2>&1 >/dev/null); then
  tap_fail "kwok built (e2e/cluster/build-kwok.sh)" "$(tail -n 5 <<<"$err")"
elif ! err=$(KT_KWOK_GANG=on bash e2e/cluster/kwok-up.sh 1 2 2>&1); then
  tap_fail "kwok-up.sh: kube-scheduler with the gates, one node with room for 2 pods" \
    "$(tail -n 5 <<<"$err")"
else
  wait_until 60 untainted kwok-node-0
  it_operator sched
  LOG=$IT_DIR/op-sched.log
  ns sched
  # Room for 2 of 3 workers: a job that is not elastic (minCount 3) gets none placed.
  sjob whole 3
  if wait_until 60 quorum_failed sched whole 3; then
    tap_ok "[1.37] room for 2 pods, 3 workers, minCount 3: none bound, all 3 Unschedulable"
  else tap_fail "[1.37] 3 workers, minCount 3, room for 2: none bound" \
    "bound $(bound sched whole), refused $(refused sched whole); $(groups sched whole)
$(why sched whole)"; fi
  k -n sched delete tj whole --wait=false >/dev/null
  wait_until 60 has_npods sched whole 0
  # Elastic, minWorkers 2 (minCount 2): two bound, the third left unschedulable.
  sjob el 3 "  elastic: {minWorkers: 2}"
  if wait_until 60 room_short sched el; then
    tap_ok "[1.37] the same room, elastic with minWorkers 2 (minCount 2): 2 bound, 1 Unschedulable"
  else tap_fail "[1.37] elastic minWorkers 2: 2 bound, 1 unschedulable" \
    "bound $(bound sched el), refused $(refused sched el); $(groups sched el)
$(why sched el)
$(tail -n 5 "$KT_RUN/logs/kube-scheduler.log")"; fi
  sanitizer_clean "$LOG" "with kube-scheduler"
  if it_stop "$IT_PID"; then tap_ok "[1.37] SIGTERM: the operator exits 0 (with kube-scheduler)"
  else tap_fail "[1.37] SIGTERM: the operator exits 0 (with kube-scheduler)" \
    "$(tail -n 20 "$LOG")"; fi
fi
tap_done
