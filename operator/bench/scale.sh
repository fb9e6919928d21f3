#!/usr/bin/env bash
# make bench-operator-scale: kubetrain-operator and Kubeflow's training-operator (TFJob,
# the peer of make bench-operator, operator/bench/peer.sh) at cluster scale, one after the
# other in one run: for each, a fresh api-level cluster (e2e/cluster/up.sh api, without
# the Workload API: neither operator makes PodGroups here) with kube-scheduler and kwok's
# simulated nodes (e2e/cluster/kwok-up.sh, 1,000 pods a node), then BENCH_JOBS (default
# 1000) jobs x BENCH_WORKERS (default 8) workers; what is measured is in scale.py. Both
# operators at client QPS BENCH_QPS (default 100), burst 100, BENCH_THREADS (default 8)
# reconcile threads: twice kubetrain's default, as the QPS is twice its default (--qps
# 50), since reaching the limit takes about QPS x the apiserver's answer time (100 ms
# here) requests in flight, about 2 a kubetrain worker (docs/design.md, "Shape").
# Writes bench/results/operator-scale.json (date, machine, both runs), or with
# BENCH_OUT=FILE elsewhere; BENCH_PEER=0 skips the peer, BENCH_SAMPLES (default 200) and
# BENCH_STEADY (seconds, default 60) change the event and steady phases; BENCH_OP_ARGS
# adds kubetrain-operator options (experiments: e.g. --pod-parallelism 1).
# The machine is shared: the operators and the bench run under nice -n 10.
set -uo pipefail # no -e: a step that fails is recorded in the JSON
cd "$(dirname "$0")/../.." || exit 1
. e2e/cluster/lib.sh
JOBS=${BENCH_JOBS:-1000}
WORKERS=${BENCH_WORKERS:-8}
QPS=${BENCH_QPS:-100}
BURST=100
THREADS=${BENCH_THREADS:-8}
SAMPLES=${BENCH_SAMPLES:-200}
STEADY=${BENCH_STEADY:-60}
OP=${KT_OPERATOR_BIN:-build/bin/kubetrain-operator}
out=${BENCH_OUT:-bench/results/operator-scale.json}
dir=$PWD/build/bench/operator-scale
export KT_RUN=$dir/run KT_WORKLOAD_API=off
mkdir -p "$dir" "$(dirname "$out")"
rm -f "$dir"/*.log "$dir"/*.json "$dir"/*.err
trap 'bash e2e/cluster/down.sh >/dev/null 2>&1' EXIT

log() { printf '%s %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}
k() { "$KT_K8S_BIN/kubectl" --request-timeout 60s "$@"; }

# shellcheck source=operator/bench/peer.sh
. operator/bench/peer.sh
kwok_note=""
bash e2e/cluster/build-kwok.sh >"$dir/kwok-build.log" 2>&1 ||
  kwok_note="kwok could not be built: $(tail -n 3 "$dir/kwok-build.log" | tr '\n' ' ')"

# cluster NAME: a fresh api-level cluster with kwok nodes for JOBS x WORKERS pods.
cluster() {
  bash e2e/cluster/down.sh >/dev/null 2>&1
  bash e2e/cluster/up.sh api >"$dir/up-$1.log" 2>&1 || return 1
  bash e2e/cluster/kwok-up.sh $(((JOBS * WORKERS + 999) / 1000 + 1)) 1000 \
    >>"$dir/up-$1.log" 2>&1 || return 1
  # shellcheck source=/dev/null # the cluster's variables, written by e2e/cluster/up.sh
  . "$KT_RUN/env"
}

runs=()
scale() { # NAME KIND READY METRIC PORT API-HIST RECONCILE-HIST QUEUE-HIST CMD...
  local name=$1 kind=$2 ready=$3 metric=$4 port=$5 api=$6 rec=$7 queue=$8; shift 8
  log "run $name: $JOBS x $WORKERS, qps $QPS, $THREADS threads"
  if nice -n 10 python3 operator/bench/scale.py --kind "$kind" --kubectl "$KT_K8S_BIN/kubectl" \
      --kubeconfig "$KUBECONFIG" --ns "$name" --qps "$QPS" --burst $BURST --threads "$THREADS" \
      --metrics-port "$port" --log "$dir/$name.log" --ready-regex "$ready" --metric "$metric" \
      --jobs "$JOBS" --workers "$WORKERS" --samples "$SAMPLES" --steady "$STEADY" \
      --hist "api=$api" --hist "reconcile=$rec" --hist "queue=$queue" \
      -- nice -n 10 "$@" >"$dir/$name.json" 2>"$dir/$name.err"; then
    runs+=("$dir/$name.json")
  else
    log "run $name failed: $(tail -n 3 "$dir/$name.err")"
    python3 -c 'import json,sys; print(json.dumps({"run": sys.argv[1], "error": sys.argv[2]}))' \
      "$name" "$(tail -n 3 "$dir/$name.err")" >"$dir/$name.json"
    runs+=("$dir/$name.json")
  fi
}

if [ -n "$kwok_note" ]; then
  log "$kwok_note"
  exit 1
fi
if cluster kubetrain; then
  k apply -f crds/ >/dev/null
  k wait --for condition=Established --timeout 60s crd/trainingjobs.kubetrain.dev >/dev/null
  p=$(free_port)
  # shellcheck disable=SC2086 # BENCH_OP_ARGS is a list of options
  scale kt-scale trainingjob 'caches synced' \
    '^kubetrain_api_requests_total\{verb="(GET|POST|PUT|PATCH|DELETE)"' "$p" \
    kubetrain_api_request_duration_seconds kubetrain_reconcile_duration_seconds \
    kubetrain_workqueue_queue_duration_seconds \
    "$OP" --kubeconfig "$KUBECONFIG" --namespace kt-scale --qps "$QPS" --burst $BURST \
    --metrics-addr "127.0.0.1:$p" --health-addr 0 --workers "$THREADS" ${BENCH_OP_ARGS:-}
else
  log "the cluster for kubetrain did not come up: $(tail -n 3 "$dir/up-kubetrain.log")"; exit 1
fi
if [ -z "$kf_note" ]; then
  if cluster kubeflow; then
    kf_install
    sleep 2
    p=$(free_port)
    kf_certs &
    certs_pid=$!
    # GET on the request counter is not a watch here: client-go counts a watch's
    # request once, at its start, as the lists.
    scale kf-scale tfjob 'Starting workers.*"tfjob-controller"' \
      '^rest_client_requests_total\{.*method="(GET|POST|PUT|PATCH|DELETE)"' "$p" \
      rest_client_request_duration_seconds \
      controller_runtime_reconcile_time_seconds,tfjob-controller \
      workqueue_queue_duration_seconds,tfjob-controller \
      env KUBECONFIG="$KUBECONFIG" GOMAXPROCS=2 "$kf_bin" --namespace kf-scale \
      --enable-scheme tfjob --kube-api-qps "$QPS" --kube-api-burst $BURST \
      --metrics-bind-address "127.0.0.1:$p" --health-probe-bind-address 0 \
      --webhook-server-port "$(free_port)" --controller-threads "$THREADS"
    kill "$certs_pid" 2>/dev/null; wait "$certs_pid" 2>/dev/null
  else
    kf_note="the cluster for the peer did not come up: $(tail -n 3 "$dir/up-kubeflow.log")"
  fi
fi

python3 operator/bench/scale_report.py "$out" "$kf_note" "$KF_VERSION" "$KWOK_VERSION" \
  "$K8S_VERSION" "${runs[@]}"
