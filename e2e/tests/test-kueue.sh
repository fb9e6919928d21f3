#!/usr/bin/env bash
# Kueue on the api-level cluster (e2e/cluster/kueue-up.sh, the real manager built by
# build-kueue.sh) admitting plain pod groups the way the operator labels a TrainingJob's
# pods (docs/kueue.md): a group that fits the ClusterQueue's quota is admitted whole (its
# pods ungated), a second one that does not fit stays gated until the first finishes; a
# pod without the queue label is left alone; the pods of an admitted group deleted
# before they ran, and a gated pod deleted, do not keep Kueue's finalizer; one deleted
# pod of a running group keeps it until the group ends (why a queued job has no live
# recovery); and, for elastic jobs in a queue, what becomes of an admitted group whose size
# changes in place: a pod beyond its count is deleted as excess, a pod deleted keeps its
# quota reserved, a replacement within the count joins, and only a pod that Succeeded
# gives its quota back (and still counts); the operator scaling a queued elastic job
# restarts it in a new group of the new count each time (when build/bin/kubetrain-operator
# is built). The api level has no scheduler and no kubelet: the pods stay unscheduled, and
# "the first group finishes" is its pods' status set to Succeeded (or Running) through the
# status subresource, as the kubelet would (the only stand-in here). Own run directory
# (build/e2e/test-kueue). Skips when etcd is missing or Kueue is not built and
# KT_KUEUE_BUILD=0; builds it otherwise (slow the first time).
set -uo pipefail # no -e: a failed check is reported (not ok) and the test goes on
cd "$(dirname "$0")/../.." || exit 1
. e2e/lib/tap.sh

export KT_RUN=$PWD/build/e2e/test-kueue/run
trap 'bash e2e/cluster/down.sh >/dev/null 2>&1' EXIT

if ! bash -c '. e2e/cluster/lib.sh && kt_etcd' >/dev/null; then
  tap_skip "Kueue plain pod groups" "etcd not installed (Debian package etcd-server)"
  tap_done; exit
fi
if [ "$(id -u)" != 0 ]; then
  tap_skip "Kueue plain pod groups" "needs root (kueue-up.sh)"; tap_done; exit
fi
if [ "${KT_KUEUE_BUILD:-1}" = 0 ] && ! bash e2e/cluster/build-kueue.sh --if-built >/dev/null; then
  tap_skip "Kueue plain pod groups" "Kueue is not built and KT_KUEUE_BUILD=0"
  tap_done; exit
fi
for b in "e2e/cluster/build-k8s.sh api" e2e/cluster/build-kueue.sh; do
  # shellcheck disable=SC2086 # $b is a script and its argument
  if ! err=$(bash $b 2>&1 >/dev/null); then
    tap_fail "building with $b" "$(tail -n 5 <<<"$err")"; tap_done; exit
  fi
done

bash e2e/cluster/down.sh >/dev/null 2>&1
if ! out=$(bash e2e/cluster/up.sh api 2>&1); then
  tap_fail "up.sh api" "$out"; tap_done; exit
fi
t0=$(date +%s)
if out=$(bash e2e/cluster/kueue-up.sh 2>&1); then
  v=$(. e2e/cluster/versions.env && echo "$KUEUE_VERSION")
  tap_ok "kueue-up.sh: Kueue $v ready in $(( $(date +%s) - t0 ))s"
else
  tap_fail "kueue-up.sh" "$out"; tap_done; exit
fi
# shellcheck source=/dev/null # the cluster's variables, written by e2e/cluster/up.sh
. "$KT_RUN/env"
k() { "$KT_K8S_BIN/kubectl" --request-timeout 30s "$@"; }
NS=kq
kn() { k -n "$NS" "$@"; }

tap_check "kueue-up.sh again is a no-op while Kueue runs" \
  bash -c 'bash e2e/cluster/kueue-up.sh 2>&1 | grep -q "already up"'
check() { if [ "$2" = "$3" ]; then tap_ok "$1"; else tap_fail "$1" "expected [$3], got [$2]"; fi; }

k create namespace "$NS" >/dev/null
if out=$(kn apply -f examples/kueue/queues.yaml 2>&1); then
  tap_ok "examples/kueue/queues.yaml applied (ResourceFlavor, ClusterQueue, LocalQueue)"
else tap_fail "examples/kueue/queues.yaml applied" "$out"; fi
# One CPU: a group of two pods of 400m fits, two such groups do not.
quota=/spec/resourceGroups/0/flavors/0/resources/0/nominalQuota
k patch clusterqueue training --type json \
  -p "[{\"op\":\"replace\",\"path\":\"$quota\",\"value\":\"1\"}]" >/dev/null

# pod NAME GROUP [QUEUE [COUNT]]: a pod of a group of COUNT pods (2 unless given)
# labelled as the operator labels them.
pod() {
  local labels="kubetrain.dev/job-name: $2" annots=""
  if [ -n "${3:-}" ]; then
    labels="$labels, kueue.x-k8s.io/queue-name: $3, kueue.x-k8s.io/pod-group-name: $2"
    annots="annotations: {kueue.x-k8s.io/pod-group-total-count: \"${4:-2}\","
    annots="$annots kueue.x-k8s.io/retriable-in-group: \"false\"}"
  fi
  kn apply -f - <<EOF
apiVersion: v1
kind: Pod
metadata:
  name: $1
  labels: {$labels}
  $annots
spec:
  restartPolicy: Never
  containers:
  - name: trainer
    image: kubetrain/trainer:test
    resources: {requests: {cpu: 400m, memory: 64Mi}}
EOF
}
gates() { kn get pod "$1" -o 'jsonpath={.spec.schedulingGates[*].name}' 2>/dev/null; }
# admission_gate POD: "gated" when the pod has Kueue's admission gate (Kueue also adds
# kueue.x-k8s.io/topology, which it drops at admission when the flavor has no topology).
admission_gate() { [[ " $(gates "$1") " == *" kueue.x-k8s.io/admission "* ]] && echo gated; }
# wait_until SECONDS CMD...: true when CMD succeeds within SECONDS.
wait_until() {
  local end=$(( $(date +%s) + $1 )); shift
  until "$@" >/dev/null 2>&1; do [ "$(date +%s)" -lt "$end" ] || return 1; sleep 0.5; done
}
# Kueue's Workload; plain "workloads" is the Workload API's kind where it is served.
KWL=workloads.kueue.x-k8s.io
ungated() { [ -z "$(gates "$1")" ]; }
admitted() {
  [ "$(kn get "$KWL" "$1" \
        -o 'jsonpath={.status.conditions[?(@.type=="Admitted")].status}')" = True ]
}

# The first pod of group a alone: gated, not admitted (the group is incomplete).
pod a-0 a training >/dev/null
check "a pod of a group gets Kueue's scheduling gate" "$(admission_gate a-0)" gated
check "and Kueue's finalizer" "$(kn get pod a-0 -o 'jsonpath={.metadata.finalizers[*]}')" \
  kueue.x-k8s.io/managed
sleep 3
check "half a group is not admitted: a-0 still gated after 3s" "$(admission_gate a-0)" gated
pod a-1 a training >/dev/null
if wait_until 60 admitted a && wait_until 30 ungated a-0 && wait_until 30 ungated a-1; then
  tap_ok "group a (2 x 400m CPU of 1) admitted whole: Workload a Admitted, both pods ungated"
else
  tap_fail "group a admitted" \
    "$(kn get "pods,$KWL" -o wide 2>&1; tail -n 20 "$KT_RUN/logs/kueue.log")"
fi

pod b-0 b training >/dev/null
pod b-1 b training >/dev/null
sleep 3
check "group b does not fit while a runs: both pods still gated after 3s" \
  "$(admission_gate b-0) $(admission_gate b-1)" "gated gated"
check "Workload b has no quota reserved" \
  "$(kn get "$KWL" b -o 'jsonpath={.status.conditions[?(@.type=="QuotaReserved")].status}')" False

pod plain-0 plain >/dev/null
check "a pod without the queue label: no gate" "$(gates plain-0)" ""
check "  no finalizer, no kueue.x-k8s.io/managed label" \
  "$(kn get pod plain-0 \
       -o 'jsonpath={.metadata.finalizers}{.metadata.labels.kueue\.x-k8s\.io/managed}')" ""

# Group a finishes (what the kubelet would report); Kueue releases its quota.
for p in a-0 a-1; do
  kn patch pod "$p" --subresource status --type merge \
    -p '{"status":{"phase":"Succeeded"}}' >/dev/null
done
finished() {
  [ "$(kn get "$KWL" a -o 'jsonpath={.status.conditions[?(@.type=="Finished")].status}')" = True ]
}
if wait_until 60 finished; then tap_ok "Workload a Finished once its pods succeeded"
else tap_fail "Workload a Finished" "$(kn get "$KWL" a -o yaml 2>&1 | tail -n 30)"; fi
nofin() { [ -z "$(kn get pod "$1" -o 'jsonpath={.metadata.finalizers}')" ]; }
if wait_until 30 nofin a-0 && wait_until 30 nofin a-1; then
  tap_ok "Kueue took its finalizer off group a's pods"
else
  tap_fail "finalizers of group a removed" \
    "$(kn get pods a-0 a-1 -o yaml 2>&1 | grep -A2 finalizers)"
fi
if wait_until 60 admitted b && wait_until 30 ungated b-0 && wait_until 30 ungated b-1; then
  tap_ok "group b admitted after a finished: both pods ungated"
else tap_fail "group b admitted after a finished" "$(kn get "pods,$KWL" -o wide 2>&1)"; fi

# The operator's restart deletes an attempt's pods, which may never have run: the pods
# must go (PodGC marks unscheduled terminating pods Failed; the group, not retriable,
# is then finished and Kueue takes its finalizer off), not hang on the finalizer.
kn delete pod b-0 b-1 --wait=false >/dev/null
gone() { [ -z "$(kn get pods b-0 b-1 -o name --ignore-not-found 2>/dev/null)" ]; }
t0=$(date +%s)
if wait_until 120 gone; then
  tap_ok "group b's deleted pods are gone in $(( $(date +%s) - t0 ))s (no finalizer left)"
else
  tap_fail "group b's deleted pods are gone" \
    "$(kn get pods b-0 b-1 -o yaml 2>&1 | grep -E 'finalizers|phase|deletionTimestamp' -A1)"
fi
# A pod of a group still gated (here: incomplete, so never admitted) deleted: it goes too.
pod c-0 c training >/dev/null
check "pod c-0 of an incomplete group: gated, with Kueue's finalizer" \
  "$(admission_gate c-0) $(kn get pod c-0 -o 'jsonpath={.metadata.finalizers[*]}')" \
  "gated kueue.x-k8s.io/managed"
kn delete pod c-0 --wait=false >/dev/null
gone_c() { [ -z "$(kn get pod c-0 -o name --ignore-not-found 2>/dev/null)" ]; }
t0=$(date +%s)
if wait_until 120 gone_c; then
  tap_ok "a gated pod deleted is gone in $(( $(date +%s) - t0 ))s (no finalizer, no gate left)"
else
  tap_fail "a gated pod deleted is gone" "$(kn get pod c-0 -o yaml 2>&1 | tail -n 30)"
fi
# Why a queued job has no live recovery (docs/kueue.md): one pod of a running group
# deleted keeps Kueue's finalizer while the rest of the group runs (Kueue waits for a
# replacement under another name), so its name could not be reused inside the attempt;
# it goes once the group has ended.
pod d-0 d training >/dev/null
pod d-1 d training >/dev/null
if wait_until 60 admitted d && wait_until 30 ungated d-0 && wait_until 30 ungated d-1; then
  for p in d-0 d-1; do
    kn patch pod "$p" --subresource status --type merge \
      -p '{"status":{"phase":"Running"}}' >/dev/null
  done
  kn delete pod d-1 --wait=false >/dev/null
  # PodGC marks the unscheduled terminating pod Failed; Kueue still holds it.
  failed_d1() { [ "$(kn get pod d-1 -o 'jsonpath={.status.phase}')" = Failed ]; }
  wait_until 60 failed_d1
  sleep 3
  check "a running group's deleted pod: still there, Failed, with Kueue's finalizer" \
    "$(kn get pod d-1 -o 'jsonpath={.status.phase} {.metadata.finalizers[*]}' 2>&1)" \
    "Failed kueue.x-k8s.io/managed"
  kn patch pod d-0 --subresource status --type merge \
    -p '{"status":{"phase":"Succeeded"}}' >/dev/null
  gone_d1() { [ -z "$(kn get pod d-1 -o name --ignore-not-found 2>/dev/null)" ]; }
  if wait_until 120 gone_d1; then tap_ok "once the group has ended, the deleted pod goes"
  else tap_fail "the deleted pod goes once the group ended" "$(kn get pod d-1 -o yaml 2>&1)"; fi
else tap_fail "group d admitted" "$(kn get "pods,$KWL" -o wide 2>&1)"; fi
# Elastic jobs in a queue (docs/kueue.md, "Elastic jobs in a queue"): what Kueue does
# with an admitted group whose size changes in place, the facts behind making every
# `spec.workers` change of a queued elastic job a group restart.
reserved() {
  k get clusterqueue training \
    -o 'jsonpath={.status.flavorsReservation[0].resources[?(@.name=="cpu")].total}'
}
reserved_is() { [ "$(reserved)" = "$1" ]; }
phase() {
  kn patch pod "$1" --subresource status --type merge -p "{\"status\":{\"phase\":\"$2\"}}" \
    >/dev/null
}
# excess_event POD: the message of Kueue's ExcessPodDeleted event on POD (so that a pod
# gone for another reason, or never made, does not pass for one Kueue deleted).
excess_event() {
  kn get events --field-selector "reason=ExcessPodDeleted,involvedObject.name=$1" \
    -o 'jsonpath={.items[0].message}'
}
wl_count() { kn get "$KWL" e -o 'jsonpath={.spec.podSets[*].count}'; }
wl_cond() { kn get "$KWL" e -o "jsonpath={.status.conditions[?(@.type==\"$1\")].status}"; }
pod e-0 e training >/dev/null
pod e-1 e training >/dev/null
if wait_until 60 admitted e && wait_until 30 ungated e-0 && wait_until 30 ungated e-1; then
  phase e-0 Running; phase e-1 Running
  wait_until 30 reserved_is 800m
  check "group e (2 x 400m) admitted and running: 800m CPU reserved" "$(reserved)" 800m
  # Grow in place: a third pod in the admitted group, its total count 3 (what a raised
  # spec.workers would make): Kueue deletes it as excess; the Workload stays at 2.
  pod e-2 e training 3 >/dev/null
  gone_e2() { [ -z "$(kn get pod e-2 -o name --ignore-not-found 2>/dev/null)" ]; }
  t0=$(date +%s)
  if wait_until 60 gone_e2; then
    dt=$(( $(date +%s) - t0 ))
    tap_ok "grow in place: a 3rd pod (total count 3) in admitted group e deleted by Kueue (${dt}s)"
  else
    tap_fail "a pod beyond an admitted group's count is deleted" \
      "$(kn get pod e-2 -o yaml 2>&1 | tail -n 30)"
  fi
  check "  event ExcessPodDeleted on it" "$(excess_event e-2)" "Excess pod deleted"
  check "  the Workload still counts 2 pods, 800m reserved" "$(wl_count) $(reserved)" "2 800m"
  # Shrink in place: one pod deleted, as the operator's scale-down deletes a dropped
  # worker (its trainer stops on SIGTERM, exit 75: Failed). The quota stays held.
  kn delete pod e-1 --wait=false >/dev/null
  failed_e1() { [ "$(kn get pod e-1 -o 'jsonpath={.status.phase}')" = Failed ]; }
  wait_until 60 failed_e1
  waiting() { [ "$(wl_cond WaitingForReplacementPods)" = True ]; }
  wait_until 30 waiting
  sleep 3
  got="$(kn get pod e-1 -o 'jsonpath={.status.phase}') $(wl_cond Admitted)"
  got="$got $(wl_cond WaitingForReplacementPods) $(reserved)"
  check "shrink by deletion: e-1 Failed; Workload e Admitted, WaitingForReplacementPods; 800m" \
    "$got" "Failed True True 800m"
  # Back to the admitted size: a replacement under its own name (live recovery's
  # `-r1`) joins the group and is ungated; Kueue lets the old object go.
  pod e-1-r1 e training >/dev/null
  gone_e1() { [ -z "$(kn get pod e-1 -o name --ignore-not-found 2>/dev/null)" ]; }
  if wait_until 30 ungated e-1-r1 && wait_until 60 gone_e1; then
    tap_ok "a replacement within the count (e-1-r1) is ungated in the admitted group; e-1 goes"
  else
    tap_fail "a replacement within the count joins" "$(kn get "pods,$KWL" -o wide 2>&1)"
  fi
  # What gives quota back while the group runs: a pod that Succeeded (Kueue's
  # reclaimablePods), and only that.
  phase e-1-r1 Running; phase e-1-r1 Succeeded
  if wait_until 30 reserved_is 400m; then
    tap_ok "a pod of running group e Succeeded: its 400m given back (reserved 400m)"
  else
    tap_fail "a Succeeded pod's quota given back" \
      "reserved $(reserved); $(kn get "$KWL" e -o 'jsonpath={.status.reclaimablePods}')"
  fi
  check "  reclaimablePods" \
    "$(kn get "$KWL" e -o 'jsonpath={.status.reclaimablePods[0].count}')" 1
  pod e-3 e training >/dev/null
  gone_e3() { [ -z "$(kn get pod e-3 -o name --ignore-not-found 2>/dev/null)" ]; }
  if wait_until 60 gone_e3 && [ "$(excess_event e-3)" = "Excess pod deleted" ]; then
    tap_ok "after it, a new pod in group e is excess too (a Succeeded pod counts): deleted"
  else tap_fail "a pod after a Succeeded one is excess" "$(kn get pods -o wide 2>&1)"; fi
  phase e-0 Succeeded
else tap_fail "group e admitted" "$(kn get "pods,$KWL" -o wide 2>&1)"; fi
# The operator itself (when built) scaling a queued elastic TrainingJob: each scale
# restarts the group (WorkersChanged) in a new pod group of the new count that Kueue
# admits anew. 2 -> 1 fits the quota and is admitted; 1 -> 3 (1.2 CPU of 1) stays gated:
# the job never runs more pods than Kueue admitted.
if [ ! -x build/bin/kubetrain-operator ]; then
  tap_skip "a queued elastic TrainingJob scaled" "build/bin/kubetrain-operator is not built"
else
  k apply -f crds/ >/dev/null &&
    k wait --for condition=Established crd/trainingjobs.kubetrain.dev --timeout 60s >/dev/null
  hp=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0))
print(s.getsockname()[1])')
  build/bin/kubetrain-operator --kubeconfig "$KUBECONFIG" --health-addr "127.0.0.1:$hp" \
    --metrics-addr 0 >"$KT_RUN/operator.log" 2>&1 &
  op_pid=$!
  kn apply -f - >/dev/null <<'EOF'
apiVersion: kubetrain.dev/v1alpha1
kind: TrainingJob
metadata:
  name: el
  labels: {kueue.x-k8s.io/queue-name: training}
spec:
  workers: 2
  elastic: {minWorkers: 1}
  template:
    spec:
      containers:
        - name: trainer
          resources: {requests: {cpu: 400m, memory: 64Mi}}
EOF
  # "GROUP/COUNT[,...]" of the job's pods not being deleted, and how many there are.
  el_groups() {
    kn get pods -l kubetrain.dev/job-name=el -o json | jq -r '[.items[] |
      select(.metadata.deletionTimestamp == null) |
      .metadata.labels["kueue.x-k8s.io/pod-group-name"] + "/" +
      .metadata.annotations["kueue.x-k8s.io/pod-group-total-count"]] |
      "\(length) \(unique | join(","))"'
  }
  uid=$(kn get tj el -o 'jsonpath={.metadata.uid}' | cut -c1-8)
  # el_at ATTEMPT WORKERS: WORKERS pods in group el-ATTEMPT-uid of count WORKERS, its
  # Workload admitted and every pod ungated.
  el_at() {
    [ "$(el_groups)" = "$2 el-$1-$uid/$2" ] && admitted "el-$1-$uid" || return 1
    local i
    for (( i = 0; i < $2; i++ )); do ungated "el-worker-$i" || return 1; done
  }
  if wait_until 60 el_at 0 2; then tap_ok "elastic job el (2 x 400m) admitted as group el-0-$uid"
  else tap_fail "elastic job el admitted" "$(el_groups; tail -n 20 "$KT_RUN/operator.log")"; fi
  k -n "$NS" scale tj/el --replicas 1 >/dev/null
  if wait_until 90 el_at 1 1; then
    tap_ok "kubectl scale 2 -> 1: a new group el-1-$uid of 1 pod, admitted"
  else
    tap_fail "scale down restarts in a new group" \
      "$(el_groups; kn get "pods,$KWL" 2>&1; tail -n 20 "$KT_RUN/operator.log")"
  fi
  restarting() {
    kn get tj el -o 'jsonpath={.status.conditions[?(@.type=="Restarting")].message}'
  }
  why="spec.workers is 1 (1 pods) in Kueue queue training, whose pod group el-0-$uid was"
  why="$why admitted for 2 pods: Kueue cannot resize a plain pod group"
  case "$(restarting)" in
    "$why"*)
      tap_ok "  condition Restarting says why" ;;
    *) tap_fail "  condition Restarting says why" "$(restarting)" ;;
  esac
  el0_done() { [ -z "$(kn get "$KWL" "el-0-$uid" -o name --ignore-not-found)" ] ||
               [ "$(kn get "$KWL" "el-0-$uid" \
                     -o 'jsonpath={.status.conditions[?(@.type=="Finished")].status}')" = True ]; }
  if wait_until 60 el0_done; then tap_ok "  the first group's Workload finished (quota released)"
  else tap_fail "  the first group's Workload finished" "$(kn get "$KWL" -o wide 2>&1)"; fi
  k -n "$NS" scale tj/el --replicas 3 >/dev/null
  three() { [ "$(el_groups)" = "3 el-2-$uid/3" ]; }
  if wait_until 90 three; then
    sleep 3
    got="$(admission_gate el-worker-0) $(admission_gate el-worker-1) $(admission_gate el-worker-2)"
    got="$got $(kn get "$KWL" "el-2-$uid" \
                  -o 'jsonpath={.status.conditions[?(@.type=="QuotaReserved")].status}')"
    check "kubectl scale 1 -> 3 (1.2 CPU of 1): new group el-2-$uid of 3, all gated, no quota" \
      "$got" "gated gated gated False"
  else
    tap_fail "scale up restarts in a new group" "$(el_groups; tail -n 20 "$KT_RUN/operator.log")"
  fi
  kn delete tj el --wait=false >/dev/null
  el_gone() { [ "$(el_groups)" = "0 " ]; }
  wait_until 120 el_gone
  kill "$op_pid" 2>/dev/null; wait "$op_pid" 2>/dev/null
fi
# The group's Workload is owned by its pods: the garbage collector deletes it after them.
reserving() { k get clusterqueue training -o 'jsonpath={.status.reservingWorkloads}'; }
none_reserving() { [ "$(reserving)" = 0 ]; }
wait_until 60 none_reserving
check "no Workload holds quota at the end" "$(reserving)" 0

tap_done
