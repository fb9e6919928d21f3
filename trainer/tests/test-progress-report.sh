#!/usr/bin/env bash
# What the operator reads to report progress and lost work (the ASan+UBSan build, one
# worker on loopback): /metrics carries the run's total steps, the step it started at and
# the newest checkpoint (step and time); SIGTERM mid-run saves and exits 75 with a
# termination message whose step equals its checkpoint_step (nothing lost); the resumed
# run starts at that step.
set -uo pipefail # no -e: a failed check is reported (not ok) and the test goes on
source e2e/lib/tap.sh
source trainer/tests/lib.sh
BIN=${TRAINER:-build/san/bin/kubetrain-trainer}
DATA=/usr/share/datasets/fashion-mnist
tmp=$(mktemp -d)
pid=
cleanup() { [ -n "$pid" ] && kill -9 "$pid" 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
export KUBETRAIN_TERMINATION_FILE=$tmp/termination OPENBLAS_NUM_THREADS=1
unset TF_CONFIG KUBETRAIN_METRICS_PORT

skip_without_data "progress and checkpoint report" "$DATA"
if ! command -v curl >/dev/null; then
  tap_skip "progress and checkpoint report" "no curl"; tap_done; exit
fi
val() { sed -n "s/^$2 \\([0-9.e+-]*\\)\$/\\1/p" "$1"; }
args=(--model mlp --per-worker-batch 16 --epochs 2 --steps-per-epoch 4000
      --checkpoint-dir "$tmp/ckpt" --checkpoint-every-steps 40)

# Until a scrape shows a step past the first checkpoint (40).
scrape_past() { # port file min_step
  for _ in $(seq 1200); do
    curl -sf "http://127.0.0.1:$1/metrics" -o "$2" 2>/dev/null &&
      [[ $(val "$2" kubetrain_steps_total) -gt $3 ]] && return 0
    sleep 0.05
  done
  return 1
}

port=$(free_port)
"$BIN" "${args[@]}" --metrics-port "$port" >"$tmp/out1" 2>&1 &
pid=$!
scrape_past "$port" "$tmp/s1" 45
t_scrape=$(date +%s)
kill -TERM "$pid"; wait "$pid"; rc=$?; pid=
total=$(val "$tmp/s1" kubetrain_total_steps) start=$(val "$tmp/s1" kubetrain_start_step)
cstep=$(val "$tmp/s1" kubetrain_checkpoint_step)
cts=$(val "$tmp/s1" kubetrain_checkpoint_timestamp_seconds)
if [[ $total == 8000 && $start == 0 && -n $cstep && $((cstep % 40)) -eq 0 && $cstep -ge 40 ]] &&
  python3 -c 'import sys; sys.exit(not abs(float(sys.argv[1]) - float(sys.argv[2])) < 30)' \
    "$cts" "$t_scrape"; then
  tap_ok "/metrics: total_steps 8000, start_step 0, checkpoint_step $cstep at a timestamp of now"
else
  tap_fail "/metrics progress gauges" "total=$total start=$start ckpt=$cstep ts=$cts now=$t_scrape"
fi

msg=$(cat "$tmp/termination" 2>/dev/null)
read -r mstep mckpt < <(python3 -c 'import json, sys
m = json.loads(sys.argv[1]); print(m["step"], m["checkpoint_step"])' "$msg" 2>/dev/null)
last_ckpt=$(find "$tmp/ckpt" -name 'ckpt-*.kt' | sed 's/.*ckpt-\([0-9]*\)\.kt/\1/' |
  sort -n | tail -1)
if [[ $rc -eq 75 && -n ${mstep:-} && $mstep == "$mckpt" && $mstep == "$last_ckpt" &&
  $mstep -gt 45 ]]; then
  tap_ok "SIGTERM: exit 75, termination message step $mstep = checkpoint_step (nothing lost)"
else tap_fail "SIGTERM termination message" "rc=$rc msg=$msg newest file=$last_ckpt"; fi

# The resumed run, scraped before it reaches its next checkpoint.
port=$(free_port)
"$BIN" "${args[@]}" --metrics-port "$port" >"$tmp/out2" 2>&1 &
pid=$!
scrape_past "$port" "$tmp/s2" "${mstep:-0}"
kill -9 "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; pid=
start=$(val "$tmp/s2" kubetrain_start_step) cstep=$(val "$tmp/s2" kubetrain_checkpoint_step)
steps=$(val "$tmp/s2" kubetrain_steps_total)
if [[ -n ${mstep:-} && $start == "$mstep" && $cstep -ge $mstep && $steps -gt $mstep ]]; then
  tap_ok "resumed: start_step $start, checkpoint_step $cstep, steps $steps"
else tap_fail "resumed run's gauges" "start=$start ckpt=$cstep steps=$steps want start ${mstep:-?}"
fi
tap_done
