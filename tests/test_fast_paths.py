"""The seam between the layers' math and their TensorFlow fast paths: with the switch off the
layers compute the plain formulas (automatic gradients, Keras' dropout, plain products), and both
agree within float32 rounding; the switch is read once, never from the environment at trace time."""

import dataclasses

import keras
import numpy as np
import pytest
import tensorflow as tf

from opennmt_lite import cpu
from opennmt_lite.layers import Dense, FeedForwardNetwork, LayerNorm, fast_paths


@pytest.fixture(autouse=True)
def _restore_fast_paths():
    before = fast_paths.setting()
    yield
    fast_paths.restore(before)


def random(*shape, seed=0, scale=1.0):
    return tf.constant(np.random.default_rng(seed).normal(size=shape).astype(np.float32) * scale)


def outputs_and_gradients(layer, x, training, enabled, oriented=False, weights=None):
    """layer(x) and the gradients of sum(layer(x) * upstream) w.r.t. x and `weights` (default: the
    layer's trainable weights), computed in a tf.function traced under the switch `enabled` (and
    `oriented` gradients)."""
    fast_paths.configure(enabled=enabled, oriented_gradients=oriented)
    upstream = random(*x.shape[:-1], layer.compute_output_shape(x.shape)[-1], seed=9)
    weights = layer.trainable_variables if weights is None else weights

    @tf.function
    def run(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            outputs = layer(x, training=training)
            loss = tf.reduce_sum(outputs * upstream)
        return outputs, tape.gradient(loss, [x] + weights)

    outputs, gradients = run(x)
    return [outputs.numpy()] + [g.numpy() for g in gradients]


def assert_paths_agree(layer, x, training, rtol=1e-5, atol=1e-5, oriented=False):
    fast = outputs_and_gradients(layer, x, training, enabled=True, oriented=oriented)
    plain = outputs_and_gradients(layer, x, training, enabled=False)
    for f, p in zip(fast, plain):
        np.testing.assert_allclose(f, p, rtol=rtol, atol=atol)
    return fast, plain


@pytest.mark.parametrize("training", [True, False])
def test_layer_norm_plain_and_fast_agree(training):
    x = random(4, 7, 32, scale=3.0) + 0.5
    norm = LayerNorm()
    norm.build(x.shape)
    norm.gamma.assign(random(32, seed=1).numpy())
    norm.beta.assign(random(32, seed=2).numpy())
    fast, plain = assert_paths_agree(norm, x, training)
    if not training:
        assert not np.array_equal(fast[0], plain[0])  # another kernel ran (the fused one)


@pytest.mark.parametrize("training", [True, False])
@pytest.mark.parametrize("activation", [None, "relu"])
@pytest.mark.parametrize("oriented", [False, True])
def test_dense_plain_and_fast_agree(training, activation, oriented):
    dense = Dense(24, activation=activation)
    dense.build((None, 16))
    dense.bias.assign(random(24, seed=3, scale=0.5).numpy())
    assert_paths_agree(dense, random(3, 5, 16), training, oriented=oriented)


@pytest.mark.parametrize("units, depth", [(24, 16), (16, 24), (20, 20)])
@pytest.mark.parametrize("transpose", [False, True])
@pytest.mark.parametrize("use_bias", [False, True])
def test_oriented_gradients_are_the_products_gradients(units, depth, transpose, use_bias):
    """Narrowing, widening and square kernels, stored [in, out] or transposed [out, in] (a shared
    output embedding), with and without bias: the same outputs and gradients as the plain
    product's automatic ones."""
    dense = Dense(units, use_bias=use_bias)
    if transpose:
        dense.set_kernel(tf.Variable(random(units, depth, seed=4)), transpose=True)
    dense.build((None, depth))
    if use_bias:
        dense.bias.assign(random(units, seed=3, scale=0.5).numpy())
    x = random(3, 5, depth)
    weights = [dense.kernel] + ([dense.bias] if use_bias else [])  # (a shared kernel included)
    oriented, plain = (outputs_and_gradients(dense, x, True, enabled, oriented=enabled,
                                             weights=weights) for enabled in (True, False))
    assert oriented[2].shape == tuple(dense.kernel.shape)
    for a, b in zip(oriented, plain):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


def kernel_gradient_products(graph):
    """The static shapes of the graph's MatMuls with a transposed first operand (x^T @ dy or
    dy^T @ x: the kernel gradients)."""
    return [tuple(op.outputs[0].shape) for op in graph.get_operations()
            if op.type == "MatMul" and op.get_attr("transpose_a")]


@pytest.mark.parametrize("units, depth", [(8, 32), (32, 8)])
def test_oriented_gradients_form_the_kernel_gradient_in_its_wider_orientation(units, depth):
    dense = Dense(units)
    dense.build((None, depth))

    def graph():
        def run(x):
            with tf.GradientTape() as tape:
                tape.watch(x)
                loss = tf.reduce_sum(dense(x))
            return tape.gradient(loss, [x, dense.kernel])
        return tf.function(run).get_concrete_function(tf.TensorSpec([None, depth])).graph

    fast_paths.configure(oriented_gradients=False)
    assert kernel_gradient_products(graph()) == [(depth, units)]  # x^T @ dy, [in, out]
    fast_paths.configure(oriented_gradients=True)
    wider = (min(depth, units), max(depth, units))  # dy^T @ x [out, in] when in > out
    assert kernel_gradient_products(graph()) == [wider]
    assert fast_paths.kernel_gradient(random(6, depth), random(6, units, seed=1)).shape == (
        depth, units)


def test_oriented_gradients_by_default_only_with_tensorflows_own_kernels_on_a_cpu(monkeypatch):
    for onednn, gpu, want in [(False, False, True), (True, False, False), (None, False, False),
                              (False, True, False)]:
        monkeypatch.setattr(cpu, "onednn_enabled", lambda onednn=onednn: onednn)
        monkeypatch.setattr(cpu, "gpu_present", lambda gpu=gpu: gpu)
        assert fast_paths.configure().oriented_gradients is want
        assert fast_paths.configure(enabled=False).oriented_gradients is False


@pytest.mark.parametrize("activation", [None, "relu"])
@pytest.mark.parametrize("units, transpose", [(24, False), (80, False), (80, True)])
def test_separate_bias_is_added_after_the_bfloat16_product(activation, units, transpose):
    """bfloat16 products with `separate_bias`: no BiasAdd for grappler to fuse. A narrow product
    gives the rounded product plus the bias; a wide one (80 > 4 x 16 units, like the output
    layer, also with a transposed shared kernel) takes the bias inside the product, against a
    column of ones (k + 2 columns). Outputs and gradients are the formula's (float64 reference,
    within bfloat16 rounding), the bias' summed as accurately as BiasAddGrad's."""
    dense = Dense(units, activation=activation, dtype="mixed_bfloat16")
    if transpose:
        dense.set_kernel(tf.Variable(random(units, 16, seed=4)), transpose=True)
    dense.build((None, 16))
    dense.bias.assign(random(units, seed=3, scale=0.5).numpy())
    x = tf.cast(random(6, 5, 16), tf.bfloat16)
    upstream = tf.cast(random(6, 5, units, seed=9), tf.bfloat16)

    def run(separate):
        fast_paths.configure(bfloat16_matmul=cpu.NATIVE, separate_bias=separate)
        assert fast_paths.setting().separate_bias is separate

        @tf.function
        def step(x):
            with tf.GradientTape() as tape:
                tape.watch(x)
                outputs = dense(x)
                loss = tf.reduce_sum(tf.cast(outputs * upstream, tf.float32))
            return outputs, tape.gradient(loss, [x, dense.kernel, dense.bias])

        graph = step.get_concrete_function(x).graph
        return step(x), graph.get_operations()

    (outputs, gradients), operations = run(True)
    assert "BiasAdd" not in {op.type for op in operations}
    products = [op.inputs[0].shape[-1] for op in operations  # the forward product's k
                if op.type == "MatMul" and not op.name.startswith("gradient_tape")]
    kernel16 = tf.cast(dense.kernel, tf.bfloat16)
    if units > 4 * 16:
        assert products == [18]  # x, ones, zeros
    else:
        assert products == [16]
        product = tf.matmul(tf.reshape(x, [-1, 16]), kernel16, transpose_b=transpose)
        want = tf.reshape(product + tf.cast(dense.bias, tf.bfloat16), [6, 5, units])
        want = tf.nn.relu(want) if activation else want
        np.testing.assert_array_equal(outputs.numpy(), want.numpy())

    x64 = x.numpy().astype(np.float64).reshape(-1, 16)
    w64 = tf.cast(kernel16, tf.float64).numpy()
    w64 = w64.T if transpose else w64
    b64 = tf.cast(tf.cast(dense.bias, tf.bfloat16), tf.float64).numpy()
    reference = x64 @ w64 + b64
    reference = np.maximum(reference, 0) if activation else reference
    np.testing.assert_allclose(outputs.numpy().astype(np.float64).reshape(-1, units), reference,
                               rtol=1e-2, atol=1e-2)
    d_out = upstream.numpy().astype(np.float64).reshape(-1, units)
    if activation:
        d_out = d_out * (reference > 0)
    d_kernel = x64.T @ d_out
    references = [d_out @ w64.T, d_kernel.T if transpose else d_kernel, d_out.sum(axis=0)]
    for got, want in zip(gradients, references):
        got = got.numpy().astype(np.float64).reshape(want.shape)
        np.testing.assert_allclose(got, want, rtol=2e-2, atol=2e-2 * np.abs(want).max())

    (fused_outputs, _), fused_operations = run(False)
    assert "BiasAdd" in {op.type for op in fused_operations}
    np.testing.assert_allclose(tf.cast(fused_outputs, tf.float32), tf.cast(outputs, tf.float32),
                               rtol=1e-2, atol=1e-2)


def test_separate_bias_by_default_only_for_native_bfloat16_on_a_onednn_cpu(monkeypatch):
    for path, onednn, gpu, want in [(cpu.NATIVE, True, False, True), (cpu.NATIVE, False, False, False),
                                    (cpu.NATIVE, None, False, False), (cpu.NATIVE, True, True, False),
                                    (cpu.FLOAT32, True, False, False)]:
        monkeypatch.setattr(cpu, "onednn_enabled", lambda onednn=onednn: onednn)
        monkeypatch.setattr(cpu, "gpu_present", lambda gpu=gpu: gpu)
        assert fast_paths.configure(bfloat16_matmul=path).separate_bias is want
        assert fast_paths.configure(enabled=False).separate_bias is False


@pytest.mark.parametrize("oriented", [False, True])
def test_ffn_plain_and_fast_agree_without_dropout_in_training_and_inference(oriented):
    ffn = FeedForwardNetwork(32, 16, dropout=0.3)
    ffn.build((None, None, 16))
    x = random(3, 5, 16)
    assert_paths_agree(ffn, x, training=False, oriented=oriented)
    no_dropout = FeedForwardNetwork(32, 16, dropout=0.0)
    no_dropout.build((None, None, 16))
    for a, b in zip(no_dropout.weights, ffn.weights):
        a.assign(b)
    assert_paths_agree(no_dropout, x, training=True, oriented=oriented)


@pytest.mark.parametrize("oriented", [False, True])
def test_ffn_in_training_is_the_formula_with_its_own_mask_on_both_paths(oriented):
    """With dropout, each path draws its own mask from the layer's seed generator: the fast one
    16-bit masks (`fast_paths.dropout_keep_mask`), the plain one Keras' dropout. Given its mask,
    each computes outer(dropout(relu(inner(x)))), outputs and gradients (the fast one through its
    hand-written gradient, the plain one through automatic differentiation)."""
    rate = 0.3
    x = random(3, 5, 16)
    upstream = random(3, 5, 16, seed=9)
    ffn = FeedForwardNetwork(32, 16, dropout=rate)
    ffn.build((None, None, 16))
    state = ffn.dropout_seed.state.numpy()

    def twin_seed():
        twin = keras.random.SeedGenerator()
        twin.state.assign(state)
        return twin

    masks = {
        True: lambda: (lambda keep, scale: tf.where(keep, tf.cast(scale, tf.float32), 0.0))(
            *fast_paths.dropout_keep_mask(tf.constant([15, 32]), rate, twin_seed())),
        False: lambda: keras.random.dropout(tf.ones([15, 32]), rate, seed=twin_seed()),
    }
    for enabled, mask in masks.items():
        ffn.dropout_seed.state.assign(state)
        got = outputs_and_gradients(ffn, x, training=True, enabled=enabled, oriented=oriented)
        mask = tf.reshape(mask(), [3, 5, 32])
        weights = [tf.constant(w.numpy()) for w in ffn.trainable_variables]
        with tf.GradientTape() as tape:
            tape.watch([x] + weights)
            inner_kernel, inner_bias, outer_kernel, outer_bias = weights
            inner = tf.nn.relu(tf.einsum("btd,du->btu", x, inner_kernel) + inner_bias) * mask
            reference = tf.einsum("btu,ud->btd", inner, outer_kernel) + outer_bias
            loss = tf.reduce_sum(reference * upstream)
        want = [reference.numpy()] + [g.numpy() for g in tape.gradient(loss, [x] + weights)]
        assert 0.2 < np.mean(mask.numpy() == 0) < 0.4
        for a, b in zip(got, want):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


def test_the_switch_decides_the_ops():
    norm = LayerNorm()
    norm.build((None, None, 8))
    ffn = FeedForwardNetwork(16, 8, dropout=0.1)
    ffn.build((None, None, 8))
    spec = tf.TensorSpec([None, None, 8])

    def op_types(layer, training):
        graph = tf.function(lambda x: layer(x, training=training)).get_concrete_function(spec).graph
        return {op.type for op in graph.get_operations()}

    fast_paths.configure(enabled=True)
    assert "FusedBatchNormV3" in op_types(norm, False)
    assert "Bitcast" in op_types(ffn, True)  # 16-bit dropout masks
    fast_paths.configure(enabled=False)
    assert "FusedBatchNormV3" not in op_types(norm, False)
    assert "Bitcast" not in op_types(ffn, True)


def test_the_setting_is_read_once_not_from_the_environment_at_trace_time(monkeypatch):
    monkeypatch.setenv(cpu.BF16_MATMUL_ENV, cpu.FLOAT32)
    setting = fast_paths.configure()
    assert (setting.enabled, setting.bfloat16_matmul) == (True, cpu.FLOAT32)
    with pytest.raises(dataclasses.FrozenInstanceError):
        setting.enabled = False
    dense = Dense(4, dtype="bfloat16")
    dense.build((None, 8))
    spec = tf.TensorSpec([4, 8], tf.bfloat16)
    for value in (cpu.NATIVE, "not a path"):  # neither changes anything now, nor raises
        monkeypatch.setenv(cpu.BF16_MATMUL_ENV, value)
        graph = tf.function(lambda a: dense(a)).get_concrete_function(spec).graph
        assert [op.get_attr("T") for op in graph.get_operations() if op.type == "MatMul"] == [
            tf.float32]
        assert fast_paths.setting() is setting


def test_the_first_use_configures_the_defaults_once(monkeypatch):
    calls = []
    monkeypatch.setattr(fast_paths, "_setting", None)
    monkeypatch.setattr(cpu, "bfloat16_matmul_path", lambda: calls.append(1) or cpu.NATIVE)
    assert fast_paths.enabled()
    assert (fast_paths.setting().enabled, fast_paths.setting().bfloat16_matmul) == (True, cpu.NATIVE)
    Dense(4)(tf.ones([2, 3]))
    assert len(calls) == 1


def test_switched_off_the_products_are_the_plain_ops_whatever_the_cpu(monkeypatch):
    monkeypatch.setattr(cpu, "bfloat16_matmul_path", lambda: pytest.fail("read the CPU"))
    assert fast_paths.configure(enabled=False, bfloat16_matmul=cpu.FLOAT32) == fast_paths.Setting(
        enabled=False, bfloat16_matmul=cpu.NATIVE)
    with pytest.raises(ValueError, match="bfloat16_matmul"):
        fast_paths.configure(bfloat16_matmul="fast")


def hashed_masks(rate, seeds, shape=(2000, 512)):
    """Keep masks [shape] bool of `dropout_keep_mask` with hashed bits, one per seed [2]."""
    fast_paths.configure(hashed_dropout_bits=True)

    class Fixed:  # a seed generator that returns the given seeds in turn
        def __init__(self, seeds):
            self.seeds = iter(seeds)

        def next(self):
            return tf.constant(next(self.seeds), tf.int32)

    generator = Fixed(seeds)
    return [fast_paths.dropout_keep_mask(tf.constant(shape), rate, generator)[0].numpy()
            for _ in seeds]


@pytest.mark.parametrize("rate", [0.1, 0.3, 0.5])
def test_hashed_dropout_bits_drop_at_the_rate_independently(rate):
    """Over a million elements: the drop rate, the rate of two neighbours (in a row, the two
    halves of one random word; across rows) and of the same element under the next seed of a
    Keras seed generator (one word advances) are p and p^2 within 5 standard deviations; the same
    seed gives the same mask, another one another mask."""
    first, second, again = hashed_masks(rate, [(7, 100), (7, 101), (7, 100)])
    np.testing.assert_array_equal(first, again)
    assert not np.array_equal(first, second)

    def check(events, p):
        assert abs(events.mean() - p) < 5 * np.sqrt(p * (1 - p) / events.size), (events.mean(), p)

    dropped, next_dropped = ~first, ~second
    check(dropped, rate)
    check(dropped[:, :-1] & dropped[:, 1:], rate**2)
    check(dropped[:-1] & dropped[1:], rate**2)
    check(dropped & next_dropped, rate**2)
    check(dropped[:, 1:] & next_dropped[:, :-1], rate**2)  # not a shifted copy


def test_hashed_dropout_bits_only_without_a_gpu(monkeypatch):
    for gpu, want in [(False, True), (True, False)]:
        monkeypatch.setattr(cpu, "gpu_present", lambda gpu=gpu: gpu)
        assert fast_paths.configure().hashed_dropout_bits is want
        assert fast_paths.configure(enabled=False).hashed_dropout_bits is False
