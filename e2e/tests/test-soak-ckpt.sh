#!/usr/bin/env bash
# The soak's ckpt-write kind (e2e/soak/soak.py) at a small count: the real trainer killed
# by SIGXFSZ at byte k of a checkpoint must pass every trial, its TensorBoard logs/ in the
# checkpoint directory included; and the check must still fail each trial in which a
# broken writer was planted (e2e/soak/plant.py: a torn file under the final name, a
# complete checkpoint overwritten, a stray temporary, a temporary hidden in logs/).
set -euo pipefail
source e2e/lib/tap.sh
BIN=${TRAINER:-build/bin/kubetrain-trainer}
DATA=/usr/share/datasets/fashion-mnist
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
SEED=${SOAK_SEED:-$RANDOM}

if [ ! -f "$DATA/train-labels-idx1-ubyte.gz" ] && [ ! -f "$DATA/train-labels-idx1-ubyte" ]; then
  tap_skip "soak ckpt-write" "no Fashion-MNIST in $DATA"
  tap_done; exit
fi
if [ ! -x "$BIN" ]; then
  tap_skip "soak ckpt-write" "$BIN is not built (make $BIN)"
  tap_done; exit
fi

# soak N OUT [plant]: the ckpt-write kind with N trials (through e2e/soak/plant.py when
# "plant" is given); the table goes to OUT.
soak() {
  local n=$1 out=$2; shift 2
  local trainer=$BIN
  [ $# -gt 0 ] && trainer=e2e/soak/plant.py
  SOAK_KINDS=ckpt-write SOAK_CKPT_KILLS=$n SOAK_SEED=$SEED SOAK_SCALE=1 \
    python3 e2e/soak/soak.py --trainer "$trainer" --data "$DATA" --out "$out" \
    >"$out.log" 2>&1 || true
}
# field OUT KEY: rows[0][KEY] of a soak table.
field() {
  python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["rows"][0][sys.argv[2]])' \
    "$1" "$2"
}

soak 40 "$tmp/clean.json"
if [ -f "$tmp/clean.json" ] && [ "$(field "$tmp/clean.json" trials)" = 40 ] &&
   [ "$(field "$tmp/clean.json" failures)" = 0 ]; then
  tap_ok "ckpt-write, seed $SEED: 40 kills of the real writer, 0 failures"
else
  tap_fail "ckpt-write, seed $SEED: 40 kills of the real writer, 0 failures" \
    "$(grep -E '^# ckpt-write|Error|error' "$tmp/clean.json.log" | head -n 20)"
fi

for plant in in-place damage-newest stray logs; do
  mkdir "$tmp/$plant.planted"
  SOAK_PLANT=$plant SOAK_PLANT_TRAINER=$BIN SOAK_PLANT_LOG=$tmp/$plant.planted \
    soak 12 "$tmp/$plant.json" plant
  planted=$(find "$tmp/$plant.planted" -type f | wc -l)
  failures=$( [ -f "$tmp/$plant.json" ] && field "$tmp/$plant.json" failures || echo none)
  if [ "$planted" -gt 0 ] && [ "$failures" = "$planted" ]; then
    tap_ok "ckpt-write with a planted $plant fault: $failures of $planted flagged"
  else
    tap_fail "ckpt-write with a planted $plant fault: each one flagged" \
      "planted $planted, failures $failures; $(tail -n 5 "$tmp/$plant.json.log")"
  fi
done
tap_done
