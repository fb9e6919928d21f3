#!/usr/bin/env bash
# The chief's TensorBoard event files (the ASan+UBSan build), read back with
# TensorBoard's own reader (pip `tensorboard` in $KT_CACHE/venv-tb): every scalar equals
# the metrics file's value; <checkpoint-dir>/logs by default, --tensorboard-dir and
# KUBETRAIN_TENSORBOARD_DIR override; a resumed run adds a file and leaves the old one
# as it was; only the chief writes; a flipped byte fails TensorBoard's CRC check.
set -uo pipefail # no -e: a failed check is reported (not ok) and the test goes on
source e2e/lib/tap.sh
source trainer/tests/lib.sh
BIN=${TRAINER:-build/san/bin/kubetrain-trainer}
DATA=/usr/share/datasets/fashion-mnist
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export KUBETRAIN_TERMINATION_FILE=$tmp/termination OPENBLAS_NUM_THREADS=1
unset TF_CONFIG KUBETRAIN_TENSORBOARD_DIR KUBETRAIN_CHECKPOINT_DIR KUBETRAIN_METRICS_FILE

skip_without_data "TensorBoard events" "$DATA"
if ! PY=$(bash bench/pyvenv.sh venv-tb 2>"$tmp/venv.err"); then
  tap_skip "TensorBoard events" "no TensorBoard venv: $(tail -1 "$tmp/venv.err")"
  tap_done; exit
fi

run=(--model mlp --per-worker-batch 16 --steps-per-epoch 3 --eval)
events() { find "$1" -name 'events.out.tfevents.*' 2>/dev/null | sort; }

# Compares the scalars TensorBoard reads from the event files in DIR with the metrics
# file: every step, epoch and eval value, at the same step; prints what differs.
cat >"$tmp/compare.py" <<'PY'
import json, math, sys
from tensorboard.backend.event_processing import event_accumulator as ea
logdir, metrics = sys.argv[1], sys.argv[2]
first_step = int(sys.argv[3]) if len(sys.argv) > 3 else 1
acc = ea.EventAccumulator(logdir, size_guidance={ea.SCALARS: 0})
acc.Reload()
got = {t: {e.step: e.value for e in acc.Scalars(t)} for t in acc.Tags()["scalars"]}
want = {}
for line in open(metrics):
    e = json.loads(line)
    if e["event"] == "step":
        for k in ("loss", "accuracy", "learning_rate", "samples_per_sec", "allreduce_seconds",
                  "step_seconds"):
            want.setdefault("step/" + k, {})[e["step"]] = e[k]
    elif e["event"] == "epoch":
        for k in ("loss", "accuracy", "samples_per_sec", "seconds"):
            want.setdefault("epoch/" + k, {})[e["epoch"]] = e[k]
    elif e["event"] == "eval":
        for k in ("test_loss", "test_accuracy"):
            want.setdefault("eval/" + k, {})[e["epoch"]] = e[k]
bad = []
if set(got) != set(want):
    bad.append("tags: %s vs %s" % (sorted(got), sorted(want)))
for tag, steps in want.items():
    g = got.get(tag, {})
    g = {s: v for s, v in g.items() if tag.startswith(("epoch/", "eval/")) or s >= first_step}
    if sorted(g) != sorted(steps):
        bad.append("%s: steps %s vs %s" % (tag, sorted(g), sorted(steps)))
        continue
    for s, v in steps.items():
        # the metrics file prints 6 significant digits (samples/s 1 decimal, seconds 3),
        # so within 5e-6 relative; TensorBoard holds a float32
        tol = 0.051 if tag.endswith("samples_per_sec") else 5.1e-4 if tag == "epoch/seconds" else 0
        if not math.isclose(g[s], v, rel_tol=6e-6, abs_tol=max(tol, 1e-12)):
            bad.append("%s at %d: %r in the events, %r in the metrics file" % (tag, s, g[s], v))
print("\n".join(bad) or "%d tags, %d values" % (len(want), sum(map(len, want.values()))))
sys.exit(1 if bad else 0)
PY

# --- default directory, values against the metrics file ------------------------------
ck=$tmp/ck
"$BIN" "${run[@]}" --epochs 2 --checkpoint-dir "$ck" --metrics-file "$tmp/m1.jsonl" \
  >"$tmp/out1" 2>&1 || tap_fail "first run" "$(cat "$tmp/out1")"
mapfile -t files < <(events "$ck")
if [[ ${#files[@]} -eq 1 && ${files[0]} == "$ck/logs/events.out.tfevents."*".$(hostname)."* ]]; then
  tap_ok "one event file under <checkpoint-dir>/logs, named events.out.tfevents.<secs>.<host>..."
else
  tap_fail "one event file under <checkpoint-dir>/logs" "${files[*]}"
fi
tap_check "TensorBoard reads every step, epoch and eval scalar as in the metrics file" \
  "$PY" "$tmp/compare.py" "$ck/logs" "$tmp/m1.jsonl"

# --- resume: a new file, the old one untouched, the curves continue -------------------
sum_before=$(sha256sum "${files[0]}")
"$BIN" "${run[@]}" --epochs 3 --checkpoint-dir "$ck" --metrics-file "$tmp/m2.jsonl" \
  >"$tmp/out2" 2>&1 || tap_fail "resumed run" "$(cat "$tmp/out2")"
mapfile -t files2 < <(events "$ck")
if [[ ${#files2[@]} -eq 2 && $(sha256sum "${files[0]}") == "$sum_before" ]]; then
  tap_ok "a resumed run adds a second event file; the first is unchanged"
else
  tap_fail "a resumed run adds a second event file" "${files2[*]}"
fi
new=$(comm -13 <(printf '%s\n' "${files[@]}") <(printf '%s\n' "${files2[@]}"))
mkdir -p "$tmp/resumed" && cp "$new" "$tmp/resumed/"
tap_check "the resumed file holds steps 7-9 and epoch 3, equal to its metrics file" \
  "$PY" "$tmp/compare.py" "$tmp/resumed" "$tmp/m2.jsonl" 7
if "$PY" - "$ck/logs" >"$tmp/steps" 2>&1 <<'PY'
import sys
from tensorboard.backend.event_processing import event_accumulator as ea
acc = ea.EventAccumulator(sys.argv[1], size_guidance={ea.SCALARS: 0}); acc.Reload()
steps = [e.step for e in acc.Scalars("step/loss")]
epochs = [e.step for e in acc.Scalars("epoch/loss")]
print(steps, epochs)
sys.exit(0 if steps == list(range(1, 10)) and epochs == [1, 2, 3] else 1)
PY
then tap_ok "TensorBoard on the directory shows steps 1-9, epochs 1-3"
else tap_fail "TensorBoard on the directory shows steps 1-9, epochs 1-3" "$(cat "$tmp/steps")"; fi

# --- --tensorboard-dir and KUBETRAIN_TENSORBOARD_DIR -------------------------------
"$BIN" "${run[@]}" --epochs 1 --checkpoint-dir "$tmp/ck2" --tensorboard-dir "$tmp/tb-flag" \
  >/dev/null 2>&1
KUBETRAIN_TENSORBOARD_DIR=$tmp/tb-env "$BIN" "${run[@]}" --epochs 1 >/dev/null 2>&1
KUBETRAIN_TENSORBOARD_DIR=$tmp/tb-env2 "$BIN" "${run[@]}" --epochs 1 \
  --tensorboard-dir "$tmp/tb-flag2" >/dev/null 2>&1
if [[ $(events "$tmp/tb-flag" | wc -l) -eq 1 && -z $(events "$tmp/ck2") &&
      $(events "$tmp/tb-env" | wc -l) -eq 1 && -z $(events "$tmp/tb-env2") &&
      $(events "$tmp/tb-flag2" | wc -l) -eq 1 ]]; then
  tap_ok "--tensorboard-dir and KUBETRAIN_TENSORBOARD_DIR choose the directory (the flag wins)"
else
  tap_fail "--tensorboard-dir and KUBETRAIN_TENSORBOARD_DIR" "$(find "$tmp" -name 'events*')"
fi
touch "$tmp/marker"
sleep 0.01
"$BIN" "${run[@]}" --epochs 1 --metrics-file "$tmp/none.jsonl" >/dev/null 2>&1
[[ -s $tmp/none.jsonl &&
   -z $(find "$tmp" . -name 'events.out.tfevents.*' -newer "$tmp/marker") ]] &&
  tap_ok "no checkpoint dir and no --tensorboard-dir: no event file" ||
  tap_fail "no checkpoint dir and no --tensorboard-dir: no event file" "$(events "$tmp")"
err=$("$BIN" "${run[@]}" --epochs 1 --tensorboard-dir "$tmp/none.jsonl/logs" 2>&1 >/dev/null); rc=$?
[[ $rc -eq 2 && $err == *"--tensorboard-dir $tmp/none.jsonl/logs"* ]] &&
  tap_ok "an unusable --tensorboard-dir -> exit 2 naming it" ||
  tap_fail "an unusable --tensorboard-dir -> exit 2 naming it" "rc=$rc $err"

# --- two workers: the chief alone writes -------------------------------------------
"$BIN" launch --workers 2 "${run[@]}" --epochs 1 --checkpoint-dir "$tmp/ck3" \
  --metrics-file "$tmp/m3.jsonl" >"$tmp/out3" 2>&1
mapfile -t files3 < <(events "$tmp/ck3")
if [[ ${#files3[@]} -eq 1 ]] &&
   "$PY" "$tmp/compare.py" "$tmp/ck3/logs" "$tmp/m3.jsonl" >"$tmp/cmp3" 2>&1; then
  tap_ok "2 workers: one event file, the chief's, equal to its metrics file"
else
  tap_fail "2 workers: one event file, the chief's" \
    "${files3[*]} $(cat "$tmp/cmp3" "$tmp/out3" 2>/dev/null)"
fi

# --- a flipped byte fails the CRC in TensorBoard's record reader ------------------
cp "${files[0]}" "$tmp/corrupt"
size=$(stat -c %s "$tmp/corrupt")
cat >"$tmp/crc.py" <<'PY'
import sys
from tensorboard.compat.tensorflow_stub import errors
from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import PyRecordReader_New
r, n = PyRecordReader_New(sys.argv[1]), 0
try:
    while True:
        r.GetNext(); n += 1
except errors.OutOfRangeError:
    print("read %d records" % n); sys.exit(0)
except errors.DataLossError as e:
    print("after %d records: %s" % (n, e.message)); sys.exit(3)
PY
intact=$("$PY" "$tmp/crc.py" "$tmp/corrupt" 2>&1); rc0=$?
python3 -c 'import sys; f = open(sys.argv[1], "r+b"); f.seek(int(sys.argv[2])); b = f.read(1)
f.seek(int(sys.argv[2])); f.write(bytes([b[0] ^ 0xFF]))' "$tmp/corrupt" $((size / 2))
broken=$("$PY" "$tmp/crc.py" "$tmp/corrupt" 2>&1); rc1=$?
if [[ $rc0 -eq 0 && $rc1 -eq 3 && $broken == *crc32* ]]; then
  tap_ok "TensorBoard's reader: intact file ($intact); flipped byte -> $broken"
else
  tap_fail "TensorBoard's reader detects a flipped byte" \
    "intact: $rc0 $intact; corrupt: $rc1 $broken"
fi

tap_done
