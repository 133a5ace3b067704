"""Inputters: token ids to vectors."""

import keras
import numpy as np
from keras import ops

from opennmt_lite import PACKAGE
from opennmt_lite.layers.common import apply_dropout, dtype_name, make_seed_generator

_BACKEND = keras.backend.backend()
if _BACKEND == "tensorflow":
    import tensorflow as tf


@keras.saving.register_keras_serializable(package=PACKAGE)
class WordEmbedder(keras.layers.Layer):
    """Embedding lookup: ids [batch, time] -> [batch, time, embedding_size], then dropout.

    `vocabulary_size` counts every row of the table, i.e. the vocabulary file's lines plus the
    out-of-vocabulary bucket (OpenNMT-tf's convention: an unknown token gets id = number of lines).
    The sqrt(depth) scaling is applied by the encoder/decoder, not here, as in OpenNMT-tf: a
    decoder sharing its output projection with this table needs the unscaled rows.
    """

    def __init__(self, vocabulary_size, embedding_size, dropout=0.0, **kwargs):
        super().__init__(**kwargs)
        self.vocabulary_size = int(vocabulary_size)
        self.embedding_size = int(embedding_size)
        self.dropout = dropout
        self.dropout_seed = make_seed_generator(dropout)

    def build(self, input_shape=None):
        self.embedding = self.add_weight(
            name="embedding",
            shape=(self.vocabulary_size, self.embedding_size),
            initializer="glorot_uniform",
            # Read in float32 and cast after the lookup (call): under a mixed policy, autocast
            # would convert the whole [vocabulary, depth] table for every batch.
            autocast=False,
        )

    def call(self, ids, training=None):
        ids = ops.convert_to_tensor(ids)
        if "int" not in dtype_name(ids):
            raise TypeError(f"{self.name}: token ids must be integers, got {dtype_name(ids)}")
        ids = self._check_range(ids)
        outputs = ops.cast(ops.take(self.embedding, ids, axis=0), self.compute_dtype)
        return apply_dropout(outputs, self.dropout, self.dropout_seed, training)

    def _check_range(self, ids):
        message = f"{self.name}: token ids must lie in [0, {self.vocabulary_size})"
        if _concrete(ids):
            values = ops.convert_to_numpy(ids)
            if values.size and (values.min() < 0 or values.max() >= self.vocabulary_size):
                bad = values[(values < 0) | (values >= self.vocabulary_size)]
                raise ValueError(f"{message}; got {np.unique(bad)[:10].tolist()}")
            return ids
        if _BACKEND != "tensorflow":
            # Traced by JAX: no assertion exists there (a gather clamps its indices); the input
            # pipeline has already mapped every token into range.
            return ids
        # In TensorFlow graphs the check is an assertion that runs before the lookup (a no-op
        # under XLA, where the input pipeline has already mapped every token into range).
        checks = [
            tf.debugging.assert_non_negative(ids, message=message),
            tf.debugging.assert_less(ids, tf.cast(self.vocabulary_size, ids.dtype), message=message),
        ]
        with tf.control_dependencies(checks):
            return tf.identity(ids)

    def compute_output_shape(self, input_shape):
        return tuple(input_shape) + (self.embedding_size,)

    def get_config(self):
        config = super().get_config()
        config.update(
            vocabulary_size=self.vocabulary_size,
            embedding_size=self.embedding_size,
            dropout=self.dropout,
        )
        return config


def _concrete(ids):
    """Whether `ids` holds values now (TensorFlow eager, or an array JAX does not trace)."""
    if _BACKEND == "tensorflow":
        return tf.executing_eagerly()
    import jax  # (only this backend gets here)

    return not isinstance(ids, jax.core.Tracer) and not keras.backend.is_keras_tensor(ids)
