#!/usr/bin/env bash
# One TrainingJob nobody can read must not stop the operator for everyone (issue 41):
# against a real kube-apiserver, a job whose spec.template is nested 1,001 deep (the API
# server stores up to about 10,000 levels; cJSON reads 1,000) beside normal jobs in
# another namespace. The running operator skips its watch event and marks it Invalid
# (reason Unreadable); restarted, its first list skips the job instead of failing, so it
# becomes ready and reconciles a job created while it was down; the skip is logged with
# the job's namespace/name and counted in kubetrain_informer_skipped_total.
# The deep job is created with only crds/ installed: the chart's depth limit
# (ValidatingAdmissionPolicy, charts/tests/test-chart.sh) would refuse it at admission,
# as the object a cluster already holds, or one written before the chart was installed.
set -uo pipefail # no -e: a failed check is reported (not ok) and the test goes on
cd "$(dirname "$0")/../../.." || exit 1
. e2e/lib/tap.sh
. operator/tests/integration/lib.sh

it_cluster opint-unreadable
ns team-a
ns team-b

# port NAME LOG: the port the operator's log says it serves NAME on.
port() { sed -n "s|.*serving $1 on port \([0-9]*\).*|\1|p" "$2" | tail -n 1; }
ready() { [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$1/readyz")" = 200 ]; }
unreadable() {
  [ "$(condition team-a deep Invalid reason)" = Unreadable ] &&
    [ "$(condition team-a deep Invalid status)" = True ]
}

it_operator first
OP=$IT_PID
LOG1=$IT_DIR/op-first.log
job team-b before 2
if wait_until 30 has_npods team-b before 2; then tap_ok "a normal job gets its pods"
else tap_fail "a normal job gets its pods" "$(tail -n 5 "$LOG1")"; fi

python3 - "$IT_DIR/deep.json" <<'PY'
import sys
deep = '{"x":' * 1001 + "1" + "}" * 1001  # as text: json.dump recurses per level
open(sys.argv[1], "w").write(
    '{"apiVersion": "kubetrain.dev/v1alpha1", "kind": "TrainingJob", "metadata": {"name": '
    '"deep"}, "spec": {"workers": 1, "checkpoint": {"claimName": "ckpt"}, "template": %s}}'
    % deep)
PY
if out=$(k -n team-a create -f "$IT_DIR/deep.json" 2>&1); then
  tap_ok "the API server stores a job nested 1,001 deep"
else tap_fail "the API server stores a job nested 1,001 deep" "$out"; fi
if wait_until 30 unreadable; then
  tap_ok "the running operator marks it Invalid (Unreadable) from its watch event"
else tap_fail "the running operator marks it Invalid (Unreadable)" \
  "$(condition team-a deep Invalid message; grep deep "$LOG1" | tail -n 3)"; fi
it_stop "$OP"

# Down: a job is created meanwhile; the restarted operator lists both namespaces' jobs.
job team-b after 3
it_operator second
OP=$IT_PID
LOG2=$IT_DIR/op-second.log
wait_until 30 grep -q 'serving /healthz and /readyz on port' "$LOG2"
if wait_until 30 ready "$(port '/healthz and /readyz' "$LOG2")"; then
  tap_ok "restarted beside it, the operator becomes ready (its list skips the job)"
else tap_fail "restarted beside it, the operator becomes ready" "$(tail -n 5 "$LOG2")"; fi
if wait_until 30 has_npods team-b after 3; then
  tap_ok "the job created while it was down is reconciled (3 pods)"
else tap_fail "the job created while it was down is reconciled" "$(tail -n 5 "$LOG2")"; fi
if grep '"job":"team-a/deep"' "$LOG2" |
   grep -q 'list trainingjobs: skipping an object.*nested deeper than 1000 levels'; then
  tap_ok "the skip is logged naming team-a/deep and the depth"
else tap_fail "the skip is logged naming team-a/deep" "$(grep -i skipping "$LOG2" | head -n 3)"; fi
metrics=$(curl -s "http://127.0.0.1:$(port /metrics "$LOG2")/metrics")
if grep -Eq '^kubetrain_informer_skipped_total\{resource="trainingjobs"\} [1-9]' <<<"$metrics"
then tap_ok "kubetrain_informer_skipped_total counts it"
else tap_fail "kubetrain_informer_skipped_total counts it" "$(grep skipped <<<"$metrics")"; fi
tap_check "the deep job has no pods" has_npods team-a deep 0
# Not in $(...): wait needs the operator to be this shell's child.
if it_stop "$OP"; then tap_ok "SIGTERM: the operator exits 0 (no leak reported)"
else tap_fail "SIGTERM: the operator exits 0" "$(tail -n 20 "$LOG2")"; fi
tap_done
