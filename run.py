#!/usr/bin/env python
"""opennmt-lite command line: build-vocab, train, infer, export, evaluate, inspect.

Each command loads the YAML config(s) (OpenNMT-tf's keys plus a `model` section) and calls one
function of the package; see README.md.
"""

import argparse
import logging
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def build_vocab(args, config):
    from opennmt_lite.build_vocab import build_vocab, build_word_vocab

    data = config["data"]
    source, target = data["source_tokenization"], data["target_tokenization"]
    if source is None and target is None:
        for files, path in (("train_features_file", "source_vocabulary"), ("train_labels_file", "target_vocabulary")):
            build_word_vocab(data[files], data[path], size=args.size)
        return
    if source is None or target is None or source["type"] != "sentencepiece" or target["type"] != "sentencepiece":
        raise SystemExit("error: build-vocab trains SentencePiece models for both sides, or none "
                         "(pre-tokenized data): set both data.source_tokenization and "
                         "data.target_tokenization, or neither")
    if source["model"] == target["model"]:  # one joint model (e.g. for share_embeddings: all)
        from opennmt_lite.tokenizers import train_sentencepiece

        if data["source_vocabulary"] != data["target_vocabulary"]:
            raise SystemExit("error: a joint SentencePiece model needs one vocabulary file: set "
                             "data.source_vocabulary and data.target_vocabulary to the same path")
        train_sentencepiece(
            [data["train_features_file"], data["train_labels_file"]],
            os.path.splitext(source["model"])[0], source["vocabulary_size"],
            model_type=source["model_type"], character_coverage=source["character_coverage"],
            seed=config["train"]["seed"], vocabulary_path=data["source_vocabulary"],
        )
        return
    build_vocab(
        features_file=data["train_features_file"], labels_file=data["train_labels_file"],
        source_model_prefix=os.path.splitext(source["model"])[0],
        target_model_prefix=os.path.splitext(target["model"])[0],
        source_vocabulary=data["source_vocabulary"], target_vocabulary=data["target_vocabulary"],
        source_size=source["vocabulary_size"], target_size=target["vocabulary_size"],
        model_type=source["model_type"], character_coverage=source["character_coverage"],
        seed=config["train"]["seed"],
    )


def missing_vocabulary(config):
    data = config["data"]
    paths = [data["source_vocabulary"], data["target_vocabulary"]] + [
        t["model"] for t in (data["source_tokenization"], data["target_tokenization"]) if t
    ]
    return [path for path in paths if path and not os.path.exists(path)]


def train(args, config):
    from opennmt_lite.evaluation import Evaluator
    from opennmt_lite.training import train

    missing = missing_vocabulary(config)
    if missing:  # first run: build what the config names, so one command does the whole job
        logging.getLogger("opennmt_lite").info("building vocabularies (missing: %s)", ", ".join(missing))
        build_vocab(args, config)
    data = config["data"]
    with_eval = bool(data.get("eval_features_file") and data.get("eval_labels_file"))
    summary = train(config, evaluator_factory=Evaluator if with_eval else None)
    logging.getLogger("opennmt_lite").info(
        "training finished at step %d (%s); latest checkpoint: %s",
        summary["step"], summary["stopped"], summary.get("checkpoint"),
    )


def inspect(args, config):
    from opennmt_lite.inspection import inspect_command

    inspect_command(config, sentence=args.sentence, ids=args.ids, checkpoint=args.checkpoint,
                    attention_dir=args.attention_png, show_values=args.values)


def infer(args, config):
    from opennmt_lite.infer import infer_command

    infer_command(config, args.features_file, args.predictions_file, checkpoint=args.checkpoint,
                  beam_width=args.beam_width, n_best=args.n_best, with_scores=args.with_scores)


def export(args, config):
    from opennmt_lite.export import export_command

    export_command(config, args.output, checkpoint=args.checkpoint)


def evaluate(args, config):
    from opennmt_lite.scoring import score_files

    for name, value in score_files(args.predictions_file, args.references_file).items():
        print(f"{name}: {value}")


COMMANDS = {
    "build-vocab": (build_vocab, "train SentencePiece models and write OpenNMT-tf vocabularies"),
    "train": (train, "train the model"),
    "infer": (infer, "translate a file"),
    "export": (export, "write a TensorFlow SavedModel"),
    "evaluate": (evaluate, "BLEU and chrF of a predictions file against references"),
    "inspect": (inspect, "show every intermediate tensor of the encoder on one sentence"),
}


def parse_args(argv):
    parser = argparse.ArgumentParser(prog="run.py", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name, (_, help_text) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text)
        p.add_argument("--config", nargs="+", required=name != "evaluate",
                       help="YAML config file(s), merged left to right")
        p.add_argument("--log_level", default="INFO")
        if name in ("build-vocab", "train"):
            p.add_argument("--size", type=int, default=0,
                           help="pre-tokenized data only: vocabulary lines (0 = every token)")
        if name in ("infer", "export", "inspect"):
            p.add_argument("--checkpoint", help="checkpoint prefix or directory (default: latest)")
        if name == "infer":
            p.add_argument("--features_file", required=True)
            p.add_argument("--predictions_file", help="default: standard output")
            p.add_argument("--beam_width", type=int)
            p.add_argument("--n_best", type=int)
            p.add_argument("--with_scores", action="store_true", default=None)
        if name == "train":
            p.add_argument("--num_devices", type=int,
                           help="train on N devices of this machine (GPUs, or the CPU split in N)")
        if name == "export":
            p.add_argument("--output", required=True, help="SavedModel directory to write")
        if name == "evaluate":
            p.add_argument("--predictions_file", required=True)
            p.add_argument("--references_file", required=True)
        if name == "inspect":
            source = p.add_mutually_exclusive_group(required=True)
            source.add_argument("--sentence", help="raw source text (tokenized as configured)")
            source.add_argument("--ids", help="space-separated source token ids")
            p.add_argument("--attention_png", help="directory for attention heat maps (PNG)")
            p.add_argument("--values", action="store_true", help="also print tensor values")
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(message)s",
                        datefmt="%H:%M:%S")
    from opennmt_lite.errors import is_user_error

    try:
        config = None
        if args.config:
            from opennmt_lite.config import load_config

            overrides = {}
            if getattr(args, "num_devices", None):
                overrides = {"train": {"num_devices": args.num_devices}}
            config = load_config(args.config, overrides)
        COMMANDS[args.command][0](args, config)
    except Exception as error:  # a user's mistake gets one clear line, a bug its traceback
        if is_user_error(error):
            print(f"error: {error}", file=sys.stderr)
            return 2
        raise
    return 0


if __name__ == "__main__":
    sys.exit(main())
