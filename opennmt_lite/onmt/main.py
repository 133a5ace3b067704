"""`onmt-main`: OpenNMT-tf 2.32's command line, run by opennmt-lite's commands.

    onmt-main --config data.yml [more.yml ...] [--model_type NAME | --model model.py]
              [--auto_config] [--checkpoint_path DIR_OR_PREFIX] ... RUN_TYPE [its options]

Every option of OpenNMT-tf 2.32's `onmt-main --help` (committed in tests/fixtures/onmt_cli/)
is accepted with OpenNMT-tf's meaning, or refused with one line (`REFUSED`, exit 2). How the
command line becomes opennmt-lite's config (`configure`):

- `--config` files are merged left to right, as OpenNMT-tf merges them; `--model_dir`,
  `--run_dir` (model_dir relative to it) and `--data_dir` (each data path that exists under it
  is taken from there) change them as in OpenNMT-tf.
- auto_config is OFF unless `--auto_config` is given (OpenNMT-tf's meaning; opennmt-lite's own
  YAML default is on): the command line decides, a YAML `auto_config` key is overridden.
- The model: `--model_type NAME` (a catalog preset) or `--model FILE` (an OpenNMT-tf model file,
  read by opennmt_lite.onmt.model_file) replaces the config's `model` section, if it has one
  (OpenNMT-tf has no such section: the command line wins). Without either, the config's `model`
  section, else the `model_description.py` that an earlier run wrote to model_dir (as
  OpenNMT-tf writes it: a copy of `--model`, or the catalog name), is used.
- Checkpoints: opennmt-lite's training writes `<model_dir>/checkpoints/ckpt-N`, and every
  command reads checkpoints of both layouts (OpenNMT-tf's are directly in model_dir). A
  `--checkpoint_path <model_dir>/ckpt-N` written for OpenNMT-tf's layout is taken from
  `checkpoints/` when only that one exists (`checkpoint_argument`). Evaluation writes
  `<model_dir>/eval/predictions.txt.<step>` as OpenNMT-tf does.
"""

import argparse
import logging
import os
import re
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from opennmt_lite.errors import UserError  # noqa: E402 (a base module: no TensorFlow)

PROG = "onmt-main"
RUN_TYPES = ("train", "eval", "infer", "export", "score", "average_checkpoints", "update_vocab")
# OpenNMT-tf 2.32's catalog (opennmt/models/catalog.py), as its --model_type choices list it.
CATALOG = ("GPT2Small", "ListenAttendSpell", "LstmCnnCrfTagger", "LuongAttention", "NMTBigV1",
           "NMTMediumV1", "NMTSmallV1", "ScalingNmtEnDe", "ScalingNmtEnFr", "Transformer",
           "TransformerBase", "TransformerBaseRelative", "TransformerBaseSharedEmbeddings",
           "TransformerBig", "TransformerBigRelative", "TransformerBigSharedEmbeddings",
           "TransformerRelative", "TransformerTiny")
# OpenNMT-tf's export formats -> (opennmt-lite's export format, CTranslate2 quantization).
EXPORT_FORMATS = {
    "saved_model": ("saved_model", None),
    "ctranslate2": ("ctranslate2", None),
    "ctranslate2_int8": ("ctranslate2", "int8"),
    "ctranslate2_int16": ("ctranslate2", "int16"),
    "ctranslate2_float16": ("ctranslate2", "float16"),
    "tflite": ("tflite", None),
    "tflite_float16": ("tflite_float16", None),
    "tflite_dynamic_range": ("tflite_dynamic_range", None),
}
ALL_EXPORT_FORMATS = ("saved_model", "tflite", "ctranslate2_int8_float16", "tflite_dynamic_range",
                      "tflite_float16", "ctranslate2_int16", "ctranslate2_float16", "checkpoint",
                      "ctranslate2_int8", "ctranslate2")
# What is refused, and why: an option (when given), or an option=value. One line each.
REFUSED = {
    "--horovod": "Horovod is not supported: train on several devices of one machine with "
                 "--num_gpus N, or on several machines with TF_CONFIG (see the README)",
    "--continue_from_checkpoint": "not supported: training resumes from the newest checkpoint "
                                  "of model_dir (OpenNMT-tf's or opennmt-lite's); copy the "
                                  "checkpoint there instead",
    "train --checkpoint_path": "not supported for train: training resumes from the newest "
                               "checkpoint of model_dir (OpenNMT-tf's or opennmt-lite's); copy "
                               "the checkpoint there instead",
    "--format checkpoint": "not supported: the checkpoints in model_dir (or average_checkpoints' "
                           "output) are the weights; use them as they are",
    "--format ctranslate2_int8_float16": "not implemented: export ctranslate2_int8 and load it "
                                         "with compute_type int8_float16",
}
for _name in CATALOG:
    if not _name.startswith(("Transformer", "ScalingNmt", "GPT2Small")):
        REFUSED[f"--model_type {_name}"] = (
            "opennmt-lite implements the catalog's Transformer models (Transformer*, "
            "ScalingNmtEnDe, ScalingNmtEnFr) and its language model GPT2Small only")

logger = logging.getLogger("opennmt_lite")


class ModelError(UserError, ValueError):
    """No model configuration, or a model description that cannot be used here."""


class _Parser(argparse.ArgumentParser):
    """argparse, except that a bad command line is one line on stderr (then exit 2)."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message}\n")


def build_parser():
    """OpenNMT-tf 2.32's parser: the same options, defaults and run types (`parser.run_types`
    maps each run type to its sub-parser)."""
    from opennmt_lite import __version__
    from opennmt_lite.config import integer_option  # (its numbers checked as the config's are)

    parser = _Parser(prog=PROG, formatter_class=argparse.ArgumentDefaultsHelpFormatter,
                     description="OpenNMT-tf 2.32's onmt-main command line, run by opennmt-lite.")
    parser.add_argument("-v", "--version", action="version",
                        version=f"opennmt-lite {__version__} (OpenNMT-tf 2.32's onmt-main)")
    parser.add_argument("--config", required=True, nargs="+", help="configuration files, merged "
                        "left to right")
    parser.add_argument("--model_dir", help="the model directory (default: model_dir of the "
                        "configuration)")
    parser.add_argument("--auto_config", default=None, action="store_true",
                        help="apply the model's automatic configuration values (off without it)")
    parser.add_argument("--model_type", default="", choices=CATALOG,
                        help="model from OpenNMT-tf's catalog (the Transformer* and ScalingNmt* ones)")
    parser.add_argument("--model", default="", help="OpenNMT-tf model file (model.py)")
    parser.add_argument("--run_dir", default="", help="model_dir is relative to this directory")
    parser.add_argument("--data_dir", default="", help="data files are taken from this "
                        "directory when they exist there")
    parser.add_argument("--checkpoint_path", default=None, help="checkpoint directory or prefix "
                        "to load (default: the latest of model_dir)")
    parser.add_argument("--log_level", default="INFO",
                        choices=["CRITICAL", "ERROR", "WARNING", "INFO", "DEBUG", "NOTSET"])
    parser.add_argument("--seed", type=integer_option(key_path="train.seed"), default=None,
                        help="random seed (train.seed)")
    parser.add_argument("--gpu_allow_growth", default=False, action="store_true",
                        help="allocate GPU memory dynamically")
    parser.add_argument("--intra_op_parallelism_threads", type=integer_option(0), default=0,
                        help="threads per op (0: TensorFlow chooses)")
    parser.add_argument("--inter_op_parallelism_threads", type=integer_option(0), default=0,
                        help="ops run side by side (0: TensorFlow chooses)")
    parser.add_argument("--mixed_precision", default=False, action="store_true",
                        help="train in mixed float16 (with a GPU only, as OpenNMT-tf)")
    parser.add_argument("--jit_compile", default=False, action="store_true",
                        help="compile the train step with XLA (train.jit_compile)")
    parser.add_argument("--eager_execution", default=False, action="store_true",
                        help="run TensorFlow functions eagerly (debugging)")
    parser.add_argument("--placeholder", action="store_true", help=argparse.SUPPRESS)
    sub = parser.add_subparsers(help="Run type.", dest="run_type", parser_class=_Parser)
    sub.required = True
    parser.run_types = {}

    def run_type(name, help):
        parser.run_types[name] = sub.add_parser(name, help=help)
        return parser.run_types[name]

    p = run_type("train", "Training.")
    p.add_argument("--with_eval", default=False, action="store_true",
                   help="evaluate every eval.steps (without it: no evaluation)")
    p.add_argument("--num_gpus", type=integer_option(key_path="train.num_devices"), default=1,
                   help="devices to train on (train.num_devices)")
    p.add_argument("--horovod", default=False, action="store_true", help="refused")
    p.add_argument("--continue_from_checkpoint", default=False, action="store_true", help="refused")
    p = run_type("eval", "Evaluation.")
    p.add_argument("--features_file", nargs="+", default=None, help="default: data.eval_features_file")
    p.add_argument("--labels_file", default=None, help="default: data.eval_labels_file")
    p = run_type("infer", "Inference.")
    p.add_argument("--features_file", nargs="+", required=True)
    p.add_argument("--predictions_file", default="", help="default: standard output")
    p.add_argument("--log_prediction_time", default=False, action="store_true")
    p = run_type("export", "Model export.")
    p.add_argument("--output_dir", "--export_dir", required=True)
    p.add_argument("--format", "--export_format", choices=ALL_EXPORT_FORMATS, default="saved_model")
    p = run_type("score", "Scoring.")
    p.add_argument("--features_file", nargs="+", required=True)
    p.add_argument("--predictions_file", default=None)
    p.add_argument("--output_file", default=None, help="default: standard output")
    p = run_type("average_checkpoints", "Checkpoint averaging.")
    p.add_argument("--output_dir", required=True)
    p.add_argument("--max_count", type=integer_option(1), default=8)
    p = run_type("update_vocab", "Update model vocabularies in checkpoint.")
    p.add_argument("--output_dir", required=True)
    p.add_argument("--src_vocab", default=None)
    p.add_argument("--tgt_vocab", default=None)
    return parser


def parse_args(argv):
    """OpenNMT-tf's parsing: a `--placeholder` before the run type ends a `--config a b` list
    that would otherwise swallow it. Multi-source --features_file lists are refused later."""
    argv = list(argv)
    for index, value in enumerate(argv):
        if value in RUN_TYPES:
            argv.insert(index, "--placeholder")
            break
    return build_parser().parse_args(argv)


def refusal(args):
    """The one-line reason an option given in `args` is refused, else None."""
    from opennmt_lite.errors import ArgumentError

    given = []
    if getattr(args, "horovod", False):
        given.append("--horovod")
    if getattr(args, "continue_from_checkpoint", False):
        given.append("--continue_from_checkpoint")
    if args.run_type == "train" and args.checkpoint_path is not None:
        given.append("train --checkpoint_path")
    if args.run_type == "export":
        given.append(f"--format {args.format}")
    if args.model_type:
        given.append(f"--model_type {args.model_type}")
    for name in given:
        if name in REFUSED:
            return ArgumentError(f"{name}: {REFUSED[name]}")
    if args.model and args.model_type:
        return ArgumentError("--model and --model_type exclude each other")
    features = getattr(args, "features_file", None)
    if isinstance(features, list) and len(features) > 1:
        return ArgumentError("--features_file: one file (multi-source models are not implemented)")
    return None


# -- the configuration -------------------------------------------------------------------------

def _read_yaml(paths):
    """The config files merged, read leniently (load_config reports what is wrong with them)."""
    import yaml

    from opennmt_lite.config import merge

    merged = {}
    for path in paths:
        try:
            with open(path, encoding="utf-8") as stream:
                content = yaml.safe_load(stream)
        except (OSError, UnicodeDecodeError, yaml.YAMLError):
            continue
        if isinstance(content, dict):
            merged = merge(merged, content)
    return merged


def _prefixed(data_dir, value):
    """OpenNMT-tf's --data_dir: each string of the data section (nested ones too) that names an
    existing path under `data_dir` is replaced by it; returns only what changed (or None)."""
    if isinstance(value, dict):
        changed = {k: _prefixed(data_dir, v) for k, v in value.items()}
        changed = {k: v for k, v in changed.items() if v is not None}
        return changed or None
    if isinstance(value, list):
        items = [_prefixed(data_dir, v) for v in value]
        return None if all(i is None for i in items) else [
            v if i is None else i for v, i in zip(value, items)]
    if isinstance(value, str) and os.path.exists(os.path.join(data_dir, value)):
        return os.path.join(data_dir, value)
    return None


def _whole_model_section(values):
    """A `model` override that replaces the config's model section whole (every key given; a
    merge key by key would mix two model descriptions)."""
    from opennmt_lite.config import ModelConfig

    section = {name: None for name in ModelConfig.__dataclass_fields__}
    section["position_encoding"] = "auto"  # (None would mean "no position encoding")
    section.update(values)
    return section


DESCRIPTION = "model_description.py"
CATALOG_DESCRIPTION = 'from opennmt import models\nmodel = lambda: models.get_model_from_catalog("{}")\n'


def _read_model_file(path):
    """{"model": ..., "auto_config": ...} of an OpenNMT-tf model file (the catalog form that
    OpenNMT-tf writes to model_description.py read here, the rest by model_file)."""
    from opennmt_lite.errors import MissingFileError

    if not os.path.isfile(path):
        raise MissingFileError(f"--model {path}: model file not found")
    with open(path, encoding="utf-8") as stream:
        text = stream.read()
    match = re.search(r"get_model_from_catalog\(\s*[\"'](\w+)[\"']\s*\)", text)
    if match and len(text.strip().splitlines()) <= 3:
        name = match.group(1)
        if f"--model_type {name}" in REFUSED or name not in CATALOG:
            raise ModelError(f"{path}: catalog model {name}: "
                             f"{REFUSED.get(f'--model_type {name}', 'not in the catalog')}")
        return {"model": {"preset": name}, "auto_config": None}
    from opennmt_lite.onmt import model_file  # (the user's own code runs here, as in OpenNMT-tf)
    from opennmt_lite.onmt import other_model_files

    if other_model_files.is_other_model_file(path):  # (a tagger, classifier or language model)
        description = other_model_files.read_other_model_file(path)
        return {"model": other_model_files.model_section(description), "auto_config": None}
    return model_file.read_model_file(path)


def _model(args, user, model_dir):
    """(model section override or None, custom auto_config or None, where the model came from,
    {side: (file, line)} of the WordEmbedders sized by their pretrained vectors)."""
    read = {}
    if args.model_type:
        model, origin = {"preset": args.model_type}, f"--model_type {args.model_type}"
    elif args.model:
        read = _read_model_file(args.model)
        model, origin = read["model"], f"--model {args.model}"
    elif user.get("model") is not None:
        return None, None, "the configuration's model section", {}
    elif os.path.isfile(os.path.join(model_dir, DESCRIPTION)):
        path = os.path.join(model_dir, DESCRIPTION)
        logger.info("loading the model description from %s", path)
        read = _read_model_file(path)
        model, origin = read["model"], path
    else:
        raise ModelError("a model configuration is required: set --model or --model_type on "
                         "the command line (or a model section in the configuration)")
    if user.get("model") is not None:
        logger.warning("%s replaces the model section of the configuration (OpenNMT-tf has no "
                       "model section: the command line wins)", origin)
    return (_whole_model_section(_section_values(model, origin)), read.get("auto_config"), origin,
            read.get("embedding_sizes_from_files") or {})


def _check_pretrained_sizes(config, sizes_from_files):
    """A WordEmbedder without embedding_size takes the size of its pretrained vectors: refused,
    as OpenNMT-tf refuses it ("embedding_size must be set"), when data.<side>_embedding is unset."""
    for side, (file, line) in sorted(sizes_from_files.items()):
        if getattr(config.data, f"{side}_embedding") is None:
            where = f"{file}, line {line}" if line else file
            raise ModelError(f"{where}: WordEmbedder() without embedding_size takes its size from "
                             f"pretrained embeddings, but the configuration sets no "
                             f"data.{side}_embedding")


def _section_values(model, origin):
    """The `model` section keys of a model description. A hyper-parameter the section does not
    have (e.g. mha_bias) is dropped at the carrier's default, refused otherwise."""
    from opennmt_lite.config import ModelConfig
    from opennmt_lite.hyperparameters import ModelHyperparameters

    defaults = ModelHyperparameters().to_dict()
    section = {}
    for name, value in model.items():
        if name in ModelConfig.__dataclass_fields__:
            section[name] = value
        elif name not in defaults or value != defaults[name]:
            raise ModelError(f"{origin}: {name}={value!r} cannot be configured here (the model "
                             "section has no such key)")
    return section


def _train_overrides(args, user):
    """The `train` section's command-line values."""
    train = {}
    if args.seed is not None:
        train["seed"] = args.seed
    if args.jit_compile:
        train["jit_compile"] = True
    if args.mixed_precision:
        from opennmt_lite import cpu

        if cpu.gpu_present():
            train["mixed_precision"] = "float16"
        else:  # (OpenNMT-tf's behaviour and warning)
            logger.warning("Mixed precision not enabled: no GPU is detected")
    if getattr(args, "num_gpus", 1) != 1:
        train["num_devices"] = args.num_gpus
    if _one_pass_for_given_pools(args, user):
        train["sub_batches"] = 1
    return train


def _one_pass_for_given_pools(args, user):
    """Whether thread pools are given on the command line while the files (`user`, merged) leave
    train.sub_batches unset: the run then takes one sub-batch, so that the user's pools stay as
    given (no parallel sub-batches resizing them)."""
    threads = args.intra_op_parallelism_threads or args.inter_op_parallelism_threads
    train = user.get("train")
    return bool(threads) and (train.get("sub_batches") if isinstance(train, dict) else None) is None


def configure(args):
    """The opennmt-lite `Config` of OpenNMT-tf's command line `args` (see the module docstring).
    Writes model_dir/model_description.py after --model or --model_type, as OpenNMT-tf does."""
    from opennmt_lite.config import ConfigError, build_config, load_config, merge

    user = _read_yaml(args.config)
    model_dir = args.model_dir or user.get("model_dir")
    if not model_dir:
        raise ConfigError("no model directory is defined: set --model_dir on the command line or "
                          "model_dir in the configuration")
    if args.run_dir:
        model_dir = os.path.join(args.run_dir, model_dir)
    auto_config = bool(args.auto_config)
    if "auto_config" in user and user["auto_config"] != auto_config:
        logger.warning("auto_config: %s in the configuration is overridden by the command line "
                       "(%s --auto_config: %s)", user["auto_config"],
                       "with" if auto_config else "without", auto_config)
    overrides = {"model_dir": model_dir, "auto_config": auto_config}
    model, custom_auto_config, origin, sizes_from_files = _model(args, user, model_dir)
    if model is not None:
        overrides["model"] = model
    data = _prefixed(args.data_dir, user.get("data") or {}) if args.data_dir else None
    data = dict(data or {})
    if args.run_type == "eval":
        if args.features_file:
            data["eval_features_file"] = args.features_file[0]
        if args.labels_file:
            data["eval_labels_file"] = args.labels_file
    if data:
        overrides["data"] = data
    train = _train_overrides(args, user)
    if train:
        overrides["train"] = train
    if custom_auto_config and auto_config:
        # The model's own auto_config(): above opennmt-lite's Transformer values, below the files
        # (checked merged: the files may hold keys of its own schedule only, e.g. InvSqrtDecay's).
        combined = custom_auto_config
        for path in args.config:
            combined = merge(combined, _read_yaml([path]))
        config = build_config(merge(combined, overrides), source=" + ".join(args.config)
                              + f" + auto_config() of {origin}")
    else:
        config = load_config(args.config, overrides)
    _check_pretrained_sizes(config, sizes_from_files)
    _write_description(args, config.model_dir)
    return config


def _write_description(args, model_dir):
    if not (args.model or args.model_type):
        return
    from opennmt_lite.files import atomic_write
    from opennmt_lite.outputs import writing

    path = os.path.join(model_dir, DESCRIPTION)
    if args.model:
        if os.path.abspath(args.model) == os.path.abspath(path):
            return
        with open(args.model, "rb") as stream:
            content = stream.read()
    else:
        content = CATALOG_DESCRIPTION.format(args.model_type).encode("utf-8")
    with writing(f"model_dir {model_dir}"):  # (a copy replaced whole, as every file written)
        os.makedirs(model_dir, exist_ok=True)
        with atomic_write(path, "wb") as stream:
            stream.write(content)


def checkpoint_argument(path):
    """OpenNMT-tf's --checkpoint_path (a directory or a prefix) as opennmt-lite's --checkpoint.
    A prefix `<dir>/ckpt-N` that OpenNMT-tf's layout would have is taken from `<dir>/checkpoints/`
    (where opennmt-lite's training wrote it) when it is only there."""
    if path is None:
        return None
    from opennmt_lite.checkpointing import store

    prefix = re.sub(r"\.(index|data-\d+-of-\d+)$", "", path)
    if os.path.isdir(prefix) or os.path.exists(prefix + ".index"):
        return path
    directory, name = os.path.split(prefix)
    moved = os.path.join(store.checkpoint_directory(directory), name)
    return moved if os.path.exists(moved + ".index") else path


# -- the run types -----------------------------------------------------------------------------

def _train(args, config):
    from opennmt_lite.commands import train
    from opennmt_lite.config import ConfigError

    missing = train.missing_vocabulary(config.data)
    if missing:  # (OpenNMT-tf does not build them: onmt-build-vocab does)
        raise ConfigError(f"vocabulary {missing[0]} not found: build it with onmt-build-vocab")
    if args.with_eval and not config.with_evaluation:
        raise ConfigError("train --with_eval: data.eval_features_file and data.eval_labels_file "
                          "must be set")
    train.run(argparse.Namespace(with_eval=args.with_eval), config)


def _evaluate(args, config):
    """OpenNMT-tf's `eval`: loss, perplexity and the eval.scorers of one checkpoint on the
    evaluation files, printed as a dict (and recorded under model_dir/eval like a training
    evaluation)."""
    from opennmt_lite import build
    from opennmt_lite.checkpointing import store
    from opennmt_lite.config import ConfigError

    if not config.with_evaluation:
        raise ConfigError("eval: give --features_file and --labels_file, or set "
                          "data.eval_features_file and data.eval_labels_file")
    model, assets, prefix = build.inference_model(config, checkpoint_argument(args.checkpoint_path))
    try:
        step = store.step_of(prefix)
    except store.CheckpointError:
        step = 0
    metrics = build.evaluator(config, model, assets, step)(step)
    print({name: value for name, value in metrics.items() if name != "step"})
    return metrics


def _infer(args, config):
    from opennmt_lite.commands import infer

    start = time.time()
    results = infer.run(argparse.Namespace(
        checkpoint=checkpoint_argument(args.checkpoint_path), features_file=args.features_file[0],
        predictions_file=args.predictions_file or None, beam_width=None, n_best=None,
        with_scores=None, ctranslate2=None, seed=None), config)
    if args.log_prediction_time:  # (OpenNMT-tf's lines; its tokens are the output's tokens)
        total = time.time() - start
        tokens = sum(len(text.split()) for hypotheses in results
                     for text, _ in hypotheses[:1]) if not config.model.is_encoder_model else 0
        logger.info("Total prediction time (s): %f", total)
        logger.info("Average prediction time (s): %f", total / max(len(results), 1))
        if tokens:
            logger.info("Tokens per second: %f", tokens / total)
    return results


def _export(args, config):
    from opennmt_lite.commands import export

    export_format, quantization = EXPORT_FORMATS[args.format]
    ctranslate2 = export_format == "ctranslate2"
    return export.run(argparse.Namespace(
        checkpoint=checkpoint_argument(args.checkpoint_path), output=args.output_dir,
        format=export_format, quantization=quantization, force=ctranslate2), config)


def _score(args, config):
    from opennmt_lite.commands import score
    from opennmt_lite.errors import ArgumentError

    if not args.predictions_file and not config.model.is_language_model:
        raise ArgumentError("score: --predictions_file is required (the translations to score)")

    return score.run(argparse.Namespace(
        checkpoint=checkpoint_argument(args.checkpoint_path), features_file=args.features_file[0],
        predictions_file=args.predictions_file, output_file=args.output_file), config)


def _average_checkpoints(args, config):
    from opennmt_lite.commands.average_checkpoints import average

    path = average(config, args.output_dir, args.max_count)
    logger.info("averaged checkpoint: %s", path)
    return path


def _update_vocab(args, config):
    from opennmt_lite import build
    from opennmt_lite.errors import ArgumentError
    from opennmt_lite.training.vocab_update import update_vocab

    if not args.src_vocab and not args.tgt_vocab:
        raise ArgumentError("update_vocab: give --src_vocab, --tgt_vocab or both")
    path = update_vocab(config, args.output_dir, args.src_vocab, args.tgt_vocab,
                        build.training_checkpoint)
    logger.info("updated checkpoint: %s", path)
    return path


RUNS = {"train": _train, "eval": _evaluate, "infer": _infer, "export": _export, "score": _score,
        "average_checkpoints": _average_checkpoints, "update_vocab": _update_vocab}


def _unused_checkpoint_path(args):
    if args.checkpoint_path is not None and args.run_type in ("average_checkpoints", "update_vocab"):
        logger.warning("--checkpoint_path is not used by %s: it reads the checkpoints of "
                       "model_dir (as in OpenNMT-tf)", args.run_type)


def _set_up_tensorflow(args):
    """OpenNMT-tf's process settings: thread pools, eager functions, GPU memory growth."""
    import tensorflow as tf

    try:
        if args.intra_op_parallelism_threads:
            tf.config.threading.set_intra_op_parallelism_threads(args.intra_op_parallelism_threads)
        if args.inter_op_parallelism_threads:
            tf.config.threading.set_inter_op_parallelism_threads(args.inter_op_parallelism_threads)
    except RuntimeError:  # (TensorFlow already started in this process: in-process callers)
        logger.warning("TensorFlow has already started: its thread pools stay as they are")
    if args.eager_execution:
        tf.config.run_functions_eagerly(True)
    if args.gpu_allow_growth:
        for device in tf.config.list_physical_devices("GPU"):
            try:
                tf.config.experimental.set_memory_growth(device, True)
            except RuntimeError:
                logger.warning("--gpu_allow_growth: %s is already initialized", device.name)


def _choose_training_kernels(args):
    """`train` on one device: the CPU kernels of float32 training, chosen before TensorFlow starts
    (`cpu.choose_training_kernels`), from the files' train.mixed_precision and train.sub_batches
    (--mixed_precision trains in float32 on a CPU, as in OpenNMT-tf) and the thread pools given
    (which keep one pass). Files that do not load are left to the run."""
    if args.run_type != "train" or getattr(args, "num_gpus", 1) != 1:
        return
    from opennmt_lite import cpu

    user = _read_yaml(args.config or [])
    train = user.get("train") if isinstance(user.get("train"), dict) else {}
    sub_batches = 1 if _one_pass_for_given_pools(args, user) else train.get("sub_batches")
    if sub_batches is not None and not isinstance(sub_batches, int):
        return
    cpu.choose_training_kernels(train.get("mixed_precision"), sub_batches)


def main(argv=None):
    """Runs one OpenNMT-tf command line; returns the exit status: 0, 2 for a user error (one
    line on stderr), 1 for a bug (with its traceback), 128 + N after signal N."""
    from opennmt_lite.cli import guarded, import_tensorflow_quietly

    try:
        args = parse_args(sys.argv[1:] if argv is None else argv)
    except SystemExit as exit:  # --help, --version (0), or a bad option, already printed (2)
        return exit.code
    _choose_training_kernels(args)
    import_tensorflow_quietly()
    logging.basicConfig(level=getattr(logging, args.log_level),
                        format="%(asctime)s %(levelname)s %(message)s", datefmt="%H:%M:%S")
    logging.getLogger("opennmt_lite").setLevel(getattr(logging, args.log_level))

    def run_type():
        from opennmt_lite import keras_backend

        keras_backend.require_tensorflow(f"{PROG} (OpenNMT-tf's command line)")
        refused = refusal(args)
        if refused is not None:
            raise refused
        _unused_checkpoint_path(args)
        _set_up_tensorflow(args)
        RUNS[args.run_type](args, configure(args))

    return guarded(run_type, f"{PROG} {args.run_type}")


def run():
    """The `onmt-main` console command."""
    from opennmt_lite.cli import exit_with

    exit_with(main())


if __name__ == "__main__":
    run()
