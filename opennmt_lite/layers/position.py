"""Position encodings: how a layer stack tells its layers where each input sits.

The stack (opennmt_lite/models/stack.py) computes the absolute positions of its inputs once,
`positions` [time] int32: 0 .. time - 1 for whole sequences, the current step when decoding one
position. Both consumers read that one input:
- the absolute encoding the stack adds to its embeddings, made here by `position_encoder` from
  the carrier's `absolute_position_encoding` ("sinusoidal": Vaswani et al., 2017, with
  OpenNMT-tf's conventions; "none");
- relative positions (`maximum_relative_position`, Shaw et al., 2018): each self-attention
  computes the clipped distances between its query positions and key positions 0 .. keys - 1
  (opennmt_lite/layers/attention.py: relative_positions).

Adding a position encoding touches at most 4 package files: opennmt_lite/hyperparameters.py
(its name in POSITION_ENCODINGS and its checks), this module (its layer in ENCODERS),
opennmt_lite/export/ctranslate2.py (exported or refused by name), and
opennmt_lite/layers/attention.py when it acts inside attention (as relative positions do).
"""

import math

import keras
from keras import ops

from opennmt_lite import PACKAGE


def absolute_positions(inputs, step=None):
    """The 0-based positions of `inputs` [batch, time, depth] in their sequence, [time] int32:
    0 .. time - 1, or the single `step` when decoding one position at a time."""
    if step is None:
        return ops.arange(ops.shape(inputs)[1], dtype="int32")
    return ops.reshape(ops.cast(step, "int32"), (1,))


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
    inv_timescales = ops.exp(ops.arange(half, dtype="float32") * -log_increment)
    scaled = (ops.expand_dims(ops.cast(positions, "float32"), 1)
              * ops.expand_dims(inv_timescales, 0))
    return ops.concatenate([ops.sin(scaled), ops.cos(scaled)], axis=1)


@keras.saving.register_keras_serializable(package=PACKAGE)
class SinusoidalPositionEncoder(keras.layers.Layer):
    """Adds sinusoidal encodings to `inputs` [batch, time, depth].

    call(inputs, positions [time] (0-based; None: 0 .. time - 1)) -> [batch, time, depth]
    Position p is encoded as p + 1 (OpenNMT-tf's convention: positions start at 1).
    """

    def call(self, inputs, positions=None):
        depth = inputs.shape[-1]
        if positions is None:
            positions = ops.arange(ops.shape(inputs)[1], dtype="int32")
        encoding = sinusoidal_encoding(positions + 1, depth)
        return inputs + ops.expand_dims(ops.cast(encoding, inputs.dtype), 0)

    def compute_output_shape(self, input_shape):
        return input_shape


# The absolute encodings a stack can add to its embeddings, by their name in the carrier.
ENCODERS = {"sinusoidal": SinusoidalPositionEncoder, "none": None}


def position_encoder(hyperparameters, dtype):
    """The layer adding the carrier's absolute position encodings to a stack's embeddings
    (call(inputs, positions)), or None."""
    encoder_class = ENCODERS[hyperparameters.absolute_position_encoding]
    return None if encoder_class is None else encoder_class(dtype=dtype, name="position_encoder")
