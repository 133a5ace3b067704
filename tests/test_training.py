"""Training runs on a slice of the shipped corpus: learning, checkpoints, resume, NaN stop."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from data_helpers import REPO
from training_helpers import TINY_MODEL, training_config
from opennmt_lite.checkpointing.names import named_variables, optimizer_state
from opennmt_lite.checkpointing.store import contents
from opennmt_lite import build
from opennmt_lite.training.trainer import TrainingError


def reports(model_dir):
    with open(os.path.join(model_dir, "metrics.jsonl"), encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def test_sample_model_training_loss_falls(tmp_path):
    config = training_config(tmp_path, train={"max_step": 40, "save_summary_steps": 1})
    summary = build.trainer(config).run()
    assert summary["step"] == 40 and summary["stopped"] == "max_step"
    losses = [r["loss"] for r in reports(config.model_dir)]
    assert len(losses) == 40  # one report per step
    # label-smoothed cross-entropy starts near log(1001) = 6.9 and must clearly fall
    assert losses[0] > 6.5
    assert np.mean(losses[-5:]) < losses[0] - 1.0, losses
    assert all(r["tokens_per_sec"] > 0 and r["learning_rate"] > 0 for r in reports(config.model_dir))


def test_checkpoint_holds_every_variable_and_slot(tmp_path):
    config = training_config(tmp_path, model=TINY_MODEL, train={"max_step": 2})
    trainer = build.trainer(config)
    trainer.run()
    stored = contents(trainer.checkpoint.latest)
    weights = named_variables(trainer.model, include_seeds=False)
    all_model = named_variables(trainer.model)
    # every model variable, including those of layers kept in Python lists (encoder.layers,
    # decoder.layers, decoder layers' attention list), by name and shape
    for path, variable in all_model.items():
        assert stored[f"model/{path}"] == tuple(variable.shape), path
    assert any(p.startswith("decoder/layers/1/attention/0/layer/linear_keys") for p in weights)
    assert len([n for n in stored if n.startswith("model/")]) == len(all_model)
    # 2 embeddings + encoder (final norm 2, 18 per layer) + decoder (final norm 2, 28 per layer:
    # self-attention 10, memory attention 8, 3 norms 6, FFN 4) + output layer 2
    assert len(weights) == len(trainer.model.weights) == 2 + (2 + 2 * 18) + (2 + 2 * 28) + 2
    # every Adam slot: m and v of each trainable variable, and the step
    trainable = [p for p, v in weights.items() if v.trainable]
    for slot in ("m", "v"):
        names = {n for n in stored if n.startswith(f"optimizer/{slot}/")}
        assert names == {f"optimizer/{slot}/{p}" for p in trainable}
    assert "optimizer/iterations" in stored and "data/groups_done" in stored
    # (+ tf.train.Checkpoint's own save_counter)
    assert len(stored) == len(all_model) + 2 * len(trainable) + 3


def capture(trainer):
    state = optimizer_state(trainer.optimizer, {
        p: v for p, v in named_variables(trainer.model, include_seeds=False).items() if v.trainable})
    return {
        "step": trainer.step,
        "learning_rate": float(trainer.optimizer.learning_rate.numpy()),
        "groups_done": int(trainer.groups_done.numpy()),
        "slots": {k: v.numpy().copy() for k, v in state.items()},
        "model": {k: v.numpy().copy() for k, v in named_variables(trainer.model).items()},
    }


def test_stop_and_resume_restores_step_learning_rate_and_moments(tmp_path):
    first = build.trainer(training_config(tmp_path, model=TINY_MODEL, train={"max_step": 6}))
    first.run()
    saved = capture(first)
    assert saved["step"] == 6

    second = build.trainer(training_config(tmp_path, model=TINY_MODEL, train={"max_step": 9}))
    restored = capture(second)
    assert restored["step"] == 6 and restored["groups_done"] == 6
    assert restored["learning_rate"] == saved["learning_rate"]
    for name, value in saved["slots"].items():
        np.testing.assert_array_equal(restored["slots"][name], value, err_msg=name)
    for name, value in saved["model"].items():  # weights and dropout seed states
        np.testing.assert_array_equal(restored["model"][name], value, err_msg=name)
    summary = second.run()
    assert summary["step"] == 9
    assert os.path.basename(summary["checkpoint"]) == "ckpt-9"


@pytest.mark.parametrize("sub_batches", [1, 2])
def test_resumed_run_equals_uninterrupted_run(tmp_path, sub_batches):
    """N steps, stop, resume to N+M == N+M steps at once (data position and dropout restored),
    also with sub-batches computed side by side (their dropout draws do not depend on timing)."""
    tf.config.experimental.enable_op_determinism()
    train = {"sub_batches": sub_batches}
    straight = build.trainer(training_config(tmp_path / "a", model=TINY_MODEL, train={**train, "max_step": 8}))
    straight.run()
    build.trainer(training_config(tmp_path / "b", model=TINY_MODEL, train={**train, "max_step": 5})).run()
    resumed = build.trainer(training_config(tmp_path / "b", model=TINY_MODEL, train={**train, "max_step": 8}))
    resumed.run()
    for (name, a), b in zip(named_variables(straight.model).items(), named_variables(resumed.model).values()):
        np.testing.assert_array_equal(a.numpy(), b.numpy(), err_msg=name)


def test_nan_loss_stops_and_keeps_last_good_checkpoint(tmp_path):
    config = training_config(tmp_path, model=TINY_MODEL, train={"max_step": 30, "save_checkpoints_steps": 1000},
                             params={"learning_rate": 1e12, "decay_type": None})
    with pytest.raises(TrainingError, match=r"the loss is nan.*The last good checkpoint, .*ckpt-1, is kept"):
        build.trainer(config).run()
    directory = os.path.join(config.model_dir, "checkpoints")
    assert tf.train.latest_checkpoint(directory).endswith("ckpt-1")
    assert all(np.isfinite(np.asarray(tf.train.load_checkpoint(directory).get_tensor(
        "model/decoder/output_layer/kernel/.ATTRIBUTES/VARIABLE_VALUE"))).ravel())


def test_max_step_already_reached_is_a_clear_error(tmp_path):
    build.trainer(training_config(tmp_path, model=TINY_MODEL, train={"max_step": 2})).run()
    with pytest.raises(TrainingError, match="at step 2, which reaches train.max_step=2"):
        build.trainer(training_config(tmp_path, model=TINY_MODEL, train={"max_step": 2}))


def test_sub_batches_set_the_thread_pools_before_tensorflow_starts():
    """In a fresh process: as many inter-op threads as sub-batches, the cores shared among them
    for each op; once TensorFlow has started, a warning and the pools unchanged (no error)."""
    script = (
        "import logging, os; logging.basicConfig(level=logging.INFO)\n"
        "from opennmt_lite.training.step import configure_threads\n"
        "import tensorflow as tf\n"
        "configure_threads(2)\n"
        "tf.constant(1.0) + 1.0\n"
        "print('pools', tf.config.threading.get_inter_op_parallelism_threads(),"
        " tf.config.threading.get_intra_op_parallelism_threads(), os.cpu_count())\n"
        "configure_threads(3)\n"
        "print('after', tf.config.threading.get_inter_op_parallelism_threads())\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            cwd=REPO, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    pools = next(line for line in result.stdout.splitlines() if line.startswith("pools")).split()
    inter, intra, cores = map(int, pools[1:])
    assert inter == 2 and intra == max(1, cores // 2)
    assert "after 2" in result.stdout
    assert "train.sub_batches=3: TensorFlow has already started" in result.stderr


def test_end_of_training_average_of_the_last_checkpoints(tmp_path):
    """train.average_last_checkpoints: N after training writes <model_dir>/avg, holding the mean
    of the newest N checkpoints' weights (OpenNMT-tf's end-of-training average)."""
    from opennmt_lite.commands.train import average_at_end

    config = training_config(tmp_path, model=TINY_MODEL, train={
        "max_step": 3, "save_checkpoints_steps": 1, "keep_checkpoint_max": 5,
        "average_last_checkpoints": 2})
    build.trainer(config).run()
    path = average_at_end(config)
    assert os.path.dirname(path) == os.path.join(config.model_dir, "avg")
    name = "model/decoder/output_layer/kernel/.ATTRIBUTES/VARIABLE_VALUE"
    directory = os.path.join(config.model_dir, "checkpoints")
    newest = [tf.train.load_checkpoint(os.path.join(directory, f"ckpt-{step}")).get_tensor(name)
              for step in (2, 3)]
    assert not np.array_equal(*newest)  # the weights moved between the two
    average = tf.train.load_checkpoint(path).get_tensor(name)
    np.testing.assert_allclose(average, (newest[0] + newest[1]) / 2, rtol=0, atol=1e-7)
