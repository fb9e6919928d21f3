#!/usr/bin/env bash
# gpu-device.sh — the GPU build's checks (docs/gpu.md) on a machine with a CUDA device
# that has no apt and no
# network (the GPU machine lent to a session: CUDA's nvcc in /usr/local/cuda, cuDNN and
# NCCL in the wheels of its PyTorch, no -dev packages, no Fashion-MNIST).
#
#   trainer/gpu-device.sh bundle         here, with apt: writes build/device/, what the
#                                        GPU machine lacks (about 39 MB; carry it there)
#   trainer/gpu-device.sh run [PHASE..]  there, in the repository root: PHASEs among
#                                        env build test bench (default: all, in order)
#
# bundle: the trainer's libraries with their headers (cJSON, libyaml, zlib, libzip, libspng,
# libturbojpeg, OpenBLAS with its Fortran runtime, libcrypto, libcurl with the libraries it
# links (nghttp2, libssh2, GnuTLS for librtmp, Kerberos, LDAP, ...), cmocka; libhdf5 and
# libaec as the archives the trainer links), from Debian's packages unpacked into one prefix
# (build/device/deps.tar.xz: include/ and lib/), and Fashion-MNIST's four files.
# run: unpacks the prefix into /tmp/kt-deps (make's DEPS_PREFIX: no apt) and the data into
# /usr/share/datasets/fashion-mnist; then
#   env    the device, driver, nvcc, compiler and PyTorch, into $OUT/env.txt;
#   build  make GPU=1 into build/gpu (trainer and test-gpu), log in $OUT/build.log; if a
#          newer compiler than CI's warns, once more with WERROR= (the warnings are kept
#          in the log, to be fixed here), and if that fails too, once more without the
#          sanitizers (a compiler without ASan's runtime); either counts as failed;
#   test   trainer/tests/test-gpu-build.sh (the device checks and test-gpu), TAP in
#          $OUT/test-gpu-build.tap; where nvidia-smi lists a GPU, it fails unless the
#          trainer trained on it (skipped device tests there are not a pass);
#   bench  make bench-gpu against the PyTorch that python3 holds (ROUNDS, default 3),
#          its JSON in $OUT/gpu-tutorial-cnn.json (after every run) and bench/results/.
# Each phase's output is written as it runs, so a command stopped at its time limit still
# returns what it did. OUT defaults to build/device/out. Exit status: the number of
# phases that failed.
set -uo pipefail # no -e: a failed phase is counted (the exit status), the next runs

DEV=build/device
DATA=/usr/share/datasets/fashion-mnist
PREFIX=${KT_DEPS_DIR:-/tmp/kt-deps}
# Debian's packages of the libraries the trainer and its tests link, and their runtime.
PKGS=(libcjson1 libcjson-dev libyaml-0-2 libyaml-dev zlib1g zlib1g-dev libzip4 libzip-dev
      libbz2-1.0 libspng0 libspng-dev libturbojpeg0 libturbojpeg0-dev libssl3 libssl-dev
      libopenblas0-pthread libopenblas-pthread-dev libgfortran5 libquadmath0
      libcmocka0 libcmocka-dev libhdf5-dev libaec-dev libcurl4 libcurl4-openssl-dev
      libnghttp2-14 librtmp1 libssh2-1 libpsl5 libldap-2.5-0 libsasl2-2 libbrotli1 libzstd1
      libidn2-0 libunistring2 libgssapi-krb5-2 libkrb5-3 libk5crypto3 libkrb5support0
      libkeyutils1 libcom-err2 libgnutls30 libhogweed6 libnettle8 libgmp10 libp11-kit0
      libtasn1-6 libffi8)
MA=x86_64-linux-gnu

bundle() {
    local stage
    stage=$(mktemp -d)
    trap 'rm -rf "$stage"' RETURN
    (cd "$stage" && apt-get download "${PKGS[@]}" >/dev/null 2>&1) ||
        { apt-get update -qq && (cd "$stage" && apt-get download "${PKGS[@]}" >/dev/null); } ||
        { echo "gpu-device: apt-get download ${PKGS[*]} failed" >&2; return 1; }
    mkdir -p "$stage/root" "$stage/prefix/include" "$stage/prefix/lib"
    for d in "$stage"/*.deb; do dpkg -x "$d" "$stage/root"; done
    local r=$stage/root p=$stage/prefix
    # Headers: the plain ones, the multiarch ones (openssl's configuration) and
    # OpenBLAS's (Debian reaches them through alternatives, which dpkg -x does not make).
    cp -a "$r/usr/include/." "$p/include/"
    rm -rf "$p/include/$MA"
    cp -a "$r/usr/include/$MA/." "$p/include/"
    rm -rf "$p/include/openblas-pthread"
    cp -a "$r/usr/include/$MA/openblas-pthread/." "$p/include/"
    # Libraries: every shared object and its links; OpenBLAS's, under its plain name.
    for d in "$r/usr/lib/$MA" "$r/lib/$MA"; do
        [[ -d $d ]] && find "$d" -maxdepth 1 -name '*.so*' -exec cp -a {} "$p/lib/" \;
    done
    cp -L "$r/usr/lib/$MA/openblas-pthread/libopenblas.so.0" "$p/lib/libopenblas.so.0"
    # The archives trainer.mk links libhdf5 from (HDF5_LIBS).
    cp -a "$r/usr/lib/$MA/libhdf5_serial.a" "$r/usr/lib/$MA/libsz.a" "$r/usr/lib/$MA/libaec.a" \
        "$p/lib/"
    ln -sf libopenblas.so.0 "$p/lib/libopenblas.so"
    # Links to absolute paths (zlib's) would point at the GPU machine's own files.
    local l
    for l in "$p"/lib/*; do
        [[ -L $l && $(readlink "$l") == /* ]] && ln -sf "$(basename "$(readlink "$l")")" "$l"
    done
    local f
    for f in cjson/cJSON.h yaml.h zlib.h zip.h zipconf.h spng.h turbojpeg.h openssl/evp.h \
             openssl/opensslconf.h cblas.h openblas_config.h cmocka.h hdf5/serial/hdf5.h \
             curl/curl.h; do
        [[ -e $p/include/$f ]] || { echo "gpu-device: $f missing from the bundle" >&2; return 1; }
    done
    for f in libcjson libyaml libz libzip libspng libturbojpeg libcrypto libcurl libopenblas \
             libcmocka \
             libgfortran.so.5 libquadmath.so.0 libhdf5_serial.a libsz.a libaec.a; do
        [[ $f == *.so.* || $f == *.a ]] || f=$f.so
        [[ -e $p/lib/$f ]] || { echo "gpu-device: $f missing from the bundle" >&2; return 1; }
    done
    mkdir -p "$DEV/fashion-mnist"
    tar -C "$p" -cJf "$DEV/deps.tar.xz" .
    cp "$DATA"/*-ubyte.gz "$DEV/fashion-mnist/" ||
        { echo "gpu-device: no Fashion-MNIST in $DATA (apt-get install dataset-fashion-mnist)" >&2; return 1; }
    echo "gpu-device: $DEV ready ($(du -sh "$DEV" | cut -f1)): carry it to the GPU machine and run" \
         "'bash trainer/gpu-device.sh run' there"
}

unpack() {
    [[ -f $DEV/deps.tar.xz ]] ||
        { echo "gpu-device: no $DEV/deps.tar.xz: run 'trainer/gpu-device.sh bundle' first and carry $DEV" >&2; return 1; }
    if [[ ! -f $PREFIX/.unpacked || $DEV/deps.tar.xz -nt $PREFIX/.unpacked ]]; then
        rm -rf "$PREFIX" && mkdir -p "$PREFIX" && tar -C "$PREFIX" -xJf "$DEV/deps.tar.xz" &&
            touch "$PREFIX/.unpacked" || return 1
    fi
    if ! ls "$DATA"/train-images-idx3-ubyte* >/dev/null 2>&1; then
        mkdir -p "$DATA" && cp "$DEV"/fashion-mnist/*.gz "$DATA/" || return 1
    fi
    export DEPS_PREFIX=$PREFIX
}

phase_env() {
    local tc
    {
        date -u
        nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1
        # its log, then the CUDA_HOME it found (the last line)
        tc=$(bash trainer/gpu-toolchain.sh 2>&1)
        echo "$tc"
        "$(tail -1 <<<"$tc")/bin/nvcc" --version 2>&1 | tail -2
        ${CXX:-g++} --version 2>&1 | head -1
        python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda,
                    "cudnn", torch.backends.cudnn.version(), torch.cuda.get_device_name(0))' 2>&1
        nproc
    } | tee "$OUT/env.txt"
}

# build_try LOG [VAR=VALUE..]: make GPU=1's trainer and test-gpu, output in $OUT/LOG, whose
# end is shown when it fails.
build_try() {
    local log=$OUT/$1
    shift
    make -j"$(nproc)" GPU=1 BUILD=build/gpu "$@" build/gpu/bin/kubetrain-trainer \
        build/gpu/san/tests/test-gpu >"$log" 2>&1 || { tail -40 "$log"; return 1; }
}

phase_build() {
    build_try build.log && { echo "build: ok"; return 0; }
    echo "build: failed with -Werror; once more with WERROR= (warnings kept in $OUT/build-nowerror.log)"
    export WERROR=
    build_try build-nowerror.log && { echo "build: ok without -Werror"; return 1; }
    # A compiler without ASan's runtime: test-gpu without the sanitizers, rather than none.
    echo "build: failed again; once more without the sanitizers (log in $OUT/build-nosan.log)"
    build_try build-nosan.log SANFLAGS="-O1 -g" &&
        echo "build: ok without -Werror and without the sanitizers"
    return 1
}

phase_test() {
    bash trainer/tests/test-gpu-build.sh 2>&1 | tee "$OUT/test-gpu-build.tap"
    grep -q '^not ok' "$OUT/test-gpu-build.tap" && return 1
    # where nvidia-smi lists a GPU, a trainer that found no CUDA device (a driver older
    # than the runtime, say) tested nothing: that is a failure, not a pass
    if nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
        grep -q -- '^ok .* - --device gpu trains on the device' "$OUT/test-gpu-build.tap" || {
            echo "test: nvidia-smi lists a GPU but the trainer found no CUDA device: the device's tests did not run"
            return 1
        }
    fi
}

phase_bench() {
    local py
    py=$(command -v python3) || return 1
    local json=$OUT/gpu-tutorial-cnn.json rc
    rm -f "$json"
    # straight into $OUT: rewritten after every run, it comes back from a call cut short
    PYTHONUNBUFFERED=1 make bench-gpu GPU_BENCH_PYTHON="$py" GPU_BENCH_OUT="$json" 2>&1 |
        tee "$OUT/bench.log"
    rc=${PIPESTATUS[0]}
    [[ -f $json ]] || { echo "bench: no JSON written (see above)"; return 1; }
    cp "$json" bench/results/
    return "$rc"
}

case ${1:-} in
    bundle) bundle ;;
    run)
        shift
        OUT=${OUT:-$DEV/out}
        mkdir -p "$OUT"
        unpack || exit 1
        phases=("$@")
        [[ $# -gt 0 ]] || phases=(env build test bench)
        failed=0
        for p in "${phases[@]}"; do
            echo "== $p ($(date -u +%T))"
            "phase_$p" || { failed=$((failed + 1)); echo "== $p: failed"; }
        done
        exit "$failed" ;;
    *) sed -n '2,/^set /p' "$0" | sed '$d' >&2; exit 2 ;;
esac
