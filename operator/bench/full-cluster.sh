# shellcheck shell=bash
# The full local cluster for a benchmark, sourced by the benchmarks that run real pods
# (gang-kueue.sh, recovery-cluster.sh): full_cluster_up takes /tmp/kt-full-cluster.lock
# (one full-level cluster per machine), brings up e2e/cluster/up.sh full in $KT_RUN with
# the operator and trainer images loaded, optionally Kueue, installs the chart and makes
# the benchmark's namespace; the EXIT trap it sets tears the cluster down.
#
# The caller is at the repository root, has sourced e2e/cluster/lib.sh, called
# full_cluster_vars (or set OP_IMAGE and TR_IMAGE itself) and set:
#   BENCH_NAME  for messages (bench-gang-kueue)
#   dir         the benchmark's build directory, for the logs of each step
#   NS          the namespace of the benchmark's jobs
#   KT_RUN      (exported) where the cluster's state goes
# Afterwards: KUBECONFIG and KT_K8S_BIN (the cluster's env), T0 (its start, epoch seconds),
# k and kn (kubectl, kn in $NS).

log() { printf '%s %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
die() { log "$BENCH_NAME: $*"; exit 1; }
k() { "$KT_K8S_BIN/kubectl" --request-timeout 30s "$@"; }
kn() { k -n "$NS" "$@"; }

# full_cluster_vars: VERSION; commit, the commit that runs, read now (one made during
# the run is not what ran), "+ changes" when tracked files differ from it; OP_IMAGE and
# TR_IMAGE from KT_OPERATOR_IMAGE and KT_TRAINER_IMAGE (default
# kubetrain/{operator,trainer}:VERSION).
full_cluster_vars() {
  VERSION=$(cat VERSION)
  commit="$(git log -1 --format='%h %cs')"
  [ -z "$(git status --porcelain --untracked-files=no)" ] || commit+=" + changes"
  OP_IMAGE=${KT_OPERATOR_IMAGE:-kubetrain/operator:$VERSION}
  TR_IMAGE=${KT_TRAINER_IMAGE:-kubetrain/trainer:$VERSION}
}

# full_cluster_check: dies unless this machine can run the benchmark (root, both images
# in Docker, helm); sets helm.
full_cluster_check() {
  [ "$(id -u)" = 0 ] || die "needs root (the full-level cluster)"
  local img
  for img in "$OP_IMAGE" "$TR_IMAGE"; do
    docker image inspect "$img" >/dev/null 2>&1 || die "Docker has no image $img (make images)"
  done
  helm=$(bash charts/build-helm.sh) || die "helm unavailable (charts/build-helm.sh)"
}

# full_cluster_up KUEUE [HELM_ARG...]: the cluster, with Kueue when KUEUE is 1, the chart
# installed as release kt in kubetrain-system with the two images and HELM_ARGs, and $NS
# made. Dies naming the step's log on a failure.
full_cluster_up() {
  local kueue=$1; shift
  : "${dir:?the benchmark sets dir}" "${NS:?the benchmark sets NS}"
  exec 9>/tmp/kt-full-cluster.lock
  log "waiting for /tmp/kt-full-cluster.lock"
  flock 9
  trap 'log "down"; bash e2e/cluster/down.sh >/dev/null 2>&1' EXIT
  T0=$(date +%s)
  bash e2e/cluster/down.sh >/dev/null 2>&1
  log "up.sh full"
  bash e2e/cluster/up.sh full >"$dir/up.log" 2>&1 || die "up.sh full failed ($dir/up.log)"
  bash e2e/cluster/load-image.sh "$OP_IMAGE" "$TR_IMAGE" >"$dir/load.log" 2>&1 ||
    die "load-image.sh failed ($dir/load.log)"
  if [ "$kueue" = 1 ]; then
    bash e2e/cluster/build-kueue.sh >"$dir/kueue-build.log" 2>&1 ||
      die "build-kueue.sh failed ($dir/kueue-build.log)"
    log "kueue-up.sh"
    bash e2e/cluster/kueue-up.sh >"$dir/kueue.log" 2>&1 ||
      die "kueue-up.sh failed ($dir/kueue.log)"
  fi
  # shellcheck source=/dev/null # the cluster's variables, written by e2e/cluster/up.sh
  . "$KT_RUN/env"
  export KUBECONFIG
  k create namespace "$NS" >/dev/null || die "cannot create namespace $NS"
  log "helm install${*:+ ($*)}"
  "$helm" install kt charts/kubetrain -n kubetrain-system --create-namespace \
    --set image.repository="${OP_IMAGE%:*}" --set image.tag="${OP_IMAGE##*:}" \
    --set trainerImage.repository="${TR_IMAGE%:*}" --set trainerImage.tag="${TR_IMAGE##*:}" \
    "$@" --wait --timeout 180s >"$dir/helm.log" 2>&1 || die "helm install failed ($dir/helm.log)"
  for _ in $(seq 60); do kn get serviceaccount default >/dev/null 2>&1 && break; sleep 0.5; done
  log "cluster ready in $(( $(date +%s) - T0 )) s"
}

# image_id IMAGE: IMAGE@<the first 12 hex digits of its Docker image id>, for the JSON.
image_id() { echo "$1@$(docker image inspect -f '{{.Id}}' "$1" | cut -c8-19)"; }

# full_cluster_setup: the JSON object of what ran, for a driver's --setup: the API
# server's version, both images and the cluster's bring-up seconds (since T0).
full_cluster_setup() {
  jq -n --arg k8s "$(k version -o json 2>/dev/null | jq -r .serverVersion.gitVersion)" \
    --arg op "$(image_id "$OP_IMAGE")" --arg tr "$(image_id "$TR_IMAGE")" \
    --argjson up "$(( $(date +%s) - T0 ))" \
    '{kubernetes: $k8s, operator_image: $op, trainer_image: $tr, cluster_up_seconds: $up}'
}
