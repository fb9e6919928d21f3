"""kubetrain: a TensorFlow program's training progress for the kubetrain operator.

    import kubetrain
    kubetrain.report(step=step, loss=loss, accuracy=acc, epoch=epoch, total_steps=total)
    kubetrain.checkpoint(step)                     # after a checkpoint of that step is saved

    from kubetrain.keras import ProgressCallback   # fit(..., callbacks=[ProgressCallback()])

On the chief (TF_CONFIG's "chief", else worker 0), when KUBETRAIN_METRICS_PORT names a port,
GET /metrics answers with the kubetrain_* series of kubetrain's own trainer; on exit every task
writes the termination message the operator reads (docs/tensorflow.md, "Progress"). Installed
with pip, the package also adds a ProgressCallback to every Keras fit() of a program run by a
TrainingJob that passes none (_kubetrain_auto; KUBETRAIN_AUTO_PROGRESS=0 turns that off).
"""

from ._progress import is_chief, progress

__all__ = ["report", "checkpoint", "is_chief"]


def report(step, *, loss=None, accuracy=None, epoch=None, total_steps=None,
           samples_per_second=None, start_step=None):
    """Records that global step `step` (the whole run's, counting from 1 across restarts) is
    done, with what is known of it; None keeps the last value. epoch is 1-based, as in
    Keras's "Epoch 1/3". The first call in a process says where it started: start_step, by
    default step - 1; pass it when a resumed loop reports less often than every step, so that
    the operator counts the steps a restart lost exactly."""
    progress().update(int(step), loss=loss, accuracy=accuracy, epoch=epoch,
                      total_steps=total_steps, samples_per_second=samples_per_second,
                      start_step=start_step)


def checkpoint(step, unix_time=None):
    """Records that a checkpoint of global step `step` was saved (or resumed from) at
    unix_time, default now: status.checkpoint."""
    progress().set_checkpoint(step, unix_time)
