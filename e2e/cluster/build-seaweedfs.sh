#!/usr/bin/env bash
# build-seaweedfs.sh [--if-built]
#
# Makes sure SeaweedFS's `weed` of version SEAWEEDFS_VERSION (versions.env) is built and
# prints its path: $KT_CACHE/seaweedfs/<version>/bin/weed, built once per machine (a lock
# serialises concurrent callers) from the Go module proxy, GOMAXPROCS=2, -p 2, static (CGO
# off), caches under $KT_CACHE/go. Not `go install weed@<version>`: SeaweedFS's go.mod has
# a replace directive, which go install refuses; the module is downloaded and built as the
# main module instead, so that its own go.mod and go.sum (and that directive) apply. Its
# S3 gateway is the S3-compatible server of the trainer's object-storage test
# (trainer/tests/test-remote-data.sh) and of make bench-data, both started by
# trainer/tests/remote/seaweedfs.sh.
#   --if-built  print the path when the binary is already built, else fail quietly
# $KT_WEED_BIN, when set, names a weed binary to use instead. Exit status 0 on success;
# 1 with the reason on stderr.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

out=$KT_CACHE/seaweedfs/$SEAWEEDFS_VERSION/bin
mode=${1:-build}

if [ -n "${KT_WEED_BIN:-}" ]; then
  [ -x "$KT_WEED_BIN" ] || kt_die "KT_WEED_BIN=$KT_WEED_BIN is not an executable"
  echo "$KT_WEED_BIN"; exit 0
fi
[ -x "$out/weed" ] && { echo "$out/weed"; exit 0; }
[ "$mode" = --if-built ] && exit 1
[ "$mode" = build ] || kt_die "unknown argument '$mode'; usage: build-seaweedfs.sh [--if-built]"

command -v go >/dev/null || kt_die "go is not installed; cannot build SeaweedFS $SEAWEEDFS_VERSION"
kt_build_lock "$out" "SeaweedFS $SEAWEEDFS_VERSION"
if [ ! -x "$out/weed" ]; then
  kt_go_env
  tmp=$(mktemp -d "$out/../tmp.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  kt_log "building SeaweedFS $SEAWEEDFS_VERSION (GOMAXPROCS=$GOMAXPROCS, -p 2; slow the first time)"
  start=$(date +%s)
  mod=github.com/seaweedfs/seaweedfs@$SEAWEEDFS_VERSION
  src=$(cd / && go mod download -json "$mod" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
  [ -n "$src" ] || kt_die "go mod download of $mod failed (is GOPROXY reachable?)"
  (cd "$src" && nice -n 15 go build -p 2 -trimpath -ldflags "-s -w" -o "$tmp/weed" ./weed) >&2 ||
    kt_die "go build of $mod/weed failed"
  mv -f "$tmp/weed" "$out/weed"
  kt_log "built SeaweedFS in $(( $(date +%s) - start ))s into $out"
fi
echo "$out/weed"
