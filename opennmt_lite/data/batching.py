"""Batch planning: which examples form each batch, and in which order batches come.

Everything here works on example indices and length arrays (NumPy); `pipeline.py` turns the
plans into padded batches. Lengths are the model's: source pieces, and target pieces + 1.

Two training schemes:

* `"opennmt"`: OpenNMT-tf 2.32's own (`opennmt.data.batch_sequence_dataset` after
  `shuffle_dataset`), reproduced rule for rule (not its random numbers):

  - shuffling: with a buffer smaller than the data, the data is cut into
    ceil(N / buffer) "random shards" of `buffer` consecutive examples starting at
    `linspace(0, N, num_shards, endpoint=False)` (so shards can overlap: when the buffer does
    not divide N some examples come twice in an epoch, none is skipped), visited in random order,
    then passed through a buffer shuffle of that size; a buffer <= 0 or >= N is a plain
    permutation;
  - bucketing: an example's length is max(source length, target length), with the target
    length counting `</s>`; its bucket is max(ceil(length / width) - 1, 0);
  - batch_type tokens: a bucket is emitted as one batch as soon as it holds
    max((batch_size // ((bucket + 1) * width)) // multiple * multiple, multiple) examples;
    batch_type examples: as soon as it holds batch_size examples (no rounding to the multiple);
  - end of the epoch: every non-empty bucket is flushed as a smaller batch, in increasing
    bucket order (tf.data's group_by_window), so those batches need not be multiples of
    `batch_size_multiple`; OpenNMT-tf repeats after batching, so this happens every epoch;
  - batches are padded to their longest sequence, and come in the order they fill up;
  - `pad_to_bucket_boundary` (train.pad_to_bucket_boundary, OpenNMT-tf's
    `bucket_by_sequence_length` path): both sides of a batch are padded to its bucket's upper
    bound, (bucket + 1) * width; examples batches are rounded down to the multiple too; and
    the buckets still partial at the end of an epoch are dropped, not flushed (drop_remainder).

* `"sorted"` (default): within a shuffled window of `sample_buffer_size` examples (the whole
  data by default), examples are ordered along a "snake" path through the
  (target length, source length) plane: by target length, then by source length, ascending for
  even target lengths and descending for odd ones, so that consecutive examples are close in
  both lengths (ties keep the shuffled order; lengths are compared after division by
  `length_bucket_width`, rounded up, so a wider width mixes more). This order is then cut into
  batches by dynamic programming that minimises the padded tokens plus `batch_overhead *
  batch_size` per batch (default 0.15: one more batch is worth 15 % of a batch in padding,
  which gives fewer batches than OpenNMT-tf's scheme and ~4 % padding; a greedy cut of a sorted list leaves ~10 % padding on the sample data,
  as much as OpenNMT-tf's buckets). Every batch respects, padding included,
  n * padded max source length <= batch_size and n * padded max target length <= batch_size
  (tokens), or n <= batch_size (examples), with n a multiple of `batch_size_multiple`; an example
  too long for even `batch_size_multiple` copies of it within the budget forms a batch of
  `batch_size_multiple` examples alone (over budget, logged) as OpenNMT-tf does. The batches of
  a window are then shuffled. When the window size is not a multiple of `batch_size_multiple`,
  the remainder (the window's last examples before sorting: random ones when shuffling, so no
  example is deferred systematically) is carried into the next window, and at the end of an
  epoch into the next epoch when repeating; at the end of a single pass it is dropped and counted
  (never with `batch_size_multiple=1`). With batch_type examples the sorted order is cut into
  consecutive batches of batch_size (rounded down to the multiple) examples; examples that would
  make a smaller last batch are carried in the same way (at the end of a single pass they form a
  smaller batch, rounded down to the multiple). With `pad_to_bucket_boundary`, both sides of a
  batch are padded to its longest sequence (either side) rounded up to a multiple of the width,
  and the budgets count that padding.
"""

import logging
import math

import numpy as np

logger = logging.getLogger("opennmt_lite")

SCHEMES = ("sorted", "opennmt")
BATCH_TYPES = ("tokens", "examples")


def round_up(values, multiple):
    """Values rounded up to a multiple (NumPy arrays or ints)."""
    if multiple is None or multiple <= 1:
        return values
    return -(-np.asarray(values) // multiple) * multiple


def padded_lengths(source_lengths, target_lengths, pad_to_multiple=1, bucket_width=None):
    """(source, target) padded lengths of sequences of these lengths (NumPy arrays or ints; target
    lengths counting `</s>`): each rounded up to `pad_to_multiple`. With `bucket_width`
    (train.pad_to_bucket_boundary) both sides first take the length bucket's upper bound,
    ceil(max(source, target) / width) * width, as OpenNMT-tf pads a batch to its bucket boundary.
    """
    if bucket_width:
        longest = round_up(np.maximum(source_lengths, target_lengths), bucket_width)
        source_lengths = target_lengths = longest
    return round_up(source_lengths, pad_to_multiple), round_up(target_lengths, pad_to_multiple)


def accum_steps(effective_batch_size, batch_size, num_replicas=1):
    """Gradient accumulation steps to reach `effective_batch_size`: OpenNMT-tf's
    `_count_batch_accum`, ceil(effective_batch_size / (batch_size * num_replicas))."""
    if effective_batch_size is None:
        return 1
    if batch_size <= 0 or num_replicas <= 0:
        raise ValueError("batch_size and num_replicas must be positive")
    return int(math.ceil(float(effective_batch_size) / (batch_size * num_replicas)))


def validate_batching(batch_size, batch_type, batch_size_multiple, scheme=None):
    if batch_type not in BATCH_TYPES:
        raise ValueError(f"invalid batch_type {batch_type!r}; expected 'tokens' or 'examples'")
    if scheme is not None and scheme not in SCHEMES:
        raise ValueError(f"invalid batching scheme {scheme!r}; expected one of {SCHEMES}")
    if not isinstance(batch_size, (int, np.integer)) or batch_size <= 0:
        raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
    if not isinstance(batch_size_multiple, (int, np.integer)) or batch_size_multiple < 1:
        raise ValueError(f"batch_size_multiple must be a positive integer, got {batch_size_multiple!r}")


# ---------------------------------------------------------------------------------------------
# OpenNMT-tf's scheme


def opennmt_shuffle(indices, buffer_size, rng):
    """The example order of OpenNMT-tf's `shuffle_dataset(buffer_size)` (see the module doc)."""
    indices = np.asarray(indices, dtype=np.int64)
    total = len(indices)
    if buffer_size is None or buffer_size == 0 or total == 0:
        return indices
    if buffer_size < 0 or buffer_size >= total:
        return indices[rng.permutation(total)]
    num_shards = -(-total // buffer_size)
    offsets = np.linspace(0, total, num=num_shards, endpoint=False, dtype=np.int64)
    offsets = offsets[rng.permutation(num_shards)]
    stream = np.concatenate([indices[offset:offset + buffer_size] for offset in offsets])
    # tf.data.Dataset.shuffle: fill a buffer, then repeatedly emit a random slot and refill it.
    out = np.empty(len(stream), dtype=np.int64)
    buffer = list(stream[:buffer_size])
    position = len(buffer)
    draws = rng.random(len(stream))
    for k in range(len(stream)):
        slot = int(draws[k] * len(buffer))
        out[k] = buffer[slot]
        if position < len(stream):
            buffer[slot] = stream[position]
            position += 1
        else:
            buffer[slot] = buffer[-1]
            buffer.pop()
    return out


def opennmt_bucket(source_lengths, target_lengths, length_bucket_width):
    """OpenNMT-tf's bucket id: max(ceil(max(source, target length) / width) - 1, 0)."""
    length = np.maximum(source_lengths, target_lengths).astype(np.int64)
    return np.maximum(-(-length // length_bucket_width) - 1, 0)


def opennmt_window_size(bucket, batch_size, batch_type, batch_size_multiple, length_bucket_width,
                        pad_to_bucket_boundary=False):
    """Examples per batch of a bucket in OpenNMT-tf's `batch_sequence_dataset` (with
    `pad_to_bucket_boundary`, its `get_bucket_batch_sizes`: the same for tokens, and examples
    batches rounded down to the multiple too)."""
    if batch_type == "examples":
        if pad_to_bucket_boundary and batch_size_multiple > 1:
            return max(batch_size - batch_size % batch_size_multiple, batch_size_multiple)
        return batch_size
    size = batch_size // ((int(bucket) + 1) * length_bucket_width)
    size = (size // batch_size_multiple) * batch_size_multiple
    return max(size, batch_size_multiple)


def plan_opennmt_batches(order, source_lengths, target_lengths, *, batch_size, batch_type,
                         batch_size_multiple=1, length_bucket_width=None,
                         pad_to_bucket_boundary=False):
    """Batches (arrays of example indices) of one epoch over `order`, OpenNMT-tf's way.

    `source_lengths` / `target_lengths` are indexed by example. Without a bucket width,
    examples are batched in order, batch_size at a time (OpenNMT-tf refuses tokens batches
    without a width; so does this). With `pad_to_bucket_boundary` (and a width), the buckets
    still partial at the end are left out, as OpenNMT-tf's `bucket_by_sequence_length` drops
    them (drop_remainder)."""
    validate_batching(batch_size, batch_type, batch_size_multiple)
    order = np.asarray(order, dtype=np.int64)
    if not length_bucket_width:
        if batch_type == "tokens":
            raise ValueError(
                "batch_type 'tokens' with the opennmt scheme requires length_bucket_width >= 1"
            )
        return [order[i:i + batch_size] for i in range(0, len(order), batch_size)]
    buckets = opennmt_bucket(source_lengths[order], target_lengths[order], length_bucket_width)
    sizes = {}
    pending = {}
    batches = []
    for example, bucket in zip(order.tolist(), buckets.tolist()):
        members = pending.get(bucket)
        if members is None:
            members = pending[bucket] = []
            if bucket not in sizes:
                sizes[bucket] = opennmt_window_size(
                    bucket, batch_size, batch_type, batch_size_multiple, length_bucket_width,
                    pad_to_bucket_boundary)
        members.append(example)
        if len(members) == sizes[bucket]:
            batches.append(np.array(members, dtype=np.int64))
            del pending[bucket]
    if pad_to_bucket_boundary:
        return batches
    for bucket in sorted(pending):
        batches.append(np.array(pending[bucket], dtype=np.int64))
    return batches


# ---------------------------------------------------------------------------------------------
# The sorted scheme


def snake_order(indices, source_lengths, target_lengths, length_bucket_width=1, primary="target"):
    """`indices` reordered along the snake path (see the module doc); a stable sort."""
    indices = np.asarray(indices, dtype=np.int64)
    width = max(int(length_bucket_width or 1), 1)
    first, second = (target_lengths, source_lengths) if primary == "target" else (
        source_lengths, target_lengths)
    a = -(-first[indices].astype(np.int64) // width)
    b = -(-second[indices].astype(np.int64) // width)
    b = np.where(a % 2 == 1, -b, b)
    return indices[np.lexsort((b, a))]


def cut_tokens_batches(padded_source, padded_target, batch_size, batch_size_multiple=1,
                       batch_overhead=0.15):
    """Splits an ordered list of examples (their padded lengths) into consecutive token batches.

    Minimises sum over batches of n * (max source + max target) + batch_overhead * batch_size,
    under n * max <= batch_size on each side and n % batch_size_multiple == 0 (an example that
    does not fit with batch_size_multiple - 1 others gets a batch of batch_size_multiple alone).
    Returns (list of (start, end), remainder start): examples from the remainder start on
    (fewer than batch_size_multiple) are in no batch.
    """
    ps = np.asarray(padded_source, dtype=np.int64)
    pt = np.asarray(padded_target, dtype=np.int64)
    total = len(ps)
    m = int(batch_size_multiple)
    usable = total - total % m
    if usable == 0:
        return [], 0
    longest = np.maximum(ps, pt)
    penalty = float(batch_overhead) * batch_size
    cost = np.full(usable + 1, np.inf)
    cost[0] = 0.0
    start_of = np.zeros(usable + 1, dtype=np.int64)
    sizes_all = np.arange(m, usable + 1, m, dtype=np.int64)
    longest = longest.tolist()
    for end in range(m, usable + 1, m):
        fit = batch_size // max(longest[end - 1], 1)
        limit = min(end, max(fit, m))
        limit -= limit % m
        # Batches ending at `end` with n = m, 2m, ..., limit examples: running maxima over the
        # examples before `end`, read backwards, sampled every m.
        src_max = np.maximum.accumulate(ps[end - limit:end][::-1])[m - 1::m]
        tgt_max = np.maximum.accumulate(pt[end - limit:end][::-1])[m - 1::m]
        sizes = sizes_all[:limit // m]
        candidates = cost[end - limit:end - m + 1:m][::-1] + sizes * (src_max + tgt_max)
        over = sizes * np.maximum(src_max, tgt_max) > batch_size
        over[0] = False  # a batch of m examples is always allowed
        candidates[over] = np.inf
        best = int(np.argmin(candidates))
        cost[end] = candidates[best] + penalty
        start_of[end] = end - (best + 1) * m
    ranges = []
    end = usable
    while end > 0:
        ranges.append((int(start_of[end]), end))
        end = int(start_of[end])
    ranges.reverse()
    return ranges, usable


class SortedPlanner:
    """Plans the batches of successive epochs with the sorted scheme (see the module doc).

    Stateful across epochs only through the carried remainder; `plan_epoch(order, final)` takes
    an epoch's example order (already shuffled or not) and returns its batches, and the
    examples dropped at the end when `final` (the last epoch of a single pass).
    """

    def __init__(self, source_lengths, target_lengths, *, batch_size, batch_type="tokens",
                 batch_size_multiple=1, length_bucket_width=1, sample_buffer_size=None,
                 pad_to_multiple=1, pad_to_bucket_boundary=False, batch_overhead=0.15,
                 primary=None):
        validate_batching(batch_size, batch_type, batch_size_multiple)
        self.source_lengths = np.asarray(source_lengths, dtype=np.int64)
        self.target_lengths = np.asarray(target_lengths, dtype=np.int64)
        # (budgets count the padding: a batch's padded length is the largest of its examples')
        self.padded_source, self.padded_target = padded_lengths(
            self.source_lengths, self.target_lengths, pad_to_multiple,
            length_bucket_width if pad_to_bucket_boundary else None)
        self.batch_size = int(batch_size)
        self.batch_type = batch_type
        self.multiple = int(batch_size_multiple)
        self.width = max(int(length_bucket_width or 1), 1)
        self.window = sample_buffer_size if sample_buffer_size and sample_buffer_size > 0 else None
        self.batch_overhead = batch_overhead
        if primary is None:
            primary = "target" if self.target_lengths.sum() >= self.source_lengths.sum() else "source"
        self.primary = primary
        self.carry = np.zeros(0, dtype=np.int64)
        self.oversized_batches = 0

    def plan_epoch(self, order, rng=None, final=True):
        """Batches of one epoch. `rng` (a numpy Generator) shuffles the batch order of each
        window; None keeps the sorted order. Returns (batches, dropped example indices)."""
        order = np.asarray(order, dtype=np.int64)
        window = self.window or max(len(order), 1)
        batches = []
        for start in range(0, len(order), window):
            members = np.concatenate([self.carry, order[start:start + window]])
            last = start + window >= len(order)
            window_batches, self.carry = self._plan_window(members, carry_partial=not (last and final))
            if rng is not None:
                window_batches = [window_batches[i] for i in rng.permutation(len(window_batches))]
            batches.extend(window_batches)
        dropped = np.zeros(0, dtype=np.int64)
        if final:
            dropped, self.carry = self.carry, np.zeros(0, dtype=np.int64)
        return batches, dropped

    def _plan_window(self, members, carry_partial):
        """Batches of one window, and the examples carried out of it: the last ones of the
        window as given (random ones when the order is shuffled), taken before sorting."""
        m = self.multiple
        if self.batch_type == "examples":
            size = max(self.batch_size - self.batch_size % m, m)
            keep = len(members) - len(members) % (size if carry_partial else m)
            ordered = snake_order(members[:keep], self.source_lengths, self.target_lengths,
                                  self.width, self.primary)
            return [ordered[i:i + size] for i in range(0, keep, size)], members[keep:]
        keep = len(members) - len(members) % m
        members, carried = members[:keep], members[keep:]
        ordered = snake_order(members, self.source_lengths, self.target_lengths, self.width,
                              self.primary)
        ranges, usable = cut_tokens_batches(
            self.padded_source[ordered], self.padded_target[ordered], self.batch_size, m,
            self.batch_overhead)
        batches = [ordered[a:b] for a, b in ranges]
        for batch in batches:
            longest = max(self.padded_source[batch].max(), self.padded_target[batch].max())
            if len(batch) * longest > self.batch_size:
                if not self.oversized_batches:
                    logger.warning(
                        "an example of %d tokens does not fit %d times in batch_size %d: it "
                        "forms a batch of %d examples over the budget (counted in "
                        "oversized_batches)", longest, m, self.batch_size, len(batch))
                self.oversized_batches += 1
        assert usable == len(ordered)
        return batches, carried


# ---------------------------------------------------------------------------------------------
# Bounded shapes (train.jit_compile with the sorted scheme)

# The grid of the bounded-shape plan when train.pad_to_multiple is 1: on the benchmark corpus,
# 16 shapes chosen on a grid of 4 leave 15.7 % padding, of 8 25.2 % (of 2 13.5 %, but the
# choice takes seconds: it is quadratic in the occupied cells).
XLA_LENGTH_MULTIPLE = 4


def shape_batch_size(longest, batch_size, batch_type, batch_size_multiple=1):
    """Examples per batch of a shape whose longer side is `longest` (padded): batch_size // longest
    for tokens (batch_size for examples), rounded down to the multiple, at least the multiple."""
    size = batch_size // max(int(longest), 1) if batch_type == "tokens" else batch_size
    size -= size % batch_size_multiple
    return max(size, batch_size_multiple)


class ShapePlan:
    """The fixed batch shapes of a corpus under XLA: at most `max_shapes` (source length, target
    length) pairs, each with its own number of examples, so that every training batch has one of
    at most `max_shapes` shapes [batch, source time] / [batch, target time].

    Each side's padded length (`padded_lengths` with `pad_to_multiple`) is rounded up to
    `length_multiple`, which puts every example in a cell of the (source, target) grid. The
    shapes are chosen among the occupied cells, greedily: starting from all of them (and the
    corner (longest source, longest target), which holds every example and is always kept), the
    shape whose removal adds the fewest padded tokens is removed until `max_shapes` remain;
    each example then takes the shape that dominates its cell with the fewest tokens
    (source + target). A shape's batch size is `shape_batch_size` of its longer side, so every
    batch holds at most batch_size tokens on each side, padding included (except a shape whose
    longer side alone exceeds batch_size / batch_size_multiple: logged, as the sorted scheme).

    Arrays: `shapes` [K, 2] (source, target) lengths, `sizes` [K] examples per batch,
    `example_shape` [examples] the shape of each example, `counts` [K] its examples.
    With more than MAX_CELLS occupied cells (very long sentences), the grid is doubled until
    they fit (`length_multiple` holds the grid used).
    """

    MAX_CELLS = 800

    def __init__(self, source_lengths, target_lengths, *, batch_size, batch_type="tokens",
                 batch_size_multiple=1, max_shapes=16, length_multiple=XLA_LENGTH_MULTIPLE,
                 pad_to_multiple=1):
        validate_batching(batch_size, batch_type, batch_size_multiple)
        if max_shapes < 1:
            raise ValueError(f"max_shapes must be >= 1, got {max_shapes}")
        lengths = np.stack(padded_lengths(np.asarray(source_lengths, np.int64),
                                          np.asarray(target_lengths, np.int64), pad_to_multiple), 1)
        while True:  # (the choice is quadratic in the cells: a coarser grid past MAX_CELLS)
            rounded = round_up(np.maximum(lengths, 1), length_multiple)
            cells, cell_of = np.unique(rounded, axis=0, return_inverse=True)
            if len(cells) <= self.MAX_CELLS:
                break
            length_multiple *= 2
        self.length_multiple = length_multiple
        source, target = rounded[:, 0], rounded[:, 1]
        cell_of = cell_of.reshape(-1)
        counts = np.bincount(cell_of, minlength=len(cells)).astype(np.float64)
        corner = np.array([[source.max(initial=length_multiple), target.max(initial=length_multiple)]])
        candidates = np.unique(np.concatenate([cells, corner]), axis=0)
        chosen = self._choose(cells, counts, candidates, max_shapes)
        self.shapes = candidates[chosen]
        tokens = np.where(self._dominates(cells, self.shapes), self.shapes.sum(1)[None, :], np.inf)
        self.example_shape = np.argmin(tokens, axis=1)[cell_of]
        self.counts = np.bincount(self.example_shape, minlength=len(self.shapes))
        self.sizes = np.array([shape_batch_size(max(s, t), batch_size, batch_type,
                                                batch_size_multiple) for s, t in self.shapes])
        self.batch_size = int(batch_size)
        self.batch_type = batch_type
        self.source_lengths = np.asarray(source_lengths, np.int64)
        self.target_lengths = np.asarray(target_lengths, np.int64)

    @staticmethod
    def _dominates(cells, shapes):
        """[cells, shapes] bool: the shape holds the cell (both of its lengths)."""
        return ((shapes[None, :, 0] >= cells[:, None, 0]) & (shapes[None, :, 1] >= cells[:, None, 1]))

    @classmethod
    def _choose(cls, cells, counts, candidates, max_shapes):
        """Indices into `candidates` of the shapes kept (see the class doc)."""
        cost = np.where(cls._dominates(cells, candidates),
                        counts[:, None] * candidates.sum(1)[None, :], np.inf)
        active = np.ones(len(candidates), bool)
        corner = int(np.argmax((candidates == candidates.max(0)).all(1)))
        while active.sum() > max_shapes:
            masked = np.where(active[None, :], cost, np.inf)
            rows = np.arange(len(cells))
            best = np.argmin(masked, axis=1)
            first = masked[rows, best]
            masked[rows, best] = np.inf
            extra = masked.min(axis=1) - first
            removal = np.bincount(best, weights=np.where(np.isfinite(extra), extra, 0.0),
                                  minlength=len(candidates))
            removal[~active] = np.inf
            removal[corner] = np.inf
            active[int(np.argmin(removal))] = False
        return np.flatnonzero(active)

    def padded_shape(self, indices):
        """(source, target) padded lengths of a batch of examples of one shape."""
        shape = self.shapes[self.example_shape[indices[0]]]
        return int(shape[0]), int(shape[1])

    def padding_fraction(self):
        """Padded tokens that are not real, over both sides of every example (full batches)."""
        real = self.source_lengths.sum() + self.target_lengths.sum()
        return 1.0 - real / float(self.shapes[self.example_shape].sum())

    def describe(self):
        return ", ".join(f"{s}x{t}:{n}" for (s, t), n in zip(self.shapes.tolist(),
                                                             self.sizes.tolist()))


class ShapePlanner:
    """Plans the batches of successive epochs on a `ShapePlan` (same interface as
    `SortedPlanner`): within a window of `sample_buffer_size` examples (the whole data by
    default), the examples of each shape, in the window's (shuffled) order, are cut into batches
    of that shape's size; the batches of the window are then shuffled. The last examples of a
    shape that do not fill a batch are carried into the next window (and the next epoch), so a
    shape's batches always have its size; at the end of a single pass they form one smaller batch
    per shape instead (nothing is dropped; those batches are the only shapes outside the plan).
    """

    def __init__(self, plan, sample_buffer_size=None):
        self.plan = plan
        self.window = sample_buffer_size if sample_buffer_size and sample_buffer_size > 0 else None
        self.carry = np.zeros(0, dtype=np.int64)
        self.oversized_batches = 0

    # SortedPlanner's loop over windows (its carry flushed at the end of a final pass, so that
    # nothing is dropped: every example fits its shape's batch).
    plan_epoch = SortedPlanner.plan_epoch

    def _plan_window(self, members, carry_partial):
        flush = not carry_partial
        plan = self.plan
        shape_of = plan.example_shape[members]
        batches, carried = [], []
        for shape in np.unique(shape_of):
            examples = members[shape_of == shape]  # (stable: the window's order)
            size = int(plan.sizes[shape])
            full = len(examples) - len(examples) % size
            batches.extend(examples[i:i + size] for i in range(0, full, size))
            if full < len(examples):
                if flush:
                    batches.append(examples[full:])
                else:
                    carried.append(examples[full:])
            if full and size * int(plan.shapes[shape].max()) > plan.batch_size \
                    and plan.batch_type == "tokens":
                if not self.oversized_batches:
                    logger.warning("XLA shape %s holds %d examples, over batch_size %d (the "
                                   "smallest batch_size_multiple)", plan.shapes[shape].tolist(),
                                   size, plan.batch_size)
                self.oversized_batches += full // size
        carry = np.concatenate(carried) if carried else np.zeros(0, dtype=np.int64)
        return batches, carry
