#!/usr/bin/env bash
# run.sh: one end-to-end run on a fresh cluster: make it, load the images, run the
# scenario suite (e2e/suite.sh), tear the cluster down (also when the suite fails or is
# interrupted). Exit status: the suite's, or 1 when the cluster could not be made.
#
#   e2e/run.sh check  full|kind                  only the preconditions, with the reason
#   e2e/run.sh        full|kind OPERATOR_IMAGE TRAINER_IMAGE [TENSORFLOW_IMAGE]
#
# full: e2e/cluster/up.sh full in its own run directory (KT_RUN, default
#       build/e2e/suite/run), images imported with load-image.sh; root, Linux, cgroups v1.
# kind: `kind create cluster` from e2e/cluster/kind.yaml (cluster KT_KIND_NAME, default
#       kubetrain-e2e), `kind load docker-image`, hostPath PersistentVolumes on the node
#       for the checkpoint claim, `kind delete cluster` at the end. Needs kind, Docker
#       and kubectl on PATH. KT_KIND_IMAGE: the node image (kind's --image); when its
#       tag is v1.36 or later the config also turns on the Workload API as up.sh does
#       (kind's default node image is older and would refuse the gates, so the gang
#       scenario says SKIP there). `run.sh kind-config` prints the config used.
# The images must already be in the local Docker (make images; make image-tensorflow for
# TENSORFLOW_IMAGE, without which the suite's TensorFlow scenarios say SKIP).
# KT_SCENARIOS: the suite's scenarios to run, in order (default: all; "install" first).
# KT_E2E_KEEP_LOGS: non-empty keeps the elastic scenario's logs (its workers', the
# operator's, the kubelet's, the survivors' members files on the node) in
# build/e2e/elastic-logs when it passes too; a failure always keeps them.
# KT_KUEUE (full only): 1 runs Kueue on the cluster (e2e/cluster/kueue-up.sh, building it
# first when needed) for the suite's kueue scenario, 0 never; unset: when it is built.
set -uo pipefail # no -e: each step checks its status and says what failed
cd "$(dirname "$0")/.." || exit 1

die() { echo "e2e/run.sh: $*" >&2; exit 1; }
log() { echo "# $(date -u +%H:%M:%S) $*"; }

check() {
  case $1 in
    full)
      [ "$(uname -s)" = Linux ] || die "CLUSTER=full needs Linux"
      [ "$(id -u)" = 0 ] || die "CLUSTER=full needs root (containerd, kubelet, bridge); on other machines use CLUSTER=kind"
      local c
      for c in containerd runc ctr iptables ip gcc docker; do
        command -v "$c" >/dev/null || die "CLUSTER=full: $c not installed (make deps installs DEPS_APT; Docker builds the images)"
      done
      [ -x /usr/lib/cni/bridge ] && [ -x /usr/lib/cni/firewall ] ||
        die "CLUSTER=full: CNI plugins not installed (Debian package containernetworking-plugins)"
      ! ip link show "${KT_CNI_BRIDGE:-kt-cni0}" >/dev/null 2>&1 ||
        die "CLUSTER=full: bridge ${KT_CNI_BRIDGE:-kt-cni0} exists: another full-level cluster runs on this machine (e2e/cluster/down.sh stops it)"
      ;;
    kind)
      command -v kind >/dev/null ||
        die "CLUSTER=kind: kind not found on PATH. Install it (e.g. 'go install sigs.k8s.io/kind@latest', or a release binary) and run again; on a machine where kind cannot run, use CLUSTER=full"
      command -v docker >/dev/null && docker info >/dev/null 2>&1 ||
        die "CLUSTER=kind: Docker is not running (kind makes its nodes as Docker containers)"
      command -v kubectl >/dev/null || die "CLUSTER=kind: kubectl not found on PATH"
      ;;
    *) die "unknown cluster '$1': full or kind" ;;
  esac
}

# The kind cluster's config: e2e/cluster/kind.yaml, with the Workload API's gates and
# group version (e2e/cluster/versions.env, for the node image's release: v1beta1 from
# 1.37, v1alpha2 on 1.36) for a node image KT_KIND_IMAGE of a release that has them;
# KT_WORKLOAD_API=off leaves them out, as for up.sh. A subshell: K8S_VERSION is the
# image's here only.
kind_config() (
  minor=0
  [[ ${KT_KIND_IMAGE:-} =~ :v1\.([0-9]+)\. ]] && minor=${BASH_REMATCH[1]}
  K8S_VERSION=v1.$minor.0
  # shellcheck source=cluster/versions.env
  . e2e/cluster/versions.env
  cat e2e/cluster/kind.yaml
  [ "$minor" -ge "$K8S_WORKLOAD_MIN_MINOR" ] && [ "${KT_WORKLOAD_API:-on}" = on ] || return 0
  echo "# From e2e/run.sh for $KT_KIND_IMAGE: the Workload API, as e2e/cluster/up.sh has it."
  echo "featureGates:"
  for g in $K8S_WORKLOAD_GATES; do echo "  $g: true"; done
  echo "runtimeConfig:"
  echo "  $K8S_WORKLOAD_GROUP: \"true\""
)

if [ "${1:-}" = kind-config ]; then kind_config; exit 0; fi
[ $# -ge 2 ] || die "usage: run.sh check full|kind | run.sh kind-config | run.sh full|kind OPERATOR_IMAGE TRAINER_IMAGE [TENSORFLOW_IMAGE]"
if [ "$1" = check ]; then check "$2"; exit 0; fi
[ $# = 3 ] || [ $# = 4 ] || die "usage: run.sh full|kind OPERATOR_IMAGE TRAINER_IMAGE [TENSORFLOW_IMAGE]"
CLUSTER=$1 OP_IMAGE=$2 TR_IMAGE=$3 TF_IMAGE=${4:-}
check "$CLUSTER"
IMAGES=("$OP_IMAGE" "$TR_IMAGE")
[ -z "$TF_IMAGE" ] || IMAGES+=("$TF_IMAGE")
for img in "${IMAGES[@]}"; do
  docker image inspect "$img" >/dev/null 2>&1 || die "Docker has no image $img (make images, make image-tensorflow)"
done
export KT_OPERATOR_IMAGE=$OP_IMAGE KT_TRAINER_IMAGE=$TR_IMAGE KT_TF_IMAGE=$TF_IMAGE KT_PROVIDER=$CLUSTER
T0=$(date +%s)

if [ "$CLUSTER" = full ]; then
  export KT_RUN=${KT_RUN:-$PWD/build/e2e/suite/run}
  trap 'log "down"; bash e2e/cluster/down.sh >/dev/null 2>&1' EXIT
  bash e2e/cluster/down.sh >/dev/null 2>&1
  log "up.sh full ($KT_RUN)"
  bash e2e/cluster/up.sh full || die "up.sh full failed (logs in $KT_RUN/logs)"
  log "load-image.sh ${IMAGES[*]}"
  bash e2e/cluster/load-image.sh "${IMAGES[@]}" || die "load-image.sh failed"
  log "images loaded"
  case ${KT_KUEUE:-} in
    0) ;;
    1) kueue=1 ;;
    *) bash e2e/cluster/build-kueue.sh --if-built >/dev/null && kueue=1 ;;
  esac
  if [ -n "${kueue:-}" ]; then
    log "kueue-up.sh"
    bash e2e/cluster/kueue-up.sh || die "kueue-up.sh failed (log in $KT_RUN/logs/kueue.log)"
  fi
  set -a
  # shellcheck source=/dev/null
  . "$KT_RUN/env"
  set +a
else
  NAME=${KT_KIND_NAME:-kubetrain-e2e}
  RUN=$PWD/build/e2e/kind
  mkdir -p "$RUN"
  export KUBECONFIG=$RUN/kubeconfig
  trap 'log "kind delete cluster --name $NAME"; kind delete cluster --name "$NAME" --kubeconfig "$KUBECONFIG" >/dev/null 2>&1' EXIT
  kind delete cluster --name "$NAME" --kubeconfig "$KUBECONFIG" >/dev/null 2>&1
  kind_config >"$RUN/kind.yaml"
  image_flags=()
  [ -z "${KT_KIND_IMAGE:-}" ] || image_flags=(--image "$KT_KIND_IMAGE")
  log "kind create cluster --name $NAME --config $RUN/kind.yaml ${image_flags[*]}"
  kind create cluster --name "$NAME" --config "$RUN/kind.yaml" "${image_flags[@]}" \
       --kubeconfig "$KUBECONFIG" --wait 180s || die "kind create cluster failed"
  log "kind load docker-image ${IMAGES[*]}"
  kind load docker-image --name "$NAME" "${IMAGES[@]}" || die "kind load docker-image failed"
  # The checkpoint claim (examples/pvc.yaml) asks ReadWriteMany, which kind's default
  # provisioner (local-path) does not offer. On this one-node cluster hostPath volumes
  # in the default class serve it: a claim binds to a matching existing volume before
  # anything is provisioned. The trainers run as uid 65532, so the directories are
  # world-writable.
  node=$(kubectl get nodes -o 'jsonpath={.items[0].metadata.name}')
  class=$(kubectl get storageclass \
            -o 'jsonpath={.items[?(@.metadata.annotations.storageclass\.kubernetes\.io/is-default-class=="true")].metadata.name}')
  for i in 0 1 2 3; do
    docker exec "$node" sh -c "mkdir -p /var/local/kubetrain-e2e/pv-$i && chmod 1777 /var/local/kubetrain-e2e/pv-$i"
    kubectl apply -f - <<EOF || die "creating PersistentVolume kt-pv-$i failed"
apiVersion: v1
kind: PersistentVolume
metadata: {name: kt-pv-$i}
spec:
  capacity: {storage: 10Gi}
  accessModes: [ReadWriteOnce, ReadWriteMany]
  persistentVolumeReclaimPolicy: Retain
  storageClassName: ${class:-standard}
  hostPath: {path: /var/local/kubetrain-e2e/pv-$i, type: Directory}
  nodeAffinity:
    required:
      nodeSelectorTerms:
        - matchExpressions: [{key: kubernetes.io/hostname, operator: In, values: [$node]}]
EOF
  done
fi

log "cluster ready in $(( $(date +%s) - T0 )) s; running e2e/suite.sh ${KT_SCENARIOS:-}"
# shellcheck disable=SC2086 # KT_SCENARIOS is a list of scenario names
bash e2e/suite.sh ${KT_SCENARIOS:-}
rc=$?
log "e2e ($CLUSTER): suite exit $rc, $(( $(date +%s) - T0 )) s with the cluster's start"
exit $rc
