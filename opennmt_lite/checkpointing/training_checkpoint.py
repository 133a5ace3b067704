"""What a training checkpoint holds, defined once: the model's variables (weights and dropout
seed states), its optimizer's state (step, slots, loss scale) and the data position (groups of
batches consumed, for exact resume). The trainer, checkpoint averaging and the vocabulary
update all build their checkpoint here, so the three always read and write the same names.
"""

import keras

from opennmt_lite.checkpointing.store import Checkpoint

GROUPS_DONE = "data/groups_done"  # the data position's name in the checkpoint


def training_checkpoint(model, optimizer, save_dir=None, restore_dir=None, max_to_keep=None):
    """The `Checkpoint` of a built `model` and built `optimizer` with a new data position
    variable (0; `checkpoint.variables[GROUPS_DONE]`), saving to `save_dir`, restoring from
    `restore_dir` (default: save_dir) and keeping the newest `max_to_keep` (None: all)."""
    groups_done = keras.Variable(0, dtype="int64", trainable=False, name="groups_done")
    return Checkpoint(model, optimizer, save_dir=save_dir, restore_dir=restore_dir,
                      max_to_keep=max_to_keep, extra={GROUPS_DONE: groups_done})
