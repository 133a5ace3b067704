"""The Transformer encoder: OpenNMT-tf's SelfAttentionEncoder."""

import keras
from keras import ops

from opennmt_lite import PACKAGE
from opennmt_lite.layers.position import absolute_positions
from opennmt_lite.layers.transformer import SelfAttentionEncoderLayer
from opennmt_lite.models.stack import TransformerStack, sequence_mask
from opennmt_lite.recorder import record, recording_scope


@keras.saving.register_keras_serializable(package=PACKAGE)
class SelfAttentionEncoder(TransformerStack):
    """A stack of self-attention layers.

    call(inputs [batch, time, depth] (embeddings), sequence_length [batch]) -> [batch, time, depth]

    `hyperparameters`: the model's `ModelHyperparameters`. The embeddings are scaled by
    sqrt(num_units); absolute sinusoidal position encodings are added unless
    `maximum_relative_position` is set (relative positions replace them, as in OpenNMT-tf's
    relative presets) or `position_encoding` is "none"; then dropout, the layers, and with
    pre_norm a final layer norm.

    Records scaled_inputs, position_encoded_inputs, mask, each layer's tensors under
    `layers/<i>/`, and output (see opennmt_lite.inspection.text).
    """

    def __init__(self, hyperparameters, **kwargs):
        super().__init__(hyperparameters, **kwargs)
        self.layers = [SelfAttentionEncoderLayer(**self.layer_arguments(i))
                       for i in range(hyperparameters.num_layers)]

    def build(self, input_shape):
        num_units = self.hyperparameters.num_units
        if int(input_shape[-1]) != num_units:
            raise ValueError(
                f"encoder inputs have depth {input_shape[-1]}, expected num_units={num_units}"
            )
        for layer in self.layers:
            layer.build(input_shape)
        if self.layer_norm is not None:
            self.layer_norm.build(input_shape)

    def call(self, inputs, sequence_length=None, training=None):
        positions = absolute_positions(inputs)
        x = self.embed(inputs, positions, training)
        mask = None
        if sequence_length is not None:
            mask = sequence_mask(sequence_length, ops.shape(x)[1], x.dtype)
            record("mask", mask)
        for i, layer in enumerate(self.layers):
            with recording_scope(f"layers/{i}"):
                x = layer(x, attention_mask=mask, positions=positions, training=training)
        if self.layer_norm is not None:
            x = self.layer_norm(x)
        record("output", x)
        return x

    def compute_output_shape(self, input_shape):
        return input_shape
