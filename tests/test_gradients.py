"""Dropout masks, and hand-written gradients (kept to save training memory), against independent references:
finite differences in float64 and automatic differentiation of the plain formula."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from opennmt_lite.layers import LayerNorm
from opennmt_lite.layers.attention import relative_context, relative_logits, relative_positions
from opennmt_lite.layers.common import apply_dropout
from opennmt_lite.layers.fast_paths import (dense_relu_dropout, dropout_keep_mask, layer_norm,
                                            layer_norm_inference)


def test_layer_norm_gradient_matches_finite_differences():
    rng = np.random.default_rng(0)
    x = tf.constant(rng.normal(size=(2, 3, 6)) * 2 + 0.5)
    gamma = tf.constant(rng.normal(size=6))
    beta = tf.constant(rng.normal(size=6))
    theoretical, numerical = tf.test.compute_gradient(
        lambda x, g, b: layer_norm(x, g, b, 1e-3), [x, gamma, beta], delta=1e-6)
    for ours, reference in zip(theoretical, numerical):
        np.testing.assert_allclose(ours, reference, atol=1e-6)


def test_layer_norm_layer_matches_autodiff_of_the_formula_in_float32():
    rng = np.random.default_rng(1)
    x = tf.constant(rng.normal(size=(4, 7, 32)).astype(np.float32) * 3)
    upstream = tf.constant(rng.normal(size=(4, 7, 32)).astype(np.float32))
    norm = LayerNorm()
    norm.build(x.shape)
    norm.gamma.assign(rng.normal(size=32).astype(np.float32))
    norm.beta.assign(rng.normal(size=32).astype(np.float32))
    outputs = norm(x, training=True)
    ours = tape_gradient_of_layer(norm, x, upstream, training=True)
    with tf.GradientTape() as tape:
        tape.watch(x)
        gamma, beta = tf.constant(norm.gamma.numpy()), tf.constant(norm.beta.numpy())
        tape.watch([gamma, beta])
        mean, variance = tf.nn.moments(x, axes=[-1], keepdims=True)
        reference = (x - mean) * tf.math.rsqrt(variance + 1e-3) * gamma + beta
        reference_loss = tf.reduce_sum(reference * upstream)
    expected = tape.gradient(reference_loss, [x, gamma, beta])
    np.testing.assert_array_equal(outputs.numpy(), reference.numpy())  # same forward ops
    for got, want in zip(ours, expected):
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-5)

    # Inference (the fused batch-norm kernel): the same values within float32 rounding, and
    # still differentiable (through the batch-norm gradient) for whoever differentiates it.
    inference_outputs = norm(x, training=False)
    np.testing.assert_allclose(inference_outputs.numpy(), reference.numpy(), rtol=1e-5, atol=1e-5)
    assert not np.array_equal(inference_outputs.numpy(), outputs.numpy())  # another kernel ran
    for got, want in zip(tape_gradient_of_layer(norm, x, upstream, training=False), expected):
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-4, atol=1e-4)


def test_layer_norm_inference_matches_float64_formula():
    rng = np.random.default_rng(2)
    x = rng.normal(size=(3, 5, 16)) * 4 - 1
    gamma, beta = rng.normal(size=16), rng.normal(size=16)
    expected = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-3) * gamma + beta
    got = layer_norm_inference(*(tf.constant(v, tf.float32) for v in (x, gamma, beta)), 1e-3)
    np.testing.assert_allclose(got.numpy(), expected, rtol=1e-5, atol=2e-6)
    empty = layer_norm_inference(tf.zeros([0, 4, 16]), tf.ones([16]), tf.zeros([16]), 1e-3)
    assert empty.shape == (0, 4, 16)


def test_layer_norm_kernel_follows_the_training_flag():
    """Training graphs keep the hand-written gradient; inference graphs the fused kernel."""
    norm = LayerNorm()
    norm.build((None, None, 8))
    for training, fused in ((True, False), (False, True), (None, True)):
        graph = tf.function(lambda x: norm(x, training=training)).get_concrete_function(
            tf.TensorSpec([None, None, 8])).graph
        op_types = {op.type for op in graph.get_operations()}
        assert ("FusedBatchNormV3" in op_types) == fused, (training, op_types)

    # The flag reaches every layer norm of a whole model: a training forward has no fused op,
    # an inference forward has one per layer norm (2 per encoder layer, 3 per decoder layer,
    # one final norm on each side).
    from opennmt_lite.hyperparameters import ModelHyperparameters
    from opennmt_lite.models import Transformer

    model = Transformer(ModelHyperparameters(num_layers=2, num_units=8, num_heads=2, ffn_inner_dim=16,
                                             maximum_relative_position=4), 20, 20)
    features = {"source_ids": tf.constant([[3, 4, 5]]), "source_length": tf.constant([3]),
                "target_ids_in": tf.constant([[1, 6]]), "target_length": tf.constant([2])}
    for training, count in ((True, 0), (False, 2 * 2 + 3 * 2 + 2)):
        graph = tf.function(lambda: model(features, training=training)).get_concrete_function().graph
        fused = [op for op in graph.get_operations() if op.type == "FusedBatchNormV3"]
        assert len(fused) == count, (training, len(fused))


def tape_gradient_of_layer(layer, x, upstream, training):
    """Gradients of sum(layer(x) * upstream) w.r.t. x and the layer's weights (gamma, beta)."""
    with tf.GradientTape() as tape:
        tape.watch(x)
        loss = tf.reduce_sum(layer(x, training=training) * upstream)
    return tape.gradient(loss, [x, layer.gamma, layer.beta])


def test_dropout_drops_the_rate_and_keeps_the_mean():
    x = tf.ones([64, 333])  # odd last dimension: the mask draws a spare half
    dropped = apply_dropout(x, 0.1, keras.random.SeedGenerator(5), training=True).numpy()
    kept = dropped != 0
    assert abs(1 - kept.mean() - 0.1) < 0.005
    np.testing.assert_allclose(dropped[kept], 65536 / (65536 - 6554), rtol=1e-6)
    assert abs(dropped.mean() - 1) < 0.01
    again = apply_dropout(x, 0.1, keras.random.SeedGenerator(5), training=True).numpy()
    np.testing.assert_array_equal(dropped, again)  # the seed generator's state decides the mask
    assert np.all(apply_dropout(x, 0.1, keras.random.SeedGenerator(5), training=False) == x)


def test_dense_relu_dropout_matches_autodiff_with_the_same_mask():
    rng = np.random.default_rng(2)
    x = tf.constant(rng.normal(size=(3, 5, 16)).astype(np.float32))
    kernel = tf.constant(rng.normal(size=(16, 24)).astype(np.float32) * 0.3)
    bias = tf.constant(rng.normal(size=24).astype(np.float32) * 0.1)
    upstream = tf.constant(rng.normal(size=(3, 5, 24)).astype(np.float32))
    with tf.GradientTape() as tape:
        tape.watch([x, kernel, bias])
        ours = dense_relu_dropout(x, kernel, bias, 0.3, keras.random.SeedGenerator(7))
        loss = tf.reduce_sum(ours * upstream)
    got = tape.gradient(loss, [x, kernel, bias])
    keep, scale = dropout_keep_mask(tf.constant([15, 24]), 0.3, keras.random.SeedGenerator(7))
    with tf.GradientTape() as tape:
        tape.watch([x, kernel, bias])
        inner = tf.nn.relu(tf.einsum("btd,du->btu", x, kernel) + bias)
        reference = tf.where(tf.reshape(keep, [3, 5, 24]), inner * scale, 0.0)
        reference_loss = tf.reduce_sum(reference * upstream)
    want = tape.gradient(reference_loss, [x, kernel, bias])
    assert 0.2 < 1 - keep.numpy().mean() < 0.4 and np.any(inner.numpy() == 0)
    np.testing.assert_allclose(ours.numpy(), reference.numpy(), rtol=1e-6, atol=1e-6)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-5)


def test_a_rate_that_rounds_to_one_drops_everything_and_passes_no_gradient():
    x = tf.ones([4, 6])
    kernel, bias = tf.ones([6, 8]), tf.ones([8])
    for rate in (1.0, 0.999999):
        assert np.all(apply_dropout(x, rate, keras.random.SeedGenerator(1), training=True) == 0)
        with tf.GradientTape() as tape:
            tape.watch([x, kernel, bias])
            outputs = dense_relu_dropout(x, kernel, bias, rate, keras.random.SeedGenerator(1))
            loss = tf.reduce_sum(outputs)
        assert np.all(outputs.numpy() == 0)
        for gradient in tape.gradient(loss, [x, kernel, bias]):
            assert np.all(gradient.numpy() == 0)


@pytest.mark.parametrize("time_q, time_k", [(7, 7), (1, 6), (12, 12)])
def test_relative_position_terms_and_gradients_match_the_gathered_table_formula(time_q, time_k):
    """relative_logits / relative_context (2-D products against the 2k+1 table rows, a gather,
    a bucket sum) against the direct formula on the [time_q, time_k, depth] gathered table, values
    and gradients for the inputs and both tables."""
    rng = np.random.default_rng(5)
    batch, heads, depth, k = 3, 2, 8, 3
    queries = tf.constant(rng.normal(size=(batch, heads, time_q, depth)).astype(np.float32))
    attention = tf.constant(rng.random(size=(batch, heads, time_q, time_k)).astype(np.float32))
    keys_table = tf.constant(rng.normal(size=(2 * k + 1, depth)).astype(np.float32))
    values_table = tf.constant(rng.normal(size=(2 * k + 1, depth)).astype(np.float32))
    up_logits = tf.constant(rng.normal(size=(batch, heads, time_q, time_k)).astype(np.float32))
    up_context = tf.constant(rng.normal(size=(batch, heads, time_q, depth)).astype(np.float32))
    positions = relative_positions(tf.range(time_k - time_q, time_k), time_k, k)
    inputs = [queries, attention, keys_table, values_table]

    def objective(logits, context):
        return tf.reduce_sum(logits * up_logits) + tf.reduce_sum(context * up_context)

    with tf.GradientTape() as tape:
        tape.watch(inputs)
        logits = relative_logits(queries, keys_table, positions)
        context = relative_context(attention, values_table, positions)
        ours = objective(logits, context)
    got = tape.gradient(ours, inputs)
    with tf.GradientTape() as tape:
        tape.watch(inputs)
        want_logits = tf.einsum("bhid,ijd->bhij", queries, tf.gather(keys_table, positions))
        want_context = tf.einsum("bhij,ijd->bhid", attention, tf.gather(values_table, positions))
        reference = objective(want_logits, want_context)
    want = tape.gradient(reference, inputs)
    np.testing.assert_allclose(logits.numpy(), want_logits.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(context.numpy(), want_context.numpy(), rtol=1e-5, atol=1e-5)
    for name, a, b in zip(["queries", "attention", "keys table", "values table"], got, want):
        np.testing.assert_allclose(tf.convert_to_tensor(a).numpy(), tf.convert_to_tensor(b).numpy(),
                                   rtol=1e-5, atol=1e-4, err_msg=name)
