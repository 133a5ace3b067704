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


def run(args, config):
    from opennmt_lite.training.averaging import average_checkpoints

    output_dir = args.output_dir or os.path.join(config.model_dir, "avg")
    path = average_checkpoints(config, output_dir, args.max_count)
    print(path)
    return path
