# End-to-end harness: the Kubernetes control plane made of real components (e2e/cluster/)
# and the shell tests that use it (e2e/tests/). Included from the top-level Makefile.
#
#   make k8s-binaries     build kube-apiserver, kube-controller-manager and kubectl once
#                         per machine into $(KT_CACHE)/k8s/<version>/bin (Go >= the version
#                         in e2e/cluster/k8sbuild/go.mod must be on PATH)
#   make cluster-up-api   etcd + kube-apiserver + kube-controller-manager on 127.0.0.1;
#                         admin kubeconfig in e2e/cluster/.run/kubeconfig
#   make cluster-up-full  the api level plus kube-scheduler, kube-proxy, a kubelet on its
#                         own containerd with the CNI bridge, CoreDNS and hostPath volumes:
#                         a single node that runs pods (root; see e2e/cluster/README.md)
#   make cluster-images   make images, then import the base, operator and trainer images
#                         into the full-level node's containerd (e2e/cluster/load-image.sh)
#   make kueue            build the Kueue manager once per machine into
#                         $(KT_CACHE)/kueue/<version>/bin (e2e/cluster/build-kueue.sh)
#   make cluster-up-kueue Kueue on the running cluster (e2e/cluster/kueue-up.sh; root)
#   make cluster-down     stop what cluster-up-* started and remove e2e/cluster/.run
#   make e2e              the end-to-end tier: the full-level harness's test, then a fresh
#                         full-level cluster (own run directory, build/e2e/suite/run),
#                         make images image-tensorflow, load them, the scenario suite
#                         (e2e/suite.sh), down; the suite's pass/fail table, then the tally
#   make e2e CLUSTER=kind the same on a kind cluster from e2e/cluster/kind.yaml (kind load
#                         docker-image, kind delete cluster at the end); needs kind and Docker
#   make e2e-suite        only the suite, against the cluster $KUBECONFIG names (the images
#                         already there; KT_PROVIDER=kind when it is a kind cluster)
#
# KUBEBUILDER_ASSETS, when set to a directory holding those binaries, is used instead
# of building them (the envtest convention).

# etcd for the api level; openssl makes the cluster's certificates; curl and iproute2 (ss)
# probe health and free ports; util-linux gives setsid, flock and unshare; jq reads API
# objects (the suite, kueue-up.sh's webhook configurations).
DEPS_APT += etcd-server openssl curl iproute2 util-linux jq
# The full level's node: Debian's containerd and runc, the CNI plugins (bridge, host-local,
# portmap, firewall, loopback), iptables for kube-proxy and the firewall plugin, conntrack
# for kube-proxy's cleanup of UDP flows, gcc (with libc6-dev) for the static pause binary.
DEPS_APT += containerd runc containernetworking-plugins iptables conntrack gcc libc6-dev

# The harness's tests that need no node (the api level, the kind config) are part of
# make test; E2E_PROGRAMS, those that build and run the images or run pods on a node of
# real components, are the end-to-end tier of make e2e (the top Makefile leaves them out
# of make test).
E2E_TESTS := $(sort $(wildcard e2e/tests/test-*.sh))
E2E_PROGRAMS := trainer/tests/test-trainer-image.sh e2e/tests/test-cluster-full.sh \
                e2e/tests/test-scenarios.sh
TEST_PROGRAMS += $(E2E_TESTS)

.PHONY: k8s-binaries k8s-binaries-full cluster-up-api cluster-up-full cluster-images cluster-down \
        kueue cluster-up-kueue \
        test-e2e-api e2e e2e-suite
k8s-binaries: deps
	@bash e2e/cluster/build-k8s.sh api
k8s-binaries-full: deps
	@bash e2e/cluster/build-k8s.sh full
	@bash e2e/cluster/build-coredns.sh
kueue: deps
	@bash e2e/cluster/build-kueue.sh
cluster-up-kueue: deps
	@bash e2e/cluster/kueue-up.sh
cluster-up-api: deps
	@bash e2e/cluster/up.sh api
cluster-up-full: deps
	@bash e2e/cluster/up.sh full
cluster-images: images
	@bash e2e/cluster/load-image.sh $(BASE) $(IMAGE_PREFIX)/operator:$(VERSION) \
	    $(IMAGE_PREFIX)/trainer:$(VERSION)
cluster-down:
	@bash e2e/cluster/down.sh
# Only the harness's own tests, without the rest of `make test`.
test-e2e-api: deps
	@bash .ci/taprun $(filter-out $(E2E_PROGRAMS),$(E2E_TESTS))

# End to end. On this machine's own cluster (CLUSTER=full) it is a test tier of its own:
# the binaries (test-trainer-image.sh compares the image with build/bin's trainer), then
# the image test, the full-level harness and the scenario suite through .ci/taprun, with
# their own tally (each builds what it needs and skips, saying why, where no node can
# run). On kind the
# preconditions are checked first, so that a machine without kind stops at once with the
# reason instead of after building images.
CLUSTER ?= full
ifeq ($(CLUSTER),full)
e2e:
	@$(MAKE) $(ALL_CORES) all
	@bash .ci/taprun $(E2E_PROGRAMS)
else
e2e:
	@bash e2e/run.sh check $(CLUSTER)
	@$(MAKE) --no-print-directory deps images image-tensorflow helm
	@bash e2e/run.sh $(CLUSTER) $(IMAGE_PREFIX)/operator:$(VERSION) \
	    $(IMAGE_PREFIX)/trainer:$(VERSION) $(IMAGE_PREFIX)/tensorflow:$(VERSION)
endif
e2e-suite:
	@KT_OPERATOR_IMAGE=$(IMAGE_PREFIX)/operator:$(VERSION) \
	    KT_TRAINER_IMAGE=$(IMAGE_PREFIX)/trainer:$(VERSION) \
	    KT_TF_IMAGE=$(IMAGE_PREFIX)/tensorflow:$(VERSION) \
	    bash e2e/suite.sh
