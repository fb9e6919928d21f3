# shellcheck shell=bash
# Shell helpers of the trainer's script tests; source it after e2e/lib/tap.sh.

# True when DIR holds Fashion-MNIST's training labels, gzipped or not (what every
# trainer run of these tests reads).
have_data() { [ -f "$1/train-labels-idx1-ubyte.gz" ] || [ -f "$1/train-labels-idx1-ubyte" ]; }

# skip_without_data NAME DIR: without Fashion-MNIST in DIR the whole test is one SKIP.
skip_without_data() {
  have_data "$2" || { tap_skip "$1" "no Fashion-MNIST in $2"; tap_done; exit; }
}

# py_has PYTHON MODULE...: whether PYTHON finds every MODULE, without importing it: a
# test's skip check, where `import tensorflow` would cost seconds of CPU. A module that is
# there but fails to import then fails the test that uses it, as a broken install should.
py_has() {
  local py=$1; shift
  "$py" -c 'import importlib.util, sys
sys.exit(0 if all(importlib.util.find_spec(m) for m in sys.argv[1:]) else 1)' "$@" 2>/dev/null
}

# A TCP port free on loopback now.
free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])'
}

# The first of N consecutive TCP ports free on loopback now (a worker with
# --gpus-per-worker N listens on its port and the N-1 after it). Taken below the kernel's
# ephemeral range: the port after one the kernel just handed out is the one it is likely
# to hand out next to any outgoing connection (seen: "listen on 127.0.0.1:38776: Address
# already in use" for the second rank).
free_ports() { # N
  python3 - "$1" <<'PY'
import random, socket, sys
n = int(sys.argv[1])
try:
    lo = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
except (OSError, ValueError):
    lo = 32768
for _ in range(1000):
    base = random.randrange(20000, max(lo, 20000 + 2 * n) - n)
    socks = []
    try:
        for p in range(base, base + n):
            s = socket.socket()
            socks.append(s)
            s.bind(("127.0.0.1", p))
    except OSError:
        continue
    finally:
        for s in socks:
            s.close()
    print(base)
    break
else:
    sys.exit("free_ports: no %d consecutive free ports" % n)
PY
}

# A fresh 32-byte KUBETRAIN_SECRET in hex (no openssl command needed: the GPU machine
# may have none).
secret() { od -An -tx1 -N32 /dev/urandom | tr -d ' \n'; }

# TF_CONFIG of worker `index` in a cluster of loopback workers on the given ports.
tf_config() { # index port...
  local idx=$1; shift
  local list; list=$(printf '"127.0.0.1:%s",' "$@")
  echo "{\"cluster\":{\"worker\":[${list%,}]},\"task\":{\"type\":\"worker\",\"index\":$idx}}"
}

# The distinct weights hashes (--print-weights-hash) in the given output files.
hashes() { sed -n 's/.*weights-sha256: //p' "$@" | sort -u; }

# The data tests' runs of $BIN, with $tmp their scratch directory:
# run_trainer NAME ARGS...: the trainer's stdout in $tmp/NAME.out, stderr in .err, exit
# status in .rc
# shellcheck disable=SC2154 # $tmp is the sourcing test's scratch directory
run_trainer() {
  local name=$1; shift
  "$BIN" "$@" >"$tmp/$name.out" 2>"$tmp/$name.err"
  echo $? >"$tmp/$name.rc"
}
# peak_rss NAME ARGS...: runs $BIN as run_trainer does; prints its peak RSS in KiB
# (getrusage of the child, so that no tool beyond python3 is needed).
peak_rss() {
  local name=$1; shift
  python3 - "$tmp/$name" "$BIN" "$@" <<'PY'
import resource, subprocess, sys
out = sys.argv[1]
with open(out + ".out", "w") as o, open(out + ".err", "w") as e:
    rc = subprocess.call(sys.argv[2:], stdout=o, stderr=e)
with open(out + ".rc", "w") as f:
    f.write(f"{rc}\n")
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)  # KiB on Linux
PY
}

# first_step PID FILE: waits until run PID has logged a step to its --metrics-file FILE
# (FILE.tmp.<pid> until the run ends), or has ended.
first_step() {
  local _
  for _ in $(seq 600); do
    [[ -n $(cat "$2"* 2>/dev/null) ]] && return
    kill -0 "$1" 2>/dev/null || return
    sleep 0.1
  done
}

# run_hash NAME: the weights hash run NAME printed, if it exited 0.
run_hash() { [[ $(cat "$tmp/$1.rc") == 0 ]] && hashes "$tmp/$1.out"; }
# expect_exit NAME CODE NEEDLE ARGS...: run NAME exits CODE with one line of stderr (the
# kernel line apart) holding NEEDLE.
expect_exit() {
  local name=$1 code=$2 needle=$3; shift 3
  run_trainer "$name" "$@"
  local rc err
  rc=$(cat "$tmp/$name.rc")
  err=$(grep -v '^kubetrain-trainer: gemm' "$tmp/$name.err")
  if [[ $rc -eq $code && $err == *"$needle"* ]]; then tap_ok "$name: exit $code ($err)"
  else tap_fail "$name: exit $code with '$needle'" "rc=$rc: $err"; fi
}

# values EVENT KEY FILE: KEY of each EVENT record of a --metrics-file, space-separated.
values() {
  python3 -c 'import json, sys
event, key, path = sys.argv[1:4]
print(" ".join("%.6f" % e[key] for e in map(json.loads, open(path)) if e["event"] == event))' "$@"
}

# The step losses of a --metrics-file, space-separated.
losses() { values step loss "$1"; }

# Whether two such loss lists have the same length (> 0) and agree within a relative
# tolerance: close GOT WANT TOL. close_worst GOT WANT TOL: the same, and it prints the
# largest relative difference and its step (1-based), e.g. "1.6e-04 at step 50".
close_worst() {
  python3 -c 'import sys
a, b = (list(map(float, x.split())) for x in sys.argv[1:3])
tol = float(sys.argv[3])
d = [(abs(x - y) / abs(y) if y else abs(x), i + 1) for i, (x, y) in enumerate(zip(a, b))]
m = max(d, default=(0.0, 0))
print(f"{m[0]:.1e} at step {m[1]}")
sys.exit(0 if len(a) == len(b) > 0 and all(abs(x - y) <= tol * abs(y) for x, y in zip(a, b))
         else 1)' "$1" "$2" "$3"
}
close() { close_worst "$@" >/dev/null; }

# BIN, the trainer built on the CUDA emulation (trainer/tests/fakecuda), and CPU, the CPU
# build; make test builds both. Returns 1 after a not-ok line when either is missing.
emul_trainers() {
  BIN=${BUILD:-build}/san/emul/bin/kubetrain-trainer
  CPU=${BUILD:-build}/bin/kubetrain-trainer
  [[ -x $BIN && -x $CPU ]] && return
  tap_fail "the emulated trainer and the CPU trainer are built" \
    "missing $BIN or $CPU (make test builds both)"
  return 1
}

# members_write DIR LIST: DIR/members (a symlink to ..data/members) says LIST from now on,
# changed as the kubelet changes a downwardAPI volume: the file in a new directory, the
# ..data symlink to it replaced by a rename, the old directory removed. No trailing
# newline, as the kubelet writes an annotation.
members_write() {
  local dir=$1 list=$2 old new
  old=$(readlink "$dir/..data" 2>/dev/null)
  new=..$(date +%s%N)
  mkdir -p "$dir/$new" && printf '%s' "$list" >"$dir/$new/members"
  ln -s "$new" "$dir/..data_tmp" && mv -T "$dir/..data_tmp" "$dir/..data"
  [[ -L $dir/members ]] || ln -s ..data/members "$dir/members"
  [[ -z $old ]] || rm -rf "${dir:?}/$old"
}
wait_for() { # seconds cmd...: polls cmd every 0.05 s
  local end=$((SECONDS + $1)); shift
  until "$@"; do [ $SECONDS -ge $end ] && return 1; sleep 0.05; done
}
# finish PID: waits up to 120 s for it; its exit code in rc (124: it hung and was killed).
finish() {
  if wait_for 120 bash -c "! kill -0 $1 2>/dev/null"; then wait "$1"; rc=$?
  else kill -9 "$1"; rc=124; fi
}
