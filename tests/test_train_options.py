"""OpenNMT-tf's training options: the moving average of the weights (train.moving_average_decay),
weight regularization (params.regularization), gradient clipping (params.clip_gradients) and the
export of the best model during training (eval.export_on_best, export_format,
max_exports_to_keep)."""

import json
import os

import numpy as np
import pytest
import tensorflow as tf

from conftest import FIXTURES, ONMT_FIXTURE
from training_helpers import TINY_MODEL, params_section, training_config
from opennmt_lite import build
from opennmt_lite.checkpointing.names import named_trainable, named_variables
from opennmt_lite.checkpointing.onmt_names import load_onmt_model
from opennmt_lite.checkpointing.store import contents, read
from opennmt_lite.checkpointing.training_checkpoint import TRAINED_WEIGHTS
from opennmt_lite.hyperparameters import ModelHyperparameters
from opennmt_lite.models import Transformer
from opennmt_lite.training.regularization import penalized_weights, weight_penalty
from opennmt_lite.training.step import batch_gradients, clip_global_norm

DECAY = 0.9


def numpy_moving_average(trained, decay):
    """The reference: tf.train.ExponentialMovingAverage(decay, num_updates=step) started at the
    first update from its weights; trained = [(step, weights)] in step order."""
    average = None
    for step, weights in trained:
        if average is None:
            average = np.array(weights, np.float64)
            continue
        d = min(decay, (1.0 + step) / (10.0 + step))
        average = average - (average - weights) * (1.0 - d)
    return average


@pytest.fixture(scope="module")
def averaged_run(tmp_path_factory):
    """5 updates of 2 accumulated batches each, a checkpoint at every step."""
    tmp_path = tmp_path_factory.mktemp("average")
    config = training_config(tmp_path, model=TINY_MODEL, train={
        "max_step": 5, "save_checkpoints_steps": 1, "moving_average_decay": DECAY})
    trainer = build.trainer(config)
    trainer.run()
    return config, trainer


def test_moving_average_follows_opennmt_rule_and_is_what_checkpoints_hold(averaged_run):
    config, trainer = averaged_run
    directory = os.path.join(config.model_dir, "checkpoints")
    paths = list(named_trainable(trainer.model))
    checked = paths[:3] + ["decoder/output_layer/kernel", "encoder/layers/1/ffn/layer/inner/kernel"]
    names = [f"{TRAINED_WEIGHTS}/{p}" for p in checked] + [f"model/{p}" for p in checked]
    steps = {step: read(os.path.join(directory, f"ckpt-{step}"), names) for step in range(1, 6)}
    for path in checked:
        trained = [(step, values[f"{TRAINED_WEIGHTS}/{path}"]) for step, values in steps.items()]
        assert not np.array_equal(trained[0][1], trained[-1][1])  # the weights moved
        for last in range(1, 6):
            expected = numpy_moving_average(trained[:last], DECAY)
            np.testing.assert_allclose(steps[last][f"model/{path}"], expected, rtol=1e-5, atol=1e-6,
                                       err_msg=f"{path} at step {last}")
        # the average differs from the weights once decay applies (step 2 onwards)
        assert not np.allclose(steps[5][f"model/{path}"], trained[-1][1], atol=1e-7)
    # the trainer's model holds the trained weights, its checkpoint's model/ the averages
    final = read(os.path.join(directory, "ckpt-5"), [f"model/{p}" for p in paths])
    for path, weight in named_trainable(trainer.model).items():
        np.testing.assert_array_equal(steps[5].get(f"{TRAINED_WEIGHTS}/{path}", weight.numpy()), weight.numpy())
        np.testing.assert_array_equal(final[f"model/{path}"], trainer.moving_average.averages[path].numpy())
