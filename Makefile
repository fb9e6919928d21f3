# kubetrain — top-level build.
#
#   make          build the trainer and the operator (build/bin/)
#   make run      the main job: 2 local workers train tutorial-cnn on Fashion-MNIST
#   make test     unit, loopback and integration tiers, each program reporting TAP
#   make e2e      the end-to-end tier: the scenario suite on a node of real components
#   make bench    benchmarks side by side with their peers (JSON under bench/)
#   make lint     clang-format, shellcheck and line-length checks (CONTRIBUTING.md)
#
# Each component owns a fragment (trainer/trainer.mk, operator/operator.mk); sources
# are picked up by wildcard so adding a module needs no edit here.

CC       ?= cc
BUILD    ?= build
# WERROR= (empty) turns warnings back into warnings: for a compiler newer than the one
# the code is checked with, such as the GPU machine's (trainer/gpu-device.sh).
WERROR   ?= -Werror
WARN     := -Wall -Wextra $(WERROR) -Wshadow -Wstrict-prototypes -Wmissing-prototypes \
            -Wformat=2 -Wvla -Wpointer-arith -Wcast-qual -Wundef
CSTD     := -std=c11 -D_GNU_SOURCE
OPTFLAGS ?= -O3 -g
SANFLAGS := -O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all
DEPFLAGS  = -MMD -MP

# Machines keep downloads and Go-built Kubernetes binaries here between runs.
KT_CACHE ?= $(HOME)/.cache/kubetrain
export KT_CACHE

# C compilations go through ccache where the machine has it (make deps installs it), with
# its cache in $(KT_CACHE)/ccache, keyed on the preprocessed source and the flags but not
# on the checkout's directory: a clean clone on a machine that compiled the same sources
# before (CI's) compiles none of them again. CCACHE= (empty) compiles without it.
CCACHE ?= $(shell command -v ccache 2>/dev/null)
ifneq ($(CCACHE),)
CC := $(CCACHE) $(CC)
export CCACHE_DIR ?= $(KT_CACHE)/ccache
export CCACHE_BASEDIR := $(CURDIR)
export CCACHE_NOHASHDIR := 1
endif
DEPS_APT += ccache

# Targets that run tests build what they run first with `$(MAKE) $(ALL_CORES) TARGETS`,
# NPROC compilations at once, then run the tests as they say. $(MAKE) stays written out
# in those recipes: make recognises a sub-make (and passes -n on to it) only so.
NPROC := $(shell nproc 2>/dev/null || echo 1)
ALL_CORES := --no-print-directory -j$(NPROC)

# Test objects are intermediate files to make; keep them so a rerun rebuilds nothing.
.SECONDARY:

.PHONY: all deps run test bench clean
all: deps

include trainer/trainer.mk
-include operator/operator.mk
include docker/docker.mk
include e2e/e2e.mk
include charts/charts.mk
include examples/examples.mk
include python/python.mk

# The main job starts afresh each time; RESUME=1 keeps build/run/checkpoints, so a run
# stopped with Ctrl-C (which saves a checkpoint) continues where it stopped.
run: all
	@if [ "$(RESUME)" != 1 ]; then rm -rf $(BUILD)/run; fi
	@mkdir -p $(BUILD)/run
	$(TRAINER_BIN) launch --workers 2 --checkpoint-dir $(BUILD)/run/checkpoints \
	    --metrics-file $(BUILD)/run/metrics.jsonl $(RUN_ARGS)

# Every test program prints TAP; .ci/taprun runs them and prints the closing tally.
# What they need is built first, NPROC compilations at once (test-build); then the
# programs in TEST_JOBS lanes (default: one per core and one more; TEST_JOBS=1 runs them
# one after another), as they share nothing (each its own cluster, ports and scratch
# directories) and many of them spend much of their time waiting on a cluster, a peer or
# a deadline (taprun's "cpu" beside each time), so that one more keeps the cores busy
# while others wait. Those that mostly wait (TEST_WAITING: the api-level cluster tests,
# a fifth to two fifths of their time in CPU, and test-remote-data.sh's servers and
# timeouts) take half a lane each, two beside one that computes. The slowest (TEST_FIRST,
# longest first) start first, so that the last minutes are not one long program alone.
# make e2e's programs (E2E_PROGRAMS, e2e/e2e.mk) are the end-to-end tier: not make test's.
TEST_PROGRAMS += .ci/tests/test-taprun.sh
TEST_PROGRAMS := $(filter-out $(E2E_PROGRAMS),$(TEST_PROGRAMS))
TEST_JOBS ?= $(shell echo $$(($(NPROC) + 1)))
TEST_FIRST := charts/tests/test-chart.sh trainer/tests/test-recovery.sh \
              trainer/tests/test-keras-export.sh operator/tests/integration/test-resilience.sh \
              examples/tensorflow/test-local.sh trainer/tests/test-distributed.sh \
              python/tests/test-python.sh trainer/tests/test-gpu-emul-trainer.sh \
              trainer/tests/test-remote-data.sh operator/tests/integration/test-lifecycle.sh \
              charts/tests/test-chart-kueue.sh e2e/tests/test-kueue.sh \
              operator/tests/integration/test-gang.sh trainer/tests/test-keras-batchnorm.sh \
              trainer/tests/test-elastic.sh trainer/tests/test-keras-finetune.sh \
              trainer/tests/test-keras-colour.sh trainer/tests/test-dnsprobe.sh
TEST_WAITING := $(filter operator/tests/integration/%.sh charts/tests/%.sh e2e/tests/test-crd.sh \
                  e2e/tests/test-cluster.sh e2e/tests/test-kueue.sh \
                  trainer/tests/test-remote-data.sh,$(TEST_PROGRAMS))
# The Go programs the tests run (Kubernetes, CoreDNS, kwok, helm, SeaweedFS, Kueue, ...) are
# built first, one after another, where the machine cache lacks them (.ci/warm-cache.sh's
# go lane; on a fresh machine about 50 CPU-minutes, docs/testing.md): a test that waits
# for one meanwhile would start its cluster together with every other test waiting for
# it. Each step is named when it built something or failed.
test:
	@$(MAKE) $(ALL_CORES) test-build
	@bash .ci/warm-cache.sh go | grep -v ' took 0s (cpu 0s)$$' || true
	@TAPRUN_JOBS=$(TEST_JOBS) TAPRUN_WAITING="$(TEST_WAITING)" bash .ci/taprun \
	    $(filter $(TEST_PROGRAMS),$(TEST_FIRST)) $(filter-out $(TEST_FIRST),$(TEST_PROGRAMS))
test-build: all $(filter $(BUILD)/%,$(TEST_PROGRAMS))
.PHONY: test-build

bench: all $(BENCH_TARGETS)

clean:
	rm -rf $(BUILD)

# Dependency files of the objects; build/e2e is left out: a running cluster's node keeps
# whole image filesystems there (containerd snapshots), with files such as invoke-rc.d.
-include $(shell find $(BUILD) -path $(BUILD)/e2e -prune -o -name '*.d' -type f -print 2>/dev/null)

# --- bench-report: the benchmark report ---------------------------------------------
# bench/RESULTS.md and bench/plots/*.png from the committed bench/results/*.json; runs
# no benchmark. matplotlib comes from a venv under $(KT_CACHE), made on first use.
bench-report:
	@py=$$(bash bench/pyvenv.sh venv-report) && "$$py" bench/report.py
.PHONY: bench-report

# docs/observability.md's TensorBoard screenshot (bench/plots/tensorboard.png) from a real 2-worker
# run; needs Debian's chromium, not installed by `make` (optional, for the docs only).
tensorboard-screenshot: $(TRAINER_BIN)
	bash bench/tensorboard-screenshot.sh $(TRAINER_BIN) bench/plots/tensorboard.png
.PHONY: tensorboard-screenshot

# --- soak: chaos trials, not part of `make test` (e2e/soak/soak.py) ---------------------
# make soak                      the full counts (about 15 min on 2 cores)
# make soak SOAK_SCALE=0.1       a tenth of every count; SOAK_KINDS=trainer-kill,... picks kinds
# make soak SOAK_OUT=bench/results/soak.json   records the table (default: build/soak/soak.json)
SOAK_OUT ?= $(BUILD)/soak/soak.json
soak: $(TRAINER_BIN) $(OPERATOR_SAN)
	@python3 e2e/soak/soak.py --trainer $(TRAINER_BIN) --operator $(OPERATOR_SAN) \
	    --out $(SOAK_OUT)
.PHONY: soak

# Hardening targets: make fuzz, make valgrind (docs/hardening.md).
include .ci/fuzz.mk
include .ci/valgrind.mk
# make lint, make format (CONTRIBUTING.md).
include .ci/lint.mk

# The stamp is keyed on the package list, so adding a package re-runs the check; this
# comes after every include, for the list to be complete when the rule is read.
# DEPS_PREFIX=DIR: a machine without apt (the GPU machine, trainer/gpu-device.sh) takes
# the trainer's libraries and headers from DIR/lib and DIR/include instead.
ifeq ($(DEPS_PREFIX),)
deps: $(BUILD)/.deps-$(shell echo $(DEPS_APT) | cksum | cut -d' ' -f1)
else
deps:
endif
$(BUILD)/.deps-%:
	@mkdir -p $(BUILD)
	@bash .ci/deps.sh $(DEPS_APT)
	@touch $@
