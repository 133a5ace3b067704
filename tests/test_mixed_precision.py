"""The layers under Keras mixed precision policies (float32 variables, half-precision compute).

Tolerance: a half-precision result cannot be closer to the float32 one than the rounding of the
output itself, u * scale, with unit roundoff u = 2**-11 (float16) or 2**-8 (bfloat16) and scale the
output's largest magnitude (2.36 here). Measured on the fixture model (2 layers): max error
1.6 * u * scale in float16, 2.0 * u * scale in bfloat16; mean error below 0.25 * u * scale.
The bounds below allow 4 * u * scale (max) and u * scale (mean).
"""

import keras
import numpy as np
import pytest
import tensorflow as tf

from conftest import ONMT_FIXTURE
from opennmt_lite.hyperparameters import ModelHyperparameters
from opennmt_lite.models.encoders import SelfAttentionEncoder
from opennmt_lite.models.inputters import WordEmbedder
from opennmt_lite.layers import Dense, LayerNorm
from opennmt_lite.checkpointing.onmt_names import load_onmt_encoder

UNIT_ROUNDOFF = {"mixed_float16": 2.0**-11, "mixed_bfloat16": 2.0**-8}
COMPUTE_DTYPE = {"mixed_float16": tf.float16, "mixed_bfloat16": tf.bfloat16}


def fixture_encoder():
    embedder = WordEmbedder(801, 64)
    encoder = SelfAttentionEncoder(ModelHyperparameters(
        num_layers=2, num_units=64, num_heads=2, ffn_inner_dim=128, maximum_relative_position=8))
    load_onmt_encoder(str(ONMT_FIXTURE), encoder, embedder)
    return embedder, encoder


@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
def test_encoder_under_mixed_policy_is_close_to_float32(policy):
    expected = np.load(ONMT_FIXTURE / "expected.npz")
    reference = expected["encoder_output"]
    keras.config.set_dtype_policy(policy)
    embedder, encoder = fixture_encoder()
    assert all(v.dtype == "float32" for v in encoder.weights + embedder.weights)
    output = encoder(embedder(expected["source_ids"]), sequence_length=expected["source_length"])
    assert output.dtype == COMPUTE_DTYPE[policy]
    output = output.numpy().astype(np.float64)
    assert np.isfinite(output).all()
    bound = UNIT_ROUNDOFF[policy] * np.abs(reference).max()
    error = np.abs(output - reference)
    assert error.max() <= 4 * bound
    assert error.mean() <= bound
    # Half precision really was used: the result is not bit-identical to float32.
    assert error.max() > 0


@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
def test_empty_and_large_inputs_stay_finite(policy):
    keras.config.set_dtype_policy(policy)
    embedder, encoder = fixture_encoder()
    ids = np.array([[5, 9, 11], [0, 0, 0]], np.int32)
    # A zero-length sequence masks every key (float32.min in float16 would be -inf, then NaN).
    output = encoder(embedder(ids), sequence_length=np.array([3, 0])).numpy().astype(np.float32)
    assert np.isfinite(output).all()
    # Inputs near float16's limit: layer norm statistics are computed in float32.
    norm = LayerNorm()
    x = tf.constant([[30000.0, -30000.0, 20000.0, 1.0]], COMPUTE_DTYPE[policy])
    y = norm(x).numpy().astype(np.float64)
    assert np.isfinite(y).all()
    x64 = x.numpy().astype(np.float64)  # the inputs as rounded to half precision
    ref = (x64 - x64.mean()) / np.sqrt(x64.var() + 1e-3)
    # (In float16 the variance, about 5e8, would overflow: 65504 is float16's largest value.)
    np.testing.assert_allclose(y, ref, atol=4 * UNIT_ROUNDOFF[policy] * np.abs(ref).max())


def graph_op_types(layer, dtype, depth):
    fn = tf.function(lambda x: layer(x))
    graph = fn.get_concrete_function(tf.TensorSpec([None, None, depth], dtype)).graph
    return {op.type for op in graph.get_operations()}


def test_float16_dense_pads_kernel_to_multiple_of_8():
    keras.config.set_dtype_policy("mixed_float16")
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2, 3, 16)).astype(np.float32)
    for units, padded in [(10, True), (16, False)]:
        dense = Dense(units)
        dense.build((None, None, 16))
        dense.bias.assign(rng.normal(size=units).astype(np.float32))
        y = dense(tf.constant(x, tf.float16))
        assert y.shape == (2, 3, units) and y.dtype == tf.float16
        ref = x @ dense.kernel.numpy() + dense.bias.numpy()
        np.testing.assert_allclose(y.numpy().astype(np.float32), ref, atol=2e-2, rtol=2e-3)
        assert ("Pad" in graph_op_types(dense, tf.float16, 16)) == padded
    # float32 inputs never pad
    keras.config.set_dtype_policy("float32")
    dense = Dense(10)
    dense.build((None, None, 16))
    assert "Pad" not in graph_op_types(dense, tf.float32, 16)


def test_transposed_shared_kernel_with_float16_padding():
    keras.config.set_dtype_policy("mixed_float16")
    table = keras.Variable(np.random.default_rng(1).normal(size=(13, 8)).astype(np.float32))
    dense = Dense(13)
    dense.set_kernel(table, transpose=True)
    x = np.random.default_rng(2).normal(size=(4, 8)).astype(np.float32)
    y = dense(tf.constant(x, tf.float16)).numpy().astype(np.float32)
    np.testing.assert_allclose(y, x @ table.numpy().T, atol=2e-2, rtol=2e-3)
    assert dense.kernel is table
