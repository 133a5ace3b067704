"""What every command needs from a config: vocabularies, tokenizers, the model and its weights.

The checkpoint to use is found here too: opennmt-lite's own checkpoints live in
`<model_dir>/checkpoints/`; an OpenNMT-tf 2.x checkpoint directly in `<model_dir>` (OpenNMT-tf's
layout) is detected and imported, and never written to.
"""

import collections
import logging
import os

import keras
import tensorflow as tf

from opennmt_lite import onmt_compat
from opennmt_lite.checkpoint import Checkpoint, checkpoint_directory
from opennmt_lite.config import ConfigError
from opennmt_lite.models import model_from_config
from opennmt_lite.tokenizers import make_tokenizer
from opennmt_lite.vocab import Vocabulary

logger = logging.getLogger("opennmt_lite")

Assets = collections.namedtuple(
    "Assets", ["source_vocabulary", "target_vocabulary", "source_tokenizer", "target_tokenizer"]
)

POLICIES = {"false": "float32", "true": "mixed_float16", "float16": "mixed_float16",
            "bfloat16": "mixed_bfloat16"}


def set_precision(mixed_precision):
    """Sets the global Keras dtype policy from `train.mixed_precision`; returns its name."""
    policy = POLICIES[str(mixed_precision).lower()]
    keras.config.set_dtype_policy(policy)
    return policy


def tokenizer_from_config(tokenization):
    if tokenization is None:
        return make_tokenizer(None)
    return make_tokenizer({"type": tokenization["type"], "model": tokenization["model"]}
                          if tokenization["type"] == "sentencepiece" else {"type": "space"})


def load_assets(config):
    """Vocabularies and tokenizers named in `config["data"]` (clear errors when missing)."""
    data = config["data"]
    for key in ("source_vocabulary", "target_vocabulary"):
        if not data.get(key):
            raise ConfigError(f"data.{key} must be set (run `python run.py build-vocab` to create it)")
        if not os.path.exists(data[key]):
            raise ConfigError(
                f"data.{key}: {data[key]} not found (run `python run.py build-vocab --config ...` "
                f"to create the vocabularies)"
            )
    for key in ("source_tokenization", "target_tokenization"):
        tokenization = data.get(key)
        if tokenization and tokenization["type"] == "sentencepiece" and not os.path.exists(tokenization["model"]):
            raise ConfigError(
                f"data.{key}.model: {tokenization['model']} not found (run `python run.py build-vocab`)"
            )
    return Assets(
        Vocabulary.from_file(data["source_vocabulary"]),
        Vocabulary.from_file(data["target_vocabulary"]),
        tokenizer_from_config(data.get("source_tokenization")),
        tokenizer_from_config(data.get("target_tokenization")),
    )


def create_model(config, assets):
    """The configured Transformer, built (variables created)."""
    model = model_from_config(
        config["model"], assets.source_vocabulary.num_ids, assets.target_vocabulary.num_ids
    )
    model.build()
    return model


def find_onmt_checkpoint(model_dir):
    """The latest OpenNMT-tf checkpoint directly in model_dir, or None."""
    if not os.path.isdir(model_dir):
        return None
    latest = tf.train.latest_checkpoint(model_dir)
    if latest is None:
        return None
    names = {name for name, _ in tf.train.list_variables(latest)}
    if any(name.startswith("model/examples_inputter/") for name in names):
        return latest
    return None


def restore_weights(config, model, checkpoint_path=None):
    """Loads model weights for inference/export: an explicit checkpoint, else the latest
    opennmt-lite checkpoint of model_dir, else an OpenNMT-tf checkpoint in model_dir.
    Returns the path loaded; raises if there is none."""
    model_dir = config["model_dir"]
    path = checkpoint_path
    if path is not None and os.path.isdir(path):
        path = tf.train.latest_checkpoint(path) or path
    if path is None:
        path = tf.train.latest_checkpoint(checkpoint_directory(model_dir))
    if path is None:
        path = find_onmt_checkpoint(model_dir)
    if path is None:
        raise FileNotFoundError(
            f"no checkpoint in {checkpoint_directory(model_dir)} nor an OpenNMT-tf checkpoint in "
            f"{model_dir}: train a model first or pass --checkpoint"
        )
    if is_onmt_checkpoint(path):
        onmt_compat.load_onmt_model(path, model)
        logger.info("loaded OpenNMT-tf checkpoint %s", path)
    else:
        Checkpoint(model).restore_weights(path)
        logger.info("loaded checkpoint %s", path)
    return path


def is_onmt_checkpoint(path):
    names = {name for name, _ in tf.train.list_variables(path)}
    return any(name.startswith("model/examples_inputter/") for name in names)
