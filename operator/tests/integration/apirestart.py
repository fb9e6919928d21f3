#!/usr/bin/env python3
"""The kube-apiserver restarted under a running operator, once per entry of --downs (the
seconds it stays away each time): the operator's watches must recover within --limit
seconds of the restarted apiserver taking this test's writes (the new job, the failed
pod; e2e/cluster/restart-apiserver.sh returns once /readyz answers, and the writes
follow at once). Recovery is measured on both watches the operator acts on, as the longest of:
  job watch  a TrainingJob created right after the restart gets its pods;
  pod watch  a worker of a running job (restartPolicy ExitCode) that fails right after
             the restart is counted (status.restarts.application) and its group restarted
             (the next attempt's pods exist). The latter includes the operator's restart
             delay, 1 s here (--backoff-base 1 --backoff-max 1) counted from the end of
             the second in which the failure was seen, so up to 2 s: the watch itself
             has the rest of the limit.
Prints "# ..." information lines and one result line per check, "PASS name" or
"FAIL name: why", for the shell test to turn into TAP (operator/tests/integration/
test-resilience.sh) or for make soak to count (e2e/soak/soak.py). KT_RUN must name the
cluster's run directory (e2e/cluster/up.sh api).
"""
import argparse
import json
import os
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kube  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))
ap = argparse.ArgumentParser()
ap.add_argument("--kubectl", required=True)
ap.add_argument("--kubeconfig", required=True)
ap.add_argument("--operator", required=True)
ap.add_argument("--log", required=True)
ap.add_argument("--ns", default="apirestart")
ap.add_argument("--downs", required=True, help="comma-separated outage lengths in seconds")
ap.add_argument("--limit", type=float, default=5.0)
ap.add_argument("--summary", help="write the recovery times as JSON here (make soak)")
args = ap.parse_args()
downs = [float(d) for d in args.downs.split(",")]

cfg = kube.load_config(args.kubectl, args.kubeconfig)
api = kube.Kube(cfg)
NS = args.ns
results = []


def check(name, ok, why=""):
    results.append((name, ok))
    print(("PASS " if ok else "FAIL ") + name + ("" if ok else ": " + why), flush=True)


def pods(job):
    return [p for p in api.get(kube.ns_path(NS, "pods"))["items"]
            if p["metadata"]["labels"].get("kubetrain.dev/job-name") == job]


def wait(pred, limit):
    end = time.time() + limit
    while time.time() < end:
        try:
            if pred():
                return True
        except (kube.ApiError, OSError):
            pass
        time.sleep(0.05)
    return False


def attempt_of(job, att):
    ps = pods(job)
    return len(ps) == 2 and all(p["metadata"]["annotations"].get("kubetrain.dev/attempt") ==
                                str(att) and not p["metadata"].get("deletionTimestamp")
                                for p in ps)


def restarts(job):
    j = api.get(kube.ns_path(NS, "trainingjobs", job, group=kube.GROUP))
    return j.get("status", {}).get("restarts", {}).get("application")


def when(t0, limit, *conds):
    """Polls the conditions until each has held once or `limit` s have passed; returns,
    for each, the seconds after t0 at which it first held (None: not within the limit)."""
    got = [None] * len(conds)
    end = time.time() + limit
    while time.time() < end and None in got:
        for k, c in enumerate(conds):
            if got[k] is None:
                try:
                    if c():
                        got[k] = time.time() - t0
                except (kube.ApiError, OSError):
                    pass
        time.sleep(0.05)
    return got


def fmt(t):
    return "never" if t is None else f"{t:.2f} s"


def log_tail(since):
    """The operator's log lines written since byte `since` (its watch warnings say when
    each retry was due)."""
    with open(args.log, "rb") as f:
        f.seek(since)
        return f.read().decode(errors="replace")[-3000:]


api.create("/api/v1/namespaces",
           {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
logf = open(args.log, "ab")
op = kube.kill_at_exit(
    subprocess.Popen([args.operator, "--kubeconfig", args.kubeconfig, "--metrics-addr", "0",
                      "--health-addr", "0", "--backoff-base", "1", "--backoff-max", "1"],
                     stdout=logf, stderr=subprocess.STDOUT))
jobs_path = kube.ns_path(NS, "trainingjobs", group=kube.GROUP)
times, slow, lost = [], [], 0
api.create(jobs_path, kube.training_job("steady", 2, restartPolicy="ExitCode", backoffLimit=100,
                                        recoveryTimeoutSeconds=0))
for i, down in enumerate(downs):
    if not wait(lambda: attempt_of("steady", i), 60):
        check(f"restart {i}: the running job has its attempt-{i} pods", False,
              f"pods {[p['metadata']['name'] for p in pods('steady')]}")
        break
    for p in pods("steady"):
        api.merge_patch(kube.ns_path(NS, "pods", p["metadata"]["name"], "status"),
                        kube.pod_running_status())
    since = os.path.getsize(args.log)
    r = subprocess.run(["bash", os.path.join(ROOT, "e2e/cluster/restart-apiserver.sh"),
                        f"{down:g}"], capture_output=True, text=True)
    if r.returncode != 0:
        check(f"restart {i}: restart-apiserver.sh {down:g}", False, r.stderr[-1000:])
        break
    api = kube.Kube(cfg)
    name = f"new-{i}"
    t_ready = time.time()
    api.create(jobs_path, kube.training_job(name, 2))
    api.merge_patch(kube.ns_path(NS, "pods", "steady-worker-1", "status"),
                    kube.pod_exit_status(75, '{"error":"peer lost"}'))
    # The clock starts once the restarted server has taken this test's own writes: how
    # long it takes to answer them right after /readyz (longer on a loaded machine) is
    # the server's time, not the operator's; it is printed.
    back = time.time()
    print(f"# restart {i}: the test's writes took {back - t_ready:.2f} s after /readyz",
          flush=True)
    t_new, t_seen, t_restart = when(back, 30, lambda: len(pods(name)) == 2,
                                    lambda: restarts("steady") == i + 1,
                                    lambda: attempt_of("steady", i + 1))
    got = t_new is not None and t_seen is not None and t_restart is not None
    dt = max(t_new or 30, t_seen or 30, t_restart or 30)
    times.append(round(dt, 2))
    print(f"# restart {i}, {down:g} s down: new job's pods after {fmt(t_new)}, failed pod "
          f"counted after {fmt(t_seen)}, group restarted after {fmt(t_restart)}", flush=True)
    if t_new is None:
        lost += 1
    if not got or dt > args.limit:
        slow.append(f"{down:g} s down: new job's pods after {fmt(t_new)}, failed pod counted "
                    f"after {fmt(t_seen)}, group restarted after {fmt(t_restart)}")
        print("# the operator's log since that restart:", flush=True)
        for ln in log_tail(since).splitlines():
            print("#   " + ln, flush=True)
check(f"watches recover within {args.limit:g} s of the apiserver taking the test's writes, "
      f"{len(downs)} restarts ({args.downs} s down): {times} s",
      len(times) == len(downs) and not slow, "; ".join(slow))
want = len(times)
check(f"each group restart counted once (status.restarts.application {want})",
      wait(lambda: restarts("steady") == want, 10), f"{restarts('steady')}")
alive = op.poll() is None
op.send_signal(signal.SIGTERM)
try:
    rc = op.wait(timeout=20)
except subprocess.TimeoutExpired:
    op.kill()
    rc = op.wait()
check("the operator kept running through the restarts and exits 0 on SIGTERM",
      alive and rc == 0, f"{'exited' if alive else 'died'} with {rc}")
if args.summary:
    with open(args.summary, "w") as f:
        json.dump({"times": times, "lost": lost, "worst": max(times, default=0.0)}, f)
sys.exit(0 if all(ok for _, ok in results) else 1)
