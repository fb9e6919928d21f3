# Valgrind (issue 9): the C unit tests of the trainer and the operator, built without
# sanitizers (-O1 -g, build/vg/), each run under memcheck; a definite or indirect leak,
# an invalid access or a use of uninitialised memory fails the test.
#
#   make valgrind        every test-*.c under valgrind, TAP and the tally of .ci/taprun
#   make valgrind VG_TESTS="test-idx test-kcfg"   a subset (VG_EXCLUDE below)
DEPS_APT += valgrind

VG_DIR    := $(BUILD)/vg
VG_CFLAGS := -O1 -g -fno-omit-frame-pointer
VG_FLAGS  := --leak-check=full --errors-for-leak-kinds=definite,indirect \
             --show-leak-kinds=definite,indirect --error-exitcode=1 --track-origins=yes \
             --num-callers=30
VG_TRAINER_TESTS  := $(patsubst trainer/tests/%.c,%,$(wildcard trainer/tests/test-*.c))
VG_OPERATOR_TESTS := $(patsubst operator/tests/%.c,%,$(wildcard operator/tests/test-*.c))
# Not under valgrind (they run under ASan+UBSan and LeakSanitizer in `make test`):
# test-reference takes over 15 min under memcheck; test-net, test-ring, test-controller
# and test-leader assert deadlines (a peer within 1.5-10 s, a takeover within 0.5 s) that
# memcheck's 20-50x slowdown misses on a shared 2-core machine. VG_EXCLUDE= runs them too.
VG_EXCLUDE ?= test-reference test-net test-ring test-controller test-leader
VG_TESTS ?= $(filter-out $(VG_EXCLUDE),$(VG_TRAINER_TESTS) $(VG_OPERATOR_TESTS))

$(VG_DIR)/trainer/%.o: trainer/%.c | deps
	@mkdir -p $(@D)
	$(CC) $(CSTD) $(WARN) $(VG_CFLAGS) $(TRAINER_CFLAGS) $(DEPFLAGS) $(TRAINER_INC) -c $< -o $@
$(VG_DIR)/trainer/src/gemm.o: $(GEMM_STAMP)
$(VG_DIR)/trainer/src/gemm.o: TRAINER_CFLAGS += $(GEMM_CFLAGS_$(GEMM))
$(VG_DIR)/operator/%.o: operator/%.c | deps
	@mkdir -p $(@D)
	$(CC) $(CSTD) $(WARN) $(VG_CFLAGS) $(DEPFLAGS) $(OPERATOR_INC) -Ioperator/tests/support -c $< -o $@

$(VG_TRAINER_TESTS:%=$(VG_DIR)/tests/%): $(VG_DIR)/tests/%: $(VG_DIR)/trainer/tests/%.o $(TRAINER_SRCS:%.c=$(VG_DIR)/%.o)
	@mkdir -p $(@D)
	$(CC) $(VG_CFLAGS) -o $@ $^ -lcmocka $(TRAINER_LIBS)
$(VG_OPERATOR_TESTS:%=$(VG_DIR)/tests/%): $(VG_DIR)/tests/%: $(VG_DIR)/operator/tests/%.o \
        $(OPERATOR_SRCS:%.c=$(VG_DIR)/%.o) $(patsubst %.c,$(VG_DIR)/%.o,$(wildcard operator/tests/support/*.c))
	@mkdir -p $(@D)
	$(CC) $(VG_CFLAGS) -o $@ $^ -lcmocka $(OPERATOR_LIBS)

# Each test runs through a one-line wrapper, so that .ci/taprun counts its TAP as usual.
$(VG_DIR)/run/%.sh: $(VG_DIR)/tests/% .ci/valgrind.mk
	@mkdir -p $(@D)
	@echo 'exec valgrind $(VG_FLAGS) -q $< "$$@"' > $@

valgrind: $(VG_TESTS:%=$(VG_DIR)/run/%.sh)
	@bash .ci/taprun $^
.PHONY: valgrind
