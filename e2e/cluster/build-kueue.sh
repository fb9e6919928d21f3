#!/usr/bin/env bash
# build-kueue.sh [--if-built]
#
# Makes sure the Kueue manager of version KUEUE_VERSION (versions.env) is built and prints
# its path: $KT_CACHE/kueue/<version>/bin/kueue, built once per machine (a lock serialises
# concurrent callers) with `go install sigs.k8s.io/kueue/cmd/kueue@<version>` from the Go
# module proxy, GOMAXPROCS=2, -p 2, static (CGO off), caches under $KT_CACHE/go. Kueue's
# CRDs are not copied anywhere: kueue-up.sh applies them from the module's source in the
# module cache, $KT_CACHE/go/pkg/mod/sigs.k8s.io/kueue@<version>/config/components/crd/bases,
# which this script downloads too (`crds` prints that directory).
#   --if-built  print the path when the binary is already built, else fail quietly
#   crds        print the CRD directory (downloading the module when needed)
# $KT_KUEUE_BIN, when set, names a manager binary to use instead. Exit status 0 on
# success; 1 with the reason on stderr.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

out=$KT_CACHE/kueue/$KUEUE_VERSION/bin
src=$KT_CACHE/go/pkg/mod/sigs.k8s.io/kueue@$KUEUE_VERSION
mode=${1:-build}

if [ "$mode" = crds ]; then
  if [ ! -d "$src/config/components/crd/bases" ]; then
    command -v go >/dev/null || kt_die "go is not installed; cannot download Kueue $KUEUE_VERSION"
    kt_go_env
    go mod download "sigs.k8s.io/kueue@$KUEUE_VERSION" >&2 ||
      kt_die "downloading sigs.k8s.io/kueue@$KUEUE_VERSION from the Go module proxy failed"
  fi
  [ -d "$src/config/components/crd/bases" ] ||
    kt_die "$src has no config/components/crd/bases:" \
      "is KUEUE_VERSION in versions.env a Kueue release?"
  echo "$src/config/components/crd/bases"; exit 0
fi
if [ -n "${KT_KUEUE_BIN:-}" ]; then
  [ -x "$KT_KUEUE_BIN" ] || kt_die "KT_KUEUE_BIN=$KT_KUEUE_BIN is not an executable"
  echo "$KT_KUEUE_BIN"; exit 0
fi
[ -x "$out/kueue" ] && { echo "$out/kueue"; exit 0; }
[ "$mode" = --if-built ] && exit 1
[ "$mode" = build ] || kt_die "unknown argument '$mode'; usage: build-kueue.sh [--if-built|crds]"

command -v go >/dev/null || kt_die "go is not installed; cannot build Kueue $KUEUE_VERSION"
kt_build_lock "$out" "Kueue $KUEUE_VERSION"
if [ ! -x "$out/kueue" ]; then
  kt_go_env
  (cd / && go mod download "sigs.k8s.io/kueue@$KUEUE_VERSION") >&2 ||
    kt_die "downloading sigs.k8s.io/kueue@$KUEUE_VERSION from the Go module proxy failed" \
      "(is GOPROXY reachable?)"
  # The release's date from the proxy's record, so that the build is reproducible.
  info=$GOMODCACHE/cache/download/sigs.k8s.io/kueue/@v/$KUEUE_VERSION.info
  date=$(sed -n 's/.*"Time":"\([^"]*\)".*/\1/p' "$info" 2>/dev/null || true)
  v=sigs.k8s.io/kueue/pkg/version
  ld="-s -w -X $v.GitVersion=$KUEUE_VERSION -X $v.GitCommit=$KUEUE_VERSION"
  ld="$ld -X $v.BuildDate=${date:-unknown}"
  tmp=$(mktemp -d "$out/../tmp.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  kt_log "building Kueue $KUEUE_VERSION (GOMAXPROCS=$GOMAXPROCS, -p 2; slow the first time)"
  start=$(date +%s)
  # go install of module@version: the module's own go.mod and go.sum, no wrapper module.
  (cd / && GOBIN=$tmp nice -n 10 go install -p 2 -trimpath -ldflags "$ld" \
     "sigs.k8s.io/kueue/cmd/kueue@$KUEUE_VERSION") >&2 ||
    kt_die "go install of sigs.k8s.io/kueue/cmd/kueue@$KUEUE_VERSION failed"
  mv -f "$tmp/kueue" "$out/kueue"
  kt_log "built Kueue in $(( $(date +%s) - start ))s into $out"
fi
echo "$out/kueue"
