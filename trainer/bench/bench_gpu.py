#!/usr/bin/env python3
"""make bench-gpu: tutorial-cnn on one CUDA device, kubetrain-trainer (make GPU=1) against
PyTorch eager and torch.compile (torch_gpu_peer.py), batch 64 and 512, interleaved over
ROUNDS rounds, medians reported; what the step's CUDA graphs bring (--cuda-graphs=false
against the default); and the cost of the nccl collective at one rank (--collective nccl
against the local one). Writes OUT_JSON with the device, driver and
library versions, date and machine. Without a CUDA device it says so, writes nothing and
exits 0.

  bench_gpu.py TRAINER VENV_PYTHON DATA_DIR OUT_JSON
"""
import datetime
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile

ROUNDS = int(os.environ.get("ROUNDS", "3"))
HERE = os.path.dirname(os.path.abspath(__file__))
STEPS = {64: 400, 512: 100}  # timed steps per run (after a warm-up epoch)


def run(argv):
    p = subprocess.run(argv, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit("bench-gpu: %s failed (%d): %s" % (" ".join(argv), p.returncode,
                                                   p.stderr.strip()[-2000:]))
    return p


def kubetrain(trainer, data_dir, batch, collective, graphs=True):
    """samples/s of the second epoch (the first one plans cuDNN and warms up)."""
    with tempfile.TemporaryDirectory() as d:
        mf = os.path.join(d, "m.jsonl")
        p = run([trainer, "train", "--device", "gpu", "--model", "tutorial-cnn", "--data-dir",
                 data_dir, "--per-worker-batch", str(batch), "--epochs", "2",
                 "--steps-per-epoch", str(STEPS[batch]), "--optimizer", "sgd", "--lr", "0.001",
                 "--collective", collective, "--metrics-file", mf,
                 "--cuda-graphs=%s" % ("true" if graphs else "false")])
        epochs = [e for e in map(json.loads, open(mf)) if e.get("event") == "epoch"]
    dev = re.search(r"training on CUDA device \d+ of \d+: (.*)", p.stderr)
    if graphs and "CUDA graphs off" in p.stderr:  # a failed capture: the row would lie
        sys.exit("bench-gpu: the step's CUDA graph was not captured: %s" %
                 re.search(r".*CUDA graphs off.*", p.stderr).group(0))
    return epochs[-1]["samples_per_sec"], dev.group(1) if dev else "?"


def torch_peer(py, data_dir, batch, mode):
    p = run([py, os.path.join(HERE, "torch_gpu_peer.py"), data_dir, str(batch),
             str(STEPS[batch] // 2), str(STEPS[batch]), mode])
    return json.loads(p.stdout.strip().splitlines()[-1])


def main():
    trainer, py, data_dir, out = sys.argv[1:5]
    probe = subprocess.run([trainer, "train", "--device", "gpu", "--epochs", "1",
                            "--steps-per-epoch", "1", "--data-dir", data_dir],
                           capture_output=True, text=True)
    if probe.returncode != 0:
        print("bench-gpu: skipped: %s" % probe.stderr.strip().splitlines()[-1])
        return
    res = {b: {"kubetrain": [], "kubetrain_no_graphs": [], "kubetrain_nccl": [],
               "torch_eager": [], "torch_compile": []} for b in STEPS}
    info = {}
    for _ in range(ROUNDS):
        for b in STEPS:
            v, info["kubetrain_device"] = kubetrain(trainer, data_dir, b, "auto")
            res[b]["kubetrain"].append(v)
            v, _ = kubetrain(trainer, data_dir, b, "auto", graphs=False)
            res[b]["kubetrain_no_graphs"].append(v)
            v, _ = kubetrain(trainer, data_dir, b, "nccl")
            res[b]["kubetrain_nccl"].append(v)
            for mode in ("eager", "compile"):
                t = torch_peer(py, data_dir, b, mode)
                res[b]["torch_" + mode].append(t["samples_per_sec"])
                info.update({k: t[k] for k in ("torch", "cuda", "cudnn", "device")})
    summary = {}
    for b, r in res.items():
        med = {k: statistics.median(v) for k, v in r.items()}
        summary[str(b)] = {
            "samples_per_sec_median": med,
            "runs": r,
            "kubetrain_over_torch_eager": med["kubetrain"] / med["torch_eager"],
            "kubetrain_over_torch_compile": med["kubetrain"] / med["torch_compile"],
            "cuda_graphs_speedup": med["kubetrain"] / med["kubetrain_no_graphs"],
            "nccl_one_rank_cost": 1.0 - med["kubetrain_nccl"] / med["kubetrain"],
        }
    cpu = "?"
    try:
        cpu = next(l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo")
                   if l.startswith("model name"))
    except (OSError, StopIteration):
        pass
    doc = {"benchmark": "tutorial-cnn on one GPU, SGD lr 0.001, FP32 (no TF32 on either side)",
           "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "machine": {"arch": platform.machine(), "nproc": os.cpu_count(), "cpu": cpu},
           "rounds": ROUNDS, "timed_steps": STEPS, "environment": info,
           "targets": {"kubetrain_over_torch_eager_at_64": ">= 1.5",
                       "nccl_one_rank_cost": "<= 0.03"},
           "results": summary}
    os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
    with open(out, "w") as f:
        json.dump(doc, f, indent=1)
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
