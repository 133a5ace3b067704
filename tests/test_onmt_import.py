"""An OpenNMT-tf 2.32 model directory used as model_dir: continued training imports everything
(weights, Adam moments, step) and leaves the OpenNMT-tf files untouched."""

import hashlib
import os
import shutil

import numpy as np
import tensorflow as tf
import yaml

from conftest import ONMT_FIXTURE
from opennmt_lite.config import build_config
from opennmt_lite.checkpointing.onmt_names import VALUE_SUFFIX
from opennmt_lite import build
from opennmt_lite.checkpointing.names import named_variables, optimizer_state


def digest(directory):
    return {name: hashlib.sha256((directory / name).read_bytes()).hexdigest()
            for name in sorted(os.listdir(directory)) if (directory / name).is_file()}


def test_continue_training_from_opennmt_checkpoint(tmp_path):
    model_dir = tmp_path / "onmt_model"
    shutil.copytree(ONMT_FIXTURE, model_dir)
    before = digest(model_dir)
    with open(ONMT_FIXTURE.parent / "onmt_fixture.yml") as f:
        user = yaml.safe_load(f)
    user["model_dir"] = str(model_dir)
    user["data"].update(train_features_file="test.first100.tok.en", train_labels_file="test.first100.tok.de")
    user["params"] = {"optimizer": "Adam", "optimizer_params": {"beta_1": 0.9, "beta_2": 0.998},
                      "learning_rate": 1.0, "decay_type": "NoamDecay",
                      "decay_params": {"model_dim": 64, "warmup_steps": 200}, "label_smoothing": 0.1}
    user["train"] = {"batch_type": "tokens", "batch_size": 512, "max_step": 502,
                     "save_checkpoints_steps": 1000, "length_bucket_width": 1}
    trainer = build.trainer(build_config(user))

    # imported: the step, every weight and the LazyAdam moments of OpenNMT-tf's checkpoint
    assert trainer.step == 500
    reader = tf.train.load_checkpoint(str(model_dir / "ckpt-500"))
    kernel = "model/decoder/layers/1/ffn/layer/inner/kernel"
    ours = trainer.model.decoder.layers[1].ffn.layer.inner.kernel
    np.testing.assert_array_equal(ours.numpy(), reader.get_tensor(kernel + VALUE_SUFFIX))
    state = optimizer_state(trainer.optimizer, {
        p: v for p, v in named_variables(trainer.model, include_seeds=False).items() if v.trainable})
    for slot in ("m", "v"):
        onmt = reader.get_tensor(f"{kernel}/.OPTIMIZER_SLOT/optimizer/{slot}{VALUE_SUFFIX}")
        np.testing.assert_array_equal(state[f"{slot}/decoder/layers/1/ffn/layer/inner/kernel"].numpy(), onmt)
    source_slot = reader.get_tensor(
        f"model/examples_inputter/features_inputter/embedding/.OPTIMIZER_SLOT/optimizer/m{VALUE_SUFFIX}")
    np.testing.assert_array_equal(state["m/source_inputter/embedding"].numpy(), source_slot)

    summary = trainer.run()
    assert summary["step"] == 502
    assert summary["checkpoint"] == str(model_dir / "checkpoints" / "ckpt-502")
    # OpenNMT-tf's own files are untouched (its `checkpoint` index still names ckpt-500)
    after = {k: v for k, v in digest(model_dir).items() if k in before}
    assert after == before
    assert tf.train.latest_checkpoint(str(model_dir)).endswith("ckpt-500")
    # and the next run resumes from opennmt-lite's checkpoint, not OpenNMT-tf's
    user["train"]["max_step"] = 503
    assert build.trainer(build_config(user)).step == 502
