#!/usr/bin/env bash
# make bench-gpu's script (trainer/bench/bench_gpu.py) without a GPU: its bookkeeping, not
# its figures. The trainer is the emulated one (trainer/tests/fakecuda, CPU work that
# says it is no GPU); PyTorch on a CUDA device cannot be had here, so a stand-in prints
# the peer's JSON line (fixed samples/s) and this test says so. Checked: without a
# device it says skipped and writes nothing; the medians and ratios are those of the
# runs; a series that fails is named, not run again, and the exit status is 1 while the
# other series go on; a run killed part way (as at a time limit) leaves the JSON of every
# run before the kill.
set -uo pipefail # no -e: a failed check is reported (not ok) and the test goes on
source e2e/lib/tap.sh
source trainer/tests/lib.sh
DATA=/usr/share/datasets/fashion-mnist
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

emul_trainers || { tap_done; exit; }
echo "# PyTorch's side is a stand-in (no CUDA device here): the figures are not measured"

# The stand-in peer: torch_gpu_peer.py's arguments and output line. FAIL_MODE fails that
# mode; KILL_AT=N kills the bench (its parent) at the stand-in's N-th call.
cat >"$tmp/peer" <<'EOF'
#!/usr/bin/env python3
import json, os, signal, sys
script, data, batch, warm, timed, mode = sys.argv[1:7]
calls = os.path.join(os.environ["STANDIN_DIR"], "calls")
n = (int(open(calls).read()) if os.path.exists(calls) else 0) + 1
open(calls, "w").write(str(n))
if os.environ.get("KILL_AT") == str(n):
    os.kill(os.getppid(), signal.SIGKILL)
    sys.exit(1)
if os.environ.get("FAIL_MODE") == mode:
    sys.exit("stand-in: torch.compile has no compiler")
print(json.dumps({"mode": mode, "batch": int(batch), "samples_per_sec":
                  {"eager": 1000.0, "compile": 2000.0}[mode], "torch": "stand-in",
                  "cuda": "-", "cudnn": 0, "device": "no device"}))
EOF
chmod +x "$tmp/peer"

bench() { # OUT_DIR TRAINER, env as given: runs bench_gpu.py, output in OUT_DIR/log
  mkdir -p "$1"
  STANDIN_DIR=$1 GPU_BENCH_STEPS=64:2 python3 trainer/bench/bench_gpu.py "$2" "$tmp/peer" \
    "$DATA" "$1/out.json" >"$1/log" 2>&1
}

# --- no device: the CPU build's --device gpu fails ----------------------------------
bench "$tmp/none" "$CPU"; rc=$?
if [[ $rc -eq 0 ]] && grep -q "^bench-gpu: skipped: .*" "$tmp/none/log" &&
   [[ ! -e $tmp/none/out.json ]]; then
  tap_ok "without a device: $(head -1 "$tmp/none/log")"
else
  tap_fail "without a device it says skipped, exits 0 and writes no JSON" \
    "rc=$rc; $(ls "$tmp/none"); $(tail -5 "$tmp/none/log")"
fi

# --- two rounds, torch.compile failing ----------------------------------------------
ROUNDS=2 FAIL_MODE=compile bench "$tmp/full" "$BIN"; rc=$?
check=$(python3 - "$tmp/full/out.json" <<'EOF' 2>&1
import json, statistics, sys
d = json.load(open(sys.argv[1]))
r = d["results"]["64"]
n = {k: len(v) for k, v in r["runs"].items()}
want = {"kubetrain": 2, "torch_eager": 2, "kubetrain_nccl": 2, "kubetrain_no_graphs": 2,
        "torch_compile": 0}
assert n == want, "runs per series %s, want %s" % (n, want)
assert all(v > 0 for k in want if k.startswith("kubetrain") for v in r["runs"][k]), r["runs"]
med = lambda k: statistics.median(r["runs"][k])
assert abs(r["kubetrain_over_torch_eager"] - med("kubetrain") / 1000.0) < 1e-12, r
assert abs(r["nccl_one_rank_cost"] - (1 - med("kubetrain_nccl") / med("kubetrain"))) < 1e-12, r
assert abs(r["cuda_graphs_speedup"] - med("kubetrain") / med("kubetrain_no_graphs")) < 1e-12, r
assert "kubetrain_over_torch_compile" not in r, "a ratio without its denominator: %s" % r
assert list(d["failed"]) == ["torch_compile at batch 64"], d["failed"]
assert "stand-in: torch.compile has no compiler" in d["failed"]["torch_compile at batch 64"]
assert d["runs_done"] == 9 and d["runs_planned"] == 10, (d["runs_done"], d["runs_planned"])
assert "fakecuda" in d["environment"]["kubetrain_device"], d["environment"]
assert d["environment"]["torch"] == "stand-in", d["environment"]
print("medians %s" % {k: round(med(k), 1) for k in want if n[k]})
EOF
)
if [[ $rc -eq 1 ]] && grep -q "torch_compile at batch 64 failed, not run again" "$tmp/full/log" &&
   [[ $(grep -c "torch_compile at batch 64$" "$tmp/full/log") -eq 1 ]] &&
   [[ $check == medians* ]]; then
  tap_ok "two rounds with torch.compile failing: exit 1, the failure named and not retried,\
 ratios of the medians ($check)"
else
  tap_fail "two rounds with torch.compile failing" "rc=$rc; $check; $(tail -8 "$tmp/full/log")"
fi

# --- killed at the third peer run (round 2's eager): round 1 and what followed stay --
(ROUNDS=2 KILL_AT=3 bench "$tmp/cut" "$BIN") 2>/dev/null; rc=$?
check=$(python3 - "$tmp/cut/out.json" <<'EOF' 2>&1
import json, sys
d = json.load(open(sys.argv[1]))
n = {k: len(v) for k, v in d["results"]["64"]["runs"].items()}
want = {"kubetrain": 2, "torch_eager": 1, "kubetrain_nccl": 1, "kubetrain_no_graphs": 1,
        "torch_compile": 1}
assert n == want, "runs per series %s, want %s" % (n, want)
assert d["runs_done"] == 6 and not d["failed"], (d["runs_done"], d["failed"])
assert "kubetrain_over_torch_compile" in d["results"]["64"], d["results"]["64"]
print("runs_done 6 of %d" % d["runs_planned"])
EOF
)
if [[ $rc -ne 0 && $check == runs_done* ]]; then
  tap_ok "killed part way (rc $rc): the JSON holds every run before the kill ($check)"
else
  tap_fail "killed part way: the JSON holds every run before the kill" \
    "rc=$rc; $check; $(tail -5 "$tmp/cut/log")"
fi
tap_done
