#!/usr/bin/env bash
# Makes sure a Docker daemon answers: installs Debian's docker.io when the engine is
# missing and starts dockerd by hand when no init system runs it (these machines have
# none). Exits 0 when `docker info` works, 1 with the reason otherwise.
set -uo pipefail # no -e: each failure exits with its own message
docker info >/dev/null 2>&1 && exit 0
if ! command -v dockerd >/dev/null; then
  bash "$(dirname "$0")/../.ci/deps.sh" docker.io debootstrap || exit 1
fi
docker info >/dev/null 2>&1 && exit 0
log=${KT_CACHE:-$HOME/.cache/kubetrain}/dockerd.log
mkdir -p "$(dirname "$log")"
# The daemon outlives this script: it must not keep the descriptors the caller had open
# beyond stdin, stdout and stderr, such as a benchmark's or a test's lock file (flock),
# which it would then hold until it stops.
(
  for fd in /proc/self/fd/*; do
    fd=${fd##*/}
    [ "$fd" -gt 2 ] && eval "exec $fd>&-"
  done
  exec nohup dockerd >"$log" 2>&1 </dev/null
) &
for _ in $(seq 60); do
  docker info >/dev/null 2>&1 && exit 0
  sleep 0.5
done
echo "dockerd did not start; its log ($log) ends:" >&2
tail -5 "$log" >&2
exit 1
