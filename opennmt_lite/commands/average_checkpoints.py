"""`run.py average_checkpoints`: the average of the newest checkpoints of model_dir, as
OpenNMT-tf's `onmt-main average_checkpoints` (see opennmt_lite.training.averaging)."""

import os

from opennmt_lite.commands import positive_int

HELP = "average the newest checkpoints of model_dir (opennmt-lite's or OpenNMT-tf's)"


def add_arguments(parser):
    parser.add_argument("--max_count", type=positive_int, default=8,
                        help="average at most this many of the newest checkpoints (default 8)")
    parser.add_argument("--output_dir", help="where to write the averaged checkpoint (default: "
                        "<model_dir>/avg)")
    parser.add_argument("--force", action="store_true",
                        help="write into --output_dir even if it already holds files (a "
                        "checkpoint of the same step there is replaced)")


def run(args, config):
    output_dir = args.output_dir or os.path.join(config.model_dir, "avg")
    path = average(config, output_dir, args.max_count, force=args.force)
    print(path)
    return path


def average(config, output_dir, max_count, option="--output_dir", force=False):
    """Averages the newest `max_count` checkpoints of config.model_dir into `output_dir` (named
    `option` in errors; one holding files only with `force`); returns the prefix written. The
    checkpoints and the output directory are checked before the model is built."""
    from opennmt_lite import build
    from opennmt_lite.outputs import check_directory
    from opennmt_lite.training import averaging

    prefixes = averaging.checkpoints_to_average(config.model_dir, output_dir, max_count, option)
    check_directory(output_dir, option, force=force)
    return averaging.average_checkpoints(build.training_checkpoint(config, output_dir), prefixes)
