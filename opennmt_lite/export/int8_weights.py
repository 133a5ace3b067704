"""Weights stored in int8 and computed in float32 (the encoder's in `tflite_dynamic_range`, see
export/tflite.py): symmetric int8 values, one scale per group of GROUP consecutive values along
each output channel's inputs (a kernel's column, an embedding's row), rounded to nearest.

A matrix [channels, inputs] is stored as int8 values [channels, inputs] and scales
[channels, ceil(inputs / GROUP)]; its value is values * scale of their group.
"""

import numpy as np
import tensorflow as tf

# Values per scale: 1.25 bytes a weight with float16 scales; over 64 inputs, one scale per
# channel moved the log-probabilities 1.5 times as much (measured on the OpenNMT-tf fixture).
GROUP = 8
LEVELS = 127  # symmetric: -127..127, 0 exact


def quantize(matrix, group=None):
    """(int8 values [channels, inputs], float32 scales [channels, ceil(inputs / group)]) of a
    float matrix [channels, inputs]: each group's largest |value| becomes 127."""
    matrix = np.asarray(matrix, np.float32)
    channels, inputs = matrix.shape
    group = min(group or GROUP, inputs)
    groups = -(-inputs // group)
    padded = np.pad(matrix, [(0, 0), (0, groups * group - inputs)]).reshape(channels, groups, group)
    scales = np.abs(padded).max(-1) / LEVELS
    scales = np.where(scales > 0, scales, 1).astype(np.float32)  # (an all-zero group stays 0)
    values = np.clip(np.rint(padded / scales[..., None]), -LEVELS, LEVELS).astype(np.int8)
    return values.reshape(channels, groups * group)[:, :inputs], scales


def dequantize(values, scales, group=None):
    """float32 [..., inputs] of int8 `values` [..., inputs] and their `scales`
    [..., ceil(inputs / group)] (tensors or arrays), `group` as given to `quantize`."""
    inputs = values.shape[-1]
    group = min(group or GROUP, inputs)
    groups = -(-inputs // group)
    rank = len(values.shape)
    values = tf.cast(values, tf.float32)
    if groups * group != inputs:  # the last group is short: zeros after it
        values = tf.pad(values, [[0, 0]] * (rank - 1) + [[0, groups * group - inputs]])
    leading = tf.shape(values)[:-1]
    grouped = tf.reshape(values, tf.concat([leading, [groups, group]], 0)) * tf.expand_dims(scales, -1)
    flat = tf.reshape(grouped, tf.concat([leading, [groups * group]], 0))
    if groups * group != inputs:
        flat = tf.slice(flat, [0] * rank, [-1] * (rank - 1) + [inputs])
    return flat
