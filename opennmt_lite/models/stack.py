"""What the encoder and the decoder share: their hyper-parameters, the input scaling and position
encoding, the final layer norm (pre-norm) and the arguments of each of their layers."""

import keras
from keras import ops

from opennmt_lite.hyperparameters import ModelHyperparameters
from opennmt_lite.layers.common import LayerNorm, apply_dropout, make_seed_generator
from opennmt_lite.layers.position import position_encoder
from opennmt_lite.recorder import record


def sequence_mask(lengths, maximum_length, dtype="float32"):
    """[batch, time] mask of `lengths` [batch]: 1 at positions < length, 0 after."""
    positions = ops.arange(maximum_length, dtype="int32")
    inside = ops.expand_dims(positions, 0) < ops.expand_dims(ops.cast(lengths, "int32"), 1)
    return ops.cast(inside, dtype)


class TransformerStack(keras.layers.Layer):
    """Base of SelfAttentionEncoder and SelfAttentionDecoder (not a layer of its own).

    `hyperparameters`: the model's `ModelHyperparameters`. The stack owns the position
    encoding (opennmt_lite/layers/position.py): its `call` computes the absolute positions of
    its inputs once (`absolute_positions`) and hands them to `embed` and to each layer.
    """

    def __init__(self, hyperparameters, **kwargs):
        super().__init__(**kwargs)
        self.hyperparameters = hyperparameters
        self.position_encoder = position_encoder(hyperparameters, self.dtype_policy)
        self.layer_norm = (
            LayerNorm(dtype=self.dtype_policy, name="layer_norm") if hyperparameters.pre_norm else None)
        # (an attribute of its own: params.freeze_layers sets a frozen stack's to 0)
        self.dropout = hyperparameters.dropout
        self.dropout_seed = make_seed_generator(self.dropout)

    def layer_arguments(self, index):
        """The arguments of layer `index` (SelfAttentionEncoderLayer/DecoderLayer)."""
        return dict(hyperparameters=self.hyperparameters, dtype=self.dtype_policy, name=f"layer_{index}")

    def embed(self, inputs, positions, training):
        """Scaled by sqrt(num_units), position-encoded at `positions` [time], dropped out:
        [batch, time, depth] -> [batch, time, depth]."""
        x = inputs * ops.cast(self.hyperparameters.num_units**0.5, inputs.dtype)
        record("scaled_inputs", x)
        if self.position_encoder is not None:
            x = self.position_encoder(x, positions)
            record("position_encoded_inputs", x)
        return apply_dropout(x, self.dropout, self.dropout_seed, training)

    def get_config(self):
        config = super().get_config()
        config.update(hyperparameters=self.hyperparameters.to_dict())
        return config

    @classmethod
    def from_config(cls, config):
        hyperparameters = ModelHyperparameters.from_dict(config["hyperparameters"])
        return cls(**dict(config, hyperparameters=hyperparameters))
