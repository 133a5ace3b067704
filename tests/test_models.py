"""The Transformer model: embedding sharing levels and presets."""

import numpy as np
import pytest

from opennmt_lite.hyperparameters import ModelHyperparameters
from opennmt_lite.models import Transformer
from opennmt_lite.checkpointing.names import named_variables

FEATURES = {
    "source_ids": np.array([[4, 5, 6], [7, 8, 0]], np.int32),
    "source_length": np.array([3, 2], np.int32),
    "target_ids_in": np.array([[1, 9, 10], [1, 11, 0]], np.int32),
    "target_length": np.array([3, 2], np.int32),
}


def build(share):
    model = Transformer(ModelHyperparameters(num_layers=1, num_units=16, num_heads=2, ffn_inner_dim=32,
                                             share_embeddings=share), 30, 30)
    model.build()
    return model


@pytest.mark.parametrize("share, tables, tied_output", [
    ("none", 2, False), ("source_target_input", 1, False), ("target", 2, True), ("all", 1, True),
])
def test_embedding_sharing_levels(share, tables, tied_output):
    model = build(share)
    names = named_variables(model, include_seeds=False)
    embeddings = [n for n in names if n.endswith("/embedding")]
    assert len(embeddings) == tables
    assert (model.target_inputter is model.source_inputter) == (tables == 1)
    assert (model.decoder.output_layer.kernel is model.target_inputter.embedding) == tied_output
    assert ("decoder/output_layer/kernel" in names) != tied_output
    logits, _ = model(FEATURES)
    assert logits.shape == (2, 3, 30)
    if tied_output:
        # the logits really are the decoder output times the embedding table, transposed
        from opennmt_lite.recorder import recording

        with recording() as tensors:
            model(FEATURES)
        hidden = tensors.numpy()["decoder/output"]
        table = model.target_inputter.embedding.numpy()
        expected = hidden @ table.T + model.decoder.output_layer.bias.numpy()
        np.testing.assert_allclose(logits.numpy(), expected, rtol=1e-5, atol=1e-5)


def test_sharing_input_embeddings_needs_one_vocabulary():
    with pytest.raises(ValueError, match="needs one vocabulary"):
        Transformer(ModelHyperparameters(num_layers=1, num_units=16, num_heads=2, ffn_inner_dim=32,
                                         share_embeddings="all"), 30, 31)
    with pytest.raises(ValueError, match="share_embeddings must be one of"):
        Transformer(ModelHyperparameters(share_embeddings="everything"), 30, 30)
