#!/usr/bin/env python3
"""make bench-recovery-cluster's driver (operator/bench/recovery-cluster.sh brings up the
full local cluster, installs the chart and runs this): live recovery against the group
restart with real pods.

Each run is one TrainingJob of 4 C-trainer workers (tutorial-cnn, Fashion-MNIST, 1 epoch
of 200 steps, per-worker batch 16, a checkpoint every 50 steps, 100m CPU requested per
pod). Once the chief's /metrics reports step KILL_AT (25 steps after a checkpoint) one
worker is disrupted: "delete" is `kubectl delete pod` (SIGTERM: the pod leaves after its
step), "kill" a SIGKILL of its trainer process from the node (the pod fails with 137).
Per round the same victim (a seeded permutation of the 4 ranks, the chief included) goes
through both modes: "live" (recoveryTimeoutSeconds left at its default) and
"group_restart" (recoveryTimeoutSeconds: 0), their order alternating by round. One
undisturbed run of the same spec first gives the reference weights.

Measured per run, on this machine's clock (the node is this machine): the chief's
/metrics polled every 20 ms from its pod IP (the replacement's when the chief is the
victim), the pods watched (kubectl get -w), the trainers' log lines with the kubelet's
timestamps, the job's status. DEFINITIONS in the JSON says what each figure is.

  recovery_cluster.py OUT.json --kubectl BIN --namespace NS --containerd ADDR
      [--rounds N] [--seed S] [--disruptions delete,kill] [--setup JSON] [--commit C]
"""
import argparse
import json
import os
import random
import subprocess
import sys
import time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
sys.path[:0] = [os.path.join(ROOT, "trainer", "bench"), os.path.join(ROOT, "e2e", "lib")]
from machine import cpu_model  # noqa: E402  trainer/bench/machine.py
from ktcluster import (Kube, PodWatch, Scraper, c_trainer_job, cleanup, finish,  # noqa: E402
                       median, r3,
                       first_match, kill_trainer, log, now, pod_logs, rfc3339, survivors,
                       wait_for)

WORKERS, EVERY, STEPS, BATCH, KILL_AT = 4, 50, 200, 16, 125
MODES = ("live", "group_restart")

DEFINITIONS = {
    "t0": "the disruption: the pod watch's event carrying the victim's deletionTimestamp "
          "(delete; `kubectl delete pod` was started delete_command_to_t0_s before), or the "
          "SIGKILL (kill)",
    "steps_at_disruption": "the chief's kubetrain_steps_total last scraped before t0",
    "reached": "the highest global step the group before the disruption completed: the "
               "chief's /metrics before the first step after recovery, and a survivor's "
               "'asked to stop after step S' line; with delete the pods stop after the step "
               "that carries the stop request, one or two past steps_at_disruption",
    "resumed_from": "the step training resumed from: the state step of 'live recovery: "
                    "generation G formed; state of step S' (live), the new chief's "
                    "kubetrain_start_step ('resuming from ... global step S') (group restart)",
    "steps_trained_twice": "reached - resumed_from",
    "t0_to_first_step_s": "t0 -> the first step completed after training resumed (the "
                          "first scrape of a chief of the recovered group with "
                          "kubetrain_steps_total > resumed_from)",
    "t0_to_step_regained_s": "t0 -> the first scrape with kubetrain_steps_total > reached",
    "victim_gone_s": "t0 -> the victim's pod object deleted (watch event)",
    "replacement_seen_s": "t0 -> the pod of the victim's name with a new uid first seen by "
                          "the watch (its creation; in a group restart the new attempt's pod)",
    "startup_s": "the replacement's metadata.creationTimestamp -> its trainer container's "
                 "state.running.startedAt (both whole seconds: +-1 s)",
    "startup_first_line_s": "the replacement first seen -> its trainer's first log line (the "
                            "kubelet's timestamp)",
    "first_line": "that line, without its timestamp",
    "first_line_to_first_step_s": "the replacement's first log line -> the first step after",
    "replacement_timeline": "the replacement's first log lines, [seconds after t0 (the kubelet's "
    "timestamp), text]",
    "recovery_minus_startup_s": "t0_to_first_step_s - startup_first_line_s (the target: <= 2); "
    "startup_first_line_s rather than startup_s, whose whole-second timestamps make it 0 or "
    "1 s at random",
    "survivors": "the pods of the other three ranks: uid and the trainer's restartCount "
                 "before t0 and at the end; unchanged is the same uid and restartCount",
    "status_restarts": "the job's status.restarts at the end (application, disruption, "
                       "replaced, lastStepsLost, stepsLost) and status.attempt",
    "same_weights": "status.result.weightsSha256 equals the undisturbed reference run's",
}


def manifest(name, mode, ns):
    rt = "\n  recoveryTimeoutSeconds: 0" if mode == "group_restart" else ""
    return c_trainer_job(name, ns, WORKERS, "tutorial-cnn", 1, STEPS, BATCH, 0.001, EVERY,
                         "256Mi", rt)


def reference(kube, ns):
    name = "rc-ref"
    t = now()
    kube.run("apply", "-f", "-", stdin=manifest(name, "live", ns))
    st = finish(kube, name)
    row = {"job": name, "phase": st.get("phase"), "seconds": r3(now() - t),
           "weights_sha256": (st.get("result") or {}).get("weightsSha256")}
    cleanup(kube, name)
    return row


def one(kube, ns, containerd, name, mode, disruption, victim, ref_hash):
    row = {"job": name, "mode": mode, "disruption": disruption, "victim": victim}
    watch = PodWatch(kube, name)
    watch.start()
    scraper = Scraper(watch, name)
    scraper.start()
    t_apply = now()
    try:
        kube.run("apply", "-f", "-", stdin=manifest(name, mode, ns))
        wait_for(lambda: (scraper.latest() or (0, 0, 0))[2] >= KILL_AT, 300,
                 "step %d on %s's chief" % (KILL_AT, name), step=0.005)
        before = {p["name"]: p for p in watch.snapshot().values() if p["gone"] is None}
        vname = "%s-worker-%d" % (name, victim)
        vpod = before[vname]
        last = scraper.latest()
        if disruption == "delete":
            tc = now()
            kube.run("delete", "pod", vname, "--wait=false")
            # the deletion itself: the watch's event that carries its deletionTimestamp
            t0 = wait_for(lambda: watch.snapshot()[vpod["uid"]].get("deleting"), 30,
                          "the deletion of %s seen" % vname, step=0.005)
            row["delete_command_to_t0_s"] = r3(t0 - tc)
            last = max((s for s in scraper.series if s[0] < t0), key=lambda s: s[0],
                       default=last)
        else:
            t0 = kill_trainer(containerd, vpod["cid"])
        row["steps_at_disruption"] = last[2]
        row["apply_to_disruption_s"] = r3(t0 - t_apply)
        pre_uids = {p["uid"] for p in before.values()}
        # The recovered group has trained 8 steps past the disruption: read its logs while
        # every pod still runs (a finished job's pods may go with their logs).
        wait_for(lambda: [s for s in scraper.series if s[0] > t0 and s[2] >= last[2] + 8
                          and (mode == "live" or s[1] not in pre_uids)],
                 300, "%s training again after the disruption" % name, step=0.02)
        pods = {p["name"]: p for p in watch.snapshot().values() if p["gone"] is None}
        logs = {n: pod_logs(kube, n) for n in sorted(pods)}
        status = finish(kube, name)
        allpods = watch.snapshot()
        # each name's newest pod, deleted or not (a finished job's pods may be cleaned up)
        after = {p["name"]: p for p in sorted(allpods.values(), key=lambda p: p["seen"])}
    finally:
        scraper.done.set()
        watch.stop()
    series = list(scraper.series)

    # Where training resumed from, and where the group before the disruption had got to.
    resumed = stopped = None
    for n, lines in logs.items():
        _, m = first_match(lines, r"live recovery: generation \d+ formed; state of step (\d+)")
        if m and mode == "live":
            resumed = int(m.group(1))
        _, m = first_match(lines, r"asked to stop after step (\d+)")
        if m:
            stopped = max(stopped or 0, int(m.group(1)))
    if mode == "group_restart":
        new = [s for s in series if s[0] > t0 and s[1] not in pre_uids]
        resumed = new[0][3] if new else None
        _, m = first_match(logs.get(name + "-worker-0", []), r"resuming from .*global step (\d+)")
        row["resumed_from_log"] = int(m.group(1)) if m else None
    ok = (lambda uid: True) if mode == "live" else (lambda uid: uid not in pre_uids)
    first = None
    if resumed is not None:
        first = next((s for s in series if s[0] > t0 and ok(s[1]) and s[2] > resumed), None)
    t_first = first[0] if first else None
    old = [s[2] for s in series if s[1] in pre_uids and (t_first is None or s[0] < t_first)
           and not (mode == "live" and s[0] > t0 and resumed is not None and s[2] > resumed)]
    reached = max(old + ([stopped] if stopped is not None else [])) if old else stopped
    regained = next((s for s in series if t_first is not None and s[0] >= t_first and ok(s[1])
                     and reached is not None and s[2] > reached), None)
    row.update(reached=reached, resumed_from=resumed,
               steps_trained_twice=None if None in (reached, resumed) else reached - resumed,
               t0_to_first_step_s=r3(t_first - t0) if t_first else None,
               t0_to_step_regained_s=r3(regained[0] - t0) if regained else None)

    # The victim's pod and its replacement (the pod of its name with a new uid).
    vold = allpods.get(vpod["uid"], {})
    row["victim_gone_s"] = r3(vold["gone"] - t0) if vold.get("gone") else None
    row["victim_exit_code"] = vold.get("exit_code")
    rep = after.get(vname)
    if rep and rep["uid"] != vpod["uid"]:
        lines = logs.get(vname, [])
        created, started = rfc3339(rep.get("created") or ""), rfc3339(rep.get("started") or "")
        row["replacement_seen_s"] = r3(rep["seen"] - t0)
        row["startup_s"] = r3(started - created) if created and started else None
        if lines:
            row["startup_first_line_s"] = r3(lines[0][0] - rep["seen"])
            row["first_line"] = lines[0][1][:160]
            row["first_line_to_first_step_s"] = r3(t_first - lines[0][0]) if t_first else None
        # Where the replacement's time goes: its first lines, seconds after t0.
        row["replacement_timeline"] = [[r3(t - t0), x[:140]] for t, x in lines[:14]]
        tj, _ = first_match(lines, r"joined generation \d+: state of step")
        row["replacement_joined_s"] = r3(tj - t0) if tj else None
        if row.get("startup_first_line_s") is not None and t_first:
            row["recovery_minus_startup_s"] = r3(t_first - t0 - row["startup_first_line_s"])
    row["survivors"] = survivors(before, after, vname)
    row["survivors_unchanged"] = all(s["unchanged"] for s in row["survivors"].values())
    row["status_restarts"] = dict(status.get("restarts") or {}, attempt=status.get("attempt", 0))
    row["phase"] = status.get("phase")
    row["weights_sha256"] = (status.get("result") or {}).get("weightsSha256")
    row["same_weights"] = row["weights_sha256"] is not None and row["weights_sha256"] == ref_hash
    row["seconds"] = r3(now() - t_apply)
    row["scrapes"] = len(series)
    cleanup(kube, name)
    return row


KEYS = ("t0_to_first_step_s", "t0_to_step_regained_s", "steps_trained_twice", "startup_s",
        "startup_first_line_s", "replacement_seen_s", "victim_gone_s",
        "recovery_minus_startup_s", "seconds")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out")
    ap.add_argument("--kubectl", required=True)
    ap.add_argument("--namespace", required=True)
    ap.add_argument("--containerd", required=True)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--disruptions", default="delete,kill")
    ap.add_argument("--setup", default="{}")
    ap.add_argument("--commit", default=None)
    a = ap.parse_args()
    seed = a.seed if a.seed is not None else random.SystemRandom().randrange(1 << 31)
    victims = list(range(WORKERS))
    random.Random(seed).shuffle(victims)
    disruptions = [d for d in a.disruptions.split(",") if d]
    for d in disruptions:
        if d not in ("delete", "kill"):
            sys.exit("recovery_cluster.py: unknown disruption %s" % d)
    log("seed %d: victims by round %s" % (seed, [victims[r % WORKERS] for r in range(a.rounds)]))

    def write(total):
        """The JSON from the runs so far; while fewer than total, it says it is partial."""
        med = {d: {m: {k: median([x for x in rows if x["mode"] == m and x["disruption"] == d
                                    and "error" not in x], k) for k in KEYS}
                   for m in MODES} for d in disruptions}

        def met_for(d):
            live = [x for x in rows if x["mode"] == "live" and x["disruption"] == d]
            good = [x for x in live if "error" not in x]
            rms = med[d]["live"]["recovery_minus_startup_s"]
            return {
                "live: recovery <= the replacement's start-up + 2 s (median)":
                    rms is not None and rms <= 2,
                "live: recovery <= the replacement's start-up + 2 s (runs)":
                    "%d of %d" % (sum(1 for x in good
                                      if x.get("recovery_minus_startup_s") is not None
                                      and x["recovery_minus_startup_s"] <= 2), len(live)),
                "live: 0 steps trained twice (every run)":
                    bool(live) and all(x.get("steps_trained_twice") == 0 for x in live),
                "live: the surviving pods' uids and restart counts unchanged (every run)":
                    bool(live) and all(x.get("survivors_unchanged") for x in live),
                "every run ends with the undisturbed run's weights":
                    all(x.get("same_weights") for x in rows if x["disruption"] == d),
            }
        doc = {
            "benchmark": "recovery-cluster",
            "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "commit": a.commit,
            "machine": {"uname_m": os.uname().machine, "nproc": os.cpu_count(),
                        "cpu": cpu_model(),
                        "load_avg_at_end": [round(x, 2) for x in os.getloadavg()]},
            "setup": dict(json.loads(a.setup), seed=seed,
                          victims_by_round=[victims[r % WORKERS] for r in range(a.rounds)],
                          rounds=a.rounds, disruptions=disruptions,
                          job="%d workers, tutorial-cnn, fashion-mnist, 1 epoch x %d steps, "
                              "per-worker batch %d, sgd, checkpoint every %d steps (keep 2) on "
                              "the claim ckpt, requests 100m CPU / 256Mi per pod; disrupted once "
                              "the chief's /metrics reports step %d" %
                              (WORKERS, STEPS, BATCH, EVERY, KILL_AT),
                          cluster="e2e/cluster/up.sh full: one node (this machine), kubelet on "
                                  "containerd, CNI bridge, CoreDNS; the chart with its defaults "
                                  "(operator.restartBackoff.baseSeconds 10)",
                          modes={"live": "spec.recoveryTimeoutSeconds absent (default 120)",
                                 "group_restart": "spec.recoveryTimeoutSeconds: 0"},
                          seconds=round(now() - t_start)),
            "definitions": DEFINITIONS,
            "targets": {"live: recovery - the replacement's start-up": "<= 2 s",
                        "live: steps trained twice": 0,
                        "live: the surviving pods' restart counts": "unchanged"},
            "reference": ref,
            "runs": rows,
            "median": med,
            "met": {d: met_for(d) for d in disruptions},
        }
        if len(rows) < total:
            doc["note"] = ("partial: %d of %d runs; the run was stopped before the "
                           "rest" % (len(rows), total))
        with open(a.out + ".tmp", "w") as f:
            json.dump(doc, f, indent=1)
            f.write("\n")
        os.replace(a.out + ".tmp", a.out)
        return doc

    kube = Kube(a.kubectl, a.namespace)
    t_start = now()
    ref = reference(kube, a.namespace)
    log("reference: %s" % json.dumps(ref))
    rows = []
    total = a.rounds * len(disruptions) * len(MODES)
    os.makedirs(os.path.dirname(a.out) or ".", exist_ok=True)
    for r in range(a.rounds):
        victim = victims[r % WORKERS]
        for d in disruptions:
            for mode in (MODES if r % 2 == 0 else MODES[::-1]):
                name = "rc%d-%s-%s" % (r + 1, d, "live" if mode == "live" else "group")
                try:
                    row = one(kube, a.namespace, a.containerd, name, mode, d, victim,
                              ref["weights_sha256"])
                except (RuntimeError, subprocess.TimeoutExpired, KeyError) as e:
                    row = {"job": name, "mode": mode, "disruption": d, "victim": victim,
                           "error": str(e)[:400]}
                    cleanup(kube, name)
                row["round"] = r + 1
                rows.append(row)
                log(json.dumps({k: row.get(k) for k in ("job", "victim", "error") + KEYS
                                + ("reached", "resumed_from", "same_weights",
                                   "survivors_unchanged") if k in row}))
                write(total)

    doc = write(len(rows))
    print(json.dumps({"median": doc["median"], "met": doc["met"]}, indent=1))


if __name__ == "__main__":
    main()
