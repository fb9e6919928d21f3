# Fuzzing (docs/hardening.md): libFuzzer targets for every parser that reads outside input,
# built with clang and ASan+UBSan (trainer/fuzz/fuzz-*.c, operator/fuzz/fuzz-*.c).
#
#   make fuzz                  build every target and run each for FUZZ_SECONDS (60),
#                              FUZZ_JOBS (1) at once: each target is one process on
#                              one core, so up to the cores gives each the same time
#   make fuzz FUZZ_SECONDS=600 a longer campaign; FUZZ_JSON=bench/results/fuzz.json
#                              also records its figures there (FUZZ_TARGETS="a b" runs
#                              a subset and updates those targets' rows)
#   make fuzz-targets          only build them (build/fuzz/bin/)
#
# Seeds are generated from the repo's examples and fixtures into build/fuzz/seeds/;
# each target's growing corpus stays in build/fuzz/corpus/<target>/ between runs and
# crashes land in build/fuzz/artifacts/. Every crash found so far is a regression case
# in the module's unit test (trainer/tests, operator/tests).
# libclang-rt-dev: libFuzzer and the sanitizer runtimes, only recommended by clang (and
# deps.sh installs no recommends).
DEPS_APT += clang libclang-rt-dev

FUZZ_CC      ?= clang
FUZZ_SECONDS ?= 60
FUZZ_JOBS    ?= 1
FUZZ_JSON    ?=
FUZZ_SAN     := -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
FUZZ_CFLAGS  := -O1 -g $(FUZZ_SAN) -fsanitize=fuzzer-no-link
FUZZ_DIR     := $(BUILD)/fuzz
# clang flags vsnprintf with a format passed through a va_list helper; gcc does not.
FUZZ_WARN    := $(WARN) -Wno-format-nonliteral

# -max_len per target: about twice the largest legitimate input of that kind.
FUZZ_MAXLEN_tfconfig  := 2048
FUZZ_MAXLEN_model     := 4096
FUZZ_MAXLEN_keras     := 16384
FUZZ_MAXLEN_idx       := 8192
FUZZ_MAXLEN_npy       := 8192
FUZZ_MAXLEN_tfrecord  := 16384
FUZZ_MAXLEN_ckpt      := 1024
FUZZ_MAXLEN_handshake := 2048
FUZZ_MAXLEN_kcfg      := 8192
FUZZ_MAXLEN_yamljson  := 4096
FUZZ_MAXLEN_tfjob     := 8192
FUZZ_MAXLEN_watch     := 8192
FUZZ_MAXLEN_list      := 8192
FUZZ_MAXLEN_jobspec   := 8192
FUZZ_MAXLEN_reconcile := 16384

FUZZ_TRAINER  := $(patsubst trainer/fuzz/fuzz-%.c,%,$(wildcard trainer/fuzz/fuzz-*.c))
FUZZ_OPERATOR := $(patsubst operator/fuzz/fuzz-%.c,%,$(wildcard operator/fuzz/fuzz-*.c))
# The targets `make fuzz` runs (all by default): FUZZ_TARGETS="idx model".
FUZZ_TARGETS  ?= $(FUZZ_TRAINER) $(FUZZ_OPERATOR)
FUZZ_BINS     := $(FUZZ_TRAINER:%=$(FUZZ_DIR)/bin/fuzz-%) $(FUZZ_OPERATOR:%=$(FUZZ_DIR)/bin/fuzz-%)
FUZZ_TOBJS    := $(TRAINER_SRCS:%.c=$(FUZZ_DIR)/%.o)
FUZZ_OOBJS    := $(OPERATOR_SRCS:%.c=$(FUZZ_DIR)/%.o)

$(FUZZ_DIR)/trainer/%.o: trainer/%.c | deps
	@mkdir -p $(@D)
	$(FUZZ_CC) $(CSTD) $(FUZZ_WARN) $(FUZZ_CFLAGS) $(TRAINER_CFLAGS) $(DEPFLAGS) \
	    $(TRAINER_INC) -c $< -o $@
$(FUZZ_DIR)/trainer/src/gemm.o: $(GEMM_STAMP)
$(FUZZ_DIR)/trainer/src/gemm.o: TRAINER_CFLAGS += $(GEMM_CFLAGS_$(GEMM))
$(FUZZ_DIR)/operator/%.o: operator/%.c | deps
	@mkdir -p $(@D)
	$(FUZZ_CC) $(CSTD) $(FUZZ_WARN) $(FUZZ_CFLAGS) $(DEPFLAGS) $(OPERATOR_INC) -c $< -o $@

$(FUZZ_TRAINER:%=$(FUZZ_DIR)/bin/fuzz-%): $(FUZZ_DIR)/bin/fuzz-%: \
    $(FUZZ_DIR)/trainer/fuzz/fuzz-%.o $(FUZZ_TOBJS)
	@mkdir -p $(@D)
	$(FUZZ_CC) -g $(FUZZ_SAN) -fsanitize=fuzzer -o $@ $^ $(TRAINER_LIBS)
$(FUZZ_OPERATOR:%=$(FUZZ_DIR)/bin/fuzz-%): $(FUZZ_DIR)/bin/fuzz-%: \
    $(FUZZ_DIR)/operator/fuzz/fuzz-%.o $(FUZZ_OOBJS)
	@mkdir -p $(@D)
	$(FUZZ_CC) -g $(FUZZ_SAN) -fsanitize=fuzzer -o $@ $^ $(OPERATOR_LIBS)

# Seeds: regenerated whenever a generator or a fixture it reads changes.
$(FUZZ_DIR)/seeds/.stamp: trainer/fuzz/seeds.py operator/fuzz/seeds.py trainer/src/model.c \
                          $(wildcard examples/*.yaml examples/tfjob/*.yaml) \
                          $(wildcard trainer/tests/reference/keras/*.json) \
                          $(wildcard trainer/tests/reference/tfrecord/*) | deps
	@rm -rf $(FUZZ_DIR)/seeds && mkdir -p $(FUZZ_DIR)/seeds
	python3 trainer/fuzz/seeds.py $(FUZZ_DIR)/seeds
	python3 operator/fuzz/seeds.py $(FUZZ_DIR)/seeds
	@touch $@

fuzz-targets: $(FUZZ_BINS) $(FUZZ_DIR)/seeds/.stamp
fuzz:
	@$(MAKE) $(ALL_CORES) fuzz-targets
	@bash .ci/fuzzrun --seconds $(FUZZ_SECONDS) --jobs $(FUZZ_JOBS) --dir $(FUZZ_DIR) \
	    $(if $(FUZZ_JSON),--json $(FUZZ_JSON)) \
	    $(foreach t,$(FUZZ_TARGETS),$(t):$(FUZZ_MAXLEN_$(t)))
.PHONY: fuzz fuzz-targets
