#!/usr/bin/env bash
# make bench-progress: what status.progress costs kubetrain-operator with 100 Running jobs
# whose chiefs serve /metrics: RSS and CPU with progress scraping on (the default
# --progress-interval 10) and off (0), alternating windows in one run on an api-level
# cluster (e2e/cluster/up.sh api). The chiefs are a mock (operator/bench/progress.py says
# how). Writes bench/results/progress.json, or with BENCH_OUT=FILE elsewhere; BENCH_JOBS,
# BENCH_WINDOW (seconds measured, 120), BENCH_WARMUP (30) and BENCH_ROUNDS (windows per
# mode, 2) change the load; BENCH_NOTE (what changed) and BENCH_BEFORE (the JSON of a run
# before the change, same session) are recorded in the JSON.
set -uo pipefail # no -e: each step checks its status and says what failed
cd "$(dirname "$0")/../.." || exit 1
OP=${KT_OPERATOR_BIN:-build/bin/kubetrain-operator}
out=${BENCH_OUT:-bench/results/progress.json}
dir=$PWD/build/bench/progress
export KT_RUN=$dir/run
mkdir -p "$dir" "$(dirname "$out")"
exec 9>"$dir/lock"
flock -n 9 || { echo "bench-progress: another run holds $dir/lock" >&2; exit 1; }
rm -f "$dir"/*.log
[ -x "$OP" ] || { echo "bench-progress: $OP is not built (make $OP)" >&2; exit 1; }
trap 'bash e2e/cluster/down.sh >/dev/null 2>&1' EXIT
bash e2e/cluster/down.sh >/dev/null 2>&1
bash e2e/cluster/up.sh api >"$dir/up.log" 2>&1 || { cat "$dir/up.log" >&2; exit 1; }
# shellcheck source=/dev/null # the cluster's variables, written by e2e/cluster/up.sh
. "$KT_RUN/env"
k() { "$KT_K8S_BIN/kubectl" --request-timeout 60s "$@"; }
k apply -f crds/ >/dev/null
# (kubectl wait fails outright on a CRD so new that it has no status.conditions yet.)
established() {
  [ "$(k get crd trainingjobs.kubetrain.dev \
        -o 'jsonpath={.status.conditions[?(@.type=="Established")].status}' 2>/dev/null)" = True ]
}
for _ in $(seq 120); do established && break; sleep 0.5; done
established || { echo "bench-progress: the TrainingJob CRD is not Established" >&2; exit 1; }
python3 operator/bench/progress.py "$KT_RUN" "$OP" "$out"
