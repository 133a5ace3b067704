"""Greedy and beam search on Keras' JAX backend (opennmt_lite/inference/portable_decoding.py:
one `keras.ops.while_loop` compiled by `jax.jit`), in one subprocess: the fixture's 100 test
sentences against OpenNMT-tf 2.32's own translations (tests/jax_worker.py's `DECODINGS`: beam 1,
beam 4 with its 4-best lists, beam 4 with coverage and length penalties). Pieces: at least 99/100
identical for 1-best files, every line of the 4-best lists (as the TensorFlow backend's test
asks; measured 100/100, 400/400 and 100/100). Scores: 1e-4 on lines that end with `</s>`,
widened to 4 float32 ulps of the score for the long ones (a hypothesis of 249 pieces sums 249
float32 log-probabilities to about -550, where one ulp is 6.1e-5: measured 1.2e-4 there, 1.5e-5
at most on shorter lines), and 1e-3 on lines stopped at 250 pieces."""

import numpy as np
import pytest

import jax_worker
from conftest import ONMT_FIXTURE

MAXIMUM_DECODING_LENGTH = 250


@pytest.fixture(scope="module")
def translations(tmp_path_factory):
    _, results = jax_worker.run("decoding", tmp_path_factory.mktemp("jax_decoding"))
    return results


def score_tolerance(reference, length):
    if length == MAXIMUM_DECODING_LENGTH:
        return 1e-3
    return max(1e-4, 4 * float(np.spacing(np.float32(abs(reference)))))


def compare(lines, tag):
    """The number of lines whose pieces equal OpenNMT-tf's (their scores checked)."""
    expected = (ONMT_FIXTURE / f"pred.first100.{tag}.tok.de").read_text(
        encoding="utf-8").splitlines()
    assert len(lines) == len(expected)
    matching = 0
    for number, ((score, pieces, length), reference) in enumerate(zip(lines, expected), 1):
        reference_score, reference_pieces = reference.split(" ||| ", 1)
        if pieces != reference_pieces:
            print(f"{tag}:{number} differs\n  ours: {pieces}\n  onmt: {reference_pieces}")
            continue
        matching += 1
        reference_score = float(reference_score)
        assert abs(score - reference_score) <= score_tolerance(reference_score, length), (
            number, score, reference_score)
    return matching


@pytest.mark.parametrize("tag", list(jax_worker.DECODINGS))
def test_translations_match_opennmt_on_jax(translations, tag):
    lines = translations[tag]
    matching = compare(lines, tag)
    if jax_worker.DECODINGS[tag].get("n_best", 1) > 1:
        assert matching == len(lines) == 400  # n-best lists: every line, in OpenNMT-tf's order
        # The first of each 4 is the 1-best beam search.
        assert compare(lines[::4], "beam4.scores") == 100
    else:
        assert len(lines) == 100 and matching >= 99
