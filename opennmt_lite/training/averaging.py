"""Checkpoint averaging (`run.py average_checkpoints`, and `train.average_last_checkpoints` at
the end of training), as OpenNMT-tf's `average_checkpoints`.

The model and optimizer of the config are built, the newest of the checkpoints restored whole
(model, optimizer state, step, data position; an OpenNMT-tf checkpoint's weights, Adam moments
and step imported), then every model weight is replaced by its average over the checkpoints
(see `checkpoints.average_values`) and the result saved as an opennmt-lite checkpoint
`<output_dir>/ckpt-<step of the newest>`. Only the weights are averaged: the optimizer state
and the step are the newest checkpoint's, as in OpenNMT-tf. The result loads with
`--checkpoint <output_dir>` (infer, export, score) and trains on (`train` with model_dir set
to output_dir, or `train --checkpoint <output_dir>` in a new model_dir).
"""

import logging
import os

from opennmt_lite import checkpoints
from opennmt_lite.errors import OutputError

logger = logging.getLogger("opennmt_lite")


def training_checkpoint(config, save_dir=None):
    """A `checkpoints.Checkpoint` of the model, optimizer and data position built from `config`
    (in its training precision, as `build.trainer` builds them), saving to `save_dir`."""
    import keras

    from opennmt_lite import build

    policy = build.set_precision(config.train.dtype_policy)
    assets = build.assets(config.data)
    model = build.model(config.model, assets)
    optimizer = build.optimizer(config.params, policy)
    optimizer.build(model.trainable_variables)
    groups_done = keras.Variable(0, dtype="int64", trainable=False, name="groups_done")
    return checkpoints.Checkpoint(model, optimizer, save_dir=save_dir, max_to_keep=None,
                                  extra={"data/groups_done": groups_done})


def restored_checkpoint(config, prefix, save_dir=None):
    """`training_checkpoint(config, save_dir)` restored from `prefix` (either format). Returns
    (Checkpoint, {checkpoint name: model variable} in `prefix`'s format)."""
    from opennmt_lite.onmt import checkpoint_import

    checkpoint = training_checkpoint(config, save_dir)
    model, optimizer = checkpoint.model, checkpoint.optimizer
    if checkpoints.is_onmt(prefix):
        checkpoint_import.assign_model(prefix, model)
        checkpoint_import.assign_optimizer_state(prefix, model, optimizer)
        mapping = checkpoint_import.model_mapping(model, checkpoints.contents(prefix))
    else:
        import tensorflow as tf

        checkpoint.restore(prefix)
        # (Keras variables give their dtype as a string, tf.Variables as a DType)
        mapping = {name: variable for name, variable in checkpoint.variables.items()
                   if name.startswith("model/") and tf.as_dtype(variable.dtype).is_floating}
    return checkpoint, mapping


def check_output_dir(output_dir, model_dir, option):
    """The output directory must not be model_dir nor its checkpoints/ folder (their
    checkpoints would be mixed with the result)."""
    real = os.path.realpath(output_dir)
    if real in (os.path.realpath(model_dir),
                os.path.realpath(checkpoints.checkpoint_directory(model_dir))):
        raise OutputError(f"{option} {output_dir} must differ from model_dir and its checkpoints "
                          "folder")
    if os.path.exists(output_dir) and not os.path.isdir(output_dir):
        raise OutputError(f"{option} {output_dir} exists and is not a directory")


def average_checkpoints(config, output_dir, max_count=8, option="--output_dir"):
    """Averages the newest `max_count` checkpoints of config.model_dir into `output_dir`;
    returns the prefix written."""
    check_output_dir(output_dir, config.model_dir, option)
    prefixes = checkpoints.to_average(config.model_dir, max_count)
    checkpoints.check_same_variables(prefixes)  # (before the model is fitted to the newest)
    checkpoint, mapping = restored_checkpoint(config, prefixes[-1], output_dir)
    averages = checkpoints.average_values(prefixes, sorted(mapping))
    for name, variable in mapping.items():
        variable.assign(averages[name].astype(variable.dtype))
    path = checkpoint.save(checkpoints.step_of(prefixes[-1]))
    logger.info("averaged %d checkpoints (%s) into %s", len(prefixes),
                ", ".join(os.path.basename(p) for p in prefixes), path)
    return path
