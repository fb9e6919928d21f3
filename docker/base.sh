#!/usr/bin/env bash
# Makes the local base image (default kubetrain/base:bookworm) from Debian's packages:
# debootstrap --variant=minbase bookworm, then `docker import`. For machines with no
# container registry; elsewhere pass any bookworm base as BASE to the Dockerfiles.
# The root filesystem tarball is cached in $KT_CACHE/base so a rebuilt Docker still
# imports it in seconds. Idempotent: an existing image is kept. BASE_TARBALL_ONLY=1 makes
# the tarball alone (no Docker needed), for trainer/tests/test-gpu-device.sh's chroot.
set -euo pipefail
tag=${1:-kubetrain/base:bookworm}
cache=${KT_CACHE:-$HOME/.cache/kubetrain}/base
only=${BASE_TARBALL_ONLY:-0}
if [ "$only" != 1 ] && docker image inspect "$tag" >/dev/null 2>&1; then exit 0; fi
mkdir -p "$cache"
tarball=$cache/bookworm-minbase.tar
if [ ! -s "$tarball" ]; then
  mirror=$(sed -n 's/^URIs: *//p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -1)
  root=$(mktemp -d)
  trap 'rm -rf "$root"' EXIT
  echo "base: debootstrap bookworm into $root"
  debootstrap --variant=minbase bookworm "$root" ${mirror:+"$mirror"} \
    >"$cache/debootstrap.log" 2>&1 || {
    tail -20 "$cache/debootstrap.log"
    echo "base: debootstrap failed (log: $cache/debootstrap.log)" >&2
    exit 1
  }
  # Keep the image small: no apt lists, docs or caches.
  rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin "$root"/usr/share/doc/* \
         "$root"/usr/share/man/* "$root"/usr/share/locale/*
  tar -C "$root" --numeric-owner -cf "$tarball.tmp" .
  mv "$tarball.tmp" "$tarball"
fi
[ "$only" != 1 ] || exit 0
docker import "$tarball" "$tag" >/dev/null
echo "base: imported $tag"
