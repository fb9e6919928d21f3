# The CPU trainer: kubetrain-trainer with OpenBLAS, and Fashion-MNIST at /data so the
# example job needs no download.  docker build -f docker/trainer.Dockerfile .
# BASE is any Debian bookworm image; `make images` passes a locally made one.
ARG BASE=debian:bookworm-slim

FROM ${BASE} AS build
RUN apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        gcc libc6-dev make libcjson-dev libyaml-dev zlib1g-dev libopenblas-dev libssl-dev \
        dataset-fashion-mnist >/dev/null
WORKDIR /src
COPY Makefile VERSION ./
COPY .ci/deps.sh .ci/deps.sh
COPY trainer/ trainer/
RUN make DEPS_APT= build/bin/kubetrain-trainer && strip build/bin/kubetrain-trainer

FROM ${BASE}
RUN apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        libopenblas0-pthread libcjson1 libyaml-0-2 zlib1g libssl3 >/dev/null \
    && rm -rf /var/lib/apt/lists/* /var/cache/apt/* /usr/share/doc/* /usr/share/man/*
COPY --from=build /src/build/bin/kubetrain-trainer /usr/local/bin/kubetrain-trainer
COPY --from=build /usr/share/datasets/fashion-mnist/ /data/
# The trainer never needs root; 65532 is the conventional "nonroot" id.
USER 65532:65532
ENV KUBETRAIN_DATA_DIR=/data
ENTRYPOINT ["/usr/local/bin/kubetrain-trainer"]
CMD ["train"]
