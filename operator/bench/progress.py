#!/usr/bin/env python3
"""progress.py RUN_DIR OPERATOR OUT: what status.progress costs the operator (progress.sh).

On the api-level cluster of RUN_DIR (e2e/cluster/up.sh api): JOBS TrainingJobs of one
worker each, whose pods this script marks Running (status subresource, as a kubelet
would) with pod IPs 127.0.0.2, 127.0.0.3, ... on loopback, where one local HTTP server
answers /metrics like the C trainer's chief (the metric names of trainer/src/prom.c, the
step growing with time so every scrape has news to write). That server is a MOCK of the
chiefs: the api level runs no pods, and the cost measured is the operator's side only.
Beside them, TF_JOBS jobs of a user's program (spec.command) whose chiefs are real:
progress_tf.py, a Keras fit() under TensorFlow from $KT_CACHE/venv-tf with the kubetrain
package's ProgressCallback, one process per job on a port of its own that the job's
template names "metrics", reached at its pod's loopback IP.
Then the operator runs in alternating windows with progress off (--progress-interval 0)
and on (the default, --progress-interval 10): restarted for each window, WARMUP seconds
to list and settle, then WINDOW seconds sampled every 5 s: RSS (VmRSS) and CPU
(utime+stime from /proc). Writes the JSON to OUT.
"""
import datetime
import http.server
import json
import os
import platform
import signal
import socket
import ssl
import statistics
import subprocess
import sys
import threading
import time
import urllib.request

JOBS = int(os.environ.get("BENCH_JOBS", "100"))
TF_JOBS = int(os.environ.get("BENCH_TF_JOBS", "1"))
HERE = os.path.dirname(os.path.abspath(__file__))


def source_commit():
    """The commit the benchmark runs, read when it starts (a commit made during a run is
    not the code that ran): short hash and date, "+ changes" when the tree differs."""
    def git(*args):
        return subprocess.run(["git", *args], capture_output=True, text=True).stdout.strip()
    dirty = git("status", "--porcelain", "--untracked-files=no")
    return git("log", "-1", "--format=%h %cs") + (" + changes" if dirty else "")


COMMIT = source_commit()
WINDOW = float(os.environ.get("BENCH_WINDOW", "120"))
WARMUP = float(os.environ.get("BENCH_WARMUP", "30"))
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "2"))
NS = "kt-progress"
T0 = time.time()
scrapes = {"n": 0, "aborted": 0}


def free_port(host="127.0.0.1"):
    s = socket.socket()
    s.bind((host, 0))
    p = s.getsockname()[1]
    s.close()
    return p


class Metrics(http.server.BaseHTTPRequestHandler):
    """The chief's /metrics as trainer/src/prom.c writes it (a mock: no training)."""

    def do_GET(self):
        if self.path != "/metrics":
            self.send_error(404)
            return
        scrapes["n"] += 1
        step = int((time.time() - T0) * 5)  # 5 steps/s: news at every scrape
        vals = [
            ("kubetrain_steps_total", "counter", step),
            ("kubetrain_epoch", "gauge", 1 + step // 1000),
            ("kubetrain_loss", "gauge", 2.3 / (1 + step / 100)),
            ("kubetrain_accuracy", "gauge", min(0.95, step / 5000)),
            ("kubetrain_samples_per_second", "gauge", 640.0),
            ("kubetrain_learning_rate", "gauge", 0.001),
            ("kubetrain_allreduce_seconds", "gauge", 0.004),
            ("kubetrain_allreduce_seconds_total", "counter", step * 0.004),
            ("kubetrain_step_seconds_total", "counter", step * 0.2),
            ("kubetrain_total_steps", "gauge", 1000000),
            ("kubetrain_start_step", "gauge", 0),
        ]
        body = "".join(f"# HELP {n} .\n# TYPE {n} {t}\n{n} {v:.9g}\n" for n, t, v in vals)
        body = body.encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *a):
        pass

    def handle(self):
        try:
            super().handle()
        except (BrokenPipeError, ConnectionResetError):
            scrapes["aborted"] += 1  # the operator gave up waiting (its 2 s timeout)


class Api:
    def __init__(self, run):
        env = {}
        for line in open(os.path.join(run, "env")):
            if "=" in line and not line.startswith("export"):
                k, v = line.strip().split("=", 1)
                env[k] = v.strip("'\"")
        self.url = env["KT_APISERVER_URL"]
        self.kubeconfig = env["KUBECONFIG"]
        pki = os.path.join(run, "pki")
        self.ctx = ssl.create_default_context(cafile=os.path.join(pki, "ca.crt"))
        self.ctx.load_cert_chain(os.path.join(pki, "admin.crt"), os.path.join(pki, "admin.key"))

    def req(self, method, path, body=None, ctype="application/json"):
        data = json.dumps(body).encode() if body is not None else None
        r = urllib.request.Request(self.url + path, data=data, method=method)
        if data is not None:
            r.add_header("Content-Type", ctype)
        with urllib.request.urlopen(r, context=self.ctx, timeout=30) as resp:
            return json.loads(resp.read() or b"null")


def job(i, port):
    return {
        "apiVersion": "kubetrain.dev/v1alpha1", "kind": "TrainingJob",
        "metadata": {"name": job_name(i), "namespace": NS},
        "spec": {"workers": 1, "model": "tutorial-cnn",
                 "dataset": {"name": "fashion-mnist", "path": "/data"},
                 "training": {"epochs": 1000, "stepsPerEpoch": 1000, "perWorkerBatchSize": 64,
                              "optimizer": {"name": "sgd", "learningRate": 0.001}},
                 "template": {"spec": {"containers": [{
                     "name": "trainer",
                     "ports": [{"name": "metrics", "containerPort": port}]}]}}},
    }


def job_name(i):
    return f"p{i:03d}"


def tf_job(i, port):
    """A user's TensorFlow program's job (spec.command), its metrics port declared."""
    return {
        "apiVersion": "kubetrain.dev/v1alpha1", "kind": "TrainingJob",
        "metadata": {"name": tf_job_name(i), "namespace": NS},
        "spec": {"workers": 1, "image": "kubetrain/tensorflow:0.1.0",
                 "command": ["python3", "progress_tf.py"],
                 "template": {"spec": {"containers": [{
                     "name": "trainer",
                     "ports": [{"name": "metrics", "containerPort": port}]}]}}},
    }


def tf_job_name(i):
    return f"tf{i:02d}"


def tf_python():
    """venv-tf's Python (bench/pyvenv.sh), for the TF chiefs."""
    py = subprocess.run(["bash", "bench/pyvenv.sh", "venv-tf"], capture_output=True,
                        text=True)
    if py.returncode != 0:
        raise SystemExit(f"no TensorFlow venv for the TF chief: {py.stderr.strip()}")
    return py.stdout.strip()


def start_tf_chief(py, port, logdir):
    """progress_tf.py under py, the chief of a one-worker cluster, serving /metrics on
    port; returns the process once it serves there."""
    env = dict(os.environ, PYTHONPATH=os.path.join(os.getcwd(), "python", "src"),
               KUBETRAIN_METRICS_PORT=str(port), KUBETRAIN_AUTO_PROGRESS="0",
               KUBETRAIN_TERMINATION_FILE=os.path.join(logdir, f"tf-{port}.term"),
               TF_CONFIG=json.dumps({"cluster": {"worker": ["localhost:1"]},
                                     "task": {"type": "worker", "index": 0}}),
               TF_CPP_MIN_LOG_LEVEL="2")
    log = open(os.path.join(logdir, f"tf-{port}.log"), "w")
    p = subprocess.Popen([py, os.path.join(HERE, "progress_tf.py")], env=env,
                         stdout=log, stderr=subprocess.STDOUT)
    for _ in range(240):
        if p.poll() is not None:
            raise SystemExit(f"the TF chief exited {p.returncode} (see {log.name})")
        try:
            body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2).read()
            if b"kubetrain_steps_total" in body:
                return p, len(body)
        except OSError:
            pass
        time.sleep(0.5)
    p.kill()
    raise SystemExit(f"the TF chief served no kubetrain_steps_total in 120 s (see {log.name})")


def proc_sample(pid):
    with open(f"/proc/{pid}/stat") as f:
        st = f.read().rsplit(")", 1)[1].split()
    ticks = int(st[11]) + int(st[12])  # utime, stime
    rss = hwm = 0
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1])
            elif line.startswith("VmHWM:"):
                hwm = int(line.split()[1])
    return ticks / os.sysconf("SC_CLK_TCK"), rss / 1024, hwm / 1024


def progress_steps(api):
    jobs = api.req("GET", f"/apis/kubetrain.dev/v1alpha1/namespaces/{NS}/trainingjobs")
    return {j["metadata"]["name"]: (j.get("status", {}).get("progress") or {}).get("step", 0)
            for j in jobs["items"]}


def load1():
    return float(open("/proc/loadavg").read().split()[0])


def main():
    run, opbin, out = sys.argv[1:4]
    signal.signal(signal.SIGTERM, lambda *a: sys.exit(1))  # the operator stops with us
    api = Api(run)
    port = free_port("0.0.0.0") if os.environ.get("BENCH_PORT") is None \
        else int(os.environ["BENCH_PORT"])
    # A backlog for every scrape the operator opens at once (64): socketserver's default
    # of 5 drops SYNs, whose retransmission after 1 s outlasts the scrape's timeout.
    http.server.ThreadingHTTPServer.request_queue_size = 256
    srv = http.server.ThreadingHTTPServer(("0.0.0.0", port), Metrics)
    threading.Thread(target=srv.serve_forever, daemon=True).start()

    oplog = open(os.path.join(os.path.dirname(run), "operator.log"), "a")
    proc = {"p": None}
    tf_chiefs = []

    def start(interval):
        hp = free_port()
        p = subprocess.Popen([opbin, "--kubeconfig", api.kubeconfig, "--health-addr",
                              f"127.0.0.1:{hp}", "--metrics-addr", "0",
                              f"--progress-interval={interval}"],
                             stdout=oplog, stderr=subprocess.STDOUT)
        proc["p"] = p
        for _ in range(120):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{hp}/readyz", timeout=1)
                return p
            except Exception:
                time.sleep(0.5)
        raise SystemExit("the operator did not become ready (see operator.log)")

    def stop():
        p = proc["p"]
        if p:
            p.terminate()
            p.wait(30)
            proc["p"] = None

    try:
        api.req("POST", "/api/v1/namespaces", {"metadata": {"name": NS}})
        start(10)
        for i in range(JOBS):
            api.req("POST", f"/apis/kubetrain.dev/v1alpha1/namespaces/{NS}/trainingjobs",
                    job(i, port))
        tf_ports = {}
        py = tf_python() if TF_JOBS else None
        for i in range(TF_JOBS):
            tp = free_port("0.0.0.0")
            tf_chiefs.append(start_tf_chief(py, tp, os.path.dirname(run)))
            tf_ports[tf_job_name(i)] = tp
            api.req("POST", f"/apis/kubetrain.dev/v1alpha1/namespaces/{NS}/trainingjobs",
                    tf_job(i, tp))
        total = JOBS + TF_JOBS
        # The pods, as a kubelet would report them: Running, Ready, an IP on loopback.
        pods = {}
        for _ in range(240):
            items = api.req("GET", f"/api/v1/namespaces/{NS}/pods")["items"]
            pods = {p["metadata"]["name"]: p for p in items}
            if len(pods) >= total:
                break
            time.sleep(0.5)
        if len(pods) < total:
            raise SystemExit(f"only {len(pods)} of {total} pods created")
        now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        for i, name in enumerate(sorted(pods)):
            ip = f"127.0.{(i + 2) // 256}.{(i + 2) % 256}"
            st = {"status": {
                "phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}], "startTime": now,
                "conditions": [{"type": t, "status": "True", "lastTransitionTime": now}
                               for t in ("PodScheduled", "Initialized", "ContainersReady",
                                         "Ready")],
                "containerStatuses": [{"name": "trainer", "ready": True, "restartCount": 0,
                                       "image": "kubetrain/trainer", "imageID": "",
                                       "started": True,
                                       "state": {"running": {"startedAt": now}}}]}}
            api.req("PATCH", f"/api/v1/namespaces/{NS}/pods/{name}/status", st,
                    "application/merge-patch+json")
        for _ in range(240):
            jobs = api.req("GET", f"/apis/kubetrain.dev/v1alpha1/namespaces/{NS}/trainingjobs")
            running = sum(1 for j in jobs["items"] if j.get("status", {}).get("phase") == "Running")
            if running == total:
                break
            time.sleep(0.5)
        if running != total:
            raise SystemExit(f"only {running} of {total} jobs Running")
        stop()

        windows = []
        for r in range(ROUNDS):
            for mode, interval in (("off", 0), ("on", 10)):
                p = start(interval)
                time.sleep(WARMUP)
                steps0 = progress_steps(api)
                n0, a0 = scrapes["n"], scrapes["aborted"]
                c0, _, _ = proc_sample(p.pid)
                t0 = time.time()
                l0 = load1()
                rss = []
                while time.time() - t0 < WINDOW:
                    time.sleep(5)
                    rss.append(proc_sample(p.pid)[1])
                c1, rss_end, hwm = proc_sample(p.pid)
                dt = time.time() - t0
                steps1 = progress_steps(api)
                advanced = sum(1 for k, v in steps1.items() if v > steps0.get(k, 0))
                tf_advanced = sum(1 for k in tf_ports if steps1.get(k, 0) > steps0.get(k, 0))
                stop()
                w = {"round": r, "mode": mode, "progress_interval_s": interval,
                     "seconds": round(dt, 1), "cpu_s": round(c1 - c0, 3),
                     "cpu_percent": round(100 * (c1 - c0) / dt, 3),
                     "rss_mean_mib": round(statistics.mean(rss), 2),
                     "rss_end_mib": round(rss_end, 2), "vmhwm_mib": round(hwm, 2),
                     "scrapes": scrapes["n"] - n0,
                     "scrapes_aborted": scrapes["aborted"] - a0,
                     "jobs_progress_advanced": advanced,
                     "tf_jobs_progress_advanced": tf_advanced,
                     "loadavg_start/end": [l0, load1()]}
                print(json.dumps(w), file=sys.stderr, flush=True)
                windows.append(w)
    finally:
        stop()
        srv.shutdown()
        for p, _ in tf_chiefs:
            p.terminate()
            p.wait(30)

    def agg(mode, key):
        return round(statistics.median(w[key] for w in windows if w["mode"] == mode), 3)
    summary = {m: {k: agg(m, k) for k in ("cpu_percent", "rss_mean_mib", "vmhwm_mib")}
               for m in ("off", "on")}
    summary["extra"] = {"cpu_percent": round(summary["on"]["cpu_percent"]
                                             - summary["off"]["cpu_percent"], 3),
                        "rss_mean_mib": round(summary["on"]["rss_mean_mib"]
                                              - summary["off"]["rss_mean_mib"], 2),
                        "vmhwm_mib": round(summary["on"]["vmhwm_mib"]
                                           - summary["off"]["vmhwm_mib"], 2)}
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo")
                if l.startswith("model name")), "?")
    doc = {
        "benchmark": f"progress cost: the operator with {JOBS} Running jobs whose chiefs serve "
                     f"/metrics and {TF_JOBS} TensorFlow program's job(s) whose chief serves "
                     "the kubetrain package's /metrics, progress scraping on "
                     "(--progress-interval 10, the default) vs off (0), api-level cluster "
                     "(e2e/cluster/up.sh api)",
        "jobs": JOBS,
        "tf_jobs": TF_JOBS,
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "commit": COMMIT,
        "machine": {"arch": platform.machine(), "nproc": os.cpu_count(), "cpu": cpu,
                    "note": "2 cores shared with other engineers' builds and tests; the "
                            "apiserver, etcd, the mock and the operator run on them"},
        "mock": "the chiefs are a MOCK: the api level runs no pods, so the pods' status is "
                "set Running by this script with IPs 127.0.0.2.. on loopback, and one local "
                "HTTP server answers every chief's /metrics (on the port the jobs' templates "
                "name 'metrics') with the C trainer's metric names (trainer/src/prom.c), the "
                "step growing 5/s so that every scrape leads to a status write. The TensorFlow "
                "jobs' chiefs are REAL: operator/bench/progress_tf.py, a Keras fit() under "
                "TensorFlow with kubetrain.keras.ProgressCallback, its /metrics served by "
                "prometheus_client (" + ", ".join(f"{n} bytes" for _, n in tf_chiefs) +
                "), one process per job on this machine, at its pod's loopback IP",
        "definitions": {
            "cpu_percent": "operator user+system CPU over the window / window, percent of one core",
            "rss_mean_mib": "mean of the operator's VmRSS sampled every 5 s in the window",
            "vmhwm_mib": "the operator's peak RSS since its start (VmHWM)",
            "window": f"operator restarted per window, {WARMUP:.0f} s warm-up (lists, first "
                      f"scrapes), then {WINDOW:.0f} s measured; modes alternate, {ROUNDS} "
                      "windows each",
            "scrapes": "/metrics requests the mock answered in the window",
            "scrapes_aborted": "of those, answers the operator no longer read (it gave up after "
                               "its 2 s scrape timeout)",
            "jobs_progress_advanced": "jobs whose status.progress.step grew during the window "
                                      "(TensorFlow jobs included)",
            "tf_jobs_progress_advanced": "of those, TensorFlow program jobs"},
        "targets": {"extra_rss_mib": 1, "extra_cpu_percent": 1},
        "windows": windows,
        "summary": summary,
    }
    # BENCH_NOTE: what changed since the last run; BENCH_BEFORE: a JSON of this benchmark
    # run in the same session before the change, whose commit and summary are kept here.
    if os.environ.get("BENCH_NOTE"):
        doc["note"] = os.environ["BENCH_NOTE"]
    if os.environ.get("BENCH_BEFORE"):
        with open(os.environ["BENCH_BEFORE"]) as f:
            before = json.load(f)
        doc["before"] = {"commit": before["commit"], "date": before["date"],
                         "summary": before["summary"]}
    with open(out, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
