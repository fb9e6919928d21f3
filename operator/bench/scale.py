#!/usr/bin/env python3
"""One scale run of an operator against the api-level cluster with kwok's simulated nodes
(e2e/cluster/kwok-up.sh): JOBS jobs x WORKERS workers created at once in a fresh
namespace; kube-scheduler binds the pods and kwok reports them Running. Phases, each
measured on this process's clock (watch receive times):

  create     first job created -> last pod ADDED on a watch (pods_s); the operator's API
             requests until then (its own /metrics, watches excluded) and the client rate
             limiter's bound for them, max(0, requests - burst) / qps
  running    -> every pod Running (kwok) and every job's status saying all its workers
             are up (TrainingJob: status.workers.ready; TFJob:
             status.replicaStatuses.Worker.active)
  steady     STEADY seconds with nothing changing: status writes the apiserver answered
             (its apiserver_request_total, subresource status), the job watch's MODIFIED
             events (a write that changes nothing makes none) and the operator's requests
  events     with every pod present: SAMPLES jobs, PACE seconds apart, one worker each
             written back to Pending (not ready), then Running again; per write, the time
             from its response to the watch event carrying the job status that reflects
             it (one worker fewer, then all again)
  restart    the operator killed (SIGKILL); while it is down one worker of each of
             SAMPLES jobs goes Pending; the operator started again: time from its start
             until every one of those jobs' status reflects it (resync_s), until its
             requests stop (quiet_s), the requests it issued (by verb), and the pods
             created or deleted meanwhile (want 0)
CPU seconds and peak RSS (VmHWM) of each operator process. With --check, the run ends
after the restart phase with a verdict on correctness only (no duplicate pods, every
status current, nothing re-created); the exit status is 1 when one fails.
Prints one JSON object.
"""
import argparse
import collections
import concurrent.futures
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
ap.add_argument("--threads", type=int, help="the operator's reconcile threads (recorded only)")
ap.add_argument("--metrics-port", type=int, required=True)
ap.add_argument("--log", required=True)
ap.add_argument("--ready-regex", required=True, help="operator log line meaning it is ready")
ap.add_argument("--metric", required=True, help="regex of the request-counter sample lines")
ap.add_argument("--hist", action="append", default=[],
                help="KEY=NAME[,LABEL-SUBSTRING]: a histogram of the operator's whose mean is "
                     "reported per phase (api, reconcile, queue)")
ap.add_argument("--jobs", type=int, default=1000)
ap.add_argument("--workers", type=int, default=8)
ap.add_argument("--samples", type=int, default=200)
ap.add_argument("--pace", type=float, default=0.1)
ap.add_argument("--steady", type=float, default=60)
ap.add_argument("--timeout", type=float, default=900, help="per phase")
ap.add_argument("--check", action="store_true")
ap.add_argument("cmd", nargs=argparse.REMAINDER)
a = ap.parse_args()
cmd = a.cmd[1:] if a.cmd and a.cmd[0] == "--" else a.cmd

cfg = kube.load_config(a.kubectl, a.kubeconfig)
api = kube.Kube(cfg, timeout=120)
NS, J, W = a.ns, a.jobs, a.workers
S = min(a.samples, J)
if a.kind == "trainingjob":
    group, plural = kube.GROUP, "trainingjobs"
else:
    group, plural = "kubeflow.org/v1", "tfjobs"
names = [f"job-{i:04d}" for i in range(J)]


def log(msg):
    print(time.strftime("%H:%M:%S ") + msg, file=sys.stderr, flush=True)


def job_object(name):
    if a.kind == "trainingjob":
        return {"apiVersion": group, "kind": "TrainingJob", "metadata": {"name": name},
                "spec": {"workers": W, "restartPolicy": "OnFailure", "gangScheduling": False}}
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


def pod_pending():
    return {"status": {"phase": "Pending",
                       "conditions": [{"type": "Ready", "status": "False"},
                                      {"type": "ContainersReady", "status": "False"}]}}


metric_re = re.compile(a.metric)


def scrape(url):
    body = urllib.request.urlopen(url, timeout=30).read()
    return [ln for ln in body.decode().splitlines() if ln and not ln.startswith("#")]


def op_requests():
    """The operator's API requests so far, by verb or method label."""
    by = collections.Counter()
    for ln in scrape(f"http://127.0.0.1:{a.metrics_port}/metrics"):
        if metric_re.search(ln):
            m = re.search(r'(?:verb|method)="([A-Z]+)"', ln)
            by[m.group(1) if m else "?"] += float(ln.rsplit(" ", 1)[1])
    return by


HISTS = dict(h.split("=", 1) for h in a.hist)


def hist_totals():
    """{key: (sum, count)} of the --hist histograms, over their matching label sets."""
    lines = scrape(f"http://127.0.0.1:{a.metrics_port}/metrics")
    out = {}
    for key, spec in HISTS.items():
        name, _, sub = spec.partition(",")
        tot = [0.0, 0.0]
        for ln in lines:
            head, val = ln.rsplit(" ", 1)
            if sub and sub not in head:
                continue
            base = head.split("{", 1)[0]
            if base == name + "_sum":
                tot[0] += float(val)
            elif base == name + "_count":
                tot[1] += float(val)
        out[key] = tot
    return out


def hist_means(h0, h1):
    """Mean (ms) and count of what each histogram observed between two snapshots."""
    return {k: {"n": int(h1[k][1] - h0.get(k, (0, 0))[1]),
                "mean_ms": round(1000 * (h1[k][0] - h0.get(k, (0, 0))[0]) /
                                 (h1[k][1] - h0.get(k, (0, 0))[1]), 2)}
            for k in h1 if h1[k][1] - h0.get(k, (0, 0))[1] > 0}


def apiserver_counts():
    """apiserver_request_total by (resource, subresource, verb), from the apiserver."""
    raw = subprocess.run([a.kubectl, "--kubeconfig", a.kubeconfig, "get", "--raw", "/metrics"],
                         check=True, capture_output=True, text=True).stdout
    c = collections.Counter()
    for ln in raw.splitlines():
        if not ln.startswith("apiserver_request_total{"):
            continue
        lab = dict(re.findall(r'(\w+)="([^"]*)"', ln.split("}", 1)[0]))
        c[(lab.get("resource", ""), lab.get("subresource", ""), lab.get("verb", ""))] += \
            float(ln.rsplit(" ", 1)[1])
    return c


def status_writes(c0, c1):
    return int(sum(v - c0.get(k, 0) for k, v in c1.items()
                   if k[0] == plural and k[1] == "status" and k[2] in ("PUT", "UPDATE", "PATCH", "APPLY")))


def proc_stats(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    hwm = rss = None
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                hwm = int(line.split()[1])
            elif line.startswith("VmRSS:"):
                rss = int(line.split()[1])
    return cpu, hwm, rss


def start_operator(logf):
    off = os.path.getsize(a.log) if os.path.exists(a.log) else 0
    t = time.time()
    p = subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT)
    ready = re.compile(a.ready_regex.encode())
    t_end = time.time() + 300
    while time.time() < t_end:
        if p.poll() is not None:
            raise SystemExit(f"operator exited {p.returncode} during start; see {a.log}")
        with open(a.log, "rb") as f:
            f.seek(off)
            if ready.search(f.read()):
                try:
                    op_requests()
                    return p, t
                except OSError:
                    pass
        time.sleep(0.1)
    raise SystemExit(f"operator not ready after 300 s; see {a.log}")


def wait_for(pred, what, timeout=None):
    t_end = time.time() + (timeout or a.timeout)
    while time.time() < t_end:
        if pred():
            return True
        time.sleep(0.1)
    raise SystemExit(f"timed out waiting for {what}")


def wait_quiet(quiet=3.0, limit=None):
    """Until the operator's request count stays the same for `quiet` seconds; returns
    the time of its last change."""
    prev, t_change = None, time.time()
    t_end = time.time() + (limit or a.timeout)
    while time.time() < t_end:
        cur = sum(op_requests().values())
        if cur != prev:
            prev, t_change = cur, time.time()
        elif time.time() - t_change >= quiet:
            break
        time.sleep(0.25)
    return t_change


def pct(xs):
    xs = sorted(xs)
    if not xs:
        return None
    q = lambda p: xs[min(len(xs) - 1, int(p * len(xs)))]  # noqa: E731
    return {"n": len(xs), "p50": round(q(0.50), 1), "p90": round(q(0.90), 1),
            "p99": round(q(0.99), 1), "max": round(xs[-1], 1)}


subprocess.run([a.kubectl, "--kubeconfig", a.kubeconfig, "create", "namespace", NS],
               check=True, capture_output=True)
logf = open(a.log, "ab")
result = {"run": NS, "kind": a.kind, "qps": a.qps, "burst": a.burst, "threads": a.threads,
          "jobs": J, "workers": W, "pods": J * W, "loadavg_start": os.getloadavg()[0]}
op = op2 = None
lock = threading.Lock()
stop = threading.Event()
pods = {}                        # name -> (uid, phase)
pod_adds = collections.Counter()  # name -> ADDED events
pod_deletes = [0]
pod_added_at = [None]
jobs = {}                         # name -> level
job_modified = [0]
# (job, target level) -> time a watch event first showed it, for marks registered below
waiting = {}
seen_at = {}
try:
    op, _ = start_operator(logf)
    time.sleep(1)

    def watch_pods():
        w = kube.Kube(cfg)
        for t, ev in kube.watch_resumed(w, kube.ns_path(NS, "pods"), stop.is_set):
            o = ev["object"]
            n = o["metadata"]["name"]
            with lock:
                if ev["type"] == "DELETED":
                    pod_deletes[0] += 1
                    pods.pop(n, None)
                    continue
                if ev["type"] == "ADDED":
                    pod_adds[n] += 1
                    if len(pod_adds) == J * W and pod_added_at[0] is None:
                        pod_added_at[0] = t
                pods[n] = (o["metadata"]["uid"], (o.get("status") or {}).get("phase"))

    def watch_jobs():
        w = kube.Kube(cfg)
        for t, ev in kube.watch_resumed(w, kube.ns_path(NS, plural, group=group), stop.is_set):
            o = ev["object"]
            n = o["metadata"]["name"]
            if ev["type"] not in ("ADDED", "MODIFIED"):
                continue
            lv = level(o)
            with lock:
                if ev["type"] == "MODIFIED":
                    job_modified[0] += 1
                jobs[n] = lv
                key = (n, lv)
                if key in waiting and key not in seen_at and t >= waiting[key]:
                    seen_at[key] = t

    for f in (watch_pods, watch_jobs):
        threading.Thread(target=f, daemon=True).start()
    time.sleep(1)

    # --- create -------------------------------------------------------------------
    log(f"{NS}: creating {J} jobs x {W} workers")
    req0 = op_requests()
    h_c0 = hist_totals()
    cpu0, _, rss_ready = proc_stats(op.pid)
    result["vmrss_ready_kib"] = rss_ready
    t0 = time.time()

    def create(chunk):
        c = kube.Kube(cfg, timeout=120)
        for n in chunk:
            c.create(kube.ns_path(NS, plural, group=group), job_object(n))
    with concurrent.futures.ThreadPoolExecutor(4) as ex:
        list(ex.map(create, [names[i::4] for i in range(4)]))
    result["create_jobs_s"] = round(time.time() - t0, 3)
    wait_for(lambda: pod_added_at[0] is not None, f"{J * W} pods")
    req1 = op_requests()
    nreq = int(sum(req1.values()) - sum(req0.values()))
    result["pods_s"] = round(pod_added_at[0] - t0, 3)
    result["requests"] = nreq
    result["bound_s"] = round(max(0, nreq - a.burst) / a.qps, 3)
    result["pods_over_bound"] = round(result["pods_s"] / result["bound_s"], 3) \
        if result["bound_s"] > 0 else None
    log(f"{NS}: {J * W} pods in {result['pods_s']} s ({nreq} requests)")

    # --- running ------------------------------------------------------------------
    def all_running():
        with lock:
            return (sum(1 for _, ph in pods.values() if ph == "Running") == J * W and
                    len(jobs) == J and all(v == W for v in jobs.values()))
    wait_for(all_running, "every pod Running and every job status current")
    result["running_s"] = round(time.time() - t0, 3)
    log(f"{NS}: all Running and reflected at {result['running_s']} s")
    wait_quiet()
    result["create_phase"] = hist_means(h_c0, hist_totals())
    cpu_c, _, _ = proc_stats(op.pid)
    result["cpu_create_s"] = round(cpu_c - cpu0, 3)

    # --- steady -------------------------------------------------------------------
    if not a.check and a.steady > 0:
        c0, r0, m0 = apiserver_counts(), op_requests(), job_modified[0]
        cs0, _, _ = proc_stats(op.pid)
        time.sleep(a.steady)
        c1, r1, m1 = apiserver_counts(), op_requests(), job_modified[0]
        cs1, _, _ = proc_stats(op.pid)
        sw = status_writes(c0, c1)
        per = J * a.steady / 60
        result["steady"] = {
            "seconds": a.steady, "status_writes": sw,
            "status_writes_per_job_per_min": round(sw / per, 4),
            "job_modified_events": m1 - m0,
            "operator_requests": int(sum(r1.values()) - sum(r0.values())),
            "cpu_s": round(cs1 - cs0, 3)}
        log(f"{NS}: steady {result['steady']}")

    # --- events -------------------------------------------------------------------
    c_ev0 = apiserver_counts()
    h_e0 = hist_totals()
    m_ev0 = job_modified[0]
    delays = []
    for direction, patch, target in (("down", pod_pending, W - 1),
                                     ("up", kube.pod_running_status, W)):
        marks = {}
        for i in range(S):
            n = names[i]
            t_w0 = time.time()
            with lock:
                waiting[(n, target)] = t_w0
                seen_at.pop((n, target), None)
            api.merge_patch(kube.ns_path(NS, "pods", f"{n}-worker-{i % W}", "status"), patch())
            marks[n] = time.time()
            time.sleep(a.pace)
        wait_for(lambda: all((n, target) in seen_at for n in marks),
                 f"every job status to reflect the {direction} writes", 120)
        with lock:
            for n, tw in marks.items():
                delays.append(max(0.0, seen_at[(n, target)] - tw) * 1000)
                waiting.pop((n, target), None)
    result["event_to_action_ms"] = pct(delays)
    c_ev1 = apiserver_counts()
    result["event_status_writes"] = status_writes(c_ev0, c_ev1)
    result["event_phase"] = hist_means(h_e0, hist_totals())
    result["event_job_modified"] = job_modified[0] - m_ev0
    log(f"{NS}: event->action {result['event_to_action_ms']}")
    wait_quiet()
    cpu1, hwm1, _ = proc_stats(op.pid)
    req_total = op_requests()
    result["cpu_s"] = round(cpu1 - cpu0, 3)
    result["vmhwm_kib"] = hwm1
    result["vmhwm_mib"] = round(hwm1 / 1024, 2)
    result["operator_requests_total"] = {k: int(v) for k, v in req_total.items()}
    result["operator_requests_per_job"] = round(sum(req_total.values()) / J, 2)

    # --- restart ------------------------------------------------------------------
    op.kill()
    op.wait()
    time.sleep(1)
    with lock:
        adds_before, dels_before = sum(pod_adds.values()), pod_deletes[0]
        uids_before = {n: u for n, (u, _) in pods.items()}
    restart_marks = {}
    for i in range(S):
        n = names[i]
        with lock:
            waiting[(n, W - 1)] = time.time()
            seen_at.pop((n, W - 1), None)
        api.merge_patch(kube.ns_path(NS, "pods", f"{n}-worker-{(i + 1) % W}", "status"),
                        pod_pending())
        restart_marks[n] = 1
    log(f"{NS}: operator killed; {S} pods made Pending; restarting it")
    c_r0 = apiserver_counts()
    op2, t_start = start_operator(logf)
    t_ready = time.time()
    wait_for(lambda: all((n, W - 1) in seen_at for n in restart_marks),
             "every job status current after the restart")
    with lock:
        t_current = max(seen_at[(n, W - 1)] for n in restart_marks)
    t_quiet = wait_quiet(5)
    c_r1 = apiserver_counts()
    req_r = op_requests()
    h_r = hist_means({}, hist_totals())
    cpu2, hwm2, _ = proc_stats(op2.pid)
    with lock:
        recreated = sum(pod_adds.values()) - adds_before
        deleted = pod_deletes[0] - dels_before
        changed_uid = sum(1 for n, (u, _) in pods.items() if uids_before.get(n) not in (None, u))
    result["restart"] = {
        "start_to_ready_s": round(t_ready - t_start, 3),
        "resync_s": round(t_current - t_start, 3),
        "quiet_s": round(t_quiet - t_start, 3),
        "requests": {k: int(v) for k, v in req_r.items()},
        "status_writes": status_writes(c_r0, c_r1),
        "phase": h_r,
        "jobs_changed_while_down": S,
        "pods_created": recreated, "pods_deleted": deleted, "pods_new_uid": changed_uid,
        "cpu_s": round(cpu2, 3), "vmhwm_kib": hwm2, "vmhwm_mib": round(hwm2 / 1024, 2)}
    log(f"{NS}: restart {result['restart']}")

    # --- correctness ----------------------------------------------------------------
    podlist = api.get(kube.ns_path(NS, "pods"))["items"]
    pnames = [p["metadata"]["name"] for p in podlist]
    jl = api.get(kube.ns_path(NS, plural, group=group))["items"]
    want = {n: (W - 1 if n in restart_marks else W) for n in names}
    stale = [j["metadata"]["name"] for j in jl if level(j) != want.get(j["metadata"]["name"])]
    result["check"] = {
        "pods": len(pnames), "duplicate_pods": len(pnames) - len(set(pnames)),
        "pods_per_job_ok": all(sum(1 for p in pnames if p.startswith(n + "-")) == W
                               for n in names),
        "stale_statuses": len(stale), "stale_examples": stale[:5],
        "recreated_after_restart": recreated + deleted + changed_uid}
    result["peak_vmhwm_mib"] = round(max(hwm1, hwm2) / 1024, 2)
    result["cpu_total_s"] = round(result["cpu_s"] + cpu2, 3)
    result["loadavg_end"] = os.getloadavg()[0]
finally:
    stop.set()
    for p in (op, op2):
        if p is not None and p.poll() is None:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
print(json.dumps(result), flush=True)
if a.check:
    ck = result["check"]
    ok = (ck["pods"] == J * W and ck["duplicate_pods"] == 0 and ck["pods_per_job_ok"] and
          ck["stale_statuses"] == 0 and ck["recreated_after_restart"] == 0)
    sys.exit(0 if ok else 1)
