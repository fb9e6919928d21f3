#!/usr/bin/env bash
# kubetrain-operator's security properties against a real kube-apiserver:
#  - it runs with the chart's RBAC as rendered by helm (a ServiceAccount token, no
#    admin certificate) and is never refused a request;
#  - spec.networkPolicy: a NetworkPolicy <job>-worker owned by the job, created before the
#    pods, admitting only the job's own worker pods on spec.port (and the template's
#    metrics port, the C trainer's 9090 by default, from any namespace's pods); deleted when the field is turned off,
#    collected with the job; none for a job without the field;
#  - the pods it stores run non-root with no privilege escalation and no capabilities,
#    unless the pod template says otherwise; a template with what Pod Security's baseline
#    refuses (privileged, hostPath) makes the job Invalid naming the field, and no pods;
#  - no token or key reaches a log line: the ServiceAccount token and every job's ring key
#    are searched for in the operator's whole output at --log-level debug;
#  - TLS: without the cluster CA the operator refuses the server; --insecure-skip-tls-verify
#    works and says loudly that verification is off.
set -uo pipefail # no -e: a failed check is reported (not ok) and the test goes on
cd "$(dirname "$0")/../../.." || exit 1
. e2e/lib/tap.sh
. operator/tests/integration/lib.sh

it_cluster opint-security

# --- the chart's RBAC, as helm renders it ------------------------------------------------
OPNS=kubetrain-system
k create namespace "$OPNS" >/dev/null
KC=$KUBECONFIG
if helm=$(bash charts/build-helm.sh 2>"$IT_DIR/helm.log"); then
  "$helm" template kubetrain charts/kubetrain --namespace "$OPNS" \
    --set leaderElection.enabled=false >"$IT_DIR/chart.yaml" 2>"$IT_DIR/helm.log"
  python3 - "$IT_DIR/chart.yaml" >"$IT_DIR/rbac.yaml" <<'PY'
import sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d and d["kind"] in
        ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")]
yaml.safe_dump_all(docs, sys.stdout)
PY
  if out=$(k apply -f "$IT_DIR/rbac.yaml" 2>&1) &&
     token=$(k create token kubetrain -n "$OPNS" --duration 1h 2>&1); then
    KC=$IT_DIR/sa.kubeconfig
    cat >"$KC" <<EOF
apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "$KT_APISERVER_URL", certificate-authority: "$KT_RUN/pki/ca.crt"}}]
users: [{name: sa, user: {token: "$token"}}]
contexts: [{name: c, context: {cluster: c, user: sa}}]
current-context: c
EOF
    tap_ok "the chart's RBAC applied; the operator runs as its ServiceAccount"
  else tap_fail "the chart's RBAC applied" "$out $token"; fi
else
  token=
  tap_skip "the operator under the chart's RBAC" "helm unavailable: $(tail -n 1 "$IT_DIR/helm.log")"
fi

# kubeconfig for it_operator; it passes $KUBECONFIG.
KUBECONFIG=$KC it_operator sec --log-level debug
OP=$IT_PID
LOG=$IT_DIR/op-sec.log

# --- spec.networkPolicy --------------------------------------------------------------------
ns netpol
job netpol np 2 "  port: 2345
  networkPolicy: true"
job netpol plain 2
if wait_until 30 has_npods netpol np 2; then tap_ok "a job with networkPolicy gets its pods"
else tap_fail "a job with networkPolicy gets its pods" "$(tail -n 20 "$LOG")"; fi
np_json=$(k -n netpol get networkpolicy np-worker -o json 2>&1)
res=$(python3 - "$np_json" "$(k -n netpol get tj np -o json)" \
  "$(k -n netpol get pods -l kubetrain.dev/job-name=np -o json)" <<'PY'
import json, sys
try:
    np = json.loads(sys.argv[1])
except ValueError:
    print("no NetworkPolicy np-worker: " + sys.argv[1][:300]); sys.exit()
job, pods = json.loads(sys.argv[2]), json.loads(sys.argv[3])["items"]
bad = []
refs = np["metadata"].get("ownerReferences", [])
if not (len(refs) == 1 and refs[0]["uid"] == job["metadata"]["uid"] and refs[0].get("controller")):
    bad.append(f"owner {refs}")
s = np["spec"]
want = {"kubetrain.dev/job-name": "np", "app.kubernetes.io/managed-by": "kubetrain-operator"}
if s.get("podSelector", {}).get("matchLabels") != want:
    bad.append(f"podSelector {s.get('podSelector')}")
if s.get("policyTypes") != ["Ingress"]:
    bad.append(f"policyTypes {s.get('policyTypes')}")
ing = s.get("ingress", [])
# The C trainer's chief serves /metrics by default (the operator reads it for
# status.progress): the second rule admits that port from any namespace's pods.
if not (len(ing) == 2 and ing[0].get("from") == [{"podSelector": {"matchLabels": want}}] and
        ing[0].get("ports") == [{"protocol": "TCP", "port": 2345}] and
        ing[1].get("ports") == [{"protocol": "TCP", "port": 9090}] and
        ing[1].get("from") == [{"namespaceSelector": {}}]):
    bad.append(f"ingress {ing}")
# The selectors pick exactly the job's pods.
for p in pods:
    if any(p["metadata"]["labels"].get(k) != v for k, v in want.items()):
        bad.append(f"pod {p['metadata']['name']} not selected")
# Created before any pod: etcd revisions are global and increasing.
rv = int(np["metadata"]["resourceVersion"])
later = [p["metadata"]["name"] for p in pods if int(p["metadata"]["resourceVersion"]) < rv]
if later:
    bad.append(f"pods older than the policy: {later}")
print("; ".join(bad) if bad else "ok")
PY
)
if [ "$res" = ok ]; then
  tap_ok "NetworkPolicy np-worker: owned by the job, before the pods, the job's workers on 2345, /metrics 9090"
else tap_fail "NetworkPolicy np-worker" "$res"; fi
if [ -z "$(k -n netpol get networkpolicy plain-worker -o name 2>/dev/null)" ] && has_npods netpol plain 2; then
  tap_ok "a job without networkPolicy gets no NetworkPolicy"
else tap_fail "a job without networkPolicy gets no NetworkPolicy" "$(k -n netpol get networkpolicy 2>&1)"; fi
# The chief's metrics port (examples/job-metrics.yaml): admitted from any namespace's
# pods, that port only, beside the workers' own rule (issue 23: Prometheus was blocked).
job netpol npm 1 "  networkPolicy: true
  template:
    spec:
      containers:
        - name: trainer
          env: [{name: KUBETRAIN_METRICS_PORT, value: \"9090\"}]
          ports: [{name: metrics, containerPort: 9090}]"
wait_until 30 k -n netpol get networkpolicy npm-worker
ing=$(k -n netpol get networkpolicy npm-worker -o jsonpath='{.spec.ingress}' 2>&1)
if python3 -c '
import json, sys
ing = json.loads(sys.argv[1])
sel = {"kubetrain.dev/job-name": "npm", "app.kubernetes.io/managed-by": "kubetrain-operator"}
want = [{"from": [{"podSelector": {"matchLabels": sel}}],
         "ports": [{"protocol": "TCP", "port": 2222}]},
        {"from": [{"namespaceSelector": {}}], "ports": [{"protocol": "TCP", "port": 9090}]}]
sys.exit(ing != want)' "$ing" 2>/dev/null; then
  tap_ok "NetworkPolicy npm-worker: the declared metrics port 9090 from any namespace's pods, besides the workers on 2222"
else tap_fail "NetworkPolicy npm-worker admits the declared metrics port" "ingress: $ing"; fi
gone() { [ -z "$(k -n "$1" get networkpolicy "$2" -o name 2>/dev/null)" ]; }
k -n netpol patch tj np --type merge -p '{"spec":{"networkPolicy":false}}' >/dev/null
if wait_until 30 gone netpol np-worker; then tap_ok "networkPolicy turned off: the NetworkPolicy is deleted"
else tap_fail "networkPolicy turned off: the NetworkPolicy is deleted" "$(tail -n 10 "$LOG")"; fi
k -n netpol patch tj np --type merge -p '{"spec":{"networkPolicy":true}}' >/dev/null
if wait_until 30 k -n netpol get networkpolicy np-worker; then tap_ok "networkPolicy turned on again: recreated"
else tap_fail "networkPolicy turned on again: recreated" "$(tail -n 10 "$LOG")"; fi
k -n netpol delete tj np --wait=false >/dev/null
if wait_until 60 gone netpol np-worker; then tap_ok "the job deleted: its NetworkPolicy is garbage-collected"
else tap_fail "the job deleted: its NetworkPolicy is garbage-collected" "$(k -n netpol get networkpolicy -o yaml 2>&1 | tail -n 20)"; fi
if out=$(k -n netpol create -f - 2>&1 <<'EOF'
apiVersion: kubetrain.dev/v1alpha1
kind: TrainingJob
metadata: {name: bad}
spec: {workers: 1, networkPolicy: "yes"}
EOF
); then tap_fail "the CRD refuses a non-boolean networkPolicy" "accepted"
else
  grep -q 'networkPolicy' <<<"$out" && tap_ok "the CRD refuses a non-boolean networkPolicy, naming it" ||
    tap_fail "the CRD refuses a non-boolean networkPolicy, naming it" "$out"
fi

# --- pod security as stored by the apiserver ---------------------------------------------
ns podsec
job podsec safe 1
job podsec root 1 "  template:
    spec:
      securityContext: {runAsUser: 0}
      containers:
        - name: trainer
          securityContext: {allowPrivilegeEscalation: true}"
wait_until 30 has_npods podsec safe 1
wait_until 30 has_npods podsec root 1
res=$(python3 - "$(k -n podsec get pods -o json)" <<'PY'
import json, sys
pods = {p["metadata"]["name"]: p for p in json.loads(sys.argv[1])["items"]}
bad = []
for name, p in sorted(pods.items()):
    s = p["spec"]
    psc = s.get("securityContext", {})
    for c in s.get("containers", []) + s.get("initContainers", []):
        csc = c.get("securityContext", {})
        if name.startswith("safe-"):
            ok = (psc.get("runAsNonRoot") is True and psc.get("runAsUser", 0) != 0 and
                  csc.get("allowPrivilegeEscalation") is False and
                  csc.get("capabilities", {}).get("drop") == ["ALL"] and
                  s.get("automountServiceAccountToken") is False)
        else:
            ok = (psc.get("runAsUser") == 0 and "runAsNonRoot" not in psc and
                  csc.get("allowPrivilegeEscalation") is True)
        if not ok:
            bad.append(f"{name}/{c['name']}: pod {psc}, container {csc}")
if set(pods) != {"safe-worker-0", "root-worker-0"}:
    bad.append(f"pods {sorted(pods)}")
print("; ".join(bad) if bad else "ok")
PY
)
if [ "$res" = ok ]; then
  tap_ok "stored pods: non-root, no privilege escalation, no capabilities, no token; the template's root choice kept"
else tap_fail "stored pods: non-root and no privilege escalation unless the template says otherwise" "$res"; fi

# --- the template policy at reconcile time (no admission policy here) -----------------------
# A privileged template and a hostPath volume: Invalid (TemplateNotAllowed) naming the field,
# a Warning event, nothing created (the podsec case above shows a job within baseline runs).
ns tpol
job tpol priv 1 "  template:
    spec:
      containers:
        - name: trainer
          securityContext: {privileged: true}"
job tpol hostpath 1 "  template:
    spec:
      volumes: [{name: root, hostPath: {path: /}}]"
tp_refused() {  # tp_refused JOB FIELD
  [ "$(condition tpol "$1" Invalid reason)" = TemplateNotAllowed ] &&
    [[ "$(condition tpol "$1" Invalid message)" == "$2: "* ]]
}
bad=
for jf in "priv spec.template.spec.containers[0].securityContext.privileged" \
          "hostpath spec.template.spec.volumes[0].hostPath"; do
  j=${jf%% *} f=${jf#* }
  wait_until 30 tp_refused "$j" "$f" || bad="$bad$j: $(jp tpol "tj/$j" .status.conditions)"$'\n'
  ev=$(k -n tpol get events --field-selector "involvedObject.name=$j,reason=TemplateNotAllowed" \
    -o 'jsonpath={.items[*].message}' 2>&1)
  [[ "$ev" == "$f: "* ]] || bad="$bad$j: event '$ev'"$'\n'
done
sleep 1
made=$(k -n tpol get pods,services,secrets -l kubetrain.dev/job-name -o name 2>&1)
[ -z "$made" ] || bad="${bad}created: $made"
if [ -z "$bad" ]; then
  tap_ok "--template-policy baseline (the default): a privileged container or a hostPath volume makes the job Invalid (TemplateNotAllowed) naming the field, with an event, and creates nothing"
else tap_fail "the template policy at reconcile time" "$bad"; fi

# --- nothing refused, nothing secret in the log --------------------------------------------
it_stop "$OP"; rc=$?
if [ $rc = 0 ] && ! grep -q 'runtime error\|Sanitizer' "$LOG"; then tap_ok "the operator exits 0 on SIGTERM"
else tap_fail "the operator exits 0 on SIGTERM" "exit $rc; $(tail -n 10 "$LOG")"; fi
if [ -n "$token" ]; then
  if grep -qi 'forbidden\|" 403\|code 403\|HTTP 403' "$LOG"; then
    tap_fail "no request refused under the chart's RBAC" "$(grep -i 'forbidden\|403' "$LOG" | head -n 5)"
  else tap_ok "no request refused under the chart's RBAC ($(grep -c . "$LOG") log lines)"; fi
fi
# Every secret value in its stored and its decoded form, and the token and its signature.
mapfile -t needles < <(k get secrets -A -l app.kubernetes.io/managed-by=kubetrain-operator -o json |
  python3 -c '
import base64, json, sys
for s in json.load(sys.stdin)["items"]:
    for v in (s.get("data") or {}).values():
        print(v); print(base64.b64decode(v).decode("latin-1"))')
[ -n "$token" ] && needles+=("$token" "${token##*.}")
leaks=()
for n in "${needles[@]}"; do
  [ ${#n} -ge 16 ] && grep -qF -- "$n" "$LOG" && leaks+=("${n:0:8}...")
done
nkeys=$(k get secrets -A -l app.kubernetes.io/managed-by=kubetrain-operator -o name | wc -l)
if [ ${#leaks[@]} = 0 ] && [ "$nkeys" -ge 3 ] && [ "$(grep -c . "$LOG")" -gt 10 ]; then
  tap_ok "no token or ring key in the operator's debug log (${#needles[@]} values, $nkeys Secrets, $(grep -c . "$LOG") lines)"
else tap_fail "no token or ring key in the operator's log" "leaked: ${leaks[*]}; $nkeys secrets"; fi

# --- TLS verification: on unless the explicit flag says otherwise ----------------------------
if [ -n "$token" ]; then
  NOCA=$IT_DIR/noca.kubeconfig
  cat >"$NOCA" <<EOF
apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "$KT_APISERVER_URL"}}]
users: [{name: sa, user: {token: "$token"}}]
contexts: [{name: c, context: {cluster: c, user: sa}}]
current-context: c
EOF
  ns tls
  KUBECONFIG=$NOCA it_operator noca
  job tls t1 1
  sleep 5
  if grep -qi 'certificate' "$IT_DIR/op-noca.log" && [ "$(npods tls t1)" = 0 ]; then
    tap_ok "without the cluster's CA the operator verifies, fails and creates nothing"
  else tap_fail "without the cluster's CA the operator refuses the unverified server" \
    "$(npods tls t1) pods; $(tail -n 5 "$IT_DIR/op-noca.log")"; fi
  it_stop "$IT_PID"
  KUBECONFIG=$NOCA it_operator insecure --insecure-skip-tls-verify
  if wait_until 30 has_npods tls t1 1 && grep -q 'TLS VERIFICATION IS OFF' "$IT_DIR/op-insecure.log"; then
    tap_ok "with --insecure-skip-tls-verify it works, and says verification is off"
  else tap_fail "with --insecure-skip-tls-verify it works and warns" "$(tail -n 5 "$IT_DIR/op-insecure.log")"; fi
  it_stop "$IT_PID"
  if grep -qF -- "$token" "$IT_DIR"/op-noca.log "$IT_DIR"/op-insecure.log; then
    tap_fail "no token in the TLS cases' logs" "leaked"
  else tap_ok "no token in the TLS cases' logs"; fi
fi
tap_done
