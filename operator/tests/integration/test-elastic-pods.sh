#!/usr/bin/env bash
# An elastic job's pods (issue 46, docs/design.md "Elastic jobs") against a real
# kube-apiserver: the apiserver takes them with the kubetrain.dev/members annotation and
# the downwardAPI volume that projects it, KUBETRAIN_MEMBERS_FILE names the file, and
# --global-batch is the one status.globalBatch recorded at the job's creation, also after
# kubectl scale has restarted the group at another size.
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

# A scale today restarts the group at the new size (the resize in place is reconcile's
# coming work): the new pods keep the global batch of the job's creation.
k -n elastic scale tj/e --replicas 2 >/dev/null
if wait_until 30 attempt_pods elastic e 1 2; then
  tap_ok "kubectl scale --replicas 2: 2 pods of attempt 1"
else tap_fail "kubectl scale --replicas 2: 2 pods of attempt 1" "$(k -n elastic get pods 2>&1)"; fi
out=$(check_pods 2)
if [ -z "$out" ]; then tap_ok "after the scale: members 0,1, --global-batch still 96"
else tap_fail "after the scale: members 0,1, --global-batch still 96" "$out"; fi
if is elastic tj/e .status.globalBatch 96; then tap_ok "status.globalBatch stays 96"
else tap_fail "status.globalBatch stays 96" "got '$(jp elastic tj/e .status.globalBatch)'"; fi

if it_stop "$OP"; then tap_ok "operator exits 0 on SIGTERM (no sanitizer report)"
else tap_fail "operator exits 0 on SIGTERM" "$(tail -n 20 "$LOG")"; fi
tap_done
