# Valgrind (docs/hardening.md): the C unit tests of the trainer and the operator, built without
# sanitizers (-O1 -g, build/vg/), each run under memcheck; a definite or indirect leak,
# an invalid access or a use of uninitialised memory fails the test.
#
#   make valgrind        every test-*.c under valgrind, TAP and the tally of .ci/taprun
#   make valgrind VG_TESTS="test-idx test-kcfg"   a subset (VG_EXCLUDE below)
#   make valgrind VG_JOBS=1                        one test at a time (3 at once by default)
DEPS_APT += valgrind

VG_DIR    := $(BUILD)/vg
VG_CFLAGS := -O1 -g -fno-omit-frame-pointer
VG_FLAGS  := --leak-check=full --errors-for-leak-kinds=definite,indirect \
             --show-leak-kinds=definite,indirect --error-exitcode=1 --track-origins=yes \
             --num-callers=30
VG_TRAINER_TESTS  := $(patsubst trainer/tests/%.c,%,$(wildcard trainer/tests/test-*.c))
VG_OPERATOR_TESTS := $(patsubst operator/tests/%.c,%,$(wildcard operator/tests/test-*.c))
# test-net, test-ring, test-controller and test-leader assert deadlines (a peer within
# 1.5-10 s, a takeover after a release within 2.5 s, ...); each multiplies its timeouts,
# pauses and upper time bounds by KT_TEST_TIME_SCALE (trainer/tests/timescale.h,
# included by the operator tests too), set to VG_TIME_SCALE here. Measured under memcheck
# on the shared 2-core machine (2026-11-22): test-net fails at 1 in 2 runs of 2 (its 1 s
# pause before the real peer is too short for the impostor's handshake) and passes at 5,
# 10 and 20; test-ring, test-controller and test-leader pass at 1 and at 20. 20 leaves a
# margin of 4 over the smallest factor seen to pass.
VG_TIME_SCALE := 20
# test-reference runs only its mlp and shapes tests here (KT_TEST_REFERENCE_MODELS, 25 s:
# both models, all 5 steps of each of their 4 optimizer runs and the final weights) and
# skips the three CNNs, saying so: a CNN step takes 20-65 s under memcheck, tutorial-cnn
# alone 6 min, the whole program over 15 min. The CNN layers and model_step on 3 threads
# are under memcheck in test-layers and test-model.
VG_REFERENCE_MODELS := mlp shapes
VG_EXCLUDE ?=
# VG_JOBS tests at once (.ci/taprun's TAPRUN_JOBS); memcheck runs a test's threads one at a
# time, so a test takes at most one core. The longest start first (the CI run of
# 2026-11-28, one at a time: test-net 265 s and test-ring 262 s, most of it their
# scaled waits for a stopped or missing peer, then test-leader, test-jsonpack and
# test-controller 74-81 s; every other test 31 s or less), so that the rest share the
# third slot beside them. Four at once took 7.1 min, but test-controller's check that
# 24 requests overlap got 9 of them where it wants 14, with two CPU-bound tests beside it.
VG_JOBS ?= 3
VG_FIRST := test-net test-ring test-leader test-jsonpack test-controller
VG_ALL := $(VG_TRAINER_TESTS) $(VG_OPERATOR_TESTS)
VG_TESTS ?= $(filter-out $(VG_EXCLUDE),$(filter $(VG_ALL),$(VG_FIRST)) \
                                       $(filter-out $(VG_FIRST),$(VG_ALL)))

$(VG_DIR)/trainer/%.o: trainer/%.c | deps
	@mkdir -p $(@D)
	$(CC) $(CSTD) $(WARN) $(VG_CFLAGS) $(TRAINER_CFLAGS) $(DEPFLAGS) $(TRAINER_INC) \
	    -c $< -o $@
$(VG_DIR)/trainer/src/gemm.o: $(GEMM_STAMP)
$(VG_DIR)/trainer/src/gemm.o: TRAINER_CFLAGS += $(GEMM_CFLAGS_$(GEMM))
$(VG_DIR)/operator/%.o: operator/%.c | deps
	@mkdir -p $(@D)
	$(CC) $(CSTD) $(WARN) $(VG_CFLAGS) $(DEPFLAGS) $(OPERATOR_INC) -Ioperator/tests/support \
	    -c $< -o $@

$(VG_TRAINER_TESTS:%=$(VG_DIR)/tests/%): $(VG_DIR)/tests/%: $(VG_DIR)/trainer/tests/%.o \
        $(TRAINER_SRCS:%.c=$(VG_DIR)/%.o)
	@mkdir -p $(@D)
	$(CC) $(VG_CFLAGS) -o $@ $^ -lcmocka $(TRAINER_LIBS)
$(VG_OPERATOR_TESTS:%=$(VG_DIR)/tests/%): $(VG_DIR)/tests/%: $(VG_DIR)/operator/tests/%.o \
        $(OPERATOR_SRCS:%.c=$(VG_DIR)/%.o) \
        $(patsubst %.c,$(VG_DIR)/%.o,$(wildcard operator/tests/support/*.c))
	@mkdir -p $(@D)
	$(CC) $(VG_CFLAGS) -o $@ $^ -lcmocka $(OPERATOR_LIBS)

# Each test runs through a two-line wrapper, so that .ci/taprun counts its TAP as usual.
$(VG_DIR)/run/%.sh: $(VG_DIR)/tests/% .ci/valgrind.mk
	@mkdir -p $(@D)
	@echo 'export KT_TEST_TIME_SCALE=$(VG_TIME_SCALE)' \
	    'KT_TEST_REFERENCE_MODELS="$(VG_REFERENCE_MODELS)"' > $@
	@echo 'exec valgrind $(VG_FLAGS) -q $< "$$@"' >> $@

VG_RUNS = $(VG_TESTS:%=$(VG_DIR)/run/%.sh)
valgrind:
	@$(MAKE) $(ALL_CORES) $(VG_RUNS)
	@TAPRUN_JOBS=$(VG_JOBS) bash .ci/taprun $(VG_RUNS)
.PHONY: valgrind
