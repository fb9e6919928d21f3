#!/usr/bin/env bash
# Two workers that start before the cluster DNS has their names (trainer/src/dnsprobe.h):
# the real trainer (the ASan+UBSan build) against a real CoreDNS with its negative cache
# (the `file` plugin serving cluster.local with a negative TTL of 5 s, `cache 5`; on a
# cluster the kubernetes plugin answers the same way), in a private network and mount
# namespace whose /etc/resolv.conf names it (nothing on the host changes). The workers'
# TF_CONFIG names w0/w1.j-worker.ns.svc get their records 1.5 s after both started, as
# pods' records come a moment after their containers:
#  - with the probe (2 workers, and 3: the announcements ask too), each worker's ring
#    forms within 2 s of the records (a moment: the zone reloads every 0.1 s, the probe
#    asks every 0.25 s); no worker looked an A or AAAA record up before it existed;
#  - the control, KUBETRAIN_DNS_PROBE=0 (the trainer before the probe): the workers' own
#    early lookups are cached as "no such name" and the ring waits them out — shown, so
#    that the first result is known to come from the probe and not from a setup that
#    caches nothing.
set -uo pipefail # no -e: a failed check is reported (not ok) and the test goes on
source e2e/lib/tap.sh
source trainer/tests/lib.sh
BIN=${TRAINER:-build/san/bin/kubetrain-trainer}
DATA=/usr/share/datasets/fashion-mnist
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if [ ! -x "$BIN" ]; then tap_skip "dns probe" "$BIN is not built"; tap_done; exit; fi
skip_without_data "dns probe" "$DATA"
if [ "$(id -u)" != 0 ] || ! unshare -nm --propagation private true 2>/dev/null; then
  tap_skip "dns probe" "needs root and unshare -nm (a private resolv.conf and port 53)"
  tap_done; exit
fi
if ! coredns=$(bash e2e/cluster/build-coredns.sh 2>"$tmp/build.err"); then
  tap_fail "CoreDNS built (e2e/cluster/build-coredns.sh)" "$(tail -n 5 "$tmp/build.err")"
  tap_done; exit
fi

# One run in the namespace: $1 its name (its results are $TMP/$1.*), WORLD workers,
# KUBETRAIN_DNS_PROBE=$PROBE.
cat >"$tmp/run.sh" <<'RUN'
set -euo pipefail
run=$1
ip link set lo up
ip addr add 10.244.9.5/32 dev lo
ip addr add 10.244.9.6/32 dev lo
ip addr add 10.244.9.7/32 dev lo
{
  echo 'nameserver 127.0.0.1'
  echo 'search ns.svc.cluster.local svc.cluster.local cluster.local'
  echo 'options ndots:5 timeout:1'
} >"$TMP/resolv.conf"
printf '127.0.0.1 localhost\n' >"$TMP/hosts"
mount --bind "$TMP/resolv.conf" /etc/resolv.conf
mount --bind "$TMP/hosts" /etc/hosts
zone() { # serial [records...]
  printf '$ORIGIN cluster.local.\n$TTL 5\n'
  printf '@ IN SOA ns.cluster.local. root.cluster.local. %d 60 60 600 5\n' "$1"
  printf '@ IN NS ns.cluster.local.\nns IN A 127.0.0.1\n'
  shift
  for r in "$@"; do echo "$r"; done
}
zone 1 >"$TMP/db"
cat >"$TMP/Corefile" <<EOF
cluster.local:53 {
    file $TMP/db {
        reload 100ms
    }
    cache 5
}
EOF
"$COREDNS" -conf "$TMP/Corefile" >"$TMP/$run.coredns" 2>&1 &
dns=$!
for _ in $(seq 200); do getent ahostsv4 ns.cluster.local >/dev/null && break; sleep 0.05; done
tf() {
  local i sep=""
  printf '{"cluster":{"worker":['
  for ((i = 0; i < WORLD; i++)); do
    printf '%s"w%d.j-worker.ns.svc:%d"' "$sep" $i $((2222 + i)); sep=,
  done
  printf ']},"task":{"type":"worker","index":%d}}' "$1"
}
export KUBETRAIN_DNS_PROBE=$PROBE KUBETRAIN_SECRET=s
w=()
for ((i = 0; i < WORLD; i++)); do
  TF_CONFIG=$(tf $i) "$BIN" "${MLP[@]}" --rendezvous-timeout 20 >"$TMP/$run.$i.out" \
    2>"$TMP/$run.$i.err" &
  w+=($!)
done
sleep 1.5
zone 2 'w0.j-worker.ns.svc IN A 10.244.9.5' 'w1.j-worker.ns.svc IN A 10.244.9.6' \
  'w2.j-worker.ns.svc IN A 10.244.9.7' >"$TMP/db.new"
mv "$TMP/db.new" "$TMP/db"
t0=$(date +%s.%N)
# When each worker's ring formed, seconds after the records.
running() { local p; for p in "${w[@]}"; do kill -0 "$p" 2>/dev/null && return 0; done; return 1; }
while running; do
  for ((i = 0; i < WORLD; i++)); do
    [ -s "$TMP/$run.$i.t" ] || ! grep -q "rendezvous done" "$TMP/$run.$i.err" ||
      awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.2f\n", b - a}' >"$TMP/$run.$i.t"
  done
  sleep 0.02
done
rcs=""
for p in "${w[@]}"; do r=0; wait "$p" || r=$?; rcs+="$r "; done
echo "${rcs% }" >"$TMP/$run.rc"
kill "$dns" 2>/dev/null || true
RUN

mlp="--model mlp --epochs 1 --steps-per-epoch 4 --per-worker-batch 16"
# NAME:WORLD of each run; the control has the probe off.
for r in probe:2 probe3:3 control:2; do
  run=${r%%:*} world=${r#*:} probe=1
  [ "$run" = control ] && probe=0
  # shellcheck disable=SC2016 # the inner bash expands it
  TMP=$tmp BIN=$BIN COREDNS=$coredns PROBE=$probe WORLD=$world MLP="$mlp" timeout 120 \
    unshare -nm --propagation private \
    bash -c 'read -ra MLP <<<"$MLP"; source "$TMP/run.sh" "$1"' _ "$run" >"$tmp/$run.log" 2>&1
done

formed() { cat "$tmp/$1".*.t 2>/dev/null | tr '\n' ' '; }
slowest() { sort -n "$tmp/$1".*.t 2>/dev/null | tail -n 1; }
why() { tail -n 4 "$tmp/$1.log" "$tmp/$1".*.err "$tmp/$1.coredns" 2>&1; }
# every RUN WORLD: each of the WORLD workers' rings formed
every() { [ "$(cat "$tmp/$1".*.t 2>/dev/null | grep -c .)" = "$2" ]; }

rc_of() { cat "$tmp/$1.rc" 2>/dev/null; }
for r in probe:2 probe3:3; do
  run=${r%%:*} world=${r#*:}
  p=$(slowest "$run")
  zeros=$(printf '0 %.0s' $(seq "$world")); zeros=${zeros% }
  what="$world workers, with the probe: every ring"
  if [ "$(rc_of "$run")" = "$zeros" ] && every "$run" "$world" &&
     awk -v t="$p" 'BEGIN{exit !(t < 2.0)}'; then
    tap_ok "$what formed $(formed "$run")s after the records (within 2 s); job done"
  else
    tap_fail "$what forms within 2 s of the records" \
      "formed after: '$(formed "$run")'; exits $(rc_of "$run")"$'\n'"$(why "$run")"
  fi
done
if grep -q "has no record in the cluster DNS yet" "$tmp/probe.0.err" &&
   grep -q "waiting for w1.j-worker.ns.svc's DNS record" "$tmp/probe.0.err"; then
  tap_ok "worker 0 listened without looking its own name up and waited for its peer's record"
else
  tap_fail "worker 0 said it waited for the records" "$(why probe)"
fi
c=$(slowest control)
what="control, KUBETRAIN_DNS_PROBE=0"
if [ "$(rc_of control)" = "0 0" ] && every control 2 &&
   awk -v t="$c" 'BEGIN{exit !(t >= 2.5)}'; then
  tap_ok "$what: a ring formed only $c s after the records (the early lookups' cached NXDOMAIN)"
else
  tap_fail "$what: the setup caches the early NXDOMAIN (a ring forms 2.5 s or more after)" \
    "formed after: '$(formed control)'; exits $(rc_of control)"$'\n'"$(why control)"
fi
tap_done
