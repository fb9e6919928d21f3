#!/usr/bin/env bash
# .ci/taprun's lanes (TAPRUN_JOBS) and half lanes (TAPRUN_WAITING), with stand-in programs
# that log when they start and end: a whole-lane program alone in its lane, two waiting
# programs to a lane, one starting ahead of its turn into a free half lane, the output in
# the order given and the tally. A few seconds.
set -uo pipefail # no -e: a failed check is reported (not ok) and the test goes on
cd "$(dirname "$0")/../.." || exit 1
. e2e/lib/tap.sh

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# prog NAME WANT: a program that logs "start NAME", waits (10 s at most) until WANT
# programs have started, or 0.3 s when WANT is 0, logs "end NAME" and reports one test.
prog() {
  cat >"$tmp/$1.sh" <<EOF
echo "start $1" >>"$tmp/events"
for _ in \$(seq 100); do
  [ $2 -gt 0 ] || { sleep 0.3; break; }
  [ "\$(grep -c '^start' "$tmp/events")" -ge $2 ] && break
  sleep 0.1
done
echo "end $1" >>"$tmp/events"
echo "ok 1 - $1"
echo "1..1"
EOF
}

# lanes JOBS WAITING NAME...: runs the programs NAME through taprun in JOBS lanes,
# those in WAITING (space-separated names) as waiting ones; its output in $tmp/out, the
# seconds it took in $secs, the events in $tmp/events.
lanes() {
  local jobs=$1 waiting="" n t0=$SECONDS paths=()
  for n in $2; do waiting+=" $tmp/$n.sh"; done
  shift 2
  for n in "$@"; do paths+=("$tmp/$n.sh"); done
  : >"$tmp/events"
  TAPRUN_JOBS=$jobs TAPRUN_WAITING=$waiting bash .ci/taprun "${paths[@]}" >"$tmp/out" 2>&1
  secs=$((SECONDS - t0))
}

# peak WAITING: the most half lanes in use at once by the events (2 a program, 1 a
# waiting one).
peak() {
  awk -v waiting=" $1 " '{ w = index(waiting, " " $2 " ") ? 1 : 2 }
    $1 == "start" { used += w; if (used > max) max = used } $1 == "end" { used -= w }
    END { print max + 0 }' "$tmp/events"
}

# shown: the programs in the order taprun showed them.
shown() { sed -n 's|^# --- .*/\(.*\)\.sh$|\1|p' "$tmp/out" | tr '\n' ' '; }

prog h1 2; prog h2 2; prog h3 0
lanes 2 "" h1 h2 h3
got=$(peak "")
if [ "$got" = 4 ]; then tap_ok "2 lanes, 3 programs: two at once, never three"
else tap_fail "2 lanes, 3 programs: two at once" "half lanes in use at most: $got, want 4"; fi

for n in w1 w2 w3 w4; do prog "$n" 4; done
lanes 2 "w1 w2 w3 w4" w1 w2 w3 w4
if [ "$(peak "w1 w2 w3 w4")" = 4 ] && [ "$secs" -lt 10 ] &&
   [ "$(grep -c '^start' "$tmp/events")" = 4 ]; then
  tap_ok "2 lanes, 4 waiting programs: all four at once (${secs} s)"
else
  tap_fail "2 lanes, 4 waiting programs: all four at once" \
    "took $secs s (10 s: they waited for each other); events: $(tr '\n' ' ' <"$tmp/events")"
fi

# h1 and w1 leave half a lane: w2 takes it ahead of h2, and h2 and h3 wait for a whole one.
prog h1 3; prog w1 3; prog w2 3; prog h2 0; prog h3 0
lanes 2 "w1 w2" h1 w1 h2 w2 h3
order=$(awk '$1 == "start" { printf "%s ", $2 }' "$tmp/events")
got=$(peak "w1 w2")
if [ "$got" = 4 ] && [[ $order == *w2*h2* ]] && [ "$secs" -lt 10 ]; then
  tap_ok "a waiting program starts ahead of its turn in a free half lane (started: $order)"
else
  tap_fail "a waiting program starts in a free half lane" \
    "started: $order; half lanes in use at most: $got, want 4; took $secs s"
fi
check_out() {
  local want="h1 w1 h2 w2 h3 " tally="tests: 5 passed, 0 failed, 0 skipped"
  [ "$(shown)" = "$want" ] || { echo "shown: '$(shown)', want '$want'"; return 1; }
  grep -qx "$tally" "$tmp/out" || { echo "no '$tally' in:"; cat "$tmp/out"; return 1; }
}
tap_check "the output in the order given, with one tally" check_out

tap_done
