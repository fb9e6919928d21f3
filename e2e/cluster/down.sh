#!/usr/bin/env bash
# down.sh
#
# Stops every process up.sh started (by the PIDs in .run/pids, newest component first,
# SIGTERM then SIGKILL after a grace period) and removes .run. A PID is signalled only
# while /proc shows it still runs the binary it was recorded for, so a recycled PID is
# never hit. After a full-level run it also takes down the node: the pods (through the
# API while the kubelet runs, then whatever containerd still holds), containerd's shims,
# every mount under .run (pod volumes, rootfs, sandbox network namespaces), the iptables
# chains the run created (kube-proxy's, the CNI plugins', its own), the bridge, the
# kubelet's cgroups, and the kernel settings it found changed; after kueue-up.sh, the
# finalizers Kueue left on pods, its webhooks and the directories it made. Safe to run
# when nothing is up, or twice; exit status 0 unless a process survives or something cannot be
# removed (then .run is kept, so another down.sh can finish the job).
set -uo pipefail # no -e: a step that fails does not stop the rest of the teardown
. "$(dirname "$0")/lib.sh"

GRACE=${KT_STOP_GRACE:-10}
full=$KT_RUN/full
status=0

# pid_of NAME: the recorded PID of NAME when that process still runs NAME's binary.
pid_of() {
  local f=$KT_RUN/pids/$1.pid bin=$1 pid
  [ -f "$f" ] || return 1
  pid=$(cat "$f")
  [[ $pid =~ ^[0-9]+$ ]] || return 1
  local argv0=
  # (read, not a pipe into grep -q or head: under pipefail their early exit fails it)
  IFS= read -r -d '' argv0 2>/dev/null < "/proc/$pid/cmdline"
  [ "$argv0" = "$bin" ] || [ "${argv0##*/}" = "$bin" ] || return 1
  echo "$pid"
}

# stop NAME: SIGTERM, then SIGKILL after GRACE seconds; status 1 when it survives.
stop() {
  local n=$1 pid
  pid=$(pid_of "$n") || return 0
  kill -TERM "$pid" 2>/dev/null
  for _ in $(seq $((GRACE * 10))); do pid_of "$n" >/dev/null || break; sleep 0.1; done
  if pid_of "$n" >/dev/null; then
    kt_log "$n ($pid) ignored SIGTERM for ${GRACE}s; killing"
    kill -KILL "$pid" 2>/dev/null
    sleep 0.2
  fi
  if pid_of "$n" >/dev/null; then kt_log "$n ($pid) still running"; status=1; return; fi
  # Its command line is empty once it is exiting, before it is gone or a zombie (seen:
  # a kube-apiserver still tearing down when down.sh returned): wait for that too, at
  # most 2 s more.
  for _ in $(seq 20); do kt_exited "$pid" && break; sleep 0.1; done
}

# shims SOCKET: PIDs of the containerd shims serving the containerd at SOCKET (their
# command line names that socket; Docker's containerd has its own).
shims() {
  local p
  for p in /proc/[0-9]*; do
    [[ $'\n'"$(tr '\0' '\n' 2>/dev/null < "$p/cmdline")"$'\n' == *$'\n'"$1"$'\n'* ]] &&
      echo "${p#/proc/}"
  done
}

# remove_chains COMMAND TABLE CHAIN...: deletes the rules that jump to each CHAIN (in
# TABLE of COMMAND, iptables or ip6tables), then the chains themselves.
remove_chains() {
  local cmd=$1 t=$2 c rule; shift 2
  [ $# -gt 0 ] || return 0
  for c in "$@"; do
    while read -r rule; do
      eval "$cmd -t $t $rule" || status=1
    done < <("$cmd-save" -t "$t" | grep -E -- "-j $c( |\$)" | grep '^-A ' | sed 's/^-A /-D /')
  done
  for c in "$@"; do "$cmd" -t "$t" -F "$c" 2>/dev/null; done
  for c in "$@"; do
    "$cmd" -t "$t" -X "$c" 2>/dev/null || { kt_log "cannot remove chain $cmd/$t/$c"; status=1; }
  done
}

full_teardown() {
  local k=("$KT_RUN/bin/kubectl" --kubeconfig "$KT_RUN/kubeconfig" --request-timeout 10s)
  local sock=$full/containerd/containerd.sock ctr t ids m d left
  # No new pods: controllers and scheduler first; then the kubelet stops the pods it
  # runs, which tears down their networks through the CNI plugins.
  stop kube-controller-manager
  stop kube-scheduler
  if pid_of kubelet >/dev/null && pid_of containerd >/dev/null &&
     pid_of kube-apiserver >/dev/null; then
    "${k[@]}" delete pods --all --all-namespaces --grace-period=1 --wait=true \
      --timeout=45s >/dev/null 2>&1 || kt_log "not every pod was deleted through the API"
  fi
  stop kubelet
  stop kube-proxy
  # Whatever containerd still runs is killed through it.
  if pid_of containerd >/dev/null; then
    ctr=(ctr --address "$sock" -n k8s.io)
    ids=$("${ctr[@]}" tasks ls -q 2>/dev/null)
    for t in $ids; do "${ctr[@]}" tasks kill -s SIGKILL "$t" >/dev/null 2>&1; done
    for t in $ids; do
      for _ in $(seq 50); do "${ctr[@]}" tasks delete "$t" >/dev/null 2>&1 && break; sleep 0.1; done
    done
    for t in $("${ctr[@]}" containers ls -q 2>/dev/null); do
      "${ctr[@]}" containers rm "$t" >/dev/null 2>&1
    done
  fi
  stop containerd
  for t in $(shims "$sock"); do kill -TERM "$t" 2>/dev/null; done
  for _ in $(seq 50); do [ -z "$(shims "$sock")" ] && break; sleep 0.1; done
  for t in $(shims "$sock"); do kill -KILL "$t" 2>/dev/null; done
  # Container processes that outlived their shim (containerd gone before down.sh) are
  # still in the pods' cgroups, which are this run's: kill them there.
  d=$(cat "$full/host/cgroup-root" 2>/dev/null)
  if [ -n "$d" ] && [ -d "/sys/fs/cgroup/pids/$d" ]; then
    for _ in 1 2 3; do
      ids=$(find "/sys/fs/cgroup/pids/$d" -name cgroup.procs -exec cat {} + 2>/dev/null)
      [ -n "$ids" ] || break
      kt_log "killing processes left in the pods' cgroups: ${ids//$'\n'/ }"
      # shellcheck disable=SC2086 # a list of process ids, one word each
      kill -KILL $ids 2>/dev/null
      sleep 0.5
    done
  fi
  # Mounts under the run directory, deepest first: pod volumes, container root
  # filesystems, sandbox /dev/shm and network namespaces.
  # shellcheck disable=SC2013 # mount points under $KT_RUN, named by us: no spaces
  for m in $(awk -v r="$KT_RUN/" 'index($5, r) == 1 {print $5}' /proc/self/mountinfo |
             awk '{print length, $0}' | sort -rn | cut -d' ' -f2-); do
    umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null ||
      { kt_log "cannot unmount $m"; status=1; }
  done
  left=$(awk -v r="$KT_RUN/" 'index($5, r) == 1' /proc/self/mountinfo | wc -l)
  [ "$left" = 0 ] || { kt_log "$left mounts left under $KT_RUN"; status=1; }
}

# full_host: undoes the full level's host changes; after the apiserver has stopped, as
# it listens on the bridge's address until then.
full_host() {
  local c t d m
  # iptables and ip6tables: every CNI, KUBE or KT chain that was not there before this
  # run (kube-proxy's, the kubelet's, the CNI plugins', its own). Not `kube-proxy
  # --cleanup`: that also loads ip_vs and flushes every IPVS rule of the host.
  if [ -f "$full/host/chains-before" ]; then
    for c in iptables ip6tables; do
      for t in filter nat mangle raw; do
        # shellcheck disable=SC2046
        remove_chains "$c" "$t" $("$c-save" -t "$t" 2>/dev/null |
          sed -n 's/^:\(\(CNI\|KUBE\|KT\)-[^ ]*\) .*/\1/p' |
          grep -vxF -f <(sed -n "s/^$c $t //p" "$full/host/chains-before") )
      done
    done
  fi
  if [ -f "$full/host/bridge" ]; then
    d=$(cat "$full/host/bridge")
    if ip link show "$d" >/dev/null 2>&1; then
      ip link delete "$d" || { kt_log "cannot delete bridge $d"; status=1; }
    fi
  fi
  # The kubelet's cgroups: empty by now; removed leaves first.
  if [ -f "$full/host/cgroup-root" ]; then
    d=$(cat "$full/host/cgroup-root")
    if [ -n "$d" ]; then
      for m in /sys/fs/cgroup/*/"$d"; do
        [ -d "$m" ] || continue
        find "$m" -depth -type d -exec rmdir {} \; 2>/dev/null
        [ -d "$m" ] && { kt_log "cannot remove cgroup $m"; status=1; }
      done
    fi
  fi
  if [ -f "$full/host/sysctl" ]; then
    while IFS='=' read -r k_ v; do
      [ "$(sysctl -n "$k_" 2>/dev/null)" = "$v" ] || sysctl -qw "$k_=$v" ||
        kt_log "cannot restore $k_=$v"
    done < "$full/host/sysctl"
  fi
  # The kubelet links each container's log into /var/log/containers.
  if [ -d /var/log/containers ]; then
    find /var/log/containers -maxdepth 1 -type l -lname "$KT_RUN/*" -delete 2>/dev/null
    if [ -f "$full/host/made-dirs" ] && grep -qx /var/log/containers "$full/host/made-dirs"; then
      rmdir /var/log/containers 2>/dev/null
    fi
  fi
}

# kueue_teardown: Kueue (kueue-up.sh) keeps a finalizer on the pods it manages and takes
# it off once their group is finished; the pods of a group still queued never finish
# (no PodGC once the controller-manager is stopped), so the finalizers go first, while
# the apiserver runs, and the pod deletion below cannot hang on them.
kueue_teardown() {
  local k=("$KT_RUN/bin/kubectl" --kubeconfig "$KT_RUN/kubeconfig" --request-timeout 10s) p
  pid_of kube-apiserver >/dev/null || return 0
  "${k[@]}" delete mutatingwebhookconfiguration,validatingwebhookconfiguration \
    -l kubetrain.dev/kueue-up=true --ignore-not-found >/dev/null 2>&1
  for p in $("${k[@]}" get pods -A -l kueue.x-k8s.io/managed=true \
               -o 'jsonpath={range .items[*]}{.metadata.namespace}/{.metadata.name}{"\n"}{end}' \
               2>/dev/null); do
    "${k[@]}" -n "${p%%/*}" patch pod "${p#*/}" --type merge \
      -p '{"metadata":{"finalizers":null}}' >/dev/null 2>&1
  done
}

[ -d "$KT_RUN/kueue" ] && kueue_teardown
[ -d "$full" ] && full_teardown
if [ -d "$KT_RUN/pids" ]; then
  order="kube-controller-manager kube-apiserver etcd"
  for f in "$KT_RUN"/pids/*.pid; do
    [ -e "$f" ] || continue
    n=$(basename "$f" .pid)
    case " $order " in *" $n "*) ;; *) order="$n $order" ;; esac
  done
  for n in $order; do stop "$n"; done
fi
[ -d "$full" ] && full_host
# The empty directories kueue-up.sh made for Kueue's fixed metrics certificate path,
# deepest first.
if [ -f "$KT_RUN/kueue/made-dirs" ]; then
  while read -r d; do
    [ -d "$d" ] && { rmdir "$d" || { kt_log "cannot remove $d"; status=1; }; }
  done < "$KT_RUN/kueue/made-dirs"
fi
# etcd's data in /dev/shm (up.sh), once etcd is stopped (else up.sh's next run does it).
if [ $status -eq 0 ] && [ -L "$KT_RUN/etcd" ]; then
  d=$(readlink "$KT_RUN/etcd")
  [[ $d == /dev/shm/kt-etcd.* ]] && rm -rf "$d"
fi
[ $status -eq 0 ] && rm -rf "$KT_RUN"
exit $status
