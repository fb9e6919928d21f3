#!/usr/bin/env python3
"""Live recovery on the cluster, N trials (e2e/suite.sh's killtrials scenario): each
trial is one TrainingJob of 3 C-trainer workers whose trainer of a random rank (the chief
included) is SIGKILLed from the node once the chief's /metrics reports a random step.
Every trial must end Succeeded with the weights of one undisturbed run of the same spec,
bit for bit; with only the killed pod replaced (exactly one new pod, of the victim's
name; every other pod the same uid with no container restart); with the replacement
taking the state from a survivor ("joined generation 2 ... no checkpoint read") and no
trainer reading a checkpoint after the start; and with status.attempt 0, restarts
replaced 1, application 1 (the SIGKILL's 137).

Trials run --at-once at a time. Prints a line per check, "ok DESCRIPTION" or
"not ok DESCRIPTION" followed by "# " lines saying why, for the suite to count as TAP.

  kill_trials.py --kubectl BIN --namespace NS --containerd ADDR
      [--trials 20] [--at-once 4] [--seed S]
"""
import argparse
import os
import random
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
from ktcluster import (Kube, PodWatch, Scraper, c_trainer_job, cleanup, finish,  # noqa: E402
                       log, now, wait_for, wait_trainer_pid)

WORKERS, EPOCHS, STEPS, BATCH, EVERY = 3, 2, 400, 64, 50
TOTAL = EPOCHS * STEPS
JOINED = "joined generation 2: state of step"
OUT = threading.Lock()


def manifest(name, ns):
    return c_trainer_job(name, ns, WORKERS, "mlp", EPOCHS, STEPS, BATCH, 0.01, EVERY, "128Mi")


def report(name, problems, detail=()):
    with OUT:
        if problems:
            print("not ok %s" % name)
            for line in list(problems) + list(detail):
                print("# %s" % line)
        else:
            print("ok %s" % name)
        sys.stdout.flush()


def logs_of(kube, pod, tries=5):
    """The pod's trainer log. On a busy node `kubectl logs` sometimes fails or prints
    nothing (the kubelet slow to answer): tried `tries` times, 1 s apart; then the log
    reads as what went wrong, so that a check looking for a line says why it is not
    there."""
    err = ""
    for attempt in range(tries):
        if attempt:
            time.sleep(1)
        try:
            text = kube.run("logs", pod, "-c", "trainer", timeout=60)
        except (RuntimeError, subprocess.TimeoutExpired) as e:
            err = str(e)[:300]
            continue
        if text:  # a trainer that ran has logged; empty is a read that failed
            return text
        err = "kubectl logs printed nothing"
    return "(no log: %s)" % err


def trial(kube, ns, containerd, i, victim, at, ref_hash):
    name = "kt-trial-%d" % i
    vname = "%s-worker-%d" % (name, victim)
    what = "trial %d: SIGKILL of worker %d's trainer at step %d" % (i, victim, at)
    watch = PodWatch(kube, name)
    watch.start()
    scraper = Scraper(watch, name)
    scraper.start()
    bad, detail, logs = [], [], {}
    status, killed_at = {}, None
    try:
        kube.run("apply", "-f", "-", stdin=manifest(name, ns))
        # The victim's pid is looked up before its step comes, so that the kill follows the
        # step at once: the whole run is a few seconds, and a `ctr task ls` at that moment
        # could come back after the last step on a busy node (the trainer already gone).
        pid = wait_trainer_pid(watch, vname, containerd)
        wait_for(lambda: (scraper.latest() or (0, 0, 0))[2] >= at, 240,
                 "step %d on %s's chief" % (at, name), step=0.005)
        before = {p["name"]: p for p in watch.snapshot().values() if p["gone"] is None}
        vpod = before[vname]
        os.kill(pid, signal.SIGKILL)
        killed_at = scraper.latest()[2]
        # The replacement's log as it shows the join (kept: the job can end and its pods
        # go before a second read), then the survivors', while they still run.
        joined = {}

        def replacement_joined():
            if not any(p["name"] == vname and p["uid"] != vpod["uid"]
                       for p in watch.snapshot().values()):
                return False
            text = logs_of(kube, vname, tries=1)
            if JOINED in text:
                joined[vname] = text
            return vname in joined

        wait_for(replacement_joined, 120, "%s's replacement to join" % vname, step=0.5)
        logs = {n: logs_of(kube, n) for n in before if n != vname}
        logs.update(joined)
        status = finish(kube, name, timeout=300)
        pods = watch.snapshot()
    except (RuntimeError, subprocess.TimeoutExpired, KeyError, OSError) as e:
        bad.append(str(e)[:300])
        pods = watch.snapshot()
        logs = {p["name"]: logs_of(kube, p["name"]) for p in pods.values() if p["gone"] is None}
    finally:
        scraper.done.set()
        watch.stop()

    if killed_at is not None:
        what = "trial %d: SIGKILL of worker %d's trainer at step %d of %d" % (
            i, victim, killed_at, TOTAL)
        if killed_at >= TOTAL:
            bad.append("the kill came after the last step")
    if not bad:
        if status.get("phase") != "Succeeded":
            bad.append("phase %s: %s" % (status.get("phase"), status.get("message", "")))
        h = (status.get("result") or {}).get("weightsSha256")
        if h != ref_hash:
            bad.append("weights %s, undisturbed %s" % (h, ref_hash))
        # Pods by name: exactly the victim's has a second uid, nobody else's changed.
        byname = {}
        for p in pods.values():
            byname.setdefault(p["name"], []).append(p)
        if sorted(byname) != sorted(before):
            bad.append("pods %s, want %s" % (sorted(byname), sorted(before)))
        for n, ps in sorted(byname.items()):
            want = 2 if n == vname else 1
            if len(ps) != want:
                bad.append("%s: %d pods, want %d" % (n, len(ps), want))
            if n != vname and any(p.get("restarts") for p in ps):
                bad.append("%s: its container restarted" % n)
        rs = status.get("restarts") or {}
        got = (status.get("attempt", 0), rs.get("replaced", 0), rs.get("application", 0))
        if got != (0, 1, 1):
            bad.append("attempt/replaced/application %s, want (0, 1, 1)" % (got,))
        if JOINED not in logs.get(vname, "") or "no checkpoint read" not in logs.get(vname, ""):
            bad.append("%s's replacement did not log 'joined generation 2 ... no "
                       "checkpoint read'" % vname)
        for n, text in sorted(logs.items()):
            if "resuming from" in text:
                bad.append("%s read a checkpoint: %s" % (
                    n, next(x for x in text.splitlines() if "resuming from" in x)[:160]))
            if n != vname and "live recovery: generation 2 formed" not in text:
                bad.append("%s did not log 'generation 2 formed'" % n)
    if bad:
        for n, text in sorted(logs.items()):
            detail += ["--- %s" % n] + text.splitlines()[-6:]
    else:
        what += ": only its pod replaced, the state from a survivor, no checkpoint read, " \
                "the undisturbed run's weights"
    report(what, bad, detail)
    cleanup(kube, name)
    return not bad


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kubectl", required=True)
    ap.add_argument("--namespace", required=True)
    ap.add_argument("--containerd", required=True)
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--at-once", type=int, default=4)
    ap.add_argument("--seed", type=int, default=None)
    a = ap.parse_args()
    seed = a.seed if a.seed is not None else random.SystemRandom().randrange(1 << 31)
    rng = random.Random(seed)
    plan = [(i + 1, rng.randrange(WORKERS), rng.randint(TOTAL // 10, TOTAL * 6 // 10))
            for i in range(a.trials)]
    with OUT:
        print("# %d trials, %d at once, from seed %d (--seed %d repeats the victims and steps)"
              % (a.trials, a.at_once, seed, seed))
        sys.stdout.flush()
    kube = Kube(a.kubectl, a.namespace)
    t0 = now()
    name = "kt-trial-ref"
    kube.run("apply", "-f", "-", stdin=manifest(name, a.namespace))
    try:
        st = finish(kube, name, timeout=300)
    except RuntimeError as e:
        st = {"phase": str(e)}
    ref = (st.get("result") or {}).get("weightsSha256")
    cleanup(kube, name)
    report("the undisturbed run Succeeded in %.0f s (weights %s...)" % (now() - t0, (ref or "")[:16]),
           [] if st.get("phase") == "Succeeded" and ref else ["phase %s" % st.get("phase")])
    if not ref:
        return 1
    with ThreadPoolExecutor(max_workers=a.at_once) as pool:
        results = list(pool.map(lambda t: trial(kube, a.namespace, a.containerd, *t, ref), plan))
    log("%d of %d trials passed in %.0f s" % (sum(results), len(results), now() - t0))
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
