#!/usr/bin/env bash
# make bench-kueue-paths: what Kueue's admission costs a group of pods by itself, and
# whether a Workload made by the client (Kueue's "prebuilt workload") would start the
# group sooner than the plain pod group the operator uses (docs/kueue.md, "Why this
# path"). No operator, no trainer: operator/bench/kueue-paths.py creates groups of two
# `sleep` pods straight through the API, three ways (plain, Kueue pod group, prebuilt
# Workload + pods), cycling, and times the first create -> both pods bound. On the full
# local cluster with Kueue (operator/bench/full-cluster.sh; the chart's kueue.enabled
# queues). Writes bench/results/kueue-paths.json (date, machine, every run, medians, the
# API server's latency per Kueue webhook), or BENCH_OUT=FILE; BENCH_RUNS (default 24)
# rounds after one warm-up round.
#
# Holds /tmp/kt-full-cluster.lock from bring-up to teardown. Needs root and the images
# in the local Docker (make images): KT_OPERATOR_IMAGE, KT_TRAINER_IMAGE (default
# kubetrain/{operator,trainer}:VERSION); the trainer image gives the pods `sleep`.
set -uo pipefail # no -e: each step checks its status and says what failed
cd "$(dirname "$0")/../.." || exit 1
. e2e/cluster/lib.sh
. operator/bench/full-cluster.sh
full_cluster_vars
RUNS=${BENCH_RUNS:-24}
case $RUNS in
  '' | *[!0-9]* | 0) echo "BENCH_RUNS must be a positive number, got '$RUNS'" >&2; exit 2 ;;
esac
out=${BENCH_OUT:-bench/results/kueue-paths.json}
dir=$PWD/build/bench/kueue-paths
export KT_RUN=$dir/run
NS=kt-bench
mkdir -p "$dir" "$(dirname "$out")"

BENCH_NAME=bench-kueue-paths
full_cluster_check
full_cluster_up 1 --set kueue.enabled=true --set "kueue.localQueue.namespaces={$NS}"
export KT_K8S_BIN

log "$RUNS rounds of plain, group, prebuilt"
python3 operator/bench/kueue-paths.py "$NS" training "$TR_IMAGE" "$RUNS" >"$dir/result.json" ||
  die "kueue-paths.py failed"
kubever=$(k version -o json 2>/dev/null | jq -r .serverVersion.gitVersion)
kueuever=$(. e2e/cluster/versions.env && echo "$KUEUE_VERSION")

if ! python3 - "$dir/result.json" "$out" "$commit" "$kubever" "$kueuever" \
     "$(image_id "$TR_IMAGE")" "$(( $(date +%s) - T0 ))" <<'PY'
import datetime, json, os, platform, sys
res, out, commit, kubever, kueuever, trimg, cluster_s = sys.argv[1:8]
r = json.load(open(res))
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo")
            if l.startswith("model name")), "?")
doc = {
    "benchmark": "Kueue admission paths for a group of 2 pods, no operator: first create -> "
                 "both pods bound, full local cluster (e2e/cluster/up.sh full)",
    "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    "commit": commit,
    "machine": {"arch": platform.machine(), "nproc": os.cpu_count(), "cpu": cpu,
                "note": "2 cores; the control plane, Kueue and the node run on them"},
    "setup": {"kubernetes": kubever, "kueue": kueuever, "image": trimg,
              "queue": "chart kueue.enabled: ClusterQueue kubetrain (4 CPU, 8Gi), LocalQueue "
                       "training; Kueue as a host process (e2e/cluster/kueue-up.sh)",
              "pods": "2 per group, requests 100m / 64Mi, sleep; both creates (and the "
                      "Workload's in prebuilt) sent at once on open connections; the group "
                      "deleted 2.5 s before the next",
              "warmup": "one round (a group of each mode) before the counted runs",
              "cluster_seconds": int(cluster_s)},
    "definitions": {
        "bound_s": "first create sent -> the later of the two pods seen with spec.nodeName "
                   "(a pod watch opened before the creates)",
        "created_s": "first create sent -> every create answered",
        "modes": {
            "plain": "no Kueue labels",
            "group": "Kueue plain pod group, labelled as the operator labels its pods",
            "prebuilt": "Workload kueue.x-k8s.io/v1beta2 made by the client with the pods, "
                        "pods labelled kueue.x-k8s.io/prebuilt-workload-name; needs Kueue's "
                        "internal markers kueue.x-k8s.io/role-hash (pods) and "
                        "kueue.x-k8s.io/is-group-workload (Workload)"},
        "paired_over_plain_median_s": "per round, the mode's bound_s minus plain's; the median",
        "webhooks": "per Kueue webhook and operation over the runs (warm-up included): "
                    "calls and the API server's mean time in it "
                    "(apiserver_admission_webhook_admission_duration_seconds)"},
}
doc.update(r)
json.dump(doc, open(out, "w"), indent=1)
open(out, "a").write("\n")
s = r["summary"]
print("bound median s:", s["bound_median_s"], "prebuilt - group:", s["prebuilt_minus_group_s"])
PY
then
  die "writing $out failed"
fi
log "wrote $out"
