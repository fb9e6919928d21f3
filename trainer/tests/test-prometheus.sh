#!/usr/bin/env bash
# The chief's Prometheus endpoint (--metrics-port, the ASan+UBSan build) scraped with
# curl during a run: text exposition with HELP/TYPE for every sample (kubetrain_gemm_info
# with its kernels label among them), steps that grow, the scraped step's loss equal to
# the metrics file's; 404 elsewhere; off by default; with 2 workers only the chief
# listens; a taken port -> exit 2 naming the flag.
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

skip_without_data "Prometheus endpoint" "$DATA"
if ! command -v curl >/dev/null; then
  tap_skip "Prometheus endpoint" "no curl"; tap_done; exit
fi
steps_of() { sed -n 's/^kubetrain_steps_total \([0-9]*\)$/\1/p' "$1"; }

port=$(free_port)
"$BIN" --model mlp --per-worker-batch 16 --epochs 2 --steps-per-epoch 2500 --eval \
  --metrics-port "$port" --metrics-file "$tmp/m.jsonl" >"$tmp/out" 2>&1 &
pid=$!
# first scrape once a step is done, then a second one later in the run
for _ in $(seq 600); do
  curl -sf "http://127.0.0.1:$port/metrics" -o "$tmp/s1" 2>/dev/null &&
    [[ $(steps_of "$tmp/s1") -gt 0 ]] && break
  sleep 0.05
done
sleep 0.5
curl -sf -D "$tmp/h2" "http://127.0.0.1:$port/metrics" -o "$tmp/s2"
code404=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/healthz")
wait "$pid"; rc=$?; pid=

if python3 - "$tmp/s1" "$tmp/h2" <<'PY' >"$tmp/fmt" 2>&1
import re, sys
text = open(sys.argv[1]).read()
names = ["kubetrain_steps_total", "kubetrain_epoch", "kubetrain_loss", "kubetrain_accuracy",
         "kubetrain_samples_per_second", "kubetrain_learning_rate", "kubetrain_allreduce_seconds",
         "kubetrain_allreduce_seconds_total", "kubetrain_step_seconds_total"]
helped, typed, samples, labels = set(), {}, {}, {}
for line in text.splitlines():
    if line.startswith("# HELP "):
        helped.add(line.split()[2])
    elif line.startswith("# TYPE "):
        _, _, n, t = line.split()
        typed[n] = t
    else:
        m = re.fullmatch(r'([a-z_]+)(\{(?:[a-z_]+="[^"\\]*",?)*\})? (-?[0-9.e+-]+)', line)
        assert m, "bad sample line %r" % line
        samples[m.group(1)] = float(m.group(3))
        labels[m.group(1)] = m.group(2) or ""
for n in names:
    assert n in samples and n in helped and n in typed, n
assert typed["kubetrain_steps_total"] == "counter" and typed["kubetrain_loss"] == "gauge"
assert abs(samples["kubetrain_learning_rate"] - 0.001) < 1e-9 and samples["kubetrain_epoch"] >= 1
assert samples["kubetrain_samples_per_second"] > 0 and samples["kubetrain_step_seconds_total"] > 0
assert "text/plain; version=0.0.4" in open(sys.argv[2]).read()
# the kernels the products run on, as a label set of a gauge that is always 1
assert samples.get("kubetrain_gemm_info") == 1 and typed["kubetrain_gemm_info"] == "gauge"
assert re.search(r'kernels="[A-Za-z0-9]+"', labels["kubetrain_gemm_info"]), labels
print(len(samples), "samples")
PY
then tap_ok "GET /metrics: Prometheus text 0.0.4, HELP and TYPE for each of $(cat "$tmp/fmt")"
else tap_fail "GET /metrics: Prometheus text" "$(cat "$tmp/fmt" "$tmp/s1" "$tmp/out")"; fi

s1=$(steps_of "$tmp/s1") s2=$(steps_of "$tmp/s2")
[[ $rc -eq 0 && $s1 -gt 0 && $s2 -gt $s1 ]] &&
  tap_ok "steps grow between scrapes ($s1 -> $s2), the run finishes" ||
  tap_fail "steps grow between scrapes" "rc=$rc $s1 -> $s2; $(tail -3 "$tmp/out")"
if python3 - "$tmp/s2" "$tmp/m.jsonl" <<'PY' >"$tmp/cmp" 2>&1
import json, math, sys
s = dict(l.rsplit(None, 1) for l in open(sys.argv[1]) if not l.startswith("#"))
step = int(s["kubetrain_steps_total"])
ev = [json.loads(l) for l in open(sys.argv[2])]
e = [x for x in ev if x["event"] == "step" and x["step"] == step][0]
for k, name in (("loss", "kubetrain_loss"), ("accuracy", "kubetrain_accuracy"),
                ("allreduce_seconds", "kubetrain_allreduce_seconds")):
    assert math.isclose(float(s[name]), e[k], rel_tol=6e-6, abs_tol=1e-12), (k, s[name], e[k])
print("step", step)
PY
then tap_ok "the scraped values are those of that step in the metrics file ($(cat "$tmp/cmp"))"
else
  tap_fail "the scraped values are those of that step in the metrics file" "$(cat "$tmp/cmp")"
fi
[[ $code404 == 404 ]] && tap_ok "other paths: 404" || tap_fail "other paths: 404" "got $code404"

# off by default: a run of one worker listens on nothing
if ! command -v ss >/dev/null; then tap_skip "without --metrics-port nothing listens" "no ss"; else
"$BIN" --model mlp --per-worker-batch 16 --epochs 1 --steps-per-epoch 3000 >"$tmp/out2" 2>&1 &
pid=$!
for _ in $(seq 600); do grep -q "^Epoch 1/1" "$tmp/out2" && break; sleep 0.05; done
listening=$(ss -Hltnp 2>/dev/null | grep -c "pid=$pid,")
wait "$pid"; pid=
[[ $listening -eq 0 ]] && ! grep -q "Prometheus" "$tmp/out2" &&
  tap_ok "without --metrics-port nothing listens" ||
  tap_fail "without --metrics-port nothing listens" "$listening sockets; $(cat "$tmp/out2")"
fi

# two workers with the same flag: only the chief binds it (else the second would fail)
port=$(free_port)
"$BIN" launch --workers 2 --model mlp --per-worker-batch 16 --epochs 1 --steps-per-epoch 3 \
  --metrics-port "$port" >"$tmp/out3" 2>&1; rc=$?
[[ $rc -eq 0 && $(grep -c "Prometheus on port $port" "$tmp/out3") -eq 1 ]] &&
  tap_ok "2 workers: the chief alone serves /metrics" ||
  tap_fail "2 workers: the chief alone serves /metrics" "rc=$rc $(cat "$tmp/out3")"

# a port already taken
python3 -c 'import socket, sys, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("", int(sys.argv[1]))); s.listen(); time.sleep(20)' "$port" &
holder=$!
sleep 0.3
err=$("$BIN" --model mlp --epochs 1 --steps-per-epoch 1 --metrics-port "$port" 2>&1 >/dev/null)
rc=$?
kill "$holder" 2>/dev/null; wait "$holder" 2>/dev/null
[[ $rc -eq 2 && $err == *"--metrics-port $port"* ]] &&
  tap_ok "a taken port -> exit 2 naming --metrics-port" ||
  tap_fail "a taken port -> exit 2 naming --metrics-port" "rc=$rc $err"

tap_done
