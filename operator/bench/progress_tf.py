"""progress_tf.py: the TensorFlow chief of bench-progress (progress.py starts it).

A real Keras fit() under real TensorFlow with the kubetrain package's ProgressCallback,
which serves /metrics through prometheus_client on KUBETRAIN_METRICS_PORT: the series a
user's TensorFlow program gives the operator, beside the mock C-trainer chiefs. It sleeps
0.1 s a step so that it trains for as long as the benchmark runs at a few percent of a
core; progress.py stops it with SIGTERM.
"""
import time

import numpy as np
import tensorflow as tf

import kubetrain.keras

x = np.random.default_rng(0).random((6400, 8), dtype=np.float32)
y = (x.sum(axis=1) > 4).astype("int32")
model = tf.keras.Sequential([tf.keras.Input((8,)), tf.keras.layers.Dense(16, activation="relu"),
                             tf.keras.layers.Dense(2, activation="softmax")])
model.compile("sgd", "sparse_categorical_crossentropy", metrics=["accuracy"])
nap = tf.keras.callbacks.LambdaCallback(on_train_batch_end=lambda batch, logs: time.sleep(0.1))
print("progress_tf: training", flush=True)
model.fit(x, y, batch_size=64, epochs=10000, verbose=0,
          callbacks=[kubetrain.keras.ProgressCallback(), nap])
