"""The automatic ProgressCallback: kubetrain-auto.pth imports this module at every Python
start and calls install(), so that an unchanged Keras program run by a TrainingJob reports
its progress (docs/tensorflow.md, "Progress").

Under a TrainingJob (KUBETRAIN_JOB, which the operator sets, is not empty) and unless
KUBETRAIN_AUTO_PROGRESS is 0, install() puts a finder on sys.meta_path that waits for the
import of keras (Keras 3) or tf_keras (Keras 2): once either has loaded, its Model.fit adds a
kubetrain ProgressCallback on that Keras to the callbacks of every call that has none. The
start of every other process costs two environment lookups: this module imports no more than
sys and os, the kubetrain package (and prometheus_client) only when a fit() begins.

Nothing here may stop a program: a failure is one warning on stderr and the program goes on
without automatic progress (an exception of the callback's own in fit() turns it off for the
rest of that fit)."""

import os
import sys

AUTO_ENV = "KUBETRAIN_AUTO_PROGRESS"
JOB_ENV = "KUBETRAIN_JOB"
KERAS_MODULES = ("keras", "tf_keras")
# The hooks of ProgressMixin, each guarded in the automatic callback.
HOOKS = ("on_train_begin", "on_epoch_begin", "on_train_batch_begin", "on_train_batch_end",
         "on_epoch_end", "on_train_end")


def _warn(what, e):
    print(f"kubetrain: automatic progress off: {what}: {type(e).__name__}: {e}",
          file=sys.stderr, flush=True)


def wanted(environ=None):
    """Whether the hook goes in: the process runs under a TrainingJob and has not opted out."""
    env = os.environ if environ is None else environ
    return bool(env.get(JOB_ENV)) and env.get(AUTO_ENV, "").strip() != "0"


def _guarded(cls):
    """cls (a ProgressCallback class) whose hooks warn once and then do nothing on an
    exception, instead of failing the fit: the program did not ask for this callback."""
    def guard(name):
        hook = getattr(cls, name)

        def run(self, *args, **kwargs):
            if self._kubetrain_off:
                return
            try:
                hook(self, *args, **kwargs)
            except Exception as e:  # noqa: BLE001 -- any failure: warn, train on
                self._kubetrain_off = True
                _warn(f"ProgressCallback.{name}", e)
        run.__name__ = name
        return run

    attrs = {name: guard(name) for name in HOOKS}
    attrs["_kubetrain_off"] = False
    return type("AutoProgressCallback", (cls,), attrs)


def with_progress(callbacks, keras_module, batch_size=None):
    """The callbacks for a fit() given `callbacks` (None or a list or tuple): the same when
    one is a kubetrain ProgressCallback (on any Keras) or when they are something else (a
    CallbackList), else a new list with an automatic ProgressCallback on keras_module's
    Callback appended, with fit()'s batch_size (samples per second; none for a dataset)."""
    from kubetrain._callback import ProgressMixin, callback_class

    if callbacks is not None and not isinstance(callbacks, (list, tuple)):
        return callbacks
    callbacks = list(callbacks or [])
    if any(isinstance(c, ProgressMixin) for c in callbacks):
        return callbacks
    auto = _auto_classes.get(keras_module.__name__)
    if auto is None:
        auto = _guarded(callback_class(keras_module.callbacks.Callback))
        _auto_classes[keras_module.__name__] = auto
    return callbacks + [auto(batch_size=batch_size if isinstance(batch_size, int) else None)]


_auto_classes = {}

# Model.fit(x, y, batch_size, epochs, verbose, callbacks, ...) in both Keras versions.
BATCH_SIZE_POSITION, CALLBACKS_POSITION = 2, 5


def patch(keras_module):
    """Wraps keras_module.Model.fit (keras or tf_keras, loaded) to add the callback."""
    model = keras_module.Model
    fit = model.fit

    def fit_with_progress(self, *args, **kwargs):
        try:
            batch = (args[BATCH_SIZE_POSITION] if len(args) > BATCH_SIZE_POSITION
                     else kwargs.get("batch_size"))
            if len(args) > CALLBACKS_POSITION:
                args = list(args)
                args[CALLBACKS_POSITION] = with_progress(args[CALLBACKS_POSITION], keras_module,
                                                         batch)
            else:
                kwargs["callbacks"] = with_progress(kwargs.get("callbacks"), keras_module, batch)
        except Exception as e:  # noqa: BLE001 -- the program's fit() runs as it was called
            _warn("adding the callback to fit()", e)
        return fit(self, *args, **kwargs)

    fit_with_progress.__name__ = fit.__name__
    fit_with_progress.__doc__ = fit.__doc__
    fit_with_progress.__wrapped__ = fit
    model.fit = fit_with_progress


class _Finder:
    """Patches keras and tf_keras once they have loaded: finds their spec with the finders
    after it and runs patch() after the loader's exec_module."""

    def find_spec(self, name, path=None, target=None):
        if name not in KERAS_MODULES or name in _patched:
            return None
        try:
            spec = self._real_spec(name, path, target)
            if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
                return spec
            loader, exec_module = spec.loader, spec.loader.exec_module

            def exec_and_patch(module):
                exec_module(module)
                _patched.add(name)
                try:
                    patch(module)
                except Exception as e:  # noqa: BLE001
                    _warn(f"patching {name}.Model.fit", e)

            loader.exec_module = exec_and_patch
            return spec
        except Exception as e:  # noqa: BLE001 -- the import goes on as if unhooked
            _warn(f"hooking the import of {name}", e)
            return None

    def _real_spec(self, name, path, target):
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            if finder is self or find is None:
                continue
            spec = find(name, path, target)
            if spec is not None:
                return spec
        return None


_patched = set()


def install():
    """Called at Python's start by kubetrain-auto.pth: the finder, when wanted()."""
    try:
        if wanted() and not any(isinstance(f, _Finder) for f in sys.meta_path):
            sys.meta_path.insert(0, _Finder())
    except Exception as e:  # noqa: BLE001
        _warn("installing the import hook", e)
