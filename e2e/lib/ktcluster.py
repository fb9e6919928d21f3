"""What the full local cluster's Python drivers share (operator/bench/recovery_cluster.py,
e2e/kill_trials.py): kubectl in one namespace, a job's pods watched, a chief's /metrics
scraped, a trainer SIGKILLed from the node (this machine), a job waited for and removed.
"""
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from datetime import datetime, timezone

POLL_S = 0.02  # how often a Scraper reads the chief's /metrics


def now():
    return time.time()


def r3(x):
    return None if x is None else round(x, 3)


def median(rows, key):
    """The median of rows' key, those without it left out, to 3 decimals; None if none."""
    vals = [r[key] for r in rows if r.get(key) is not None]
    return r3(statistics.median(vals)) if vals else None


def rfc3339(ts):
    """Epoch seconds of an RFC 3339 time, the kubelet's nanoseconds cut to microseconds."""
    m = re.match(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(\.\d+)?(Z|[+-]\d\d:\d\d)$", ts)
    if not m:
        return None
    base = datetime.strptime(m.group(1), "%Y-%m-%dT%H:%M:%S").replace(tzinfo=timezone.utc)
    frac = float("0" + m.group(2)) if m.group(2) else 0.0
    off = 0
    if m.group(3) != "Z":
        sign = 1 if m.group(3)[0] == "+" else -1
        off = sign * (int(m.group(3)[1:3]) * 3600 + int(m.group(3)[4:6]) * 60)
    return base.timestamp() + frac - off


class Kube:
    def __init__(self, kubectl, ns):
        self.kubectl, self.ns = kubectl, ns

    def run(self, *args, stdin=None, timeout=60, check=True):
        p = subprocess.run([self.kubectl, "--request-timeout", "30s", "-n", self.ns, *args],
                           input=stdin, capture_output=True, text=True, timeout=timeout)
        if check and p.returncode:
            raise RuntimeError("kubectl %s: %s" % (" ".join(args), p.stderr.strip()))
        return p.stdout

    def json(self, *args):
        return json.loads(self.run(*args, "-o", "json"))


class PodWatch(threading.Thread):
    """The job's pods by uid, from `kubectl get pods -w`: when each was first seen and
    deleted (this machine's clock), its name, IP, metrics port, creation, and the trainer
    container's id, start, restart count and exit code."""

    def __init__(self, kube, job):
        super().__init__(daemon=True)
        self.lock = threading.Lock()
        self.pods = {}
        self.proc = subprocess.Popen(
            [kube.kubectl, "-n", kube.ns, "get", "pods", "-l", "kubetrain.dev/job-name=" + job,
             "-w", "--output-watch-events", "-o", "json"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)

    def run(self):
        buf = ""  # kubectl writes an event a line; a pretty-printed one spans several
        for line in self.proc.stdout:
            buf += line
            try:
                ev = json.loads(buf)
            except ValueError:
                continue
            buf = ""
            self.update(ev.get("type"), ev.get("object") or {}, now())

    def update(self, kind, pod, t):
        md, st = pod.get("metadata", {}), pod.get("status", {})
        uid = md.get("uid")
        if not uid:
            return
        with self.lock:
            p = self.pods.setdefault(uid, {"uid": uid, "seen": t, "gone": None})
            p["name"] = md.get("name")
            p["created"] = md.get("creationTimestamp")
            p["ip"] = st.get("podIP") or p.get("ip")
            p["port"] = int((md.get("annotations") or {}).get("kubetrain.dev/metrics-port", 9090))
            for c in st.get("containerStatuses") or []:
                if c.get("name") != "trainer":
                    continue
                p["restarts"] = c.get("restartCount", 0)
                p["cid"] = (c.get("containerID") or "").split("://")[-1] or p.get("cid")
                state = c.get("state") or {}
                if "running" in state:
                    p["started"] = state["running"].get("startedAt")
                if "terminated" in state:
                    p["started"] = state["terminated"].get("startedAt") or p.get("started")
                    p["exit_code"] = state["terminated"].get("exitCode")
            if md.get("deletionTimestamp") and p.get("deleting") is None:
                p["deleting"] = t
            if kind == "DELETED" and p["gone"] is None:
                p["gone"] = t

    def snapshot(self):
        with self.lock:
            return {u: dict(p) for u, p in self.pods.items()}

    def stop(self):
        self.proc.terminate()
        self.proc.wait()


def scrape(ip, port):
    """(steps_total, start_step) from a chief's /metrics, or None. None too while
    kubetrain_total_steps is 0: the trainer serves /metrics a moment before it sets the
    run's plan (total and start step), and a resumed chief then says start step 0."""
    try:
        with urllib.request.urlopen("http://%s:%d/metrics" % (ip, port), timeout=0.5) as r:
            text = r.read().decode()
    except (OSError, ValueError):
        return None
    got = dict(re.findall(r"^(kubetrain_steps_total|kubetrain_start_step|kubetrain_total_steps) "
                          r"(\S+)$", text, re.M))
    if len(got) != 3 or float(got["kubetrain_total_steps"]) == 0:
        return None
    return int(float(got["kubetrain_steps_total"])), int(float(got["kubetrain_start_step"]))


class Scraper(threading.Thread):
    """Polls the /metrics of the pod named <job>-worker-0 (newest first while two exist)
    every POLL_S; series: (time, uid, steps_total, start_step)."""

    def __init__(self, watch, job):
        super().__init__(daemon=True)
        self.watch, self.chief = watch, job + "-worker-0"
        self.series, self.done = [], threading.Event()

    def run(self):
        while not self.done.is_set():
            pods = [p for p in self.watch.snapshot().values()
                    if p["name"] == self.chief and p.get("ip") and p["gone"] is None]
            for p in sorted(pods, key=lambda p: -p["seen"]):
                s = scrape(p["ip"], p["port"])
                if s:
                    self.series.append((now(), p["uid"], s[0], s[1]))
                    break
            time.sleep(POLL_S)

    def latest(self):
        return self.series[-1] if self.series else None


def log(msg):
    print("%s %s" % (time.strftime("%H:%M:%S", time.gmtime()), msg), file=sys.stderr, flush=True)


def wait_for(cond, timeout, what, step=0.05):
    end = now() + timeout
    while now() < end:
        v = cond()
        if v:
            return v
        time.sleep(step)
    raise RuntimeError("%s: not within %d s" % (what, timeout))


def pod_logs(kube, name):
    """[(epoch seconds, text)] of a pod's trainer log with the kubelet's timestamps."""
    out = kube.run("logs", "--timestamps", name, "-c", "trainer", check=False)
    lines = []
    for l in out.splitlines():
        ts, _, text = l.partition(" ")
        t = rfc3339(ts)
        if t is not None:
            lines.append((t, text))
    return lines


def first_match(lines, pattern):
    for t, text in lines:
        m = re.search(pattern, text)
        if m:
            return t, m
    return None, None


def trainer_pid(containerd, cid):
    """The pid, on the node (this machine), of container cid's process, from containerd."""
    p = subprocess.run(["ctr", "--address", containerd, "-n", "k8s.io", "task", "ls"],
                       capture_output=True, text=True, timeout=30)
    pid = next((int(f[1]) for f in (l.split() for l in p.stdout.splitlines())
                if len(f) >= 2 and f[0] == cid and f[1].isdigit()), None)
    if pid is None:
        raise RuntimeError("no containerd task %s (ctr task ls exited %d%s)" % (
            cid, p.returncode, ": " + p.stderr.strip()[-200:] if p.stderr.strip() else ""))
    return pid


def wait_trainer_pid(watch, name, containerd, timeout=120):
    """The node pid of pod name's trainer, once the watch has seen it running."""
    def running():
        return next((p["cid"] for p in watch.snapshot().values()
                     if p["name"] == name and p["gone"] is None and p.get("cid")
                     and p.get("started")), None)
    return trainer_pid(containerd, wait_for(running, timeout, "%s's trainer" % name, step=0.05))


def kill_trainer(containerd, cid):
    """SIGKILL to the trainer process of container cid, from the node (this machine)."""
    pid = trainer_pid(containerd, cid)
    t0 = now()
    os.kill(pid, signal.SIGKILL)
    return t0


def finish(kube, name, timeout=400):
    """Waits for the job to end; its status."""
    def ended():
        st = kube.json("get", "tj", name).get("status", {})
        return st if st.get("phase") in ("Succeeded", "Failed") else None
    return wait_for(ended, timeout, "job %s to end" % name, step=1)


def cleanup(kube, name):
    kube.run("delete", "tj", name, "--wait=true", "--timeout=120s", check=False, timeout=150)
    try:
        wait_for(lambda: not kube.run("get", "pods", "-l", "kubetrain.dev/job-name=" + name,
                                      "-o", "name", check=False).strip(), 120,
                 "pods of %s gone" % name, step=0.5)
    except RuntimeError as e:
        log(str(e))


def survivors(before, after, victim):
    """The pods of `before` (name -> pod, before the disruption) but the victim's name,
    against `after` (name -> the newest pod of that name): each one's uid and trainer
    restartCount before and at the end, and whether both are unchanged."""
    got = {}
    for n, p in sorted(before.items()):
        if n == victim:
            continue
        a = after.get(n, {})
        got[n] = {"uid_before": p["uid"], "uid_after": a.get("uid"),
                  "restarts_before": p.get("restarts"), "restarts_after": a.get("restarts"),
                  "unchanged": a.get("uid") == p["uid"] and a.get("restarts") == p.get("restarts")}
    return got


def c_trainer_job(name, ns, workers, model, epochs, steps, batch, lr, every, memory, extra=""):
    """A TrainingJob of the C trainer on Fashion-MNIST with sgd, checkpoints every `every`
    steps on the claim ckpt (keep 2), each pod requesting 100m CPU and `memory`; `extra`
    is more spec, lines indented by two."""
    return """apiVersion: kubetrain.dev/v1alpha1
kind: TrainingJob
metadata:
  name: %s
  namespace: %s
spec:
  workers: %d
  model: %s
  dataset: {name: fashion-mnist, path: /data}
  training:
    epochs: %d
    stepsPerEpoch: %d
    perWorkerBatchSize: %d
    optimizer: {name: sgd, learningRate: %g}
  checkpoint: {claimName: ckpt, path: /checkpoints, everySteps: %d, keep: 2}%s
  template:
    spec:
      containers:
        - name: trainer
          resources: {requests: {cpu: 100m, memory: %s}}
""" % (name, ns, workers, model, epochs, steps, batch, lr, every, extra, memory)
