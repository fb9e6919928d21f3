#!/usr/bin/env bash
# .ci/warm-cache.sh: builds what the tests would otherwise build on first use, into the
# machine cache ($KT_CACHE). .ci/run starts each lane in a session of its own before the
# tests (the go lane beside the hardening targets, at the tests' priority; the pip lane at
# the lowest CPU and I/O priority until make e2e), and `make test` runs the go lane first
# (on a warm machine it finds everything at once). Two lanes:
#   go    the Go programs, in the order the tests first need them: CoreDNS, the
#         Kubernetes api binaries, kwok, helm, SeaweedFS (the S3 server of
#         test-remote-data.sh), the rest of the Kubernetes binaries,
#         the previous release's api binaries (test-gang.sh checks its Workload API),
#         Kueue, prometheus-operator (each script's lock serialises it with any other
#         process that asks for the same program meanwhile);
#   pip   the Python venvs of bench/pyvenv.sh that tests use (downloads, mostly), then
#         the images of the scenario suite (make images image-tensorflow, as
#         e2e/tests/test-scenarios.sh makes them: Docker's layer cache then has them).
# Each step's output goes to build/ci-warm/<step>.log; one line per step says how long it
# took and whether it failed. A failure here is only reported: the test that needs the
# program builds it again and fails with the reason. Exit status 0 (2: no lane named).
# Usage: warm-cache.sh go|pip: one lane (.ci/run starts each in a session of its own).
set -uo pipefail # no -e: a failed step is reported and the next one runs
cd "$(dirname "$0")/.." || exit 1
# Started as the leader of its own session (setsid, as .ci/run does), it is also in an
# autogroup of its own where the kernel has them (/proc/sys/kernel/sched_autogroup_enabled),
# and autogroups share the CPU equally whatever their processes' nice: the group's own
# nice goes to 19 too, or the pip lane would take half the CPU from the tests (seen:
# CPU-bound tests took twice as long). Not when it shares a session, such as a terminal's.
#
# The go lane is the exception: it runs at the tests' priority in a session (so an
# autogroup) of its own. At the lowest priority beside the tests its builds starved (the
# cold run of 2026-12-01: CoreDNS's build had 140 s of CPU in 2,379 s).
lane=${1:-}
read -r -a stat </proc/self/stat
if [ "${stat[5]}" = "$BASHPID" ]; then
  if [ "$lane" = go ]; then
    echo 0 2>/dev/null >/proc/self/autogroup
    # Back to the tests' nice and I/O class where this user may (root may).
    renice -n 0 -p "$BASHPID" >/dev/null 2>&1
    ionice -c 2 -n 4 -p "$BASHPID" >/dev/null 2>&1
  else
    echo 19 2>/dev/null >/proc/self/autogroup
  fi
fi
log=build/ci-warm
mkdir -p "$log"

# children_cpu VAR: VAR = the CPU ticks (USER_HZ, 100 a second) of this shell's children
# that have ended, user + system (cutime and cstime of /proc/PID/stat; read here, not in a
# command substitution, whose subshell has children of its own).
children_cpu() {
  local -a st
  read -r -a st <"/proc/$BASHPID/stat"
  printf -v "$1" %d $((st[15] + st[16]))
}

# step NAME CMD...: runs CMD, output to $log/NAME.log, and says how it went: wall time, and
# the CPU it used (on a cold machine the sum of these is what the builds add to CI).
step() {
  local name=$1 t=$SECONDS c0 c1 rc=0
  children_cpu c0
  shift
  "$@" >"$log/$name.log" 2>&1 || rc=$?
  children_cpu c1
  if [ "$rc" = 0 ]; then
    echo "warm-cache: $name took $((SECONDS - t))s (cpu $(((c1 - c0) / 100))s)"
  else
    echo "warm-cache: $name FAILED after $((SECONDS - t))s" \
      "(cpu $(((c1 - c0) / 100))s, $log/$name.log)"
  fi
}

go_lane() {
  step coredns bash e2e/cluster/build-coredns.sh
  step k8s-api bash e2e/cluster/build-k8s.sh api
  step kwok bash e2e/cluster/build-kwok.sh
  step helm bash charts/build-helm.sh
  step seaweedfs bash e2e/cluster/build-seaweedfs.sh
  step k8s-full bash e2e/cluster/build-k8s.sh full
  step k8s-api-1.36 env K8S_VERSION=v1.36.3 bash e2e/cluster/build-k8s.sh api
  step kueue bash e2e/cluster/build-kueue.sh
  step prometheus-operator bash charts/tests/prometheus-operator.sh operator
}

# The venvs the tests use (bench/pyvenv.sh names their packages).
pip_lane() {
  step venv-report bash bench/pyvenv.sh venv-report
  step venv-tb bash bench/pyvenv.sh venv-tb
  step venv-tf bash bench/pyvenv.sh venv-tf
  step images make --no-print-directory images image-tensorflow
}

case $lane in
  go) go_lane ;;
  pip) pip_lane ;;
  *) echo "usage: .ci/warm-cache.sh go|pip" >&2; exit 2 ;;
esac
exit 0
