"""The checkpoint store: finding, checking, reading, saving and rotating checkpoint files.

Checkpoints are `<prefix>.{index,data-*}` files, opennmt-lite's in `<model_dir>/checkpoints/`,
OpenNMT-tf's directly in `<model_dir>` (see formats.py, which tells them apart). Damage (a
save killed between TensorFlow's writes, a truncated or corrupted file) must not cost training
progress. So checkpoints are found by listing their files, not from the `checkpoint` state
file; the one to use is read in full first (checksums and sizes), and a damaged one is skipped,
with a warning, for the next newest. Training moves the damaged ones it skipped into
`checkpoints/damaged/`, and rotation counts only readable checkpoints, so it never deletes a
good checkpoint while keeping a bad one.

`Checkpoint` saves every variable under an explicit name (`model/encoder/layers/0/...`,
`optimizer/m/encoder/...`, `data/groups_done`; see names.py), so nothing a Keras 3 layer keeps
in a Python list can be missed, and restores them by those names (reads each value, assigns it
to its Keras variable), so that a checkpoint written on either backend loads on the other.

The files are TensorFlow's checkpoint format on both backends. With Keras on TensorFlow, they
are read and written by TensorFlow (`tf.train.load_checkpoint`, `tf.train.Checkpoint.write`:
native checksums, and the object graph other TensorFlow tools restore from); on any other
backend, or where TensorFlow is not installed, by bundle.py (NumPy only, the same files).
"""

import contextlib
import importlib.util
import logging
import os
import re
import shutil

import keras
import numpy as np

from opennmt_lite.checkpointing import bundle
from opennmt_lite.checkpointing.names import named_trainable, named_variables, nested, optimizer_state
from opennmt_lite.errors import OutputError, UserError
from opennmt_lite.files import atomic_write
from opennmt_lite.outputs import describe

logger = logging.getLogger("opennmt_lite")

# TensorFlow reads and writes the files only on its own backend (it is not imported otherwise:
# a JAX install need not have it).
TENSORFLOW = keras.backend.backend() == "tensorflow" and importlib.util.find_spec("tensorflow") is not None
if TENSORFLOW:
    import tensorflow as tf

SUFFIX = "/.ATTRIBUTES/VARIABLE_VALUE"
# ckpt-12.index, ckpt-12.data-00000-of-00001 -> prefix ckpt-12, step 12
FILE_PATTERN = re.compile(r"^(.+-(\d+))\.(index|data-\d+-of-\d+)$")
# What a killed save leaves: TensorFlow's `<prefix>_temp/` folder and our state file's temp.
LEFTOVER_PATTERN = re.compile(r"^(.+-\d+_temp|checkpoint\.tmp.*)$")
REPLACED = ".replaced"  # a checkpoint's file set aside while the same step is written again


class CheckpointError(UserError, ValueError):
    """A checkpoint that is damaged or does not fit the model; the message names its path."""


class CheckpointNotFoundError(CheckpointError, FileNotFoundError):
    """No checkpoint where one was asked for."""


class CheckpointWriteError(OutputError):
    """A checkpoint could not be written (a full disk, a read-only directory...); the message
    names it, the OS error, and the checkpoint kept."""


def checkpoint_directory(model_dir):
    return os.path.join(model_dir, "checkpoints")


# -- finding ---------------------------------------------------------------------------------

def candidates(directory):
    """[prefix] of every checkpoint in `directory` with any file (index or data), newest step
    first: listed from the files themselves, so a damaged `checkpoint` state file is harmless."""
    if not os.path.isdir(directory):
        return []
    steps = {}
    for name in os.listdir(directory):
        match = FILE_PATTERN.match(name)
        if match:
            steps[os.path.join(directory, match.group(1))] = int(match.group(2))
    return sorted(steps, key=steps.get, reverse=True)


def damage(prefix, read_data=True):
    """Why the checkpoint `prefix` cannot be used, or None if it can: its index or a data shard
    is missing, the index does not parse, or (with `read_data`) a tensor cannot be read back,
    which catches truncated and corrupted data (TensorFlow checks sizes and checksums)."""
    if not os.path.exists(prefix + ".index"):
        return "its .index file is missing"
    shards = {}  # {shard count: shard indices present}
    for path in _files(prefix):
        match = re.search(r"\.data-(\d+)-of-(\d+)$", path)
        if match:
            shards.setdefault(int(match.group(2)), set()).add(int(match.group(1)))
    if not any(found == set(range(count)) for count, found in shards.items()):
        return "a data file is missing"
    try:
        if not TENSORFLOW:
            bundle.check_bundle(prefix) if read_data else bundle.bundle_names(prefix)
            return None
        reader = tf.train.load_checkpoint(prefix)
        if read_data:
            for name in reader.get_variable_to_shape_map():
                reader.get_tensor(name)
    except Exception as error:  # the reader's errors vary: OpError, IndexError on a short read
        return f"unreadable ({str(error).splitlines()[0]})"
    return None


def newest_intact(directory):
    """(newest readable checkpoint of `directory` or None, [(damaged newer prefix, why)]);
    each damaged one skipped is logged."""
    skipped = []
    for prefix in candidates(directory):
        reason = damage(prefix)
        if reason is None:
            _note_state_file(directory, prefix)
            return prefix, skipped
        logger.warning("skipping damaged checkpoint %s: %s", prefix, reason)
        skipped.append((prefix, reason))
    return None, skipped


def _note_state_file(directory, prefix):
    """Says when the `checkpoint` state file disagrees with the checkpoint chosen (it is not
    used: a killed save or a damaged disk can leave it wrong)."""
    path = os.path.join(directory, "checkpoint")
    if not os.path.exists(path):
        return
    try:
        named = _state_file_checkpoint(path)
    except Exception:  # garbage in the file: a text-format parse error
        logger.warning("ignoring the unreadable checkpoint state file %s", path)
        return
    if os.path.basename(named) != os.path.basename(prefix):
        logger.warning("the checkpoint state file %s names %s; using %s, the newest readable",
                       path, named, prefix)


def _state_file_checkpoint(path):
    """The `model_checkpoint_path` that TensorFlow's `checkpoint` state file `path` names (a
    text protobuf), relative to the file's folder, as TensorFlow gives it; ValueError if it does
    not parse."""
    if TENSORFLOW:
        return tf.train.get_checkpoint_state(os.path.dirname(path)).model_checkpoint_path
    with open(path, encoding="utf-8") as stream:
        text = stream.read()
    field = r'\s*(model_checkpoint_path|all_model_checkpoint_paths|last_preserved_timestamp|' \
            r'all_model_checkpoint_timestamps)\s*:\s*("(?:[^"\\]|\\.)*"|[-+.\deE]+)\s*'
    if not re.fullmatch(f"(?:{field})*", text):
        raise ValueError(f"{path} does not parse")
    named = re.search(r'model_checkpoint_path\s*:\s*"((?:[^"\\]|\\.)*)"', text)
    if named is None:
        raise ValueError(f"{path} names no checkpoint")
    return os.path.join(os.path.dirname(path), named.group(1))  # (absolute stays absolute)


def latest(model_dir):
    """The newest readable opennmt-lite checkpoint of `model_dir` (in `checkpoints/`), else the
    newest readable checkpoint directly in `model_dir` (OpenNMT-tf's layout), else None."""
    for directory in (checkpoint_directory(model_dir), model_dir):
        prefix, _ = newest_intact(directory)
        if prefix is not None:
            return prefix
    return None


def resolve(path):
    """The checkpoint prefix a user's `path` names: a prefix (`.../ckpt-12`), one of its files
    (`ckpt-12.index`), or a directory (a model_dir or a checkpoints folder: its newest readable
    checkpoint), read in full first. Raises CheckpointNotFoundError naming `path` if there is
    none, CheckpointError if the prefix named is damaged."""
    path = re.sub(r"\.(index|data-\d+-of-\d+)$", "", path)
    if os.path.isdir(path):
        prefix = latest(path)
        if prefix is None:
            raise CheckpointNotFoundError(f"no checkpoint found in directory {path}")
        return prefix
    if not os.path.exists(path + ".index"):
        raise CheckpointNotFoundError(f"checkpoint {path} not found (no {path}.index)")
    reason = damage(path)
    if reason is not None:
        raise CheckpointError(f"checkpoint {path} is damaged: {reason}")
    return path


# -- reading ---------------------------------------------------------------------------------

def _damaged(prefix, error):
    return CheckpointError(f"checkpoint {prefix} is damaged: {str(error).splitlines()[0]}")


def _stored_shapes(prefix):
    """{stored name: shape} of every tensor of the checkpoint `prefix`."""
    if not os.path.exists(prefix + ".index"):
        raise CheckpointNotFoundError(f"checkpoint {prefix} not found (no {prefix}.index)")
    try:
        if not TENSORFLOW:
            return {name: shape for name, (_, shape) in bundle.bundle_names(prefix).items()}
        reader = tf.train.load_checkpoint(prefix)
        return {name: tuple(shape) for name, shape in reader.get_variable_to_shape_map().items()}
    except Exception as error:
        raise _damaged(prefix, error) from None


def contents(path):
    """{name: shape} of the variables stored in a checkpoint prefix (or the one `resolve` picks
    in a directory); names without the `/.ATTRIBUTES/VARIABLE_VALUE` suffix."""
    stored = _stored_shapes(resolve(path) if os.path.isdir(path) else path)
    return {name[: -len(SUFFIX)]: shape for name, shape in stored.items() if name.endswith(SUFFIX)}


def read(prefix, names):
    """{name: numpy value} for each of `names` (no suffix); CheckpointError if unreadable."""
    try:
        if not TENSORFLOW:
            values = bundle.read_bundle(prefix, [name + SUFFIX for name in names])
            return {name: values[name + SUFFIX] for name in names}
        reader = tf.train.load_checkpoint(prefix)
        return {name: reader.get_tensor(name + SUFFIX) for name in names}
    except FileNotFoundError:
        raise CheckpointNotFoundError(f"checkpoint {prefix} not found (no {prefix}.index)") from None
    except Exception as error:  # a short read or a checksum mismatch
        raise _damaged(prefix, error) from None


def _optional(name):
    # Dropout seed states may be absent (saved with dropout 0) or extra (loaded with dropout 0).
    # The Adam moments of an embedding table are absent when it was frozen (data.*_embedding
    # trainable: false) and the run resumes training it: they start at zero, as in OpenNMT-tf.
    return "dropout_seed" in name or (name.startswith("optimizer/") and name.endswith("_inputter/embedding"))


SLOT_PREFIXES = ("optimizer/m/", "optimizer/v/", "optimizer/vhat/", "optimizer/momentum/")


def _slot_weight(name):
    """The model weight path of an optimizer slot's name (`optimizer/m/<path>`), else None."""
    for slot in SLOT_PREFIXES:
        if name.startswith(slot):
            return name[len(slot):]
    return None


def check_shapes(prefix, expected, leftover_under=("model/",), kind="checkpoint"):
    """The one compatibility check: raises CheckpointError naming every variable of `expected`
    ({checkpoint name: shape}) that `prefix` lacks or holds with another shape, and every
    variable stored under one of `leftover_under` that `expected` does not name.
    OpenNMT-tf's optimizer slots (`.OPTIMIZER_SLOT`) are not variables here."""
    stored = {name: shape for name, shape in contents(prefix).items() if "/.OPTIMIZER_SLOT/" not in name}
    # Weights the checkpoint keeps optimizer slots for: one without any was not trained then
    # (params.freeze_layers); resumed unfrozen, its slots start at zero, as in OpenNMT-tf.
    slotted = {_slot_weight(name) for name in stored} - {None}
    problems = []
    for name, shape in expected.items():
        if name not in stored:
            if not _optional(name) and not (slotted and _slot_weight(name) not in (None, *slotted)):
                problems.append(f"missing in checkpoint: {name} (expected shape {tuple(shape)})")
        elif stored[name] != tuple(shape):
            problems.append(f"shape mismatch: {name} is {stored[name]} in the checkpoint, "
                            f"{tuple(shape)} in the model")
    for name in sorted(stored):
        if name not in expected and not _optional(name) and name.startswith(tuple(leftover_under)):
            problems.append(f"not used by the model: {name} {stored[name]}")
    if problems:
        raise CheckpointError(
            f"{kind} {prefix} does not match the configured model (was it trained with another "
            f"model configuration?):\n  " + "\n  ".join(problems))


def assign(prefix, mapping, leftover_under=("model/",), kind="checkpoint"):
    """Assigns checkpoint values to variables, mapping: {checkpoint name: variable}. Checks the
    shapes first (check_shapes) and reads every value before assigning any, so that nothing is
    assigned when the checkpoint does not fit or is damaged. Returns `prefix`."""
    check_shapes(prefix, {name: v.shape for name, v in mapping.items()}, leftover_under, kind)
    stored = contents(prefix)
    _assign_values(read(prefix, [name for name in mapping if name in stored]), mapping)
    return prefix


def _assign_values(values, mapping):
    """variable.assign(value) for each {name: value} of `values`, cast to the variable's dtype."""
    for name, value in values.items():
        mapping[name].assign(np.asarray(value, dtype=mapping[name].dtype))


def variable_values(variables):
    """{name: NumPy value} of {name: Keras variable}, each of its declared dtype (an int64
    variable of the JAX backend is int32 in memory without jax_enable_x64: saved as int64)."""
    return {name: np.asarray(keras.ops.convert_to_numpy(v.value), dtype=v.dtype)
            for name, v in variables.items()}


# -- saving and restoring a set of named variables --------------------------------------------

class Checkpoint:
    """A model, its optimizer and extra named variables (e.g. the data position), saved to
    `save_dir` and restored from `restore_dir` (default: save_dir). They differ for a non-chief
    worker, which resumes from the chief's checkpoints but writes its own to a scratch folder.
    `latest` is the prefix last saved or restored by this object.

    `extra` ({name: variable}) adds variables, or replaces a model variable under its name.
    `fallbacks` ({name: other name}): names a checkpoint may lack (written by an older version or
    another configuration); their variable is then restored with the other name's value.
    `restored_names`: the names the last restore read from its checkpoint."""

    def __init__(self, model, optimizer=None, save_dir=None, restore_dir=None, max_to_keep=8,
                 extra=None, fallbacks=None):
        self.model = model
        self.optimizer = optimizer
        self.save_dir = save_dir
        self.restore_dir = restore_dir if restore_dir is not None else save_dir
        self.max_to_keep = max_to_keep
        self.latest = None
        self.variables = {f"model/{p}": v for p, v in named_variables(model).items()}
        if optimizer is not None:
            state = optimizer_state(optimizer, named_trainable(model))
            self.variables.update({f"optimizer/{p}": v for p, v in state.items()})
        self.variables.update(extra or {})
        self.fallbacks = dict(fallbacks or {})
        self.restored_names = set()
        self._checkpoint = None
        if TENSORFLOW:
            self._checkpoint = tf.train.Checkpoint(**nested(self.variables))
            self._checkpoint.save_counter  # created now (saved since the first versions), not mid-save

    def check_compatible(self, prefix, absent=()):
        """CheckpointError naming every variable missing, mis-shaped or left over in `prefix`
        (but those of `absent`, restored from their fallbacks)."""
        check_shapes(prefix, {name: v.shape for name, v in self.variables.items() if name not in absent})

    def restore(self, prefix=None):
        """Restores every variable from `prefix`, default the newest readable checkpoint of
        restore_dir; returns the prefix, or None if there is none. When this object also saves
        there, what killed saves left is deleted and the damaged checkpoints newer than the one
        restored are moved to `damaged/` (the run will write those steps again)."""
        self.restored_names = set()
        if prefix is None:
            prefix, skipped = newest_intact(self.restore_dir)
            if self.save_dir == self.restore_dir and os.path.isdir(self.save_dir):
                _remove_leftovers(self.save_dir)
                _quarantine([p for p, _ in skipped])
            if prefix is None:
                return None
        stored = contents(prefix)
        absent = {name: other for name, other in self.fallbacks.items() if name not in stored}
        self.check_compatible(prefix, absent)
        # By name, not through TensorFlow's object graph: a checkpoint written on another backend
        # has none. check_compatible vetted every name (only optional ones may be absent: they
        # keep their initial values); entries this object does not hold, e.g. the trained weights
        # beside a moving average when restoring without one, are left unread.
        present = {name: v for name, v in self.variables.items() if name not in absent and name in stored}
        _assign_values(read(prefix, list(present)), present)
        for name, other in absent.items():
            self.variables[name].assign(self.variables[other].value)
        self.restored_names = set(self.variables) - set(absent)
        self.latest = prefix
        return prefix

    def restore_weights(self, prefix):
        """Restores only the model variables of `prefix` (for inference, export, fine-tuning)."""
        model_variables = {name: v for name, v in self.variables.items() if name.startswith("model/")}
        return assign(prefix, model_variables)

    def save(self, step):
        """Writes `ckpt-<step>` to save_dir and reads it back in full, then replaces the
        `checkpoint` state file, then deletes the checkpoints older than the newest `max_to_keep`
        readable ones: nothing is deleted before the new checkpoint is complete and verified.
        A failed write (no space left, file too large, read-only directory...) removes what it
        left of the new checkpoint and raises CheckpointWriteError, every older checkpoint
        untouched. Returns the prefix."""
        prefix = os.path.join(self.save_dir, f"ckpt-{int(step)}")
        try:
            os.makedirs(self.save_dir, exist_ok=True)
            _remove_leftovers(self.save_dir)
            # A checkpoint of this step already there (an average written again with --force)
            # is set aside until the new one is verified, and put back if it is not.
            replaced = _set_aside(prefix)
        except OSError as error:
            _put_back(prefix)
            raise CheckpointWriteError(self._failure(prefix, describe(error))) from None
        try:
            self._write(prefix)
            reason = damage(prefix)
        except (OSError, *((tf.errors.OpError,) if TENSORFLOW else ())) as error:
            reason = describe(error)
        if reason is not None:  # (also: written without an error, yet not readable back)
            self._discard(prefix)
            _put_back(prefix)
            raise CheckpointWriteError(self._failure(prefix, reason))
        for path in replaced:
            with contextlib.suppress(OSError):
                os.remove(path)
        # Rotation counts only readable checkpoints (index and every data file present: reading
        # all the older ones back at each save would cost too much; the damaged checkpoints a
        # restore found were moved away). Once `max_to_keep` of them exist, everything older goes.
        try:
            everything = candidates(self.save_dir)
            readable = [p for p in everything if damage(p, read_data=False) is None]
            kept = readable[: self.max_to_keep] if self.max_to_keep else readable
            _write_state_file(self.save_dir, prefix, kept)
            if self.max_to_keep and len(kept) == self.max_to_keep:
                for old in everything[everything.index(kept[-1]) + 1:]:
                    _remove(old)
        except OSError as error:  # the new checkpoint is complete: it is the one to resume from
            self.latest = prefix
            raise CheckpointWriteError(
                f"checkpoint {prefix} was saved, but updating {self.save_dir} after it failed: "
                f"{describe(error)} (the next run resumes from {prefix})") from None
        self.latest = prefix
        return prefix

    @staticmethod
    def _failure(prefix, reason):
        return (f"saving checkpoint {prefix} failed: {reason} (nothing of it is left; the "
                "checkpoints saved before are untouched)")

    def _write(self, prefix):
        if self._checkpoint is not None:
            self._checkpoint.save_counter.assign_add(1)
            self._checkpoint.write(prefix)
        else:
            values = variable_values(self.variables)
            bundle.write_bundle(prefix, {name + SUFFIX: value for name, value in values.items()})

    def _discard(self, prefix):
        # What the failed write left: this step's files and TensorFlow's temporary folder.
        if self._checkpoint is not None:
            self._checkpoint.save_counter.assign_add(-1)
        with contextlib.suppress(OSError):
            _remove(prefix)
        shutil.rmtree(prefix + "_temp", ignore_errors=True)


def _files(prefix):
    directory, base = os.path.split(prefix)
    return [os.path.join(directory, name) for name in os.listdir(directory or ".")
            if (name == base + ".index" or name.startswith(base + ".data-"))
            and not name.endswith(REPLACED)]


def _set_aside(prefix):
    """Renames the files of checkpoint `prefix` to `<file>.replaced`; returns the new names."""
    moved = []
    for path in _files(prefix):
        os.replace(path, path + REPLACED)
        moved.append(path + REPLACED)
    return moved


def _put_back(prefix):
    """Undoes _set_aside (nothing to do if it set nothing aside)."""
    directory, base = os.path.split(prefix)
    for name in os.listdir(directory or "."):
        if name.startswith(base + ".") and name.endswith(REPLACED):
            with contextlib.suppress(OSError):
                os.replace(os.path.join(directory, name), os.path.join(directory, name[: -len(REPLACED)]))


def _remove(prefix):
    for path in _files(prefix):
        os.remove(path)


def _quarantine(prefixes):
    """Moves damaged checkpoints into `damaged/` beside them: out of every listing and rotation,
    but kept for a look."""
    for prefix in prefixes:
        target = os.path.join(os.path.dirname(prefix), "damaged")
        os.makedirs(target, exist_ok=True)
        for path in _files(prefix):
            os.replace(path, os.path.join(target, os.path.basename(path)))
        logger.warning("moved the damaged checkpoint %s to %s", prefix, target)


def _remove_leftovers(directory):
    """Deletes what killed saves left: TensorFlow's `ckpt-N_temp/` folders, state file temps;
    puts back a checkpoint set aside by a save killed before its replacement was complete."""
    for name in os.listdir(directory):
        if name.endswith(REPLACED):
            path, original = os.path.join(directory, name), os.path.join(directory, name[: -len(REPLACED)])
            prefix = FILE_PATTERN.match(name[: -len(REPLACED)])
            if prefix and damage(os.path.join(directory, prefix.group(1)), read_data=False) is None:
                os.remove(path)  # (the replacement is complete)
            else:
                os.replace(path, original)
            continue
        if LEFTOVER_PATTERN.match(name):
            path = os.path.join(directory, name)
            logger.info("removing %s, left by an interrupted save", path)
            if os.path.isdir(path):
                shutil.rmtree(path, ignore_errors=True)
            else:
                os.remove(path)


def _write_state_file(directory, prefix, kept):
    """TensorFlow's `checkpoint` state file (for tf.train.latest_checkpoint and other tools;
    restore does not read it), replaced atomically. Names are relative, as TensorFlow writes."""
    lines = [f'model_checkpoint_path: "{os.path.basename(prefix)}"']
    lines += [f'all_model_checkpoint_paths: "{os.path.basename(p)}"' for p in reversed(kept)]
    with atomic_write(os.path.join(directory, "checkpoint"), suffix=".tmp", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")


# -- averaging -------------------------------------------------------------------------------

def step_of(prefix):
    """The step in a checkpoint prefix's name (`.../ckpt-1200` -> 1200)."""
    match = re.search(r"-(\d+)$", prefix)
    if match is None:
        raise CheckpointError(f"checkpoint {prefix}: no step in its name (expected ckpt-<step>)")
    return int(match.group(1))


def to_average(model_dir, max_count):
    """The checkpoints `average_checkpoints` averages, oldest first: the newest `max_count`
    readable ones of model_dir (opennmt-lite's in `checkpoints/`, else OpenNMT-tf's directly
    in model_dir; damaged ones skipped with a warning). Fewer than 2 is an error. (That they
    are all of one format is formats.check_one_format's job.)"""
    found, directory = [], None
    for directory in (checkpoint_directory(model_dir), model_dir):
        found = candidates(directory)
        if found:
            break
    readable = []
    for prefix in found:
        reason = damage(prefix)
        if reason is None:
            readable.append(prefix)
        else:
            logger.warning("skipping damaged checkpoint %s: %s", prefix, reason)
    chosen = readable[:max_count][::-1]
    if len(chosen) < 2:
        where = directory if found else f"{checkpoint_directory(model_dir)} nor {model_dir}"
        raise CheckpointError(
            f"averaging needs at least 2 checkpoints: found {len(chosen)} readable in {where}"
            + (f" (--max_count {max_count})" if max_count < 2 else ""))
    return chosen


def check_same_variables(prefixes):
    """CheckpointError naming the first variable (under `model/`) that the checkpoints do not
    all hold with the same shape as the newest (`prefixes[-1]`)."""
    reference = {n: s for n, s in contents(prefixes[-1]).items()
                 if n.startswith("model/") and "/.OPTIMIZER_SLOT/" not in n}
    for prefix in prefixes[:-1]:
        stored = {n: s for n, s in contents(prefix).items()
                  if n.startswith("model/") and "/.OPTIMIZER_SLOT/" not in n}
        for name in sorted(set(reference) | set(stored)):
            if stored.get(name) != reference.get(name):
                have = "missing" if name not in stored else f"of shape {stored[name]}"
                other = "missing" if name not in reference else f"of shape {reference[name]}"
                raise CheckpointError(
                    f"cannot average {prefix} with {prefixes[-1]}: {name} is {have} in the first "
                    f"and {other} in the second (checkpoints of different models)")


def average_values(prefixes, names):
    """{name: float32 average over `prefixes`} for each of `names`, computed as OpenNMT-tf does
    (zeros, then `+= value / count` checkpoint after checkpoint, oldest first, in float32), so the
    result is the same to the last bit. The checkpoints must hold the same variables
    (check_same_variables)."""
    check_same_variables(prefixes)
    reference = contents(prefixes[-1])
    count = len(prefixes)
    sums = {name: np.zeros(reference[name], dtype=np.float32) for name in names}
    for prefix in prefixes:
        logger.info("averaging: reading %s", prefix)
        for name, value in read(prefix, names).items():
            sums[name] += np.asarray(value, dtype=np.float32) / np.float32(count)
    return sums
