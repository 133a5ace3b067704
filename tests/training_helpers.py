"""Small training configurations on a slice of the shipped corpus, for the training tests."""

import copy
import os

import tensorflow as tf
import yaml

from data_helpers import REPO, TRAIN_DE, TRAIN_EN, VALID_DE, VALID_EN, sp_models
from opennmt_lite import build
from opennmt_lite.config import MIXED_PRECISION_POLICIES, build_config
from opennmt_lite.training.step import TrainStep, batch_gradients

SAMPLE_CONFIG = os.path.join(REPO, "configs", "sample.yml")


def write_slice(directory, lines=2000):
    """The first `lines` training pairs and 40 validation pairs, written under `directory`."""
    os.makedirs(directory, exist_ok=True)
    paths = {}
    for name, source, count in (("train.en", TRAIN_EN, lines), ("train.de", TRAIN_DE, lines),
                                ("valid.en", VALID_EN, 40), ("valid.de", VALID_DE, 40)):
        with open(source, encoding="utf-8") as f:
            head = [next(f) for _ in range(count)]
        paths[name] = os.path.join(directory, name)
        with open(paths[name], "w", encoding="utf-8") as f:
            f.writelines(head)
    return paths


def training_config(tmp_path, **kwargs):
    """`training_user(...)` loaded as a `Config`."""
    return build_config(training_user(tmp_path, **kwargs))


def training_user(tmp_path, model=None, train=None, params=None, eval=None, lines=2000):
    """The user config dict of the sample config's model (unless `model` is given) trained on a data slice with small
    batches; `train`/`params`/`eval` override keys. Vocabularies: 1000-piece SentencePiece."""
    with open(SAMPLE_CONFIG, encoding="utf-8") as f:
        sample = yaml.safe_load(f)
    models = sp_models()
    files = write_slice(str(tmp_path / "data"), lines)
    user = {
        "model_dir": str(tmp_path / "run"),
        "data": {
            "train_features_file": files["train.en"],
            "train_labels_file": files["train.de"],
            "eval_features_file": files["valid.en"],
            "eval_labels_file": files["valid.de"],
            "source_vocabulary": models["source_vocabulary"],
            "target_vocabulary": models["target_vocabulary"],
            "source_tokenization": {"type": "sentencepiece", "model": models["source_model"]},
            "target_tokenization": {"type": "sentencepiece", "model": models["target_model"]},
        },
        "model": copy.deepcopy(model or sample["model"]),
        "params": {**sample["params"], "decay_params": {"warmup_steps": 20}, **(params or {})},
        "train": {"batch_type": "tokens", "batch_size": 512, "effective_batch_size": 1024,
                  "length_bucket_width": 1, "maximum_features_length": 40,
                  "maximum_labels_length": 40, "max_step": 40, "save_checkpoints_steps": 10,
                  "save_summary_steps": 5, "seed": 7, **(train or {})},
        "eval": {"steps": 0, **(eval or {})},
    }
    return user


TINY_MODEL = {"num_layers": 2, "num_units": 64, "num_heads": 2, "ffn_inner_dim": 128,
              "maximum_relative_position": 4, "dropout": 0.1, "attention_dropout": 0.1,
              "ffn_dropout": 0.1}


def params_section(params):
    """The typed `params` section of a config whose params are `params` (no auto_config)."""
    user = {"model_dir": "unused", "auto_config": False, "model": TINY_MODEL, "params": params}
    return build_config(user).params


def make_optimizer(params, mixed_precision="false"):
    """The optimizer `run.py train` builds for these params and `train.mixed_precision`."""
    return build.optimizer(params_section(params), MIXED_PRECISION_POLICIES[mixed_precision])


def accumulate_gradients(model, optimizer, group, label_smoothing, average_loss_in_time):
    """Summed dense gradients of a group's batches -> (grads, loss_sum, normalizer), computed
    eagerly batch by batch: the reference the compiled TrainStep is compared with."""
    total, loss_sum, normalizer = None, 0.0, 0.0
    for batch in group:
        grads, loss, batch_normalizer = batch_gradients(
            model, optimizer, batch, label_smoothing, average_loss_in_time)
        grads = [tf.convert_to_tensor(g) for g in grads]
        total = grads if total is None else [a + b for a, b in zip(total, grads)]
        loss_sum += loss
        normalizer += batch_normalizer
    return total, loss_sum, normalizer


def make_train_step(model, optimizer, accum_steps, label_smoothing=0.0, average_loss_in_time=True,
                    jit_compile=False, strategy=None, sub_batches=1):
    return TrainStep(model, optimizer, accum_steps, label_smoothing, average_loss_in_time,
                     jit_compile, strategy, sub_batches)
