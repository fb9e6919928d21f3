# shellcheck shell=bash disable=SC2034 # the variables are for the scripts that source it
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
case $KT_RUN in /*) ;; *) KT_RUN=$PWD/$KT_RUN ;; esac
# shellcheck source=versions.env
. "$KT_CLUSTER/versions.env"

# The Kubernetes binaries every cluster level needs, and those only "full" needs.
K8S_API_BINS="kube-apiserver kube-controller-manager kubectl"
K8S_FULL_BINS="kube-scheduler kubelet kube-proxy"

kt_log() { printf '%s %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
kt_die() { kt_log "error: $*"; exit 1; }

kt_go_env() {
  export GOPATH="$KT_CACHE/go"
  export GOMODCACHE="$KT_CACHE/go/pkg/mod"
  export GOCACHE="$KT_CACHE/go/cache"
  export GOMAXPROCS=${GOMAXPROCS:-2}
  # No DWARF compiled: every build strips it at link anyway (-s -w), and not making it
  # took 15 % less CPU (CoreDNS from empty caches, two pairs: 249 and 260 s against 226
  # and 208 s; the binaries of one size, their build IDs apart), which a fresh machine's CI pays for
  # every Go program (docs/testing.md, "CI").
  export GOFLAGS="-buildvcs=false -gcflags=all=-dwarf=false"
  export CGO_ENABLED=${CGO_ENABLED:-0}
  export GOTOOLCHAIN=local
}

# kt_build_lock DIR WHAT: creates the cache directory DIR and takes the lock of its
# parent (DIR/../build.lock) on fd 9, held until the script exits; while another process
# holds it (building WHAT), says so on stderr and waits.
kt_build_lock() {
  mkdir -p "$1"
  exec 9>"$1/../build.lock"
  if ! flock -n 9; then
    kt_log "another process is building $2; waiting"
    flock 9
  fi
}

# kt_shm_room: true when /dev/shm is a tmpfs with more than 512 MiB free, where up.sh
# keeps etcd's data.
kt_shm_room() {
  [ "$(stat -f -c %T /dev/shm 2>/dev/null)" = tmpfs ] &&
    [ "$(df -Pk /dev/shm | awk 'NR == 2 {print $4}')" -gt 524288 ]
}

# kt_k8s_bin NAME: prints the path of the Kubernetes binary NAME to use: the one in
# $KUBEBUILDER_ASSETS when set and present there (the envtest convention; envtest ships
# kube-apiserver, kubectl and etcd, not kube-controller-manager), otherwise the one in the
# build cache for $K8S_VERSION, which may not be built yet.
kt_k8s_bin() {
  if [ -n "${KUBEBUILDER_ASSETS:-}" ] && [ -x "$KUBEBUILDER_ASSETS/$1" ]; then
    echo "$KUBEBUILDER_ASSETS/$1"
  else
    echo "$KT_CACHE/k8s/$K8S_VERSION/bin/$1"
  fi
}

# kt_exited PID: whether PID is gone or a zombie (it runs nothing any more). The state is
# the field after the command name's closing parenthesis (a name may hold spaces).
kt_exited() {
  local st
  st=$(cat "/proc/$1/stat" 2>/dev/null) || return 0
  st=${st##*) }
  [ "${st%% *}" = Z ]
}

# kt_etcd: prints the etcd to use ($KT_ETCD, $KUBEBUILDER_ASSETS/etcd, or the one on PATH,
# from Debian's etcd-server); fails when there is none.
kt_etcd() {
  local e=${KT_ETCD:-}
  [ -z "$e" ] && [ -n "${KUBEBUILDER_ASSETS:-}" ] && [ -x "$KUBEBUILDER_ASSETS/etcd" ] &&
    e=$KUBEBUILDER_ASSETS/etcd
  [ -z "$e" ] && e=$(command -v etcd)
  [ -n "$e" ] && [ -x "$e" ] && echo "$e"
}
