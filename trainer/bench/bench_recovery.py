#!/usr/bin/env python3
"""Live recovery benchmark: 4 workers under `kubetrain-trainer launch`, the chief
checkpointing every 50 steps; worker 2 is SIGKILLed mid-epoch, 25 steps after a
checkpoint. Measured, with live recovery (--recovery-timeout 120) and with the group
restart (--recovery-timeout 0), interleaved over ROUNDS rounds: the seconds from the kill
to the first step completed after it and to the step of the kill passed again (the
chief's Prometheus steps counter, polled every 5 ms), the steps trained twice (the global step reached before the kill minus the step
training resumed from), and whether the run ended with the uninterrupted run's weights.

  bench_recovery.py TRAINER DATA_DIR OUT.json [ROUNDS]
"""
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from machine import machine  # trainer/bench/machine.py, beside this script

WORKERS, VICTIM, EVERY, KILL_AT = 4, 2, 50, 125
JOB = ["--model", "tutorial-cnn", "--per-worker-batch", "16", "--epochs", "1",
       "--steps-per-epoch", "200", "--checkpoint-every-steps", str(EVERY), "--print-weights-hash"]


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def scrape(port):
    """The chief's (steps_total, start_step), or None while nothing answers."""
    try:
        with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=1) as r:
            text = r.read().decode()
    except OSError:
        return None
    got = dict(re.findall(r"^(kubetrain_steps_total|kubetrain_start_step) (\S+)$", text, re.M))
    if len(got) != 2:
        return None
    return int(float(got["kubetrain_steps_total"])), int(float(got["kubetrain_start_step"]))


def hashes(text):
    return set(re.findall(r"weights-sha256: ([0-9a-f]{64})", text))


def run(trainer, data, extra, kill):
    """One launch; with kill, SIGKILL worker VICTIM once the chief reports KILL_AT steps."""
    tmp = tempfile.mkdtemp(prefix="kt-bench-recovery-")
    port = free_port()
    err_path = os.path.join(tmp, "err")
    cmd = [trainer, "launch", "--workers", str(WORKERS), *JOB, "--data-dir", data,
           "--checkpoint-dir", os.path.join(tmp, "ck"), "--metrics-port", str(port), *extra]
    t0 = time.monotonic()
    with open(err_path, "w") as err:
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True)
        row = {}
        if kill:
            seen = None
            while p.poll() is None and seen is None:
                s = scrape(port)
                if s and s[0] >= KILL_AT:
                    seen = s
                time.sleep(0.005)
            pids = re.findall(r"launch: worker %d: pid (\d+)" % VICTIM, open(err_path).read())
            os.kill(int(pids[-1]), signal.SIGKILL)
            t_kill = time.monotonic()
            # a step that completed between the scrape and the kill is not one after it
            now = scrape(port)
            reached, start0 = now if now else seen
            first = regained = resumed = None
            while p.poll() is None and regained is None:
                s = scrape(port)
                if s:
                    steps, start = s
                    restarted = start != start0  # a new chief: the group restarted
                    if first is None and steps > (start if restarted else reached):
                        first = time.monotonic() - t_kill
                        resumed = start if restarted else reached
                    if first is not None and steps > reached:
                        regained = time.monotonic() - t_kill
                time.sleep(0.005)
            row = {"killed_at_step": reached, "kill_to_first_step_s": first,
                   "kill_to_step_regained_s": regained,
                   "steps_trained_twice": reached - resumed if first is not None else None}
        out, _ = p.communicate()
    row["seconds"] = time.monotonic() - t0
    row["exit_code"] = p.returncode
    row["hashes"] = sorted(hashes(out))
    log = open(err_path).read()
    row["group_restarts"] = len(re.findall(r"restart \d+/\d+: the group starts again", log))
    row["replacements"] = len(re.findall(r"live recovery: starting worker \d+ again alone", log))
    shutil.rmtree(tmp, ignore_errors=True)
    return row


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    trainer, data, out = sys.argv[1:4]
    rounds = int(sys.argv[4]) if len(sys.argv) > 4 else 1
    ref = run(trainer, data, [], kill=False)
    modes = {"live": ["--recovery-timeout", "120"], "group_restart": ["--recovery-timeout", "0"]}
    rows = []
    for r in range(rounds):
        for name, extra in modes.items():
            row = run(trainer, data, extra, kill=True)
            row.update(mode=name, round=r + 1, same_weights=row["hashes"] == ref["hashes"])
            rows.append(row)
            print(json.dumps(row), flush=True)

    def med(mode, key):
        vals = [x[key] for x in rows if x["mode"] == mode and x[key] is not None]
        return statistics.median(vals) if vals else None
    keys = ("kill_to_first_step_s", "kill_to_step_regained_s", "steps_trained_twice", "seconds")
    median = {m: {k: med(m, k) for k in keys} for m in modes}
    result = {"benchmark": "recovery", "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
              "machine": machine(trainer, load_avg_at_end=list(os.getloadavg())),
              "job": "tutorial-cnn, per-worker batch 16, 1 epoch x 200 steps, %d workers on "
                     "127.0.0.1 under launch, checkpoint every %d steps; worker %d SIGKILLed once "
                     "the chief reports step %d" % (WORKERS, EVERY, VICTIM, KILL_AT),
              "note": "kill_to_first_step_s: from the SIGKILL to the first step completed after "
                      "it, seen on the chief's /metrics (polled every 5 ms); "
                      "kill_to_step_regained_s: until the step of the kill is passed again; "
                      "steps_trained_twice: "
                      "the global step reached before the kill minus the step training resumed "
                      "from; same_weights: the final weights hash equals the uninterrupted run's; "
                      "the machine is shared with other jobs (see load_avg_at_end)",
              "uninterrupted_seconds": ref["seconds"],
              "rounds": rows, "median": median,
              "met": {"live: no step trained twice":
                      all(x["steps_trained_twice"] == 0 for x in rows if x["mode"] == "live"),
                      "every run ends with the uninterrupted weights":
                      all(x["same_weights"] for x in rows)}}
    os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
    with open(out, "w") as f:
        json.dump(result, f, indent=1)
    print(json.dumps({"median": median, "met": result["met"]}, indent=1))


if __name__ == "__main__":
    main()
