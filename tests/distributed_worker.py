"""Run by test_distribute.py in fresh processes (TensorFlow's devices are fixed at start-up).

usage: distributed_worker.py one_step OUT.npz
       distributed_worker.py train CONFIG.yml OUT.npz [NUM_DEVICES]   (TF_CONFIG for multi-worker)
"""

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np


def one_step(out):
    """One update on 2 logical CPUs (MirroredStrategy) and the same examples on one device."""
    import keras
    import tensorflow as tf

    from opennmt_lite.training.distribute import configure_devices
    from training_helpers import make_optimizer, make_train_step
    from test_accumulation import SGD_PARAMS, make_batch, make_examples, make_model

    devices = configure_devices(2)
    rng = np.random.default_rng(4)
    examples = make_examples(rng, 20)
    replica_groups = ((make_batch(examples[0:4]), make_batch(examples[4:11])),
                      (make_batch(examples[11:15]), make_batch(examples[15:20])))
    results = {}
    strategy = tf.distribute.MirroredStrategy(devices)
    with strategy.scope():
        model = make_model(seed=9)
        optimizer = make_optimizer(SGD_PARAMS)
        optimizer.build(model.trainable_variables)
    step = make_train_step(model, optimizer, 2, label_smoothing=0.1, strategy=strategy)
    stats = step(replica_groups)
    results["mirrored_loss"] = float(stats["loss"])
    results["mirrored_normalizer"] = float(stats["normalizer"])
    for i, v in enumerate(model.trainable_variables):
        results[f"mirrored/{i}"] = v.numpy()

    model = make_model(seed=9)
    optimizer = make_optimizer(SGD_PARAMS)
    optimizer.build(model.trainable_variables)
    step = make_train_step(model, optimizer, 4, label_smoothing=0.1)
    stats = step((replica_groups[0] + replica_groups[1],))
    results["single_loss"] = float(stats["loss"])
    results["single_normalizer"] = float(stats["normalizer"])
    for i, v in enumerate(model.trainable_variables):
        results[f"single/{i}"] = v.numpy()
        results[f"initial/{i}"] = make_model(seed=9).trainable_variables[i].numpy() if i == 0 else 0
    np.savez(out, **results)


def train(config_path, out, num_devices=None):
    from opennmt_lite.config import load_config
    from opennmt_lite import build
    from opennmt_lite.checkpointing.names import named_variables

    overrides = {"train": {"num_devices": int(num_devices)}} if num_devices else None
    trainer = build.trainer(load_config(config_path, overrides))
    summary = trainer.run()
    weights = {k: v.numpy() for k, v in named_variables(trainer.model, include_seeds=False).items()}
    weights["__step__"] = np.array(summary["step"])
    np.savez(out, **weights)


if __name__ == "__main__":
    if sys.argv[1] == "one_step":
        one_step(sys.argv[2])
    else:
        train(*sys.argv[2:])
