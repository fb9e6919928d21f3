#!/usr/bin/env bash
# The api-level cluster harness itself: up.sh api starts etcd, kube-apiserver and
# kube-controller-manager with an admin kubeconfig; a second up.sh is a no-op; a run whose
# apiserver died is replaced; down.sh leaves no process and no state, and is idempotent.
# Uses its own run directory (build/e2e/test-cluster) so a developer's cluster is untouched.
# shellcheck disable=SC2031 # KT_RUN is set once, below; shellcheck's note is wrong here
# no -e: a failing check is reported (not ok) and the test goes on to the next
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
. e2e/lib/tap.sh

export KT_RUN=$PWD/build/e2e/test-cluster/run
trap 'bash e2e/cluster/down.sh >/dev/null 2>&1' EXIT

if ! err=$(bash e2e/cluster/build-k8s.sh api 2>&1 >/dev/null); then
  tap_fail "building the Kubernetes binaries (e2e/cluster/build-k8s.sh api)" "$(tail -n 5 <<<"$err")"
  tap_done; exit
fi
if ! bash -c '. e2e/cluster/lib.sh && kt_etcd' >/dev/null; then
  tap_skip "api-level cluster harness" "etcd not installed (Debian package etcd-server)"
  tap_done; exit
fi

# pids: the recorded PIDs, one line "name pid" each.
pids() { for f in "$KT_RUN"/pids/*.pid; do [ -e "$f" ] && echo "$(basename "$f" .pid) $(cat "$f")"; done; }
# alive PID...: prints the PIDs among them that still exist (zombies excluded).
alive() {
  local p
  for p in "$@"; do
    [ -r "/proc/$p/stat" ] && [ "$(awk '{print $3}' "/proc/$p/stat")" != Z ] && echo "$p"
  done
}

# since T0: seconds elapsed since T0 (date +%s.%N), two decimals.
since() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN{printf "%.2f", b - a}'; }

# shm_dirs: up.sh's directories of /dev/shm (etcd's data) that name this run.
shm_dirs() {
  local d
  for d in /dev/shm/kt-etcd.*; do
    [ "$(cat "$d/run" 2>/dev/null)" = "$KT_RUN" ] && echo "$d"
  done
}
tmpfs=0
(. e2e/cluster/lib.sh && kt_shm_room) && tmpfs=1

bash e2e/cluster/down.sh >/dev/null 2>&1
# A stale directory of etcd's data, its run gone without down.sh (a killed test), as old
# as a minute: the next up.sh removes it.
stale=""
if [ $tmpfs = 1 ]; then
  stale=$(mktemp -d /dev/shm/kt-etcd.XXXXXX)
  echo "$KT_RUN-gone" >"$stale/run"
  touch -d '2 minutes ago' "$stale"
fi
# A component that dies at start fails up.sh at once, and nothing is left behind.
t0=$(date +%s.%N)
out=$(KT_ETCD=/bin/false KT_READY_TIMEOUT=60 bash e2e/cluster/up.sh api 2>&1)
rc=$?
dt=$(since "$t0")
if [ $rc -ne 0 ] && [ ! -e "$KT_RUN" ] && [ -z "$(shm_dirs)" ] &&
  awk -v d="$dt" 'BEGIN{exit !(d < 30)}'; then
  tap_ok "up.sh api fails fast when etcd exits at start (${dt}s) and cleans up"
else tap_fail "up.sh api fails fast when etcd exits at start" "rc=$rc after ${dt}s; $out"; fi

# The etcd of this start is a wrapper whose command line does not name etcd for its first
# 2 s, as a process's does while the kernel loads its binary (/proc/PID/cmdline empty):
# up.sh waits for it rather than taking it for dead. (Where up.sh gave up and the test
# removed $late, the wrapper exits rather than start an etcd of its own.)
late=$(mktemp -d "${TMPDIR:-/tmp}/kt-late.XXXXXX")
trap 'bash e2e/cluster/down.sh >/dev/null 2>&1; rm -rf "$late"' EXIT
cat >"$late/etcd" <<'EOF2'
#!/usr/bin/env bash
printf '%s\0' "$@" >"$LATE_DIR/args"
exec -a late bash -c 'sleep 2; mapfile -d "" a <"$LATE_DIR/args" && exec "$LATE_REAL" "${a[@]}"'
EOF2
chmod +x "$late/etcd"
t0=$(date +%s.%N)
if out=$(LATE_DIR=$late LATE_REAL=$(. e2e/cluster/lib.sh && kt_etcd) KT_ETCD=$late/etcd \
  bash e2e/cluster/up.sh api 2>&1); then
  tap_ok "up.sh api succeeds, etcd's command line naming it only after 2 s ($(since "$t0")s)"
else
  tap_fail "up.sh api succeeds, etcd's command line naming it only after 2 s" "$out"; tap_done; exit
fi
# shellcheck source=/dev/null # the cluster's variables, written by e2e/cluster/up.sh
. "$KT_RUN/env"
k() { "$KT_K8S_BIN/kubectl" --request-timeout 30s "$@"; }

if [ $tmpfs = 0 ]; then
  tap_skip "etcd's data in /dev/shm" "/dev/shm is not a tmpfs with 512 MiB free here"
elif d=$(readlink "$KT_RUN/etcd") && [[ $d == /dev/shm/kt-etcd.* ]] && [ -d "$d/data/member" ] &&
  [ "$(shm_dirs)" = "$d" ] && [ ! -e "$stale" ]; then
  tap_ok "etcd's data in /dev/shm ($d, linked as .run/etcd); the stale directory of a run gone removed"
else
  tap_fail "etcd's data in /dev/shm, the stale directory removed" \
    "link: $(readlink "$KT_RUN/etcd"); ours: $(shm_dirs); stale left: $(ls -d "$stale" 2>/dev/null)"
fi

first=$(pids)
# shellcheck disable=SC2046 # a list of process ids, one word each
if [ "$(wc -l <<<"$first")" = 3 ] && [ "$(alive $(awk '{print $2}' <<<"$first") | wc -l)" = 3 ]; then
  tap_ok "three processes recorded and running"
else tap_fail "three processes recorded and running" "$first"; fi

tap_check "the admin kubeconfig reaches /readyz" k get --raw /readyz
out=$(k auth whoami -o 'jsonpath={.status.userInfo.groups}' 2>&1)
if grep -q 'system:masters' <<<"$out"; then tap_ok "admin authenticates by client certificate in system:masters"
else tap_fail "admin authenticates by client certificate in system:masters" "$out"; fi
if grep -q 'client-certificate-data' "$KUBECONFIG" && ! grep -q 'client-certificate:' "$KUBECONFIG"; then
  tap_ok "kubeconfig embeds its certificates"
else tap_fail "kubeconfig embeds its certificates" "$(grep -v 'data:' "$KUBECONFIG")"; fi
# Built here, the binaries carry the pinned version; from KUBEBUILDER_ASSETS, whatever
# release they are, but a real one, the same for client and server.
want=$(. e2e/cluster/lib.sh; case $(kt_k8s_bin kube-apiserver) in
  "$KT_CACHE"/*) echo "$K8S_VERSION" ;; *) "$(kt_k8s_bin kubectl)" version --client -o json |
  sed -n 's/.*"gitVersion": "\(v1\.[0-9]*\.[0-9]*\)".*/\1/p' | head -n 1 ;; esac)
out=$(k version -o json 2>&1)
if [ -n "$want" ] && [ "$(grep -c "\"gitVersion\": \"$want\"" <<<"$out")" = 2 ]; then
  tap_ok "client and server report the Kubernetes release (${want})"
else tap_fail "client and server report the Kubernetes release (${want:-none})" "$out"; fi
out=$(k get --raw '/readyz?verbose' 2>&1)
if grep -q 'etcd ok' <<<"$out"; then tap_ok "the apiserver's etcd check passes"
else tap_fail "the apiserver's etcd check passes" "$out"; fi
# RBAC is on: an identity with no bindings is refused.
out=$(k auth can-i create pods --as nobody 2>&1)
if [ "$out" = no ]; then tap_ok "RBAC denies an unbound user"
else tap_fail "RBAC denies an unbound user" "$out"; fi
# The controller-manager works: it creates the default ServiceAccount in a new namespace.
k create namespace probe >/dev/null 2>&1
ok=0
for _ in $(seq 60); do k -n probe get serviceaccount default >/dev/null 2>&1 && { ok=1; break; }; sleep 0.5; done
if [ $ok = 1 ]; then tap_ok "kube-controller-manager runs (default ServiceAccount created)"
else tap_fail "kube-controller-manager runs (default ServiceAccount created)" \
  "$(tail -n 5 "$KT_RUN/logs/kube-controller-manager.log")"; fi

t0=$(date +%s.%N)
out=$(bash e2e/cluster/up.sh api 2>&1)
rc=$?
dt=$(since "$t0")
if [ $rc = 0 ] && [ "$(pids)" = "$first" ] && k get ns probe >/dev/null 2>&1; then
  tap_ok "up.sh api again is a no-op (same processes, same data; ${dt}s)"
else tap_fail "up.sh api again is a no-op" "rc=$rc; before: $first; after: $(pids); $out"; fi

# A run whose apiserver died is torn down and replaced by a fresh one.
kill -KILL "$(cat "$KT_RUN/pids/kube-apiserver.pid")"
old=$(awk '{print $2}' <<<"$first")
sleep 0.5
# shellcheck source=/dev/null # the cluster's variables, written by e2e/cluster/up.sh
# shellcheck disable=SC2086 # $old: a list of process ids, one word each
if out=$(bash e2e/cluster/up.sh api 2>&1) && . "$KT_RUN/env" && k get --raw /readyz >/dev/null 2>&1 &&
   [ -z "$(alive $old)" ]; then
  tap_ok "up.sh api replaces a run whose apiserver died, stopping the rest of it"
else tap_fail "up.sh api replaces a run whose apiserver died" "$out; still alive: $(alive $old)"; fi

now=$(awk '{print $2}' <<<"$(pids)")
if out=$(bash e2e/cluster/down.sh 2>&1); then tap_ok "down.sh succeeds"
else tap_fail "down.sh succeeds" "$out"; fi
# shellcheck disable=SC2086 # lists of process ids, one word each
left=$(alive $now)
# shellcheck disable=SC2086
if [ -z "$left" ]; then tap_ok "down.sh leaves no process"
else tap_fail "down.sh leaves no process" "$(ps -o pid,args -p $left)"; fi
# shellcheck disable=SC2012 # ls -R for a reader, not parsed
if [ ! -e "$KT_RUN" ]; then tap_ok "down.sh removes the run directory"
else tap_fail "down.sh removes the run directory" "$(ls -R "$KT_RUN" | head)"; fi
if [ -z "$(shm_dirs)" ]; then tap_ok "down.sh removes etcd's data from /dev/shm"
else tap_fail "down.sh removes etcd's data from /dev/shm" "left: $(shm_dirs)"; fi
tap_check "down.sh when nothing is up succeeds" bash e2e/cluster/down.sh

tap_done
