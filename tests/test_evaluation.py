"""Evaluation during training: OpenNMT-tf's early-stopping rule, and an evaluator on real data."""

import dataclasses
import json
import math
import os

import numpy as np
import pytest

from opennmt_lite import build
from opennmt_lite.inference.evaluation import early_stop
from training_helpers import TINY_MODEL, training_config


@pytest.mark.parametrize("values, steps, min_improvement, higher, stop", [
    ([5.0, 4.0], 2, 0.0, False, False),             # not enough evaluations yet
    ([5.0, 4.0, 3.9, 3.95], 2, 0.0, False, False),  # 3.9 < 4.0: improved on the value 2 back
    ([5.0, 4.0, 4.1, 4.0], 2, 0.0, False, True),    # nothing below 4.0 in the last 2
    ([5.0, 4.0, 3.95, 3.99], 2, 0.1, False, True),  # improvements smaller than 0.1 do not count
    ([10.0, 12.0, 12.5, 12.4], 2, 0.0, True, False),  # BLEU: higher is better
    ([10.0, 12.0, 11.0, 12.0], 2, 0.0, True, True),
])
def test_early_stopping_rule(values, steps, min_improvement, higher, stop):
    assert early_stop(values, steps, min_improvement, higher) is stop


def test_evaluator_computes_loss_perplexity_bleu_and_history(tmp_path):
    config = training_config(tmp_path, model=TINY_MODEL, eval={"scorers": ["bleu", "chrf"],
                                                               "early_stopping": {"metric": "loss", "steps": 1}})
    config = config.replace(params=dataclasses.replace(config.params, maximum_decoding_length=20))
    assets = build.assets(config.data)
    model = build.model(config.model, assets)
    evaluator = build.evaluator(config, model, assets)
    first = evaluator(10)
    assert first["perplexity"] == pytest.approx(math.exp(first["loss"]))
    # an untrained model over a ~1000-piece vocabulary: loss near log(1001)
    assert 6.0 < first["loss"] < 8.0
    assert 0.0 <= first["bleu"] <= 100.0 and 0.0 <= first["chrf"] <= 100.0
    predictions = (tmp_path / "run" / "eval" / "predictions.txt.10").read_text().splitlines()
    assert len(predictions) == 40
    second = evaluator(20)  # same weights: the same loss, so no improvement -> stop
    assert second["loss"] == pytest.approx(first["loss"], rel=1e-6)
    assert evaluator.should_stop()
    with open(tmp_path / "run" / "eval" / "history.jsonl") as f:
        history = [json.loads(line) for line in f]
    assert [h["step"] for h in history] == [10, 20]
    # a resumed run reads the history up to its own step
    assert [h["step"] for h in build.evaluator(config, model, assets, current_step=10).history] == [10]


def test_evaluation_predictions_carry_the_decoding_noise(tmp_path):
    """params.decoding_noise reaches the evaluation's translations, as in OpenNMT-tf (whose
    evaluation decodes through the same noisy path): word dropout changes them, seeded."""
    config = training_config(tmp_path, model=TINY_MODEL)
    config = config.replace(params=dataclasses.replace(config.params, maximum_decoding_length=12))
    assets = build.assets(config.data)
    model = build.model(config.model, assets)
    plain = build.evaluator(config, model, assets).translate()
    noisy_config = config.replace(params=dataclasses.replace(
        config.params, decoding_noise=(("dropout", (0.5,)),), decoding_subword_token="▁",
        decoding_subword_token_is_spacer=True))
    noisy = build.evaluator(noisy_config, model, assets)
    first, again = noisy.translate(), noisy.translate()
    assert first == again  # seeded: each evaluation draws the same noise
    changed = [i for i, (a, b) in enumerate(zip(plain, first)) if a != b]
    assert len(changed) >= 5
    assert all(len(first[i].split()) < len(plain[i].split()) for i in changed)  # words dropped
