"""ProgressCallback: model.fit's progress for the kubetrain operator.

    model.fit(data, epochs=3, steps_per_epoch=70,
              callbacks=[tf.keras.callbacks.BackupAndRestore(backup_dir),
                         kubetrain.keras.ProgressCallback(batch_size=global_batch)])

The callback is built on the Keras that tf.keras names: tf-keras when TF_USE_LEGACY_KERAS
is 1 or true (as TensorFlow decides), else Keras 3.
"""

import os

from ._callback import callback_class

if os.environ.get("TF_USE_LEGACY_KERAS") in ("true", "True", "1"):
    from tf_keras.callbacks import Callback
else:
    from keras.callbacks import Callback

ProgressCallback = callback_class(Callback)

__all__ = ["ProgressCallback"]
