#!/usr/bin/env bash
# The TrainingJob CRD (crds/) on a real kube-apiserver: established, defaults applied,
# invalid objects refused at admission with the field named, kubectl explain, printer
# columns, the status and scale subresources, and garbage collection of objects a
# deleted job owns.
# Runs its own api-level cluster (e2e/cluster/up.sh api) in build/e2e/test-crd and tears
# it down at exit. Skips, saying why, when the Kubernetes binaries or etcd are missing and
# cannot be had.
set -uo pipefail # no -e: a failed check is reported (not ok) and the test goes on
cd "$(dirname "$0")/../.." || exit 1
. e2e/lib/tap.sh

export KT_RUN=$PWD/build/e2e/test-crd/run
trap 'bash e2e/cluster/down.sh >/dev/null 2>&1' EXIT

if ! err=$(bash e2e/cluster/build-k8s.sh api 2>&1 >/dev/null); then
  tap_fail "building the Kubernetes binaries (e2e/cluster/build-k8s.sh api)" "$(tail -n 5 <<<"$err")"
  tap_done; exit
fi
if ! bash -c '. e2e/cluster/lib.sh && kt_etcd' >/dev/null; then
  tap_skip "TrainingJob CRD on kube-apiserver" "etcd not installed (Debian package etcd-server)"
  tap_done; exit
fi

if ! out=$(bash e2e/cluster/up.sh api 2>&1); then
  tap_fail "up.sh api brings the control plane up" "$out"
  tap_done; exit
fi
tap_ok "up.sh api brings the control plane up"
# shellcheck source=/dev/null # the cluster's variables, written by e2e/cluster/up.sh
. "$KT_RUN/env"
k() { "$KT_K8S_BIN/kubectl" --request-timeout 30s "$@"; }

tap_check "kubectl apply -f crds/" k apply -f crds/
# Polled rather than `kubectl wait`, which right after the create can find no conditions
# yet and give up (".status.conditions accessor error").
established() {
  local end=$((SECONDS + 60))
  until [ "$(k get crd trainingjobs.kubetrain.dev \
      -o 'jsonpath={.status.conditions[?(@.type=="Established")].status}')" = True ]; do
    [ $SECONDS -ge $end ] && return 1
    sleep 0.25
  done
}
tap_check "CRD trainingjobs.kubetrain.dev is Established" established
# Discovery of the new resource lags Established by a moment in kubectl's cache.
for _ in $(seq 40); do k get tj >/dev/null 2>&1 && break; sleep 0.5; done

# --- defaults ------------------------------------------------------------------------
k apply -f - <<'EOF' >/dev/null
apiVersion: kubetrain.dev/v1alpha1
kind: TrainingJob
metadata: {name: defaults}
spec:
  workers: 2
  checkpoint: {claimName: ckpt}
EOF
tap_check "a minimal TrainingJob is accepted" k get tj defaults
# jp EXPR: one field of the stored job.
jp() { k get tj defaults -o "jsonpath={$1}"; }
want_defaults=(
  ".spec.workers=2" ".spec.port=2222" ".spec.collective=auto" ".spec.gpusPerWorker=0"
  ".spec.model=tutorial-cnn" ".spec.dataset.name=fashion-mnist" ".spec.dataset.path=/data"
  ".spec.dataset.shardPolicy=auto" ".spec.training.epochs=3" ".spec.training.stepsPerEpoch=70"
  ".spec.training.perWorkerBatchSize=64" ".spec.training.optimizer.name=sgd"
  ".spec.training.optimizer.learningRate=0.001" ".spec.training.optimizer.scaleByWorkers=false"
  ".spec.training.seed=1" ".spec.checkpoint.claimName=ckpt" ".spec.checkpoint.path=/checkpoints"
  ".spec.checkpoint.everySteps=50" ".spec.checkpoint.keep=5" ".spec.restartPolicy=OnFailure"
  ".spec.backoffLimit=6" ".spec.cleanPodPolicy=Running" ".spec.successPolicy=ChiefCompleted"
  ".spec.suspend=false" ".spec.activeDeadlineSeconds=" ".spec.ttlSecondsAfterFinished="
  ".spec.startupDeadlineSeconds=" ".spec.recoveryTimeoutSeconds=120"
)
bad=
for kv in "${want_defaults[@]}"; do
  got=$(jp "${kv%%=*}")
  [ "$got" = "${kv#*=}" ] || bad="$bad${kv%%=*}: got '$got', want '${kv#*=}'"$'\n'
done
if [ -z "$bad" ]; then tap_ok "defaults applied (${#want_defaults[@]} fields)"
else tap_fail "defaults applied" "$bad"; fi

# --- admission -----------------------------------------------------------------------
# rejected NAME FIELD TEXT SPEC: creating a job with SPEC fails and the error names FIELD
# (and contains TEXT). No pipes into it: tap counters must stay in this shell.
rejected() {
  local name=$1 field=$2 text=$3 out
  if out=$(k create -f - 2>&1 <<<"$(job x "$4")"); then
    tap_fail "rejected: $name" "accepted: $out"
    return
  fi
  if grep -qF -- "$field" <<<"$out" && grep -qF -- "$text" <<<"$out"; then
    tap_ok "rejected: $name ($field)"
  else
    # shellcheck disable=SC2016 # the quotes around $text are meant to be printed
    tap_fail "rejected: $name (error must name $field${text:+ and '$text'})" "$out"
  fi
}
job() { printf 'apiVersion: kubetrain.dev/v1alpha1\nkind: TrainingJob\nmetadata: {name: %s}\nspec: %s\n' "$1" "$2"; }

rejected "workers: 0" spec.workers "greater than or equal to 1" '{workers: 0}'
rejected "workers of the wrong type" spec.workers "integer" '{workers: "two"}'
rejected "collective not in the enum" spec.collective '"mpi"' '{collective: mpi}'
rejected "shardPolicy not in the enum" spec.dataset.shardPolicy '' '{dataset: {shardPolicy: rows}}'
rejected "dataset.source without a scheme" spec.dataset.source "should match" \
  '{dataset: {source: /data/mnist.npz}}'
rejected "dataset.evalSource of an unknown scheme" spec.dataset.evalSource "should match" \
  '{dataset: {evalSource: "parquet:/data/x"}}'
rejected "dataset.imageShape of two dimensions" spec.dataset.imageShape "" \
  '{dataset: {imageShape: [28, 28]}}'
rejected "pixelScale not in the enum" spec.dataset.pixelScale '' '{dataset: {pixelScale: half}}'
rejected "restartPolicy not in the enum" spec.restartPolicy '' '{restartPolicy: Always}'
rejected "optimizer not in the enum" spec.training.optimizer.name '' '{training: {optimizer: {name: adagrad}}}'
rejected "learningRate 0" spec.training.optimizer.learningRate '' '{training: {optimizer: {learningRate: 0}}}'
rejected "port above 65535" spec.port '' '{port: 70000}'
rejected "nccl without GPUs (cross-field rule)" spec.collective "gpusPerWorker" '{collective: nccl}'
rejected "unknown built-in model" spec.model '' '{model: resnet50}'
rejected "inline model without layers" spec.model '' '{model: {name: mnist}}'
rejected "Keras model JSON without config" spec.model '' '{model: {class_name: Sequential}}'
rejected "model of the wrong type" spec.model '' '{model: 7}'
rejected "cleanPodPolicy not in the enum" spec.cleanPodPolicy '' '{cleanPodPolicy: Some}'
rejected "successPolicy not in the enum" spec.successPolicy '' '{successPolicy: AnyWorker}'
rejected "startupDeadlineSeconds 0" spec.startupDeadlineSeconds "greater than or equal to 1" \
  '{startupDeadlineSeconds: 0}'
rejected "recoveryTimeoutSeconds below 0" spec.recoveryTimeoutSeconds "greater than or equal to 0" \
  '{recoveryTimeoutSeconds: -1}'
rejected "elastic.minWorkers above workers (cross-field rule)" spec.elastic.minWorkers \
  "must be at most workers" '{workers: 2, elastic: {minWorkers: 3}}'
rejected "elastic.minWorkers 0" spec.elastic.minWorkers "greater than or equal to 1" \
  '{elastic: {minWorkers: 0}}'
rejected "elastic without minWorkers" spec.elastic.minWorkers "Required value" '{elastic: {}}'
rejected "elastic.replaceTimeoutSeconds 0" spec.elastic.replaceTimeoutSeconds \
  "greater than or equal to 1" '{elastic: {minWorkers: 1, replaceTimeoutSeconds: 0}}'
rejected "elastic.replaceTimeoutSeconds above 3600" spec.elastic.replaceTimeoutSeconds \
  "less than or equal to 3600" '{elastic: {minWorkers: 1, replaceTimeoutSeconds: 3601}}'
rejected "stepsPerEpoch 0 under shardPolicy file with 2 workers (cross-field rule)" \
  spec.training.stepsPerEpoch "needs a single worker" \
  '{workers: 2, dataset: {shardPolicy: file}, training: {stepsPerEpoch: 0}}'
rejected "stepsPerEpoch 0 under shardPolicy file with a chief and a worker (cross-field rule)" \
  spec.training.stepsPerEpoch "needs a single worker" \
  '{workers: 1, chief: {}, dataset: {shardPolicy: file}, training: {stepsPerEpoch: 0}}'
rejected "command without image (cross-field rule)" spec.image "command needs image" \
  '{command: [python3, mwms.py]}'
rejected "args without command (cross-field rule)" spec.args "args needs command" \
  '{image: tf, args: [--epochs, "2"]}'
rejected "empty command" spec.command '' '{image: tf, command: []}'
rejected "command of the wrong type" spec.command '' '{image: tf, command: python3}'
rejected "ps with the C trainer" spec.ps "C trainer runs chief and workers only" '{ps: {}}'
rejected "evaluator with the C trainer" spec.evaluator "C trainer runs chief and workers only" \
  '{evaluator: {}}'
rejected "ps without a chief" spec.ps "ps needs a chief" '{image: tf, command: [p], ps: {}}'
rejected "two chiefs" spec.chief.replicas "less than or equal to 1" '{chief: {replicas: 2}}'
rejected "a role's command without spec.command" spec.command "needs spec.command" \
  '{chief: {command: [p]}}'
rejected "a role's args without spec.command" spec.command "needs spec.command" \
  '{chief: {args: [a]}}'
ck='checkpoint: {claimName: ck}'
rejected "training.export with a .. component" spec.training.export "without a leading /" \
  "{training: {export: ../x.keras}, $ck}"
rejected "training.export absolute" spec.training.export "without a leading /" \
  "{training: {export: /abs.keras}, $ck}"
rejected "training.export of another suffix" spec.training.export ".keras or .weights.h5" \
  "{training: {export: model.zip}, $ck}"
rejected "training.export over 255 bytes" spec.training.export "255" \
  "{training: {export: $(printf '%0256d' 0).keras}, $ck}"
rejected "training.export without a checkpoint claim" spec.training.export \
  "needs checkpoint.claimName" '{training: {export: model.keras}}'
rejected "training.export with a user's program" spec.training.export "C trainer's" \
  "{image: tf, command: [p], training: {export: model.keras}, $ck}"
iw=spec.training.initialWeights
rejected "training.initialWeights with a .. component" $iw "without a leading /" \
  "{training: {initialWeights: a/../../x.keras}, $ck}"
rejected "training.initialWeights absolute" $iw "without a leading /" \
  "{training: {initialWeights: /abs.weights.h5}, $ck}"
rejected "training.initialWeights of another suffix" $iw ".keras, .weights.h5 or .h5" \
  "{training: {initialWeights: model.pt}, $ck}"
rejected "training.initialWeights over 255 bytes" $iw "255" \
  "{training: {initialWeights: $(printf '%0256d' 0).h5}, $ck}"
rejected "training.initialWeights without a checkpoint claim" $iw "needs checkpoint.claimName" \
  '{training: {initialWeights: base/model.keras}}'
rejected "training.initialWeights with a user's program" $iw "C trainer's" \
  "{image: tf, command: [p], training: {initialWeights: base/model.keras}, $ck}"

tap_check "an inline Sequential model is accepted" k create -f - <<'EOF'
apiVersion: kubetrain.dev/v1alpha1
kind: TrainingJob
metadata: {name: inline}
spec:
  workers: 1
  model: {layers: [{type: Flatten}, {type: Dense, units: 10}]}
  collective: nccl
  gpusPerWorker: 1
EOF
got=$(k get tj inline -o 'jsonpath={.spec.model.layers[1].units}')
if [ "$got" = 10 ]; then tap_ok "the inline model is stored unpruned"
else tap_fail "the inline model is stored unpruned" "layers[1].units = '$got'"; fi
tap_check "a Keras model's to_json() inline is accepted" k create -f - <<'EOF'
apiVersion: kubetrain.dev/v1alpha1
kind: TrainingJob
metadata: {name: keras-inline}
spec:
  workers: 1
  model: {"class_name": "Sequential", "config": {"name": "m", "layers": [{"class_name": "Dense",
    "config": {"units": 10, "activation": "softmax"}}]}, "keras_version": "3.15.1"}
EOF
got=$(k get tj keras-inline -o 'jsonpath={.spec.model.config.layers[0].config.units} {.spec.model.keras_version}')
if [ "$got" = "10 3.15.1" ]; then tap_ok "the Keras model is stored unpruned"
else tap_fail "the Keras model is stored unpruned" "got '$got'"; fi
tap_check "training.export out/model.keras with a checkpoint claim is accepted" \
  k create -f - <<'EOF'
apiVersion: kubetrain.dev/v1alpha1
kind: TrainingJob
metadata: {name: export}
spec:
  training: {export: out/model.keras}
  checkpoint: {claimName: ck}
EOF
tap_check "training.initialWeights base/model.keras with a checkpoint claim is accepted" \
  k create -f - <<'EOF'
apiVersion: kubetrain.dev/v1alpha1
kind: TrainingJob
metadata: {name: fine-tune}
spec:
  training: {initialWeights: base/model.keras, export: tuned.weights.h5}
  checkpoint: {claimName: ck}
EOF
tap_check "NumPy data sources and a pixel scale are accepted" k create -f - <<'EOF'
apiVersion: kubetrain.dev/v1alpha1
kind: TrainingJob
metadata: {name: numpy-data}
spec:
  workers: 1
  dataset:
    source: npz:/data/mnist.npz?x=images&y=labels
    evalSource: npy:/data/x_test.npy,/data/y_test.npy
    pixelScale: raw
EOF
tap_check "TFRecord sources and their features are accepted" k create -f - <<'EOF'
apiVersion: kubetrain.dev/v1alpha1
kind: TrainingJob
metadata: {name: tfrecord-data}
spec:
  workers: 1
  dataset:
    source: tfrecord:/data/train-*
    evalSource: tfrecord:/data/test-00000-of-00001
    imageFeature: image/encoded
    labelFeature: image/class/label
    imageShape: [28, 28, 1]
EOF
tap_check "stepsPerEpoch 0 under shardPolicy file is accepted for one worker" k create -f - <<'EOF'
apiVersion: kubetrain.dev/v1alpha1
kind: TrainingJob
metadata: {name: file-one-pass}
spec:
  workers: 1
  dataset: {source: "tfrecord:/data/train-*", shardPolicy: file}
  training: {stepsPerEpoch: 0}
EOF
tap_check "a user's program (command, args, image) is accepted" k create -f - <<'EOF'
apiVersion: kubetrain.dev/v1alpha1
kind: TrainingJob
metadata: {name: user-program}
spec:
  workers: 2
  image: kubetrain/tensorflow:0.1.0
  command: [python3, mwms.py]
  args: [--epochs, "2"]
EOF
tap_check "a chief, ps and evaluator beside the workers are accepted" k create -f - <<'EOF'
apiVersion: kubetrain.dev/v1alpha1
kind: TrainingJob
metadata: {name: roles}
spec:
  workers: 2
  image: kubetrain/tensorflow:0.1.0
  command: [python3, ps.py]
  chief: {}
  ps: {replicas: 2}
  evaluator: {command: [python3, evaluator.py], template: {spec: {nodeSelector: {a: b}}}}
EOF
# What kubetrain-operator convert-tfjob writes: the committed example (test-tfjob checks it
# is what the converter prints now) is stored as written, and a TFJob whose evaluator runs
# another program (args: [], a template that empties the workers' nodeSelector) converts
# into a job the schema and CEL rules accept.
tap_check "examples/tfjob/tf-ps-trainingjob.yaml (convert-tfjob's output) is accepted" \
  k create -f examples/tfjob/tf-ps-trainingjob.yaml
got=$(k get tj tf-ps -o 'jsonpath={.spec.restartPolicy} {.spec.cleanPodPolicy} {.spec.ps.template.spec.containers[0].resources.requests.cpu} {.spec.args[1]}')
if [ "$got" = "OnFailure Running 500m 3" ]; then tap_ok "the converted job is stored unpruned"
else tap_fail "the converted job is stored unpruned" "got '$got'"; fi
conv=${KT_OPERATOR_BIN:-build/bin/kubetrain-operator}
cat >"$KT_RUN/tfjob-eval.yaml" <<'EOF'
apiVersion: kubeflow.org/v1
kind: TFJob
metadata: {name: tfjob-eval}
spec:
  tfReplicaSpecs:
    Worker:
      replicas: 2
      restartPolicy: OnFailure
      template:
        spec:
          nodeSelector: {pool: train}
          containers:
          - {name: tensorflow, image: tf:1, command: [python3, mwms.py], args: [--epochs, "2"]}
    Evaluator:
      template:
        spec:
          containers:
          - {name: tensorflow, image: tf:1, command: [python3, evaluator.py]}
EOF
if [ -x "$conv" ]; then
  out=$("$conv" convert-tfjob "$KT_RUN/tfjob-eval.yaml" 2>/dev/null | k create -f - 2>&1); rc=$?
  got=$(k get tj tfjob-eval -o 'jsonpath={.spec.evaluator.command[1]} {.spec.evaluator.args} {.spec.evaluator.template.spec.nodeSelector}' 2>&1)
  if [ $rc = 0 ] && [ "$got" = "evaluator.py [] {}" ]; then
    tap_ok "a converted TFJob with an evaluator of its own is accepted as written"
  else tap_fail "a converted TFJob with an evaluator of its own is accepted" "rc=$rc $out; got '$got'"; fi
else
  tap_skip "a converted TFJob with an evaluator is accepted" "$conv is not built (run make)"
fi
got=$(k get tj roles -o 'jsonpath={.spec.chief.replicas} {.spec.ps.replicas} {.spec.evaluator.replicas}')
if [ "$got" = "1 2 1" ]; then tap_ok "role replicas default to 1"
else tap_fail "role replicas default to 1" "got '$got'"; fi
k patch tj roles --subresource=status --type merge \
  -p '{"status":{"roles":{"ps":{"active":2,"ready":1}}}}' >/dev/null 2>&1
got=$(k get tj roles -o 'jsonpath={.status.roles.ps.active} {.status.roles.ps.ready}')
if [ "$got" = "2 1" ]; then tap_ok "status.roles.<role> counts are stored"
else tap_fail "status.roles.<role> counts are stored" "got '$got'"; fi
got=$(k get tj user-program -o 'jsonpath={.spec.command[1]} {.spec.args[1]}')
if [ "$got" = "mwms.py 2" ]; then tap_ok "the command and args are stored"
else tap_fail "the command and args are stored" "got '$got'"; fi

# Immutability: an update that changes port or the checkpoint claim is refused; a
# mutable field (workers) still changes.
if ! out=$(k patch tj defaults --type merge -p '{"spec":{"port":3333}}' 2>&1) &&
   grep -q 'spec.port' <<<"$out" && grep -q immutable <<<"$out"; then
  tap_ok "rejected: changing spec.port (immutable)"
else tap_fail "rejected: changing spec.port (immutable)" "$out"; fi
if ! out=$(k patch tj defaults --type merge -p '{"spec":{"checkpoint":{"claimName":"other"}}}' 2>&1) &&
   grep -q 'spec.checkpoint.claimName' <<<"$out" && grep -q immutable <<<"$out"; then
  tap_ok "rejected: changing spec.checkpoint.claimName (immutable)"
else tap_fail "rejected: changing spec.checkpoint.claimName (immutable)" "$out"; fi
tap_check "workers can change on an existing job" \
  k patch tj defaults --type merge -p '{"spec":{"workers":3}}'

# --- kubectl explain -----------------------------------------------------------------
out=$(k explain trainingjob.spec.workers 2>&1)
if grep -q 'world size' <<<"$out"; then tap_ok "kubectl explain trainingjob.spec.workers describes it"
else tap_fail "kubectl explain trainingjob.spec.workers describes it" "$out"; fi
out=$(k explain tj.status.restarts.disruption 2>&1)
if grep -q 'eviction' <<<"$out"; then tap_ok "kubectl explain reaches status fields"
else tap_fail "kubectl explain reaches status fields" "$out"; fi

# --- status subresource and printer columns ------------------------------------------
k patch tj defaults --subresource status --type merge -p \
  '{"status":{"phase":"Running","observedGeneration":2,"ready":"2/3","currentWorkers":2,"selector":"kubetrain.dev/job-name=defaults,kubetrain.dev/role=worker","workers":{"active":3,"ready":2},"restarts":{"application":1,"disruption":4,"stepsLost":3},"result":{"accuracy":0.5,"export":"/checkpoints/defaults/model.keras"},"progress":{"step":90,"totalSteps":200,"percent":"45%"},"checkpoint":{"step":80}}}' \
  >/dev/null 2>&1
k patch tj defaults --type merge -p '{"status":{"phase":"Failed"}}' >/dev/null 2>&1
got=$(k get tj defaults -o 'jsonpath={.status.phase}')
if [ "$got" = Running ]; then tap_ok "status is written only through the status subresource"
else tap_fail "status is written only through the status subresource" "phase '$got', want Running"; fi
got=$(k get tj defaults -o 'jsonpath={.status.result.export}')
if [ "$got" = /checkpoints/defaults/model.keras ]; then tap_ok "status.result.export is kept"
else tap_fail "status.result.export is kept" "'$got'"; fi

out=$(k get tj defaults 2>&1)
hdr=$(head -n 1 <<<"$out" | tr -s ' ')
row=$(sed -n 2p <<<"$out" | tr -s ' ')
if [ "$hdr" = "NAME PHASE WORKERS CURRENT READY PROGRESS RESTARTS AGE" ] &&
  [[ $row == "defaults Running 3 2 2/3 45% 1 "* ]]; then
  tap_ok "kubectl get tj prints Phase, Workers, Current, Ready, Progress, Restarts, Age"
else tap_fail "kubectl get tj prints Phase, Workers, Current, Ready, Progress, Restarts, Age" "$out"; fi
out=$(k get tj defaults -o wide 2>&1)
if [[ $(sed -n 2p <<<"$out" | tr -s ' ') == "defaults Running 3 2 2/3 45% 1 4 80 3 0.5 "* ]]; then
  tap_ok "kubectl get tj -o wide adds Disruptions, Checkpoint, Lost and Accuracy"
else tap_fail "kubectl get tj -o wide adds Disruptions, Checkpoint, Lost and Accuracy" "$out"; fi
if ! out=$(k patch tj defaults --subresource status --type merge -p '{"status":{"phase":"Exploded"}}' 2>&1) &&
   grep -q 'status.phase' <<<"$out"; then tap_ok "rejected: status.phase not in the enum"
else tap_fail "rejected: status.phase not in the enum" "$out"; fi

# --- scale subresource ----------------------------------------------------------------
# Replicas are spec.workers, status.currentWorkers the running ones, status.selector the
# worker pods. A scale update is checked against the schema: workers stays in 1..1024.
scale_path='{.spec.replicas} {.status.replicas} {.status.selector}'
got=$(k get tj defaults --subresource=scale -o "jsonpath=$scale_path" 2>&1)
want="3 2 kubetrain.dev/job-name=defaults,kubetrain.dev/role=worker"
if [ "$got" = "$want" ]; then tap_ok "kubectl get --subresource=scale reads workers, currentWorkers, selector"
else tap_fail "kubectl get --subresource=scale reads workers, currentWorkers, selector" "got '$got', want '$want'"; fi
k scale tj/defaults --replicas 4 >/dev/null 2>&1
if [ "$(jp .spec.workers)" = 4 ]; then tap_ok "kubectl scale --replicas 4 sets spec.workers 4"
else tap_fail "kubectl scale --replicas 4 sets spec.workers 4" "spec.workers '$(jp .spec.workers)'"; fi
for n in 0 1025; do
  if ! out=$(k scale tj/defaults --replicas "$n" 2>&1) && grep -q 'spec.workers' <<<"$out" &&
    [ "$(jp .spec.workers)" = 4 ]; then
    tap_ok "rejected: kubectl scale --replicas $n (naming spec.workers; it stays 4)"
  else tap_fail "rejected: kubectl scale --replicas $n" "$out; spec.workers '$(jp .spec.workers)'"; fi
done

# An elastic job: replaceTimeoutSeconds defaults to 30, and a scale below minWorkers is
# refused naming spec.elastic.minWorkers (the cross-field rule holds for the subresource).
k create -f - >/dev/null <<'EOF'
apiVersion: kubetrain.dev/v1alpha1
kind: TrainingJob
metadata: {name: elastic}
spec: {workers: 3, elastic: {minWorkers: 2}}
EOF
got=$(k get tj elastic -o 'jsonpath={.spec.elastic.minWorkers} {.spec.elastic.replaceTimeoutSeconds}')
if [ "$got" = "2 30" ]; then tap_ok "elastic job accepted, replaceTimeoutSeconds defaults to 30"
else tap_fail "elastic job accepted, replaceTimeoutSeconds defaults to 30" "got '$got'"; fi
tap_check "kubectl scale of an elastic job down to minWorkers" k scale tj/elastic --replicas 2
if ! out=$(k scale tj/elastic --replicas 1 2>&1) && grep -q 'spec.elastic.minWorkers' <<<"$out" &&
  [ "$(k get tj elastic -o 'jsonpath={.spec.workers}')" = 2 ]; then
  tap_ok "rejected: kubectl scale below elastic.minWorkers (naming it; workers stays 2)"
else tap_fail "rejected: kubectl scale below elastic.minWorkers" "$out"; fi

# --- garbage collection --------------------------------------------------------------
# A ConfigMap owned by the job goes when the job is deleted; one not owned stays.
uid=$(k get tj defaults -o 'jsonpath={.metadata.uid}')
k apply -f - >/dev/null <<EOF
apiVersion: v1
kind: ConfigMap
metadata:
  name: owned
  ownerReferences:
    - {apiVersion: kubetrain.dev/v1alpha1, kind: TrainingJob, name: defaults, uid: "$uid", controller: true, blockOwnerDeletion: true}
data: {a: b}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: unowned}
data: {a: b}
EOF
tap_check "job deleted" k delete tj defaults --wait=true --timeout 30s
gone=0
# The collector picks up a new CRD at its next discovery resync (30 s), hence the margin.
for _ in $(seq 180); do
  if ! k get configmap owned >/dev/null 2>&1; then gone=1; break; fi
  sleep 0.5
done
if [ $gone = 1 ]; then tap_ok "the garbage collector deletes a ConfigMap owned by the deleted job"
else tap_fail "the garbage collector deletes a ConfigMap owned by the deleted job" \
  "configmap/owned still present after 90s; $(tail -n 5 "$KT_RUN/logs/kube-controller-manager.log")"; fi
tap_check "a ConfigMap not owned by the job stays" k get configmap unowned

tap_done
