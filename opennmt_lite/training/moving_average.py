"""`train.moving_average_decay`: OpenNMT-tf's exponential moving average of the weights.

After each optimizer update (one per group of accumulated batches) at step n, every trainable
weight w updates its average a as tf.train.ExponentialMovingAverage does with
`num_updates=step`: d = min(decay, (1 + n) / (10 + n)), a -= (a - w) * (1 - d). OpenNMT-tf
creates the averages at the first update of a run, equal to the weights that update produced.

What OpenNMT-tf does with them, and so this package: checkpoints hold the averaged weights as
the model's weights (so infer, export, score and average_checkpoints read the average), and
evaluation (with its export on best) runs on them. Unlike OpenNMT-tf, which then resumes from the
averaged weights and starts a new average, the training checkpoint also holds the trained
weights (see checkpointing/training_checkpoint.py), so a resumed run is the uninterrupted one.
A checkpoint without them (older, OpenNMT-tf's, an average) resumes as OpenNMT-tf would: from
its weights, the average starting again at the next update.
"""

import contextlib
import logging

import keras
import tensorflow as tf

from opennmt_lite.checkpointing.names import named_trainable

logger = logging.getLogger("opennmt_lite")


class MovingAverage:
    """The averages of a built model's trainable weights (`averages`: {path: variable}, named
    like named_trainable). Create it in the distribution strategy's scope, as the model."""

    def __init__(self, model, decay):
        if decay < 0.9:
            logger.warning("train.moving_average_decay is %g: usually close to 1 (e.g. 0.9999), "
                           "as OpenNMT-tf also warns", decay)
        self.decay = decay
        self.weights = named_trainable(model)
        self.averages = {
            path: keras.Variable(tf.convert_to_tensor(weight), dtype=weight.dtype,
                                 trainable=False, name=f"moving_average_{index}")
            for index, (path, weight) in enumerate(self.weights.items())}
        # True until the averages hold this run's values (restored, or set at the next update).
        self.fresh = True
        self._update = tf.function(self._update_fn)

    def start_from_weights(self):
        """Sets every average to its weight (a run without restored averages)."""
        for path, weight in self.weights.items():
            self.averages[path].assign(tf.convert_to_tensor(weight))
        self.fresh = True

    def update(self, step):
        """The averages after the update that reached `step`."""
        if self.fresh:
            self.start_from_weights()
            self.fresh = False
        else:
            self._update(tf.constant(step, tf.int64))

    def _update_fn(self, step):
        count = tf.cast(step, tf.float32)
        decay = tf.minimum(tf.constant(self.decay, tf.float32), (1.0 + count) / (10.0 + count))
        for path, weight in self.weights.items():
            average = self.averages[path]
            average.assign_sub((average - tf.convert_to_tensor(weight)) * (1.0 - decay))

    @contextlib.contextmanager
    def averaged_weights(self):
        """The model computes with the averages inside (evaluation, export), with its trained
        weights again afterwards."""
        trained = {path: tf.identity(tf.convert_to_tensor(w)) for path, w in self.weights.items()}
        for path, weight in self.weights.items():
            weight.assign(tf.convert_to_tensor(self.averages[path]))
        try:
            yield
        finally:
            for path, weight in self.weights.items():
                weight.assign(trained[path])
