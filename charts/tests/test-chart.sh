#!/usr/bin/env bash
# The Helm chart (charts/kubetrain), the examples and the images, checked as users meet
# them:
#   - the chart's CRD is crds/ byte for byte; helm lint --strict;
#   - helm template for the default, single-namespace, no-leader-election,
#     ServiceMonitor + PodMonitor (cluster-wide and single-namespace) and Kueue queues
#     (kueue.enabled; charts/tests/test-chart-kueue.sh applies them) values: kinds,
#     labels, RBAC (no wildcard, exactly the operator's verbs), security context, probes,
#     flags the operator really has, the PodMonitor's selector against the operator's pod
#     labels and examples/job-metrics.yaml (charts/tests/check-render.py), and that table
#     of verbs read back from the API requests in operator/src;
#   - on an api-level cluster (e2e/cluster/up.sh api, its own run dir under build/e2e):
#     the rendered chart and every example pass a server-side dry run; prometheus-operator's
#     own CRDs (PO_VERSION, default v0.85.0, read from its Go module in the module cache
#     under $KT_CACHE by charts/tests/prometheus-operator.sh, never copied here) install, the
#     chart's PodMonitor and ServiceMonitor (cluster-wide and single-namespace) are created
#     under them with strict field validation and stored with every field, and four broken
#     copies (wrong type, value outside an enum, unknown field, bad duration) are refused
#     naming the field; prometheus-operator's operator, built from that module once per
#     machine, turns them into a Prometheus configuration whose relabelings, applied to
#     pod-discovery targets with the operator's pod labels (charts/tests/check-monitoring.py),
#     keep the chief's metrics port only, in the namespaces the PodMonitor names, and the
#     operator's metrics Service only (a download or build that fails is a failure; only
#     a machine without go skips); helm install with a value of the wrong type or an
#     unknown key fails naming the value and creates nothing; a real install's
#     ServiceAccount may do what the operator does and no more (no get, list or watch of
#     any Secret); its ValidatingAdmissionPolicy refuses each refused template of
#     operator/tests/podpolicy-cases.json naming the field, and admits the allowed ones;
#     when build/bin/kubetrain-operator exists, it runs with that ServiceAccount's token
#     and the chart's args and turns examples/job.yaml into its Service, Secret and pods
#     without a single forbidden request, cluster-wide and in single-namespace mode;
#   - where a Docker daemon answers: the images build (each when its sources exist), sizes
#     within the targets, the operator image answers /healthz and /readyz, and the trainer
#     image trains two steps on its baked-in Fashion-MNIST.
# Whatever cannot run is reported as skipped with the reason.
set -uo pipefail # no -e: a failed check is reported (not ok) and the test goes on
cd "$(dirname "$0")/../.." || exit 1
. e2e/lib/tap.sh

CHART=charts/kubetrain
VERSION=$(cat VERSION)
work=$PWD/build/e2e/test-chart
export KT_RUN=$work/run
rm -rf "$work"
mkdir -p "$work"
op_pid="" op_container="" po_pid=""
cleanup() {
  [ -n "$op_pid" ] && kill "$op_pid" 2>/dev/null && wait "$op_pid" 2>/dev/null
  [ -n "$po_pid" ] && kill "$po_pid" 2>/dev/null && wait "$po_pid" 2>/dev/null
  [ -n "$op_container" ] && docker rm -f "$op_container" >/dev/null 2>&1
  bash e2e/cluster/down.sh >/dev/null 2>&1
}
trap cleanup EXIT

# --- the CRD: crds/ is the single source --------------------------------------------
bad=
for f in crds/*.yaml; do
  cmp -s "$f" "$CHART/crds/${f#crds/}" || bad="$bad $CHART/crds/${f#crds/}"
done
for f in "$CHART"/crds/*.yaml; do
  [ -e "crds/${f#"$CHART"/crds/}" ] || bad="$bad $f(no source)"
done
if [ -z "$bad" ]; then tap_ok "the chart's CRDs are crds/ byte for byte"
else tap_fail "the chart's CRDs are crds/ byte for byte" "differ:$bad (run make chart-crds)"; fi

# --- helm ------------------------------------------------------------------------------
if ! helm=$(bash charts/build-helm.sh 2>"$work/helm-build.log"); then
  tap_fail "building helm (charts/build-helm.sh)" "$(tail -n 5 "$work/helm-build.log")"
  tap_done; exit
fi
tap_check "helm lint --strict (default values)" "$helm" lint --strict "$CHART"
tap_check "helm lint --strict (single namespace)" "$helm" lint --strict "$CHART" --set singleNamespace=true

main_c=
[ -f operator/src/main.c ] && main_c=operator/src/main.c
[ -z "$main_c" ] && tap_skip "chart flags against the operator's option table" \
  "operator/src/main.c is not in this tree"

# render MODE NS [helm args]: renders into $work/MODE.yaml, then checks it.
render() {
  local mode=$1 ns=$2 out; shift 2
  if ! out=$("$helm" template kubetrain "$CHART" --namespace "$ns" "$@" 2>&1 >"$work/$mode.yaml"); then
    tap_fail "[$mode] helm template" "$out"
    return
  fi
  while IFS=$'\t' read -r status name detail; do
    if [ "$status" = ok ]; then tap_ok "$name"; else tap_fail "$name" "${detail//\\n/$'\n'}"; fi
  done < <(python3 charts/tests/check-render.py "$mode" "$work/$mode.yaml" kubetrain "$ns" $main_c 2>&1 ||
           printf 'not ok\tcheck-render.py %s ran\tit failed\n' "$mode")
}
render default kubetrain-system
render single team-a --set singleNamespace=true
render noleader kubetrain-system --set leaderElection.enabled=false
render monitor kubetrain-system --set metrics.serviceMonitor.enabled=true \
  --set metrics.podMonitor.enabled=true
render monitor-single team-a --set singleNamespace=true --set metrics.serviceMonitor.enabled=true \
  --set metrics.podMonitor.enabled=true
render nopolicy kubetrain-system --set templatePolicy.level=none
# Kueue's queues (the default modes above check that nothing of Kueue renders when off).
render kueue kubetrain-system --set kueue.enabled=true --set operator.defaultQueue=training \
  --set 'kueue.clusterQueue.quota.nvidia\.com/gpu=2' --set 'kueue.localQueue.namespaces={team-a,team-b}'
render kueue-single team-a --set singleNamespace=true --set kueue.enabled=true

# --- the api-level cluster ----------------------------------------------------------------
skip_cluster() {
  for t in "server-side dry run of the chart and the examples" \
           "helm install refuses bad values before creating anything" \
           "the installed ServiceAccount's permissions" "the operator under the chart's RBAC"; do
    tap_skip "$t" "$1"
  done
  cluster=0
}
cluster=1
if ! err=$(bash e2e/cluster/build-k8s.sh api 2>&1 >/dev/null); then
  tap_fail "building the Kubernetes binaries (e2e/cluster/build-k8s.sh api)" "$(tail -n 5 <<<"$err")"
  cluster=0
elif ! bash -c '. e2e/cluster/lib.sh && kt_etcd' >/dev/null; then
  skip_cluster "etcd not installed (Debian package etcd-server)"
elif ! out=$(bash e2e/cluster/up.sh api 2>&1); then
  tap_fail "up.sh api brings the control plane up" "$out"
  cluster=0
fi

if [ $cluster = 1 ]; then
  # shellcheck source=/dev/null # the cluster's variables, written by e2e/cluster/up.sh
  . "$KT_RUN/env"
  export KUBECONFIG
  k() { "$KT_K8S_BIN/kubectl" --request-timeout 30s "$@"; }
  # established SECONDS CRD...: waits until every CRD named is Established, or says which is
  # not. (kubectl wait fails outright on a CRD created so recently that it has no
  # status.conditions yet: ".status.conditions accessor error".)
  established() {
    local end=$((SECONDS + $1)) c st
    shift
    for c in "$@"; do
      while st=$(k get crd "$c" -o 'jsonpath={.status.conditions[?(@.type=="Established")].status}' 2>&1)
            [ "$st" != True ]; do
        [ $SECONDS -ge $end ] && { echo "crd/$c is not Established: ${st:-no condition yet}"; return 1; }
        sleep 0.2
      done
      echo "crd/$c Established"
    done
  }

  if out=$(k apply -f "$CHART/crds/" 2>&1 && established 60 trainingjobs.kubetrain.dev); then
    tap_ok "the chart's CRD installs and is Established"
  else
    tap_fail "the chart's CRD installs and is Established" "$out"
  fi
  for _ in $(seq 40); do k get tj -A >/dev/null 2>&1 && break; sleep 0.5; done
  for ns in kubetrain-system team-a team-b; do k create namespace "$ns" >/dev/null; done

  # Server-side dry runs: admission, schemas and CEL rules, nothing stored.
  for mode in default single noleader; do
    ns=kubetrain-system; [ $mode = single ] && ns=team-a
    tap_check "[$mode] rendered chart passes kubectl apply --dry-run=server" \
      k apply --dry-run=server -n "$ns" -f "$work/$mode.yaml"
  done
  for f in examples/*.yaml; do
    tap_check "$f passes kubectl apply --dry-run=server" k apply --dry-run=server -n team-a -f "$f"
  done
  n=$(k get tj,pvc,deploy,sa,clusterrole -A -l app.kubernetes.io/instance=kubetrain -o name 2>&1 | wc -l)
  n2=$(k get tj,pvc -A -o name 2>&1 | grep -c .)
  if [ "$n" = 0 ] && [ "$n2" = 0 ]; then tap_ok "the dry runs stored nothing"
  else tap_fail "the dry runs stored nothing" "$(k get tj,pvc,deploy -A 2>&1)"; fi

  # --- the monitors against prometheus-operator itself ------------------------------------
  # Its own CRDs (from its Go module, charts/tests/prometheus-operator.sh) validate the
  # PodMonitor and ServiceMonitor the chart renders, created for real with strict field
  # validation (an unknown field is an error, not silently pruned); each mistake below
  # must be refused, naming its field. Then the operator built from the same module turns
  # them into Prometheus's scrape configuration, whose relabelings must keep the chiefs'
  # metrics port and nothing else.
  PO_VERSION=${PO_VERSION:-v0.85.0}
  export PO_VERSION
  po_crds=$(bash charts/tests/prometheus-operator.sh crds 2>"$work/po-crds.log"); rc=$?
  if [ $rc = 3 ]; then
    tap_skip "the monitors against prometheus-operator $PO_VERSION" "go is not installed (charts/tests/prometheus-operator.sh)"
    po_crds=
  elif [ $rc != 0 ]; then
    tap_fail "prometheus-operator $PO_VERSION's CRDs (charts/tests/prometheus-operator.sh crds)" \
      "$(tail -n 5 "$work/po-crds.log")"
    po_crds=
  elif out=$(k apply --server-side -f "$po_crds" 2>&1 &&
             established 60 podmonitors.monitoring.coreos.com \
               servicemonitors.monitoring.coreos.com prometheuses.monitoring.coreos.com); then
    tap_ok "prometheus-operator $PO_VERSION's CRDs (from its Go module) install and are Established"
    for _ in $(seq 40); do k get podmonitors,servicemonitors -A >/dev/null 2>&1 && break; sleep 0.5; done
  else
    tap_fail "prometheus-operator $PO_VERSION's CRDs install and are Established" "$out"
    po_crds=
  fi
  po_check() {  # the ok / not ok lines of check-monitoring.py as TAP
    local status name detail
    while IFS=$'\t' read -r status name detail; do
      if [ "$status" = ok ]; then tap_ok "$name"; else tap_fail "$name" "${detail//\\n/$'\n'}"; fi
    done < <(python3 charts/tests/check-monitoring.py "$@" 2>&1 ||
             printf 'not ok\tcheck-monitoring.py %s ran\tit failed\n' "$1")
  }
  if [ -n "$po_crds" ]; then
    for mode in monitor monitor-single; do
      ns=kubetrain-system; [ $mode = monitor-single ] && ns=team-a
      if ! python3 charts/tests/check-monitoring.py extract "$work/$mode.yaml" >"$work/$mode-monitors.yaml" 2>"$work/$mode-monitors.err"; then
        tap_fail "[$mode] the rendered PodMonitor and ServiceMonitor" "$(cat "$work/$mode-monitors.err")"
        continue
      fi
      if out=$(k create --validate=strict -n "$ns" -f "$work/$mode-monitors.yaml" 2>&1); then
        tap_ok "[$mode] the rendered PodMonitor and ServiceMonitor are created under prometheus-operator $PO_VERSION's schemas (strict)"
        k get podmonitors,servicemonitors -n "$ns" -o json >"$work/$mode-stored.json" 2>&1
        po_check stored "$mode" "$work/$mode.yaml" "$work/$mode-stored.json"
      else
        tap_fail "[$mode] the rendered PodMonitor and ServiceMonitor are created under prometheus-operator $PO_VERSION's schemas (strict)" "$out"
      fi
    done
    # Mistakes the schemas must refuse, each in a copy of the rendered monitor.
    while IFS=$'\t' read -r file want name; do
      out=$(k create --validate=strict -n kubetrain-system -f "$file" 2>&1); rc=$?
      printf '%s\n' "$out" >"${file%.yaml}.out"
      if [ $rc = 0 ]; then
        tap_fail "prometheus-operator's schema refuses a $name" "created: $out"
        k delete --wait=false -n kubetrain-system -f "$file" >/dev/null 2>&1
      elif grep -qF -- "$want" <<<"$out"; then
        tap_ok "prometheus-operator's schema refuses a $name, naming $want"
      else
        tap_fail "prometheus-operator's schema refuses a $name, naming $want" "$out"
      fi
    done < <(python3 charts/tests/check-monitoring.py broken "$work/monitor.yaml" "$work" 2>&1 ||
             printf '%s\t%s\t%s\n' /dev/null check-monitoring.py "broken monitor (check-monitoring.py broken failed)")
    # The operator itself: it turns the monitors a Prometheus selects into that
    # Prometheus's configuration (Secret prometheus-NAME, key prometheus.yaml.gz). No
    # kubelet runs, so its StatefulSet never gets a pod; the configuration is all we read.
    po_bin=$(bash charts/tests/prometheus-operator.sh operator 2>"$work/po-build.log"); rc=$?
    if [ $rc = 3 ]; then
      tap_skip "prometheus-operator's scrape configuration of the monitors" "go is not installed (charts/tests/prometheus-operator.sh)"
    elif [ $rc != 0 ]; then
      tap_fail "building prometheus-operator $PO_VERSION (charts/tests/prometheus-operator.sh operator)" \
        "$(tail -n 5 "$work/po-build.log")"
    else
      k create namespace monitoring >/dev/null
      cat >"$work/prometheus.yaml" <<'YAML'
apiVersion: monitoring.coreos.com/v1
kind: Prometheus
metadata: {name: kubetrain-test, namespace: monitoring}
spec:
  replicas: 1
  podMonitorSelector: {matchLabels: {app.kubernetes.io/instance: kubetrain}}
  podMonitorNamespaceSelector: {}
  serviceMonitorSelector: {matchLabels: {app.kubernetes.io/instance: kubetrain}}
  serviceMonitorNamespaceSelector: {}
YAML
      wp=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
      "$po_bin" --web.listen-address="127.0.0.1:$wp" >"$work/po.log" 2>&1 &
      po_pid=$!
      cfg=$work/prometheus-config.yaml
      : >"$cfg"
      if out=$(k create --validate=strict -f "$work/prometheus.yaml" 2>&1); then
        # Until the configuration holds both PodMonitors' jobs (or 90 s).
        for _ in $(seq 180); do
          k get secret prometheus-kubetrain-test -n monitoring -o 'jsonpath={.data.prometheus\.yaml\.gz}' 2>/dev/null |
            base64 -d 2>/dev/null | gunzip >"$cfg" 2>/dev/null
          [ "$(grep -c 'job_name: podMonitor/' "$cfg")" -ge 2 ] && break
          kill -0 "$po_pid" 2>/dev/null || break
          sleep 0.5
        done
        if [ -s "$cfg" ]; then
          tap_ok "prometheus-operator $PO_VERSION writes the configuration of a Prometheus that selects the chart's monitors"
          po_check scrape monitor "$work/monitor.yaml" "$cfg" kubetrain-system "$main_c"
          po_check scrape monitor-single "$work/monitor-single.yaml" "$cfg" team-a "$main_c"
        else
          tap_fail "prometheus-operator $PO_VERSION writes the configuration of a Prometheus that selects the chart's monitors" \
            "no Secret monitoring/prometheus-kubetrain-test with prometheus.yaml.gz; $(tail -n 20 "$work/po.log")"
        fi
      else
        tap_fail "a Prometheus selecting the chart's monitors is created" "$out"
      fi
      kill "$po_pid" 2>/dev/null; wait "$po_pid" 2>/dev/null; po_pid=
    fi
  fi

  # created REL NS: every object of release REL (labelled, or helm's release record).
  created() {
    { k get all,sa,roles,rolebindings,configmaps,secrets -n "$2" -l "app.kubernetes.io/instance=$1" -o name
      k get clusterroles,clusterrolebindings -l "app.kubernetes.io/instance=$1" -o name
      k get secrets -n "$2" -l "owner=helm,name=$1" -o name; } 2>/dev/null
  }
  # refused NAME WANT ARGS...: helm install ARGS fails, its error names WANT, nothing made.
  # helm names a value by its JSON pointer (/operator/workers), an unknown key by itself.
  refused() {
    local name=$1 want=$2 out left; shift 2
    if out=$("$helm" install bad "$CHART" -n kubetrain-system "$@" 2>&1); then
      tap_fail "helm install refuses $name" "installed: $out"
      "$helm" uninstall bad -n kubetrain-system >/dev/null 2>&1
      return
    fi
    left=$(created bad kubetrain-system)
    if ! grep -qF -- "$want" <<<"$out"; then
      tap_fail "helm install refuses $name, naming $want" "$out"
    elif [ -n "$left" ]; then
      tap_fail "helm install refuses $name and creates nothing" "left behind: $left"
    else
      tap_ok "helm install refuses $name, naming $want, and creates nothing"
    fi
  }
  refused "operator.workers of the wrong type" /operator/workers --set operator.workers=four
  refused "replicaCount of the wrong type (values file)" /replicaCount -f <(echo 'replicaCount: "two"')
  refused "an unknown key (replicas)" replicas --set replicas=2
  refused "an unknown nested key (operator.threads)" threads --set operator.threads=2
  refused "an out-of-range operator.workers" /operator/workers --set operator.workers=65
  refused "a misspelt pullPolicy" /image/pullPolicy --set image.pullPolicy=Sometimes

  # A real install: the same query finds what it made (so an empty answer above means
  # nothing was made), and its ServiceAccount may do exactly what the operator does.
  if out=$("$helm" install kubetrain "$CHART" -n kubetrain-system 2>&1); then
    tap_ok "helm install (default values)"
    made=$(created kubetrain kubetrain-system | wc -l)
    if [ "$made" -ge 6 ]; then tap_ok "the install made its objects ($made found by the same query)"
    else tap_fail "the install made its objects" "$(created kubetrain kubetrain-system)"; fi
    if grep -q 'kubectl apply -n kubetrain-system -f examples/pvc.yaml -f examples/job.yaml' <<<"$out"; then
      tap_ok "NOTES tell how to submit the example job"
    else tap_fail "NOTES tell how to submit the example job" "$out"; fi
  else
    tap_fail "helm install (default values)" "$out"
  fi
  # The template policy at admission: each case of operator/tests/podpolicy-cases.json (the
  # cases the operator's own check is tested against) as a TrainingJob, server-side dry
  # run, under spec.template and under each role's template (spec.chief/ps/evaluator
  # .template): a refused template is denied naming its field first, an allowed one passes.
  tp_case() {  # tp_case I ROLE: prints the case's field (or "-") and writes the job to $work/tp-I-ROLE.json
    python3 - "$1" "$2" "$work/tp-$1-$2.json" <<'PY'
import json, sys
i, role, out = int(sys.argv[1]), sys.argv[2], sys.argv[3]
c = json.load(open("operator/tests/podpolicy-cases.json"))["cases"][i]
spec = {"workers": 1}
field = c["field"]
if role == "template":
    spec["template"] = c["template"]
else:
    # ps and evaluator run a user's program; ps needs a chief.
    if role != "chief":
        spec.update(image="example.com/train:1", command=["python", "train.py"])
    if role == "ps":
        spec["chief"] = {}
    spec[role] = {"template": c["template"]}
    if field:
        field = "spec.%s.template" % role + field[len("spec.template"):]
job = {"apiVersion": "kubetrain.dev/v1alpha1", "kind": "TrainingJob",
       "metadata": {"name": "tp-%d-%s" % (i, role)}, "spec": spec}
json.dump(job, open(out, "w"))
print(field or "-", c["name"], sep="\t")
PY
  }
  ncases=$(python3 -c 'import json; print(len(json.load(open("operator/tests/podpolicy-cases.json"))["cases"]))')
  # The policy takes effect a moment after it is created: wait for the first case's refusal.
  IFS=$'\t' read -r field _ < <(tp_case 0 template)
  for _ in $(seq 60); do
    k create --dry-run=server -n team-a -f "$work/tp-0-template.json" >/dev/null 2>&1 || break
    sleep 0.5
  done
  tp_bad=()
  for role in template chief ps evaluator; do
    for ((i = 0; i < ncases; i++)); do
      IFS=$'\t' read -r field cname < <(tp_case "$i" "$role")
      out=$(k create --dry-run=server -n team-a -f "$work/tp-$i-$role.json" 2>&1); rc=$?
      if [ "$field" = - ]; then
        [ $rc = 0 ] || tp_bad+=("$cname ($role): refused: $out")
      elif [ $rc = 0 ]; then tp_bad+=("$cname ($role): admitted")
      elif ! grep -qF -- "$field: " <<<"$out" || ! grep -qF 'ValidatingAdmissionPolicy' <<<"$out"; then
        tp_bad+=("$cname ($role): not naming $field: $out")
      fi
    done
  done
  if [ ${#tp_bad[@]} = 0 ]; then
    tap_ok "the ValidatingAdmissionPolicy refuses each template podpolicy-cases.json refuses, naming its field, and admits the others ($ncases cases), as spec.template and as each role's template"
  else tap_fail "the ValidatingAdmissionPolicy applies the template policy ($ncases cases, every role)" "$(printf '%s\n' "${tp_bad[@]}")"; fi
  k get validatingadmissionpolicy kubetrain-template-policy -o jsonpath='{.status.typeChecking}' >"$work/vap-typecheck.json" 2>&1
  # The depth limit (admissionMaxDepth, 32): a value 31 levels below spec passes, one 32
  # levels below is refused naming the limit, and so is a job nested past what the
  # operator reads (1,001 levels in spec.template; spec.model the same way).
  depth_job() {  # depth_job NAME FIELD LEVELS: a job with LEVELS nested maps at spec.FIELD
    python3 - "$@" "$work/$1.json" <<'PY'
import sys
name, field, levels, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
v = '{"x":' * levels + "1" + "}" * levels  # as text: json.dump recurses per level
if field == "model":
    v = '{"layers":[%s]}' % v  # the CRD wants a model's layers
open(out, "w").write('{"apiVersion": "kubetrain.dev/v1alpha1", "kind": "TrainingJob", '
                     '"metadata": {"name": "%s"}, "spec": {"workers": 1, "%s": %s}}'
                     % (name, field, v))
PY
  }
  depth_bad=()
  depth_job depth-ok template 30
  out=$(k create --dry-run=server -n team-a -f "$work/depth-ok.json" 2>&1) ||
    depth_bad+=("31 levels below spec refused: $out")
  for c in "depth-limit template 31" "depth-deep template 1001" "depth-model model 1001"; do
    read -r name field levels <<<"$c"
    depth_job "$name" "$field" "$levels"
    if out=$(k create --dry-run=server -n team-a -f "$work/$name.json" 2>&1); then
      depth_bad+=("spec.$field nested $levels deep admitted")
    elif ! grep -qF 'spec: a value 32 levels below spec or deeper' <<<"$out"; then
      depth_bad+=("spec.$field nested $levels deep: not the depth limit: ${out:0:300}")
    fi
  done
  if [ ${#depth_bad[@]} = 0 ]; then
    tap_ok "the depth limit admits a value 31 levels below spec and refuses 32 and 1,001 (template, model)"
  else tap_fail "the depth limit (admissionMaxDepth 32)" "$(printf '%s\n' "${depth_bad[@]}")"; fi

  sa=system:serviceaccount:kubetrain-system:kubetrain
  can=() cannot=()
  for q in "list trainingjobs.kubetrain.dev -n team-a" "watch trainingjobs.kubetrain.dev -A" \
           "delete trainingjobs.kubetrain.dev -n team-a" "update trainingjobs.kubetrain.dev --subresource status -n team-a" \
           "update trainingjobs.kubetrain.dev --subresource finalizers -n team-a" \
           "create pods -n team-a" "delete pods -n team-a" "watch pods -A" "create services -n team-a" \
           "create secrets -n team-a" "create events -n team-a" \
           "create leases.coordination.k8s.io -n kubetrain-system" \
           "update leases.coordination.k8s.io/kubetrain -n kubetrain-system"; do
    # shellcheck disable=SC2086
    [ "$(k auth can-i $q --as "$sa" 2>/dev/null)" = yes ] || can+=("$q")
  done
  for q in "update pods -n team-a" "patch trainingjobs.kubetrain.dev -n team-a" "create trainingjobs.kubetrain.dev -n team-a" \
           "get secrets/x -n team-a" "get secrets -n team-a" "list secrets -n team-a" "list secrets -A" \
           "watch secrets -n team-a" "watch secrets -A" \
           "delete secrets -n team-a" "update secrets -n team-a" "patch secrets -n team-a" "delete services -n team-a" \
           "create pods --subresource exec -n team-a" "create deployments.apps -n team-a" \
           "update leases.coordination.k8s.io/other -n kubetrain-system" "create leases.coordination.k8s.io -n team-a" \
           "create clusterroles.rbac.authorization.k8s.io"; do
    # shellcheck disable=SC2086
    [ "$(k auth can-i $q --as "$sa" 2>/dev/null)" = no ] || cannot+=("$q")
  done
  if [ ${#can[@]} = 0 ]; then tap_ok "the ServiceAccount may make each request the operator makes"
  else tap_fail "the ServiceAccount may make each request the operator makes" "denied: ${can[*]}"; fi
  if [ ${#cannot[@]} = 0 ]; then tap_ok "the ServiceAccount may not do what the operator never does (no get, list or watch of any Secret)"
  else tap_fail "the ServiceAccount may not do what the operator never does (no get, list or watch of any Secret)" "allowed: ${cannot[*]}"; fi

  # run_operator MODE NS JOBNS: the operator binary with the release's ServiceAccount
  # token and the Deployment's args, made to run examples/job.yaml in JOBNS.
  run_operator() {
    local mode=$1 ns=$2 jobns=$3 kc=$work/op-$1.kubeconfig log=$work/op-$1.log token args hp mp ok=0
    hp=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    mp=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    token=$(k create token kubetrain -n "$ns" --duration 1h) || { tap_fail "[$mode] token for the ServiceAccount" "$token"; return; }
    cat >"$kc" <<EOF
apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "$KT_APISERVER_URL", certificate-authority: "$KT_RUN/pki/ca.crt"}}]
users: [{name: sa, user: {token: "$token"}}]
contexts: [{name: c, context: {cluster: c, user: sa, namespace: "$ns"}}]
current-context: c
EOF
    # The Deployment's args as the API stored them; the pod name stands in for $(POD_NAME).
    # shellcheck disable=SC2016 # $(POD_NAME) is the Deployment's, not the shell's
    mapfile -t args < <(k get deploy kubetrain -n "$ns" -o json | python3 -c '
import json, sys
for a in json.load(sys.stdin)["spec"]["template"]["spec"]["containers"][0]["args"]:
    print(a.replace("$(POD_NAME)", "kubetrain-test-0"))')
    args=("${args[@]/#--health-addr=*/--health-addr=127.0.0.1:$hp}")
    args=("${args[@]/#--metrics-addr=*/--metrics-addr=127.0.0.1:$mp}")
    build/bin/kubetrain-operator --kubeconfig "$kc" "${args[@]}" >"$log" 2>&1 &
    op_pid=$!
    for _ in $(seq 60); do
      [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$hp/readyz")" = 200 ] && { ok=1; break; }
      kill -0 "$op_pid" 2>/dev/null || break
      sleep 0.5
    done
    if [ $ok = 1 ]; then tap_ok "[$mode] the operator with the chart's args and RBAC becomes ready"
    else tap_fail "[$mode] the operator with the chart's args and RBAC becomes ready" "$(tail -n 20 "$log")"; fi
    k apply -n "$jobns" -f examples/pvc.yaml -f examples/job.yaml >/dev/null
    ok=0 secret=
    for _ in $(seq 60); do
      secret=$(k get tj mnist -n "$jobns" -o 'jsonpath={.status.secretName}' 2>/dev/null)
      if [ -n "$secret" ] &&
         k get -n "$jobns" service/mnist-worker "secret/$secret" pod/mnist-worker-0 pod/mnist-worker-1 >/dev/null 2>&1 &&
         [ -n "$(k get tj mnist -n "$jobns" -o 'jsonpath={.status.phase}')" ]; then ok=1; break; fi
      sleep 0.5
    done
    if [ $ok = 1 ]; then tap_ok "[$mode] examples/job.yaml gets its Service, Secret ($secret, from status.secretName), 2 pods and a status"
    else tap_fail "[$mode] examples/job.yaml gets its Service, Secret (status.secretName), 2 pods and a status" \
      "$(k get all,secrets -n "$jobns" 2>&1; tail -n 20 "$log")"; fi
    # The Secret it created is no more readable to it than any other.
    sa_op=system:serviceaccount:$ns:kubetrain readable=
    for v in get list watch; do
      [ "$(k auth can-i "$v" "secrets/${secret:-x}" -n "$jobns" --as "$sa_op" 2>/dev/null)" = no ] || readable="$readable $v"
    done
    if [ -n "$secret" ] && [ -z "$readable" ]; then tap_ok "[$mode] the operator may not get, list or watch even the Secret it created"
    else tap_fail "[$mode] the operator may not get, list or watch even the Secret it created" "secret '$secret', allowed:$readable"; fi
    holder=$(k get lease kubetrain -n "$ns" -o 'jsonpath={.spec.holderIdentity}' 2>&1)
    if [ "$holder" = kubetrain-test-0 ]; then tap_ok "[$mode] the operator holds its Lease (named after the release) in $ns, named by the pod"
    else tap_fail "[$mode] the operator holds its Lease (named after the release) in $ns, named by the pod" "holder: $holder"; fi
    if grep -qiE 'forbidden|" 403|code.?403' "$log"; then
      tap_fail "[$mode] no request of the operator was forbidden" "$(grep -iE 'forbidden|403' "$log" | head -5)"
    else tap_ok "[$mode] no request of the operator was forbidden"; fi
    k delete -n "$jobns" -f examples/job.yaml --wait=true --timeout 30s >/dev/null 2>&1
    kill -TERM "$op_pid"; wait "$op_pid"; local rc=$?; op_pid=
    if [ $rc = 0 ]; then tap_ok "[$mode] the operator stops cleanly on SIGTERM"
    else tap_fail "[$mode] the operator stops cleanly on SIGTERM" "exit $rc; $(tail -n 5 "$log")"; fi
  }
  if [ ! -x build/bin/kubetrain-operator ]; then
    tap_skip "the operator under the chart's RBAC" "build/bin/kubetrain-operator is not built in this tree"
  else
    run_operator default kubetrain-system team-b
    "$helm" uninstall kubetrain -n kubetrain-system --wait >/dev/null 2>&1
    if "$helm" install kubetrain "$CHART" -n team-a --set singleNamespace=true >/dev/null 2>"$work/single.err"; then
      run_operator single team-a team-a
    else tap_fail "helm install (single namespace)" "$(cat "$work/single.err")"; fi
  fi
fi

# --- images --------------------------------------------------------------------------------
if ! docker info >/dev/null 2>&1; then
  tap_skip "images build and run" "no Docker daemon answers (bash docker/dockerd.sh starts one)"
  tap_done; exit
fi
# size_ok NAME IMAGE MAX_MB
size_ok() {
  local bytes mb
  bytes=$(docker image inspect -f '{{.Size}}' "$2" 2>&1)
  mb=$(( bytes / 1000000 ))
  if [ "$mb" -le "$3" ]; then tap_ok "$1 image is $mb MB (target <= $3 MB)"
  else tap_fail "$1 image is at most $3 MB" "$mb MB"; fi
}
if [ ! -f operator/src/main.c ]; then
  tap_skip "operator image builds and answers /healthz" "operator/src/main.c is not in this tree"
elif out=$(make -s image-operator 2>&1); then
  tap_ok "operator image builds (docker/operator.Dockerfile)"
  img=kubetrain/operator:$VERSION
  size_ok operator "$img" 40
  hp=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  # Its kubeconfig: the api cluster's admin one when it runs, else an unreachable server
  # (the operator answers /healthz without the API; /readyz needs its caches).
  kc=$work/image.kubeconfig
  if [ $cluster = 1 ]; then cp "$KUBECONFIG" "$kc"
  else printf 'apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]\nusers: [{name: u, user: {token: x}}]\ncontexts: [{name: c, context: {cluster: c, user: u}}]\ncurrent-context: c\n' >"$kc"; fi
  chmod 644 "$kc"
  op_container=kt-chart-test-$$
  if out=$(docker run -d --name "$op_container" --network host --read-only --cap-drop ALL \
             --security-opt no-new-privileges -v "$kc:/etc/kubetrain/kubeconfig:ro" "$img" \
             --kubeconfig /etc/kubetrain/kubeconfig --health-addr "127.0.0.1:$hp" --metrics-addr 0 2>&1); then
    code=
    for _ in $(seq 40); do
      code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$hp/healthz")
      [ "$code" = 200 ] && break
      sleep 0.5
    done
    if [ "$code" = 200 ]; then tap_ok "the operator image runs read-only as non-root and answers /healthz"
    else tap_fail "the operator image answers /healthz" "code '$code'; $(docker logs "$op_container" 2>&1 | tail -n 10)"; fi
    if [ $cluster = 1 ]; then
      for _ in $(seq 40); do
        code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$hp/readyz")
        [ "$code" = 200 ] && break
        sleep 0.5
      done
      if [ "$code" = 200 ]; then tap_ok "the operator image reaches the API server and answers /readyz"
      else tap_fail "the operator image answers /readyz" "code '$code'; $(docker logs "$op_container" 2>&1 | tail -n 10)"; fi
    fi
    user=$(docker inspect -f '{{.Config.User}}' "$img")
    if [ "$user" = 65532:65532 ]; then tap_ok "the operator image's user is 65532:65532"
    else tap_fail "the operator image's user is 65532:65532" "user '$user'"; fi
  else tap_fail "the operator image starts" "$out"; fi
  docker rm -f "$op_container" >/dev/null 2>&1; op_container=
else
  tap_fail "operator image builds (docker/operator.Dockerfile)" "$(tail -n 30 <<<"$out")"
fi

if [ ! -f trainer/src/main.c ]; then
  tap_skip "trainer image builds and trains" "trainer/src/main.c is not in this tree"
elif out=$(make -s image-trainer 2>&1); then
  tap_ok "trainer image builds (docker/trainer.Dockerfile)"
  img=kubetrain/trainer:$VERSION
  size_ok "trainer (with Fashion-MNIST)" "$img" 200
  if out=$(docker run --rm --network none --read-only --cap-drop ALL --security-opt no-new-privileges \
             "$img" train --epochs 1 --steps-per-epoch 2 --per-worker-batch 16 2>&1); then
    tap_ok "the trainer image trains 2 steps on its baked-in data, read-only, as non-root"
  else tap_fail "the trainer image trains 2 steps on its baked-in data" "$(tail -n 10 <<<"$out")"; fi
else
  tap_fail "trainer image builds (docker/trainer.Dockerfile)" "$(tail -n 30 <<<"$out")"
fi
tap_done
