"""Hand-written gradients (kept to save training memory) against independent references:
finite differences in float64 and automatic differentiation of the plain formula."""

import numpy as np
import tensorflow as tf

from opennmt_lite.layers import LayerNorm
from opennmt_lite.layers.common import layer_norm


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
    outputs = norm(x)
    ours = tape_gradient_of_layer(norm, x, upstream)
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


def tape_gradient_of_layer(layer, x, upstream):
    """Gradients of sum(layer(x) * upstream) w.r.t. x and the layer's weights (gamma, beta)."""
    with tf.GradientTape() as tape:
        tape.watch(x)
        loss = tf.reduce_sum(layer(x) * upstream)
    return tape.gradient(loss, [x, layer.gamma, layer.beta])
