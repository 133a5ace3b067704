"""Gradient accumulation is exact: 4 accumulated batches = 1 batch holding the same examples;
and so is cutting each batch into sub-batches (train.sub_batches)."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from opennmt_lite.hyperparameters import ModelHyperparameters
from opennmt_lite.models import Transformer
from opennmt_lite.training.step import split_batch
from training_helpers import accumulate_gradients, make_optimizer, make_train_step

PARAMS = {"optimizer": "Adam", "optimizer_params": {"beta_1": 0.9, "beta_2": 0.998},
          "learning_rate": 2.0, "decay_type": "NoamDecay",
          "decay_params": {"model_dim": 32, "warmup_steps": 4}}
# Plain SGD for the weight comparison: w - lr * g is linear in the gradient, so the new weights
# agree exactly as well as the gradients do. (Adam divides by sqrt(v): on parameters whose exact
# gradient is zero, like the attention key biases, to which softmax is invariant, it turns float32
# rounding noise of either sign into a full-size step.)
SGD_PARAMS = {"optimizer": "SGD", "learning_rate": 0.5}


def make_examples(rng, count, vocab=40):
    examples = []
    for _ in range(count):
        source = rng.integers(3, vocab, size=rng.integers(1, 9))
        target = rng.integers(3, vocab, size=rng.integers(1, 9))
        examples.append((source, target))
    return examples


def make_batch(examples):
    """Pads a list of (source ids, target ids) into a batch dict (targets get <s> and </s>)."""
    src_len = max(len(s) for s, _ in examples)
    tgt_len = max(len(t) for _, t in examples) + 1
    batch = {k: [] for k in ("source_ids", "source_length", "target_ids_in", "target_ids_out", "target_length")}
    for source, target in examples:
        batch["source_ids"].append(np.pad(source, (0, src_len - len(source))))
        batch["source_length"].append(len(source))
        batch["target_ids_in"].append(np.pad(np.concatenate([[1], target]), (0, tgt_len - len(target) - 1)))
        batch["target_ids_out"].append(np.pad(np.concatenate([target, [2]]), (0, tgt_len - len(target) - 1)))
        batch["target_length"].append(len(target) + 1)
    return {k: tf.constant(np.array(v), tf.int32) for k, v in batch.items()}


def make_model(seed):
    keras.utils.set_random_seed(seed)
    model = Transformer(ModelHyperparameters(num_layers=2, num_units=32, num_heads=4, ffn_inner_dim=64,
                                             dropout=0.0, attention_dropout=0.0, ffn_dropout=0.0,
                                             maximum_relative_position=4), 41, 41)
    model.build()
    return model


def relative_difference(a, b):
    return np.abs(a - b).max() / max(np.abs(b).max(), 1e-30)


def global_relative_difference(first, second):
    """Largest difference over all tensors, relative to the largest magnitude over all tensors."""
    scale = max(np.abs(b).max() for b in second)
    return max(np.abs(a - b).max() for a, b in zip(first, second)) / scale


def test_four_accumulated_batches_equal_one_big_batch():
    smoothing = 0.1
    rng = np.random.default_rng(0)
    examples = make_examples(rng, 22)
    cuts = [0, 3, 9, 16, 22]  # four batches of different sizes and padded lengths
    group = tuple(make_batch(examples[a:b]) for a, b in zip(cuts, cuts[1:]))
    whole = (make_batch(examples),)

    results = []
    for batches in (group, whole):
        model = make_model(seed=5)
        optimizer = make_optimizer(SGD_PARAMS)
        optimizer.build(model.trainable_variables)
        grads, loss_sum, normalizer = accumulate_gradients(model, optimizer, batches, smoothing, True)
        step = make_train_step(model, optimizer, len(batches), label_smoothing=smoothing)
        stats = step((batches,))
        results.append((
            [g.numpy() / normalizer.numpy() for g in grads],
            [v.numpy() for v in model.trainable_variables],
            float(stats["loss"]), float(stats["normalizer"]), int(optimizer.iterations),
        ))
    (grads4, weights4, loss4, norm4, it4), (grads1, weights1, loss1, norm1, it1) = results
    assert norm4 == norm1 == sum(len(t) + 1 for _, t in examples)
    assert it4 == it1 == 1  # one optimizer update for the whole group
    assert abs(loss4 - loss1) <= 1e-6 * abs(loss1)
    worst_grad = global_relative_difference(grads4, grads1)
    worst_weight = global_relative_difference(weights4, weights1)
    assert worst_grad <= 1e-5, worst_grad
    assert worst_weight <= 1e-5, worst_weight
    # Variable by variable too, wherever the gradient is not zero by construction.
    scale = max(np.abs(g).max() for g in grads1)
    for a, b in zip(grads4, grads1):
        if np.abs(b).max() > 1e-4 * scale:
            assert relative_difference(a, b) <= 1e-5
    # The update really moved the weights (so the comparison above is not vacuous).
    fresh = make_model(seed=5)
    moved = max(np.abs(a - b.numpy()).max() for a, b in zip(weights1, fresh.trainable_variables))
    assert moved > 1e-4


def test_accumulation_is_not_the_mean_of_batch_means():
    """Averaging per-batch mean losses (Keras' built-in accumulation) gives another gradient."""
    rng = np.random.default_rng(1)
    examples = make_examples(rng, 10)
    group = (make_batch(examples[:2]), make_batch(examples[2:]))
    model = make_model(seed=3)
    optimizer = make_optimizer(PARAMS)
    grads, _, normalizer = accumulate_gradients(model, optimizer, group, 0.0, True)
    exact = [g / normalizer for g in grads]
    means = []
    for batch in group:
        g, _, n = accumulate_gradients(model, optimizer, (batch,), 0.0, True)
        means.append([x / n for x in g])
    averaged = [(a + b) / 2 for a, b in zip(*means)]
    assert max(relative_difference(a.numpy(), b.numpy()) for a, b in zip(averaged, exact)) > 1e-2


def test_split_batch_covers_every_example_once_trimmed_to_its_own_lengths():
    rng = np.random.default_rng(2)
    examples = make_examples(rng, 7)
    batch = make_batch(examples)
    parts = split_batch(batch, 3)
    assert [int(p["source_length"].shape[0]) for p in parts] == [2, 2, 3]
    start = 0
    for part in parts:
        size = int(part["source_length"].shape[0])
        members = examples[start:start + size]
        start += size
        # Each part is exactly the batch its own examples would make (trimmed padding).
        expected = make_batch(members)
        for name in batch:
            np.testing.assert_array_equal(part[name].numpy(), expected[name].numpy(), err_msg=name)
    assert start == len(examples)
    # A batch smaller than the number of parts: the first parts are empty.
    single = split_batch(make_batch(examples[:1]), 2)
    assert single[0]["source_ids"].shape == (0, 0) and single[0]["target_ids_out"].shape == (0, 0)
    np.testing.assert_array_equal(single[1]["source_ids"].numpy(), make_batch(examples[:1])["source_ids"].numpy())


@pytest.mark.parametrize("sizes", [(9, 4), (1, 2)], ids=["odd_batches", "batch_smaller_than_parts"])
def test_sub_batches_give_the_same_update(sizes):
    """sub_batches=2 (and 3): the same loss, normalizer, gradient and weights as whole batches,
    through TrainStep's compiled functions, including a batch of one example (an empty part)."""
    smoothing = 0.1
    rng = np.random.default_rng(3)
    examples = make_examples(rng, sum(sizes))
    group = (make_batch(examples[:sizes[0]]), make_batch(examples[sizes[0]:]))
    results = {}
    for parts in (1, 2, 3):
        model = make_model(seed=7)
        optimizer = make_optimizer(SGD_PARAMS)
        optimizer.build(model.trainable_variables)
        step = make_train_step(model, optimizer, len(group), label_smoothing=smoothing,
                               sub_batches=parts)
        stats = step((group,))
        results[parts] = ([v.numpy() for v in model.trainable_variables],
                          float(stats["loss_sum"]), float(stats["normalizer"]),
                          int(stats["source_tokens"]), int(stats["target_tokens"]))
    weights1, loss1, norm1, src1, tgt1 = results[1]
    assert norm1 == sum(len(t) + 1 for _, t in examples)
    assert src1 == sum(len(s) for s, _ in examples) and tgt1 == norm1
    initial = [v.numpy() for v in make_model(seed=7).trainable_variables]
    update1 = [w - w0 for w, w0 in zip(weights1, initial)]
    assert max(np.abs(u).max() for u in update1) > 1e-4  # the update is not vacuous
    for parts in (2, 3):
        weights, loss, norm, src, tgt = results[parts]
        assert (norm, src, tgt) == (norm1, src1, tgt1)
        assert abs(loss - loss1) <= 1e-6 * abs(loss1)
        update = [w - w0 for w, w0 in zip(weights, initial)]
        worst = global_relative_difference(update, update1)
        assert worst <= 1e-5, (parts, worst)
