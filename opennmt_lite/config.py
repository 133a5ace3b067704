"""Run configuration: OpenNMT-tf's YAML layout and keys, plus a `model` section.

`load_config(paths)` reads one or more YAML files (merged left to right), validates every key and
type against SCHEMA, fills defaults (OpenNMT-tf's fallback values, then its Transformer
`auto_config`, then the user's values, as OpenNMT-tf merges them), expands the model preset, and
resolves relative data paths. Everything else reads the returned plain dict; nothing else
validates configuration.
"""

import copy
import difflib
import os

import yaml

from opennmt_lite.models import PRESETS, SHARE_EMBEDDINGS


class ConfigError(ValueError):
    """A configuration problem, with the file and the key path in its message."""


REQUIRED = object()


class Key:
    """A leaf of the schema: its type, default and allowed values."""

    def __init__(self, kind, default=None, choices=None, nullable=True):
        self.kind = kind  # "int", "float", "bool", "str", "path", "dict", "list", "int_or_list"
        self.default = default
        self.choices = choices
        self.nullable = nullable


def _tokenization():
    return {
        "type": Key("str", "sentencepiece", choices=("sentencepiece", "space")),
        "model": Key("path"),
        # Used by `build-vocab` to train the SentencePiece model:
        "vocabulary_size": Key("int", 8000),
        "model_type": Key("str", "unigram", choices=("unigram", "bpe")),
        "character_coverage": Key("float", 1.0),
    }


SCHEMA = {
    "model_dir": Key("path", REQUIRED, nullable=False),
    "auto_config": Key("bool", True, nullable=False),
    "data": {
        "train_features_file": Key("path"),
        "train_labels_file": Key("path"),
        "eval_features_file": Key("path"),
        "eval_labels_file": Key("path"),
        "source_vocabulary": Key("path"),
        "target_vocabulary": Key("path"),
        "source_tokenization": _tokenization(),
        "target_tokenization": _tokenization(),
    },
    "model": {
        "preset": Key("str", None, choices=tuple(PRESETS)),
        "num_layers": Key("int"),
        "num_units": Key("int"),
        "num_heads": Key("int"),
        "ffn_inner_dim": Key("int"),
        "dropout": Key("float"),
        "attention_dropout": Key("float"),
        "ffn_dropout": Key("float"),
        "ffn_activation": Key("str", "relu", choices=("relu", "gelu", "swish")),
        "maximum_relative_position": Key("int"),
        "pre_norm": Key("bool"),
        "position_encoding": Key("str", "auto", choices=("auto", "sinusoidal", "none")),
        "share_embeddings": Key("str", None, choices=SHARE_EMBEDDINGS),
        "output_layer_bias": Key("bool", True),
    },
    "params": {
        "optimizer": Key("str", "Adam", choices=("Adam", "LazyAdam", "AdamW", "SGD")),
        "optimizer_params": Key("dict", {}),
        "learning_rate": Key("float", 1.0),
        "decay_type": Key("str", None, choices=("NoamDecay", "InvSqrtDecay")),
        "decay_params": Key("dict", {}),
        "decay_step_duration": Key("int", 1),
        "start_decay_steps": Key("int", 0),
        "minimum_learning_rate": Key("float", 0.0),
        "label_smoothing": Key("float", 0.0),
        "average_loss_in_time": Key("bool"),
        "beam_width": Key("int", 1),
        "length_penalty": Key("float", 0.0),
        "maximum_decoding_length": Key("int", 250),
        "minimum_decoding_length": Key("int", 0),
        "num_hypotheses": Key("int"),
    },
    "train": {
        "batch_type": Key("str", "examples", choices=("examples", "tokens")),
        "batch_size": Key("int"),  # required to train (checked there)
        "effective_batch_size": Key("int"),
        "batch_size_multiple": Key("int"),
        "length_bucket_width": Key("int", 2),
        "batching": Key("str", "sorted", choices=("sorted", "opennmt")),
        "pad_to_multiple": Key("int", 1),
        "maximum_features_length": Key("int"),
        "maximum_labels_length": Key("int"),
        "sample_buffer_size": Key("int", 500000),
        "max_step": Key("int"),
        "save_checkpoints_steps": Key("int", 5000),
        "keep_checkpoint_max": Key("int", 8),
        "save_summary_steps": Key("int", 100),
        "mixed_precision": Key("str", "false", choices=("false", "true", "float16", "bfloat16")),
        "jit_compile": Key("bool", False),
        "sub_batches": Key("int", 1),
        "seed": Key("int", 1234),
        "num_devices": Key("int", 1),
        "single_pass": Key("bool", False),
    },
    "eval": {
        "steps": Key("int", 5000),
        "batch_size": Key("int", 32),
        "batch_type": Key("str", "examples", choices=("examples", "tokens")),
        "length_bucket_width": Key("int"),
        "scorers": Key("list", []),
        "early_stopping": {
            "metric": Key("str", "loss"),
            "min_improvement": Key("float", 0.0),
            "steps": Key("int"),
        },
        "save_eval_predictions": Key("bool", False),
    },
    "infer": {
        "batch_size": Key("int", 16),
        "batch_type": Key("str", "examples", choices=("examples", "tokens")),
        "length_bucket_width": Key("int"),
        "n_best": Key("int", 1),
        "with_scores": Key("bool", False),
    },
    "score": {
        "batch_size": Key("int", 64),
        "batch_type": Key("str", "examples", choices=("examples", "tokens")),
        "length_bucket_width": Key("int"),
    },
}

# OpenNMT-tf's `Transformer.auto_config()` (applied unless `auto_config: false`).
# `num_units` of decay_params.model_dim is filled from the model section.
AUTO_CONFIG = {
    "params": {
        "optimizer": "LazyAdam",
        "optimizer_params": {"beta_1": 0.9, "beta_2": 0.998},
        "learning_rate": 2.0,
        "decay_type": "NoamDecay",
        "decay_params": {"warmup_steps": 8000},
        "label_smoothing": 0.1,
        "average_loss_in_time": True,
        "beam_width": 4,
    },
    "train": {
        "sample_buffer_size": -1,
        "max_step": 500000,
        "effective_batch_size": 25000,
        "batch_size": 3072,
        "batch_type": "tokens",
        "maximum_features_length": 100,
        "maximum_labels_length": 100,
        "keep_checkpoint_max": 8,
    },
    "eval": {"length_bucket_width": 5},
    "score": {"length_bucket_width": 5},
    "infer": {"batch_size": 32, "length_bucket_width": 5},
}

# Sections that stay None unless the user writes them; then their defaults are filled in.
OPTIONAL_SECTIONS = ("source_tokenization", "target_tokenization", "early_stopping")

# Keys replaced as a whole rather than merged key by key (as OpenNMT-tf does).
REPLACED_WHOLE = ("optimizer_params", "decay_params")
PATH_KEYS = (
    "train_features_file", "train_labels_file", "eval_features_file", "eval_labels_file",
    "source_vocabulary", "target_vocabulary",
)


def merge(base, update):
    """Recursive dict merge, `update` winning; REPLACED_WHOLE keys are replaced."""
    result = copy.deepcopy(base)
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(result.get(key), dict) and key not in REPLACED_WHOLE:
            result[key] = merge(result[key], value)
        else:
            result[key] = copy.deepcopy(value)
    return result


def _check(value, key, where):
    """Validates one leaf value; returns it normalised."""
    if value is None:
        if key.nullable:
            return None
        raise ConfigError(f"{where}: must be set")
    kind = key.kind
    if kind == "bool":
        if not isinstance(value, bool):
            raise ConfigError(f"{where}: expected true or false, got {value!r}")
    elif kind == "int":
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{where}: expected an integer, got {value!r}")
    elif kind == "float":
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{where}: expected a number, got {value!r}")
        value = float(value)
    elif kind in ("str", "path"):
        if kind == "str" and where.endswith("mixed_precision") and isinstance(value, bool):
            value = str(value).lower()
        if where.endswith("position_encoding") and value is False:
            value = "none"
        if not isinstance(value, str):
            raise ConfigError(f"{where}: expected a string, got {value!r}")
    elif kind == "dict":
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: expected a mapping, got {value!r}")
    elif kind == "list":
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list):
            raise ConfigError(f"{where}: expected a list, got {value!r}")
    if key.choices is not None and value not in key.choices:
        raise ConfigError(f"{where}: must be one of {', '.join(map(str, key.choices))}; got {value!r}")
    return value


def _validate(user, schema, prefix, source):
    """Checks `user` against `schema`: unknown keys and wrong types raise ConfigError."""
    if not isinstance(user, dict):
        raise ConfigError(f"{source}: {prefix.rstrip('.') or 'the file'} must be a mapping, got {user!r}")
    for name, value in user.items():
        where = f"{source}: {prefix}{name}"
        if name not in schema:
            close = difflib.get_close_matches(str(name), list(schema), n=1)
            hint = f" (did you mean {prefix}{close[0]}?)" if close else ""
            raise ConfigError(f"{where}: unknown key{hint}")
        spec = schema[name]
        if isinstance(spec, dict):
            if value is None:
                continue
            _validate(value, spec, f"{prefix}{name}.", source)
        else:
            user[name] = _check(value, spec, where)


def _defaults(schema):
    result = {}
    for name, spec in schema.items():
        if isinstance(spec, dict):
            result[name] = None if name in OPTIONAL_SECTIONS else _defaults(spec)
        elif spec.default is not REQUIRED:
            result[name] = copy.deepcopy(spec.default)
    return result


def _resolve_path(path, model_dir):
    """Like OpenNMT-tf: a relative path that does not exist as given but exists under model_dir
    is taken from model_dir."""
    if path is None or os.path.isabs(path) or os.path.exists(path):
        return path
    candidate = os.path.join(model_dir, path)
    return candidate if os.path.exists(candidate) else path


def _finalize(config, source):
    model = config["model"]
    preset = model.get("preset")
    base = dict(PRESETS[preset]) if preset else {}
    for name, value in base.items():
        if model.get(name) is None:
            model[name] = value
    missing = [k for k in ("num_layers", "num_units", "num_heads", "ffn_inner_dim") if model.get(k) is None]
    if missing:
        raise ConfigError(
            f"{source}: model.{missing[0]} is not set (set it, or choose a model.preset among "
            f"{', '.join(PRESETS)})"
        )
    defaults = {"dropout": 0.1, "attention_dropout": 0.1, "ffn_dropout": 0.1, "pre_norm": True,
                "share_embeddings": "none"}
    for name, value in defaults.items():
        if model.get(name) is None:
            model[name] = value
    # (a rate of 1 or more would divide by zero in dropout's 1 / (1 - rate) scaling; a negative
    # one would keep every unit and scale it down)
    for section, name in (("model", "dropout"), ("model", "attention_dropout"),
                          ("model", "ffn_dropout"), ("params", "label_smoothing")):
        value = config[section].get(name)
        if value is not None and not 0.0 <= value < 1.0:
            raise ConfigError(f"{source}: {section}.{name} must be in [0, 1), got {value}")
    if model["num_units"] % model["num_heads"] != 0:
        raise ConfigError(
            f"{source}: model.num_units ({model['num_units']}) must be divisible by "
            f"model.num_heads ({model['num_heads']})"
        )
    params = config["params"]
    if params.get("decay_type") == "NoamDecay":
        params["decay_params"].setdefault("model_dim", model["num_units"])
        params["decay_params"].setdefault("warmup_steps", 8000)
    train = config["train"]
    if params.get("average_loss_in_time") is None:
        params["average_loss_in_time"] = train["batch_type"] == "tokens"
    if params.get("num_hypotheses") is None:
        params["num_hypotheses"] = config["infer"]["n_best"]
    if config["infer"]["n_best"] > max(1, params["beam_width"]):
        raise ConfigError(
            f"{source}: infer.n_best ({config['infer']['n_best']}) cannot exceed params.beam_width "
            f"({params['beam_width']})"
        )
    if train["batch_type"] == "tokens" and not train.get("length_bucket_width"):
        raise ConfigError(f"{source}: train.length_bucket_width must be set with batch_type: tokens")
    if train["sub_batches"] < 1:
        raise ConfigError(f"{source}: train.sub_batches must be at least 1, got {train['sub_batches']}")
    for section in ("train", "eval", "infer", "score"):
        size = config[section].get("batch_size")
        if size is not None and size <= 0:
            raise ConfigError(f"{source}: {section}.batch_size must be positive, got {size}")
    stopping = config["eval"]["early_stopping"]
    if stopping is not None:
        config["eval"]["early_stopping"] = stopping = merge(_defaults(SCHEMA["eval"]["early_stopping"]), stopping)
        if stopping["steps"] is None or stopping["steps"] <= 0:
            raise ConfigError(f"{source}: eval.early_stopping.steps must be a positive integer")
    model_dir = config["model_dir"]
    data = config["data"]
    for name in PATH_KEYS:
        data[name] = _resolve_path(data.get(name), model_dir)
    for side in ("source_tokenization", "target_tokenization"):
        if data[side] is not None:
            data[side] = tokenization = merge(_defaults(SCHEMA["data"][side]), data[side])
            if tokenization["type"] == "sentencepiece" and not tokenization["model"]:
                raise ConfigError(f"{source}: data.{side}.model must name the SentencePiece model file")
            tokenization["model"] = _resolve_path(tokenization["model"], model_dir)
    return config


def load_config(paths, overrides=None):
    """Reads, merges and validates YAML config files; returns the complete config dict.

    `overrides` is an optional dict (e.g. from the command line) merged last.
    """
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    user = {}
    names = []
    for path in paths:
        path = os.fspath(path)
        names.append(path)
        try:
            with open(path, encoding="utf-8") as f:
                content = yaml.safe_load(f)
        except FileNotFoundError:
            raise ConfigError(f"config file {path} not found") from None
        except yaml.YAMLError as error:
            raise ConfigError(f"{path}: invalid YAML: {error}") from None
        if content is None:
            content = {}
        _validate(content, SCHEMA, "", path)
        user = merge(user, content)
    if overrides:
        _validate(overrides, SCHEMA, "", "command line")
        user = merge(user, overrides)
    return build_config(user, source=" + ".join(names) or "config")


def build_config(user, source="config"):
    """Completes an already-parsed config dict (validated here too)."""
    user = copy.deepcopy(user)
    _validate(user, SCHEMA, "", source)
    if "model_dir" not in user:
        raise ConfigError(f"{source}: model_dir must be set")
    config = _defaults(SCHEMA)
    if user.get("auto_config", True):
        config = merge(config, AUTO_CONFIG)
    # Sections given as null in YAML mean "defaults".
    config = merge(config, {k: v for k, v in user.items() if v is not None})
    return _finalize(config, source)
