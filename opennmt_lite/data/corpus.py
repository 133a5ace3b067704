"""Tokenized corpora held in memory as int32 id arrays, and the training filter.

The whole file is tokenized once (batched SentencePiece encoding), mapped to ids, and kept as a
flat int32 array plus offsets. Batches are then cut and padded with NumPy, so the per-step cost
of the input pipeline is a gather into a padded array.

Conventions (OpenNMT-tf's): source sequences get no `<s>`/`</s>`; a target of n pieces gives
`ids_in` = `<s>` + ids and `ids_out` = ids + `</s>`, and its length is n + 1.
"""

import dataclasses
import logging
import os

import numpy as np

from opennmt_lite.data.text import DataError, as_file_list, read_monolingual, read_parallel
from opennmt_lite.data.tokenizers import make_tokenizer
from opennmt_lite.data.vocab import as_vocabulary

logger = logging.getLogger("opennmt_lite")

# Reasons an example is dropped by the training filter, in the order they are tested; an
# example is counted under the first that applies.
DROP_REASONS = ("empty_source", "empty_target", "source_too_long", "target_too_long")


class RaggedIds:
    """Variable-length int32 sequences: `flat` holds them end to end, sequence i is
    flat[offsets[i]:offsets[i + 1]]."""

    def __init__(self, flat, offsets):
        self.flat = np.ascontiguousarray(flat, dtype=np.int32)
        self.offsets = np.ascontiguousarray(offsets, dtype=np.int64)
        self.lengths = np.diff(self.offsets).astype(np.int32)

    def __len__(self):
        return len(self.lengths)

    def __getitem__(self, index):
        return self.flat[self.offsets[index]:self.offsets[index + 1]]

    def select(self, indices):
        """A RaggedIds of the sequences at `indices`, in that order."""
        indices = np.asarray(indices, dtype=np.int64)
        lengths = self.lengths[indices].astype(np.int64)
        offsets = np.zeros(len(indices) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        return RaggedIds(self.flat[_ranges(self.offsets[indices], lengths)], offsets)

    def padded(self, indices, length, prefix=None, suffix=None):
        """[len(indices), length] int32 array of the sequences at `indices`, 0-padded on the
        right, with an optional id before (`prefix`) and after (`suffix`) each sequence."""
        indices = np.asarray(indices, dtype=np.int64)
        lengths = self.lengths[indices].astype(np.int64)
        shift = 0 if prefix is None else 1
        out = np.zeros((len(indices), length), dtype=np.int32)
        rows = np.repeat(np.arange(len(indices)), lengths)
        cols = np.arange(rows.size) - np.repeat(np.cumsum(lengths) - lengths, lengths)
        out[rows, cols + shift] = self.flat[np.repeat(self.offsets[indices], lengths) + cols]
        if prefix is not None:
            out[:, 0] = prefix
        if suffix is not None:
            out[np.arange(len(indices)), lengths + shift] = suffix
        return out


def _ranges(starts, lengths):
    """Concatenation of arange(s, s + l) for each (s, l)."""
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    return np.repeat(starts - np.cumsum(lengths) + lengths, lengths) + np.arange(total)


def encode_lines(lines, tokenizer, vocabulary):
    """Tokenizes `lines` (batched) and maps the tokens to ids (unknown -> oov_id)."""
    token_lists = tokenizer.tokenize_batch(lines)
    lengths = np.fromiter((len(t) for t in token_lists), dtype=np.int64, count=len(token_lists))
    offsets = np.zeros(len(token_lists) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    flat = vocabulary.lookup([token for tokens in token_lists for token in tokens])
    return RaggedIds(flat, offsets), token_lists


@dataclasses.dataclass
class DatasetStats:
    """What a dataset read and kept.

    `num_lines`: lines read (in this shard's part of the files); `num_examples`: kept; `dropped`:
    {reason: count} for DROP_REASONS (each dropped example under its first reason);
    `num_source_tokens` / `num_target_tokens`: tokens of the kept examples (target without
    `<s>`/`</s>`); `num_source_oov` / `num_target_oov`: of those, how many are unknown.
    """

    features_files: list
    labels_files: list
    num_lines: int
    num_examples: int
    dropped: dict
    maximum_features_length: object = None
    maximum_labels_length: object = None
    num_source_tokens: int = 0
    num_target_tokens: int = 0
    num_source_oov: int = 0
    num_target_oov: int = 0
    num_shards: int = 1
    shard_index: int = 0

    @property
    def num_dropped(self):
        return sum(self.dropped.values())

    def as_dict(self):
        result = dataclasses.asdict(self)
        result["num_dropped"] = self.num_dropped
        return result


def filter_mask(source_lengths, target_lengths, maximum_features_length=None,
                maximum_labels_length=None, drop_empty_target=True):
    """Keep mask and {reason: mask of the examples dropped for it} of the training filter.

    OpenNMT-tf (`Inputter.keep_for_training`) keeps an example when 0 < length <= maximum on each
    side, where the target length is the decoder's, pieces + 1 (one `</s>`/`<s>` counted): a
    source of exactly `maximum_features_length` pieces and a target of `maximum_labels_length - 1`
    pieces are kept. `target_lengths` here are piece counts (without the + 1). OpenNMT-tf never
    drops an empty target (its length is 1); `drop_empty_target=True` (default) drops it.
    """
    source_lengths = np.asarray(source_lengths)
    target_lengths = np.asarray(target_lengths) + 1
    remaining = np.ones(len(source_lengths), dtype=bool)
    reasons = {}
    tests = {
        "empty_source": source_lengths <= 0,
        "empty_target": (target_lengths <= 1) if drop_empty_target else np.zeros_like(remaining),
        "source_too_long": (source_lengths > maximum_features_length)
        if maximum_features_length is not None else np.zeros_like(remaining),
        "target_too_long": (target_lengths > maximum_labels_length)
        if maximum_labels_length is not None else np.zeros_like(remaining),
    }
    for reason in DROP_REASONS:
        hit = remaining & tests[reason]
        reasons[reason] = hit
        remaining &= ~hit
    return remaining, reasons


class ParallelCorpus:
    """Source and target ids of the kept training (or evaluation) examples.

    `source`: RaggedIds of source ids; `target`: RaggedIds of target ids *without* `<s>`/`</s>`;
    `line_index`: 0-based line number of each example in the (concatenated) files; `stats`.
    `source_lengths` / `target_lengths` are the model's lengths (target: pieces + 1).
    `weights`: float32 loss weight of each example (`data.example_weights`), or None.
    """

    def __init__(self, source, target, line_index, stats, weights=None):
        self.source = source
        self.target = target
        self.line_index = np.asarray(line_index, dtype=np.int64)
        self.stats = stats
        self.weights = weights
        self.source_lengths = source.lengths
        self.target_lengths = target.lengths + 1

    def __len__(self):
        return len(self.line_index)

    def example(self, i):
        """(source ids, target ids without specials) of example i."""
        return self.source[i], self.target[i]


def load_parallel_corpus(
    features_file,
    labels_file,
    *,
    source_vocabulary,
    target_vocabulary,
    source_tokenizer=None,
    target_tokenizer=None,
    maximum_features_length=None,
    maximum_labels_length=None,
    filter_examples=True,
    drop_empty_target=True,
    num_shards=1,
    shard_index=0,
):
    """Reads, tokenizes, maps to ids and (if `filter_examples`) filters a parallel corpus.

    Sharding keeps the lines whose 0-based index i has i % num_shards == shard_index, before
    filtering (as OpenNMT-tf's `dataset.shard`). Raises DataError when nothing is left after
    filtering. Drop counts are logged on the "opennmt_lite" logger and kept in `.stats`.
    """
    if num_shards < 1 or not 0 <= shard_index < num_shards:
        raise ValueError(f"invalid shard {shard_index} of {num_shards}")
    source_vocabulary = as_vocabulary(source_vocabulary)
    target_vocabulary = as_vocabulary(target_vocabulary)
    source_tokenizer = make_tokenizer(source_tokenizer)
    target_tokenizer = make_tokenizer(target_tokenizer)
    source_lines, target_lines = read_parallel(features_file, labels_file)
    line_index = np.arange(len(source_lines), dtype=np.int64)
    if num_shards > 1:
        line_index = line_index[shard_index::num_shards]
        source_lines = source_lines[shard_index::num_shards]
        target_lines = target_lines[shard_index::num_shards]
    source, _ = encode_lines(source_lines, source_tokenizer, source_vocabulary)
    target, _ = encode_lines(target_lines, target_tokenizer, target_vocabulary)
    num_lines = len(line_index)
    if filter_examples:
        keep, reasons = filter_mask(
            source.lengths, target.lengths, maximum_features_length, maximum_labels_length,
            drop_empty_target=drop_empty_target,
        )
        dropped = {reason: int(mask.sum()) for reason, mask in reasons.items()}
    else:
        keep = np.ones(num_lines, dtype=bool)
        dropped = {reason: 0 for reason in DROP_REASONS}
    kept = np.flatnonzero(keep)
    if len(kept) < num_lines:
        source = source.select(kept)
        target = target.select(kept)
    stats = DatasetStats(
        features_files=as_file_list(features_file),
        labels_files=as_file_list(labels_file),
        num_lines=num_lines,
        num_examples=len(kept),
        dropped=dropped,
        maximum_features_length=maximum_features_length,
        maximum_labels_length=maximum_labels_length,
        num_source_tokens=int(source.lengths.sum()),
        num_target_tokens=int(target.lengths.sum()),
        num_source_oov=int(np.count_nonzero(source.flat == source_vocabulary.oov_id)),
        num_target_oov=int(np.count_nonzero(target.flat == target_vocabulary.oov_id)),
        num_shards=num_shards,
        shard_index=shard_index,
    )
    shard = f" (shard {shard_index} of {num_shards})" if num_shards > 1 else ""
    if filter_examples:
        logger.info(
            "%s / %s%s: %d lines, %d kept, %d dropped (%s; maximum_features_length=%s, "
            "maximum_labels_length=%s)",
            ", ".join(stats.features_files), ", ".join(stats.labels_files), shard, num_lines,
            len(kept), stats.num_dropped,
            ", ".join(f"{reason}: {count}" for reason, count in dropped.items()),
            maximum_features_length, maximum_labels_length,
        )
    if len(kept) == 0:
        raise DataError(
            f"no example left in {', '.join(stats.features_files)} / "
            f"{', '.join(stats.labels_files)}{shard}: {num_lines} lines read, all dropped "
            f"({', '.join(f'{r}: {c}' for r, c in dropped.items())}) with "
            f"maximum_features_length={maximum_features_length}, "
            f"maximum_labels_length={maximum_labels_length}"
        )
    return ParallelCorpus(source, target, line_index[kept], stats)


class MonolingualCorpus:
    """Source ids of every line of a file (no filter), for inference."""

    def __init__(self, source, tokens, line_index, files):
        self.source = source
        self.tokens = tokens
        self.line_index = np.asarray(line_index, dtype=np.int64)
        self.files = files
        self.source_lengths = source.lengths

    def truncate(self, maximum):
        """Cuts the sequences longer than `maximum` ids to their first `maximum` ids (tokens
        too); returns {0-based line: length before} of those cut."""
        lengths = self.source.lengths
        cut = {int(self.line_index[i]): int(lengths[i]) for i in np.flatnonzero(lengths > maximum)}
        if cut:
            kept = np.minimum(lengths, maximum).astype(np.int64)
            offsets = np.zeros(len(kept) + 1, dtype=np.int64)
            np.cumsum(kept, out=offsets[1:])
            self.source = RaggedIds(self.source.flat[_ranges(self.source.offsets[:-1], kept)], offsets)
            self.source_lengths = self.source.lengths
            self.tokens = [tokens[:maximum] for tokens in self.tokens]
        return cut

    def __len__(self):
        return len(self.line_index)


def load_monolingual_corpus(features_file, *, source_vocabulary, source_tokenizer=None):
    """Reads, tokenizes and maps to ids every line of `features_file` (no filter: empty lines
    stay, with length 0)."""
    vocabulary = as_vocabulary(source_vocabulary)
    tokenizer = make_tokenizer(source_tokenizer)
    lines = read_monolingual(features_file)
    source, tokens = encode_lines(lines, tokenizer, vocabulary)
    files = as_file_list(features_file)
    logger.info("%s: %d lines", ", ".join(os.fspath(f) for f in files), len(lines))
    return MonolingualCorpus(source, tokens, np.arange(len(lines)), files)
