# Images: `make images` builds the operator and the CPU trainer image, tagged with
# VERSION, on a locally made bookworm base (docker/base.sh) unless BASE names another.
# `make images GPU=1` adds the CUDA trainer (docker/trainer-cuda.Dockerfile), on the same
# base: its CUDA toolchain and libraries are NVIDIA's wheels, installed in the build.
VERSION      := $(shell cat VERSION)
BASE         ?= kubetrain/base:bookworm
IMAGE_PREFIX ?= kubetrain

# The builds' RUN steps use the host's network (--network host): apt and pip then work
# whatever Docker's bridge needs (IPv4 forwarding, which the e2e cluster's down.sh puts
# back to what it found, and Docker's NAT rules). The images themselves are unaffected.
DOCKER_BUILD := docker build -q --network host

.PHONY: images image-base image-operator image-trainer image-trainer-cuda image-tensorflow
images: image-operator image-trainer $(if $(GPU),image-trainer-cuda)

image-base:
	@bash docker/dockerd.sh
	@if [ "$(BASE)" = "kubetrain/base:bookworm" ]; then bash docker/base.sh $(BASE); fi

image-operator: image-base
	$(DOCKER_BUILD) -f docker/operator.Dockerfile --build-arg BASE=$(BASE) \
	    -t $(IMAGE_PREFIX)/operator:$(VERSION) .

image-trainer: image-base
	$(DOCKER_BUILD) -f docker/trainer.Dockerfile --build-arg BASE=$(BASE) \
	    -t $(IMAGE_PREFIX)/trainer:$(VERSION) .

# The CUDA build stage installs NVIDIA's wheels with pip, so it trusts what this machine
# trusts: the host's CA bundle goes into the build context (docker/.build-ca.crt, not
# committed) for that stage only; the runtime image does not keep it.
HOST_CA_BUNDLE ?= /etc/ssl/certs/ca-certificates.crt
image-trainer-cuda: image-base
	@if [ -r $(HOST_CA_BUNDLE) ]; then cp $(HOST_CA_BUNDLE) docker/.build-ca.crt; \
	 else : > docker/.build-ca.crt; fi
	$(DOCKER_BUILD) -f docker/trainer-cuda.Dockerfile --build-arg BASE=$(BASE) \
	    -t $(IMAGE_PREFIX)/trainer-cuda:$(VERSION) .

# The image for users' own TensorFlow programs (docs/tensorflow.md): about 1 GB from PyPI,
# minutes to build, so not part of `make images`. Its label kubetrain.dev/inputs hashes
# what goes into it (the Dockerfile, the examples, the kubetrain package's sources,
# TF_VERSION and the base image's ID); an image of this VERSION with the same hash is kept
# (no image of it yet, as on a fresh machine, is not an error: it is built). pip trusts
# the host's CA bundle, as for image-trainer-cuda.
TF_VERSION ?= 2.21.0
TF_IMAGE_INPUTS := docker/tensorflow.Dockerfile $(sort $(wildcard examples/tensorflow/*.py)) \
    python/pyproject.toml python/setup.py \
    $(sort $(wildcard python/src/*.py python/src/*.pth python/src/kubetrain/*.py))
image-tensorflow: image-base
	@set -e; img=$(IMAGE_PREFIX)/tensorflow:$(VERSION); \
	 hash=$$({ cat $(TF_IMAGE_INPUTS); echo $(TF_VERSION); \
	           docker image inspect -f '{{.Id}}' $(BASE); } | sha256sum | cut -c1-16); \
	 have=$$(docker image inspect \
	         -f '{{index .Config.Labels "kubetrain.dev/inputs"}}' $$img 2>/dev/null || true); \
	 if [ "$$have" = "$$hash" ]; then \
	   echo "$$img is up to date (inputs $$hash)"; exit 0; fi; \
	 if [ -r $(HOST_CA_BUNDLE) ]; then cp $(HOST_CA_BUNDLE) docker/.build-ca.crt; \
	 else : > docker/.build-ca.crt; fi; \
	 echo "building $$img (inputs $$hash)"; \
	 $(DOCKER_BUILD) -f docker/tensorflow.Dockerfile --build-arg BASE=$(BASE) \
	     --build-arg TF_VERSION=$(TF_VERSION) --label kubetrain.dev/inputs=$$hash -t $$img .
