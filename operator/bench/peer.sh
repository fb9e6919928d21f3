# shellcheck shell=bash
# Kubeflow's training-operator (TFJob) as the peer of the operator benchmarks
# (operator/bench/run.sh, scale.sh). Source it after e2e/cluster/lib.sh with `dir` (the
# benchmark's scratch directory) set; it sets
#   KF_VERSION  the training-operator version (default v1.9.3)
#   kf_bin      its binary, built once from the Go module proxy into
#               $KT_CACHE/kubeflow/bin (GOMAXPROCS=2, go build -p 2)
#   kf_crd      its TFJob CRD, in the Go module cache
#   kf_note     empty, or why the peer cannot run (BENCH_PEER=0, a failed build)
# and defines kf_install (the CRD and the webhook objects, on the cluster of $KUBECONFIG,
# through the function k) and kf_certs. Neither the binary nor the CRD is copied into the
# repository.
# shellcheck disable=SC2154 # dir is the caller's
KF_VERSION=${KF_VERSION:-v1.9.3}
kf_bin=$KT_CACHE/kubeflow/bin/training-operator.v1
kf_note=""
if [ "${BENCH_PEER:-1}" = 0 ]; then
  kf_note="peer run skipped (BENCH_PEER=0)"
elif [ ! -x "$kf_bin" ]; then
  log "building Kubeflow training-operator $KF_VERSION (once per machine)"
  (
    kt_go_env
    export GOBIN=$KT_CACHE/kubeflow/bin
    mkdir -p "$GOBIN"
    cd "$KT_CACHE/kubeflow" 2>/dev/null || cd /tmp
    go install -p 2 \
      "github.com/kubeflow/training-operator/cmd/training-operator.v1@$KF_VERSION"
  ) >"$dir/kf-build.log" 2>&1 ||
    kf_note="go install of training-operator $KF_VERSION failed: $(
      tail -n 3 "$dir/kf-build.log" | tr '\n' ' ')"
fi
kf_crd=$KT_CACHE/go/pkg/mod/github.com/kubeflow/training-operator@$KF_VERSION
kf_crd+=/manifests/base/crds/kubeflow.org_tfjobs.yaml
[ -z "$kf_note" ] && [ ! -f "$kf_crd" ] &&
  kf_note="TFJob CRD not found in the module cache ($kf_crd)"

# kf_install: the TFJob CRD, and what the training-operator's certificate rotator wants to
# exist: its Secret and its validating webhook configuration. An empty configuration (no
# webhooks) keeps TFJob admission free of a webhook nobody can reach at this tier. Sets
# kf_note when it fails.
kf_install() {
  local err
  [ -z "$kf_note" ] || return 0
  if ! err=$(k apply --server-side -f "$kf_crd" 2>&1 && k create namespace kubeflow 2>&1 &&
      k -n kubeflow create secret generic training-operator-webhook-cert 2>&1 &&
      k apply -f - 2>&1 <<'YAML'
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata: {name: validator.training-operator.kubeflow.org}
webhooks: []
YAML
  ); then kf_note="could not install the TFJob CRD and webhook objects: $err"; fi
  k wait --for condition=Established --timeout 60s crd/tfjobs.kubeflow.org >/dev/null 2>&1
}

# kf_certs: the kubelet's part for the training-operator. In a cluster its webhook Secret
# is mounted at the certificate directory its webhook server reads (a fixed path in its
# code); here the files are copied there once its rotator has filled the Secret.
kf_certs() {
  local d=/tmp/k8s-webhook-server/serving-certs f
  mkdir -p "$d"
  for _ in $(seq 600); do
    if [ -n "$(k -n kubeflow get secret training-operator-webhook-cert \
        -o 'jsonpath={.data.tls\.crt}' 2>/dev/null)" ]; then
      for f in ca.crt tls.crt tls.key; do
        k -n kubeflow get secret training-operator-webhook-cert -o "jsonpath={.data.${f/./\\.}}" |
          base64 -d >"$d/$f.tmp" && mv "$d/$f.tmp" "$d/$f"
      done
      return 0
    fi
    sleep 0.5
  done
}
