"""Small builders shared by the encoder tests."""

import numpy as np

from opennmt_lite.hyperparameters import ModelHyperparameters
from opennmt_lite.models.encoders import SelfAttentionEncoder
from opennmt_lite.models.inputters import WordEmbedder
from opennmt_lite.checkpointing.names import named_variables

# The worked example: a vocabulary of 26, depth 4, 2 heads, relative positions up to 8, a batch
# of 3 sequences of length 3 whose second one is padded.
WORKED_IDS = np.array([[5, 12, 7], [3, 25, 0], [8, 1, 19]], dtype=np.int32)
WORKED_LENGTHS = np.array([3, 2, 3], dtype=np.int32)


def build_encoder(vocab=26, num_units=4, num_heads=2, ffn=8, num_layers=2, seed=0, **kwargs):
    """An embedder and an encoder with every weight drawn at random (biases, norms included)."""
    embedder = WordEmbedder(vocab, num_units)
    encoder = SelfAttentionEncoder(ModelHyperparameters(
        num_layers=num_layers, num_units=num_units, num_heads=num_heads, ffn_inner_dim=ffn, **kwargs))
    embedder.build()
    encoder.build((None, None, num_units))
    rng = np.random.default_rng(seed)
    for variable in [embedder.embedding] + list(named_variables(encoder, include_seeds=False).values()):
        variable.assign(rng.normal(0.0, 0.5, variable.shape).astype(np.float32))
    return embedder, encoder


def weights_by_name(embedder, encoder):
    weights = {k: v.numpy() for k, v in named_variables(encoder, include_seeds=False).items()}
    weights["embedding"] = embedder.embedding.numpy()
    return weights
