"""The checkpoint module on small variable sets: the optimizer's slots found through Keras
internals, save/rotation/restore with damaged files, and the errors a user's `--checkpoint`
path gets."""

import logging
import os
import shutil

import keras
import numpy as np
import pytest
import tensorflow as tf

import run
from conftest import ONMT_FIXTURE
from training_helpers import TINY_MODEL, training_config
from opennmt_lite import build
from opennmt_lite.checkpointing import formats, store
from opennmt_lite.training import adam
from opennmt_lite.checkpointing.names import named_variables, optimizer_state
from opennmt_lite.checkpointing.store import Checkpoint, CheckpointError
from opennmt_lite.checkpointing.training_checkpoint import GROUPS_DONE, training_checkpoint
from opennmt_lite.training.trainer import Trainer

CONFIG = str(ONMT_FIXTURE.parent / "onmt_fixture.yml")


# -- the optimizer's state: the one function reading Keras private attributes ----------------

def layer_variables():
    kernel = keras.Variable(np.zeros((4, 3), np.float32), name="kernel")
    bias = keras.Variable(np.zeros((3,), np.float32), name="bias")
    return {"dense/kernel": kernel, "dense/bias": bias}


OPTIMIZERS = {
    "Adam": lambda: keras.optimizers.Adam(learning_rate=0.1, beta_1=0.9, beta_2=0.998),
    "AdamW": lambda: keras.optimizers.AdamW(learning_rate=0.1, beta_1=0.9, beta_2=0.998),
    "Adam-amsgrad": lambda: keras.optimizers.Adam(learning_rate=0.1, beta_1=0.9, beta_2=0.998, amsgrad=True),
    "SGD-momentum": lambda: keras.optimizers.SGD(learning_rate=0.1, momentum=0.9),
    "SGD": lambda: keras.optimizers.SGD(learning_rate=0.1),
    "LossScale-Adam": lambda: keras.optimizers.LossScaleOptimizer(
        keras.optimizers.Adam(learning_rate=0.1, beta_1=0.9, beta_2=0.998), initial_scale=8.0),
    "fused-Adam": lambda: adam.Adam(learning_rate=0.1, beta_1=0.9, beta_2=0.998),
}
SLOTS = {"Adam": ["m", "v"], "AdamW": ["m", "v"], "Adam-amsgrad": ["m", "v", "vhat"],
         "SGD-momentum": ["momentum"], "SGD": [], "LossScale-Adam": ["m", "v"],
         "fused-Adam": ["m", "v"]}


@pytest.mark.parametrize("kind", sorted(OPTIMIZERS))
def test_optimizer_state_is_exactly_the_keras_slots_and_updates_as_adam(kind):
    """Guards `names.slot_variables` against Keras upgrades: the state named must be every
    variable the optimizer owns (its learning rate aside), with the model variables' shapes, and
    one update must change each slot as the algorithm says."""
    named = layer_variables()
    optimizer = OPTIMIZERS[kind]()
    optimizer.build(list(named.values()))
    state = optimizer_state(optimizer, named)

    expected = {"iterations"} | {f"{slot}/{path}" for slot in SLOTS[kind] for path in named}
    if kind.startswith("LossScale"):
        expected |= {"loss_scale", "loss_scale_steps", "loss_scale_optimizer_iterations"}
    assert set(state) == expected
    owned = {id(v) for v in optimizer.variables if "learning_rate" not in v.path}
    assert {id(v) for v in state.values()} == owned
    for name, variable in state.items():
        if "/" in name:
            assert tuple(variable.shape) == tuple(named[name.split("/", 1)[1]].shape), name

    gradients = {path: np.random.default_rng(1).normal(size=v.shape).astype(np.float32)
                 for path, v in named.items()}
    scale = 8.0 if kind.startswith("LossScale") else 1.0  # the wrapper divides by its scale
    optimizer.apply([gradients[p] * scale for p in named], list(named.values()))
    assert int(state["iterations"].numpy()) == 1
    # TensorFlow's fused Adam kernel (as OpenNMT-tf's optimizers) computes 1 - beta with beta in
    # float32: 1 - float32(0.998) is 1.3e-5 away from 0.002, relatively; Keras uses 0.002.
    one = np.float32(1) if kind == "fused-Adam" else 1
    beta_1, beta_2 = (np.float32(0.9), np.float32(0.998)) if kind == "fused-Adam" else (0.9, 0.998)
    for path, g in gradients.items():
        if "m" in SLOTS[kind]:
            np.testing.assert_allclose(state[f"m/{path}"].numpy(), (one - beta_1) * g, rtol=1e-5)
            np.testing.assert_allclose(state[f"v/{path}"].numpy(), (one - beta_2) * g * g, rtol=1e-5)
        if "vhat" in SLOTS[kind]:
            np.testing.assert_allclose(state[f"vhat/{path}"].numpy(), (1 - 0.998) * g * g, rtol=1e-5)
        if "momentum" in SLOTS[kind]:
            np.testing.assert_allclose(state[f"momentum/{path}"].numpy(), -0.1 * g, rtol=1e-5)


# -- save, rotation, restore with damage ------------------------------------------------------

class Tiny(keras.layers.Layer):
    """A model with two weights and a seed-free public attribute tree."""

    def __init__(self):
        super().__init__()
        self.kernel = self.add_weight(shape=(4, 3), initializer="zeros", name="kernel")
        self.bias = self.add_weight(shape=(3,), initializer="zeros", name="bias")
        self.built = True


def make_checkpoint(directory, max_to_keep=3):
    model = Tiny()
    optimizer = keras.optimizers.Adam(learning_rate=0.1)
    optimizer.build(model.trainable_variables)
    checkpoint = training_checkpoint(model, optimizer, save_dir=str(directory), max_to_keep=max_to_keep)
    return checkpoint, model, checkpoint.variables[GROUPS_DONE]


def save_steps(directory, steps, max_to_keep=3):
    """Saves one checkpoint per step, the kernel filled with the step number."""
    checkpoint, model, groups = make_checkpoint(directory, max_to_keep)
    for step in steps:
        model.kernel.assign(np.full((4, 3), step, np.float32))
        groups.assign(step)
        checkpoint.save(step)
    return checkpoint


def on_disk(directory):
    return sorted(int(p.rsplit("-", 1)[1]) for p in store.candidates(str(directory)))


def remove_index(prefix):
    os.remove(prefix + ".index")


def truncate_data(prefix):
    path = prefix + ".data-00000-of-00001"
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) // 2)


def garbage_index(prefix):
    with open(prefix + ".index", "wb") as f:
        f.write(b"not an sstable" * 10)


def remove_data(prefix):
    os.remove(prefix + ".data-00000-of-00001")


DAMAGE = {"missing_index": remove_index, "truncated_data": truncate_data,
          "garbage_index": garbage_index, "missing_data": remove_data}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_damaged_latest_is_skipped_then_rotation_keeps_every_intact_one(tmp_path, damage, caplog):
    directory = tmp_path / "checkpoints"
    save_steps(directory, [2, 4, 6])
    DAMAGE[damage](str(directory / "ckpt-6"))

    checkpoint, model, groups = make_checkpoint(directory)
    with caplog.at_level(logging.WARNING, logger="opennmt_lite"):
        assert checkpoint.restore() == str(directory / "ckpt-4")
    assert f"skipping damaged checkpoint {directory / 'ckpt-6'}" in caplog.text
    assert np.all(model.kernel.numpy() == 4) and int(groups.numpy()) == 4
    # the damaged one is moved aside, so that the next saves cannot count it
    assert on_disk(directory) == [2, 4]
    assert os.listdir(directory / "damaged")
    checkpoint.save(5)
    assert on_disk(directory) == [2, 4, 5]
    checkpoint.save(6)
    assert on_disk(directory) == [4, 5, 6]
    assert all(store.damage(p) is None for p in store.candidates(str(directory)))


def test_average_checkpoints_skips_a_damaged_one_and_takes_the_newest_intact_ones(tmp_path, caplog):
    """The README's promise: a damaged checkpoint is left out with a warning naming it, and the
    newest max_count intact ones (older than it) are averaged; fewer than 2 left is an error."""
    directory = tmp_path / "checkpoints"
    save_steps(directory, [2, 4, 6, 8], max_to_keep=4)
    truncate_data(str(directory / "ckpt-8"))
    with caplog.at_level(logging.WARNING, logger="opennmt_lite"):
        chosen = store.to_average(str(tmp_path), 2)
    assert chosen == [str(directory / "ckpt-4"), str(directory / "ckpt-6")]  # oldest first
    assert f"skipping damaged checkpoint {directory / 'ckpt-8'}" in caplog.text
    [kernel] = [name for name in store.contents(chosen[-1]) if name.startswith("model/")
                and "kernel" in name and "OPTIMIZER_SLOT" not in name]
    assert np.all(store.average_values(chosen, [kernel])[kernel] == 5)  # (4 + 6) / 2, not 8's
    for step in (2, 4, 6):
        remove_index(str(directory / f"ckpt-{step}"))
    with pytest.raises(CheckpointError, match="averaging needs at least 2 checkpoints: found 0 readable"):
        store.to_average(str(tmp_path), 2)


def test_rotation_never_counts_a_damaged_checkpoint(tmp_path):
    """Even one the restore did not look at (older than the one restored)."""
    directory = tmp_path / "checkpoints"
    save_steps(directory, [1, 2, 3])
    remove_index(str(directory / "ckpt-2"))
    checkpoint, _, _ = make_checkpoint(directory)
    assert checkpoint.restore() == str(directory / "ckpt-3")
    checkpoint.save(4)
    assert on_disk(directory) == [1, 2, 3, 4]  # 1, 3, 4 readable: nothing older to delete yet
    checkpoint.save(5)
    assert on_disk(directory) == [3, 4, 5]  # and the damaged one goes with the older ones


@pytest.mark.parametrize("state", ["garbage", "names_a_missing_checkpoint", "absent"])
def test_restore_does_not_depend_on_the_state_file(tmp_path, state):
    directory = tmp_path / "checkpoints"
    save_steps(directory, [2, 4])
    content = {"garbage": "\x00{{ not a proto", "absent": None,
               "names_a_missing_checkpoint": 'model_checkpoint_path: "ckpt-9"\nall_model_checkpoint_paths: "ckpt-9"\n'}
    os.remove(directory / "checkpoint")
    if content[state] is not None:
        (directory / "checkpoint").write_text(content[state])
    checkpoint, model, _ = make_checkpoint(directory)
    assert checkpoint.restore() == str(directory / "ckpt-4")
    assert np.all(model.kernel.numpy() == 4)
    checkpoint.save(5)  # and the state file is right again
    assert tf.train.latest_checkpoint(str(directory)) == str(directory / "ckpt-5")


def test_leftovers_of_killed_saves_are_removed(tmp_path):
    directory = tmp_path / "checkpoints"
    checkpoint = save_steps(directory, [2])
    (directory / "ckpt-3_temp").mkdir()
    (directory / "ckpt-3_temp" / "part-00000-of-00001.index").write_bytes(b"x")
    (directory / "checkpoint.tmp4b7f").write_text("x")
    checkpoint.save(4)
    assert sorted(os.listdir(directory)) == ["checkpoint", "ckpt-2.data-00000-of-00001", "ckpt-2.index",
                                             "ckpt-4.data-00000-of-00001", "ckpt-4.index"]


def test_state_file_lists_the_kept_checkpoints(tmp_path):
    directory = tmp_path / "checkpoints"
    save_steps(directory, [1, 2, 3, 4, 5], max_to_keep=2)
    assert on_disk(directory) == [4, 5]
    state = tf.train.get_checkpoint_state(str(directory))
    assert state.model_checkpoint_path == str(directory / "ckpt-5")
    assert list(state.all_model_checkpoint_paths) == [str(directory / "ckpt-4"), str(directory / "ckpt-5")]


def test_shape_check_names_every_difference(tmp_path):
    directory = tmp_path / "checkpoints"
    save_steps(directory, [1])
    other = Tiny()
    other.extra = other.add_weight(shape=(2,), initializer="zeros", name="extra")
    with pytest.raises(CheckpointError) as error:
        Checkpoint(other).restore_weights(str(directory / "ckpt-1"))
    assert "does not match the configured model" in str(error.value)
    assert "missing in checkpoint: model/extra (expected shape (2,))" in str(error.value)


# -- restore_weights and a user's --checkpoint -------------------------------------------------

def test_restore_weights_falls_back_and_reads_a_named_checkpoint(tmp_path):
    directory = tmp_path / "run" / "checkpoints"
    save_steps(directory, [2, 4, 6])
    truncate_data(str(directory / "ckpt-6"))
    model = Tiny()
    assert formats.restore_weights(model, str(tmp_path / "run")) == str(directory / "ckpt-4")
    assert np.all(model.kernel.numpy() == 4)
    assert os.path.exists(directory / "ckpt-6.index")  # inference never moves files
    # a file of the checkpoint names it too; a damaged one named explicitly is an error
    assert formats.restore_weights(model, "unused", str(directory / "ckpt-2.index")).endswith("ckpt-2")
    assert np.all(model.kernel.numpy() == 2)
    with pytest.raises(CheckpointError, match=f"checkpoint {directory / 'ckpt-6'} is damaged"):
        formats.restore_weights(model, "unused", str(directory / "ckpt-6"))
    assert np.all(model.kernel.numpy() == 2)  # nothing assigned


def test_resolve_errors_name_the_path(tmp_path):
    with pytest.raises(CheckpointError, match=f"checkpoint {tmp_path / 'nope'} not found"):
        store.resolve(str(tmp_path / "nope"))
    with pytest.raises(FileNotFoundError, match=f"no checkpoint found in directory {tmp_path}"):
        store.resolve(str(tmp_path))
    prefix = str(ONMT_FIXTURE / "ckpt-500")
    assert store.resolve(prefix + ".index") == prefix
    assert store.resolve(str(ONMT_FIXTURE)) == prefix
    assert formats.is_onmt(prefix)


@pytest.mark.parametrize("case", ["missing", "empty_directory", "damaged"])
def test_bad_checkpoint_argument_is_a_one_line_error(tmp_path, case, capsys):
    target = tmp_path / "nope"
    if case == "empty_directory":
        target = tmp_path / "empty"
        target.mkdir()
    if case == "damaged":
        target = tmp_path / "ckpt-500"
        for name in ("ckpt-500.index", "ckpt-500.data-00000-of-00001"):
            shutil.copy(ONMT_FIXTURE / name, tmp_path / name)
        truncate_data(str(target))
    code = run.main(["infer", "--config", CONFIG, "--features_file", str(ONMT_FIXTURE / "test.first8.tok.en"),
                     "--checkpoint", str(target)])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    line = next(line for line in err.splitlines() if line.startswith("error: "))
    assert str(target) in line


def test_index_file_argument_is_accepted(tmp_path):
    output = tmp_path / "pred.txt"
    assert run.main(["infer", "--config", CONFIG, "--features_file", str(ONMT_FIXTURE / "test.first8.tok.en"),
                     "--predictions_file", str(output), "--checkpoint", str(ONMT_FIXTURE / "ckpt-500.index"),
                     "--beam_width", "1"]) == 0
    assert len(output.read_text().splitlines()) == 8


# -- a trainer restores when asked, not when constructed ----------------------------------------

def test_trainer_restores_only_when_asked(tmp_path):
    """Constructing a Trainer leaves its model, step and data position as built; restore()
    then resumes the run in model_dir as build.trainer's trainer does."""
    build.trainer(training_config(tmp_path, model=TINY_MODEL, train={"max_step": 3})).run()
    config = training_config(tmp_path, model=TINY_MODEL, train={"max_step": 6})
    resumed = build.trainer(config)  # (build.trainer calls restore)
    model = build.model(config.model, build.assets(config.data))
    optimizer = build.optimizer(config.params, config.train.dtype_policy)
    optimizer.build(model.trainable_variables)
    initial = {name: v.numpy().copy() for name, v in named_variables(model).items()}

    trainer = Trainer(config.model_dir, config.train, model, optimizer, resumed.training_inputs,
                      resumed.train_step)
    assert trainer.step == 0 and int(trainer.groups_done.numpy()) == 0
    assert trainer.restored is None and trainer.checkpoint.latest is None
    for name, variable in named_variables(model).items():
        np.testing.assert_array_equal(variable.numpy(), initial[name], err_msg=name)

    assert trainer.restore() == resumed.restored == str(tmp_path / "run" / "checkpoints" / "ckpt-3")
    assert trainer.step == 3 and int(trainer.groups_done.numpy()) == 3
    for (name, a), b in zip(named_variables(resumed.model).items(), named_variables(model).values()):
        np.testing.assert_array_equal(b.numpy(), a.numpy(), err_msg=name)
