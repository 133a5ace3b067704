"""An OpenNMT-tf 2.32 project with two weighted training files and example weights
(tests/fixtures/onmt_tf_weighted, trained 200 steps by OpenNMT-tf) trains on with `onmt-main`,
its YAML unchanged: the OpenNMT-tf checkpoint is imported and the files are drawn with
OpenNMT-tf's probabilities."""

import importlib.util
import json
import logging
import os
import shutil

import numpy as np
import tensorflow as tf
import yaml

from conftest import FIXTURES
from opennmt_lite.checkpointing.onmt_names import VALUE_SUFFIX
from test_onmt_main import inside
from opennmt_lite.onmt import main as onmt_main

PROJECT = FIXTURES / "onmt_tf_weighted"


def write_data(directory):
    spec = importlib.util.spec_from_file_location("make_fixture", PROJECT / "make_fixture.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.write_data(str(directory))


def test_onmt_main_trains_on_from_opennmt_tf_s_weighted_project(tmp_path, caplog):
    write_data(tmp_path)
    for name in ("config.yml", "model.py", "src-vocab.txt", "tgt-vocab.txt"):
        shutil.copyfile(PROJECT / name, tmp_path / name)
    shutil.copytree(PROJECT / "run", tmp_path / "run")
    (tmp_path / "more.yml").write_text(yaml.safe_dump(
        {"train": {"max_step": 206, "save_summary_steps": 1, "average_last_checkpoints": 0}}))
    with inside(tmp_path), caplog.at_level(logging.INFO, logger="opennmt_lite"):
        assert onmt_main.main(["--config", "config.yml", "more.yml", "--model", "model.py",
                               "--seed", "1234", "train"]) == 0
    # OpenNMT-tf's probabilities: weight * lines, normalized (0.4 * 1200 : 0.6 * 400)
    assert "news.en p=0.6667, web.en p=0.3333" in caplog.text
    reader = tf.train.load_checkpoint(str(tmp_path / "run" / "checkpoints"))
    assert reader.get_tensor("optimizer/iterations/.ATTRIBUTES/VARIABLE_VALUE") == 206
    assert reader.get_tensor("data/groups_done/.ATTRIBUTES/VARIABLE_VALUE") == 6
    # went on from OpenNMT-tf's weights: close to them, and its loss (3.02 at step 200; a model
    # from scratch starts above log(500) = 6.2)
    onmt = tf.train.load_checkpoint(str(PROJECT / "run" / "ckpt-200"))
    kernel = onmt.get_tensor("model/decoder/layers/0/ffn/layer/inner/kernel" + VALUE_SUFFIX)
    ours = reader.get_tensor("model/decoder/layers/0/ffn/layer/inner/kernel" + VALUE_SUFFIX)
    assert 0 < np.abs(ours - kernel).max() < 0.1 * np.abs(kernel).max()
    with open(tmp_path / "run" / "metrics.jsonl") as stream:
        losses = [json.loads(line)["loss"] for line in stream]
    assert len(losses) == 6 and max(losses) < 4.0
    assert os.path.exists(tmp_path / "run" / "ckpt-200.index")  # OpenNMT-tf's files kept
