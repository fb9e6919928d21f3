"""members_latency.py RUN OUT COMMIT: the driver of operator/bench/members-latency.sh.

Makes BENCH_PODS pods of the cluster's pause image, each with a downwardAPI volume that
projects the annotation kubetrain.dev/members as the file `members` (as an elastic job's
pods get it), waits for them to run, then for BENCH_ROUNDS rounds patches every pod's
annotation to a new value, back to back over one connection to the API server, and polls
each pod's file in the kubelet's volume directory on this host every 5 ms until it holds
that value. Writes the JSON to OUT.
"""
import base64
import http.client
import json
import os
import platform
import ssl
import statistics
import subprocess
import sys
import tempfile
import time

RUN, OUT, COMMIT = sys.argv[1:4]
PODS = int(os.environ.get("BENCH_PODS", "4"))
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "10"))
TIMEOUT_S = float(os.environ.get("BENCH_TIMEOUT", "120"))
NS = "kt-bench"
KUBECTL = os.path.join(os.environ["KT_K8S_BIN"], "kubectl")
ANNOTATION = "kubetrain.dev/members"


def kubectl(*args, stdin=None):
    r = subprocess.run([KUBECTL, "--request-timeout", "60s", *args], input=stdin,
                       capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"bench-members-latency: kubectl {' '.join(args)}: {r.stderr.strip()}")
    return r.stdout


def api_connection():
    """One TLS connection to the API server with the admin kubeconfig's credentials."""
    cfg = json.loads(kubectl("config", "view", "--raw", "-o", "json"))
    cluster = cfg["clusters"][0]["cluster"]
    user = cfg["users"][0]["user"]
    tmp = tempfile.mkdtemp(prefix="kt-members-latency-")
    paths = {}
    for key, field in (("ca", "certificate-authority-data"),
                       ("cert", "client-certificate-data"), ("key", "client-key-data")):
        src = cluster if key == "ca" else user
        paths[key] = os.path.join(tmp, key)
        with open(paths[key], "wb") as f:
            f.write(base64.b64decode(src[field]))
    ctx = ssl.create_default_context(cafile=paths["ca"])
    ctx.load_cert_chain(paths["cert"], paths["key"])
    host = cluster["server"].split("://", 1)[1]
    return http.client.HTTPSConnection(host, context=ctx, timeout=60)


def patch_annotation(conn, pod, value):
    body = json.dumps({"metadata": {"annotations": {ANNOTATION: value}}})
    conn.request("PATCH", f"/api/v1/namespaces/{NS}/pods/{pod}", body=body,
                 headers={"Content-Type": "application/merge-patch+json"})
    r = conn.getresponse()
    data = r.read()
    if r.status != 200:
        sys.exit(f"bench-members-latency: PATCH {pod}: {r.status} {data[:300]!r}")


def pod_manifest(name):
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": NS, "annotations": {ANNOTATION: "0"}},
        "spec": {
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "pause", "image": "kubetrain/pause:3.10",
                            "imagePullPolicy": "Never",
                            "volumeMounts": [{"name": "members", "mountPath": "/etc/members"}]}],
            "volumes": [{"name": "members", "downwardAPI": {"items": [{
                "path": "members",
                "fieldRef": {"fieldPath": f"metadata.annotations['{ANNOTATION}']"}}]}}],
        },
    }


def read(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def quantiles(xs):
    xs = sorted(xs)
    return {"min": round(xs[0], 1), "median": round(statistics.median(xs), 1),
            "p90": round(xs[min(len(xs) - 1, int(0.9 * len(xs)))], 1),
            "max": round(xs[-1], 1)}


def main():
    kubectl("create", "namespace", NS)
    names = [f"members-{i}" for i in range(PODS)]
    kubectl("apply", "-f", "-",
            stdin=json.dumps({"apiVersion": "v1", "kind": "List",
                              "items": [pod_manifest(n) for n in names]}))
    kubectl("-n", NS, "wait", "--for=condition=Ready", "--timeout=180s",
            *[f"pod/{n}" for n in names])
    files = {}
    for n in names:
        uid = kubectl("-n", NS, "get", "pod", n, "-o", "jsonpath={.metadata.uid}")
        files[n] = os.path.join(RUN, "full", "kubelet", "pods", uid, "volumes",
                                "kubernetes.io~downward-api", "members", "members")
        if read(files[n]) != "0":
            sys.exit(f"bench-members-latency: {files[n]} does not hold the first value")
    conn = api_connection()
    rounds = []
    for r in range(ROUNDS):
        value = ",".join(str(i) for i in range(r % 3 + 1)) + f",{r + 10}"
        acked = {}
        for n in names:
            patch_annotation(conn, n, value)
            acked[n] = time.monotonic()
        seen = {}
        deadline = time.monotonic() + TIMEOUT_S
        while len(seen) < len(names) and time.monotonic() < deadline:
            for n in names:
                if n not in seen and read(files[n]) == value:
                    seen[n] = time.monotonic()
            time.sleep(0.005)
        if len(seen) < len(names):
            sys.exit(f"bench-members-latency: round {r}: no new value within {TIMEOUT_S} s "
                     f"in {sorted(set(names) - set(seen))}")
        lat = {n: (seen[n] - acked[n]) * 1000 for n in names}
        rounds.append({"round": r, "latency_ms": {n: round(v, 1) for n, v in lat.items()},
                       "spread_ms": round((max(seen.values()) - min(seen.values())) * 1000, 1)})
        print(json.dumps(rounds[-1]), flush=True)
        time.sleep(1)
    version = json.loads(kubectl("version", "-o", "json"))["serverVersion"]["gitVersion"]
    cpu = next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo")
                if ln.startswith("model name")), platform.processor())
    doc = {
        "benchmark": "elastic jobs' members: a pod annotation patched -> the pod's "
                     "downwardAPI file holding the new value, full local cluster "
                     "(e2e/cluster/up.sh full, a real kubelet)",
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "commit": COMMIT,
        "kubernetes": version,
        "machine": {"arch": platform.machine(), "nproc": os.cpu_count(), "cpu": cpu,
                    "loadavg_at_end": [round(x, 2) for x in os.getloadavg()]},
        "pods": PODS, "rounds": ROUNDS,
        "definitions": {
            "latency_ms": "from the API server's answer to a pod's PATCH to the first 5 ms "
                          "poll that finds the new value in that pod's file (on the host, "
                          "in the kubelet's volume directory)",
            "spread_ms": "in one round (every pod patched back to back), the first pod's "
                         "file changed to the last pod's",
        },
        "latency_ms": quantiles([v for rd in rounds for v in rd["latency_ms"].values()]),
        "spread_ms": quantiles([rd["spread_ms"] for rd in rounds]),
        "rounds_detail": rounds,
    }
    if os.environ.get("BENCH_NOTE"):
        doc["note"] = os.environ["BENCH_NOTE"]
    with open(OUT, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    print(json.dumps({"latency_ms": doc["latency_ms"], "spread_ms": doc["spread_ms"]}))


main()
