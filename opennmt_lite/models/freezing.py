"""`params.freeze_layers`: layers named by OpenNMT-tf's paths, left untrained and without dropout.

OpenNMT-tf follows each path (`encoder/layers/0`, `decoder/output_layer`,
`examples_inputter/features_inputter`...) through its model's attributes, list indices and dict
keys (`misc.index_structure`), marks the layer reached non-trainable and sets its dropout rates to
0 (`misc.set_dropout`). The opennmt-lite layers carry the same attribute names (see
opennmt_lite/checkpointing/onmt_names.py), except the embeddings: OpenNMT-tf's
`examples_inputter/features_inputter` and `examples_inputter/labels_inputter` (also reachable as
the model's `features_inputter`, `labels_inputter`) are `source_inputter` and `target_inputter`
here, and `examples_inputter` itself is both.

A weight held by a frozen layer and by a layer outside every frozen path (the target embedding
and the output layer with shared embeddings) stays trained, as in OpenNMT-tf, where an optimizer
collects each weight from every trainable layer that holds it.
"""

import logging

import keras

from opennmt_lite.config import ConfigError

logger = logging.getLogger("opennmt_lite")

# OpenNMT-tf's names of the model's inputters -> their attributes here.
_INPUTTERS = {"features_inputter": "source_inputter", "labels_inputter": "target_inputter"}


def find_layers(model, path):
    """The layers of `model` (a Transformer) that OpenNMT-tf's `path` names, as a list (two for
    `examples_inputter`). Raises ConfigError, naming the path and the part not found, when the
    path names nothing or something that is not a layer."""
    parts = [part for part in path.split("/") if part]
    where = f"params.freeze_layers: {path!r}"
    if parts[:1] == ["examples_inputter"]:
        parts = parts[1:]
        if not parts:
            return [model.source_inputter, model.target_inputter]
        if parts[0] not in _INPUTTERS:
            raise ConfigError(f"{where}: examples_inputter has no {parts[0]!r} (its layers: "
                              f"{', '.join(_INPUTTERS)})")
    if parts and parts[0] in _INPUTTERS:
        if model.hyperparameters.shares_input_embeddings:
            # One layer here, two in OpenNMT-tf, whose other holder goes on training the shared
            # table: freezing one of them leaves the table trained, and its dropout, which
            # OpenNMT-tf would set to 0 on that side only, is refused unless it is 0 already.
            if model.hyperparameters.embedding_dropout:
                raise ConfigError(
                    f"{where}: with model.share_embeddings: {model.hyperparameters.share_embeddings}"
                    f" the source and target inputters are one layer here, which cannot drop out "
                    f"on one side only: freeze examples_inputter (both), or set "
                    f"model.embedding_dropout: 0")
            logger.warning("%s: the embedding table is shared with the other inputter "
                           "(model.share_embeddings: %s), which keeps training it, as in "
                           "OpenNMT-tf: nothing is frozen", where,
                           model.hyperparameters.share_embeddings)
            return []
        parts = [_INPUTTERS[parts[0]]] + parts[1:]
    node = model
    for index, part in enumerate(parts):
        reached = "/".join(parts[:index]) or "the model"
        if isinstance(node, (list, tuple)):
            if not part.isdigit() or int(part) >= len(node):
                raise ConfigError(f"{where}: {reached} is a list of {len(node)} layers, "
                                  f"{part!r} is not an index of it")
            node = node[int(part)]
        elif isinstance(node, dict):
            if part not in node:
                raise ConfigError(f"{where}: {reached} has no key {part!r}")
            node = node[part]
        else:
            child = None if part.startswith("_") else getattr(node, part, None)
            if child is None:
                raise ConfigError(f"{where}: {reached} has no attribute {part!r}")
            node = child
    if not isinstance(node, keras.layers.Layer):
        raise ConfigError(f"{where}: names a {type(node).__name__}, not a layer")
    return [node]


def disable_dropout(layer):
    """Sets every dropout rate of `layer` and of its sub-layers to 0, as OpenNMT-tf's
    `misc.set_dropout(layer, 0)` does: each numeric attribute whose name contains "dropout"
    (rates are read when a layer is called; the seed generators stay, unused)."""
    for sublayer in layer._flatten_layers(include_self=True, recursive=True):
        for name, value in list(vars(sublayer).items()):
            if ("dropout" in name and not name.startswith("_") and isinstance(value, (int, float))
                    and not isinstance(value, bool)):
                setattr(sublayer, name, 0.0)


def freeze_layers(model, paths):
    """Freezes the layers of `model` that `paths` (OpenNMT-tf's) name, before the optimizer is
    built (it then keeps no slots for their weights): their dropout becomes 0 and their weights
    non-trainable, except those also held by a layer outside the frozen ones (see above).
    Returns the frozen layers."""
    frozen = [layer for path in paths for layer in find_layers(model, path)]
    inside = {id(sublayer) for layer in frozen
              for sublayer in layer._flatten_layers(include_self=True, recursive=True)}
    kept = {id(variable) for sublayer in model._flatten_layers(include_self=True, recursive=True)
            if id(sublayer) not in inside for variable in _own_weights(sublayer)}
    for layer in frozen:
        disable_dropout(layer)
        for variable in layer.weights:
            if id(variable) not in kept:
                variable.trainable = False
    return frozen


def _own_weights(layer):
    """The weights `layer` holds itself (as attributes), not through its sub-layers."""
    inner = {id(v) for sublayer in layer._flatten_layers(include_self=False, recursive=True)
             for v in sublayer.weights}
    return [v for v in layer.weights if id(v) not in inner]
