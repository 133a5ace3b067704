"""The whole Transformer (decoder included) against OpenNMT-tf 2.32's arrays for the fixture."""

import numpy as np
import pytest

from conftest import ONMT_FIXTURE
from opennmt_lite.training.losses import cross_entropy_sequence_loss
from opennmt_lite.hyperparameters import ModelHyperparameters
from opennmt_lite.models import Transformer
from opennmt_lite.checkpointing.onmt_names import load_onmt_model
from opennmt_lite.recorder import recording


@pytest.fixture(scope="module")
def outputs():
    model = Transformer(ModelHyperparameters(num_layers=2, num_units=64, num_heads=2, ffn_inner_dim=128,
                                             maximum_relative_position=8), 801, 801)
    load_onmt_model(str(ONMT_FIXTURE), model)  # every variable: 100, none left over
    expected = np.load(ONMT_FIXTURE / "expected.npz")
    features = {k: expected[k] for k in ("source_ids", "source_length", "target_ids_in", "target_length")}
    with recording() as tensors:
        logits, attention = model(features)
    return model, expected, logits.numpy(), attention.numpy(), tensors.numpy()


def relative_error(ours, ref):
    return np.abs(np.asarray(ours, np.float64) - ref).max() / np.abs(ref).max()


def test_teacher_forced_logits_match_opennmt(outputs):
    _, expected, logits, _, _ = outputs
    assert np.abs(logits - expected["logits"]).max() <= 1e-4
    mask = np.arange(logits.shape[1])[None, :] < expected["target_length"][:, None]
    log_probs = logits - np.log(np.exp(logits.astype(np.float64)).sum(-1, keepdims=True))
    gold = np.take_along_axis(log_probs, expected["target_ids_out"][..., None], -1)[..., 0]
    assert np.abs(np.where(mask, gold, 0.0) - expected["gold_log_probs"]).max() <= 1e-4


def test_decoder_layers_and_alignment_match_opennmt(outputs):
    _, expected, _, attention, recorded = outputs
    np.testing.assert_array_equal(recorded["target_embedded"], expected["target_embedded"])
    assert np.abs(recorded["decoder/scaled_inputs"] - expected["decoder_input"]).max() == 0.0
    for i in range(2):
        assert relative_error(recorded[f"decoder/layers/{i}/output"], expected["decoder_layers"][i]) <= 1e-6
    assert np.abs(recorded["decoder/output"] - expected["decoder_output"]).max() <= 1e-5
    assert np.abs(attention - expected["alignment_attention"]).max() <= 1e-5


def test_losses_match_opennmt(outputs):
    _, expected, logits, _, _ = outputs
    labels, lengths = expected["target_ids_out"], expected["target_length"]
    loss, tokens = cross_entropy_sequence_loss(logits, labels, lengths)
    assert float(tokens) == float(expected["loss_normalizer_eval"])
    assert abs(float(loss) - float(expected["loss_sum_eval"])) <= 1e-4 * float(expected["loss_sum_eval"])
    smoothed, tokens = cross_entropy_sequence_loss(logits, labels, lengths, label_smoothing=0.1, training=True)
    assert float(tokens) == float(expected["loss_normalizer_train"])
    assert abs(float(smoothed) - float(expected["loss_sum_train_label_smoothed"])) <= 1e-4 * float(smoothed)


def test_incremental_decoding_equals_teacher_forcing(outputs):
    model, expected, logits, attention, _ = outputs
    memory = model.encode(expected["source_ids"], expected["source_length"])
    state = model.decoder.initial_state(memory, expected["source_length"])
    steps, alignments = [], []
    for t in range(expected["target_ids_in"].shape[1]):
        step_logits, state, step_attention = model.decoder.step(
            model.target_inputter(expected["target_ids_in"][:, t]), t, state)
        steps.append(step_logits.numpy())
        alignments.append(step_attention.numpy())
    mask = np.arange(logits.shape[1])[None, :] < expected["target_length"][:, None]
    assert np.abs(np.stack(steps, 1) - logits)[mask].max() <= 1e-5
    assert np.abs(np.stack(alignments, 1) - attention)[mask].max() <= 1e-6
