#!/usr/bin/env python3
"""make bench-gpu: tutorial-cnn on one CUDA device, kubetrain-trainer (make GPU=1) against
PyTorch eager and torch.compile (torch_gpu_peer.py), batch 64 and 512, interleaved over
ROUNDS rounds, medians reported; what the step's CUDA graphs bring (--cuda-graphs=false
against the default); and the cost of the nccl collective at one rank (--collective nccl
against the local one). Writes OUT_JSON with the device, driver and library versions,
date and machine, again after every run: a run stopped at a time limit keeps what it
measured ("runs_done" says how far it got). A series whose run fails (a peer that cannot
compile, a step that cannot be captured) is named in "failed", not run again, and makes
the exit status 1; the other series go on. Without a CUDA device it says skipped, writes
nothing and exits 0.

  bench_gpu.py TRAINER VENV_PYTHON DATA_DIR OUT_JSON

GPU_BENCH_STEPS (default 64:400,512:100): the batches and each one's timed steps.
"""
import datetime
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import machine as host  # trainer/bench/machine.py, beside this script

ROUNDS = int(os.environ.get("ROUNDS", "3"))
HERE = os.path.dirname(os.path.abspath(__file__))
STEPS = {int(b): int(s) for b, s in (kv.split(":") for kv in
         os.environ.get("GPU_BENCH_STEPS", "64:400,512:100").split(","))}
# Per round and batch, in this order: a run cut short by a time limit has the headline
# pair (kubetrain and PyTorch eager) first, then the nccl cost, then the rest.
SERIES = ("kubetrain", "torch_eager", "kubetrain_nccl", "kubetrain_no_graphs", "torch_compile")


class RunFailed(Exception):
    pass


def run(argv):
    p = subprocess.run(argv, capture_output=True, text=True)
    if p.returncode != 0:
        raise RunFailed("%s exited %d: %s" % (" ".join(argv), p.returncode,
                                              p.stderr.strip()[-2000:]))
    return p


def kubetrain(trainer, data_dir, batch, collective, graphs=True):
    """samples/s of the second epoch (the first one plans cuDNN and warms up), and the
    device as the trainer names it."""
    with tempfile.TemporaryDirectory() as d:
        mf = os.path.join(d, "m.jsonl")
        p = run([trainer, "train", "--device", "gpu", "--model", "tutorial-cnn", "--data-dir",
                 data_dir, "--per-worker-batch", str(batch), "--epochs", "2",
                 "--steps-per-epoch", str(STEPS[batch]), "--optimizer", "sgd", "--lr", "0.001",
                 "--collective", collective, "--metrics-file", mf,
                 "--cuda-graphs=%s" % ("true" if graphs else "false")])
        epochs = [e for e in map(json.loads, open(mf)) if e.get("event") == "epoch"]
    off = re.search(r".*CUDA graphs off.*", p.stderr)
    if graphs and off:  # a failed capture: the row would measure the step without graphs
        raise RunFailed("the step's CUDA graph was not captured: " + off.group(0))
    dev = re.search(r"training on CUDA device \d+ of \d+: (.*)", p.stderr)
    return epochs[-1]["samples_per_sec"], {"kubetrain_device": dev.group(1) if dev else "?"}


def torch_peer(py, data_dir, batch, mode):
    p = run([py, os.path.join(HERE, "torch_gpu_peer.py"), data_dir, str(batch),
             str(max(1, STEPS[batch] // 2)), str(STEPS[batch]), mode])
    t = json.loads(p.stdout.strip().splitlines()[-1])
    return t["samples_per_sec"], {k: t[k] for k in ("torch", "cuda", "cudnn", "device")}


def measure(series, trainer, py, data_dir, batch):
    if series == "kubetrain":
        return kubetrain(trainer, data_dir, batch, "auto")
    if series == "kubetrain_nccl":
        return kubetrain(trainer, data_dir, batch, "nccl")
    if series == "kubetrain_no_graphs":
        return kubetrain(trainer, data_dir, batch, "auto", graphs=False)
    return torch_peer(py, data_dir, batch, series[len("torch_"):])


def summarize(res):
    """Medians of what has run, and each ratio whose two sides have."""
    summary = {}
    for b, r in res.items():
        med = {k: statistics.median(v) for k, v in r.items() if v}
        ratios = {"kubetrain_over_torch_eager": ("kubetrain", "torch_eager"),
                  "kubetrain_over_torch_compile": ("kubetrain", "torch_compile"),
                  "cuda_graphs_speedup": ("kubetrain", "kubetrain_no_graphs")}
        s = {"samples_per_sec_median": med, "runs": r}
        for name, (num, den) in ratios.items():
            if num in med and den in med:
                s[name] = med[num] / med[den]
        if "kubetrain" in med and "kubetrain_nccl" in med:
            s["nccl_one_rank_cost"] = 1.0 - med["kubetrain_nccl"] / med["kubetrain"]
        summary[str(b)] = s
    return summary


def write(out, doc):
    os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
    with open(out + ".tmp", "w") as f:
        json.dump(doc, f, indent=1)
    os.replace(out + ".tmp", out)


def main():
    trainer, py, data_dir, out = sys.argv[1:5]
    probe = subprocess.run([trainer, "train", "--device", "gpu", "--epochs", "1",
                            "--steps-per-epoch", "1", "--data-dir", data_dir],
                           capture_output=True, text=True)
    if probe.returncode != 0:
        print("bench-gpu: skipped: %s" % probe.stderr.strip().splitlines()[-1])
        return 0
    res = {b: {s: [] for s in SERIES} for b in STEPS}
    doc = {"benchmark": "tutorial-cnn on one GPU, SGD lr 0.001, FP32 (no TF32 on either side)",
           "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "machine": host.machine(), "rounds": ROUNDS, "timed_steps": STEPS,
           "runs_planned": ROUNDS * len(STEPS) * len(SERIES), "runs_done": 0,
           "environment": {}, "failed": {},
           "targets": {"kubetrain_over_torch_eager_at_64": ">= 1.5",
                       "nccl_one_rank_cost": "<= 0.03"}}
    for rnd in range(1, ROUNDS + 1):
        for b in STEPS:
            for s in SERIES:
                key = "%s at batch %d" % (s, b)
                if key in doc["failed"]:
                    continue
                print("bench-gpu: round %d/%d, %s" % (rnd, ROUNDS, key), flush=True)
                try:
                    v, env = measure(s, trainer, py, data_dir, b)
                    res[b][s].append(v)
                    doc["environment"].update(env)
                except RunFailed as e:
                    doc["failed"][key] = str(e)
                    print("bench-gpu: %s failed, not run again: %s" % (key, e), file=sys.stderr)
                doc["runs_done"] += 1
                doc["results"] = summarize(res)
                write(out, doc)
    print(json.dumps(doc["results"], indent=1))
    return 1 if doc["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
