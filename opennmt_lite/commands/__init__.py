"""One module per `run.py` command. Each has `HELP`, `add_arguments(parser)` and `run(args,
config)`; `config` is the loaded `Config` (None for commands that take no --config)."""

from opennmt_lite.config import integer_option

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
    """An argparse type: an integer of at least `minimum` and at most LARGEST_INT, checked by
    the config's own check (a command-line value is checked like a config value, never silently
    replaced)."""
    return integer_option(minimum)


positive_int = int_at_least(1)
non_negative_int = int_at_least(0)


def add_checkpoint_argument(parser):
    parser.add_argument("--checkpoint", help="checkpoint prefix or directory (default: the latest "
                        "of model_dir, opennmt-lite's or OpenNMT-tf's)")
