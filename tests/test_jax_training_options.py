"""The train step's options on Keras' JAX backend (training/jax_step.py) against the TensorFlow
backend's `TrainStep`: the runs of tests/jax_training_case.py's `OPTIONS` (float16, with its
dynamic loss scale and an update that overflows, and guided alignment "mse"; bfloat16; guided
alignment "ce" with the masking of outliers, `average_loss_in_time: false` and a moving average;
contrastive learning with regularization), each on top of the case's accumulation of 2 batches,
label smoothing, example weights, gradient clipping and Adam with the Noam schedule: 5 updates
from the same weights and batches, the JAX side of all runs in one subprocess (the
`training_options` job). Compared: each update's loss and normalizer, the step counter, whether
the weights moved, float16's loss scale, the weights (and the moving averages) at the end. Each
option weighs in the loss far beyond its run's tolerance (so that a JAX step ignoring it would
fail), and the JAX trainer built from a config with `params.contrastive_learning` trains on the
negatives.

Tolerances. float32: each loss within 1e-4 relative (measured: 1.4e-6 at most), the weights
within 1e-5 of their norm (measured: 3.7e-7). Half precision: the backends round the same
products and sums at different places (XLA fuses elementwise ops, keeping their intermediates in
float32; TensorFlow rounds each op's output to the half type), so the logits, and the loss made
from them, differ by about the half type's unit roundoff u (2**-11 float16, 2**-8 bfloat16): the
losses within 2u relative (measured: 0.7u float16, 0.07u bfloat16), the weights within 4u of
their norm (measured: 2.1u float16, on the source embedding, 0.44u bfloat16), Adam turning
gradient entries that differ by u into steps that differ more. The attention keys' biases are
left out of the weights compared: softmax ignores them, their gradient is rounding noise, which
Adam turns into full-size steps (measured up to 2.7e-5 apart in float32).
"""

import json

import numpy as np
import pytest

import jax_training_case as case
import jax_worker
from test_jax_training import write_corpus
from opennmt_lite.training.step import TrainStep, batch_gradients

UNIT_ROUNDOFF = {"mixed_float16": 2.0**-11, "mixed_bfloat16": 2.0**-8}
FLOAT32_LOSS = 1e-4
FLOAT32_WEIGHTS = 1e-5
FLOAT16 = "float16_mse"
MAX_MARGIN_ETA = 0.1


def policy(name):
    return case.OPTIONS[name].get("policy", "float32")


def loss_tolerance(name):
    half = UNIT_ROUNDOFF.get(policy(name))
    return 2 * half if half else FLOAT32_LOSS


def contrastive_config(directory):
    """The user config of a one-layer model trained with contrastive learning."""
    data = write_corpus(directory / "data")
    return {
        "model_dir": str(directory / "contrastive"),
        "data": {"train_features_file": str(data / "train.src"),
                 "train_labels_file": str(data / "train.tgt"),
                 "source_vocabulary": str(data / "vocab.txt"),
                 "target_vocabulary": str(data / "vocab.txt")},
        "model": {"num_layers": 1, "num_units": 32, "num_heads": 2, "ffn_inner_dim": 64},
        "params": {"optimizer": "Adam", "learning_rate": 1.0, "decay_type": "NoamDecay",
                   "decay_params": {"model_dim": 32, "warmup_steps": 10},
                   "contrastive_learning": True, "max_margin_eta": MAX_MARGIN_ETA},
        "train": {"batch_type": "tokens", "batch_size": 256, "max_step": 4, "seed": 3,
                  "xla_shapes": 2},
    }


@pytest.fixture(scope="module")
def jax_arrays(tmp_path_factory):
    directory = tmp_path_factory.mktemp("jax_training_options")
    (directory / "contrastive.json").write_text(json.dumps(contrastive_config(directory)))
    arrays, _ = jax_worker.run("training_options", directory)
    return arrays


def jax_run(arrays, name):
    prefix = f"{name}/"
    return {key[len(prefix):]: value for key, value in arrays.items() if key.startswith(prefix)}


_TENSORFLOW = {}


def tensorflow_run(name):
    """Option run `name` by the TensorFlow backend's TrainStep (this process; once per name)."""
    if name not in _TENSORFLOW:
        def make_step(model, optimizer, options):
            return TrainStep(model, optimizer, case.ACCUM_STEPS, example_weights=True, **options)

        _TENSORFLOW[name] = case.run_option(name, make_step)
    return _TENSORFLOW[name]


def assert_same_run(name, jax, tensorflow):
    """The comparisons every option run passes."""
    assert len(jax["loss"]) == len(tensorflow["loss"]) == case.OPTION_UPDATES
    assert np.isfinite(tensorflow["loss"]).all()
    relative = np.abs(jax["loss"] - tensorflow["loss"]) / np.abs(tensorflow["loss"])
    assert relative.max() <= loss_tolerance(name), (name, relative)
    np.testing.assert_allclose(jax["normalizer"], tensorflow["normalizer"], rtol=1e-6,
                               err_msg=name)
    np.testing.assert_array_equal(jax["iterations"], tensorflow["iterations"], err_msg=name)
    np.testing.assert_array_equal(jax["iterations"], np.arange(1, case.OPTION_UPDATES + 1))
    np.testing.assert_array_equal(jax["changed"], tensorflow["changed"], err_msg=name)
    half = UNIT_ROUNDOFF.get(policy(name))
    weight_tolerance = 4 * half if half else FLOAT32_WEIGHTS
    compared = 0
    for key, value in tensorflow.items():
        if not key.startswith(("weight/", "average/")) or "linear_keys/bias" in key:
            continue  # (see the module docstring)
        difference = np.linalg.norm(jax[key] - value) / np.linalg.norm(value)
        assert difference <= weight_tolerance, (name, key, difference)
        compared += 1
    assert compared > 10


@pytest.mark.parametrize("name", [n for n in case.OPTIONS if n != FLOAT16])
def test_option_on_jax_gives_tensorflows_updates(jax_arrays, name):
    jax, tensorflow = jax_run(jax_arrays, name), tensorflow_run(name)
    assert_same_run(name, jax, tensorflow)
    assert all(tensorflow["changed"])
    if case.OPTIONS[name].get("moving_average"):
        assert any(key.startswith("average/") for key in tensorflow)


def test_float16_loss_scale_skips_the_overflow_and_advances_the_step(jax_arrays):
    jax, tensorflow = jax_run(jax_arrays, FLOAT16), tensorflow_run(FLOAT16)
    assert_same_run(FLOAT16, jax, tensorflow)
    # the update of the overflowing batch is skipped (no weight moves), the scale halves, the
    # step counter still advances; the other updates apply
    expected_changed = [update != case.OVERFLOW_UPDATE for update in range(case.OPTION_UPDATES)]
    expected_scale = [case.INITIAL_LOSS_SCALE / (2 if update >= case.OVERFLOW_UPDATE else 1)
                      for update in range(case.OPTION_UPDATES)]
    for run in (jax, tensorflow):
        assert list(run["changed"]) == expected_changed
        np.testing.assert_array_equal(run["loss_scale"], expected_scale)


def test_the_options_normalizers(jax_arrays):
    # outliers masked, examples averaged: the sum of the example weights, less the outliers'
    kept = [sum(float(batch["example_weight"].sum() - batch["example_weight"][case.OUTLIER])
                for batch in group) for group in case.option_groups("ce_outliers_examples")]
    np.testing.assert_allclose(jax_run(jax_arrays, "ce_outliers_examples")["normalizer"], kept,
                               rtol=1e-6)
    # contrastive learning: 1 per batch, the update is the mean of the batches' gradients
    contrastive = jax_run(jax_arrays, "contrastive_regularization")
    np.testing.assert_array_equal(contrastive["normalizer"], case.ACCUM_STEPS)
    # (the margin is active, there is a gradient; a max-margin loss, not a cross-entropy)
    assert (contrastive["loss"] > 0).all() and (contrastive["loss"] < 1.5).all()


@pytest.mark.parametrize("name", [n for n in case.OPTIONS if "step" in case.OPTIONS[n]])
def test_the_options_weigh_in_the_first_loss(name):
    """The first batch's loss per normalizer at the initial weights (TensorFlow, eagerly, in
    float32) moves by far more than the run's tolerance when any one of the run's options is
    left out, or else its normalizer does (the masking of outliers), which the runs compare
    within 1e-6."""
    options = case.step_options(name)
    batch = case.option_groups(name)[0][0]
    model = case.option_model(name)
    optimizer = case.make_optimizer(model)

    def first_loss(**changed):
        settings = dict(options, **changed)
        _, loss, normalizer = batch_gradients(
            model, optimizer, batch, settings["label_smoothing"],
            settings.get("average_loss_in_time", True),
            max_margin_eta=settings.get("max_margin_eta"),
            guided_alignment=settings.get("guided_alignment"),
            regularization=settings.get("regularization"),
            mask_outliers=settings.get("mask_outliers", False))
        return float(loss) / float(normalizer), float(normalizer)

    loss, normalizer = first_loss()
    left_out = {"guided_alignment": None, "mask_outliers": False, "average_loss_in_time": True,
                "regularization": None, "max_margin_eta": None}
    for option in case.OPTIONS[name]["step"]:
        loss_without, normalizer_without = first_loss(**{option: left_out[option]})
        assert (abs(loss - loss_without) > 5 * loss_tolerance(name) * loss_without
                or abs(normalizer - normalizer_without) > 1e-3 * normalizer_without), (name, option)


def test_contrastive_training_on_jax_trains_on_the_negatives(jax_arrays):
    """The JAX trainer of a config with params.contrastive_learning: its train step has the
    config's margin, its batches the negatives, each target with one word omitted (a one-word
    target whole)."""
    assert float(jax_arrays["contrastive_trainer/eta"]) == MAX_MARGIN_ETA
    batch = jax_run(jax_arrays, "contrastive_trainer/batch")
    lengths, noisy_lengths = batch["target_length"], batch["noisy_target_length"]
    assert batch["noisy_target_ids_out"].shape == batch["target_ids_out"].shape
    for e in range(len(lengths)):
        words = list(batch["target_ids_out"][e, :lengths[e] - 1])
        noisy = list(batch["noisy_target_ids_out"][e, :noisy_lengths[e] - 1])
        assert batch["noisy_target_ids_out"][e, noisy_lengths[e] - 1] == 2  # </s>
        assert batch["noisy_target_ids_in"][e, 0] == 1  # <s>
        assert list(batch["noisy_target_ids_in"][e, 1:noisy_lengths[e]]) == noisy
        if len(words) == 1:
            assert noisy == words
        else:
            assert any(words[:i] + words[i + 1:] == noisy for i in range(len(words))), e
    assert (noisy_lengths < lengths).sum() > len(lengths) // 2
