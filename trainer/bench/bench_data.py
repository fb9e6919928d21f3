#!/usr/bin/env python3
"""make bench-data: what the data source costs the training step (issue 45, "Benchmark").

The same job (tutorial-cnn, batch 64, SGD, EPOCHS epochs x STEPS steps, seed 1) on
Fashion-MNIST's 60,000 training examples from each source, side by side in one run,
ROUNDS rounds (8), each running every source once: the odd rounds in the order below,
the even ones in the reverse order, so that of two runs compared each goes first in
half the rounds (A B, then B A: a drift of the machine during a round favours neither),
and the runs compared are next to each other or one apart:

  npz             npz:fashion-mnist.npz, read whole into memory
  png-held        tfrecord: one uncompressed file of PNGs, held decoded (the default
                  --data-cache-mib: 45 MiB decoded fit 1024), each PNG decoded once at open
  idx             idx:DATA_DIR, read whole into memory (the reference)
  s3-held         gzip-held's 8 shards from object storage, SeaweedFS's S3 gateway on
                  loopback (trainer/tests/remote/seaweedfs.sh), held decoded
  gzip-held       tfrecord: the PNG records in 8 GZIP shards (the issue's set), the default
                  cache (a GZIP file is never streamed: it cannot be read at an offset)
  tf-fit-cached   TensorFlow fit of the same Keras model on gzip-held's 8 shards through
                  tf.data, decoded once and kept by .cache() (tf_peer.py tfrecord ... cache)
  tf-fit          the same, the records shuffled and each decoded when its batch is made
                  (tf_peer.py tfrecord ... decode)
  raw-streamed    tfrecord: raw uint8 bytes (--image-shape 28,28,1), --data-cache-mib 0:
                  read, not decoded
  s3-streamed     png-streamed's file from the same bucket, --data-cache-mib 0: nothing held,
                  the records of each batch fetched by ranged GETs on the prefetch thread
                  (about one request a record: the shuffled batch's records lie apart)
  png-streamed    png-held's file with --data-cache-mib 0: each record read and its PNG
                  decoded when the pipeline wants it, on the prefetch thread
  s3-window       the same object with --data-cache-mib 40: the examples decoded (45 MiB)
                  do not fit, so they stream, but the records of the shuffle buffer (the
                  object's 32 MiB) do: they are read in source order as they enter it, a
                  few large ranged GETs, and held until used, as tf.data's shuffle buffer
                  holds them (docs/design.md, "Streamed objects")
  gzip-streamed   gzip-held's 8 GZIP shards with --data-cache-mib 40: streamed, each shard
                  inflated in order as its records enter the shuffle buffer and the
                  records held (docs/design.md, "Compressed files")
  idx-2w          `launch --workers 2` on idx, per-worker batch 64 (global 128)
  gzip-held-2w    `launch --workers 2` on gzip-held's shards

With S3=0 the s3- runs are left out (no SeaweedFS, whose first build takes minutes);
RUNS=NAME,... runs those alone, and BIG_MIB=0 skips the streaming RSS part.

For each: samples/s of epochs 2.. (epoch 1 pays the start), the CPU time per sample of
those epochs (all threads and worker processes, the prefetch thread's reading and
decoding included; unlike samples/s not inflated by waiting for a core on a shared
machine), the start-up (wall time before the first epoch's steps: reading, checking and
decoding), peak RSS (wait4; of the largest process), and whether the final weights equal
those of idx with as many workers (the same examples in the same order give the same
training, docs/design.md). The comparisons of the issue (COMPARISONS) are each round's
ratio of two runs of that round, their median judged against the target, with the
rounds' quartiles (how far a round strays: a held source trains from the same array as
idx, so png-held / idx shows the machine's noise) and the median of the CPU ratios.

Then, once, peak RSS streaming a synthetic set of BIG_MIB MiB (4 shards of raw 64x64x3
uint8 examples written by TensorFlow, --data-cache-mib 0, a linear model) against
streaming 3 MiB of the same examples: memory bounded by the data set's size or not.

The data sets come from make_data.py (NumPy and real TensorFlow), cached in WORK_DIR
(the big shards are deleted after their run). NOTE (environment) is recorded: say what
else the machine was doing.

  bench_data.py TRAINER VENV_PYTHON DATA_DIR WORK_DIR OUT_JSON
"""
import datetime
import glob
import json
import os
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

import machine as host  # trainer/bench/machine.py, beside this script

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
ROUNDS = int(os.environ.get("ROUNDS", "8"))
EPOCHS = int(os.environ.get("EPOCHS", "3"))
STEPS = int(os.environ.get("STEPS", "150"))
BIG_MIB = int(os.environ.get("BIG_MIB", "2048"))
RSS_STEPS = 100
BATCH = 64
BUCKET = "kt-bench"
S3_KEY, S3_SECRET = "KTBENCHKEY", "kt-bench-secret"

# (numerator, denominator, target, what): samples/s of the first over the second's in the
# same round; the median of the rounds' ratios is judged against the target.
COMPARISONS = [
    ("png-held", "idx", 0.95, "PNG TFRecords held decoded against IDX in memory"),
    ("gzip-held", "idx", 0.95, "the issue's set (8 GZIP shards of PNG TFRecords) against IDX"),
    ("gzip-held-2w", "idx-2w", 0.95, "the same, two workers"),
    ("s3-window", "png-streamed", 0.9,
     "object storage, streamed, the shuffle buffer's records read ahead within "
     "--data-cache-mib, against the same file streamed locally"),
    ("s3-streamed", "png-streamed", 0.9,
     "object storage, streamed with no memory budget (a request a record), against the "
     "same file streamed locally"),
    ("s3-held", "gzip-held", 0.9, "object storage, held, against the same local shards"),
    ("gzip-streamed", "png-streamed", 0.9,
     "GZIP shards streamed through access points, read ahead within --data-cache-mib, "
     "against the uncompressed file streamed"),
    ("gzip-held", "tf-fit-cached", 1.5,
     "kubetrain against TensorFlow fit on the same GZIP shards, both decoding once"),
    ("gzip-held", "tf-fit", 1.5,
     "kubetrain against TensorFlow fit on the same GZIP shards decoding each batch"),
]


def plan(data_dir, work, s3_port, s3_pid=None):
    """The runs of a round in round 1's order: dicts of name, kind (kubetrain or
    tensorflow), args, workers, env (added to the environment), ref (the idx run with
    as many workers) and server_pid (the S3 server's, whose CPU an s3 run also counts)."""
    png = "tfrecord:" + os.path.join(work, "png-00000-of-00001")
    gz = os.path.join(work, "png-gz-*-of-00008")

    def kt(name, args, workers=1, env=None):
        return {"name": name, "kind": "kubetrain", "args": args, "workers": workers,
                "env": env or {}, "ref": "idx" if workers == 1 else "idx-%dw" % workers,
                "server_pid": s3_pid if env else None}

    def tf(name, how):
        return {"name": name, "kind": "tensorflow", "workers": 1, "env": {}, "ref": "idx",
                "args": [gz, str(EPOCHS), str(STEPS), how]}

    s3 = {"AWS_ENDPOINT_URL": "http://127.0.0.1:%s" % s3_port, "AWS_REGION": "us-east-1",
          "AWS_ACCESS_KEY_ID": S3_KEY, "AWS_SECRET_ACCESS_KEY": S3_SECRET}
    # the runs that are compared run next to each other or one apart (COMPARISONS)
    runs = [
        kt("npz", ["--data", "npz:" + os.path.join(work, "fashion-mnist.npz")]),
        kt("png-held", ["--data", png]),
        kt("idx", ["--data", "idx:" + data_dir]),
        kt("s3-held", ["--data", "tfrecord:s3://%s/png-gz-*-of-00008" % BUCKET], env=s3),
        kt("gzip-held", ["--data", "tfrecord:" + gz]),
        tf("tf-fit-cached", "cache"),
        tf("tf-fit", "decode"),
        kt("raw-streamed", ["--data", "tfrecord:" + os.path.join(work, "raw-00000-of-00001"),
                            "--image-shape", "28,28,1", "--data-cache-mib", "0"]),
        kt("s3-streamed", ["--data", "tfrecord:s3://%s/png-00000-of-00001" % BUCKET,
                           "--data-cache-mib", "0"], env=s3),
        kt("png-streamed", ["--data", png, "--data-cache-mib", "0"]),
        kt("s3-window", ["--data", "tfrecord:s3://%s/png-00000-of-00001" % BUCKET,
                         "--data-cache-mib", "40"], env=s3),
        kt("gzip-streamed", ["--data", "tfrecord:" + gz, "--data-cache-mib", "40"]),
        kt("idx-2w", ["--data", "idx:" + data_dir], 2),
        kt("gzip-held-2w", ["--data", "tfrecord:" + gz], 2),
    ]
    only = os.environ.get("RUNS")
    return [r for r in runs if (s3_port or not r["name"].startswith("s3-")) and
            (not only or r["name"] in only.split(","))]


def tree_cpu_seconds(pid):
    """utime + stime of process pid and of its live descendants (all threads), from /proc;
    None once pid is gone."""
    clk = os.sysconf("SC_CLK_TCK")
    stats = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                f = open("/proc/%s/stat" % d).read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            stats[int(d)] = (int(f[1]), (int(f[11]) + int(f[12])) / clk)
    if pid not in stats:
        return None
    total, pending = 0.0, [pid]
    while pending:
        p = pending.pop()
        total += stats[p][1]
        pending += [c for c, (ppid, _) in stats.items() if ppid == p]
    return total


def trainer_argv(trainer, run, metrics):
    job = ["--model", "tutorial-cnn", "--per-worker-batch", str(BATCH), "--epochs", str(EPOCHS),
           "--steps-per-epoch", str(STEPS), "--optimizer", "sgd", "--lr", "0.001", "--seed", "1",
           "--print-weights-hash", "--metrics-file", metrics]
    if run["workers"] > 1:
        return [trainer, "launch", "--workers", str(run["workers"])] + job + run["args"]
    return [trainer] + job + run["args"]


def run_kubetrain(trainer, run):
    """One training run: samples/s and CPU ms per sample of epochs 2.., start-up seconds,
    peak RSS MiB, the weights hash and the trainer's line saying held or streamed."""
    with tempfile.TemporaryDirectory() as d:
        mf = os.path.join(d, "m.jsonl")
        argv = trainer_argv(trainer, run, mf)
        # The CPU time at the end of epoch 1, seen within 20 ms: the metrics file is
        # <path>.tmp.<pid> until the run ends. The server's, also when the run ends.
        cpu = {"cpu1": None, "server1": None, "server2": None}

        def poll(pid):
            if pid is None:
                if cpu["server1"] is not None:
                    cpu["server2"] = tree_cpu_seconds(run["server_pid"])
            elif cpu["cpu1"] is None and any(
                    '"event":"epoch"' in open(os.path.join(d, f)).read().replace(" ", "")
                    for f in os.listdir(d) if f.startswith("m.jsonl")):
                cpu["cpu1"] = tree_cpu_seconds(pid)
                if run.get("server_pid"):
                    cpu["server1"] = tree_cpu_seconds(run["server_pid"])

        stdout, stderr, ru, wall = wait4_run(argv, dict(os.environ, **run["env"]), poll)
        cpu1, server1, server2 = cpu["cpu1"], cpu["server1"], cpu["server2"]
        epochs = [e for e in map(json.loads, open(mf)) if e["event"] == "epoch"]
    later = epochs[1:]
    samples = sum(e["steps"] * BATCH * run["workers"] for e in later)
    how = [line.split("tfrecord:", 1)[1] for line in stderr.splitlines() if "MiB decoded:" in line]
    hashes = sorted({l.split()[-1] for l in stdout.splitlines() if "weights-sha256:" in l})
    if len(hashes) != 1:
        sys.exit("bench: %s: expected one weights hash, got %s" % (" ".join(argv), hashes))
    res = {
        "samples_per_sec": samples / sum(e["seconds"] for e in later),
        "cpu_ms_per_sample": (1e3 * (ru.ru_utime + ru.ru_stime - cpu1) / samples
                              if cpu1 is not None else None),
        "startup_s": wall - sum(e["seconds"] for e in epochs),
        "max_rss_mib": ru.ru_maxrss / 1024.0,
        "weights_sha256": hashes[0],
        "source": "tfrecord:" + how[0] if how else "in memory (%s)" % run["args"][1].split(":")[0],
    }
    if server2 is not None:
        # the S3 server's CPU over the same epochs: on the same 2 cores as the trainer
        res["server_cpu_ms_per_sample"] = 1e3 * (server2 - server1) / samples
    return res


def wait4_run(argv, env=None, poll=None):
    """Runs argv to its end: (stdout, stderr, rusage, wall seconds); exits on a failure.
    poll, when given, is called with the child's pid every 20 ms while it runs and with
    None once it is reaped, before its output is read."""
    t0 = time.monotonic()
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        p = subprocess.Popen(argv, stdout=out, stderr=err, env=env)
        if poll is None:
            _, status, ru = os.wait4(p.pid, 0)
        else:
            pid, status, ru = os.wait4(p.pid, os.WNOHANG)
            while not pid:
                poll(p.pid)
                time.sleep(0.02)
                pid, status, ru = os.wait4(p.pid, os.WNOHANG)
            poll(None)
        p.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
        wall = time.monotonic() - t0
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    if p.returncode != 0:
        sys.exit("bench: %s failed: %s" % (" ".join(argv), stderr[-2000:]))
    return stdout, stderr, ru, wall


def run_tensorflow(py, run):
    """tf_peer.py tfrecord: its samples/s and CPU of epochs 2.., start-up, peak RSS."""
    stdout, _, ru, wall = wait4_run(
        [py, os.path.join(HERE, "tf_peer.py"), "tfrecord"] + run["args"],
        dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
    res = json.loads(stdout.strip().splitlines()[-1])
    return {"samples_per_sec": res["samples_per_sec"],
            "cpu_ms_per_sample": res["cpu_ms_per_sample"],
            "startup_s": wall - sum(res["epoch_seconds"]),
            "max_rss_mib": ru.ru_maxrss / 1024.0,
            "source": "tf.data, %s pipeline, TensorFlow %s" % (res["pipeline"], res["tensorflow"])}


def start_s3(work, files):
    """SeaweedFS's S3 gateway (trainer/tests/remote/seaweedfs.sh) with files uploaded to
    BUCKET: (port, pid, its directory)."""
    d = tempfile.mkdtemp(prefix="weed-", dir=work)
    script = """set -euo pipefail
source trainer/tests/remote/seaweedfs.sh
WEED_NICE=0 weed_start "$1" "$2" "$3" || { echo "pid ${WEED_PID:-}"; exit 1; }
echo "pid $WEED_PID"
bucket=http://127.0.0.1:$WEED_PORT/$4
shift 4
"${WEED_CURL[@]}" -X PUT -o /dev/null "$bucket"
for f; do "${WEED_CURL[@]}" -T "$f" -o /dev/null "$bucket/${f##*/}"; done
echo "port $WEED_PORT"
"""
    r = subprocess.run(["bash", "-c", script, "bash", d, S3_KEY, S3_SECRET, BUCKET] + files,
                       cwd=REPO, capture_output=True, text=True)
    got = dict(l.split(" ", 1) for l in r.stdout.splitlines() if " " in l)
    pid = int(got["pid"]) if got.get("pid", "").isdigit() else None
    if r.returncode != 0 or "port" not in got:
        stop_s3(pid, d)
        sys.exit("bench: SeaweedFS: %s" % r.stderr[-2000:])
    return int(got["port"]), pid, d


def stop_s3(pid, d):
    if pid:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        for _ in range(100):
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.1)
    shutil.rmtree(d, ignore_errors=True)


def streaming_rss(trainer, work):
    """Peak RSS streaming BIG_MIB MiB of raw TFRecords (make_data.py's big shards) against
    3 MiB of the same examples; the big shards are deleted afterwards."""
    big = os.path.join(work, "big")
    model = os.path.join(big, "linear.json")
    with open(model, "w") as f:
        json.dump({"input_shape": [64, 64, 3],
                   "layers": [{"type": "Flatten"}, {"type": "Dense", "units": 10}]}, f)
    out = {"job": "Flatten, Dense(10) on 64x64x3 uint8 (--image-shape 64,64,3), batch 32, "
                  "1 epoch x %d steps, --data-cache-mib 0 (streamed), seed 1" % RSS_STEPS}
    for name, pattern in (("small", os.path.join(big, "unit")),
                          ("big", os.path.join(big, "big-%dmib-*-of-00004" % BIG_MIB))):
        files = sorted(glob.glob(pattern))
        with tempfile.TemporaryDirectory() as d:
            mf = os.path.join(d, "m.jsonl")
            _, stderr, ru, wall = wait4_run(
                [trainer, "--model", model, "--image-shape", "64,64,3", "--data-cache-mib", "0",
                 "--per-worker-batch", "32", "--epochs", "1", "--steps-per-epoch",
                 str(RSS_STEPS), "--seed", "1", "--metrics-file", mf,
                 "--data", "tfrecord:" + pattern])
            epochs = [e for e in map(json.loads, open(mf)) if e["event"] == "epoch"]
        line = next(l for l in stderr.splitlines() if "MiB decoded:" in l)
        out[name] = {"pattern": os.path.relpath(pattern, work), "files": len(files),
                     "data_mib": sum(os.path.getsize(f) for f in files) / 2.0**20,
                     "examples": int(line.split("tfrecord:", 1)[1].split(": ", 1)[1].split()[0]),
                     "max_rss_mib": ru.ru_maxrss / 1024.0,
                     "startup_s": wall - sum(e["seconds"] for e in epochs),
                     "samples_per_sec": epochs[0]["steps"] * 32 / epochs[0]["seconds"]}
        print("streaming %s: %s" % (name, json.dumps(out[name])), flush=True)
    # A child's peak RSS (wait4) starts from its forking parent's (Linux carries the
    # high-water mark over exec): this script's, below which a figure says nothing.
    out["launcher_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    out["rss_growth_mib"] = out["big"]["max_rss_mib"] - out["small"]["max_rss_mib"]
    out["data_growth_mib"] = out["big"]["data_mib"] - out["small"]["data_mib"]
    for f in glob.glob(os.path.join(big, "big-*")):
        os.remove(f)
    return out


def main():
    if len(sys.argv) != 6:
        sys.exit("usage: bench_data.py TRAINER VENV_PYTHON DATA_DIR WORK_DIR OUT_JSON")
    trainer, py, data_dir, work, out_path = sys.argv[1:6]
    t0 = time.monotonic()
    subprocess.run([py, os.path.join(HERE, "make_data.py"), data_dir, work, str(BIG_MIB)],
                   check=True, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
    print("bench-data: data sets ready in %s (%.0f s)" % (work, time.monotonic() - t0), flush=True)
    sizes = {f: os.path.getsize(os.path.join(work, f)) for f in sorted(os.listdir(work))
             if os.path.isfile(os.path.join(work, f))}
    s3 = start_s3(work, [os.path.join(work, f) for f in sorted(sizes)
                         if f.startswith("png-")]) if os.environ.get("S3", "1") == "1" else None
    load_start = os.getloadavg()
    try:
        runs = plan(data_dir, work, s3[0] if s3 else None, s3[1] if s3 else None)
        rounds = []
        for r in range(ROUNDS):
            order = runs if r % 2 == 0 else runs[::-1]  # A B in one round, B A in the next
            row = {"load_avg_1m": os.getloadavg()[0], "order": [x["name"] for x in order]}
            for name in row["order"]:
                run = next(x for x in runs if x["name"] == name)
                row[name] = (run_kubetrain(trainer, run) if run["kind"] == "kubetrain"
                             else run_tensorflow(py, run))
                print("round %d %s: %s" % (r + 1, name, json.dumps(row[name])), flush=True)
            for run in runs:
                if run["ref"] not in row:  # a RUNS subset without it
                    continue
                m, ref = row[run["name"]], row[run["ref"]]
                m["vs_idx"] = m["samples_per_sec"] / ref["samples_per_sec"]
                # > 1: the source spends less CPU per sample than idx
                m["cpu_efficiency_vs_idx"] = ref["cpu_ms_per_sample"] / m["cpu_ms_per_sample"]
                if "weights_sha256" in m:
                    m["same_weights_as_idx"] = m["weights_sha256"] == ref["weights_sha256"]
            row["comparisons"] = {
                "%s / %s" % (a, b): {
                    "samples_per_sec": row[a]["samples_per_sec"] / row[b]["samples_per_sec"],
                    "cpu": row[b]["cpu_ms_per_sample"] / row[a]["cpu_ms_per_sample"]}
                for a, b, _, _ in COMPARISONS if a in row and b in row}
            rounds.append(row)
    finally:
        if s3:
            stop_s3(s3[1], s3[2])
    rss = streaming_rss(trainer, work) if BIG_MIB else None
    names = [x["name"] for x in runs]
    median = {n: {k: statistics.median(r[n][k] for r in rounds)
                  for k in ("samples_per_sec", "vs_idx", "cpu_ms_per_sample",
                            "cpu_efficiency_vs_idx", "startup_s", "max_rss_mib")
                  if k in rounds[0][n]}
              for n in names}
    for n in names:
        if "server_cpu_ms_per_sample" in rounds[0][n]:
            median[n]["server_cpu_ms_per_sample"] = statistics.median(
                r[n]["server_cpu_ms_per_sample"] for r in rounds)
        if "same_weights_as_idx" in rounds[0][n]:
            median[n]["same_weights_as_idx"] = all(r[n]["same_weights_as_idx"] for r in rounds)
    comparisons = []
    for a, b, target, what in COMPARISONS:
        key = "%s / %s" % (a, b)
        if key not in rounds[0]["comparisons"]:
            continue
        per_round = [r["comparisons"][key]["samples_per_sec"] for r in rounds]
        ratio = statistics.median(per_round)
        comparisons.append({
            "comparison": key, "what": what, "target": target,
            "samples_per_sec_ratio": ratio,
            "rounds": per_round,
            "quartiles": (statistics.quantiles(per_round, n=4, method="inclusive")[::2]
                          if len(per_round) > 1 else per_round * 2),
            "cpu_ratio": statistics.median(r["comparisons"][key]["cpu"] for r in rounds),
            "cpu_rounds": [r["comparisons"][key]["cpu"] for r in rounds],
            "met": ratio >= target})
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
        "sources": {x["name"]: " ".join(x["args"]) if x["kind"] == "kubetrain" else
                    "tf_peer.py tfrecord " + " ".join(x["args"]) for x in runs},
        "workers": {x["name"]: x["workers"] for x in runs},
        "files_bytes": sizes,
        "rounds": rounds,
        "median": median,
        "comparisons": comparisons,
        "streaming_rss": rss,
        "targets": {"vs_idx": ">= 0.95 (issue 45: TFRecord PNG against IDX in memory)"},
        "cpu": "cpu_ms_per_sample: utime + stime of the trainer (all threads; under launch its "
               "workers too) from the end of epoch 1 (read from /proc when the metrics file "
               "shows it, polled every 20 ms) to its exit, per sample of epochs 2..; "
               "TensorFlow's: process_time over epochs 2..; cpu_efficiency_vs_idx: idx's "
               "(as many workers) over it; a comparison's cpu_ratio: the second's over the "
               "first's (the trainer's alone); server_cpu_ms_per_sample: the S3 server's "
               "(SeaweedFS, all its threads) over the same epochs, on the same cores",
    }
    os.makedirs(os.path.dirname(os.path.abspath(out_path)), exist_ok=True)
    with open(out_path, "w") as f:
        json.dump(result, f, indent=1)
        f.write("\n")
    for n in names:
        m = median[n]
        print("%-14s %5.0f samples/s %.3fx idx, %.3f CPU ms/sample (idx's / it: %.3f), start "
              "%4.1f s, peak RSS %4.0f MiB, same weights %s"
              % (n, m["samples_per_sec"], m.get("vs_idx", float("nan")), m["cpu_ms_per_sample"],
                 m.get("cpu_efficiency_vs_idx", float("nan")), m["startup_s"], m["max_rss_mib"],
                 m.get("same_weights_as_idx", "-")))
    for c in comparisons:
        print("%-30s %.3f (quartiles %.3f-%.3f; target >= %.2f: %s), CPU %.3f" % (
            c["comparison"], c["samples_per_sec_ratio"], c["quartiles"][0], c["quartiles"][1],
            c["target"], "met" if c["met"] else "NOT met", c["cpu_ratio"]))
    print("streaming RSS: %s" % json.dumps(rss))


if __name__ == "__main__":
    main()
