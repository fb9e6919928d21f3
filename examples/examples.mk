# The TensorFlow examples (examples/tensorflow, docs/tensorflow.md): test-local.sh runs
# them as local processes with hand-made TF_CONFIG, with TensorFlow and tf-keras from
# PyPI in $(KT_CACHE)/venv-tf (made on first use; skipped when it cannot be). About 70 s
# on 2 cores, so it is part of make test; make test-tensorflow runs it alone, and
# make test-tensorflow TF_IMAGE=kubetrain/tensorflow:$(VERSION) runs it in the image.
TEST_PROGRAMS += examples/tensorflow/test-local.sh

test-tensorflow:
	@TF_IMAGE=$(TF_IMAGE) bash .ci/taprun examples/tensorflow/test-local.sh
.PHONY: test-tensorflow
