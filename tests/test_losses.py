"""The loss and its custom gradient against OpenNMT-tf's formula written with TensorFlow ops."""

import numpy as np
import pytest
import tensorflow as tf

from opennmt_lite.training.losses import cross_entropy_sequence_loss, token_cross_entropy


def float64_log_probs(values):
    """log_softmax over the last axis of `values` (any array), computed in float64."""
    shifted = np.asarray(values, np.float64)
    shifted = shifted - shifted.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


@pytest.mark.parametrize("smoothing, training", [(0.0, True), (0.1, True), (0.1, False)])
def test_loss_and_gradient_match_dense_smoothed_cross_entropy(smoothing, training):
    rng = np.random.default_rng(0)
    vocab = 11
    logits = tf.constant(rng.normal(size=(3, 5, vocab)).astype(np.float32) * 3)
    labels = tf.constant(rng.integers(0, vocab, size=(3, 5)).astype(np.int32))
    lengths = tf.constant([5, 3, 1])
    with tf.GradientTape() as tape:
        tape.watch(logits)
        loss, tokens = cross_entropy_sequence_loss(logits, labels, lengths, smoothing, training)
    grad = tape.gradient(loss, logits)
    eps = smoothing if training else 0.0
    with tf.GradientTape() as tape:
        tape.watch(logits)
        # OpenNMT-tf: one-hot target 1 - eps, every other class eps / (V - 1), real tokens only
        target = tf.one_hot(labels, vocab, on_value=1 - eps, off_value=eps / (vocab - 1))
        mask = tf.sequence_mask(lengths, 5, tf.float32)
        reference = tf.reduce_sum(tf.nn.softmax_cross_entropy_with_logits(target, logits) * mask)
    reference_grad = tape.gradient(reference, logits)
    assert float(tokens) == 9.0
    assert abs(float(loss) - float(reference)) <= 1e-5 * float(reference)
    np.testing.assert_allclose(grad.numpy(), reference_grad.numpy(), atol=1e-6)
    assert np.all(grad.numpy()[1, 3:] == 0) and np.all(grad.numpy()[2, 1:] == 0)  # padding


def test_smoothed_loss_matches_the_dense_formula_at_the_benchmark_vocabulary_size():
    """The smoothed loss is computed without the one-hot target (sum of log-probabilities from
    the row sum of the logits): at 8 003 classes, where that sum cancels the most, the loss
    within 1e-6 relative of OpenNMT-tf's dense formula, and the gradient within the parity bound
    (1e-5 relative, 1e-7 absolute) of that formula and of the exact gradient computed in float64.
    (The two TensorFlow kernels compute the softmax with different roundings on some CPUs: up to
    9e-6 relative on the largest probabilities, so a tighter bound between them is not portable.)"""
    rng = np.random.default_rng(1)
    vocab, eps = 8003, 0.1
    logits_values = rng.normal(size=(4, 6, vocab)).astype(np.float32) * 4 + 2
    label_values = rng.integers(0, vocab, size=(4, 6)).astype(np.int64)
    upstream_values = rng.normal(size=(4, 6)).astype(np.float32)
    logits, labels = tf.constant(logits_values), tf.constant(label_values)
    lengths = tf.constant([6, 6, 6, 6])
    upstream = tf.constant(upstream_values)
    with tf.GradientTape() as tape:
        tape.watch(logits)
        token_loss, _ = token_cross_entropy(logits, labels, lengths, eps, training=True)
        objective = tf.reduce_sum(token_loss * upstream)
    grad = tape.gradient(objective, logits)
    with tf.GradientTape() as tape:
        tape.watch(logits)
        target = tf.one_hot(labels, vocab, on_value=1 - eps, off_value=eps / (vocab - 1))
        reference = tf.nn.softmax_cross_entropy_with_logits(target, logits)
        reference_objective = tf.reduce_sum(reference * upstream)
    reference_grad = tape.gradient(reference_objective, logits)
    # exact: loss -sum(q log p), gradient (p - q) * upstream, in float64
    log_probs = float64_log_probs(logits_values)
    exact_target = np.full(logits_values.shape, eps / (vocab - 1))
    np.put_along_axis(exact_target, label_values[..., None], 1 - eps, axis=-1)
    exact_loss = -(exact_target * log_probs).sum(axis=-1)
    exact_grad = (np.exp(log_probs) - exact_target) * upstream_values[..., None]
    np.testing.assert_allclose(token_loss.numpy(), reference.numpy(), rtol=1e-6)
    np.testing.assert_allclose(token_loss.numpy(), exact_loss, rtol=1e-6)
    np.testing.assert_allclose(grad.numpy(), reference_grad.numpy(), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(grad.numpy(), exact_grad, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("offset", [-100.0, 30.0, 100.0])
def test_smoothed_loss_of_logits_far_from_zero_stays_within_1e_6_of_float64(offset):
    """The log-sum-exp comes from the softmax (max(x) - log(max(p))) and the sum of the
    log-probabilities from the row sum of the logits minus vocab times it: two large terms when
    every logit is far from zero. At 8 003 classes and a common offset of +-100 (trained models'
    logits stay well inside that), the per-token loss is still within 1e-6 relative of the
    float64 formula."""
    rng = np.random.default_rng(2)
    vocab, eps = 8003, 0.1
    logits_values = (rng.normal(size=(2, 50, vocab)) * 4 + offset).astype(np.float32)
    label_values = rng.integers(0, vocab, size=(2, 50))
    token_loss, _ = token_cross_entropy(
        tf.constant(logits_values), tf.constant(label_values), tf.constant([50, 50]), eps,
        training=True)
    log_probs = float64_log_probs(logits_values)
    label_log_probs = np.take_along_axis(log_probs, label_values[..., None], axis=-1)[..., 0]
    off_value = eps / (vocab - 1)
    exact = -(1 - eps - off_value) * label_log_probs - off_value * log_probs.sum(axis=-1)
    np.testing.assert_allclose(token_loss.numpy(), exact, rtol=1e-6)


@pytest.mark.parametrize("dtype", [tf.bfloat16, tf.float16])
@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_16_bit_logits_give_the_float32_loss_and_a_gradient_in_their_dtype(dtype, smoothing):
    """Mixed precision: the loss of 16-bit logits is computed in float32 (equal to the loss of the
    same values in float32), and their gradient comes back in their dtype, within one rounding of
    the float64 gradient (the label's term is added in that dtype: at most a second rounding)."""
    rng = np.random.default_rng(2)
    vocab = 300
    logits = tf.cast(tf.constant(rng.normal(size=(2, 7, vocab)).astype(np.float32) * 3), dtype)
    labels = tf.constant(rng.integers(0, vocab, size=(2, 7)).astype(np.int32))
    upstream = rng.uniform(0.5, 2.0, size=(2, 7)).astype(np.float32)
    lengths = tf.constant([7, 7])

    def loss_and_gradient(values):
        with tf.GradientTape() as tape:
            tape.watch(values)
            token_loss, _ = token_cross_entropy(values, labels, lengths, smoothing, training=True)
            objective = tf.reduce_sum(token_loss * upstream)
        return token_loss, tape.gradient(objective, values)

    token_loss, grad = loss_and_gradient(logits)
    float_loss, _ = loss_and_gradient(tf.cast(logits, tf.float32))
    assert token_loss.dtype == tf.float32 and grad.dtype == dtype
    np.testing.assert_array_equal(token_loss.numpy(), float_loss.numpy())
    log_probs = float64_log_probs(tf.cast(logits, tf.float64).numpy())
    target = np.full(log_probs.shape, smoothing / (vocab - 1))
    np.put_along_axis(target, labels.numpy()[..., None], 1 - smoothing, axis=-1)
    exact = (np.exp(log_probs) - target) * upstream[..., None]
    unit = 2.0 ** -8 if dtype == tf.bfloat16 else 2.0 ** -11  # half an ulp, relative
    np.testing.assert_allclose(tf.cast(grad, tf.float64).numpy(), exact, rtol=2 * unit, atol=1e-7)
