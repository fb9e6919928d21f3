#!/usr/bin/env bash
# restart-apiserver.sh [DOWN_SECONDS]
#
# Restarts only the kube-apiserver of a running cluster (up.sh api): SIGTERM to the
# process recorded in .run/pids/kube-apiserver.pid (SIGKILL after KT_STOP_GRACE s),
# DOWN_SECONDS (default 0) with no apiserver, then the same command line again (read
# from /proc before stopping it, so ports and certificates are unchanged), its output
# appended to logs/kube-apiserver.log and its new PID recorded. etcd and the
# controller-manager keep running. Exit status 0 once /readyz answers again.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

down=${1:-0}
GRACE=${KT_STOP_GRACE:-10}
READY_TIMEOUT=${KT_READY_TIMEOUT:-120}
f=$KT_RUN/pids/kube-apiserver.pid
[ -f "$f" ] || kt_die "no $f: is the cluster up?"
pid=$(cat "$f")
[ -r "/proc/$pid/cmdline" ] || kt_die "kube-apiserver ($pid) is not running"
mapfile -d '' cmd < "/proc/$pid/cmdline"
[[ ${cmd[0]} == */kube-apiserver ]] || kt_die "pid $pid is not kube-apiserver: ${cmd[0]}"

kill -TERM "$pid"
for _ in $(seq $((GRACE * 10))); do [ -e "/proc/$pid" ] || break; sleep 0.1; done
if [ -e "/proc/$pid" ]; then
  kt_log "kube-apiserver ($pid) ignored SIGTERM for ${GRACE}s; killing"
  kill -KILL "$pid" 2>/dev/null || true
  sleep 0.2
fi
sleep "$down"
setsid "${cmd[@]}" </dev/null >>"$KT_RUN/logs/kube-apiserver.log" 2>&1 &
echo $! > "$f"
deadline=$((SECONDS + READY_TIMEOUT))
until "$KT_RUN/bin/kubectl" --kubeconfig "$KT_RUN/kubeconfig" get --raw /readyz >/dev/null 2>&1; do
  [ -e "/proc/$!" ] ||
    kt_die "kube-apiserver exited on restart; see $KT_RUN/logs/kube-apiserver.log"
  [ $SECONDS -lt $deadline ] || kt_die "kube-apiserver not ready ${READY_TIMEOUT}s after restart"
  sleep 0.2
done
kt_log "kube-apiserver restarted (pid $!)"
