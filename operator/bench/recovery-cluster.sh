#!/usr/bin/env bash
# make bench-recovery-cluster: live recovery against the group restart on the full local
# cluster (e2e/cluster/up.sh full, real pods, the chart's defaults): 4-worker C-trainer
# jobs, one worker pod deleted (and, as a second disruption, its trainer SIGKILLed) mid-
# epoch 25 steps after a checkpoint; live (recoveryTimeoutSeconds left at its default)
# and group restart (recoveryTimeoutSeconds: 0) alternate on the same spec and victim.
# Measured: disruption -> the first step after it and -> the step regained, steps trained
# twice, the replacement pod's start-up, the surviving pods' uids and restart counts, the
# job's restart counters, the final weights against an undisturbed run. The driver is
# operator/bench/recovery_cluster.py (its docstring and the JSON's definitions say what
# each figure is). Writes bench/results/recovery-cluster.json, or with BENCH_OUT=FILE
# elsewhere; BENCH_ROUNDS (default 4) rounds, BENCH_SEED (default: drawn and printed)
# picks the victims, BENCH_DISRUPTIONS (delete,kill) which disruptions run.
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
out=${BENCH_OUT:-bench/results/recovery-cluster.json}
dir=$PWD/build/bench/recovery-cluster
export KT_RUN=$dir/run
NS=kt-bench
BENCH_NAME=bench-recovery-cluster
mkdir -p "$dir" "$(dirname "$out")"
rm -f "$dir"/*.log

full_cluster_check
command -v ctr >/dev/null || die "ctr (containerd's client) is not installed"
full_cluster_up 0
kn apply -f examples/pvc.yaml >/dev/null || die "examples/pvc.yaml not applied"
setup=$(full_cluster_setup)
log "runs (the log of each: $dir/driver.log)"
python3 operator/bench/recovery_cluster.py "$out" --kubectl "$KT_K8S_BIN/kubectl" \
  --namespace "$NS" --containerd "$KT_CONTAINERD_ADDRESS" --rounds "${BENCH_ROUNDS:-4}" \
  ${BENCH_SEED:+--seed "$BENCH_SEED"} --disruptions "${BENCH_DISRUPTIONS:-delete,kill}" \
  --setup "$setup" --commit "$commit" 2> >(tee "$dir/driver.log" >&2) ||
  die "recovery_cluster.py failed ($dir/driver.log)"
log "wrote $out in $(( $(date +%s) - T0 )) s"
