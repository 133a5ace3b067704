"""Vocabulary update (`run.py update_vocab`), as OpenNMT-tf 2.32's `update_vocab` run type.

The newest checkpoint of model_dir (either format) is restored into a training checkpoint
built from the config; a second one is built with the new vocabularies; every weight and
optimizer slot is copied, except the vocabulary-sized ones (source and target embeddings, the
output layer's kernel columns and bias), which are rebuilt row by row as OpenNMT-tf does
(`opennmt.data.vocab.get_mapping` in "replace" mode): a token of the new vocabulary that the
old one holds keeps its row (weights and Adam moments), a new token gets a row of zeros, a token
only in the old vocabulary is dropped, and the `<unk>` row (the last) is kept. The optimizer
step is kept; the data position restarts at 0 (new data). The result is an opennmt-lite
checkpoint `<output_dir>/ckpt-<step>`: train on with model_dir set to output_dir and the
config's vocabularies set to the new files.
"""

import dataclasses
import logging

import numpy as np

from opennmt_lite.checkpointing import formats, store
from opennmt_lite.checkpointing.names import named_trainable, named_variables, optimizer_state
from opennmt_lite.data.vocab import Vocabulary
from opennmt_lite.training.averaging import check_output_dir

logger = logging.getLogger("opennmt_lite")

# Vocabulary-sized variables: path -> (side, axis of the vocabulary).
VOCABULARY_VARIABLES = {
    "source_inputter/embedding": ("source", 0),
    "target_inputter/embedding": ("target", 0),
    "decoder/output_layer/kernel": ("target", 1),
    "decoder/output_layer/bias": ("target", 0),
}


def vocabulary_mapping(old, new):
    """For each id of `new` (its lines, then `<unk>`), the id of the same token in `old`, or
    -1 for a token `old` lacks; `<unk>` maps to old `<unk>` (OpenNMT-tf's get_mapping)."""
    return [old.id(token) if token in old else -1 for token in new.tokens] + [old.oov_id]


def remap(value, mapping, axis=0):
    """`value` with its `axis` rebuilt from `mapping`: row i is old row mapping[i], zeros for -1."""
    value = np.moveaxis(np.asarray(value), axis, 0)
    result = np.zeros((len(mapping),) + value.shape[1:], dtype=value.dtype)
    mapping = np.asarray(mapping)
    kept = mapping >= 0
    result[kept] = value[mapping[kept]]
    return np.moveaxis(result, 0, axis)


def update_vocab(config, output_dir, source_vocabulary, target_vocabulary, build_checkpoint):
    """Writes the checkpoint of config.model_dir's newest checkpoint updated to the new
    vocabularies (None: that side's unchanged) into `output_dir`; returns its prefix.
    `build_checkpoint(config, save_dir=None)` builds the training checkpoint of a config (see
    build.training_checkpoint); it is called once the checkpoint and the vocabularies are read,
    for the old vocabularies and the new."""
    if config.model.is_encoder_model:
        from opennmt_lite.config import ConfigError

        raise ConfigError(f"update_vocab: not implemented for model.type {config.model.type} "
                          f"(its rows are mapped for the Transformer's vocabularies only)")
    if config.model.is_language_model:
        from opennmt_lite.config import ConfigError

        raise ConfigError("update_vocab: not implemented for a language model (model.type: "
                          "language_model); it maps a Transformer's source and target rows")
    check_output_dir(output_dir, config.model_dir, "--output_dir")
    prefix = store.latest(config.model_dir)
    if prefix is None:
        raise store.CheckpointNotFoundError(f"no checkpoint to update in {config.model_dir}")
    old_vocabularies = {"source": Vocabulary.from_file(config.data.source_vocabulary),
                        "target": Vocabulary.from_file(config.data.target_vocabulary)}
    new_data = dataclasses.replace(
        config.data, source_vocabulary=source_vocabulary or config.data.source_vocabulary,
        target_vocabulary=target_vocabulary or config.data.target_vocabulary)
    new_vocabularies = {"source": Vocabulary.from_file(new_data.source_vocabulary),
                        "target": Vocabulary.from_file(new_data.target_vocabulary)}
    mappings = {side: vocabulary_mapping(old_vocabularies[side], new_vocabularies[side])
                for side in ("source", "target")}
    old = build_checkpoint(config)
    formats.restore_whole(old, prefix)
    new = build_checkpoint(config.replace(data=new_data), output_dir)
    # Every weight, frozen ones included (data.*_embedding trainable: false); slots: trainable ones.
    old_named = named_variables(old.model, include_seeds=False)
    new_named = named_variables(new.model, include_seeds=False)
    shared_ids = {}  # a table shared by several paths is rebuilt once, by its first path
    transforms = {}
    for path in new_named:
        side_axis = VOCABULARY_VARIABLES.get(path)
        first = shared_ids.setdefault(id(new_named[path]), path)
        transforms[path] = VOCABULARY_VARIABLES.get(first, side_axis)
    old_state = optimizer_state(old.optimizer, named_trainable(old.model))
    new_state = optimizer_state(new.optimizer, named_trainable(new.model))
    for name, variable in new_state.items():
        slot, _, path = name.partition("/")
        source = old_state[name].numpy()
        if path and transforms.get(path):
            side, axis = transforms[path]
            source = remap(source, mappings[side], axis)
        variable.assign(source)
    for path, variable in new_named.items():
        value = old_named[path].numpy()
        if transforms[path]:
            side, axis = transforms[path]
            value = remap(value, mappings[side], axis)
        variable.assign(value)
    written = new.save(store.step_of(prefix))
    for side in ("source", "target"):
        kept = sum(1 for index in mappings[side][:-1] if index >= 0)
        logger.info("%s vocabulary: %d tokens kept, %d new (zero rows), %d dropped", side, kept,
                    len(mappings[side]) - 1 - kept, old_vocabularies[side].size - kept)
    logger.info("updated %s to the new vocabularies: %s (set data.source_vocabulary and "
                "data.target_vocabulary to the new files to use it)", prefix, written)
    return written
