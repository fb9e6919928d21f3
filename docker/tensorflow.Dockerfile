# TensorFlow for users' own programs (docs/tensorflow.md): Python 3 with tensorflow-cpu
# and tf-keras (Keras 2, the tutorials' Keras: TF_USE_LEGACY_KERAS=1 is set) and the
# kubetrain package (python/, with its kubetrain-auto.pth: every Keras fit() under a
# TrainingJob reports its progress) in /opt/venv, Fashion-MNIST at /data and the examples
# (examples/tensorflow) in /opt/kubetrain/examples. Runs as uid 65532 like the trainer images.
#   make image-tensorflow      (tags kubetrain/tensorflow:$(cat VERSION); skipped when
#                               an image of the same inputs exists)
# By hand: docker/.build-ca.crt must exist (make copies the host's CA bundle there; an
# empty file means pip uses the base image's bundle):
#   : > docker/.build-ca.crt; docker build -f docker/tensorflow.Dockerfile -t IMAGE .
# BASE is any Debian bookworm image (make passes the locally made one). TF_VERSION pins
# both wheels: tf-keras's version follows TensorFlow's.
ARG BASE=debian:bookworm-slim

FROM ${BASE} AS build
ARG TF_VERSION=2.21.0
RUN apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        python3 python3-venv ca-certificates dataset-fashion-mnist >/dev/null
# The building machine's CA bundle, for pip behind a TLS-inspecting proxy; this stage
# only. tf-keras is installed without its dependencies: it names `tensorflow`, the
# CUDA-enabled wheel, which would replace tensorflow-cpu's files and add 0.6 GB. The C++
# headers (0.3 GB, for building custom ops) are dropped. The kubetrain package last (its
# sources change more often than TensorFlow's version), from a copy of python/ that pip
# builds in (with setuptools from PyPI; prometheus_client its one dependency); the check
# says that every Python start runs its kubetrain-auto.pth.
COPY docker/.build-ca.crt /tmp/build-ca.crt
RUN if [ -s /tmp/build-ca.crt ]; then export PIP_CERT=/tmp/build-ca.crt; fi; \
    python3 -m venv /opt/venv \
    && /opt/venv/bin/pip install --quiet --no-cache-dir "tensorflow-cpu==${TF_VERSION}" \
    && /opt/venv/bin/pip install --quiet --no-cache-dir --no-deps "tf-keras==${TF_VERSION}" \
    && /opt/venv/bin/python -c 'import tensorflow, tf_keras' \
    && rm -rf /opt/venv/lib/python3*/site-packages/tensorflow/include
COPY python/pyproject.toml python/setup.py /tmp/kubetrain-python/
COPY python/src /tmp/kubetrain-python/src
RUN if [ -s /tmp/build-ca.crt ]; then export PIP_CERT=/tmp/build-ca.crt; fi; \
    /opt/venv/bin/pip install --quiet --no-cache-dir /tmp/kubetrain-python \
    && /opt/venv/bin/python -c \
       'import sys, kubetrain; assert "_kubetrain_auto" in sys.modules, "no kubetrain-auto.pth"'

FROM ${BASE}
# The venv's python is Debian's python3 of the same release; ca-certificates for
# programs that download.
RUN apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        python3 ca-certificates >/dev/null \
    && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin \
    && groupadd -g 65532 nonroot \
    && useradd -u 65532 -g 65532 -d /home/nonroot -m -s /usr/sbin/nologin nonroot
COPY --from=build /opt/venv /opt/venv
COPY --from=build /usr/share/datasets/fashion-mnist /data
COPY examples/tensorflow/*.py /opt/kubetrain/examples/
# Keras 2 for every program run here, as the tutorials expect (TensorFlow >= 2.16
# defaults to Keras 3, whose fit() rejects MultiWorkerMirroredStrategy's per-replica
# batches and ParameterServerStrategy); a program may set it to 0 for Keras 3.
ENV PATH=/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    TF_USE_LEGACY_KERAS=1 KUBETRAIN_DATA_DIR=/data PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
USER 65532:65532
WORKDIR /opt/kubetrain/examples
CMD ["python3", "mwms.py"]
