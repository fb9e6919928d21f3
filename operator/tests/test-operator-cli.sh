#!/usr/bin/env bash
# kubetrain-operator's command line: flags, configuration errors (exit 2 with a JSON log
# line), the probes and metrics listeners while the API server is unreachable, and a
# clean exit on SIGTERM.
set -uo pipefail # no -e: a failed check is reported (not ok) and the test goes on
cd "$(dirname "$0")/../.." || exit 1
. e2e/lib/tap.sh
bin=${KT_OPERATOR_BIN:-build/san/bin/kubetrain-operator}
if [ ! -x "$bin" ]; then
  tap_skip "operator CLI" "$bin is not built (run make)"
  tap_done
  exit
fi
tmp=$(mktemp -d)
pid=
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT

out=$("$bin" --help 2>&1); rc=$?
missing=""
for f in --kubeconfig --namespace --trainer-image --metrics-addr --health-addr --leader-elect \
         --leader-elect-name --qps --burst --workers --pod-parallelism --log-level \
         --cluster-domain --default-queue; do
  grep -q -- "$f" <<<"$out" || missing="$missing $f"
done
if [ $rc -eq 0 ] && [ -z "$missing" ]; then tap_ok "--help lists every flag"; else
  tap_fail "--help lists every flag" "rc=$rc missing:$missing"; fi

out=$("$bin" --version 2>&1)
tap_check "--version prints the VERSION file's version" \
  test "$out" = "kubetrain-operator $(cat VERSION)"

"$bin" --no-such-flag >/dev/null 2>&1; rc=$?
tap_check "an unknown flag exits 2 (got $rc)" test $rc -eq 2
out=$("$bin" --qps fast 2>&1); rc=$?
if [ $rc -eq 2 ] && grep -q -- '--qps: expected a number' <<<"$out"; then
  tap_ok "a bad --qps names the flag"
else tap_fail "a bad --qps names the flag" "rc=$rc $out"; fi

out=$("$bin" --pod-parallelism 0 2>&1); rc=$?
if [ $rc -eq 2 ] && grep -q -- '--pod-parallelism: expected a number in \[1, 64\]' <<<"$out"; then
  tap_ok "--pod-parallelism 0 names the flag and the range"
else tap_fail "--pod-parallelism 0 names the flag and the range" "rc=$rc $out"; fi

out=$("$bin" --leader-elect-name Ops_Lease 2>&1); rc=$?
if [ $rc -eq 2 ] &&
   grep -q -- '--leader-elect-name: "Ops_Lease" is not a valid Lease name' <<<"$out"; then
  tap_ok "a bad --leader-elect-name names the flag and the rule"
else tap_fail "a bad --leader-elect-name names the flag and the rule" "rc=$rc $out"; fi

out=$("$bin" --default-queue Team_Queue 2>&1); rc=$?
if [ $rc -eq 2 ] &&
   grep -q -- '--default-queue: "Team_Queue" is not a LocalQueue name' <<<"$out"; then
  tap_ok "a bad --default-queue names the flag and the rule"
else tap_fail "a bad --default-queue names the flag and the rule" "rc=$rc $out"; fi

# No configuration anywhere: exit 2, one JSON error line naming where it looked.
out=$(env -u KUBECONFIG -u KUBERNETES_SERVICE_HOST HOME="$tmp" "$bin" 2>&1); rc=$?
if [ $rc -eq 2 ] && python3 -c 'import json, sys
o = json.loads(sys.argv[1].splitlines()[-1])
assert o["level"] == "error" and "kubeconfig" in o["msg"]' "$out"; then
  tap_ok "no configuration: exit 2 with a JSON error"
else tap_fail "no configuration: exit 2 with a JSON error" "rc=$rc $out"; fi

cat > "$tmp/insecure.yaml" <<'Y'
current-context: c
contexts: [{name: c, context: {cluster: k, user: u}}]
clusters: [{name: k, cluster: {server: "https://127.0.0.1:1", insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: t}}]
Y
out=$("$bin" --kubeconfig "$tmp/insecure.yaml" 2>&1); rc=$?
if [ $rc -eq 2 ] &&
   grep -q 'sets insecure-skip-tls-verify.*started with --insecure-skip-tls-verify' <<<"$out"; then
  tap_ok "a kubeconfig with insecure-skip-tls-verify is refused without the flag, naming it"
else tap_fail "insecure kubeconfig refused without the flag" "rc=$rc $out"; fi
# With the explicit flag it starts, with a warning that says what is at stake.
"$bin" --kubeconfig "$tmp/insecure.yaml" --insecure-skip-tls-verify --metrics-addr 0 \
  --health-addr 0 >"$tmp/insecure.log" 2>&1 &
ipid=$!
for _ in $(seq 50); do
  grep -q 'TLS VERIFICATION IS OFF' "$tmp/insecure.log" && break
  sleep 0.1
done
kill -TERM "$ipid"; wait "$ipid"; rc=$?
if [ $rc -eq 0 ] && python3 -c '
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
w = [l for l in lines if "TLS VERIFICATION IS OFF" in l["msg"]]
assert w and w[0]["level"] == "warn" and "credentials" in w[0]["msg"], lines' \
   "$tmp/insecure.log"; then
  tap_ok "--insecure-skip-tls-verify: starts, logs a warning that verification is off"
else tap_fail "--insecure-skip-tls-verify warns loudly" "rc=$rc $(cat "$tmp/insecure.log")"; fi

# An API server that is not there: the daemon keeps running and retrying, the probes say
# alive but not ready, and SIGTERM ends it cleanly.
port=1 # nothing listens on tcpmux: connections are refused
cat > "$tmp/down.yaml" <<Y
current-context: c
contexts: [{name: c, context: {cluster: k, user: u}}]
clusters: [{name: k, cluster: {server: "http://127.0.0.1:$port"}}]
users: [{name: u, user: {token: t}}]
Y
"$bin" --kubeconfig "$tmp/down.yaml" --metrics-addr 127.0.0.1:0 --health-addr 127.0.0.1:0 \
  --log-level debug >"$tmp/log" 2>&1 &
pid=$!
# Until both servers are up and the first refused request is counted (at most 20 s: a
# loaded machine may take more than a second to start it).
mport="" hport="" ok_h=0 ok_r=0 ok_m=0
for _ in $(seq 100); do
  mport=$(sed -n 's/.*serving \/metrics on port \([0-9]*\).*/\1/p' "$tmp/log")
  hport=$(sed -n 's/.*serving \/healthz and \/readyz on port \([0-9]*\).*/\1/p' "$tmp/log")
  [ -n "$mport" ] && [ -n "$hport" ] && curl -s "http://127.0.0.1:$mport/metrics" |
    grep -q 'kubetrain_api_requests_total{verb="GET",code="0"}' && ok_m=1 && break
  sleep 0.2
done
[ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$hport/healthz")" = 200 ] && ok_h=1
[ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$hport/readyz")" = 503 ] && ok_r=1
tap_check "/healthz 200 while the API server is down" test $ok_h = 1
tap_check "/readyz 503 before the caches sync" test $ok_r = 1
tap_check "/metrics counts the failed requests" test $ok_m = 1
kill -TERM "$pid"
t0=$SECONDS
wait "$pid"; rc=$?
pid=
if [ $rc -eq 0 ] && [ $((SECONDS - t0)) -le 5 ]; then tap_ok "SIGTERM: exit 0 within 5 s"
else tap_fail "SIGTERM: exit 0 within 5 s" "rc=$rc after $((SECONDS - t0)) s; $(tail -3 "$tmp/log")"
fi
if python3 -c 'import json,sys
for l in open(sys.argv[1]):
    json.loads(l)' "$tmp/log"; then tap_ok "every log line is JSON"
else tap_fail "every log line is JSON" "$(head -3 "$tmp/log")"; fi
# convert-tfjob: the committed example is what the binary prints, from a file and from
# stdin; warnings go to stderr only; bad input is exit 2 naming the file, document, field.
ex=examples/tfjob/tf-ps-tfjob.yaml
"$bin" convert-tfjob "$ex" >"$tmp/tj.yaml" 2>"$tmp/tj.err"; rc=$?
if [ $rc -eq 0 ] && cmp -s "$tmp/tj.yaml" examples/tfjob/tf-ps-trainingjob.yaml &&
   grep -q "warning: $ex: document 1 (TFJob tf-ps): spec.runPolicy.schedulingPolicy" "$tmp/tj.err"
then tap_ok "convert-tfjob $ex prints examples/tfjob/tf-ps-trainingjob.yaml, warnings on stderr"
else tap_fail "convert-tfjob $ex prints the committed TrainingJob" \
  "rc=$rc $(diff "$tmp/tj.yaml" examples/tfjob/tf-ps-trainingjob.yaml | head; cat "$tmp/tj.err")"
fi
out=$("$bin" convert-tfjob - <"$ex" 2>/dev/null); rc=$?
tap_check "convert-tfjob - reads the standard input (rc=$rc)" \
  test "$out" = "$(cat examples/tfjob/tf-ps-trainingjob.yaml)"
printf '%s\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: cm}\n' "$(cat "$ex")" \
  >"$tmp/mixed.yaml"
out=$("$bin" convert-tfjob "$tmp/mixed.yaml" 2>&1 >"$tmp/mixed.out"); rc=$?
if [ $rc -eq 2 ] && [ ! -s "$tmp/mixed.out" ] &&
   grep -q "mixed.yaml: document 2 (ConfigMap cm): kind: \"ConfigMap\" is not a TFJob" <<<"$out"
then tap_ok "convert-tfjob: another kind is exit 2 naming the file and document, no output"
else tap_fail "convert-tfjob: another kind is exit 2 naming the document" "rc=$rc $out"; fi
sed 's/replicas: 2/replicas: two/' "$ex" >"$tmp/bad.yaml"
out=$("$bin" convert-tfjob "$tmp/bad.yaml" 2>&1 >/dev/null); rc=$?
if [ $rc -eq 2 ] && grep -q 'spec.tfReplicaSpecs.Worker.replicas: expected an integer' <<<"$out"
then tap_ok "convert-tfjob: a bad field is exit 2 naming it"
else tap_fail "convert-tfjob: a bad field is exit 2 naming it" "rc=$rc $out"; fi
# A deep document is refused at the depth limit while it is read: loaded first, 400 KB
# took libyaml about 255 s (issue 41). The timeout is generous; the refusal is checked.
{ cat "$ex"; printf -- '---\nspec: '; head -c 200000 /dev/zero | tr '\0' '['
  head -c 200000 /dev/zero | tr '\0' ']'; echo; } >"$tmp/deep.yaml"
out=$(timeout 60 "$bin" convert-tfjob "$tmp/deep.yaml" 2>&1 >/dev/null); rc=$?
if [ $rc -eq 2 ] && grep -q 'deep.yaml: document 2, line [0-9]*: nested deeper than 64 levels' \
   <<<"$out"
then tap_ok "convert-tfjob: a 400 KB document nested 200,000 deep is exit 2 naming the limit"
else tap_fail "convert-tfjob: a deep document is exit 2 naming the limit" "rc=$rc ${out:0:300}"; fi
"$bin" convert-tfjob "$tmp/none.yaml" >/dev/null 2>&1; rc=$?
tap_check "convert-tfjob: a missing file is exit 2 (got $rc)" test $rc -eq 2
tap_done
