#!/usr/bin/env python3
"""make bench-cifar: one worker, the CIFAR-shaped Conv-BatchNorm model of issue 44,
batch 64, synthetic colour images.

The model is defined once, in Keras (cifar_keras.py); the trainer gets its
model.to_json() as a user would give it, the TensorFlow peer fits the same Keras model
(cifar_keras.py throughput), the PyTorch peer an equivalent torch model (cifar_torch.py).
All three train EPOCHS x STEPS steps of SGD(0.01, momentum 0.9) on DIR/cifar.npz, and
samples/s and CPU time per sample are taken over epochs 2..EPOCHS (the first pays the
start: TensorFlow traces its step, every runner touches its memory first). ROUNDS rounds,
each running the three in a rotated order, so that the machine's drift hits each alike;
medians and the ratios kubetrain/TensorFlow and kubetrain/PyTorch. Peak RSS of every
process from wait4.

Then, where the trainer's step time goes: one more run of the trainer under `perf record
--call-graph dwarf`, each sample of the step put under the pass (forward, backward with
the layer's gradient sum, the optimizer's update, the loss) and the layer type whose
function it was in (the five convolutions share one function, so the profile is per
layer type, not per layer), and whether it ran on the pool's threads or on one thread
while the others waited.

  bench_cifar.py TRAINER TF_PYTHON TORCH_PYTHON DIR OUT_JSON

And per layer: CIFAR_LAYERS (environment), the path of cifar_layers (cifar_layers.c, built
by the Makefile), times each layer's forward and backward alone, the same layers.c calls
on the same threads as the trainer, and its JSON goes in as "layers".

DIR holds cifar.json and cifar.npz (cifar_keras.py prepare). NOTE (environment) is
recorded as the run's note: say what else the machine was doing.
"""
import collections
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

from bench_trainer import kubetrain_epochs, machine, now, run_rss, write_json

HERE = os.path.dirname(os.path.abspath(__file__))
ROUNDS = int(os.environ.get("ROUNDS", "3"))
EPOCHS = int(os.environ.get("EPOCHS", "3"))
STEPS = int(os.environ.get("STEPS", "10"))
BATCH = 64

# The trainer's layer functions (trainer/src/layers.c, model.c) and the layer type each
# belongs to, looked up from the sample's leaf towards its root.
LAYER_OF = (("conv", "Conv2D"), ("im2col", "Conv2D"), ("col2im", "Conv2D"),
            ("batchnorm", "BatchNormalization"), ("maxpool", "MaxPooling2D"),
            ("avgpool", "GlobalAveragePooling2D"), ("activation", "ReLU"),
            ("dropout", "Dropout"), ("dense", "Dense"), ("rescaling", "Rescaling"))


def trainer_args(data, epochs):
    return ["--model", os.path.join(data, "cifar.json"),
            "--data", "npz:" + os.path.join(data, "cifar.npz"), "--pixel-scale", "raw",
            "--per-worker-batch", str(BATCH), "--epochs", str(epochs),
            "--steps-per-epoch", str(STEPS), "--optimizer", "sgd", "--lr", "0.01",
            "--momentum", "0.9", "--seed", "1"]


def run_kubetrain(trainer, data):
    ev, rss = kubetrain_epochs(trainer, trainer_args(data, EPOCHS))
    cpu_all = run_rss.cpu_seconds
    epochs = [e for e in ev if e["event"] == "epoch"]
    samples = sum(e["steps"] * BATCH for e in epochs[1:])
    # CPU time of epochs 2..: that of the same run stopped after epoch 1, subtracted
    kubetrain_epochs(trainer, trainer_args(data, 1))
    return {"samples_per_sec": samples / sum(e["seconds"] for e in epochs[1:]),
            "cpu_ms_per_sample": 1e3 * (cpu_all - run_rss.cpu_seconds) / samples,
            "max_rss_mib": rss}


def run_peer(argv):
    out, rss = run_rss(argv)
    res = json.loads(out.strip().splitlines()[-1])
    return dict(res, max_rss_mib=rss)


def classify(frames, main_tid, tid):
    """(pass, layer, on one thread) of one sample of the trainer, its frames' symbols
    leaf first; None outside the training step."""
    names = set(frames)
    if "forward_layer" in names:
        what = "forward"
    elif "backward_layer" in names or "finish_layer" in names:
        what = "backward"
    elif any(f.startswith("optim_") for f in frames):
        return ("optimizer update", "", tid == main_tid and "parallel_for" not in names)
    elif any(f.startswith("loss_") for f in frames):
        return ("loss", "", True)
    elif "model_update_moving" in names:
        return ("moving statistics", "BatchNormalization", True)
    elif names & {"model_step", "model_step_sgd", "cpu_train_step"}:
        # a layer's pass outside forward_layer and backward_layer (BatchNormalization's
        # run by forward() and step() on the whole batch), or with those frames inlined
        # away: told by the layer function's name
        for f in frames:
            hit = next((kind for prefix, kind in LAYER_OF if f.startswith(prefix)), None)
            if hit and ("_forward" in f or "_backward" in f):
                what = "backward" if "_backward" in f else "forward"
                if hit == "Conv2D":
                    hit += " GEMM" if "cblas_sgemm" in names else " other"
                return (what, hit, tid == main_tid and "parallel_for" not in names)
        return ("step, other", "", True)
    elif "take_tasks" in names:
        # a task of the pool on a worker thread whose caller's frames are not on its
        # stack: told by the task's function
        for prefix, what in (("batchnorm_forward", "forward"),
                             ("batchnorm_backward", "backward")):
            if any(f.startswith(prefix) for f in frames):
                return (what, "BatchNormalization", False)
        if "step_range" in names:
            return ("optimizer update", "", False)
        if "job_run_block" in names:
            return ("whole-batch GEMM (Dense)", "", False)
        return None
    else:
        return None
    layer = "finish_layer (shards' gradient sum)" if "finish_layer" in names else "copy"
    for f in frames:
        hit = next((kind for prefix, kind in LAYER_OF if f.startswith(prefix)), None)
        if hit:
            layer = hit
            break
        if f in ("forward_layer", "backward_layer", "finish_layer"):
            break
    if layer == "Conv2D":  # its products apart from the im2col, col2im and bias passes
        layer += " GEMM" if "cblas_sgemm" in names else " other"
    return (what, layer, tid == main_tid and "parallel_for" not in names)


def profile(trainer, data):
    """Where the step's CPU time goes, from perf; {"error": why} when perf cannot run."""
    perf = shutil.which("perf")
    if not perf:
        return {"error": "no perf on PATH"}
    with tempfile.TemporaryDirectory() as d:
        rec = os.path.join(d, "perf.data")
        cmd = [perf, "record", "-q", "-o", rec, "-F", "99", "--call-graph", "dwarf,16384",
               "--", trainer] + trainer_args(data, EPOCHS)
        p = subprocess.run(cmd, capture_output=True, text=True)
        if p.returncode != 0:
            return {"error": "perf record failed: %s" % p.stderr.strip()[-500:]}
        p = subprocess.run([perf, "script", "-i", rec, "-F", "pid,tid,ip,sym"],
                           capture_output=True, text=True)
        if p.returncode != 0:
            return {"error": "perf script failed: %s" % p.stderr.strip()[-500:]}
    return dict(tally(p.stdout),
                command=" ".join(["perf record -F 99 --call-graph dwarf,16384 --",
                                  "kubetrain-trainer"] + trainer_args("DIR", EPOCHS)))


def tally(script):
    """The step's CPU shares from `perf script -F pid,tid,ip,sym` output: a "PID/TID"
    line per sample, then one "ADDRESS SYMBOL" line per frame, leaf first."""
    cpu = collections.Counter()
    total = step = 0
    for block in script.split("\n\n"):
        lines = block.strip().splitlines()
        if not lines:
            continue
        pid, tid = (int(v) for v in lines[0].split()[0].split("/"))
        frames = [ln.split()[1] for ln in lines[1:] if len(ln.split()) >= 2]
        total += 1
        where = classify(frames, pid, tid)
        if where:
            step += 1
            cpu[where] += 1
    if not step:
        return {"error": "no sample of the training step (%d samples in all)" % total}
    rows = collections.defaultdict(lambda: [0, 0])
    for (what, layer, serial), n in cpu.items():
        rows[(what, layer)][0] += n
        rows[(what, layer)][1] += n if serial else 0
    table = [{"pass": what, "layer": layer, "share_of_step_cpu": n / step,
              "one_thread_share": s / n}
             for (what, layer), (n, s) in sorted(rows.items(), key=lambda kv: -kv[1][0])]
    return {"samples": total, "step_samples": step, "rows": table,
            "how": "each perf sample (CPU time, every thread) inside the training step, put "
                   "under its pass (forward_layer, backward_layer or finish_layer, the optimizer's "
                   "optim_* update, the loss, model_update_moving) and the first trainer layer "
                   "function on its stack "
                   "from the leaf (conv2d_*, im2col, col2im: Conv2D, split into its GEMMs "
                   "(cblas_sgemm on the stack) and the rest (im2col, col2im, bias); "
                   "batchnorm_*; maxpool_*; "
                   "activation_*: the ReLU layers; ...; copy: the memcpy of an activation or "
                   "dropout layer's input to its output); one_thread_share: the part that ran "
                   "on the main thread outside parallel_for, while the other threads waited. "
                   "A task of the pool on a worker thread without forward_layer or "
                   "backward_layer on its stack goes by its function: batchnorm_forward_* / "
                   "batchnorm_backward_* (BatchNormalization's passes), step_range (the "
                   "optimizer), job_run_block (gemm's blocks of a whole-batch product). "
                   "Per layer type: the five Conv2D layers share their functions"}


def main():
    if len(sys.argv) != 6:
        sys.exit("usage: bench_cifar.py TRAINER TF_PYTHON TORCH_PYTHON DIR OUT_JSON")
    trainer, tf_py, torch_py, data, out_path = sys.argv[1:6]
    if EPOCHS < 2 or STEPS < 1:
        sys.exit("bench_cifar.py: EPOCHS must be >= 2 (the first is not timed), STEPS >= 1")
    runners = {
        "kubetrain": lambda: run_kubetrain(trainer, data),
        "tensorflow": lambda: run_peer([tf_py, os.path.join(HERE, "cifar_keras.py"),
                                        "throughput", data, str(EPOCHS), str(STEPS)]),
        "pytorch": lambda: run_peer([torch_py, os.path.join(HERE, "cifar_torch.py"), data,
                                     str(EPOCHS), str(STEPS)]),
    }
    names = list(runners)
    load_start = os.getloadavg()
    rounds, versions = [], {}
    for r in range(ROUNDS):
        row = {"load_avg_1m": os.getloadavg()[0], "order": names[r % 3:] + names[:r % 3]}
        for name in row["order"]:
            res = runners[name]()
            for k in ("samples_per_sec", "cpu_ms_per_sample", "max_rss_mib"):
                row["%s_%s" % (name, k)] = res[k]
            versions.update({k: res[k] for k in ("tensorflow", "keras", "torch") if k in res})
            if "threads" in res:
                versions["torch_threads"] = res["threads"]
        for peer in ("tensorflow", "pytorch"):
            row["kubetrain_vs_%s" % peer] = (row["kubetrain_samples_per_sec"] /
                                            row["%s_samples_per_sec" % peer])
            # > 1: kubetrain spends less CPU per sample than the peer
            row["kubetrain_cpu_efficiency_vs_%s" % peer] = (
                row["%s_cpu_ms_per_sample" % peer] / row["kubetrain_cpu_ms_per_sample"])
        print("round %d: %s" % (r + 1, json.dumps(row)), flush=True)
        rounds.append(row)
    median = {k: statistics.median(r[k] for r in rounds)
              for k in rounds[0] if k not in ("load_avg_1m", "order")}
    result = {
        "benchmark": "cifar: one worker, the CIFAR-shaped Conv-BatchNorm model (issue 44), "
                     "batch 64, synthetic 32x32x3 uint8 images",
        "date": now(),
        "note": os.environ.get("NOTE", ""),
        "machine": machine(trainer, load_start),
        "model": "Keras, cifar_keras.py: Input(32,32,3) -> Rescaling(1/255) -> "
                 "[Conv2D(f,3,same,no bias) -> BatchNormalization -> ReLU] for f = 32, 32 -> "
                 "MaxPooling2D(2) -> the same for 64, 64 -> MaxPooling2D(2) -> the same for 128 "
                 "-> GlobalAveragePooling2D -> Dropout(0.3) -> Dense(10), logits",
        "commands": {
            "kubetrain": "kubetrain-trainer " + " ".join(trainer_args("DIR", EPOCHS)) +
                         " (DIR/cifar.json: the Keras model's to_json())",
            "tensorflow": "cifar_keras.py throughput DIR %d %d (model.fit on tf.data)" %
                          (EPOCHS, STEPS),
            "pytorch": "cifar_torch.py DIR %d %d (eager, torch's default threads)" %
                       (EPOCHS, STEPS),
            "measure": "samples/s and CPU ms per sample over epochs 2..%d (%d samples); "
                       "kubetrain's CPU: wait4 CPU of the run minus that of the same run "
                       "stopped after epoch 1; the peers': process_time around the epochs. "
                       "Threads: every runner its default (the CPUs)" %
                       (EPOCHS, (EPOCHS - 1) * STEPS * BATCH),
        },
        "versions": versions,
        "rounds": rounds,
        "median": median,
        "targets": {"vs_tensorflow": ">= 1.5"},
        "met": {"vs_tensorflow": median["kubetrain_vs_tensorflow"] >= 1.5},
        "profile": profile(trainer, data),
    }
    if os.environ.get("CIFAR_LAYERS"):
        out = subprocess.run([os.environ["CIFAR_LAYERS"], "9"], check=True,
                             stdout=subprocess.PIPE, text=True).stdout
        result["layers"] = json.loads(out)
        result["layers"]["command"] = (
            "cifar_layers 9: each layer's pass alone, the median of 9 steps, wall and "
            "process CPU ms per batch of 64; share: of the summed wall medians")
    write_json(out_path, result)
    print(json.dumps({"median": median, "met": result["met"]}, indent=1))


if __name__ == "__main__":
    main()
