#!/usr/bin/env bash
# build-helm.sh: makes sure helm $HELM_VERSION exists and prints its path.
#
# helm comes from, in order: $KT_HELM when set (any helm v3.8+ or v4 binary); the machine
# cache $KT_CACHE/helm/$HELM_VERSION/bin/helm, when already built; else a build of
# helm.sh/helm/v4/cmd/helm at $HELM_VERSION from the Go module proxy into that cache, once
# per machine (a lock serialises concurrent callers). The build follows e2e/cluster's
# conventions: Go caches under $KT_CACHE/go, GOMAXPROCS=2, -p 2, CGO off, and the version
# variables set by ldflags as helm's own Makefile sets them, so `helm version` reports
# the release. Exit status 0 on success; 1 with the reason on stderr.
set -euo pipefail
HELM_VERSION=${HELM_VERSION:-v4.3.1}
# kt_log, kt_die, kt_go_env, kt_build_lock; KT_CACHE
. "$(dirname "$0")/../e2e/cluster/lib.sh"

if [ -n "${KT_HELM:-}" ]; then
  [ -x "$KT_HELM" ] || kt_die "KT_HELM=$KT_HELM is not an executable"
  echo "$KT_HELM"
  exit 0
fi

out=$KT_CACHE/helm/$HELM_VERSION/bin
if [ -x "$out/helm" ]; then echo "$out/helm"; exit 0; fi

command -v go >/dev/null || kt_die "go is not installed; cannot build helm $HELM_VERSION"
kt_build_lock "$out" "helm $HELM_VERSION"
if [ ! -x "$out/helm" ]; then
  kt_go_env
  major=${HELM_VERSION%%.*}
  pkg=helm.sh/helm/$major
  ld="-s -w -X $pkg/internal/version.version=$HELM_VERSION"
  ld="$ld -X $pkg/internal/version.gitTreeState=clean"
  tmp=$(mktemp -d "$out/../tmp.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  kt_log "building helm $HELM_VERSION (GOMAXPROCS=$GOMAXPROCS, -p 2; slow the first time)"
  start=$(date +%s)
  GOBIN=$tmp go install -p 2 -trimpath -ldflags "$ld" "$pkg/cmd/helm@$HELM_VERSION" >&2 ||
    kt_die "go install of helm $HELM_VERSION failed"
  "$tmp/helm" version --short >/dev/null || kt_die "the built helm does not run"
  mv -f "$tmp/helm" "$out/helm"
  kt_log "built helm $HELM_VERSION in $(( $(date +%s) - start ))s into $out"
fi
echo "$out/helm"
