#!/usr/bin/env bash
# kubetrain-operator (ASan+UBSan build) against a real kube-apiserver, etcd and
# kube-controller-manager: the objects it creates (Secret, Service, pods with TF_CONFIG,
# labels, owner references, env; a Secret named like the job's made beforehand by
# someone else is never used), status phases, the restart policies with pod failures
# written through the pods' status subresource (no kubelet at this tier), backoffLimit,
# activeDeadlineSeconds, ttlSecondsAfterFinished, suspend and resume, cleanPodPolicy, a
# spec the operator cannot run, disruptions, kubectl scale (the scale subresource), and
# garbage collection after the job is deleted.
# One cluster for the file, one namespace per case. Schema-level admission (invalid
# objects refused with the field named) is covered by e2e/tests/test-crd.sh.
set -uo pipefail # no -e: a failed check is reported (not ok) and the test goes on
cd "$(dirname "$0")/../../.." || exit 1
. e2e/lib/tap.sh
. operator/tests/integration/lib.sh

it_cluster opint-lifecycle
it_operator main --workers 4 --force-delete-after 2
OP=$IT_PID
LOG=$IT_DIR/op-main.log
# Every phase every job passes through, as a watch sees them: "ns/name phase" lines.
"$KT_K8S_BIN/kubectl" get tj -A -w -o 'jsonpath={.metadata.namespace}/{.metadata.name} {.status.phase}{"\n"}' \
  >"$IT_DIR/phases" 2>/dev/null &
IT_WATCH_PID=$!
# phases NS/NAME: the job's distinct phases in order, space-separated.
phases() { awk -v j="$1" '$1 == j && $2 != "" && $2 != last { printf "%s ", $2; last = $2 }' "$IT_DIR/phases"; }

# The deadline and TTL cases start first: their timers run while the other cases do.
ns deadline
job deadline j 2 "  activeDeadlineSeconds: 6"
ns ttl
job ttl j 1 "  ttlSecondsAfterFinished: 3"
all_running deadline j 2
all_running ttl j 1
pod_exit ttl j-worker-0 0 '{"step":1}'

# --- objects: Secret, Service, pods ---------------------------------------------------
ns objects
# Someone who may create Secrets here (and so knows this one's key) makes the name an
# operator before issue 23 gave the job's Secret, before the job exists.
k -n objects create secret generic mnist-secret --from-literal=ring-key=known-to-another >/dev/null
job objects mnist 3 "  port: 2345"
if wait_until 30 has_npods objects mnist 3; then tap_ok "3 worker pods created"
else tap_fail "3 worker pods created" "$(k -n objects get pods 2>&1; tail -n 5 "$LOG")"; fi
k -n objects get tj/mnist -o json >"$IT_DIR/job.json"
secret=$(jp objects tj/mnist .status.secretName)
k -n objects get "secret/${secret:-none}" -o json >"$IT_DIR/secret.json"
k -n objects get secret/mnist-secret -o json >"$IT_DIR/premade.json"
k -n objects get service/mnist-worker -o json >"$IT_DIR/service.json"
k -n objects get pods -l kubetrain.dev/job-name=mnist -o json >"$IT_DIR/pods.json"
# Checks each object against docs/design.md ("Names, labels and DNS", "TF_CONFIG");
# prints one line per mismatch.
out=$(python3 - "$IT_DIR" <<'PY'
import base64, json, re, sys
d = sys.argv[1]
job = json.load(open(d + "/job.json"))
try:
    sec = json.load(open(d + "/secret.json"))
except ValueError:
    sec = {"kind": "Secret", "metadata": {"name": None, "labels": {}}, "data": {"ring-key": ""}}
premade = json.load(open(d + "/premade.json"))
svc = json.load(open(d + "/service.json"))
pods = {p["metadata"]["name"]: p for p in json.load(open(d + "/pods.json"))["items"]}
uid, bad = job["metadata"]["uid"], []
def want(what, got, exp):
    if got != exp: bad.append(f"{what}: got {got!r}, want {exp!r}")
sname = job.get("status", {}).get("secretName") or ""
if not re.fullmatch(r"mnist-secret-[a-z0-9]{5}", sname):
    bad.append(f"status.secretName: got {sname!r}, want mnist-secret-<5 generated characters>")
want("Secret name", sec["metadata"]["name"], sname)
want("the Secret made beforehand: untouched (no owner)", premade["metadata"].get("ownerReferences"), None)
want("the Secret made beforehand: its key", base64.b64decode(premade["data"]["ring-key"]), b"known-to-another")
ref = [{"apiVersion": "kubetrain.dev/v1alpha1", "kind": "TrainingJob", "name": "mnist",
        "uid": uid, "controller": True, "blockOwnerDeletion": True}]
base = {"kubetrain.dev/job-name": "mnist", "app.kubernetes.io/managed-by": "kubetrain-operator"}
for o in (sec, svc):
    n = o["kind"]
    want(n + " ownerReferences", o["metadata"].get("ownerReferences"), ref)
    for k, v in base.items(): want(f"{n} label {k}", o["metadata"]["labels"].get(k), v)
key = base64.b64decode(sec["data"]["ring-key"]).decode()
if not re.fullmatch(r"[0-9a-f]{64}", key): bad.append("ring-key is not 64 hex digits: " + key)
want("Secret type", sec.get("type"), "Opaque")
s = svc["spec"]
want("Service clusterIP", s.get("clusterIP"), "None")
want("Service publishNotReadyAddresses", s.get("publishNotReadyAddresses"), True)
want("Service selector", s.get("selector"), {"kubetrain.dev/job-name": "mnist",
                                           "app.kubernetes.io/managed-by": "kubetrain-operator"})
want("Service port", [p["port"] for p in s.get("ports", [])], [2345])
want("pod names", sorted(pods), ["mnist-worker-0", "mnist-worker-1", "mnist-worker-2"])
peers = [f"mnist-worker-{i}.mnist-worker.objects.svc:2345" for i in range(3)]
for i in range(3):
    p = pods.get(f"mnist-worker-{i}")
    if not p: continue
    n, md, sp = f"pod {i}", p["metadata"], p["spec"]
    want(n + " ownerReferences", md.get("ownerReferences"), ref)
    labels = dict(base, **{"kubetrain.dev/role": "worker", "kubetrain.dev/replica-index": str(i)})
    for k, v in labels.items(): want(f"{n} label {k}", md["labels"].get(k), v)
    want(n + " hostname", sp.get("hostname"), f"mnist-worker-{i}")
    want(n + " subdomain", sp.get("subdomain"), "mnist-worker")
    want(n + " restartPolicy", sp.get("restartPolicy"), "Never")
    c = [c for c in sp["containers"] if c["name"] == "trainer"]
    if len(c) != 1: bad.append(n + ": no trainer container"); continue
    env = {e["name"]: e for e in c[0].get("env", [])}
    tf = ('{"cluster":{"worker":["' + '","'.join(peers) + '"]},"task":{"type":"worker","index":%d}}' % i)
    want(n + " TF_CONFIG (exact text)", env.get("TF_CONFIG", {}).get("value"), tf)
    want(n + " TF_CONFIG (parsed)", json.loads(env.get("TF_CONFIG", {}).get("value", "null")),
         {"cluster": {"worker": peers}, "task": {"type": "worker", "index": i}})
    for k, v in {"KUBETRAIN_JOB": "mnist", "KUBETRAIN_NAMESPACE": "objects",
                 "KUBETRAIN_CHECKPOINT_DIR": "/checkpoints/mnist", "KUBETRAIN_COLLECTIVE": "auto"}.items():
        want(f"{n} env {k}", env.get(k, {}).get("value"), v)
    refs = [e["valueFrom"]["secretKeyRef"] for e in env.values() if "secretKeyRef" in e.get("valueFrom", {})]
    want(n + " env from the ring secret", [(r["name"], r["key"]) for r in refs], [(sname, "ring-key")])
    want(n + " checkpoint claim", [v.get("persistentVolumeClaim", {}).get("claimName") for v in sp.get("volumes", [])
                                   if "persistentVolumeClaim" in v], ["ckpt"])
    want(n + " attempt annotation", md.get("annotations", {}).get("kubetrain.dev/attempt"), "0")
print("\n".join(bad))
PY
)
objects_check="Secret, Service and pods as docs/design.md names them"
if [ -z "$out" ]; then
  tap_ok "$objects_check (TF_CONFIG exact, labels, owner references, env; the Secret's\
 generated name in status, a mnist-secret made beforehand by another never used)"
else tap_fail "$objects_check" "$out"; fi

# --- status phases ----------------------------------------------------------------------
if is objects tj/mnist .status.phase Pending && is objects tj/mnist .status.workers.active 3 &&
   [ "$(condition objects mnist Created status)" = True ]; then
  tap_ok "phase Pending with 3 active workers and Created"
else tap_fail "phase Pending with 3 active workers and Created" "$(jp objects tj/mnist .status)"; fi
all_running objects mnist 3
if wait_until 20 is objects tj/mnist .status.phase Running; then
  if is objects tj/mnist .status.workers.ready 3 && [ "$(condition objects mnist Running reason)" = AllWorkersRunning ] &&
     [ -n "$(jp objects tj/mnist .status.startTime)" ] && is objects tj/mnist .status.observedGeneration 1; then
    tap_ok "phase Running once every pod runs: ready 3, Running condition, startTime, observedGeneration"
  else tap_fail "Running status fields" "$(jp objects tj/mnist .status)"; fi
else tap_fail "phase Running once every pod runs" "$(jp objects tj/mnist .status)"; fi
secret_uid=$(jp objects "secret/${secret:-none}" .metadata.uid)
pod_exit objects mnist-worker-0 0 '{"step":210,"epoch":3,"loss":0.41,"accuracy":0.86,"weights_sha256":"ab12"}'
if wait_until 20 is objects tj/mnist .status.phase Succeeded; then
  res=$(jp objects tj/mnist .status.result)
  if python3 -c 'import json,sys; r=json.loads(sys.argv[1]); assert r=={"step":210,"epoch":3,"loss":0.41,"accuracy":0.86,"weightsSha256":"ab12"}, r' "$res" 2>/dev/null &&
     [ "$(condition objects mnist Succeeded reason)" = Completed ] && [ -n "$(jp objects tj/mnist .status.completionTime)" ]; then
    tap_ok "chief succeeded: phase Succeeded, result from its termination message, completionTime"
  else tap_fail "Succeeded status fields" "$(jp objects tj/mnist .status)"; fi
else tap_fail "phase Succeeded when the chief completes" "$(jp objects tj/mnist .status)"; fi
# cleanPodPolicy Running (the default): the running workers go, the chief stays.
if wait_until 20 has_npods objects mnist 1 && k -n objects get pod mnist-worker-0 >/dev/null 2>&1; then
  tap_ok "cleanPodPolicy Running: running workers deleted, the succeeded chief kept"
else tap_fail "cleanPodPolicy Running" "$(k -n objects get pods 2>&1)"; fi
events=$(k -n objects get events --field-selector involvedObject.name=mnist -o 'jsonpath={range .items[*]}{.reason}{" "}{end}')
if grep -q CreatedWorkers <<<"$events" && grep -q Completed <<<"$events"; then
  tap_ok "events recorded for the creations and the completion"
else tap_fail "events recorded" "reasons: $events"; fi

# --- restart policies -------------------------------------------------------------------
# Never: one failure fails the job.
ns never
job never j 2 "  restartPolicy: Never"
all_running never j 2
pod_exit never j-worker-1 1 '{"error":"loss is NaN"}'
if wait_until 20 is never tj/j .status.phase Failed &&
   [ "$(condition never j Failed reason)" = WorkerFailed ] &&
   grep -q 'loss is NaN' <<<"$(condition never j Failed message)"; then
  tap_ok "restartPolicy Never: a failed worker fails the job (WorkerFailed, message kept)"
else tap_fail "restartPolicy Never" "$(jp never tj/j .status)"; fi
if is never tj/j .status.restarts.application "" || is never tj/j .status.restarts.application 0; then
  tap_ok "restartPolicy Never: no restart counted"
else tap_fail "restartPolicy Never: no restart counted" "$(jp never tj/j .status.restarts)"; fi

# OnFailure: any failure restarts the whole group in a new attempt.
ns onfailure
job onfailure j 3 "  restartPolicy: OnFailure"
all_running onfailure j 3
uid0=$(jp onfailure pod/j-worker-0 .metadata.uid)
pod_exit onfailure j-worker-2 1 '{"error":"boom"}'
if wait_until 20 is onfailure tj/j .status.restarts.application 1 &&
   wait_until 30 attempt_pods onfailure j 1 3; then
  if [ "$(jp onfailure pod/j-worker-0 .metadata.uid)" != "$uid0" ]; then
    tap_ok "restartPolicy OnFailure: exit 1 restarts the group (all 3 pods recreated, attempt 1)"
  else tap_fail "OnFailure restarts the group" "worker 0 was not recreated"; fi
else tap_fail "restartPolicy OnFailure restarts the group" "$(jp onfailure tj/j .status; k -n onfailure get pods 2>&1)"; fi
all_running onfailure j 3
if wait_until 20 is onfailure tj/j .status.phase Running && is onfailure tj/j .status.attempt 1; then
  tap_ok "OnFailure: Running again after the restart"
else tap_fail "OnFailure: Running again after the restart" "$(jp onfailure tj/j .status)"; fi
sleep 0.5
if [ "$(phases onfailure/j)" = "Pending Running Restarting Running " ]; then
  tap_ok "OnFailure: phases Pending Running Restarting Running, as a watch saw them"
else tap_fail "OnFailure: phases as a watch saw them" "got: $(phases onfailure/j)"; fi
if [ "$(condition onfailure j Restarting status)" = False ] &&
   [ "$(condition onfailure j Restarting reason)" = AllWorkersRunning ]; then
  tap_ok "OnFailure: the Restarting condition is cleared once all workers run again"
else tap_fail "OnFailure: Restarting condition cleared" "$(jp onfailure tj/j .status.conditions)"; fi

# ExitCode: 75 and 137 retry, 3 fails with the trainer's message. Live recovery off: these
# are the group's restarts (a lone replacement: test-recovery.sh).
ns exitcode
job exitcode j 2 "  restartPolicy: ExitCode
  recoveryTimeoutSeconds: 0"
all_running exitcode j 2
pod_exit exitcode j-worker-1 75 '{"error":"peer lost"}'
if wait_until 30 attempt_pods exitcode j 1 2 && is exitcode tj/j .status.restarts.application 1; then
  tap_ok "restartPolicy ExitCode: exit 75 restarts the group"
else tap_fail "restartPolicy ExitCode: exit 75 restarts the group" "$(jp exitcode tj/j .status)"; fi
all_running exitcode j 2
pod_exit exitcode j-worker-0 137 ''
if wait_until 30 attempt_pods exitcode j 2 2 && is exitcode tj/j .status.restarts.application 2; then
  tap_ok "restartPolicy ExitCode: exit 137 (SIGKILL) restarts the group"
else tap_fail "restartPolicy ExitCode: exit 137 restarts the group" "$(jp exitcode tj/j .status)"; fi
all_running exitcode j 2
pod_exit exitcode j-worker-1 3 '{"error":"bad data: /data/train-images-idx3-ubyte.gz: truncated"}'
if wait_until 20 is exitcode tj/j .status.phase Failed && [ "$(condition exitcode j Failed reason)" = NonRetryableExitCode ] &&
   grep -q 'code 3: bad data: /data/train-images-idx3-ubyte.gz: truncated' <<<"$(condition exitcode j Failed message)"; then
  tap_ok "restartPolicy ExitCode: exit 3 fails the job with the trainer's message in the Failed condition"
else tap_fail "restartPolicy ExitCode: exit 3 fails the job" "$(jp exitcode tj/j .status)"; fi
if is exitcode tj/j .status.restarts.application 2; then tap_ok "ExitCode: the failure is not counted as a restart"
else tap_fail "ExitCode: the failure is not counted as a restart" "$(jp exitcode tj/j .status.restarts)"; fi

# --- backoffLimit -----------------------------------------------------------------------
ns backoff
job backoff j 2 "  backoffLimit: 1"
all_running backoff j 2
pod_exit backoff j-worker-0 1 'oops'
wait_until 30 attempt_pods backoff j 1 2
all_running backoff j 2
pod_exit backoff j-worker-1 1 'oops again'
if wait_until 20 is backoff tj/j .status.phase Failed && [ "$(condition backoff j Failed reason)" = BackoffLimitExceeded ] &&
   is backoff tj/j .status.restarts.application 1; then
  tap_ok "backoffLimit 1: the second failure fails the job (BackoffLimitExceeded)"
else tap_fail "backoffLimit exhausted" "$(jp backoff tj/j .status)"; fi
# The failed job's running pods are cleaned up (cleanPodPolicy Running).
if wait_until 20 has_npods backoff j 1; then tap_ok "the failed job's running pod is deleted"
else tap_fail "the failed job's running pod is deleted" "$(k -n backoff get pods 2>&1)"; fi

# --- a spec the schema accepts but the operator cannot run -----------------------------
ns invalid
long=j$(printf 'x%.0s' $(seq 55))   # 56 characters: <name>-worker-0 exceeds 63
job invalid "$long" 2
if wait_until 20 is invalid "tj/$long" '.status.conditions[?(@.type=="Invalid")].status' True; then
  msg=$(condition invalid "$long" Invalid message)
  sleep 1
  if [ "$(npods invalid "$long")" = 0 ] && grep -q 'metadata.name.*too long' <<<"$msg"; then
    tap_ok "a job name too long for its pods' hostnames: Invalid condition, no pods ($msg)"
  else tap_fail "Invalid: no pods" "$(k -n invalid get pods 2>&1)"; fi
else tap_fail "a job the operator cannot run gets Invalid" "$(jp invalid "tj/$long" .status)"; fi
warned() { k -n invalid get events -o 'jsonpath={.items[?(@.type=="Warning")].reason}' | grep -q InvalidSpec; }
if wait_until 10 warned; then
  tap_ok "Invalid: a Warning event InvalidSpec"
else tap_fail "Invalid: a Warning event" "$(k -n invalid get events 2>&1)"; fi

# --- activeDeadlineSeconds ----------------------------------------------------------------
if wait_until 20 is deadline tj/j .status.phase Failed && [ "$(condition deadline j Failed reason)" = DeadlineExceeded ]; then
  start=$(jp deadline tj/j .status.startTime)
  # When the operator acted: its log line for the event, milliseconds.
  fired=$(grep '"job":"deadline/j"' "$LOG" | grep DeadlineExceeded | head -n 1 |
          python3 -c 'import json,sys; print(json.loads(sys.stdin.readline())["ts"])')
  late=$(python3 -c '
import sys, datetime as d
p = lambda s: d.datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()
print("%.3f" % (p(sys.argv[2]) - p(sys.argv[1]) - 6))' "$start" "$fired")
  if python3 -c 'import sys; sys.exit(0 if 0 <= float(sys.argv[1]) <= 2 else 1)' "$late"; then
    tap_ok "activeDeadlineSeconds 6 fires ${late} s after its time (startTime $start, fired $fired)"
  else tap_fail "activeDeadlineSeconds fires within 2 s of its time" "startTime $start, fired $fired: ${late} s late"; fi
else tap_fail "activeDeadlineSeconds fails the job (DeadlineExceeded)" "$(jp deadline tj/j .status)"; fi
if wait_until 20 has_npods deadline j 0; then tap_ok "deadline: the running pods are deleted"
else tap_fail "deadline: the running pods are deleted" "$(k -n deadline get pods 2>&1)"; fi

# --- ttlSecondsAfterFinished ---------------------------------------------------------------
# From the operator's log: when it completed the job and when it deleted it (ms).
ttl_ts() { grep '"job":"ttl/j"' "$LOG" | grep "$1" | head -n 1 |
           python3 -c 'import json,sys; print(json.loads(sys.stdin.readline())["ts"])'; }
gone() { ! k -n "$1" get "$2" >/dev/null 2>&1; }
if wait_until 30 gone ttl tj/j; then
  done_at=$(ttl_ts 'Completed') deleted_at=$(ttl_ts 'ttlSecondsAfterFinished elapsed')
  after=$(python3 -c '
import sys, datetime as d
p = lambda s: d.datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()
print("%.3f" % (p(sys.argv[2]) - p(sys.argv[1])))' "$done_at" "$deleted_at")
  # completionTime has one-second resolution: the deletion comes 2..3 s after the
  # completion itself, plus the reaction time.
  if python3 -c 'import sys; sys.exit(0 if 2 <= float(sys.argv[1]) <= 5 else 1)' "$after"; then
    tap_ok "ttlSecondsAfterFinished 3: the job is deleted ${after} s after it completed"
  else tap_fail "ttlSecondsAfterFinished 3: deleted on time" "completed $done_at, deleted $deleted_at"; fi
else tap_fail "ttlSecondsAfterFinished deletes the job" "$(jp ttl tj/j .status)"; fi

# --- suspend and resume -------------------------------------------------------------------
ns suspend
job suspend j 2
all_running suspend j 2
wait_until 20 is suspend tj/j .status.phase Running
k -n suspend patch tj j --type merge -p '{"spec":{"suspend":true}}' >/dev/null
if wait_until 20 is suspend tj/j .status.phase Suspended && wait_until 20 has_npods suspend j 0 &&
   [ "$(condition suspend j Suspended status)" = True ]; then
  tap_ok "suspend: pods deleted, phase Suspended, Suspended condition"
else tap_fail "suspend" "$(jp suspend tj/j .status; k -n suspend get pods 2>&1)"; fi
sleep 1
if has_npods suspend j 0 && is suspend tj/j .status.phase Suspended; then tap_ok "suspended: no pods come back"
else tap_fail "suspended: no pods come back" "$(k -n suspend get pods 2>&1)"; fi
k -n suspend patch tj j --type merge -p '{"spec":{"suspend":false}}' >/dev/null
if wait_until 30 attempt_pods suspend j 1 2 && [ "$(condition suspend j Suspended status)" = False ]; then
  tap_ok "resume: a new attempt's pods are created, Suspended condition False"
else tap_fail "resume" "$(jp suspend tj/j .status; k -n suspend get pods 2>&1)"; fi
all_running suspend j 2
if wait_until 20 is suspend tj/j .status.phase Running && is suspend tj/j .status.restarts.application ""; then
  tap_ok "resumed job Running; suspension counts as no failure"
else tap_fail "resumed job Running" "$(jp suspend tj/j .status)"; fi

# --- disruptions -----------------------------------------------------------------------------
# A pod deleted by someone else, or preempted (DisruptionTarget), restarts the group, is
# counted apart and never fails the job: not even under restartPolicy Never, backoffLimit 0.
# Live recovery off: with it one such pod is replaced alone (test-recovery.sh).
ns disrupt
job disrupt j 2 "  restartPolicy: Never
  backoffLimit: 0
  recoveryTimeoutSeconds: 0"
all_running disrupt j 2
k -n disrupt delete pod j-worker-1 --wait=false >/dev/null
if wait_until 30 attempt_pods disrupt j 1 2 && is disrupt tj/j .status.restarts.disruption 1; then
  tap_ok "a worker pod deleted by someone else: the group restarts, counted as a disruption"
else tap_fail "a deleted worker pod restarts the group" "$(jp disrupt tj/j .status; k -n disrupt get pods 2>&1)"; fi
all_running disrupt j 2
k -n disrupt patch pod j-worker-0 --subresource status --type merge -p '{"status":{"phase":"Failed",
  "reason":"Preempted","conditions":[{"type":"DisruptionTarget","status":"True","reason":"PreemptionByScheduler"}],
  "containerStatuses":[{"name":"trainer","image":"kubetrain/trainer","imageID":"","ready":false,"restartCount":0,
  "state":{"terminated":{"exitCode":137,"startedAt":"2026-01-01T00:00:00Z","finishedAt":"2026-01-01T00:00:01Z"}}}]}}' >/dev/null
if wait_until 30 attempt_pods disrupt j 2 2 && is disrupt tj/j .status.restarts.disruption 2 &&
   ! is disrupt tj/j .status.phase Failed && [ "$(jp disrupt tj/j .status.restarts.application)" = 0 ]; then
  tap_ok "a preempted worker (DisruptionTarget): restarts, disruption 2, application 0, not Failed (Never, backoffLimit 0)"
else tap_fail "a preempted worker restarts without failing the job" "$(jp disrupt tj/j .status)"; fi

# --- kubectl scale ---------------------------------------------------------------------------
# The scale subresource: replicas are spec.workers, status.currentWorkers the running worker
# pods of the attempt, status.selector selects them. Scaling a running job changes
# spec.workers: the group restarts at the new size (WorkersChanged), no restart counted.
ns scale
job scale j 2
all_running scale j 2
sel=kubetrain.dev/job-name=j,kubetrain.dev/role=worker
scale_of() {
  k -n scale get tj/j --subresource=scale \
    -o 'jsonpath={.spec.replicas} {.status.replicas} {.status.selector}' 2>&1
}
scale_is() { [ "$(scale_of)" = "$1" ]; }
what="kubectl get --subresource=scale: 2 replicas, 2 running, the worker selector"
if wait_until 20 scale_is "2 2 $sel"; then tap_ok "$what"
else tap_fail "$what" "got '$(scale_of)'"; fi
k -n scale scale tj/j --replicas 3 >/dev/null
what="kubectl scale --replicas 3: spec.workers 3, the group restarted with 3 pods"
if wait_until 30 attempt_pods scale j 1 3 && is scale tj/j .spec.workers 3 &&
   [ "$(condition scale j Restarting reason)" = WorkersChanged ] &&
   is scale tj/j .status.restarts.application ""; then
  tap_ok "$what (attempt 1, WorkersChanged, no restart counted)"
else tap_fail "$what" "$(jp scale tj/j .status; k -n scale get pods 2>&1)"; fi
all_running scale j 3
running_sel() {
  k -n scale get pods -l "$sel" --field-selector status.phase=Running -o name | wc -l
}
what="after the resize the scale subresource reads 3 of 3"
if wait_until 20 scale_is "3 3 $sel" && [ "$(running_sel)" = 3 ]; then
  tap_ok "$what, and its selector finds the 3 running pods"
else tap_fail "$what" "got '$(scale_of)', $(running_sel) pods selected"; fi

# --- a pod stuck terminating on a dead node --------------------------------------------------
# A pod bound to a node is deleted gracefully: it stays Terminating until that node's kubelet
# confirms. Here the node has no kubelet, as when a node dies; with --force-delete-after 2 the
# operator deletes it with grace period 0 two seconds after its grace period ends, and the
# group restarts (without it the restart would wait for ever on the pod's name).
ns stuck
job stuck j 2 "  recoveryTimeoutSeconds: 0"
all_running stuck j 2
k create -f - >/dev/null <<'Y'
{"apiVersion": "v1", "kind": "Node", "metadata": {"name": "kt-dead-node"}}
Y
k create --raw /api/v1/namespaces/stuck/pods/j-worker-1/binding -f - >/dev/null <<'Y'
{"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "j-worker-1"},
 "target": {"apiVersion": "v1", "kind": "Node", "name": "kt-dead-node"}}
Y
k -n stuck delete pod j-worker-1 --grace-period=1 --wait=false >/dev/null
if [ -n "$(jp stuck pod/j-worker-1 .metadata.deletionTimestamp)" ]; then
  tap_ok "a pod bound to a node without a kubelet stays Terminating after delete"
else tap_fail "a pod bound to a node without a kubelet stays Terminating after delete" "$(k -n stuck get pod j-worker-1 -o yaml 2>&1 | head -30)"; fi
forced() { k -n stuck get events -o 'jsonpath={.items[?(@.reason=="ForceDeleted")].message}' | grep -q 'j-worker-1.*kt-dead-node'; }
if wait_until 30 attempt_pods stuck j 1 2 && forced; then
  tap_ok "a pod stuck Terminating is force-deleted after --force-delete-after (ForceDeleted event naming pod and node) and the group restarts"
else tap_fail "a pod stuck Terminating is force-deleted and the group restarts" \
  "$(jp stuck tj/j .status; k -n stuck get pods -o wide 2>&1; k -n stuck get events 2>&1 | tail -5)"; fi
k delete node kt-dead-node --wait=false >/dev/null 2>&1

# --- cleanPodPolicy None and All -------------------------------------------------------------
for policy in None All; do
  n=clean-${policy,,}
  ns "$n"
  job "$n" j 3 "  cleanPodPolicy: $policy"
  all_running "$n" j 3
  pod_exit "$n" j-worker-0 0 '{"step":1}'
  wait_until 20 is "$n" tj/j .status.phase Succeeded
  want=3; [ $policy = All ] && want=0
  wait_until 10 has_npods "$n" j "$want"
  sleep 1
  if has_npods "$n" j "$want"; then tap_ok "cleanPodPolicy $policy: $want pods left after success"
  else tap_fail "cleanPodPolicy $policy: $want pods left" "$(k -n "$n" get pods 2>&1)"; fi
done

# --- garbage collection ----------------------------------------------------------------------
# The job of the clean-none case still has 3 pods, its Service and its Secret.
k -n clean-none delete tj j --wait=false >/dev/null
owned_gone() {
  [ -z "$(k -n clean-none get pods,services,secrets -l kubetrain.dev/job-name=j -o name 2>/dev/null)" ]
}
# The collector picks up a new CRD at its next discovery resync (30 s): the margin.
if wait_until 90 owned_gone; then
  tap_ok "job deleted: the garbage collector removes its pods, Service and Secret"
else tap_fail "garbage collection after the job is deleted" "$(k -n clean-none get pods,services,secrets 2>&1)"; fi
sleep 1
if [ -z "$(k -n clean-none get pods -o name 2>/dev/null)" ]; then tap_ok "the operator recreates nothing for a deleted job"
else tap_fail "the operator recreates nothing for a deleted job" "$(k -n clean-none get pods 2>&1)"; fi

# The secret was created once: status names the same one through the objects case, and
# the operator made no other (the one made beforehand has no job label).
nsec=$(k -n objects get secrets -l kubetrain.dev/job-name=mnist -o name 2>/dev/null | wc -l)
if [ -n "$secret_uid" ] && is objects tj/mnist .status.secretName "$secret" &&
   [ "$(jp objects "secret/$secret" .metadata.uid)" = "$secret_uid" ] && [ "$nsec" = 1 ]; then
  tap_ok "the ring Secret is created once"
else tap_fail "the ring Secret is created once" "$secret uid $secret_uid -> $(jp objects tj/mnist .status.secretName) $(jp objects "secret/$secret" .metadata.uid); $nsec secrets"; fi

# --- phases as a watch saw them ----------------------------------------------------------------
bad=
for want in "objects/mnist Pending Running Succeeded" "never/j Pending Running Failed" \
            "exitcode/j Pending Running Restarting Running Restarting Running Failed" \
            "suspend/j Pending Running Suspended Pending Running" "deadline/j Pending Running Failed"; do
  got=$(phases "${want%% *}")
  [ "$got" = "${want#* } " ] || bad="$bad${want%% *}: got '$got', want '${want#* }'"$'\n'
done
if [ -z "$bad" ]; then tap_ok "each job's phases in order, as a watch saw them (5 jobs)"
else tap_fail "each job's phases in order" "$bad"; fi

# --- the operator itself ---------------------------------------------------------------------
if grep -q 'runtime error\|AddressSanitizer\|LeakSanitizer' "$LOG"; then
  tap_fail "no sanitizer report in the operator's log" "$(grep -A5 'runtime error\|Sanitizer' "$LOG" | head -n 30)"
else tap_ok "no sanitizer report in the operator's log"; fi
it_stop "$OP"; rc=$?
if [ $rc = 0 ]; then tap_ok "SIGTERM: the operator exits 0 (no leak reported)"
else tap_fail "SIGTERM: the operator exits 0" "exit $rc; $(tail -n 20 "$LOG")"; fi
tap_done
