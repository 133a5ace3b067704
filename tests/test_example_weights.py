"""`data.example_weights` scale each example's loss as OpenNMT-tf 2.32 does: its
`cross_entropy_sequence_loss(sequence_weight=...)` numbers (committed), a NumPy reference, and
in the train step (accumulation, sub-batches): an example of weight 2 counts as two copies."""

import json
import os

import numpy as np
import tensorflow as tf

from data_helpers import REPO
from opennmt_lite.training.losses import cross_entropy_sequence_loss
from opennmt_lite.training.step import TrainStep, compute_loss, split_batch
from test_accumulation import SGD_PARAMS, global_relative_difference, make_batch, make_examples, make_model
from training_helpers import make_optimizer

REFERENCE = os.path.join(REPO, "tests", "fixtures", "onmt_tf_weighted", "loss_reference.json")


def reference_inputs():
    with open(REFERENCE) as stream:
        reference = json.load(stream)
    inputs = reference["inputs"]
    return ({name: np.array(value) for name, value in inputs.items()}, reference["results"])


def numpy_loss(logits, labels, lengths, weights, smoothing, average_in_time):
    """(loss sum, normalizer) written out: sum over examples b and real tokens t of
    w_b * -sum_v q(v) log softmax(logits[b, t])_v, divided by sum_b w_b * len_b (in time) or
    sum_b w_b."""
    vocab = logits.shape[-1]
    log_probs = logits - logits.max(-1, keepdims=True)
    log_probs = log_probs - np.log(np.exp(log_probs).sum(-1, keepdims=True))
    q = np.full(logits.shape, smoothing / (vocab - 1))
    np.put_along_axis(q, labels[..., None], 1 - smoothing, axis=-1)
    token_loss = -(q * log_probs).sum(-1)
    mask = np.arange(logits.shape[1])[None, :] < lengths[:, None]
    loss = (token_loss * mask * weights[:, None]).sum()
    normalizer = (mask * weights[:, None]).sum() if average_in_time else weights.sum()
    return loss, normalizer


def test_the_loss_equals_opennmt_tf_s_and_numpy_s():
    inputs, results = reference_inputs()
    logits = tf.constant(inputs["logits"], tf.float32)
    batch = {"target_ids_out": tf.constant(inputs["labels"], tf.int32),
             "target_length": tf.constant(inputs["lengths"], tf.int32)}
    assert len(results) == 8
    for case in results:
        if case["weighted"]:
            batch["example_weight"] = tf.constant(inputs["weights"], tf.float32)
        else:
            batch.pop("example_weight", None)
        loss, normalizer = compute_loss(
            lambda _, training: (logits, None), batch, case["label_smoothing"],
            case["average_in_time"], training=True)
        assert abs(float(loss) - case["loss"]) <= 1e-5 * case["loss"], case
        assert float(normalizer) == case["normalizer"], case
        weights = inputs["weights"] if case["weighted"] else np.ones(4)
        expected_loss, expected_normalizer = numpy_loss(
            inputs["logits"], inputs["labels"], inputs["lengths"], weights,
            case["label_smoothing"], case["average_in_time"])
        assert abs(float(loss) - expected_loss) <= 1e-5 * expected_loss
        assert float(normalizer) == expected_normalizer
    # (a weight of 0 removes an example: the third has weight 0)
    _, tokens = cross_entropy_sequence_loss(logits, batch["target_ids_out"], batch["target_length"],
                                            example_weight=tf.constant(inputs["weights"]))
    assert float(tokens) == 0.5 * 6 + 2.0 * 4 + 1.25 * 3
    # sub-batches (train.sub_batches) keep each example's weight
    parts = split_batch({**batch, "source_length": batch["target_length"],
                         "source_ids": batch["target_ids_out"],
                         "target_ids_in": batch["target_ids_out"],
                         "example_weight": tf.constant(inputs["weights"])}, 2)
    np.testing.assert_array_equal(parts[1]["example_weight"].numpy(), inputs["weights"][2:])


def test_a_weight_of_two_counts_an_example_twice(average_loss_in_time=False, sub_batches=1):
    """One update over an accumulated group of weighted batches equals one over a batch where
    each example of weight 2 is written twice (weight 1 each, weight 0 left out): OpenNMT-tf's
    weighted sum and weighted normalizer, whatever the accumulation or sub-batches."""
    rng = np.random.default_rng(4)
    examples = make_examples(rng, 9)
    weights = np.array([2, 1, 1, 0, 2, 1, 2, 1, 1], np.float32)
    group = []
    for a, b in ((0, 4), (4, 9)):
        batch = make_batch(examples[a:b])
        batch["example_weight"] = tf.constant(weights[a:b])
        group.append(batch)
    copies = [e for e, w in zip(examples, weights) for _ in range(int(w))]
    whole = make_batch(copies)
    whole["example_weight"] = tf.ones([len(copies)], tf.float32)
    results = []
    for batches in (tuple(group), (whole,)):
        model = make_model(seed=5)
        optimizer = make_optimizer(SGD_PARAMS)
        optimizer.build(model.trainable_variables)
        step = TrainStep(model, optimizer, len(batches), label_smoothing=0.1,
                         average_loss_in_time=average_loss_in_time, sub_batches=sub_batches,
                         example_weights=True)
        stats = step((batches,))
        results.append(([v.numpy() for v in model.trainable_variables], float(stats["loss"]),
                         float(stats["normalizer"])))
    (weights_group, loss_group, norm_group), (weights_whole, loss_whole, norm_whole) = results
    expected = (sum((len(t) + 1) * w for (_, t), w in zip(examples, weights))
                if average_loss_in_time else weights.sum())
    assert norm_group == norm_whole == expected
    assert abs(loss_group - loss_whole) <= 1e-5 * loss_whole
    assert global_relative_difference(weights_group, weights_whole) <= 1e-5
    moved = max(np.abs(a - b.numpy()).max()
                for a, b in zip(weights_whole, make_model(seed=5).trainable_variables))
    assert moved > 1e-4
