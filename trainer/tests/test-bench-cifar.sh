#!/usr/bin/env bash
# make bench-cifar's profile bookkeeping (trainer/bench/bench_cifar.py's tally), not its
# figures: perf script output made up here, one sample per stack the trainer's step has,
# is put under the right pass and layer type, Conv2D's products apart from the rest of
# it, a serial BatchNormalization on the main thread counted as one thread's (its tasks
# in parallel_for there as the pool's, though the step runs them), a pool's
# task on a worker without its caller's frames (BatchNormalization's, the optimizer's)
# told by its function, samples outside the step left out of the shares. Runs no
# benchmark and no perf.
set -uo pipefail # no -e: a failed check is reported (not ok) and the test goes on
source e2e/lib/tap.sh

# One sample: "PID/TID" then its frames leaf first (as perf script -F pid,tid,ip,sym).
sample() {
  echo "$1"
  shift
  for f in "$@"; do printf '\t%s %s\n' 1234 "$f"; done
  echo
}
script=$(
  # a conv GEMM on the pool's worker thread, twice
  for _ in 1 2; do
    sample 10/11 sgemm_kernel_ZEN cblas_sgemm gemm conv_forward conv2d_forward forward_layer \
      forward_task worker start_thread
  done
  # conv's im2col on the main thread, inside parallel_for: not serial
  sample 10/10 im2col conv_forward conv2d_forward forward_layer forward_task parallel_for \
    forward model_step cmd_train
  # batch norm's backward on the main thread alone
  sample 10/10 batchnorm_backward backward_layer model_step cmd_train
  # the shards' gradient sum
  sample 10/10 finish_layer model_step cmd_train
  # the optimizer on the worker (its caller's frames are on the main thread's stack)
  sample 10/11 sgd_step step_range take_tasks worker start_thread
  # batch norm's statistics, a task of the pool on the worker, and on the main thread
  sample 10/11 batchnorm_forward_stats_task take_tasks worker start_thread
  sample 10/10 batchnorm_forward_stats_task take_tasks parallel_for bn_run \
    batchnorm_forward_train_relu batchnorm_forward forward_layer forward model_step cmd_train
  # batch norm's backward sums on the main thread, run by the step on the whole batch
  # (no backward_layer on the stack), inside parallel_for: not serial
  sample 10/10 batchnorm_backward_sums_task take_tasks parallel_for bn_run \
    batchnorm_backward_sync model_step cmd_train
  # the ReLU layer's copy, and data loading outside the step (not in the shares)
  sample 10/10 __memmove_avx_unaligned_erms forward_layer forward model_step
  sample 10/12 zip_source_read npz_load prefetch start_thread
)

out=$(printf '%s\n' "$script" | PYTHONDONTWRITEBYTECODE=1 python3 -c '
import json, sys
sys.path.insert(0, "trainer/bench")
from bench_cifar import tally
t = tally(sys.stdin.read())
print(t["samples"], t["step_samples"])
for r in t["rows"]:
    print("%s|%s|%.3f|%.1f" % (r["pass"], r["layer"], r["share_of_step_cpu"],
                               r["one_thread_share"]))
' 2>&1)
want="11 10
forward|Conv2D GEMM|0.200|0.0
forward|BatchNormalization|0.200|0.0
backward|BatchNormalization|0.200|0.5
backward|finish_layer (shards' gradient sum)|0.100|1.0
forward|Conv2D other|0.100|0.0
forward|copy|0.100|1.0
optimizer update||0.100|0.0"
# the rows of equal shares in any order: compare sorted
if [[ $(sort <<<"$out") == $(sort <<<"$want") ]]; then
  tap_ok "each sample under its pass, layer and thread; outside the step left out (11, 10 in it)"
else
  tap_fail "each sample under its pass, layer and thread" "got:
$out
want:
$want"
fi

err=$(printf '10/12\n\t1 npz_load\n\n' | PYTHONDONTWRITEBYTECODE=1 python3 -c '
import sys
sys.path.insert(0, "trainer/bench")
from bench_cifar import tally
print(tally(sys.stdin.read()).get("error"))' 2>&1)
[[ $err == "no sample of the training step (1 samples in all)" ]] &&
  tap_ok "no sample in the step: an error saying so, not empty shares" ||
  tap_fail "no sample in the step: an error saying so" "got: $err"
tap_done
