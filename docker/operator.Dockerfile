# The operator: kubetrain-operator and exactly the shared libraries it loads, on a
# runtime without a package manager's worth of tools.  docker build -f docker/operator.Dockerfile .
ARG BASE=debian:bookworm-slim

FROM ${BASE} AS build
RUN apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        gcc libc6-dev make libcurl4-openssl-dev libcjson-dev libyaml-dev libssl-dev ca-certificates >/dev/null
WORKDIR /src
# The whole tree (.dockerignore keeps build output out): the Makefile includes every
# component's fragment.
COPY . .
RUN make DEPS_APT= build/bin/kubetrain-operator && strip build/bin/kubetrain-operator
# Gather the binary's libraries (and the loader) into one tree to copy as a whole.
RUN mkdir -p /rootfs/usr/local/bin /rootfs/etc/ssl/certs \
    && cp build/bin/kubetrain-operator /rootfs/usr/local/bin/ \
    && cp /etc/ssl/certs/ca-certificates.crt /rootfs/etc/ssl/certs/ \
    && ldd build/bin/kubetrain-operator | grep -o '/[^ ]*' | sort -u \
       | xargs -I{} cp --parents -L {} /rootfs/ \
    && echo 'nonroot:x:65532:65532::/nonexistent:/sbin/nologin' > /rootfs/etc/passwd \
    && echo 'nonroot:x:65532:' > /rootfs/etc/group

FROM scratch
COPY --from=build /rootfs/ /
USER 65532:65532
ENV PATH=/usr/local/bin
ENTRYPOINT ["/usr/local/bin/kubetrain-operator"]
