#!/usr/bin/env bash
# kubetrain-operator (ASan+UBSan build) when things break, against a real kube-apiserver:
#  - SIGKILLed at random moments among 20 concurrent jobs and restarted (chaos.py): no
#    duplicate pod, no orphan, every job progressing, restarts counted exactly once;
#  - the kube-apiserver restarted twice, away 6 and 30 s (apirestart.py): each time the
#    operator's watches recover within 5 s of it taking the test's writes again (a new
#    job gets its pods, a failed pod restarts its group);
#  - two operators with --leader-elect: exactly one acts; on SIGTERM the standby takes over.
# One cluster for the file, one namespace per case.
set -uo pipefail # no -e: a failed check is reported (not ok) and the test goes on
cd "$(dirname "$0")/../../.." || exit 1
. e2e/lib/tap.sh
. operator/tests/integration/lib.sh

it_cluster opint-resilience

# --- SIGKILL at random moments among 20 jobs ------------------------------------------------
out=$(python3 operator/tests/integration/chaos.py --kubectl "$KT_K8S_BIN/kubectl" \
  --kubeconfig "$KUBECONFIG" --operator "$IT_BIN" --log "$IT_DIR/op-chaos.log" \
  --ns chaos --jobs 20 --rounds "${KT_CHAOS_ROUNDS:-10}" 2>&1)
rc=$?
grep '^#' <<<"$out"
while IFS= read -r line; do
  case $line in
    PASS\ *) tap_ok "operator SIGKILLed and restarted: ${line#PASS }" ;;
    FAIL\ *) tap_fail "operator SIGKILLed and restarted: ${line#FAIL }" ;;
  esac
done <<<"$out"
if [ $rc -ne 0 ] && ! grep -q '^FAIL ' <<<"$out"; then
  tap_fail "chaos.py ran to the end" "exit $rc: $(tail -n 20 <<<"$out")"
fi
if grep -q 'runtime error\|AddressSanitizer' "$IT_DIR/op-chaos.log"; then
  tap_fail "no sanitizer report from the killed operators" "$(grep -A5 'runtime error\|AddressSanitizer' "$IT_DIR/op-chaos.log" | head -n 30)"
else tap_ok "no sanitizer report from the killed operators"; fi

# --- two operators with --leader-elect ----------------------------------------------------------
it_operator le-a --leader-elect --leader-elect-namespace default --leader-elect-id op-a
A=$IT_PID
it_operator le-b --leader-elect --leader-elect-namespace default --leader-elect-id op-b
B=$IT_PID
holder() { jp default lease/kubetrain-operator .spec.holderIdentity; }
has_holder() { case $(holder) in op-a|op-b) return 0 ;; esac; return 1; }
if wait_until 30 has_holder; then tap_ok "one operator holds the Lease ($(holder))"
else tap_fail "one operator holds the Lease" "$(k -n default get lease -o yaml 2>&1 | tail -n 20)"; fi
first=$(holder)
ns leader
job leader l1 2
if wait_until 30 has_npods leader l1 2; then tap_ok "the leader creates the pods of a new job"
else tap_fail "the leader creates the pods of a new job" "$(tail -n 5 "$IT_DIR"/op-le-*.log)"; fi
sleep 1
acts() { grep -c '"job":"leader/' "$IT_DIR/op-$1.log"; }
if [ "$first" = op-a ]; then leader_log=le-a standby_log=le-b L=$A S=$B; else leader_log=le-b standby_log=le-a L=$B S=$A; fi
if [ "$(acts "$leader_log")" -gt 0 ] && [ "$(acts "$standby_log")" = 0 ]; then
  tap_ok "exactly one operator acts (leader: $(acts "$leader_log") log lines for the job, standby: 0)"
else tap_fail "exactly one operator acts" "leader $(acts "$leader_log"), standby $(acts "$standby_log")"; fi
it_stop "$L"; rc=$?
if [ $rc = 0 ]; then tap_ok "the leader exits 0 on SIGTERM, releasing the Lease"
else tap_fail "the leader exits 0 on SIGTERM" "exit $rc"; fi
second=op-a; [ "$first" = op-a ] && second=op-b
t0=$SECONDS
if wait_until 30 is default lease/kubetrain-operator .spec.holderIdentity "$second"; then
  tap_ok "the standby takes over the Lease ($((SECONDS - t0)) s after the release)"
else tap_fail "the standby takes over the Lease" "holder '$(holder)'"; fi
job leader l2 2
if wait_until 30 has_npods leader l2 2 && grep -q '"job":"leader/l2"' "$IT_DIR/op-$standby_log.log"; then
  tap_ok "the new leader acts on a new job"
else tap_fail "the new leader acts on a new job" "$(tail -n 5 "$IT_DIR/op-$standby_log.log")"; fi
it_stop "$S"; rc=$?
if [ $rc = 0 ] && ! grep -q 'runtime error\|Sanitizer' "$IT_DIR"/op-le-*.log; then
  tap_ok "both leader-elect operators exit 0, no sanitizer report"
else tap_fail "both leader-elect operators exit 0" "exit $rc"; fi
# --- kube-apiserver restarted mid-run, away 6 to 30 s -----------------------------------------
# Last: once in CI, after these restarts, a new namespace's default ServiceAccount had
# not appeared 30 s later, and the leader-election checks' pods were refused for it.
# Recovery within 5 s of the restarted apiserver taking the test's writes (the new job,
# the failed pod), however long it was away: the informers retry an unreachable server
# every INFORMER_UNREACHABLE_RETRY_S (informer.h). Two outages: a short one finds a retry
# too slow for the limit, a long one a wait that grows with the outage (a doubling
# backoff, as for a refusal, up to 30 s); one in between would find neither sooner.
LOG=$IT_DIR/op-main.log
out=$(python3 operator/tests/integration/apirestart.py --kubectl "$KT_K8S_BIN/kubectl" \
  --kubeconfig "$KUBECONFIG" --operator "$IT_BIN" --log "$LOG" --ns apirestart \
  --downs "${KT_APISERVER_DOWNS:-6,30}" --limit 5 2>&1)
rc=$?
grep '^#' <<<"$out"
while IFS= read -r line; do
  case $line in
    PASS\ *) tap_ok "kube-apiserver restarted: ${line#PASS }" ;;
    FAIL\ *) tap_fail "kube-apiserver restarted: ${line#FAIL }" ;;
  esac
done <<<"$out"
if [ $rc -ne 0 ] && ! grep -q '^FAIL ' <<<"$out"; then
  tap_fail "apirestart.py ran to the end" "exit $rc: $(tail -n 20 <<<"$out")"
fi
if grep -q 'runtime error\|Sanitizer' "$LOG"; then
  tap_fail "no sanitizer report from the operator through the apiserver restarts" \
    "$(grep -A5 'runtime error\|Sanitizer' "$LOG" | head -n 30)"
else tap_ok "no sanitizer report from the operator through the apiserver restarts"; fi

tap_done
