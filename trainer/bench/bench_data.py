#!/usr/bin/env python3
"""make bench-data: what the data source costs the training step (issue 45, item 2).

The same job (tutorial-cnn, batch 64, SGD, EPOCHS epochs x STEPS steps, seed 1) on
Fashion-MNIST's 60,000 training examples from each source, side by side in one run,
interleaved over ROUNDS rounds so that machine noise hits all alike:

  idx           idx:DATA_DIR, read whole into memory (the reference)
  npz           npz:fashion-mnist.npz, read whole into memory
  png-held      tfrecord: one uncompressed file of PNGs, held decoded (the default
                --data-cache-mib: 45 MiB decoded fit 1024), each PNG decoded once at open
  png-streamed  the same file with --data-cache-mib 0: each record read and its PNG
                decoded when the pipeline wants it, on the prefetch thread
  raw-streamed  tfrecord: raw uint8 bytes (--image-shape 28,28,1), --data-cache-mib 0:
                read, not decoded
  gzip-held     tfrecord: the PNG records in 8 GZIP shards, the default cache (a GZIP
                file is never streamed: it cannot be read at an offset)

samples/s of epochs 2.. (epoch 1 pays the start), its ratio to idx's in the same round,
the CPU time per sample of those epochs (all threads, the prefetch thread's reading and
decoding included; unlike samples/s not inflated by waiting for a core on a shared
machine) and idx's over it,
the start-up (wall time before the first epoch's steps: reading, checking and decoding),
peak RSS (wait4), and whether the final weights equal idx's (the same examples in the
same order give the same training, docs/design.md). The data sets come from
make_data.py (NumPy and real TensorFlow), cached in WORK_DIR.

  bench_data.py TRAINER VENV_PYTHON DATA_DIR WORK_DIR OUT_JSON
"""
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import machine as host  # trainer/bench/machine.py, beside this script

HERE = os.path.dirname(os.path.abspath(__file__))
ROUNDS = int(os.environ.get("ROUNDS", "1"))
EPOCHS = int(os.environ.get("EPOCHS", "3"))
STEPS = int(os.environ.get("STEPS", "150"))
BATCH = 64


def sources(data_dir, work):
    """(name, trainer arguments) of each source, in the order they run."""
    png = "tfrecord:" + os.path.join(work, "png-00000-of-00001")
    return [
        ("idx", ["--data", "idx:" + data_dir]),
        ("npz", ["--data", "npz:" + os.path.join(work, "fashion-mnist.npz")]),
        ("png-held", ["--data", png]),
        ("png-streamed", ["--data", png, "--data-cache-mib", "0"]),
        ("raw-streamed", ["--data", "tfrecord:" + os.path.join(work, "raw-00000-of-00001"),
                          "--image-shape", "28,28,1", "--data-cache-mib", "0"]),
        ("gzip-held", ["--data", "tfrecord:" + os.path.join(work, "png-gz-*-of-00008")]),
    ]


def cpu_seconds(pid):
    """utime + stime of process pid, all its threads (/proc/PID/stat), or None once gone."""
    try:
        f = open("/proc/%d/stat" % pid).read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def run(trainer, args):
    """One training run: samples/s and CPU ms per sample of epochs 2.., start-up seconds,
    peak RSS MiB, the weights hash and the trainer's line saying held or streamed."""
    with tempfile.TemporaryDirectory() as d:
        mf = os.path.join(d, "m.jsonl")
        argv = [trainer, "--model", "tutorial-cnn", "--per-worker-batch", str(BATCH),
                "--epochs", str(EPOCHS), "--steps-per-epoch", str(STEPS), "--optimizer", "sgd",
                "--lr", "0.001", "--seed", "1", "--print-weights-hash", "--metrics-file",
                mf] + args
        with open(os.path.join(d, "out"), "w+") as out, open(os.path.join(d, "err"), "w+") as err:
            t0 = time.monotonic()
            p = subprocess.Popen(argv, stdout=out, stderr=err)
            # The CPU time at the end of epoch 1, seen within 20 ms: the metrics file is
            # <path>.tmp.<pid> until the run ends.
            cpu1 = None
            pid, status, ru = os.wait4(p.pid, os.WNOHANG)
            while not pid:
                if cpu1 is None and any(
                        '"event":"epoch"' in open(os.path.join(d, f)).read().replace(" ", "")
                        for f in os.listdir(d) if f.startswith("m.jsonl")):
                    cpu1 = cpu_seconds(p.pid)
                time.sleep(0.02)
                pid, status, ru = os.wait4(p.pid, os.WNOHANG)
            p.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
            wall = time.monotonic() - t0
            out.seek(0)
            err.seek(0)
            stdout, stderr = out.read(), err.read()
        if p.returncode != 0:
            sys.exit("bench: %s failed: %s" % (" ".join(argv), stderr[-2000:]))
        epochs = [e for e in map(json.loads, open(mf)) if e["event"] == "epoch"]
    later = epochs[1:]
    samples = sum(e["steps"] * BATCH for e in later)
    how = [line.split(": ", 1)[1] for line in stderr.splitlines() if "MiB decoded:" in line]
    return {
        "samples_per_sec": samples / sum(e["seconds"] for e in later),
        "cpu_ms_per_sample": (1e3 * (ru.ru_utime + ru.ru_stime - cpu1) / samples
                              if cpu1 is not None else None),
        "startup_s": wall - sum(e["seconds"] for e in epochs),
        "max_rss_mib": ru.ru_maxrss / 1024.0,
        "weights_sha256": next(l.split()[-1] for l in stdout.splitlines()
                               if l.startswith("weights-sha256:")),
        "source": how[0] if how else "in memory (%s)" % args[1].split(":")[0],
    }


def main():
    if len(sys.argv) != 6:
        sys.exit("usage: bench_data.py TRAINER VENV_PYTHON DATA_DIR WORK_DIR OUT_JSON")
    trainer, py, data_dir, work, out_path = sys.argv[1:6]
    t0 = time.monotonic()
    subprocess.run([py, os.path.join(HERE, "make_data.py"), data_dir, work], check=True,
                   env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
    print("bench-data: data sets ready in %s (%.0f s)" % (work, time.monotonic() - t0), flush=True)
    sizes = {f: os.path.getsize(os.path.join(work, f)) for f in sorted(os.listdir(work))}
    load_start = os.getloadavg()
    rounds = []
    for r in range(ROUNDS):
        row = {"load_avg_1m": os.getloadavg()[0]}
        for name, args in sources(data_dir, work):
            row[name] = run(trainer, args)
            print("round %d %s: %s" % (r + 1, name, json.dumps(row[name])), flush=True)
        for name, _ in sources(data_dir, work):
            row[name]["vs_idx"] = row[name]["samples_per_sec"] / row["idx"]["samples_per_sec"]
            # > 1: the source spends less CPU per sample than idx
            row[name]["cpu_efficiency_vs_idx"] = (row["idx"]["cpu_ms_per_sample"] /
                                                  row[name]["cpu_ms_per_sample"])
            row[name]["same_weights_as_idx"] = (row[name]["weights_sha256"] ==
                                                row["idx"]["weights_sha256"])
        rounds.append(row)
    names = [n for n, _ in sources(data_dir, work)]
    median = {n: {k: statistics.median(r[n][k] for r in rounds)
                  for k in ("samples_per_sec", "vs_idx", "cpu_ms_per_sample",
                            "cpu_efficiency_vs_idx", "startup_s", "max_rss_mib")}
              for n in names}
    for n in names:
        median[n]["same_weights_as_idx"] = all(r[n]["same_weights_as_idx"] for r in rounds)
    commit = subprocess.run(["git", "describe", "--always", "--dirty"], capture_output=True,
                            text=True, cwd=HERE).stdout.strip()
    result = {
        "benchmark": "data sources: tutorial-cnn, batch 64, %d epochs x %d steps, Fashion-MNIST's "
                     "60,000 training examples from each source (samples/s of epochs 2-%d)"
                     % (EPOCHS, STEPS, EPOCHS),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "commit": commit,
        "machine": host.machine(trainer, load_avg_at_start=load_start,
                                load_avg_at_end=os.getloadavg()),
        "note": os.environ.get("NOTE", ""),
        "sources": {n: " ".join(a) for n, a in sources(data_dir, work)},
        "files_bytes": sizes,
        "rounds": rounds,
        "median": median,
        "targets": {"vs_idx": ">= 0.95 (issue 45: TFRecord PNG against IDX in memory)"},
        "cpu": "cpu_ms_per_sample: utime + stime of the trainer (all threads) from the end of "
               "epoch 1 (read from /proc when the metrics file shows it, polled every 20 ms) "
               "to its exit, per sample of epochs 2..; cpu_efficiency_vs_idx: idx's over it",
    }
    os.makedirs(os.path.dirname(os.path.abspath(out_path)), exist_ok=True)
    with open(out_path, "w") as f:
        json.dump(result, f, indent=1)
        f.write("\n")
    for n in names:
        m = median[n]
        print("%-13s %5.0f samples/s %.3fx idx, %.3f CPU ms/sample (idx's / it: %.3f), start "
              "%4.1f s, peak RSS %3.0f MiB, same weights %s"
              % (n, m["samples_per_sec"], m["vs_idx"], m["cpu_ms_per_sample"],
                 m["cpu_efficiency_vs_idx"], m["startup_s"], m["max_rss_mib"],
                 m["same_weights_as_idx"]))


if __name__ == "__main__":
    main()
