"""Training on Keras' JAX backend (training/jax_step.py) against the TensorFlow backend's
(training/step.py): from the same initial weights and the same batches (tests/
jax_training_case.py: accumulation of 2 batches, label smoothing, example weights, gradient
clipping, Adam with OpenNMT-tf's constants and the Noam schedule), the float32 loss of each of the
30 updates within 1e-4 relative, the same learning rates, and the trained weights close; and
`run.py train` on JAX killed (SIGKILL) after a checkpoint, then resumed, ends bit for bit as the
uninterrupted run (weights, moving averages, optimizer state, every reported loss)."""

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import yaml

import jax_training_case as case
import jax_worker
from data_helpers import REPO
from opennmt_lite.checkpointing.bundle import read_bundle


@pytest.fixture(scope="module")
def jax_side(tmp_path_factory):
    arrays, _ = jax_worker.run("training", tmp_path_factory.mktemp("jax_training"))
    return arrays


@pytest.fixture(scope="module")
def tensorflow_side():
    """The same run by the TensorFlow backend's TrainStep (this process)."""
    return case.tensorflow_run()


def test_losses_of_30_updates_equal_tensorflow(jax_side, tensorflow_side):
    tf_losses, _, _ = tensorflow_side
    jax_losses = jax_side["loss"]
    assert len(jax_losses) == len(tf_losses) == case.UPDATES
    # (the model learns: the comparison is not between two constant sequences)
    assert tf_losses[-5:].mean() < tf_losses[:5].mean() - 0.1
    relative = np.abs(jax_losses - tf_losses) / np.abs(tf_losses)
    assert relative.max() <= 1e-4, (relative.max(), int(relative.argmax()))


def test_learning_rates_follow_the_same_schedule(jax_side, tensorflow_side):
    _, tf_rates, _ = tensorflow_side
    np.testing.assert_allclose(jax_side["learning_rate"], tf_rates, rtol=1e-6)


def test_trained_weights_close_to_tensorflow(jax_side, tensorflow_side):
    """After 30 Adam updates each weight agrees within 0.5 % of its norm: float32 noise amplified
    by Adam, which turns rounding noise on entries whose exact gradient is (nearly) zero into
    full-size steps (the attention's key biases, to which softmax is invariant, are left out)."""
    _, _, tf_weights = tensorflow_side
    compared = 0
    for name, value in tf_weights.items():
        if "linear_keys/bias" in name:
            continue
        got = jax_side[f"weight/{name}"]
        assert got.shape == value.shape, name
        difference = np.linalg.norm(got - value) / np.linalg.norm(value)
        assert difference <= 5e-3, (name, difference)
        compared += 1
    assert compared > 20


# -- run.py train on JAX: killed after a checkpoint, resumed = uninterrupted ------------------

RUN = [sys.executable, os.path.join(REPO, "run.py"), "train", "--config"]
WORDS = [f"w{i}" for i in range(30)]


def write_corpus(directory):
    """A pre-tokenized copy task (each target the source reversed), 300 pairs, and its one
    vocabulary: no tokenizer to train."""
    rng = np.random.default_rng(0)
    directory.mkdir()
    sources = [list(rng.choice(WORDS, rng.integers(2, 12))) for _ in range(300)]
    (directory / "train.src").write_text("".join(" ".join(s) + "\n" for s in sources))
    (directory / "train.tgt").write_text("".join(" ".join(s[::-1]) + "\n" for s in sources))
    (directory / "vocab.txt").write_text("\n".join(["<blank>", "<s>", "</s>"] + WORDS) + "\n")
    return directory


def write_run_config(tmp_path, data, name, max_step):
    """A one-layer model with dropout (so that the dropout seeds' state must resume too), 2
    accumulated batches per update in the XLA planner's 2 shapes, label smoothing, a moving
    average, a checkpoint every 4 updates, a report every update."""
    config = {
        "model_dir": str(tmp_path / name),
        "data": {"train_features_file": str(data / "train.src"),
                 "train_labels_file": str(data / "train.tgt"),
                 "source_vocabulary": str(data / "vocab.txt"),
                 "target_vocabulary": str(data / "vocab.txt")},
        "model": {"num_layers": 1, "num_units": 32, "num_heads": 2, "ffn_inner_dim": 64,
                  "maximum_relative_position": 4, "dropout": 0.1, "attention_dropout": 0.1,
                  "ffn_dropout": 0.1},
        "params": {"optimizer": "Adam", "learning_rate": 1.0, "decay_type": "NoamDecay",
                   "decay_params": {"model_dim": 32, "warmup_steps": 10},
                   "label_smoothing": 0.1},
        "train": {"batch_type": "tokens", "batch_size": 256, "effective_batch_size": 512,
                  "max_step": max_step, "save_checkpoints_steps": 4, "save_summary_steps": 1,
                  "seed": 3, "xla_shapes": 2, "moving_average_decay": 0.99,
                  "average_last_checkpoints": 0},
    }
    path = tmp_path / f"{name}.yml"
    path.write_text(yaml.safe_dump(config))
    return str(path), config["model_dir"]


def reported_losses(model_dir):
    """{step: [loss of every report of that step]} of metrics.jsonl (a killed run's reports and
    its resumed run's may repeat steps)."""
    losses = {}
    with open(os.path.join(model_dir, "metrics.jsonl"), encoding="utf-8") as f:
        for line in f:
            record = json.loads(line)
            losses.setdefault(record["step"], []).append(record["loss"])
    return losses


def wait_for_step(model_dir, step, process, timeout=600):
    """Waits until metrics.jsonl reports `step`; returns the last step reported."""
    path = os.path.join(model_dir, "metrics.jsonl")
    deadline = time.time() + timeout
    while time.time() < deadline and process.poll() is None:
        try:
            steps = list(reported_losses(model_dir)) if os.path.exists(path) else []
        except ValueError:  # (a line being written)
            steps = []
        if steps and steps[-1] >= step:
            return steps[-1]
        time.sleep(0.005)  # (compiled programs cached, an update takes milliseconds)
    raise AssertionError(f"step {step} not reached (exit code {process.poll()})")


def test_killed_run_resumes_bit_identical_to_the_uninterrupted_one(tmp_path):
    env = dict(os.environ, KERAS_BACKEND="jax", JAX_PLATFORMS="cpu",
               JAX_COMPILATION_CACHE_DIR=str(tmp_path / "jax_cache"))
    data = write_corpus(tmp_path / "data")
    max_step = 30
    straight_config, straight_dir = write_run_config(tmp_path, data, "straight", max_step)
    done = subprocess.run(RUN + [straight_config], env=env, capture_output=True, text=True,
                          timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]

    config, model_dir = write_run_config(tmp_path, data, "killed", max_step)
    process = subprocess.Popen(RUN + [config], env=env, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    try:
        killed_at = wait_for_step(model_dir, 5, process)  # (after the checkpoint of step 4)
        process.send_signal(signal.SIGKILL)
    finally:
        process.kill()
        process.wait(timeout=60)
    assert killed_at < max_step
    checkpoints = os.path.join(model_dir, "checkpoints")
    assert not os.path.exists(os.path.join(checkpoints, f"ckpt-{max_step}.index"))
    resumed = subprocess.run(RUN + [config], env=env, capture_output=True, text=True,
                             timeout=900)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "restored" in resumed.stderr.lower() or "resum" in resumed.stderr.lower(), \
        resumed.stderr[-3000:]

    straight = read_bundle(os.path.join(straight_dir, "checkpoints", f"ckpt-{max_step}"))
    ours = read_bundle(os.path.join(checkpoints, f"ckpt-{max_step}"))
    assert ours["data/groups_done/.ATTRIBUTES/VARIABLE_VALUE"] == max_step
    assert straight.keys() == ours.keys()
    # weights (the averages and the trained ones), dropout seeds, optimizer slots and step
    assert any("moving_average/trained_weights" in name for name in ours)
    for name, value in straight.items():
        np.testing.assert_array_equal(ours[name], value, err_msg=name)
    # every reported loss, the killed run's and the resumed run's, equals the straight run's
    expected, got = reported_losses(straight_dir), reported_losses(model_dir)
    assert sorted(got) == sorted(expected) == list(range(1, max_step + 1))
    for step, losses in got.items():
        assert losses == expected[step] * len(losses), step
    assert any(len(losses) > 1 for losses in got.values())  # (steps done twice: the kill's)
