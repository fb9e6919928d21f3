#!/usr/bin/env bash
# An elastic job's pods (issue 46, docs/design.md "Elastic jobs") against a real
# kube-apiserver: the apiserver takes them with the kubetrain.dev/members annotation and
# the downwardAPI volume that projects it, KUBETRAIN_MEMBERS_FILE names the file, and
# --global-batch is the one status.globalBatch recorded at the job's creation; kubectl
# scale down shrinks the job in place (the survivors patched, the dropped pod deleted,
# no restart), and up to 4, past the attempt's TF_CONFIG, grows it in place with the same
# global batch (the survivors' members naming the new index's address); a lost
# worker's unschedulable replacement is left out of the ring and joins it once it runs,
# and so is a worker that cannot be placed when an attempt starts; the chief's slot too,
# the lowest member then completing the job.
set -uo pipefail # no -e: a failed check is reported (not ok) and the test goes on
cd "$(dirname "$0")/../../.." || exit 1
. e2e/lib/tap.sh
. operator/tests/integration/lib.sh

it_cluster opint-elastic
it_operator main --workers 2
OP=$IT_PID
LOG=$IT_DIR/op-main.log

ns elastic
job elastic e 3 "  elastic: {minWorkers: 2}
  training: {perWorkerBatchSize: 32}"
if wait_until 30 has_npods elastic e 3; then tap_ok "3 pods of the elastic job created"
else
  tap_fail "3 pods of the elastic job created" "$(k -n elastic get pods 2>&1; tail -n 5 "$LOG")"
fi
if is elastic tj/e .status.globalBatch 96; then tap_ok "status.globalBatch 96 (3 x 32)"
else tap_fail "status.globalBatch 96 (3 x 32)" "got '$(jp elastic tj/e .status.globalBatch)'"; fi

# check_pods N: prints one line per way the job's pods differ from N elastic workers.
check_pods() {
  k -n elastic get pods -l kubetrain.dev/job-name=e -o json >"$IT_DIR/pods.json"
  python3 - "$IT_DIR/pods.json" "$1" <<'PY'
import json, sys
pods, n, bad = json.load(open(sys.argv[1]))["items"], int(sys.argv[2]), []
def want(what, got, exp):
    if got != exp: bad.append(f"{what}: got {got!r}, want {exp!r}")
want("pods", len(pods), n)
members = ",".join(str(i) for i in range(n))
ann = "metadata.annotations['kubetrain.dev/members']"
for p in pods:
    name, sp = p["metadata"]["name"], p["spec"]
    got = p["metadata"].get("annotations", {}).get("kubetrain.dev/members")
    want(name + " members annotation", got, members)
    vols = [v.get("downwardAPI", {}).get("items") for v in sp.get("volumes", [])
            if v["name"] == "kubetrain-members"]
    item = {"path": "members", "fieldRef": {"apiVersion": "v1", "fieldPath": ann}}
    want(name + " members volume", vols, [[item]])
    c = [c for c in sp["containers"] if c["name"] == "trainer"][0]
    mounts = [(m["mountPath"], m.get("readOnly")) for m in c.get("volumeMounts", [])
              if m["name"] == "kubetrain-members"]
    want(name + " members mount", mounts, [("/etc/kubetrain-members", True)])
    env = {e["name"]: e.get("value") for e in c.get("env", [])}
    want(name + " KUBETRAIN_MEMBERS_FILE", env.get("KUBETRAIN_MEMBERS_FILE"),
         "/etc/kubetrain-members/members")
    a = c.get("args", [])
    g = a[a.index("--global-batch") + 1] if "--global-batch" in a else None
    want(name + " --global-batch", g, "96")
print("\n".join(bad))
PY
}
out=$(check_pods 3)
if [ -z "$out" ]; then
  tap_ok "stored pods: members 0,1,2 projected as KUBETRAIN_MEMBERS_FILE, --global-batch 96"
else tap_fail "stored pods: members projected, --global-batch 96" "$out"; fi

# kubectl scale 3 -> 2 with the pods running: no restart. The survivors (same uids, attempt
# 0) are patched to members 0,1, worker 2 is deleted, status and an event say why.
all_running elastic e 3
uids() { k -n elastic get pods -l kubetrain.dev/job-name=e -o 'jsonpath={.items[*].metadata.uid}'; }
before=$(k -n elastic get pods e-worker-0 e-worker-1 -o 'jsonpath={.items[*].metadata.uid}')
k -n elastic scale tj/e --replicas 2 >/dev/null
if wait_until 30 has_npods elastic e 2; then tap_ok "kubectl scale --replicas 2: worker 2 deleted"
else tap_fail "kubectl scale --replicas 2: worker 2 deleted" "$(k -n elastic get pods 2>&1)"; fi
if [ "$(uids)" = "$before" ] && attempt_pods elastic e 0 2; then
  tap_ok "the survivors are the same pods (uids, attempt 0)"
else tap_fail "the survivors are the same pods" "before '$before', now '$(uids)'"; fi
out=$(check_pods 2)
if [ -z "$out" ]; then tap_ok "the survivors' members patched to 0,1, --global-batch still 96"
else tap_fail "the survivors' members patched to 0,1, --global-batch still 96" "$out"; fi
want="shrank from 3 to 2 workers (members 0,1): spec.workers lowered to 2"
got="$(condition elastic e Resized reason): $(condition elastic e Resized message)"
if [ "$got" = "Shrank: $want" ] && is elastic tj/e .status.members 0,1; then
  tap_ok "status.members 0,1 and condition Resized/Shrank say why"
else tap_fail "status.members 0,1 and condition Resized/Shrank say why" "got '$got'"; fi
ev=$(k -n elastic get events --field-selector reason=Resized -o 'jsonpath={.items[*].message}')
if [ "$ev" = "$want" ]; then tap_ok "one Resized event: $want"
else tap_fail "one Resized event" "got '$ev'"; fi
attempt=$(jp elastic tj/e .status.attempt)
if [ "${attempt:-0}" = 0 ] && is elastic tj/e .status.currentWorkers 2 &&
  is elastic tj/e .status.globalBatch 96; then
  tap_ok "attempt 0, currentWorkers 2, globalBatch 96"
else tap_fail "attempt 0, currentWorkers 2, globalBatch 96" \
  "$(k -n elastic get tj/e -o 'jsonpath={.status}')"; fi

# kubectl scale to 4, past the 3 workers the attempt's TF_CONFIG names: no restart
# either. Workers 2 and 3 are made in attempt 0 with a TF_CONFIG of 4, naming the members
# and themselves, index 3 with its address (the survivors' TF_CONFIG has none for it); as
# each runs the others are patched to name it, index 3 with the address its TF_CONFIG
# gives it.
k -n elastic scale tj/e --replicas 4 >/dev/null
if wait_until 30 attempt_pods elastic e 0 4; then
  tap_ok "kubectl scale --replicas 4: workers 2 and 3 made in attempt 0"
else
  tap_fail "kubectl scale --replicas 4: workers 2 and 3 made in attempt 0" \
    "$(k -n elastic get pods 2>&1)"
fi
members() { jp elastic "pod/$1" '.metadata.annotations.kubetrain\.dev/members'; }
# unschedulable POD: the scheduler's verdict on POD, written in its place (no scheduler
# runs at this level).
unschedulable() {
  k -n elastic patch pod "$1" --subresource status --type merge -p '{"status":{"conditions":[
    {"type":"PodScheduled","status":"False","reason":"Unschedulable",
     "message":"0/1 nodes are available: 1 Insufficient cpu."}]}}' >/dev/null
}
# delete_replaced POD WHAT: POD deleted; a check that a pod of its name with another uid
# (its live replacement) comes within 30 s.
delete_replaced() {
  local old
  old=$(jp elastic "pod/$1" .metadata.uid)
  k -n elastic delete pod "$1" --wait=false >/dev/null
  # shellcheck disable=SC2317 # called by wait_until
  new_uid() {
    local u
    u=$(jp elastic "pod/$1" .metadata.uid)
    [ -n "$u" ] && [ "$u" != "$old" ]
  }
  if wait_until 30 new_uid "$1"; then tap_ok "$2 deleted and replaced live"
  else tap_fail "$2 deleted and replaced live" "$(k -n elastic get pods 2>&1)"; fi
}
# cluster POD: its world-size annotation, its TF_CONFIG's workers, and the last one's address.
cluster() {
  k -n elastic get pod "$1" -o json | python3 -c 'import json, sys
p = json.load(sys.stdin)
c = [c for c in p["spec"]["containers"] if c["name"] == "trainer"][0]
tf = json.loads({e["name"]: e.get("value") for e in c["env"]}["TF_CONFIG"])
w = tf["cluster"]["worker"]
print(p["metadata"]["annotations"]["kubetrain.dev/world-size"], len(w), w[-1])'
}
read -r w3_world w3_workers addr3 <<<"$(cluster e-worker-3)"
read -r w2_world w2_workers _ <<<"$(cluster e-worker-2)"
if [ "$w2_world $w2_workers $w3_world $w3_workers" = "4 4 4 4" ] &&
  [ "$(members e-worker-2)" = 0,1,2 ] && [ "$(members e-worker-3)" = "0,1,3=$addr3" ] &&
  [ "$(members e-worker-0)" = 0,1 ]; then
  tap_ok "the new workers' TF_CONFIG names 4, they name 0,1,2 and 0,1,3=$addr3; the others \
still 0,1"
else tap_fail "the new workers name the members and themselves" \
  "$w2_world $w2_workers $w3_world $w3_workers: $(members e-worker-2), $(members e-worker-3), \
$(members e-worker-0)"; fi
pod_running elastic e-worker-2
grown() { [ "$(members e-worker-0)" = "$1" ] && [ "$(members e-worker-1)" = "$1" ]; }
want="grew from 2 to 3 workers (members 0,1,2): pod e-worker-2 runs"
if wait_until 30 grown 0,1,2 && [ "$(condition elastic e Resized message)" = "$want" ]; then
  tap_ok "worker 2 runs: the others patched to 0,1,2, Resized/Grew"
else tap_fail "worker 2 runs: the others patched to 0,1,2" \
  "$(members e-worker-0) $(members e-worker-1): $(condition elastic e Resized message)"; fi
pod_running elastic e-worker-3
want="grew from 3 to 4 workers (members 0,1,2,3): pod e-worker-3 runs"
if wait_until 30 grown "0,1,2,3=$addr3" && [ "$(members e-worker-2)" = "0,1,2,3=$addr3" ] &&
  [ "$(members e-worker-3)" = "0,1,2,3=$addr3" ] &&
  [ "$(condition elastic e Resized message)" = "$want" ] &&
  [ "$(uids | wc -w)" = 4 ] && [[ "$(uids)" == "$before"* ]]; then
  tap_ok "worker 3 runs: all four (the survivors the same pods) name 0,1,2,3=$addr3, Resized/Grew"
else tap_fail "worker 3 runs: all four name 0,1,2,3 with index 3's address" \
  "$(members e-worker-0) $(members e-worker-2) $(members e-worker-3): \
$(condition elastic e Resized message)"; fi
attempt=$(jp elastic tj/e .status.attempt)
if [ "${attempt:-0}" = 0 ] && is elastic tj/e .status.currentWorkers 4 &&
  is elastic tj/e .status.members 0,1,2,3 && ! grep -q WorkersChanged "$LOG"; then
  tap_ok "attempt 0, currentWorkers 4, members 0,1,2,3, no WorkersChanged"
else tap_fail "attempt 0, currentWorkers 4, members 0,1,2,3" \
  "$(k -n elastic get tj/e -o 'jsonpath={.status}')"; fi

# Back to 3 for what follows: worker 3 goes, the others name 0,1,2 (no address: every
# pod's TF_CONFIG names index 2).
k -n elastic scale tj/e --replicas 3 >/dev/null
wait_until 30 has_npods elastic e 3
out=$(check_pods 3)
if [ -z "$out" ]; then tap_ok "scaled back to 3: members 0,1,2, --global-batch still 96"
else tap_fail "scaled back to 3: members 0,1,2, --global-batch still 96" "$out"; fi

# A lost worker whose replacement the scheduler cannot place: the survivors go on
# without it (patched to 0,1, Resized/Shrank naming the scheduler's words), the
# replacement stays Pending; once it runs, the others are patched to name it again.
all_running elastic e 3
delete_replaced e-worker-2 "worker 2"
unschedulable e-worker-2
shrunk() { [ "$(members e-worker-0)" = 0,1 ] && [ "$(members e-worker-1)" = 0,1 ]; }
want="shrank from 3 to 2 workers (members 0,1): pod e-worker-2 unschedulable: 0/1 nodes are"
if wait_until 30 shrunk && [[ "$(condition elastic e Resized message)" == "$want"* ]]; then
  tap_ok "replacement unschedulable: the survivors patched to 0,1, Resized says why"
else tap_fail "replacement unschedulable: the survivors patched to 0,1" \
  "$(members e-worker-0) $(members e-worker-1): $(condition elastic e Resized message)"; fi
pod_running elastic e-worker-2
want="grew from 2 to 3 workers (members 0,1,2): pod e-worker-2 runs"
if wait_until 30 grown 0,1,2 && [ "$(condition elastic e Resized message)" = "$want" ]; then
  tap_ok "the replacement runs: the others patched to 0,1,2, Resized/Grew"
else tap_fail "the replacement runs: the others patched to 0,1,2" \
  "$(members e-worker-0) $(members e-worker-1): $(condition elastic e Resized message)"; fi

# An attempt that starts with a worker the scheduler cannot place (the gang lets the
# others be placed at minWorkers): workers 0 and 1 run, worker 2 is unschedulable. The
# attempt starts at 2 (the placed pods patched to 0,1, Resized/Shrank naming the
# scheduler's words, no restart); worker 2 stays Pending naming 0,1,2, and once it runs
# the others are patched to name it.
job elastic s 3 "  elastic: {minWorkers: 2}
  training: {perWorkerBatchSize: 32}"
wait_until 30 has_npods elastic s 3
unschedulable s-worker-2
pod_running elastic s-worker-0
pod_running elastic s-worker-1
started() { [ "$(members s-worker-0)" = 0,1 ] && [ "$(members s-worker-1)" = 0,1 ]; }
want="shrank from 3 to 2 workers (members 0,1): pod s-worker-2 unschedulable: 0/1 nodes are \
available: 1 Insufficient cpu."
if wait_until 30 started && [ "$(condition elastic s Resized message)" = "$want" ] &&
  is elastic tj/s .status.members 0,1; then
  tap_ok "an attempt with worker 2 unschedulable starts at 2: workers 0 and 1 patched to 0,1, \
Resized says why"
else tap_fail "an attempt with worker 2 unschedulable starts at 2" \
  "$(members s-worker-0) $(members s-worker-1): $(condition elastic s Resized message)"; fi
attempt=$(jp elastic tj/s .status.attempt)
if [ "${attempt:-0}" = 0 ] && attempt_pods elastic s 0 3 && [ "$(members s-worker-2)" = 0,1,2 ] &&
  wait_until 10 is elastic tj/s .status.currentWorkers 2; then
  tap_ok "attempt 0, worker 2 still there naming 0,1,2, currentWorkers 2"
else tap_fail "attempt 0, worker 2 still there naming 0,1,2, currentWorkers 2" \
  "attempt '$attempt', worker 2 '$(members s-worker-2)', $(k -n elastic get pods 2>&1)"; fi
pod_running elastic s-worker-2
want="grew from 2 to 3 workers (members 0,1,2): pod s-worker-2 runs"
sgrown() { [ "$(members s-worker-0)" = 0,1,2 ] && [ "$(members s-worker-1)" = 0,1,2 ]; }
if wait_until 30 sgrown && [ "$(condition elastic s Resized message)" = "$want" ]; then
  tap_ok "worker 2 placed and running: the others patched to 0,1,2, Resized/Grew"
else tap_fail "worker 2 placed and running: the others patched to 0,1,2" \
  "$(members s-worker-0) $(members s-worker-1): $(condition elastic s Resized message)"; fi

# The chief's pod lost while its room is taken: worker 0 (the chief of a job without a
# chief task) deleted, its replacement unschedulable. Workers 1 and 2 go on as members
# 1,2 (Resized/Shrank naming the pod), the replacement stays Pending with its chief
# label; worker 2's exit decides nothing, worker 1's, the lowest member's, completes
# the job with its termination message as status.result.
job elastic c 3 "  elastic: {minWorkers: 2}
  training: {perWorkerBatchSize: 32}"
all_running elastic c 3
delete_replaced c-worker-0 "chief (worker 0)"
unschedulable c-worker-0
cshrunk() { [ "$(members c-worker-1)" = 1,2 ] && [ "$(members c-worker-2)" = 1,2 ]; }
want="shrank from 3 to 2 workers (members 1,2): pod c-worker-0 unschedulable: 0/1 nodes are \
available: 1 Insufficient cpu."
if wait_until 30 cshrunk && [ "$(condition elastic c Resized message)" = "$want" ] &&
  is elastic tj/c .status.members 1,2; then
  tap_ok "chief's replacement unschedulable: workers 1 and 2 patched to 1,2, Resized says why"
else tap_fail "chief's replacement unschedulable: workers 1 and 2 patched to 1,2" \
  "$(members c-worker-1) $(members c-worker-2): $(condition elastic c Resized message)"; fi
label=$(jp elastic pod/c-worker-0 '.metadata.labels.kubetrain\.dev/chief')
phase=$(jp elastic pod/c-worker-0 .status.phase)
if [ "$label" = true ] && [ "$phase" = Pending ] && [ "$(members c-worker-0)" = 0,1,2 ]; then
  tap_ok "the chief's replacement stays Pending, naming 0,1,2, labelled chief"
else tap_fail "the chief's replacement stays Pending" "label '$label', phase '$phase', \
members '$(members c-worker-0)'"; fi
pod_exit elastic c-worker-2 0 '{"step":300,"loss":0.5}'
sleep 2
if is elastic tj/c .status.phase Running && [ -z "$(jp elastic tj/c .status.result)" ]; then
  tap_ok "worker 2 completed first: the job still Running, no result"
else tap_fail "worker 2 completed first: the job still Running" \
  "$(k -n elastic get tj/c -o 'jsonpath={.status}')"; fi
pod_exit elastic c-worker-1 0 '{"step":300,"loss":0.25,"weights_sha256":"cd34"}'
want="the chief (worker 1, the lowest member while worker 0 is left out) completed"
if wait_until 30 is elastic tj/c .status.phase Succeeded &&
  [ "$(condition elastic c Succeeded message)" = "$want" ] &&
  is elastic tj/c .status.result.weightsSha256 cd34 && is elastic tj/c .status.result.loss 0.25
then tap_ok "worker 1, the lowest member, completes the job with its result"
else tap_fail "worker 1, the lowest member, completes the job with its result" \
  "$(k -n elastic get tj/c -o 'jsonpath={.status}')"; fi

if it_stop "$OP"; then tap_ok "operator exits 0 on SIGTERM (no sanitizer report)"
else tap_fail "operator exits 0 on SIGTERM" "$(tail -n 20 "$LOG")"; fi
tap_done
