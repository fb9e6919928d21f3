#!/usr/bin/env bash
# The whole trainer's GPU path on a machine without a GPU: kubetrain-trainer built with
# KT_GPU against the CPU stand-in of the CUDA runtime, cuBLAS, cuDNN and of NCCL
# between processes (trainer/tests/fakecuda; what it checks and what it cannot: its
# cuda_runtime.h and nccl.h). This is not a GPU: it checks train.c's device path (upload,
# batches, the step's CUDA graph, statistics, the optimizer, checkpoints, the stop flag)
# and the NCCL path (two ranks with the per-layer all-reduce started during backward,
# --gpus-per-worker, a lost peer) end to end, and two GPU ranks over the host's ring;
# test-gpu-build.sh does the like on a real device when there is one. The test set's
# evaluation is left out here (10,000 examples through the emulated convolution take
# half a minute); test-gpu-emul compares gpu_model_evaluate with the CPU.
set -uo pipefail # no -e: a failed check is reported (not ok) and the test goes on
source e2e/lib/tap.sh
source trainer/tests/lib.sh
unset TF_CONFIG KUBETRAIN_SECRET KUBETRAIN_SECRET_FILE
DATA=/usr/share/datasets/fashion-mnist
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

emul_trainers || { tap_done; exit; }

run=(--model tutorial-cnn --epochs 2 --steps-per-epoch 8 --per-worker-batch 32 --threads 1
     --optimizer adam --data-dir "$DATA" --print-weights-hash)

# --- the device path against the CPU ---------------------------------------------------
"$CPU" "${run[@]}" --device cpu --metrics-file "$tmp/cpu.jsonl" >"$tmp/cpu.out" 2>&1
"$BIN" "${run[@]}" --device gpu --metrics-file "$tmp/gpu.jsonl" >"$tmp/gpu.out" 2>"$tmp/gpu.err"; rc=$?
if [[ $rc -eq 0 ]] && grep -q "training on CUDA device 0 of 2: CPU emulation" "$tmp/gpu.err" \
   && grep -q "replays a CUDA graph from step 3" "$tmp/gpu.err"; then
  tap_ok "--device gpu on the emulation: trains, and the step replays a CUDA graph from step 3"
else tap_fail "--device gpu on the emulation trains with graphs" "rc=$rc $(tail -5 "$tmp/gpu.err")"; fi
lc=$(losses "$tmp/cpu.jsonl"); lg=$(losses "$tmp/gpu.jsonl")
if close "$lg" "$lc" 1e-3; then tap_ok "the 16 step losses follow the CPU trainer's within 1e-3"
else tap_fail "the step losses follow the CPU trainer's" "cpu: $lc"$'\n'"gpu: $lg"; fi
HG=$(hashes "$tmp/gpu.out")

# --- an activation the device lacks (docs/gpu.md): exit 3 naming the layer and the
# activation, before anything trains; the CPU path trains the same model.
printf '%s' '{"input_shape":[28,28],"layers":[{"type":"Flatten"},{"type":"Dense","units":16,
"activation":"gelu","name":"hidden"},{"type":"Dense","units":10}]}' >"$tmp/gelu.json"
act=(--model "$tmp/gelu.json" --epochs 1 --steps-per-epoch 2 --per-worker-batch 8 --threads 1
     --data-dir "$DATA")
"$BIN" "${act[@]}" --device gpu >/dev/null 2>"$tmp/gelu.err"; rc=$?
"$BIN" "${act[@]}" --device cpu >/dev/null 2>&1; rc_cpu=$?
if [[ $rc -eq 3 && $rc_cpu -eq 0 ]] \
   && grep -q 'layer "hidden": activation gelu has no CUDA kernel' "$tmp/gelu.err"; then
  tap_ok "a gelu model: --device gpu exits 3 naming layer and activation, --device cpu trains it"
else tap_fail "a gelu model is refused on the device" "rc=$rc cpu rc=$rc_cpu $(cat "$tmp/gelu.err")"; fi

# --- the layers the device has no kernels for (docs/gpu.md): each exits 3 naming it
nogpu=('{"type":"Conv2D","filters":4,"kernel_size":3},{"type":"GlobalAveragePooling2D","name":"x"}'
       'a layer global_average_pooling2d has no CUDA kernel'
       '{"type":"Rescaling","scale":2,"name":"x"},{"type":"Flatten"}'
       'a layer rescaling has no CUDA kernel'
       '{"type":"Flatten"},{"type":"Dense","units":8,"use_bias":false,"name":"x"}'
       'a layer dense without bias (use_bias false) has no CUDA kernel'
       '{"type":"Flatten"},{"type":"Dense","units":8,"name":"x","kernel_regularizer":{"l1":0.1}}'
       'a layer dense with an L1 kernel regularizer has no CUDA kernel'
       '{"type":"Conv2D","filters":4,"kernel_size":3},{"type":"BatchNormalization","name":"x"},{"type":"Flatten"}'
       'a layer batch_normalization has no CUDA kernel'
       '{"type":"Flatten"},{"type":"BatchNormalization","center":false,"name":"x"}'
       'a layer batch_normalization has no CUDA kernel'
       '{"type":"Flatten"},{"type":"BatchNormalization","synchronized":true,"name":"x"}'
       'a layer batch_normalization (synchronized or not) has no CUDA kernel')
for ((i = 0; i < ${#nogpu[@]}; i += 2)); do
  printf '{"input_shape":[28,28,1],"layers":[%s,{"type":"Dense","units":10}]}' "${nogpu[i]}" \
    >"$tmp/nogpu.json"
  "$BIN" --model "$tmp/nogpu.json" --epochs 1 --steps-per-epoch 2 --per-worker-batch 8 \
    --threads 1 --data-dir "$DATA" --device gpu >/dev/null 2>"$tmp/nogpu.err"
  rc=$?
  if [[ $rc -eq 3 ]] && grep -qF "layer \"x\": ${nogpu[i + 1]}" "$tmp/nogpu.err"; then
    tap_ok "--device gpu exits 3: layer \"x\": ${nogpu[i + 1]}"
  else tap_fail "--device gpu refuses: ${nogpu[i + 1]}" "rc=$rc $(cat "$tmp/nogpu.err")"; fi
done

# --- --eval between epochs: the evaluation takes a batch slot, so no batch is preloaded
# across the epoch's end; training is untouched (the same bits) and the test losses follow
# the CPU's. The test set here is the first 200 examples of t10k (the emulated
# convolution would take half a minute over 10,000).
small=$tmp/small
mkdir -p "$small"
ln -s "$DATA"/train-*.gz "$small"/
python3 - "$DATA" "$small" <<'PY'
import gzip, struct, sys
src, dst = sys.argv[1], sys.argv[2]
for name, item in (("t10k-images-idx3-ubyte.gz", 28 * 28), ("t10k-labels-idx1-ubyte.gz", 1)):
    b = gzip.open(src + "/" + name).read()
    dims = b[3]
    head = bytearray(b[:4 + 4 * dims])
    struct.pack_into(">I", head, 4, 200)
    gzip.open(dst + "/" + name, "wb").write(bytes(head) + b[len(head):len(head) + 200 * item])
PY
ev=("${run[@]/#$DATA/$small}")
"$CPU" "${ev[@]}" --eval --device cpu --metrics-file "$tmp/cpue.jsonl" >/dev/null 2>&1
"$BIN" "${ev[@]}" --eval --device gpu --metrics-file "$tmp/gpue.jsonl" >"$tmp/gpue.out" 2>"$tmp/gpue.err"; rc=$?
ec=$(values eval test_loss "$tmp/cpue.jsonl"); eg=$(values eval test_loss "$tmp/gpue.jsonl")
if [[ $rc -eq 0 && $(hashes "$tmp/gpue.out") == "$HG" && $(wc -w <<<"$eg") -eq 2 ]] && close "$eg" "$ec" 1e-3; then
  tap_ok "--eval after each epoch: the same weights as without, test losses follow the CPU's ($eg)"
else tap_fail "--eval between epochs on the device" "rc=$rc $(hashes "$tmp/gpue.out") vs $HG; cpu: $ec gpu: $eg $(tail -3 "$tmp/gpue.err")"; fi

# --- graphs off: the same operations, so the same bits ---------------------------------
"$BIN" "${run[@]}" --device gpu --cuda-graphs=false >"$tmp/nog.out" 2>"$tmp/nog.err"; rc=$?
if [[ $rc -eq 0 && ${#HG} -eq 64 && $(hashes "$tmp/nog.out") == "$HG" ]] \
   && ! grep -q "CUDA graph" "$tmp/nog.err"; then
  tap_ok "--cuda-graphs=false: no graph, the same final weights bit for bit"
else tap_fail "--cuda-graphs=false gives the same weights" "rc=$rc $HG vs $(hashes "$tmp/nog.out") $(tail -3 "$tmp/nog.err")"; fi

# --- cuDNN's algorithms: the fake offers a tensor-op one, a non-deterministic FMA one
# (its sums come out a last bit apart from run to run) and the deterministic FMA one, in
# that order; the checks above hold only because device.cu takes the last. Without it the
# trainer says the weights may differ, once for each pass of the one convolution (forward
# and backward-filter: the first layer with weights passes no gradient back, so it plans
# no backward-data algorithm); with neither FMA one it stops with exit 3.
short=(--model tutorial-cnn --epochs 1 --steps-per-epoch 2 --per-worker-batch 8 --threads 1
       --data-dir "$DATA" --device gpu)
FAKECUDNN_ALGOS=nondeterministic "$BIN" "${short[@]}" >/dev/null 2>"$tmp/nd.err"; rc=$?
FAKECUDNN_ALGOS=tensor-op "$BIN" "${short[@]}" >/dev/null 2>"$tmp/to.err"; rc2=$?
if [[ $rc -eq 0 && $(grep -c "cuDNN offers no deterministic .* algorithm for this convolution: the last bits of the weights may differ" "$tmp/nd.err") -eq 2 \
      && $rc2 -eq 3 ]] && grep -q "GPU step 1: layers\[1\]: cuDNN offers no FP32 (FMA math) forward algorithm .* train this model with --device cpu" "$tmp/to.err"; then
  tap_ok "cuDNN without a deterministic FMA algorithm: told once per pass; without any FMA one: exit 3, a clear error"
else tap_fail "cuDNN's algorithm choice" "rc=$rc rc2=$rc2 $(tail -3 "$tmp/nd.err") $(tail -2 "$tmp/to.err")"; fi

# --- the nccl collective at one rank ---------------------------------------------------
"$BIN" "${run[@]}" --device gpu --collective nccl >"$tmp/nccl.out" 2>"$tmp/nccl.err"; rc=$?
if [[ $rc -eq 0 && $(hashes "$tmp/nccl.out") == "$HG" ]] \
   && grep -q "NCCL communicator of 1 rank on CUDA device 0 ready" "$tmp/nccl.err"; then
  tap_ok "--collective nccl at one rank: the communicator comes up, the same weights"
else tap_fail "--collective nccl at one rank" "rc=$rc $(hashes "$tmp/nccl.out") vs $HG $(tail -3 "$tmp/nccl.err")"; fi

# --- checkpoints: the device state goes out and comes back ------------------------------
ck=$tmp/ck
"$BIN" "${run[@]}" --epochs 1 --device gpu --checkpoint-dir "$ck" >/dev/null 2>&1
"$BIN" "${run[@]}" --device gpu --checkpoint-dir "$ck" >"$tmp/res.out" 2>"$tmp/res.err"; rc=$?
if [[ $rc -eq 0 && $(hashes "$tmp/res.out") == "$HG" ]] && grep -q "resuming from .*ckpt-8.kt" "$tmp/res.err"; then
  tap_ok "resumed from the epoch-1 checkpoint (weights and Adam state from the device): same weights"
else tap_fail "resume on the device" "rc=$rc $(hashes "$tmp/res.out") vs $HG $(tail -4 "$tmp/res.err")"; fi

# a checkpoint in mid-epoch, taken while the next step's batch was already on the device:
# the position saved is after the last trained batch, not after the preloaded one
ck=$tmp/ck-mid
"$BIN" "${run[@]}" --epochs 1 --device gpu --checkpoint-dir "$ck" --checkpoint-every-steps 3 \
  --keep-checkpoints 5 >/dev/null 2>&1
rm -f "$ck"/ckpt-6.kt "$ck"/ckpt-8.kt
"$BIN" "${run[@]}" --device gpu --checkpoint-dir "$ck" >"$tmp/mid.out" 2>"$tmp/mid.err"; rc=$?
if [[ $rc -eq 0 && $(hashes "$tmp/mid.out") == "$HG" ]] && grep -q "resuming from .*ckpt-3.kt" "$tmp/mid.err"; then
  tap_ok "resumed from a mid-epoch checkpoint (step 3, the next batch preloaded): same weights"
else tap_fail "resume from a mid-epoch checkpoint" "rc=$rc $(hashes "$tmp/mid.out") vs $HG $(ls "$ck") $(tail -4 "$tmp/mid.err")"; fi

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
if [[ $rc -eq 75 && ${steps:-99} -lt 16 && $rc2 -eq 0 && $(hashes "$tmp/term2.out") == "$HG" ]] \
   && grep -q "resuming from .*ckpt-$steps.kt" "$tmp/term2.err"; then
  tap_ok "SIGTERM during graph replays: stopped after step $steps with exit 75; the resumed run ends with the same weights"
else tap_fail "SIGTERM during graph replays" "rc=$rc steps=$steps rc2=$rc2 $(tail -3 "$tmp/term.err") $(tail -3 "$tmp/term2.err")"; fi

# --- two ranks over NCCL ------------------------------------------------------------------
two=(--model tutorial-cnn --epochs 2 --steps-per-epoch 4 --per-worker-batch 16 --threads 1
     --optimizer adam --data-dir "$DATA" --print-weights-hash)
"$CPU" launch --workers 2 "${two[@]}" --device cpu --metrics-file "$tmp/cpu2.jsonl" >"$tmp/cpu2.out" 2>&1
"$BIN" launch --workers 2 "${two[@]}" --device gpu --metrics-file "$tmp/gpu2.jsonl" >"$tmp/gpu2.out" 2>"$tmp/gpu2.err"; rc=$?
H2=$(hashes "$tmp/gpu2.out")
if [[ $rc -eq 0 && ${#H2} -eq 64 && $(grep -c 'weights-sha256' "$tmp/gpu2.out") -eq 2 ]] \
   && grep -q "NCCL communicator of 2 ranks" "$tmp/gpu2.err"; then
  tap_ok "launch --workers 2 --device gpu: NCCL between the two ranks, identical weights on both"
else tap_fail "launch --workers 2 over NCCL" "rc=$rc hashes '$H2' $(tail -8 "$tmp/gpu2.err")"; fi
lc=$(losses "$tmp/cpu2.jsonl"); lg=$(losses "$tmp/gpu2.jsonl")
if close "$lg" "$lc" 1e-3; then tap_ok "two ranks: the 8 step losses follow two CPU workers' within 1e-3"
else tap_fail "two ranks: the step losses follow the CPU's" "cpu: $lc"$'\n'"gpu: $lg"; fi

# the ring (a host collective) between two GPU ranks: the gradients go through the host
# arena; with two ranks a sum is a + b either way, so the same bits as over NCCL
"$BIN" launch --workers 2 "${two[@]}" --device gpu --collective ring >"$tmp/gr.out" 2>"$tmp/gr.err"; rc=$?
if [[ $rc -eq 0 && $(grep -c 'weights-sha256' "$tmp/gr.out") -eq 2 && $(hashes "$tmp/gr.out") == "$H2" ]] \
   && ! grep -q "NCCL communicator" "$tmp/gr.err"; then
  tap_ok "launch --workers 2 --device gpu --collective ring: through the host, the same weights as over NCCL"
else tap_fail "two GPU ranks over the ring" "rc=$rc '$(hashes "$tmp/gr.out")' vs '$H2' $(tail -6 "$tmp/gr.err")"; fi

# two ranks on a host with one GPU: NCCL refuses two ranks on one device (the fake does
# too), so auto keeps the ring (the same weights again) and --collective nccl is exit 2
FAKECUDA_DEVICES=1 "$BIN" launch --workers 2 "${two[@]}" --device gpu >"$tmp/g1.out" 2>"$tmp/g1.err"; rc=$?
FAKECUDA_DEVICES=1 "$BIN" launch --workers 2 "${two[@]}" --device gpu --collective nccl --max-restarts 0 \
  >/dev/null 2>"$tmp/g1n.err"; rc2=$?
if [[ $rc -eq 0 && $(grep -c 'weights-sha256' "$tmp/g1.out") -eq 2 && $(hashes "$tmp/g1.out") == "$H2" ]] \
   && grep -q "ranks 0 and 1 are on one GPU, and NCCL needs a GPU of its own for each rank: the all-reduce goes over the ring" "$tmp/g1.err" \
   && [[ $rc2 -eq 2 ]] && grep -q "worker 0.*--collective nccl: ranks 0 and 1 are on one GPU, .* (this host has 1): run at most one worker per GPU, or use --collective ring" "$tmp/g1n.err"; then
  tap_ok "two ranks on one GPU: auto all-reduces over the ring (the same weights), --collective nccl is exit 2 with the reason"
else tap_fail "two ranks on one GPU" "rc=$rc rc2=$rc2 '$(hashes "$tmp/g1.out")' vs '$H2' $(tail -4 "$tmp/g1.err") $(tail -4 "$tmp/g1n.err")"; fi

# --gpus-per-worker 2: the worker re-executes itself as two ranks, one per device
KUBETRAIN_SECRET=$(secret)
export KUBETRAIN_SECRET
TF_CONFIG=$(tf_config 0 "$(free_ports 2)") KUBETRAIN_TERMINATION_FILE=/dev/null timeout 300 "$BIN" train --gpus-per-worker 2 \
  "${two[@]}" --device gpu >"$tmp/pg.out" 2>"$tmp/pg.err"; rc=$?
if [[ $rc -eq 0 && $(hashes "$tmp/pg.out") == "$H2" ]] && grep -q "NCCL communicator of 2 ranks" "$tmp/pg.err"; then
  tap_ok "--gpus-per-worker 2: two ranks on devices 0 and 1, the same weights as launch --workers 2"
else tap_fail "--gpus-per-worker 2 over NCCL" "rc=$rc '$(hashes "$tmp/pg.out")' vs '$H2' $(tail -6 "$tmp/pg.err")"; fi

# a rank without a GPU beside one with a GPU: ranks on GPUs and on CPUs step through
# different collectives, so every rank hears of the others' devices first and both stop
# with exit 2 and the reason (before, the one with a GPU chose NCCL alone: exit 75, again
# after every restart)
p0=$(free_port); p1=$(free_port)
TF_CONFIG=$(tf_config 0 "$p0" "$p1") FAKECUDA_DEVICES=0 KUBETRAIN_TERMINATION_FILE=/dev/null timeout 300 \
  "$BIN" "${two[@]}" >/dev/null 2>"$tmp/m0.err" & m0=$!
TF_CONFIG=$(tf_config 1 "$p0" "$p1") KUBETRAIN_TERMINATION_FILE=/dev/null timeout 300 \
  "$BIN" "${two[@]}" >/dev/null 2>"$tmp/m1.err"; rc1=$?
wait "$m0"; rc0=$?
why="rank 0 trains on the CPU and rank 1 on a CUDA device: the workers train all on GPUs or all on CPUs (give every worker a GPU, or run them all with --device cpu)"
if [[ $rc0 -eq 2 && $rc1 -eq 2 ]] && grep -qF "$why" "$tmp/m0.err" && grep -qF "$why" "$tmp/m1.err"; then
  tap_ok "a rank without a GPU beside one with a GPU: both exit 2, naming the ranks"
else tap_fail "a rank without a GPU beside one with a GPU" "rc=$rc0/$rc1 $(tail -3 "$tmp/m0.err") $(tail -3 "$tmp/m1.err")"; fi

# a lost peer: the other rank's all-reduce fails and it exits 75, never a hang
p0=$(free_port); p1=$(free_port)
long=(--model tutorial-cnn --epochs 1 --steps-per-epoch 1000 --per-worker-batch 16 --threads 1
      --data-dir "$DATA" --device gpu)
TF_CONFIG=$(tf_config 0 "$p0" "$p1") "$BIN" "${long[@]}" --metrics-file "$tmp/l0.jsonl" \
  >/dev/null 2>"$tmp/l0.err" & w0=$!
TF_CONFIG=$(tf_config 1 "$p0" "$p1") "$BIN" "${long[@]}" >/dev/null 2>"$tmp/l1.err" & w1=$!
# Killed once the chief has finished two steps (its metrics records are flushed per step),
# so the loss lands in a step's all-reduce, not in the initial broadcast, however loaded
# the machine is (a fixed 1 s after the communicator came up once hit the broadcast).
for _ in $(seq 600); do
  [[ $(grep -c '"event":"step"' "$tmp/l0.jsonl.tmp.$w0" 2>/dev/null) -ge 2 ]] && break
  sleep 0.1
done
kill -9 "$w0"; wait "$w0" 2>/dev/null
t0=$(date +%s)
for _ in $(seq 600); do kill -0 "$w1" 2>/dev/null || break; sleep 0.1; done
if kill -0 "$w1" 2>/dev/null; then kill -9 "$w1"; fi
wait "$w1"; rc=$?
secs=$(( $(date +%s) - t0 ))
if [[ $rc -eq 75 && $secs -le 30 ]] && grep -qE "all-reduce at step [0-9]+: nccl .*(a peer lost\?|remote process exited)" "$tmp/l1.err"; then
  tap_ok "a rank killed mid-run: the other's NCCL all-reduce fails and it exits 75 in ${secs}s"
else tap_fail "a lost NCCL peer: exit 75" "rc=$rc after ${secs}s $(tail -4 "$tmp/l1.err")"; fi

tap_done
