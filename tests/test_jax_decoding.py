"""Greedy and beam search on Keras' JAX backend (opennmt_lite/inference/portable_decoding.py:
one `keras.ops.while_loop` compiled by `jax.jit`), in one subprocess: the fixture's 100 test
sentences, beam 1 and beam 4, against OpenNMT-tf 2.32's own translations (at least 99/100
identical, as the TensorFlow backend's test asks; measured 100/100 for both) and scores (1e-4 on
lines that end with `</s>`, 1e-3 on lines stopped at 250 pieces)."""

import pytest

import jax_worker
from conftest import ONMT_FIXTURE

MAXIMUM_DECODING_LENGTH = 250


@pytest.fixture(scope="module")
def translations(tmp_path_factory):
    _, results = jax_worker.run("decoding", tmp_path_factory.mktemp("jax_decoding"))
    return results


@pytest.mark.parametrize("beam_width", [1, 4])
def test_translations_match_opennmt_on_jax(translations, beam_width):
    expected = (ONMT_FIXTURE / f"pred.first100.beam{beam_width}.scores.tok.de").read_text(
        encoding="utf-8").splitlines()
    lines = translations[f"beam{beam_width}"]
    assert len(lines) == len(expected) == 100
    matching = 0
    for number, ((score, pieces, length), reference) in enumerate(zip(lines, expected), 1):
        reference_score, reference_pieces = reference.split(" ||| ", 1)
        if pieces != reference_pieces:
            print(f"line {number} differs\n  ours: {pieces}\n  onmt: {reference_pieces}")
            continue
        matching += 1
        tolerance = 1e-3 if length == MAXIMUM_DECODING_LENGTH else 1e-4
        assert abs(score - float(reference_score)) <= tolerance, (number, score, reference_score)
    assert matching >= 99
