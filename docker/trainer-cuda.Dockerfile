# The GPU trainer: kubetrain-trainer built with `make GPU=1` (cuBLAS, cuDNN, NCCL for the
# collective), on NVIDIA's CUDA runtime image with cuDNN (which also carries libnccl2),
# and Fashion-MNIST at /data like the CPU image.
#   docker build -f docker/trainer-cuda.Dockerfile -t kubetrain/trainer-cuda:$(cat VERSION) .
# CUDA_DEVEL and CUDA_RUNTIME must be the devel and runtime flavours of one CUDA release
# and distribution; DATA_BASE is any Debian image (the dataset is a Debian package).
ARG CUDA_DEVEL=nvidia/cuda:12.6.3-cudnn-devel-ubuntu24.04
ARG CUDA_RUNTIME=nvidia/cuda:12.6.3-cudnn-runtime-ubuntu24.04
ARG DATA_BASE=debian:bookworm-slim

FROM ${DATA_BASE} AS data
RUN apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        dataset-fashion-mnist >/dev/null

FROM ${CUDA_DEVEL} AS build
RUN apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        gcc libc6-dev make libcjson-dev libyaml-dev zlib1g-dev libopenblas-dev libssl-dev >/dev/null
WORKDIR /src
COPY . .
RUN make GPU=1 DEPS_APT= build/bin/kubetrain-trainer && strip build/bin/kubetrain-trainer

FROM ${CUDA_RUNTIME}
# libssl3 was renamed libssl3t64 in Ubuntu 24.04; take whichever this release has.
RUN apt-get update -qq \
    && ssl=$(apt-cache show libssl3t64 >/dev/null 2>&1 && echo libssl3t64 || echo libssl3) \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        libopenblas0-pthread libcjson1 libyaml-0-2 zlib1g "$ssl" >/dev/null \
    && rm -rf /var/lib/apt/lists/* /var/cache/apt/* /var/log/apt /var/log/dpkg.log \
              /usr/share/doc/* /usr/share/man/*
COPY --from=build /src/build/bin/kubetrain-trainer /usr/local/bin/kubetrain-trainer
COPY --from=data /usr/share/datasets/fashion-mnist/ /data/
# The operator runs trainer pods as uid/gid 65532 (the conventional "nonroot").
USER 65532:65532
ENV KUBETRAIN_DATA_DIR=/data
ENTRYPOINT ["/usr/local/bin/kubetrain-trainer"]
CMD ["train"]
