#!/usr/bin/env bash
# The GPU build on every make test: make GPU=1 compiles and links the trainer (and the
# GPU test program) into build/gpu with the CUDA toolchain of trainer/gpu-toolchain.sh;
# the binary starts, finds its CUDA libraries, and on a machine without a device
# refuses --device gpu and --collective nccl with one clear line and exit 2, while
# --device auto trains on the CPU with the same weights as the CPU build. Then the GPU
# tests (trainer/tests/test-gpu.c) run: on a machine without a device each says skipped.
set -uo pipefail # no -e: a failed check is reported (not ok) and the test goes on
source e2e/lib/tap.sh
source trainer/tests/lib.sh
OUT=build/gpu
BIN=$OUT/bin/kubetrain-trainer
TEST=$OUT/san/tests/test-gpu
DATA=/usr/share/datasets/fashion-mnist
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

t0=$(date +%s)
if make -j2 GPU=1 BUILD=$OUT "$BIN" "$TEST" >"$tmp/make.log" 2>&1; then
  tap_ok "make GPU=1 builds and links the trainer and test-gpu ($(( $(date +%s) - t0 ))s)"
else
  tap_fail "make GPU=1 builds and links the trainer and test-gpu" "$(tail -30 "$tmp/make.log")"
  tap_done; exit
fi

libs=$(ldd "$BIN")
missing=$(grep 'not found' <<<"$libs")
want=0
for so in libcudart libcublas libcudnn libnccl; do grep -q "$so" <<<"$libs" && want=$((want + 1)); done
if [[ -z $missing && $want -eq 4 ]]; then tap_ok "the binary links cudart, cuBLAS, cuDNN and NCCL, all found"
else tap_fail "the binary links cudart, cuBLAS, cuDNN and NCCL, all found" "$libs"; fi

short=(--epochs 1 --steps-per-epoch 2 --per-worker-batch 16 --threads 1)
"$BIN" "${short[@]}" --device gpu --data-dir "$DATA" >"$tmp/out" 2>"$tmp/err"
rc=$?
gpu=0
if [[ $rc -eq 2 ]] && grep -q -- '--device gpu: no CUDA device' "$tmp/err" && [[ $(wc -l <"$tmp/err") -eq 1 ]]; then
  tap_ok "--device gpu without a device: exit 2, one line: $(cat "$tmp/err")"
elif [[ $rc -eq 0 ]] && grep -q 'training on CUDA device' "$tmp/err"; then
  gpu=1
  tap_ok "--device gpu trains on the device: $(grep 'training on CUDA' "$tmp/err")"
else
  tap_fail "--device gpu: exit 2 without a device, or training on one" "rc $rc: $(cat "$tmp/err")"
fi

if [[ $gpu -eq 0 ]]; then
  "$BIN" "${short[@]}" --collective nccl >/dev/null 2>"$tmp/err"
  rc=$?
  if [[ $rc -eq 2 ]] && grep -q -- '--device gpu: no CUDA device\|--collective nccl: needs a CUDA device' "$tmp/err"; then
    tap_ok "--collective nccl without a device: exit 2: $(cat "$tmp/err")"
  else tap_fail "--collective nccl without a device: exit 2" "rc $rc: $(cat "$tmp/err")"; fi

  if [[ -f $DATA/train-labels-idx1-ubyte.gz || -f $DATA/train-labels-idx1-ubyte ]] && [[ -x build/bin/kubetrain-trainer ]]; then
    h_gpu=$("$BIN" "${short[@]}" --device auto --print-weights-hash 2>"$tmp/err" | sed -n 's/^weights-sha256: //p')
    h_cpu=$(build/bin/kubetrain-trainer "${short[@]}" --print-weights-hash 2>/dev/null | sed -n 's/^weights-sha256: //p')
    if [[ ${#h_gpu} -eq 64 && $h_gpu == "$h_cpu" ]]; then
      tap_ok "--device auto without a device trains on the CPU, same weights as the CPU build"
    else tap_fail "--device auto without a device trains on the CPU" "'$h_gpu' vs '$h_cpu': $(cat "$tmp/err")"; fi
  else
    tap_skip "--device auto on the CPU" "no Fashion-MNIST in $DATA or no CPU build"
  fi
fi

# The whole trainer on the device (only where one is): its losses follow the CPU's, the
# one-rank NCCL collective changes nothing, and two local workers on two GPUs (nccl, picked
# by collective auto) end with the same weights.
if [[ $gpu -eq 1 ]]; then
  run=(--epochs 1 --steps-per-epoch 8 --per-worker-batch 32 --optimizer adam --data-dir "$DATA")
  "$BIN" "${run[@]}" --device cpu --metrics-file "$tmp/cpu.jsonl" >/dev/null 2>&1
  "$BIN" "${run[@]}" --device gpu --metrics-file "$tmp/gpu.jsonl" >/dev/null 2>"$tmp/err"
  "$BIN" "${run[@]}" --device gpu --collective nccl --metrics-file "$tmp/nccl.jsonl" >/dev/null 2>>"$tmp/err"
  lc=$(losses "$tmp/cpu.jsonl"); lg=$(losses "$tmp/gpu.jsonl"); ln=$(losses "$tmp/nccl.jsonl")
  if close "$lg" "$lc" 1e-3; then tap_ok "trainer on the GPU: 8 step losses within 1e-3 of the CPU's"
  else tap_fail "trainer on the GPU: losses follow the CPU's" "cpu: $lc"$'\n'"gpu: $lg"$'\n'"$(cat "$tmp/err")"; fi
  if close "$ln" "$lg" 1e-4; then tap_ok "trainer with --collective nccl at one rank: the same losses"
  else tap_fail "trainer with --collective nccl at one rank" "gpu: $lg"$'\n'"nccl: $ln"$'\n'"$(cat "$tmp/err")"; fi
  ndev=$(grep -o 'training on CUDA device [0-9]* of [0-9]*' "$tmp/err" | head -1 | awk '{print $NF}')
  if [[ ${ndev:-1} -ge 2 ]]; then
    hs=$("$BIN" launch --workers 2 "${run[@]}" --device gpu --print-weights-hash 2>"$tmp/err" | sed -n 's/^.*weights-sha256: //p' | sort -u)
    if [[ ${#hs} -eq 64 ]] && grep -q 'NCCL communicator of 2 ranks' "$tmp/err"; then
      tap_ok "launch --workers 2 on two GPUs: NCCL, identical weights on both ranks"
    else tap_fail "launch --workers 2 on two GPUs" "hashes '$hs': $(tail -20 "$tmp/err")"; fi
  else
    tap_skip "launch --workers 2 on two GPUs" "one CUDA device here"
  fi
else
  tap_skip "trainer on the GPU: losses follow the CPU's, one-rank NCCL, two GPUs" "no CUDA device"
fi

# --gpus-per-worker N: N ranks in this worker, each the trainer re-executed (run here on
# the CPU: the fan-out and supervision do not depend on the device).
if [[ -f $DATA/train-labels-idx1-ubyte.gz || -f $DATA/train-labels-idx1-ubyte ]]; then
  KUBETRAIN_SECRET=$(secret)
  export KUBETRAIN_SECRET
  tf=$(tf_config 0 "$(free_ports 2)")
  pg=(--epochs 1 --steps-per-epoch 3 --per-worker-batch 16 --device cpu --threads 1 --print-weights-hash)
  h_ranks=$(TF_CONFIG=$tf KUBETRAIN_TERMINATION_FILE=$tmp/term timeout 120 "$BIN" train --gpus-per-worker 2 "${pg[@]}" 2>"$tmp/err" | sed -n 's/^weights-sha256: //p' | sort -u)
  h_launch=$("$BIN" launch --workers 2 "${pg[@]}" 2>/dev/null | sed -n 's/^.*weights-sha256: //p' | sort -u)
  if [[ ${#h_ranks} -eq 64 && $h_ranks == "$h_launch" ]] && grep -q '"step":3' "$tmp/term"; then
    tap_ok "--gpus-per-worker 2: two ranks in one worker train as launch --workers 2 does"
  else tap_fail "--gpus-per-worker 2: two ranks in one worker" "'$h_ranks' vs '$h_launch': $(cat "$tmp/err")"; fi

  tf=$(tf_config 0 "$(free_ports 2)")
  TF_CONFIG=$tf KUBETRAIN_TERMINATION_FILE=/dev/null "$BIN" train --gpus-per-worker 2 --epochs 1 \
    --steps-per-epoch 100000 --per-worker-batch 16 --device cpu --threads 1 >/dev/null 2>"$tmp/err" &
  sup=$!
  for _ in $(seq 300); do grep -q 'initial weights verified' "$tmp/err" && break; sleep 0.2; done
  # The victim is the supervisor's child that runs local rank 1 (its arguments end in
  # --index 1 --gpus-per-worker 1), found in /proc rather than taken from the log, and
  # checked alive before the kill: a kill that misses must say why, not wait 60 s.
  victim=$(pgrep -P "$sup" -f -- '--index 1 --gpus-per-worker 1$')
  logged=$(sed -n 's/.*rank 1 (local rank 1 of worker 0): pid \([0-9]*\).*/\1/p' "$tmp/err")
  t0=$(date +%s)
  if [[ -n $victim ]] && kill -9 "$victim"; then
    for _ in $(seq 300); do kill -0 "$sup" 2>/dev/null || break; sleep 0.2; done
  else victim=; fi
  if kill -0 "$sup" 2>/dev/null; then kill "$sup"; sleep 1; kill -9 "$sup" 2>/dev/null; fi
  wait "$sup"; rc=$?
  secs=$(( $(date +%s) - t0 ))
  if [[ -n $victim && $rc -eq 75 && $secs -le 30 ]]; then
    tap_ok "--gpus-per-worker 2: a killed rank ends the worker with 75 in ${secs}s"
  else tap_fail "--gpus-per-worker 2: a killed rank ends the worker with 75" "victim '$victim' (logged '$logged') rc $rc after ${secs}s: $(ps -o pid,ppid,stat,args --ppid "$sup" 2>&1; tail -5 "$tmp/err")"; fi
else
  tap_skip "--gpus-per-worker" "no Fashion-MNIST in $DATA"
fi

# The GPU tests, one line each here (cmocka's "not ok N # SKIP" is a skip). ASan needs
# the shadow gap unprotected for the CUDA driver; the driver's allocations are not leaks.
ASAN_OPTIONS=protect_shadow_gap=0:detect_leaks=0 CMOCKA_MESSAGE_OUTPUT=TAP "$TEST" >"$tmp/tap" 2>&1
rc=$?
ran=0
reason=""
# shellcheck disable=SC2094 # the loop reads $tmp/tap and only quotes it: nothing writes it
while IFS= read -r line; do
  if [[ $line == "# skipped: "* ]]; then
    reason=${line#\# skipped: }
  elif [[ $line =~ ^(not\ )?ok\ [0-9]+\ #\ SKIP\ (.*)$ ]]; then
    ran=$((ran + 1)); tap_skip "test-gpu ${BASH_REMATCH[2]}" "$reason"
  elif [[ $line =~ ^ok\ [0-9]+\ -\ (.*)$ ]]; then
    ran=$((ran + 1)); tap_ok "test-gpu ${BASH_REMATCH[1]}"
  elif [[ $line =~ ^not\ ok\ [0-9]+\ -\ (.*)$ ]]; then
    ran=$((ran + 1)); tap_fail "test-gpu ${BASH_REMATCH[1]}" "$(cat "$tmp/tap")"
  fi
done <"$tmp/tap"
if [[ $ran -eq 0 || $rc -ne 0 ]]; then tap_fail "test-gpu ran to its end" "rc $rc: $(cat "$tmp/tap")"; fi
tap_done
