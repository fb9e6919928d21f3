#!/usr/bin/env bash
# The end-to-end scenario suite (e2e/suite.sh) on a fresh full-level cluster, as
# `make e2e` runs it (e2e/run.sh full): the images are built from this tree first
# (make images and image-tensorflow, cached by Docker and by the TensorFlow image's input
# hash), the cluster is made in build/e2e/suite/run and torn
# down at the end. Skips, saying why, when the machine cannot run a node (not root, no
# containerd/runc/CNI plugins, another full cluster holds the bridge), Docker is not
# there; a failed build of the Kubernetes binaries, CoreDNS, Kueue, helm or SeaweedFS (the
# s3 scenario's S3 gateway) is a failure.
# Kueue runs on the cluster for the kueue scenario (KT_KUEUE=0 leaves it off).
# KT_E2E_IMAGE_PREFIX (default kubetrain) names the images it builds and tests.
set -uo pipefail # no -e: a failed check is reported (not ok) and the test goes on
cd "$(dirname "$0")/../.." || exit 1
. e2e/lib/tap.sh

skip_all() { tap_skip "end-to-end scenario suite" "$1"; tap_done; exit 0; }

if ! why=$(bash e2e/run.sh check full 2>&1); then skip_all "${why#e2e/run.sh: }"; fi
docker info >/dev/null 2>&1 || bash docker/dockerd.sh >/dev/null 2>&1
docker info >/dev/null 2>&1 ||
  skip_all "Docker is not running (docker/dockerd.sh could not start it)"
builds=("e2e/cluster/build-k8s.sh full" e2e/cluster/build-coredns.sh charts/build-helm.sh
        e2e/cluster/build-seaweedfs.sh)
[ "${KT_KUEUE:-}" = 0 ] || builds+=(e2e/cluster/build-kueue.sh)
for b in "${builds[@]}"; do
  # shellcheck disable=SC2086 # $b is a script and its argument
  if ! err=$(bash $b 2>&1 >/dev/null); then
    tap_fail "building with $b" "$(tail -n 5 <<<"$err")"; tap_done; exit 1
  fi
done
bash -c '. e2e/cluster/lib.sh && kt_etcd' >/dev/null ||
  skip_all "etcd not installed (Debian package etcd-server)"

prefix=${KT_E2E_IMAGE_PREFIX:-kubetrain}
version=$(cat VERSION)
if ! out=$(make --no-print-directory images image-tensorflow IMAGE_PREFIX="$prefix" 2>&1); then
  tap_fail "make images image-tensorflow" "$(tail -n 20 <<<"$out")"; tap_done; exit 1
fi

err=$(mktemp)
trap 'rm -f "$err"' EXIT
# The suite's TAP passes through; what the cluster scripts print becomes comments.
bash e2e/run.sh full "$prefix/operator:$version" "$prefix/trainer:$version" \
    "$prefix/tensorflow:$version" 2>"$err" |
  sed -u '/^\(ok \|not ok \|1\.\.\|#\)/!s/^/# /' | tee "$err.out"
rc=${PIPESTATUS[0]}
if ! grep -q '^1\.\.' "$err.out"; then
  tap_fail "the cluster came up and the suite ran" "$(tail -n 20 "$err")"
  rm -f "$err.out"; tap_done; exit 1
fi
rm -f "$err.out"
exit "$rc"
