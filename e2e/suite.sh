#!/usr/bin/env bash
# The end-to-end scenario suite: the chart and TrainingJobs on a real cluster with real
# pods, driven only with kubectl and helm against $KUBECONFIG, the same for every
# provider. Prints TAP, then a pass/fail table; exits 0 when every scenario passed.
#
#   KUBECONFIG=... e2e/suite.sh [SCENARIO...]     (default: all, in order)
#
# Scenarios: install basic progress recovery elastic elasticchief tfmwms tfscale tfexit tfauto
# tfps killtrials preempt kill137 waiting suspend s3 cifar deadline badmodel invalid operator gang
# kueue kueuelive upgrade uninstall (later ones assume install ran; the tf* ones run users'
# TensorFlow programs from KT_TF_IMAGE and say SKIP without it).
#
# Environment:
#   KT_PROVIDER        full (e2e/cluster/up.sh full; default) or kind: how a process is
#                      killed inside its container (the trainer image has no shell, and
#                      PID 1 of a pid namespace ignores SIGKILL sent from inside it)
#   KT_OPERATOR_IMAGE  kubetrain/operator:<VERSION>;  KT_TRAINER_IMAGE  kubetrain/trainer:<VERSION>
#   KT_TF_IMAGE        the image of examples/tensorflow (make image-tensorflow), already on
#                      the cluster's node; empty: the tf* scenarios are skipped
#   KT_HELM            helm binary (default: charts/build-helm.sh's, else helm on PATH)
#   KT_KUBECTL         kubectl binary (default: $KT_K8S_BIN/kubectl, else kubectl on PATH)
#   KT_CONTAINERD_ADDRESS  the node's containerd socket (full; from e2e/cluster/.run/env)
#   KT_SUITE_NS        namespace of the jobs (kt-e2e; a scenario run beside others uses
#                      kt-e2e-<scenario>); the release goes to kubetrain-system
#   KT_SUITE_JOBS      how many of the scenarios that share the node run at once (3; 1
#                      runs every scenario alone, in order; see "running them" below)
#   KT_SUITE_JOB_TIMEOUT  seconds a job may take to finish (300)
#
# The jobs are examples/job.yaml shortened for speed: the same model, data, optimizer and
# batch, 2 epochs x 30 steps, a checkpoint every 10 steps.
set -uo pipefail # no -e: a failed check is reported (not ok) and the test goes on
cd "$(dirname "$0")/.." || exit 1
. e2e/lib/tap.sh
. trainer/tests/remote/seaweedfs.sh

VERSION=$(cat VERSION)
PROVIDER=${KT_PROVIDER:-full}
OP_IMAGE=${KT_OPERATOR_IMAGE:-kubetrain/operator:$VERSION}
TR_IMAGE=${KT_TRAINER_IMAGE:-kubetrain/trainer:$VERSION}
TF_IMAGE=${KT_TF_IMAGE:-}
NS=${KT_SUITE_NS:-kt-e2e}
REL=kt
REL_NS=kubetrain-system
JOB_TIMEOUT=${KT_SUITE_JOB_TIMEOUT:-300}
KUBECTL=${KT_KUBECTL:-}
if [ -z "$KUBECTL" ]; then
  if [ -n "${KT_K8S_BIN:-}" ] && [ -x "$KT_K8S_BIN/kubectl" ]; then KUBECTL=$KT_K8S_BIN/kubectl
  else KUBECTL=kubectl; fi
fi
HELM=${KT_HELM:-}
if [ -z "$HELM" ]; then HELM=$(bash charts/build-helm.sh 2>/dev/null) || HELM=helm; fi
: "${KUBECONFIG:?set KUBECONFIG to the admin kubeconfig of the cluster}"
export KUBECONFIG

k() { "$KUBECTL" --request-timeout 30s "$@"; }
kn() { k -n "$NS" "$@"; }
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN{printf "%.1f", b - a}'; }
log() { echo "# $(date -u +%H:%M:%S) $*"; }

# --- results table ----------------------------------------------------------------------
RESULTS=()
MEASURED=()
SCEN=""
SCEN_FAILS=0
SCEN_T0=0
begin() { SCEN=$1; SCEN_FAILS=0; SCEN_T0=$(now); log "scenario $SCEN"; }
ok()   { tap_ok "$SCEN: $1"; }
fail() { SCEN_FAILS=$((SCEN_FAILS + 1)); tap_fail "$SCEN: $1" "${2:-}"; }
check() { if [ "$2" = "$3" ]; then ok "$1"; else fail "$1" "expected [$3], got [$2]"; fi; }
end() {
  local r=pass; [ "$SCEN_FAILS" -gt 0 ] && r=FAIL
  RESULTS+=("$(printf '%-10s %-5s %6ss' "$SCEN" "$r" "$(since "$SCEN_T0")")")
}

# --- helpers ------------------------------------------------------------------------------
# manifest NAME SPEC [YAML...]: a TrainingJob NAME in $NS whose spec is SPEC (lines
# indented by two), then each YAML argument as one more top-level spec line.
manifest() {
  local name=$1 spec=$2; shift 2
  printf 'apiVersion: kubetrain.dev/v1alpha1\nkind: TrainingJob\nmetadata:\n  name: %s\n' "$name"
  printf '  namespace: %s\nspec:\n%s\n' "$NS" "$spec"
  for l in "$@"; do echo "  $l"; done
}
# job NAME [YAML...]: a TrainingJob of the shortened tutorial spec; extra top-level spec
# keys (indented by two) follow as arguments, each one line.
TUTORIAL_SPEC='  workers: 2
  model: tutorial-cnn
  dataset: {name: fashion-mnist, path: /data}
  training:
    epochs: 2
    stepsPerEpoch: 30
    perWorkerBatchSize: 64
    optimizer: {name: sgd, learningRate: 0.001}
  checkpoint: {claimName: ckpt, path: /checkpoints, everySteps: 10}'
job() { local name=$1; shift; manifest "$name" "$TUTORIAL_SPEC" "$@"; }
apply_job() { job "$@" | kn apply -f - 2>&1; }
phase() { kn get tj "$1" -o 'jsonpath={.status.phase}' 2>/dev/null; }
field() { kn get tj "$1" -o "jsonpath=$2" 2>/dev/null; }
# restarts JOB: "application/disruption", an absent counter read as 0 (none happened).
restarts() {
  local a d
  a=$(field "$1" '{.status.restarts.application}'); d=$(field "$1" '{.status.restarts.disruption}')
  echo "${a:-0}/${d:-0}"
}

# wait_phase JOB SECONDS PHASE...: true when the job reaches one of PHASEs in time.
wait_phase() {
  local j=$1 secs=$2 p want; shift 2
  local end=$(( $(date +%s) + secs ))
  while [ "$(date +%s)" -lt "$end" ]; do
    p=$(phase "$j")
    for want in "$@"; do [ "$p" = "$want" ] && return 0; done
    case "$p" in Succeeded|Failed) return 1 ;; esac
    sleep 1
  done
  return 1
}
# wait_log POD REGEX SECONDS: prints the first matching line of the pod's trainer log.
wait_log() {
  local end=$(( $(date +%s) + $3 )) line
  while [ "$(date +%s)" -lt "$end" ]; do
    line=$(kn logs "$1" -c trainer 2>/dev/null | grep -E -m1 "$2") && { echo "$line"; return 0; }
    sleep 0.5
  done
  return 1
}
# wait_pods JOB N SECONDS: true when N worker pods of the job exist and are Running.
wait_running() {
  local end=$(( $(date +%s) + $3 )) n
  while [ "$(date +%s)" -lt "$end" ]; do
    n=$(kn get pods -l "kubetrain.dev/job-name=$1" \
          -o 'jsonpath={range .items[?(@.status.phase=="Running")]}{.metadata.name}{"\n"}{end}' 2>/dev/null | grep -c .)
    [ "$n" -ge "$2" ] && return 0
    sleep 0.5
  done
  return 1
}
explain() {
  # One line first: CI's summary keeps only a failure's first lines.
  echo "--- job $1: $(kn get tj "$1" -o 'jsonpath=phase {.status.phase}, attempt {.status.attempt}, step {.status.progress.step} of {.status.progress.totalSteps}, checkpoint {.status.checkpoint.step}, created {.metadata.creationTimestamp}; {range .status.conditions[*]}{.type}={.status}/{.reason} {end}' 2>&1) (now $(date -u +%FT%TZ))"
  kn get tj "$1" -o yaml 2>&1 | sed -n '/^status:/,$p'
  echo "--- pods"; kn get pods -l "kubetrain.dev/job-name=$1" -o wide 2>&1
  local p; for p in $(kn get pods -l "kubetrain.dev/job-name=$1" -o name 2>/dev/null); do
    echo "--- $p"; kn logs "$p" -c trainer 2>&1 | tail -n 8
  done
  echo "--- events"; kn get events --field-selector "involvedObject.name=$1" 2>&1 | tail -n 8
}
# chief_ckpt JOB SECONDS: waits for the chief to save a checkpoint above step 0.
chief_ckpt() { wait_log "$1-worker-0" 'checkpoint at step [1-9][0-9]* saved' "$2"; }

# containerd_address: sets KT_CONTAINERD_ADDRESS (full), from the cluster's env file.
containerd_address() {
  # shellcheck source=/dev/null # the cluster's variables, written by e2e/cluster/up.sh
  [ -n "${KT_CONTAINERD_ADDRESS:-}" ] ||
    KT_CONTAINERD_ADDRESS=$(. "${KT_RUN:-e2e/cluster/.run}/env" && echo "$KT_CONTAINERD_ADDRESS")
}
# kill_trainer POD: SIGKILL to the trainer process of the pod's trainer container, from
# the node (the container's init ignores SIGKILL from inside its own pid namespace).
# The kubelet serves a container's log before its status update carries the container's
# ID to the apiserver (CI, 2026-12-01: "worker 1 run 1" logged, no ID yet), so the ID is
# polled for, as is containerd's task.
kill_trainer() {
  local cid="" node pid="" end=$(( $(date +%s) + 30 ))
  while [ "$(date +%s)" -lt "$end" ]; do
    cid=$(kn get pod "$1" -o 'jsonpath={.status.containerStatuses[?(@.name=="trainer")].containerID}' 2>/dev/null)
    cid=${cid#*://}
    [ -n "$cid" ] && break
    sleep 0.25
  done
  [ -n "$cid" ] || { echo "no container ID for $1 in the pod's status within 30 s"; return 1; }
  if [ "$PROVIDER" = full ]; then
    containerd_address
    end=$(( $(date +%s) + 30 ))
    while [ "$(date +%s)" -lt "$end" ]; do
      pid=$(ctr --address "${KT_CONTAINERD_ADDRESS:?}" -n k8s.io task ls 2>/dev/null |
            awk -v c="$cid" '$1 == c {print $2}')
      [ -n "$pid" ] && break
      sleep 0.25
    done
    [ -n "$pid" ] || { echo "no task $cid in containerd within 30 s"; return 1; }
    kill -KILL "$pid"
  elif [ "$PROVIDER" = kind ]; then
    node=$(kn get pod "$1" -o 'jsonpath={.spec.nodeName}')
    # shellcheck disable=SC2016
    docker exec "$node" sh -c 'kill -KILL "$(crictl inspect -o go-template --template "{{.info.pid}}" "$1")"' sh "$cid"
  else
    echo "unknown KT_PROVIDER $PROVIDER"; return 1
  fi
}
tfconfig() {
  kn get pod "$1" -o 'jsonpath={.spec.containers[?(@.name=="trainer")].env[?(@.name=="TF_CONFIG")].value}'
}
# wait_event JOB TEXT SECONDS: true when an event of the job contains TEXT.
wait_event() {
  local end=$(( $(date +%s) + $3 ))
  while [ "$(date +%s)" -lt "$end" ]; do
    kn get events --field-selector "involvedObject.name=$1" -o 'jsonpath={range .items[*]}{.message}{"\n"}{end}' 2>/dev/null |
      grep -qF "$2" && return 0
    sleep 1
  done
  return 1
}
canon() { jq -cS . 2>/dev/null <<<"$1"; }

# --- users' TensorFlow programs (examples/tensorflow in KT_TF_IMAGE) ---------------------
# tfjob NAME [YAML...]: applies a TrainingJob running the image's examples with the claim;
# extra top-level spec keys (indented by two) follow as arguments, each one line.
tfjob() {
  local name=$1; shift
  manifest "$name" "  image: $TF_IMAGE
  checkpoint: {claimName: ckpt, path: /checkpoints}" "$@" | kn apply -f - 2>&1
}
# tf_example FILE ARGS [YAML...]: applies examples/FILE as documented, in the suite's
# namespace and image, with the job's `args:` line replaced by ARGS (shorter, for speed)
# and extra top-level spec keys appended (indented by two), each one line.
tf_example() {
  local file=$1 args=$2; shift 2
  {
    sed -e "s|^  name: \(.*\)|  name: \1\n  namespace: $NS|" -e "s|^  args: .*|  args: $args|" \
        -e "s|^  image: kubetrain/tensorflow:.*|  image: $TF_IMAGE|" "examples/$file"
    for l in "$@"; do echo "  $l"; done
  } | kn apply -f - 2>&1
}
# tf_skipped SCENARIO: true (after a SKIP line) when the suite has no TensorFlow image.
tf_skipped() {
  [ -n "$TF_IMAGE" ] && return 1
  tap_skip "$1: users' TensorFlow programs" "no TensorFlow image (KT_TF_IMAGE; make image-tensorflow)"
  RESULTS+=("$(printf '%-10s %-5s %6ss' "$1" skip 0)")
}
# tf_cluster JOB ROLE:COUNT...: the "cluster" object of TF_CONFIG for the job's pods.
tf_cluster() {
  local j=$1 rc role n i sep out="" comma=""; shift
  for rc in "$@"; do
    role=${rc%%:*} n=${rc#*:} sep=""
    out+="$comma\"$role\":["
    for ((i = 0; i < n; i++)); do out+="$sep\"$j-$role-$i.$j-worker.$NS.svc:2222\""; sep=,; done
    out+="]" comma=,
  done
  echo "{$out}"
}
# tf_check_config POD TYPE INDEX CLUSTER: the pod's TF_CONFIG is {"cluster": CLUSTER,
# "task": {"type": TYPE, "index": INDEX}}, compared as JSON.
tf_check_config() {
  local want got
  want="{\"cluster\":$4,\"task\":{\"type\":\"$2\",\"index\":$3}}"
  got=$(tfconfig "$1")
  if [ -n "$got" ] && [ "$(canon "$got")" = "$(canon "$want")" ]; then ok "$1 TF_CONFIG is $got"
  else fail "$1 TF_CONFIG" "want $want"$'\n'"got  $got"; fi
}
# tf_logs POD: the pod's log without TensorFlow's C++ and gRPC chatter, for reports.
tf_logs() {
  kn logs "$1" -c trainer 2>&1 | grep -vE '^[IWE][0-9]{4} |^WARNING: All log|retracing' | tail -n 12
}

# ns_setup: a fresh namespace $NS (one left by an earlier run goes first) with the jobs'
# checkpoint claim, examples/pvc.yaml; says what failed.
ns_setup() {
  local out
  k delete namespace "$NS" --ignore-not-found --wait --timeout 120s >/dev/null 2>&1
  out=$(k create namespace "$NS" 2>&1) || { echo "$out"; return 1; }
  for _ in $(seq 60); do kn get serviceaccount default >/dev/null 2>&1 && break; sleep 0.5; done
  out=$(kn apply -f examples/pvc.yaml 2>&1) || { echo "$out"; return 1; }
}

# --- scenarios -----------------------------------------------------------------------------
s_install() {
  begin install
  # A rerun on the same cluster starts clean: the release and the jobs' namespace go first.
  "$HELM" status "$REL" -n "$REL_NS" >/dev/null 2>&1 && "$HELM" uninstall "$REL" -n "$REL_NS" --wait >/dev/null 2>&1
  k delete namespace "$NS" --ignore-not-found --wait --timeout 120s >/dev/null 2>&1
  local or=${OP_IMAGE%:*} ot=${OP_IMAGE##*:} tr=${TR_IMAGE%:*} tt=${TR_IMAGE##*:} out
  # A restart backoff of 1 s keeps the application-failure scenarios short.
  if out=$("$HELM" install "$REL" charts/kubetrain -n "$REL_NS" --create-namespace \
       --set image.repository="$or" --set image.tag="$ot" --set image.pullPolicy=IfNotPresent \
       --set trainerImage.repository="$tr" --set trainerImage.tag="$tt" \
       --set operator.restartBackoff.baseSeconds=1 --wait --timeout 180s 2>&1); then
    ok "helm install $REL charts/kubetrain ($OP_IMAGE, trainer $TR_IMAGE)"
  else fail "helm install" "$out"; end; return; fi
  check "operator Deployment available" \
    "$(k -n "$REL_NS" get deploy -l "app.kubernetes.io/instance=$REL" -o 'jsonpath={.items[0].status.availableReplicas}')" 1
  check "CRD trainingjobs.kubetrain.dev established" \
    "$(k get crd trainingjobs.kubetrain.dev -o 'jsonpath={.status.conditions[?(@.type=="Established")].status}')" True
  # The operator acts once it leads (leaderElection.enabled defaults to true); a lease
  # left by an earlier operator that did not release it must expire first.
  local op holder="" end=$(( $(date +%s) + 60 )) tl; tl=$(now)
  op=$(k -n "$REL_NS" get pods -l "app.kubernetes.io/instance=$REL" -o 'jsonpath={.items[0].metadata.name}')
  while [ "$(date +%s)" -lt "$end" ]; do
    holder=$(k -n "$REL_NS" get lease -o 'jsonpath={.items[*].spec.holderIdentity}' 2>/dev/null)
    [[ " $holder " == *" $op "* ]] && break
    sleep 0.5
  done
  if [[ " $holder " == *" $op "* ]]; then ok "operator $op holds its leader lease ($(since "$tl")s after Ready)"
  else fail "operator $op holds its leader lease" "holder: ${holder:-<none>}"; fi
  if out=$(ns_setup); then ok "namespace $NS with examples/pvc.yaml applied"
  else fail "namespace $NS with examples/pvc.yaml applied" "$out"; fi
  end
}

s_invalid() {
  begin invalid
  local out
  if ! out=$(job bad-workers | sed 's/^  workers: 2$/  workers: 0/' | kn apply -f - 2>&1) &&
     grep -q 'spec.workers' <<<"$out"; then ok "workers: 0 refused by kubectl apply naming spec.workers"
  else fail "workers: 0 refused naming spec.workers" "$out"; fi
  if ! out=$(apply_job bad-policy "restartPolicy: Sometimes") && grep -q 'spec.restartPolicy' <<<"$out"; then ok "restartPolicy: Sometimes refused naming spec.restartPolicy"
  else fail "restartPolicy: Sometimes refused naming spec.restartPolicy" "$out"; fi
  check "nothing was created" "$(kn get tj -o name 2>&1 | grep -c bad-)" 0
  end
}

BASIC_HASH=""
s_basic() {
  begin basic
  local t0 out i want got line t_rdv=() ts
  t0=$(now)
  # the chief also exports the model (spec.training.export), named in status.result
  if out=$(job mnist | sed 's/^    perWorkerBatchSize: 64$/&\n    export: model.keras/' |
           kn apply -f - 2>&1); then
    ok "job mnist applied (examples/job.yaml, 2 epochs x 30 steps, export model.keras)"
  else fail "job mnist applied" "$out"; end; return; fi
  # From apply to each worker's "rendezvous done" line, polled while it runs.
  local done0=0 done1=0 end=$(( $(date +%s) + 120 ))
  while [ $((done0 * done1)) = 0 ] && [ "$(date +%s)" -lt "$end" ]; do
    for i in 0 1; do
      eval "[ \$done$i = 1 ]" && continue
      # The kubelet's timestamp of the line, not when this loop saw it.
      ts=$(kn logs --timestamps "mnist-worker-$i" -c trainer 2>/dev/null | grep -m1 'rendezvous done' | cut -d' ' -f1)
      if [ -n "$ts" ]; then
        t_rdv[i]=$(awk -v a="$t0" -v b="$(date -d "$ts" +%s.%N)" 'BEGIN{printf "%.1f", b - a}')
        eval "done$i=1"
      fi
    done
    sleep 0.25
  done
  if [ $((done0 * done1)) = 1 ]; then
    ts=$(printf '%s\n' "${t_rdv[@]}" | sort -g | tail -n 1)
    ok "both workers past rendezvous ${ts}s after apply (worker-0 ${t_rdv[0]}s, worker-1 ${t_rdv[1]}s)"
    MEASURED+=("apply -> 2 workers past rendezvous: ${ts} s (target <= 15 s)")
  else fail "both workers past rendezvous" "$(explain mnist)"; fi
  for i in 0 1; do
    want="{\"cluster\":{\"worker\":[\"mnist-worker-0.mnist-worker.$NS.svc:2222\",\"mnist-worker-1.mnist-worker.$NS.svc:2222\"]},\"task\":{\"type\":\"worker\",\"index\":$i}}"
    got=$(tfconfig "mnist-worker-$i")
    if [ "$(canon "$got")" = "$(canon "$want")" ] && [ -n "$got" ]; then ok "mnist-worker-$i TF_CONFIG is $got"
    else fail "mnist-worker-$i TF_CONFIG" "want $want"$'\n'"got  $got"; fi
  done
  if wait_phase mnist "$JOB_TIMEOUT" Succeeded; then ok "job Succeeded ($(since "$t0")s)"
  else fail "job Succeeded" "$(explain mnist)"; end; return; fi
  local res; res=$(field mnist '{.status.result}')
  if jq -e '(.accuracy | type == "number") and .accuracy > 0 and .accuracy <= 1 and .step == 60' >/dev/null <<<"$res"; then
    ok "status.result has the accuracy: $res"
  else fail "status.result has the accuracy and step 60" "$res"; fi
  BASIC_HASH=$(jq -r '.weightsSha256 // empty' <<<"$res")
  if [[ $BASIC_HASH =~ ^[0-9a-f]{64}$ ]]; then ok "status.result.weightsSha256 is a SHA-256"
  else fail "status.result.weightsSha256 is a SHA-256" "$res"; fi
  check "status.result.export names the chief's export" "$(jq -r '.export // empty' <<<"$res")" \
    /checkpoints/mnist/model.keras
  check "restarts application/disruption 0/0" "$(restarts mnist)" "0/0"
  check "one Service mnist-worker, headless" "$(kn get svc mnist-worker -o 'jsonpath={.spec.clusterIP}')" None
  # Fine-tuning from that export (spec.training.initialWeights, relative to the claim's
  # mount): the new job's first weights are exactly those mnist ended with.
  if out=$(job mnist-ft | sed -e 's/^    perWorkerBatchSize: 64$/&\n    initialWeights: mnist\/model.keras/' \
             -e 's/^    epochs: 2$/    epochs: 1/' -e 's/^    stepsPerEpoch: 30$/    stepsPerEpoch: 10/' |
           kn apply -f - 2>&1); then
    ok "job mnist-ft applied (initialWeights mnist/model.keras, 10 steps)"
  else fail "job mnist-ft applied" "$out"; end; return; fi
  if line=$(wait_log mnist-ft-worker-0 'initial weights verified' 120); then
    check "mnist-ft starts from mnist's final weights (sha256)" "${line##* }" "$BASIC_HASH"
  else fail "mnist-ft logs its initial weights" "$(explain mnist-ft)"; fi
  if wait_phase mnist-ft "$JOB_TIMEOUT" Succeeded; then ok "job mnist-ft Succeeded"
  else fail "job mnist-ft Succeeded" "$(explain mnist-ft)"; fi
  end
}

s_preempt() {
  begin preempt
  local t0 out line h h0
  t0=$(now)
  if out=$(apply_job mnist-pre "recoveryTimeoutSeconds: 0"); then
    ok "job mnist-pre applied (the same spec as mnist, recoveryTimeoutSeconds 0: group restarts)"
  else fail "job mnist-pre applied" "$out"; end; return; fi
  if line=$(chief_ckpt mnist-pre 180); then ok "chief saved a checkpoint: ${line##*] }"
  else fail "chief saved a checkpoint" "$(explain mnist-pre)"; end; return; fi
  h0=$(kn logs mnist-pre-worker-0 -c trainer 2>/dev/null | grep -m1 'initial weights verified' | awk '{print $NF}')
  if out=$(kn delete pod mnist-pre-worker-1 --wait=false 2>&1); then ok "worker 1 deleted mid-training"
  else fail "worker 1 deleted" "$out"; fi
  # The restarted workers' logs are read while they run: a worker still running when the
  # chief completes is deleted (cleanPodPolicy Running), and its log with it. Every rank
  # restores the newest checkpoint; only the chief logs "resuming from". A worker shows
  # its own restore by its "initial weights verified" hash (after the chief's broadcast)
  # being the chief's resumed one, not attempt 0's, with no warning that its own weights
  # differed from the chief's.
  local i l0="" h1="" w1="" hc="" log1 end=$(( $(date +%s) + JOB_TIMEOUT ))
  while [ "$(date +%s)" -lt "$end" ] && { [ -z "$l0" ] || [ -z "$h1" ]; }; do
    [ -n "$l0" ] || l0=$(kn logs mnist-pre-worker-0 -c trainer 2>/dev/null | grep -E -m1 'resuming from .*global step [1-9]')
    if [ -z "$h1" ]; then
      log1=$(kn logs mnist-pre-worker-1 -c trainer 2>/dev/null)
      h=$(grep -m1 'initial weights verified' <<<"$log1" | awk '{print $NF}')
      if [ -n "$h" ] && [ "$h" != "$h0" ]; then h1=$h; w1=$(grep 'differed from the chief' <<<"$log1"); fi
    fi
    case "$(phase mnist-pre)" in Succeeded|Failed) break ;; esac
    sleep 0.5
  done
  hc=$(kn logs mnist-pre-worker-0 -c trainer 2>/dev/null | sed -n '/resuming from/,$p' |
       grep -m1 'initial weights verified' | awk '{print $NF}')
  if [ -n "$l0" ]; then ok "the chief resumed from a checkpoint above step 0: ${l0##*]: }"
  else fail "the chief resumed from a checkpoint above step 0" "$(explain mnist-pre)"; fi
  if [ -n "$h1" ] && [ "$h1" = "$hc" ] && [ -z "$w1" ]; then
    ok "worker 1 restored the same checkpoint (initial weights ${h1:0:12}... = the chief's resumed ones, not attempt 0's ${h0:0:12}...)"
  else fail "worker 1 restored the same checkpoint" "worker 1: ${h1:-<none>} ${w1}"$'\n'"chief after resume: ${hc:-<none>}, attempt 0: $h0"; fi
  if wait_phase mnist-pre "$JOB_TIMEOUT" Succeeded; then ok "job Succeeded after the preemption ($(since "$t0")s)"
  else fail "job Succeeded after the preemption" "$(explain mnist-pre)"; end; return; fi
  check "restarts application/disruption 0/1" "$(restarts mnist-pre)" "0/1"
  h=$(field mnist-pre '{.status.result.weightsSha256}')
  if [ -n "$BASIC_HASH" ] && [ "$h" = "$BASIC_HASH" ]; then
    ok "final weights sha256 equals the uninterrupted run's (${h:0:16}...)"
  else fail "final weights sha256 equals the uninterrupted run's" "preempted $h"$'\n'"uninterrupted ${BASIC_HASH:-<basic did not finish>}"; fi
  end
}

s_kill137() {
  begin kill137
  local t0 out line code=""
  t0=$(now)
  if out=$(apply_job mnist-kill "restartPolicy: ExitCode" "recoveryTimeoutSeconds: 0"); then
    ok "job mnist-kill applied (restartPolicy ExitCode, group restarts)"
  else fail "job mnist-kill applied" "$out"; end; return; fi
  if line=$(chief_ckpt mnist-kill 180); then ok "chief saved a checkpoint"
  else fail "chief saved a checkpoint" "$(explain mnist-kill)"; end; return; fi
  if out=$(kill_trainer mnist-kill-worker-1 2>&1); then ok "SIGKILL to worker 1's trainer process"
  else fail "SIGKILL to worker 1's trainer process" "$out"; fi
  local end=$(( $(date +%s) + 30 ))
  while [ "$(date +%s)" -lt "$end" ] && [ -z "$code" ]; do
    code=$(kn get pod mnist-kill-worker-1 -o 'jsonpath={.status.containerStatuses[?(@.name=="trainer")].state.terminated.exitCode}' 2>/dev/null)
    sleep 0.25
  done
  # The pod may be gone before it is seen; the operator's restart event names the code.
  if [ "$code" = 137 ]; then ok "worker 1's container terminated with exit code 137"
  elif wait_event mnist-kill 'code 137' 30; then ok "worker 1 exited with code 137 (the operator's restart event)"
  else fail "worker 1's container terminated with exit code 137" "pod: ${code:-<gone>}"$'\n'"$(explain mnist-kill)"; fi
  if wait_phase mnist-kill "$JOB_TIMEOUT" Succeeded; then ok "job Succeeded after the group restart ($(since "$t0")s)"
  else fail "job Succeeded after the group restart" "$(explain mnist-kill)"; end; return; fi
  check "restarts application/disruption 1/0" "$(restarts mnist-kill)" "1/0"
  end
}

# uid POD: the pod's uid, empty when it does not exist.
uid() { kn get pod "$1" -o 'jsonpath={.metadata.uid}' 2>/dev/null; }
# resume_line JOB POD OLD_UID: the first "resuming at epoch" line of the pod named POD
# once its uid is not OLD_UID (the group restarted), read while it runs (cleanPodPolicy
# may delete it after the job), until the job ends or JOB_TIMEOUT; empty when none.
resume_line() {
  local end=$(( $(date +%s) + JOB_TIMEOUT )) res=""
  while [ "$(date +%s)" -lt "$end" ] && [ -z "$res" ]; do
    if [ "$(uid "$2")" != "$3" ]; then
      res=$(kn logs "$2" -c trainer 2>/dev/null | grep -m1 'resuming at epoch')
    fi
    case "$(phase "$1")" in Succeeded|Failed) break ;; esac
    sleep 1
  done
  echo "$res"
}
# wait_new_log POD OLD_UID REGEX SECONDS: the first line matching REGEX in the log of a
# pod named POD whose uid is not OLD_UID (its replacement).
wait_new_log() {
  local end=$(( $(date +%s) + $4 )) u line
  while [ "$(date +%s)" -lt "$end" ]; do
    u=$(uid "$1")
    if [ -n "$u" ] && [ "$u" != "$2" ] &&
       line=$(kn logs "$1" -c trainer 2>/dev/null | grep -E -m1 "$3"); then
      echo "$line"; return 0
    fi
    sleep 0.5
  done
  return 1
}
# What a live replacement logs once it has the state from a survivor.
JOINED='joined generation [0-9]+: state of step [0-9]+ received from rank [0-9]+, no checkpoint read'
# trainer_arg POD FLAG: the value the pod's trainer is given for FLAG, or <absent>.
trainer_arg() {
  kn get pod "$1" -o 'jsonpath={.spec.containers[?(@.name=="trainer")].args}' |
    jq -r --arg f "$2" 'index($f) as $i | if $i then .[$i + 1] else "<absent>" end' 2>&1
}
# check_same_weights JOB REF: JOB's final weights hash is that of REF, the same job run
# undisturbed beside it (waited for).
check_same_weights() {
  local h href=""
  if wait_phase "$2" "$JOB_TIMEOUT" Succeeded; then href=$(field "$2" '{.status.result.weightsSha256}'); fi
  h=$(field "$1" '{.status.result.weightsSha256}')
  if [ -n "$href" ] && [ "$h" = "$href" ]; then
    ok "final weights sha256 equals the undisturbed $2's (${h:0:16}...)"
  else fail "final weights sha256 equals the undisturbed run's" "recovered $h"$'\n'"undisturbed ${href:-<$2 did not succeed>}"; fi
}

s_recovery() {
  begin recovery
  local t0 out line u0 u1 u1b rep att
  t0=$(now)
  # 2 x 150 steps, so that both losses (at the first checkpoint and a few steps later)
  # fall inside the training on a fast machine; the same job runs beside it undisturbed
  # for the reference hash.
  local j; for j in mnist-rec mnist-rec-ref; do
    if out=$(job "$j" | sed 's/stepsPerEpoch: 30/stepsPerEpoch: 150/' | kn apply -f - 2>&1); then
      ok "job $j applied (2 epochs x 150 steps; recoveryTimeoutSeconds defaults to 120)"
    else fail "job $j applied" "$out"; end; return; fi
  done
  if line=$(chief_ckpt mnist-rec 180); then ok "chief saved a checkpoint: ${line##*] }"
  else fail "chief saved a checkpoint" "$(explain mnist-rec)"; end; return; fi
  check "the trainer is told --recovery-timeout 120" \
    "$(trainer_arg mnist-rec-worker-0 --recovery-timeout)" 120
  u0=$(uid mnist-rec-worker-0); u1=$(uid mnist-rec-worker-1)
  # 1. A worker's trainer SIGKILLed: its pod fails with 137 and is replaced alone; the
  # chief stays, hands the replacement its state, and nobody reads a checkpoint.
  if out=$(kill_trainer mnist-rec-worker-1 2>&1); then ok "SIGKILL to worker 1's trainer process"
  else fail "SIGKILL to worker 1's trainer process" "$out"; end; return; fi
  if line=$(wait_new_log mnist-rec-worker-1 "$u1" "$JOINED" 90); then
    ok "worker 1's replacement joined from the chief: ${line##*]: }"
  else fail "worker 1 replaced live" "$(explain mnist-rec)"; end; return; fi
  check "the chief's pod is the same (uid)" "$(uid mnist-rec-worker-0)" "$u0"
  check "the chief's container never restarted" \
    "$(kn get pod mnist-rec-worker-0 -o 'jsonpath={.status.containerStatuses[?(@.name=="trainer")].restartCount}')" 0
  if line=$(wait_log mnist-rec-worker-0 'live recovery: generation 2 formed' 10); then
    ok "the chief logs the new ring: ${line##*]: }"
  else fail "the chief logs generation 2" "$(kn logs mnist-rec-worker-0 -c trainer 2>&1 | tail -n 8)"; fi
  u1b=$(uid mnist-rec-worker-1)
  # 2. The chief's pod deleted (SIGTERM): it leaves after its step, the worker keeps the
  # state and hands it to the new chief.
  if out=$(kn delete pod mnist-rec-worker-0 --wait=false 2>&1); then ok "the chief's pod deleted"
  else fail "the chief's pod deleted" "$out"; end; return; fi
  if line=$(wait_new_log mnist-rec-worker-0 "$u0" "$JOINED" 120); then
    ok "the chief's replacement joined from worker 1: ${line##*]: }"
  else fail "the chief replaced live" "$(explain mnist-rec)"; end; return; fi
  check "worker 1's pod is the same (uid)" "$(uid mnist-rec-worker-1)" "$u1b"
  if wait_phase mnist-rec "$JOB_TIMEOUT" Succeeded; then ok "job Succeeded ($(since "$t0")s)"
  else fail "job Succeeded" "$(explain mnist-rec)"; end; return; fi
  att=$(field mnist-rec '{.status.attempt}')
  check "status.attempt unchanged (no group restart)" "${att:-0}" 0
  rep=$(field mnist-rec '{.status.restarts.replaced}')
  check "restarts.replaced 2" "${rep:-0}" 2
  check "restarts application/disruption 1/1 (the SIGKILL, the deletion)" "$(restarts mnist-rec)" "1/1"
  if wait_event mnist-rec 'mnist-rec-worker-1 replaced; live recovery' 10; then
    ok "a WorkerReplaced event names worker 1"
  else fail "a WorkerReplaced event names worker 1" "$(kn get events --field-selector involvedObject.name=mnist-rec 2>&1 | tail -n 5)"; fi
  check_same_weights mnist-rec mnist-rec-ref
  end
}

# 20 trials of live recovery (e2e/kill_trials.py): a random worker's trainer, the chief
# included, SIGKILLed at a random step; each job must end with only that pod replaced, no
# checkpoint read and the undisturbed run's weights. KT_KILL_TRIALS (20) trials,
# KT_KILL_TRIALS_SEED repeats an earlier run's victims and steps.
s_killtrials() {
  begin killtrials
  if [ "$PROVIDER" != full ]; then
    tap_skip "killtrials" "kill_trials.py SIGKILLs through this machine's containerd (KT_PROVIDER=full)"
    end; return
  fi
  containerd_address
  # kill_trials.py prints "ok DESC", or "not ok DESC" and its reasons as "# " lines.
  local l
  while IFS= read -r l; do
    case $l in
      "ok "*) ok "${l#ok }" ;;
      "not ok "*) fail "${l#not ok }" ;;
      "#"*) echo "$l" ;;
      *) echo "# $l" ;;
    esac
  done < <(python3 e2e/kill_trials.py --kubectl "$KUBECTL" --namespace "$NS" \
             --containerd "$KT_CONTAINERD_ADDRESS" --trials "${KT_KILL_TRIALS:-20}" \
             ${KT_KILL_TRIALS_SEED:+--seed "$KT_KILL_TRIALS_SEED"} 2>&1)
  end
}

s_badmodel() {
  begin badmodel
  local out msg term
  # A Conv2D after a Flatten: the operator cannot know it is wrong, the trainer can (exit 3).
  if out=$(job mnist-bad "restartPolicy: ExitCode" |
        sed 's/^  model: tutorial-cnn$/  model: {layers: [{type: Flatten}, {type: Conv2D, filters: 8, kernel_size: 3}]}/' |
        kn apply -f - 2>&1); then ok "job mnist-bad applied (Conv2D after Flatten, restartPolicy ExitCode)"
  else fail "job mnist-bad applied" "$out"; end; return; fi
  if wait_phase mnist-bad 180 Failed; then ok "job Failed"
  else fail "job Failed" "$(explain mnist-bad)"; end; return; fi
  msg=$(field mnist-bad '{.status.conditions[?(@.type=="Failed")].message}')
  term=$(kn get pods -l kubetrain.dev/job-name=mnist-bad \
           -o 'jsonpath={.items[*].status.containerStatuses[?(@.name=="trainer")].state.terminated.message}' 2>/dev/null |
         jq -r '.error // empty' 2>/dev/null | head -n 1)
  if grep -q 'Conv2D after' <<<"$msg" && { [ -z "$term" ] || [[ $msg == *"$term"* ]]; }; then
    ok "Failed condition carries the trainer's message: $msg"
  else fail "Failed condition carries the trainer's message" "condition: $msg"$'\n'"trainer: $term"; fi
  check "no restart (restarts 0/0)" "$(restarts mnist-bad)" "0/0"
  end
}

# s3: a job whose TFRecord shards are objects (issue 45; docs/design.md "Object storage"),
# as examples/s3-tfrecord.yaml runs it: SeaweedFS's S3 gateway on this machine at the
# node's address, which the pods reach (trainer/tests/remote/seaweedfs.sh; full only),
# 4 shards of 512 Fashion-MNIST PNG tf.train.Examples written by TensorFlow
# (bench/pyvenv.sh's venv-tf) in a bucket, the keys in a Secret named by
# spec.dataset.credentialsSecret. Each run makes its own keys, so that finding one in a
# log, a status or an event can only be a leak. A second job, beside the first, whose
# Secret holds a wrong secret key: the 403 fails it at once (exit 3 under ExitCode).
S3_SHARDS=4 S3_PER_SHARD=512
s_s3() {
  begin s3
  if [ "$PROVIDER" != full ]; then
    tap_skip "$SCEN: a job reading s3:// shards" "KT_PROVIDER=$PROVIDER: only the full\
 cluster's pods reach this machine (the node's address), where the S3 gateway runs"
    end; return
  fi
  local dir; dir=$(mktemp -d)
  WEED_PID=
  s3_run "$dir"
  weed_stop
  rm -rf "$dir" "$BATCH_DIR/s3.weed.pid"
  end
}
# s3_job NAME SECRET [YAML...]: a TrainingJob of 2 workers, 2 x 20 steps of tutorial-cnn,
# on the bucket's shards with the credentials of Secret SECRET; extra top-level spec keys
# follow, each one line.
s3_job() {
  local name=$1 secret=$2; shift 2
  manifest "$name" "  workers: 2
  model: tutorial-cnn
  dataset:
    source: tfrecord:s3://$S3_SRC
    credentialsSecret: $secret
  training:
    epochs: 2
    stepsPerEpoch: 20
    perWorkerBatchSize: 64
    optimizer: {name: sgd, learningRate: 0.001}" "$@" | kn apply -f - 2>&1
}
# s3_secret NAME KEY SECRET: examples/s3-tfrecord.yaml's Secret, for the gateway.
s3_secret() {
  kn apply -f - 2>&1 <<YAML
apiVersion: v1
kind: Secret
metadata: {name: $1}
type: Opaque
stringData:
  AWS_ACCESS_KEY_ID: $2
  AWS_SECRET_ACCESS_KEY: $3
  AWS_REGION: us-east-1
  AWS_ENDPOINT_URL: http://$S3_IP:$WEED_PORT
YAML
}
# s3_run DIR: the scenario's body, its files in DIR; s_s3 stops the gateway after it.
s3_run() {
  local dir=$1 py out f i line n msg want codes att leaks ref t0 key secret wrong
  local bucket=kt-e2e j=s3-fmnist jb=s3-badkey env=${KT_RUN:-e2e/cluster/.run}/env
  key=KT$(od -An -N6 -tx1 /dev/urandom | tr -d ' \n' | tr a-f A-F)
  secret=kt-e2e-$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')
  wrong=kt-e2e-wrong-$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')
  # shellcheck source=/dev/null # the cluster's variables, written by e2e/cluster/up.sh
  S3_IP=${KT_NODE_IP:-$(. "$env" 2>/dev/null && echo "${KT_NODE_IP:-}")}
  S3_SRC="$bucket/fmnist/train-*"
  [ -n "$S3_IP" ] || { fail "the node's address (KT_NODE_IP in $env)"; return; }

  # The shards, as TFDS writes them: feature "image" a PNG, "label" an int64.
  py=${KT_CACHE:-$HOME/.cache/kubetrain}/venv-tf/bin/python
  if [ ! -x "$py" ] && ! py=$(bash bench/pyvenv.sh venv-tf 2>&1); then
    fail "TensorFlow's venv (bench/pyvenv.sh venv-tf)" "$py"; return
  fi
  mkdir "$dir/shards"
  if out=$(TF_CPP_MIN_LOG_LEVEL=3 "$py" - /usr/share/datasets/fashion-mnist "$dir/shards" \
             "$S3_SHARDS" "$S3_PER_SHARD" 2>&1 <<'PY'
import gzip, sys
import numpy as np
import tensorflow as tf
src, out, shards, per = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
with gzip.open(f"{src}/train-images-idx3-ubyte.gz") as f:
    x = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 28, 28, 1)
with gzip.open(f"{src}/train-labels-idx1-ubyte.gz") as f:
    y = np.frombuffer(f.read(), np.uint8, offset=8)
for s in range(shards):
    with tf.io.TFRecordWriter(f"{out}/train-{s:05d}-of-{shards:05d}") as w:
        for i in range(s * per, (s + 1) * per):
            w.write(tf.train.Example(features=tf.train.Features(feature={
                "image": tf.train.Feature(bytes_list=tf.train.BytesList(
                    value=[tf.io.encode_png(x[i]).numpy()])),
                "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[int(y[i])]))}))
                .SerializeToString())
PY
  ); then ok "TensorFlow wrote $S3_SHARDS shards of $S3_PER_SHARD PNG examples"
  else fail "TensorFlow writes the shards" "$(tail -n 5 <<<"$out")"; return; fi

  # The gateway on the node's address (a pod's route to this machine), one identity.
  if ! WEED_IP=$S3_IP weed_start "$dir/weed" "$key" "$secret" 2>"$dir/weed-start.err"; then
    fail "SeaweedFS's S3 gateway starts on $S3_IP" "$(cat "$dir/weed-start.err")"; return
  fi
  echo "$WEED_PID" >"$BATCH_DIR/s3.weed.pid"
  ok "SeaweedFS's S3 gateway answers on $S3_IP:$WEED_PORT"
  local s3=("${WEED_CURL[@]}") url=http://$S3_IP:$WEED_PORT/$bucket
  gateway() { echo "--- the gateway's log"; tail -n "$1" "$dir/weed/weed.log"; }
  if ! out=$("${s3[@]}" -X PUT -o /dev/null "$url" 2>&1); then
    fail "bucket $bucket made" "$out"$'\n'"$(gateway 5)"; return
  fi
  for f in "$dir"/shards/*; do
    out=$("${s3[@]}" -T "$f" -o /dev/null "$url/fmnist/${f##*/}" 2>&1) ||
      { fail "upload ${f##*/}" "$out"$'\n'"$(gateway 5)"; return; }
  done
  ok "bucket $bucket holds fmnist/train-0000[0-3]-of-00004"

  t0=$(now)
  if out=$(s3_secret s3-credentials "$key" "$secret") &&
     out+=$(s3_secret s3-wrong "$key" "$wrong") &&
     out+=$(s3_job $j s3-credentials "cleanPodPolicy: None") &&
     out+=$(s3_job $jb s3-wrong "restartPolicy: ExitCode"); then
    ok "jobs $j and $jb (a wrong secret key, restartPolicy ExitCode) applied with their Secrets"
  else fail "the Secrets and jobs applied" "$out"; return; fi

  # The wrong key: S3's 403 on the listing, exit 3, a failure that is not retried.
  if wait_phase $jb 180 Failed; then ok "job $jb Failed ($(since "$t0")s)"
  else fail "job $jb Failed" "$(explain $jb)"$'\n'"$(gateway 5)"; fi
  check "$jb: Failed reason NonRetryableExitCode" \
    "$(field $jb '{.status.conditions[?(@.type=="Failed")].reason}')" NonRetryableExitCode
  msg=$(field $jb '{.status.conditions[?(@.type=="Failed")].message}')
  want="exited with code 3: s3://$S3_SRC: HTTP 403 Forbidden (SignatureDoesNotMatch): check"
  if [[ $msg == *"$want the credentials"* ]]; then
    ok "$jb: the condition names the object and the 403: $msg"
  else fail "$jb: the condition names the object and the 403" \
    "condition: $msg"$'\n'"$(explain $jb)"$'\n'"$(gateway 5)"; fi
  codes=$(kn get pods -l kubetrain.dev/job-name=$jb -o 'jsonpath={.items[*].status.containerStatuses[?(@.name=="trainer")].state.terminated.exitCode}' 2>&1)
  if [[ " $codes " == *" 3 "* ]]; then ok "$jb: a trainer exited 3 (exit codes: $codes)"
  else fail "$jb: a trainer exited 3" "exit codes: ${codes:-<none>}"$'\n'"$(explain $jb)"; fi
  # Not retried: still no restart and the same attempt a while after the failure.
  sleep 5
  att=$(field $jb '{.status.attempt}')
  check "$jb: no restart 5 s after (restarts 0/0, attempt 0)" "$(restarts $jb) ${att:-0}" "0/0 0"

  if wait_phase $j "$JOB_TIMEOUT" Succeeded; then ok "job $j Succeeded ($(since "$t0")s)"
  else fail "job $j Succeeded" "$(explain $j)"$'\n'"$(gateway 10)"; return; fi
  check "$j: status.result.step 40, restarts 0/0" \
    "$(field $j '{.status.result.step}') $(restarts $j)" "40 0/0"
  n=$((S3_SHARDS * S3_PER_SHARD))
  for i in 0 1; do
    line=$(kn logs "$j-worker-$i" -c trainer 2>&1 | grep -F -m1 "tfrecord:s3://$S3_SRC: ")
    if [[ $line == *"tfrecord:s3://$S3_SRC: $n examples, "* ]]; then
      ok "worker $i read the bucket: ${line##*]: }"
    else fail "worker $i logs its source, s3://$S3_SRC: $n examples" \
      "$(kn logs "$j-worker-$i" -c trainer 2>&1 | grep -E -m5 's3://|tfrecord|error')"$'\n'"$(
         kn logs "$j-worker-$i" -c trainer 2>&1 | tail -n 4)"$'\n'"$(gateway 5)"; fi
  done

  # The key reaches the trainer by reference, and neither secret key is in any pod's log
  # (the jobs' and the operator's), pod, TrainingJob or event.
  ref=$(kn get pod "$j-worker-0" -o 'jsonpath={.spec.containers[?(@.name=="trainer")].env[?(@.name=="AWS_SECRET_ACCESS_KEY")].valueFrom.secretKeyRef}')
  check "$j-worker-0's AWS_SECRET_ACCESS_KEY is a secretKeyRef" "$(jq -cS . <<<"$ref" 2>&1)" \
    '{"key":"AWS_SECRET_ACCESS_KEY","name":"s3-credentials"}'
  leaks=$(
    for f in $(kn get pods -o name 2>/dev/null); do kn logs "$f" --all-containers 2>&1; done
    for f in $(k -n "$REL_NS" get pods -o name 2>/dev/null); do
      k -n "$REL_NS" logs "$f" --all-containers 2>&1
    done
    kn get pods,tj,events -o yaml 2>&1
    k -n "$REL_NS" get events -o yaml 2>&1
  )
  if ! grep -qF "tfrecord:s3://$S3_SRC: " <<<"$leaks"; then
    fail "the logs read for the secret keys hold the trainers'" "$(head -n 20 <<<"$leaks")"
  elif grep -n -e "$secret" -e "$wrong" <<<"$leaks" >"$dir/leaks"; then
    fail "no secret key in a log, pod, TrainingJob or event" "$(head -c 2000 "$dir/leaks")"
  else ok "no secret key in $(wc -l <<<"$leaks") lines of logs, pods, TrainingJobs and events"; fi
}

s_operator() {
  begin operator
  local t0 out uid0 uid0b op
  t0=$(now)
  if out=$(apply_job mnist-op); then ok "job mnist-op applied"
  else fail "job mnist-op applied" "$out"; end; return; fi
  if wait_log mnist-op-worker-0 'rendezvous done' 120 >/dev/null; then ok "workers running"
  else fail "workers running" "$(explain mnist-op)"; end; return; fi
  uid0=$(kn get pod mnist-op-worker-0 -o 'jsonpath={.metadata.uid}')
  op=$(k -n "$REL_NS" get pods -l "app.kubernetes.io/instance=$REL" -o 'jsonpath={.items[0].metadata.name}')
  if out=$(k -n "$REL_NS" delete pod "$op" --wait=false 2>&1); then ok "operator pod $op deleted mid-job"
  else fail "operator pod deleted" "$out"; fi
  if wait_phase mnist-op "$JOB_TIMEOUT" Succeeded; then ok "job Succeeded ($(since "$t0")s)"
  else fail "job Succeeded" "$(explain mnist-op; k -n "$REL_NS" get pods 2>&1)"; end; return; fi
  uid0b=$(kn get pod mnist-op-worker-0 -o 'jsonpath={.metadata.uid}' 2>/dev/null)
  check "the chief is the same pod (not recreated)" "$uid0b" "$uid0"
  check "restarts application/disruption 0/0" "$(restarts mnist-op)" "0/0"
  check "one Service for the job" "$(kn get svc -l kubetrain.dev/job-name=mnist-op -o name | grep -c .)" 1
  check "one Secret for the job" "$(kn get secret -o name | grep -c '^secret/mnist-op-')" 1
  # The job can finish before the new pod's readiness probe (every 5 s) has passed and the
  # Deployment's status says so: wait for it rather than read it once.
  local n end=$(( $(date +%s) + 60 ))
  while n=$(k -n "$REL_NS" get deploy -l "app.kubernetes.io/instance=$REL" \
              -o 'jsonpath={.items[0].status.availableReplicas}' 2>/dev/null)
        [ "$n" != 1 ] && [ "$(date +%s)" -lt "$end" ]; do sleep 1; done
  check "a new operator pod is available" "$n" 1
  end
}

s_suspend() {
  begin suspend
  local t0 out n
  t0=$(now)
  if out=$(apply_job mnist-sus); then ok "job mnist-sus applied"
  else fail "job mnist-sus applied" "$out"; end; return; fi
  if chief_ckpt mnist-sus 180 >/dev/null; then ok "chief saved a checkpoint"
  else fail "chief saved a checkpoint" "$(explain mnist-sus)"; end; return; fi
  kn patch tj mnist-sus --type merge -p '{"spec":{"suspend":true}}' >/dev/null
  if wait_phase mnist-sus 60 Suspended; then ok "phase Suspended after spec.suspend=true"
  else fail "phase Suspended" "$(explain mnist-sus)"; end; return; fi
  local end=$(( $(date +%s) + 60 ))
  while [ "$(date +%s)" -lt "$end" ]; do
    n=$(kn get pods -l kubetrain.dev/job-name=mnist-sus -o name 2>/dev/null | grep -c .)
    [ "$n" = 0 ] && break; sleep 1
  done
  check "no worker pod while suspended" "$n" 0
  check "Suspended condition True" "$(field mnist-sus '{.status.conditions[?(@.type=="Suspended")].status}')" True
  kn patch tj mnist-sus --type merge -p '{"spec":{"suspend":false}}' >/dev/null
  if wait_phase mnist-sus "$JOB_TIMEOUT" Succeeded; then ok "job Succeeded after resume ($(since "$t0")s)"
  else fail "job Succeeded after resume" "$(explain mnist-sus)"; end; return; fi
  out=$(kn logs mnist-sus-worker-0 -c trainer 2>/dev/null | grep -E -m1 'resuming from .*global step [1-9]')
  if [ -n "$out" ]; then ok "the resumed chief continued from its checkpoint"
  else fail "the resumed chief continued from its checkpoint" "$(explain mnist-sus)"; fi
  check "hash equals the uninterrupted run's" "$(field mnist-sus '{.status.result.weightsSha256}')" "${BASIC_HASH:-<none>}"
  end
}

s_deadline() {
  begin deadline
  local t0 out n reason
  t0=$(now)
  if out=$(job mnist-dl "activeDeadlineSeconds: 8" |
           sed 's/stepsPerEpoch: 30/stepsPerEpoch: 100000/' | kn apply -f - 2>&1); then ok "job mnist-dl applied (activeDeadlineSeconds 8, 100000 steps)"
  else fail "job mnist-dl applied" "$out"; end; return; fi
  if wait_phase mnist-dl 120 Failed; then ok "job Failed ($(since "$t0")s after apply)"
  else fail "job Failed" "$(explain mnist-dl)"; end; return; fi
  reason=$(field mnist-dl '{.status.conditions[?(@.type=="Failed")].reason}')
  check "Failed reason DeadlineExceeded" "$reason" DeadlineExceeded
  local end=$(( $(date +%s) + 60 ))
  while [ "$(date +%s)" -lt "$end" ]; do
    n=$(kn get pods -l kubetrain.dev/job-name=mnist-dl \
          -o 'jsonpath={range .items[?(@.status.phase=="Running")]}{.metadata.name}{"\n"}{end}' 2>/dev/null | grep -c .)
    [ "$n" = 0 ] && break; sleep 1
  done
  check "no worker left running" "$n" 0
  end
}

# The tutorial's MultiWorkerMirroredStrategy program on 2 workers, with an evaluator
# that fails at once (it must not decide the job); worker 1's pod deleted in epoch 2:
# the group restarts and BackupAndRestore resumes it from the claim.
s_tfmwms() {
  tf_skipped tfmwms && return
  begin tfmwms
  local t0 out i line uid0 j=tf-mwms cl res="" sync=() s1="" s2="" last="" col restored a lost cp
  local total=120 # 3 epochs of 40 steps
  tf_prog() { field $j "{.status.progress.$1}"; }
  t0=$(now)
  if out=$(tf_example tf-mwms.yaml '[--epochs, "3", --steps-per-epoch, "40", --per-worker-batch, "32"]' \
        "evaluator: {replicas: 1, command: [python3, -c, \"raise SystemExit('evaluator: giving up on purpose')\"]}"); then
    ok "examples/tf-mwms.yaml applied ($TF_IMAGE: mwms.py on 2 workers, 40 steps an epoch) with a failing evaluator"
  else fail "job $j applied" "$out"; end; return; fi
  for i in 0 1; do
    if line=$(wait_log "$j-worker-$i" 'replicas in sync: 2;' 300); then sync[i]=$line
      ok "$j-worker-$i: TensorFlow sees 2 replicas in sync (${line%%; cluster*})"
    else fail "$j-worker-$i: TensorFlow sees 2 replicas in sync" "$(tf_logs "$j-worker-$i"; explain $j)"; fi
  done
  cl=$(tf_cluster $j worker:2)
  for i in 0 1; do tf_check_config "$j-worker-$i" worker "$i" "$cl"; done
  tf_check_config "$j-evaluator-0" evaluator 0 "$cl"
  # TensorFlow's own reading of TF_CONFIG (TFConfigClusterResolver), printed by mwms.py.
  line=${sync[0]#*cluster: }
  if [ -n "${sync[0]}" ] && [ "$(canon "$line")" = "$(canon "$cl")" ]; then
    ok "TensorFlow's cluster spec on worker 0 is the operator's: $line"
  else fail "TensorFlow's cluster spec on worker 0 is the operator's" "log: $line"$'\n'"want $cl"; fi
  # mwms.py's kubetrain ProgressCallback serves the chief's progress on the metrics port
  # that tf-mwms.yaml declares; the operator scrapes it every 10 s.
  local end=$(( $(date +%s) + 300 ))
  while [ "$(date +%s)" -lt "$end" ] && [ -z "$s1" ]; do s1=$(tf_prog step); sleep 1; done
  end=$(( $(date +%s) + 120 ))
  while [ "$(date +%s)" -lt "$end" ] && { [ -z "$s2" ] || [ "$s2" -le "$s1" ]; }; do
    s2=$(tf_prog step); sleep 1
  done
  if [ -n "$s1" ] && [ "${s2:-0}" -gt "$s1" ] && [ "$(tf_prog totalSteps)" = $total ]; then
    ok "status.progress.step grows ($s1 -> $s2 of $total, $(tf_prog percent)) from the chief's /metrics"
  else fail "status.progress.step grows" "${s1:-<none>} -> ${s2:-<none>}"$'\n'"$(explain $j)"; fi
  out=$(kn get tj $j 2>&1)
  col=$(awk 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == "PROGRESS") c = i }
    NR == 2 { print $c }' <<<"$out")
  if [[ $col =~ ^[0-9]+%$ ]]; then ok "kubectl get tj: PROGRESS $col"
  else fail "kubectl get tj prints PROGRESS as N%" "$out"; fi
  # "Epoch 2/3" is printed once every callback saw epoch 1 end: its backup is on the claim.
  uid0=$(kn get pod "$j-worker-0" -o 'jsonpath={.metadata.uid}')
  if wait_log "$j-worker-0" '^Epoch 2/3' 300 >/dev/null &&
     last=$(tf_prog step) && out=$(kn delete pod "$j-worker-1" --wait=false 2>&1); then
    ok "worker 1's pod deleted in epoch 2 (status.progress.step $last)"
  else fail "worker 1's pod deleted in epoch 2" "$out$(tf_logs "$j-worker-0")"; end; return; fi
  # The new worker 0 logs where BackupAndRestore resumed; read while it runs.
  res=$(resume_line $j "$j-worker-0" "$uid0")
  if [[ $res == *'resuming at epoch '[23]'/3'* ]]; then ok "the restarted group resumed from the claim: ${res#*mwms: }"
  else fail "the restarted group resumed from the claim at epoch 2 or 3" "${res:-no resume line}"$'\n'"$(tf_logs "$j-worker-0")"; fi
  # The first scrape of attempt 1: status.checkpoint is the backup it resumed from (the
  # restored epoch's last step, kubetrain_start_step) or a later epoch end's save, and
  # lastStepsLost what attempt 0's chief trained past it (its termination message or last
  # scrape, at least $last).
  restored=$(sed -nE 's/.*restored epoch ([0-9]+).*/\1/p' <<<"$res")
  end=$(( $(date +%s) + 120 )); a=""; lost=""
  while [ "$(date +%s)" -lt "$end" ]; do
    a=$(tf_prog attempt); lost=$(field $j '{.status.restarts.lastStepsLost}')
    [ "${a:-0}" -ge 1 ] && [ -n "$lost" ] && break
    case "$(phase $j)" in Succeeded|Failed) break ;; esac
    sleep 1
  done
  cp=$(field $j '{.status.checkpoint.step}')
  if [ -n "$restored" ] && [ "${a:-0}" -ge 1 ] && [ -n "$cp" ] && [ $((cp % 40)) = 0 ] &&
     [ "$cp" -ge $((restored * 40)) ] && [ "$cp" -le $total ]; then
    ok "attempt $a: status.checkpoint.step $cp, an epoch end's save from epoch $restored's on"
  else fail "attempt 1's status.checkpoint.step is a BackupAndRestore save (epoch ${restored:-?} x 40 or later)" \
    "attempt ${a:-<none>}, checkpoint ${cp:-<none>}"$'\n'"$(explain $j)"; fi
  if [ -n "$restored" ] && [ -n "$lost" ] && [ -n "$last" ] &&
     [ "$lost" -ge $((last - restored * 40)) ] && [ "$lost" -le 40 ]; then
    ok "restarts.lastStepsLost $lost: attempt 0 trained past step $((restored * 40)) (scraped at $last)"
  else fail "restarts.lastStepsLost is the steps past epoch ${restored:-?}'s save" \
    "lost ${lost:-<none>}, last scrape ${last:-<none>}"$'\n'"$(explain $j)"; fi
  if wait_phase $j "$JOB_TIMEOUT" Succeeded; then ok "job Succeeded ($(since "$t0")s)"
  else fail "job Succeeded" "$(explain $j)"; end; return; fi
  check "restarts application/disruption 0/1" "$(restarts $j)" "0/1"
  check "Succeeded condition: the chief (worker 0) completed" \
    "$(field $j '{.status.conditions[?(@.type=="Succeeded")].message}')" "the chief (worker 0) completed"
  check "the evaluator failed (status.roles.evaluator.failed 1) without deciding" \
    "$(field $j '{.status.roles.evaluator.failed}')" 1
  # The chief's last step: its termination message (the package's, at exit) in
  # status.result; status.progress holds the last scrape, at most that.
  check "status.result.step: the chief trained all $total steps" "$(field $j '{.status.result.step}')" $total
  line=$(tf_prog step)
  if [ -n "$line" ] && [ "$line" -ge "$s2" ] && [ "$line" -le $total ]; then
    ok "status.progress.step $line at the end (the last scrape, between $s2 and $total)"
  else fail "status.progress.step at the end in [$s2, $total]" "${line:-<none>}"; fi
  if line=$(kn logs "$j-worker-0" -c trainer 2>/dev/null | grep -m1 'mwms: done'); then
    ok "worker 0 finished training: ${line#*mwms: }"
  else fail "worker 0 finished training" "$(tf_logs "$j-worker-0")"; fi
  end
}

# cifar (issue 44): a user's Keras model as a TrainingJob. The CIFAR-shaped Conv-BatchNorm
# model (trainer/bench/cifar_keras.py's, defined there once) as Keras's model.to_json(),
# inline in spec.model, trained by 2 workers on colour images: an .npz of 32x32x3 uint8
# arrays that NumPy writes onto the job's claim (its hostPath volume on this machine:
# full only) with a fixed seed, pixelScale raw (the model rescales itself). The chief
# exports model.keras (spec.training.export); Keras 3 and tf-keras each load it from the
# claim: the layers and weight shapes of the model as built in Keras, both Kerases'
# predictions on the test images alike within 1e-5 and finite.
s_cifar() {
  begin cifar
  if [ "$PROVIDER" != full ]; then
    tap_skip "$SCEN: the CIFAR-shaped model" "writes its data onto the claim's hostPath volume (full only)"
    end; return
  fi
  local py out pv dir j=cifar tmp
  py=${KT_CACHE:-$HOME/.cache/kubetrain}/venv-tf/bin/python
  if [ ! -x "$py" ] && ! py=$(bash bench/pyvenv.sh venv-tf 2>&1); then
    fail "TensorFlow's venv (bench/pyvenv.sh venv-tf)" "$py"; end; return
  fi
  pv=$(kn get pvc ckpt -o 'jsonpath={.spec.volumeName}' 2>&1)
  dir=$(k get pv "$pv" -o 'jsonpath={.spec.hostPath.path}' 2>&1)
  if [ -d "$dir" ]; then ok "claim ckpt is volume $pv, $dir on this machine"
  else fail "claim ckpt's hostPath on this machine" "pv '$pv', path '$dir'"; end; return; fi
  tmp=$(mktemp -d)
  mkdir -p "$dir/cifar-data"
  if out=$(TF_CPP_MIN_LOG_LEVEL=3 "$py" - "$tmp/model.json" "$dir/cifar-data/cifar.npz" 2>&1 <<'PY'
import sys
import numpy as np
sys.path.insert(0, "trainer/bench")
import cifar_keras  # noqa: E402
with open(sys.argv[1], "w") as f:
    f.write(cifar_keras.build().to_json())
rng = np.random.default_rng(44)
x = rng.integers(0, 256, (1280, 32, 32, 3), dtype=np.uint8)
y = rng.integers(0, 10, 1280, dtype=np.uint8)
np.savez(sys.argv[2], x_train=x[:1024], y_train=y[:1024], x_test=x[1024:], y_test=y[1024:])
PY
  ); then ok "Keras's model.to_json() of the CIFAR-shaped model, and 1,024 + 256 colour images on the claim"
  else fail "the model's JSON and the colour images" "$(tail -n 5 <<<"$out")"; rm -rf "$tmp"; end; return; fi
  if out=$(manifest "$j" "  workers: 2
  model: $(tr -d '\n' <"$tmp/model.json")
  dataset: {source: 'npz:/checkpoints/cifar-data/cifar.npz', pixelScale: raw}
  training:
    epochs: 1
    stepsPerEpoch: 16
    perWorkerBatchSize: 32
    optimizer: {name: sgd, learningRate: 0.01}
    export: model.keras
  checkpoint: {claimName: ckpt, path: /checkpoints, everySteps: 8}" | kn apply -f - 2>&1); then
    ok "job $j applied (the model inline in spec.model, 2 workers, 16 steps of 64, export model.keras)"
  else fail "job $j applied" "$out"; rm -rf "$tmp"; end; return; fi
  if wait_phase "$j" "$JOB_TIMEOUT" Succeeded; then ok "job Succeeded"
  else fail "job Succeeded" "$(explain "$j")"; rm -rf "$tmp"; end; return; fi
  check "status.result: step 16, the export /checkpoints/$j/model.keras" \
    "$(field "$j" '{.status.result.step} {.status.result.export}')" "16 /checkpoints/$j/model.keras"
  local flavour
  for flavour in keras tf_keras; do
    if out=$(TF_CPP_MIN_LOG_LEVEL=3 "$py" - "$flavour" "$dir/$j/model.keras" \
               "$dir/cifar-data/cifar.npz" "$tmp/pred-$flavour.npy" 2>&1 <<'PY'
import importlib, sys
import numpy as np
sys.path.insert(0, "trainer/bench")
import cifar_keras  # noqa: E402
k = importlib.import_module(sys.argv[1])
m = k.models.load_model(sys.argv[2])
want = cifar_keras.build()
got_w = [tuple(w.shape) for w in m.weights]
want_w = [tuple(w.shape) for w in want.weights]
names = [type(l).__name__ for l in m.layers]
if got_w != want_w or names != [type(l).__name__ for l in want.layers]:
    sys.exit(f"loaded {names} {got_w}, built {[type(l).__name__ for l in want.layers]} {want_w}")
d = np.load(sys.argv[3])
p = m.predict(d["x_test"].astype("float32"), verbose=0)
if not np.isfinite(p).all():
    sys.exit("predictions not finite")
np.save(sys.argv[4], p)
print(f"{len(names)} layers, {len(got_w)} weights; logits of 256 test images, max |z| {abs(p).max():.3g}")
PY
    ); then ok "$flavour loads the export: $(tail -n 1 <<<"$out")"
    else fail "$flavour loads the export" "$(tail -n 5 <<<"$out")"; fi
  done
  if out=$("$py" -c 'import sys, numpy as np
a, b = np.load(sys.argv[1]), np.load(sys.argv[2])
d = float(abs(a - b).max()); print(f"{d:.2g}"); sys.exit(d > 1e-5)' "$tmp/pred-keras.npy" "$tmp/pred-tf_keras.npy" 2>&1); then
    ok "Keras 3 and tf-keras predict alike from it (max difference $out)"
  else fail "Keras 3 and tf-keras predict alike (1e-5)" "$out"; fi
  rm -rf "$tmp"
  end
}

# tfscale (issue 46; docs/design.md "Elastic jobs", TensorFlow programs): a user's
# MultiWorkerMirroredStrategy program cannot form its collective again, so `kubectl
# scale` of an elastic job running one is a group restart at the new size, from the
# program's own checkpoint. examples/tf-mwms.yaml with elastic.minWorkers 1, scaled from 2
# workers to 1 once epoch 1's backup is on the claim: the group restarts (WorkersChanged),
# worker 1 is not made again, worker 0's TF_CONFIG names one worker, TensorFlow sees one
# replica, mwms.py resumes from BackupAndRestore and the job Succeeds; a resize counts as
# neither an application nor a disruption restart.
s_tfscale() {
  tf_skipped tfscale && return
  begin tfscale
  local t0 out line res="" uid0 uid1 j=tf-mwms total=90 # 3 epochs of 30 steps
  t0=$(now)
  if out=$(tf_example tf-mwms.yaml '[--epochs, "3", --steps-per-epoch, "30", --per-worker-batch, "32"]' \
        "elastic: {minWorkers: 1}"); then
    ok "examples/tf-mwms.yaml applied with elastic.minWorkers 1 (mwms.py on 2 workers, 30 steps an epoch)"
  else fail "job $j applied" "$out"; end; return; fi
  if line=$(wait_log "$j-worker-0" 'replicas in sync: 2;' 300); then ok "TensorFlow sees 2 replicas in sync"
  else fail "TensorFlow sees 2 replicas in sync" "$(tf_logs "$j-worker-0"; explain $j)"; end; return; fi
  uid0=$(uid "$j-worker-0") uid1=$(uid "$j-worker-1")
  # "Epoch 2/3" is printed once every callback saw epoch 1 end: its backup is on the claim.
  if wait_log "$j-worker-0" '^Epoch 2/3' 300 >/dev/null &&
     out=$(kn scale "tj/$j" --replicas 1 2>&1); then ok "kubectl scale tj/$j --replicas 1 in epoch 2"
  else fail "kubectl scale tj/$j --replicas 1 in epoch 2" "$out$(tf_logs "$j-worker-0")"; end; return; fi
  if wait_event "$j" "restarting all pods: the cluster changed (spec.workers 1, chief 0, ps 0)" 60; then
    ok "a WorkersChanged event: the group restarts with the new cluster"
  else fail "the group restarts with the new cluster (WorkersChanged event)" \
    "$(kn get events --field-selector "involvedObject.name=$j" 2>&1 | tail -n 5)"$'\n'"$(explain $j)"; fi
  # The new worker 0 logs where BackupAndRestore resumed; read while it runs.
  res=$(resume_line $j "$j-worker-0" "$uid0")
  if [[ $res == *'resuming at epoch '[23]'/3'* ]]; then ok "the group of one resumed from the claim: ${res#*mwms: }"
  else fail "the group of one resumed from the claim at epoch 2 or 3" "${res:-no resume line}"$'\n'"$(tf_logs "$j-worker-0")"; fi
  tf_check_config "$j-worker-0" worker 0 "$(tf_cluster $j worker:1)"
  # Polled: one read of the log failed once while the lines were there (a warm make e2e
  # of 2026-12-01; the failure message's own read a moment later held them).
  if wait_log "$j-worker-0" 'replicas in sync: 1;' 10 >/dev/null; then
    ok "TensorFlow sees 1 replica in sync after the restart"
  else fail "TensorFlow sees 1 replica in sync after the restart" "$(tf_logs "$j-worker-0")"; fi
  if wait_phase $j "$JOB_TIMEOUT" Succeeded; then ok "job Succeeded ($(since "$t0")s)"
  else fail "job Succeeded" "$(explain $j)"; end; return; fi
  check "status.attempt 1, restarts application/disruption 0/0 (a resize is neither)" \
    "$(field $j '{.status.attempt}') $(restarts $j)" "1 0/0"
  check "worker 1 not made again (its pod of attempt 0, uid ${uid1:0:8}, gone)" "$(uid "$j-worker-1")" ""
  check "status.result.step: the chief trained all $total steps" "$(field $j '{.status.result.step}')" $total
  end
}

# The ParameterServerStrategy program: a chief coordinating 2 workers and 1 ps task,
# and the evaluator reading the chief's checkpoints. The ps pod is deleted in epoch 2;
# after the job the ps and worker pods (which never exit) are gone.
s_tfps() {
  tf_skipped tfps && return
  begin tfps
  local t0 out line res="" ev="" uid j=tf-ps cl n
  t0=$(now)
  if out=$(tf_example tf-ps.yaml '[--epochs, "3", --steps-per-epoch, "30"]'); then
    ok "examples/tf-ps.yaml applied (ps.py: chief, 2 workers, 1 ps, 30 steps an epoch; evaluator.py)"
  else fail "job $j applied" "$out"; end; return; fi
  if line=$(wait_log "$j-chief-0" 'task chief/0 \(coordinator\); workers: 2; ps: 1;' 300); then
    ok "the chief coordinates 2 workers and 1 ps: ${line#*ps: task }"
  else fail "the chief coordinates 2 workers and 1 ps" "$(tf_logs "$j-chief-0"; explain $j)"; fi
  cl=$(tf_cluster $j chief:1 worker:2 ps:1)
  tf_check_config "$j-chief-0" chief 0 "$cl"
  tf_check_config "$j-worker-1" worker 1 "$cl"
  tf_check_config "$j-ps-0" ps 0 "$cl"
  tf_check_config "$j-evaluator-0" evaluator 0 "$cl"
  uid=$(kn get pod "$j-chief-0" -o 'jsonpath={.metadata.uid}')
  # The evaluator up first (CI, 2026-12-01: on a quiet machine the whole job took 26 s and
  # its container was still being created when the chief succeeded).
  if wait_log "$j-evaluator-0" 'task evaluator/0' 300 >/dev/null &&
     wait_log "$j-chief-0" '^Epoch 2/3' 300 >/dev/null &&
     out=$(kn delete pod "$j-ps-0" --wait=false 2>&1); then ok "the ps pod deleted in epoch 2"
  else fail "the ps pod deleted in epoch 2" "$out$(tf_logs "$j-chief-0")"; end; return; fi
  local end=$(( $(date +%s) + JOB_TIMEOUT ))
  while [ "$(date +%s)" -lt "$end" ] && { [ -z "$res" ] || [ -z "$ev" ]; }; do
    if [ -z "$res" ] && [ "$(kn get pod "$j-chief-0" -o 'jsonpath={.metadata.uid}' 2>/dev/null)" != "$uid" ]; then
      res=$(kn logs "$j-chief-0" -c trainer 2>/dev/null | grep -m1 'resuming at epoch')
    fi
    [ -n "$ev" ] || ev=$(kn logs "$j-evaluator-0" -c trainer 2>/dev/null | grep -m1 'evaluator: ckpt-[0-9]* (epoch')
    case "$(phase $j)" in Succeeded|Failed) break ;; esac
    sleep 1
  done
  if [[ $res == *'resuming at epoch '[23]'/3'* ]]; then ok "the restarted chief resumed from the claim: ${res#*ps: }"
  else fail "the restarted chief resumed from the claim at epoch 2 or 3" "${res:-no resume line}"$'\n'"$(tf_logs "$j-chief-0")"; fi
  if [ -n "$ev" ]; then ok "the evaluator evaluated a checkpoint of the chief: ${ev#*evaluator: }"
  else fail "the evaluator evaluated a checkpoint" "$(tf_logs "$j-evaluator-0")"; fi
  if wait_phase $j "$JOB_TIMEOUT" Succeeded; then ok "job Succeeded ($(since "$t0")s)"
  else fail "job Succeeded" "$(explain $j)"; end; return; fi
  check "restarts application/disruption 0/1 (the ps pod's loss)" "$(restarts $j)" "0/1"
  check "Succeeded condition: the chief completed" \
    "$(field $j '{.status.conditions[?(@.type=="Succeeded")].message}')" "the chief completed"
  # The ps and worker tasks serve until stopped: the operator deletes them (a grace
  # period's wait at most).
  end=$(( $(date +%s) + 90 ))
  while n=$(kn get pods -l "kubetrain.dev/job-name=$j" \
              -o 'jsonpath={range .items[*]}{.metadata.labels.kubetrain\.dev/role}{" "}{.status.phase}{"\n"}{end}' 2>/dev/null |
            grep -cE '^(ps|worker|evaluator) (Running|Pending)')
        [ "$n" != 0 ] && [ "$(date +%s)" -lt "$end" ]; do sleep 1; done
  check "no ps, worker or evaluator pod left after the chief's success" "$n" 0
  end
}

# tfauto: a Keras program that knows nothing of kubetrain (no import of the package), run
# in kubetrain's TensorFlow image by a job that declares the metrics port, reports its
# progress through the image's automatic hook (python/src/kubetrain-auto.pth): the
# operator scrapes status.progress while it runs and reads status.result from the
# termination message the hook writes at its end. (It sleeps 50 ms a step, in a callback
# of its own, so that it lasts past a scrape or two.)
s_tfauto() {
  tf_skipped tfauto && return
  begin tfauto
  local out j=tf-auto step="" res end
  local prog='import time
import numpy as np
import tensorflow as tf
x = np.random.default_rng(0).random((2000, 8), dtype=np.float32)
y = (x.sum(axis=1) > 4).astype("int32")
model = tf.keras.Sequential([tf.keras.Input((8,)), tf.keras.layers.Dense(16, activation="relu"),
                             tf.keras.layers.Dense(2, activation="softmax")])
model.compile("sgd", "sparse_categorical_crossentropy", metrics=["accuracy"])
nap = tf.keras.callbacks.LambdaCallback(on_train_batch_end=lambda batch, logs: time.sleep(0.05))
model.fit(x, y, batch_size=20, epochs=4, callbacks=[nap], verbose=2)'
  if out=$(tfjob $j "workers: 1" "command: $(jq -cn --arg p "$prog" '["python3", "-c", $p]')" \
        "template: {spec: {containers: [{name: trainer, ports: [{name: metrics, containerPort: 9090}]}]}}"); then
    ok "job $j applied (a Keras fit() with no kubetrain in it; the metrics port declared)"
  else fail "job $j applied" "$out"; end; return; fi
  end=$(( $(date +%s) + JOB_TIMEOUT ))
  while [ "$(date +%s)" -lt "$end" ]; do
    step=$(field $j '{.status.progress.step}')
    [ -n "$step" ] && [ "$step" -gt 0 ] && break
    case "$(phase $j)" in Succeeded|Failed) break ;; esac
    sleep 1
  done
  if [ -n "$step" ] && [ "$step" -gt 0 ]; then
    ok "status.progress.step $step of $(field $j '{.status.progress.totalSteps}') while it runs, scraped from the hook's /metrics"
  else fail "status.progress while it runs" "$(tf_logs "$j-worker-0")"$'\n'"$(explain $j)"; fi
  if wait_phase $j "$JOB_TIMEOUT" Succeeded; then ok "job Succeeded"
  else fail "job Succeeded" "$(explain $j)"; end; return; fi
  res=$(field $j '{.status.result.step}')
  check "status.result.step: the hook's termination message says all 400 steps" "$res" 400
  end
}

# Users' programs that fail: one exiting 1 (a TensorFlow error) fails an ExitCode job at
# once with the traceback's exception in the condition; one SIGKILLed (137) is retried.
# The killed one is a program that waits on its first run and exits 0 on its second (a
# file per worker on the claim says which), so that the retried group's success is the
# operator's doing alone: an MWMS group on a loaded node may itself fail with exit 1
# (CI's tfexit failure of 2026-11-29: a collective aborted in the retried group), which
# ExitCode rightly does not retry. MWMS's own restart and resume is tfmwms's.
s_tfexit() {
  tf_skipped tfexit && return
  begin tfexit
  local out msg last code="" j=tf-exit1 k=tf-kill
  if out=$(tfjob $j "workers: 1" "restartPolicy: ExitCode" \
        'command: [python3, -c, "import tensorflow as tf; print(\"adding\", flush=True); tf.constant([1, 2]) + tf.constant([1, 2, 3])"]'); then
    ok "job $j applied (a program whose TensorFlow op raises, restartPolicy ExitCode)"
  else fail "job $j applied" "$out"; end; return; fi
  if wait_phase $j 300 Failed; then ok "job Failed"
  else fail "job Failed" "$(explain $j)"; end; return; fi
  check "Failed reason NonRetryableExitCode" "$(field $j '{.status.conditions[?(@.type=="Failed")].reason}')" NonRetryableExitCode
  msg=$(field $j '{.status.conditions[?(@.type=="Failed")].message}')
  last=$(kn logs "$j-worker-0" -c trainer 2>/dev/null | sed 's/[[:space:]]*$//' | grep . | tail -n 1)
  if [[ $msg == "worker 0 exited with code 1: "*"Incompatible shapes"* ]] && [ -n "$last" ] &&
     [[ $msg == *"${last:0:120}"* ]] && [[ $msg != *Traceback* ]]; then
    ok "the condition quotes the exception line: $msg"
  else fail "the condition quotes the exception line" "condition: $msg"$'\n'"last log line: $last"; fi
  check "no restart (restarts 0/0)" "$(restarts $j)" "0/0"

  local prog='import json, os, time
d = os.environ["KUBETRAIN_CHECKPOINT_DIR"]
i = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
mark = os.path.join(d, "ran-%d" % i)
again = os.path.exists(mark)
os.makedirs(d, exist_ok=True)
open(mark, "w").close()
print("worker", i, "run", 2 if again else 1, flush=True)
if not again:
    time.sleep(900)'
  if out=$(tfjob $k "workers: 2" "restartPolicy: ExitCode" \
        "command: $(jq -cn --arg p "$prog" '["python3", "-c", $p]')"); then
    ok "job $k applied (a program that waits on its first run, restartPolicy ExitCode)"
  else fail "job $k applied" "$out"; end; return; fi
  if wait_log "$k-worker-1" 'worker 1 run 1' 300 >/dev/null &&
     out=$(kill_trainer "$k-worker-1" 2>&1); then ok "SIGKILL to worker 1's python3 on its first run"
  else fail "SIGKILL to worker 1's python3" "$out"$'\n'"$(tf_logs "$k-worker-1")"; end; return; fi
  local end=$(( $(date +%s) + 30 ))
  while [ "$(date +%s)" -lt "$end" ] && [ -z "$code" ]; do
    code=$(kn get pod "$k-worker-1" -o 'jsonpath={.status.containerStatuses[?(@.name=="trainer")].state.terminated.exitCode}' 2>/dev/null)
    sleep 0.25
  done
  if [ "$code" = 137 ]; then ok "worker 1's container terminated with exit code 137"
  elif wait_event $k 'code 137' 30; then ok "worker 1 exited with code 137 (the operator's restart event)"
  else fail "worker 1's container terminated with exit code 137" "pod: ${code:-<gone>}"$'\n'"$(explain $k)"; fi
  if wait_phase $k "$JOB_TIMEOUT" Succeeded; then ok "job Succeeded after the retried group"
  else fail "job Succeeded after the retried group" "$(explain $k)"; end; return; fi
  check "restarts application/disruption 1/0" "$(restarts $k)" "1/0"
  # (The chief's pod stays after the job's success; worker 1's may be gone.)
  check "the chief's retried run was its second" "$(kn logs "$k-worker-0" -c trainer 2>&1)" \
    "worker 0 run 2"
  end
}

# gang: two jobs that do not both fit on the node, applied at once. Each worker requests
# r = 2/7 of the CPU the node has free, so three pods fit and four do not: scheduled one
# by one, the second job would get one pod placed beside the first's two and wait at the
# rendezvous; as gangs (PodGroup per attempt, docs/design.md "Gang scheduling") it gets
# none until the first job is done, and its status says why it waits.
s_gang() {
  begin gang
  local alloc used free r out first second t0 end n sched msg v gv=
  # shellcheck disable=SC2016 # jq programs
  local cpu='def m: if endswith("m") then .[:-1] | tonumber else tonumber * 1000 end;'
  # The group version the operator uses: v1beta1 (Kubernetes 1.37), else v1alpha2 (1.36).
  for v in v1beta1 v1alpha2; do
    if k get --raw "/apis/scheduling.k8s.io/$v" 2>/dev/null | grep -q '"podgroups"'; then
      gv=$v; break
    fi
  done
  if [ -z "$gv" ]; then
    tap_skip "$SCEN" "the cluster serves no PodGroups (scheduling.k8s.io/v1beta1 or v1alpha2; feature gate GenericWorkload and the runtime-config, which e2e/cluster/up.sh turns on)"
    end; return
  fi
  ok "the cluster ($(k version -o json 2>/dev/null | jq -r .serverVersion.gitVersion)) serves PodGroups in scheduling.k8s.io/$gv"
  alloc=$(k get nodes -o json | jq "$cpu"' [.items[].status.allocatable.cpu | m] | min | floor')
  used=$(k get pods -A -o json | jq "$cpu"' [.items[] | select(.status.phase != "Succeeded"
           and .status.phase != "Failed") | .spec.containers[].resources.requests.cpu // "0" | m]
           | add // 0 | floor')
  free=$((alloc - used)); r=$((free * 2 / 7))
  if [ "$r" -ge 50 ]; then ok "node: ${alloc}m allocatable, ${used}m requested; ${r}m per worker"
  else fail "room for a gang on the node" "${alloc}m allocatable, ${used}m requested"; end; return; fi
  local tmpl="template: {spec: {containers: [{name: trainer, resources: {requests: {cpu: ${r}m}}}]}}"
  t0=$(now)
  if out=$( { job mnist-ga "$tmpl"; echo ---; job mnist-gb "$tmpl"; } | kn apply -f - 2>&1); then
    ok "jobs mnist-ga and mnist-gb applied together"
  else fail "jobs applied" "$out"; end; return; fi
  check "mnist-ga's PodGroup mnist-ga-0 ($gv) has minCount 2" \
    "$(kn get "podgroups.$gv.scheduling.k8s.io" mnist-ga-0 \
         -o 'jsonpath={.spec.schedulingPolicy.gang.minCount}' 2>&1)" 2
  # Whichever job the scheduler places first runs; the other waits whole.
  end=$(( $(date +%s) + 180 )); first=
  while [ -z "$first" ] && [ "$(date +%s)" -lt "$end" ]; do
    wait_running mnist-ga 2 1 && first=mnist-ga
    wait_running mnist-gb 2 1 && first=${first:-mnist-gb}
  done
  if [ -n "$first" ]; then ok "$first: both workers Running ($(since "$t0")s)"
  else fail "one job's workers all Running" "$(explain mnist-ga; explain mnist-gb)"; end; return; fi
  second=mnist-gb; [ "$first" = mnist-gb ] && second=mnist-ga
  # While both of the first job's workers run, no pod of the second is placed, and it
  # says why. (Once they have exited the second may be placed before the first's status
  # says Succeeded: the loop stops when they stop running.)
  # A sample reads the first job's pods, then the second's: the first may have finished
  # in between and freed its room, so a placement counts only if the first job's two
  # pods are still Running when read again after it (the scheduler frees a pod's room
  # only once its phase is terminal or it is gone).
  running() {
    kn get pods -l "kubetrain.dev/job-name=$1" \
      -o 'jsonpath={range .items[?(@.status.phase=="Running")]}{.metadata.name}{"\n"}{end}' \
      2>/dev/null | grep -c . || true
  }
  sched=; n=0
  local samples=0
  while [ "$(running "$first")" = 2 ]; do
    samples=$((samples + 1))
    n=$(kn get pods -l "kubetrain.dev/job-name=$second" \
          -o 'jsonpath={range .items[?(@.spec.nodeName)]}{.metadata.name}{"\n"}{end}' 2>/dev/null |
        grep -c . || true)
    if [ "$n" != 0 ]; then
      [ "$(running "$first")" = 2 ] || n=0
      break
    fi
    [ -n "$sched" ] || sched=$(field "$second" '{.status.conditions[?(@.type=="Scheduled")].reason}')
    [ -n "$sched" ] && [ -z "${msg:-}" ] &&
      msg=$(field "$second" '{.status.conditions[?(@.type=="Scheduled")].message}')
    [ "$(since "$t0" | cut -d. -f1)" -lt "$JOB_TIMEOUT" ] || break
    sleep 1
  done
  if [ "$n" = 0 ] && [ "$samples" -gt 0 ]; then
    ok "no pod of $second placed while $first ran (no partial placement; $samples samples)"
  else fail "no pod of $second placed while $first ran (no partial placement)" "$n placed, $samples samples"; fi
  check "$second: condition Scheduled False/WaitingForGang" "$sched" WaitingForGang
  if [[ ${msg:-} == "0/2 pods schedulable as a group: "* ]]; then ok "$second says why it waits: $msg"
  else fail "$second says why it waits" "message [${msg:-}]; $(explain "$second")"; fi
  if wait_phase "$first" "$JOB_TIMEOUT" Succeeded; then ok "$first Succeeded"
  else fail "$first Succeeded" "$(explain "$first")"; fi
  if wait_phase "$second" "$JOB_TIMEOUT" Succeeded; then ok "$second then ran and Succeeded ($(since "$t0")s)"
  else fail "$second Succeeded after $first" "$(explain "$second")"; fi
  check "$second ran without a restart" "$(restarts "$second")" 0/0

  # The control: the same two jobs with gangScheduling false. Three of their four pods
  # fit, so one job is placed in part and its placed worker waits for a peer that has no
  # room: the deadlock the PodGroup prevents.
  local pc=0 pd=0
  if out=$( { job mnist-gc "$tmpl" "gangScheduling: false"; echo ---
              job mnist-gd "$tmpl" "gangScheduling: false"; } | kn apply -f - 2>&1); then
    ok "control: the same two jobs with gangScheduling false applied"
  else fail "control jobs applied" "$out"; end; return; fi
  placed() {
    kn get pods -l "kubetrain.dev/job-name=$1" \
      -o 'jsonpath={range .items[?(@.spec.nodeName)]}{.metadata.name}{"\n"}{end}' 2>/dev/null |
      grep -c . || true
  }
  end=$(( $(date +%s) + 60 ))
  while [ $((pc + pd)) -lt 3 ] && [ "$(date +%s)" -lt "$end" ]; do
    pc=$(placed mnist-gc); pd=$(placed mnist-gd); sleep 0.5
  done
  if [ $((pc + pd)) = 3 ] && { [ "$pc" = 1 ] || [ "$pd" = 1 ]; }; then
    ok "control: without gang one job is placed in part (mnist-gc $pc/2, mnist-gd $pd/2 pods placed)"
  else fail "control: without gang one job is placed in part" "mnist-gc $pc/2, mnist-gd $pd/2 placed"; fi
  kn delete tj mnist-gc mnist-gd --wait=false >/dev/null 2>&1
  end
}

# Why a job waits, as a new user meets it: a claim that does not exist, an image that
# cannot be pulled (with startupDeadlineSeconds, which then fails the job) and more CPU
# than the node has. Each job's Running condition names its pod's reason within 30 s.
s_waiting() {
  begin waiting
  local out j want msg end t0
  t0=$(now)
  # wait-claim is a gang: Kubernetes v1.37.2's scheduler reports its missing claim as
  # SchedulerError in the group cycle's words, not naming the claim; the job must say
  # what the scheduler said. wait-claim-solo (no gang) gets the scheduler's per-pod words,
  # which name the claim.
  if out=$( { job wait-claim | sed 's/claimName: ckpt/claimName: nope/'; echo ---
              job wait-claim-solo "gangScheduling: false" | sed 's/claimName: ckpt/claimName: nope/'
              echo ---
              job wait-image "image: example.invalid/nope:1" "startupDeadlineSeconds: 20"
              echo ---
              job wait-cpu 'template: {spec: {containers: [{name: trainer, resources: {requests: {cpu: "1000"}}}]}}'
            } | kn apply -f - 2>&1); then
    ok "jobs wait-claim and wait-claim-solo (claim nope), wait-image (example.invalid/nope:1), wait-cpu (1000 CPUs) applied"
  else fail "jobs applied" "$out"; end; return; fi
  for j in wait-claim wait-claim-solo wait-image wait-cpu; do
    end=$(( $(date +%s) + 30 )); msg='' want=''
    while [ "$(date +%s)" -lt "$end" ]; do
      case $j in
        wait-claim) # what the scheduler says of the first worker, whatever it is
          want=$(kn get pod wait-claim-worker-0 \
                   -o 'jsonpath={.status.conditions[?(@.type=="PodScheduled")].message}' 2>/dev/null)
          want=${want:0:120} ;;
        wait-claim-solo) want='persistentvolumeclaim "nope" not found' ;;
        wait-image) want='ImagePull' ;;
        wait-cpu) want='Insufficient cpu' ;;
      esac
      msg=$(field "$j" '{.status.conditions[?(@.type=="Running")].message}')
      [ -n "$want" ] && [[ $msg == *"$want"* ]] && break
      sleep 1
    done
    if [ -n "$want" ] && [[ $msg == *"$want"* ]] &&
       [ "$(field "$j" '{.status.conditions[?(@.type=="Running")].reason}')" = PodsWaiting ]; then
      ok "$j: Running=False/PodsWaiting names the reason ($(since "$t0")s): $msg"
    else fail "$j: Running=False/PodsWaiting names '$want' within 30 s" "message [$msg]; $(explain "$j")"; fi
  done
  if wait_event wait-claim-solo 'persistentvolumeclaim "nope" not found' 10; then ok "wait-claim-solo: a PodsWaiting event says it too"
  else fail "wait-claim-solo: a PodsWaiting event" "$(explain wait-claim-solo)"; fi
  if wait_phase wait-image 90 Failed; then ok "wait-image Failed at its startup deadline ($(since "$t0")s after apply)"
  else fail "wait-image Failed at its startup deadline" "$(explain wait-image)"; fi
  check "wait-image: Failed reason StartupDeadlineExceeded" \
    "$(field wait-image '{.status.conditions[?(@.type=="Failed")].reason}')" StartupDeadlineExceeded
  msg=$(field wait-image '{.status.conditions[?(@.type=="Failed")].message}')
  if [[ $msg == "not started within startupDeadlineSeconds=20: pod wait-image-worker-"*ImagePull* ]]; then
    ok "wait-image: the message names the limit and the reason: $msg"
  else fail "wait-image: the message names the limit and the reason" "$msg"; fi
  check "wait-claim, wait-claim-solo and wait-cpu still wait (no deadline)" \
    "$(phase wait-claim) $(phase wait-claim-solo) $(phase wait-cpu)" "Pending Pending Pending"
  kn delete tj wait-claim wait-claim-solo wait-image wait-cpu --wait=false >/dev/null 2>&1
  end
}

s_upgrade() {
  begin upgrade
  local out rev args
  if out=$("$HELM" upgrade "$REL" charts/kubetrain -n "$REL_NS" --reuse-values \
       --set operator.logLevel=debug --wait --timeout 180s 2>&1); then ok "helm upgrade --set operator.logLevel=debug"
  else fail "helm upgrade" "$out"; end; return; fi
  rev=$("$HELM" status "$REL" -n "$REL_NS" -o json 2>/dev/null | jq -r '.version')
  check "release revision 2" "$rev" 2
  args=$(k -n "$REL_NS" get deploy -l "app.kubernetes.io/instance=$REL" -o 'jsonpath={.items[0].spec.template.spec.containers[0].args}')
  if grep -q -- '--log-level=debug' <<<"$args"; then ok "Deployment runs the operator with --log-level=debug"
  else fail "Deployment runs --log-level=debug" "$args"; fi
  check "operator available after the upgrade" \
    "$(k -n "$REL_NS" get deploy -l "app.kubernetes.io/instance=$REL" -o 'jsonpath={.items[0].status.availableReplicas}')" 1
  # The upgraded operator still runs jobs.
  if out=$(job mnist-up | sed 's/epochs: 2/epochs: 1/; s/stepsPerEpoch: 30/stepsPerEpoch: 5/' | kn apply -f - 2>&1) &&
     wait_phase mnist-up "$JOB_TIMEOUT" Succeeded; then ok "a job runs to Succeeded under the upgraded operator"
  else fail "a job runs under the upgraded operator" "$out$(explain mnist-up)"; fi
  end
}

s_uninstall() {
  begin uninstall
  local out left jobs
  jobs=$(kn get tj -o name 2>/dev/null | sort)
  if out=$("$HELM" uninstall "$REL" -n "$REL_NS" --wait --timeout 120s 2>&1); then ok "helm uninstall"
  else fail "helm uninstall" "$out"; end; return; fi
  left=$(k get deploy,sa,svc,cm,secret,role,rolebinding -n "$REL_NS" -l "app.kubernetes.io/instance=$REL" -o name 2>&1;
         k get clusterrole,clusterrolebinding -l "app.kubernetes.io/instance=$REL" -o name 2>&1)
  check "no object of the release is left" "$(grep -v '^No resources' <<<"$left" | grep -c .)" 0
  check "the CRD stays" "$(k get crd trainingjobs.kubetrain.dev -o name 2>&1)" customresourcedefinition.apiextensions.k8s.io/trainingjobs.kubetrain.dev
  check "the jobs stay" "$(kn get tj -o name 2>/dev/null | sort | tr '\n' ' ')" "$(tr '\n' ' ' <<<"$jobs")"
  [ -n "$jobs" ] || fail "there were jobs to keep"
  end
}

# Kueue (docs/kueue.md), when the cluster runs it (e2e/cluster/kueue-up.sh; e2e/run.sh
# starts it when it is built): two queued jobs of 2 x 400m CPU against a ClusterQueue of
# 1 CPU; the second's pods stay gated until the first finishes, then it runs; a job
# without the queue label runs beside them, untouched.
s_kueue() {
  begin kueue
  if ! k get crd clusterqueues.kueue.x-k8s.io >/dev/null 2>&1; then
    tap_skip "kueue" "Kueue is not installed on this cluster (e2e/cluster/kueue-up.sh)"
    end; return
  fi
  local out j t0 n g bad="" seen_gated=0 a_done="" grp early=""
  local KUEUE_STOPPED="Kueue stopped its pod group"
  t0=$(now)
  if out=$(kn apply -f examples/kueue/queues.yaml 2>&1) &&
     out=$(k patch clusterqueue training --type json -p \
       '[{"op":"replace","path":"/spec/resourceGroups/0/flavors/0/resources/0/nominalQuota","value":"1"}]' 2>&1); then
    ok "examples/kueue/queues.yaml applied, ClusterQueue training's CPU quota set to 1"
  else fail "queues applied" "$out"; end; return; fi
  # qjob NAME [QUEUED [PRIORITY [STEPS [SPEC...]]]]: the suite's job, 400m CPU a pod, in
  # the queue when QUEUED is given, of the WorkloadPriorityClass PRIORITY (a pod label),
  # STEPS steps an epoch (30), the extra spec lines SPEC.
  qjob() {
    local name=$1 queued=${2:-} prio=${3:-} steps=${4:-30} meta=""
    shift $(( $# < 4 ? $# : 4 ))
    [ -n "$prio" ] && meta="metadata: {labels: {kueue.x-k8s.io/priority-class: $prio}}, "
    job "$name" "template: {${meta}spec: {containers: [{name: trainer, resources: {requests: {cpu: 400m, memory: 128Mi}}}]}}" "$@" |
      sed "s/stepsPerEpoch: 30/stepsPerEpoch: $steps/" |
      if [ -n "$queued" ]; then sed "s|^  namespace: .*|&\n  labels: {kueue.x-k8s.io/queue-name: training}|"; else cat; fi |
      kn apply -f - 2>&1
  }
  if out=$(qjob kq-a 1); then ok "job kq-a applied in queue training"; else fail "job kq-a applied" "$out"; end; return; fi
  if wait_running kq-a 2 120; then ok "kq-a admitted: both workers Running"
  else fail "kq-a admitted" "$(explain kq-a; kn get workloads.kueue.x-k8s.io 2>&1)"; end; return; fi
  check "kq-a's pods are one Kueue group of 2" \
    "$(kn get pod kq-a-worker-0 -o 'jsonpath={.metadata.annotations.kueue\.x-k8s\.io/pod-group-total-count}')" 2
  if out=$(qjob kq-b 1); then ok "job kq-b applied in queue training"; else fail "job kq-b applied" "$out"; fi
  # kq-plain trains what kq-low will (2 x 200 steps): its weights are the undisturbed
  # run's, for kq-low's after its preemption.
  if out=$(qjob kq-plain "" "" 200); then ok "job kq-plain applied without a queue (2 x 200 steps)"; else fail "job kq-plain applied" "$out"; fi
  # Until kq-a is done, kq-b's pods (once made) must all be gated and none Running, and
  # kq-b has no PodGroup yet (gang is on by default): the group is made once Kueue has
  # admitted the pods, so the scheduler never takes up a group half ungated. The group
  # is read before the pods: a group seen and then both pods still gated was made early.
  local end=$(( $(date +%s) + JOB_TIMEOUT ))
  while [ "$(date +%s)" -lt "$end" ]; do
    case "$(phase kq-a)" in Succeeded|Failed) a_done=$(phase kq-a); break ;; esac
    grp=$(kn get podgroups kq-b-0 -o name 2>/dev/null)
    n=$(kn get pods -l kubetrain.dev/job-name=kq-b -o name 2>/dev/null | grep -c .)
    if [ "$n" = 2 ]; then
      g=$(kn get pods -l kubetrain.dev/job-name=kq-b \
            -o 'jsonpath={range .items[*]}{.status.phase}:{.spec.schedulingGates[*].name}{"\n"}{end}' 2>/dev/null)
      # Read kq-a's phase again: it may have finished between the two reads.
      if [ "$(grep -c '^Pending:\(.* \)\?kueue\.x-k8s\.io/admission\( \|$\)' <<<"$g")" = 2 ]; then
        seen_gated=$((seen_gated + 1))
        [ -z "$grp" ] || early=$grp
      else case "$(phase kq-a)" in Succeeded|Failed) ;; *) bad=$g ;; esac; fi
    fi
    sleep 1
  done
  check "kq-a Succeeded" "$a_done" Succeeded
  if [ -z "$bad" ] && [ "$seen_gated" -gt 0 ]; then
    ok "while kq-a ran, kq-b's 2 pods stayed gated (kueue.x-k8s.io/admission), none Running ($seen_gated samples)"
  else fail "kq-b gated while kq-a ran" "samples gated: $seen_gated; other: $bad"$'\n'"$(kn get workloads.kueue.x-k8s.io 2>&1)"; fi
  if [ "$seen_gated" -gt 0 ]; then
    check "kq-b had no PodGroup while its pods were gated" "$early" ""
  fi
  if wait_phase kq-b "$JOB_TIMEOUT" Succeeded; then ok "kq-b admitted after kq-a finished, Succeeded ($(since "$t0")s)"
  else fail "kq-b Succeeded" "$(explain kq-b; kn get workloads.kueue.x-k8s.io 2>&1)"; fi
  if wait_phase kq-plain "$JOB_TIMEOUT" Succeeded; then ok "kq-plain (no queue) Succeeded beside the full queue"
  else fail "kq-plain Succeeded" "$(explain kq-plain)"; fi
  check "kq-plain's pods carry no Kueue label, gate or finalizer" \
    "$(kn get pods -l kubetrain.dev/job-name=kq-plain -o json 2>/dev/null |
       jq -r '[.items[] | (.metadata.labels | keys[] | select(startswith("kueue.x-k8s.io"))),
               (.spec.schedulingGates // [] | .[].name), (.metadata.finalizers // [])[]] | length')" 0
  for j in kq-a kq-b; do check "$j restarts application/disruption 0/0" "$(restarts "$j")" "0/0"; done
  # Gang (on by default) with Kueue: the group made once admitted, then linked.
  for j in kq-a kq-b; do
    check "$j: GangScheduling PodGroupCreated, the group made after admission" \
      "$(field "$j" '{.status.conditions[?(@.type=="GangScheduling")].reason}')" PodGroupCreated
  done
  # Kueue takes its finalizer off once it has seen the group finish.
  fin() { kn get pods -l 'kueue.x-k8s.io/queue-name' -o 'jsonpath={.items[*].metadata.finalizers}' 2>/dev/null; }
  end=$(( $(date +%s) + 30 ))
  while [ -n "$(fin)" ] && [ "$(date +%s)" -lt "$end" ]; do sleep 1; done
  check "Kueue left no finalizer on the finished pods" "$(fin)" ""

  # Preemption: a low-priority job (restartPolicy Never, so a stop counted as a failure
  # would fail it) runs; a high-priority one that needs its quota makes Kueue preempt
  # it (TerminationTarget, then its pods deleted): a disruption; its restart is a new
  # group, queued until the high one is done, then it resumes from its checkpoint.
  local line
  if out=$(printf '%s\n---\n%s\n' \
        'apiVersion: kueue.x-k8s.io/v1beta2
kind: WorkloadPriorityClass
metadata: {name: kt-low}
value: 100' \
        'apiVersion: kueue.x-k8s.io/v1beta2
kind: WorkloadPriorityClass
metadata: {name: kt-high}
value: 1000' | k apply -f - 2>&1) &&
     out=$(k patch clusterqueue training --type merge \
             -p '{"spec":{"preemption":{"withinClusterQueue":"LowerPriority"}}}' 2>&1); then
    ok "WorkloadPriorityClasses kt-low, kt-high; ClusterQueue preempts lower priority"
  else fail "priority classes and preemption set" "$out"; fi
  if out=$(qjob kq-low 1 kt-low 200 "restartPolicy: Never"); then ok "job kq-low applied (kt-low, 2 x 200 steps, restartPolicy Never)"
  else fail "job kq-low applied" "$out"; fi
  if line=$(chief_ckpt kq-low 180); then ok "kq-low's chief saved a checkpoint: ${line##*] }"
  else fail "kq-low's chief saved a checkpoint" "$(explain kq-low; kn get workloads.kueue.x-k8s.io 2>&1)"; fi
  if out=$(qjob kq-high 1 kt-high); then ok "job kq-high applied (kt-high)"; else fail "job kq-high applied" "$out"; fi
  if wait_event kq-low "$KUEUE_STOPPED" 120; then ok "kq-low preempted: the operator's event says Kueue stopped its pod group"
  else fail "kq-low preempted" "$(explain kq-low; kn get workloads.kueue.x-k8s.io 2>&1)"; fi
  if wait_phase kq-high "$JOB_TIMEOUT" Succeeded; then ok "kq-high Succeeded"
  else fail "kq-high Succeeded" "$(explain kq-high; kn get workloads.kueue.x-k8s.io 2>&1)"; fi
  if wait_phase kq-low "$JOB_TIMEOUT" Succeeded; then ok "kq-low re-admitted after kq-high, Succeeded"
  else fail "kq-low Succeeded" "$(explain kq-low; kn get workloads.kueue.x-k8s.io 2>&1)"; fi
  check "kq-low restarts application/disruption 0/1" "$(restarts kq-low)" "0/1"
  out=$(kn logs kq-low-worker-0 -c trainer 2>/dev/null | grep -E -m1 'resuming from .*global step [1-9]')
  if [ -n "$out" ]; then ok "kq-low's chief resumed from its checkpoint: ${out##*]: }"
  else fail "kq-low's chief resumed from its checkpoint" "$(explain kq-low)"; fi
  local hl hp lost
  hl=$(field kq-low '{.status.result.weightsSha256}'); hp=$(field kq-plain '{.status.result.weightsSha256}')
  if [[ $hl =~ ^[0-9a-f]{64}$ ]] && [ "$hl" = "$hp" ]; then
    ok "kq-low's final weights equal the undisturbed kq-plain's (${hl:0:16}...)"
  else fail "kq-low's final weights equal the undisturbed run's" "kq-low ${hl:-<none>}"$'\n'"kq-plain ${hp:-<none>}"; fi
  # Steps lost: the progress scraper records them at its first look at the new attempt,
  # when it knows the preempted attempt's last step (its own scrape of it, every 10 s, or
  # the chief's exit message, which goes with the pod Kueue deletes).
  lost=$(field kq-low '{.status.restarts.lastStepsLost}')
  if [ -z "$lost" ]; then
    tap_skip "$SCEN: kq-low's steps lost" "not recorded: the operator saw neither a scrape of the preempted attempt nor its chief's exit message"
  else check "kq-low lost no step to the preemption (restarts.lastStepsLost)" "$lost" 0; fi

  out=$(kn delete tj kq-a kq-b kq-plain kq-low kq-high --wait --timeout 60s 2>&1)
  end=$(( $(date +%s) + 60 ))
  while n=$(kn get pods -l 'kubetrain.dev/job-name in (kq-a,kq-b,kq-plain,kq-low,kq-high)' -o name 2>/dev/null | grep -c .)
        [ "$n" != 0 ] && [ "$(date +%s)" -lt "$end" ]; do sleep 1; done
  check "the jobs deleted, and their pods with them" "$n" 0
  end
}

# kueuelive: live recovery inside an admitted Kueue pod group. The lost pod's object keeps
# Kueue's finalizer until Kueue sees a replacement, so the replacement is <pod>-r<n> (same
# hostname, group and shape): Kueue takes it into the admitted Workload, ungates it and
# lets the old object go; the survivors hand it their state, no group restart.
s_kueuelive() {
  begin kueuelive
  if ! k get crd clusterqueues.kueue.x-k8s.io >/dev/null 2>&1; then
    tap_skip "kueuelive" "Kueue is not installed on this cluster (e2e/cluster/kueue-up.sh)"
    end; return
  fi
  local out line t0 j u0 wl wuid att rep gone
  local res='template: {spec: {containers: [{name: trainer, resources: {requests: {cpu: 400m, memory: 128Mi}}}]}}'
  t0=$(now)
  if out=$(kn apply -f examples/kueue/queues.yaml 2>&1); then ok "examples/kueue/queues.yaml applied"
  else fail "queues applied" "$out"; end; return; fi
  # kl-live in the queue, kl-ref beside it without one for the undisturbed hash.
  for j in kl-live kl-ref; do
    if out=$(job "$j" "$res" | sed 's/stepsPerEpoch: 30/stepsPerEpoch: 150/' |
             if [ "$j" = kl-live ]; then
               sed "s|^  namespace: .*|&\n  labels: {kueue.x-k8s.io/queue-name: training}|"
             else cat; fi | kn apply -f - 2>&1); then
      ok "job $j applied (2 epochs x 150 steps)"
    else fail "job $j applied" "$out"; end; return; fi
  done
  if line=$(chief_ckpt kl-live 180); then ok "kl-live admitted; chief saved a checkpoint: ${line##*] }"
  else fail "kl-live admitted and checkpointing" "$(explain kl-live; kn get workloads.kueue.x-k8s.io 2>&1)"; end; return; fi
  check "the trainer in a queue is told --recovery-timeout 120" \
    "$(trainer_arg kl-live-worker-0 --recovery-timeout)" 120
  wl=$(kn get pod kl-live-worker-0 -o 'jsonpath={.metadata.labels.kueue\.x-k8s\.io/pod-group-name}')
  wuid=$(kn get workloads.kueue.x-k8s.io "$wl" -o 'jsonpath={.metadata.uid}' 2>/dev/null)
  if [ -n "$wuid" ]; then ok "kl-live's pods are Kueue Workload $wl"
  else fail "kl-live's Workload" "pod group ${wl:-<none>}; $(kn get workloads.kueue.x-k8s.io 2>&1)"; end; return; fi
  u0=$(uid kl-live-worker-0)
  # 1. Worker 1's trainer SIGKILLed: its pod fails, is deleted (Kueue's finalizer holds
  # it) and replaced by kl-live-worker-1-r1.
  if out=$(kill_trainer kl-live-worker-1 2>&1); then ok "SIGKILL to worker 1's trainer process"
  else fail "SIGKILL to worker 1's trainer process" "$out"; end; return; fi
  if line=$(wait_new_log kl-live-worker-1-r1 "" "$JOINED" 120); then
    ok "kl-live-worker-1-r1 joined from the chief: ${line##*]: }"
  else fail "worker 1 replaced live in the Kueue group" "$(explain kl-live; kn get workloads.kueue.x-k8s.io "$wl" -o yaml 2>&1 | tail -n 30)"; end; return; fi
  check "the replacement keeps the hostname kl-live-worker-1" \
    "$(kn get pod kl-live-worker-1-r1 -o 'jsonpath={.spec.hostname}')" kl-live-worker-1
  check "the replacement is in the same Kueue group" \
    "$(kn get pod kl-live-worker-1-r1 -o 'jsonpath={.metadata.labels.kueue\.x-k8s\.io/pod-group-name}')" "$wl"
  check "the chief's pod is the same (uid)" "$(uid kl-live-worker-0)" "$u0"
  gone=""
  for _ in $(seq 1 60); do [ -z "$(uid kl-live-worker-1)" ] && { gone=1; break; }; sleep 0.5; done
  if [ -n "$gone" ]; then ok "the old kl-live-worker-1 is gone (Kueue took its finalizer off)"
  else fail "the old kl-live-worker-1 is gone" "$(kn get pod kl-live-worker-1 -o yaml 2>&1 | grep -A3 -E 'finalizers|phase')"; fi
  # 2. The chief's pod deleted: it stops after its step, Failed under Kueue's finalizer;
  # kl-live-worker-0-r1 takes the state from worker 1's replacement.
  if out=$(kn delete pod kl-live-worker-0 --wait=false 2>&1); then ok "the chief's pod deleted"
  else fail "the chief's pod deleted" "$out"; end; return; fi
  if line=$(wait_new_log kl-live-worker-0-r1 "" "$JOINED" 120); then
    ok "kl-live-worker-0-r1 joined: ${line##*]: }"
  else fail "the chief replaced live in the Kueue group" "$(explain kl-live)"; end; return; fi
  check "the Workload is the same object (uid), not re-created" \
    "$(kn get workloads.kueue.x-k8s.io "$wl" -o 'jsonpath={.metadata.uid}' 2>/dev/null)" "$wuid"
  check "the Workload stays admitted" \
    "$(kn get workloads.kueue.x-k8s.io "$wl" -o 'jsonpath={.status.conditions[?(@.type=="Admitted")].status}' 2>/dev/null)" True
  if wait_phase kl-live "$JOB_TIMEOUT" Succeeded; then ok "kl-live Succeeded ($(since "$t0")s)"
  else fail "kl-live Succeeded" "$(explain kl-live)"; end; return; fi
  att=$(field kl-live '{.status.attempt}')
  check "status.attempt unchanged (no group restart, no new Workload)" "${att:-0}" 0
  rep=$(field kl-live '{.status.restarts.replaced}')
  check "restarts.replaced 2" "${rep:-0}" 2
  check "restarts application/disruption 1/1 (the SIGKILL, the deletion)" "$(restarts kl-live)" "1/1"
  check_same_weights kl-live kl-ref
  out=$(kn delete tj kl-live kl-ref --wait --timeout 60s 2>&1)
  local n end=$(( $(date +%s) + 60 ))
  while n=$(kn get pods -l 'kubetrain.dev/job-name in (kl-live,kl-ref)' -o name 2>/dev/null | grep -c .)
        [ "$n" != 0 ] && [ "$(date +%s)" -lt "$end" ]; do sleep 1; done
  check "the jobs deleted, their pods with them (no finalizer left)" "$n" 0
  end
}

# elastic (issue 46, docs/design.md "Elastic jobs"): a 3-worker C-trainer job with
# elastic.minWorkers 2 on real pods. A worker's room is one unit of an extended resource,
# kubetrain.dev/e2e-slot, that the node advertises for this scenario alone (3, then
# removed): the workers and a filler pod ask for one each and no other scenario asks for
# any, so it runs beside them. The filler is placed in a fourth slot, which is then taken
# back, so that once worker 2's pod is deleted the filler holds its room: the replacement
# is Pending, unschedulable, and the job goes on at 2 without a restart; the filler
# deleted, the replacement runs and the job grows back to 3; then kubectl scale to 2 and
# up to 4, past the 3 workers its TF_CONFIG names, while it trains.
ELASTIC_RES=kubetrain.dev/e2e-slot
# slots NODE N: NODE advertises N slots of ELASTIC_RES, or of SLOT_RES where the caller
# sets it (capacity and allocatable, a PATCH of the node's status: the kubelet keeps an
# extended resource it does not manage); slots NODE: removed.
slots() {
  local res=${SLOT_RES:-$ELASTIC_RES}
  local c=/status/capacity/${res/\//~1} a=/status/allocatable/${res/\//~1}
  if [ $# -gt 1 ]; then
    k patch node "$1" --subresource=status --type=json -p \
      "[{\"op\":\"add\",\"path\":\"$c\",\"value\":\"$2\"},{\"op\":\"add\",\"path\":\"$a\",\"value\":\"$2\"}]" >/dev/null
  else
    local p; for p in "$c" "$a"; do
      k patch node "$1" --subresource=status --type=json -p "[{\"op\":\"remove\",\"path\":\"$p\"}]" >/dev/null 2>&1
    done
    return 0
  fi
}
s_elastic() {
  begin elastic
  local node out
  node=$(k get nodes -o 'jsonpath={.items[0].metadata.name}' 2>&1)
  if out=$(slots "$node" 3 2>&1); then ok "node $node advertises 3 $ELASTIC_RES (one a worker)"
  else fail "node $node advertises 3 $ELASTIC_RES" "$out"; end; return; fi
  # Every worker pod's trainer log, followed from the start into $eldir (a dropped pod's
  # log is gone with the pod): a failure prints the resizes' lines of all of them.
  local eldir follow=() i
  eldir=$(mktemp -d)
  for i in 0 1 2 3; do follow_log "mnist-el-worker-$i" "$eldir" & follow+=($!); done
  [ "$PROVIDER" = full ] && { node_files "$eldir" & follow+=($!); }
  elastic_run "$node"
  { for i in "${follow[@]}"; do pkill -P "$i"; kill "$i"; done
    wait "${follow[@]}"; } 2>/dev/null
  if [ "$SCEN_FAILS" -gt 0 ] || [ -n "${KT_E2E_KEEP_LOGS:-}" ]; then
    cp "${KT_RUN:-e2e/cluster/.run}/logs/kubelet.log" "$eldir/kubelet.txt" 2>/dev/null
    k -n "$REL_NS" logs --timestamps -l "app.kubernetes.io/instance=$REL" --tail -1 \
      >"$eldir/operator.txt" 2>&1
    rm -rf build/e2e/elastic-logs && mkdir -p build/e2e && cp -r "$eldir" build/e2e/elastic-logs &&
      log "elastic: the workers' and the operator's logs kept in build/e2e/elastic-logs"
  fi
  rm -rf "$eldir"
  kn delete pod slot-filler --ignore-not-found --wait=false >/dev/null 2>&1
  kn delete tj mnist-el --ignore-not-found --wait=false >/dev/null 2>&1
  slots "$node"
  end
}
# follow_log POD DIR: POD's trainer log, with timestamps, into DIR/POD.UID.log for each pod
# of that name in turn, until killed.
follow_log() {
  local u
  while :; do
    u=$(uid "$1")
    [ -n "$u" ] && kn logs -f --timestamps "$1" -c trainer >"$2/$1.$u.log" 2>/dev/null
    sleep 2
  done
}
# node_files DIR: every change of the survivors' (workers 0 and 1) members files as the
# kubelet holds them on the node (full: its root directory is the cluster's), with the
# time it was seen, into DIR/node-files.txt, every 0.2 s until killed (every 2 s while a
# file is missing: each look for its pod is a kubectl call).
node_files() {
  local p f got nap last=() root=${KT_RUN:-e2e/cluster/.run}/full/kubelet/pods uids=()
  while :; do
    nap=0.2
    for p in 0 1; do
      f=$root/${uids[p]:-none}/volumes/kubernetes.io~downward-api/kubetrain-members/members
      [ -e "$f" ] || { uids[p]=$(uid "mnist-el-worker-$p"); nap=2; continue; }
      got=$(cat "$f" 2>/dev/null)
      [ "$got" = "${last[p]:-}" ] || echo "$(date -u +%FT%T.%NZ) worker-$p's file on the node: $got" >>"$1/node-files.txt"
      last[p]=$got
    done
    sleep "$nap"
  done
}
# el_lines DIR: the last 40 lines of the elastic scenario's logs in DIR that are not a
# step's or an epoch's, in time order, each with its pod's file name.
el_lines() {
  local f
  for f in "$1"/*.log "$1"/node-files.txt; do
    [ -e "$f" ] && sed "s|^|${f##*/}: |" "$f"
  done | grep -v -E ']: (step|epoch) ' | sort -t' ' -k2,2 -s | tail -n 40
}
# el_why DIR: el_lines DIR, then the operator's lines of the job's resizes and patches.
el_why() {
  el_lines "$1"
  echo "--- the kubelet's volume errors"
  grep -E 'Error processing volume|Failed to add volume' "${KT_RUN:-e2e/cluster/.run}/logs/kubelet.log" 2>/dev/null |
    tail -n 4
  echo "--- operator"
  k -n "$REL_NS" logs --timestamps -l "app.kubernetes.io/instance=$REL" --tail 2000 2>&1 |
    grep -E 'mnist-el' | grep -E 'patched pod|Resized|sync failed|delet' | tail -n 12
}
# The elastic scenarios' helpers; j is the caller's job.
# rcount POD: the trainer container's restart count.
rcount() { kn get pod "$1" -o 'jsonpath={.status.containerStatuses[?(@.name=="trainer")].restartCount}' 2>/dev/null; }
resized() { field "$j" '{.status.conditions[?(@.type=="Resized")].reason} {.status.conditions[?(@.type=="Resized")].message}'; }
# wait_resized REASON TEXT SECONDS: the Resized condition says REASON with TEXT in its message.
wait_resized() {
  local end=$(( $(date +%s) + $3 )) r
  while [ "$(date +%s)" -lt "$end" ]; do
    r=$(resized); [[ $r == "$1 "*"$2"* ]] && { echo "${r#* }"; return 0; }
    case "$(phase "$j")" in Succeeded|Failed) break ;; esac
    sleep 0.5
  done
  echo "Resized: [$(resized)]"; return 1
}
wait_field() { # JSONPATH VALUE SECONDS
  local end=$(( $(date +%s) + $3 ))
  while [ "$(date +%s)" -lt "$end" ]; do [ "$(field "$j" "$1")" = "$2" ] && return 0; sleep 0.5; done
  return 1
}
# el_start STEPS EVERY: job j of 3 workers (elastic.minWorkers 2), 2 epochs of STEPS steps
# of 3 x 64 examples, a checkpoint every EVERY steps, each worker asking for one slot
# (SLOT_RES or ELASTIC_RES; an extended resource is asked for by its limit), applied; true
# once its 3 workers run and the chief (worker 0) has saved a checkpoint.
el_start() {
  local res=${SLOT_RES:-$ELASTIC_RES} out line
  if out=$(job "$j" "elastic: {minWorkers: 2}" \
             "template: {spec: {containers: [{name: trainer, resources: {limits: {$res: 1}}}]}}" |
           sed -e 's/^  workers: 2$/  workers: 3/' -e "s/stepsPerEpoch: 30/stepsPerEpoch: $1/" \
               -e "s/everySteps: 10/everySteps: $2/" | kn apply -f - 2>&1)
  then ok "job $j applied (3 workers, elastic.minWorkers 2, 2 epochs x $1 steps, one $res each)"
  else fail "job $j applied" "$out"; return 1; fi
  if wait_running "$j" 3 180 && line=$(chief_ckpt "$j" 180); then
    ok "3 workers Running, worker 0 (the chief) saved a checkpoint: ${line##*] }"
  else fail "3 workers Running and a checkpoint" "$(explain "$j")"; return 1; fi
}
# take_room NODE POD N: pod POD, asking for one slot (SLOT_RES or ELASTIC_RES), is placed
# in an N+1th slot of NODE, which is then taken back: once a worker's pod goes, the filler
# holds its room. Prints why not and fails when the filler does not run within 60 s.
take_room() {
  local res=${SLOT_RES:-$ELASTIC_RES} image=${KT_PAUSE_IMAGE:-kubetrain/pause:3.10} out
  [ "$PROVIDER" = kind ] && image=${KT_PAUSE_IMAGE:-registry.k8s.io/pause:3.10}
  slots "$1" $(($3 + 1))
  if ! out=$(printf '%s\n' 'apiVersion: v1' 'kind: Pod' "metadata: {name: $2}" \
        'spec:' '  terminationGracePeriodSeconds: 0' '  containers:' \
        "  - {name: pause, image: $image, imagePullPolicy: IfNotPresent, resources: {limits: {$res: 1}}}" |
        kn apply -f - 2>&1) ||
     ! kn wait --for=jsonpath='{.status.phase}'=Running "pod/$2" --timeout 60s >/dev/null 2>&1; then
    echo "$out $(kn get pod "$2" -o wide 2>&1)"; return 1
  fi
  slots "$1" "$3"
}
elastic_run() {
  local node=$1 j=mnist-el t0 out line s0 s1 u0 u1 u2 n i end logs="" total
  # goes_on POD N: the survivors' line for the Nth ring of 2 formed in place (counted in
  # the pod's log), waited for up to 60 s.
  goes_on() {
    local end=$(( $(date +%s) + 60 )) l
    while [ "$(date +%s)" -lt "$end" ]; do
      l=$(kn logs "$1" -c trainer 2>/dev/null | grep -E 'elastic: generation [0-9]+ of 2 workers goes on from step [0-9]+' | sed -n "$2p")
      [ -n "$l" ] && { echo "$l"; return 0; }
      sleep 0.5
    done
    return 1
  }
  # 2 x 400 steps of 3 x 64 examples, each worker asking for one slot (an extended
  # resource is asked for by its limit); a checkpoint every 50 steps (one every 10 costs
  # a loaded node a fifth of its steps' time). The resizes take about a minute whatever
  # a step takes (the kubelet, the scheduler, the 10 s progress scrape): on the 2-core
  # development machine the scale down began at steps 124-143 of 800 (load 5 to 14);
  # past half the steps it is skipped, saying why.
  total=800
  t0=$(now)
  el_start 400 50 || return
  check "status.globalBatch 192 (3 x 64), each pod's --global-batch" \
    "$(field "$j" '{.status.globalBatch}') $(trainer_arg "$j-worker-0" --global-batch) $(trainer_arg "$j-worker-2" --global-batch)" \
    "192 192 192"
  u0=$(uid "$j-worker-0"); u1=$(uid "$j-worker-1"); u2=$(uid "$j-worker-2")

  # a. The filler takes worker 2's room: placed in a fourth slot, which is taken back.
  if out=$(take_room "$node" slot-filler 3); then ok "filler pod Running in a fourth slot"
  else fail "filler pod Running" "$out"; return; fi
  local tl; tl=$(now)
  if out=$(kn delete pod "$j-worker-2" --wait=false 2>&1); then ok "worker 2's pod deleted while the filler holds its room"
  else fail "worker 2's pod deleted" "$out"; return; fi
  if out=$(wait_resized Shrank "pod $j-worker-2 unschedulable" 90); then
    ok "Resized/Shrank ($(since "$tl")s after the deletion): $out"
  else fail "Resized/Shrank naming the replacement" "$out"$'\n'"$(explain "$j")"; return; fi
  if [[ $out == *"Insufficient $ELASTIC_RES"* ]]; then ok "the message gives the scheduler's reason (Insufficient $ELASTIC_RES)"
  else fail "the message gives the scheduler's reason" "$out"; fi
  if wait_event "$j" "shrank from 3 to 2 workers (members 0,1): pod $j-worker-2 unschedulable" 10; then
    ok "a Resized event says it"
  else fail "a Resized event says it" "$(kn get events --field-selector "involvedObject.name=$j" 2>&1 | tail -n 5)"; fi
  check "status.members 0,1" "$(field "$j" '{.status.members}')" "0,1"
  wait_field '{.status.currentWorkers}' 2 20
  check "status.currentWorkers 2" "$(field "$j" '{.status.currentWorkers}')" 2
  check "the replacement is Pending, PodScheduled False/Unschedulable" \
    "$(kn get pod "$j-worker-2" -o 'jsonpath={.status.phase} {.status.conditions[?(@.type=="PodScheduled")].reason}' 2>&1)" \
    "Pending Unschedulable"
  for i in 0 1; do
    if line=$(goes_on "$j-worker-$i" 1); then ok "worker $i: ${line##*]: }"
    else fail "worker $i goes on at 2" "$(el_why "$eldir")"; fi
  done
  line=$(kn logs --timestamps "$j-worker-0" -c trainer 2>/dev/null | grep -m1 -E 'elastic: generation [0-9]+ of 2 workers goes on')
  if [ -n "$line" ]; then
    MEASURED+=("elastic: worker 2's pod deleted -> the ring of 2 trains on: $(awk -v a="$tl" -v b="$(date -d "${line%% *}" +%s.%N)" 'BEGIN{printf "%.1f", b - a}') s")
  fi
  s0=$(sed -nE 's/.*goes on from step ([0-9]+).*/\1/p' <<<"$line")
  # Steps advance at 2: the chief's /metrics, scraped into status.progress, past the step
  # the ring of 2 went on from, while the job is still at 2.
  end=$(( $(date +%s) + 60 )); s1=
  while [ "$(date +%s)" -lt "$end" ]; do
    s1=$(field "$j" '{.status.progress.step}')
    [ -n "$s0" ] && [ "${s1:-0}" -gt "$s0" ] && break
    sleep 1
  done
  if [ -n "$s0" ] && [ "${s1:-0}" -gt "$s0" ] && [ "$(field "$j" '{.status.members}')" = "0,1" ] &&
     [ "$(field "$j" '{.status.progress.attempt}')" = 0 ]; then
    ok "status.progress.step advances at 2 workers ($s0 -> $s1 of $total, attempt 0)"
  else fail "status.progress.step advances at 2 workers" "from ${s0:-<none>} to ${s1:-<none>}"$'\n'"$(explain "$j")"; fi
  check "the survivors are the same pods (uids), no container restarted" \
    "$(uid "$j-worker-0") $(uid "$j-worker-1") $(rcount "$j-worker-0") $(rcount "$j-worker-1")" "$u0 $u1 0 0"
  logs+=$'\n'$(kn logs "$j-worker-0" -c trainer 2>&1; kn logs "$j-worker-1" -c trainer 2>&1)

  # b. The filler deleted: the replacement runs, joins at a step boundary from a survivor.
  tl=$(now)
  if out=$(kn delete pod slot-filler --wait=false 2>&1); then ok "the filler deleted"
  else fail "the filler deleted" "$out"; fi
  if out=$(wait_resized Grew "pod $j-worker-2 runs" 120); then ok "Resized/Grew ($(since "$tl")s after): $out"
  else fail "Resized/Grew" "$out"$'\n'"$(explain "$j")"; return; fi
  check "the Grew message" "$out" "grew from 2 to 3 workers (members 0,1,2): pod $j-worker-2 runs"
  if line=$(wait_log "$j-worker-2" "$JOINED" 90); then ok "the replacement joined: ${line##*]: }"
  else fail "the replacement joined from a survivor" "$(el_why "$eldir")"$'\n'"$(explain "$j")"; return; fi
  line=$(kn logs --timestamps "$j-worker-2" -c trainer 2>/dev/null | grep -m1 -E "$JOINED")
  [ -n "$line" ] && MEASURED+=("elastic: filler deleted -> worker 2 joined the ring of 3: $(awk -v a="$tl" -v b="$(date -d "${line%% *}" +%s.%N)" 'BEGIN{printf "%.1f", b - a}') s")
  wait_field '{.status.currentWorkers}' 3 20
  check "status.currentWorkers 3, members 0,1,2" \
    "$(field "$j" '{.status.currentWorkers} {.status.members}')" "3 0,1,2"
  check "the survivors still the same pods, no container restarted" \
    "$(uid "$j-worker-0") $(uid "$j-worker-1") $(rcount "$j-worker-0") $(rcount "$j-worker-1")" "$u0 $u1 0 0"

  # c. kubectl scale to 2, to 3 and to 4 (past the 3 workers of the attempt's TF_CONFIG:
  # the new pods are made for 4, the survivors' members name worker 3's address) while it
  # trains, if half the training is left
  # (an idle 2-core machine trains the 800 steps in about 50 s, and the two resizes take
  # 10-15 s of it). The step: status.progress's (scraped every 10 s) or the chief's
  # newest checkpoint line, whichever is later.
  s1=$(field "$j" '{.status.progress.step}')
  n=$(kn logs --tail 40 "$j-worker-0" -c trainer 2>/dev/null |
      sed -n 's/.*checkpoint at step \([0-9]*\) saved.*/\1/p' | tail -n 1)
  [ "${n:-0}" -gt "${s1:-0}" ] && s1=$n
  if [ "$(phase "$j")" != Running ] || [ "${s1:-0}" -gt $((total / 2)) ]; then
    tap_skip "$SCEN: kubectl scale 3 -> 2 -> 4" "the job is at step ${s1:-?} of $total ($(phase "$j")), too near its end to resize twice more (a slower node trains longer)"
  else
    logs+=$'\n'$(kn logs "$j-worker-2" -c trainer 2>&1)
    u2=$(uid "$j-worker-2")
    if out=$(kn scale "tj/$j" --replicas 2 2>&1); then ok "kubectl scale tj/$j --replicas 2 at step ${s1:-?}"
    else fail "kubectl scale --replicas 2" "$out"; fi
    if out=$(wait_resized Shrank "spec.workers lowered to 2" 60); then ok "Resized/Shrank: $out"
    else fail "Resized/Shrank after the scale" "$out"$'\n'"$(explain "$j")"; fi
    for i in 0 1; do
      if line=$(goes_on "$j-worker-$i" 2); then ok "worker $i: ${line##*]: }"
      else fail "worker $i goes on at 2 after the scale" "$(el_why "$eldir")"; fi
    done
    end=$(( $(date +%s) + 60 ))
    while [ "$(uid "$j-worker-2")" = "$u2" ] && [ "$(date +%s)" -lt "$end" ]; do sleep 0.5; done
    check "worker 2's pod deleted, not replaced" "$(uid "$j-worker-2")" ""
    wait_field '{.status.currentWorkers}' 2 20
    check "status.currentWorkers 2" "$(field "$j" '{.status.currentWorkers}')" 2
    slots "$node" 4 # room for a fourth worker
    # Up two workers at once: worker 2, inside the attempt's TF_CONFIG, and worker 3, past
    # it. Their pods start together and join in one regroup or one after the other, as the
    # operator's passes and the kubelet's file updates fall (seen both ways; issue 46: a
    # rank whose state sync completed accepts a process of that ring at a lower
    # generation; trainer/tests/test-elastic-grow.sh, either new worker's file first).
    if out=$(kn scale "tj/$j" --replicas 4 2>&1); then ok "kubectl scale tj/$j --replicas 4 (two workers at once; the attempt's TF_CONFIG names 3)"
    else fail "kubectl scale --replicas 4" "$out"; fi
    if line=$(wait_new_log "$j-worker-2" "$u2" "$JOINED" 120); then ok "the new worker 2 joined: ${line##*]: }"
    else fail "the new worker 2 joined from a survivor" "$(el_why "$eldir")"$'\n'"$(explain "$j")"; fi
    if out=$(wait_resized Grew "to 4 workers (members 0,1,2,3)" 120); then ok "Resized/Grew: $out"
    else fail "Resized/Grew to 4 after the scale" "$out"$'\n'"$(explain "$j")"; fi
    if line=$(wait_log "$j-worker-3" "$JOINED" 90); then ok "worker 3 (a TF_CONFIG of 4) joined: ${line##*]: }"
    else fail "worker 3 joined from a survivor" "$(kn logs --tail 20 "$j-worker-3" -c trainer 2>&1)"$'\n'"$(explain "$j")"; fi
    wait_field '{.status.currentWorkers}' 4 20
    check "status.currentWorkers 4, members 0,1,2,3, worker 0's annotation naming worker 3's address" \
      "$(field "$j" '{.status.currentWorkers} {.status.members}') $(kn get pod "$j-worker-0" -o 'jsonpath={.metadata.annotations.kubetrain\.dev/members}' | cut -d. -f1)" \
      "4 0,1,2,3 0,1,2,3=$j-worker-3"
  fi

  # Read before the end: the chief's exit completes the job, and a worker still running
  # then is deleted (cleanPodPolicy Running).
  check "the survivors the same pods after the resizes, no container restarted" \
    "$(uid "$j-worker-0") $(uid "$j-worker-1") $(rcount "$j-worker-0") $(rcount "$j-worker-1")" "$u0 $u1 0 0"
  if wait_phase "$j" $((JOB_TIMEOUT * 2)) Succeeded; then ok "job Succeeded ($(since "$t0")s)"
  else fail "job Succeeded" "$(explain "$j")"; return; fi
  local att; att=$(field "$j" '{.status.attempt}')
  check "status.attempt 0 (no group restart), restarts application/disruption 0/1, replaced 1" \
    "${att:-0} $(restarts "$j") $(field "$j" '{.status.restarts.replaced}')" "0 0/1 1"
  for i in 0 1 2 3; do logs+=$'\n'$(kn logs "$j-worker-$i" -c trainer 2>&1); done
  n=$(grep -c 'resuming from' <<<"$logs")
  check "no 'resuming from' in any worker's log (no checkpoint read)" "$n" 0
  check "status.result.step $total" "$(field "$j" '{.status.result.step}')" "$total"
}

# elasticchief (issue 46, docs/design.md "Elastic jobs", "The chief."): the chief's pod of
# an elastic job lost while its room is taken. 3 workers, elastic.minWorkers 2, each
# asking for one kubetrain.dev/e2e-chief-slot, a resource of this scenario alone (so that
# it runs beside elastic). Once worker 0, the chief, has saved a checkpoint, a filler
# takes its room and its pod is deleted: the replacement is Pending, unschedulable, and
# the job goes on at 2 without a restart, worker 1 the chief (it saves the checkpoints);
# the filler deleted, worker 0's replacement runs, joins with the survivors' state, and
# the chief moves back to it, which completes the job.
ECHIEF_RES=kubetrain.dev/e2e-chief-slot
s_elasticchief() {
  begin elasticchief
  local node out line j=mnist-elc u1 u2 logs="" SLOT_RES=$ECHIEF_RES
  node=$(k get nodes -o 'jsonpath={.items[0].metadata.name}' 2>&1)
  if out=$(slots "$node" 3 2>&1); then ok "node $node advertises 3 $ECHIEF_RES"
  else fail "node $node advertises 3 $ECHIEF_RES" "$out"; end; return; fi
  elasticchief_run "$node"
  kn delete pod chief-filler --ignore-not-found --wait=false >/dev/null 2>&1
  kn delete tj "$j" --ignore-not-found --wait=false >/dev/null 2>&1
  slots "$node"
  end
}
elasticchief_run() {
  local node=$1 t0 tl i
  # 2 x 300 steps of 3 x 64 examples, a checkpoint every 25 steps, so that worker 1
  # saves one while it is the chief.
  t0=$(now)
  el_start 300 25 || return
  u1=$(uid "$j-worker-1"); u2=$(uid "$j-worker-2")
  if out=$(take_room "$node" chief-filler 3); then ok "filler pod Running in a fourth slot"
  else fail "filler pod Running" "$out"; return; fi
  logs=$(kn logs "$j-worker-0" -c trainer 2>&1)
  tl=$(now)
  if out=$(kn delete pod "$j-worker-0" --wait=false 2>&1); then ok "the chief's pod (worker 0) deleted while the filler holds its room"
  else fail "the chief's pod deleted" "$out"; return; fi
  if out=$(wait_resized Shrank "pod $j-worker-0 unschedulable" 90); then
    ok "Resized/Shrank ($(since "$tl")s after the deletion): $out"
  else fail "Resized/Shrank naming the chief's replacement" "$out"$'\n'"$(explain "$j")"; return; fi
  check "status.members 1,2" "$(field "$j" '{.status.members}')" "1,2"
  if line=$(wait_log "$j-worker-1" 'elastic: this worker \(TF_CONFIG index 1\) is the chief now' 60); then
    ok "worker 1: ${line##*]: }"
  else fail "worker 1 takes over as the chief" "$(kn logs --tail 20 "$j-worker-1" -c trainer 2>&1)"; fi
  if line=$(wait_log "$j-worker-1" 'checkpoint at step [0-9]+ saved' 90); then ok "worker 1 saves the checkpoints: ${line##*]: }"
  else fail "worker 1 saves a checkpoint" "$(kn logs --tail 20 "$j-worker-1" -c trainer 2>&1)"$'\n'"$(explain "$j")"; fi
  # status.progress goes on meanwhile, scraped from the lowest member (worker 1, rank 0 of
  # the ring of 2, serves /metrics now).
  local p1 p2 pend
  p1=$(field "$j" '{.status.progress.step}'); pend=$(($(date +%s) + 45))
  while p2=$(field "$j" '{.status.progress.step}'); [ "${p2:-0}" -le "${p1:-0}" ] &&
    [ "$(date +%s)" -lt "$pend" ]; do sleep 1; done
  if [ -n "$p1" ] && [ "${p2:-0}" -gt "$p1" ] && [ "$(field "$j" '{.status.members}')" = "1,2" ]; then
    ok "status.progress.step moves on while the chief's slot is out: $p1 -> $p2 (members 1,2)"
  else fail "status.progress.step moves on while the chief's slot is out" \
    "step ${p1:-<none>} -> ${p2:-<none>}, members $(field "$j" '{.status.members}')"$'\n'"$(explain "$j")"; fi
  tl=$(now)
  if out=$(kn delete pod chief-filler --wait=false 2>&1); then ok "the filler deleted"
  else fail "the filler deleted" "$out"; fi
  if out=$(wait_resized Grew "pod $j-worker-0 runs" 120); then ok "Resized/Grew ($(since "$tl")s after): $out"
  else fail "Resized/Grew" "$out"$'\n'"$(explain "$j")"; return; fi
  if line=$(wait_log "$j-worker-0" "$JOINED" 90); then ok "worker 0's replacement joined: ${line##*]: }"
  else fail "worker 0's replacement joined from a survivor" "$(kn logs --tail 20 "$j-worker-0" -c trainer 2>&1)"$'\n'"$(explain "$j")"; return; fi
  if line=$(wait_log "$j-worker-1" 'is the chief now: this worker \(index 1\) hands over the checkpoints' 60); then
    ok "worker 1: ${line##*]: }"
  else fail "worker 1 hands the checkpoints back" "$(kn logs --tail 20 "$j-worker-1" -c trainer 2>&1)"; fi
  check "workers 1 and 2 the same pods, no container restarted" \
    "$(uid "$j-worker-1") $(uid "$j-worker-2") $(rcount "$j-worker-1") $(rcount "$j-worker-2")" "$u1 $u2 0 0"
  for i in 0 1 2; do logs+=$'\n'$(kn logs "$j-worker-$i" -c trainer 2>&1); done
  if wait_phase "$j" $((JOB_TIMEOUT * 2)) Succeeded; then ok "job Succeeded ($(since "$t0")s)"
  else fail "job Succeeded" "$(explain "$j")"; return; fi
  local att; att=$(field "$j" '{.status.attempt}')
  check "status.attempt 0 (no group restart), status.result.step 600" \
    "${att:-0} $(field "$j" '{.status.result.step}')" "0 600"
  check "no 'resuming from' in any worker's log (no checkpoint read)" "$(grep -c 'resuming from' <<<"$logs")" 0
}

# progress: a running job's status.progress (step growing, the PROGRESS column) from the
# chief's /metrics, then the chief's pod deleted mid-training: SIGTERM, the chief saves
# and exits 75, a disruption, and the first scrape of the new attempt records
# status.restarts.lastStepsLost 0 beside status.checkpoint.
s_progress() {
  begin progress
  local out s1="" s2="" col end a lost
  prog_field() { field mnist-prog "{.status.progress.$1}"; }
  if out=$(job mnist-prog "recoveryTimeoutSeconds: 0" | sed 's/stepsPerEpoch: 30/stepsPerEpoch: 200/' | kn apply -f - 2>&1)
  then ok "job mnist-prog applied (2 epochs x 200 steps)"
  else fail "job mnist-prog applied" "$out"; end; return; fi
  end=$(( $(date +%s) + 180 ))
  while [ "$(date +%s)" -lt "$end" ] && [ -z "$s1" ]; do s1=$(prog_field step); sleep 1; done
  end=$(( $(date +%s) + 60 ))
  while [ "$(date +%s)" -lt "$end" ] && { [ -z "$s2" ] || [ "$s2" -le "$s1" ]; }; do
    s2=$(prog_field step); sleep 1
  done
  if [ -n "$s1" ] && [ "${s2:-0}" -gt "$s1" ] && [ "$(prog_field totalSteps)" = 400 ]; then
    ok "status.progress.step grows ($s1 -> $s2 of 400, $(prog_field percent))"
  else fail "status.progress.step grows" "${s1:-<none>} -> ${s2:-<none>}"$'\n'"$(explain mnist-prog)"; fi
  out=$(kn get tj mnist-prog 2>&1)
  col=$(awk 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == "PROGRESS") c = i }
    NR == 2 { print $c }' <<<"$out")
  if [[ $col =~ ^[0-9]+%$ ]]; then ok "kubectl get tj: PROGRESS $col"
  else fail "kubectl get tj prints PROGRESS as N%" "$out"; fi
  end=$(( $(date +%s) + 60 ))
  while [ "$(date +%s)" -lt "$end" ] && [ -z "$(field mnist-prog '{.status.checkpoint.step}')" ]; do
    sleep 1
  done
  if out=$(kn delete pod mnist-prog-worker-0 --wait=false 2>&1); then ok "the chief's pod deleted mid-training"
  else fail "the chief's pod deleted" "$out"; fi
  end=$(( $(date +%s) + 180 ))
  a=""; lost=""
  while [ "$(date +%s)" -lt "$end" ]; do
    a=$(prog_field attempt); lost=$(field mnist-prog '{.status.restarts.lastStepsLost}')
    [ "${a:-0}" -ge 1 ] && [ -n "$lost" ] && break
    case "$(phase mnist-prog)" in Succeeded|Failed) break ;; esac
    sleep 1
  done
  if [ "${a:-0}" -ge 1 ] && [ "$lost" = 0 ]; then
    ok "attempt $a resumed from checkpoint $(field mnist-prog '{.status.checkpoint.step}'): lastStepsLost 0"
  else fail "after the deletion: lastStepsLost 0" "attempt ${a:-<none>} lost ${lost:-<none>}"$'\n'"$(explain mnist-prog)"; fi
  check "restarts application/disruption 0/1" "$(restarts mnist-prog)" "0/1"
  if wait_phase mnist-prog "$JOB_TIMEOUT" Succeeded; then ok "job Succeeded"
  else fail "job Succeeded" "$(explain mnist-prog)"; fi
  end
}

ALL=(install basic progress recovery elastic elasticchief tfmwms tfscale tfexit tfauto tfps killtrials preempt kill137 waiting
     suspend s3 cifar deadline badmodel invalid operator gang kueue kueuelive upgrade uninstall)
[ $# -gt 0 ] && ALL=("$@")

# --- running them --------------------------------------------------------------------------
# The scenarios below share the node (ALL lists them together, the longest first, so that
# they run as one batch whose lanes end together): each runs in a namespace of its own,
# $NS-<scenario>, with its own checkpoint claim, up to KT_SUITE_JOBS (3) at once; their
# jobs request no CPU (elastic's ask for an extended resource of its own, which no other
# pod asks for; s3's S3 gateway is a process on the machine, niced), so they only slow
# each other down. Every other scenario needs the cluster to itself
# (the node's free CPU: gang; Kueue's quota: kueue, kueuelive; the operator or the release:
# operator, upgrade, uninstall; the shared namespace: install, basic, whose hash preempt
# and suspend compare with): it waits for those in flight and runs alone, in $NS.
SHARED=(invalid preempt kill137 recovery elastic elasticchief killtrials badmodel progress suspend deadline waiting
        tfmwms tfscale tfps tfexit tfauto s3 cifar)
SUITE_JOBS=${KT_SUITE_JOBS:-3}
. .ci/inorder.sh
jobs_valid "e2e/suite.sh: KT_SUITE_JOBS=$SUITE_JOBS" "$SUITE_JOBS"
BATCH=()
BATCH_DIR=$(mktemp -d)
# The s3 scenario's S3 gateway, should the suite end while it runs.
trap 'kill -KILL "$(cat "$BATCH_DIR/s3.weed.pid" 2>/dev/null)" 2>/dev/null; rm -rf "$BATCH_DIR"' EXIT

# batch_run I: scenario BATCH[I] in a namespace of its own; its TAP (numbered from 1),
# results and measurements into $BATCH_DIR, then I.done. run_in_order runs it in the
# background, a subshell: the namespace and the counters set here stay in it.
batch_run() {
  local s=${BATCH[$1]} out
  {
    NS=$NS-$s RESULTS=() MEASURED=() _tap_n=0 _tap_failed=0
    if ! out=$(ns_setup); then
      begin "$s"; fail "namespace $NS with examples/pvc.yaml applied" "$out"; end
    else
      "s_$s"
      k delete namespace "$NS" --wait=false >/dev/null 2>&1
    fi
    printf '%s\n' "${RESULTS[@]}" >"$BATCH_DIR/$1.res"
    printf '%s\n' "${MEASURED[@]}" >"$BATCH_DIR/$1.meas"
  } >"$BATCH_DIR/$1.out" 2>&1
  touch "$BATCH_DIR/$1.done"
}
# batch_show I: BATCH[I]'s output with its TAP lines numbered on from this shell's count.
batch_show() {
  local l n
  while IFS= read -r l; do
    if [[ $l =~ ^(not )?ok\ [0-9]+(.*)$ ]]; then
      _tap_n=$((_tap_n + 1)); n=$_tap_n
      [ -n "${BASH_REMATCH[1]}" ] && _tap_failed=$((_tap_failed + 1))
      echo "${BASH_REMATCH[1]}ok $n${BASH_REMATCH[2]}"
    else echo "$l"; fi
  done <"$BATCH_DIR/$1.out"
  mapfile -t -O "${#RESULTS[@]}" RESULTS < <(grep . "$BATCH_DIR/$1.res")
  mapfile -t -O "${#MEASURED[@]}" MEASURED < <(grep . "$BATCH_DIR/$1.meas")
}
# batch_flush: runs the scenarios collected in BATCH and empties it. Their namespaces are
# gone when it returns, their pods with them, so that the next scenario has the node to
# itself (gang counts every pod's CPU request; waiting leaves a pod asking for 1000 CPUs).
batch_flush() {
  [ ${#BATCH[@]} -gt 0 ] || return 0
  log "side by side, $SUITE_JOBS at once: ${BATCH[*]}"
  rm -f "$BATCH_DIR"/*
  run_in_order "$SUITE_JOBS" ${#BATCH[@]} "$BATCH_DIR" batch_run batch_show
  local s out
  for s in "${BATCH[@]}"; do
    out=$(k wait --for=delete "namespace/$NS-$s" --timeout 180s 2>&1) ||
      [[ $out == *NotFound* || $out == *"not found"* ]] ||
      tap_fail "namespace $NS-$s gone after its scenario" "$out"
  done
  BATCH=()
}

T0=$(now)
log "provider $PROVIDER, kubectl $KUBECTL, helm $HELM, namespace $NS"
for s in "${ALL[@]}"; do
  declare -F "s_$s" >/dev/null || { tap_fail "unknown scenario $s"; continue; }
  if [ "$SUITE_JOBS" -gt 1 ] && [[ " ${SHARED[*]} " == *" $s "* ]]; then BATCH+=("$s"); continue; fi
  batch_flush
  "s_$s"
done
batch_flush
echo "#"
echo "# scenario   result   time"
for r in "${RESULTS[@]}"; do echo "# $r"; done
for m in "${MEASURED[@]}"; do echo "# measured: $m"; done
echo "# suite wall time: $(since "$T0") s"
tap_done
