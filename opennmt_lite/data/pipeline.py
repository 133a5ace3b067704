"""Input pipelines for training, evaluation and inference, in NumPy.

The corpus is tokenized once into memory (see `corpus.py`); each epoch's batches are planned
with NumPy (see `batching.py`) and padded with NumPy (`TrainingInput.groups`). Keras' JAX
backend reads those NumPy batches, prefetched by a thread (`prefetched`); on the TensorFlow
backend, `TrainingInput.dataset` feeds the same batches, in the same order, to tf.data through
`tf.data.Dataset.from_generator` followed by `prefetch(AUTOTUNE)`. TensorFlow is imported only
there and in `batch_signature` (the TensorFlow backend's trace signature), so that the rest runs
where TensorFlow is not installed.

Training/evaluation elements are dicts of int32 tensors (padding id 0):

  source_ids [B, Ts], source_length [B], target_ids_in [B, Tt] (`<s>` + ids),
  target_ids_out [B, Tt] (ids + `</s>`), target_length [B] (pieces + 1)

as the default sequence controls make them (other controls: see corpus.py; the source ids then
hold their `<s>`/`</s>`, counted in source_length)

(evaluation adds `index` [B] int64, the 0-based line of each example; training with
contrastive learning adds the negative targets, noisy_target_ids_in, noisy_target_ids_out and
noisy_target_length, laid out as the target ones; `data.example_weights` adds
`example_weight` [B] float32; `data.train_alignments` adds `alignment` [B, Tt, Ts] float32,
the gold alignment matrices, row t for target word t; see alignments.py). Inference elements:
source_ids, source_length, index. Padded lengths are the batch's longest sequence rounded up
to `pad_to_multiple` (default 1: no rounding), which bounds the number of distinct shapes;
with `pad_to_bucket_boundary`, a training batch's two sides are first padded to the same length,
its length bucket's upper bound (OpenNMT-tf's train.pad_to_bucket_boundary).
"""

import concurrent.futures
import logging
import queue
import threading

import numpy as np

from opennmt_lite.data import batching
from opennmt_lite.data.corpus import (
    SOURCE_CONTROLS, TARGET_CONTROLS, RaggedIds, load_monolingual_corpus, load_parallel_corpus,
    num_controls)
from opennmt_lite.data.vocab import BOS_ID, EOS_ID

logger = logging.getLogger("opennmt_lite")

# (the negatives' random stream, apart from the shuffling's [seed, epoch])
NEGATIVES_STREAM = 0x6e6567

TRAINING_KEYS = ("source_ids", "source_length", "target_ids_in", "target_ids_out", "target_length")


def batch_signature(with_index=False, negatives=False, with_weight=False, with_alignment=False):
    """TensorSpecs of one training or evaluation batch: any batch size and length, so one trace
    serves every shape (`index` [B] int64: the evaluation batches' line numbers; `negatives`:
    contrastive learning's noisy targets; `example_weight` [B] float32: the training examples'
    loss weights; `alignment` [B, Tt, Ts] float32: the training batches' gold alignments, with
    guided alignment)."""
    import tensorflow as tf  # (the TensorFlow backend's trace signature only)

    spec = {
        "source_ids": tf.TensorSpec([None, None], tf.int32),
        "source_length": tf.TensorSpec([None], tf.int32),
        "target_ids_in": tf.TensorSpec([None, None], tf.int32),
        "target_ids_out": tf.TensorSpec([None, None], tf.int32),
        "target_length": tf.TensorSpec([None], tf.int32),
    }
    if with_index:
        spec["index"] = tf.TensorSpec([None], tf.int64)
    if negatives:
        for name in NEGATIVE_KEYS:
            spec[name] = spec[name[len("noisy_"):]]
    if with_weight:
        spec["example_weight"] = tf.TensorSpec([None], tf.float32)
    if with_alignment:
        spec["alignment"] = tf.TensorSpec([None, None, None], tf.float32)
    return spec


NEGATIVE_KEYS = ("noisy_target_ids_in", "noisy_target_ids_out", "noisy_target_length")


def _controlled(ragged, indices, length, controls):
    """[len(indices), length] ids of `ragged`'s sequences with the `<s>`/`</s>` of `controls`."""
    return ragged.padded(indices, length, prefix=BOS_ID if controls.start else None,
                         suffix=EOS_ID if controls.end else None)


def _decoder_sides(ragged, indices, length, time, controls):
    """(ids_in, ids_out, length) [B, time], [B, time], [B] of target sequences whose model length
    (pieces + controls - 1) is `length`: the target with its controls, one id longer than the
    decoder's sequences; the decoder reads it but for its last id and predicts it but for its
    first (OpenNMT-tf's decoder mode)."""
    full = _controlled(ragged, indices, time + 1, controls)
    reads = np.arange(time)[np.newaxis, :] < length[:, np.newaxis]
    return (np.where(reads, full[:, :-1], 0).astype(np.int32), np.ascontiguousarray(full[:, 1:]),
            np.maximum(length, 0).astype(np.int32))


def _padded_source(corpus, indices, pad_to_multiple):
    source_length = corpus.source_lengths[indices]
    source_time = max(int(batching.round_up(int(source_length.max()), pad_to_multiple)), 1)
    return _controlled(corpus.source, indices, source_time, corpus.source_controls), source_length


def pad_negatives(corpus, indices, negatives, rng, pad_to_multiple=1, time=None):
    """The NEGATIVE_KEYS of a batch: `negatives(ids, rng)` of each target of `indices`, padded
    as the targets are (with the corpus's target controls); `time`: to this length instead (a
    bounded shape's target length, which a negative, one word shorter, fits)."""
    noisy = [np.asarray(negatives(corpus.target[int(i)], rng), np.int32) for i in indices]
    pieces = np.array([len(ids) for ids in noisy], np.int64)
    offsets = np.concatenate([[0], np.cumsum(pieces)])
    ragged = RaggedIds(np.concatenate(noisy) if noisy else np.zeros(0, np.int32), offsets)
    length = pieces + num_controls(corpus.target_controls) - 1
    if time is None:
        time = max(int(batching.round_up(int(length.max(initial=0)), pad_to_multiple)), 1)
    ids_in, ids_out, length = _decoder_sides(ragged, np.arange(len(noisy)), length, time,
                                             corpus.target_controls)
    return {"noisy_target_ids_in": ids_in, "noisy_target_ids_out": ids_out,
            "noisy_target_length": length}


def pad_parallel_batch(corpus, indices, pad_to_multiple=1, with_index=False, bucket_width=None,
                       shape=None):
    """The padded NumPy batch (dict) of corpus examples `indices`; `bucket_width`: both sides
    padded to the length bucket boundary (see batching.padded_lengths); `shape`: (source, target)
    lengths to pad to instead (a `batching.ShapePlan`'s)."""
    indices = np.asarray(indices, dtype=np.int64)
    source_length = corpus.source_lengths[indices]
    target_length = corpus.target_lengths[indices]
    source_time, target_time = shape or batching.padded_lengths(
        int(source_length.max()), int(target_length.max()), pad_to_multiple, bucket_width)
    source_time, target_time = max(int(source_time), 1), max(int(target_time), 1)
    ids_in, ids_out, length = _decoder_sides(corpus.target, indices, target_length, target_time,
                                             corpus.target_controls)
    batch = {
        "source_ids": _controlled(corpus.source, indices, source_time, corpus.source_controls),
        "source_length": source_length.astype(np.int32),
        "target_ids_in": ids_in,
        "target_ids_out": ids_out,
        "target_length": length,
    }
    if with_index:
        batch["index"] = corpus.line_index[indices]
    if corpus.weights is not None:
        batch["example_weight"] = corpus.weights[indices]
    return batch


def pad_source_batch(corpus, indices, pad_to_multiple=1):
    indices = np.asarray(indices, dtype=np.int64)
    source_ids, source_length = _padded_source(corpus, indices, pad_to_multiple)
    return {
        "source_ids": source_ids,
        "source_length": source_length.astype(np.int32),
        "index": corpus.line_index[indices],
    }


def group_batches(batches, accum_steps):
    """Groups an iterable of batches into tuples of `accum_steps` consecutive batches (each
    keeping its own shapes). An incomplete last group is dropped (logged)."""
    group = []
    for batch in batches:
        group.append(batch)
        if len(group) == accum_steps:
            yield tuple(group)
            group = []
    if group:
        logger.info("dropped %d batch(es) at the end of the data: fewer than accum_steps=%d",
                    len(group), accum_steps)


class TrainingInput:
    """The training input: tokenized corpus, batch plans per epoch, and the tf.data.Dataset.

    Arguments (config-free, OpenNMT-tf's names):
      features_file, labels_file: source and target text (a path or a list of paths).
      corpus: instead of the files, an already loaded `corpus.ParallelCorpus` (the vocabulary,
        tokenizer, filter and shard arguments are then unused).
      source_vocabulary, target_vocabulary: Vocabulary objects or paths.
      source_tokenizer, target_tokenizer: tokenizer objects or configs (None: pre-tokenized).
      batch_size, batch_type ("tokens" | "examples"), batch_size_multiple.
      scheme: "sorted" (default) or "opennmt" (see batching.py for both).
      length_bucket_width: OpenNMT-tf's bucket width (opennmt scheme); in the sorted scheme the
        lengths are divided by it (rounded up) before ordering, 1 = exact.
      sample_buffer_size: shuffle window (<= 0 or None: the whole data; opennmt scheme:
        OpenNMT-tf's `shuffle_dataset` semantics, 0 or None = no shuffling).
      maximum_features_length, maximum_labels_length: training filter (see corpus.filter_mask).
      shuffle, seed: shuffling and its seed (None: a random seed drawn once per TrainingInput).
      repeat: True = endless (each epoch reshuffled), False = one pass.
      num_shards, shard_index: keep lines i with i % num_shards == shard_index.
      pad_to_multiple: round padded lengths up to a multiple of this.
      pad_to_bucket_boundary: OpenNMT-tf's: both sides of a batch padded to the length bucket
        boundary (a multiple of length_bucket_width; see batching.py).
      batch_overhead: sorted scheme, the cost of one more batch in padding tokens, as a
        fraction of batch_size (higher: fewer, fuller batches and more padding).
      accum_steps: > 1 makes each element a tuple of that many consecutive batches.
      max_shapes: sorted scheme, bounded shapes for XLA (train.jit_compile): every batch takes
        one of at most this many (source length, target length, batch size) shapes of a
        `batching.ShapePlan` (lengths on a grid of pad_to_multiple, or 4 when it is 1), planned
        by `batching.ShapePlanner`; None: batches padded to their own longest sequences.
      negatives: contrastive learning's negative targets (a callable (ids, rng) -> ids, e.g.
        noise.contrastive_negatives), added to each batch (NEGATIVE_KEYS), drawn from the
        seed and the batch's number in the stream, so a resumed run draws the same.
      source_controls, target_controls: the `corpus.Controls` of each side (OpenNMT-tf's
        sequence controls; default: none on the source, `<s>` and `</s>` on the target).
      alignments: an `alignments.Alignments` of the training files (guided alignment): each
        batch then holds "alignment", its examples' gold matrices; checked against the kept
        examples' lengths here. `example_lines`: the line of each example of `corpus` in the
        training files taken end to end, which the alignments are read by (default: its
        line_index).

    Same seed, same arguments: the same batches in the same order, every time the dataset is
    iterated. Without shuffling, one pass yields every kept example exactly once (with
    batch_size_multiple > 1, see batching.py for the remainder).
    """

    def __init__(self, features_file=None, labels_file=None, *, batch_size, corpus=None,
                 source_vocabulary=None, target_vocabulary=None,
                 source_tokenizer=None, target_tokenizer=None, batch_type="tokens",
                 batch_size_multiple=1, scheme="sorted", length_bucket_width=1,
                 sample_buffer_size=-1, maximum_features_length=None, maximum_labels_length=None,
                 shuffle=True, seed=None, repeat=True, num_shards=1, shard_index=0,
                 pad_to_multiple=1, pad_to_bucket_boundary=False, batch_overhead=0.15,
                 accum_steps=1, max_shapes=None, drop_empty_target=True, negatives=None,
                 alignments=None,
                 example_lines=None, source_controls=SOURCE_CONTROLS,
                 target_controls=TARGET_CONTROLS):
        batching.validate_batching(batch_size, batch_type, batch_size_multiple, scheme)
        if scheme == "opennmt" and batch_type == "tokens" and not length_bucket_width:
            raise ValueError("batch_type 'tokens' with the opennmt scheme requires "
                             "length_bucket_width >= 1 (as in OpenNMT-tf)")
        if accum_steps < 1:
            raise ValueError(f"accum_steps must be >= 1, got {accum_steps}")
        if corpus is not None:
            if features_file is not None or labels_file is not None:
                raise ValueError("give either the data files or a loaded corpus, not both")
            self.corpus = corpus
        else:
            if features_file is None or labels_file is None:
                raise ValueError("features_file and labels_file are required")
            self.corpus = load_parallel_corpus(
                features_file, labels_file,
                source_vocabulary=source_vocabulary, target_vocabulary=target_vocabulary,
                source_tokenizer=source_tokenizer, target_tokenizer=target_tokenizer,
                maximum_features_length=maximum_features_length,
                maximum_labels_length=maximum_labels_length,
                drop_empty_target=drop_empty_target, num_shards=num_shards,
                shard_index=shard_index, source_controls=source_controls,
                target_controls=target_controls,
            )
        self.stats = self.corpus.stats
        self.alignments = alignments
        # (each example's 0-based line in the training files taken end to end)
        self.example_lines = self.corpus.line_index if example_lines is None else example_lines
        if alignments is not None:
            alignments.check_lengths(self.example_lines, self.corpus.source.lengths,
                                     self.corpus.target.lengths)
        self.batch_size = int(batch_size)
        self.batch_type = batch_type
        self.batch_size_multiple = int(batch_size_multiple)
        self.scheme = scheme
        self.length_bucket_width = length_bucket_width
        self.sample_buffer_size = sample_buffer_size
        self.shuffle = shuffle
        self.seed = int(seed) if seed is not None else int(np.random.SeedSequence().entropy % 2**63)
        self.repeat = repeat
        self.pad_to_multiple = pad_to_multiple
        # (no width, no buckets: OpenNMT-tf then pads to the longest sequence too)
        self.bucket_width = length_bucket_width if pad_to_bucket_boundary else None
        self.batch_overhead = batch_overhead
        self.accum_steps = int(accum_steps)
        self.negatives = negatives
        self.dropped_remainder = 0  # examples left out at the end of the last single pass
        self.shape_plan = None
        if max_shapes and scheme == "sorted":
            self.shape_plan = batching.ShapePlan(
                self.corpus.source_lengths, self.corpus.target_lengths, batch_size=batch_size,
                batch_type=batch_type, batch_size_multiple=batch_size_multiple,
                max_shapes=max_shapes, pad_to_multiple=pad_to_multiple,
                length_multiple=(pad_to_multiple if pad_to_multiple > 1
                                 else batching.XLA_LENGTH_MULTIPLE))
            self.bucket_width = None
            logger.info("XLA: %d batch shapes (source x target: examples), %.1f %% padding: %s",
                        len(self.shape_plan.shapes), 100 * self.shape_plan.padding_fraction(),
                        self.shape_plan.describe())

    # -- plans ------------------------------------------------------------------------------

    def _epoch_rng(self, epoch):
        return np.random.default_rng([self.seed, epoch])

    def _make_planner(self):
        if self.scheme != "sorted":
            return None
        if self.shape_plan is not None:
            return batching.ShapePlanner(self.shape_plan, self.sample_buffer_size)
        return batching.SortedPlanner(
            self.corpus.source_lengths, self.corpus.target_lengths,
            batch_size=self.batch_size, batch_type=self.batch_type,
            batch_size_multiple=self.batch_size_multiple,
            length_bucket_width=self.length_bucket_width,
            sample_buffer_size=self.sample_buffer_size, pad_to_multiple=self.pad_to_multiple,
            pad_to_bucket_boundary=bool(self.bucket_width), batch_overhead=self.batch_overhead,
        )

    def _plan(self, planner, epoch, final):
        examples = np.arange(len(self.corpus), dtype=np.int64)
        rng = self._epoch_rng(epoch) if self.shuffle else None
        if self.scheme == "opennmt":
            order = (batching.opennmt_shuffle(examples, self.sample_buffer_size, rng)
                     if self.shuffle else examples)
            batches = self._opennmt_batches(order)
            dropped = np.zeros(0, np.int64)
            if final and self.bucket_width:  # (the partial buckets OpenNMT-tf drops)
                kept = np.concatenate(batches) if batches else dropped
                dropped = np.setdiff1d(order, kept)
            return batches, dropped
        order = examples[rng.permutation(len(examples))] if self.shuffle else examples
        return planner.plan_epoch(order, rng=rng, final=final)

    def _opennmt_batches(self, order):
        """OpenNMT-tf's batches of the examples `order` (batching.plan_opennmt_batches)."""
        return batching.plan_opennmt_batches(
            order, self.corpus.source_lengths, self.corpus.target_lengths,
            batch_size=self.batch_size, batch_type=self.batch_type,
            batch_size_multiple=self.batch_size_multiple,
            length_bucket_width=self.length_bucket_width,
            pad_to_bucket_boundary=bool(self.bucket_width))

    def index_batches(self, num_epochs=None, skip_batches=0):
        """Yields the example indices (into `corpus`) of each batch; `num_epochs` defaults to
        endless when repeating, else 1. The next epoch is planned in a background thread.

        `skip_batches`: leave out the first batches of the stream (to resume a training run
        exactly where it stopped); skipped epochs are still planned (about 0.5 s per epoch of
        the sample data), not padded."""
        if num_epochs is None and not self.repeat:
            num_epochs = 1
        planner = self._make_planner()
        executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="plan_batches")

        def submit(e):
            final = num_epochs is not None and e == num_epochs - 1
            return executor.submit(self._plan, planner, e, final)

        try:
            epoch = 0
            future = submit(0)
            while num_epochs is None or epoch < num_epochs:
                batches, dropped = future.result()
                if num_epochs is None or epoch + 1 < num_epochs:
                    future = submit(epoch + 1)
                if len(dropped):
                    self.dropped_remainder = len(dropped)
                    reason = ("in length buckets left partial (train.pad_to_bucket_boundary, "
                              "as OpenNMT-tf)" if self.scheme == "opennmt" else
                              f"fewer than batch_size_multiple={self.batch_size_multiple}")
                    logger.info("%d example(s) left out at the end of the pass: %s",
                                len(dropped), reason)
                if skip_batches >= len(batches):
                    skip_batches -= len(batches)
                else:
                    yield from batches[skip_batches:]
                    skip_batches = 0
                epoch += 1
        finally:
            # An abandoned iteration does not wait for the plan under way.
            executor.shutdown(wait=False, cancel_futures=True)

    def epoch_batches(self, epoch=0):
        """The batches (index arrays) of one epoch planned alone (no carry from the previous
        epoch, all examples emitted), e.g. for statistics."""
        return self._plan(self._make_planner(), epoch, final=True)[0]

    # -- NumPy and tf.data ------------------------------------------------------------------

    def numpy_batches(self, num_epochs=None, skip_batches=0):
        """Padded NumPy batches (dicts; tuples of dicts with accum_steps > 1). `skip_batches`
        counts single batches (accum_steps of them per group); see index_batches."""
        batches = (self._pad(number, indices) for number, indices in
                   enumerate(self.index_batches(num_epochs, skip_batches), start=skip_batches))
        if self.accum_steps > 1:
            return group_batches(batches, self.accum_steps)
        return batches

    def _pad(self, number, indices):
        shape = self.shape_plan.padded_shape(indices) if self.shape_plan is not None else None
        batch = pad_parallel_batch(self.corpus, indices, self.pad_to_multiple,
                                   bucket_width=self.bucket_width, shape=shape)
        if self.negatives is not None:
            rng = np.random.default_rng([self.seed, NEGATIVES_STREAM, number])
            batch.update(pad_negatives(self.corpus, indices, self.negatives, rng,
                                       self.pad_to_multiple, time=shape and shape[1]))
        if self.alignments is not None:
            batch["alignment"] = self.alignments.matrices(
                self.example_lines[indices], batch["target_ids_in"].shape[1],
                batch["source_ids"].shape[1], int(self.corpus.source_controls.start))
        return batch

    @property
    def element_spec(self):
        return (batch_signature(negatives=self.negatives is not None,
                                with_weight=self.corpus.weights is not None,
                                with_alignment=self.alignments is not None),) * self.accum_steps

    def groups(self, num_epochs=None, skip_groups=0):
        """What the train step consumes, in NumPy: groups, each a tuple of `accum_steps` padded
        batches (endless when repeating), starting after `skip_groups` groups (resume). The
        same groups as `dataset` yields, in the same order."""
        batches = self.numpy_batches(num_epochs, skip_batches=skip_groups * self.accum_steps)
        return batches if self.accum_steps > 1 else ((batch,) for batch in batches)

    def dataset(self, num_epochs=None, skip_groups=0, prefetch=True):
        """`groups` as a tf.data.Dataset (the TensorFlow backend's train step), prefetched by
        tf.data unless `prefetch` is False."""
        import tensorflow as tf  # (the TensorFlow backend's adapter only)

        dataset = tf.data.Dataset.from_generator(lambda: self.groups(num_epochs, skip_groups),
                                                 output_signature=self.element_spec)
        if prefetch:
            dataset = dataset.prefetch(tf.data.AUTOTUNE)
        return dataset


class prefetched:
    """Iterates over `iterable` (e.g. `TrainingInput.groups`) `size` items ahead, in a daemon
    thread, as tf.data's prefetch does for the TensorFlow backend: the next batches are padded
    while the current step computes. Same items, same order; an exception of the iterable is
    raised where its item would have come. `close()` (or leaving a `with` block) stops the
    thread at its next item."""

    _END = object()

    def __init__(self, iterable, size=2):
        self._queue = queue.Queue(maxsize=max(int(size), 1))
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._fill, args=(iter(iterable),),
                                        name="prefetch_batches", daemon=True)
        self._thread.start()

    def _put(self, item):
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def _fill(self, iterator):
        try:
            for item in iterator:
                if not self._put((item, None)):
                    return
        except BaseException as error:  # noqa: BLE001 (handed to the consumer)
            self._put((None, error))
            return
        finally:
            close = getattr(iterator, "close", None)
            if close is not None and self._stop.is_set():
                close()
        self._put((self._END, None))

    def __iter__(self):
        return self

    def __next__(self):
        if self._stop.is_set():
            raise StopIteration
        item, error = self._queue.get()
        if error is not None:
            self.close()
            raise error
        if item is self._END:
            self.close()
            raise StopIteration
        return item

    def close(self):
        self._stop.set()

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()


def _ordered_batches(source_lengths, target_lengths, batch_size, batch_type, length_bucket_width):
    """Evaluation/inference batches: file order, or OpenNMT-tf's length buckets (no shuffling)
    when `length_bucket_width` is set. Tokens batches in file order are cut greedily."""
    batching.validate_batching(batch_size, batch_type, 1)
    order = np.arange(len(source_lengths), dtype=np.int64)
    if length_bucket_width:
        return batching.plan_opennmt_batches(
            order, source_lengths, target_lengths, batch_size=batch_size, batch_type=batch_type,
            length_bucket_width=length_bucket_width)
    if batch_type == "examples":
        return [order[i:i + batch_size] for i in range(0, len(order), batch_size)]
    longest = np.maximum(source_lengths, target_lengths).tolist()
    batches, start, current = [], 0, 0
    for i, length in enumerate(longest):
        candidate = max(current, length)
        if i > start and (i - start + 1) * candidate > batch_size:
            batches.append(order[start:i])
            start, candidate = i, length
        current = candidate
    if start < len(order):
        batches.append(order[start:])
    return batches


class EvaluationInput:
    """Evaluation data: every pair (no length filter, as OpenNMT-tf), no shuffling, one pass;
    batches in file order, or bucketed by length (OpenNMT-tf's rule) when length_bucket_width
    is set, with `index` restoring the file order."""

    def __init__(self, features_file, labels_file, *, source_vocabulary, target_vocabulary,
                 batch_size, source_tokenizer=None, target_tokenizer=None, batch_type="examples",
                 length_bucket_width=None, pad_to_multiple=1, source_controls=SOURCE_CONTROLS,
                 target_controls=TARGET_CONTROLS):
        self.corpus = load_parallel_corpus(
            features_file, labels_file,
            source_vocabulary=source_vocabulary, target_vocabulary=target_vocabulary,
            source_tokenizer=source_tokenizer, target_tokenizer=target_tokenizer,
            filter_examples=False, source_controls=source_controls,
            target_controls=target_controls,
        )
        self.stats = self.corpus.stats
        self.pad_to_multiple = pad_to_multiple
        self.batches = _ordered_batches(self.corpus.source_lengths, self.corpus.target_lengths,
                                        batch_size, batch_type, length_bucket_width)

    def numpy_batches(self):
        for indices in self.batches:
            yield pad_parallel_batch(self.corpus, indices, self.pad_to_multiple, with_index=True)


class InferenceInput:
    """Inference data: every line of `features_file` (empty lines included), no shuffling, one
    pass; batches in file order, or bucketed by source length (OpenNMT-tf's rule) when
    length_bucket_width is set. Use `index` to write outputs in file order.
    `corpus.tokens[i]` holds the source tokens of line i.

    A line longer than `maximum_features_length` tokens is cut to its first ones (a warning names
    it; `truncated` maps its 0-based line to its length): it is still translated, as OpenNMT-tf
    translates every line, but cannot exhaust the memory."""

    def __init__(self, features_file, *, source_vocabulary, batch_size, source_tokenizer=None,
                 batch_type="examples", length_bucket_width=None, pad_to_multiple=1,
                 maximum_features_length=None, source_controls=SOURCE_CONTROLS):
        self.corpus = load_monolingual_corpus(
            features_file, source_vocabulary=source_vocabulary, source_tokenizer=source_tokenizer,
            source_controls=source_controls)
        self.truncated = {}
        if maximum_features_length:
            self.truncated = self.corpus.truncate(maximum_features_length)
            _warn_truncated(self.truncated, features_file, maximum_features_length)
        self.pad_to_multiple = pad_to_multiple
        lengths = self.corpus.source_lengths
        self.batches = _ordered_batches(lengths, np.zeros_like(lengths), batch_size, batch_type,
                                        length_bucket_width)

    def numpy_batches(self):
        for indices in self.batches:
            yield pad_source_batch(self.corpus, indices, self.pad_to_multiple)


def _warn_truncated(truncated, features_file, maximum, shown=10):
    """One warning per truncated line (the first `shown`), then their count."""
    for line, length in list(truncated.items())[:shown]:
        logger.warning("%s, line %d: %d tokens, more than infer.maximum_features_length=%d: "
                       "translating its first %d tokens", features_file, line + 1, length, maximum,
                       maximum)
    if len(truncated) > shown:
        logger.warning("%s: %d lines in all were truncated to %d tokens", features_file,
                       len(truncated), maximum)
