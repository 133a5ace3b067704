"""What the encoder and the decoder share: their hyper-parameters, the input scaling and position
encoding, the final layer norm (pre-norm) and the arguments of each of their layers."""

import keras
import tensorflow as tf

from opennmt_lite.layers.common import LayerNorm, apply_dropout, make_seed_generator
from opennmt_lite.layers.position import SinusoidalPositionEncoder, resolve_position_encoding
from opennmt_lite.layers.transformer import hyperparameters
from opennmt_lite.recorder import record


class TransformerStack(keras.layers.Layer):
    """Base of SelfAttentionEncoder and SelfAttentionDecoder (not a layer of its own)."""

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
        self.position_encoding = resolve_position_encoding(
            position_encoding, maximum_relative_position, num_units, num_heads
        )
        self.position_encoder = (
            SinusoidalPositionEncoder(dtype=self.dtype_policy, name="position_encoder")
            if self.position_encoding
            else None
        )
        self.layer_norm = LayerNorm(dtype=self.dtype_policy, name="layer_norm") if pre_norm else None
        self.dropout_seed = make_seed_generator(dropout)

    def layer_arguments(self, index):
        """The keyword arguments of layer `index` (SelfAttentionEncoderLayer/DecoderLayer)."""
        return dict(hyperparameters(self), dtype=self.dtype_policy, name=f"layer_{index}")

    def embed(self, inputs, training, step=None):
        """Scaled by sqrt(num_units), position-encoded (from `step` when decoding one position),
        dropped out: [batch, time, depth] -> [batch, time, depth]."""
        x = inputs * tf.cast(self.num_units**0.5, inputs.dtype)
        record("scaled_inputs", x)
        if self.position_encoder is not None:
            x = self.position_encoder(x, step=step)
            record("position_encoded_inputs", x)
        return apply_dropout(x, self.dropout, self.dropout_seed, training)

    def get_config(self):
        config = super().get_config()
        config.update(num_layers=self.num_layers, position_encoding=self.position_encoding,
                      **hyperparameters(self))
        return config
