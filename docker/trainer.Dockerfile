# The CPU trainer: kubetrain-trainer with OpenBLAS, and Fashion-MNIST at /data so the
# example job needs no download.  docker build -f docker/trainer.Dockerfile .
# BASE is any Debian bookworm image; `make images` passes a locally made one.
# The runtime is the binary, exactly the shared libraries it loads and the data, like
# the operator's: no shell, no package manager (less to patch; under half the size of a
# bookworm runtime).
ARG BASE=debian:bookworm-slim

FROM ${BASE} AS build
RUN apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        gcc libc6-dev make libcjson-dev libyaml-dev zlib1g-dev libzip-dev libspng-dev \
        libturbojpeg0-dev libopenblas-dev libhdf5-dev libaec-dev libssl-dev \
        libcurl4-openssl-dev ca-certificates dataset-fashion-mnist >/dev/null
WORKDIR /src
# The whole tree (.dockerignore keeps build output out): the Makefile includes every
# component's fragment.
COPY . .
RUN make DEPS_APT= build/bin/kubetrain-trainer && strip build/bin/kubetrain-trainer
# One tree to copy as a whole: the binary, its libraries (ldd lists them transitively,
# OpenBLAS's libgfortran included; -L copies the file an alternatives link names), the
# loader, the data, a writable /tmp, the nonroot user and the CA bundle (https:// and
# s3:// sources, remote.c). glibc resolves names itself (files and dns are built into libc
# since 2.34), so peers' DNS names need no NSS files.
RUN mkdir -p /rootfs/usr/local/bin /rootfs/etc/ssl/certs /rootfs/tmp \
    && cp build/bin/kubetrain-trainer /rootfs/usr/local/bin/ \
    && cp /etc/ssl/certs/ca-certificates.crt /rootfs/etc/ssl/certs/ \
    && ldd build/bin/kubetrain-trainer | grep -o '/[^ ]*' | sort -u \
       | xargs -I{} cp --parents -L {} /rootfs/ \
    && cp -r /usr/share/datasets/fashion-mnist /rootfs/data \
    && chmod 1777 /rootfs/tmp \
    && echo 'nonroot:x:65532:65532::/nonexistent:/sbin/nologin' > /rootfs/etc/passwd \
    && echo 'nonroot:x:65532:' > /rootfs/etc/group

FROM scratch
COPY --from=build /rootfs/ /
# The operator runs trainer pods as uid/gid 65532 (the conventional "nonroot") and calls
# the binary by name, so PATH must find it.
USER 65532:65532
ENV PATH=/usr/local/bin KUBETRAIN_DATA_DIR=/data
ENTRYPOINT ["/usr/local/bin/kubetrain-trainer"]
CMD ["train"]
