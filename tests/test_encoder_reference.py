"""The encoder against the independent NumPy reference, every intermediate, on the worked example."""

import numpy as np
import pytest

import numpy_reference
from encoder_helpers import WORKED_IDS, WORKED_LENGTHS, build_encoder, weights_by_name
from opennmt_lite.recorder import recording


def scaled_error(ours, ref):
    ours, ref = np.asarray(ours, np.float64), np.asarray(ref, np.float64)
    return np.abs(ours - ref).max() / max(1.0, np.abs(ref).max())


@pytest.mark.parametrize(
    "options",
    [
        dict(maximum_relative_position=8, pre_norm=True),
        dict(maximum_relative_position=8, pre_norm=False),
        dict(maximum_relative_position=None, pre_norm=True),
        dict(maximum_relative_position=1, pre_norm=True),  # clipping at distance 1 < length
    ],
    ids=["relative-prenorm", "relative-postnorm", "sinusoidal-prenorm", "relative-clipped"],
)
def test_every_intermediate_matches_numpy_reference(options):
    embedder, encoder = build_encoder(**options)
    embedded = embedder(WORKED_IDS)
    with recording() as tensors:
        output = encoder(embedded, sequence_length=WORKED_LENGTHS)
    ours = tensors.numpy()

    ref = numpy_reference.encoder(
        WORKED_IDS, WORKED_LENGTHS, weights_by_name(embedder, encoder), num_layers=2,
        num_heads=2, max_rel=options["maximum_relative_position"], pre_norm=options["pre_norm"],
    )
    assert scaled_error(embedded, ref.pop("embedded")) <= 1e-6
    # The recording names exactly the tensors the reference computes: nothing missing, nothing extra.
    assert sorted(ours) == sorted(ref)
    errors = {name: scaled_error(ours[name], ref[name]) for name in ref}
    worst = max(errors, key=errors.get)
    assert errors[worst] <= 1e-6, (worst, errors[worst])
    np.testing.assert_array_equal(ours["output"], output.numpy())
    # Not vacuous: the padded sequence's padded key gets exactly zero attention everywhere.
    attention = ours["layers/0/self_attention/attention"]
    assert np.all(attention[1, :, :, 2] == 0.0) and np.all(attention[0, :, :, 2] > 0.0)


def test_relative_positions_are_clipped_and_shifted():
    _, encoder = build_encoder(maximum_relative_position=2)
    with recording() as tensors:
        encoder(np.ones((1, 6, 4), np.float32), sequence_length=np.array([6]))
    positions = tensors.numpy()["layers/0/self_attention/relative_positions"]
    expected = np.array([[min(max(j - i, -2), 2) + 2 for j in range(6)] for i in range(6)])
    np.testing.assert_array_equal(positions, expected)
