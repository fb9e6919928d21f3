"""Fashion-MNIST's IDX files (gzip) as NumPy arrays, for the tests' Keras scripts
(keras_check.py, keras_finetune.py), which import it from their own directory."""
import gzip

import numpy as np


def idx(path):
    """The array of an IDX file: its dimensions from the header, uint8 values."""
    with gzip.open(path) as f:
        data = f.read()
    dims = data[3]
    shape = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(dims)]
    return np.frombuffer(data, np.uint8, offset=4 + 4 * dims).reshape(shape)
