"""OpenNMT-tf's training options: the moving average of the weights (train.moving_average_decay),
weight regularization (params.regularization), gradient clipping (params.clip_gradients) and the
export of the best model during training (eval.export_on_best, export_format,
max_exports_to_keep)."""

import inspect
import json
import logging
import os
import shutil

import numpy as np
import pytest
import tensorflow as tf

from conftest import FIXTURES, ONMT_FIXTURE
from training_helpers import TINY_MODEL, params_section, training_config
from opennmt_lite import build
from opennmt_lite.checkpointing.names import named_trainable, named_variables
from opennmt_lite.checkpointing.onmt_names import load_onmt_model
from opennmt_lite.checkpointing.store import contents, read
from opennmt_lite.checkpointing.training_checkpoint import (
    TRAINED_WEIGHTS, restored_trained_weights, training_checkpoint)
from opennmt_lite.config import MIXED_PRECISION_POLICIES, ConfigError, build_config
from opennmt_lite.hyperparameters import ModelHyperparameters
from opennmt_lite.models import Transformer
from opennmt_lite.training.moving_average import MovingAverage
from opennmt_lite.training.regularization import penalized_weights, weight_penalty
from opennmt_lite.training.step import TrainStep, batch_gradients, clip_global_norm

DECAY = 0.9


def numpy_moving_average(trained, decay):
    """The reference: tf.train.ExponentialMovingAverage(decay, num_updates=step) started at the
    first update from its weights; trained = [(step, weights)] in step order."""
    average = None
    for step, weights in trained:
        if average is None:
            average = np.array(weights, np.float64)
            continue
        d = min(decay, (1.0 + step) / (10.0 + step))
        average = average - (average - weights) * (1.0 - d)
    return average


LOSSES = {1: 5.0, 2: 4.0, 3: 3.0, 4: 3.5, 5: 2.0}  # step 3's export fails (below)


@pytest.fixture(scope="module")
def averaged_run(tmp_path_factory):
    """5 updates of 2 accumulated batches each with a moving average, a checkpoint and an
    evaluation at every step, exporting the best loss; the evaluation's metrics are LOSSES (its
    computation replaced), and at step 3 a file stands where the export folder should be."""
    tf.config.experimental.enable_op_determinism()
    tmp_path = tmp_path_factory.mktemp("average")
    config = training_config(tmp_path, model=TINY_MODEL, train={
        "max_step": 5, "save_checkpoints_steps": 1, "moving_average_decay": DECAY},
        eval={"steps": 1, "export_on_best": "loss", "export_format": "checkpoint",
              "max_exports_to_keep": 2})
    trainer = build.trainer(config)
    export = os.path.join(config.model_dir, "export")
    evaluated = {}

    def compute(step):
        evaluated[step] = {p: w.numpy().copy() for p, w in named_trainable(trainer.model).items()}
        if step == 3:
            os.replace(export, export + ".aside")
            open(export, "w").close()
        elif step == 4:
            os.remove(export)
            os.replace(export + ".aside", export)
        return {"step": step, "loss": LOSSES[step], "perplexity": float(np.exp(LOSSES[step]))}

    trainer.evaluator.compute = compute
    records = []
    handler = logging.Handler()
    handler.emit = records.append
    logging.getLogger("opennmt_lite").addHandler(handler)
    try:
        summary = trainer.run()
    finally:
        logging.getLogger("opennmt_lite").removeHandler(handler)
    return config, trainer, summary, evaluated, records


def checkpoint_values(prefix, paths, under="model"):
    return read(prefix, [f"{under}/{p}" for p in paths])


def test_moving_average_follows_opennmt_rule_and_is_what_checkpoints_hold(averaged_run):
    config, trainer, _, evaluated, _ = averaged_run
    directory = os.path.join(config.model_dir, "checkpoints")
    paths = list(named_trainable(trainer.model))
    checked = paths[:3] + ["decoder/output_layer/kernel", "encoder/layers/1/ffn/layer/inner/kernel"]
    steps = {step: {**checkpoint_values(os.path.join(directory, f"ckpt-{step}"), checked),
                    **checkpoint_values(os.path.join(directory, f"ckpt-{step}"), checked, TRAINED_WEIGHTS)}
             for step in range(1, 6)}
    for path in checked:
        trained = [(step, values[f"{TRAINED_WEIGHTS}/{path}"]) for step, values in steps.items()]
        assert not np.array_equal(trained[0][1], trained[-1][1])  # the weights moved
        for last in range(1, 6):
            expected = numpy_moving_average(trained[:last], DECAY)
            np.testing.assert_allclose(steps[last][f"model/{path}"], expected, rtol=1e-5, atol=1e-6,
                                       err_msg=f"{path} at step {last}")
        # once the decay applies (step 2 on) the average is not the weights
        assert np.abs(steps[5][f"model/{path}"] - trained[-1][1]).max() > 1e-6
    final = checkpoint_values(os.path.join(directory, "ckpt-5"), paths)
    trained = checkpoint_values(os.path.join(directory, "ckpt-5"), paths, TRAINED_WEIGHTS)
    for path, weight in named_trainable(trainer.model).items():
        # training goes on with the trained weights; each evaluation saw the averages
        np.testing.assert_array_equal(weight.numpy(), trained[f"{TRAINED_WEIGHTS}/{path}"])
        np.testing.assert_array_equal(trainer.moving_average.averages[path].numpy(), final[f"model/{path}"])
        np.testing.assert_array_equal(evaluated[5][path], final[f"model/{path}"])


def test_best_exports_kept_and_a_failed_export_does_not_stop_training(averaged_run):
    config, _, summary, _, records = averaged_run
    export = os.path.join(config.model_dir, "export")
    assert summary["step"] == 5 and summary["stopped"] == "max_step"
    # best losses at steps 1, 2, 3 (export failed), 5; the newest 2 kept
    assert sorted(os.listdir(export)) == ["2", "5"]
    errors = [r.getMessage() for r in records if r.levelno >= logging.ERROR]
    assert errors == [f"export to {export}/3 failed, training goes on: File exists (EEXIST)"]
    # the best model exported is step 5's averaged weights
    exported = contents(os.path.join(export, "5"))
    averaged = contents(os.path.join(config.model_dir, "checkpoints", "ckpt-5"))
    names = [n for n in exported if n.startswith("model/")]
    assert names and set(names) <= set(averaged)
    ours = read(os.path.join(export, "5", "ckpt-5"), names)
    reference = read(os.path.join(config.model_dir, "checkpoints", "ckpt-5"), names)
    for name in names:
        np.testing.assert_array_equal(ours[name], reference[name], err_msg=name)


def test_resumed_run_with_moving_average_equals_uninterrupted_run(averaged_run, tmp_path):
    """The run resumed from the averaged run's ckpt-3 reaches its step 5 state exactly."""
    config, straight = averaged_run[:2]
    resumed_config = training_config(tmp_path, model=TINY_MODEL, train={
        "max_step": 5, "save_checkpoints_steps": 1, "moving_average_decay": DECAY})
    directory = os.path.join(resumed_config.model_dir, "checkpoints")
    os.makedirs(directory)
    for name in os.listdir(os.path.join(config.model_dir, "checkpoints")):
        if name.startswith("ckpt-3."):
            shutil.copy(os.path.join(config.model_dir, "checkpoints", name), directory)
    resumed = build.trainer(resumed_config)
    assert resumed.step == 3
    resumed.run()
    for (path, a), b in zip(named_trainable(straight.model).items(), named_trainable(resumed.model).values()):
        np.testing.assert_array_equal(a.numpy(), b.numpy(), err_msg=path)
        np.testing.assert_array_equal(straight.moving_average.averages[path].numpy(),
                                      resumed.moving_average.averages[path].numpy(), err_msg=path)


def test_checkpoint_without_averages_loads_with_moving_average(tmp_path):
    """A checkpoint written without train.moving_average_decay (or by an older version) restores
    into a training checkpoint with averages: weights and averages both from its model/ values."""
    model = Transformer(ModelHyperparameters(num_layers=1, num_units=16, num_heads=2, ffn_inner_dim=32), 20, 20)
    model.build()
    optimizer = build.optimizer(params_section({}))
    optimizer.build(model.trainable_variables)
    saved = training_checkpoint(model, optimizer, save_dir=str(tmp_path)).save(7)
    expected = {p: v.numpy().copy() for p, v in named_trainable(model).items()}
    for v in model.trainable_variables:
        v.assign(tf.zeros_like(v))
    average = MovingAverage(model, DECAY)
    checkpoint = training_checkpoint(model, optimizer, save_dir=str(tmp_path), averages=average.averages)
    assert checkpoint.restore() == saved and not restored_trained_weights(checkpoint)
    for path, weight in named_trainable(model).items():
        np.testing.assert_array_equal(weight.numpy(), expected[path])
        np.testing.assert_array_equal(average.averages[path].numpy(), expected[path])
    # saved with averages, it holds both; restored again, it reads both
    for path, average in average.averages.items():
        average.assign(average + 1.0)
    checkpoint.save(8)
    assert checkpoint.restore().endswith("ckpt-8") and restored_trained_weights(checkpoint)
    # without a moving average (averaging, vocabulary update, inference): the averages
    plain = training_checkpoint(model, optimizer, save_dir=str(tmp_path))
    assert plain.restore().endswith("ckpt-8")
    for path, weight in named_trainable(model).items():
        np.testing.assert_allclose(weight.numpy(), expected[path] + 1.0, rtol=1e-6)


@pytest.fixture(scope="module")
def onmt_model():
    model = Transformer(ModelHyperparameters(num_layers=2, num_units=64, num_heads=2, ffn_inner_dim=128,
                                             maximum_relative_position=8, dropout=0.0,
                                             attention_dropout=0.0, ffn_dropout=0.0), 801, 801)
    load_onmt_model(str(ONMT_FIXTURE), model)
    return model


def test_regularization_penalty_equals_opennmt(onmt_model):
    with open(FIXTURES / "onmt_regularization" / "penalties.json", encoding="utf-8") as f:
        expected = json.load(f)
    weights = penalized_weights(onmt_model)
    assert len(onmt_model.trainable_variables) == expected["trainable_weights"]
    assert len(weights) == expected["trainable_weights"] - len(expected["excluded_as_bias"])
    for kind, scale in expected["scale"].items():
        params = params_section({"regularization": {"type": kind.upper(), "scale": scale}})
        penalty = float(weight_penalty(weights, build.regularization_scales(params)))
        assert abs(penalty - expected["penalty"][kind]) <= 1e-5 * expected["penalty"][kind], kind


def test_regularization_is_added_once_to_the_batch_summed_loss(onmt_model):
    expected = np.load(ONMT_FIXTURE / "expected.npz")
    batch = {k: tf.constant(expected[k]) for k in ("source_ids", "source_length", "target_ids_in",
                                                   "target_ids_out", "target_length")}
    optimizer = build.optimizer(params_section({}))
    l2 = 1e-3
    plain, loss, normalizer = batch_gradients(onmt_model, optimizer, batch, 0.1, True)
    penalized, penalized_loss, _ = batch_gradients(onmt_model, optimizer, batch, 0.1, True,
                                                   sub_batches=2, regularization=(0.0, l2))
    penalty = float(weight_penalty(penalized_weights(onmt_model), (0.0, l2)))
    # the summed (not normalised) loss gains the penalty once, whatever the sub-batches
    assert float(normalizer) == float(expected["loss_normalizer_train"])
    assert abs(float(penalized_loss) - float(loss) - penalty) <= 1e-4 * float(penalized_loss)
    path_of = {id(v): p for p, v in named_trainable(onmt_model).items()}
    for weight, a, b in zip(onmt_model.trainable_variables, plain, penalized):
        path = path_of[id(weight)]
        difference = tf.convert_to_tensor(b).numpy() - tf.convert_to_tensor(a).numpy()
        expected_difference = 0.0 if path.endswith("/bias") else 2 * l2 * weight.numpy()
        np.testing.assert_allclose(difference, expected_difference, atol=2e-5, err_msg=path)


def test_clip_global_norm_values():
    grads = [tf.constant([3.0, 0.0]), tf.constant([[0.0, 4.0]])]  # global norm 5
    clipped = clip_global_norm(grads, 1.0)
    np.testing.assert_allclose(clipped[0].numpy(), [0.6, 0.0], rtol=1e-6)
    np.testing.assert_allclose(clipped[1].numpy(), [[0.0, 0.8]], rtol=1e-6)
    unchanged = clip_global_norm(grads, 10.0)
    np.testing.assert_array_equal(unchanged[1].numpy(), [[0.0, 4.0]])
    diverged = clip_global_norm([tf.constant([np.inf, 1.0])], 1.0)
    assert np.isnan(diverged[0].numpy()).all()  # (loss scaling then skips the update)


@pytest.mark.parametrize("mixed_precision", ["false", "float16"])
def test_clip_gradients_bounds_each_update(mixed_precision):
    """Through the real step (2 accumulated batches, normalised, loss scale removed): plain SGD
    with rate 1 moves the weights by exactly the clipped gradient, of global norm clip_gradients."""
    model = Transformer(ModelHyperparameters(num_layers=1, num_units=16, num_heads=2, ffn_inner_dim=32,
                                             dropout=0.0, attention_dropout=0.0, ffn_dropout=0.0), 20, 20)
    model.build()
    params = {"optimizer": "SGD", "learning_rate": 1.0}
    optimizer = build.optimizer(params_section(params), MIXED_PRECISION_POLICIES[mixed_precision])
    optimizer.build(model.trainable_variables)
    rng = np.random.default_rng(3)
    batch = {"source_ids": rng.integers(3, 20, (4, 6)).astype(np.int32),
             "source_length": np.array([6, 5, 4, 6], np.int32),
             "target_ids_in": rng.integers(3, 20, (4, 5)).astype(np.int32),
             "target_ids_out": rng.integers(3, 20, (4, 5)).astype(np.int32),
             "target_length": np.array([5, 5, 3, 4], np.int32)}
    step = TrainStep(model, optimizer, accum_steps=2, clip_gradients=1e-3)
    before = [v.numpy().copy() for v in model.trainable_variables]
    step(((batch, batch),))
    moved = [v.numpy() - b for v, b in zip(model.trainable_variables, before)]
    assert np.sqrt(sum(float(np.sum(m.astype(np.float64) ** 2)) for m in moved)) == pytest.approx(1e-3, rel=1e-4)


@pytest.mark.parametrize("section, value, message", [
    ("eval", {"export_on_best": "bleu"},
     "eval.export_on_best: 'bleu' is never computed; choose one of loss, perplexity"),
    ("eval", {"export_format": "onnx"}, "eval.export_format: must be one of saved_model"),
    ("params", {"regularization": {"type": "l3", "scale": 1}}, "params.regularization.type: must be one of"),
    ("params", {"regularization": {"type": "l1_l2", "scale": 0.1}},
     r"params.regularization.scale: l1_l2 takes a list of 2 scales"),
    ("params", {"clip_gradients": 1.0, "optimizer_params": {"global_clipnorm": 1.0}},
     "params.clip_gradients and params.optimizer_params.global_clipnorm both clip"),
    ("train", {"moving_average_decay": 1.5}, "train.moving_average_decay must be at most 1"),
])
def test_bad_values_are_one_line_config_errors(section, value, message):
    user = {"model_dir": "unused", "auto_config": False, "model": TINY_MODEL, section: value}
    with pytest.raises(ConfigError, match=message) as error:
        build_config(user)
    assert "\n" not in str(error.value)


def test_clip_gradients_warns_that_opennmt_tf_2_ignores_it(tmp_path, caplog):
    """OpenNMT-tf 2.32 reads params.clip_gradients no more (its v1 converter makes it
    optimizer_params.clipnorm): loading it says, in one line, that opennmt-lite clips."""
    from opennmt_lite.config import load_config

    path = tmp_path / "clip.yml"
    path.write_text(json.dumps({"model_dir": str(tmp_path), "auto_config": False,
                                "model": TINY_MODEL, "params": {"clip_gradients": 5.0}}))
    with caplog.at_level(logging.WARNING, logger="opennmt_lite"):
        assert load_config(str(path)).params.clip_gradients == 5.0
    lines = [r.getMessage() for r in caplog.records if "clip_gradients" in r.getMessage()]
    assert len(lines) == 1 and "OpenNMT-tf 2.32 ignores the key" in lines[0]
    caplog.clear()
    path.write_text(json.dumps({"model_dir": str(tmp_path), "auto_config": False, "model": TINY_MODEL}))
    with caplog.at_level(logging.WARNING, logger="opennmt_lite"):
        load_config(str(path))
    assert not [r for r in caplog.records if "clip_gradients" in r.getMessage()]


def test_export_formats_are_wired(tmp_path, monkeypatch):
    config = training_config(tmp_path, model=TINY_MODEL, eval={"export_on_best": "loss",
                                                               "export_format": "ctranslate2_int8"})
    assets = build.assets(config.data)
    model = build.model(config.model, assets)
    exporter = build.best_model_exporter(config, model, assets)
    exporter(str(tmp_path / "out"), 3)
    assert (tmp_path / "out" / "model.bin").is_file()
    assert json.loads((tmp_path / "out" / "decoding.json").read_text())["quantization"] == "int8"
    tflite = training_config(tmp_path, model=TINY_MODEL, eval={"export_on_best": "loss",
                                                               "export_format": "tflite_float16"})
    # (exporting is the TFLite tests' business: here, that the call fits the TFLite export's
    # signature and asks for float16 where the evaluator asks)
    from opennmt_lite.export import tflite as tflite_export

    calls, signature = [], inspect.signature(tflite_export.export_model)
    monkeypatch.setattr(tflite_export, "export_model", lambda *args, **kwargs: calls.append(
        signature.bind(*args, **kwargs).arguments))
    build.best_model_exporter(tflite, model, assets)(str(tmp_path / "lite"), 3)
    assert calls[0]["output_dir"] == str(tmp_path / "lite") and calls[0]["quantization"] == "float16"


def test_opennmt_checkpoint_trains_on_with_moving_average_and_export_on_best(tmp_path):
    """An OpenNMT-tf 2.32 model_dir (the relative-position fixture at step 500) trains on with
    both options: the average starts from the imported weights' first update, as OpenNMT-tf's."""
    model_dir = tmp_path / "run"
    model_dir.mkdir()
    for name in os.listdir(ONMT_FIXTURE):
        if name.startswith("ckpt-500.") or name in ("checkpoint", "src-vocab.txt", "tgt-vocab.txt"):
            shutil.copy(ONMT_FIXTURE / name, model_dir)
    first100, first8 = ONMT_FIXTURE / "test.first100.tok", ONMT_FIXTURE / "test.first8.tok"
    user = {
        "model_dir": str(model_dir), "auto_config": False,
        "model": {"num_layers": 2, "num_units": 64, "num_heads": 2, "ffn_inner_dim": 128,
                  "maximum_relative_position": 8, "pre_norm": True},
        "data": {"source_vocabulary": "src-vocab.txt", "target_vocabulary": "tgt-vocab.txt",
                 "train_features_file": f"{first100}.en", "train_labels_file": f"{first100}.de",
                 "eval_features_file": f"{first8}.en", "eval_labels_file": f"{first8}.de"},
        "params": {"optimizer": "LazyAdam", "optimizer_params": {"beta_1": 0.9, "beta_2": 0.998},
                   "learning_rate": 1.0, "decay_type": "NoamDecay",
                   "decay_params": {"model_dim": 64, "warmup_steps": 200}, "label_smoothing": 0.1},
        "train": {"batch_type": "examples", "batch_size": 16, "max_step": 502,
                  "save_checkpoints_steps": 1, "moving_average_decay": 0.9999},
        "eval": {"steps": 1, "export_on_best": "loss", "export_format": "checkpoint"},
    }
    trainer = build.trainer(build_config(user))
    assert trainer.step == 500
    summary = trainer.run()
    assert summary["step"] == 502
    directory = model_dir / "checkpoints"
    paths = ["decoder/output_layer/kernel", "encoder/layers/0/ffn/layer/inner/kernel"]
    trained = {s: checkpoint_values(str(directory / f"ckpt-{s}"), paths, TRAINED_WEIGHTS) for s in (501, 502)}
    averaged = {s: checkpoint_values(str(directory / f"ckpt-{s}"), paths) for s in (501, 502)}
    for path in paths:
        reference = numpy_moving_average(
            [(s, trained[s][f"{TRAINED_WEIGHTS}/{path}"]) for s in (501, 502)], 0.9999)
        np.testing.assert_array_equal(averaged[501][f"model/{path}"], trained[501][f"{TRAINED_WEIGHTS}/{path}"])
        np.testing.assert_allclose(averaged[502][f"model/{path}"], reference, rtol=1e-5, atol=1e-7)
    exports = sorted(os.listdir(model_dir / "export"))
    assert exports and set(exports) <= {"501", "502"}
