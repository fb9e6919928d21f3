#!/usr/bin/env bash
# The trainer images on this machine run the kernels the binary built here runs
# (gemm_select_kernels; docs/design.md, "Kernels"): the CPU image (docker/
# trainer.Dockerfile, built from this tree by make image-trainer; Docker's cache makes
# that quick when nothing changed) says the same --print-cpu line and logs it once when
# it trains; in the image too a library that picks SSE kernels for a CPU model it does
# not know is overruled from the features (the stand-in of test-cpu-kernels.sh, mounted
# and preloaded: the scratch image has /proc/self/exe to run again); the GPU image
# (make images GPU=1), when Docker has it, says the same line for its CPU path.
# KT_E2E_IMAGE_PREFIX (default kubetrain) names the images, as for the scenario suite.
set -uo pipefail # no -e: a failed check is reported (not ok) and the test goes on
source e2e/lib/tap.sh
BIN=${TRAINER_OPT:-${BUILD:-build}/bin/kubetrain-trainer}
prefix=${KT_E2E_IMAGE_PREFIX:-kubetrain}
version=$(cat VERSION)
img=$prefix/trainer:$version
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

if [[ ! -x $BIN ]]; then
  tap_fail "the optimised trainer is built" "missing $BIN (make test builds it)"
  tap_done; exit
fi
if ! out=$(bash docker/dockerd.sh 2>&1); then
  tap_fail "a Docker daemon answers (docker/dockerd.sh)" "$out"
  tap_done; exit
fi
if ! out=$(make --no-print-directory image-trainer IMAGE_PREFIX="$prefix" 2>&1); then
  tap_fail "make image-trainer" "$(tail -n 20 <<<"$out")"
  tap_done; exit
fi
want=$("$BIN" --print-cpu 2>&1)
got=$(docker run --rm "$img" --print-cpu 2>&1)
if [[ $got == "$want" ]]; then
  tap_ok "$img --print-cpu says what the binary built here says: $got"
else
  tap_fail "$img --print-cpu says what the binary built here says" \
    "image: $got"$'\n'"here:  $want"
fi

got=$(docker run --rm "$img" train --epochs 1 --steps-per-epoch 2 --per-worker-batch 16 2>&1)
if [[ $(grep -c 'gemm: ' <<<"$got") == 1 ]] && grep -qxF "kubetrain-trainer: $want" <<<"$got"
then
  tap_ok "$img logs the line once when it trains"
else
  tap_fail "$img logs the line once when it trains" "$(tail -n 20 <<<"$got")"
fi

if ! out=$(cc -shared -fPIC -o "$tmp/narrow.so" trainer/tests/narrow-corename.c 2>&1); then
  tap_fail "building the stand-in library" "$out"
elif ! grep -qw avx /proc/cpuinfo; then
  tap_skip "a narrow library choice overruled in the image" "this CPU has no AVX"
else
  chmod 644 "$tmp/narrow.so"
  mine=$(LD_PRELOAD=$tmp/narrow.so "$BIN" --print-cpu 2>&1)
  got=$(docker run --rm -v "$tmp/narrow.so:/narrow.so:ro" -e LD_PRELOAD=/narrow.so "$img" \
    --print-cpu 2>&1)
  if [[ $got == "$mine" && $got == *"chosen by the trainer from the CPU's features"* ]]; then
    tap_ok "in $img a library that picks Prescott is overruled from the features: $got"
  else
    tap_fail "in $img a library that picks Prescott is overruled from the features" \
      "image: $got"$'\n'"here:  $mine"
  fi
fi

cuda=$prefix/trainer-cuda:$version
if ! docker image inspect "$cuda" >/dev/null 2>&1; then
  tap_skip "$cuda --print-cpu" "Docker has no $cuda (make images GPU=1 builds it)"
else
  got=$(docker run --rm "$cuda" --print-cpu 2>&1)
  if [[ $got == "$want" ]]; then
    tap_ok "$cuda --print-cpu says what the binary built here says"
  else
    tap_fail "$cuda --print-cpu says what the binary built here says" \
      "image: $got"$'\n'"here:  $want"
  fi
fi
tap_done
