# make lint (.ci/lint.sh): clang-format in check mode, shellcheck and the line length,
# over the tracked files; a few seconds. make format rewrites the C sources in place.
# clang-format is pinned: another version formats some constructs differently.
DEPS_APT += clang-format-19 shellcheck
CLANG_FORMAT ?= clang-format-19

lint: deps
	@CLANG_FORMAT=$(CLANG_FORMAT) bash .ci/lint.sh

format: deps
	$(CLANG_FORMAT) -i $$(git ls-files '*.c' '*.h' '*.cc' '*.cu' '*.cuh')
.PHONY: lint format
