"""Every public layer on Keras' JAX backend: `run_layer_test` (configs, symbolic, eager and
compiled calls, dtype policies, gradients) in one JAX subprocess, and the same float32 layers,
with the same weights, give the TensorFlow backend's outputs and gradients within 1e-5."""

import numpy as np
import pytest

import jax_worker
from test_layers import CASES


# The job's time is nearly all XLA compiling one small program per (operation, shape, dtype) of
# the eager calls; without LLVM's optimization passes each compiles about a third faster. The
# programs compute the same operations (compared with TensorFlow's values below, and with the
# compiled calls by `run_layer_test`, within the same tolerances). The model-level JAX tests
# (test_jax_parity, test_jax_decoding, test_jax_training) run with XLA's default optimization.
FAST_COMPILES = {"XLA_FLAGS": "--xla_backend_optimization_level=0"}


@pytest.fixture(scope="module")
def jax_side(tmp_path_factory):
    """(arrays, results) of the worker's `layers` job: computed once for the module."""
    return jax_worker.run("layers", tmp_path_factory.mktemp("jax_layers"), **FAST_COMPILES)


@pytest.mark.parametrize("name", list(CASES))
def test_layer_passes_the_layer_test_on_jax(jax_side, name):
    _, results = jax_side
    assert results[name] == "ok", results[name]


@pytest.mark.parametrize("name", list(CASES))
def test_layer_outputs_and_gradients_equal_tensorflow(jax_side, name):
    arrays, _ = jax_side
    ours = jax_worker.case_values(name)  # this process: the TensorFlow backend
    for kind in ("outputs", "gradients"):
        got = [arrays[key] for key in sorted(
            (k for k in arrays if k.startswith(f"{name}/{kind}/")),
            key=lambda k: int(k.rsplit("/", 1)[1]))]
        assert len(got) == len(ours[kind]) > 0 or kind == "gradients" and not ours[kind], kind
        for i, (jax_value, tf_value) in enumerate(zip(got, ours[kind])):
            assert jax_value.shape == tf_value.shape, (kind, i)
            scale = max(1.0, float(np.abs(tf_value).max()))
            assert np.abs(jax_value - tf_value).max() <= 1e-5 * scale, (kind, i)
