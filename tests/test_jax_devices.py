"""Data-parallel training on Keras' JAX backend: keras.distribution's `DataParallel` over 2 CPU
devices (XLA_FLAGS=--xla_force_host_platform_device_count=2), in one JAX subprocess
(tests/jax_worker.py's `devices` job), against the TensorFlow backend on one device.

- tests/jax_training_case.py's 30 updates, each update's two batches (of different shapes:
  padded to a common one) taken one per device, give the losses, learning rates and weights of
  the TensorFlow backend's step accumulating the same two batches on one device: OpenNMT-tf's
  multi-replica rule (the replicas' gradient sums added, divided by their total normalizer) is
  that update exactly. With outlier masking (which masks examples from the first update on)
  and normalisation by examples: the rows of padding count in neither the quartiles nor the
  normalizer.
- `run.py train` with `train.num_devices: 2` on JAX (TensorFlow unimportable): two data shards,
  one per device, logged; a run stopped at step 4 and resumed to 6 ends bit for bit as the run
  straight to 6; more devices than JAX sees, or contrastive learning on several devices, is one
  line naming the key, exit 2.
"""

import json

import numpy as np
import pytest
import yaml

import jax_training_case as case
import jax_worker
from opennmt_lite.checkpointing.bundle import read_bundle
from opennmt_lite.training.jax_step import ROWS, stack_batches
from test_jax_training import reported_losses, write_corpus, write_run_config

TWO_CPU_DEVICES = {"XLA_FLAGS": "--xla_force_host_platform_device_count=2"}


def device_config(tmp_path, data, name, max_step, num_devices=2, file_name=None):
    """test_jax_training's run config (dropout, moving average, a checkpoint every 4 updates) on
    `num_devices` devices, 128-token batches in one shape: 2 per device and update; written to
    `file_name`.devices.yml (default: `name`.devices.yml), model_dir `name`."""
    path, model_dir = write_run_config(tmp_path, data, name, max_step)
    config = yaml.safe_load(open(path))
    # (one batch shape: one program to compile; stacks of two shapes are devices_values')
    config["train"].update(num_devices=num_devices, batch_size=128, xla_shapes=1)
    path = tmp_path / f"{file_name or name}.devices.yml"  # (write_run_config's: `name`.yml)
    path.write_text(yaml.safe_dump(config))
    return str(path), model_dir


@pytest.fixture(scope="module")
def devices_side(tmp_path_factory):
    directory = tmp_path_factory.mktemp("jax_devices")
    data = write_corpus(directory / "data")
    straight, straight_dir = device_config(directory, data, "straight", 6)
    part, part_dir = device_config(directory, data, "resumed", 4)
    resumed, _ = device_config(directory, data, "resumed", 6, file_name="resumed6")
    too_many, _ = device_config(directory, data, "too_many", 6, num_devices=3)
    contrastive, _ = device_config(directory, data, "contrastive", 6)
    config = yaml.safe_load(open(contrastive))
    config["params"]["contrastive_learning"] = True
    (directory / "contrastive.devices.yml").write_text(yaml.safe_dump(config))
    commands = {"straight": ["train", "--config", straight], "part": ["train", "--config", part],
                "resumed": ["train", "--config", resumed],
                "too_many": ["train", "--config", too_many],
                "contrastive": ["train", "--config", contrastive]}
    (directory / "commands.json").write_text(json.dumps(commands))
    # (one compilation cache for the three runs, which compile the same programs)
    arrays, results = jax_worker.run("devices", directory, **TWO_CPU_DEVICES,
                                     JAX_COMPILATION_CACHE_DIR=str(directory / "jax_cache"))
    return arrays, results, straight_dir, part_dir


@pytest.fixture(scope="module")
def tensorflow_side():
    return case.tensorflow_run(**jax_worker.DEVICE_OPTIONS)


def test_two_devices_give_the_update_of_one_accumulating_both_batches(devices_side,
                                                                       tensorflow_side):
    arrays = devices_side[0]
    tf_losses, tf_rates, tf_weights = tensorflow_side
    assert int(arrays["devices"]) == 2
    # (the two batches of every update differ in shape: each device's is padded)
    assert all(first["source_ids"].shape != second["source_ids"].shape
               for first, second in case.groups())
    relative = np.abs(arrays["loss"] - tf_losses) / np.abs(tf_losses)
    assert tf_losses[-5:].mean() < tf_losses[:5].mean() - 0.1
    assert relative.max() <= 1e-4, (relative.max(), int(relative.argmax()))
    np.testing.assert_allclose(arrays["learning_rate"], tf_rates, rtol=1e-6)
    for name, value in tf_weights.items():
        if "linear_keys/bias" in name:  # (see test_jax_training)
            continue
        difference = np.linalg.norm(arrays[f"weight/{name}"] - value) / np.linalg.norm(value)
        assert difference <= 5e-3, (name, difference)


def test_stacked_batches_mark_their_rows_of_padding():
    first, second = case.groups()[0]
    stacked = stack_batches([first, second])
    rows, size = stacked[ROWS], len(first["source_length"])
    assert size > len(second["source_length"])
    np.testing.assert_array_equal(rows[0], np.ones(size))
    np.testing.assert_array_equal(rows[1], np.arange(size) < len(second["source_length"]))
    padding = rows[1] == 0
    for name, value in second.items():
        got = stacked[name][1]
        assert got.shape[0] == size and got.shape[1:] == stacked[name][0].shape[1:], name
        np.testing.assert_array_equal(got[tuple(slice(0, n) for n in value.shape)], value, name)
        # (a row of padding: one token of id 0, weight 0)
        expected = 1 if name.endswith("length") else 0
        assert np.all(got[padding] == expected), name
    assert np.all(stacked["source_ids"][0][:, first["source_ids"].shape[1]:] == 0)


def test_train_command_on_two_devices_resumes_bit_identical(devices_side):
    _, results, straight_dir, part_dir = devices_side
    for name in ("straight", "part", "resumed"):
        assert results[name]["status"] == 0, results[name]["stderr"][-3000:]
    log = results["straight"]["stderr"]
    assert "(shard 1/2)" in log and "on each of 2 replica(s)" in log, log[-3000:]
    assert "2 batch(es) per step" in log, log[-3000:]
    straight = read_bundle(f"{straight_dir}/checkpoints/ckpt-6")
    resumed = read_bundle(f"{part_dir}/checkpoints/ckpt-6")
    assert resumed["data/groups_done/.ATTRIBUTES/VARIABLE_VALUE"] == 6
    assert straight.keys() == resumed.keys()
    for name, value in straight.items():
        np.testing.assert_array_equal(resumed[name], value, err_msg=name)
    expected, got = reported_losses(straight_dir), reported_losses(part_dir)
    assert sorted(got) == list(range(1, 7))
    for step, losses in got.items():
        assert losses == expected[step] * len(losses), step


def test_more_devices_than_jax_sees_is_one_line(devices_side):
    result = devices_side[1]["too_many"]
    assert result["status"] == 2
    lines = result["stderr"].strip().splitlines()
    assert len(lines) == 1 and "train.num_devices is 3" in lines[0], result["stderr"][-2000:]
    assert "JAX sees 2 device(s)" in lines[0] and "Traceback" not in result["stderr"]


def test_contrastive_learning_on_several_devices_is_one_line(devices_side):
    result = devices_side[1]["contrastive"]
    assert result["status"] == 2
    lines = result["stderr"].strip().splitlines()
    assert len(lines) == 1 and "params.contrastive_learning on 2 devices" in lines[0], lines
