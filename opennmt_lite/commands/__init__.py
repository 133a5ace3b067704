"""One module per `run.py` command. Each has `HELP`, `add_arguments(parser)` and `run(args,
config)`; `config` is the loaded `Config` (None for commands that take no --config)."""

import argparse

from opennmt_lite.config import LARGEST_INT

# Command name (as typed) -> module name, in the order `run.py --help` lists them.
COMMANDS = {
    "build-vocab": "build_vocab",
    "train": "train",
    "infer": "infer",
    "export": "export",
    "evaluate": "evaluate",
    "score": "score",
    "average_checkpoints": "average_checkpoints",
    "update_vocab": "update_vocab",
    "inspect": "inspect",
    "serve": "serve",
}


def int_at_least(minimum):
    """An argparse type: an integer of at least `minimum` (a command-line value is checked like a
    config value, never silently replaced)."""

    def parse(text):
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, got {value}")
        if value > LARGEST_INT:  # (TensorFlow's int32)
            raise argparse.ArgumentTypeError(f"must be at most {LARGEST_INT}, got {value}")
        return value

    return parse


positive_int = int_at_least(1)
non_negative_int = int_at_least(0)


def add_checkpoint_argument(parser):
    parser.add_argument("--checkpoint", help="checkpoint prefix or directory (default: the latest "
                        "of model_dir, opennmt-lite's or OpenNMT-tf's)")
