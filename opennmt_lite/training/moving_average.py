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
from keras import ops

from opennmt_lite.checkpointing.names import named_trainable
from opennmt_lite.layers.fast_paths import TENSORFLOW

if TENSORFLOW:
    import tensorflow as tf

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
            path: keras.Variable(ops.convert_to_tensor(weight), dtype=weight.dtype,
                                 trainable=False, name=f"moving_average_{index}")
            for index, (path, weight) in enumerate(self.weights.items())}
        # True until the averages hold this run's values (restored, or set at the next update).
        self.fresh = True
        if TENSORFLOW:
            self._update = tf.function(self._update_fn)
        else:
            import jax

            paths = list(self.weights)
            compiled = jax.jit(lambda averages, weights, step: averaged(
                averages, weights, step, self.decay))

            def update(step):
                new = compiled([self.averages[p].value for p in paths],
                               [self.weights[p].value for p in paths], step)
                for path, value in zip(paths, new):
                    self.averages[path].assign(value)

            self._update = update

    def start_from_weights(self):
        """Sets every average to its weight (a run without restored averages)."""
        for path, weight in self.weights.items():
            value = ops.convert_to_tensor(weight)
            # (JAX: a buffer of its own, as the train step donates the weights' buffers)
            self.averages[path].assign(value if TENSORFLOW else ops.copy(value))
        self.fresh = True

    def update(self, step):
        """The averages after the update that reached `step`."""
        if self.fresh:
            self.start_from_weights()
            self.fresh = False
        else:
            self._update(ops.convert_to_tensor(step, "int64" if TENSORFLOW else "int32"))

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
        # (TensorFlow: a copy, as the variable's tensor is the variable itself; JAX arrays are
        # immutable values)
        copy = tf.identity if TENSORFLOW else (lambda value: value)
        trained = {path: copy(ops.convert_to_tensor(w)) for path, w in self.weights.items()}
        for path, weight in self.weights.items():
            weight.assign(ops.convert_to_tensor(self.averages[path]))
        try:
            yield
        finally:
            for path, weight in self.weights.items():
                weight.assign(trained[path])


def averaged(averages, weights, step, decay):
    """The averages after the update that reached `step` (the rule above), as a list; in
    `keras.ops` (the JAX backend's update; TensorFlow's assigns the same in place)."""
    count = ops.cast(step, "float32")
    rate = 1.0 - ops.minimum(decay, (1.0 + count) / (10.0 + count))
    return [a - (a - ops.cast(w, a.dtype)) * rate for a, w in zip(averages, weights)]
