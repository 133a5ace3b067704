"""OpenNMT-tf's fixture model (tests/fixtures/onmt_tf_relative) on Keras' JAX backend, in one
subprocess: encoder outputs, decoder outputs, logits and alignment within 1e-5 of OpenNMT-tf's
recorded arrays and of the TensorFlow backend, and incremental decoding equal to teacher
forcing. (The JAX side still reads the checkpoint with TensorFlow's reader.)"""

import numpy as np
import pytest

import jax_worker
from conftest import ONMT_FIXTURE


@pytest.fixture(scope="module")
def jax_values(tmp_path_factory):
    arrays, _ = jax_worker.run("parity", tmp_path_factory.mktemp("jax_parity"))
    return arrays


@pytest.fixture(scope="module")
def tf_values():
    return jax_worker.fixture_values()  # this process: the TensorFlow backend


@pytest.fixture(scope="module")
def expected():
    return dict(np.load(ONMT_FIXTURE / "expected.npz"))


def padded_mask(expected, length_key, shape):
    """[batch, time] True at the real positions of `length_key`'s sequences."""
    return np.arange(shape[1])[None, :] < expected[length_key][:, None]


def test_encoder_matches_opennmt_and_tensorflow(jax_values, tf_values, expected):
    for i in range(2):
        ref = expected["encoder_layers"][i]
        assert np.abs(jax_values[f"encoder_layer_{i}"] - ref).max() <= 1e-5 * np.abs(ref).max()
    assert np.abs(jax_values["encoder_output"] - expected["encoder_output"]).max() <= 1e-5
    assert np.abs(jax_values["encoder_output"] - tf_values["encoder_output"]).max() <= 1e-5


def test_logits_and_alignment_match_opennmt_and_tensorflow(jax_values, tf_values, expected):
    logits = jax_values["logits"]
    assert logits.shape == expected["logits"].shape
    assert np.abs(logits - expected["logits"]).max() <= 1e-5
    assert np.abs(logits - tf_values["logits"]).max() <= 1e-5
    for i in range(2):
        ref = expected["decoder_layers"][i]
        assert np.abs(jax_values[f"decoder_layer_{i}"] - ref).max() <= 1e-5 * np.abs(ref).max()
    assert np.abs(jax_values["decoder_output"] - expected["decoder_output"]).max() <= 1e-5
    assert np.abs(jax_values["attention"] - expected["alignment_attention"]).max() <= 1e-5
    assert np.abs(jax_values["attention"] - tf_values["attention"]).max() <= 1e-5


def test_incremental_decoding_equals_teacher_forcing_on_jax(jax_values, expected):
    mask = padded_mask(expected, "target_length", jax_values["logits"].shape)
    difference = np.abs(jax_values["step_logits"] - jax_values["logits"])[mask]
    assert difference.max() <= 1e-5
