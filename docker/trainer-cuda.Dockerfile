# The GPU trainer: kubetrain-trainer built with `make GPU=1` (cuDNN convolutions, cuBLAS
# dense layers, NCCL for the collective), and Fashion-MNIST at /data like the CPU image.
#   docker build -f docker/trainer-cuda.Dockerfile --build-arg BASE=kubetrain/base:bookworm \
#       -t kubetrain/trainer-cuda:$(cat VERSION) .
# BASE is any Debian bookworm image (`make images GPU=1` passes the locally made one).
# The CUDA toolchain and libraries are NVIDIA's wheels from the Python package index,
# installed in the build stage by trainer/gpu-toolchain.sh exactly as on a developer's
# machine; no CUDA base image is needed. Like the CPU image, the runtime is the binary,
# exactly the shared libraries it loads (plus the cuDNN engine libraries cuDNN opens at
# run time, which ldd cannot see) and the data: no shell, no package manager. The
# driver's libcuda.so.1 comes from the node: the NVIDIA container runtime mounts it.
ARG BASE=debian:bookworm-slim

FROM ${BASE} AS build
RUN apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        gcc g++ libc6-dev make libcjson-dev libyaml-dev zlib1g-dev libzip-dev libspng-dev \
        libturbojpeg0-dev libopenblas-dev libhdf5-dev libaec-dev libssl-dev \
        libcurl4-openssl-dev python3 \
        python3-venv ca-certificates dataset-fashion-mnist >/dev/null
WORKDIR /src
COPY . .
# The wheels go to /opt/kubetrain/cuda; the binary's rpath names that tree, and the
# runtime keeps it at the same path.
ENV KT_CACHE=/opt/kubetrain
# docker/.build-ca.crt: the building machine's CA bundle (docker.mk copies it), for pip
# behind a TLS-inspecting proxy; empty or absent, pip uses the base image's bundle.
RUN if [ -s docker/.build-ca.crt ]; then export PIP_CERT=/src/docker/.build-ca.crt; fi; \
    make GPU=1 DEPS_APT= BUILD=build/gpu build/gpu/bin/kubetrain-trainer \
    && strip build/gpu/bin/kubetrain-trainer
RUN set -e; lib=$(bash trainer/gpu-toolchain.sh)/lib; \
    mkdir -p /rootfs/usr/local/bin /rootfs/etc/ssl/certs /rootfs/tmp "/rootfs$lib"; \
    cp build/gpu/bin/kubetrain-trainer /rootfs/usr/local/bin/; \
    cp /etc/ssl/certs/ca-certificates.crt /rootfs/etc/ssl/certs/; \
    ldd build/gpu/bin/kubetrain-trainer | grep -o '/[^ ]*' | sort -u \
        | xargs -I{} cp --parents -L {} /rootfs/; \
    for f in "$lib"/libcudnn*.so.* "$lib"/libnvrtc*.so* "$lib"/libnvJitLink*.so*; do \
        if [ -e "$f" ]; then cp -L "$f" "/rootfs$lib/"; fi; \
    done; \
    cp -r /usr/share/datasets/fashion-mnist /rootfs/data; \
    chmod 1777 /rootfs/tmp; \
    echo 'nonroot:x:65532:65532::/nonexistent:/sbin/nologin' > /rootfs/etc/passwd; \
    echo 'nonroot:x:65532:' > /rootfs/etc/group

FROM scratch
COPY --from=build /rootfs/ /
# The operator runs trainer pods as uid/gid 65532 (the conventional "nonroot") and calls
# the binary by name. NVIDIA_DRIVER_CAPABILITIES asks the container runtime for the
# compute libraries of the driver.
USER 65532:65532
ENV PATH=/usr/local/bin KUBETRAIN_DATA_DIR=/data NVIDIA_DRIVER_CAPABILITIES=compute,utility
ENTRYPOINT ["/usr/local/bin/kubetrain-trainer"]
CMD ["train"]
