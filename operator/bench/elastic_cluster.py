#!/usr/bin/env python3
"""make bench-elastic-cluster's driver (operator/bench/elastic-cluster.sh brings up the
full local cluster, installs the chart and runs this): an elastic job against today's
behaviour when a worker's room is taken away, with real pods (issue #46's benchmark).

Each run is one TrainingJob of 4 C-trainer workers (tutorial-cnn, Fashion-MNIST, 1 epoch
of STEPS steps, per-worker batch 16, a checkpoint every 50 steps, recoveryTimeoutSeconds
30), each worker asking for one kubetrain.dev/e2e-slot, an extended resource the node
advertises 4 of (the e2e scenario `elastic` does the same with 3). Once the chief's
/metrics reports step LOSS_AT, a filler pod is placed in a fifth slot, which is then
taken back, and a worker's pod (not the chief's) is deleted: its replacement cannot be
scheduled ("Insufficient kubetrain.dev/e2e-slot") until the filler is deleted HOLD_S
seconds later. Two modes, their order alternating by round, on the same victim:
  elastic  spec.elastic.minWorkers 3: the survivors go on at 3 and the job grows back to
           4 when the room returns;
  today    no spec.elastic (the same spec otherwise): the survivors wait
           recoveryTimeoutSeconds for the replacement, then the group restarts and waits
           for all 4 pods, which the gang places once the room returns.

Measured on this machine's clock (the node is this machine): the chief's /metrics polled
every 20 ms, the pods watched (kubectl get -w), the trainers' log lines with the kubelet's
timestamps. DEFINITIONS in the JSON says what each figure is.

  elastic_cluster.py OUT.json --kubectl BIN --namespace NS [--rounds N] [--seed S]
      [--hold S] [--setup JSON] [--commit C]
"""
import argparse
import bisect
import json
import os
import random
import subprocess
import sys
import threading
import time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
sys.path[:0] = [os.path.join(ROOT, "trainer", "bench"), os.path.join(ROOT, "e2e", "lib")]
from machine import cpu_model  # noqa: E402  trainer/bench/machine.py
from ktcluster import (Kube, PodWatch, Scraper, c_trainer_job, cleanup, finish,  # noqa: E402
                       median, r3,
                       first_match, log, now, rfc3339, survivors, wait_for)

WORKERS, MIN_WORKERS, EVERY, STEPS, BATCH, LOSS_AT, RECOVERY_S = 4, 3, 50, 1500, 16, 125, 30
RES = "kubetrain.dev/e2e-slot"
MODES = ("elastic", "today")
SAMPLE_S = 0.1  # how often the pods Running are counted
STALL_S = 2.0   # a chief whose step count has not moved for this long is not training
JOINED = r"joined generation \d+|rendezvous done in"

DEFINITIONS = {
    "t0": "the loss: the pod watch's event carrying the victim's deletionTimestamp",
    "unschedulable_s": "t0 -> the victim's replacement (its name, a new uid) seen by the "
                       "watch with PodScheduled False, reason Unschedulable: the loss's "
                       "detection, the moment the cluster says the room is gone",
    "reached": "the highest global step completed before training resumed: the chief's "
               "/metrics before the first step after the loss, and the survivors' "
               "'goes on from step S' (elastic) or the old chief's last scrape (today)",
    "resumed_from": "the step training went on from: 'elastic: generation G of N workers "
                    "goes on from step S' (elastic), the new chief's kubetrain_start_step "
                    "(today: the group restart's checkpoint)",
    "steps_trained_twice": "reached - resumed_from",
    "t0_to_first_step_s": "t0 -> the first scrape after t0 with kubetrain_steps_total > "
                          "reached: training goes on",
    "after_detection_s": "t0_to_first_step_s - unschedulable_s (the target: <= 2 s for "
                         "elastic)",
    "room_back_to_full_s": "the filler's deletion (HOLD_S after t0) -> the job trains at 4 "
                           "workers again: the replacement's 'joined generation' line "
                           "(elastic), the first step of the restarted group (today); "
                           "null when the job ended first",
    "survivors_unchanged": "the other three workers' pods have the same uid and trainer "
                           "restartCount at the end as before t0",
    "idle_worker_seconds": "from t0 to the last step, the sum over 0.1 s samples of (worker "
                           "pods Running - workers training): a pod Running is not training "
                           "while the chief's step count has not moved for 2 s, or before "
                           "its trainer's first 'rendezvous done' or 'joined generation' "
                           "line (a pod started after t0)",
    "loss_to_end_s": "t0 -> the last step (the chief's scrape of step STEPS)",
    "seconds": "the job's apply -> phase Succeeded (polled every second)",
}


class Watch(PodWatch):
    """PodWatch that also records when each pod was first seen unschedulable."""

    def update(self, kind, pod, t):
        super().update(kind, pod, t)
        uid = (pod.get("metadata") or {}).get("uid")
        for c in (pod.get("status") or {}).get("conditions") or []:
            if c.get("type") == "PodScheduled" and c.get("status") == "False" and \
                    c.get("reason") == "Unschedulable":
                with self.lock:
                    p = self.pods.get(uid)
                    if p is not None and p.get("unschedulable") is None:
                        p["unschedulable"] = t
                        p["unschedulable_message"] = c.get("message")


class Sampler(threading.Thread):
    """(time, [uid of each worker pod Running]) every SAMPLE_S."""

    def __init__(self, watch):
        super().__init__(daemon=True)
        self.watch, self.series, self.done = watch, [], threading.Event()

    def run(self):
        while not self.done.is_set():
            running = [u for u, p in self.watch.snapshot().items()
                       if p.get("started") and p["gone"] is None and p.get("deleting") is None
                       and p.get("exit_code") is None]
            self.series.append((now(), running))
            time.sleep(SAMPLE_S)


class Logs(threading.Thread):
    """Every worker pod's trainer log, with the kubelet's timestamps, followed from its
    start into DIR/<pod>.<uid>.log (a pod deleted mid-run takes its log with it)."""

    def __init__(self, kube, watch, where):
        super().__init__(daemon=True)
        self.kube, self.watch, self.where = kube, watch, where
        self.procs, self.files, self.done = {}, {}, threading.Event()

    def run(self):
        while not self.done.is_set():
            for uid, p in self.watch.snapshot().items():
                if uid in self.procs or not p.get("started") or p["gone"] is not None:
                    continue
                path = os.path.join(self.where, "%s.%s.log" % (p["name"], uid[:8]))
                self.files[uid] = path
                with open(path, "w") as out:
                    self.procs[uid] = subprocess.Popen(
                        [self.kube.kubectl, "-n", self.kube.ns, "logs", "-f", "--timestamps",
                         p["name"], "-c", "trainer"], stdout=out, stderr=subprocess.DEVNULL)
            time.sleep(0.2)

    def stop(self):
        self.done.set()
        time.sleep(1)  # the followers of pods still running catch up
        for proc in self.procs.values():
            proc.terminate()
            proc.wait()

    def lines(self):
        """{uid: [(epoch seconds, text)]}"""
        got = {}
        for uid, path in self.files.items():
            got[uid] = []
            with open(path, errors="replace") as f:
                for line in f:
                    ts, _, text = line.rstrip("\n").partition(" ")
                    t = rfc3339(ts)
                    if t is not None:
                        got[uid].append((t, text))
        return got


def manifest(name, mode, ns):
    extra = "\n  recoveryTimeoutSeconds: %d" % RECOVERY_S
    if mode == "elastic":
        extra += "\n  elastic: {minWorkers: %d}" % MIN_WORKERS
    m = c_trainer_job(name, ns, WORKERS, "tutorial-cnn", 1, STEPS, BATCH, 0.001, EVERY,
                      "256Mi", extra)
    old = "resources: {requests: {cpu: 100m, memory: 256Mi}}"
    assert old in m
    return m.replace(old, "resources: {requests: {cpu: 100m, memory: 256Mi}, "
                          "limits: {%s: 1}}" % RES)


def slots(kube, node, n):
    """The node advertises n of RES (capacity and allocatable)."""
    path = RES.replace("/", "~1")
    ops = [{"op": "add", "path": "/status/%s/%s" % (f, path), "value": str(n)}
           for f in ("capacity", "allocatable")]
    kube.run("patch", "node", node, "--subresource=status", "--type=json", "-p", json.dumps(ops))


def filler(kube, name, image):
    return kube.run("apply", "-f", "-", stdin=json.dumps({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {"terminationGracePeriodSeconds": 0, "containers": [{
            "name": "pause", "image": image, "imagePullPolicy": "IfNotPresent",
            "resources": {"limits": {RES: 1}}}]}}))


def moving_at(series, times, t):
    """Whether the chief's step count went up within (t - STALL_S, t]: two scrapes of one
    chief there (or the last before it and one there) with the later count higher."""
    i = max(bisect.bisect_right(times, t - STALL_S) - 1, 0)
    j = bisect.bisect_right(times, t)
    return any(b[1] == a[1] and b[2] > a[2] for a, b in zip(series[i:j], series[i + 1:j]))


def idle_worker_seconds(samples, series, joined_at, t0, t_end):
    """The sum over samples in [t0, t_end] of (pods Running - workers training)."""
    times = [s[0] for s in series]
    total = 0.0
    for (t, running), (t_next, _) in zip(samples, samples[1:]):
        if t < t0 or t >= t_end:
            continue
        training = 0
        if moving_at(series, times, t):
            training = sum(1 for u in running if joined_at.get(u, 0) <= t)
        total += (len(running) - training) * (min(t_next, t_end) - t)
    return total


def one(kube, ns, node, image, name, mode, victim, hold, logdir):
    row = {"job": name, "mode": mode, "victim": victim}
    watch = Watch(kube, name)
    watch.start()
    followers = Logs(kube, watch, logdir)
    followers.start()
    scraper = Scraper(watch, name)
    scraper.start()
    sampler = Sampler(watch)
    sampler.start()
    fname = name + "-filler"
    slots(kube, node, WORKERS)
    t_apply = now()
    logs = {}
    try:
        kube.run("apply", "-f", "-", stdin=manifest(name, mode, ns))
        wait_for(lambda: (scraper.latest() or (0, 0, 0))[2] >= LOSS_AT - 30, 300,
                 "step %d on %s's chief" % (LOSS_AT - 30, name), step=0.05)
        # The filler in a fifth slot, which is then taken back: the victim's room is its.
        slots(kube, node, WORKERS + 1)
        filler(kube, fname, image)
        kube.run("wait", "--for=jsonpath={.status.phase}=Running", "pod/" + fname,
                 "--timeout=60s", timeout=70)
        slots(kube, node, WORKERS)
        wait_for(lambda: (scraper.latest() or (0, 0, 0))[2] >= LOSS_AT, 300,
                 "step %d on %s's chief" % (LOSS_AT, name), step=0.005)
        before = {p["name"]: p for p in watch.snapshot().values() if p["gone"] is None}
        vname = "%s-worker-%d" % (name, victim)
        vpod = before[vname]
        kube.run("delete", "pod", vname, "--wait=false")
        t0 = wait_for(lambda: watch.snapshot()[vpod["uid"]].get("deleting"), 30,
                      "the deletion of %s seen" % vname, step=0.005)
        pre_uids = {p["uid"] for p in before.values()}
        time.sleep(max(0.0, t0 + hold - now()))
        t_back = now()
        kube.run("delete", "pod", fname, "--wait=false")
        status = finish(kube, name, timeout=600)
        t_done = now()
        allpods = watch.snapshot()
        after = {p["name"]: p for p in sorted(allpods.values(), key=lambda p: p["seen"])}
    finally:
        scraper.done.set()
        sampler.done.set()
        followers.stop()
        watch.stop()
        ev = kube.run("get", "events", "--field-selector", "involvedObject.name=" + name,
                      "--sort-by=.lastTimestamp", "-o",
                      "jsonpath={range .items[*]}{.reason}: {.message}{\"\\n\"}{end}",
                      check=False)
        row["events"] = [e[:240] for e in ev.splitlines()[-12:]]
        kube.run("delete", "pod", fname, "--ignore-not-found", "--wait=false", check=False)
    series, samples = list(scraper.series), list(sampler.series)
    logs = followers.lines()

    # The replacement: the pod of the victim's name with a new uid, first seen unschedulable.
    reps = [p for p in allpods.values() if p["name"] == vname and p["uid"] != vpod["uid"]]
    uns = min((p["unschedulable"] for p in reps if p.get("unschedulable")), default=None)
    row["unschedulable_s"] = r3(uns - t0) if uns else None
    row["unschedulable_message"] = next((p["unschedulable_message"] for p in reps
                                         if p.get("unschedulable")), None)
    row["steps_at_loss"] = max((s[2] for s in series if s[0] < t0), default=None)

    # Where training went on from, and where the group before the loss had got to.
    resumed = reached = first = None
    if mode == "elastic":
        for uid, lines in logs.items():
            if uid in pre_uids:
                t, m = first_match(lines, r"elastic: generation \d+ of %d workers goes on "
                                          r"from step (\d+)" % (WORKERS - 1))
                if m:
                    resumed = int(m.group(1))
                    reached = max([s[2] for s in series if s[0] < t] + [resumed])
                    first = next((s for s in series if s[0] > t and s[2] > reached), None)
                    break
    else:
        new = [s for s in series if s[0] > t0 and s[1] not in pre_uids]
        resumed = new[0][3] if new else None
        reached = max((s[2] for s in series if s[1] in pre_uids), default=None)
        first = next((s for s in new if reached is not None and s[2] > reached), None)
    row.update(reached=reached, resumed_from=resumed,
               steps_trained_twice=None if None in (reached, resumed) else reached - resumed,
               t0_to_first_step_s=r3(first[0] - t0) if first else None)
    if first and uns:
        row["after_detection_s"] = r3(first[0] - uns)

    # When each pod started after t0 joined the training; back at 4 workers.
    joined_at = {}
    for uid, lines in logs.items():
        if uid not in pre_uids:
            t, _ = first_match(lines, JOINED)
            joined_at[uid] = t if t is not None else float("inf")
    for uid, p in allpods.items():
        if uid not in pre_uids and uid not in joined_at:
            joined_at[uid] = float("inf")  # gone before its log was read: never trained
    if mode == "elastic":
        rep_new = [p for p in reps if p["uid"] in logs]
        tj = None
        for p in rep_new:
            tj, _ = first_match(logs[p["uid"]], r"joined generation \d+")
        row["room_back_to_full_s"] = r3(tj - t_back) if tj and tj > t_back else None
    else:
        back = next((s for s in series if s[0] > t_back and s[1] not in pre_uids
                     and s[2] > s[3]), None)
        row["room_back_to_full_s"] = r3(back[0] - t_back) if back else None
    last = next((s for s in series if s[2] >= STEPS), None)
    t_end = last[0] if last else t_done
    row["loss_to_end_s"] = r3(t_end - t0)
    row["idle_worker_seconds"] = r3(idle_worker_seconds(samples, series, joined_at, t0, t_end))

    row["survivors"] = survivors(before, after, vname)
    row["survivors_unchanged"] = all(s["unchanged"] for s in row["survivors"].values())
    row["survivors_restarted"] = sum(1 for s in row["survivors"].values()
                                     if not s["unchanged"])
    row["status_restarts"] = dict(status.get("restarts") or {}, attempt=status.get("attempt", 0))
    row["phase"] = status.get("phase")
    row["weights_sha256"] = (status.get("result") or {}).get("weightsSha256")
    row["seconds"] = r3(t_done - t_apply)
    row["scrapes"] = len(series)
    cleanup(kube, name)
    return row


KEYS = ("unschedulable_s", "t0_to_first_step_s", "after_detection_s", "steps_trained_twice",
        "survivors_restarted", "idle_worker_seconds", "room_back_to_full_s", "loss_to_end_s",
        "seconds")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out")
    ap.add_argument("--kubectl", required=True)
    ap.add_argument("--namespace", required=True)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--hold", type=float, default=60.0)
    ap.add_argument("--modes", default=",".join(MODES), help="which modes run (elastic,today)")
    ap.add_argument("--victims", default=None, help="the victim of each round, comma-separated "
                    "worker indices 1..%d (default: drawn with the seed)" % (WORKERS - 1))
    ap.add_argument("--filler-image", default="kubetrain/pause:3.10")
    ap.add_argument("--setup", default="{}")
    ap.add_argument("--commit", default=None)
    ap.add_argument("--logs", default=None, help="where the pods' logs go (default: a "
                    "directory beside OUT)")
    a = ap.parse_args()
    logdir = a.logs or a.out + ".logs"
    os.makedirs(logdir, exist_ok=True)
    seed = a.seed if a.seed is not None else random.SystemRandom().randrange(1 << 31)
    victims = list(range(1, WORKERS))
    random.Random(seed).shuffle(victims)
    vict = [victims[r % len(victims)] for r in range(a.rounds)]
    if a.victims:
        vict = [int(v) for v in a.victims.split(",")]
        if any(v < 1 or v >= WORKERS for v in vict):
            sys.exit("elastic_cluster.py: --victims: worker indices 1..%d" % (WORKERS - 1))
        vict = [vict[r % len(vict)] for r in range(a.rounds)]
    modes = tuple(m for m in a.modes.split(",") if m)
    if not modes or any(m not in MODES for m in modes):
        sys.exit("elastic_cluster.py: --modes: a list of %s" % ",".join(MODES))
    log("seed %d: victims by round %s" % (seed, vict))
    kube = Kube(a.kubectl, a.namespace)
    node = kube.run("get", "nodes", "-o", "jsonpath={.items[0].metadata.name}").strip()
    t_start = now()
    rows = []
    total = a.rounds * len(modes)

    def write():
        med = {m: {k: median([x for x in rows if x["mode"] == m and "error" not in x], k)
                   for k in KEYS} for m in MODES}
        el = [x for x in rows if x["mode"] == "elastic"]
        good = [x for x in el if "error" not in x]
        met = {
            "elastic: training goes on within the detection + 2 s (every run)":
                bool(el) and len(good) == len(el) and
                all(x.get("after_detection_s") is not None and x["after_detection_s"] <= 2
                    for x in el),
            "elastic: 0 steps trained twice (every run)":
                bool(el) and all(x.get("steps_trained_twice") == 0 for x in el),
            "elastic: 0 survivors restarted (every run)":
                bool(el) and all(x.get("survivors_restarted") == 0 for x in el),
        }
        doc = {
            "benchmark": "elastic-cluster",
            "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "commit": a.commit,
            "machine": {"uname_m": os.uname().machine, "nproc": os.cpu_count(),
                        "cpu": cpu_model(),
                        "load_avg_at_end": [round(x, 2) for x in os.getloadavg()]},
            "setup": dict(json.loads(a.setup), seed=seed, victims_by_round=vict,
                          rounds=a.rounds, hold_s=a.hold, modes_run=list(modes),
                          job="%d workers, tutorial-cnn, fashion-mnist, 1 epoch x %d steps, "
                              "per-worker batch %d, sgd, checkpoint every %d steps (keep 2) on "
                              "the claim ckpt, recoveryTimeoutSeconds %d, requests 100m CPU / "
                              "256Mi and one %s per pod; a worker's pod deleted once the "
                              "chief's /metrics reports step %d, while a filler holds its "
                              "room for %g s" % (WORKERS, STEPS, BATCH, EVERY, RECOVERY_S, RES,
                                                 LOSS_AT, a.hold),
                          cluster="e2e/cluster/up.sh full: one node (this machine), kubelet on "
                                  "containerd, CNI bridge, CoreDNS; the chart with its defaults "
                                  "(operator.restartBackoff.baseSeconds 10)",
                          modes={"elastic": "spec.elastic.minWorkers %d" % MIN_WORKERS,
                                 "today": "no spec.elastic"},
                          seconds=round(now() - t_start)),
            "definitions": DEFINITIONS,
            "targets": {"elastic: training goes on at 3 after the detection": "<= 2 s",
                        "elastic: steps trained twice": 0,
                        "elastic: survivors restarted": 0},
            "runs": rows,
            "median": med,
            "met": met,
        }
        if len(rows) < total:
            doc["note"] = "partial: %d of %d runs" % (len(rows), total)
        with open(a.out + ".tmp", "w") as f:
            json.dump(doc, f, indent=1)
            f.write("\n")
        os.replace(a.out + ".tmp", a.out)
        return doc

    os.makedirs(os.path.dirname(a.out) or ".", exist_ok=True)
    for r in range(a.rounds):
        for mode in (modes if r % 2 == 0 else modes[::-1]):
            name = "el%d-%s" % (r + 1, mode)
            try:
                row = one(kube, a.namespace, node, a.filler_image, name, mode, vict[r], a.hold,
                          logdir)
            except (RuntimeError, subprocess.TimeoutExpired, KeyError) as e:
                row = {"job": name, "mode": mode, "victim": vict[r], "error": str(e)[:400]}
                kube.run("delete", "pod", name + "-filler", "--ignore-not-found",
                         "--wait=false", check=False)
                cleanup(kube, name)
            row["round"] = r + 1
            rows.append(row)
            log(json.dumps({k: row.get(k) for k in ("job", "victim", "error") + KEYS
                            + ("reached", "resumed_from", "survivors_unchanged")
                            if k in row}))
            write()
    slots_off = [{"op": "remove", "path": "/status/%s/%s" % (f, RES.replace("/", "~1"))}
                 for f in ("capacity", "allocatable")]
    kube.run("patch", "node", node, "--subresource=status", "--type=json", "-p",
             json.dumps(slots_off), check=False)
    doc = write()
    print(json.dumps({"median": doc["median"], "met": doc["met"]}, indent=1))


if __name__ == "__main__":
    main()
