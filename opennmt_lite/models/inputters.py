"""Inputters: token ids to vectors."""

import keras
import numpy as np
import tensorflow as tf

from opennmt_lite import PACKAGE
from opennmt_lite.layers.common import apply_dropout, make_seed_generator


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
        ids = tf.convert_to_tensor(ids)
        if not ids.dtype.is_integer:
            raise TypeError(f"{self.name}: token ids must be integers, got {ids.dtype.name}")
        ids = self._check_range(ids)
        outputs = tf.cast(tf.gather(self.embedding, ids), self.compute_dtype)
        return apply_dropout(outputs, self.dropout, self.dropout_seed, training)

    def _check_range(self, ids):
        message = f"{self.name}: token ids must lie in [0, {self.vocabulary_size})"
        if tf.executing_eagerly():
            values = ids.numpy()
            if values.size and (values.min() < 0 or values.max() >= self.vocabulary_size):
                bad = values[(values < 0) | (values >= self.vocabulary_size)]
                raise ValueError(f"{message}; got {np.unique(bad)[:10].tolist()}")
            return ids
        # In graphs the check is an assertion that runs before the lookup (a no-op under XLA,
        # where the input pipeline has already mapped every token into range).
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
