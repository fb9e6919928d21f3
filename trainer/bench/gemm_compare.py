#!/usr/bin/env python3
"""make bench-gemm: the tutorial-cnn step's GEMMs (gemm_floor) with each backend the
trainer can be built with (OpenBLAS, BLIS, oneDNN), 1 and 2 threads, interleaved over
ROUNDS rounds in a fresh order each round so that machine noise hits all alike.

Two measures per run: wall time per step, and CPU time per step of the process (from
wait4). On a shared machine the second is the steadier one for 1 thread: it leaves out
the time the process waited for a core. Medians and ratios to OpenBLAS go to OUT_JSON.

  gemm_compare.py OUT_JSON FLOOR_openblas FLOOR_blis FLOOR_dnnl
"""
import datetime
import json
import os
import random
import statistics
import subprocess
import sys
from machine import machine  # trainer/bench/machine.py, beside this script

ROUNDS = int(os.environ.get("ROUNDS", "5"))
SECONDS = os.environ.get("SECONDS_PER_RUN", "2")


def run(argv, threads):
    env = dict(os.environ, OPENBLAS_NUM_THREADS=str(threads), BLIS_NUM_THREADS=str(threads),
               OMP_NUM_THREADS=str(threads))
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, env=env, text=True)
    out = p.stdout.read()
    _, status, ru = os.wait4(p.pid, 0)
    p.stdout.close()
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit("bench-gemm: %s failed" % " ".join(argv))
    r = json.loads(out)
    r["cpu_ms_per_step"] = (ru.ru_utime + ru.ru_stime) * 1e3 / r["steps"]
    return r


def main():
    out_path, floors = sys.argv[1], sys.argv[2:]
    runs = {}
    for rnd in range(ROUNDS):
        order = [(f, t) for f in floors for t in (1, 2)]
        random.shuffle(order)
        load = os.getloadavg()[0]
        for f, t in order:
            r = run([f, "64", SECONDS, str(t)], t)
            key = "%s_t%d" % (r["backend"], t)
            runs.setdefault(key, []).append(r)
            print("round %d load %.1f %-12s step %.2f ms wall, %.2f ms cpu" %
                  (rnd + 1, load, key, r["step_ms"], r["cpu_ms_per_step"]), flush=True)
    med = {}
    for key, rs in runs.items():
        med[key] = {
            "library": rs[0].get("library"), "kernels": rs[0].get("kernels"),
            "step_ms": statistics.median(r["step_ms"] for r in rs),
            "cpu_ms_per_step": statistics.median(r["cpu_ms_per_step"] for r in rs),
            "calls_ms": {c: statistics.median(r["calls_ms"][c] for r in rs) for c in rs[0]["calls_ms"]},
        }
    ratios = {}
    for key, m in med.items():
        base = med.get("openblas_" + key.split("_")[-1])
        if base:
            ratios[key] = {"wall_speedup_vs_openblas": base["step_ms"] / m["step_ms"],
                           "cpu_speedup_vs_openblas": base["cpu_ms_per_step"] / m["cpu_ms_per_step"]}
    result = {
        "benchmark": "tutorial-cnn step GEMMs (gemm_floor 64 %s THREADS) per backend" % SECONDS,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "machine": machine(load_avg_at_end=os.getloadavg()),
        "rounds": ROUNDS, "median": med, "ratios": ratios,
    }
    with open(out_path, "w") as f:
        json.dump(result, f, indent=1)
        f.write("\n")
    print(json.dumps(ratios, indent=1))


if __name__ == "__main__":
    main()
