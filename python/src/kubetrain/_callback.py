"""The ProgressCallback's workings, on no particular Keras: kubetrain.keras puts them on the
Callback that tf.keras names, the automatic hook (_kubetrain_auto) on the Keras whose
Model.fit is called. Importing this module imports no Keras."""

import os
import sys
import time

from ._progress import progress

# A batch's loss and accuracy are read (a wait for the device) at most this often; the step
# count, a Python int, at every batch.
READ_LOGS_S = 1.0

# Logs keys of an accuracy, in order of preference: compile(metrics=["accuracy"]) logs
# "accuracy"; a metric object logs its own name.
ACCURACY_KEYS = ("accuracy", "acc", "sparse_categorical_accuracy", "categorical_accuracy",
                 "binary_accuracy")


def _accuracy(logs):
    for k in ACCURACY_KEYS:
        if k in logs:
            return logs[k]
    return next((v for k, v in logs.items()
                 if k.endswith("accuracy") and not k.startswith("val_")), None)


def _newest_mtime(path, files_only):
    """The newest modification time of the entries directly in directory `path` (each
    entry's own: a directory's moves when an entry in it is added, renamed or removed),
    or with files_only of the files in it and in its subdirectories (so that a deletion
    never looks like a save); None when there are none. Not walked further: a
    ModelCheckpoint's directory may be the program's working directory."""
    times = []
    try:
        with os.scandir(path) as it:
            for e in it:
                if not files_only:
                    times.append(e.stat(follow_symlinks=False).st_mtime)
                elif e.is_file(follow_symlinks=False):
                    times.append(e.stat().st_mtime)
                elif e.is_dir(follow_symlinks=False):
                    with os.scandir(e.path) as sub:
                        times += [f.stat().st_mtime for f in sub
                                  if f.is_file(follow_symlinks=False)]
    except OSError:
        pass
    return max(times, default=None)


class _Saver:
    """A BackupAndRestore or ModelCheckpoint of the same fit: where it writes, and whether
    it saves every N batches (else at epoch ends). BackupAndRestore deletes its backup
    when fit() ends (Keras 3 the directory, tf-keras the chief's subdirectory), so only
    its files' times count."""

    def __init__(self, callback, kind):
        self.kind = kind
        if kind == "BackupAndRestore":
            self.path = str(callback.backup_dir)
        else:
            path = str(callback.filepath)
            self.path = path if os.path.isdir(path) else os.path.dirname(path) or "."
        self.by_batch = isinstance(getattr(callback, "save_freq", "epoch"), int)

    def newest(self):
        return _newest_mtime(self.path, self.kind == "BackupAndRestore")


def _callback_list(me):
    """The `callbacks` list of the CallbackList calling me.on_train_begin, or None: Keras
    passes a callback nothing of its siblings, but both Keras 3's and tf-keras's
    CallbackList call it from a method of the list itself, whose `callbacks` hold it (a
    few frames up when a subclass's on_train_begin calls this one's)."""
    frame = sys._getframe(2)
    for _ in range(8):
        if frame is None:
            break
        siblings = getattr(frame.f_locals.get("self"), "callbacks", None)
        if isinstance(siblings, list) and any(c is me for c in siblings):
            return siblings
        frame = frame.f_back
    return None


def _savers(me):
    """The checkpointing callbacks of the fit that is calling me.on_train_begin; none
    when its CallbackList is not found (no checkpoint is reported)."""
    siblings = _callback_list(me) or []
    found = []
    for c in siblings:
        names = {k.__name__ for k in type(c).__mro__}
        for kind in ("BackupAndRestore", "ModelCheckpoint"):
            if kind in names:
                found.append(_Saver(c, kind))
    return found


class ProgressMixin:
    """Reports model.fit's steps, loss, accuracy and epochs to kubetrain.report's Progress,
    and the saves of the fit's BackupAndRestore and ModelCheckpoint as checkpoints.

    Steps are global: epoch index x steps per epoch + batch, so a fit that BackupAndRestore
    resumed at epoch E (or, with tf-keras, mid-epoch) starts at E x steps, and that step is
    kubetrain_start_step. Loss and accuracy are what Keras logs: the running mean of the
    epoch so far, at its end the History's value.

    A save is seen as a newer modification time in the callback's directory (of the files
    in BackupAndRestore's backup_dir and its subdirectories; of the entries in the
    directory of ModelCheckpoint's filepath), looked at after the other callbacks' hooks
    of an epoch end (and, for one that saves every N batches, of a batch end) have run;
    the checkpoint's step is the last one trained before, its time the file's. A resumed
    fit reports the step it resumed at as the checkpoint, with the backup's time.

    Per batch it stores a few numbers: tf-keras hands it the logs as tensors (as to its
    own callbacks), read at most every READ_LOGS_S seconds, so that it adds no wait for
    the device to each step (Keras 3 decides by itself).

    batch_size: the global batch size, for samples per second (none without it)."""

    def __init__(self, batch_size=None):
        super().__init__()
        self.batch_size = batch_size
        self._progress = progress()
        self._supports_tf_logs = True

    def on_train_begin(self, logs=None):
        self._savers = _savers(self)
        self._by_batch = any(s.by_batch for s in self._savers)
        self._seen = self._newest_save()
        self._steps = self.params.get("steps")
        epochs = self.params.get("epochs")
        self._total = epochs * self._steps if epochs and self._steps else None
        self._step = None  # the global step last trained; None before the first
        self._base = 0
        self._last_time = None
        self._logs_read = None  # when a batch's logs were last read

    def on_epoch_begin(self, epoch, logs=None):
        self._look_for_save()
        self._epoch = epoch
        if self._steps:
            self._base = epoch * self._steps
        elif self._step is not None:
            self._base = self._step

    def on_train_batch_begin(self, batch, logs=None):
        if self._step is None:
            self._begin(self._base + batch)
        elif self._by_batch:
            self._look_for_save()

    def on_train_batch_end(self, batch, logs=None):
        logs = logs or {}
        now = time.monotonic()
        step = self._base + batch + 1
        dt = now - self._last_time
        rate = None
        if self.batch_size and dt > 0:
            rate = self.batch_size * (step - self._step) / dt
        self._step, self._last_time = step, now
        loss = accuracy = None
        if self._logs_read is None or now - self._logs_read >= READ_LOGS_S:
            self._logs_read = now
            loss, accuracy = logs.get("loss"), _accuracy(logs)
        self._progress.update(step, loss=loss, accuracy=accuracy, epoch=self._epoch + 1,
                              total_steps=self._total, samples_per_second=rate,
                              step_seconds=dt)
        if self._by_batch:
            self._look_for_save()

    def on_epoch_end(self, epoch, logs=None):
        logs = logs or {}
        if self._step is not None:
            self._progress.update(self._step, loss=logs.get("loss"),
                                  accuracy=_accuracy(logs))
            self._look_for_save()

    def on_train_end(self, logs=None):
        self._look_for_save()

    def _begin(self, start):
        """The first batch: the step this fit starts after, and the checkpoint it resumed
        from (BackupAndRestore's backup, when it started past step 0)."""
        self._step, self._last_time = start, time.monotonic()
        self._progress.update(start, epoch=self._epoch + 1, total_steps=self._total,
                              start_step=start)
        backups = [s.newest() for s in self._savers if s.kind == "BackupAndRestore"]
        backups = [t for t in backups if t is not None]
        if start > 0 and backups:
            self._progress.set_checkpoint(start, max(backups))

    def _newest_save(self):
        times = [s.newest() for s in self._savers]
        return max((t for t in times if t is not None), default=None)

    def _look_for_save(self):
        if not self._savers or self._step is None:
            return
        newest = self._newest_save()
        if newest is not None and (self._seen is None or newest > self._seen):
            self._seen = newest
            self._progress.set_checkpoint(self._step, newest)


_classes = {}


def callback_class(base):
    """The ProgressCallback class on Keras callback class `base` (keras.callbacks.Callback or
    tf_keras.callbacks.Callback): one per base, so that isinstance and subclasses agree."""
    if base not in _classes:
        _classes[base] = type("ProgressCallback", (ProgressMixin, base),
                              {"__module__": "kubetrain.keras", "__doc__": ProgressMixin.__doc__})
    return _classes[base]
