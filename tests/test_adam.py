"""opennmt_lite.training.adam: Keras' Adam with its update in TensorFlow's fused kernel."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from opennmt_lite.layers import fast_paths
from opennmt_lite.training.adam import Adam

STEPS = 12


@pytest.fixture(autouse=True)
def restore_fast_paths():
    yield
    fast_paths.configure()


def gradients():
    rng = np.random.default_rng(0)
    return [rng.normal(size=(16, 8)).astype(np.float32) for _ in range(STEPS)]


def train(optimizer_class, **kwargs):
    """(variable, m, v) after STEPS updates of a [16, 8] variable under tf.function, and the op
    types of the traced update."""
    variable = keras.Variable(np.random.default_rng(1).normal(size=(16, 8)).astype(np.float32))
    optimizer = optimizer_class(learning_rate=keras.optimizers.schedules.ExponentialDecay(
        0.01, 4, 0.5), beta_1=0.9, beta_2=0.998, epsilon=1e-7, **kwargs)
    optimizer.build([variable])

    @tf.function
    def step(gradient):
        optimizer.apply([gradient], [variable])

    for gradient in gradients():
        step(tf.constant(gradient))
    graph = step.get_concrete_function(tf.TensorSpec([16, 8], tf.float32)).graph.as_graph_def()
    ops = {node.op for node in graph.node}
    ops |= {node.op for function in graph.library.function for node in function.node_def}
    return (variable.numpy(), optimizer._momentums[0].numpy(), optimizer._velocities[0].numpy(),
            ops)


def reference():
    """Adam in float64 from the formula, with beta_1, beta_2 and epsilon as float32 values (as
    TensorFlow's kernel and OpenNMT-tf's optimizers take them)."""
    variable = np.random.default_rng(1).normal(size=(16, 8))
    m, v = np.zeros_like(variable), np.zeros_like(variable)
    beta_1, beta_2, epsilon = (float(np.float32(x)) for x in (0.9, 0.998, 1e-7))
    for t, g in enumerate(gradients(), 1):
        lr = 0.01 * 0.5 ** ((t - 1) / 4)
        m += (g - m) * (1 - beta_1)
        v += (g * g - v) * (1 - beta_2)
        alpha = lr * np.sqrt(1 - beta_2 ** t) / (1 - beta_1 ** t)
        variable -= alpha * m / (np.sqrt(v) + epsilon)
    return variable, m, v


def test_fused_update_follows_adam_and_runs_the_fused_kernel():
    variable, m, v, ops = train(Adam)
    expected = reference()
    for ours, theirs in zip((variable, m, v), expected):
        np.testing.assert_allclose(ours, theirs, rtol=2e-6, atol=1e-7)
    assert "ResourceApplyAdam" in ops


def test_fused_update_stays_within_keras_adam():
    """Keras computes 1 - beta_2 in float64 (0.002), the kernel in float32 (1.3e-5 relatively
    away): the variables stay within 1e-5 of Keras' Adam after STEPS updates."""
    fused, _, _, _ = train(Adam)
    keras_adam, _, _, _ = train(keras.optimizers.Adam)
    np.testing.assert_allclose(fused, keras_adam, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("case", ["fast paths off", "amsgrad"])
def test_keras_update_where_the_kernel_does_not_apply(case):
    if case == "fast paths off":
        fast_paths.configure(enabled=False)
    kwargs = {"amsgrad": True} if case == "amsgrad" else {}
    ours = train(Adam, **kwargs)
    theirs = train(keras.optimizers.Adam, **kwargs)
    assert "ResourceApplyAdam" not in ours[3]
    for a, b in zip(ours[:3], theirs[:3]):
        np.testing.assert_array_equal(a, b)
