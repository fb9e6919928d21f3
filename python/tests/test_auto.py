"""The automatic hook (_kubetrain_auto, kubetrain-auto.pth): an unchanged fit() program run as
under a TrainingJob serves the kubetrain_* series and writes the termination message;
KUBETRAIN_AUTO_PROGRESS=0 gets neither; a program's own ProgressCallback is not doubled; a
failure of the callback is a warning and fit() goes on. Run with the Python of a site whose
kubetrain-auto.pth is in effect (test-python.sh's throwaway venv), under the Keras that
tf.keras names."""

import json
import os
import socket
import subprocess
import sys
import textwrap

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

import _kubetrain_auto as auto  # noqa: E402
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from kubetrain import keras as ktkeras  # noqa: E402
from kubetrain._callback import ProgressMixin  # noqa: E402
from kubetrain._progress import Progress  # noqa: E402

if os.environ.get("TF_USE_LEGACY_KERAS") == "1":
    import tf_keras as keras_module
else:
    import keras as keras_module

STEPS, EPOCHS, BATCH = 3, 2, 8

# A Keras program that knows nothing of kubetrain; after fit() it prints its own /metrics,
# as the operator would read it, or why there is none.
PROGRAM = textwrap.dedent(f"""
    import os, urllib.request
    import numpy as np
    import tensorflow as tf
    keras = tf.keras
    m = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, activation="softmax")])
    m.compile("sgd", "sparse_categorical_crossentropy", metrics=["accuracy"])
    rng = np.random.default_rng(1)
    x, y = rng.random(({STEPS * BATCH}, 4), dtype=np.float32), rng.integers(0, 3, {STEPS * BATCH})
    m.fit(x, y, batch_size={BATCH}, epochs={EPOCHS}, verbose=0)
    try:
        url = "http://127.0.0.1:" + os.environ["KUBETRAIN_METRICS_PORT"] + "/metrics"
        print(urllib.request.urlopen(url, timeout=5).read().decode())
    except OSError as e:
        print("no metrics:", e)
""")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(autouse=True)
def hooked_python():
    if "_kubetrain_auto" not in sys.modules:
        pytest.skip("kubetrain-auto.pth is not in effect in this Python (test-python.sh's venv)")


def run(tmp_path, program, **env):
    """Runs program as a TrainingJob's chief would: KUBETRAIN_JOB and a metrics port; the
    termination message (None: none written) and the CompletedProcess."""
    term = tmp_path / "termination"
    e = {k: v for k, v in os.environ.items() if k not in ("TF_CONFIG", auto.AUTO_ENV)}
    e.update({"KUBETRAIN_JOB": "job", "KUBETRAIN_METRICS_PORT": str(free_port()),
              "KUBETRAIN_TERMINATION_FILE": str(term), "TF_CPP_MIN_LOG_LEVEL": "2"}, **env)
    p = subprocess.run([sys.executable, "-c", program], env=e, capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    return (json.loads(term.read_text()) if term.exists() else None), p


def test_unchanged_fit_serves_its_progress(tmp_path):
    term, p = run(tmp_path, PROGRAM)
    assert "no metrics" not in p.stdout, p.stdout
    got = {s.name: s.value for f in text_string_to_metric_families(p.stdout) for s in f.samples}
    assert got["kubetrain_steps_total"] == STEPS * EPOCHS
    assert got["kubetrain_total_steps"] == STEPS * EPOCHS
    assert got["kubetrain_epoch"] == EPOCHS
    assert got["kubetrain_start_step"] == 0
    assert got["kubetrain_samples_per_second"] > 0  # fit()'s batch_size
    assert term["step"] == STEPS * EPOCHS
    assert "kubetrain:" not in p.stderr


def test_opted_out_program_reports_nothing(tmp_path):
    term, p = run(tmp_path, PROGRAM, KUBETRAIN_AUTO_PROGRESS="0")
    assert p.stdout.startswith("no metrics"), p.stdout
    assert term is None


@pytest.mark.parametrize("env,want", [
    ({}, False),
    ({"KUBETRAIN_JOB": ""}, False),
    ({"KUBETRAIN_JOB": "j"}, True),
    ({"KUBETRAIN_JOB": "j", "KUBETRAIN_AUTO_PROGRESS": "0"}, False),
    ({"KUBETRAIN_JOB": "j", "KUBETRAIN_AUTO_PROGRESS": "1"}, True),
])
def test_wanted_under_a_training_job_only(env, want):
    assert auto.wanted(env) == want


def test_startup_imports_nothing_more(tmp_path):
    """Under a TrainingJob, a program that never imports Keras loads only the hook."""
    p = subprocess.run([sys.executable, "-c", "import sys; print(sorted(m for m in sys.modules "
                        "if 'kubetrain' in m or m.split('.')[0] in "
                        "('prometheus_client', 'keras', 'tf_keras', 'tensorflow')))"],
                       env=dict(os.environ, KUBETRAIN_JOB="job"), capture_output=True, text=True)
    assert p.stdout.strip() == "['_kubetrain_auto']", p.stdout + p.stderr


def recorded_fit(monkeypatch):
    """Model.fit patched over a recorder of the callbacks it is called with, as the hook
    patches it after Keras has loaded; monkeypatch puts the real fit back."""
    seen = []
    monkeypatch.setattr(keras_module.Model, "fit",
                        lambda self, *a, **k: seen.append(a[5] if len(a) > 5 else k["callbacks"]))
    auto.patch(keras_module)
    return seen


def progress_callbacks(callbacks):
    return [c for c in callbacks if isinstance(c, ProgressMixin)]


def test_explicit_callback_is_not_doubled(monkeypatch):
    seen = recorded_fit(monkeypatch)
    model = keras_module.Sequential([keras_module.Input((4,)), keras_module.layers.Dense(3)])
    mine = ktkeras.ProgressCallback(batch_size=BATCH)
    model.fit(None, callbacks=[mine])
    model.fit(None, None, None, 1, 0, (mine,))
    model.fit(None)
    model.fit(None, None, None, 1, 0, [])
    assert [progress_callbacks(c) == [mine] for c in seen[:2]] == [True, True]
    assert [len(progress_callbacks(c)) for c in seen[2:]] == [1, 1]
    assert type(seen[2][0]).__name__ == "AutoProgressCallback"


def test_a_failing_callback_warns_and_fit_goes_on(monkeypatch, capsys):
    """A metrics port that cannot be served fails the explicit callback's first step (the
    program asked for it); the automatic one warns once and the fit trains on."""
    monkeypatch.setenv("KUBETRAIN_METRICS_PORT", "not-a-port")
    monkeypatch.setattr(auto, "_auto_classes", {})
    cb = auto.with_progress(None, keras_module)[0]
    cb._progress = Progress()
    model = keras_module.Sequential([keras_module.Input((4,)), keras_module.layers.Dense(3)])
    model.compile("sgd", "mse")
    rng = np.random.default_rng(1)
    h = model.fit(rng.random((STEPS * BATCH, 4)), rng.random((STEPS * BATCH, 3)),
                  batch_size=BATCH, epochs=EPOCHS, verbose=0, callbacks=[cb])
    assert len(h.history["loss"]) == EPOCHS
    err = capsys.readouterr().err
    assert err.count("kubetrain: automatic progress off") == 1, err
    assert "KUBETRAIN_METRICS_PORT='not-a-port'" in err, err
