#!/usr/bin/env bash
# make lint: the static checks of CONTRIBUTING.md, over the files git tracks.
#   1. clang-format (CLANG_FORMAT, clang-format-19) in check mode over the C, C++ and CUDA
#      sources, with the nearest .clang-format (the root's; trainer/.clang-format adds
#      the trainer's one-line idioms);
#   2. shellcheck over every shell script (*.sh, and extension-less files whose first
#      line is a sh or bash shebang), with .shellcheckrc; each script with a shebang sets
#      `set -euo pipefail`, or `set -uo pipefail` with a comment on that line or the line
#      above that says why not -e (a test that reports every failure and goes on);
#   3. at most 100 columns (tabs at 8) in those sources and scripts, in the Makefiles and
#      in the kubetrain package's Python (python/), except the shell scripts listed in
#      .ci/long-lines (to be wrapped: a listed script that has become short enough must
#      leave the list);
#   4. the package's Python compiles (python3 -m py_compile).
# Prints every finding and exits 1 if there was any.
set -euo pipefail
cd "$(dirname "$0")/.."
CLANG_FORMAT=${CLANG_FORMAT:-clang-format-19}
MAX_COLUMNS=100
status=0

mapfile -t csrc < <(git ls-files '*.c' '*.h' '*.cc' '*.cu' '*.cuh')
mapfile -t scripts < <(
  git ls-files '*.sh'
  git ls-files | while IFS= read -r f; do
    case ${f##*/} in *.*) continue ;; esac
    [ -f "$f" ] && head -n1 "$f" | grep -qE '^#!(/usr/bin/env |/bin/)(ba)?sh\b' && echo "$f"
  done
)
mapfile -t makefiles < <(git ls-files Makefile '*.mk')
mapfile -t pysrc < <(git ls-files 'python/*.py')

# --- 1. clang-format ---------------------------------------------------------------
command -v "$CLANG_FORMAT" >/dev/null || { echo "lint: no $CLANG_FORMAT (make deps)"; exit 1; }
# One run over all of them; each difference is a "file:line:col: error" line. An exit
# status without such lines is clang-format failing (a .clang-format it cannot read).
declare -A places=() is_src=()
for f in "${csrc[@]}"; do is_src[$f]=1; done
cf_rc=0 cf_broken=0
cf_out=$("$CLANG_FORMAT" --dry-run --Werror "${csrc[@]}" 2>&1) || cf_rc=$?
while IFS= read -r f; do
  if [ -n "${is_src[$f]:-}" ]; then places[$f]=$((${places[$f]:-0} + 1)); else cf_broken=1; fi
done < <(sed -nE 's/^([^:]+):[0-9]+:[0-9]+: (warning|error): .*/\1/p' <<<"$cf_out")
if [ $cf_broken = 1 ] || { [ $cf_rc -ne 0 ] && [ ${#places[@]} -eq 0 ]; }; then
  echo "$cf_out"
  echo "lint: $CLANG_FORMAT failed (status $cf_rc)"
  exit 1
fi
if [ ${#places[@]} -gt 0 ]; then
  status=1
  mapfile -t bad < <(printf '%s\n' "${!places[@]}" | sort)
  echo "lint: clang-format: ${#bad[@]} of ${#csrc[@]} files differ from their .clang-format:"
  for f in "${bad[@]}"; do
    echo "  $f: ${places[$f]} differences; see them: $CLANG_FORMAT --dry-run $f"
  done
  echo "lint: to fix: $CLANG_FORMAT -i ${bad[*]}"
fi

# --- 2. shellcheck and the set line ------------------------------------------------
command -v shellcheck >/dev/null || { echo "lint: no shellcheck (make deps)"; exit 1; }
# Two scripts a run, as many runs at once as there are CPUs.
if ! printf '%s\0' "${scripts[@]}" | xargs -0 -n 2 -P "$(nproc)" shellcheck -x -f gcc; then
  status=1
  echo "lint: shellcheck: findings above (a justified exception is a"
  echo "      '# shellcheck disable=SCnnnn' line with the reason, above the line)"
fi
for f in "${scripts[@]}"; do
  head -n1 "$f" | grep -q '^#!' || continue # a library, sourced by scripts that set
  grep -qE '^set -euo pipefail' "$f" && continue
  n=$(grep -nE '^set -uo pipefail' "$f" | head -n1 | cut -d: -f1 || true)
  if [ -n "$n" ]; then
    sed -n "$((n > 1 ? n - 1 : 1)),${n}p" "$f" | grep -qE '#.*(^|[^a-z])-e([^a-z]|$)' && continue
    echo "$f:$n: set -uo pipefail without a comment (on it or above) saying why not -e"
  else
    echo "$f: no 'set -euo pipefail' (or 'set -uo pipefail' with a reason) line"
  fi
  status=1
done

# --- 3. line length ----------------------------------------------------------------
python3 .ci/linelength.py "$MAX_COLUMNS" .ci/long-lines \
  "${csrc[@]}" "${scripts[@]}" "${makefiles[@]}" "${pysrc[@]}" || status=1

# --- 4. Python ---------------------------------------------------------------------
# Compiled in memory: no __pycache__ is left in the tree.
for f in "${pysrc[@]}"; do
  python3 -c 'import sys; compile(open(sys.argv[1]).read(), sys.argv[1], "exec")' "$f" ||
    status=1
done

[ $status -eq 0 ] && echo "lint: ${#csrc[@]} C/C++/CUDA sources, ${#scripts[@]} shell scripts," \
  "${#makefiles[@]} Makefiles, ${#pysrc[@]} Python files: clean"
exit $status
