# shellcheck shell=bash
# inorder.sh — sourced by .ci/taprun, .ci/fuzzrun and e2e/suite.sh: run N tasks in JOBS
# lanes, and show each task's result in the order given, as soon as it and those before
# it end.

# jobs_valid WHAT VALUE: exits 2, saying "WHAT: expected ...", unless VALUE is a number >= 1.
jobs_valid() {
  if ! [[ $2 =~ ^[1-9][0-9]*$ ]]; then
    echo "$1: expected a number >= 1" >&2
    exit 2
  fi
}

# run_in_order JOBS N DIR RUN SHOW [HALF]: runs `RUN i` in the background for i = 0..N-1,
# in JOBS lanes; RUN must create DIR/i.done as its last act. Calls `SHOW i` in this shell
# (so it may add to counters), in order of i, once DIR/i.done exists for it and every
# task before it has been shown. A task takes a whole lane, or half of one where the
# function HALF (if given) succeeds for it: a task that mostly waits, two of which use
# about the CPU of one. Tasks start in order of i, but for one that does not fit the
# lanes left: the next that does fit starts before it, so that a free half lane goes to
# a waiting task rather than idling until a whole one is free.
run_in_order() {
  # Prefixed: bash scopes locals dynamically, so RUN and SHOW see these names, and a plain
  # `dir` or `jobs` here would hide the caller's.
  local _io_n=$2 _io_dir=$3 _io_run=$4 _io_show=$5 _io_half=${6:-}
  local _io_free=$((2 * $1)) _io_shown=0 _io_i _io_cost
  local -a _io_state=() _io_costs=() # _io_state[i]: r running, d done (unset: not started)
  while [ "$_io_shown" -lt "$_io_n" ]; do
    for ((_io_i = 0; _io_i < _io_n && _io_free > 0; _io_i++)); do
      [ -z "${_io_state[_io_i]:-}" ] || continue
      _io_cost=2
      if [ -n "$_io_half" ] && "$_io_half" "$_io_i"; then _io_cost=1; fi
      [ "$_io_cost" -le "$_io_free" ] || continue
      "$_io_run" "$_io_i" &
      _io_state[_io_i]=r _io_costs[_io_i]=$_io_cost _io_free=$((_io_free - _io_cost))
    done
    wait -n
    # The done files, not wait's count, say which tasks ended: several may have ended
    # before this shell woke.
    for _io_i in "${!_io_state[@]}"; do
      if [ "${_io_state[_io_i]}" = r ] && [ -f "$_io_dir/$_io_i.done" ]; then
        _io_state[_io_i]=d _io_free=$((_io_free + _io_costs[_io_i]))
      fi
    done
    while [ "$_io_shown" -lt "$_io_n" ] && [ -f "$_io_dir/$_io_shown.done" ]; do
      "$_io_show" "$_io_shown"
      _io_shown=$((_io_shown + 1))
    done
  done
}
