#!/usr/bin/env bash
# make bench-gang-kueue: what gang scheduling and Kueue admission cost a job's start. On
# the full local cluster (e2e/cluster/up.sh full, real pods; Kueue as kueue-up.sh runs it,
# its queues from the chart's kueue.enabled), 2-worker C-trainer jobs are applied one at
# a time, cycling through four modes (each round starting at the next one): "gang+kueue"
# (spec.gangScheduling true, so a PodGroup with minCount 2, and the label
# kueue.x-k8s.io/queue-name, so a Kueue plain pod group admitted through the chart's
# LocalQueue), "plain" (gangScheduling false, no queue label), and, to tell the two
# apart, "gang" and "kueue" alone. Measured: kubectl apply -> the later of the two
# workers' "rendezvous done" log lines, and -> their first log lines (the container
# runtime's timestamps of the lines, kubectl logs --timestamps, on this machine's clock).
# Each run also records when the scheduler placed the later worker (its Scheduled event's
# time, in microseconds), which splits the time into admission and scheduling before it
# and the node's container start after it, and how many FailedScheduling events the
# job's pods got. One warm-up round first, not counted. Writes
# bench/results/gang-kueue.json (date, machine, every run, medians, the ratios), or with
# BENCH_OUT=FILE elsewhere; BENCH_RUNS (default 8) runs per mode; BENCH_NOTE (what
# changed) and BENCH_BEFORE (the JSON of a run before the change, same session) are
# recorded in the JSON. The script keeps off the 2 cores while a job starts: it waits
# BENCH_QUIET_S (default 3) after the apply before its first look (each look is a few
# kubectl processes, ~0.1 s of CPU apiece, which used to land in the middle of the
# containers' start), and BENCH_SETTLE_S (default 2) after a job's pods are gone, while
# the node and Kueue finish tearing it down.
# BENCH_TRACE=1 runs the same rounds on a cluster with the API server's audit log on
# (up.sh KT_AUDIT=on) and adds to the JSON (default bench/results/gang-kueue-trace.json)
# where each mode's start-up goes: every write to a job's objects from the apply to the
# rendezvous, who made it and when, medians per mode (operator/bench/audit-chain.py). The
# audit log costs each of those writes a little, so a traced run is not the target's.
#
# Holds /tmp/kt-full-cluster.lock from bring-up to teardown (one full-level cluster per
# machine; operator/bench/full-cluster.sh). Needs root and the images in the local Docker
# (make images):
# KT_OPERATOR_IMAGE, KT_TRAINER_IMAGE (default kubetrain/{operator,trainer}:VERSION).
set -uo pipefail # no -e: each step checks its status and says what failed
cd "$(dirname "$0")/../.." || exit 1
. e2e/cluster/lib.sh
. operator/bench/full-cluster.sh
full_cluster_vars
RUNS=${BENCH_RUNS:-8}
QUIET=${BENCH_QUIET_S:-3}
SETTLE=${BENCH_SETTLE_S:-2}
TRACE=${BENCH_TRACE:-0}
case $TRACE in
  0) out=${BENCH_OUT:-bench/results/gang-kueue.json} ;;
  1) out=${BENCH_OUT:-bench/results/gang-kueue-trace.json}; export KT_AUDIT=on ;;
  *) echo "BENCH_TRACE must be 0 or 1, got '$TRACE'" >&2; exit 2 ;;
esac
dir=$PWD/build/bench/gang-kueue
export KT_RUN=$dir/run
NS=kt-bench
mkdir -p "$dir" "$(dirname "$out")"
rm -f "$dir"/*.log "$dir"/runs.tsv

BENCH_NAME=bench-gang-kueue
full_cluster_check
full_cluster_up 1 --set kueue.enabled=true --set "kueue.localQueue.namespaces={$NS}"

# manifest NAME MODE: a 2-worker tutorial job, 1 epoch of 20 steps, no checkpoint.
manifest() {
  local labels="" gang=false
  case $2 in gang+kueue | kueue) labels="labels: {kueue.x-k8s.io/queue-name: training}" ;; esac
  case $2 in gang+kueue | gang) gang=true ;; esac
  cat <<EOF
apiVersion: kubetrain.dev/v1alpha1
kind: TrainingJob
metadata:
  name: $1
  $labels
spec:
  workers: 2
  gangScheduling: $gang
  model: tutorial-cnn
  dataset: {name: fashion-mnist, path: /data}
  training:
    epochs: 1
    stepsPerEpoch: 20
    perWorkerBatchSize: 64
    optimizer: {name: sgd, learningRate: 0.001}
  template:
    spec:
      containers:
        - name: trainer
          resources: {requests: {cpu: 100m, memory: 256Mi}}
EOF
}
# rdv_time POD: the runtime's timestamp (epoch seconds) of the pod's "rendezvous done".
rdv_time() {
  local ts
  ts=$(kn logs "$1" -c trainer --timestamps 2>/dev/null | grep -m1 'rendezvous done' |
         cut -d' ' -f1)
  [ -n "$ts" ] && date -d "$ts" +%s.%N
}
# first_time POD: the runtime's timestamp of the pod's first log line (the program runs).
first_time() {
  local ts
  ts=$(kn logs "$1" -c trainer --timestamps 2>/dev/null | head -n 1 | cut -d' ' -f1)
  [ -n "$ts" ] && date -d "$ts" +%s.%N
}
# sched_time POD: when the scheduler placed the pod (its Scheduled event's eventTime,
# microseconds), epoch seconds.
sched_time() {
  local ts
  ts=$(kn get events --field-selector "reason=Scheduled,involvedObject.name=$1" -o json \
         2>/dev/null | jq -r '[.items[].eventTime // empty] | sort | last // empty')
  [ -n "$ts" ] && date -d "$ts" +%s.%N
}
# failed_scheduling NAME: FailedScheduling events of the job's two workers (each a
# scheduling cycle that placed neither, its PodScheduled=False write with it).
failed_scheduling() {
  local n=0 w c
  for w in 0 1; do
    c=$(kn get events --field-selector "reason=FailedScheduling,involvedObject.name=$1-worker-$w" \
          -o json 2>/dev/null | jq '[.items[] | (.count // 1)] | add // 0')
    n=$((n + ${c:-0}))
  done
  echo "$n"
}
# one NAME MODE: prints "seconds<TAB>started<TAB>scheduled<TAB>failed<TAB>facts<TAB>t0"
# (t0: the apply's start, epoch seconds) or fails.
one() {
  local name=$1 mode=$2 t0 end r0="" r1="" s0 s1 p0 p1 facts
  t0=$(date +%s.%N)
  manifest "$name" "$mode" | kn apply -f - >/dev/null || return 1
  end=$(( $(date +%s) + 180 ))
  sleep "$QUIET" # the times come from the runtime's log stamps, not from when we look
  while [ -z "$r0" ] || [ -z "$r1" ]; do
    [ "$(date +%s)" -lt "$end" ] || return 1
    [ -n "$r0" ] || r0=$(rdv_time "$name-worker-0")
    [ -n "$r1" ] || r1=$(rdv_time "$name-worker-1")
    [ -n "$r0" ] && [ -n "$r1" ] || sleep 0.5
  done
  # What the mode really got: the pod's PodGroup link and Kueue's group label.
  facts=$(kn get pod "$name-worker-0" -o json | jq -r '[
      "podGroup=" + (.spec.schedulingGroup.podGroupName // "-"),
      "kueueGroup=" + (.metadata.labels["kueue.x-k8s.io/pod-group-name"] // "-")] | join(" ")')
  s0=$(first_time "$name-worker-0"); s1=$(first_time "$name-worker-1")
  p0=$(sched_time "$name-worker-0"); p1=$(sched_time "$name-worker-1")
  for w in 0 1; do kn logs "$name-worker-$w" -c trainer --timestamps >"$dir/$name-$w.log" 2>&1; done
  awk -v a="$t0" -v b="$r0" -v c="$r1" -v d="$s0" -v e="$s1" -v g="$p0" -v h="$p1" \
    -v n="$(failed_scheduling "$name")" -v f="$facts" 'BEGIN {
      m = b > c ? b : c; s = d > e ? d : e; p = g > h ? g : h
      printf "%.3f\t%.3f\t%s\t%d\t%s\t%.6f\n", m - a, s - a,
        (g == "" || h == "") ? "null" : sprintf("%.3f", p - a), n, f, a }'
}
# cleanup_job NAME: the job and its pods gone (Kueue's finalizer released).
cleanup_job() {
  kn delete tj "$1" --wait=true --timeout 120s >/dev/null 2>&1
  for _ in $(seq 240); do
    if [ -z "$(kn get pods -o name 2>/dev/null)" ]; then
      sleep "$SETTLE"
      return 0
    fi
    sleep 0.5
  done
  log "pods of $1 still there after 120 s"
}

MODES=(gang+kueue plain gang kueue)
printf 'mode\trun\tseconds\tstarted\tscheduled\tfailed_scheduling\tfacts\tt0\tname\n' \
  >"$dir/runs.tsv"
i=0
for r in $(seq 0 "$RUNS"); do
  for m in 0 1 2 3; do
    mode=${MODES[$(( (r + m) % 4 ))]}
    name=b$i-${mode/+/-}; i=$((i + 1))
    if res=$(one "$name" "$mode"); then
      log "run $r $mode: $res"
      [ "$r" = 0 ] || printf '%s\t%s\t%s\t%s\n' "$mode" "$r" "$res" "$name" >>"$dir/runs.tsv"
    else
      log "run $r $mode: no rendezvous within 180 s"
      kn get pods -o wide >&2; kn describe tj "$name" | tail -n 20 >&2
      [ "$r" = 0 ] ||
        printf '%s\t%s\tnull\tnull\tnull\t0\tfailed\tnull\t%s\n' "$mode" "$r" "$name" \
          >>"$dir/runs.tsv"
    fi
    cleanup_job "$name"
  done
done
kubever=$(k version -o json 2>/dev/null | jq -r .serverVersion.gitVersion)
kueuever=$(. e2e/cluster/versions.env && echo "$KUEUE_VERSION")
cluster_s=$(( $(date +%s) - T0 ))
trace=""
if [ "$TRACE" = 1 ]; then
  cp "$KT_RUN/logs/audit.log" "$dir/audit.log"
  trace=$dir/trace.json
  python3 operator/bench/audit-chain.py "$dir/audit.log" "$dir/runs.tsv" "$NS" >"$trace" ||
    die "audit-chain.py failed on $dir/audit.log"
fi

python3 - "$dir/runs.tsv" "$out" "$RUNS" "$kubever" "$kueuever" "$(image_id "$OP_IMAGE")" \
  "$(image_id "$TR_IMAGE")" "$cluster_s" "$commit" "${BENCH_NOTE:-}" "${BENCH_BEFORE:-}" \
  "$QUIET" "$SETTLE" "$trace" <<'PY'
import csv, datetime, json, os, platform, statistics, sys
(tsv, out, runs, kubever, kueuever, opimg, trimg, cluster_s, commit, note, before, quiet,
 settle, trace) = sys.argv[1:15]
rows = list(csv.DictReader(open(tsv), delimiter="\t"))
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo")
            if l.startswith("model name")), "?")
modes = ["gang+kueue", "plain", "gang", "kueue"]
TARGET = 1.2  # gang+kueue over plain, apply -> past rendezvous
res = {m: [] for m in modes}
started = {m: [] for m in modes}
stalled = {m: 0 for m in modes}
for r in rows:
    if r["seconds"] != "null":
        res[r["mode"]].append(float(r["seconds"]))
        started[r["mode"]].append(float(r["started"]))
        stalled[r["mode"]] += float(r["seconds"]) - float(r["started"]) > 2
def median_of(key):
    v = {m: [float(r[key]) for r in rows if r["mode"] == m and r[key] not in ("null", "")]
         for m in modes}
    return {m: round(statistics.median(x), 3) if x else None for m, x in v.items()}
def after_scheduled(r):
    ok = r["started"] != "null" and r["scheduled"] not in ("null", "")
    return float(r["started"]) - float(r["scheduled"]) if ok else None
med_sched = median_of("scheduled")
med_after = {m: [x for x in (after_scheduled(r) for r in rows if r["mode"] == m) if x is not None]
             for m in modes}
med_after = {m: round(statistics.median(v), 3) if v else None for m, v in med_after.items()}
failed_runs = {m: sum(1 for r in rows if r["mode"] == m and int(r["failed_scheduling"]) > 0)
               for m in modes}
med = {m: round(statistics.median(v), 3) if v else None for m, v in res.items()}
med_started = {m: round(statistics.median(v), 3) if v else None for m, v in started.items()}
def ratio(d, a, b):
    return round(d[a] / d[b], 3) if d[a] and d[b] else None
# Each round runs every mode once, back to back: a round's own ratio leaves out what
# drifts between rounds (the node's container start moved 0.4 -> 0.65 s over a session).
def paired(a, b):
    by = {(r["mode"], r["run"]): float(r["seconds"]) for r in rows if r["seconds"] != "null"}
    v = [by[(a, n)] / by[(b, n)] for n in sorted({r["run"] for r in rows})
         if (a, n) in by and (b, n) in by]
    return {"median": round(statistics.median(v), 3) if v else None,
            "rounds_at_or_under_target": sum(1 for x in v if x <= TARGET), "rounds": len(v)}
doc = {
    "benchmark": "gang scheduling + Kueue vs neither: kubectl apply -> both workers past "
                 "rendezvous, 2-worker C-trainer jobs, full local cluster (e2e/cluster/up.sh full)",
    "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    "commit": commit,
    "machine": {"arch": platform.machine(), "nproc": os.cpu_count(), "cpu": cpu,
                "note": "2 cores shared with other engineers' builds and tests; the control "
                        "plane, Kueue, the node and both trainers run on them"},
    "setup": {"kubernetes": kubever, "kueue": kueuever, "operator_image": opimg,
              "trainer_image": trimg,
              "queue": "chart kueue.enabled: ClusterQueue kubetrain (4 CPU, 8Gi), LocalQueue "
                       "training; Kueue as a host process (e2e/cluster/kueue-up.sh)",
              "job": "workers 2, tutorial-cnn, fashion-mnist, 1 x 20 steps, requests 100m / "
                     "256Mi per pod, no checkpoint; one job at a time, deleted (pods gone) "
                     "before the next",
              "quiet_s": float(quiet),
              "settle_s": float(settle),
              "method": "after an apply the script waits quiet_s before it first looks "
                        "(kubectl logs, events), and settle_s after a job's pods are gone "
                        "before the next apply",
              "warmup": "one round (a job of each mode) before the counted runs",
              "cluster_seconds": int(cluster_s)},
    "definitions": {
        "seconds": "kubectl apply started -> the later of the two workers' 'rendezvous done' "
                   "log lines (container runtime timestamps)",
        "started": "kubectl apply started -> the later of the two workers' first log lines "
                   "(both programs running: admission, scheduling and container start; when "
                   "the peer resolves at once that line is 'rendezvous done' itself, "
                   "<= 0.12 s after the program's start)",
        "stalled": "runs with more than 2 s between started and rendezvous: a worker "
                   "looked its peer up before the peer's DNS record existed and waited out "
                   "the cached negative answer (the cluster's CoreDNS: kubernetes ttl 5, "
                   "cache 5)",
        "modes": {"gang+kueue": "spec.gangScheduling true (PodGroup minCount 2) and label "
                                "kueue.x-k8s.io/queue-name: training (Kueue plain pod group)",
                  "plain": "spec.gangScheduling false, no queue label",
                  "gang": "spec.gangScheduling true, no queue label",
                  "kueue": "spec.gangScheduling false, the queue label"},
        "scheduled": "kubectl apply started -> the later of the two workers' Scheduled "
                     "events (the scheduler's eventTime, microseconds): admission and "
                     "scheduling; started - scheduled is the node's container start",
        "failed_scheduling": "FailedScheduling events of the two workers: scheduling "
                             "cycles that placed neither, each with a PodScheduled=False "
                             "write",
        "paired_ratio": "per round (every mode once, back to back), gang+kueue seconds / "
                        "plain seconds; the median over rounds, and how many rounds were "
                        "at or under the target",
        "facts": "worker-0's spec.schedulingGroup.podGroupName and "
                 "kueue.x-k8s.io/pod-group-name label, '-' when absent"},
    "targets": {"ratio_gang_kueue_over_plain": TARGET},
    "runs": [{"mode": r["mode"], "run": int(r["run"]),
              "seconds": None if r["seconds"] == "null" else float(r["seconds"]),
              "started": None if r["started"] == "null" else float(r["started"]),
              "scheduled": None if r["scheduled"] in ("null", "") else float(r["scheduled"]),
              "failed_scheduling": int(r["failed_scheduling"]),
              "facts": r["facts"]} for r in rows],
    "summary": {"runs_per_mode": int(runs), "median_s": med,
                "min_s": {m: min(v) if v else None for m, v in res.items()},
                "max_s": {m: max(v) if v else None for m, v in res.items()},
                "ratio_gang_kueue_over_plain": ratio(med, "gang+kueue", "plain"),
                "paired_ratio_gang_kueue_over_plain": paired("gang+kueue", "plain"),
                "started_median_s": med_started,
                "started_ratio_gang_kueue_over_plain": ratio(med_started, "gang+kueue", "plain"),
                "started_ratio_gang_over_plain": ratio(med_started, "gang", "plain"),
                "started_ratio_kueue_over_plain": ratio(med_started, "kueue", "plain"),
                "stalled_runs": stalled,
                "scheduled_median_s": med_sched,
                "scheduled_minus_plain_s": {m: round(med_sched[m] - med_sched["plain"], 3)
                                            if med_sched[m] is not None and
                                            med_sched["plain"] is not None else None
                                            for m in modes},
                "container_start_median_s": med_after,
                "runs_with_failed_scheduling": failed_runs},
}
if trace:
    doc["benchmark"] += "; traced: the API server's audit log on (KT_AUDIT=on)"
    doc["definitions"]["trace"] = (
        "operator/bench/audit-chain.py: per mode, the writes to a job's objects between the "
        "apply and the rendezvous that at least half of its runs made, each with the medians "
        "of when the API server received it and answered it (ms after it received the "
        "TrainingJob's create) and how long it took; 'example' is one run step by step")
    doc["trace"] = json.load(open(trace))
if note:
    doc["note"] = note
if before:
    b = json.load(open(before))
    doc["before"] = {k: b.get(k) for k in ("date", "commit", "note", "summary")}
    doc["before"]["operator_image"] = b.get("setup", {}).get("operator_image")
json.dump(doc, open(out, "w"), indent=1)
open(out, "a").write("\n")
print(json.dumps(doc["summary"]))
PY
