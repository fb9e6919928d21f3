#!/usr/bin/env bash
# The kernels the trainer runs on (gemm_select_kernels, cpu.c), through the real binary:
# the optimised build, since the library stand-in below is preloaded and ASan wants to
# come first. On this machine the start-up line and --print-cpu name a kernel set as
# wide as /proc/cpuinfo's flags allow; an OpenBLAS that picks SSE kernels for a CPU
# model it does not know (an LD_PRELOAD stand-in for openblas_get_corename, answering
# "Prescott" as 0.3.21 does on a 5th-generation Xeon while OPENBLAS_CORETYPE is unset)
# is overruled from the features, in one worker and in the workers of launch; a user's
# OPENBLAS_CORETYPE wins, and one narrower than the CPU warns once naming the fix; kernels
# of the same set give the same weights bit for bit.
set -uo pipefail # no -e: a failed check is reported (not ok) and the test goes on
source e2e/lib/tap.sh
source trainer/tests/lib.sh
BIN=${TRAINER_OPT:-${BUILD:-build}/bin/kubetrain-trainer}
DATA=/usr/share/datasets/fashion-mnist
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export KUBETRAIN_TERMINATION_FILE=$tmp/termination OPENBLAS_NUM_THREADS=1
unset TF_CONFIG OPENBLAS_CORETYPE KUBETRAIN_OPENBLAS_CORETYPE

if [[ ! -x $BIN ]]; then
  tap_fail "the optimised trainer is built" "missing $BIN (make test builds it)"
  tap_done; exit
fi

# The OpenBLAS core types of each width (cpu.c's table) and the width the flags allow.
flags=" $(grep -m1 '^flags' /proc/cpuinfo | cut -d: -f2) "
has() { for f in "$@"; do [[ $flags == *" $f "* ]] || return 1; done; }
if has avx512f avx512dq avx512cd avx512bw avx512vl avx2 fma; then
  width=avx512 cores='SkylakeX|Cooperlake|SapphireRapids'
elif has avx2 fma; then
  width=avx2 cores='Haswell|Zen'
elif has avx; then
  width=avx cores='Sandybridge|Bulldozer|Piledriver|Steamroller|Excavator'
else
  width=sse cores='[A-Za-z0-9_]+'
fi

line=$("$BIN" --print-cpu 2>&1)
if [[ $line =~ ^gemm:\ OpenBLAS\ [0-9.]+,\ ($cores)\ kernels,\ .*\(cpu:\ .*\)$ ]] &&
   [[ $(wc -l <<<"$line") == 1 ]]; then
  tap_ok "--print-cpu names $width kernels, as the CPU's flags allow: $line"
else
  tap_fail "--print-cpu names $width kernels ($cores), as the CPU's flags allow" "$line"
fi

if ! have_data "$DATA"; then
  tap_skip "the training runs" "no Fashion-MNIST in $DATA"
  tap_done; exit
fi
short=(--epochs 1 --steps-per-epoch 2 --per-worker-batch 16 --seed 5 --print-weights-hash
       --data-dir "$DATA")
"$BIN" "${short[@]}" >"$tmp/plain.out" 2>&1
startup=$(grep -c 'gemm: ' "$tmp/plain.out")
if [[ $startup == 1 ]] && grep -qxF "kubetrain-trainer: $line" "$tmp/plain.out" &&
   ! grep -q warning "$tmp/plain.out"; then
  tap_ok "a training run logs the same line once, without a warning"
else
  tap_fail "a training run logs the same line once, without a warning" "$(cat "$tmp/plain.out")"
fi

# The stand-in for a library that does not know this CPU model (narrow-corename.c).
if ! out=$(cc -shared -fPIC -o "$tmp/narrow.so" trainer/tests/narrow-corename.c 2>&1); then
  tap_fail "building the stand-in library" "$out"
elif [[ $width == sse ]]; then
  tap_skip "a narrow library choice overruled" "this CPU has no AVX: nothing wider to pick"
else
  got=$(LD_PRELOAD=$tmp/narrow.so "$BIN" --print-cpu 2>&1)
  ours="^gemm: OpenBLAS [0-9.]+, ($cores) kernels, chosen by the trainer from the CPU's features"
  if [[ $got =~ $ours\ \(cpu: ]] &&
     [[ $(wc -l <<<"$got") == 1 ]]; then
    tap_ok "a library that picks Prescott is overruled from the features: $got"
  else
    tap_fail "a library that picks Prescott is overruled from the features ($cores)" "$got"
  fi
  LD_PRELOAD=$tmp/narrow.so "$BIN" "${short[@]}" >"$tmp/narrow.out" 2>&1
  want=$(grep '^weights-sha256' "$tmp/plain.out")
  hash=$(grep '^weights-sha256' "$tmp/narrow.out")
  kernels=$(sed -n 's/.*gemm: OpenBLAS [0-9.]*, \([A-Za-z]*\) kernels.*/\1/p' <<<"$line")
  picked=$(sed -n 's/.*gemm: OpenBLAS [0-9.]*, \([A-Za-z]*\) kernels.*/\1/p' "$tmp/narrow.out")
  if [[ -z $hash ]] || ! grep -q "chosen by the trainer" "$tmp/narrow.out"; then
    tap_fail "the overruled run trains on the features' kernels" "$(cat "$tmp/narrow.out")"
  elif [[ $kernels == Zen && $picked == Haswell ]] || [[ $kernels == "$picked" ]]; then
    # Zen is OpenBLAS's Haswell kernel set with AMD's block sizes: the same sums
    if [[ $hash == "$want" ]]; then
      tap_ok "the same kernel set ($kernels, $picked) gives the same weights: $hash"
    else
      tap_fail "the same kernel set ($kernels, $picked) gives the same weights" \
        "$want by the library's choice, $hash by the trainer's"
    fi
  else
    tap_ok "the overruled run trains on $picked kernels (the library's own: $kernels)"
  fi
  LD_PRELOAD=$tmp/narrow.so "$BIN" launch --workers 2 "${short[@]}" \
    >"$tmp/launch.out" 2>&1
  n=$(grep -c "gemm: OpenBLAS [0-9.]*, .* kernels, chosen by the trainer" "$tmp/launch.out")
  if [[ $n == 2 ]]; then
    tap_ok "under launch both workers run the trainer's choice"
  else
    tap_fail "under launch both workers run the trainer's choice ($n lines)" \
      "$(tail -n 30 "$tmp/launch.out")"
  fi
fi

# A user's choice wins; one narrower than the CPU warns once, naming the fix.
if [[ $width == sse ]]; then
  tap_skip "a narrow OPENBLAS_CORETYPE warns" "this CPU has no AVX: nothing is narrower"
else
  OPENBLAS_CORETYPE=Prescott LD_PRELOAD=$tmp/narrow.so "$BIN" "${short[@]}" \
    >"$tmp/user.out" 2>&1
  warn=$(grep -c 'warning: gemm: OPENBLAS_CORETYPE=Prescott runs sse kernels on a CPU with' \
    "$tmp/user.out")
  kept="gemm: OpenBLAS [0-9.]*, Prescott kernels, OPENBLAS_CORETYPE=Prescott from the environment"
  if grep -q "$kept" "$tmp/user.out" && [[ $warn == 1 ]] && grep -q "unset it" "$tmp/user.out"; then
    tap_ok "OPENBLAS_CORETYPE=Prescott is kept and warns once, naming the fix"
  else
    tap_fail "OPENBLAS_CORETYPE=Prescott is kept and warns once, naming the fix" \
      "$(cat "$tmp/user.out")"
  fi
fi

# A user's choice wider than the CPU is kept too, but says what will happen.
if [[ $width == avx512 ]]; then
  tap_skip "a too wide OPENBLAS_CORETYPE warns" "this CPU has AVX-512: nothing is wider"
else
  got=$(OPENBLAS_CORETYPE=SkylakeX "$BIN" --print-cpu 2>&1)
  warned="warning: gemm: OPENBLAS_CORETYPE=SkylakeX runs avx512 kernels on a CPU with"
  if [[ $got == *"SkylakeX kernels, OPENBLAS_CORETYPE=SkylakeX from the environment"* &&
        $got == *"$warned"*"expect SIGILL"* ]]; then
    tap_ok "OPENBLAS_CORETYPE=SkylakeX without AVX-512 is kept and warns of SIGILL"
  else
    tap_fail "OPENBLAS_CORETYPE=SkylakeX without AVX-512 is kept and warns of SIGILL" "$got"
  fi
fi
tap_done
