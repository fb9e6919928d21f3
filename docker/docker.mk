# Images: `make images` builds the operator and the CPU trainer image, tagged with
# VERSION, on a locally made bookworm base (docker/base.sh) unless BASE names another.
# `make images GPU=1` adds the CUDA trainer (docker/trainer-cuda.Dockerfile), on the same
# base: its CUDA toolchain and libraries are NVIDIA's wheels, installed in the build.
VERSION      := $(shell cat VERSION)
BASE         ?= kubetrain/base:bookworm
IMAGE_PREFIX ?= kubetrain

.PHONY: images image-base image-operator image-trainer image-trainer-cuda
images: image-operator image-trainer $(if $(GPU),image-trainer-cuda)

image-base:
	@bash docker/dockerd.sh
	@if [ "$(BASE)" = "kubetrain/base:bookworm" ]; then bash docker/base.sh $(BASE); fi

image-operator: image-base
	docker build -q -f docker/operator.Dockerfile --build-arg BASE=$(BASE) \
	    -t $(IMAGE_PREFIX)/operator:$(VERSION) .

image-trainer: image-base
	docker build -q -f docker/trainer.Dockerfile --build-arg BASE=$(BASE) \
	    -t $(IMAGE_PREFIX)/trainer:$(VERSION) .

# The CUDA build stage installs NVIDIA's wheels with pip, so it trusts what this machine
# trusts: the host's CA bundle goes into the build context (docker/.build-ca.crt, not
# committed) for that stage only; the runtime image does not keep it.
HOST_CA_BUNDLE ?= /etc/ssl/certs/ca-certificates.crt
image-trainer-cuda: image-base
	@if [ -r $(HOST_CA_BUNDLE) ]; then cp $(HOST_CA_BUNDLE) docker/.build-ca.crt; \
	 else : > docker/.build-ca.crt; fi
	docker build -q -f docker/trainer-cuda.Dockerfile --build-arg BASE=$(BASE) \
	    -t $(IMAGE_PREFIX)/trainer-cuda:$(VERSION) .
