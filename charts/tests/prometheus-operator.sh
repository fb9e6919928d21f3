#!/usr/bin/env bash
# prometheus-operator.sh crds|operator
#
# prometheus-operator $PO_VERSION (the Go module github.com/prometheus-operator/
# prometheus-operator), for charts/tests/test-chart.sh, which checks the chart's
# PodMonitor and ServiceMonitor against it. Nothing of it is copied into the repo.
#   crds      downloads the module from the Go module proxy into the module cache
#             $KT_CACHE/go/pkg/mod (once per machine) and prints the directory of its
#             CRDs (example/prometheus-operator-crd, one monitoring.coreos.com_*.yaml each).
#   operator  prints the path of its operator binary (cmd/operator), built once per machine
#             into $KT_CACHE/prometheus-operator/$PO_VERSION/bin; $KT_PROMETHEUS_OPERATOR,
#             when set, is used instead.
# The build follows charts/build-helm.sh and e2e/cluster/build-k8s.sh: Go caches under
# $KT_CACHE/go, GOMAXPROCS=2, -p 2, CGO off, a lock against concurrent builders. The module
# replaces two of its own nested modules by directories its module zip does not hold, so it
# is built as the dependency of a throwaway wrapper module (which ignores those replaces and
# takes the nested modules' releases of the same version). Exit status 0 on success; 3 when
# go is not installed and the cache does not hold what was asked; 1 with the reason on
# stderr for any other failure.
set -euo pipefail
PO_VERSION=${PO_VERSION:-v0.85.0}
MOD=github.com/prometheus-operator/prometheus-operator
# kt_log, kt_die, kt_go_env, kt_build_lock; KT_CACHE
. "$(dirname "$0")/../../e2e/cluster/lib.sh"

go_env() {
  command -v go >/dev/null || { kt_log "go is not installed; cannot fetch prometheus-operator $PO_VERSION"; exit 3; }
  kt_go_env
}

case "${1:-}" in
crds)
  dir=$KT_CACHE/go/pkg/mod/$MOD@$PO_VERSION
  if [ ! -d "$dir/example/prometheus-operator-crd" ]; then
    go_env
    (cd / && go mod download "$MOD@$PO_VERSION") >&2 ||
      kt_die "downloading $MOD@$PO_VERSION from the Go module proxy failed (is GOPROXY reachable?)"
  fi
  [ -f "$dir/example/prometheus-operator-crd/monitoring.coreos.com_podmonitors.yaml" ] ||
    kt_die "$dir/example/prometheus-operator-crd has no monitoring.coreos.com_podmonitors.yaml"
  echo "$dir/example/prometheus-operator-crd"
  ;;
operator)
  if [ -n "${KT_PROMETHEUS_OPERATOR:-}" ]; then
    [ -x "$KT_PROMETHEUS_OPERATOR" ] || kt_die "KT_PROMETHEUS_OPERATOR=$KT_PROMETHEUS_OPERATOR is not an executable"
    echo "$KT_PROMETHEUS_OPERATOR"
    exit 0
  fi
  out=$KT_CACHE/prometheus-operator/$PO_VERSION/bin
  if [ -x "$out/operator" ]; then echo "$out/operator"; exit 0; fi
  go_env
  kt_build_lock "$out" "prometheus-operator $PO_VERSION"
  if [ ! -x "$out/operator" ]; then
    tmp=$(mktemp -d "$out/../tmp.XXXXXX")
    trap 'rm -rf "$tmp"' EXIT
    kt_log "building prometheus-operator $PO_VERSION (GOMAXPROCS=$GOMAXPROCS, -p 2; slow the first time)"
    start=$(date +%s)
    printf 'module ktbuild/prometheus-operator\n\ngo 1.24\n' >"$tmp/go.mod"
    (cd "$tmp" && go get "$MOD/cmd/operator@$PO_VERSION") >&2 ||
      kt_die "fetching $MOD/cmd/operator@$PO_VERSION and its dependencies failed"
    info=$GOMODCACHE/cache/download/$MOD/@v/$PO_VERSION.info
    date=$(sed -n 's/.*"Time":"\([^"]*\)".*/\1/p' "$info" 2>/dev/null || true)
    v=github.com/prometheus/common/version
    ld="-s -w -X $v.Version=${PO_VERSION#v} -X $v.Branch=$PO_VERSION -X $v.BuildDate=$date"
    (cd "$tmp" && go build -p 2 -trimpath -ldflags "$ld" -o "$tmp/operator" "$MOD/cmd/operator") >&2 ||
      kt_die "go build of prometheus-operator $PO_VERSION failed"
    "$tmp/operator" --version >/dev/null 2>&1 || kt_die "the built prometheus-operator does not run"
    mv -f "$tmp/operator" "$out/operator"
    kt_log "built prometheus-operator $PO_VERSION in $(( $(date +%s) - start ))s into $out"
  fi
  echo "$out/operator"
  ;;
*)
  kt_die "usage: prometheus-operator.sh crds|operator"
  ;;
esac
