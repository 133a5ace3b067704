"""Several training files and their weights (OpenNMT-tf's `data.train_files_weights`), and the
per-example loss weights of `data.example_weights`.

OpenNMT-tf 2.32 (`opennmt.data.training_pipeline`) repeats each file on its own and draws each
example from file i with probability proportional to weight_i * size_i, where size_i is the
file's number of lines (divided by the number of shards); the length filter applies after the
draw, so a file whose lines are often too long yields fewer kept examples. Equal weights thus
read every line equally often, as a concatenation would.

Here the same draws are made in windows of `train.sample_buffer_size` draws (the sum of the
files' lines when it is <= 0): window w draws its files with a generator seeded by (seed, w),
takes the next lines of each file drawn, and hands the kept ones to the batch planner of the
scheme (`sorted`: one window of the snake order and the cut; `opennmt`: shuffled, then
OpenNMT-tf's buckets). Each file is read in a new random order at each of its passes (seeded by
(seed, file, pass)); OpenNMT-tf reads it in file order and mixes it in its shuffle buffer.

So the stream is a function of the seed alone: the position in each file at window w is the sum
of the earlier windows' draws (`WeightedSampler.positions`), and a run resumed from the
checkpoint's data position (`data/groups_done`) reads exactly what the interrupted run would
have read next, file positions included. Sharding is per file, as in OpenNMT-tf (line j of a
file goes to shard j % num_shards).
"""

import logging
import os
import threading

import numpy as np

from opennmt_lite.data.corpus import (
    SOURCE_CONTROLS, TARGET_CONTROLS,
    DROP_REASONS, DatasetStats, ParallelCorpus, RaggedIds, load_parallel_corpus)
from opennmt_lite.data.pipeline import TrainingInput
from opennmt_lite.data.text import DataError, as_file_list, count_lines, parse_number, read_lines

logger = logging.getLogger("opennmt_lite")


def read_example_weights(path, num_lines, data_file):
    """float32 [num_lines]: the weight on each line of `path` (one per line of `data_file`).
    DataError naming the file and line for a wrong line count, a value that is not a finite
    number, or a negative one."""
    lines = read_lines(path, kind="data.example_weights")
    if len(lines) != num_lines:
        raise DataError(f"data.example_weights {path}: {len(lines)} lines, but {data_file} has "
                        f"{num_lines}: one weight per training example")
    try:
        values = np.array(lines, dtype=np.float64)
    except ValueError:  # (find the line, with Python's own parser)
        values = None
    parsed = values if values is not None else [parse_number(line) for line in lines]
    for number, (line, value) in enumerate(zip(lines, parsed), start=1):
        if value is None or not np.isfinite(value):
            raise DataError(f"data.example_weights {path}, line {number}: {line!r} is not a "
                            f"finite number")
        if value < 0:
            raise DataError(f"data.example_weights {path}, line {number}: negative weight "
                            f"{line.strip()}")
    return np.asarray(parsed, dtype=np.float32)


def example_weights(weights_files, features_files):
    """float32 weights of every line of the concatenated `features_files`, one weights file
    per features file."""
    weights_files, features_files = as_file_list(weights_files), as_file_list(features_files)
    if len(weights_files) != len(features_files):
        raise DataError(f"data.example_weights: {len(weights_files)} file(s) for "
                        f"{len(features_files)} training file(s)")
    return np.concatenate([read_example_weights(w, count_lines(f), f)
                           for w, f in zip(weights_files, features_files)])


def with_example_weights(corpus, weights_files, features_files):
    """`corpus` (loaded from `features_files`) with the weight of each kept example."""
    if weights_files is not None:
        corpus.weights = example_weights(weights_files, features_files)[corpus.line_index]
    return corpus


def concatenate(corpora):
    """One ParallelCorpus of several (the examples of each in turn; line_index stays the line
    in its own file)."""
    def ragged(parts):
        lengths = np.concatenate([part.lengths for part in parts]).astype(np.int64)
        offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        return RaggedIds(np.concatenate([part.flat for part in parts]), offsets)

    stats = [corpus.stats for corpus in corpora]
    total = DatasetStats(
        features_files=[f for s in stats for f in s.features_files],
        labels_files=[f for s in stats for f in s.labels_files],
        num_lines=sum(s.num_lines for s in stats),
        num_examples=sum(s.num_examples for s in stats),
        dropped={reason: sum(s.dropped[reason] for s in stats) for reason in DROP_REASONS},
        maximum_features_length=stats[0].maximum_features_length,
        maximum_labels_length=stats[0].maximum_labels_length,
        **{name: sum(getattr(s, name) for s in stats) for name in (
            "num_source_tokens", "num_target_tokens", "num_source_oov", "num_target_oov")},
        num_shards=stats[0].num_shards, shard_index=stats[0].shard_index,
    )
    return ParallelCorpus(ragged([c.source for c in corpora]), ragged([c.target for c in corpora]),
                          np.concatenate([c.line_index for c in corpora]), total,
                          corpora[0].source_controls, corpora[0].target_controls)


def sampling_probabilities(weights, sizes):
    """OpenNMT-tf's `normalize_weights`: p_i proportional to weight_i * size_i."""
    scaled = np.asarray(weights, dtype=np.float64) * np.asarray(sizes, dtype=np.float64)
    if scaled.sum() <= 0:
        raise DataError("data.train_files_weights: every file with a non-zero weight is empty")
    return scaled / scaled.sum()


class WeightedSampler:
    """The endless weighted stream of one shard, window by window.

    `examples_of_lines[i]`: for each line of file i in this shard, its example index in the
    concatenated corpus, or -1 if the filter dropped it; `probabilities[i]`: file i's share of
    the draws; `window`: draws per window; `seed`: of every draw and every pass order.
    """

    def __init__(self, examples_of_lines, probabilities, window, seed):
        self.examples_of_lines = [np.asarray(e, dtype=np.int64) for e in examples_of_lines]
        self.probabilities = np.asarray(probabilities, dtype=np.float64)
        self.window = int(window)
        self.seed = int(seed)
        self._starts = [np.zeros(len(self.examples_of_lines), dtype=np.int64)]  # per window
        self._lock = threading.Lock()
        self._orders = {}  # file -> (pass, its order): the pass being read, drawn once

    def rng(self, window):
        return np.random.default_rng([self.seed, window])

    def _draw_files(self, rng):
        return rng.choice(len(self.probabilities), size=self.window, p=self.probabilities)

    def positions(self, window):
        """Lines read so far from each file (over all its passes) when `window` starts."""
        with self._lock:
            while len(self._starts) <= window:
                w = len(self._starts) - 1
                counts = np.bincount(self._draw_files(self.rng(w)),
                                     minlength=len(self.probabilities))
                self._starts.append(self._starts[-1] + counts)
            return self._starts[window].copy()

    def _pass_order(self, file, number):
        """The shard lines of `file` in the order of its pass `number`."""
        cached = self._orders.get(file)
        if cached is None or cached[0] != number:
            size = len(self.examples_of_lines[file])
            cached = (number, np.random.default_rng([self.seed, file, number]).permutation(size))
            self._orders[file] = cached
        return cached[1]

    def _file_order(self, file, passes):
        """The shard lines of `file` in the order of its passes `passes` (one permutation each)."""
        return np.concatenate([self._pass_order(file, p) for p in passes])

    def window_examples(self, window):
        """(example indices of the window in draw order (dropped lines left out), the rng that
        plans its batches)."""
        start = self.positions(window)
        rng = self.rng(window)
        files = self._draw_files(rng)
        examples = np.full(self.window, -1, dtype=np.int64)
        for i, lines in enumerate(self.examples_of_lines):
            slots = np.flatnonzero(files == i)
            if not len(slots):
                continue
            size = len(lines)
            first, last = start[i] // size, (start[i] + len(slots) - 1) // size
            order = self._file_order(i, range(first, last + 1))
            offset = start[i] - first * size
            examples[slots] = lines[order[offset:offset + len(slots)]]
        return examples[examples >= 0], rng


class WeightedTrainingInput(TrainingInput):
    """A TrainingInput over several files drawn with OpenNMT-tf's weights (see the module doc);
    its "epochs" are the sampler's windows, and the stream never ends."""

    def __init__(self, features_files, labels_files, weights, *, example_weights_files=None,
                 num_shards=1, shard_index=0, maximum_features_length=None,
                 maximum_labels_length=None, source_vocabulary=None, target_vocabulary=None,
                 source_tokenizer=None, target_tokenizer=None, drop_empty_target=True,
                 seed=None, source_controls=SOURCE_CONTROLS, target_controls=TARGET_CONTROLS,
                 **kwargs):
        features_files, labels_files = as_file_list(features_files), as_file_list(labels_files)
        if len(features_files) != len(labels_files):
            raise DataError(f"{len(features_files)} source files but {len(labels_files)} target "
                            f"files: {features_files} / {labels_files}")
        if len(weights) != len(features_files):
            raise DataError(f"data.train_files_weights: {len(weights)} weight(s) for "
                            f"{len(features_files)} training files")
        corpora, sizes, examples_of_lines, first = [], [], [], 0
        lines_before, example_lines = 0, []  # (the examples' lines in the files end to end)
        for features, labels in zip(features_files, labels_files):
            corpus = load_parallel_corpus(
                features, labels, source_vocabulary=source_vocabulary,
                target_vocabulary=target_vocabulary, source_tokenizer=source_tokenizer,
                target_tokenizer=target_tokenizer, maximum_features_length=maximum_features_length,
                maximum_labels_length=maximum_labels_length, drop_empty_target=drop_empty_target,
                num_shards=num_shards, shard_index=shard_index, source_controls=source_controls,
                target_controls=target_controls)
            num_lines = count_lines(features)
            # OpenNMT-tf's size of a shard of the file: its lines // num_shards
            sizes.append(num_lines // num_shards)
            lines = np.full(corpus.stats.num_lines, -1, dtype=np.int64)
            lines[corpus.line_index // num_shards] = first + np.arange(len(corpus))
            examples_of_lines.append(lines)
            example_lines.append(corpus.line_index + lines_before)
            lines_before += num_lines
            first += len(corpus)
            corpora.append(corpus)
        super().__init__(corpus=concatenate(corpora), seed=seed,
                         example_lines=np.concatenate(example_lines),
                         maximum_features_length=maximum_features_length,
                         maximum_labels_length=maximum_labels_length, **kwargs)
        if example_weights_files is not None:  # (one weight per line of the files end to end)
            self.corpus.weights = example_weights(example_weights_files,
                                                  features_files)[self.example_lines]
        self.probabilities = sampling_probabilities(weights, sizes)
        buffer = self.sample_buffer_size
        window = buffer if buffer and buffer > 0 else sum(len(e) for e in examples_of_lines)
        self.sampler = WeightedSampler(examples_of_lines, self.probabilities, window, self.seed)
        logger.info("weighted training files (shard %d of %d), windows of %d draws: %s",
                    shard_index, num_shards, window, ", ".join(
                        f"{os.path.basename(f)} p={p:.4f}"
                        for f, p in zip(features_files, self.probabilities)))

    def _plan(self, planner, epoch, final):
        examples, rng = self.sampler.window_examples(epoch)
        if self.scheme == "opennmt":
            order = examples[rng.permutation(len(examples))] if self.sample_buffer_size else examples
            return self._opennmt_batches(order), np.zeros(0, np.int64)
        return planner.plan_epoch(examples, rng=rng, final=False)
