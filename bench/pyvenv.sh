#!/usr/bin/env bash
# bench/pyvenv.sh NAME
# Prints the Python of the venv $KT_CACHE/NAME, making it first (python3 -m venv, pip
# install its packages) when its module does not import; exits non-zero, saying why on
# stderr, when it cannot (no python3-venv, no package index). The one list of the venvs
# that tests, benchmarks and .ci/warm-cache.sh share, so that each is made with the same
# packages whoever makes it first:
#   venv-report  matplotlib                       the bench report (bench/report.py)
#   venv-tb      tensorboard                      the TensorBoard test and screenshot
#   venv-tf      tensorflow-cpu, tf-keras,        the TensorFlow examples, bench-trainer,
#                prometheus-client, pytest        the kubetrain package's tests (python/)
#   venv-torch   torch                            bench-allreduce's PyTorch peer
set -euo pipefail
[ $# = 1 ] || { echo "usage: $0 venv-report|venv-tb|venv-tf|venv-torch" >&2; exit 2; }
name=$1
case $name in
  venv-report) module=matplotlib; packages=(matplotlib) ;;
  venv-tb) module=tensorboard.backend.event_processing.event_accumulator; packages=(tensorboard) ;;
  # Every module listed: a venv made before a package was added here gets it on next use.
  venv-tf) module="tf_keras, prometheus_client, pytest"
           packages=(tensorflow-cpu tf-keras prometheus-client pytest) ;;
  venv-torch) module=torch; packages=(torch) ;;
  *) echo "$0: no venv named '$name' (venv-report, venv-tb, venv-tf, venv-torch)" >&2; exit 2 ;;
esac
cache=${KT_CACHE:-$HOME/.cache/kubetrain}
venv=$cache/$name
ready() { "$venv/bin/python" -c "import $module" 2>/dev/null; }
if ! ready; then
  mkdir -p "$cache"
  exec 9>"$cache/.$name.lock"
  flock 9
  if ! ready; then
    echo "creating $venv (pip install ${packages[*]})" >&2
    # The package index has been seen resetting every connection for minutes on end (pip's
    # own retries, seconds apart, all failed): the install is tried three times, a minute
    # apart; what is already downloaded stays in pip's cache.
    python3 -m venv "$venv" >"$cache/pip-$name.log" 2>&1 ||
      { echo "cannot create $venv: see $cache/pip-$name.log" >&2; exit 1; }
    for try in 1 2 3; do
      "$venv/bin/pip" install --quiet --retries 10 "${packages[@]}" >>"$cache/pip-$name.log" 2>&1 &&
        break
      [ "$try" = 3 ] && { echo "cannot create $venv: see $cache/pip-$name.log" >&2; exit 1; }
      echo "pip install failed (try $try of 3), again in 60 s" >>"$cache/pip-$name.log"
      sleep 60
    done
    ready || { echo "$venv cannot import $module: see $cache/pip-$name.log" >&2; exit 1; }
  fi
fi
echo "$venv/bin/python"
