"""SequenceTagger (with and without CRF) and SequenceClassifier against OpenNMT-tf 2.32: its
checkpoints (tests/fixtures/onmt_tf_{tagger_crf,tagger,classifier}, made by
bench/onmt_model_fixtures.py) load, and `onmt-main infer`'s outputs on 100 held-out inputs and
its pieces' numbers (pieces.npz) are reproduced."""

import ast
import os

import numpy as np
import pytest

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures")
HYPERPARAMETERS = dict(num_layers=2, num_units=32, num_heads=2, ffn_inner_dim=64)


def _lines(path):
    with open(path, encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f]


def _batch(vocabulary, sentences):
    """Padded ids [batch, time] int32 and lengths [batch]."""
    ids = [vocabulary.lookup(sentence.split()) for sentence in sentences]
    length = np.array([len(i) for i in ids], np.int32)
    padded = np.zeros((len(ids), length.max()), np.int32)
    for row, values in zip(padded, ids):
        row[: len(values)] = values
    return padded, length


def adam_steps(model, loss_fn, steps):
    """`steps` plain Adam updates (learning rate 0.002) of every trainable weight on loss_fn()."""
    import keras
    import tensorflow as tf

    optimizer = keras.optimizers.Adam(learning_rate=0.002)
    for _ in range(steps):
        with tf.GradientTape() as tape:
            loss = loss_fn()
        variables = model.trainable_variables
        optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables))


def _load(name):
    from opennmt_lite.checkpointing.onmt_encoder_models import load_onmt_model
    from opennmt_lite.data.vocab import Vocabulary
    from opennmt_lite.hyperparameters import ModelHyperparameters
    from opennmt_lite.models.encoder_models import SequenceClassifier, SequenceTagger

    fixture = os.path.join(FIXTURES, f"onmt_tf_{name}")
    vocabulary = Vocabulary.from_file(os.path.join(fixture, "src-vocab.txt"))
    labels_file = "labels-vocab.txt" if name == "classifier" else "tags-vocab.txt"
    labels = _lines(os.path.join(fixture, labels_file))
    hyperparameters = ModelHyperparameters(**HYPERPARAMETERS)
    if name == "classifier":
        model = SequenceClassifier(hyperparameters, vocabulary.num_ids, len(labels))
    else:
        model = SequenceTagger(hyperparameters, vocabulary.num_ids, len(labels),
                               crf_decoding=name == "tagger_crf")
    load_onmt_model(fixture, model)
    return fixture, model, vocabulary, labels


@pytest.fixture(scope="module", params=["tagger_crf", "tagger", "classifier"])
def loaded(request):
    return (request.param,) + _load(request.param)


def _predict(model, vocabulary, labels, sentences):
    ids, length = _batch(vocabulary, sentences)
    if hasattr(model, "predict_tags"):
        tags = np.asarray(model.predict_tags(ids, length))
        return [" ".join(labels[t] for t in row[:n]) for row, n in zip(tags, length)]
    return [labels[i] for i in np.asarray(model.predict_labels(ids, length))]


def test_infer_outputs_equal_opennmt_tf(loaded):
    """100/100 lines identical to `onmt-main infer` (batches of 16 there, one batch here)."""
    name, fixture, model, vocabulary, labels = loaded
    sentences = _lines(os.path.join(fixture, "test.first100.tok.en"))
    output = "pred.first100.labels" if name == "classifier" else "pred.first100.tags"
    expected = _lines(os.path.join(fixture, output))
    predicted = _predict(model, vocabulary, labels, sentences)
    assert predicted == expected
    # The fixture discriminates: OpenNMT-tf's model is not always right, and not constant.
    gold_file = "test.first100.labels" if name == "classifier" else "test.first100.tags"
    gold = _lines(os.path.join(fixture, gold_file))
    assert 80 <= sum(p == g for p, g in zip(predicted, gold)) < 100
    assert len(set(" ".join(expected).split())) >= 3


def test_pieces_equal_opennmt_tf(loaded):
    """Encoder outputs, (pooled,) logits of the first 8 inputs within 1e-5 of OpenNMT-tf's."""
    name, fixture, model, vocabulary, labels = loaded
    pieces = np.load(os.path.join(fixture, "pieces.npz"))
    ids, length = pieces["ids"].astype(np.int32), pieces["length"].astype(np.int32)
    outputs = np.asarray(model.encode(ids, length, training=False))
    mask = np.arange(ids.shape[1])[None, :] < length[:, None]
    np.testing.assert_allclose(outputs[mask], pieces["encoder_outputs"][mask], atol=1e-5)
    logits = np.asarray(model(ids, length, training=False))
    if name == "classifier":
        pooled = np.asarray(model.pool(outputs, length))
        np.testing.assert_allclose(pooled, pieces["pooled"], atol=1e-5)
        # The pooling averages the real positions only: padding would change it.
        assert np.abs(pooled - outputs.mean(axis=1)).max() > 1e-3
        np.testing.assert_allclose(logits, pieces["logits"], atol=1e-5)
    else:
        np.testing.assert_allclose(logits[mask], pieces["logits"][mask], atol=1e-5)
        tags = np.asarray(model.predict_tags(ids, length))
        assert tags[mask].tolist() == pieces["tags_id"][mask].tolist()
    if name == "tagger_crf":
        np.testing.assert_allclose(np.asarray(model.transition_params), pieces["transition_params"])


def test_eval_accuracy_equals_opennmt_tf(loaded):
    """`onmt-main eval`'s accuracy on the next 100 test lines, within 1e-4."""
    name, fixture, model, vocabulary, labels = loaded
    with open(os.path.join(fixture, "eval.result.txt")) as f:
        expected = ast.literal_eval(f.read())
    sentences = _lines(os.path.join(fixture, "eval.tok.en"))
    gold_file = "eval.labels" if name == "classifier" else "eval.tags"
    gold = [line.split() for line in _lines(os.path.join(fixture, gold_file))]
    predicted = [line.split() for line in _predict(model, vocabulary, labels, sentences)]
    if name == "classifier":
        right = sum(p == g for p, g in zip(predicted, gold))
        assert abs(right / len(gold) - expected["accuracy"]) < 1e-4
        return
    from opennmt_lite.inference.tagging_metrics import tagging_metrics

    metrics = tagging_metrics(gold, predicted, tagging_scheme="bioes")
    for key in ("accuracy", "precision", "recall", "f1"):
        assert abs(metrics[key] - expected[key]) < 1e-4, key
    # The chunk metrics are not trivial: some chunks are missed, some invented.
    assert 0.3 < metrics["recall"] < metrics["precision"] < 1


@pytest.mark.parametrize("gold, predicted, counts", [
    ("B-X I-X E-X O S-Y", "B-X I-X E-X O S-Z", (1, 1, 1)),  # chunk right; S-Y missed, S-Z made up
    ("B-X E-X", "B-X I-X", (0, 1, 1)),  # an unclosed predicted chunk is wrong
    ("B-X I-X E-X", "B-X O E-X", (0, 1, 1)),  # one wrong inner tag: the chunk is wrong
    ("O O S-X", "O O S-X", (1, 0, 0)),
    ("O O O", "S-X O B-Y", (0, 2, 0)),
])
def test_bioes_counts(gold, predicted, counts):
    from opennmt_lite.inference.tagging_metrics import bioes_counts

    assert bioes_counts(gold.split(), predicted.split()) == counts


def test_a_crf_checkpoint_does_not_load_into_a_tagger_without_crf():
    from opennmt_lite.checkpointing.onmt_encoder_models import load_onmt_model
    from opennmt_lite.checkpointing.store import CheckpointError
    from opennmt_lite.hyperparameters import ModelHyperparameters
    from opennmt_lite.models.encoder_models import SequenceTagger

    model = SequenceTagger(ModelHyperparameters(**HYPERPARAMETERS), 2001, 6, crf_decoding=False)
    with pytest.raises(CheckpointError, match="transition_params"):
        load_onmt_model(os.path.join(FIXTURES, "onmt_tf_tagger_crf"), model)


def _log_softmax(logits):
    logits = np.asarray(logits, np.float64)
    shifted = logits - logits.max(-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))


@pytest.mark.parametrize("name", ["tagger", "classifier"])
def test_eval_loss_equals_opennmt_tf(name):
    """`onmt-main eval`'s loss: the cross-entropy mean over the set's tokens (tagger) or lines
    (classifier), within 1e-4. (The CRF tagger's is a mean of per-batch means, which depends on
    OpenNMT-tf's batching: its CRF loss is checked through crf.npz instead.)"""
    fixture, model, vocabulary, labels = _load(name)
    with open(os.path.join(fixture, "eval.result.txt")) as f:
        expected = ast.literal_eval(f.read())
    ids, length = _batch(vocabulary, _lines(os.path.join(fixture, "eval.tok.en")))
    log_probs = _log_softmax(model(ids, length, training=False))
    index = {label: i for i, label in enumerate(labels)}
    gold_file = "eval.labels" if name == "classifier" else "eval.tags"
    gold = [[index[t] for t in line.split()] for line in _lines(os.path.join(fixture, gold_file))]
    if name == "classifier":
        loss = -np.mean([log_probs[b, g[0]] for b, g in enumerate(gold)])
    else:
        picked = [log_probs[b, t, g] for b, tags in enumerate(gold) for t, g in enumerate(tags)]
        loss = -np.mean(picked)
    assert abs(loss - expected["loss"]) < 1e-4


@pytest.mark.parametrize("name", ["tagger_crf", "classifier"])
def test_training_continues_from_the_opennmt_tf_checkpoint(name):
    """Gradient steps from OpenNMT-tf's weights on its first 200 training lines lower the loss
    (the CRF's transitions train too)."""
    import keras
    import tensorflow as tf

    fixture, model, vocabulary, labels = _load(name)
    suffix = "labels" if name == "classifier" else "tags"
    ids, length = _batch(vocabulary, _lines(os.path.join(fixture, "train.first200.tok.en")))
    index = {label: i for i, label in enumerate(labels)}
    gold = [[index[t] for t in line.split()]
            for line in _lines(os.path.join(fixture, f"train.first200.{suffix}"))]
    if name == "classifier":
        targets = np.array([g[0] for g in gold], np.int32)
    else:
        targets = np.zeros_like(ids)
        for row, tags in zip(targets, gold):
            row[: len(tags)] = tags

    def loss_fn():
        logits = model(ids, length, training=False)
        if name == "classifier":
            return tf.reduce_mean(keras.losses.sparse_categorical_crossentropy(
                targets, logits, from_logits=True))
        return model.crf_loss(logits, targets, length)

    transitions = None if name == "classifier" else np.array(model.transition_params)
    before = float(loss_fn())
    adam_steps(model, loss_fn, 5)
    after = float(loss_fn())
    assert after < before
    if transitions is not None:
        assert np.abs(np.array(model.transition_params) - transitions).max() > 1e-4


def test_bioes_counts_equal_opennmt_tf_flags():
    """300 random gold / predicted tag sequences, ill-formed chunks included: the same counts as
    OpenNMT-tf's `flag_bioes_tags` (bioes_counts.json, recorded in its environment)."""
    import json

    from opennmt_lite.inference.tagging_metrics import bioes_counts

    with open(os.path.join(FIXTURES, "onmt_tf_tagger_crf", "bioes_counts.json")) as f:
        cases = json.load(f)
    for case in cases:
        assert list(bioes_counts(case["gold"], case["predicted"])) == case["counts"], case
    assert len({tuple(case["counts"]) for case in cases}) > 8


@pytest.mark.parametrize("name", ["tagger_crf", "lm"])
def test_adam_state_restored_from_the_opennmt_tf_checkpoint(name):
    """OpenNMT-tf's Adam moments and step go into a Keras Adam: training resumes at its step
    with its moments (checked against the checkpoint's own values)."""
    import keras
    import tensorflow as tf

    from opennmt_lite.checkpointing import store
    from opennmt_lite.checkpointing.names import slot_variables
    from opennmt_lite.checkpointing.onmt_encoder_models import assign_optimizer_state

    if name == "lm":
        from test_language_model import _load as load_language_model

        model, _ = load_language_model()
        fixture, steps = os.path.join(FIXTURES, "onmt_tf_lm"), 3000
        variable, onmt = model.examples_inputter.embedding, "model/examples_inputter/embedding"
    else:
        fixture, model, _, _ = _load(name)
        steps = 1000
        variable, onmt = model.transition_params, "model/transition_params"
    optimizer = keras.optimizers.Adam(learning_rate=0.002)
    optimizer.build(model.trainable_variables)
    prefix = store.resolve(fixture)
    assert assign_optimizer_state(prefix, model, optimizer) == steps
    slot = f"{onmt}/.OPTIMIZER_SLOT/optimizer/m"
    expected = tf.train.load_variable(prefix, slot + "/.ATTRIBUTES/VARIABLE_VALUE")
    np.testing.assert_array_equal(np.asarray(slot_variables(optimizer, variable)["m"]), expected)
    assert np.abs(expected).max() > 0
