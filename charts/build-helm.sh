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
KT_CACHE=${KT_CACHE:-$HOME/.cache/kubetrain}

log() { printf '%s %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
die() { log "error: $*"; exit 1; }

if [ -n "${KT_HELM:-}" ]; then
  [ -x "$KT_HELM" ] || die "KT_HELM=$KT_HELM is not an executable"
  echo "$KT_HELM"
  exit 0
fi

out=$KT_CACHE/helm/$HELM_VERSION/bin
if [ -x "$out/helm" ]; then echo "$out/helm"; exit 0; fi

command -v go >/dev/null || die "go is not installed; cannot build helm $HELM_VERSION"
mkdir -p "$out"
exec 9>"$out/../build.lock"
if ! flock -n 9; then
  log "another process is building helm $HELM_VERSION; waiting"
  flock 9
fi
if [ ! -x "$out/helm" ]; then
  export GOPATH=$KT_CACHE/go GOMODCACHE=$KT_CACHE/go/pkg/mod GOCACHE=$KT_CACHE/go/cache
  export GOMAXPROCS=${GOMAXPROCS:-2} GOFLAGS=-buildvcs=false CGO_ENABLED=0 GOTOOLCHAIN=local
  major=${HELM_VERSION%%.*}
  pkg=helm.sh/helm/$major
  ld="-s -w -X $pkg/internal/version.version=$HELM_VERSION -X $pkg/internal/version.gitTreeState=clean"
  tmp=$(mktemp -d "$out/../tmp.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  log "building helm $HELM_VERSION (GOMAXPROCS=$GOMAXPROCS, -p 2; slow the first time)"
  start=$(date +%s)
  GOBIN=$tmp go install -p 2 -trimpath -ldflags "$ld" "$pkg/cmd/helm@$HELM_VERSION" >&2 ||
    die "go install of helm $HELM_VERSION failed"
  "$tmp/helm" version --short >/dev/null || die "the built helm does not run"
  mv -f "$tmp/helm" "$out/helm"
  log "built helm $HELM_VERSION in $(( $(date +%s) - start ))s into $out"
fi
echo "$out/helm"
