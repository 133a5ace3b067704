"""Padding never leaks: what sits in padded positions changes nothing at real positions."""

import numpy as np
import pytest

from encoder_helpers import build_encoder


@pytest.mark.parametrize("relative", [8, None], ids=["relative", "sinusoidal"])
def test_padded_ids_and_values_do_not_change_real_positions(relative):
    embedder, encoder = build_encoder(vocab=50, num_units=8, num_heads=2, ffn=16,
                                      maximum_relative_position=relative)
    rng = np.random.default_rng(7)
    lengths = np.array([5, 2, 7, 1], np.int32)
    ids = rng.integers(1, 50, size=(4, 7)).astype(np.int32)
    real = np.arange(7)[None, :] < lengths[:, None]
    base_ids = np.where(real, ids, 0)
    base = encoder(embedder(base_ids), sequence_length=lengths).numpy()

    # 1. other token ids in the padded slots
    other_ids = np.where(real, ids, rng.integers(1, 50, size=ids.shape))
    changed_ids = encoder(embedder(other_ids), sequence_length=lengths).numpy()
    # 2. arbitrary large vectors in the padded slots of the embedded input
    embedded = embedder(base_ids).numpy()
    embedded[~real] = rng.normal(0, 100.0, size=embedded[~real].shape)
    changed_values = encoder(embedded, sequence_length=lengths).numpy()

    for changed in (changed_ids, changed_values):
        np.testing.assert_allclose(changed[real], base[real], rtol=0, atol=1e-6)
        # the padded positions themselves did change: the test is not vacuous
        assert np.abs(changed[~real] - base[~real]).max() > 1e-3


def test_each_sentence_alone_equals_its_row_in_the_padded_batch():
    embedder, encoder = build_encoder(vocab=50, num_units=8, num_heads=2, ffn=16,
                                      maximum_relative_position=4)
    ids = np.array([[4, 9, 13, 2, 0, 0], [7, 7, 1, 30, 22, 5]], np.int32)
    lengths = np.array([4, 6], np.int32)
    batch = encoder(embedder(ids), sequence_length=lengths).numpy()
    for row, length in enumerate(lengths):
        alone = encoder(embedder(ids[row:row + 1, :length]), sequence_length=lengths[row:row + 1])
        np.testing.assert_allclose(alone.numpy()[0], batch[row, :length], rtol=0, atol=1e-5)
