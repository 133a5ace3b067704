"""Training that loses nothing when interrupted: SIGTERM saves and exits, SIGKILL at any moment
leaves a readable checkpoint, and resumed runs end with the weights of an uninterrupted run."""

import json
import os
import random
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf
import yaml

from data_helpers import REPO
from training_helpers import TINY_MODEL, training_user

RUN = [sys.executable, os.path.join(REPO, "run.py"), "train", "--config"]
# Deterministic kernels, so that a resumed run can be compared bit for bit.
ENV = dict(os.environ, TF_DETERMINISTIC_OPS="1", TF_CPP_MIN_LOG_LEVEL="3")


def write_config(tmp_path, name, **train):
    config = training_user(tmp_path / name, model=TINY_MODEL,
                             train={"save_checkpoints_steps": 2, "save_summary_steps": 1, **train})
    path = tmp_path / f"{name}.yml"
    path.write_text(yaml.safe_dump(config))
    return str(path), config["model_dir"]


def final_weights(model_dir):
    reader = tf.train.load_checkpoint(os.path.join(model_dir, "checkpoints"))
    return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()
            if name.startswith("model/")}, reader


def wait_for_step(model_dir, step, process, timeout=240):
    """Waits until metrics.jsonl reports `step` (or the process ends)."""
    path = os.path.join(model_dir, "metrics.jsonl")
    deadline = time.time() + timeout
    while time.time() < deadline and process.poll() is None:
        if os.path.exists(path):
            with open(path) as f:
                steps = [json.loads(line)["step"] for line in f if line.strip()]
            if steps and steps[-1] >= step:
                return steps[-1]
        time.sleep(0.05)
    raise AssertionError(f"step {step} not reached (exit code {process.poll()})")


def test_sigterm_saves_a_checkpoint_at_the_step_it_stopped(tmp_path):
    config, model_dir = write_config(tmp_path, "term", max_step=500, save_checkpoints_steps=1000)
    process = subprocess.Popen(RUN + [config], env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    wait_for_step(model_dir, 4, process)
    process.send_signal(signal.SIGTERM)
    output, _ = process.communicate(timeout=120)
    assert process.returncode == 143, output  # 128 + SIGTERM, after saving
    assert "SIGTERM received" in output and "run the same command to continue" in output
    with open(os.path.join(model_dir, "metrics.jsonl")) as f:
        last_step = [json.loads(line)["step"] for line in f][-1]
    latest = tf.train.latest_checkpoint(os.path.join(model_dir, "checkpoints"))
    assert latest.endswith(f"ckpt-{last_step}") and last_step < 500
    _, reader = final_weights(model_dir)
    assert reader.get_tensor("optimizer/iterations/.ATTRIBUTES/VARIABLE_VALUE") == last_step


def test_sigkill_at_random_steps_then_resume_equals_uninterrupted(tmp_path):
    max_step = 12
    straight_config, straight_dir = write_config(tmp_path, "straight", max_step=max_step)
    subprocess.run(RUN + [straight_config], env=ENV, check=True, capture_output=True, timeout=300)

    config, model_dir = write_config(tmp_path, "killed", max_step=max_step)
    rng = random.Random(3)
    kills = 0
    for _ in range(3):
        process = subprocess.Popen(RUN + [config], env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        target = rng.randint(2, max_step - 2)
        try:
            wait_for_step(model_dir, target, process)
            time.sleep(rng.uniform(0.0, 0.3))  # anywhere: mid-step, mid-save...
            process.kill()
            kills += 1
        except AssertionError:
            pass  # it finished before the kill
        process.wait(timeout=60)
        # whatever the moment, the latest checkpoint is complete and readable
        latest = tf.train.latest_checkpoint(os.path.join(model_dir, "checkpoints"))
        assert latest is not None
        tf.train.load_checkpoint(latest).get_tensor("optimizer/iterations/.ATTRIBUTES/VARIABLE_VALUE")
    assert kills >= 2
    result = subprocess.run(RUN + [config], env=ENV, capture_output=True, text=True, timeout=300)
    assert result.returncode in (0, 2), result.stderr  # 2: already at max_step
    if result.returncode == 2:
        assert "reaches train.max_step" in result.stderr
    # the resumed run deleted what killed saves left (TensorFlow's ckpt-N_temp/ folders)
    assert not [n for n in os.listdir(os.path.join(model_dir, "checkpoints")) if n.endswith("_temp")]

    straight, _ = final_weights(straight_dir)
    resumed, reader = final_weights(model_dir)
    assert reader.get_tensor("optimizer/iterations/.ATTRIBUTES/VARIABLE_VALUE") == max_step
    # one group of batches per optimizer step: nothing skipped, nothing consumed twice
    assert reader.get_tensor("data/groups_done/.ATTRIBUTES/VARIABLE_VALUE") == max_step
    assert straight.keys() == resumed.keys()
    for name in straight:
        np.testing.assert_array_equal(resumed[name], straight[name], err_msg=name)
