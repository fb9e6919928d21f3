#!/usr/bin/env bash
# Prints the Python of a venv that has TensorBoard (pip `tensorboard`), making it on
# first use under $KT_CACHE/venv-tb; exits non-zero, saying why on stderr, when it
# cannot (no python3-venv, no package index). Used by test-tensorboard.sh.
set -u
cache=${KT_CACHE:-$HOME/.cache/kubetrain}
venv=$cache/venv-tb
ready() { "$venv/bin/python" -c 'import tensorboard.backend.event_processing.event_accumulator' 2>/dev/null; }
if ! ready; then
  mkdir -p "$cache"
  exec 9>"$cache/.venv-tb.lock"
  flock 9
  if ! ready; then
    echo "creating $venv (pip install tensorboard)" >&2
    { python3 -m venv "$venv" && "$venv/bin/pip" install --quiet tensorboard; } \
      >"$cache/pip-tb.log" 2>&1 || { echo "cannot create $venv: see $cache/pip-tb.log" >&2; exit 1; }
    ready || { echo "$venv has no working tensorboard: see $cache/pip-tb.log" >&2; exit 1; }
  fi
fi
echo "$venv/bin/python"
