#!/usr/bin/env python3
"""Distributed training benchmark: the tutorial job (tutorial-cnn, per-worker batch 64,
SGD lr 0.001, 3 epochs x 70 steps, 2 workers on 127.0.0.1) run by `kubetrain-trainer
launch` and by TensorFlow MultiWorkerMirroredStrategy (tf_mwms_peer.py, the same
TF_CONFIG layout: a worker list on 127.0.0.1 ports), side by side on this machine,
interleaved over ROUNDS rounds so that load from other processes hits both sides.
The accuracy target is judged apart (distributed-accuracy.json): both sides train with
Adam for 2 epochs over ACC_RUNS seeds. PARTS=throughput or PARTS=accuracy runs one part.

Measured: samples/s over epochs 2-3 (global batch x steps / seconds, as the chief
reports them), test accuracy after training, peak RSS of the largest worker; kubetrain
also with 4 workers (aggregate samples/s ratio 4 vs 2) and with one checkpoint per
epoch (the chief's logged save times as a share of the training time, and the wall
clock against the run without checkpoints).

  bench_distributed.py TRAINER TF_PYTHON DATA_DIR OUT.json [ROUNDS]
"""
import json
import os
import re
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from machine import machine  # trainer/bench/machine.py, beside this script

HERE = os.path.dirname(os.path.abspath(__file__))
JOB = ["--model", "tutorial-cnn", "--per-worker-batch", "64", "--optimizer", "sgd", "--lr", "0.001",
       "--epochs", "3", "--steps-per-epoch", "70", "--eval"]


def children_maxrss_mib():
    return resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024.0


def kubetrain(trainer, data_dir, workers, tmp, ckpt, shm=True):
    """One launch; returns samples/s (epochs 2-3), test accuracy, seconds, checkpoint seconds."""
    metrics = os.path.join(tmp, "m.jsonl")
    ck = os.path.join(tmp, "ck")
    shutil.rmtree(ck, ignore_errors=True)
    argv = [trainer, "launch", "--workers", str(workers), "--data-dir", data_dir,
            "--metrics-file", metrics] + JOB
    if ckpt:
        argv += ["--checkpoint-dir", ck]
    # a fresh Python child per run so RUSAGE_CHILDREN is this run's peak alone
    probe = ("import resource,subprocess,sys,json;"
             "p=subprocess.run(sys.argv[1:],capture_output=True,text=True);"
             "print(json.dumps({'rc':p.returncode,'err':p.stderr[-20000:],"
             "'rss':resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss/1024.0}))")
    t0 = time.perf_counter()
    # shm=False: every all-reduce over the TCP ring, as between pods on different nodes
    env = dict(os.environ, KUBETRAIN_SHM="1" if shm else "0")
    r = json.loads(subprocess.run([sys.executable, "-c", probe] + argv, capture_output=True,
                                  text=True, check=True, env=env).stdout)
    wall = time.perf_counter() - t0
    if r["rc"] != 0:
        raise SystemExit("kubetrain failed (%d): %s" % (r["rc"], r["err"][-2000:]))
    ev = [json.loads(l) for l in open(metrics)]
    epochs = [e for e in ev if e["event"] == "epoch"]
    evals = [e for e in ev if e["event"] == "eval"]
    done = ev[-1]
    samples = sum(e["samples_per_sec"] * e["seconds"] for e in epochs[1:])
    secs = sum(e["seconds"] for e in epochs[1:])
    ck_secs = sum(float(x) for x in re.findall(r"\[worker 0\] .*checkpoint at step \d+ saved in ([0-9.]+)s",
                                               r["err"]))
    return {"samples_per_sec": samples / secs, "test_accuracy": evals[-1]["test_accuracy"],
            "train_accuracy": epochs[-1]["accuracy"], "seconds": done["seconds"], "wall": wall,
            "checkpoint_seconds": ck_secs, "max_rss_mib": r["rss"]}


def free_ports(n):
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def tensorflow(tf_python, data_dir, workers, extra=()):
    ports = free_ports(workers)
    procs = []
    for i in range(workers):
        env = dict(os.environ)
        env["TF_CONFIG"] = json.dumps({"cluster": {"worker": ["127.0.0.1:%d" % p for p in ports]},
                                       "task": {"type": "worker", "index": i}})
        procs.append(subprocess.Popen([tf_python, os.path.join(HERE, "tf_mwms_peer.py"), data_dir]
                                      + list(extra),
                                      env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True))
    outs = [p.communicate() for p in procs]
    for p, (o, e) in zip(procs, outs):
        if p.returncode != 0:
            raise SystemExit("tensorflow worker failed (%d): %s" % (p.returncode, e[-2000:]))
    res = [json.loads(o.strip().splitlines()[-1]) for o, _ in outs]
    chief = res[0]
    chief["max_rss_mib"] = max(r["max_rss_mib"] for r in res)
    return chief


# The accuracy comparison: the throughput job is too short (210 SGD steps) for its
# accuracy to say anything within 0.5 points, so both sides also train to convergence
# with Adam(1e-3), 2 epochs over the training set, over several seeds each.
ACC_JOB = ["--model", "tutorial-cnn", "--per-worker-batch", "64", "--optimizer", "adam",
           "--lr", "0.001", "--epochs", "2", "--steps-per-epoch", "0", "--eval"]


def accuracy_result(trainer, k, t, runs, load_start):
    gap = 100 * (statistics.mean(k) - statistics.mean(t))
    se = (100 * (statistics.variance(k) / len(k) + statistics.variance(t) / len(t)) ** 0.5
          if len(k) > 1 else None)
    result = {"benchmark": "distributed accuracy", "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
              "machine": machine(trainer, load_avg_at_start=load_start,
                                 load_avg_at_end=list(os.getloadavg())),
              "job": "2 workers on 127.0.0.1, tutorial-cnn, per-worker batch 64, Adam(1e-3), 2 epochs "
                     "over the training set (468 steps each), test set after training; seeds 1..%d "
                     "(kubetrain --seed S; TensorFlow tf.keras.utils.set_random_seed(S))" % len(k),
              "kubetrain_test_accuracy": k, "tensorflow_test_accuracy": t,
              "kubetrain_mean_test_accuracy": statistics.mean(k),
              "tensorflow_mean_test_accuracy": statistics.mean(t),
              "accuracy_gap_points": gap, "accuracy_gap_standard_error_points": se,
              "met": {"|accuracy gap| <= 0.5 points": abs(gap) <= 0.5}}
    return result


def accuracy(trainer, tf_python, data_dir, out, runs):
    tmp = tempfile.mkdtemp(prefix="kt-bench-acc-")
    k, t = [], []
    load_start = list(os.getloadavg())
    try:
        for seed in range(1, runs + 1):
            metrics = os.path.join(tmp, "m.jsonl")
            subprocess.run([trainer, "launch", "--workers", "2", "--data-dir", data_dir,
                            "--metrics-file", metrics, "--seed", str(seed)] + ACC_JOB,
                           capture_output=True, text=True, check=True)
            ev = [json.loads(l) for l in open(metrics)]
            k.append([e for e in ev if e["event"] == "eval"][-1]["test_accuracy"])
            r = tensorflow(tf_python, data_dir, 2, ["--optimizer", "adam", "--epochs", "2",
                                                     "--steps", "0", "--seed", str(seed)])
            t.append(r["test_accuracy"])
            print("accuracy seed %d: kubetrain %.4f tensorflow %.4f" % (seed, k[-1], t[-1]),
                  flush=True)
            # written after every seed, so a run stopped early keeps the seeds it finished
            result = accuracy_result(trainer, k, t, runs, load_start)
            with open(out, "w") as f:
                json.dump(result, f, indent=1)
                f.write("\n")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(json.dumps({x: result[x] for x in ("kubetrain_mean_test_accuracy", "tensorflow_mean_test_accuracy",
                                             "accuracy_gap_points", "accuracy_gap_standard_error_points",
                                             "met")}, indent=1))


def main():
    trainer, tf_python, data_dir, out = sys.argv[1:5]
    rounds = int(sys.argv[5]) if len(sys.argv) > 5 else 1
    parts = os.environ.get("PARTS", "throughput,accuracy").split(",")
    if "accuracy" in parts:
        accuracy(trainer, tf_python, data_dir,
                 os.path.join(os.path.dirname(out) or ".", "distributed-accuracy.json"),
                 int(os.environ.get("ACC_RUNS", "5")))
    if "throughput" not in parts:
        return
    tmp = tempfile.mkdtemp(prefix="kt-bench-dist-")
    rows = []
    try:
        for r in range(rounds):
            row = {"kubetrain_2": kubetrain(trainer, data_dir, 2, tmp, False),
                   "tensorflow_2": tensorflow(tf_python, data_dir, 2),
                   "kubetrain_2_tcp": kubetrain(trainer, data_dir, 2, tmp, False, shm=False),
                   "kubetrain_4": kubetrain(trainer, data_dir, 4, tmp, False),
                   "kubetrain_2_ckpt": kubetrain(trainer, data_dir, 2, tmp, True)}
            rows.append(row)
            print("round %d: %s" % (r + 1, json.dumps(row)), flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    def med(run, key):
        return statistics.median(row[run][key] for row in rows)

    k2, tf2, k4 = med("kubetrain_2", "samples_per_sec"), med("tensorflow_2", "samples_per_sec"), \
        med("kubetrain_4", "samples_per_sec")
    ck = med("kubetrain_2_ckpt", "checkpoint_seconds")
    ck_train = med("kubetrain_2_ckpt", "seconds")
    median = {
        "kubetrain_2w_samples_per_sec": k2,
        "tensorflow_mwms_2w_samples_per_sec": tf2,
        "kubetrain_vs_tensorflow": k2 / tf2,
        # the same job with the shared-memory path off: all-reduce over loopback TCP
        "kubetrain_2w_tcp_samples_per_sec": med("kubetrain_2_tcp", "samples_per_sec"),
        "kubetrain_tcp_vs_tensorflow": med("kubetrain_2_tcp", "samples_per_sec") / tf2,
        # after 210 SGD steps, one run each: indicative only; the accuracy target is
        # judged in distributed-accuracy.json
        "kubetrain_2w_test_accuracy": med("kubetrain_2", "test_accuracy"),
        "tensorflow_2w_test_accuracy": med("tensorflow_2", "test_accuracy"),
        "kubetrain_4w_samples_per_sec": k4,
        "kubetrain_4w_vs_2w": k4 / k2,
        "checkpoint_seconds_per_run": ck,
        "checkpoint_share_of_training": ck / ck_train,
        "ckpt_run_seconds_vs_no_ckpt": med("kubetrain_2_ckpt", "seconds") / med("kubetrain_2", "seconds"),
        "kubetrain_peak_rss_mib_per_worker_2w": med("kubetrain_2", "max_rss_mib"),
        "kubetrain_peak_rss_mib_per_worker_4w": med("kubetrain_4", "max_rss_mib"),
        "tensorflow_peak_rss_mib_per_worker": med("tensorflow_2", "max_rss_mib"),
    }
    targets = {"kubetrain_vs_tensorflow >= 3": median["kubetrain_vs_tensorflow"] >= 3,
               "4w/2w >= 0.85": median["kubetrain_4w_vs_2w"] >= 0.85,
               "checkpoint share <= 2%": median["checkpoint_share_of_training"] <= 0.02,
               "peak RSS per worker <= 250 MiB": median["kubetrain_peak_rss_mib_per_worker_4w"] <= 250
               and median["kubetrain_peak_rss_mib_per_worker_2w"] <= 250}
    result = {"benchmark": "distributed", "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
              "machine": machine(trainer, load_avg_at_end=list(os.getloadavg())),
              "job": "tutorial-cnn, per-worker batch 64, SGD lr 0.001, 3 epochs x 70 steps, "
                     "workers on 127.0.0.1 (all-reduce through shared memory; _tcp: over the "
                     "TCP ring, KUBETRAIN_SHM=0)",
              "note": "samples/s = global samples over epochs 2-3 / their seconds; accuracy on the "
                      "10k test set after training; RSS = the largest worker's peak; the machine is "
                      "shared with other jobs (see load_avg_at_end)",
              "rounds": rows, "median": median, "met": targets}
    os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
    with open(out, "w") as f:
        json.dump(result, f, indent=1)
    print(json.dumps({"median": median, "met": targets}, indent=1))


if __name__ == "__main__":
    main()
