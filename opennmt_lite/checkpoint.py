"""Training checkpoints: model, optimizer state, and the input pipeline's position.

Every variable is saved under an explicit name (`model/encoder/layers/0/...`,
`optimizer/m/encoder/...`, `data/epoch`), built by walking the layer tree
(`variables.named_variables`), so nothing a Keras 3 layer keeps in a Python list can be missed;
`contents()` lists what a checkpoint file holds for tests and for `inspect`.

Files: `<model_dir>/checkpoints/ckpt-<step>.{index,data-*}` and the `checkpoint` state file.
TensorFlow writes a checkpoint to temporary files, renames them, and only then rewrites the
state file atomically, so a process killed mid-save leaves the previous checkpoint as the latest.
"""

import os

import numpy as np
import tensorflow as tf

from opennmt_lite.optimizers import optimizer_state
from opennmt_lite.variables import named_variables, nested

SUFFIX = "/.ATTRIBUTES/VARIABLE_VALUE"


class CheckpointError(ValueError):
    pass


def checkpoint_directory(model_dir):
    return os.path.join(model_dir, "checkpoints")


def contents(path):
    """{name: shape} of the variables stored in a checkpoint file (prefix or directory)."""
    if os.path.isdir(path):
        path = tf.train.latest_checkpoint(path)
    return {
        name[: -len(SUFFIX)]: tuple(shape)
        for name, shape in tf.train.list_variables(path)
        if name.endswith(SUFFIX)
    }


class Checkpoint:
    """Saves and restores a model, its optimizer and extra named variables (e.g. data position)."""

    def __init__(self, model, optimizer=None, directory=None, max_to_keep=8, extra=None):
        self.model = model
        self.optimizer = optimizer
        self.directory = directory
        trainable = {
            path: v for path, v in named_variables(model, include_seeds=False).items() if v.trainable
        }
        self.variables = {f"model/{p}": v for p, v in named_variables(model).items()}
        if optimizer is not None:
            state = optimizer_state(optimizer, trainable)
            self.variables.update({f"optimizer/{p}": v for p, v in state.items()})
        for name, variable in (extra or {}).items():
            self.variables[name] = variable
        self._checkpoint = tf.train.Checkpoint(**nested(self.variables))
        self.manager = None
        if directory is not None:
            self.manager = tf.train.CheckpointManager(
                self._checkpoint, directory, max_to_keep=max_to_keep, checkpoint_name="ckpt"
            )

    @property
    def latest(self):
        return tf.train.latest_checkpoint(self.directory) if self.directory else None

    def save(self, step):
        """Writes `ckpt-<step>`; returns its path."""
        return self.manager.save(checkpoint_number=int(step))

    def check_compatible(self, path):
        """Raises CheckpointError naming every variable whose shape differs or that is missing."""
        stored = contents(path)
        problems = []
        for name, variable in self.variables.items():
            if name.startswith("model/") and "dropout_seed" in name:
                continue  # dropout seed states may be absent (e.g. dropout was 0 when saved)
            if name not in stored:
                problems.append(f"missing: {name}")
            elif stored[name] != tuple(variable.shape):
                problems.append(
                    f"shape mismatch: {name} is {stored[name]} in the checkpoint, "
                    f"{tuple(variable.shape)} in the model"
                )
        unexpected = [n for n in stored if n.startswith("model/") and n not in self.variables
                      and "dropout_seed" not in n]
        problems += [f"not in the model: {n} {stored[n]}" for n in sorted(unexpected)]
        if problems:
            raise CheckpointError(
                f"checkpoint {path} does not match the configured model "
                f"(was it trained with another model configuration?):\n  " + "\n  ".join(problems)
            )

    def restore(self, path=None):
        """Restores `path` (default: the latest in the directory); returns the path or None."""
        path = path or self.latest
        if path is None:
            return None
        self.check_compatible(path)
        status = self._checkpoint.read(path)
        status.assert_existing_objects_matched()
        return path

    def restore_weights(self, path):
        """Restores only the model variables of `path` (for inference, export, fine-tuning)."""
        self.check_compatible(path)
        reader = tf.train.load_checkpoint(path)
        for name, variable in self.variables.items():
            if name.startswith("model/") and reader.has_tensor(name + SUFFIX):
                variable.assign(np.asarray(reader.get_tensor(name + SUFFIX)))
        return path
