#!/usr/bin/env bash
# The chart's Kueue option (kueue.enabled; docs/kueue.md, "With the Helm chart") on an
# api-level cluster (e2e/cluster/up.sh api) running the real Kueue (kueue-up.sh, built by
# build-kueue.sh): `helm install` with the option creates the ResourceFlavor, the
# ClusterQueue and a LocalQueue in each listed namespace, Kueue reports the ClusterQueue
# and the LocalQueues Active, and the queue admits a group: with the quota set to 1 CPU, a
# group of 2 x 400m pods labelled as the operator labels a TrainingJob's pods is admitted
# whole (both ungated), a second one stays gated. When build/bin/kubetrain-operator is
# built, the operator itself, with --default-queue training, runs a labelled TrainingJob
# through the chart's queue (its Workload admitted, its pods ungated) and an unlabelled
# one too: its pods get the queue and a group, wait gated while the first holds the
# quota, and are admitted once it is deleted. `helm upgrade` with the option off
# deletes the queues. The api level has no scheduler and no kubelet: admission (the gate
# removed) is what is checked, not pods running. Own run directory
# (build/e2e/test-chart-kueue). Skips when etcd is missing, without root, or when Kueue
# is not built and KT_KUEUE_BUILD=0.
set -uo pipefail # no -e: a failed check is reported (not ok) and the test goes on
cd "$(dirname "$0")/../.." || exit 1
. e2e/lib/tap.sh

CHART=charts/kubetrain
work=$PWD/build/e2e/test-chart-kueue
export KT_RUN=$work/run
rm -rf "$work"
mkdir -p "$work"
op_pid=""
cleanup() {
  [ -n "$op_pid" ] && kill "$op_pid" 2>/dev/null && wait "$op_pid" 2>/dev/null
  bash e2e/cluster/down.sh >/dev/null 2>&1
}
trap cleanup EXIT

if ! bash -c '. e2e/cluster/lib.sh && kt_etcd' >/dev/null; then
  tap_skip "the chart's Kueue queues" "etcd not installed (Debian package etcd-server)"
  tap_done; exit
fi
if [ "$(id -u)" != 0 ]; then
  tap_skip "the chart's Kueue queues" "needs root (kueue-up.sh)"; tap_done; exit
fi
if [ "${KT_KUEUE_BUILD:-1}" = 0 ] && ! bash e2e/cluster/build-kueue.sh --if-built >/dev/null; then
  tap_skip "the chart's Kueue queues" "Kueue is not built and KT_KUEUE_BUILD=0"
  tap_done; exit
fi
for b in "e2e/cluster/build-k8s.sh api" e2e/cluster/build-kueue.sh; do
  # shellcheck disable=SC2086 # $b is a script and its argument
  if ! err=$(bash $b 2>&1 >/dev/null); then
    tap_fail "building with $b" "$(tail -n 5 <<<"$err")"; tap_done; exit
  fi
done
if ! helm=$(bash charts/build-helm.sh 2>"$work/helm-build.log"); then
  tap_fail "building helm (charts/build-helm.sh)" "$(tail -n 5 "$work/helm-build.log")"
  tap_done; exit
fi

bash e2e/cluster/down.sh >/dev/null 2>&1
if ! out=$(bash e2e/cluster/up.sh api 2>&1); then
  tap_fail "up.sh api" "$out"; tap_done; exit
fi
if ! out=$(bash e2e/cluster/kueue-up.sh 2>&1); then
  tap_fail "kueue-up.sh" "$out"; tap_done; exit
fi
# shellcheck source=/dev/null # the cluster's variables, written by e2e/cluster/up.sh
. "$KT_RUN/env"
export KUBECONFIG
k() { "$KT_K8S_BIN/kubectl" --request-timeout 30s "$@"; }
KWL=workloads.kueue.x-k8s.io
# wait_until SECONDS CMD...: true when CMD succeeds within SECONDS.
wait_until() {
  local end=$(( $(date +%s) + $1 )); shift
  until "$@" >/dev/null 2>&1; do [ "$(date +%s)" -lt "$end" ] || return 1; sleep 0.5; done
}
check() { if [ "$2" = "$3" ]; then tap_ok "$1"; else tap_fail "$1" "expected [$3], got [$2]"; fi; }

for ns in kubetrain-system team-a team-b; do k create namespace "$ns" >/dev/null; done
# 1 CPU: one group of 2 x 400m fits, two do not.
if out=$("$helm" install kubetrain "$CHART" -n kubetrain-system --set kueue.enabled=true \
           --set kueue.clusterQueue.quota.cpu=1 \
           --set 'kueue.localQueue.namespaces={team-a,team-b}' 2>&1); then
  tap_ok "helm install with kueue.enabled=true (Kueue's CRDs installed)"
else
  tap_fail "helm install with kueue.enabled=true" "$out"; tap_done; exit
fi
inst=app.kubernetes.io/instance=kubetrain
check "the release's Kueue objects" \
  "$(k get resourceflavors,clusterqueues,localqueues -A -l "$inst" \
       -o 'jsonpath={range .items[*]}{.kind}/{.metadata.namespace}/{.metadata.name} {end}')" \
  "ResourceFlavor//kubetrain-default ClusterQueue//kubetrain $(
    )LocalQueue/team-a/training LocalQueue/team-b/training "
active() {
  [ "$(k get "$@" -o 'jsonpath={.status.conditions[?(@.type=="Active")].status}')" = True ]
}
if wait_until 60 active clusterqueue kubetrain &&
   wait_until 30 active -n team-a localqueue training &&
   wait_until 30 active -n team-b localqueue training; then
  tap_ok "Kueue reports the ClusterQueue and both LocalQueues Active"
else
  tap_fail "the ClusterQueue and LocalQueues Active" \
    "$(k get clusterqueue kubetrain -o yaml 2>&1 | tail -n 20; k get localqueues -A -o wide 2>&1)"
fi

# pod NAME GROUP: a pod of a two-pod group in team-a, labelled as the operator labels them.
pod() {
  k -n team-a apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Pod
metadata:
  name: $1
  labels: {kueue.x-k8s.io/queue-name: training, kueue.x-k8s.io/pod-group-name: $2}
  annotations: {kueue.x-k8s.io/pod-group-total-count: "2",
                kueue.x-k8s.io/retriable-in-group: "false"}
spec:
  restartPolicy: Never
  containers:
  - name: trainer
    image: kubetrain/trainer:test
    resources: {requests: {cpu: 400m, memory: 64Mi}}
EOF
}
gated() {
  [[ " $(k -n "$1" get pod "$2" -o 'jsonpath={.spec.schedulingGates[*].name}') " == \
     *" kueue.x-k8s.io/admission "* ]]
}
ungated() { ! gated "$@"; }
admitted() {
  [ "$(k -n "$1" get "$KWL" "$2" \
        -o 'jsonpath={.status.conditions[?(@.type=="Admitted")].status}')" = True ]
}
pod a-0 a; pod a-1 a
if wait_until 60 admitted team-a a && wait_until 30 ungated team-a a-0 &&
   wait_until 30 ungated team-a a-1; then
  tap_ok "the chart's queue admits group a (2 x 400m of 1 CPU) whole: both pods ungated"
else
  tap_fail "the chart's queue admits group a" \
    "$(k -n team-a get "pods,$KWL" -o wide 2>&1; tail -n 20 "$KT_RUN/logs/kueue.log")"
fi
pod b-0 b; pod b-1 b
sleep 3
if gated team-a b-0 && gated team-a b-1; then
  tap_ok "group b does not fit beside a: both pods still gated after 3s"
else tap_fail "group b still gated" "$(k -n team-a get pods -o wide 2>&1)"; fi
check "the ClusterQueue counts one admitted Workload" \
  "$(k get clusterqueue kubetrain -o 'jsonpath={.status.admittedWorkloads}')" 1
k -n team-a delete pods --all --wait=false >/dev/null

# The operator itself, labelling a TrainingJob's pods for the chart's LocalQueue.
if [ ! -x build/bin/kubetrain-operator ]; then
  tap_skip "a TrainingJob through the chart's queue" "build/bin/kubetrain-operator is not built"
else
  none() { [ "$(k get clusterqueue kubetrain -o 'jsonpath={.status.reservingWorkloads}')" = 0 ]; }
  wait_until 120 none
  hp=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0))
print(s.getsockname()[1])')
  build/bin/kubetrain-operator --kubeconfig "$KUBECONFIG" --health-addr "127.0.0.1:$hp" \
    --metrics-addr 0 --default-queue training >"$work/operator.log" 2>&1 &
  op_pid=$!
  k -n team-b apply -f - >/dev/null <<'EOF'
apiVersion: kubetrain.dev/v1alpha1
kind: TrainingJob
metadata:
  name: queued
  labels: {kueue.x-k8s.io/queue-name: training}
spec:
  workers: 2
  template:
    spec:
      containers:
        - name: trainer
          resources: {requests: {cpu: 400m, memory: 64Mi}}
EOF
  wl() { k -n team-b get "$KWL" -o name 2>/dev/null | grep -q .; }
  if wait_until 60 wl && name=$(k -n team-b get "$KWL" -o 'jsonpath={.items[0].metadata.name}') &&
     wait_until 60 admitted team-b "$name" && wait_until 30 ungated team-b queued-worker-0 &&
     wait_until 30 ungated team-b queued-worker-1; then
    tap_ok "TrainingJob queued (2 x 400m) admitted through the chart's LocalQueue as $(
      )Workload $name, both pods ungated"
  else
    tap_fail "TrainingJob queued admitted through the chart's LocalQueue" \
      "$(k -n team-b get "pods,$KWL" -o wide 2>&1; tail -n 20 "$work/operator.log")"
  fi
  # No label: --default-queue puts it in LocalQueue training, as one group; it waits
  # while "queued" holds the quota (2 x 400m of 1 CPU).
  k -n team-b apply -f - >/dev/null <<'EOF'
apiVersion: kubetrain.dev/v1alpha1
kind: TrainingJob
metadata:
  name: defaulted
spec:
  workers: 2
  template:
    spec:
      containers:
        - name: trainer
          resources: {requests: {cpu: 400m, memory: 64Mi}}
EOF
  podsof() { k -n team-b get pods -l kubetrain.dev/job-name=defaulted -o json 2>/dev/null; }
  # "training <group>", when both pods exist and are in one group of queue training.
  grouping() {
    podsof | jq -r 'select((.items | length) == 2) | [.items[] |
      (.metadata.labels["kueue.x-k8s.io/queue-name"] // "-") + " " +
      (.metadata.labels["kueue.x-k8s.io/pod-group-name"] // "-")] | unique | join(",")'
  }
  grouped() { [[ "$(grouping)" == "training defaulted-0-"* ]]; }
  if wait_until 30 grouped; then
    tap_ok "an unlabelled TrainingJob under --default-queue: both pods in queue training, $(
      )one group ($(grouping | cut -d' ' -f2))"
  else tap_fail "--default-queue puts an unlabelled job's pods in one group" "$(grouping)"; fi
  sleep 3
  if gated team-b defaulted-worker-0 && gated team-b defaulted-worker-1; then
    tap_ok "  and both stay gated while the labelled job holds the quota"
  else tap_fail "defaulted gated" "$(k -n team-b get pods -o wide 2>&1)"; fi
  k -n team-b delete tj queued --wait=false >/dev/null
  admitted_d() {
    admitted team-b "$(grouping | cut -d' ' -f2)" && ungated team-b defaulted-worker-0 &&
      ungated team-b defaulted-worker-1
  }
  if wait_until 120 admitted_d; then
    tap_ok "  admitted (both ungated) once the labelled job was deleted"
  else
    tap_fail "defaulted admitted after queued was deleted" "$(k -n team-b get "pods,$KWL" 2>&1)"
  fi
  k -n team-b delete tj defaulted --wait=false >/dev/null
  kill "$op_pid" 2>/dev/null; wait "$op_pid" 2>/dev/null; op_pid=
fi

# Off again: the queues go with the upgrade.
if out=$("$helm" upgrade kubetrain "$CHART" -n kubetrain-system \
           --set kueue.enabled=false 2>&1); then
  # Kueue's finalizers hold the ClusterQueue and ResourceFlavor until no Workload uses them.
  kq_left() { k get resourceflavors,clusterqueues,localqueues -A -l "$inst" -o name 2>&1; }
  kq_gone() { [ -z "$(kq_left)" ]; }
  t0=$(date +%s)
  if wait_until 120 kq_gone; then
    tap_ok "helm upgrade with kueue.enabled=false deletes the release's Kueue objects $(
      )(gone in $(( $(date +%s) - t0 ))s)"
  else tap_fail "helm upgrade with kueue.enabled=false deletes the Kueue objects" "$(kq_left)"; fi
else tap_fail "helm upgrade with kueue.enabled=false" "$out"; fi
tap_done
