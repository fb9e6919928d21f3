# The kubetrain Python package (python/, docs/tensorflow.md "Progress"): its pytest tests
# run under tf-keras and Keras 3 from $(KT_CACHE)/venv-tf (made on first use; skipped when
# it cannot be), with the operator's own /metrics parser built as parse-metrics.
PYTHON_PARSE_METRICS := $(BUILD)/opt/python/tests/parse-metrics
TEST_PROGRAMS += python/tests/test-python.sh

$(BUILD)/opt/python/tests/%.o: python/tests/%.c | deps
	@mkdir -p $(@D)
	$(CC) $(CSTD) $(WARN) $(OPTFLAGS) $(DEPFLAGS) $(OPERATOR_INC) -c $< -o $@
$(PYTHON_PARSE_METRICS): $(BUILD)/opt/python/tests/parse-metrics.o $(OPERATOR_OBJS)
	$(CC) $(OPTFLAGS) -o $@ $^ $(OPERATOR_LIBS)
test-build: $(PYTHON_PARSE_METRICS)
