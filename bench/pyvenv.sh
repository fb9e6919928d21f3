#!/usr/bin/env bash
# bench/pyvenv.sh NAME MODULE PACKAGE...
# Prints the Python of the venv $KT_CACHE/NAME in which `import MODULE` works, making it
# first (python3 -m venv, pip install PACKAGE...) when it is missing; exits non-zero,
# saying why on stderr, when it cannot (no python3-venv, no package index). The
# bench report (matplotlib) and the TensorBoard test (tensorboard) use it.
set -euo pipefail
[ $# -ge 3 ] || { echo "usage: $0 NAME MODULE PACKAGE..." >&2; exit 2; }
name=$1 module=$2; shift 2
cache=${KT_CACHE:-$HOME/.cache/kubetrain}
venv=$cache/$name
ready() { "$venv/bin/python" -c "import $module" 2>/dev/null; }
if ! ready; then
  mkdir -p "$cache"
  exec 9>"$cache/.$name.lock"
  flock 9
  if ! ready; then
    echo "creating $venv (pip install $*)" >&2
    { python3 -m venv "$venv" && "$venv/bin/pip" install --quiet "$@"; } \
      >"$cache/pip-$name.log" 2>&1 ||
      { echo "cannot create $venv: see $cache/pip-$name.log" >&2; exit 1; }
    ready || { echo "$venv cannot import $module: see $cache/pip-$name.log" >&2; exit 1; }
  fi
fi
echo "$venv/bin/python"
