"""Every layer round-trips through get_config/from_config and through saved weights."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from encoder_helpers import build_encoder
from opennmt_lite.hyperparameters import ModelHyperparameters
from opennmt_lite.models.encoders import SelfAttentionEncoder
from opennmt_lite.models.inputters import WordEmbedder
from opennmt_lite.layers import (
    Dense,
    FeedForwardNetwork,
    LayerNorm,
    LayerWrapper,
    MultiHeadAttention,
    SelfAttentionEncoderLayer,
    SinusoidalPositionEncoder,
    TransformerLayerWrapper,
)

RNG = np.random.default_rng(3)
X = RNG.normal(size=(2, 5, 8)).astype(np.float32)
LENGTHS = np.array([5, 3], np.int32)
MASK = (np.arange(5)[None, :] < LENGTHS[:, None]).astype(np.float32)


def first(outputs):
    return outputs[0] if isinstance(outputs, tuple) else outputs


CASES = {
    "Dense": (lambda: Dense(6, activation="relu"), lambda l: l(X)),
    "LayerNorm": (lambda: LayerNorm(epsilon=1e-5), lambda l: l(X)),
    "LayerWrapper": (
        lambda: LayerWrapper(Dense(8), normalize_input=True, normalize_output=True,
                             residual_connection=True),
        lambda l: l(X),
    ),
    "TransformerLayerWrapper": (
        lambda: TransformerLayerWrapper(FeedForwardNetwork(16, 8), 0.1, pre_norm=False),
        lambda l: l(X),
    ),
    "MultiHeadAttention": (
        lambda: MultiHeadAttention(2, 8, maximum_relative_position=3, return_attention=True),
        lambda l: l(X, attention_mask=MASK)[0],
    ),
    "FeedForwardNetwork": (lambda: FeedForwardNetwork(16, 8, activation="gelu"), lambda l: l(X)),
    "SelfAttentionEncoderLayer": (
        lambda: SelfAttentionEncoderLayer(ModelHyperparameters(
            num_units=8, num_heads=2, ffn_inner_dim=16, maximum_relative_position=4)),
        lambda l: l(X, attention_mask=MASK),
    ),
    "SelfAttentionEncoder": (
        lambda: SelfAttentionEncoder(ModelHyperparameters(
            num_layers=2, num_units=8, num_heads=2, ffn_inner_dim=16, pre_norm=False)),
        lambda l: l(X, sequence_length=LENGTHS),
    ),
    "SinusoidalPositionEncoder": (lambda: SinusoidalPositionEncoder(), lambda l: l(X)),
    "WordEmbedder": (
        lambda: WordEmbedder(30, 8),
        lambda l: l(np.array([[1, 2, 29], [0, 4, 5]], np.int32)),
    ),
}


def randomize(layer):
    for variable in layer.weights:
        variable.assign(RNG.normal(size=variable.shape).astype(np.float32))


@pytest.mark.parametrize("name", sorted(CASES))
def test_config_round_trip_gives_identical_outputs(name):
    make, run = CASES[name]
    layer = make()
    original = first(run(layer))
    randomize(layer)
    original = first(run(layer)).numpy()

    config = layer.get_config()
    clone = type(layer).from_config(config)
    assert clone.get_config() == config
    # also through Keras' generic (de)serialization, by registered name
    generic = keras.layers.deserialize(keras.layers.serialize(layer))
    assert type(generic) is type(layer)
    for copy in (clone, generic):
        run(copy)  # builds it
        assert len(copy.weights) == len(layer.weights)
        copy.set_weights(layer.get_weights())
        np.testing.assert_array_equal(first(run(copy)).numpy(), original)


class Holder(keras.Model):
    """Minimal model owning an encoder, to use Keras' weight files."""

    def __init__(self, **kwargs):
        super().__init__()
        self.embedder = WordEmbedder(26, 4)
        self.encoder = SelfAttentionEncoder(ModelHyperparameters(
            num_layers=2, num_units=4, num_heads=2, ffn_inner_dim=8, maximum_relative_position=8), **kwargs)

    def call(self, ids, lengths):
        return self.encoder(self.embedder(ids), sequence_length=lengths)


def test_saved_weights_reload_identically(tmp_path):
    ids = np.array([[5, 12, 7], [3, 25, 0]], np.int32)
    lengths = np.array([3, 2], np.int32)
    holder = Holder()
    holder(ids, lengths)
    randomize(holder)
    before = holder(ids, lengths).numpy()
    path = str(tmp_path / "encoder.weights.h5")
    holder.save_weights(path)

    fresh = Holder()
    fresh(ids, lengths)
    assert np.abs(fresh(ids, lengths).numpy() - before).max() > 1e-3  # different before loading
    fresh.load_weights(path)
    np.testing.assert_array_equal(fresh(ids, lengths).numpy(), before)


def test_tf_checkpoint_holds_every_encoder_variable(tmp_path):
    """tf.train.Checkpoint of the variable map holds every weight, by name."""
    from opennmt_lite.checkpointing.names import named_variables, nested

    embedder, encoder = build_encoder(maximum_relative_position=8)
    named = named_variables(encoder, include_seeds=False)
    # final norm (2) + per layer: 4 projections (8), 2 relative tables, 2 norms (4), FFN (4)
    assert len(named) == len(encoder.weights) == 2 + 2 * 18
    assert len(named_variables(encoder)) == len(encoder.variables)  # with dropout seed states
    path = tf.train.Checkpoint(encoder=nested(named)).write(str(tmp_path / "ckpt"))
    suffix = "/.ATTRIBUTES/VARIABLE_VALUE"
    stored = {name[: -len(suffix)]: shape for name, shape in tf.train.list_variables(path)
              if name.endswith(suffix)}
    assert stored == {f"encoder/{k}": list(v.shape) for k, v in named.items()}
