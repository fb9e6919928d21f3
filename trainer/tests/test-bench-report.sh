#!/usr/bin/env bash
# make bench-report's script (bench/report.py) from the committed bench/results/*.json
# into a temporary directory: RESULTS.md names every JSON, every plot it links is a PNG,
# the plots carry their provenance; a JSON of an unknown shape still gets a section, and
# a malformed one fails naming the file; PyTorch is plotted when trainer-core.json has it
# and said to be missing when it has not; cifar.json (bench-cifar) gets its section, the
# trainer's medians and profile in it. Runs no benchmark.
set -uo pipefail # no -e: a failed check is reported (not ok) and the test goes on
source e2e/lib/tap.sh
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

if ! PY=$(bash bench/pyvenv.sh venv-report 2>"$tmp/venv.err"); then
  tap_skip "bench report" "no matplotlib venv: $(tail -1 "$tmp/venv.err")"
  tap_done; exit
fi
shopt -s nullglob
jsons=(bench/results/*.json)
if [ ${#jsons[@]} -eq 0 ]; then
  tap_fail "bench report" "no bench/results/*.json"; tap_done; exit
fi

if out=$("$PY" bench/report.py --out "$tmp/out" 2>&1) && [ -s "$tmp/out/RESULTS.md" ]; then
  tap_ok "report builds from the committed JSON ($out)"
else
  tap_fail "report builds from the committed JSON" "$out"
fi
missing=()
for j in "${jsons[@]}"; do
  grep -qF "bench/results/$(basename "$j")" "$tmp/out/RESULTS.md" || missing+=("$j")
done
[ ${#missing[@]} -eq 0 ] && tap_ok "RESULTS.md names each of the ${#jsons[@]} JSON files" ||
  tap_fail "RESULTS.md names each JSON file" "missing: ${missing[*]}"

mapfile -t links < <(sed -n 's/^!\[.*\](\(plots\/[^)]*\.png\))$/\1/p' "$tmp/out/RESULTS.md")
bad=()
for l in "${links[@]}"; do
  [[ $(head -c 8 "$tmp/out/$l" 2>/dev/null | od -An -tx1 | tr -d ' \n') == 89504e470d0a1a0a ]] || bad+=("$l")
done
want=(samples-per-sec allreduce-busbw operator-pods)
for w in "${want[@]}"; do [[ " ${links[*]} " == *" plots/$w.png "* ]] || bad+=("no plots/$w.png"); done
[ ${#bad[@]} -eq 0 ] && tap_ok "RESULTS.md links ${#links[@]} PNG plots, all present: ${links[*]}" ||
  tap_fail "RESULTS.md links PNG plots that exist" "bad: ${bad[*]}; links: ${links[*]}"

# provenance: each JSON's date appears in the table, with a commit or "uncommitted"
if "$PY" - "$tmp/out/RESULTS.md" "${jsons[@]}" >"$tmp/prov" 2>&1 <<'PY'
import json, re, sys
md = open(sys.argv[1]).read()
for path in sys.argv[2:]:
    name, date = path.rsplit("/", 1)[1], str(json.load(open(path)).get("date", "no date recorded"))
    row = re.search(r"^\| `%s` \| ([^|]*) \| ([^|]*) \| ([^|]*) \|$" % re.escape(name), md, re.M)
    assert row, "no row for %s" % name
    assert row.group(2) == date, (name, row.group(2), date)
    assert re.match(r"([0-9a-f]{7,} \d{4}-\d\d-\d\d|uncommitted)$", row.group(3)), row.group(3)
print("ok")
PY
then tap_ok "each JSON's machine, date and commit in the provenance table"
else tap_fail "each JSON's machine, date and commit in the provenance table" "$(cat "$tmp/prov")"; fi

# PyTorch in the throughput plot and the trainer-core table: from a trainer-core.json with
# the PyTorch peer's fields (added here with stand-in values when the committed file has
# none) and from one without them, as files from before bench-trainer ran PyTorch are.
if [ -f bench/results/trainer-core.json ]; then
  mkdir -p "$tmp/pt" "$tmp/nopt"
  if "$PY" - bench/results/trainer-core.json "$tmp/pt/trainer-core.json" "$tmp/nopt/trainer-core.json" \
       >"$tmp/ptprep" 2>&1 <<'PY'
import json, sys
src, with_pt, without_pt = sys.argv[1:4]
d = json.load(open(src))
if "pytorch_samples_per_sec" not in d["median"]:
    for row in d["rounds"] + [d["median"]]:
        row.update(pytorch_samples_per_sec=1234.5, pytorch_cpu_ms_per_sample=1.25,
                   pytorch_max_rss_mib=900.0)
json.dump(d, open(with_pt, "w"))
for row in d["rounds"] + [d["median"]]:
    for k in [k for k in row if "pytorch" in k]:
        del row[k]
json.dump(d, open(without_pt, "w"))
PY
  then
    # the median as the report prints it (its fmt())
    sps=$(PYTHONDONTWRITEBYTECODE=1 "$PY" -c 'import json, sys; sys.path.insert(0, "bench"); from report import fmt
print(fmt(json.load(open(sys.argv[1]))["median"]["pytorch_samples_per_sec"]))' "$tmp/pt/trainer-core.json")
    if "$PY" bench/report.py --results "$tmp/pt" --out "$tmp/outpt" >/dev/null 2>"$tmp/errpt" &&
       grep -q '^### Training throughput: kubetrain vs TensorFlow and PyTorch$' "$tmp/outpt/RESULTS.md" &&
       grep -q '^Bars: .*; PyTorch 1 worker (CPU); ' "$tmp/outpt/RESULTS.md" &&
       grep -q "^| PyTorch, 1 worker (CPU) | $sps | " "$tmp/outpt/RESULTS.md" &&
       ! grep -q 'Not plotted: PyTorch' "$tmp/outpt/RESULTS.md"; then
      tap_ok "a trainer-core.json with PyTorch: its bar in the throughput plot, its row ($sps samples/s)"
    else
      tap_fail "a trainer-core.json with PyTorch: its bar and its row" \
        "$(cat "$tmp/errpt"; grep -n 'Training throughput\|^Bars\|PyTorch' "$tmp/outpt/RESULTS.md")"
    fi
    if "$PY" bench/report.py --results "$tmp/nopt" --out "$tmp/outnopt" >/dev/null 2>"$tmp/errnopt" &&
       grep -q '^### Training throughput: kubetrain vs TensorFlow$' "$tmp/outnopt/RESULTS.md" &&
       grep -q '^Bars: .*TensorFlow/Keras 1 worker.* Not plotted: PyTorch: not in trainer-core.json' \
         "$tmp/outnopt/RESULTS.md" &&
       ! grep -q '^| PyTorch' "$tmp/outnopt/RESULTS.md" &&
       [[ $(head -c 8 "$tmp/outnopt/plots/samples-per-sec.png" | od -An -tx1 | tr -d ' \n') == 89504e470d0a1a0a ]]; then
      tap_ok "a trainer-core.json without PyTorch (an older run) still plots, saying PyTorch is not in it"
    else
      tap_fail "a trainer-core.json without PyTorch still plots" \
        "$(cat "$tmp/errnopt"; grep -n 'Training throughput\|^Bars\|PyTorch' "$tmp/outnopt/RESULTS.md")"
    fi
  else
    tap_fail "trainer-core.json with and without PyTorch prepared" "$(cat "$tmp/ptprep")"
  fi
else
  tap_skip "PyTorch in the throughput plot" "no bench/results/trainer-core.json"
fi

# bench-cifar's file: its own section, with the runners' medians and the trainer's profile
if [ -f bench/results/cifar.json ]; then
  mkdir -p "$tmp/cf"
  cp bench/results/cifar.json "$tmp/cf/"
  # the kubetrain row and the profile's first row as the report prints them (its fmt())
  mapfile -t want < <(PYTHONDONTWRITEBYTECODE=1 "$PY" -c 'import json, sys
sys.path.insert(0, "bench"); from report import fmt
d = json.load(open(sys.argv[1])); m = d["median"]; r = d["profile"]["rows"][0]
print("| kubetrain, 1 worker | %s | %s | %s | 1 | 1 |" % tuple(fmt(m["kubetrain_" + k])
      for k in ("samples_per_sec", "cpu_ms_per_sample", "max_rss_mib")))
print("| %s | %s | %s | %s |" % tuple(fmt(r[k]) for k in ("pass", "layer", "share_of_step_cpu",
                                                          "one_thread_share")))' \
    bench/results/cifar.json)
  if "$PY" bench/report.py --results "$tmp/cf" --out "$tmp/outcf" >/dev/null 2>"$tmp/errcf" &&
     grep -q '^## CIFAR-shaped model: one worker (cifar.json)$' "$tmp/outcf/RESULTS.md" &&
     grep -qF "${want[0]}" "$tmp/outcf/RESULTS.md" && grep -qF "${want[1]}" "$tmp/outcf/RESULTS.md"
  then
    tap_ok "cifar.json: its section with kubetrain's medians and the profile (${want[*]})"
  else
    tap_fail "cifar.json: its section with kubetrain's medians and the profile" \
      "want ${want[*]}; got: $(cat "$tmp/errcf"; grep -n -A12 'cifar.json' "$tmp/outcf/RESULTS.md")"
  fi
else
  tap_skip "cifar.json's section" "no bench/results/cifar.json"
fi

# an unknown shape and a malformed file
mkdir -p "$tmp/res"
cp "${jsons[@]}" "$tmp/res/"
echo '{"date": "2026-01-01T00:00:00Z", "widgets_per_sec": 3}' >"$tmp/res/zz-new.json"
# shellcheck disable=SC2016 # Markdown's backticks, not the shell's
if "$PY" bench/report.py --results "$tmp/res" --out "$tmp/out2" >/dev/null 2>"$tmp/err2" &&
   grep -q 'Other results (zz-new.json)' "$tmp/out2/RESULTS.md" &&
   grep -q '`widgets_per_sec`' "$tmp/out2/RESULTS.md" &&
   grep -qF '| `zz-new.json` | ? | 2026-01-01T00:00:00Z | uncommitted |' "$tmp/out2/RESULTS.md"; then
  tap_ok "a JSON of unknown shape gets its own section, marked uncommitted"
else
  tap_fail "a JSON of unknown shape gets its own section" "$(cat "$tmp/err2"; grep -n zz-new "$tmp/out2/RESULTS.md")"
fi
echo '{"date": ' >"$tmp/res/zz-bad.json"
err=$("$PY" bench/report.py --results "$tmp/res" --out "$tmp/out3" 2>&1); rc=$?
[[ $rc -ne 0 && $err == *"zz-bad.json"* ]] && tap_ok "a malformed JSON fails naming the file" ||
  tap_fail "a malformed JSON fails naming the file" "rc=$rc $err"

tap_done
