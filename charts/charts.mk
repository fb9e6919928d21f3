# The Helm chart (charts/kubetrain). Included from the top-level Makefile.
#
#   make helm              build helm once per machine into $(KT_CACHE)/helm (charts/build-helm.sh)
#   make chart-crds        copy crds/trainingjob.yaml into the chart (crds/ is the single source)
#   make chart-crds-check  fail when the chart's copy differs from crds/
#   make chart-lint        helm lint, default and single-namespace values
#   make chart-package     build/charts/kubetrain-<version>.tgz
#   make test-chart        only the chart's test (charts/tests/test-chart.sh)

# python3-yaml: the chart test reads the rendered manifests.
DEPS_APT += python3-yaml

CHART          := charts/kubetrain
CHART_TESTS    := $(sort $(wildcard charts/tests/test-*.sh))
TEST_PROGRAMS  += $(CHART_TESTS)

.PHONY: helm chart-crds chart-crds-check chart-lint chart-package test-chart
helm:
	@bash charts/build-helm.sh

# Always copies: a hand-edited copy newer than its source must not survive.
chart-crds:
	@mkdir -p $(CHART)/crds
	cp crds/*.yaml $(CHART)/crds/

chart-crds-check:
	@ok=1; for f in crds/*.yaml; do \
	  cmp -s $$f $(CHART)/crds/$${f#crds/} || { ok=0; \
	    echo "$(CHART)/crds/$${f#crds/} differs from $$f: run make chart-crds" >&2; }; \
	done; \
	for f in $(CHART)/crds/*.yaml; do \
	  [ -e crds/$${f#$(CHART)/crds/} ] || { ok=0; \
	    echo "$$f has no source in crds/: remove it" >&2; }; \
	done; [ $$ok = 1 ]

chart-lint: chart-crds-check
	@helm=$$(bash charts/build-helm.sh) && $$helm lint --strict $(CHART) && \
	  $$helm lint --strict $(CHART) --set singleNamespace=true

chart-package: chart-crds-check
	@mkdir -p $(BUILD)/charts
	@helm=$$(bash charts/build-helm.sh) && $$helm package $(CHART) --destination $(BUILD)/charts

test-chart: deps
	@bash .ci/taprun $(CHART_TESTS)
