#!/usr/bin/env python3
"""make soak: chaos trials against the real binaries, bounded in count and time.

  trainer-kill    SIGKILL a random worker at a random step under `kubetrain-trainer
                  launch --workers 2`; the job must complete with the weights hash of
                  the uninterrupted run.
  ckpt-write      kill the chief at byte k of a checkpoint write: the trainer runs with
                  RLIMIT_FSIZE = k, so the kernel stops its write() at byte k of the
                  checkpoint file and delivers SIGXFSZ, which kills it (the real write
                  path, no hook in the code). The checkpoints it had before are the
                  complete ones of an earlier run; a fresh trainer must then load the
                  newest of them and end with the uninterrupted run's hash.
  operator-kill   SIGKILL the operator among concurrent jobs against a real
                  kube-apiserver (operator/tests/integration/chaos.py): no duplicate
                  pod, no orphan, every job reaches a terminal phase.
  apiserver-restart  restart the kube-apiserver under a running operator, away 0 to 30 s
                  each time (operator/tests/integration/apirestart.py); its watches must
                  recover within 5 s of the apiserver answering again (a new job gets its
                  pods, a failed pod restarts its group).

Counts come from the environment, scaled by SOAK_SCALE (default 1): SOAK_TRAINER_KILLS
(100), SOAK_CKPT_KILLS (1000), SOAK_OPERATOR_KILLS (50), SOAK_APISERVER_RESTARTS (5);
SOAK_KINDS picks kinds (comma-separated, default all); SOAK_SEED the seed. Prints one
table (kind, trials, failures, data lost, seconds) and writes it as JSON to --out.
"Data lost" counts trials in which committed state was lost: a job that did not end with
the uninterrupted hash, a checkpoint newer than the one loaded that was complete, a pod or
job the operator lost track of.
"""
import argparse
import filecmp
import json
import os
import platform
import random
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

ap = argparse.ArgumentParser()
ap.add_argument("--trainer", default=os.path.join(ROOT, "build/bin/kubetrain-trainer"))
ap.add_argument("--operator", default=os.path.join(ROOT, "build/san/bin/kubetrain-operator"))
ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
ap.add_argument("--out", default="")
args = ap.parse_args()

SCALE = float(os.environ.get("SOAK_SCALE", "1"))


def count(name, default):
    n = int(os.environ.get(name, default))
    return max(1, int(round(n * SCALE)))


KINDS = os.environ.get("SOAK_KINDS", "trainer-kill,ckpt-write,operator-kill,apiserver-restart")
KINDS = [k.strip() for k in KINDS.split(",") if k.strip()]
SEED = int(os.environ.get("SOAK_SEED", int(time.time())))
rng = random.Random(SEED)
work = tempfile.mkdtemp(prefix="kt-soak-")
rows = []


def log(msg):
    print(f"# {msg}", flush=True)


def row(kind, trials, failures, lost, seconds, notes):
    rows.append({"kind": kind, "trials": trials, "failures": failures, "data_lost": lost,
                 "seconds": round(seconds, 1), "notes": notes})
    log(f"{kind}: {trials} trials, {failures} failures, {lost} lost, {seconds:.0f} s; {notes}")


ENV = dict(os.environ, OPENBLAS_NUM_THREADS="1")
for v in ("TF_CONFIG", "KUBETRAIN_SECRET", "KUBETRAIN_SECRET_FILE"):
    ENV.pop(v, None)
ENV["KUBETRAIN_TERMINATION_FILE"] = os.path.join(work, "termination")
HASH = re.compile(r"weights-sha256: ([0-9a-f]{64})")


def hashes(text):
    return set(HASH.findall(text))


# --- trainer-kill ----------------------------------------------------------------------
def trainer_kill(n):
    # 24 steps of tutorial-cnn, checkpoints every 3: a kill loses up to 2 steps, which
    # the restarted group must redo exactly.
    opts = ["--model", "tutorial-cnn", "--epochs", "2", "--steps-per-epoch", "12",
            "--per-worker-batch", "16", "--data-dir", args.data, "--print-weights-hash"]
    total = 24
    ref_metrics = os.path.join(work, "tk-ref.jsonl")
    ref = subprocess.run([args.trainer, "launch", "--workers", "2"] + opts +
                         ["--metrics-file", ref_metrics], env=ENV,
                         capture_output=True, text=True, timeout=300)
    ref_hash = hashes(ref.stdout)
    if ref.returncode != 0 or len(ref_hash) != 1:
        raise SystemExit(f"reference run failed: {ref.returncode} {ref.stderr[-2000:]}")
    ref_hash = ref_hash.pop()
    with open(ref_metrics) as f:
        done = [json.loads(ln) for ln in f if '"event":"done"' in ln][0]
    step_s = done["seconds"] / done["steps"]
    fails, lost, landed, t0 = 0, 0, 0, time.time()
    for i in range(n):
        d = os.path.join(work, f"tk-{i}")
        ck = os.path.join(d, "ck")
        os.makedirs(d)
        err_path = os.path.join(d, "err")
        # The metrics file appears only when the run ends, so a step is reached by
        # waiting for the checkpoint before it and then the remaining steps' time.
        at_step = rng.randint(1, total - 1)
        victim = rng.randint(0, 1)
        base = at_step - at_step % 3
        delay = (at_step - base + rng.random()) * step_s
        with open(err_path, "w") as err, open(os.path.join(d, "out"), "w") as out:
            p = subprocess.Popen([args.trainer, "launch", "--workers", "2"] + opts +
                                 ["--checkpoint-dir", ck, "--checkpoint-every-steps", "3"],
                                 env=ENV, stdout=out, stderr=err)
            deadline = time.time() + 120
            pid = None
            while time.time() < deadline and p.poll() is None:
                with open(err_path) as f:
                    text = f.read()
                pids = re.findall(rf"launch: worker {victim}: pid (\d+),", text)
                started = base == 0 and "Epoch 1/" in open(os.path.join(d, "out")).read()
                if pids and (started or os.path.exists(os.path.join(ck, f"ckpt-{base}.kt"))):
                    pid = int(pids[-1])
                    break
                time.sleep(0.01)
            if pid is not None:
                time.sleep(delay)
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            try:
                rc = p.wait(timeout=180)
            except subprocess.TimeoutExpired:
                p.kill()
                rc = p.wait()
        with open(err_path) as f:
            err_text = f.read()
        with open(os.path.join(d, "out")) as f:
            got = hashes(f.read())
        if "restart 1/" in err_text:
            landed += 1
        ok = rc == 0 and got == {ref_hash}
        if not ok:
            fails += 1
            if rc == 0:
                lost += 1
            log(f"trainer-kill {i}: worker {victim} at step {at_step}: exit {rc}, hashes "
                f"{sorted(got)} (want {ref_hash}); {err_text[-1500:]}")
        else:
            shutil.rmtree(d)
    row("trainer-kill", n, fails, lost, time.time() - t0,
        f"launch --workers 2, tutorial-cnn, {total} steps of {step_s * 1000:.0f} ms, "
        f"checkpoint every 3; "
        f"{landed} kills landed mid-run (the rest after the victim's last step)")


# --- ckpt-write ------------------------------------------------------------------------
def tiny_data(d):
    """The first 512 training and test examples as raw IDX files: the trial's cost is
    then the checkpoint, not decompressing 60,000 images."""
    import gzip
    os.makedirs(d)
    for name, hdr, rec in (("train-images-idx3-ubyte", 16, 784),
                           ("train-labels-idx1-ubyte", 8, 1),
                           ("t10k-images-idx3-ubyte", 16, 784),
                           ("t10k-labels-idx1-ubyte", 8, 1)):
        src = os.path.join(args.data, name)
        raw = gzip.open(src + ".gz").read() if os.path.exists(src + ".gz") else open(src, "rb").read()
        n = 512
        h = bytearray(raw[:hdr])
        h[4:8] = n.to_bytes(4, "big")
        with open(os.path.join(d, name), "wb") as f:
            f.write(bytes(h) + raw[hdr:hdr + n * rec])


def fsize_limit(k):
    def set_limit():
        resource.setrlimit(resource.RLIMIT_FSIZE, (k, k))
    return set_limit


def ckpt_dir_faults(d, ref_dir, kept, step, k):
    """What is wrong with checkpoint directory d after a writer was killed at byte k of
    the checkpoint of `step`: it must hold the complete checkpoints `kept` byte for byte
    as they were, the writer's temporary .ckpt-<step>.kt.tmp of exactly k bytes, and
    the chief's TensorBoard directory logs/ (event files only: its default place is the
    checkpoint directory); anything else, missing or extra, is a fault."""
    faults = []
    want = {f"ckpt-{s}.kt" for s in kept}
    tmp = f".ckpt-{step}.kt.tmp"
    names = set(os.listdir(d))
    for f in sorted(want - names):
        faults.append(f"complete checkpoint {f} is gone")
    for f in sorted(want & names):
        if not filecmp.cmp(os.path.join(d, f), os.path.join(ref_dir, f), shallow=False):
            faults.append(f"complete checkpoint {f} was changed")
    logs = os.path.join(d, "logs")
    events = sorted(os.listdir(logs)) if os.path.isdir(logs) else []
    if tmp not in names:
        # RLIMIT_FSIZE holds for every file: when k is below the size the event file
        # reaches first (its version record, a step's scalars), the kill lands there,
        # leaving that file at exactly k bytes and no temporary begun.
        if not (len(events) == 1 and os.path.getsize(os.path.join(logs, events[0])) == k):
            faults.append(f"no torn temporary {tmp}")
    elif os.path.getsize(os.path.join(d, tmp)) != k:
        faults.append(f"torn temporary {tmp} has {os.path.getsize(os.path.join(d, tmp))} "
                      f"bytes, expected {k}")
    if "logs" in names:
        if not os.path.isdir(logs):
            faults.append("logs is not the TensorBoard directory")
        else:
            other = [f for f in os.listdir(logs) if not f.startswith("events.out.tfevents.")]
            if other:
                faults.append(f"logs/ holds files that are not TensorBoard events: {other}")
    extra = sorted(names - want - {tmp, "logs"})
    if extra:
        faults.append("unexpected files: " + ", ".join(
            f"{f} ({os.path.getsize(os.path.join(d, f))} bytes)" for f in extra))
    return faults


def ckpt_write(n):
    data = os.path.join(work, "tiny")
    tiny_data(data)
    total = 8
    opts = ["--model", "mlp", "--optimizer", "adam", "--epochs", "2", "--steps-per-epoch", "4",
            "--per-worker-batch", "16", "--shuffle-buffer", "512", "--data-dir", data,
            "--checkpoint-every-steps", "1", "--keep-checkpoints", "3", "--print-weights-hash"]
    ref_dir = os.path.join(work, "ck-ref")
    ref = subprocess.run([args.trainer, "train"] + opts + ["--checkpoint-dir", ref_dir,
                         "--keep-checkpoints", str(total)],
                         env=ENV, capture_output=True, text=True, timeout=120)
    ref_hash = hashes(ref.stdout)
    if ref.returncode != 0 or len(ref_hash) != 1:
        raise SystemExit(f"reference run failed: {ref.returncode} {ref.stderr[-2000:]}")
    ref_hash = ref_hash.pop()
    size = os.path.getsize(os.path.join(ref_dir, f"ckpt-{total}.kt"))
    fails, lost, in_events, t0 = 0, 0, 0, time.time()
    for i in range(n):
        d = os.path.join(work, f"cw-{i}")
        os.makedirs(d)
        # The run already has checkpoints 1..have (the newest `keep` of them on disk) and
        # is killed at byte k of the checkpoint of step have+1.
        have = rng.randint(0, total - 1)
        # Bytes anywhere, with the header (format, lengths) and the tail (optimizer
        # state, checksum) drawn more often than their share of the file.
        region = rng.random()
        k = (rng.randrange(0, 4096) if region < 0.25 else
             rng.randrange(size - 4096, size) if region < 0.5 else rng.randrange(0, size))
        for s in range(max(1, have - 2), have + 1):
            shutil.copy(os.path.join(ref_dir, f"ckpt-{s}.kt"), d)
        killed = subprocess.run([args.trainer, "train"] + opts + ["--checkpoint-dir", d],
                                env=ENV, capture_output=True, text=True, timeout=120,
                                preexec_fn=fsize_limit(k))
        why = []
        if killed.returncode != -signal.SIGXFSZ:
            why.append(f"the writer was not killed by SIGXFSZ (exit {killed.returncode})")
        faults = ckpt_dir_faults(d, ref_dir, range(max(1, have - 2), have + 1), have + 1, k)
        why += faults
        if not faults and not os.path.exists(os.path.join(d, f".ckpt-{have + 1}.kt.tmp")):
            in_events += 1
        res = subprocess.run([args.trainer, "train"] + opts + ["--checkpoint-dir", d],
                             env=ENV, capture_output=True, text=True, timeout=120)
        want = (f"resuming from {d}/ckpt-{have}.kt" if have else
                f"no checkpoint in {d}: starting from scratch")
        if want not in res.stderr:
            why.append(f"did not load the newest complete checkpoint ({want!r})")
        if want not in res.stderr or any(f.startswith("complete checkpoint") for f in faults):
            lost += 1
        if res.returncode != 0 or hashes(res.stdout) != {ref_hash}:
            why.append(f"resumed run: exit {res.returncode}, hashes {sorted(hashes(res.stdout))}")
        if why:
            fails += 1
            log(f"ckpt-write {i}: after step {have}, byte {k} of {size}: " + "; ".join(why) +
                "\n" + res.stderr[-1500:])
        else:
            shutil.rmtree(d)
    row("ckpt-write", n, fails, lost, time.time() - t0,
        f"single chief, mlp+adam checkpoint of {size} bytes, killed (SIGXFSZ) at a random "
        f"byte after 0-{total - 1} complete checkpoints ({in_events} below the size its "
        f"TensorBoard event file reached first, killed there); resumed to the uninterrupted "
        f"hash")


# --- the api-level cluster -------------------------------------------------------------
class Cluster:
    def __init__(self):
        self.run = os.path.join(ROOT, "build", "soak", "run")
        self.env = dict(os.environ, KT_RUN=self.run)
        self.up = False

    def start(self):
        subprocess.run(["bash", "e2e/cluster/build-k8s.sh", "api"], cwd=ROOT, env=self.env,
                       check=True, stdout=subprocess.DEVNULL)
        self.up = True
        subprocess.run(["bash", "e2e/cluster/up.sh", "api"], cwd=ROOT, env=self.env, check=True,
                       stdout=subprocess.DEVNULL)
        vals = {}
        with open(os.path.join(self.run, "env")) as f:
            for line in f:
                m = re.match(r"(\w+)=(.*)", line.strip())
                if m:
                    vals[m.group(1)] = m.group(2).strip("'\"")
        self.kubeconfig = vals["KUBECONFIG"]
        self.kubectl = os.path.join(vals["KT_K8S_BIN"], "kubectl")
        self.k(["apply", "-f", os.path.join(ROOT, "crds")])
        self.k(["wait", "--for", "condition=Established", "--timeout", "60s",
                "crd/trainingjobs.kubetrain.dev"])
        for _ in range(40):
            if subprocess.run([self.kubectl, "--kubeconfig", self.kubeconfig, "get", "tj", "-A"],
                              capture_output=True).returncode == 0:
                break
            time.sleep(0.25)

    def k(self, a):
        return subprocess.run([self.kubectl, "--kubeconfig", self.kubeconfig,
                               "--request-timeout", "30s"] + a, check=True,
                              capture_output=True, text=True).stdout

    def stop(self):
        if self.up:
            subprocess.run(["bash", "e2e/cluster/down.sh"], cwd=ROOT, env=self.env,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def operator_kill(cl, n):
    t0 = time.time()
    logf = os.path.join(cl.run, "..", "op-chaos.log")
    summary = os.path.join(work, "chaos.json")
    p = subprocess.run([sys.executable, os.path.join(ROOT, "operator/tests/integration/chaos.py"),
                        "--kubectl", cl.kubectl, "--kubeconfig", cl.kubeconfig,
                        "--operator", args.operator, "--log", logf, "--ns", "soak-chaos",
                        "--jobs", "20", "--rounds", str(n), "--seed", str(SEED),
                        "--summary", summary],
                       capture_output=True, text=True, timeout=1800)
    checks = [ln for ln in p.stdout.splitlines() if ln.startswith(("PASS ", "FAIL "))]
    failed = [ln for ln in checks if ln.startswith("FAIL ")]
    for ln in failed:
        log(f"operator-kill: {ln}")
    if p.returncode != 0 and not failed:
        failed.append(f"chaos.py exit {p.returncode}")
        log(f"operator-kill: chaos.py exit {p.returncode}: {p.stderr[-2000:]}")
    try:
        with open(summary) as f:
            s = json.load(f)
        lost = s["duplicates"] + s["orphans"] + s["not_terminal"]
    except (OSError, ValueError, KeyError):
        s, lost = {}, "unknown"
    with open(logf, errors="replace") as f:
        if re.search(r"runtime error|AddressSanitizer", f.read()):
            failed.append("sanitizer report")
            log("operator-kill: a sanitizer report in " + logf)
    row("operator-kill", n, len(failed), lost, time.time() - t0,
        f"20 concurrent jobs x 2 workers, half with an injected worker failure; "
        f"{len(checks)} checks; duplicates {s.get('duplicates')}, orphans {s.get('orphans')}, "
        f"jobs not terminal {s.get('not_terminal')}")


def apiserver_restart(cl, n):
    t0 = time.time()
    logf = os.path.join(cl.run, "..", "op-apiserver.log")
    summary = os.path.join(work, "apirestart.json")
    downs = [rng.choice([0, 1, 3, 6, 12, 30]) for _ in range(n)]
    p = subprocess.run([sys.executable,
                        os.path.join(ROOT, "operator/tests/integration/apirestart.py"),
                        "--kubectl", cl.kubectl, "--kubeconfig", cl.kubeconfig,
                        "--operator", args.operator, "--log", logf, "--ns", "soak-api",
                        "--downs", ",".join(map(str, downs)), "--summary", summary],
                       env=cl.env, capture_output=True, text=True, timeout=1800)
    for ln in p.stdout.splitlines():
        if ln.startswith("# "):
            log("apiserver-restart: " + ln[2:])
    failed = [ln for ln in p.stdout.splitlines() if ln.startswith("FAIL ")]
    for ln in failed:
        log(f"apiserver-restart: {ln}")
    if p.returncode != 0 and not failed:
        failed.append(f"apirestart.py exit {p.returncode}")
        log(f"apiserver-restart: apirestart.py exit {p.returncode}: {p.stderr[-2000:]}")
    try:
        with open(summary) as f:
            s = json.load(f)
    except (OSError, ValueError):
        s = {"times": [], "lost": "unknown", "worst": 0.0}
    # A trial is failed when its recovery was over the limit or did not happen.
    fails = sum(1 for t in s["times"] if t > 5.0) + (n - len(s["times"]))
    if failed and not fails:
        fails = 1
    row("apiserver-restart", n, fails, s["lost"], time.time() - t0,
        f"watch recovery (new job's pods, a failed pod counted and its group restarted) after the "
        f"apiserver answers again, {downs} s down: {s['times']} s, worst {s['worst']:.1f} s, "
        f"limit 5 s")


def main():
    log(f"seed {SEED}, scale {SCALE}, work {work}")
    t0 = time.time()
    try:
        if "trainer-kill" in KINDS:
            trainer_kill(count("SOAK_TRAINER_KILLS", 100))
        if "ckpt-write" in KINDS:
            ckpt_write(count("SOAK_CKPT_KILLS", 1000))
        cluster_kinds = [k for k in KINDS if k in ("operator-kill", "apiserver-restart")]
        if cluster_kinds:
            cl = Cluster()
            try:
                cl.start()
                if "operator-kill" in KINDS:
                    operator_kill(cl, count("SOAK_OPERATOR_KILLS", 50))
                if "apiserver-restart" in KINDS:
                    apiserver_restart(cl, count("SOAK_APISERVER_RESTARTS", 5))
            finally:
                cl.stop()
    finally:
        total = time.time() - t0
        print()
        print(f"{'trial kind':<20}{'trials':>8}{'failures':>10}{'data lost':>11}{'seconds':>9}")
        for r in rows:
            print(f"{r['kind']:<20}{r['trials']:>8}{r['failures']:>10}{str(r['data_lost']):>11}"
                  f"{r['seconds']:>9}")
        print(f"total {total:.0f} s, seed {SEED}")
        if args.out:
            cpu = ""
            try:
                with open("/proc/cpuinfo") as f:
                    cpu = next((ln.split(":", 1)[1].strip() for ln in f
                                if ln.startswith("model name")), "")
            except OSError:
                pass
            os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
            with open(args.out, "w") as f:
                json.dump({"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                           "machine": {"arch": platform.machine(), "nproc": os.cpu_count(),
                                       "cpu": cpu},
                           "seed": SEED, "scale": SCALE, "seconds": round(total, 1),
                           "rows": rows}, f, indent=2)
                f.write("\n")
        shutil.rmtree(work, ignore_errors=True)
    bad = sum(r["failures"] for r in rows)
    sys.exit(1 if bad else 0)


main()
