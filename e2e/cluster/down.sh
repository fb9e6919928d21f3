#!/usr/bin/env bash
# down.sh
#
# Stops every process up.sh started (by the PIDs in .run/pids, newest component first,
# SIGTERM then SIGKILL after a grace period) and removes .run. A PID is signalled only
# while /proc shows it still runs the binary it was recorded for, so a recycled PID is
# never hit. Safe to run when nothing is up; exit status 0 unless a process survives.
set -uo pipefail
. "$(dirname "$0")/lib.sh"

GRACE=${KT_STOP_GRACE:-10}

# pid_of NAME: the recorded PID of NAME when that process still runs NAME's binary.
pid_of() {
  local f=$KT_RUN/pids/$1.pid bin=$1 pid
  [ -f "$f" ] || return 1
  pid=$(cat "$f")
  [[ $pid =~ ^[0-9]+$ ]] || return 1
  [ -r "/proc/$pid/cmdline" ] || return 1
  tr '\0' '\n' < "/proc/$pid/cmdline" | head -1 | grep -q "/$bin\$\|^$bin\$" || return 1
  echo "$pid"
}

status=0
if [ -d "$KT_RUN/pids" ]; then
  order="kube-controller-manager kube-apiserver etcd"
  for f in "$KT_RUN"/pids/*.pid; do
    [ -e "$f" ] || continue
    n=$(basename "$f" .pid)
    case " $order " in *" $n "*) ;; *) order="$n $order" ;; esac
  done
  for n in $order; do
    pid=$(pid_of "$n") || continue
    kill -TERM "$pid" 2>/dev/null
    for _ in $(seq $((GRACE * 10))); do pid_of "$n" >/dev/null || break; sleep 0.1; done
    if pid_of "$n" >/dev/null; then
      kt_log "$n ($pid) ignored SIGTERM for ${GRACE}s; killing"
      kill -KILL "$pid" 2>/dev/null
      sleep 0.2
    fi
    if pid_of "$n" >/dev/null; then kt_log "$n ($pid) still running"; status=1; fi
  done
fi
[ $status -eq 0 ] && rm -rf "$KT_RUN"
exit $status
