"""Every public layer through `run_layer_test`: configs, symbolic and eager calls, dtype policies."""

import numpy as np
import pytest

from layer_test_case import run_layer_test
from opennmt_lite.hyperparameters import ModelHyperparameters
from opennmt_lite.layers import (
    Dense,
    FeedForwardNetwork,
    LayerNorm,
    LayerWrapper,
    MultiHeadAttention,
    SelfAttentionDecoderLayer,
    SelfAttentionEncoderLayer,
    SinusoidalPositionEncoder,
    TransformerLayerWrapper,
)
from opennmt_lite.models import SelfAttentionDecoder, SelfAttentionEncoder, Transformer, WordEmbedder

RNG = np.random.default_rng(5)
X = RNG.normal(size=(2, 5, 8)).astype(np.float32)  # [batch, time, depth]
MEMORY = RNG.normal(size=(2, 4, 6)).astype(np.float32)  # [batch, src_time, memory depth]
MEMORY_8 = RNG.normal(size=(2, 4, 8)).astype(np.float32)  # the decoder's memory has its depth
LENGTHS = np.array([5, 3], np.int32)
MEMORY_LENGTHS = np.array([4, 2], np.int32)
MASK = (np.arange(5)[None, :] < LENGTHS[:, None]).astype(np.float32)  # [batch, time]
MEMORY_MASK = (np.arange(4)[None, :] < MEMORY_LENGTHS[:, None]).astype(np.float32)
FUTURE_MASK = np.tril(np.ones((5, 5), np.float32))[None] * MASK[:, None, :]  # [batch, time, time]
IDS = np.array([[1, 2, 29, 4, 0], [0, 4, 5, 0, 0]], np.int32)
FEATURES = {
    "source_ids": IDS,
    "source_length": LENGTHS,
    "target_ids_in": np.array([[1, 9, 10], [1, 11, 0]], np.int32),
    "target_length": np.array([3, 2], np.int32),
}
STACK = dict(num_units=8, num_heads=2, ffn_inner_dim=16)


def hyper(**values):
    """The model's hyper-parameters: STACK's sizes and `values`."""
    return ModelHyperparameters(**STACK, **values)


# name: (class, constructor arguments (or a function of the dtype), first input, call arguments)
CASES = {
    "Dense": (Dense, dict(units=6, activation="relu"), X, {}),
    "Dense-no-bias": (Dense, dict(units=10, use_bias=False), X, {}),
    "LayerNorm": (LayerNorm, dict(epsilon=1e-5), X, {}),
    "LayerWrapper": (
        LayerWrapper,
        lambda dtype: dict(layer=Dense(8, dtype=dtype), normalize_input=True,
                           normalize_output=True, input_dropout=0.1, output_dropout=0.1,
                           residual_connection=True),
        X, {},
    ),
    "TransformerLayerWrapper-ffn": (
        TransformerLayerWrapper,
        lambda dtype: dict(layer=FeedForwardNetwork(16, 8, dtype=dtype), output_dropout=0.1,
                           pre_norm=False),
        X, {},
    ),
    "TransformerLayerWrapper-attention": (
        TransformerLayerWrapper,
        lambda dtype: dict(layer=MultiHeadAttention(2, 8, dtype=dtype), output_dropout=0.1),
        X, dict(attention_mask=MASK),
    ),
    "MultiHeadAttention": (MultiHeadAttention, dict(num_heads=2, num_units=8), X,
                           dict(attention_mask=MASK)),
    "MultiHeadAttention-relative": (
        MultiHeadAttention,
        dict(num_heads=2, num_units=8, maximum_relative_position=3, return_attention=True),
        X, dict(attention_mask=FUTURE_MASK),
    ),
    "MultiHeadAttention-cross": (
        MultiHeadAttention, dict(num_heads=2, num_units=8, return_attention=True), X,
        dict(memory=MEMORY, attention_mask=MEMORY_MASK),
    ),
    "FeedForwardNetwork": (FeedForwardNetwork, dict(inner_dim=16, output_dim=8), X, {}),
    "FeedForwardNetwork-gelu": (
        FeedForwardNetwork, dict(inner_dim=16, output_dim=6, activation="gelu"), X, {}),
    "SinusoidalPositionEncoder": (SinusoidalPositionEncoder, {}, X, {}),
    "SelfAttentionEncoderLayer": (
        SelfAttentionEncoderLayer, dict(hyperparameters=hyper(maximum_relative_position=4)), X,
        dict(attention_mask=MASK),
    ),
    "SelfAttentionDecoderLayer": (
        SelfAttentionDecoderLayer, dict(hyperparameters=hyper(pre_norm=False)), X,
        dict(attention_mask=FUTURE_MASK, memory=MEMORY, memory_mask=MEMORY_MASK),
    ),
    "WordEmbedder": (WordEmbedder, dict(vocabulary_size=30, embedding_size=8, dropout=0.1), IDS, {}),
    "SelfAttentionEncoder": (
        SelfAttentionEncoder, dict(hyperparameters=hyper(num_layers=2, pre_norm=False)), X,
        dict(sequence_length=LENGTHS),
    ),
    "SelfAttentionEncoder-relative": (
        SelfAttentionEncoder, dict(hyperparameters=hyper(num_layers=2, maximum_relative_position=4)), X,
        dict(sequence_length=LENGTHS),
    ),
    "SelfAttentionDecoder": (
        SelfAttentionDecoder, dict(hyperparameters=hyper(num_layers=1), vocabulary_size=30), X,
        dict(sequence_length=LENGTHS, memory=MEMORY_8, memory_sequence_length=MEMORY_LENGTHS),
    ),
    "SelfAttentionDecoder-relative": (
        SelfAttentionDecoder,
        dict(hyperparameters=hyper(num_layers=1, maximum_relative_position=4, pre_norm=False),
             vocabulary_size=13),
        X, dict(sequence_length=LENGTHS, memory=MEMORY_8, memory_sequence_length=MEMORY_LENGTHS),
    ),
    "Transformer": (
        Transformer,
        dict(hyperparameters=hyper(num_layers=1, maximum_relative_position=4),
             source_vocabulary_size=30, target_vocabulary_size=20),
        FEATURES, {},
    ),
    "Transformer-shared": (
        Transformer,
        dict(hyperparameters=hyper(num_layers=1, share_embeddings="all"),
             source_vocabulary_size=30, target_vocabulary_size=30),
        FEATURES, {},
    ),
}


@pytest.mark.parametrize("name", list(CASES))
def test_layer(name):
    cls, init_kwargs, input_data, call_kwargs = CASES[name]
    run_layer_test(cls, init_kwargs, input_data, call_kwargs)


def test_every_public_layer_is_covered():
    import opennmt_lite.layers as layers_module
    import opennmt_lite.models as models_module

    public = {
        value for module in (layers_module, models_module) for value in vars(module).values()
        if isinstance(value, type)
    }
    assert public == {cls for cls, _, _, _ in CASES.values()}
