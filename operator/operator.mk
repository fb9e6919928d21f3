# The operator: kubetrain-operator and its tests (curl and python3 for the shell test).
DEPS_APT += libcurl4-openssl-dev libcjson-dev libyaml-dev libssl-dev libcmocka-dev \
            curl python3

OPERATOR_BIN   := $(BUILD)/bin/kubetrain-operator
OPERATOR_SAN   := $(BUILD)/san/bin/kubetrain-operator
OPERATOR_LIBS  := -lcurl -lcjson -lyaml -lcrypto -lpthread -lm
# The version --version prints and the default trainer image's tag: the VERSION file at
# the top, which also tags the images (options.c, main.c).
OPERATOR_VERSION := $(shell cat VERSION)
OPERATOR_INC   := -Ioperator/src -DOPERATOR_VERSION='"$(OPERATOR_VERSION)"'

OPERATOR_SRCS  := $(filter-out operator/src/main.c,$(wildcard operator/src/*.c))
OPERATOR_OBJS  := $(OPERATOR_SRCS:%.c=$(BUILD)/opt/%.o)
OPERATOR_SOBJS := $(OPERATOR_SRCS:%.c=$(BUILD)/san/%.o)
# Test support code (a fake API server) shared by the unit tests.
OPERATOR_TSUPP := $(patsubst %.c,$(BUILD)/san/%.o,$(wildcard operator/tests/support/*.c))
OPERATOR_TESTS := $(patsubst operator/tests/%.c,$(BUILD)/san/tests/%,\
                  $(wildcard operator/tests/test-*.c))

all: $(OPERATOR_BIN) $(OPERATOR_SAN)
TEST_PROGRAMS += $(OPERATOR_TESTS) $(sort $(wildcard operator/tests/test-*.sh))

$(BUILD)/opt/operator/%.o: operator/%.c | deps
	@mkdir -p $(@D)
	$(CC) $(CSTD) $(WARN) $(OPTFLAGS) $(DEPFLAGS) $(OPERATOR_INC) -c $< -o $@
$(BUILD)/san/operator/%.o: operator/%.c | deps
	@mkdir -p $(@D)
	$(CC) $(CSTD) $(WARN) $(SANFLAGS) $(DEPFLAGS) $(OPERATOR_INC) -Ioperator/tests/support \
	    -c $< -o $@

$(foreach v,opt san,$(BUILD)/$(v)/operator/src/options.o $(BUILD)/$(v)/operator/src/main.o): VERSION

$(OPERATOR_BIN): $(BUILD)/opt/operator/src/main.o $(OPERATOR_OBJS)
	@mkdir -p $(@D)
	$(CC) $(OPTFLAGS) -o $@ $^ $(OPERATOR_LIBS)
$(OPERATOR_SAN): $(BUILD)/san/operator/src/main.o $(OPERATOR_SOBJS)
	@mkdir -p $(@D)
	$(CC) $(SANFLAGS) -o $@ $^ $(OPERATOR_LIBS)

# Unit tests link every operator module (not main) and cmocka, built with the sanitizers.
# A static pattern rule, so that it never competes with the trainer's test-% rule.
$(OPERATOR_TESTS): $(BUILD)/san/tests/%: $(BUILD)/san/operator/tests/%.o $(OPERATOR_SOBJS) \
                   $(OPERATOR_TSUPP)
	@mkdir -p $(@D)
	$(CC) $(SANFLAGS) -o $@ $^ -lcmocka $(OPERATOR_LIBS)

operator: $(OPERATOR_BIN)
.PHONY: operator

# The threaded tests again under ThreadSanitizer (not part of `make test`: TSan and ASan
# cannot share a build). `make test-operator-tsan`.
OPERATOR_TSAN_TESTS := workqueue controller leader kclient httpserv progress
TSANFLAGS := -O1 -g -fsanitize=thread -fno-omit-frame-pointer
$(BUILD)/tsan/tests/test-%: operator/tests/test-%.c $(OPERATOR_SRCS) \
                            $(wildcard operator/tests/support/*.c) | deps
	@mkdir -p $(@D)
	$(CC) $(CSTD) $(WARN) $(TSANFLAGS) $(OPERATOR_INC) -Ioperator/tests/support -o $@ $^ \
	    -lcmocka $(OPERATOR_LIBS)
OPERATOR_TSAN_BINS := $(OPERATOR_TSAN_TESTS:%=$(BUILD)/tsan/tests/test-%)
test-operator-tsan:
	@$(MAKE) $(ALL_CORES) $(OPERATOR_TSAN_BINS)
	@TSAN_OPTIONS=halt_on_error=1 bash .ci/taprun $(OPERATOR_TSAN_BINS)
.PHONY: test-operator-tsan
TEST_PROGRAMS += $(sort $(wildcard operator/tests/integration/test-*.sh))

# Benchmark: 100 TrainingJobs x 4 workers against the api-level apiserver, side by side
# with Kubeflow's training-operator (TFJob); JSON in bench/results/operator.json.
bench-operator: $(OPERATOR_BIN)
	@bash operator/bench/run.sh
BENCH_TARGETS += bench-operator
.PHONY: bench-operator

# Benchmark: apply -> both workers past rendezvous, gang scheduling + Kueue vs neither, on
# the full local cluster (root; held under /tmp/kt-full-cluster.lock), the chart's
# kueue.enabled queues; JSON in bench/results/gang-kueue.json (operator/bench/gang-kueue.sh).
bench-gang-kueue: images helm
	@bash operator/bench/gang-kueue.sh
BENCH_TARGETS += bench-gang-kueue

# Benchmark: Kueue's admission of a group of 2 pods by itself, its plain pod group against
# a Workload made by the client (prebuilt), no operator; full local cluster (root; held
# under /tmp/kt-full-cluster.lock); JSON in bench/results/kueue-paths.json
# (operator/bench/kueue-paths.sh).
bench-kueue-paths: images helm
	@bash operator/bench/kueue-paths.sh
BENCH_TARGETS += bench-kueue-paths

# Benchmark: live recovery against the group restart on the full local cluster (root; held
# under /tmp/kt-full-cluster.lock): a worker pod of a 4-worker job deleted, or its trainer
# SIGKILLed, mid-epoch; the time to the next step, steps trained twice, the replacement's
# start-up; JSON in bench/results/recovery-cluster.json (operator/bench/recovery-cluster.sh).
bench-recovery-cluster: images helm
	@bash operator/bench/recovery-cluster.sh
BENCH_TARGETS += bench-recovery-cluster

# Benchmark: an elastic job against today's behaviour on the full local cluster (root; held
# under /tmp/kt-full-cluster.lock): a worker pod of a 4-worker job deleted while a filler
# pod holds its room; the time to the next step, steps trained twice, survivors restarted,
# idle worker-seconds; JSON in bench/results/elastic-cluster.json
# (operator/bench/elastic-cluster.sh).
bench-elastic-cluster: images helm
	@bash operator/bench/elastic-cluster.sh
BENCH_TARGETS += bench-elastic-cluster

# Benchmark: the operator's RSS and CPU with 100 Running jobs, status.progress scraping on
# vs off, api-level cluster, the chiefs' /metrics mocked (operator/bench/progress.py);
# JSON in bench/results/progress.json.
bench-progress: $(OPERATOR_BIN)
	@bash operator/bench/progress.sh
BENCH_TARGETS += bench-progress

# Benchmark: an elastic job's members, a pod annotation patched -> the pod's downwardAPI file
# holding it, full local cluster (root; held under /tmp/kt-full-cluster.lock); JSON in
# bench/results/members-latency.json (operator/bench/members-latency.sh).
bench-members-latency:
	@bash operator/bench/members-latency.sh
BENCH_TARGETS += bench-members-latency
.PHONY: bench-gang-kueue bench-kueue-paths bench-recovery-cluster bench-progress \
	bench-members-latency bench-elastic-cluster

# Benchmark at cluster scale: 1,000 jobs x 8 workers on kwok's simulated nodes, side by
# side with the training-operator; JSON in bench/results/operator-scale.json.
bench-operator-scale: $(OPERATOR_BIN)
	@bash operator/bench/scale.sh
BENCH_TARGETS += bench-operator-scale
.PHONY: bench-operator-scale

# Regenerates operator/tests/reference/tfconfig-roles.json, the TF_CONFIG of each pod for
# chief/worker/ps/evaluator role combinations and what TensorFlow's TFConfigClusterResolver
# makes of it (operator/tests/reference/gen_tfconfig.py; commit the result).
reference-tfconfig:
	tf=$$(bash bench/pyvenv.sh venv-tf) && $$tf operator/tests/reference/gen_tfconfig.py
.PHONY: reference-tfconfig
