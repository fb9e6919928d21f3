#!/usr/bin/env python3
"""Synchronous data-parallel training with tf.distribute.MultiWorkerMirroredStrategy and
Keras model.fit, the shape of TensorFlow's multi-worker Keras tutorial: every pod runs
this same program; TF_CONFIG (the operator's, or a hand-made one) says who is who.

  mwms.py [--data-dir DIR] [--checkpoint-dir DIR] [--epochs N] [--steps-per-epoch N]
          [--per-worker-batch N] [--learning-rate F] [--seed N] [--heartbeat-timeout S]

With a checkpoint directory ($KUBETRAIN_CHECKPOINT_DIR, the job's directory on its
checkpoint claim), BackupAndRestore backs the training state up there at each epoch end
and a restarted group resumes from it; the chief also keeps each epoch's weights
(ckpt/ckpt-<epoch>, for evaluator.py) and saves the final model (model/). The other
workers write their copies to temporary directories that they delete. kubetrain's
ProgressCallback reports the steps, loss, accuracy and BackupAndRestore's saves: on the
chief, GET /metrics on $KUBETRAIN_METRICS_PORT, which the operator reads into the job's
status (docs/tensorflow.md, "Progress"; in kubetrain/tensorflow every fit() would get one
without this line).
"""
import argparse
import json
import os
import shutil
import tempfile

# Keras 3 (TensorFlow >= 2.16's default) rejects MultiWorkerMirroredStrategy's per-replica
# batches in fit(); Keras 2 (the tf-keras package) is what the tutorial runs.
os.environ["TF_USE_LEGACY_KERAS"] = "1"
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
import kubetrain.keras  # noqa: E402
import tensorflow as tf  # noqa: E402

import tutorial  # noqa: E402

PROG = "mwms"


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data-dir", default=tutorial.default_data_dir())
    ap.add_argument("--checkpoint-dir", default=os.environ.get("KUBETRAIN_CHECKPOINT_DIR", ""))
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--steps-per-epoch", type=int, default=70)
    ap.add_argument("--per-worker-batch", type=int, default=64)
    ap.add_argument("--learning-rate", type=float, default=0.001)
    ap.add_argument("--seed", type=int, default=1, help="the shuffle's, the same on every worker")
    ap.add_argument("--heartbeat-timeout", type=int, default=120, metavar="S",
                    help="seconds a task may miss TensorFlow's coordination heartbeats "
                         "before the group fails (TensorFlow's default: 10)")
    return ap.parse_args()


def is_chief(resolver):
    """The chief task if the cluster has one, else worker 0 (also with no TF_CONFIG)."""
    if resolver.task_type in (None, "chief"):
        return True
    return (resolver.task_type == "worker" and resolver.task_id == 0
            and "chief" not in resolver.cluster_spec().jobs)


def main():
    a = parse_args()
    tutorial.coordination_heartbeat(a.heartbeat_timeout)
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    tutorial.exit_on_sigterm()
    resolver = strategy.cluster_resolver
    chief = is_chief(resolver)
    print(f"{PROG}: task {resolver.task_type}/{resolver.task_id}"
          f"{' (chief)' if chief else ''}; replicas in sync: {strategy.num_replicas_in_sync}; "
          f"cluster: {json.dumps(resolver.cluster_spec().as_dict(), sort_keys=True)}", flush=True)

    global_batch = a.per_worker_batch * strategy.num_replicas_in_sync
    x, y = tutorial.load(a.data_dir, "train")
    # Each worker builds the whole pipeline and the strategy keeps its share of every
    # global batch (AutoShardPolicy.DATA for an in-memory set): the shuffle's seed is the
    # same on every worker, so that the shares are disjoint.
    ds = (tf.data.Dataset.from_tensor_slices((x, y)).shuffle(len(x), seed=a.seed).repeat()
          .batch(global_batch).map(tutorial.scale).prefetch(tf.data.AUTOTUNE))

    with strategy.scope():
        model = tutorial.cnn(a.learning_rate)

    callbacks = []
    model_dir = None
    if a.checkpoint_dir:
        backup_dir, ckpt_dir, model_dir = tutorial.checkpoint_dirs(a.checkpoint_dir)
        # Both callbacks know the strategy: only the chief writes into these directories,
        # the others write to temporary ones beside them and delete them.
        callbacks += [tf.keras.callbacks.BackupAndRestore(backup_dir=backup_dir),
                      tf.keras.callbacks.ModelCheckpoint(os.path.join(ckpt_dir, "ckpt-{epoch}"),
                                                         save_weights_only=True)]
    callbacks += [tutorial.FirstEpochLog(PROG, a.epochs),
                  kubetrain.keras.ProgressCallback(batch_size=global_batch)]
    hist = model.fit(ds, epochs=a.epochs, steps_per_epoch=a.steps_per_epoch,
                     callbacks=callbacks, verbose=2)

    # Saving runs collective ops, so every worker saves; only the chief's copy is kept.
    if model_dir:
        target = model_dir if chief else tempfile.mkdtemp(prefix="mwms-model-")
        model.save(target)
        if not chief:
            shutil.rmtree(target, ignore_errors=True)
    last = {k: float(v[-1]) for k, v in hist.history.items()} if hist.history else {}
    print(f"{PROG}: done: {json.dumps(last, sort_keys=True)}"
          f"{f'; model saved to {model_dir}' if chief and model_dir else ''}", flush=True)


if __name__ == "__main__":
    main()
