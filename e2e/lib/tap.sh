# shellcheck shell=bash
# TAP helpers for shell tests; source it, call tap_ok/tap_fail/tap_skip/tap_check, end with
# tap_done.
#   tap_check "name" cmd args...   runs cmd; ok when it exits 0, else not ok with its output
_tap_n=0
_tap_failed=0
tap_ok()   { _tap_n=$((_tap_n + 1)); echo "ok $_tap_n - $1"; }
tap_fail() {
  _tap_n=$((_tap_n + 1)); _tap_failed=$((_tap_failed + 1))
  echo "not ok $_tap_n - $1"
  [ $# -gt 1 ] && printf '%s\n' "$2" | sed 's/^/#   /'
  return 0
}
tap_skip() { _tap_n=$((_tap_n + 1)); echo "ok $_tap_n # SKIP $1: $2"; }
tap_check() {
  local name=$1 out; shift
  if out=$("$@" 2>&1); then tap_ok "$name"; else tap_fail "$name" "$out"; fi
}
tap_done() { echo "1..$_tap_n"; [ "$_tap_failed" -eq 0 ]; }
