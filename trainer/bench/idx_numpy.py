"""Fashion-MNIST/MNIST IDX files (raw or .gz) as numpy arrays, for the Python peers."""
import gzip
import os

import numpy as np


def read_idx(path, offset):
    with gzip.open(path + ".gz", "rb") if os.path.exists(path + ".gz") else open(path, "rb") as f:
        return np.frombuffer(f.read(), dtype=np.uint8, offset=offset)


def load(data_dir, prefix):
    """Images scaled to [0, 1] as (n, 28, 28) float32 and labels as int64."""
    x = read_idx(os.path.join(data_dir, prefix + "-images-idx3-ubyte"), 16).reshape(-1, 28, 28)
    y = read_idx(os.path.join(data_dir, prefix + "-labels-idx1-ubyte"), 8).astype(np.int64)
    return x / np.float32(255), y
