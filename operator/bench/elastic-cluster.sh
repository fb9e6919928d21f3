#!/usr/bin/env bash
# make bench-elastic-cluster: an elastic job against today's behaviour when a worker's room
# is taken away, on the full local cluster (e2e/cluster/up.sh full, real pods, the chart's
# defaults): 4-worker C-trainer jobs, each worker asking for one slot of an extended
# resource the node advertises; a worker's pod deleted mid-epoch while a filler pod holds
# its room for BENCH_HOLD seconds (default 60). Elastic (spec.elastic.minWorkers 3) and
# today's (no spec.elastic) alternate on the same spec and victim. Measured: the loss ->
# the replacement seen unschedulable -> the first step after, steps trained twice, the
# survivors' restarts, idle worker-seconds, the room's return -> 4 workers training, the
# wall time. The driver is operator/bench/elastic_cluster.py (its docstring and the
# JSON's definitions say what each figure is). Writes bench/results/elastic-cluster.json,
# or with BENCH_OUT=FILE elsewhere; BENCH_ROUNDS (default 2) rounds, BENCH_SEED (default:
# drawn and printed) picks the victims, or BENCH_VICTIMS (1,3: worker indices, a round
# each) names them; BENCH_MODES (elastic,today) which modes run. Every worker pod's log
# goes to $dir/logs.
#
# Holds /tmp/kt-full-cluster.lock from bring-up to teardown (one full-level cluster per
# machine; operator/bench/full-cluster.sh). Needs root and the images in the local Docker
# (make images): KT_OPERATOR_IMAGE, KT_TRAINER_IMAGE (default
# kubetrain/{operator,trainer}:VERSION).
set -uo pipefail # no -e: each step checks its status and says what failed
cd "$(dirname "$0")/../.." || exit 1
. e2e/cluster/lib.sh
. operator/bench/full-cluster.sh
full_cluster_vars
out=${BENCH_OUT:-bench/results/elastic-cluster.json}
dir=$PWD/build/bench/elastic-cluster
export KT_RUN=$dir/run
NS=kt-bench
BENCH_NAME=bench-elastic-cluster
mkdir -p "$dir" "$(dirname "$out")"
rm -rf "$dir"/*.log "$dir/logs"

full_cluster_check
full_cluster_up 0
kn apply -f examples/pvc.yaml >/dev/null || die "examples/pvc.yaml not applied"
setup=$(full_cluster_setup)
log "runs (the log of each: $dir/driver.log)"
python3 operator/bench/elastic_cluster.py "$out" --kubectl "$KT_K8S_BIN/kubectl" \
  --namespace "$NS" --rounds "${BENCH_ROUNDS:-2}" --hold "${BENCH_HOLD:-60}" \
  ${BENCH_SEED:+--seed "$BENCH_SEED"} ${BENCH_VICTIMS:+--victims "$BENCH_VICTIMS"} \
  ${BENCH_MODES:+--modes "$BENCH_MODES"} --filler-image "${KT_PAUSE_IMAGE:-kubetrain/pause:3.10}" \
  --setup "$setup" --commit "$commit" --logs "$dir/logs" 2> >(tee "$dir/driver.log" >&2) ||
  die "elastic_cluster.py failed ($dir/driver.log)"
log "wrote $out in $(( $(date +%s) - T0 )) s"
