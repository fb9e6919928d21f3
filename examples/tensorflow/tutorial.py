"""What the three examples share: Fashion-MNIST from its IDX files (raw or .gz), the
tutorial's CNN, the log line of the epoch fit starts at, and where each kind of state
goes under the checkpoint directory. tf.keras must be Keras 2 (tf-keras): the programs
set TF_USE_LEGACY_KERAS=1 before they import this module or TensorFlow."""
import gzip
import os
import signal

import numpy as np
import tensorflow as tf

# Debian's dataset-fashion-mnist puts the files here; the kubetrain/tensorflow image
# sets KUBETRAIN_DATA_DIR=/data.
DEBIAN_DATA_DIR = "/usr/share/datasets/fashion-mnist"
FILES = {"train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
         "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")}
IMAGES_HEADER, LABELS_HEADER = 16, 8


def default_data_dir():
    return os.environ.get("KUBETRAIN_DATA_DIR", DEBIAN_DATA_DIR)


def idx_path(data_dir, name):
    """The file `name` in data_dir, compressed or not; exits naming both when neither is."""
    for p in (os.path.join(data_dir, name + ".gz"), os.path.join(data_dir, name)):
        if os.path.exists(p):
            return p
    raise SystemExit(f"no {name}[.gz] in {data_dir}: pass --data-dir or set KUBETRAIN_DATA_DIR "
                     f"(Debian: apt-get install dataset-fashion-mnist)")


def _read_idx(path, offset):
    with (gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb")) as f:
        return np.frombuffer(f.read(), dtype=np.uint8, offset=offset)


def load(data_dir, split):
    """Images as uint8 (n, 28, 28) and labels as int64, read in this process."""
    images, labels = FILES[split]
    x = _read_idx(idx_path(data_dir, images), IMAGES_HEADER).reshape(-1, 28, 28)
    y = _read_idx(idx_path(data_dir, labels), LABELS_HEADER).astype(np.int64)
    return x, y


def load_tf(data_dir, split):
    """The same arrays as TensorFlow ops, so that they are read wherever the ops run: a
    ParameterServerStrategy dataset function runs on the workers, each with its own copy
    of the files (the image's /data), not on the coordinator that traces it."""
    def read(name, header):
        path = idx_path(data_dir, name)
        raw = tf.io.read_file(path)
        if path.endswith(".gz"):
            raw = tf.io.decode_compressed(raw, compression_type="GZIP")
        return tf.io.decode_raw(tf.strings.substr(raw, header, tf.strings.length(raw) - header),
                                tf.uint8)
    images, labels = FILES[split]
    x = tf.reshape(read(images, IMAGES_HEADER), [-1, 28, 28])
    y = tf.cast(read(labels, LABELS_HEADER), tf.int64)
    return x, y


def scale(x, y):
    """uint8 pixels to floats in [0, 1]: in the input pipeline, so the arrays stay 1 byte."""
    return tf.cast(x, tf.float32) / 255.0, y


def cnn(learning_rate=0.001, steps_per_execution=1):
    """The tutorial's model, compiled: conv 3x3x32 -> dense 128 -> 10 logits, SGD."""
    model = tf.keras.Sequential([
        tf.keras.Input(shape=(28, 28)),
        tf.keras.layers.Reshape(target_shape=(28, 28, 1)),
        tf.keras.layers.Conv2D(32, 3, activation="relu"),
        tf.keras.layers.Flatten(),
        tf.keras.layers.Dense(128, activation="relu"),
        tf.keras.layers.Dense(10),
    ])
    model.compile(optimizer=tf.keras.optimizers.SGD(learning_rate=learning_rate),
                  loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"], steps_per_execution=steps_per_execution)
    return model


class FirstEpochLog(tf.keras.callbacks.Callback):
    """Logs the epoch fit starts at: after BackupAndRestore restored a backup (it runs
    before this callback), that is the epoch after the last one backed up."""

    def __init__(self, prog, epochs):
        super().__init__()
        self.prog, self.epochs, self.logged = prog, epochs, False

    def on_epoch_begin(self, epoch, logs=None):
        if self.logged:
            return
        self.logged = True
        if epoch > 0:
            print(f"{self.prog}: resuming at epoch {epoch + 1}/{self.epochs} "
                  f"(BackupAndRestore restored epoch {epoch})", flush=True)
        else:
            print(f"{self.prog}: starting at epoch 1/{self.epochs}", flush=True)


def exit_on_sigterm():
    """Kubernetes stops a pod with SIGTERM, then SIGKILL once the grace period is over.
    TensorFlow's runtime catches SIGTERM as soon as a distribution strategy or server
    starts (the coordination service's preemption notifier logs "SIGTERM caught") and the
    task carries on; and a program that is its container's PID 1, as here, is not ended
    by a signal it leaves at the default action. Either way a deleted pod would keep
    training, and writing to the claim, for the whole grace period. Call this after the
    strategy or server is made: SIGTERM then ends the task at the next Python step (exit
    143) and a restarted group resumes from the last backup. A task that waits must wait
    in Python (time.sleep), not in TensorFlow (server.join()), for the handler to run."""
    signal.signal(signal.SIGTERM, lambda signum, frame: os._exit(128 + signum))


def coordination_heartbeat(seconds):
    """Gives TensorFlow's coordination service a heartbeat timeout of `seconds`; call it
    before making the strategy, which otherwise starts the service with its default, 10 s.
    Every task heartbeats to the leader (the chief, else worker 0) and the group fails as
    soon as one heartbeat takes longer ("The following tasks are unhealthy (stopped sending
    heartbeats)"): a pod starved of CPU on a busy node, a task in a long save, is enough.
    A task that dies is still seen at once (its peers' connections close); only a task
    that hangs is seen later. Without a cluster in TF_CONFIG there is no service."""
    from tensorflow.python.distribute import multi_worker_util
    from tensorflow.python.eager import context
    cluster = tf.distribute.cluster_resolver.TFConfigClusterResolver().cluster_spec()
    if not cluster.as_dict():
        return
    # The leader MultiWorkerMirroredStrategy would pick; it keeps a service configured
    # before it instead of configuring its own.
    context.context().configure_coordination_service(
        service_type="standalone", service_leader=multi_worker_util.coordination_leader(cluster),
        heartbeat_timeout_in_ms=seconds * 1000)


def checkpoint_dirs(root):
    """Where the examples keep their state under KUBETRAIN_CHECKPOINT_DIR: BackupAndRestore's
    backup, the chief's per-epoch weights (ckpt-<epoch>, read by evaluator.py) and the
    final model."""
    return (os.path.join(root, "backup"), os.path.join(root, "ckpt"),
            os.path.join(root, "model"))
