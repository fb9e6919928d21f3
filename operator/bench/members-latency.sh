#!/usr/bin/env bash
# make bench-members-latency: how long a pod annotation takes to reach the pod's
# downwardAPI file, on the full local cluster (e2e/cluster/up.sh full, a real kubelet).
# Elastic jobs (docs/design.md, "Elastic jobs") tell every pod the job's members through
# the annotation kubetrain.dev/members, projected as KUBETRAIN_MEMBERS_FILE; the trainer
# watches that file. This measures the delay the design depends on: BENCH_PODS pods (4)
# of the pause image, each with the annotation projected; BENCH_ROUNDS rounds (10) in which
# every pod's annotation is patched back to back and each pod's file (read on the host,
# in the kubelet's volume directory) is polled every 5 ms until it holds the new value.
# The driver is operator/bench/members_latency.py (its definitions are in the JSON).
# Writes bench/results/members-latency.json, or with BENCH_OUT=FILE elsewhere.
# Holds /tmp/kt-full-cluster.lock from bring-up to teardown. Needs root; no image beyond
# the cluster's own pause image.
set -uo pipefail # no -e: each step checks its status and says what failed
cd "$(dirname "$0")/../.." || exit 1
out=${BENCH_OUT:-bench/results/members-latency.json}
dir=$PWD/build/bench/members-latency
export KT_RUN=$dir/run
mkdir -p "$dir" "$(dirname "$out")"
log() { printf '%s %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
die() { log "bench-members-latency: $*"; exit 1; }
[ "$(id -u)" = 0 ] || die "needs root (the full-level cluster)"
exec 9>/tmp/kt-full-cluster.lock
log "waiting for /tmp/kt-full-cluster.lock"
flock 9
trap 'log "down"; bash e2e/cluster/down.sh >/dev/null 2>&1' EXIT
bash e2e/cluster/down.sh >/dev/null 2>&1
log "up.sh full"
bash e2e/cluster/up.sh full >"$dir/up.log" 2>&1 || die "up.sh full failed ($dir/up.log)"
# shellcheck source=/dev/null # the cluster's variables, written by e2e/cluster/up.sh
. "$KT_RUN/env"
export KUBECONFIG KT_K8S_BIN
commit="$(git log -1 --format='%h %cs')"
[ -z "$(git status --porcelain --untracked-files=no)" ] || commit+=" + changes"
python3 operator/bench/members_latency.py "$KT_RUN" "$out" "$commit"
