"""The process's training progress: the chief's /metrics and every task's termination message.

One Progress per process (progress()). Training code records into it (report(), the Keras
callback); on the chief, when KUBETRAIN_METRICS_PORT names a port, prometheus_client serves
the same kubetrain_* series as the C trainer's trainer/src/prom.c, which the operator reads
into status.progress and status.checkpoint (operator/src/progress.c). At exit every task
writes the termination message of docs/design.md "Results and metrics".
"""

import atexit
import json
import math
import os
import sys
import threading
import time
import traceback

from prometheus_client import start_http_server
from prometheus_client.core import CollectorRegistry, CounterMetricFamily, GaugeMetricFamily

PORT_ENV = "KUBETRAIN_METRICS_PORT"
TERMINATION_ENV = "KUBETRAIN_TERMINATION_FILE"
TERMINATION_LOG = "/dev/termination-log"
ERROR_MAX = 1023  # the C trainer's message buffer, less its NUL


def is_chief(tf_config=None):
    """Whether this task is the one that reports, as MultiWorkerMirroredStrategy picks its
    chief: task type "chief", or worker 0 of a cluster without a chief. No TF_CONFIG (or
    one without a cluster) is a single process, its own chief. The evaluator trains
    nothing, so unlike TensorFlow's is_chief it is not one here. tf_config: the JSON text,
    default the environment's TF_CONFIG."""
    text = os.environ.get("TF_CONFIG", "") if tf_config is None else tf_config
    if not text.strip():
        return True
    try:
        conf = json.loads(text)
    except ValueError as e:
        raise ValueError(f"TF_CONFIG is not JSON: {e}") from None
    if not isinstance(conf, dict):
        raise ValueError("TF_CONFIG is not a JSON object")
    cluster = conf.get("cluster") or {}
    task = conf.get("task") or {}
    if not cluster:
        return True
    kind, index = task.get("type"), task.get("index", 0)
    return kind == "chief" or (kind == "worker" and index == 0 and "chief" not in cluster)


def metrics_port():
    """The port the operator scrapes (KUBETRAIN_METRICS_PORT); 0: none, serve nothing."""
    text = os.environ.get(PORT_ENV, "").strip()
    if not text:
        return 0
    if not text.isdigit() or int(text) > 65535:
        raise ValueError(f"{PORT_ENV}={text!r}: not a port number 0-65535")
    return int(text)


def _finite(v):
    """A number for JSON: NaN and infinities are null, as cJSON writes them in the C
    trainer's message (json.dumps would write NaN, which is not JSON)."""
    return v if v is None or math.isfinite(v) else None


class Progress:
    """What this process has trained; thread-safe between the training loop and the
    server's scrapes. Steps are global (the whole run's, across restarts)."""

    def __init__(self):
        self._lock = threading.Lock()
        self.step = None  # None: no step reported yet
        self.start_step = 0
        self.total_steps = None
        self.epoch = None
        self.loss = self.accuracy = self.samples_per_second = None
        self.step_seconds_total = 0.0
        self.checkpoint_step = None  # None: no checkpoint saved or resumed from
        self.checkpoint_time = None
        self._serving = False
        self._exiting = False

    def update(self, step, *, loss=None, accuracy=None, epoch=None, total_steps=None,
               samples_per_second=None, step_seconds=None, start_step=None):
        """Records global step `step` done; a value given as None keeps the last one. The
        first call sets the step this process started at (start_step, default the step
        before this one) and starts the server."""
        with self._lock:
            first = self.step is None
            if first:
                self.start_step = step - 1 if start_step is None else start_step
            self.step = step
            if loss is not None:
                self.loss = float(loss)
            if accuracy is not None:
                self.accuracy = float(accuracy)
            if epoch is not None:
                self.epoch = int(epoch)
            if total_steps is not None:
                self.total_steps = int(total_steps)
            if samples_per_second is not None:
                self.samples_per_second = float(samples_per_second)
            if step_seconds is not None:
                self.step_seconds_total += step_seconds
        if first:
            self.start()

    def set_checkpoint(self, step, unix_time=None):
        """Records a checkpoint of global step `step` written at `unix_time` (now)."""
        with self._lock:
            self.checkpoint_step = int(step)
            self.checkpoint_time = time.time() if unix_time is None else float(unix_time)

    def start(self):
        """Once per process: the termination message at exit on every task, and on the
        chief with a port the /metrics server. Cheap elsewhere: no thread, no socket."""
        with self._lock:
            if self._serving:
                return
            self._serving = True
        _install_exit_hooks(self)
        port = metrics_port()
        if port and is_chief():
            registry = CollectorRegistry(auto_describe=True)
            registry.register(_Collector(self))
            _serve(port, registry)

    def collect(self):
        """The kubetrain_* families of prom.c that a TensorFlow program has: the step's,
        the run's extent and the checkpoint's; a value never reported is left out (the
        operator reads an absent series as unknown)."""
        with self._lock:
            s = dict(vars(self))
        out = [CounterMetricFamily("kubetrain_steps", "Training steps done, global across "
                                   "epochs and restarts.", value=s["step"]),
               CounterMetricFamily("kubetrain_step_seconds", "Seconds spent in training "
                                   "steps by this process.", value=s["step_seconds_total"])]

        def gauge(name, text, value):
            if value is not None:
                out.append(GaugeMetricFamily(name, text, value=value))

        gauge("kubetrain_epoch", "The epoch in progress (1-based).", s["epoch"])
        gauge("kubetrain_loss", "Loss of the last step over the global batch.", s["loss"])
        gauge("kubetrain_accuracy", "Accuracy of the last step over the global batch.",
              s["accuracy"])
        gauge("kubetrain_samples_per_second", "Global samples per second of the last step.",
              s["samples_per_second"])
        gauge("kubetrain_total_steps", "Global steps of the whole run.", s["total_steps"])
        gauge("kubetrain_start_step", "The global step this process resumed at "
              "(0: from scratch).", s["start_step"])
        gauge("kubetrain_checkpoint_step", "Global step of the newest checkpoint saved or "
              "resumed from.", s["checkpoint_step"])
        gauge("kubetrain_checkpoint_timestamp_seconds", "When that checkpoint was written "
              "(Unix seconds).", s["checkpoint_time"])
        return out

    def result(self):
        """The termination message of a finished run: {"step", "epoch", "loss",
        "accuracy"}, those known."""
        with self._lock:
            r = {"step": self.step, "epoch": self.epoch, "loss": _finite(self.loss),
                 "accuracy": _finite(self.accuracy)}
        return {k: v for k, v in r.items() if v is not None}

    def failure(self, etype, value):
        """The termination message of an uncaught exception: {"error"} with the line
        Python prints last ("ValueError: ..."), and "step" and "checkpoint_step" (0: none)
        once a step was recorded, as the C trainer writes them."""
        m = {"error": _error_text(etype, value)[:ERROR_MAX]}
        with self._lock:
            if self.step is not None:
                m["step"] = self.step
                m["checkpoint_step"] = self.checkpoint_step or 0
        return m


def _error_text(etype, value):
    """What Python prints of the exception ("ValueError: ..."). Where its first line ends
    in ":" and the rest is a stack, as TensorFlow's "Graph execution error:" is (the op's
    Python stack, then why, then the op's context), the first line and the first one of
    the details that is not the stack: the operator quotes this in the job's condition."""
    text = "".join(traceback.format_exception_only(etype, value)).strip()
    lines = text.split("\n")
    if not lines[0].endswith(":") or not any(
            ln.startswith((" ", "\t", "Detected at")) for ln in lines[1:]):
        return text
    why = next((ln for ln in lines[1:] if ln.strip() and not ln.startswith((" ", "\t"))
                and not ln.startswith("Detected at")), None)
    return lines[0] + (" " + why.strip() if why else "")


class _Collector:
    """Hands prometheus_client the families at each scrape (not Gauge objects: the step
    counter is set, not incremented, since a resumed run starts at its checkpoint's step;
    and it has no _created series, as prom.c's has none)."""

    def __init__(self, progress):
        self._progress = progress

    def collect(self):
        return self._progress.collect()


def _serve(port, registry):
    """Serves registry on every address at port: IPv6 with IPv4 mapped where the kernel has
    IPv6 (a pod's IP may be either), else IPv4. Fails with the variable named, as the C
    trainer's --metrics-port does: a port the operator cannot reach is a broken job."""
    try:
        try:
            start_http_server(port, addr="::", registry=registry)
        except OSError as e:
            if e.errno not in (97, 99):  # EAFNOSUPPORT, EADDRNOTAVAIL: no IPv6
                raise
            start_http_server(port, addr="0.0.0.0", registry=registry)
    except OSError as e:
        raise OSError(e.errno, f"{PORT_ENV}={port}: cannot serve /metrics: {e.strerror}") \
            from None


def termination_write(message):
    """Writes the termination message (one JSON line) where the C trainer writes it:
    KUBETRAIN_TERMINATION_FILE, else /dev/termination-log when writable, else nowhere."""
    path = os.environ.get(TERMINATION_ENV) or ""
    if not path:
        if not os.access(TERMINATION_LOG, os.W_OK):
            return
        path = TERMINATION_LOG
    try:
        with open(path, "w", encoding="utf-8") as f:
            f.write(json.dumps(message) + "\n")
    except OSError as e:
        print(f"kubetrain: cannot write termination message to {path}: {e.strerror}",
              file=sys.stderr)


def _install_exit_hooks(p):
    """An uncaught exception writes its failure (before Python prints the traceback and
    runs atexit); a normal exit writes the result. A program ended by sys.exit(n) writes
    the result too: Python tells atexit nothing of n."""
    previous = sys.excepthook

    def excepthook(etype, value, tb):
        p._exiting = True
        termination_write(p.failure(etype, value))
        previous(etype, value, tb)

    def at_exit():
        if not p._exiting:
            termination_write(p.result())

    sys.excepthook = excepthook
    atexit.register(at_exit)


_progress = Progress()


def progress():
    """This process's Progress."""
    return _progress
