#!/usr/bin/env bash
# The kubetrain package (python/): installed with pip from the repository into the
# site-packages of a throwaway venv (whose Python then runs kubetrain-auto.pth at start, as
# in the image; TensorFlow comes from venv-tf's site-packages, named in a .pth), then its
# pytest tests under both Keras versions, one pytest process each (importing TensorFlow
# takes most of the time): test_keras.py and test_auto.py under tf-keras
# (TF_USE_LEGACY_KERAS=1), all of them under Keras 3 (test_report.py uses no Keras).
# Each test is one TAP line. TensorFlow, tf-keras, pytest and
# prometheus_client come from $KT_CACHE/venv-tf (bench/pyvenv.sh, made on first use; the
# whole test is one SKIP when it cannot be); the operator's /metrics parser from
# $BUILD/opt/python/tests/parse-metrics (make test builds it). About 45 s on 2 cores.
set -uo pipefail # no -e: a failed check is reported (not ok) and the test goes on
source e2e/lib/tap.sh
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
unset TF_CONFIG KUBETRAIN_METRICS_PORT KUBETRAIN_JOB KUBETRAIN_AUTO_PROGRESS
export KUBETRAIN_TERMINATION_FILE=$tmp/termination PYTHONDONTWRITEBYTECODE=1

if ! PY=$(bash bench/pyvenv.sh venv-tf 2>"$tmp/venv.err"); then
  tap_skip "kubetrain package" "no TensorFlow venv: $(tail -1 "$tmp/venv.err")"; tap_done; exit
fi

version=$(sed -nE 's/^version = "([^"]+)".*/\1/p' python/pyproject.toml)
if [ "$version" = "$(cat VERSION)" ]; then
  tap_ok "python/pyproject.toml's version is VERSION's ($version)"
else tap_fail "pyproject.toml's version is VERSION's" "$version, VERSION $(cat VERSION)"; fi

# The venv's own setuptools builds it (no download), from a copy: setuptools writes its
# build/ and egg-info beside the sources.
cp -r python "$tmp/python"
site=$tmp/no-venv
purelib() { "$1" -c 'import sysconfig; print(sysconfig.get_path("purelib"))'; }
"$PY" -m venv --without-pip "$tmp/venv" && site=$(purelib "$tmp/venv/bin/python") &&
  purelib "$PY" >"$site/venv-tf.pth"
if "$PY" -m pip install --quiet --no-deps --no-build-isolation --target "$site" \
     "$tmp/python" >"$tmp/pip.log" 2>&1 && [ -f "$site/kubetrain/keras.py" ]; then
  tap_ok "pip install ./python installs the package"
else tap_fail "pip install ./python installs the package" "$(tail -5 "$tmp/pip.log")"; fi
if [ -f "$site/kubetrain-auto.pth" ] && [ -f "$site/_kubetrain_auto.py" ]; then
  tap_ok "pip install ./python puts kubetrain-auto.pth and its module in site-packages"
else tap_fail "pip install ./python puts kubetrain-auto.pth in site-packages" "$(ls "$site")"; fi

parser=${BUILD:-build}/opt/python/tests/parse-metrics
[ -x "$parser" ] && export KUBETRAIN_PARSE_METRICS=$PWD/$parser

# pytest's -rA summary has a line per test: "PASSED path::name", "FAILED path::name - why",
# "ERROR path[::name] - why" (a fixture or the module's import failed), "SKIPPED [1]
# path:line: why"; each becomes a TAP line, the failures with pytest's report.
for keras in tf-keras keras-3; do
  legacy=0 tests=python/tests
  [ $keras = tf-keras ] && legacy=1 tests="python/tests/test_keras.py python/tests/test_auto.py"
  # The installed copy, not the source tree, is imported; -p no:cacheprovider writes
  # nothing into the repository.
  # shellcheck disable=SC2086 # $tests: one or two paths
  TF_USE_LEGACY_KERAS=$legacy TF_CPP_MIN_LOG_LEVEL=2 \
    "$tmp/venv/bin/python" -m pytest -p no:cacheprovider -q -rA $tests >"$tmp/$keras.log" 2>&1
  rc=$?
  n=0
  while IFS= read -r line; do
    case $line in
      "PASSED "*) tap_ok "$keras: ${line#PASSED python/tests/}"; n=$((n + 1)) ;;
      "FAILED "* | "ERROR "*)
        tap_fail "$keras: ${line#* python/tests/}" "$(sed -n \
          '/^=* \(ERRORS\|FAILURES\) =*$/,/^=* short test summary/p' "$tmp/$keras.log" |
          tail -40)"
        n=$((n + 1)) ;;
      "SKIPPED "*) tap_skip "$keras: ${line#SKIPPED }" "skipped"; n=$((n + 1)) ;;
    esac
  done < <(grep -E '^(PASSED|FAILED|ERROR|SKIPPED) ' "$tmp/$keras.log")
  if [ "$n" = 0 ] || { [ $rc != 0 ] && [ $rc != 1 ]; }; then
    tap_fail "$keras: pytest ran the tests (exit $rc)" "$(tail -20 "$tmp/$keras.log")"
  fi
done
tap_done
