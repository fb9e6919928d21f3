#!/usr/bin/env bash
# make bench-operator: kubetrain-operator side by side with Kubeflow's training-operator
# (TFJob, v1.9) on one api-level cluster (e2e/cluster/up.sh api): 100 jobs x 4 workers
# per run, at client QPS 50 and 100 (burst 100 for both operators). See bench.py for what
# is measured. Writes bench/results/operator.json (date, machine, every run), or with
# BENCH_OUT=FILE elsewhere; BENCH_PEER=0 skips the peer, BENCH_JOBS, BENCH_WORKERS and
# BENCH_QPS change the load.
#
# The training-operator is built once from the Go module proxy into
# $KT_CACHE/kubeflow/bin (GOMAXPROCS=2, go build -p 2); its TFJob CRD is applied from the
# Go module cache. Neither is copied into the repository. When it cannot be built or
# run, the reason is recorded in the JSON instead of its figures.
set -uo pipefail # no -e: a step that fails is recorded in the JSON
cd "$(dirname "$0")/../.." || exit 1
. e2e/cluster/lib.sh
JOBS=${BENCH_JOBS:-100}
WORKERS=${BENCH_WORKERS:-4}
QPS_LIST=${BENCH_QPS:-"50 100"}
BURST=100
OP=${KT_OPERATOR_BIN:-build/bin/kubetrain-operator}
out=${BENCH_OUT:-bench/results/operator.json}
dir=$PWD/build/bench/operator
export KT_RUN=$dir/run
mkdir -p "$dir" bench/results
rm -f "$dir"/*.log "$dir"/*.json
trap 'bash e2e/cluster/down.sh >/dev/null 2>&1' EXIT

log() { printf '%s %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# --- the peer -------------------------------------------------------------------------
# shellcheck source=operator/bench/peer.sh
. operator/bench/peer.sh

# --- the cluster ------------------------------------------------------------------------
log "starting the api-level cluster"
bash e2e/cluster/up.sh api >"$dir/up.log" 2>&1 || { cat "$dir/up.log" >&2; exit 1; }
# shellcheck source=/dev/null # the cluster's variables, written by e2e/cluster/up.sh
. "$KT_RUN/env"
k() { "$KT_K8S_BIN/kubectl" --request-timeout 60s "$@"; }
k apply -f crds/ >/dev/null
k wait --for condition=Established --timeout 60s crd/trainingjobs.kubetrain.dev >/dev/null
kf_install
sleep 2

runs=()
bench() { # NAME KIND QPS READY METRIC LATENCY-METRIC PORT CMD...
  local name=$1 kind=$2 qps=$3 ready=$4 metric=$5 lmetric=$6 port=$7 qmetric rmetric; shift 7
  if [ "$kind" = tfjob ]; then
    qmetric=workqueue_queue_duration_seconds,tfjob-controller
    rmetric=controller_runtime_reconcile_time_seconds,tfjob-controller
  else
    qmetric=kubetrain_workqueue_queue_duration_seconds
    rmetric=kubetrain_reconcile_duration_seconds
  fi
  log "run $name: $JOBS x $WORKERS, qps $qps"
  if python3 operator/bench/bench.py --kind "$kind" --kubectl "$KT_K8S_BIN/kubectl" \
      --kubeconfig "$KUBECONFIG" --ns "$name" --qps "$qps" --burst $BURST \
      --metrics-port "$port" --log "$dir/$name.log" --ready-regex "$ready" --metric "$metric" --latency-metric "$lmetric" \
      --queue-metric "$qmetric" --reconcile-metric "$rmetric" \
      --jobs "$JOBS" --workers "$WORKERS" -- "$@" >"$dir/$name.json" 2>"$dir/$name.err"; then
    cat "$dir/$name.json" >&2
    runs+=("$dir/$name.json")
  else
    log "run $name failed: $(tail -n 3 "$dir/$name.err")"
    python3 -c 'import json,sys; print(json.dumps({"run": sys.argv[1], "error": sys.argv[2]}))' \
      "$name" "$(tail -n 3 "$dir/$name.err")" >"$dir/$name.json"
    runs+=("$dir/$name.json")
  fi
}

for q in $QPS_LIST; do
  p=$(free_port)
  bench "kubetrain-q$q" trainingjob "$q" 'caches synced' \
    '^kubetrain_api_requests_total\{verb="(GET|POST|PUT|PATCH|DELETE)"' \
    kubetrain_api_request_duration_seconds "$p" \
    "$OP" --kubeconfig "$KUBECONFIG" --namespace "kubetrain-q$q" --qps "$q" --burst $BURST \
    --metrics-addr "127.0.0.1:$p" --health-addr 0 --workers 4
  if [ -z "$kf_note" ]; then
    p=$(free_port)
    kf_certs &
    certs_pid=$!
    bench "kubeflow-q$q" tfjob "$q" 'Starting workers.*"tfjob-controller"' \
      '^rest_client_requests_total\{' rest_client_request_duration_seconds "$p" \
      env KUBECONFIG="$KUBECONFIG" GOMAXPROCS=2 "$kf_bin" --namespace "kubeflow-q$q" \
      --enable-scheme tfjob --kube-api-qps "$q" --kube-api-burst $BURST \
      --metrics-bind-address "127.0.0.1:$p" --health-probe-bind-address 0 \
      --webhook-server-port "$(free_port)" --controller-threads 4
    kill "$certs_pid" 2>/dev/null; wait "$certs_pid" 2>/dev/null
  fi
done
# Diagnostic: the same load at the highest QPS with 8 reconcile threads instead of 4,
# to tell the client's rate limit from request latency x concurrency.
if [ "${BENCH_EXTRA:-1}" = 1 ]; then
  q=${QPS_LIST##* }
  p=$(free_port)
  bench "kubetrain-q$q-w8" trainingjob "$q" 'caches synced' \
    '^kubetrain_api_requests_total\{verb="(GET|POST|PUT|PATCH|DELETE)"' \
    kubetrain_api_request_duration_seconds "$p" \
    "$OP" --kubeconfig "$KUBECONFIG" --namespace "kubetrain-q$q-w8" --qps "$q" --burst $BURST \
    --metrics-addr "127.0.0.1:$p" --health-addr 0 --workers 8
fi

python3 - "$out" "$kf_note" "$KF_VERSION" "$JOBS" "$WORKERS" "${runs[@]}" <<'PY'
import json, os, platform, subprocess, sys, datetime
out, note, kfv, jobs, workers, *files = sys.argv[1:]
runs = [json.load(open(f)) for f in files]
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
doc = {
    "benchmark": "operator: %s jobs x %s workers against kube-apiserver (e2e/cluster/up.sh api)" % (jobs, workers),
    "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    "machine": {"arch": platform.machine(), "nproc": os.cpu_count(), "cpu": cpu,
                "note": "2 cores shared with other jobs; the apiserver, etcd and the client run on the same cores"},
    "definitions": {
        "pods_s": "first job created -> last pod ADDED on a watch",
        "requests": "the operator's API requests (own /metrics, watches excluded) until the last pod was seen",
        "bound_s": "max(0, requests - burst) / qps: the client rate limiter's lower bound",
        "pods_over_bound": "pods_s / bound_s (target <= 1.10)",
        "event_to_action_ms": "a pod status write (worker k Running) answered -> the operator's resulting job status (ready/active >= k+1) received on a watch; one pod every 0.1 s, 400 samples per run",
        "cpu_s": "operator user+system CPU over the run (creation and event phases)",
        "vmhwm_mib": "operator peak RSS (VmHWM)",
        "api_latency_mean_ms": "mean duration of the operator's API requests in the creation wave; the operator's request rate is at most its requests in flight / this latency (each of --workers 4 reconcile threads sends one request at a time, a job's pod creations excepted: up to --pod-parallelism 8 at once)",
        "loadavg_start/end": "1-minute load average of the shared machine around the run",
    },
    "peer": {"name": "kubeflow/training-operator", "version": kfv,
             "built": not note, "note": note or "built with go install from the Go module proxy, GOMAXPROCS=2; TFJob CRD from its module's manifests"},
    "targets": {"pods_over_bound": 1.10, "vmhwm_mib": 16, "event_to_action_p99_ms_at_qps_100": 50},
    "runs": runs,
}
# Side by side at each QPS: kubetrain / training-operator (below 1: kubetrain uses less).
by = {r.get("run"): r for r in runs}
summary = {}
for r in runs:
    name = r.get("run", "")
    if not name.startswith("kubetrain-q") or name.endswith("-w8") or "error" in r:
        continue
    q = name[len("kubetrain-q"):]
    row = {"pods_s": r["pods_s"], "pods_over_bound": r["pods_over_bound"],
           "event_to_action_p99_ms": r.get("event_to_action_ms", {}).get("p99"),
           "cpu_s": r["cpu_s"], "vmhwm_mib": r["vmhwm_mib"]}
    kf = by.get("kubeflow-q" + q)
    if kf and "error" not in kf:
        row["peer"] = {"pods_s": kf["pods_s"], "pods_over_bound": kf["pods_over_bound"],
                       "event_to_action_p99_ms": kf.get("event_to_action_ms", {}).get("p99"),
                       "cpu_s": kf["cpu_s"], "vmhwm_mib": kf["vmhwm_mib"]}
        row["ratio_kubetrain_over_peer"] = {
            k: round(row[k] / kf_v, 3) for k, kf_v in row["peer"].items()
            if isinstance(kf_v, (int, float)) and kf_v and isinstance(row[k], (int, float))}
    summary["qps_" + q] = row
doc["summary"] = summary
json.dump(doc, open(out, "w"), indent=2)
open(out, "a").write("\n")
print(json.dumps(doc, indent=2))
PY
