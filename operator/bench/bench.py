#!/usr/bin/env python3
"""One benchmark run of an operator against the api-level cluster: JOBS jobs x WORKERS
workers created at once in a fresh namespace, then every pod marked Running, one by one.

Measured (all on this process's clock, watch receive times):
  pods_s           first job created -> the last of the JOBS*WORKERS pods ADDED on a watch
  requests         the operator's API requests (its own /metrics, watches excluded) from
                   just before the first job to the moment the last pod was seen
  bound_s          the client rate limiter's lower bound for those requests:
                   max(0, requests - burst) / qps
  event_to_action  per pod (JOBS*WORKERS samples), from the response to the status
                   write that makes worker k of a job Running (phase Running, Ready) to the
                   receipt of the watch event carrying the operator's resulting job status
                   (TrainingJob: status.workers.ready >= k+1; TFJob:
                   status.replicaStatuses.Worker.active >= k+1). It includes the
                   apiserver's two watch deliveries (pod -> operator, job -> this client).
                   Pods are driven one at a time, PACE seconds apart, so that the client
                   rate limit is not what is measured
  cpu_s, vmhwm_kib the operator process's user+system CPU time and peak RSS (VmHWM from
                   /proc) at the end of the run; vmrss_ready_kib its RSS once ready, before
                   any job
  queue_event_phase, reconcile_event_phase  during the event phase, the operator's own
                   work-queue wait and reconcile duration histograms (mean, and the upper
                   bound of the bucket holding the 99th percentile): its share of the
                   event-to-action delay
  api_latency_mean_ms  the mean duration of the operator's API requests during the
                   creation wave (its own request-duration histogram)
Prints one JSON object.
"""
import argparse
import collections
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "integration"))
import kube  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--kind", choices=["trainingjob", "tfjob"], required=True)
ap.add_argument("--kubectl", required=True)
ap.add_argument("--kubeconfig", required=True)
ap.add_argument("--ns", required=True)
ap.add_argument("--qps", type=float, required=True)
ap.add_argument("--burst", type=int, required=True)
ap.add_argument("--metrics-port", type=int, required=True)
ap.add_argument("--log", required=True)
ap.add_argument("--ready-regex", required=True, help="operator log line meaning it is ready")
ap.add_argument("--metric", required=True, help="regex of the request-counter sample lines")
ap.add_argument("--latency-metric", required=True,
                help="name of the client's request-duration histogram (its _sum and _count)")
ap.add_argument("--queue-metric", default="",
                help="work-queue wait histogram (name[,label substring])")
ap.add_argument("--reconcile-metric", default="",
                help="reconcile duration histogram (name[,label substring])")
ap.add_argument("--jobs", type=int, default=100)
ap.add_argument("--workers", type=int, default=4)
ap.add_argument("--pace", type=float, default=0.1)
ap.add_argument("cmd", nargs=argparse.REMAINDER)
a = ap.parse_args()
cmd = a.cmd[1:] if a.cmd and a.cmd[0] == "--" else a.cmd

cfg = kube.load_config(a.kubectl, a.kubeconfig)
api = kube.Kube(cfg)
NS, J, W = a.ns, a.jobs, a.workers
if a.kind == "trainingjob":
    group, plural = kube.GROUP, "trainingjobs"
else:
    group, plural = "kubeflow.org/v1", "tfjobs"


def job_object(name):
    if a.kind == "trainingjob":
        return kube.training_job(name, W, restartPolicy="OnFailure")
    return {"apiVersion": group, "kind": "TFJob", "metadata": {"name": name},
            "spec": {"runPolicy": {"cleanPodPolicy": "None"},
                     "tfReplicaSpecs": {"Worker": {
                         "replicas": W, "restartPolicy": "OnFailure",
                         "template": {"spec": {"containers": [{
                             "name": "tensorflow", "image": "kubetrain/trainer:0.1.0"}]}}}}}}


def level(obj):
    """How many running workers the operator's job status reflects."""
    st = obj.get("status") or {}
    if a.kind == "trainingjob":
        return (st.get("workers") or {}).get("ready", 0)
    return ((st.get("replicaStatuses") or {}).get("Worker") or {}).get("active", 0)


metric_re = re.compile(a.metric)


def scrape():
    body = urllib.request.urlopen(f"http://127.0.0.1:{a.metrics_port}/metrics", timeout=10).read()
    return [ln for ln in body.decode().splitlines() if not ln.startswith("#")]


def requests_so_far():
    return sum(float(ln.rsplit(" ", 1)[1]) for ln in scrape() if metric_re.search(ln))


def latency_sum_count():
    """Sum and count of the request-duration histogram, over all its label sets."""
    s = c = 0.0
    for ln in scrape():
        name = ln.split("{", 1)[0].split(" ", 1)[0]
        if name == a.latency_metric + "_sum":
            s += float(ln.rsplit(" ", 1)[1])
        elif name == a.latency_metric + "_count":
            c += float(ln.rsplit(" ", 1)[1])
    return s, c


def hist(spec):
    """Cumulative bucket counts {le: n}, sum and count of a histogram named by spec
    ("name" or "name,label-substring"), summed over its matching label sets."""
    name, _, sub = spec.partition(",")
    b, tot = collections.Counter(), [0.0, 0.0]
    for ln in scrape():
        head, val = ln.rsplit(" ", 1)
        base = head.split("{", 1)[0]
        if sub and sub not in head:
            continue
        if base == name + "_bucket":
            le = re.search(r'le="([^"]+)"', head).group(1)
            b[float("inf") if le == "+Inf" else float(le)] += float(val)
        elif base == name + "_sum":
            tot[0] += float(val)
        elif base == name + "_count":
            tot[1] += float(val)
    return b, tot[0], tot[1]


def hist_delta(before, after):
    """Mean and the p99 bucket bound (ms) of what was observed between two snapshots."""
    (b0, s0, c0), (b1, s1, c1) = before, after
    n = c1 - c0
    if n <= 0:
        return None
    p99 = None
    for le in sorted(b1):
        if b1[le] - b0.get(le, 0) >= 0.99 * n:
            p99 = le
            break
    return {"n": int(n), "mean_ms": round(1000 * (s1 - s0) / n, 2),
            "p99_bucket_le_ms": None if p99 in (None, float("inf")) else round(1000 * p99, 1)}


def proc_stats(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    cpu = (int(fields[11]) + int(fields[12])) / tick
    hwm = None
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                hwm = int(line.split()[1])
    return cpu, hwm


subprocess.run([a.kubectl, "--kubeconfig", a.kubeconfig, "create", "namespace", NS],
               check=True, capture_output=True)

log = open(a.log, "ab")
op = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
result = {"run": NS, "kind": a.kind, "qps": a.qps, "burst": a.burst, "jobs": J, "workers": W,
          "loadavg_start": os.getloadavg()[0]}
try:
    # Ready: the log line, and the metrics endpoint answering.
    t_end = time.time() + 180
    ready = re.compile(a.ready_regex.encode())
    while time.time() < t_end:
        if op.poll() is not None:
            raise SystemExit(f"operator exited {op.returncode} during start; see {a.log}")
        with open(a.log, "rb") as f:
            if ready.search(f.read()):
                try:
                    requests_so_far()
                    break
                except OSError:
                    pass
        time.sleep(0.2)
    else:
        raise SystemExit(f"operator not ready after 180 s; see {a.log}")
    time.sleep(1)

    stop = threading.Event()
    lock = threading.Lock()
    pods_seen = set()
    pods_done = threading.Event()
    t_last_pod = [None]
    req_at_last_pod = [None]
    acted_at = {}

    def watch_pods():
        w = kube.Kube(cfg)
        for t, ev in kube.watch_resumed(w, kube.ns_path(NS, "pods"), stop.is_set):
            if ev["type"] != "ADDED":
                continue
            with lock:
                pods_seen.add(ev["object"]["metadata"]["name"])
                if len(pods_seen) == J * W and not pods_done.is_set():
                    t_last_pod[0] = t
                    req_at_last_pod[0] = requests_so_far()
                    pods_done.set()

    def watch_jobs():
        w = kube.Kube(cfg)
        for t, ev in kube.watch_resumed(w, kube.ns_path(NS, plural, group=group), stop.is_set):
            o = ev["object"]
            if ev["type"] in ("ADDED", "MODIFIED"):
                with lock:
                    for k in range(level(o)):
                        acted_at.setdefault((o["metadata"]["name"], k), t)

    threads = [threading.Thread(target=f, daemon=True) for f in (watch_pods, watch_jobs)]
    for t in threads:
        t.start()
    time.sleep(1)

    req0 = requests_so_far()
    lat0 = latency_sum_count()
    cpu0, _ = proc_stats(op.pid)
    with open(f"/proc/{op.pid}/status") as f:
        result["vmrss_ready_kib"] = next(int(ln.split()[1]) for ln in f if ln.startswith("VmRSS:"))
    names = [f"job-{i:03d}" for i in range(J)]
    t0 = time.time()
    for n in names:
        api.create(kube.ns_path(NS, plural, group=group), job_object(n))
    t_created = time.time()
    if not pods_done.wait(600):
        raise SystemExit(f"only {len(pods_seen)} pods after 600 s")
    result["create_jobs_s"] = round(t_created - t0, 3)
    result["pods_s"] = round(t_last_pod[0] - t0, 3)
    result["requests"] = int(req_at_last_pod[0] - req0)
    result["bound_s"] = round(max(0, result["requests"] - a.burst) / a.qps, 3)
    result["pods_over_bound"] = round(result["pods_s"] / result["bound_s"], 3) \
        if result["bound_s"] > 0 else None
    # Let the creation wave settle (status writes, events) before the event phase.
    prev, t_quiet = -1, time.time()
    while time.time() - t_quiet < 3 and time.time() - t0 < 900:
        cur = requests_so_far()
        if cur != prev:
            prev, t_quiet = cur, time.time()
        time.sleep(0.5)
    result["settle_requests"] = int(prev - req0)
    lat1 = latency_sum_count()
    if lat1[1] > lat0[1]:
        result["api_latency_mean_ms"] = round(1000 * (lat1[0] - lat0[0]) / (lat1[1] - lat0[1]), 2)
    cpu_create, _ = proc_stats(op.pid)
    result["cpu_create_s"] = round(cpu_create - cpu0, 3)

    # Event to action: worker k of every job starts running, k = 0..W-1, round robin
    # over the jobs so that one job's events are JOBS*PACE apart.
    h0 = {m: hist(getattr(a, m)) for m in ("queue_metric", "reconcile_metric") if getattr(a, m)}
    wrote = {}
    for k in range(W):
        for n in names:
            api.merge_patch(kube.ns_path(NS, "pods", f"{n}-worker-{k}", "status"),
                            kube.pod_running_status())
            wrote[(n, k)] = time.time()
            time.sleep(a.pace)
    t_end = time.time() + 60
    while time.time() < t_end and len(acted_at) < J * W:
        time.sleep(0.2)
    stop.set()
    with lock:
        delays = sorted((acted_at[e] - wrote[e]) * 1000 for e in wrote if e in acted_at)
    for m, before in h0.items():
        result[m.replace("_metric", "_event_phase")] = hist_delta(before, hist(getattr(a, m)))
    result["event_to_action_n"] = len(delays)
    result["event_to_action_missing"] = len(wrote) - len(delays)
    if delays:
        pct = lambda q: delays[min(len(delays) - 1, int(q * len(delays)))]  # noqa: E731
        result["event_to_action_ms"] = {"p50": round(pct(0.50), 1), "p90": round(pct(0.90), 1),
                                        "p99": round(pct(0.99), 1), "max": round(delays[-1], 1)}
    result["loadavg_end"] = os.getloadavg()[0]
    cpu, hwm = proc_stats(op.pid)
    result["cpu_s"] = round(cpu - cpu0, 3)
    result["cpu_total_s"] = round(cpu, 3)
    result["vmhwm_kib"] = hwm
    result["vmhwm_mib"] = round(hwm / 1024, 2)
finally:
    if op.poll() is None:
        op.send_signal(signal.SIGTERM)
        try:
            op.wait(timeout=30)
        except subprocess.TimeoutExpired:
            op.kill()
            op.wait()
print(json.dumps(result), flush=True)
