"""Checkpoint averaging (`run.py average_checkpoints`, and `train.average_last_checkpoints` at
the end of training), as OpenNMT-tf's `average_checkpoints`.

The newest of the checkpoints is restored whole into a training checkpoint built from the
config (model, optimizer state, step, data position; an OpenNMT-tf checkpoint's weights, Adam
moments and step imported), then every model weight is replaced by its average over the
checkpoints (see `store.average_values`) and the result saved as an opennmt-lite checkpoint
`<output_dir>/ckpt-<step of the newest>`. Only the weights are averaged: the optimizer state
and the step are the newest checkpoint's, as in OpenNMT-tf. The result loads with
`--checkpoint <output_dir>` (infer, export, score) and trains on (`train` with model_dir set
to output_dir, or `train --checkpoint <output_dir>` in a new model_dir).
"""

import logging
import os

from opennmt_lite.checkpointing import formats, store
from opennmt_lite.errors import OutputError

logger = logging.getLogger("opennmt_lite")


def check_output_dir(output_dir, model_dir, option):
    """The output directory must not be model_dir nor its checkpoints/ folder (their
    checkpoints would be mixed with the result)."""
    real = os.path.realpath(output_dir)
    if real in (os.path.realpath(model_dir),
                os.path.realpath(store.checkpoint_directory(model_dir))):
        raise OutputError(f"{option} {output_dir} must differ from model_dir and its checkpoints "
                          "folder")
    if os.path.exists(output_dir) and not os.path.isdir(output_dir):
        raise OutputError(f"{option} {output_dir} exists and is not a directory")


def checkpoints_to_average(model_dir, output_dir, max_count=8, option="--output_dir"):
    """The newest `max_count` checkpoints of model_dir, oldest first, checked before any model
    is built: `output_dir` (named `option` in errors) is usable, there are at least 2, of one
    format, holding the same variables."""
    check_output_dir(output_dir, model_dir, option)
    prefixes = store.to_average(model_dir, max_count)
    formats.check_one_format(prefixes)
    store.check_same_variables(prefixes)
    return prefixes


def average_checkpoints(checkpoint, prefixes):
    """Writes the average of `prefixes` (see checkpoints_to_average) with `checkpoint`, a built
    training checkpoint (see build.training_checkpoint) saving to the output directory; returns
    the prefix written."""
    mapping = formats.restore_whole(checkpoint, prefixes[-1])
    averages = store.average_values(prefixes, sorted(mapping))
    for name, variable in mapping.items():
        variable.assign(averages[name].astype(variable.dtype))
    path = checkpoint.save(store.step_of(prefixes[-1]))
    logger.info("averaged %d checkpoints (%s) into %s", len(prefixes),
                ", ".join(os.path.basename(p) for p in prefixes), path)
    return path
