#!/usr/bin/env bash
# gpu-toolchain.sh — finds or installs the CUDA toolchain of `make GPU=1` and prints the
# CUDA_HOME to use (one line on stdout; progress goes to stderr).
#
#   1. $CUDA_HOME when it has bin/nvcc, else /usr/local/cuda when it has bin/nvcc. If that
#      toolkit has no cuDNN or NCCL and CUDNN_HOME and NCCL_HOME are not given, those are
#      taken from NVIDIA's wheels that python3 imports (as on a machine where PyTorch
#      brought them), and the toolkit and they are laid out as one tree of symlinks,
#      $KT_CACHE/cuda/local-root;
#   2. otherwise NVIDIA's wheels from PyPI, installed once into $KT_CACHE/cuda and laid out
#      as one toolkit tree, $KT_CACHE/cuda/root/{bin,nvvm,include,lib}, of symlinks.
#      cuBLAS, cuDNN, NCCL and CCCL are taken from $KT_CACHE/venv-torch when a CUDA build
#      of torch is there (same CUDA major), so only nvcc is downloaded; else they are
#      installed too (the newest of CUDA 13).
#
# cuDNN and NCCL are found in the same tree (CUDNN_HOME and NCCL_HOME default to it).
set -euo pipefail

CACHE=${KT_CACHE:-$HOME/.cache/kubetrain}
log() { echo "gpu-toolchain: $*" >&2; }

# tree ROOT BIN NVVM SRC...: ROOT/bin and ROOT/nvvm link to BIN and NVVM; ROOT/include and
# ROOT/lib hold a link to each entry of every SRC's include/ and lib/ (or lib64/), the
# first SRC that has a name winning; the linker's plain .so names are added.
tree() {
    local root=$1 bin=$2 nvvm=$3 d f so v
    shift 3
    rm -rf "$root"
    mkdir -p "$root/include" "$root/lib"
    ln -s "$bin" "$root/bin"
    ln -s "$nvvm" "$root/nvvm"
    for d in "$@"; do
        for f in "$d"/include/* "$d"/lib/* "$d"/lib64/*; do
            [[ -e $f ]] || continue
            local sub=include
            [[ $f == "$d"/include/* ]] || sub=lib
            [[ -e $root/$sub/$(basename "$f") ]] || ln -s "$f" "$root/$sub/"
        done
    done
    # The wheels ship only versioned sonames; the linker wants the plain names.
    for so in cudart cublas cublasLt cudnn nccl; do
        [[ -e $root/lib/lib$so.so ]] && continue
        v=$(ls "$root"/lib/lib$so.so.* 2>/dev/null | sort | head -1)
        [[ -n $v ]] || { log "lib$so.so.* not found in $*"; return 1; }
        ln -sf "$(basename "$v")" "$root/lib/lib$so.so"
    done
    for f in cuda_runtime.h cublas_v2.h cudnn.h nccl.h; do
        [[ -e $root/include/$f ]] || { log "$f not found in $*"; return 1; }
    done
    echo "$*" >"$root/.complete"
}

toolkit=""
if [[ -n "${CUDA_HOME:-}" && -x "$CUDA_HOME/bin/nvcc" ]]; then toolkit=$CUDA_HOME
elif [[ -x /usr/local/cuda/bin/nvcc ]]; then toolkit=/usr/local/cuda; fi
if [[ -n $toolkit ]]; then
    if [[ -n ${CUDNN_HOME:-} && -n ${NCCL_HOME:-} ]] ||
       [[ -e $toolkit/include/cudnn.h && -e $toolkit/include/nccl.h ]]; then
        echo "$toolkit"; exit 0
    fi
    # cuDNN and NCCL from the wheels python3 sees (nvidia/cudnn, nvidia/nccl, and the
    # CUDA libraries of nvidia/cuNN after the toolkit's own).
    wheels=$(python3 -c 'import nvidia; print("\n".join(nvidia.__path__))' 2>/dev/null || true)
    srcs=("$toolkit")
    while IFS= read -r w; do
        [[ -n $w ]] || continue
        for d in "$w"/cudnn "$w"/nccl "$w"/cu[0-9]*; do [[ -d $d ]] && srcs+=("$d"); done
    done <<<"$wheels"
    if [[ ${#srcs[@]} -eq 1 ]]; then
        log "$toolkit has no cuDNN or NCCL and python3 imports no NVIDIA wheels:" \
            "set CUDNN_HOME and NCCL_HOME"
        echo "$toolkit"; exit 0
    fi
    root=$CACHE/cuda/local-root
    mkdir -p "$CACHE/cuda"
    exec 9>"$CACHE/.cuda.lock"
    flock 9
    if [[ -f $root/.complete && $(cat "$root/.complete") == "${srcs[*]}" ]]; then
        echo "$root"; exit 0
    fi
    log "laying out $toolkit with cuDNN and NCCL from ${srcs[*]:1} in $root"
    tree "$root" "$toolkit/bin" "$toolkit/nvvm" "${srcs[@]}" || exit 1
    echo "$root"; exit 0
fi

PREFIX=$CACHE/cuda
ROOT=$PREFIX/root
# CUDA 13 wheels (nvidia/cu13). nvcc and the runtime are pinned to the runtime that the
# reused libraries came with; installed afresh, all are the newest of CUDA 13.
CUDA_MAJOR=13
PIN=""
STAMP=$ROOT/.complete

if [[ -f $STAMP ]]; then echo "$ROOT"; exit 0; fi

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
    if [[ -e $t/nvidia/cu$CUDA_MAJOR/lib/libcublas.so.$CUDA_MAJOR &&
          -e $t/nvidia/cudnn/include/cudnn.h && -e $t/nvidia/nccl/include/nccl.h &&
          -d $t/nvidia/cu$CUDA_MAJOR/include/cccl ]]; then
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
CU=$VSITE/nvidia/cu$CUDA_MAJOR
SRCS=("$CU")
for s in "$TSITE" "$VSITE"; do
    [[ -n $s ]] || continue
    SRCS+=("$s/nvidia/cu$CUDA_MAJOR" "$s/nvidia/cudnn" "$s/nvidia/nccl")
done
tree "$ROOT" "$CU/bin" "$CU/nvvm" "${SRCS[@]}" || exit 1
log "toolkit tree ready in $ROOT"
echo "$ROOT"
