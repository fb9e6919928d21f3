# shellcheck shell=bash
# inorder.sh — sourced by .ci/taprun and .ci/fuzzrun: run N tasks, up to JOBS at once,
# and show each task's result in the order given, as soon as it and those before it end.

# jobs_valid WHAT VALUE: exits 2, saying "WHAT: expected ...", unless VALUE is a number >= 1.
jobs_valid() {
  if ! [[ $2 =~ ^[1-9][0-9]*$ ]]; then
    echo "$1: expected a number >= 1" >&2
    exit 2
  fi
}

# run_in_order JOBS N DIR RUN SHOW: runs `RUN i` in the background for i = 0..N-1, at
# most JOBS at a time; RUN must create DIR/i.done as its last act. Calls `SHOW i` in this
# shell (so it may add to counters), in order of i, once DIR/i.done exists for it and
# every task before it has been shown.
run_in_order() {
  # Prefixed: bash scopes locals dynamically, so RUN and SHOW see these names, and a plain
  # `dir` or `jobs` here would hide the caller's.
  local _io_jobs=$1 _io_n=$2 _io_dir=$3 _io_run=$4 _io_show=$5
  local _io_next=0 _io_shown=0 _io_running=0
  while [ "$_io_shown" -lt "$_io_n" ]; do
    while [ "$_io_running" -lt "$_io_jobs" ] && [ "$_io_next" -lt "$_io_n" ]; do
      "$_io_run" "$_io_next" &
      _io_next=$((_io_next + 1)) _io_running=$((_io_running + 1))
    done
    wait -n
    _io_running=$((_io_running - 1))
    while [ "$_io_shown" -lt "$_io_n" ] && [ -f "$_io_dir/$_io_shown.done" ]; do
      "$_io_show" "$_io_shown"
      _io_shown=$((_io_shown + 1))
    done
  done
}
