#!/usr/bin/env bash
# scratch-image.sh OUT.tar NAME:TAG FILE=/PATH... [-- ENTRYPOINT ARG...]
#
# Writes OUT.tar, an image in the `docker save` layout (manifest.json, the config and
# one layer) holding only the given files, for `docker load` or `ctr images import`;
# no Docker daemon and no registry needed. Each FILE is copied to /PATH (mode kept,
# owner root). The entrypoint defaults to the first /PATH. The layer is reproducible
# (fixed mtime, sorted names), so the same files give the same image ID.
# Used for the cluster's pause and CoreDNS images (e2e/cluster/up.sh full).
set -euo pipefail
[ $# -ge 3 ] || { echo "usage: scratch-image.sh OUT.tar NAME:TAG FILE=/PATH... [-- ENTRYPOINT ARG...]" >&2; exit 2; }
out=$1 ref=$2; shift 2
files=() entry=()
while [ $# -gt 0 ]; do
  [ "$1" = -- ] && { shift; entry=("$@"); break; }
  case $1 in *=/*) files+=("$1") ;; *) echo "scratch-image.sh: '$1' is not FILE=/PATH" >&2; exit 2 ;; esac
  shift
done
[ ${#entry[@]} -gt 0 ] || entry=("${files[0]#*=}")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/root"
for f in "${files[@]}"; do
  src=${f%%=*} dst=${f#*=}
  [ -f "$src" ] || { echo "scratch-image.sh: no file $src" >&2; exit 1; }
  mkdir -p "$tmp/root$(dirname "$dst")"
  cp -p "$src" "$tmp/root$dst"
done
tar -C "$tmp/root" --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner \
  -cf "$tmp/layer.tar" .
diff_id=$(sha256sum "$tmp/layer.tar" | cut -d' ' -f1)
json_str() { local s=${1//\\/\\\\}; s=${s//\"/\\\"}; printf '"%s"' "$s"; }
ep=$(for a in "${entry[@]}"; do json_str "$a"; echo; done | paste -sd, -)
printf '{"architecture":"%s","os":"linux","created":"1970-01-01T00:00:00Z","config":{"Entrypoint":[%s],"WorkingDir":"/"},"rootfs":{"type":"layers","diff_ids":["sha256:%s"]}}' \
  "$(dpkg --print-architecture 2>/dev/null || echo amd64)" "$ep" "$diff_id" > "$tmp/config.json"
cfg=$(sha256sum "$tmp/config.json" | cut -d' ' -f1)
mkdir -p "$tmp/img/$diff_id"
mv "$tmp/layer.tar" "$tmp/img/$diff_id/layer.tar"
mv "$tmp/config.json" "$tmp/img/$cfg.json"
printf '[{"Config":"%s.json","RepoTags":[%s],"Layers":["%s/layer.tar"]}]' \
  "$cfg" "$(json_str "$ref")" "$diff_id" > "$tmp/img/manifest.json"
mkdir -p "$(dirname "$out")"
tar -C "$tmp/img" --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -cf "$out.tmp" .
mv "$out.tmp" "$out"
