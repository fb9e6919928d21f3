#!/usr/bin/env bash
# build-k8s.sh [api|full|BINARY...]
#
# Makes sure the Kubernetes binaries exist and prints their paths, one per line. Each one
# comes from, in order:
#   1. $KUBEBUILDER_ASSETS, when set and the binary is there (the envtest convention);
#   2. the machine cache $KT_CACHE/k8s/$K8S_VERSION/bin, when already built;
#   3. a build from the Go module proxy through the wrapper module k8sbuild/$K8S_VERSION/,
#      once per machine (a lock serialises concurrent callers), into that cache.
# "api" (the default) means kube-apiserver, kube-controller-manager and kubectl; "full"
# adds kube-scheduler, kubelet and kube-proxy. Go caches live under $KT_CACHE/go; the build runs with
# GOMAXPROCS=2 and -p 2. Exit status 0 on success; 1 when a binary is missing and cannot
# be built (the reason is on stderr).
set -euo pipefail
. "$(dirname "$0")/lib.sh"

case "${1:-api}" in
  api)  want=$K8S_API_BINS ;;
  full) want="$K8S_API_BINS $K8S_FULL_BINS" ;;
  *)    want="$*" ;;
esac

out=$KT_CACHE/k8s/$K8S_VERSION/bin
need=
for b in $want; do [ -x "$(kt_k8s_bin "$b")" ] || need="$need $b"; done
if [ -z "$need" ]; then
  for b in $want; do kt_k8s_bin "$b"; done
  exit 0
fi

command -v go >/dev/null || kt_die "go is not installed; cannot build Kubernetes $K8S_VERSION"
grep -Eq "^[[:space:]]*(require )?k8s.io/kubernetes $K8S_VERSION( |$)" \
    "$KT_CLUSTER/k8sbuild/$K8S_VERSION/go.mod" 2>/dev/null ||
  kt_die "no wrapper module k8sbuild/$K8S_VERSION/ for Kubernetes $K8S_VERSION; run K8S_VERSION=$K8S_VERSION e2e/cluster/gen-k8sbuild.sh"

kt_build_lock "$out" "Kubernetes $K8S_VERSION"
missing=
for b in $need; do [ -x "$out/$b" ] || missing="$missing $b"; done
if [ -n "$missing" ]; then
  kt_go_env
  minor=${K8S_VERSION#v1.}; minor=${minor%%.*}
  # The release's own date (from the module proxy's record) keeps the build reproducible;
  # on a cold cache the record comes with the module's download.
  (cd "$KT_CLUSTER/k8sbuild/$K8S_VERSION" && go mod download k8s.io/kubernetes) >&2 ||
    kt_die "downloading k8s.io/kubernetes $K8S_VERSION from the Go module proxy failed (is GOPROXY reachable?)"
  info=$GOMODCACHE/cache/download/k8s.io/kubernetes/@v/$K8S_VERSION.info
  now=$(sed -n 's/.*"Time":"\([^"]*\)".*/\1/p' "$info" 2>/dev/null || true)
  [ -n "$now" ] || now=$(date -u +%Y-%m-%dT%H:%M:%SZ)
  ld="-s -w"
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ld="$ld -X $p.gitVersion=$K8S_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$minor"
    ld="$ld -X $p.gitTreeState=clean -X $p.buildDate=$now"
  done
  pkgs=
  for b in $missing; do pkgs="$pkgs k8s.io/kubernetes/cmd/$b"; done
  tmp=$(mktemp -d "$out/../tmp.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  kt_log "building Kubernetes $K8S_VERSION:$missing (GOMAXPROCS=$GOMAXPROCS, -p 2; slow the first time)"
  start=$(date +%s)
  # shellcheck disable=SC2086 # pkgs is a list, one word a package
  (cd "$KT_CLUSTER/k8sbuild/$K8S_VERSION" && go build -p 2 -trimpath -ldflags "$ld" -o "$tmp/" $pkgs) >&2 ||
    kt_die "go build of Kubernetes $K8S_VERSION failed"
  for b in $missing; do mv -f "$tmp/$b" "$out/$b"; done
  kt_log "built$missing in $(( $(date +%s) - start ))s into $out"
fi
for b in $want; do kt_k8s_bin "$b"; done
