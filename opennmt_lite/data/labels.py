"""Reading a tagger's and a classifier's data as OpenNMT-tf does: a tags file (one tag per token
of the features file's line, space-separated) or a labels file (one class label per line), and
their vocabularies (one tag or label per line, no special tokens: OpenNMT-tf reads them with no
out-of-vocabulary id, so an unknown tag or label is an error here rather than a silent -1).

Every mistake is one line naming the file and line (DataError, exit 2).
"""

import logging

import numpy as np

from opennmt_lite.data.text import DataError, read_lines

logger = logging.getLogger("opennmt_lite")


def read_label_vocabulary(path, kind="tags"):
    """The tags or labels of a vocabulary file, in id order."""
    labels = read_lines(path, f"{kind} vocabulary")
    seen = {}
    for number, label in enumerate(labels, start=1):
        if not label or label != label.strip() or " " in label or "\t" in label:
            raise DataError(f"{kind} vocabulary {path}, line {number}: {label!r} is not one "
                            f"{kind[:-1]} (one per line, without spaces)")
        if label in seen:
            raise DataError(f"{kind} vocabulary {path}, line {number}: {label!r} repeats line "
                            f"{seen[label]}")
        seen[label] = number
    if not labels:
        raise DataError(f"{kind} vocabulary {path} is empty")
    return labels


class LabelVocabulary(tuple):
    """The tags or labels of a vocabulary file in id order (a tuple), with its `path` and
    `num_ids` (as a token Vocabulary's: the output layer's size; no special ids)."""

    def __new__(cls, labels, path=None):
        result = super().__new__(cls, labels)
        result.path = path
        return result

    @classmethod
    def from_file(cls, path, kind="tags"):
        return cls(read_label_vocabulary(path, kind), path)

    @property
    def num_ids(self):
        return len(self)


def _paired_lines(features_path, labels_path, kind):
    features = read_lines(features_path, "features")
    labels = read_lines(labels_path, kind)
    if len(features) != len(labels):
        raise DataError(f"{kind} file {labels_path} has {len(labels)} lines, features file "
                        f"{features_path} has {len(features)}: they must pair line by line")
    return features, labels


def read_tagged(features_path, tags_path, vocabulary, tokenize=str.split):
    """[(tokens, tag ids)] of each line pair; `vocabulary`: the tags in id order; `tokenize`:
    line -> tokens (the features' tokenizer; the tags are split on spaces)."""
    ids = {tag: i for i, tag in enumerate(vocabulary)}
    features, tags = _paired_lines(features_path, tags_path, "tags")
    examples = []
    for number, (line, tag_line) in enumerate(zip(features, tags), start=1):
        tokens, line_tags = tokenize(line), tag_line.split()
        if len(tokens) != len(line_tags):
            raise DataError(f"tags file {tags_path}, line {number}: {len(line_tags)} tags for the "
                            f"{len(tokens)} tokens of {features_path}'s line {number}")
        unknown = [tag for tag in line_tags if tag not in ids]
        if unknown:
            raise DataError(f"tags file {tags_path}, line {number}: tag {unknown[0]!r} is not in "
                            f"the tags vocabulary")
        examples.append((tokens, [ids[tag] for tag in line_tags]))
    return examples


def read_classified(features_path, labels_path, vocabulary, tokenize=str.split):
    """[(tokens, label id)] of each line pair; `vocabulary`: the labels in id order."""
    ids = {label: i for i, label in enumerate(vocabulary)}
    features, labels = _paired_lines(features_path, labels_path, "labels")
    examples = []
    for number, (line, label_line) in enumerate(zip(features, labels), start=1):
        label = label_line.strip()
        if not label or len(label.split()) != 1:
            raise DataError(f"labels file {labels_path}, line {number}: expected one label, got "
                            f"{label_line!r}")
        if label not in ids:
            raise DataError(f"labels file {labels_path}, line {number}: label {label!r} is not in "
                            f"the labels vocabulary")
        examples.append((tokenize(line), ids[label]))
    return examples


def load_labeled_corpus(features_path, labels_path, kind, *, source_vocabulary, labels,
                        source_tokenizer, maximum_features_length=None, filter_examples=True,
                        num_shards=1, shard_index=0):
    """A `corpus.ParallelCorpus` of a tagger's (`kind` "tags") or classifier's ("labels") data,
    as the Transformer's inputs batch it: source = the token ids, target = the tag ids (one per
    token) or the label id, with target controls (start, no end), so that a batch's
    `target_ids_out` holds them and `target_length` counts them. `labels`: the tags or labels in
    id order. `filter_examples` (training): lines without tokens or longer than
    `maximum_features_length` are dropped (OpenNMT-tf's length filter); the rest are kept whole.
    Sharding keeps the lines i with i % num_shards == shard_index, as load_parallel_corpus."""
    from opennmt_lite.data.corpus import (DROP_REASONS, Controls, DatasetStats, ParallelCorpus,
                                          RaggedIds)

    read = read_tagged if kind == "tags" else read_classified
    examples = read(features_path, labels_path, labels,
                    tokenize=lambda line: source_tokenizer.tokenize_batch([line])[0])
    line_index = np.arange(len(examples), dtype=np.int64)[shard_index::num_shards]
    lengths = np.array([len(examples[i][0]) for i in line_index], np.int64)
    keep = np.ones(len(line_index), bool)
    dropped = dict.fromkeys(DROP_REASONS, 0)
    if filter_examples:
        empty = lengths == 0
        too_long = (lengths > maximum_features_length if maximum_features_length
                    else np.zeros_like(empty))
        dropped.update(empty_source=int(empty.sum()),
                       source_too_long=int((too_long & ~empty).sum()))
        keep = ~(empty | too_long)
    line_index = line_index[keep]
    if not len(line_index):
        raise DataError(f"no example left in {features_path} / {labels_path}: "
                        f"{len(examples)} lines, all dropped ({dropped}) with "
                        f"maximum_features_length={maximum_features_length}")

    def ragged(sequences):
        offsets = np.concatenate([[0], np.cumsum([len(s) for s in sequences])]).astype(np.int64)
        flat = np.concatenate([np.asarray(s, np.int32) for s in sequences]) if sequences else []
        return RaggedIds(flat, offsets)

    source = ragged([source_vocabulary.lookup(examples[i][0]) for i in line_index])
    target = ragged([np.atleast_1d(examples[i][1]) for i in line_index])
    stats = DatasetStats(
        features_files=[features_path], labels_files=[labels_path], num_lines=len(examples),
        num_examples=len(line_index), dropped=dropped,
        maximum_features_length=maximum_features_length,
        num_source_tokens=int(source.lengths.sum()), num_target_tokens=int(target.lengths.sum()),
        num_source_oov=int(np.count_nonzero(source.flat == source_vocabulary.oov_id)),
        num_shards=num_shards, shard_index=shard_index)
    if filter_examples:
        logger.info("%s / %s: %d lines, %d kept (dropped: %d empty, %d longer than "
                    "maximum_features_length=%s)", features_path, labels_path, len(examples),
                    len(line_index), dropped["empty_source"], dropped["source_too_long"],
                    maximum_features_length)
    return ParallelCorpus(source, target, line_index, stats, source_controls=Controls(False, False),
                          target_controls=Controls(True, False))
