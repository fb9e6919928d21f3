#!/usr/bin/env bash
# The rendezvous of the real trainer (the ASan+UBSan build) on loopback:
#  - under launch, a worker's rendezvous port listens on 127.0.0.1 only (its TF_CONFIG
#    address), not on every interface; in (emulated) pods, on the pod IP that its
#    TF_CONFIG name resolves to;
#  - another job's worker answering at a peer's address (a stale DNS record, a port
#    clash) is refused and retried: the worker keeps connecting until the real peer
#    answers there, and the job completes (it used to exit 2 at the first wrong answer,
#    which the ExitCode restart policy takes as permanent). test-distributed.sh checks
#    that a wrong secret that persists ends in 75;
#  - in (emulated) pods, each in its own network namespace: a worker replaced at a new pod
#    IP while its peers' DNS still names the old one (a cached record) is reached at the
#    address it announced (net.h), and the live recovery completes with the uninterrupted
#    run's weights; with no announcement the survivors would wait out the recovery timeout.
set -euo pipefail
source e2e/lib/tap.sh
source trainer/tests/lib.sh
BIN=${TRAINER:-build/san/bin/kubetrain-trainer}
DATA=/usr/share/datasets/fashion-mnist
tmp=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do
    kill -CONT "$p" 2>/dev/null || true
    kill -9 "$p" 2>/dev/null || true
  done
  rm -rf "$tmp"
}
trap cleanup EXIT
unset TF_CONFIG KUBETRAIN_SECRET_FILE
export OPENBLAS_NUM_THREADS=1 KUBETRAIN_TERMINATION_FILE=/dev/null
if [ ! -x "$BIN" ]; then tap_skip "rendezvous" "$BIN is not built"; tap_done; exit; fi
skip_without_data "rendezvous" "$DATA"
mlp=(--model mlp --epochs 1 --steps-per-epoch 4 --per-worker-batch 16)
wait_for() { # seconds cmd...: polls cmd every 0.02 s
  local end=$((SECONDS + $1)); shift
  until "$@"; do [ $SECONDS -ge $end ] && return 1; sleep 0.02; done
}
listening() { ss -ltnH "sport = :$1" | awk '{print $4}'; } # local address:port of each listener
is_listening() { [ -n "$(listening "$1")" ]; }

# --- launch: the rendezvous port is on 127.0.0.1 only -----------------------------------
# Worker 0 listens until worker 1 connects to it, which is milliseconds after launch starts
# them; so worker 1 is stopped (SIGSTOP) as soon as launch names its pid, before it is up,
# and worker 0's listener is looked at while it waits. Should worker 1 win the race and
# finish its rendezvous first, the run is tried again.
seen=
for attempt in 1 2 3 4 5; do
  : >"$tmp/l.err"
  "$BIN" launch --workers 2 "${mlp[@]}" --rendezvous-timeout 60 >"$tmp/l.out" 2>"$tmp/l.err" &
  lp=$!; pids+=("$lp")
  pid1=; port0=
  wait_for 30 grep -q "worker 1: pid" "$tmp/l.err" || true
  pid1=$(sed -n 's/.*launch: worker 1: pid \([0-9]*\),.*/\1/p' "$tmp/l.err")
  [ -n "$pid1" ] && kill -STOP "$pid1"
  port0=$(sed -n 's/.*launch: worker 0: pid [0-9]*, 127\.0\.0\.1:\([0-9]*\).*/\1/p' "$tmp/l.err")
  if [ -n "$pid1" ] && [ -n "$port0" ] && wait_for 10 is_listening "$port0"; then
    seen=$(listening "$port0" | sort -u | tr '\n' ' ')
  fi
  [ -n "$pid1" ] && kill -CONT "$pid1"
  rc=0; wait "$lp" || rc=$?
  [ -n "$seen" ] && break
done
if [ -n "$seen" ] && [ "$seen" = "127.0.0.1:$port0 " ] && [ "$rc" = 0 ]; then
  tap_ok "under launch worker 0 listens on 127.0.0.1:$port0 only (try $attempt); the job completes"
else
  tap_fail "under launch worker 0 listens on 127.0.0.1 only" \
    "port ${port0:-?}: '${seen:-none seen in $attempt tries}', exit $rc; $(tail -5 "$tmp/l.err")"
fi

# --- pods: each worker listens on its own pod IP -------------------------------------
# Two pods emulated in a private network and mount namespace (nothing on the host
# changes): a veth pair carries their pod IPs, and /etc/hosts (bind-mounted over it,
# answering as CoreDNS does for the headless Service) resolves the TF_CONFIG names
# <pod>.<job>-worker.<ns>.svc to them. Both workers use port 2222, as pods do: possible
# only when each listens on its own address, not on every interface.
cat >"$tmp/pods.sh" <<'PODS'
ip link set lo up
ip link add v0 type veth peer name v1
ip addr add 10.244.0.5/24 dev v0
ip addr add 10.244.0.6/24 dev v1
ip link set v0 up
ip link set v1 up
printf '127.0.0.1 localhost\n10.244.0.5 w0.j-worker.ns.svc\n10.244.0.6 w1.j-worker.ns.svc\n' \
  >"$TMP/hosts"
mount --bind "$TMP/hosts" /etc/hosts
tf() {
  printf '{"cluster":{"worker":["w0.j-worker.ns.svc:2222","w1.j-worker.ns.svc:2222"]},'
  printf '"task":{"type":"worker","index":%d}}' "$1"
}
TF_CONFIG=$(tf 0) "$BIN" "${MLP[@]}" --rendezvous-timeout 30 >"$TMP/p0.out" 2>"$TMP/p0.err" &
a=$!
for _ in $(seq 500); do
  ss -ltnH 'sport = :2222' | awk '{print $4}' >"$TMP/p0.listen"
  [ -s "$TMP/p0.listen" ] && break
  sleep 0.02
done
TF_CONFIG=$(tf 1) "$BIN" "${MLP[@]}" --rendezvous-timeout 30 >"$TMP/p1.out" 2>"$TMP/p1.err" &
b=$!
ra=0; wait $a || ra=$?
rb=0; wait $b || rb=$?
echo "$ra $rb" >"$TMP/pods.rc"
PODS
if [ "$(id -u)" != 0 ] || ! unshare -nm --propagation private true 2>/dev/null; then
  tap_skip "workers in pods listen on their pod IPs" "needs root and unshare -nm (namespaces)"
else
  # shellcheck disable=SC2016 # the inner bash expands it
  TMP=$tmp BIN=$BIN MLP="${mlp[*]}" unshare -nm --propagation private \
    bash -c 'set -euo pipefail; read -ra MLP <<<"$MLP"; source "$TMP/pods.sh"' \
    >"$tmp/pods.log" 2>&1 || true
  got=$(sort -u "$tmp/p0.listen" 2>/dev/null | tr '\n' ' ')
  rcs=$(cat "$tmp/pods.rc" 2>/dev/null || echo "none")
  if [ "$got" = "10.244.0.5:2222 " ] && [ "$rcs" = "0 0" ]; then
    tap_ok "workers in pods listen on their pod IPs (w0 on $got), both on port 2222; job done"
  else
    tap_fail "workers in pods listen on their pod IPs" \
      "w0 on '$got', exits $rcs; $(tail -n 2 "$tmp/pods.log" "$tmp/p0.err" "$tmp/p1.err" 2>&1)"
  fi
fi

# --- another job's worker at rank 1's address, then rank 1 ------------------------------
# The squatter is rank 1 of another job (another secret) on rank 1's port for 4 s (its own
# peer never comes, so it exits 75). Rank 0 starts meanwhile and reaches it first.
p0=$(free_port); p1=$(free_port); dead=$(free_port)
export KUBETRAIN_SECRET; KUBETRAIN_SECRET=$(secret)
KUBETRAIN_SECRET=$(secret) TF_CONFIG=$(tf_config 1 "$dead" "$p1") "$BIN" "${mlp[@]}" \
  --rendezvous-timeout 4 >/dev/null 2>"$tmp/sq.err" & sq=$!
pids+=("$sq")
wait_for 30 is_listening "$p1" || true
TF_CONFIG=$(tf_config 0 "$p0" "$p1") "$BIN" "${mlp[@]}" --rendezvous-timeout 60 \
  >"$tmp/r0.out" 2>"$tmp/r0.err" & r0=$!
pids+=("$r0")
rcs=0; wait "$sq" || rcs=$?
refused=$(grep -c "could not prove the job secret" "$tmp/r0.err" || true)
refused=${refused:-0}
alive=0; kill -0 "$r0" 2>/dev/null && alive=1
TF_CONFIG=$(tf_config 1 "$p0" "$p1") "$BIN" "${mlp[@]}" --rendezvous-timeout 60 \
  >"$tmp/r1.out" 2>"$tmp/r1.err" & r1=$!
pids+=("$r1")
rc0=0; wait "$r0" || rc0=$?
rc1=0; wait "$r1" || rc1=$?
if [ "$refused" -ge 1 ] && [ $alive = 1 ] && [ $rc0 = 0 ] && [ $rc1 = 0 ]; then
  tap_ok "another job's worker at rank 1's address is refused, rank 0 retries, the job completes"
else
  tap_fail "another job's worker at rank 1's address is refused and retried" \
    "refusals: $refused, rank 0 alive after: $alive, exits $rc0/$rc1; $(tail -4 "$tmp/r0.err")"
fi
if [ $rcs = 75 ] && grep -q "rendezvous: .*rank 0" "$tmp/sq.err"; then
  why=$(grep -o 'rendezvous: .\{0,40\}' "$tmp/sq.err")
  tap_ok "the squatter, whose peers never came, exits 75 ($why)"
else tap_fail "the squatter exits 75" "exit $rcs; $(tail -3 "$tmp/sq.err")"; fi

# --- pods: a replacement at a new IP is reached at the address it announced ----------------
# Three pods, each in its own network namespace on one bridge (inside a private network and
# mount namespace: nothing on the host changes), each with its own /etc/hosts, as its
# cluster DNS would answer: w0 10.244.0.5, w1 .6, w2 .7. Worker 1 is SIGKILLed after the
# checkpoint of step 50 and replaced in a new pod at 10.244.0.8, whose /etc/hosts says so;
# the survivors' still say .6 (the record their DNS cached). Worker 0 connects to rank 1:
# only the replacement's announcement tells it where rank 1 now is.
rec=(--model mlp --epochs 2 --steps-per-epoch 150 --per-worker-batch 16 --print-weights-hash
     --recovery-timeout 20 --rendezvous-timeout 30 --checkpoint-every-steps 25)
cat >"$tmp/move.sh" <<'PODS'
mkdir -p /run/netns
mount -t tmpfs tmpfs /run/netns
ip link set lo up
ip link add br0 type bridge
ip link set br0 up
pod() { # name ip
  ip netns add "$1"
  ip link add "v$1" type veth peer name eth0 netns "$1"
  ip link set "v$1" master br0 up
  ip -n "$1" addr add "$2/24" dev eth0
  ip -n "$1" link set eth0 up
  ip -n "$1" link set lo up
}
hosts() { # w1's ip: what this pod's DNS answers
  printf '127.0.0.1 localhost\n10.244.0.5 w0.j-worker.ns.svc\n'
  printf '%s w1.j-worker.ns.svc\n10.244.0.7 w2.j-worker.ns.svc\n' "$1"
}
hosts 10.244.0.6 >"$TMP/hosts-old"
hosts 10.244.0.8 >"$TMP/hosts-new"
tf() {
  printf '{"cluster":{"worker":["w0.j-worker.ns.svc:2222","w1.j-worker.ns.svc:2222",'
  printf '"w2.j-worker.ns.svc:2222"]},"task":{"type":"worker","index":%d}}' "$1"
}
run() { # pod index hosts
  ip netns exec "$1" bash -c 'mount --bind "$1" /etc/hosts && shift && exec "$@"' _ "$3" \
    env TF_CONFIG="$(tf "$2")" KUBETRAIN_SECRET=pods KUBETRAIN_SHM=0 \
    KUBETRAIN_TERMINATION_FILE=/dev/null "$BIN" "${REC[@]}" --checkpoint-dir "$TMP/ck-pods" \
    >"$TMP/pod$2.out" 2>>"$TMP/pod$2.err"
}
pod a 10.244.0.5; pod b 10.244.0.6; pod c 10.244.0.7
run a 0 "$TMP/hosts-old" & p0=$!
run b 1 "$TMP/hosts-old" & p1=$!
run c 2 "$TMP/hosts-old" & p2=$!
for _ in $(seq 3000); do [ -e "$TMP/ck-pods/ckpt-50.kt" ] && break; sleep 0.02; done
kill -9 "$(pgrep -P "$p1" -f kubetrain-trainer || echo "$p1")" 2>/dev/null || true
wait "$p1" 2>/dev/null || true
ip netns del b
pod d 10.244.0.8
run d 1 "$TMP/hosts-new" & p1=$!
r0=0; wait $p0 || r0=$?
r1=0; wait $p1 || r1=$?
r2=0; wait $p2 || r2=$?
echo "$r0 $r1 $r2" >"$TMP/move.rc"
PODS
if [ "$(id -u)" != 0 ] || ! unshare -nm --propagation private true 2>/dev/null ||
   ! command -v ip >/dev/null; then
  tap_skip "a replacement at a new pod IP is reached at its announced address" \
    "needs root, unshare -nm (namespaces) and ip (iproute2)"
else
  KUBETRAIN_SHM=0 "$BIN" launch --workers 3 "${rec[@]}" --checkpoint-dir "$tmp/ck-ref" \
    >"$tmp/ref.out" 2>"$tmp/ref.err" || true
  ref=$(hashes "$tmp/ref.out")
  # shellcheck disable=SC2016 # the inner bash expands it
  TMP=$tmp BIN=$BIN REC="${rec[*]}" timeout 180 unshare -nm --propagation private \
    bash -c 'set -euo pipefail; read -ra REC <<<"$REC"; source "$TMP/move.sh"' \
    >"$tmp/move.log" 2>&1 || true
  rcs=$(cat "$tmp/move.rc" 2>/dev/null || echo "none")
  got=$(hashes "$tmp"/pod[012].out)
  bad=()
  [ "$rcs" = "0 0 0" ] || bad+=("exits $rcs")
  [ -n "$ref" ] && [ "$got" = "$ref" ] ||
    bad+=("hashes '${got:0:12}' vs uninterrupted '${ref:0:12}'")
  grep -q "connecting to rank 1 (w1.j-worker.ns.svc:2222) at 10.244.0.8, the address it announced" \
    "$tmp/pod0.err" || bad+=("worker 0 did not use the announced address")
  grep -q "joined generation 2" "$tmp/pod1.err" || bad+=("no 'joined generation 2' line")
  grep -q "resuming from" "$tmp"/pod[012].err && bad+=("a checkpoint was read")
  if [ ${#bad[@]} = 0 ]; then
    tap_ok "a replacement at a new pod IP (10.244.0.8, the survivors' DNS still .6) is \
reached at its announced address; live recovery, the uninterrupted run's weights"
  else
    tap_fail "a replacement at a new pod IP is reached at its announced address" \
      "${bad[*]}; $(tail -n 3 "$tmp/move.log" "$tmp"/pod[01].err 2>&1)"
  fi
fi
tap_done
