#!/usr/bin/env bash
# build-coredns.sh
#
# Makes sure CoreDNS $COREDNS_VERSION (versions.env) is built and prints its path:
# $KT_CACHE/coredns/<version>-<plugins>/bin/coredns, built once per machine from the Go
# module proxy through the wrapper module corednsbuild/ (CoreDNS's coremain with the
# plugins the cluster's Corefile and trainer/tests/test-dnsprobe.sh use; <plugins> is a
# digest of main.go, so that a binary of another plugin set is not taken), GOMAXPROCS=2,
# -p 2, static (CGO off), caches under $KT_CACHE/go. $KT_COREDNS, when set, names a binary
# to use instead. Exit status 0 on success; 1 with the reason on stderr.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

if [ -n "${KT_COREDNS:-}" ]; then
  [ -x "$KT_COREDNS" ] || kt_die "KT_COREDNS=$KT_COREDNS is not an executable"
  echo "$KT_COREDNS"; exit 0
fi
plugins=$(sha256sum "$KT_CLUSTER/corednsbuild/main.go" | cut -c1-8)
out=$KT_CACHE/coredns/$COREDNS_VERSION-$plugins/bin
[ -x "$out/coredns" ] && { echo "$out/coredns"; exit 0; }

command -v go >/dev/null || kt_die "go is not installed; cannot build CoreDNS $COREDNS_VERSION"
grep -Eq "^[[:space:]]*(require )?github.com/coredns/coredns $COREDNS_VERSION( |$)" \
    "$KT_CLUSTER/corednsbuild/go.mod" ||
  kt_die "corednsbuild/go.mod does not require CoreDNS $COREDNS_VERSION (see its header)"
kt_build_lock "$out" "CoreDNS $COREDNS_VERSION"
if [ ! -x "$out/coredns" ]; then
  kt_go_env
  tmp=$(mktemp -d "$out/../tmp.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  kt_log "building CoreDNS $COREDNS_VERSION (GOMAXPROCS=$GOMAXPROCS, -p 2)"
  start=$(date +%s)
  (cd "$KT_CLUSTER/corednsbuild" &&
     go build -p 2 -trimpath -ldflags "-s -w" -o "$tmp/coredns" .) >&2 ||
    kt_die "go build of CoreDNS $COREDNS_VERSION failed"
  mv -f "$tmp/coredns" "$out/coredns"
  kt_log "built CoreDNS in $(( $(date +%s) - start ))s into $out"
fi
echo "$out/coredns"
