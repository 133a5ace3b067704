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


def test_weighted_project_trains_on_with_moving_average_and_export_on_best(tmp_path):
    """Issue 25's project: OpenNMT-tf's weighted-files checkpoint trained on by `onmt-main
    train --with_eval` with a moving average and export on best added to its YAML: the
    checkpoint holds the averages (not the trained weights), and the one export kept is the
    step whose evaluation loss was the lowest, holding that step's averaged weights."""
    write_data(tmp_path)
    for name in ("config.yml", "model.py", "src-vocab.txt", "tgt-vocab.txt"):
        shutil.copyfile(PROJECT / name, tmp_path / name)
    shutil.copytree(PROJECT / "run", tmp_path / "run")
    for side in ("en", "de"):  # a small validation set
        with open(FIXTURES.parent.parent / "data" / f"valid.{side}", encoding="utf-8") as stream:
            (tmp_path / f"dev.{side}").write_text("".join(next(stream) for _ in range(24)),
                                                  encoding="utf-8")
    (tmp_path / "more.yml").write_text(yaml.safe_dump({
        "data": {"eval_features_file": "dev.en", "eval_labels_file": "dev.de"},
        "train": {"max_step": 206, "save_checkpoints_steps": 2, "keep_checkpoint_max": 5,
                  "save_summary_steps": 1, "average_last_checkpoints": 0,
                  "moving_average_decay": 0.99},
        "eval": {"steps": 2, "batch_size": 8, "batch_type": "examples",
                 "export_on_best": "loss", "export_format": "checkpoint",
                 "max_exports_to_keep": 1},
    }))
    with inside(tmp_path):
        assert onmt_main.main(["--config", "config.yml", "more.yml", "--model", "model.py",
                               "--seed", "1234", "train", "--with_eval"]) == 0
    run = tmp_path / "run"
    with open(run / "eval" / "history.jsonl") as stream:
        history = [json.loads(line) for line in stream]
    steps = [entry["step"] for entry in history]
    assert steps == [202, 204, 206]
    best = min(history, key=lambda entry: entry["loss"])["step"]
    assert sorted(os.listdir(run / "export")) == [str(best)]  # only the newest best kept
    reader = tf.train.load_checkpoint(str(run / "checkpoints" / f"ckpt-{best}"))
    name = "model/decoder/layers/0/ffn/layer/inner/kernel" + VALUE_SUFFIX
    averaged = reader.get_tensor(name)
    trained = reader.get_tensor(name.replace("model/", "moving_average/trained_weights/", 1))
    assert np.abs(averaged - trained).max() > 0  # the checkpoint's model is the average
    exported = tf.train.load_checkpoint(str(run / "export" / str(best)))
    names = [n for n, _ in tf.train.list_variables(str(run / "export" / str(best)))]
    exported_name = next(n for n in names if n.endswith(name.split("/", 1)[1]))
    np.testing.assert_array_equal(exported.get_tensor(exported_name), averaged)
