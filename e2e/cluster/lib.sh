# Shared helpers for e2e/cluster/*.sh. Source it; it sets:
#   KT_ROOT     the repository root
#   KT_CLUSTER  this directory
#   KT_CACHE    machine-wide cache (default ~/.cache/kubetrain)
#   KT_RUN      state of the running cluster (e2e/cluster/.run, ignored by git)
#   K8S_VERSION from versions.env
# and the Go environment that keeps module and build caches under $KT_CACHE/go.

KT_CLUSTER=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
KT_ROOT=$(cd "$KT_CLUSTER/../.." && pwd)
KT_CACHE=${KT_CACHE:-$HOME/.cache/kubetrain}
KT_RUN=${KT_RUN:-$KT_CLUSTER/.run}
# shellcheck source=versions.env
. "$KT_CLUSTER/versions.env"

# The Kubernetes binaries every cluster level needs, and those only "full" needs.
K8S_API_BINS="kube-apiserver kube-controller-manager kubectl"
K8S_FULL_BINS="kube-scheduler kubelet"

kt_log() { printf '%s %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
kt_die() { kt_log "error: $*"; exit 1; }

kt_go_env() {
  export GOPATH="$KT_CACHE/go"
  export GOMODCACHE="$KT_CACHE/go/pkg/mod"
  export GOCACHE="$KT_CACHE/go/cache"
  export GOMAXPROCS=${GOMAXPROCS:-2}
  export GOFLAGS="-buildvcs=false -mod=mod"
  export CGO_ENABLED=${CGO_ENABLED:-0}
  export GOTOOLCHAIN=local
}

# kt_k8s_bindir: prints the directory that holds the Kubernetes binaries to use: the
# envtest directory in $KUBEBUILDER_ASSETS when it holds all of $K8S_API_BINS, otherwise
# the build cache for $K8S_VERSION (which may not be built yet).
kt_k8s_bindir() {
  local b ok=1
  if [ -n "${KUBEBUILDER_ASSETS:-}" ]; then
    for b in $K8S_API_BINS; do [ -x "$KUBEBUILDER_ASSETS/$b" ] || ok=0; done
    if [ $ok = 1 ]; then echo "$KUBEBUILDER_ASSETS"; return; fi
  fi
  echo "$KT_CACHE/k8s/$K8S_VERSION/bin"
}

# kt_have_bins DIR NAME...: true when DIR holds every named executable.
kt_have_bins() {
  local d=$1 b; shift
  for b in "$@"; do [ -x "$d/$b" ] || return 1; done
}
