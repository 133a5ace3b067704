"""Bad input gets a clear error that names what is wrong."""

import re

import numpy as np
import pytest
import tensorflow as tf

from conftest import ONMT_FIXTURE
from opennmt_lite.hyperparameters import ModelHyperparameters
from opennmt_lite.models.encoders import SelfAttentionEncoder
from opennmt_lite.models.inputters import WordEmbedder
from opennmt_lite.layers import MultiHeadAttention
from opennmt_lite.checkpointing.onmt_names import load_onmt_encoder


def hyper(num_layers, num_units, num_heads, ffn_inner_dim, **values):
    return ModelHyperparameters(num_layers=num_layers, num_units=num_units, num_heads=num_heads,
                                ffn_inner_dim=ffn_inner_dim, **values)


def test_num_units_not_divisible_by_num_heads():
    with pytest.raises(ValueError, match=r"num_units \(10\) must be divisible by num_heads \(4\)"):
        SelfAttentionEncoder(ModelHyperparameters(num_layers=2, num_units=10, num_heads=4))
    with pytest.raises(ValueError, match="divisible"):
        MultiHeadAttention(3, 64)


def test_checkpoint_with_mis_shaped_variables_names_each():
    embedder = WordEmbedder(801, 64)
    encoder = SelfAttentionEncoder(hyper(2, 64, 2, 256, maximum_relative_position=8))  # ffn is 128
    with pytest.raises(ValueError) as error:
        load_onmt_encoder(str(ONMT_FIXTURE), encoder, embedder)
    message = str(error.value)
    for layer in (0, 1):
        assert f"shape mismatch: model/encoder/layers/{layer}/ffn/layer/inner/kernel is (64, 128)" in message
        assert f"model/encoder/layers/{layer}/ffn/layer/outer/kernel" in message
        assert f"model/encoder/layers/{layer}/ffn/layer/inner/bias" in message
    assert "self_attention" not in message  # only the wrong ones are listed


def test_checkpoint_with_missing_and_unused_variables_names_each():
    embedder = WordEmbedder(801, 64)
    deeper = SelfAttentionEncoder(hyper(3, 64, 2, 128, maximum_relative_position=8))
    with pytest.raises(ValueError) as error:
        load_onmt_encoder(str(ONMT_FIXTURE), deeper, embedder)
    missing = re.findall(r"missing in checkpoint: (\S+)", str(error.value))
    assert len(missing) == 18 and all(name.startswith("model/encoder/layers/2/") for name in missing)

    shallower = SelfAttentionEncoder(hyper(1, 64, 2, 128, maximum_relative_position=8))
    with pytest.raises(ValueError) as error:
        load_onmt_encoder(str(ONMT_FIXTURE), shallower, embedder)
    unused = re.findall(r"not used by the model: (\S+)", str(error.value))
    assert len(unused) == 18 and all(name.startswith("model/encoder/layers/1/") for name in unused)

    sinusoidal = SelfAttentionEncoder(hyper(2, 64, 2, 128))  # no relative tables in the model
    with pytest.raises(ValueError, match="not used by the model: model/encoder/layers/0/self_attention/layer/relative_position_keys"):
        load_onmt_encoder(str(ONMT_FIXTURE), sinusoidal, embedder)


def test_nothing_is_assigned_when_loading_fails():
    embedder = WordEmbedder(801, 64)
    encoder = SelfAttentionEncoder(hyper(3, 64, 2, 128, maximum_relative_position=8))
    encoder.build((None, None, 64))
    before = [w.numpy().copy() for w in encoder.weights]
    with pytest.raises(ValueError):
        load_onmt_encoder(str(ONMT_FIXTURE), encoder, embedder)
    assert all(np.array_equal(a, w.numpy()) for a, w in zip(before, encoder.weights))


def test_missing_checkpoint(tmp_path):
    encoder = SelfAttentionEncoder(hyper(1, 8, 2, 16))
    with pytest.raises(FileNotFoundError, match="no checkpoint found in directory"):
        load_onmt_encoder(str(tmp_path), encoder)
    with pytest.raises(FileNotFoundError, match="ckpt-9.index"):
        load_onmt_encoder(str(tmp_path / "ckpt-9"), encoder)


def test_ids_out_of_vocabulary_range():
    embedder = WordEmbedder(26, 4)
    with pytest.raises(ValueError, match=r"token ids must lie in \[0, 26\); got \[26, 40\]"):
        embedder(np.array([[1, 26, 40]], np.int32))
    with pytest.raises(ValueError, match=r"got \[-1\]"):
        embedder(np.array([[-1, 2]], np.int32))
    with pytest.raises(TypeError, match="must be integers"):
        embedder(np.array([[1.0, 2.0]], np.float32))
    # inside a graph the same check is an assertion with the same message
    graph_fn = tf.function(lambda ids: embedder(ids))
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"token ids must lie in \[0, 26\)"):
        graph_fn(tf.constant([[3, 99]]))
