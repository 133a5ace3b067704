"""A training run whose latest checkpoint or `checkpoint` state file got damaged: training
resumes from the newest intact checkpoint, the older intact ones survive the next saves, and
the commands that load weights (infer, export, evaluate, inspect) fall back the same way."""

import copy
import os
import re
import shutil

import numpy as np
import pytest
import tensorflow as tf

from opennmt_lite import build
from opennmt_lite.config import build_config
from training_helpers import TINY_MODEL, training_user

KERNEL = "model/decoder/output_layer/kernel/.ATTRIBUTES/VARIABLE_VALUE"


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A run saved at steps 1, 2, 4, 6 and keeping 3: ckpt-2, ckpt-4, ckpt-6."""
    root = tmp_path_factory.mktemp("damage")
    user = training_user(root, model=TINY_MODEL, train={
        "max_step": 6, "save_checkpoints_steps": 2, "keep_checkpoint_max": 3, "save_summary_steps": 1})
    build.trainer(build_config(user)).run()
    assert steps_on_disk(user["model_dir"]) == [2, 4, 6]
    return user


def steps_on_disk(model_dir):
    """Steps of the checkpoints with any file (index or data) in model_dir/checkpoints."""
    names = os.listdir(os.path.join(model_dir, "checkpoints"))
    return sorted({int(m.group(1)) for m in map(re.compile(r"^ckpt-(\d+)\.(index|data-)").match, names) if m})


def readable(prefix):
    reader = tf.train.load_checkpoint(prefix)
    for name in reader.get_variable_to_shape_map():
        reader.get_tensor(name)
    return True


def missing_index(directory):
    os.remove(os.path.join(directory, "ckpt-6.index"))


def truncated_data(directory):
    path = os.path.join(directory, "ckpt-6.data-00000-of-00001")
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) // 2)


def garbage_state_file(directory):
    with open(os.path.join(directory, "checkpoint"), "wb") as f:
        f.write(b"\x00\xff garbage {{")


def state_file_names_missing_checkpoint(directory):
    with open(os.path.join(directory, "checkpoint"), "w") as f:
        f.write('model_checkpoint_path: "ckpt-8"\nall_model_checkpoint_paths: "ckpt-8"\n')


# damage -> (step resumed from, steps on disk after one more step and its save)
CASES = {
    missing_index: (4, [2, 4, 5]),
    truncated_data: (4, [2, 4, 5]),
    garbage_state_file: (6, [4, 6, 7]),  # ckpt-2 rotated out: 3 newer intact ones exist
    state_file_names_missing_checkpoint: (6, [4, 6, 7]),
}


def damaged_copy(trained, tmp_path, damage):
    user = copy.deepcopy(trained)
    user["model_dir"] = str(tmp_path / "run")
    shutil.copytree(trained["model_dir"], user["model_dir"])
    damage(os.path.join(user["model_dir"], "checkpoints"))
    return user


@pytest.mark.parametrize("damage", list(CASES), ids=lambda f: f.__name__)
def test_training_resumes_from_the_newest_intact_checkpoint(trained, tmp_path, damage):
    user = damaged_copy(trained, tmp_path, damage)
    resumed_step, after = CASES[damage]
    directory = os.path.join(user["model_dir"], "checkpoints")
    expected = tf.train.load_checkpoint(os.path.join(trained["model_dir"], "checkpoints", f"ckpt-{resumed_step}"))

    user["train"]["max_step"] = resumed_step + 1
    trainer = build.trainer(build_config(user))
    assert trainer.step == resumed_step
    np.testing.assert_array_equal(trainer.model.decoder.output_layer.kernel.numpy(), expected.get_tensor(KERNEL))
    summary = trainer.run()
    assert summary["checkpoint"] == os.path.join(directory, f"ckpt-{resumed_step + 1}")
    # every intact checkpoint the rotation should keep is still there, and readable
    assert steps_on_disk(user["model_dir"]) == after
    assert all(readable(os.path.join(directory, f"ckpt-{step}")) for step in after)
    assert tf.train.latest_checkpoint(directory) == summary["checkpoint"]


@pytest.mark.parametrize("damage", list(CASES), ids=lambda f: f.__name__)
def test_restore_weights_falls_back_to_the_newest_intact_checkpoint(trained, tmp_path, damage):
    user = damaged_copy(trained, tmp_path, damage)
    resumed_step, _ = CASES[damage]
    prefix = os.path.join(user["model_dir"], "checkpoints", f"ckpt-{resumed_step}")
    model, _, path = build.inference_model(build_config(user))
    assert path == prefix
    np.testing.assert_array_equal(model.decoder.output_layer.kernel.numpy(),
                                  tf.train.load_checkpoint(prefix).get_tensor(KERNEL))
