#!/usr/bin/env bash
# trainer/gpu-device.sh rehearsed on every make test, so that a lent GPU machine's few
# minutes go to the device and not to the build. The GPU machine has no apt and no network,
# no -dev packages and no Fashion-MNIST, CUDA's nvcc in /usr/local/cuda, and cuDNN and NCCL
# only as the NVIDIA wheels of its PyTorch. Here that is a bare bookworm root (debootstrap
# minbase plus build-essential, make, python3 and xz; an overlay, fresh each run, entered
# with chroot in a mount namespace of its own) whose /usr/local/cuda is the CUDA 13 wheel
# of trainer/gpu-toolchain.sh and whose python3 imports the cuDNN and NCCL wheels beside
# it. `bundle` runs here; `run env build test bench` inside: it must build with -Werror
# from the bundle alone, load every library from the bundle or CUDA's tree, pass the
# device checks that need no device (those that need one say skipped: there is none
# here), and the bench phase must fail saying skipped, writing no JSON.
set -uo pipefail # no -e: a failed check is reported (not ok) and the test goes on
source e2e/lib/tap.sh
KC=${KT_CACHE:-$HOME/.cache/kubetrain}
PKGS="build-essential make python3 xz-utils procps"

# a fresh machine has no debootstrap yet (the images install it later): root installs it
[[ $(id -u) -eq 0 ]] && ! command -v debootstrap >/dev/null && bash .ci/deps.sh debootstrap >&2
if [[ $(id -u) -ne 0 ]] || ! command -v unshare >/dev/null || ! command -v debootstrap >/dev/null; then
  tap_skip "trainer/gpu-device.sh rehearsal" "needs root, unshare and debootstrap (chroot)"
  tap_done; exit
fi
if [[ -n ${CUDA_HOME:-} || -x /usr/local/cuda/bin/nvcc ]]; then
  tap_skip "trainer/gpu-device.sh rehearsal" "a CUDA toolkit is installed here; the rehearsal stands in NVIDIA's wheels for one"
  tap_done; exit
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# The wheels (installed by test-gpu-build's make GPU=1, or now).
if ! bash trainer/gpu-toolchain.sh >/dev/null 2>"$tmp/tc"; then
  tap_fail "the CUDA wheels of gpu-toolchain.sh" "$(tail -20 "$tmp/tc")"; tap_done; exit
fi
site=$(ls -d "$KC"/cuda/venv/lib/python3*/site-packages 2>/dev/null | head -1)
# cuDNN and NCCL are in that venv, or in PyTorch's when gpu-toolchain.sh reused its wheels
# (a machine that ran the benchmarks has venv-torch): the GPU machine's python3 sees them
# the same way, as wheels beside nvcc's.
libsite=$site
if [[ ! -d $site/nvidia/cudnn || ! -d $site/nvidia/nccl ]]; then
  libsite=$(ls -d "$KC"/venv-torch/lib/python3*/site-packages 2>/dev/null | head -1)
fi
if [[ ! -x $site/nvidia/cu13/bin/nvcc || ! -d $libsite/nvidia/cudnn || ! -d $libsite/nvidia/nccl ]]; then
  tap_fail "the CUDA wheels in $KC/cuda/venv" "no nvidia/cu13/bin/nvcc in '$site', or no nvidia/cudnn or nvidia/nccl in '$libsite'"
  tap_done; exit
fi

# The root, made once: the base image's tarball and the packages above (no -dev ones).
root=$KC/gpu-device/root
stamp=$root/.kt-packages
if [[ ! -f $stamp || $(cat "$stamp") != "$PKGS" ]]; then
  if ! BASE_TARBALL_ONLY=1 bash docker/base.sh >"$tmp/base" 2>&1; then
    tap_fail "the bookworm base tarball (docker/base.sh)" "$(tail -20 "$tmp/base")"; tap_done; exit
  fi
  rm -rf "$root" && mkdir -p "$root"
  tar -C "$root" -xf "$KC/base/bookworm-minbase.tar"
  cp /etc/resolv.conf "$root/etc/"
  [[ -f /etc/apt/sources.list.d/debian.sources ]] && cp /etc/apt/sources.list.d/debian.sources "$root/etc/apt/sources.list.d/"
  if unshare --mount --propagation private bash -c "
       for m in proc dev sys; do mount --bind /\$m '$root'/\$m; done
       chroot '$root' env DEBIAN_FRONTEND=noninteractive bash -c \
         'apt-get update -qq && apt-get install -y -qq --no-install-recommends $PKGS'" >"$tmp/apt" 2>&1; then
    rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/archives/*.deb
    echo "$PKGS" >"$stamp"
  else
    tap_fail "a bare bookworm root with $PKGS" "$(tail -20 "$tmp/apt")"; rm -rf "$root"; tap_done; exit
  fi
fi
for f in /usr/include/cjson /usr/include/yaml.h /usr/include/zlib.h /usr/include/openssl /usr/include/cmocka.h; do
  [[ -e $root$f ]] && { tap_fail "the root has no -dev packages" "$f is there"; tap_done; exit; }
done

# bundle, here.
t0=$(date +%s)
if bash trainer/gpu-device.sh bundle >"$tmp/bundle" 2>&1 && [[ -s build/device/deps.tar.xz ]]; then
  tap_ok "bundle: $(tail -1 "$tmp/bundle" | cut -d: -f2 | cut -d')' -f1 | sed 's/^ *//')) in $(( $(date +%s) - t0 ))s"
else
  tap_fail "bundle writes build/device" "$(tail -20 "$tmp/bundle")"; tap_done; exit
fi

# run, inside: the tree as the device tool sends it (tracked and untracked files that git
# does not ignore) and the carried build/device.
mkdir -p "$tmp/upper" "$tmp/work" "$tmp/merged" "$tmp/out"
t0=$(date +%s)
# shellcheck disable=SC2016 # a script for the inner bash, which expands it
unshare --mount --propagation private bash -c '
  set -e
  root=$1 tmp=$2 site=$3 repo=$4 libsite=$5
  if ! mount -t overlay overlay -o "lowerdir=$root,upperdir=$tmp/upper,workdir=$tmp/work" "$tmp/merged" 2>/dev/null; then
    cp -a "$root/." "$tmp/merged/"   # no overlayfs: a copy
  fi
  r=$tmp/merged
  for m in proc dev sys; do mount --bind /$m "$r/$m"; done
  mkdir -p "$r/src" "$r/tmp/out"
  for d in $(printf "%s\n" "$site" "$libsite" | sort -u); do
    mkdir -p "$r$d"
    mount --bind "$d" "$r$d"
    mount -o remount,ro,bind "$r$d"
  done
  mkdir -p "$r/usr/local"
  ln -sfn "$site/nvidia/cu13" "$r/usr/local/cuda"
  (cd "$repo" && { git ls-files -co --exclude-standard; find build/device -type f; } | tar -cf - -T -) | tar -C "$r/src" -xf -
  chroot "$r" env -i PATH=/usr/local/bin:/usr/bin:/bin HOME=/root PYTHONPATH="$site:$libsite" OUT=/tmp/out \
    bash -c "cd /src && bash trainer/gpu-device.sh run env build test bench; echo \"rc=\$?\"; ldd build/gpu/bin/kubetrain-trainer > /tmp/out/ldd" || true
  # a machine whose nvidia-smi lists a GPU the trainer cannot use (a driver too old for
  # the runtime): the test phase fails rather than passing on skipped device tests
  mkdir -p "$r/tmp/smi"
  printf "#!/bin/sh\necho \"GPU 0: stand-in for nvidia-smi (UUID: GPU-0)\"\n" >"$r/tmp/smi/nvidia-smi"
  chmod +x "$r/tmp/smi/nvidia-smi"
  chroot "$r" env -i PATH=/tmp/smi:/usr/local/bin:/usr/bin:/bin HOME=/root PYTHONPATH="$site:$libsite" OUT=/tmp/out-smi \
    bash -c "cd /src && bash trainer/gpu-device.sh run test > /tmp/out/smi.log 2>&1; echo \"rc=\$?\" >> /tmp/out/smi.log" || true
  cp -a "$r/tmp/out/." "$tmp/out/"
' rehearsal "$root" "$tmp" "$site" "$PWD" "$libsite" >"$tmp/run" 2>&1
secs=$(( $(date +%s) - t0 ))
log=$(cat "$tmp/run")

if grep -q 'laying out /usr/local/cuda with cuDNN and NCCL from' "$tmp/out/env.txt" 2>/dev/null; then
  tap_ok "gpu-toolchain.sh completes /usr/local/cuda with the cuDNN and NCCL wheels python3 imports"
else tap_fail "gpu-toolchain.sh completes /usr/local/cuda from the wheels" "$(cat "$tmp/out/env.txt" 2>&1)"; fi

if grep -q '^build: ok$' <<<"$log"; then
  tap_ok "run build: make GPU=1 with -Werror, the bundle's libraries and no apt"
else tap_fail "run build: make GPU=1 from the bundle" "$(tail -40 <<<"$log")"$'\n'"$(tail -30 "$tmp/out/build.log" 2>&1)"; fi

bad=$(grep -v -E '=> (/tmp/kt-deps/lib/|/root/\.cache/kubetrain/cuda/local-root/lib/|/lib/x86_64-linux-gnu/(libc|libm|libstdc\+\+|libgcc_s|libdl|libpthread|librt|libresolv)\.so)|linux-vdso|ld-linux' "$tmp/out/ldd" 2>&1)
if [[ -s $tmp/out/ldd && -z $bad ]] && grep -q 'libopenblas.so.0 => /tmp/kt-deps/lib/' "$tmp/out/ldd" &&
   grep -q 'libcudnn.so.9 => /root/.cache/kubetrain/cuda/local-root/lib/' "$tmp/out/ldd"; then
  tap_ok "the trainer loads each library from the bundle, CUDA's tree or the C and C++ runtimes"
else tap_fail "the trainer's libraries come from the bundle and CUDA's tree" "$bad"$'\n'"$(cat "$tmp/out/ldd" 2>&1)"; fi

tap_lines=$(grep -cE '^(not )?ok ' "$tmp/out/test-gpu-build.tap" 2>/dev/null)
if [[ ${tap_lines:-0} -ge 10 ]] && ! grep -q '^not ok' "$tmp/out/test-gpu-build.tap" &&
   grep -q '# SKIP test-gpu .*CUDA device(s) needed, 0 here' "$tmp/out/test-gpu-build.tap" &&
   grep -q '^ok .* - --gpus-per-worker 2: two ranks' "$tmp/out/test-gpu-build.tap"; then
  tap_ok "run test: test-gpu-build.sh passes ($tap_lines lines), the device's tests say skipped"
else tap_fail "run test: test-gpu-build.sh" "$(cat "$tmp/out/test-gpu-build.tap" 2>&1)"; fi

if grep -q '^test: nvidia-smi lists a GPU but the trainer found no CUDA device' "$tmp/out/smi.log" 2>/dev/null &&
   grep -q '^== test: failed' "$tmp/out/smi.log" && grep -q '^rc=1$' "$tmp/out/smi.log"; then
  tap_ok "run test where nvidia-smi lists a GPU the trainer cannot use: the phase fails, saying so"
else tap_fail "run test with a GPU listed but none usable: fails" "$(tail -15 "$tmp/out/smi.log" 2>&1)"; fi

if grep -q 'bench-gpu: skipped: .*no CUDA device' <<<"$log" && grep -q '^== bench: failed' <<<"$log" &&
   [[ ! -e $tmp/out/gpu-tutorial-cnn.json ]] && grep -q '^rc=1$' <<<"$log"; then
  tap_ok "run bench: no device, says skipped, no JSON; run exits 1 (one phase failed) after ${secs}s"
else tap_fail "run bench without a device: skipped, no JSON, exit 1" "$(tail -30 <<<"$log")"; fi
tap_done
