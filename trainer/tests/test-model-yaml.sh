#!/usr/bin/env bash
# YAML model files with anchors and aliases, through the real binary (the optimised
# build: ASan reserves terabytes of address space, so it cannot run under ulimit -v).
# Aliases are expanded: a spec written as PyYAML's yaml.dump writes it trains like the
# built-in model. A "billion laughs" (aliases of aliases: 9^9 nodes from 10 lines, 3.8 GB
# before the bound) and its cousin made of long scalars are refused at once, under a
# 256 MiB address-space limit, with exit 3 and one line naming the file and the anchor.
set -uo pipefail # no -e: a failed check is reported (not ok) and the test goes on
source e2e/lib/tap.sh
source trainer/tests/lib.sh
BIN=${TRAINER_OPT:-${BUILD:-build}/bin/kubetrain-trainer}
DATA=/usr/share/datasets/fashion-mnist
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export KUBETRAIN_TERMINATION_FILE=$tmp/termination OPENBLAS_NUM_THREADS=1
unset TF_CONFIG

if [[ ! -x $BIN ]]; then
  tap_fail "the optimised trainer is built" "missing $BIN (make test builds it)"
  tap_done; exit
fi

# tutorial-cnn-l2 as yaml.dump writes it when the three layers share one regularizer
cat >"$tmp/anchored.yaml" <<'EOF'
input_shape: [28, 28]
layers:
- {type: Reshape, target_shape: [28, 28, 1]}
- type: Conv2D
  filters: 32
  kernel_size: 3
  activation: relu
  kernel_regularizer: &id001 {l2: 1.0e-05}
- {type: Flatten}
- {type: Dense, units: 128, activation: relu, kernel_regularizer: *id001}
- {type: Dense, units: 10, kernel_regularizer: *id001}
EOF
if ! have_data "$DATA"; then
  tap_skip "anchors expanded: the same weights as tutorial-cnn-l2" "no Fashion-MNIST in $DATA"
else
  short=(--epochs 1 --steps-per-epoch 2 --per-worker-batch 16 --seed 5 --print-weights-hash)
  hash_of() { "$BIN" "${short[@]}" --model "$1" 2>"$tmp/err" | sed -n 's/^weights-sha256: //p'; }
  a=$(hash_of "$tmp/anchored.yaml")
  b=$(hash_of tutorial-cnn-l2)
  name="anchors expanded: the same weights as tutorial-cnn-l2"
  if [[ ${#a} -eq 64 && $a == "$b" ]]; then tap_ok "$name"
  else tap_fail "$name" "'$a' vs '$b': $(cat "$tmp/err")"; fi
fi

# expect_refused NAME FILE NEEDLE: exit 3 within seconds under a 256 MiB limit, one line
# that contains NEEDLE, and the termination message.
expect_refused() {
  local name=$1 file=$2 needle=$3 err rc t0 t1
  rm -f "$tmp/termination"
  t0=$(date +%s%N)
  err=$(ulimit -v 262144; timeout 20 "$BIN" --model "$file" --data-dir "$tmp" 2>&1 >/dev/null)
  rc=$?
  t1=$(date +%s%N)
  local ms=$(((t1 - t0) / 1000000))
  if [[ $rc -eq 3 && $(wc -l <<<"$err") -eq 1 && $err == *"$needle"* && $ms -lt 5000 ]] \
     && grep -qF '"error"' "$tmp/termination"; then
    tap_ok "$name -> exit 3 in $ms ms"
  else
    tap_fail "$name -> exit 3 within 5 s under ulimit -v 256 MiB" "rc=$rc after $ms ms: $err"
  fi
}

# a: 9 scalars; b: 9 aliases of a; ... i: 9 aliases of h
{
  echo 'a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]'
  prev=a
  for c in b c d e f g h i; do
    printf '%s: &%s [%s]\n' "$c" "$c" "$(printf "*$prev, %.0s" 1 2 3 4 5 6 7 8)*$prev"
    prev=$c
  done
  echo 'layers: *i'
} >"$tmp/laughs.yaml"
# the bound is spent while e's row copies d, anchored on line 4
why="aliases of the node anchored there add more than the document's own size"
expect_refused "billion laughs" "$tmp/laughs.yaml" \
  "$tmp/laughs.yaml: line 4: $why and more than 1 MiB"

# few nodes, long text: a is 100 kB, e would be 656 MB
{
  printf 'a: &a "%s"\n' "$(head -c 100000 /dev/zero | tr '\0' x)"
  prev=a
  for c in b c d e; do
    printf '%s: &%s [%s]\n' "$c" "$c" "$(printf "*$prev, %.0s" 1 2 3 4 5 6 7 8)*$prev"
    prev=$c
  done
  echo 'layers: *e'
} >"$tmp/long.yaml"
expect_refused "aliases of a long scalar" "$tmp/long.yaml" "$tmp/long.yaml: line 2: $why"
tap_done
