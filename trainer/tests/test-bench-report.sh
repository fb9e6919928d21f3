#!/usr/bin/env bash
# make bench-report's script (bench/report.py) from the committed bench/results/*.json
# into a temporary directory: RESULTS.md names every JSON, every plot it links is a PNG,
# the plots carry their provenance; a JSON of an unknown shape still gets a section, and
# a malformed one fails naming the file. Runs no benchmark.
source e2e/lib/tap.sh
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

if ! PY=$(bash bench/pyvenv.sh venv-report matplotlib matplotlib 2>"$tmp/venv.err"); then
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

# an unknown shape and a malformed file
mkdir -p "$tmp/res"
cp "${jsons[@]}" "$tmp/res/"
echo '{"date": "2026-01-01T00:00:00Z", "widgets_per_sec": 3}' >"$tmp/res/zz-new.json"
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
