#!/usr/bin/env python3
"""A sidecar evaluator: evaluates the test set with each checkpoint the chief writes
(ckpt/ckpt-<epoch> under $KUBETRAIN_CHECKPOINT_DIR, by ps.py or mwms.py) as it appears,
like tf.keras.utils.SidecarEvaluator, and exits 0 once it has evaluated the final
epoch's. It is not in TF_CONFIG's cluster (its task type is "evaluator") and talks to no
other task: the checkpoint claim is all it shares with them.

  evaluator.py [--data-dir DIR] [--checkpoint-dir DIR] [--epochs N] [--eval-steps N]
               [--timeout S]

--epochs is the training's; exits 1 when no new checkpoint came for --timeout seconds.
"""
import argparse
import json
import os
import sys

# The chief's checkpoints are tf-keras (Keras 2) TensorFlow-format weights, which Keras 3
# cannot load.
os.environ["TF_USE_LEGACY_KERAS"] = "1"
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
import tensorflow as tf  # noqa: E402

import tutorial  # noqa: E402

PROG = "evaluator"
BATCH = 256


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data-dir", default=tutorial.default_data_dir())
    ap.add_argument("--checkpoint-dir", default=os.environ.get("KUBETRAIN_CHECKPOINT_DIR", ""))
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--eval-steps", type=int, default=0, help="batches of 256; 0: the whole set")
    ap.add_argument("--timeout", type=float, default=600)
    return ap.parse_args()


def main():
    a = parse_args()
    if not a.checkpoint_dir:
        sys.exit(f"{PROG}: no checkpoint directory: set KUBETRAIN_CHECKPOINT_DIR or pass "
                 "--checkpoint-dir")
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    print(f"{PROG}: task {resolver.task_type}/{resolver.task_id}; "
          f"cluster: {json.dumps(resolver.cluster_spec().as_dict(), sort_keys=True)}", flush=True)
    _, ckpt_dir, _ = tutorial.checkpoint_dirs(a.checkpoint_dir)

    x, y = tutorial.load(a.data_dir, "test")
    test = tf.data.Dataset.from_tensor_slices((x, y)).batch(BATCH).map(tutorial.scale)
    if a.eval_steps > 0:
        test = test.take(a.eval_steps)
    model = tutorial.cnn()
    tutorial.exit_on_sigterm()

    # checkpoints_iterator yields the newest checkpoint each time the directory's
    # "checkpoint" file names a new one, so epochs written close together may be skipped.
    for path in tf.train.checkpoints_iterator(ckpt_dir, min_interval_secs=1, timeout=a.timeout):
        epoch = int(path.rsplit("-", 1)[1])
        model.load_weights(path).expect_partial()
        loss, accuracy = model.evaluate(test, verbose=0)
        print(f"{PROG}: {os.path.basename(path)} (epoch {epoch}/{a.epochs}): "
              f"test loss {loss:.4f}, accuracy {accuracy:.4f}", flush=True)
        if epoch >= a.epochs:
            print(f"{PROG}: evaluated the final checkpoint", flush=True)
            return
    sys.exit(f"{PROG}: no new checkpoint in {ckpt_dir} for {a.timeout:g} s; stopping")


if __name__ == "__main__":
    main()
