"""The one module that chooses between the two checkpoint formats this package reads.

- opennmt-lite's own (`store.Checkpoint`): written by training to `<model_dir>/checkpoints/`,
  and by average_checkpoints and update_vocab to the directory they are given.
- OpenNMT-tf 2.x's, directly in `<model_dir>` (its layout): told apart by its inputter names
  (`onmt_names.MARK`), mapped onto our variables by onmt_names.py, and never written to.
"""

import logging

import keras

from opennmt_lite.checkpointing import onmt_names, store

logger = logging.getLogger("opennmt_lite")


def is_onmt(prefix):
    """Whether `prefix` is an OpenNMT-tf checkpoint (else an opennmt-lite one)."""
    return any(name.startswith(onmt_names.MARK) for name in store.contents(prefix))


def check_one_format(prefixes):
    """CheckpointError if `prefixes` mix OpenNMT-tf and opennmt-lite checkpoints."""
    if len({is_onmt(prefix) for prefix in prefixes}) > 1:
        raise store.CheckpointError(f"cannot average OpenNMT-tf and opennmt-lite checkpoints "
                                    f"together: {', '.join(prefixes)}")


def restore_weights(model, model_dir, checkpoint=None):
    """Loads model weights (infer, export, evaluate, inspect) from `checkpoint` (see
    store.resolve), else from the newest readable checkpoint of `model_dir` (see store.latest),
    of either format. Returns the prefix loaded; CheckpointNotFoundError (a FileNotFoundError)
    if there is none."""
    prefix = store.resolve(checkpoint) if checkpoint is not None else store.latest(model_dir)
    if prefix is None:
        raise store.CheckpointNotFoundError(
            f"no checkpoint in {store.checkpoint_directory(model_dir)} nor an OpenNMT-tf "
            f"checkpoint in {model_dir}: train a model first or pass --checkpoint")
    if is_onmt(prefix):
        onmt_names.assign_model(prefix, model)
        logger.info("loaded OpenNMT-tf checkpoint %s", prefix)
    else:
        store.Checkpoint(model).restore_weights(prefix)
        logger.info("loaded checkpoint %s", prefix)
    return prefix


def restore_whole(checkpoint, prefix):
    """Restores a training checkpoint (see training_checkpoint.py) from `prefix`: an
    opennmt-lite one entirely (model, optimizer, data position), an OpenNMT-tf one by import
    (weights, Adam moments and step; the data position stays 0). Returns {name in `prefix`:
    model weight} for the floating-point weights (what averaging averages)."""
    model, optimizer = checkpoint.model, checkpoint.optimizer
    if is_onmt(prefix):
        onmt_names.assign_model(prefix, model)
        onmt_names.assign_optimizer_state(prefix, model, optimizer)
        return onmt_names.model_mapping(model, store.contents(prefix))
    checkpoint.restore(prefix)
    return {name: variable for name, variable in checkpoint.variables.items()
            if name.startswith("model/") and keras.backend.is_float_dtype(variable.dtype)}


def restore_for_training(checkpoint, model_dir):
    """Restores a training run: the newest readable opennmt-lite checkpoint of
    `checkpoint.restore_dir` (model, optimizer, data position), else the newest readable
    checkpoint directly in `model_dir`: an OpenNMT-tf one (weights, Adam moments and step
    imported) or an opennmt-lite one (an average or a vocabulary update). Returns the
    prefix restored or imported, or None (nothing to restore: training starts from scratch)."""
    prefix = checkpoint.restore()
    if prefix is not None:
        logger.info("restored %s (step %d)", prefix, int(checkpoint.optimizer.iterations.numpy()))
        return prefix
    prefix, _ = store.newest_intact(model_dir)
    if prefix is None:
        return None
    # an opennmt-lite checkpoint directly in model_dir was written by average_checkpoints or
    # update_vocab; training goes on saving to checkpoints/ in both cases
    restore_whole(checkpoint, prefix)
    step = int(checkpoint.optimizer.iterations.numpy())
    if is_onmt(prefix):
        logger.info("imported OpenNMT-tf checkpoint %s (step %d); opennmt-lite checkpoints go "
                    "to %s", prefix, step, checkpoint.save_dir)
    else:
        logger.info("restored %s (step %d); checkpoints go to %s", prefix, step,
                    checkpoint.save_dir)
    return prefix
