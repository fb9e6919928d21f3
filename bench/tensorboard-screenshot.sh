#!/usr/bin/env bash
# bench/tensorboard-screenshot.sh TRAINER OUT.png
# docs/observability.md's TensorBoard picture from a real run: 2 local workers train the tutorial
# job (3 epochs x 70 steps, --eval) with a checkpoint dir, so the chief writes its
# events under <checkpoint-dir>/logs; TensorBoard (venv under $KT_CACHE) serves them on
# loopback and headless Chromium (Debian's `chromium`) takes the picture.
set -euo pipefail
trainer=${1:?usage: $0 TRAINER OUT.png} out=${2:?usage: $0 TRAINER OUT.png}
command -v chromium >/dev/null || { echo "$0: needs Debian's chromium (apt-get install chromium)" >&2; exit 1; }
py=$(bash "$(dirname "$0")/pyvenv.sh" venv-tb)
work=$(mktemp -d)
tb=
cleanup() { [ -n "$tb" ] && kill "$tb" 2>/dev/null; wait 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT

"$trainer" launch --workers 2 --epochs 3 --eval --checkpoint-dir "$work/tutorial-cnn" \
  --metrics-file "$work/metrics.jsonl" >"$work/train.log" 2>&1 ||
  { cat "$work/train.log" >&2; exit 1; }
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$(dirname "$py")/tensorboard" --logdir "$work/tutorial-cnn" --host 127.0.0.1 --port "$port" \
  >"$work/tb.log" 2>&1 &
tb=$!
for _ in $(seq 120); do curl -sf "http://127.0.0.1:$port/" >/dev/null && break; sleep 0.5; done
mkdir -p "$(dirname "$out")"
chromium --headless --no-sandbox --use-gl=angle --use-angle=swiftshader --enable-unsafe-swiftshader \
  --hide-scrollbars --window-size=1400,1180 --virtual-time-budget=15000 \
  --screenshot="$out" "http://127.0.0.1:$port/#scalars&tagFilter=loss%7Caccuracy" 2>"$work/chromium.log" ||
  { cat "$work/chromium.log" >&2; exit 1; }
echo "$out: TensorBoard on the chief's events of $(grep -c '"event":"step"' "$work/metrics.jsonl") steps"
