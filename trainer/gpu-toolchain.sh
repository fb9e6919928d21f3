#!/usr/bin/env bash
# gpu-toolchain.sh — finds or installs the CUDA toolchain of `make GPU=1` and prints the
# CUDA_HOME to use (one line on stdout; progress goes to stderr).
#
#   1. $CUDA_HOME when it has bin/nvcc, else /usr/local/cuda when it has bin/nvcc;
#   2. otherwise NVIDIA's wheels from PyPI, installed once into $KT_CACHE/cuda and laid out
#      as one toolkit tree, $KT_CACHE/cuda/root/{bin,nvvm,include,lib}, of symlinks.
#      cuBLAS, cuDNN, NCCL and CCCL are taken from $KT_CACHE/venv-torch when a CUDA build
#      of torch is there (same CUDA major), so only nvcc is downloaded; else they are
#      installed too (the newest of CUDA 13).
#
# cuDNN and NCCL are found in the same tree (CUDNN_HOME and NCCL_HOME default to it).
set -euo pipefail

if [[ -n "${CUDA_HOME:-}" && -x "$CUDA_HOME/bin/nvcc" ]]; then echo "$CUDA_HOME"; exit 0; fi
if [[ -x /usr/local/cuda/bin/nvcc ]]; then echo /usr/local/cuda; exit 0; fi

CACHE=${KT_CACHE:-$HOME/.cache/kubetrain}
PREFIX=$CACHE/cuda
ROOT=$PREFIX/root
# CUDA 13 wheels (nvidia/cu13). nvcc and the runtime are pinned to the runtime that the
# reused libraries came with; installed afresh, all are the newest of CUDA 13.
CUDA_MAJOR=13
PIN=""
STAMP=$ROOT/.complete

if [[ -f $STAMP ]]; then echo "$ROOT"; exit 0; fi

log() { echo "gpu-toolchain: $*" >&2; }
site_of() { "$1/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])'; }

mkdir -p "$CACHE"
exec 9>"$CACHE/.cuda.lock"
flock 9
if [[ -f $STAMP ]]; then echo "$ROOT"; exit 0; fi

mkdir -p "$PREFIX"
[[ -x $PREFIX/venv/bin/python ]] || python3 -m venv "$PREFIX/venv" >&2
VSITE=$(site_of "$PREFIX/venv")

# Libraries already on the machine in torch's venv?
TSITE=""
if [[ -x $CACHE/venv-torch/bin/python ]]; then
    t=$(site_of "$CACHE/venv-torch")
    if [[ -e $t/nvidia/cu$CUDA_MAJOR/lib/libcublas.so.$CUDA_MAJOR && -e $t/nvidia/cudnn/include/cudnn.h &&
          -e $t/nvidia/nccl/include/nccl.h && -d $t/nvidia/cu$CUDA_MAJOR/include/cccl ]]; then
        TSITE=$t
        rt=$(ls -d "$t"/nvidia_cuda_runtime-*.dist-info 2>/dev/null | head -1)
        if [[ -n $rt ]]; then
            PIN=$(basename "$rt" .dist-info)
            PIN="==${PIN#nvidia_cuda_runtime-}"
        fi
        log "reusing cuBLAS, cuDNN, NCCL and CCCL from $CACHE/venv-torch (runtime ${PIN:-any})"
    fi
fi

PKGS=("nvidia-cuda-nvcc$PIN" "nvidia-cuda-crt$PIN" "nvidia-nvvm$PIN" "nvidia-cuda-runtime$PIN")
[[ -n $TSITE ]] || PKGS+=("nvidia-cublas" "nvidia-cudnn-cu$CUDA_MAJOR" "nvidia-nccl-cu$CUDA_MAJOR"
                          "nvidia-cuda-cccl")
log "installing ${PKGS[*]} into $PREFIX/venv"
"$PREFIX/venv/bin/pip" install --quiet --disable-pip-version-check "${PKGS[@]}" >&2

# The tree: nvcc's own directory first (its runtime), then the libraries' directories.
rm -rf "$ROOT"
mkdir -p "$ROOT/include" "$ROOT/lib"
CU=$VSITE/nvidia/cu$CUDA_MAJOR
ln -s "$CU/bin" "$ROOT/bin"
ln -s "$CU/nvvm" "$ROOT/nvvm"
SRCS=("$CU")
for s in "$TSITE" "$VSITE"; do
    [[ -n $s ]] || continue
    SRCS+=("$s/nvidia/cu$CUDA_MAJOR" "$s/nvidia/cudnn" "$s/nvidia/nccl")
done
for d in "${SRCS[@]}"; do
    for f in "$d"/include/*; do
        [[ -e $f && ! -e $ROOT/include/$(basename "$f") ]] && ln -s "$f" "$ROOT/include/"
    done
    for f in "$d"/lib/*; do
        [[ -e $f && ! -e $ROOT/lib/$(basename "$f") ]] && ln -s "$f" "$ROOT/lib/"
    done
done
# The wheels ship only versioned sonames; the linker wants the plain names.
for so in cudart cublas cublasLt cudnn nccl; do
    v=$(ls "$ROOT"/lib/lib$so.so.* 2>/dev/null | sort | head -1)
    [[ -n $v ]] || { log "lib$so.so.* not found in the wheels"; exit 1; }
    ln -sf "$(basename "$v")" "$ROOT/lib/lib$so.so"
done
for h in cuda_runtime.h cublas_v2.h cudnn.h nccl.h; do
    [[ -e $ROOT/include/$h ]] || { log "$h not found in the wheels"; exit 1; }
done
touch "$STAMP"
log "toolkit tree ready in $ROOT"
echo "$ROOT"
