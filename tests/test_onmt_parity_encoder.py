"""The encoder against arrays produced by the real OpenNMT-tf 2.32 from the fixture checkpoint."""

import json

import numpy as np
import pytest

from conftest import ONMT_FIXTURE
from opennmt_lite.hyperparameters import ModelHyperparameters
from opennmt_lite.models.encoders import SelfAttentionEncoder
from opennmt_lite.models.inputters import WordEmbedder
from opennmt_lite.checkpointing.onmt_names import load_onmt_encoder
from opennmt_lite.recorder import recording

# Names of the fixture's layer-0 step arrays -> names in our recording (under layers/0/).
LAYER0_STEPS = {
    "prenorm": "self_attention/normalized_input",
    "queries": "self_attention/queries",
    "keys": "self_attention/keys",
    "values": "self_attention/values",
    "relative_pos": "self_attention/relative_positions",
    "relative_repr_keys": "self_attention/relative_keys",
    "relative_repr_values": "self_attention/relative_values",
    "dot_content": "self_attention/content_logits",
    "dot_relative": "self_attention/relative_logits",
    "dot": "self_attention/logits",
    "attn": "self_attention/attention",
    "heads": "self_attention/heads",
    "combined": "self_attention/combined_heads",
    "attention_output": "self_attention/output",
    "after_attention_residual": "self_attention/residual_output",
    "ffn_prenorm": "ffn/normalized_input",
    "ffn_inner": "ffn/inner",
    "ffn_output": "ffn/output",
    "layer_output": "output",
}


def relative_error(ours, ref):
    """Max absolute difference relative to the reference tensor's largest magnitude."""
    return np.abs(np.asarray(ours, np.float64) - ref).max() / np.abs(ref).max()


@pytest.fixture(scope="module")
def fixture_model():
    hparams = json.loads((ONMT_FIXTURE / "expected.json").read_text())["model_kwargs"]
    assert hparams["position_encoder_class"] == "None" and hparams["pre_norm"] == "True"
    embedder = WordEmbedder(801, int(hparams["num_units"]))
    encoder = SelfAttentionEncoder(ModelHyperparameters(
        num_layers=int(hparams["num_layers"]),
        num_units=int(hparams["num_units"]),
        num_heads=int(hparams["num_heads"]),
        ffn_inner_dim=int(hparams["ffn_inner_dim"]),
        maximum_relative_position=int(hparams["maximum_relative_position"]),
        pre_norm=True,
    ))
    load_onmt_encoder(str(ONMT_FIXTURE), encoder, embedder)
    return embedder, encoder


def run(fixture_model, ids, lengths):
    embedder, encoder = fixture_model
    embedded = embedder(ids)
    with recording() as tensors:
        output = encoder(embedded, sequence_length=lengths)
    return embedded.numpy(), output.numpy(), tensors.numpy()


def test_encoder_outputs_match_opennmt(fixture_model):
    expected = np.load(ONMT_FIXTURE / "expected.npz")
    embedded, output, recorded = run(fixture_model, expected["source_ids"], expected["source_length"])
    np.testing.assert_array_equal(embedded, expected["embedded"])  # a gather: exact
    assert np.abs(recorded["scaled_inputs"] - expected["scaled_embedded"]).max() == 0.0
    for i in range(expected["encoder_layers"].shape[0]):
        assert relative_error(recorded[f"layers/{i}/output"], expected["encoder_layers"][i]) <= 1e-6
    # The final normalized output, padded positions included, within 1e-5 absolute.
    assert np.abs(output - expected["encoder_output"]).max() <= 1e-5


@pytest.mark.parametrize("which", ["sent0", "batch"])
def test_layer0_intermediates_match_opennmt(fixture_model, which):
    steps = np.load(ONMT_FIXTURE / f"encoder_layer0_steps_{which}.npz")
    expected = np.load(ONMT_FIXTURE / "expected.npz")
    batch = steps["input"].shape[0]
    _, _, recorded = run(
        fixture_model, expected["source_ids"][:batch], expected["source_length"][:batch]
    )
    np.testing.assert_array_equal(recorded["mask"], steps["mask"])
    assert relative_error(recorded["scaled_inputs"], steps["input"]) <= 1e-6
    for onmt_name, our_name in LAYER0_STEPS.items():
        ours = recorded[f"layers/0/{our_name}"]
        assert ours.shape == steps[onmt_name].shape, onmt_name
        assert relative_error(ours, steps[onmt_name]) <= 1e-6, onmt_name


def test_variable_names_mirror_opennmt_checkpoint(fixture_model):
    """Our attribute paths are OpenNMT-tf's checkpoint paths: the import is a flat name map."""
    from opennmt_lite.checkpointing.names import named_variables

    _, encoder = fixture_model
    listed = (ONMT_FIXTURE / "variables.txt").read_text().splitlines()
    onmt = {
        line.split("\t")[0][len("model/encoder/"):-len("/.ATTRIBUTES/VARIABLE_VALUE")]
        for line in listed
        if line.startswith("model/encoder/") and "OPTIMIZER_SLOT" not in line
    }
    assert len(onmt) == 38
    assert set(named_variables(encoder, include_seeds=False)) == onmt
