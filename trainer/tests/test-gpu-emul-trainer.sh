#!/usr/bin/env bash
# The whole trainer's GPU path on a machine without a GPU: kubetrain-trainer built with
# KT_GPU against the CPU stand-in of the CUDA runtime, cuBLAS, cuDNN and a one-rank
# NCCL (trainer/tests/fakecuda; what it checks and what it cannot: its cuda_runtime.h).
# This is not a GPU: it checks train.c's device path (upload, batches, the step's CUDA
# graph, statistics, the optimizer, checkpoints and the stop flag) end to end, and
# test-gpu-build.sh does the same on a real device when there is one. The test set's
# evaluation is left out here (10,000 examples through the emulated convolution take
# half a minute); test-gpu-emul compares gpu_model_evaluate with the CPU.
source e2e/lib/tap.sh
BIN=${BUILD:-build}/san/emul/bin/kubetrain-trainer
CPU=${BUILD:-build}/bin/kubetrain-trainer
DATA=/usr/share/datasets/fashion-mnist
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

if [[ ! -x $BIN || ! -x $CPU ]]; then
  tap_fail "the emulated trainer and the CPU trainer are built" "missing $BIN or $CPU (make test builds both)"
  tap_done; exit
fi

run=(--model tutorial-cnn --epochs 2 --steps-per-epoch 8 --per-worker-batch 32 --threads 1
     --optimizer adam --data-dir "$DATA" --print-weights-hash)
hash_of() { sed -n 's/^weights-sha256: //p' "$1"; }
losses() { python3 -c 'import json,sys; print(" ".join("%.6f" % e["loss"] for e in map(json.loads, open(sys.argv[1])) if e["event"] == "step"))' "$1"; }
close() { python3 -c 'import sys; a, b, tol = [list(map(float, x.split())) for x in sys.argv[1:3]] + [float(sys.argv[3])]; sys.exit(0 if len(a) == len(b) > 0 and all(abs(x - y) <= tol * abs(y) for x, y in zip(a, b)) else 1)' "$1" "$2" "$3"; }

# --- the device path against the CPU ---------------------------------------------------
"$CPU" "${run[@]}" --device cpu --metrics-file "$tmp/cpu.jsonl" >"$tmp/cpu.out" 2>&1
"$BIN" "${run[@]}" --device gpu --metrics-file "$tmp/gpu.jsonl" >"$tmp/gpu.out" 2>"$tmp/gpu.err"; rc=$?
if [[ $rc -eq 0 ]] && grep -q "training on CUDA device 0 of 1: CPU emulation" "$tmp/gpu.err" \
   && grep -q "replays a CUDA graph from step 3" "$tmp/gpu.err"; then
  tap_ok "--device gpu on the emulation: trains, and the step replays a CUDA graph from step 3"
else tap_fail "--device gpu on the emulation trains with graphs" "rc=$rc $(tail -5 "$tmp/gpu.err")"; fi
lc=$(losses "$tmp/cpu.jsonl"); lg=$(losses "$tmp/gpu.jsonl")
if close "$lg" "$lc" 1e-3; then tap_ok "the 16 step losses follow the CPU trainer's within 1e-3"
else tap_fail "the step losses follow the CPU trainer's" "cpu: $lc"$'\n'"gpu: $lg"; fi
HG=$(hash_of "$tmp/gpu.out")

# --- graphs off: the same operations, so the same bits ---------------------------------
"$BIN" "${run[@]}" --device gpu --cuda-graphs=false >"$tmp/nog.out" 2>"$tmp/nog.err"; rc=$?
if [[ $rc -eq 0 && ${#HG} -eq 64 && $(hash_of "$tmp/nog.out") == "$HG" ]] \
   && ! grep -q "CUDA graph" "$tmp/nog.err"; then
  tap_ok "--cuda-graphs=false: no graph, the same final weights bit for bit"
else tap_fail "--cuda-graphs=false gives the same weights" "rc=$rc $HG vs $(hash_of "$tmp/nog.out") $(tail -3 "$tmp/nog.err")"; fi

# --- the nccl collective at one rank ---------------------------------------------------
"$BIN" "${run[@]}" --device gpu --collective nccl >"$tmp/nccl.out" 2>"$tmp/nccl.err"; rc=$?
if [[ $rc -eq 0 && $(hash_of "$tmp/nccl.out") == "$HG" ]] \
   && grep -q "NCCL communicator of 1 rank on CUDA device 0 ready" "$tmp/nccl.err"; then
  tap_ok "--collective nccl at one rank: the communicator comes up, the same weights"
else tap_fail "--collective nccl at one rank" "rc=$rc $(hash_of "$tmp/nccl.out") vs $HG $(tail -3 "$tmp/nccl.err")"; fi

# --- checkpoints: the device state goes out and comes back ------------------------------
ck=$tmp/ck
"$BIN" "${run[@]}" --epochs 1 --device gpu --checkpoint-dir "$ck" >/dev/null 2>&1
"$BIN" "${run[@]}" --device gpu --checkpoint-dir "$ck" >"$tmp/res.out" 2>"$tmp/res.err"; rc=$?
if [[ $rc -eq 0 && $(hash_of "$tmp/res.out") == "$HG" ]] && grep -q "resuming from .*ckpt-8.kt" "$tmp/res.err"; then
  tap_ok "resumed from the epoch-1 checkpoint (weights and Adam state from the device): same weights"
else tap_fail "resume on the device" "rc=$rc $(hash_of "$tmp/res.out") vs $HG $(tail -4 "$tmp/res.err")"; fi

# --- SIGTERM: the stop flag reaches the replayed graph -------------------------------------
ck=$tmp/ck-term
"$BIN" "${run[@]}" --device gpu --checkpoint-dir "$ck" >"$tmp/term.out" 2>"$tmp/term.err" &
pid=$!
# the log line comes after step 3 (stderr is not buffered); a step takes ~0.3 s here
for _ in $(seq 600); do
  grep -q "replays a CUDA graph" "$tmp/term.err" 2>/dev/null && break
  sleep 0.05
done
sleep 0.3
kill -TERM "$pid"
wait "$pid"; rc=$?
steps=$(sed -n 's/.*stopped by a signal after step \([0-9]*\) .*/\1/p' "$tmp/term.err")
"$BIN" "${run[@]}" --device gpu --checkpoint-dir "$ck" >"$tmp/term2.out" 2>"$tmp/term2.err"; rc2=$?
if [[ $rc -eq 75 && ${steps:-99} -lt 16 && $rc2 -eq 0 && $(hash_of "$tmp/term2.out") == "$HG" ]] \
   && grep -q "resuming from .*ckpt-$steps.kt" "$tmp/term2.err"; then
  tap_ok "SIGTERM during graph replays: stopped after step $steps with exit 75; the resumed run ends with the same weights"
else tap_fail "SIGTERM during graph replays" "rc=$rc steps=$steps rc2=$rc2 $(tail -3 "$tmp/term.err") $(tail -3 "$tmp/term2.err")"; fi

tap_done
