"""`params.contrastive_learning` / `params.max_margin_eta` (Yang et al., 2019, as OpenNMT-tf 2.32
trains it): the max-margin loss against OpenNMT-tf's own `max_margin_loss` (its values on small
random batches committed in tests/fixtures/onmt_max_margin/, made by make_reference.py there)
and against NumPy; the negatives (one word omitted, drawn again identically on resume); the
accumulated gradient of a training step; a short training run."""

import json

import numpy as np
import pytest
import tensorflow as tf

from conftest import FIXTURES
from opennmt_lite import build
from opennmt_lite.data.noise import contrastive_negatives, tokens_to_words
from opennmt_lite.data.vocab import Vocabulary
from opennmt_lite.training.losses import cross_entropy_sequence_loss, max_margin_loss
from opennmt_lite.training.step import contrastive_sums
from training_helpers import TINY_MODEL, training_config

REFERENCE = json.loads((FIXTURES / "onmt_max_margin" / "reference.json").read_text())


def numpy_nll(logits, labels, lengths):
    """Token-averaged NLL of a batch: sum of -log softmax at the labels over the real tokens,
    divided by their number."""
    logits = np.asarray(logits, np.float64)
    log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    picked = np.take_along_axis(log_probs, np.asarray(labels)[..., None], -1)[..., 0]
    mask = np.arange(picked.shape[1])[None, :] < np.asarray(lengths)[:, None]
    return -(picked * mask).sum() / mask.sum()


@pytest.mark.parametrize("case", REFERENCE, ids=lambda c: f"eta{c['eta']}-loss{c['loss']:.3f}")
def test_max_margin_loss_equals_opennmt(case):
    terms = []
    for side in ("true", "negative"):
        terms.extend(cross_entropy_sequence_loss(
            tf.constant(case[f"{side}_logits"], tf.float32), tf.constant(case[f"{side}_labels"]),
            tf.constant(case[f"{side}_length"])))
    ours = float(max_margin_loss(*terms, eta=case["eta"]))
    assert abs(ours - case["loss"]) <= 1e-6
    expected = max(numpy_nll(case["true_logits"], case["true_labels"], case["true_length"])
                   - numpy_nll(case["negative_logits"], case["negative_labels"],
                               case["negative_length"]) + case["eta"], 0.0)
    assert abs(ours - expected) <= 1e-6


def test_negatives_omit_exactly_one_whole_word(tmp_path):
    tokens = ["▁Das", "▁Ha", "us", "▁ist", "▁sehr", "▁schön", "▁gewor", "den", ".", "▁Ja"]
    path = tmp_path / "vocab.txt"
    path.write_text("<blank>\n<s>\n</s>\n" + "\n".join(tokens) + "\n", encoding="utf-8")
    vocabulary = Vocabulary.from_file(path)
    negatives = contrastive_negatives(vocabulary, "▁")
    sentence = vocabulary.lookup(tokens[:9])
    words = [" ".join(w) for w in tokens_to_words(tokens[:9], "▁")]
    rng = np.random.default_rng(0)
    omitted = set()
    for _ in range(200):
        noisy = [" ".join(w) for w in tokens_to_words(vocabulary.to_tokens(negatives(sentence, rng)), "▁")]
        assert len(noisy) == len(words) - 1
        missing = [w for w in words if w not in noisy]
        assert len(missing) == 1 and [w for w in words if w != missing[0]] == noisy
        omitted.add(missing[0])
    assert omitted == set(words)
    one_word = vocabulary.lookup(["▁Ja"])
    assert negatives(one_word, rng).tolist() == one_word.tolist()  # (one word is always kept)


@pytest.fixture(scope="module")
def contrastive_trainer(tmp_path_factory):
    """A tiny model without dropout, contrastive learning on, 2 batches accumulated per step,
    each cut in 2 sub-batches."""
    tmp_path = tmp_path_factory.mktemp("contrastive")
    model = dict(TINY_MODEL, num_layers=1, dropout=0.0, attention_dropout=0.0, ffn_dropout=0.0)
    config = training_config(
        tmp_path, model=model, lines=300,
        params={"contrastive_learning": True, "max_margin_eta": 0.2, "decoding_subword_token": "▁"},
        train={"batch_size": 256, "effective_batch_size": 512, "max_step": 4, "sub_batches": 2,
               "save_checkpoints_steps": 100})
    return build.trainer(config, with_evaluation=False)


def test_batches_carry_negatives_redrawn_identically(contrastive_trainer):
    data = contrastive_trainer.training_input
    first = [group for _, group in zip(range(3), data.numpy_batches())]
    again = [group for _, group in zip(range(3), data.numpy_batches())]
    resumed = next(iter(data.numpy_batches(skip_batches=2 * data.accum_steps)))
    for name in ("noisy_target_ids_in", "noisy_target_length"):
        for a, b in zip(first, again):
            np.testing.assert_array_equal(a[0][name], b[0][name])
        np.testing.assert_array_equal(resumed[0][name], first[2][0][name])
    batch = first[0][0]
    lengths, noisy_lengths = batch["target_length"], batch["noisy_target_length"]
    assert (noisy_lengths < lengths).mean() > 0.9 and (noisy_lengths <= lengths).all()
    rows = np.arange(len(lengths))
    assert (batch["noisy_target_ids_in"][:, 0] == 1).all()
    assert (batch["noisy_target_ids_out"][rows, noisy_lengths - 1] == 2).all()


def test_accumulated_gradient_is_the_mean_of_the_batches_max_margin_gradients(contrastive_trainer):
    """OpenNMT-tf divides the summed gradients by accum_steps (the max-margin loss returns no
    sample size); the sub-batches' sums are added before the margin is taken."""
    step, model = contrastive_trainer.train_step, contrastive_trainer.model
    group = next(iter(contrastive_trainer.training_input.numpy_batches()))
    assert len(group) == 2
    expected, margins = None, []
    for batch in group:
        with tf.GradientTape() as tape:
            loss = max_margin_loss(*contrastive_sums(model, batch, training=True), eta=0.2)
        grads = [tf.convert_to_tensor(g).numpy() for g in tape.gradient(loss, model.trainable_variables)]
        expected = grads if expected is None else [a + b for a, b in zip(expected, grads)]
        margins.append(float(loss))
    stats = None
    for batch in group:
        result = step._accumulate((batch,))
        stats = result if stats is None else {k: stats[k] + v for k, v in result.items()}
    assert float(step.normalizer.read_value()) == 2.0
    for accumulator, value in zip(step.accumulators, expected):
        np.testing.assert_allclose(accumulator.numpy(), value, rtol=1e-4, atol=1e-6)
    assert abs(float(stats["loss_sum"]) / 2 - np.mean(margins)) < 1e-5
    assert np.mean(margins) > 0
    step._apply()
    assert all(float(tf.reduce_sum(tf.abs(a))) == 0 for a in step.accumulators)


def test_contrastive_learning_trains(contrastive_trainer):
    trainer = contrastive_trainer
    trainer.max_step = 4
    trainer.run()
    assert trainer.step == 4
