#!/usr/bin/env python3
"""Asynchronous training with tf.distribute.ParameterServerStrategy and Keras model.fit,
the shape of TensorFlow's parameter server tutorial. One program for every role, picked
by TF_CONFIG's task type:

  chief   the coordinator: builds the model (its variables live on the ps tasks, split
          among them), sends training steps to the workers and exits 0 when fit ends;
  worker  runs the steps it is sent;
  ps      holds variables.

Workers and ps tasks start a tf.distribute.Server and serve until they are stopped: they
never exit on their own (the operator stops them when the chief has succeeded).

  ps.py [--data-dir DIR] [--checkpoint-dir DIR] [--epochs N] [--steps-per-epoch N]
        [--per-worker-batch N] [--learning-rate F]

With a checkpoint directory ($KUBETRAIN_CHECKPOINT_DIR), the chief backs the training
state up there (BackupAndRestore: a restarted chief resumes at the epoch after the last
one backed up) and keeps each epoch's weights as ckpt/ckpt-<epoch> for evaluator.py.
"""
import argparse
import json
import os
import sys
import time

# The coordinator's model and callbacks are Keras 2's (tf-keras): Keras 3 has no
# ParameterServerStrategy support in fit().
os.environ["TF_USE_LEGACY_KERAS"] = "1"
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
# As in the tutorial: a lost worker or ps fails the coordinator's RPCs at once rather
# than after gRPC's own retries, so ClusterCoordinator's failure handling takes over.
os.environ.setdefault("GRPC_FAIL_FAST", "use_caller")
import tensorflow as tf  # noqa: E402

import tutorial  # noqa: E402

PROG = "ps"


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data-dir", default=tutorial.default_data_dir())
    ap.add_argument("--checkpoint-dir", default=os.environ.get("KUBETRAIN_CHECKPOINT_DIR", ""))
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--steps-per-epoch", type=int, default=70)
    ap.add_argument("--per-worker-batch", type=int, default=64)
    ap.add_argument("--learning-rate", type=float, default=0.001)
    return ap.parse_args()


def serve(resolver):
    """A worker or ps task: serve the cluster until killed."""
    server = tf.distribute.Server(resolver.cluster_spec(), job_name=resolver.task_type,
                                  task_index=resolver.task_id,
                                  protocol=resolver.rpc_layer or "grpc", start=True)
    tutorial.exit_on_sigterm()
    print(f"{PROG}: {resolver.task_type}/{resolver.task_id} serving at {server.target}",
          flush=True)
    # Not server.join(): SIGTERM's handler runs only when Python does.
    while True:
        time.sleep(3600)


def coordinate(a, resolver):
    """The chief: model.fit over the workers, variables on the ps tasks."""
    cluster = resolver.cluster_spec().as_dict()
    n_ps = len(cluster.get("ps", []))
    if n_ps == 0 or not cluster.get("worker"):
        sys.exit(f"{PROG}: TF_CONFIG's cluster needs ps and worker tasks, has {sorted(cluster)}")
    # Variables of 256 KiB or more are split among the ps tasks (the dense layer's kernel).
    partitioner = tf.distribute.experimental.partitioners.MinSizePartitioner(
        min_shard_bytes=256 << 10, max_shards=n_ps)
    strategy = tf.distribute.ParameterServerStrategy(resolver, variable_partitioner=partitioner)
    tutorial.exit_on_sigterm()
    print(f"{PROG}: task chief/{resolver.task_id} (coordinator); "
          f"workers: {len(cluster['worker'])}; ps: {n_ps}; "
          f"replicas in sync: {strategy.num_replicas_in_sync}; "
          f"cluster: {json.dumps(cluster, sort_keys=True)}", flush=True)

    global_batch = a.per_worker_batch * len(cluster["worker"])

    def dataset_fn(input_context):
        # Runs on each worker: the files are read there, from the worker's own copy.
        batch = input_context.get_per_replica_batch_size(global_batch)
        x, y = tutorial.load_tf(a.data_dir, "train")
        ds = tf.data.Dataset.from_tensor_slices((x, y))
        ds = ds.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
        return ds.shuffle(10000).repeat().batch(batch).map(tutorial.scale).prefetch(2)

    with strategy.scope():
        model = tutorial.cnn(a.learning_rate, steps_per_execution=5)

    callbacks = []
    if a.checkpoint_dir:
        backup_dir, ckpt_dir, _ = tutorial.checkpoint_dirs(a.checkpoint_dir)
        callbacks += [tf.keras.callbacks.BackupAndRestore(backup_dir=backup_dir),
                      tf.keras.callbacks.ModelCheckpoint(os.path.join(ckpt_dir, "ckpt-{epoch}"),
                                                         save_weights_only=True)]
    callbacks.append(tutorial.FirstEpochLog(PROG, a.epochs))
    hist = model.fit(tf.keras.utils.experimental.DatasetCreator(dataset_fn), epochs=a.epochs,
                     steps_per_epoch=a.steps_per_epoch, callbacks=callbacks, verbose=2)
    last = {k: float(v[-1]) for k, v in hist.history.items()} if hist.history else {}
    print(f"{PROG}: done: {json.dumps(last, sort_keys=True)}", flush=True)


def main():
    a = parse_args()
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    if resolver.task_type in ("worker", "ps"):
        serve(resolver)
    elif resolver.task_type == "chief":
        coordinate(a, resolver)
    else:
        sys.exit(f"{PROG}: TF_CONFIG task type {resolver.task_type!r}: this program runs as "
                 "chief, worker or ps (an evaluator runs evaluator.py)")


if __name__ == "__main__":
    main()
