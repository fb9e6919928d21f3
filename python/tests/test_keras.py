"""ProgressCallback in a real model.fit, under the Keras that tf.keras names (run once with
TF_USE_LEGACY_KERAS=1 for tf-keras, once without for Keras 3): the endpoint scraped during
and after fit, its steps exact and its loss the History's; BackupAndRestore's saves as the
checkpoint; a resumed fit's start step."""

import os
import socket
import urllib.request

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from kubetrain import keras as ktkeras  # noqa: E402
from kubetrain._progress import Progress  # noqa: E402

keras = tf.keras
STEPS, EPOCHS, BATCH = 3, 2, 8


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scrape(port):
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read()
    return {s.name: s.value for f in text_string_to_metric_families(text.decode())
            for s in f.samples}


def model():
    m = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, activation="softmax")])
    m.compile("sgd", "sparse_categorical_crossentropy", metrics=["accuracy"])
    return m


def data():
    rng = np.random.default_rng(1)
    return rng.random((STEPS * BATCH, 4), dtype=np.float32), rng.integers(0, 3, STEPS * BATCH)


class Scrape(keras.callbacks.Callback):
    """Scrapes the endpoint at each epoch end, after the callbacks before it."""

    def __init__(self, port):
        super().__init__()
        self.port, self.seen = port, []

    def on_epoch_end(self, epoch, logs=None):
        self.seen.append(scrape(self.port))


class Stop(keras.callbacks.Callback):
    """Fails the fit when epoch `epoch` (0-based) begins, as a lost peer would."""

    def __init__(self, epoch):
        super().__init__()
        self.epoch = epoch

    def on_epoch_begin(self, epoch, logs=None):
        if epoch == self.epoch:
            raise RuntimeError("stopped")


class StopAt(keras.callbacks.Callback):
    """Fails the fit when batch `batch` of epoch `epoch` (both 0-based) begins."""

    def __init__(self, epoch, batch):
        super().__init__()
        self.at, self.epoch = (epoch, batch), None

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch

    def on_train_batch_begin(self, batch, logs=None):
        if (self.epoch, batch) == self.at:
            raise RuntimeError("stopped")


def progress_callback(monkeypatch):
    """A ProgressCallback with a Progress of its own, to serve on a free port (the port is
    read when the first step is recorded)."""
    port = free_port()
    monkeypatch.setenv("KUBETRAIN_METRICS_PORT", str(port))
    monkeypatch.delenv("TF_CONFIG", raising=False)
    cb = ktkeras.ProgressCallback(batch_size=BATCH)
    cb._progress = Progress()
    cb.port = port
    return cb


@pytest.fixture
def callback(monkeypatch):
    return progress_callback(monkeypatch)


def test_fit_serves_its_progress(callback, tmp_path):
    backup = keras.callbacks.BackupAndRestore(str(tmp_path / "backup"))
    during = Scrape(callback.port)
    x, y = data()
    # The backup after the progress callback: its epoch-end save is seen at the next
    # epoch's beginning, or at the end of training.
    h = model().fit(x, y, batch_size=BATCH, epochs=EPOCHS, verbose=0,
                    callbacks=[callback, backup, during])
    first = during.seen[0]
    assert first["kubetrain_steps_total"] == STEPS
    assert first["kubetrain_epoch"] == 1
    assert first["kubetrain_total_steps"] == STEPS * EPOCHS
    assert first["kubetrain_start_step"] == 0
    assert "kubetrain_checkpoint_step" not in first
    assert first["kubetrain_samples_per_second"] > 0
    last = scrape(callback.port)
    assert last["kubetrain_steps_total"] == STEPS * EPOCHS
    assert last["kubetrain_epoch"] == EPOCHS
    assert last["kubetrain_loss"] == pytest.approx(h.history["loss"][-1], rel=1e-6)
    assert last["kubetrain_accuracy"] == pytest.approx(h.history["accuracy"][-1], rel=1e-6)
    assert last["kubetrain_checkpoint_step"] == STEPS * EPOCHS
    assert last["kubetrain_step_seconds_total"] > 0
    assert callback._progress.result()["step"] == STEPS * EPOCHS


def test_resumed_fit_starts_at_the_backup(callback, tmp_path):
    backup_dir = str(tmp_path / "backup")
    x, y = data()
    m = model()
    with pytest.raises(RuntimeError, match="stopped"):
        m.fit(x, y, batch_size=BATCH, epochs=EPOCHS, verbose=0,
              callbacks=[keras.callbacks.BackupAndRestore(backup_dir), Stop(1)])
    h = m.fit(x, y, batch_size=BATCH, epochs=EPOCHS, verbose=0,
              callbacks=[keras.callbacks.BackupAndRestore(backup_dir), callback])
    assert len(h.history["loss"]) == EPOCHS - 1  # BackupAndRestore skipped epoch 1
    got = scrape(callback.port)
    assert got["kubetrain_start_step"] == STEPS
    assert got["kubetrain_steps_total"] == STEPS * EPOCHS
    assert got["kubetrain_checkpoint_step"] == STEPS * EPOCHS


def test_model_checkpoint_saves(callback, tmp_path):
    x, y = data()
    path = str(tmp_path / "ckpt" / "model-{epoch}.weights.h5")
    (tmp_path / "ckpt").mkdir()
    saver = keras.callbacks.ModelCheckpoint(path, save_weights_only=True)
    during = Scrape(callback.port)
    model().fit(x, y, batch_size=BATCH, epochs=EPOCHS, verbose=0,
                callbacks=[saver, callback, during])
    # The saver before the progress callback: seen at that same epoch end.
    assert during.seen[0]["kubetrain_checkpoint_step"] == STEPS
    assert during.seen[1]["kubetrain_checkpoint_step"] == STEPS * EPOCHS


def test_resumed_mid_epoch(monkeypatch, tmp_path):
    """A backup every 2 batches, the last after epoch 2's first batch (global step 4),
    seen as the checkpoint; tf-keras resumes at that batch, Keras 3 at the start of its
    epoch (step 3), and the resumed fit, saving nothing more, still reports that step
    after fit() deleted its backup."""
    backup_dir = str(tmp_path / "backup")
    x, y = data()
    m = model()
    first = progress_callback(monkeypatch)
    with pytest.raises(RuntimeError, match="stopped"):
        m.fit(x, y, batch_size=BATCH, epochs=EPOCHS, verbose=0,
              callbacks=[first, keras.callbacks.BackupAndRestore(backup_dir, save_freq=2),
                         StopAt(1, 2)])
    assert scrape(first.port)["kubetrain_checkpoint_step"] == STEPS + 1
    second = progress_callback(monkeypatch)
    never = keras.callbacks.BackupAndRestore(backup_dir, save_freq=STEPS * EPOCHS)
    m.fit(x, y, batch_size=BATCH, epochs=EPOCHS, verbose=0, callbacks=[never, second])
    got = scrape(second.port)
    start = STEPS + 1 if os.environ.get("TF_USE_LEGACY_KERAS") == "1" else STEPS
    assert got["kubetrain_start_step"] == start
    assert got["kubetrain_steps_total"] == STEPS * EPOCHS
    assert got["kubetrain_checkpoint_step"] == start


def test_batches_add_no_wait_for_the_device(callback, tmp_path):
    """tf-keras converts every batch's logs to numbers (a wait for the device) unless each
    callback with batch hooks takes tensors: the callback says it does (and reads them at
    most every READ_LOGS_S seconds), so it gets tensors. A subclass's on_train_begin
    calling this one's still finds the fit's BackupAndRestore."""
    seen = []

    class Spy(ktkeras.ProgressCallback):
        def on_train_begin(self, logs=None):
            super().on_train_begin(logs)

        def on_train_batch_end(self, batch, logs=None):
            seen.append(type(logs["loss"]).__name__)
            super().on_train_batch_end(batch, logs)

    spy = Spy(batch_size=BATCH)
    spy._progress = callback._progress
    backup = keras.callbacks.BackupAndRestore(str(tmp_path / "backup"))
    x, y = data()
    model().fit(x, y, batch_size=BATCH, epochs=EPOCHS, verbose=0, callbacks=[spy, backup])
    if os.environ.get("TF_USE_LEGACY_KERAS") == "1":
        assert set(seen) == {"EagerTensor"}
    got = scrape(callback.port)
    assert got["kubetrain_steps_total"] == STEPS * EPOCHS
    assert got["kubetrain_checkpoint_step"] == STEPS * EPOCHS
