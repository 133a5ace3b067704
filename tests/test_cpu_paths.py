"""The CPU-feature detection and the two ways of computing bfloat16 matrix products.

On a CPU without AVX512_BF16 or AMX, TensorFlow's bfloat16 MatMul truncates its results (measured
on an AVX2 EPYC: 99.99 % of outputs too small, mean -0.28 %); the layers' `matmul` then multiplies
in float32 and rounds once ("float32" path). The native path is the plain op, whatever the host
does with it. OPENNMT_LITE_BF16_MATMUL picks either path at start-up, and
`fast_paths.configure(bfloat16_matmul=...)` in a test, so both run here on any host.
"""

import logging
import os
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

from opennmt_lite import cpu, errors
from opennmt_lite.layers import Dense, fast_paths
from opennmt_lite.layers.attention import MultiHeadAttention
from opennmt_lite.layers.fast_paths import dense_relu_dropout, einsum, matmul

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

U = 2.0**-8  # bfloat16's unit roundoff (8 significant bits)


@pytest.fixture(autouse=True)
def _restore_fast_paths():
    """Each test may choose the products' path; the next test finds the setting it had."""
    before = fast_paths.setting()
    yield
    fast_paths.restore(before)

COMMON = ("fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush mmx "
          "fxsr sse sse2 ht syscall nx pdpe1gb rdtscp lm constant_tsc pni pclmulqdq ssse3 fma cx16 "
          "sse4_1 sse4_2 movbe popcnt aes xsave avx f16c rdrand hypervisor lahf_lm abm "
          "fsgsbase bmi1 avx2 smep bmi2 erms rdseed adx smap clflushopt clwb sha_ni xsaveopt")


def cpuinfo(model, extra, processors=2):
    block = (f"processor\t: {{}}\nvendor_id\t: GenuineIntel\nmodel name\t: {model}\n"
             f"flags\t\t: {COMMON} {extra}\nbugs\t\t: spectre_v1\n\n")
    return "".join(block.format(i) for i in range(processors))


EPYC = cpuinfo("AMD EPYC 7B12", "sse4a misalignsse topoext clzero xsaveerptr wbnoinvd vaes rdpid")
COOPER_LAKE = cpuinfo(
    "Intel(R) Xeon(R) Platinum 8353H CPU @ 2.50GHz",
    "avx512f avx512dq avx512cd avx512bw avx512vl avx512_vnni avx512_bf16 pku ospke")
SAPPHIRE_RAPIDS = cpuinfo(
    "Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz",
    "avx512f avx512dq avx512ifma avx512cd avx512bw avx512vl avx512vbmi avx512_vbmi2 avx512_vnni "
    "avx512_bitalg avx512_vpopcntdq avx512_bf16 avx512_fp16 amx_bf16 amx_tile amx_int8 avx_vnni")
SKYLAKE = cpuinfo("Intel(R) Xeon(R) CPU @ 2.00GHz", "avx512f avx512dq avx512cd avx512bw avx512vl")


def test_parse_avx2_only_epyc():
    features = cpu.parse_cpuinfo(EPYC)
    assert features.avx2 and features.fma
    assert features.avx512 == [] and not features.avx512_bf16 and not features.amx_bf16
    assert not features.native_bfloat16
    assert features.describe() == "AVX2, FMA (no AVX-512, no AVX512_BF16/AMX)"


def test_parse_avx512_bf16_xeon():
    features = cpu.parse_cpuinfo(COOPER_LAKE)
    assert features.avx512 == ["avx512_bf16", "avx512_vnni", "avx512bw", "avx512cd", "avx512dq",
                               "avx512f", "avx512vl"]
    assert features.avx512_bf16 and not features.amx_bf16 and features.native_bfloat16
    assert features.describe().startswith("AVX2, FMA, AVX-512 (avx512_bf16 ")
    assert "(no" not in features.describe()


def test_parse_amx_sapphire_rapids():
    features = cpu.parse_cpuinfo(SAPPHIRE_RAPIDS)
    assert features.amx_bf16 and features.avx512_bf16 and features.native_bfloat16
    assert "avx512_fp16" in features.avx512
    assert features.describe().endswith(", AMX-BF16")


def test_parse_avx512_without_bf16_and_unknown_formats():
    skylake = cpu.parse_cpuinfo(SKYLAKE)
    assert "avx512f" in skylake.avx512 and not skylake.native_bfloat16
    assert skylake.describe().endswith(" (no AVX512_BF16/AMX)")
    arm = "processor\t: 0\nFeatures\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 bf16\n"
    for text in ("", arm):
        features = cpu.parse_cpuinfo(text)
        assert features.flags == frozenset() and not features.native_bfloat16
        assert features.describe() == "unknown instruction sets"


def test_this_host_is_read_once():
    assert cpu.cpu_features() is cpu.cpu_features()


def test_override_picks_the_path_and_logs_once(monkeypatch, caplog):
    cpu._log_choice.cache_clear()
    with caplog.at_level(logging.INFO, logger="opennmt_lite"):
        for path in (cpu.NATIVE, cpu.FLOAT32):
            monkeypatch.setenv(cpu.BF16_MATMUL_ENV, path)
            assert cpu.bfloat16_matmul_path() == path
            assert cpu.bfloat16_matmul_path() == path
    lines = [r.getMessage() for r in caplog.records if "bfloat16 matrix products" in r.getMessage()]
    assert len(lines) == 2  # one per choice, not one per call
    assert cpu.cpu_features().describe() in lines[0] and "native bfloat16 op" in lines[0]
    assert "in float32, rounded to bfloat16" in lines[1]
    monkeypatch.setenv(cpu.BF16_MATMUL_ENV, "fast")
    with pytest.raises(ValueError, match=cpu.BF16_MATMUL_ENV):
        cpu.bfloat16_matmul_path()


def test_a_bad_value_is_a_user_error_named_on_one_line_with_exit_status_2(monkeypatch, capsys):
    import run
    from conftest import ONMT_FIXTURE

    monkeypatch.setenv(cpu.BF16_MATMUL_ENV, "fast")
    with pytest.raises(errors.UserError) as error:
        fast_paths.configure()
    message = str(error.value)
    assert "\n" not in message and cpu.BF16_MATMUL_ENV in message
    assert f"'{cpu.NATIVE}'" in message and f"'{cpu.FLOAT32}'" in message and "'fast'" in message
    # run.py: read at start-up (where the precision is set), printed as one line, exit status 2
    capsys.readouterr()
    code = run.main(["infer", "--config", str(ONMT_FIXTURE.parent / "onmt_fixture.yml"),
                     "--features_file", str(ONMT_FIXTURE / "test.first8.tok.en")])
    err = capsys.readouterr().err
    assert code == errors.EXIT_USER_ERROR == 2
    assert err.strip().splitlines()[-1] == f"error: {message}" and "Traceback" not in err


def test_default_path_follows_the_hardware(monkeypatch):
    monkeypatch.delenv(cpu.BF16_MATMUL_ENV, raising=False)
    gpu = bool(tf.config.list_logical_devices("GPU"))
    native = (cpu.cpu_features().native_bfloat16 and cpu.onednn_enabled() is not False) or gpu
    assert cpu.bfloat16_matmul_path() == (cpu.NATIVE if native else cpu.FLOAT32)
    if not gpu:  # a native bfloat16 CPU multiplies natively only with oneDNN's kernels
        monkeypatch.setattr(cpu, "cpu_features", lambda: cpu.parse_cpuinfo(
            "flags\t: avx2 fma avx512f avx512_bf16\n"))
        for onednn, path in ((True, cpu.NATIVE), (None, cpu.NATIVE), (False, cpu.FLOAT32)):
            monkeypatch.setattr(cpu, "onednn_enabled", lambda onednn=onednn: onednn)
            assert cpu.bfloat16_matmul_path() == path


@pytest.mark.parametrize("info, cores, gpu, devices, jit, expected", [
    (EPYC, 2, False, 1, False, 2),            # AVX2 only: two single-threaded passes
    (EPYC, 16, False, 1, False, 2),
    (EPYC, 1, False, 1, False, 1),            # one core: nothing to run side by side
    (EPYC, 2, True, 1, False, 1),             # a GPU trains
    (EPYC, 2, False, 2, False, 1),            # several replicas
    (EPYC, 2, False, 1, True, 1),             # XLA
    (COOPER_LAKE, 2, False, 1, False, 2),     # AVX-512 too (+12 % float32, +18 % bfloat16)
    (SKYLAKE, 2, False, 1, False, 2),
    ("", 2, False, 1, False, 1),              # unknown instruction sets
])
def test_default_sub_batches_follow_the_cpu(monkeypatch, caplog, info, cores, gpu, devices, jit,
                                            expected):
    monkeypatch.setattr(cpu, "cpu_features", lambda: cpu.parse_cpuinfo(info))
    monkeypatch.setattr(cpu.os, "cpu_count", lambda: cores)
    monkeypatch.setattr(cpu, "gpu_present", lambda: gpu)
    with caplog.at_level(logging.INFO, logger="opennmt_lite"):
        assert cpu.default_sub_batches(devices, jit) == expected
    line = next(r.getMessage() for r in caplog.records if "train.sub_batches unset" in r.getMessage())
    assert f"unset: {expected} (" in line and cpu.parse_cpuinfo(info).describe() in line


@pytest.mark.parametrize("info, configured, expected", [(EPYC, None, 2), ("", None, 1),
                                                        (EPYC, 1, 1), (COOPER_LAKE, 3, 3)])
def test_the_trainer_takes_the_cpu_choice_only_when_unset(tmp_path, monkeypatch, info, configured,
                                                          expected):
    from training_helpers import TINY_MODEL, training_config
    from opennmt_lite import build

    monkeypatch.setattr(cpu, "cpu_features", lambda: cpu.parse_cpuinfo(info))
    monkeypatch.setattr(cpu.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(cpu, "gpu_present", lambda: False)
    train = {"max_step": 1} if configured is None else {"max_step": 1, "sub_batches": configured}
    trainer = build.trainer(training_config(tmp_path, model=TINY_MODEL, train=train),
                            with_evaluation=False)
    assert trainer.train_step.sub_batches == expected


@pytest.mark.parametrize("precision, sub_batches, preset, nvidia, started, expected", [
    ("false", None, None, False, False, "0"),   # float32, side-by-side passes: Eigen kernels
    (None, 2, None, False, False, "0"),
    ("bfloat16", None, None, False, False, None),  # bfloat16's fast products are oneDNN's
    ("float16", None, None, False, False, None),
    ("false", 1, None, False, False, None),     # one pass over both cores: oneDNN is faster
    ("false", None, "1", False, False, "1"),    # the user's value wins
    ("false", None, None, True, False, None),   # a GPU trains
    ("false", None, None, False, True, None),   # TensorFlow already read the variable
])
def test_float32_training_chooses_tensorflows_own_kernels(monkeypatch, precision, sub_batches,
                                                         preset, nvidia, started, expected):
    monkeypatch.setattr(cpu, "cpu_features", lambda: cpu.parse_cpuinfo(COOPER_LAKE))
    monkeypatch.setattr(cpu.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(cpu.os.path, "exists", lambda path: nvidia and path == "/proc/driver/nvidia")
    modules = dict(cpu.sys.modules)
    if not started:
        modules.pop("tensorflow", None)
    monkeypatch.setattr(cpu.sys, "modules", modules)
    environ = {} if preset is None else {cpu.ONEDNN_ENV: preset}
    assert cpu.choose_training_kernels(precision, sub_batches, environ) == (
        expected == "0" and preset is None)
    assert environ.get(cpu.ONEDNN_ENV) == expected
    monkeypatch.setattr(cpu.os, "cpu_count", lambda: 1)  # one core: one pass, oneDNN kept
    environ = {}
    assert not cpu.choose_training_kernels("false", None, environ) and not environ


def test_the_commands_choose_the_kernels_before_tensorflow_starts(tmp_path, monkeypatch):
    """run.py train / onmt-main train hand the config's precision and sub-batches, and the
    thread pools given, to `choose_training_kernels` (before TensorFlow's import, which reads
    TF_ENABLE_ONEDNN_OPTS once); other commands choose nothing."""
    from opennmt_lite import cli
    from opennmt_lite.onmt import main as onmt_main

    calls = []
    monkeypatch.setattr(cpu, "choose_training_kernels", lambda *args: calls.append(args))
    config = tmp_path / "c.yml"
    config.write_text(f"model_dir: {tmp_path}/run\nmodel: {{preset: TransformerTiny}}\n"
                      "train: {mixed_precision: bfloat16, sub_batches: 3}\n")
    cli.before_tensorflow(["train", "--config", str(config)])
    cli.before_tensorflow(["infer", "--config", str(config)])
    assert calls == [("bfloat16", 3)]
    calls.clear()
    onmt_config = tmp_path / "onmt.yml"
    onmt_config.write_text("model_dir: run\ntrain:\n  batch_size: 64\n")
    for argv in (["--config", str(onmt_config), "train"],
                 ["--config", str(onmt_config), "--intra_op_parallelism_threads", "2", "train"],
                 ["--config", str(config), "train"],
                 ["--config", str(onmt_config), "infer", "--features_file", "x"]):
        onmt_main._choose_training_kernels(onmt_main.parse_args(argv))
    assert calls == [(None, None), (None, 1), ("bfloat16", 3)]


def test_float32_training_starts_tensorflow_without_onednn(tmp_path):
    """In a fresh process, as `run.py train` starts: TensorFlow comes up with its own kernels
    (TF_ENABLE_ONEDNN_OPTS=0 set before its import), and a value the user gave stays."""
    config = tmp_path / "c.yml"
    config.write_text(f"model_dir: {tmp_path}/run\nmodel: {{preset: TransformerTiny}}\n")
    script = (
        "import os, sys\n"
        "from opennmt_lite import cli\n"
        f"cli.before_tensorflow(['train', '--config', {str(config)!r}])\n"
        "from opennmt_lite.cpu import onednn_enabled\n"
        "print('kernels', os.environ.get('TF_ENABLE_ONEDNN_OPTS'), onednn_enabled())\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "TF_ENABLE_ONEDNN_OPTS"}
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            cwd=REPO, timeout=300, env=env)
    assert result.returncode == 0, result.stderr[-2000:]
    side_by_side = (os.cpu_count() or 1) >= 2 and cpu.cpu_features().flags
    expected = "kernels 0 False" if side_by_side else "kernels None"
    assert expected in result.stdout


def matmul_dtypes(path, monkeypatch, dtype):
    """The dtypes of the MatMul ops a traced `matmul` on `dtype` operands runs under `path`."""
    fast_paths.configure(bfloat16_matmul=path)
    spec = tf.TensorSpec([4, 8], dtype)
    graph = tf.function(lambda a, b: matmul(a, b, transpose_b=True)).get_concrete_function(
        spec, spec).graph
    return [op.get_attr("T") for op in graph.get_operations() if op.type == "MatMul"]


def test_the_path_decides_the_op(monkeypatch):
    assert matmul_dtypes(cpu.NATIVE, monkeypatch, tf.bfloat16) == [tf.bfloat16]
    assert matmul_dtypes(cpu.FLOAT32, monkeypatch, tf.bfloat16) == [tf.float32]
    for path in (cpu.NATIVE, cpu.FLOAT32):  # other dtypes never change
        assert matmul_dtypes(path, monkeypatch, tf.float32) == [tf.float32]
        assert matmul_dtypes(path, monkeypatch, tf.float16) == [tf.float16]


def operands(dtype, seed=0, m=96, k=512, n=80):
    rng = np.random.default_rng(seed)
    a = tf.cast(rng.standard_normal((m, k)).astype(np.float32), dtype)
    b = tf.cast(rng.standard_normal((k, n)).astype(np.float32), dtype)
    return a, b


def f64(x):
    return tf.cast(x, tf.float64).numpy()


@pytest.mark.parametrize("dtype", [tf.float32, tf.float16])
def test_both_paths_are_the_plain_ops_outside_bfloat16(monkeypatch, dtype):
    a, b = operands(dtype, k=64)
    bias = tf.cast(np.linspace(-1, 1, 80), dtype)
    results = []
    for path in (cpu.NATIVE, cpu.FLOAT32):
        fast_paths.configure(bfloat16_matmul=path)
        results.append([
            matmul(a, b, bias=bias, activation=tf.nn.relu),
            matmul(b, a, transpose_a=True, transpose_b=True),
            einsum("ik,kj->ij", a, b),
        ])
    expected = [tf.nn.relu(tf.nn.bias_add(tf.matmul(a, b), bias)),
                tf.matmul(b, a, transpose_a=True, transpose_b=True), tf.einsum("ik,kj->ij", a, b)]
    for native, emulated, plain in zip(*results, expected):
        assert native.dtype == dtype
        np.testing.assert_array_equal(native.numpy(), plain.numpy())
        np.testing.assert_array_equal(emulated.numpy(), plain.numpy())


def half_ulp(x):
    """Half a bfloat16 ulp of |x| (float64): 2^(e - 9) for |x| in [2^(e-1), 2^e)."""
    return np.ldexp(1.0, np.frexp(x)[1] - 9)


def assert_correctly_rounded(result, exact, magnitude, k):
    """bfloat16 `result` within half an ulp of the exact product (float64 `exact`): the exactly
    rounded product, up to float32's accumulation error over k terms (at most
    k * 2^-24 * (|a| @ |b|), `magnitude` = |a| @ |b|). Half an ulp is at most u * |exact|."""
    assert result.dtype == tf.bfloat16
    error = np.abs(f64(result) - exact)
    assert (error <= half_ulp(exact) + k * 2.0**-24 * magnitude).all()
    # round to nearest is unbiased (the host's truncating MatMul: -2.8e-3)
    relative = (f64(result) - exact) / np.abs(exact) * np.sign(exact)
    assert abs(relative[np.abs(exact) > 1].mean()) < 2e-4


def test_float32_path_rounds_bfloat16_products_to_nearest(monkeypatch):
    fast_paths.configure(bfloat16_matmul=cpu.FLOAT32)
    a, b = operands(tf.bfloat16)
    exact, magnitude = f64(a) @ f64(b), np.abs(f64(a)) @ np.abs(f64(b))
    assert_correctly_rounded(matmul(a, b), exact, magnitude, 512)
    assert_correctly_rounded(matmul(b, a, transpose_a=True, transpose_b=True), exact.T,
                             magnitude.T, 512)
    assert_correctly_rounded(einsum("ik,kj->ij", a, b), exact, magnitude, 512)
    # batched, as in attention: [batch, heads, m, k] x [batch, heads, n, k]^T
    q = tf.reshape(a, [2, 3, 16, 512])
    keys = tf.reshape(tf.transpose(b)[:64], [2, 2, 16, 512])[:, :1]  # broadcast over heads
    batched_exact = f64(q) @ np.swapaxes(f64(keys), -1, -2)
    batched_magnitude = np.abs(f64(q)) @ np.swapaxes(np.abs(f64(keys)), -1, -2)
    assert_correctly_rounded(matmul(q, keys, transpose_b=True), batched_exact, batched_magnitude,
                             512)
    # bias and activation are applied in float32, then the sum is rounded once
    bias = tf.cast(np.linspace(-3, 3, 80), tf.bfloat16)
    biased = matmul(a, b, bias=bias, activation=tf.nn.relu)
    assert_correctly_rounded(biased, np.maximum(exact + f64(bias), 0) + 1e-300, magnitude, 512)


def test_native_path_is_the_hosts_op(monkeypatch):
    fast_paths.configure(bfloat16_matmul=cpu.NATIVE)
    a, b = operands(tf.bfloat16)
    result = matmul(a, b)
    np.testing.assert_array_equal(f64(result), f64(tf.matmul(a, b)))
    exact, magnitude = f64(a) @ f64(b), np.abs(f64(a)) @ np.abs(f64(b))
    # rounded or truncated, but within one bfloat16 spacing (2u) of the exact product
    assert (np.abs(f64(result) - exact) <= 2 * U * np.abs(exact) + 2.0**-15 * magnitude).all()


def test_float32_path_gradients_are_rounded_float32_products(monkeypatch):
    fast_paths.configure(bfloat16_matmul=cpu.FLOAT32)
    a, b = operands(tf.bfloat16, m=64, k=256, n=48)
    bias = tf.cast(np.linspace(-1, 1, 48), tf.bfloat16)
    upstream = tf.cast(np.random.default_rng(1).standard_normal((64, 48)), tf.bfloat16)
    with tf.GradientTape() as tape:
        tape.watch([a, b, bias])
        outputs = matmul(a, b, bias=bias)
    d_a, d_b, d_bias = tape.gradient(outputs, [a, b, bias], output_gradients=upstream)
    up, a32, b32 = (tf.cast(t, tf.float32) for t in (upstream, a, b))
    # exactly what float32 arithmetic then one rounding gives
    for gradient, expected in ((d_a, tf.matmul(up, b32, transpose_b=True)),
                               (d_b, tf.matmul(a32, up, transpose_a=True)),
                               (d_bias, tf.reduce_sum(up, axis=0))):
        assert gradient.dtype == tf.bfloat16
        np.testing.assert_array_equal(f64(gradient), f64(tf.cast(expected, tf.bfloat16)))
    # and so correctly rounded products
    exact_d_a = f64(upstream) @ f64(b).T
    assert_correctly_rounded(d_a, exact_d_a, np.abs(f64(upstream)) @ np.abs(f64(b)).T, 48)
    exact_d_b = f64(a).T @ f64(upstream)
    assert_correctly_rounded(d_b, exact_d_b, np.abs(f64(a)).T @ np.abs(f64(upstream)), 64)


def test_dense_relu_dropout_gradient_on_the_float32_path(monkeypatch):
    fast_paths.configure(bfloat16_matmul=cpu.FLOAT32)
    a, kernel = operands(tf.bfloat16, m=64, k=128, n=96)
    bias = tf.cast(np.linspace(-1, 1, 96), tf.bfloat16)
    upstream = tf.cast(np.random.default_rng(2).standard_normal((64, 96)), tf.bfloat16)
    with tf.GradientTape() as tape:
        tape.watch([a, kernel])
        outputs = dense_relu_dropout(a, kernel, bias, 0.25, keras.random.SeedGenerator(3))
    d_a, d_kernel = tape.gradient(outputs, [a, kernel], output_gradients=upstream)
    # where the output is positive the gradient passes, times the dropout scale 4/3
    d_inner = tf.where(outputs > 0, upstream * tf.cast(4 / 3, tf.bfloat16),
                       tf.zeros((), tf.bfloat16))
    d32, a32, k32 = (tf.cast(t, tf.float32) for t in (d_inner, a, kernel))
    expected_d_a = tf.cast(tf.matmul(d32, k32, transpose_b=True), tf.bfloat16)
    expected_d_kernel = tf.cast(tf.matmul(a32, d32, transpose_a=True), tf.bfloat16)
    np.testing.assert_array_equal(f64(d_a), f64(expected_d_a))
    np.testing.assert_array_equal(f64(d_kernel), f64(expected_d_kernel))
    # the forward pass: relu(a @ kernel + bias) in float32, rounded once, then dropout
    inner = tf.cast(tf.nn.relu(tf.matmul(a32, k32) + tf.cast(bias, tf.float32)), tf.bfloat16)
    kept = f64(outputs) != 0
    scaled = f64(inner * tf.cast(4 / 3, tf.bfloat16))
    np.testing.assert_array_equal(f64(outputs)[kept], scaled[kept])


def layer_results(path, monkeypatch, policy):
    """Dense and relative-position attention outputs and gradients, computed under `path`."""
    fast_paths.configure(bfloat16_matmul=path)
    keras.config.set_dtype_policy(policy)
    keras.utils.set_random_seed(5)
    dense = Dense(24, activation="relu")
    attention = MultiHeadAttention(2, 16, dropout=0.0, maximum_relative_position=3)
    x = tf.constant(np.random.default_rng(4).standard_normal((2, 5, 16)), tf.float32)
    with tf.GradientTape() as tape:
        tape.watch(x)
        mask = tf.constant([[1.0] * 5, [1.0] * 3 + [0.0] * 2])
        outputs = [dense(x), attention(x, attention_mask=mask)[0]]
        loss = sum(tf.reduce_sum(tf.cast(o, tf.float32) ** 2) for o in outputs)
    variables = dense.trainable_variables + attention.trainable_variables
    gradients = tape.gradient(loss, [x] + variables)
    return [f64(t) for t in outputs + gradients]


def test_layers_in_float32_are_identical_on_both_paths(monkeypatch):
    native = layer_results(cpu.NATIVE, monkeypatch, "float32")
    emulated = layer_results(cpu.FLOAT32, monkeypatch, "float32")
    for first, second in zip(native, emulated):
        np.testing.assert_array_equal(first, second)


def test_layers_in_bfloat16_follow_float32_on_the_float32_path(monkeypatch):
    reference = layer_results(cpu.NATIVE, monkeypatch, "float32")
    emulated = layer_results(cpu.FLOAT32, monkeypatch, "mixed_bfloat16")
    # relative to the largest magnitude of all: the key bias' gradient is zero in exact
    # arithmetic (softmax ignores a constant added to a row), only rounding noise in both
    scale = max(np.abs(expected).max() for expected in reference)
    for result, expected in zip(emulated, reference):
        assert np.isfinite(result).all()
        assert np.abs(result - expected).max() <= 8 * U * scale
