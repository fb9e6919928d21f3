# shellcheck shell=bash
# Helpers for the operator's integration tests (operator/tests/integration/test-*.sh):
# one api-level cluster (e2e/cluster/up.sh api) per test file, the operator binary run
# against it, and pod status written through the API in place of a kubelet.
#
# Source it from the repository root after e2e/lib/tap.sh, then call it_cluster NAME.
# Variables a test may set before it_cluster:
#   KT_OPERATOR_BIN   the operator to run (default: the ASan+UBSan build)

IT_BIN=${KT_OPERATOR_BIN:-build/san/bin/kubetrain-operator}
# The default binary is brought up to date first: `make` of the unit tests alone rebuilds
# its objects but not its link, and a test of the old link says nothing of the change.
if [ -z "${KT_OPERATOR_BIN:-}" ] && ! make --no-print-directory -s "$IT_BIN" >&2; then
  echo "# make $IT_BIN failed: the test runs whatever binary is there" >&2
fi
IT_OP_PIDS=()

# it_cleanup: stops the operators this file started, then the cluster.
it_cleanup() {
  local p
  for p in "${IT_OP_PIDS[@]}"; do kill -KILL "$p" 2>/dev/null; done
  for p in "${IT_OP_PIDS[@]}"; do wait "$p" 2>/dev/null; done
  [ -n "${IT_WATCH_PID:-}" ] && kill "$IT_WATCH_PID" 2>/dev/null
  bash e2e/cluster/down.sh >/dev/null 2>&1
}

# it_cluster NAME: brings up a cluster in build/e2e/NAME/run, installs crds/ and sets
# IT_DIR (scratch directory) and k (kubectl). Exits the test with a skip, saying why,
# when the operator is not built or etcd is not installed; a failed build of the
# Kubernetes binaries is a failure.
it_cluster() {
  local name=$1 err
  IT_DIR=$PWD/build/e2e/$name
  export KT_RUN=$IT_DIR/run
  if [ ! -x "$IT_BIN" ]; then
    tap_skip "$name" "$IT_BIN is not built (make $IT_BIN)"
    tap_done; exit 0
  fi
  if ! err=$(bash e2e/cluster/build-k8s.sh api 2>&1 >/dev/null); then
    tap_fail "$name: building the Kubernetes binaries (e2e/cluster/build-k8s.sh api)" \
      "$(tail -n 5 <<<"$err")"
    tap_done; exit 1
  fi
  if ! bash -c '. e2e/cluster/lib.sh && kt_etcd' >/dev/null; then
    tap_skip "$name" "etcd not installed (Debian package etcd-server)"
    tap_done; exit 0
  fi
  trap it_cleanup EXIT
  mkdir -p "$IT_DIR"
  rm -f "$IT_DIR"/op-*.log
  if ! err=$(bash e2e/cluster/up.sh api 2>&1); then
    tap_fail "up.sh api brings the control plane up" "$err"
    tap_done; exit 1
  fi
  # shellcheck source=/dev/null
  . "$KT_RUN/env"
  # kubectl wait right after the create can find no conditions yet and give up
  # (".status.conditions accessor error"): it is asked again.
  if ! err=$(k apply -f crds/ 2>&1 && { wait_until 60 k wait --for condition=Established \
      --timeout 10s crd/trainingjobs.kubetrain.dev ||
      k wait --for condition=Established --timeout 1s crd/trainingjobs.kubetrain.dev 2>&1; }); then
    tap_fail "crds/ installed" "$err"
    tap_done; exit 1
  fi
  for _ in $(seq 40); do k get tj -A >/dev/null 2>&1 && break; sleep 0.25; done
}

k() { "$KT_K8S_BIN/kubectl" --request-timeout 30s "$@"; }

# it_operator NAME ARGS...: starts the operator (log in $IT_DIR/op-NAME.log) and sets
# IT_PID. Short backoff delays keep restart cases quick.
it_operator() {
  local name=$1; shift
  "$IT_BIN" --kubeconfig "$KUBECONFIG" --metrics-addr 127.0.0.1:0 --health-addr 127.0.0.1:0 \
    --backoff-base 1 --backoff-max 2 "$@" >>"$IT_DIR/op-$name.log" 2>&1 &
  IT_PID=$!
  IT_OP_PIDS+=("$IT_PID")
}

# it_stop PID: SIGTERM, and the exit status (0 expected; ASan reports make it non-zero).
it_stop() {
  kill -TERM "$1" 2>/dev/null
  wait "$1"
}

# wait_until SECONDS CMD...: retries CMD every 0.2 s until it succeeds; 1 on timeout.
wait_until() {
  local end=$((SECONDS + $1)); shift
  until "$@" >/dev/null 2>&1; do
    [ $SECONDS -ge $end ] && return 1
    sleep 0.2
  done
}

# jp NS KIND/NAME EXPR: one field by jsonpath.
jp() { k -n "$1" get "$2" -o "jsonpath={$3}" 2>/dev/null; }
# is NS KIND/NAME EXPR VALUE: true when the field equals VALUE.
is() { [ "$(jp "$1" "$2" "$3")" = "$4" ]; }
# npods NS JOB: how many pods the job has.
npods() { k -n "$1" get pods -l "kubetrain.dev/job-name=$2" -o name 2>/dev/null | wc -l; }
has_npods() { [ "$(npods "$1" "$2")" = "$3" ]; }

# job NS NAME WORKERS [SPEC-YAML-LINES]: creates a TrainingJob.
job() {
  local ns=$1 name=$2 workers=$3 extra=${4:-}
  k -n "$ns" create -f - >/dev/null <<EOF
apiVersion: kubetrain.dev/v1alpha1
kind: TrainingJob
metadata: {name: $name}
spec:
  workers: $workers
  checkpoint: {claimName: ckpt}
$extra
EOF
}

# ns NAME: a fresh namespace for one case.
# ns NAME: a namespace, once its "default" ServiceAccount exists: before that, pod
# creation is refused (403, "error looking up service account"), which the operator retries
# but which the RBAC checks would take for a refusal.
ns() {
  k create namespace "$1" >/dev/null
  wait_until 30 k -n "$1" get serviceaccount default
}

# pod_running NS POD: the kubelet's part: phase Running, Ready, trainer running.
pod_running() {
  k -n "$1" patch pod "$2" --subresource status --type merge -p '{"status":{"phase":"Running",
    "conditions":[{"type":"Ready","status":"True"}],
    "containerStatuses":[{"name":"trainer","image":"kubetrain/trainer","imageID":"","ready":true,
    "restartCount":0,"state":{"running":{"startedAt":"2026-01-01T00:00:00Z"}}}]}}' >/dev/null
}

# pod_exit NS POD CODE [MESSAGE]: the trainer terminated with CODE and MESSAGE (the
# termination message); phase Succeeded for 0, else Failed.
pod_exit() {
  local phase=Failed msg
  [ "$3" = 0 ] && phase=Succeeded
  msg=$(python3 -c 'import json,sys; print(json.dumps(sys.argv[1]))' "${4:-}")
  k -n "$1" patch pod "$2" --subresource status --type merge -p "{\"status\":{\"phase\":\"$phase\",
    \"conditions\":[{\"type\":\"Ready\",\"status\":\"False\"}],
    \"containerStatuses\":[{\"name\":\"trainer\",\"image\":\"kubetrain/trainer\",\"imageID\":\"\",
    \"ready\":false,\"restartCount\":0,\"state\":{\"terminated\":{\"exitCode\":$3,
    \"message\":$msg,\"startedAt\":\"2026-01-01T00:00:00Z\",
    \"finishedAt\":\"2026-01-01T00:00:01Z\"}}}]}}" >/dev/null
}

# all_running NS JOB N: waits for the job's N pods and marks them Running.
all_running() {
  local ns=$1 job=$2 n=$3 i
  wait_until 30 has_npods "$ns" "$job" "$n" || return 1
  for ((i = 0; i < n; i++)); do pod_running "$ns" "$job-worker-$i" || return 1; done
}

# condition NS JOB TYPE FIELD: a field (status, reason, message) of the job's condition.
condition() { jp "$1" "tj/$2" ".status.conditions[?(@.type==\"$3\")].$4"; }

# attempt_pods NS JOB ATTEMPT N: true when the job has exactly N pods, all of ATTEMPT.
attempt_pods() {
  local got
  local path='{range .items[*]}{.metadata.annotations.kubetrain\.dev/attempt}{"\n"}{end}'
  got=$(k -n "$1" get pods -l "kubetrain.dev/job-name=$2" -o "jsonpath=$path" 2>/dev/null)
  [ "$(grep -c . <<<"$got")" = "$4" ] && [ "$(grep -cx "$3" <<<"$got")" = "$4" ]
}
