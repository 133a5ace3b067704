"""Sinusoidal position encoding (Vaswani et al., 2017), with OpenNMT-tf's conventions."""

import math

import keras
import tensorflow as tf

from opennmt_lite import PACKAGE


def resolve_position_encoding(position_encoding, maximum_relative_position, num_units, num_heads):
    """The position encoding of a layer stack: "auto" means none with relative positions
    (OpenNMT-tf's TransformerRelative) and sinusoidal without. Also checks that the heads divide
    `num_units`. Returns "sinusoidal" or None."""
    if position_encoding == "auto":
        position_encoding = None if maximum_relative_position else "sinusoidal"
    if position_encoding not in (None, "sinusoidal"):
        raise ValueError(f"position_encoding must be 'sinusoidal' or None, got {position_encoding!r}")
    if num_units % num_heads != 0:
        raise ValueError(f"num_units ({num_units}) must be divisible by num_heads ({num_heads})")
    return position_encoding


def sinusoidal_encoding(positions, depth):
    """Encodings of `positions` [time] (float32), `[time, depth]`.

    With i = 0 .. depth/2 - 1 and inv_timescale_i = exp(-i * ln(10000) / (depth/2 - 1)), the
    encoding of position p is concat(sin(p * inv_timescale), cos(p * inv_timescale)): sines
    first, then cosines, not interleaved.
    """
    if depth % 2 != 0:
        raise ValueError(f"sinusoidal position encoding needs an even depth, got {depth}")
    half = depth // 2
    log_increment = math.log(10000.0) / (half - 1)
    inv_timescales = tf.exp(tf.range(half, dtype=tf.float32) * -log_increment)
    scaled = tf.cast(positions, tf.float32)[:, tf.newaxis] * inv_timescales[tf.newaxis, :]
    return tf.concat([tf.sin(scaled), tf.cos(scaled)], axis=1)


@keras.saving.register_keras_serializable(package=PACKAGE)
class SinusoidalPositionEncoder(keras.layers.Layer):
    """Adds sinusoidal encodings to `inputs` [batch, time, depth].

    Positions start at 1 (OpenNMT-tf's convention); in step-by-step decoding the caller passes the
    0-based `step` and the single position step + 1 is encoded.
    """

    def call(self, inputs, step=None):
        depth = inputs.shape[-1]
        if step is None:
            positions = tf.range(1, tf.shape(inputs)[1] + 1)
        else:
            positions = tf.reshape(step + 1, [1])
        encoding = sinusoidal_encoding(positions, depth)
        return inputs + tf.cast(encoding, inputs.dtype)[tf.newaxis]

    def compute_output_shape(self, input_shape):
        return input_shape
