"""LanguageModel (OpenNMT-tf's, GPT2Small's layout scaled down) against OpenNMT-tf 2.32: its
checkpoint (tests/fixtures/onmt_tf_lm, made by bench/onmt_model_fixtures.py) loads; the logits,
`onmt-main score`'s scores, `eval`'s loss and `infer`'s greedy continuations are reproduced."""

import ast
import os

import numpy as np
import pytest
from test_encoder_models import _batch, _lines, adam_steps

FIXTURE = os.path.join(os.path.dirname(__file__), "fixtures", "onmt_tf_lm")


def _load():
    from opennmt_lite.checkpointing.onmt_encoder_models import load_onmt_language_model
    from opennmt_lite.data.vocab import Vocabulary
    from opennmt_lite.hyperparameters import ModelHyperparameters
    from opennmt_lite.models.language_model import LanguageModel

    vocabulary = Vocabulary.from_file(os.path.join(FIXTURE, "vocab.txt"))
    hyperparameters = ModelHyperparameters(num_layers=2, num_units=32, num_heads=2,
                                           ffn_inner_dim=64, ffn_activation="gelu")
    model = LanguageModel(hyperparameters, vocabulary.num_ids, maximum_position=128,
                          gelu_approximation=True)
    load_onmt_language_model(FIXTURE, model)
    return model, vocabulary


@pytest.fixture(scope="module")
def loaded():
    return _load()


def test_logits_equal_opennmt_tf(loaded):
    model, _ = loaded
    pieces = np.load(os.path.join(FIXTURE, "pieces.npz"))
    ids, length = pieces["ids"].astype(np.int32), pieces["length"].astype(np.int32)
    logits = np.asarray(model(ids, length, training=False))
    mask = np.arange(ids.shape[1])[None, :] < length[:, None]
    np.testing.assert_allclose(logits[mask], pieces["logits"][mask], atol=1e-5)


def test_exact_gelu_would_not_match(loaded):
    """The tanh approximation matters: Keras' exact gelu moves the logits by more than 1e-5."""
    from opennmt_lite.checkpointing.onmt_encoder_models import load_onmt_language_model
    from opennmt_lite.models.language_model import LanguageModel

    model, vocabulary = loaded
    exact = LanguageModel(model.hyperparameters, vocabulary.num_ids, maximum_position=128)
    load_onmt_language_model(FIXTURE, exact)
    pieces = np.load(os.path.join(FIXTURE, "pieces.npz"))
    ids, length = pieces["ids"].astype(np.int32), pieces["length"].astype(np.int32)
    difference = np.asarray(exact(ids, length)) - pieces["logits"]
    assert np.abs(difference[np.arange(ids.shape[1])[None, :] < length[:, None]]).max() > 1e-5


def test_scores_equal_opennmt_tf(loaded):
    """`onmt-main score --features_file`: per line -sum log p, within 1e-4."""
    model, vocabulary = loaded
    sentences = _lines(os.path.join(FIXTURE, "test.first100.tok.en"))
    expected = [line.split(" ||| ") for line in _lines(os.path.join(FIXTURE, "score.first100.txt"))]
    assert [text for _, text in expected] == sentences
    ids, length = _batch(vocabulary, sentences)
    scores = np.asarray(model.score(ids, length))
    np.testing.assert_allclose(scores, [float(score) for score, _ in expected], atol=1e-4)


def test_eval_loss_equals_opennmt_tf(loaded):
    """`onmt-main eval`'s loss (token mean over the set) and perplexity, within 1e-4."""
    model, vocabulary = loaded
    with open(os.path.join(FIXTURE, "eval.result.txt")) as f:
        expected = ast.literal_eval(f.read())
    ids, length = _batch(vocabulary, _lines(os.path.join(FIXTURE, "eval.tok.en")))
    loss = float(np.sum(np.asarray(model.score(ids, length), np.float64)) / length.sum())
    assert abs(loss - expected["loss"]) < 1e-4
    assert abs(np.exp(loss) - expected["perplexity"]) < 1e-4 * expected["perplexity"]


def test_greedy_continuations_equal_opennmt_tf(loaded):
    """`onmt-main infer` of 100 prefixes of 1 to 4 words (maximum_decoding_length 30), all in
    one batch of mixed lengths here (OpenNMT-tf needs one length per batch)."""
    from opennmt_lite.inference.other_models import continue_lines

    model, vocabulary = loaded
    prefixes = _lines(os.path.join(FIXTURE, "test.first100.prefix.en"))
    expected = _lines(os.path.join(FIXTURE, "pred.first100.greedy.en"))
    predicted = continue_lines(model, vocabulary, prefixes, maximum_length=30, batch_size=100)
    same = sum(p == e for p, e in zip(predicted, expected))
    assert same >= 99, [(p, e) for p, e in zip(predicted, expected) if p != e][:3]
    assert len(set(expected)) > 50  # the continuations differ from one another


def test_gpt2_small_has_opennmt_tf_checkpoint_layout():
    """The preset's variables: exactly the names and shapes of OpenNMT-tf's catalog GPT2Small
    (gpt2small_variables.json, its checkpoint with a 4 000-line vocabulary)."""
    import json

    from opennmt_lite.checkpointing.names import named_variables
    from opennmt_lite.models.language_model import gpt2_small

    with open(os.path.join(FIXTURE, "gpt2small_variables.json")) as f:
        expected = {name[: -len("/.ATTRIBUTES/VARIABLE_VALUE")]: shape
                    for name, shape in json.load(f).items()}
    model = gpt2_small(4001)
    model.build()
    ours = {f"model/{path}": list(variable.shape)
            for path, variable in named_variables(model, include_seeds=False).items()}
    assert ours == expected
    assert sum(np.prod(shape) for shape in ours.values()) > 85_000_000


def test_training_continues_from_the_opennmt_tf_checkpoint():
    """Adam steps from OpenNMT-tf's weights on its first 64 training lines lower the token
    loss (a fresh model, not the module's shared one)."""
    import tensorflow as tf

    model, vocabulary = _load()
    ids, length = _batch(vocabulary, _lines(os.path.join(FIXTURE, "train.first200.tok.en"))[:64])

    def loss_fn():
        return tf.reduce_sum(model.score(ids, length)) / float(length.sum())

    before = float(loss_fn())
    adam_steps(model, loss_fn, 3)
    assert float(loss_fn()) < before


def test_cached_and_uncached_greedy_agree(loaded):
    """The key/value-cached path (prefixes grouped by length) and the path recomputing every
    position over one padded batch give the same continuations."""
    model, vocabulary = loaded
    prefixes = _lines(os.path.join(FIXTURE, "test.first100.prefix.en"))[:24]
    ids, length = _batch(vocabulary, prefixes)
    assert len(set(length.tolist())) > 2
    cached = model.greedy_continue(ids, length, maximum_length=12)
    assert cached == model.greedy_continue_uncached(ids, length, maximum_length=12)
