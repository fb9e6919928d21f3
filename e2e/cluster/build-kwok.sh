#!/usr/bin/env bash
# build-kwok.sh [--if-built]
#
# Makes sure kwok (sigs.k8s.io/kwok, "Kubernetes WithOut Kubelet") of version KWOK_VERSION
# (versions.env) is built and prints its path: $KT_CACHE/kwok/<version>/bin/kwok, built
# once per machine (a lock serialises concurrent callers) with
# `go install sigs.k8s.io/kwok/cmd/kwok@<version>` from the Go module proxy, GOMAXPROCS=2,
# -p 2, static (CGO off), caches under $KT_CACHE/go. kwok plays the kubelet of fake nodes
# for the operator's scale bench and test (kwok-up.sh): it keeps the nodes Ready and moves
# the pods bound to them to Running, without containers.
#   --if-built  print the path when the binary is already built, else fail quietly
# $KT_KWOK_BIN, when set, names a kwok binary to use instead. Exit status 0 on success;
# 1 with the reason on stderr.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

out=$KT_CACHE/kwok/$KWOK_VERSION/bin
mode=${1:-build}

if [ -n "${KT_KWOK_BIN:-}" ]; then
  [ -x "$KT_KWOK_BIN" ] || kt_die "KT_KWOK_BIN=$KT_KWOK_BIN is not an executable"
  echo "$KT_KWOK_BIN"; exit 0
fi
[ -x "$out/kwok" ] && { echo "$out/kwok"; exit 0; }
[ "$mode" = --if-built ] && exit 1
[ "$mode" = build ] || kt_die "unknown argument '$mode'; usage: build-kwok.sh [--if-built]"

command -v go >/dev/null || kt_die "go is not installed; cannot build kwok $KWOK_VERSION"
kt_build_lock "$out" "kwok $KWOK_VERSION"
if [ ! -x "$out/kwok" ]; then
  kt_go_env
  tmp=$(mktemp -d "$out/../tmp.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  kt_log "building kwok $KWOK_VERSION (GOMAXPROCS=$GOMAXPROCS, -p 2; slow the first time)"
  start=$(date +%s)
  # go install of module@version: the module's own go.mod and go.sum, no wrapper module.
  (cd / && GOBIN=$tmp nice -n 10 go install -p 2 -trimpath -ldflags "-s -w" \
     "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION") >&2 ||
    kt_die "go install of sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION failed (is GOPROXY reachable?)"
  mv -f "$tmp/kwok" "$out/kwok"
  kt_log "built kwok in $(( $(date +%s) - start ))s into $out"
fi
echo "$out/kwok"
