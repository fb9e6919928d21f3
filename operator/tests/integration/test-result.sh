#!/usr/bin/env bash
# What a pod writes cannot block its job's status (issue 41, item 5), against a real
# kube-apiserver: a chief whose termination message has fields of other types than
# status.result's schema ({"step": "1200", "epoch": 2.5}) had every status write of the
# job refused with 422, the job Pending forever; now the job completes with only the
# schema's fields in status.result, and the operator's log has no refused write.
set -uo pipefail # no -e: a failed check is reported (not ok) and the test goes on
cd "$(dirname "$0")/../../.." || exit 1
. e2e/lib/tap.sh
. operator/tests/integration/lib.sh

it_cluster opint-result
it_operator main --workers 2
OP=$IT_PID
LOG=$IT_DIR/op-main.log

ns result
job result bad 2
job result good 2
if all_running result bad 2 && all_running result good 2; then
  tap_ok "both jobs' pods created and marked Running"
else tap_fail "both jobs' pods created" "$(k -n result get pods 2>&1; tail -n 5 "$LOG")"; fi
pod_exit result bad-worker-0 0 \
  '{"step":"1200","epoch":2.5,"loss":0.5,"accuracy":"high","weights_sha256":{"x":1}}'
pod_exit result good-worker-0 0 \
  '{"step":1200,"epoch":3,"loss":0.25,"accuracy":0.75,"weights_sha256":"ab12"}'
for j in bad good; do
  if wait_until 30 is result "tj/$j" .status.phase Succeeded; then
    tap_ok "$j: the job completes (phase Succeeded)"
  else
    tap_fail "$j: the job completes" \
      "$(jp result "tj/$j" .status; grep -i refused "$LOG" | tail -n 3)"
  fi
done
# result JOB: the job's status.result as sorted JSON.
result() {
  k -n result get "tj/$1" -o json |
    python3 -c 'import json,sys; print(json.dumps(json.load(sys.stdin)["status"].get("result"),
      sort_keys=True))'
}
got=$(result bad)
if [ "$got" = '{"loss": 0.5}' ]; then tap_ok "bad: status.result keeps only the schema's fields"
else tap_fail "bad: status.result is {\"loss\": 0.5}" "got $got"; fi
got=$(result good)
want='{"accuracy": 0.75, "epoch": 3, "loss": 0.25, "step": 1200, "weightsSha256": "ab12"}'
if [ "$got" = "$want" ]; then tap_ok "good: status.result is the trainer's whole message"
else tap_fail "good: status.result" "got $got, want $want"; fi
# A refused write is logged as kclient words it, "PUT <path>: 422 Invalid: ...": the code
# after a colon, not any 422 (a timestamp's milliseconds can be .422).
if grep -q ': 422 \|Invalid value' "$LOG"; then
  tap_fail "no status write refused" "$(grep ': 422 \|Invalid value' "$LOG" | head -n 5)"
else tap_ok "no status write refused"; fi

if grep -q 'runtime error\|AddressSanitizer\|LeakSanitizer' "$LOG"; then
  tap_fail "no sanitizer report in the operator's log" \
    "$(grep -A5 'runtime error\|Sanitizer' "$LOG" | head -n 30)"
else tap_ok "no sanitizer report in the operator's log"; fi
it_stop "$OP"; rc=$?
if [ $rc = 0 ]; then tap_ok "SIGTERM: the operator exits 0 (no leak reported)"
else tap_fail "SIGTERM: the operator exits 0" "exit $rc; $(tail -n 20 "$LOG")"; fi
tap_done
