"""A checkpoint written on the JAX backend restores on TensorFlow with identical weights, one
written on TensorFlow restores on JAX, OpenNMT-tf's checkpoint loads on JAX without TensorFlow
being imported, and averaging, rotation and damage work there as on TensorFlow
(tests/checkpoint_worker.py is the JAX side, one subprocess)."""

import json
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

from checkpoint_worker import (ONMT_FIXTURE, average_of_onmt_run, fill, onmt_model,
                               tiny_training_checkpoint, values_of)
from opennmt_lite.checkpointing import bundle, formats, store
from opennmt_lite.checkpointing.names import named_variables

TESTS = pathlib.Path(__file__).parent


@pytest.fixture(scope="module")
def jax_side(tmp_path_factory):
    """Writes a TensorFlow training checkpoint, runs the JAX worker on it; returns (the
    TensorFlow side's values, the worker's output folder)."""
    directory = tmp_path_factory.mktemp("across_backends")
    checkpoint = tiny_training_checkpoint(save_dir=str(directory / "tf_checkpoints"))
    written = fill(checkpoint, seed=1)
    checkpoint.save(5)
    out = directory / "jax"
    out.mkdir()
    env = dict(os.environ, KERAS_BACKEND="jax", JAX_PLATFORMS="cpu",
               PYTHONPATH=os.pathsep.join([str(TESTS.parent), str(TESTS)]))
    completed = subprocess.run(
        [sys.executable, str(TESTS / "checkpoint_worker.py"), str(directory / "tf_checkpoints"),
         str(out)], env=env, capture_output=True, text=True, timeout=900)
    assert completed.returncode == 0, completed.stderr[-4000:]
    return written, directory


def load(path):
    with np.load(path) as stored:
        return dict(stored)


def assert_identical(actual, expected):
    assert sorted(actual) == sorted(expected)
    for name, value in expected.items():
        assert actual[name].shape == value.shape, name
        np.testing.assert_array_equal(actual[name], value, err_msg=name)
        if value.dtype.kind == "f":  # (bit for bit, dtype and all)
            assert actual[name].dtype == value.dtype and actual[name].tobytes() == value.tobytes(), name


def test_tensorflow_checkpoint_restores_on_jax(jax_side):
    written, directory = jax_side
    results = json.loads((directory / "jax" / "results.json").read_text())
    assert results["backend"] == "jax"
    assert_identical(load(directory / "jax" / "restored.npz"), written)
    assert any(name.startswith("optimizer/m/") for name in written)
    assert any("dropout_seed" in name for name in written)


def test_jax_checkpoint_restores_on_tensorflow(jax_side):
    written, directory = jax_side
    saved = load(directory / "jax" / "saved.npz")
    checkpoint = tiny_training_checkpoint(restore_dir=str(directory / "jax" / "checkpoints"))
    prefix = checkpoint.restore()
    assert prefix == str(directory / "jax" / "checkpoints" / "ckpt-9")
    assert_identical(values_of(checkpoint.variables), saved)
    assert int(checkpoint.optimizer.iterations.numpy()) == int(saved["optimizer/iterations"])
    # The same names, shapes and floating-point dtypes as TensorFlow's checkpoint of the same
    # objects, but for tf.train.Checkpoint's own bookkeeping (its object graph, save counter).
    # Integers keep each backend's width (JAX: an int32 step, uint32 seed states; restoring casts)
    ours = bundle.bundle_names(prefix)
    theirs = {name: entry for name, entry in
              bundle.bundle_names(str(directory / "tf_checkpoints" / "ckpt-5")).items()
              if not name.startswith(("_CHECKPOINTABLE_OBJECT_GRAPH", "save_counter/"))}
    assert sorted(ours) == sorted(theirs)
    for name, (dtype, shape) in ours.items():
        assert shape == theirs[name][1], name
        assert dtype.kind == theirs[name][0].kind or {dtype.kind, theirs[name][0].kind} == {"i", "u"}, name
        assert dtype == theirs[name][0] or dtype.kind != "f", name
    assert (directory / "jax" / "checkpoints" / "checkpoint").read_text().startswith(
        'model_checkpoint_path: "ckpt-9"')


def test_onmt_checkpoint_loads_on_jax_without_tensorflow(jax_side):
    _, directory = jax_side
    assert json.loads((directory / "jax" / "results.json").read_text())["tensorflow_imported"] == []
    model = onmt_model()
    formats.restore_weights(model, str(ONMT_FIXTURE))
    expected = values_of(named_variables(model, include_seeds=False))
    assert len(expected) > 50
    assert_identical(load(directory / "jax" / "onmt.npz"), expected)


def test_averaging_on_jax_is_bit_identical(jax_side):
    _, directory = jax_side
    assert_identical(load(directory / "jax" / "average.npz"), average_of_onmt_run())


def test_rotation_and_damage_on_jax(jax_side):
    _, directory = jax_side
    rotation = json.loads((directory / "jax" / "results.json").read_text())["rotation"]
    assert rotation == {
        "kept": ["ckpt-2.data-00000-of-00001", "ckpt-2.index",
                 "ckpt-3.data-00000-of-00001", "ckpt-3.index"],
        "restored": "ckpt-2",  # (the newest, ckpt-3, fails its checksum)
        "damaged": ["ckpt-3.data-00000-of-00001", "ckpt-3.index"]}
    # TensorFlow agrees: the damaged copy is unreadable, the one kept is whole
    rotated = directory / "jax" / "rotation"
    assert store.damage(str(rotated / "damaged" / "ckpt-3")).startswith("unreadable")
    assert store.damage(str(rotated / "ckpt-2")) is None


def test_state_file_parsed_without_tensorflow(tmp_path, monkeypatch):
    """The `checkpoint` state file, read by hand off TensorFlow's backend, names what
    TensorFlow's parser finds; garbage is refused (restore then ignores the file)."""
    store._write_state_file(str(tmp_path), str(tmp_path / "ckpt-3"), [str(tmp_path / "ckpt-3")])
    files = [tmp_path / "checkpoint", TESTS / "fixtures" / "onmt_project" / "run" / "checkpoint"]
    expected = [store._state_file_checkpoint(str(path)) for path in files]
    assert expected == [str(path.parent / name) for path, name in zip(files, ["ckpt-3", "ckpt-400"])]
    monkeypatch.setattr(store, "TENSORFLOW", False)
    assert [store._state_file_checkpoint(str(path)) for path in files] == expected
    (tmp_path / "checkpoint").write_text('model_checkpoint_path: "ckpt-3"\n\x00garbage {\n')
    with pytest.raises(ValueError):
        store._state_file_checkpoint(str(tmp_path / "checkpoint"))
