#!/usr/bin/env python3
"""plant.py ARGS...: kubetrain-trainer with a planted checkpoint-writer fault, so that a
test can check that the soak's ckpt-write check catches one (e2e/tests/test-soak-ckpt.sh
runs soak.py with --trainer pointing here).

It runs the real trainer ($SOAK_PLANT_TRAINER) with ARGS. When the run was stopped by
RLIMIT_FSIZE (the soak's kill at byte k of a checkpoint) it then leaves the checkpoint
directory as a broken writer would have, and dies of SIGXFSZ as the trainer did.
SOAK_PLANT picks the fault:
  in-place       the checkpoint was written under its final name, without a temporary
                 and a rename: the torn file is ckpt-<step>.kt
  damage-newest  the newest complete checkpoint was overwritten (one byte changed)
  stray          a second temporary was left behind beside the torn one
  logs           a torn temporary was written into the TensorBoard directory logs/
SOAK_PLANT_LOG, when set, is a directory that gets one empty file per fault planted
(damage-newest plants none when there is no complete checkpoint yet, or when the limit
is 0 bytes: this process keeps the trainer's RLIMIT_FSIZE, so it writes nothing past k).
"""
import os
import re
import resource
import signal
import subprocess
import sys

argv = [os.environ["SOAK_PLANT_TRAINER"]] + sys.argv[1:]
plant = os.environ["SOAK_PLANT"]
limit = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
killed = limit != resource.RLIM_INFINITY
rc = subprocess.run(argv).returncode
if not killed or rc != -signal.SIGXFSZ:
    sys.exit(rc if rc >= 0 else 128 - rc)

d = argv[argv.index("--checkpoint-dir") + 1]
names = os.listdir(d)
torn = [f for f in names if re.fullmatch(r"\.ckpt-\d+\.kt\.tmp", f)]
done = sorted((int(m.group(1)), f) for f in names for m in [re.fullmatch(r"ckpt-(\d+)\.kt", f)]
              if m)
planted = False
if plant == "in-place" and torn:
    os.rename(os.path.join(d, torn[0]), os.path.join(d, torn[0][1:-4]))
    planted = True
elif plant == "damage-newest" and done and limit > 0:
    at = min(100, limit - 1)
    with open(os.path.join(d, done[-1][1]), "r+b") as f:
        f.seek(at)
        b = f.read(1)
        f.seek(at)
        f.write(bytes([b[0] ^ 0xFF]))
    planted = True
elif plant == "stray":
    open(os.path.join(d, ".ckpt-999.kt.tmp"), "wb").close()
    planted = True
elif plant == "logs" and torn:
    os.makedirs(os.path.join(d, "logs"), exist_ok=True)
    os.rename(os.path.join(d, torn[0]), os.path.join(d, "logs", torn[0]))
    planted = True
if planted and os.environ.get("SOAK_PLANT_LOG"):
    open(os.path.join(os.environ["SOAK_PLANT_LOG"], os.path.basename(d)), "w").close()
# Python ignores SIGXFSZ; the soak expects the writer to die of it.
signal.signal(signal.SIGXFSZ, signal.SIG_DFL)
os.kill(os.getpid(), signal.SIGXFSZ)
