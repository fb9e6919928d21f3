#!/usr/bin/env bash
# kwok-up.sh [NODES [PODS-PER-NODE]]
#
# Gives the api-level cluster that up.sh started (state in KT_RUN) simulated nodes, so
# that pods are scheduled and reported Running without a kubelet or containers: the
# operator's scale bench and test (operator/bench/scale.sh, operator/tests/integration/
# test-scale.sh) run thousands of pods this way on one machine. Started as host
# processes like the other components (pid in .run/pids, log in .run/logs, stopped by
# down.sh):
#   1. kube-scheduler (the api level has none, and kwok does not bind pods), leader
#      election off, client QPS 200 / burst 400 (.run/kwok/scheduler.yaml) so that binding
#      8,000 pods takes 40 s, not 160 s at the default 50;
#   2. kwok (KWOK_VERSION, built by build-kwok.sh) managing the nodes annotated
#      kwok.x-k8s.io/node=fake, with the stages of its module's kustomize/stage (read from
#      the Go module cache): node-initialize and node-heartbeat keep the nodes Ready;
#      pod-ready makes a bound Pending pod Running and Ready (with a pod IP), pod-delete
#      removes a pod being deleted. One change to pod-ready: it acts only on a pod without
#      a pod IP, i.e. once. A pod that a test or bench later writes back to Pending stays
#      so (kwok would otherwise make it Running again at once, which is not what a
#      kubelet does);
#   3. NODES (default 10) nodes kwok-node-<i>, each with room for PODS-PER-NODE (default
#      1000) pods and plenty of CPU and memory. No taint: this cluster has no real node
#      whose pods they must be kept apart from.
# KT_KWOK_GANG=on gives kube-scheduler the Workload API's feature gates (versions.env, as
# up.sh gives the full level's), so that it places PodGroups' pods as gangs (operator/tests/
# integration/test-gang.sh); off, the default, leaves them out, as the scale bench and test
# have always run (their pods' groups are then not enforced).
# Exit status 0 when every node is Ready. .run/kwok/env has KT_KWOK_NODES.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

nodes=${1:-10}
per_node=${2:-1000}
[ -f "$KT_RUN/env" ] || kt_die "no cluster in $KT_RUN (run e2e/cluster/up.sh api first)"
# shellcheck source=/dev/null
. "$KT_RUN/env"
k=("$KT_K8S_BIN/kubectl" --kubeconfig "$KUBECONFIG" --request-timeout 30s)
kwok=$("$KT_CLUSTER/build-kwok.sh") || kt_die "kwok unavailable (e2e/cluster/build-kwok.sh)"
sched=$("$KT_CLUSTER/build-k8s.sh" kube-scheduler) || kt_die "kube-scheduler unavailable"
stages=$KT_CACHE/go/pkg/mod/sigs.k8s.io/kwok@$KWOK_VERSION/kustomize/stage
if [ ! -d "$stages" ]; then
  kt_go_env
  (cd / && go mod download "sigs.k8s.io/kwok@$KWOK_VERSION") >&2 ||
    kt_die "downloading sigs.k8s.io/kwok@$KWOK_VERSION from the Go module proxy failed"
fi
for f in node/fast/node-initialize node/heartbeat/node-heartbeat pod/fast/pod-ready \
    pod/fast/pod-delete; do
  [ -f "$stages/$f.yaml" ] || kt_die "$stages/$f.yaml missing: is KWOK_VERSION a kwok release?"
done
kdir=$KT_RUN/kwok
mkdir -p "$kdir"
case ${KT_KWOK_GANG:-off} in
  on)  gates=$(for g in $K8S_WORKLOAD_GATES; do printf '%s=true,' "$g"; done)
       sched_gates=(--feature-gates "${gates%,}") ;;
  off) sched_gates=() ;;
  *)   kt_die "KT_KWOK_GANG must be on or off, got '$KT_KWOK_GANG'" ;;
esac

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}
# start NAME CMD...: as up.sh starts a component.
start() {
  local name=$1; shift
  setsid "$@" </dev/null >"$KT_RUN/logs/$name.log" 2>&1 &
  echo $! > "$KT_RUN/pids/$name.pid"
}

# The stages: kwok's own files, one line added to pod-ready's selector.
{
  for f in node/fast/node-initialize node/heartbeat/node-heartbeat pod/fast/pod-delete; do
    cat "$stages/$f.yaml"; echo "---"
  done
  awk '{print} /^    matchExpressions:$/ && !done {
         print "    - key: '"'"'.status.podIP'"'"'"; print "      operator: '"'"'DoesNotExist'"'"'"
         done = 1 }' "$stages/pod/fast/pod-ready.yaml"
} > "$kdir/stages.yaml"
grep -q "status.podIP'" "$kdir/stages.yaml" ||
  kt_die "could not add the pod IP condition to kwok's pod-ready stage ($stages)"

cat > "$kdir/scheduler.yaml" <<YAML
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection: {kubeconfig: "$KUBECONFIG", qps: 200, burst: 400}
leaderElection: {leaderElect: false}
YAML
sport=$(free_port)
kt_log "starting kube-scheduler and kwok $KWOK_VERSION"
start kube-scheduler "$sched" --config "$kdir/scheduler.yaml" \
  --authentication-kubeconfig "$KUBECONFIG" --authorization-kubeconfig "$KUBECONFIG" \
  --bind-address 127.0.0.1 --secure-port "$sport" --cert-dir "$kdir/scheduler-certs" \
  "${sched_gates[@]}"
start kwok "$kwok" --kubeconfig "$KUBECONFIG" --config "$kdir/stages.yaml" \
  --manage-nodes-with-annotation-selector kwok.x-k8s.io/node=fake \
  --server-address "127.0.0.1:$(free_port)" --cidr 10.0.0.0/16 --node-ip 10.1.0.1

for ((i = 0; i < nodes; i++)); do
  cat <<YAML
apiVersion: v1
kind: Node
metadata:
  name: kwok-node-$i
  annotations: {kwok.x-k8s.io/node: fake, node.alpha.kubernetes.io/ttl: "0"}
  labels: {kubernetes.io/hostname: kwok-node-$i, kubernetes.io/os: linux,
           kubernetes.io/arch: amd64, type: kwok}
status:
  allocatable: {cpu: "1000", memory: 4Ti, pods: "$per_node"}
  capacity: {cpu: "1000", memory: 4Ti, pods: "$per_node"}
---
YAML
done > "$kdir/nodes.yaml"
"${k[@]}" apply -f "$kdir/nodes.yaml" >/dev/null || kt_die "could not create the kwok nodes"
if ! "${k[@]}" wait --for condition=Ready --timeout 120s node -l type=kwok >/dev/null; then
  kt_die "the kwok nodes are not Ready after 120 s; see $KT_RUN/logs/kwok.log"
fi
echo "KT_KWOK_NODES=$nodes" > "$kdir/env"
kt_log "kwok: $nodes nodes Ready, $per_node pods each"
