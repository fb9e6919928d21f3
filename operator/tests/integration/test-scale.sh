#!/usr/bin/env bash
# The operator (ASan+UBSan build) at a small scale on simulated nodes: 20 TrainingJobs x 8
# workers on an api-level cluster with kube-scheduler and kwok (e2e/cluster/kwok-up.sh),
# driven by the scale benchmark's harness (operator/bench/scale.py --check), which binds
# and runs nothing itself: kube-scheduler binds the pods, kwok reports them Running.
# Checks correctness, not speed (make bench-operator-scale measures that):
#   - 160 pods, 8 per job, no duplicates, every job's status saying 8 workers ready;
#   - pod status changes (one worker per job Pending, then Running again) reach every
#     job's status;
#   - after the operator is killed and started again, with one worker of each job made
#     Pending while it was down: every status current again, and no pod created,
#     deleted or replaced by the new process.
# kwok is built from the Go module proxy like the other components (build-kwok.sh; about
# 75 s the first time on a machine); a failed build is a failure.
set -uo pipefail # no -e: a failed check is reported (not ok) and the test goes on
cd "$(dirname "$0")/../../.." || exit 1
. e2e/lib/tap.sh
. operator/tests/integration/lib.sh

it_cluster opint-scale
if ! err=$(bash e2e/cluster/build-kwok.sh 2>&1 >/dev/null); then
  tap_fail "kwok built (e2e/cluster/build-kwok.sh)" "$(tail -n 5 <<<"$err")"
  tap_done; exit 1
fi
if ! err=$(bash e2e/cluster/kwok-up.sh 2 200 2>&1); then
  tap_fail "kwok-up.sh: kube-scheduler, kwok and 2 simulated nodes" "$(tail -n 5 <<<"$err")"
  tap_done; exit 1
fi
tap_ok "kwok-up.sh: kube-scheduler, kwok and 2 simulated nodes Ready"

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0))
print(s.getsockname()[1])')
out=$IT_DIR/scale.json
python3 operator/bench/scale.py --check --kind trainingjob --kubectl "$KT_K8S_BIN/kubectl" \
  --kubeconfig "$KUBECONFIG" --ns scale --qps 100 --burst 100 --metrics-port "$port" \
  --log "$IT_DIR/op-scale.log" --ready-regex 'caches synced' \
  --metric '^kubetrain_api_requests_total\{verb="(GET|POST|PUT|PATCH|DELETE)"' \
  --jobs 20 --workers 8 --samples 20 --steady 0 --timeout 300 -- \
  "$IT_BIN" --kubeconfig "$KUBECONFIG" --namespace scale --metrics-addr "127.0.0.1:$port" \
  --health-addr 0 >"$out" 2>"$IT_DIR/scale.err"
rc=$?
if [ ! -s "$out" ] ||
    ! python3 -c 'import json,sys; json.load(open(sys.argv[1]))' "$out" 2>/dev/null; then
  tap_fail "the harness ran to its end (scale.py exit $rc)" "$(tail -n 8 "$IT_DIR/scale.err")"
  tap_done; exit 1
fi
# field NAME: one figure of the run's JSON (a dotted path).
field() {
  python3 -c 'import json,sys
v = json.load(open(sys.argv[1]))
for k in sys.argv[2].split("."):
    v = v.get(k) if isinstance(v, dict) else None
print(v)' "$out" "$1"
}
check() { # NAME WANT DESCRIPTION
  local got
  got=$(field "$1")
  if [ "$got" = "$2" ]; then tap_ok "$3 ($1 = $got)"
  else tap_fail "$3" "$1 = $got, want $2; run: $(head -c 600 "$out")"; fi
}
check check.pods 160 "160 pods for 20 jobs x 8 workers"
check check.duplicate_pods 0 "no duplicate pod"
check check.pods_per_job_ok True "8 pods per job"
check event_to_action_ms.n 40 "every pod status change reached its job's status"
check restart.jobs_changed_while_down 20 "20 jobs changed while the operator was down"
check check.stale_statuses 0 "after the restart, every job's status current"
check check.recreated_after_restart 0 "after the restart, no pod created, deleted or replaced"
check restart.pods_created 0 "the restarted operator created no pod"
sanitizer='runtime error\|AddressSanitizer\|LeakSanitizer'
if grep -q "$sanitizer" "$IT_DIR/op-scale.log"; then
  tap_fail "no sanitizer report in the operator's log" \
    "$(grep -A5 "$sanitizer" "$IT_DIR/op-scale.log" | head -n 30)"
else tap_ok "no sanitizer report in the operator's log"; fi
tap_done
