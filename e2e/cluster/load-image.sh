#!/usr/bin/env bash
# load-image.sh IMAGE... | --tar FILE...
#
# Imports images into the containerd of the running full-level cluster (namespace
# k8s.io, where the kubelet looks), the way kind's `load docker-image` does: each IMAGE
# is saved from the local Docker daemon; each --tar FILE is an image archive as
# `docker save` writes it. A name without a registry becomes docker.io/<name>, which is
# also how the kubelet resolves it, so a pod may use `image: kubetrain/trainer:0.1.0`
# with imagePullPolicy IfNotPresent or Never. Exit status 0 when every image is present
# in containerd afterwards.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

[ $# -gt 0 ] || kt_die "usage: load-image.sh IMAGE... | --tar FILE..."
[ -f "$KT_RUN/env" ] || kt_die "no cluster in $KT_RUN (run up.sh full)"
# shellcheck source=/dev/null
. "$KT_RUN/env"
[ -n "${KT_CONTAINERD_ADDRESS:-}" ] || kt_die "the cluster in $KT_RUN is not a full-level one"
ctr=(ctr --address "$KT_CONTAINERD_ADDRESS" -n k8s.io)

while [ $# -gt 0 ]; do
  if [ "$1" = --tar ]; then
    [ $# -ge 2 ] && [ -f "$2" ] || kt_die "--tar needs an image archive"
    "${ctr[@]}" images import "$2" >&2 || kt_die "importing $2 failed"
    shift 2
  else
    img=$1; shift
    docker image inspect "$img" >/dev/null 2>&1 || kt_die "Docker has no image $img"
    docker save "$img" | "${ctr[@]}" images import - >&2 || kt_die "importing $img failed"
    case $img in
      */*/*|*.*/*|localhost/*) ref=$img ;;
      */*) ref=docker.io/$img ;;
      *) ref=docker.io/library/$img ;;
    esac
    case $ref in *:*) ;; *) ref=$ref:latest ;; esac
    have=$("${ctr[@]}" images ls -q)
    grep -qxF "$ref" <<<"$have" || kt_die "$ref not in containerd after import (it has: $have)"
    echo "$ref"
  fi
done
