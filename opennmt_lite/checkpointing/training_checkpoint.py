"""What a training checkpoint holds, defined once: the model's variables (weights and dropout
seed states), its optimizer's state (step, slots, loss scale) and the data position (groups of
batches consumed, for exact resume). The trainer, checkpoint averaging and the vocabulary
update all build their checkpoint here, so the three always read and write the same names.

With a moving average of the weights (train.moving_average_decay), `model/<path>` holds each
trainable weight's average, as OpenNMT-tf's checkpoints do (what inference, export and averaging
read), and `moving_average/trained_weights/<path>` the weight training goes on from. A checkpoint
without the latter (older, or trained without the average) restores both from `model/<path>`.
"""

import keras

from opennmt_lite.checkpointing.names import named_trainable
from opennmt_lite.checkpointing.store import Checkpoint

GROUPS_DONE = "data/groups_done"  # the data position's name in the checkpoint
TRAINED_WEIGHTS = "moving_average/trained_weights"  # the weights themselves, beside their average


def training_checkpoint(model, optimizer, save_dir=None, restore_dir=None, max_to_keep=None,
                        averages=None):
    """The `Checkpoint` of a built `model` and built `optimizer` with a new data position
    variable (0; `checkpoint.variables[GROUPS_DONE]`), saving to `save_dir`, restoring from
    `restore_dir` (default: save_dir) and keeping the newest `max_to_keep` (None: all).
    `averages`: {path: variable} of a moving average of the trainable weights (see above)."""
    groups_done = keras.Variable(0, dtype="int64", trainable=False, name="groups_done")
    extra, fallbacks = {GROUPS_DONE: groups_done}, {}
    if averages:
        for path, weight in named_trainable(model).items():
            extra[f"model/{path}"] = averages[path]
            extra[f"{TRAINED_WEIGHTS}/{path}"] = weight
            fallbacks[f"{TRAINED_WEIGHTS}/{path}"] = f"model/{path}"
    return Checkpoint(model, optimizer, save_dir=save_dir, restore_dir=restore_dir,
                      max_to_keep=max_to_keep, extra=extra, fallbacks=fallbacks)


def restored_trained_weights(checkpoint):
    """Whether the checkpoint's last restore read trained weights beside their averages (else
    the averages, if any, start again from the weights)."""
    return any(name.startswith(TRAINED_WEIGHTS + "/") for name in checkpoint.restored_names)
