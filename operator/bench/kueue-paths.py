#!/usr/bin/env python3
"""How long Kueue's ways of admitting a group of pods take, without the operator.

Run by operator/bench/kueue-paths.sh on the full local cluster with Kueue; not on its own.
Each round creates, in turn (each round starting at the next), a group of two pods
(100m CPU, 64Mi, `sleep`) three ways and times, from the first create, until both pods are
bound to the node (a pod watch opened before the creates):

  plain     no Kueue labels: the scheduler binds them at once; the baseline.
  group     Kueue's plain pod group, as the operator labels its pods (docs/kueue.md):
            Kueue makes the Workload once both pods exist, admits it, lifts the gates.
  prebuilt  the alternative docs/kueue.md weighs: the Workload made by the client itself,
            at the same time as the pods (label kueue.x-k8s.io/prebuilt-workload-name), so
            that admission need not wait for the pods. This needs two of Kueue's internal
            markers, which its own StatefulSet and LeaderWorkerSet integrations set: the
            pods' annotation kueue.x-k8s.io/role-hash naming the Workload's pod set, and
            the Workload's annotation kueue.x-k8s.io/is-group-workload, without which Kueue
            never lifts the gates of an admitted Workload's pods.

Also records the API server's admission-webhook latency per Kueue webhook over the runs
(apiserver_admission_webhook_admission_duration_seconds). Writes JSON to stdout.

usage: kueue-paths.py NAMESPACE LOCALQUEUE IMAGE RUNS
"""
import base64
import http.client
import json
import os
import re
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time

NS, QUEUE, IMAGE, RUNS = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
MODES = ("plain", "group", "prebuilt")
KUBECTL = os.path.join(os.environ["KT_K8S_BIN"], "kubectl")

cfg = json.loads(subprocess.check_output([KUBECTL, "config", "view", "--raw", "--minify", "-o", "json"]))
user, cluster = cfg["users"][0]["user"], cfg["clusters"][0]["cluster"]
tls = tempfile.mkdtemp(prefix="kueue-paths-")
for key, name in (("client-certificate-data", "cert.pem"), ("client-key-data", "key.pem"),
                  ("certificate-authority-data", "ca.pem")):
    with open(os.path.join(tls, name), "wb") as f:
        f.write(base64.b64decode(user.get(key) or cluster[key]))
ctx = ssl.create_default_context(cafile=os.path.join(tls, "ca.pem"))
ctx.load_cert_chain(os.path.join(tls, "cert.pem"), os.path.join(tls, "key.pem"))
HOST = cluster["server"].split("//", 1)[1]


def connect():
    return http.client.HTTPSConnection(HOST, context=ctx, timeout=60)


def call(conn, method, path, body=None):
    conn.request(method, path, body=None if body is None else json.dumps(body),
                 headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    data = resp.read()
    if resp.status >= 300 and not (method == "DELETE" and resp.status == 404):
        sys.exit(f"kueue-paths: {method} {path}: HTTP {resp.status}: {data[:300]!r}")
    return json.loads(data) if data else None


POD_SPEC = {
    "containers": [{"name": "c", "image": IMAGE, "command": ["/bin/sh", "-c", "sleep 600"],
                    "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}],
    "terminationGracePeriodSeconds": 0,
    "restartPolicy": "Never",
}


def pod(name, group, mode):
    meta = {"name": name, "labels": {"kueue-paths": group}}
    if mode != "plain":
        meta["labels"].update({"kueue.x-k8s.io/queue-name": QUEUE,
                               "kueue.x-k8s.io/pod-group-name": group})
        meta["annotations"] = {"kueue.x-k8s.io/pod-group-total-count": "2",
                               "kueue.x-k8s.io/retriable-in-group": "false"}
    if mode == "prebuilt":
        meta["labels"]["kueue.x-k8s.io/prebuilt-workload-name"] = group
        meta["annotations"]["kueue.x-k8s.io/role-hash"] = "worker"
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": POD_SPEC}


def workload(group):
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
            "metadata": {"name": group, "annotations": {"kueue.x-k8s.io/is-group-workload": "true"}},
            "spec": {"queueName": QUEUE,
                     "podSets": [{"name": "worker", "count": 2, "template": {"spec": POD_SPEC}}]}}


def watch_bound(group, bound, opened):
    """Until both pods of group are bound: record when each got its node."""
    deadline = time.monotonic() + 60
    while len(bound) < 2 and time.monotonic() < deadline:
        conn = connect()
        conn.request("GET", f"/api/v1/namespaces/{NS}/pods?watch=1&timeoutSeconds=30"
                            f"&labelSelector=kueue-paths%3D{group}")
        resp = conn.getresponse()
        opened.set()
        while len(bound) < 2:
            line = resp.readline()
            if not line:
                break
            event = json.loads(line)
            if event["type"] == "ERROR":  # e.g. a resource version the cache has not seen: watch again
                time.sleep(0.02)
                break
            obj = event["object"]
            name = obj["metadata"]["name"]
            if obj["spec"].get("nodeName") and name not in bound:
                bound[name] = time.monotonic()
        conn.close()


conns = [connect() for _ in range(3)]


def one(mode, i):
    group = f"kp-{mode}-{i}"
    bound, opened = {}, threading.Event()
    watcher = threading.Thread(target=watch_bound, args=(group, bound, opened))
    watcher.start()
    opened.wait(30)
    time.sleep(0.2)
    t0 = time.monotonic()
    creates = [threading.Thread(target=call, args=(conns[j], "POST", f"/api/v1/namespaces/{NS}/pods",
                                                   pod(f"{group}-{j}", group, mode))) for j in range(2)]
    if mode == "prebuilt":
        creates.append(threading.Thread(target=call, args=(
            conns[2], "POST", f"/apis/kueue.x-k8s.io/v1beta2/namespaces/{NS}/workloads", workload(group))))
    for t in creates:
        t.start()
    for t in creates:
        t.join()
    created = time.monotonic() - t0
    watcher.join()
    for j in range(2):
        call(conns[0], "DELETE", f"/api/v1/namespaces/{NS}/pods/{group}-{j}", {"gracePeriodSeconds": 0})
    if len(bound) < 2:
        sys.exit(f"kueue-paths: {mode} run {i}: {len(bound)} of 2 pods bound within 60 s")
    return {"mode": mode, "run": i, "created_s": round(created, 4),
            "bound_s": round(max(bound.values()) - t0, 4)}


def webhook_metrics():
    text = subprocess.check_output([KUBECTL, "get", "--raw", "/metrics"], text=True)
    out = {}
    for m in re.finditer(r'^apiserver_admission_webhook_admission_duration_seconds_(sum|count)\{([^}]*)\} (\S+)$',
                         text, re.M):
        labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2)))
        key = f'{labels["name"]} {labels["operation"]}'
        out.setdefault(key, {"sum": 0.0, "count": 0.0})[m.group(1)] += float(m.group(3))
    return out


before = webhook_metrics()
runs = []
for i in range(RUNS + 1):  # round 0 is a warm-up, not counted
    for mode in MODES[i % 3:] + MODES[:i % 3]:
        r = one(mode, i)
        if i > 0:
            runs.append(r)
        print(f"{r['mode']:8} {i:3} created {r['created_s']:.3f} s  bound {r['bound_s']:.3f} s",
              file=sys.stderr, flush=True)
        time.sleep(2.5)  # the node and Kueue tear the group down
after = webhook_metrics()

median = {m: statistics.median(r["bound_s"] for r in runs if r["mode"] == m) for m in MODES}
paired = {}
for m in ("group", "prebuilt"):
    base = {r["run"]: r["bound_s"] for r in runs if r["mode"] == "plain"}
    paired[m] = statistics.median(r["bound_s"] - base[r["run"]] for r in runs if r["mode"] == m)
webhooks = {}
for key, a in after.items():
    b = before.get(key, {"sum": 0.0, "count": 0.0})
    n = a["count"] - b["count"]
    if n > 0:
        webhooks[key] = {"calls": int(n), "mean_ms": round(1000 * (a["sum"] - b["sum"]) / n, 2)}
json.dump({"runs": runs,
           "summary": {"runs_per_mode": RUNS,
                       "bound_median_s": {m: round(v, 4) for m, v in median.items()},
                       "created_median_s": {m: round(statistics.median(r["created_s"] for r in runs
                                                                       if r["mode"] == m), 4) for m in MODES},
                       "paired_over_plain_median_s": {m: round(v, 4) for m, v in paired.items()},
                       "prebuilt_minus_group_s": round(median["prebuilt"] - median["group"], 4)},
           "webhooks": webhooks}, sys.stdout, indent=1)
print()
