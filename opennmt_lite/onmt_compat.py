"""Reading OpenNMT-tf 2.x checkpoints.

OpenNMT-tf stores each variable under `model/<attribute path>/.ATTRIBUTES/VARIABLE_VALUE`. The
opennmt-lite layers use the same attribute names, so the map from a checkpoint name to one of our
variables is the attribute path with a prefix (`model/encoder/`), except for the embeddings,
which OpenNMT-tf keeps under its inputters.
"""

import os

import numpy as np
import tensorflow as tf

from opennmt_lite.variables import named_variables

VALUE_SUFFIX = "/.ATTRIBUTES/VARIABLE_VALUE"
SOURCE_EMBEDDING = "model/examples_inputter/features_inputter/embedding"
TARGET_EMBEDDING = "model/examples_inputter/labels_inputter/embedding"


def resolve_checkpoint(path):
    """A checkpoint prefix from a prefix or a directory (its latest checkpoint)."""
    if os.path.isdir(path):
        latest = tf.train.latest_checkpoint(path)
        if latest is None:
            raise FileNotFoundError(f"no checkpoint found in directory {path}")
        return latest
    if not tf.io.gfile.exists(path + ".index"):
        raise FileNotFoundError(f"checkpoint {path} not found (no {path}.index)")
    return path


def read_model_variables(path):
    """{name without the `/.ATTRIBUTES/VARIABLE_VALUE` suffix: shape} of a checkpoint's model
    variables (optimizer slots and bookkeeping left out), and a reader for their values."""
    prefix = resolve_checkpoint(path)
    reader = tf.train.load_checkpoint(prefix)
    shapes = {}
    for name, shape in reader.get_variable_to_shape_map().items():
        if name.startswith("model/") and name.endswith(VALUE_SUFFIX) and "OPTIMIZER_SLOT" not in name:
            shapes[name[: -len(VALUE_SUFFIX)]] = tuple(shape)
    return prefix, reader, shapes


def assign_from_checkpoint(path, mapping, expected_prefixes=()):
    """Assigns checkpoint values to variables.

    mapping: {checkpoint name (no suffix): variable}. Every mapped name must exist with the
    variable's shape, and every checkpoint variable under one of `expected_prefixes` must be
    mapped; otherwise a ValueError lists each offending name, and nothing is assigned.
    """
    prefix, reader, shapes = read_model_variables(path)
    problems = []
    for name, variable in mapping.items():
        if name not in shapes:
            problems.append(f"missing in checkpoint: {name} (expected shape {tuple(variable.shape)})")
        elif shapes[name] != tuple(variable.shape):
            problems.append(
                f"shape mismatch: {name} is {shapes[name]} in the checkpoint, "
                f"{tuple(variable.shape)} in the model"
            )
    mapped = set(mapping)
    for name in sorted(shapes):
        if name not in mapped and any(name.startswith(p) for p in expected_prefixes):
            problems.append(f"not used by the model: {name} {shapes[name]}")
    if problems:
        raise ValueError(
            f"cannot load OpenNMT-tf checkpoint {prefix}:\n  " + "\n  ".join(problems)
        )
    for name, variable in mapping.items():
        variable.assign(np.asarray(reader.get_tensor(name + VALUE_SUFFIX), dtype=variable.dtype))
    return prefix


def encoder_mapping(encoder, embedder=None, encoder_scope="model/encoder",
                    embedding_name=SOURCE_EMBEDDING):
    """{checkpoint name: variable} for an encoder's weights and its source embedding."""
    mapping = {
        f"{encoder_scope}/{path}": variable
        for path, variable in named_variables(encoder, include_seeds=False).items()
    }
    if embedder is not None:
        mapping[embedding_name] = embedder.embedding
    return mapping


def load_onmt_encoder(path, encoder, embedder=None):
    """Loads an OpenNMT-tf 2.x checkpoint's encoder (and source embedding) into opennmt-lite layers.

    `path` is a checkpoint prefix or a model directory. The layers are built first if needed.
    Fails, naming every variable, when a variable is missing, mis-shaped, or left over.
    """
    if not encoder.built:
        encoder.build((None, None, encoder.num_units))
    if embedder is not None and not embedder.built:
        embedder.build()
    prefixes = ["model/encoder/"] + ([SOURCE_EMBEDDING] if embedder is not None else [])
    return assign_from_checkpoint(path, encoder_mapping(encoder, embedder), prefixes)


def model_mapping(model, available=()):
    """{checkpoint name: variable} for every weight of a `Transformer`.

    With shared input embeddings OpenNMT-tf stores the one table under either inputter's name;
    `available` (the checkpoint's names) picks the one present.
    """
    embedding_names = {
        "source_inputter/embedding": [SOURCE_EMBEDDING, TARGET_EMBEDDING],
        "target_inputter/embedding": [TARGET_EMBEDDING],
    }
    mapping = {}
    for path, variable in named_variables(model, include_seeds=False).items():
        if path in embedding_names:
            candidates = embedding_names[path]
            name = next((c for c in candidates if c in available), candidates[0])
        else:
            name = f"model/{path}"
        mapping[name] = variable
    return mapping


def load_onmt_model(path, model):
    """Loads every variable of an OpenNMT-tf 2.x Transformer checkpoint into `model`.

    Fails, naming each variable, if anything is missing, mis-shaped or left over.
    """
    if not model.built:
        model.build()
    _, _, shapes = read_model_variables(path)
    return assign_from_checkpoint(path, model_mapping(model, shapes), expected_prefixes=("model/",))


def load_onmt_optimizer_state(path, model, optimizer):
    """Copies an OpenNMT-tf checkpoint's Adam/LazyAdam slots (`m`, `v`) and step (`iter`) into a
    built Keras Adam `optimizer`, so training continues where OpenNMT-tf stopped.
    Returns the restored step (0 if the checkpoint holds no optimizer state)."""
    from opennmt_lite.optimizers import optimizer_state

    prefix = resolve_checkpoint(path)
    reader = tf.train.load_checkpoint(prefix)
    _, _, shapes = read_model_variables(prefix)
    onmt_name = {id(v): name for name, v in model_mapping(model, shapes).items()}
    trainable = {p: v for p, v in named_variables(model, include_seeds=False).items() if v.trainable}
    state = optimizer_state(optimizer, trainable)
    for path_in_model, variable in trainable.items():
        for slot in ("m", "v"):
            key = f"{onmt_name[id(variable)]}/.OPTIMIZER_SLOT/optimizer/{slot}{VALUE_SUFFIX}"
            if reader.has_tensor(key) and f"{slot}/{path_in_model}" in state:
                state[f"{slot}/{path_in_model}"].assign(reader.get_tensor(key))
    key = "optimizer/iter" + VALUE_SUFFIX
    if not reader.has_tensor(key):
        return 0
    step = int(reader.get_tensor(key))
    state["iterations"].assign(step)
    return step
