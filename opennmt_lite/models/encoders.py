"""The Transformer encoder: OpenNMT-tf's SelfAttentionEncoder."""

import keras
import tensorflow as tf

from opennmt_lite.inspection.recorder import record, recording_scope
from opennmt_lite.layers.common import PACKAGE, LayerNorm, apply_dropout, make_seed_generator
from opennmt_lite.layers.position import SinusoidalPositionEncoder, resolve_position_encoding
from opennmt_lite.layers.transformer import SelfAttentionEncoderLayer


@keras.saving.register_keras_serializable(package=PACKAGE)
class SelfAttentionEncoder(keras.layers.Layer):
    """A stack of self-attention layers.

    call(inputs [batch, time, depth] (embeddings), sequence_length [batch]) -> [batch, time, depth]

    The embeddings are scaled by sqrt(num_units); absolute sinusoidal position encodings are added
    unless `maximum_relative_position` is set (relative positions replace them, as in OpenNMT-tf's
    relative presets) or `position_encoding` is None; then dropout, the layers, and with pre_norm a
    final layer norm.

    Records scaled_inputs, position_encoded_inputs, mask, each layer's tensors under
    `layers/<i>/`, and output (see opennmt_lite.inspection.text).
    """

    def __init__(
        self,
        num_layers,
        num_units=512,
        num_heads=8,
        ffn_inner_dim=2048,
        dropout=0.1,
        attention_dropout=0.1,
        ffn_dropout=0.1,
        ffn_activation="relu",
        mha_bias=True,
        maximum_relative_position=None,
        pre_norm=True,
        position_encoding="auto",
        **kwargs,
    ):
        super().__init__(**kwargs)
        position_encoding = resolve_position_encoding(
            position_encoding, maximum_relative_position, num_units, num_heads
        )
        self.num_layers = num_layers
        self.num_units = num_units
        self.num_heads = num_heads
        self.ffn_inner_dim = ffn_inner_dim
        self.dropout = dropout
        self.attention_dropout = attention_dropout
        self.ffn_dropout = ffn_dropout
        self.ffn_activation = ffn_activation
        self.mha_bias = mha_bias
        self.maximum_relative_position = maximum_relative_position
        self.pre_norm = pre_norm
        self.position_encoding = position_encoding
        self.position_encoder = (
            SinusoidalPositionEncoder(dtype=self.dtype_policy, name="position_encoder")
            if position_encoding
            else None
        )
        self.layer_norm = LayerNorm(dtype=self.dtype_policy, name="layer_norm") if pre_norm else None
        self.layers = [
            SelfAttentionEncoderLayer(
                num_units,
                num_heads,
                ffn_inner_dim,
                dropout=dropout,
                attention_dropout=attention_dropout,
                ffn_dropout=ffn_dropout,
                ffn_activation=ffn_activation,
                mha_bias=mha_bias,
                maximum_relative_position=maximum_relative_position,
                pre_norm=pre_norm,
                dtype=self.dtype_policy,
                name=f"layer_{i}",
            )
            for i in range(num_layers)
        ]
        self.dropout_seed = make_seed_generator(dropout)

    def build(self, input_shape):
        if int(input_shape[-1]) != self.num_units:
            raise ValueError(
                f"encoder inputs have depth {input_shape[-1]}, expected num_units={self.num_units}"
            )
        for layer in self.layers:
            layer.build(input_shape)
        if self.layer_norm is not None:
            self.layer_norm.build(input_shape)

    def call(self, inputs, sequence_length=None, training=None):
        x = inputs * tf.cast(self.num_units**0.5, inputs.dtype)
        record("scaled_inputs", x)
        if self.position_encoder is not None:
            x = self.position_encoder(x)
            record("position_encoded_inputs", x)
        x = apply_dropout(x, self.dropout, self.dropout_seed, training)
        mask = None
        if sequence_length is not None:
            mask = tf.sequence_mask(sequence_length, maxlen=tf.shape(x)[1], dtype=x.dtype)
            record("mask", mask)
        for i, layer in enumerate(self.layers):
            with recording_scope(f"layers/{i}"):
                x = layer(x, attention_mask=mask, training=training)
        if self.layer_norm is not None:
            x = self.layer_norm(x)
        record("output", x)
        return x

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        config = super().get_config()
        config.update(
            num_layers=self.num_layers,
            num_units=self.num_units,
            num_heads=self.num_heads,
            ffn_inner_dim=self.ffn_inner_dim,
            dropout=self.dropout,
            attention_dropout=self.attention_dropout,
            ffn_dropout=self.ffn_dropout,
            ffn_activation=self.ffn_activation,
            mha_bias=self.mha_bias,
            maximum_relative_position=self.maximum_relative_position,
            pre_norm=self.pre_norm,
            position_encoding=self.position_encoding,
        )
        return config
