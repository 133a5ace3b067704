"""Multi-device (MirroredStrategy on 2 logical CPUs) and multi-worker (2 processes on loopback)
training give the single-device result."""

import json
import os
import socket
import subprocess
import sys

import numpy as np
import pytest
import yaml

from data_helpers import REPO
from opennmt_lite.training.distribute import DistributionError, parse_tf_config
from training_helpers import TINY_MODEL, training_user

WORKER = os.path.join(os.path.dirname(__file__), "distributed_worker.py")
ENV = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", TF_DETERMINISTIC_OPS="1")
ENV.pop("TF_CONFIG", None)


def global_relative_difference(a, b):
    scale = max(np.abs(x).max() for x in b)
    return max(np.abs(x - y).max() for x, y in zip(a, b)) / scale


def test_mirrored_two_devices_one_step_equals_single_device(tmp_path):
    out = tmp_path / "one_step.npz"
    subprocess.run([sys.executable, WORKER, "one_step", str(out)], env=ENV, check=True, timeout=300)
    r = np.load(out)
    count = len([k for k in r.files if k.startswith("single/")])
    mirrored = [r[f"mirrored/{i}"] for i in range(count)]
    single = [r[f"single/{i}"] for i in range(count)]
    assert r["mirrored_normalizer"] == r["single_normalizer"]
    assert abs(r["mirrored_loss"] - r["single_loss"]) <= 1e-6 * abs(r["single_loss"])
    assert global_relative_difference(mirrored, single) <= 1e-5
    assert np.abs(single[0] - r["initial/0"]).max() > 1e-5  # the step moved the weights


def free_ports(count):
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def write_config(tmp_path, name):
    config = training_user(tmp_path / name, model=dict(TINY_MODEL, dropout=0.0, attention_dropout=0.0,
                                                         ffn_dropout=0.0),
                             train={"max_step": 3, "save_checkpoints_steps": 1000, "save_summary_steps": 1})
    path = tmp_path / f"{name}.yml"
    path.write_text(yaml.safe_dump(config))
    return str(path)


def test_two_workers_on_loopback_hold_identical_weights_equal_to_single_process(tmp_path):
    ports = free_ports(2)
    cluster = {"worker": [f"127.0.0.1:{p}" for p in ports]}
    config = write_config(tmp_path, "multi")
    processes = []
    for index in range(2):
        env = dict(ENV, TF_CONFIG=json.dumps({"cluster": cluster, "task": {"type": "worker", "index": index}}))
        processes.append(subprocess.Popen(
            [sys.executable, WORKER, "train", config, str(tmp_path / f"worker{index}.npz")],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    for process in processes:
        output, _ = process.communicate(timeout=420)
        assert process.returncode == 0, output[-3000:]
    # the same two replicas in one process: MirroredStrategy over 2 logical CPUs
    subprocess.run([sys.executable, WORKER, "train", write_config(tmp_path, "single"),
                    str(tmp_path / "single.npz"), "2"], env=ENV, check=True, timeout=420)
    workers = [np.load(tmp_path / f"worker{i}.npz") for i in range(2)]
    single = np.load(tmp_path / "single.npz")
    assert int(workers[0]["__step__"]) == int(workers[1]["__step__"]) == int(single["__step__"]) == 3
    names = [k for k in single.files if k != "__step__"]
    for name in names:
        np.testing.assert_array_equal(workers[0][name], workers[1][name], err_msg=name)
    assert global_relative_difference([workers[0][n] for n in names], [single[n] for n in names]) <= 1e-5
    # only the chief (worker 0) wrote checkpoints
    assert os.listdir(os.path.join(os.path.dirname(config), "multi", "run", "checkpoints"))


@pytest.mark.parametrize("value, message", [
    ("{not json", "TF_CONFIG is not valid JSON"),
    ('{"task": {"type": "worker", "index": 0}}', 'a "cluster" mapping'),
    ('{"cluster": {"worker": ["127.0.0.1:1"]}}', 'must have a "task"'),
    ('{"cluster": {"worker": ["127.0.0.1:1"]}, "task": {"type": "worker", "index": 3}}', "index 3 out of range"),
    ('{"cluster": {"worker": ["localhost"]}, "task": {"type": "worker", "index": 0}}', '"host:port"'),
    ('{"cluster": {"worker": ["a:1"], "ps": ["b:2"]}, "task": {"type": "worker", "index": 0}}', "only 'worker' and 'chief'"),
])
def test_malformed_tf_config_is_a_clear_error(value, message):
    with pytest.raises(DistributionError, match=message):
        parse_tf_config(value)


def test_errors_before_any_step(tmp_path):
    """Too many devices, bad TF_CONFIG, a checkpoint of another model shape: clear error, exit 2."""
    config = write_config(tmp_path, "errors")
    run = [sys.executable, os.path.join(REPO, "run.py"), "train", "--config", config]
    result = subprocess.run(run + ["--num_devices", "64"], env=ENV, capture_output=True, text=True, timeout=300)
    assert result.returncode == 2 and "num_devices is 64 but only" in result.stderr
    assert "Traceback" not in result.stderr
    bad = dict(ENV, TF_CONFIG='{"cluster": {"worker": []}}')
    result = subprocess.run(run, env=bad, capture_output=True, text=True, timeout=300)
    assert result.returncode == 2 and "TF_CONFIG" in result.stderr and "Traceback" not in result.stderr

    subprocess.run(run, env=ENV, check=True, capture_output=True, timeout=300)
    with open(config) as f:
        other = yaml.safe_load(f)
    other["model"]["ffn_inner_dim"] = 96
    other["train"]["max_step"] = 6
    with open(config, "w") as f:
        yaml.safe_dump(other, f)
    result = subprocess.run(run, env=ENV, capture_output=True, text=True, timeout=300)
    assert result.returncode == 2 and "does not match the configured model" in result.stderr
    assert "shape mismatch: model/encoder/layers/0/ffn/layer/inner/kernel" in result.stderr
    assert "Traceback" not in result.stderr
