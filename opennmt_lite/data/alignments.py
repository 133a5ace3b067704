"""Gold word alignments of the training data (`data.train_alignments`), for guided alignment.

Pharaoh format, one line per training example (line n of the alignment file belongs to line n of
the training files): space-separated `i-j` pairs, source token i aligned with target token j,
0-based indices of the tokens the model sees (after the configured tokenization). An empty line
is an example without alignment.

The gold matrix of an example is OpenNMT-tf's (`opennmt.data.alignment_matrix_from_pharaoh`):
[target tokens, source tokens], 1 at [j, i] for each pair `i-j` (a pair given twice is still 1),
0 elsewhere. It is built against the source the model sees: a column the pairs cannot name (a
padding position, or a sequence-control token such as a source `</s>`) stays 0.

What OpenNMT-tf 2.32 does with bad lines, and what is done here:
- another line count than the training file: OpenNMT-tf raises before training; refused here
  too, naming both files and counts;
- a field that is not `i-j`: OpenNMT-tf crashes in `tf.strings.to_number`; refused here, naming
  the file, the line and the field;
- an index past the sentence (i >= source tokens or j >= target tokens): OpenNMT-tf's assertion
  stops training when the batch holding it is read ("Length mismatch for alignment line ...");
  refused here before training starts, naming the file, the line and both lengths. Lines that
  the training length filter drops are not checked (they are never trained on), whereas
  OpenNMT-tf asserts before filtering.
"""

import re

import numpy as np

from opennmt_lite.data.corpus import _ranges
from opennmt_lite.data.text import DataError, as_file_list, count_lines, read_lines

# One Pharaoh pair; indices of at most 9 digits (anything longer is past any sentence).
_PAIR = re.compile(r"\d{1,9}-\d{1,9}")
_LINE = re.compile(r"(?:\d{1,9}-\d{1,9}(?:\s+\d{1,9}-\d{1,9})*)?")


def _parse(lines, path, first_line):
    """-> (pairs int32 [n, 2] (source, target), counts [len(lines)]); DataError on a bad field."""
    for number, line in enumerate(lines):
        if not _LINE.fullmatch(line.strip()):
            field = next((f for f in line.split() if not _PAIR.fullmatch(f)), line)
            raise DataError(
                f"alignment file {path}, line {first_line + number}: {field[:40]!r} is not an "
                f"`i-j` pair (Pharaoh format: space-separated pairs of 0-based source and target "
                f"token indices, e.g. `0-0 1-2 2-1`)")
    counts = np.fromiter((line.count("-") for line in lines), dtype=np.int64, count=len(lines))
    values = " ".join(lines).replace("-", " ").split()
    pairs = np.array(values, dtype=np.int32).reshape(-1, 2)  # (at most 9 digits each)
    return pairs, counts


class Alignments:
    """The pairs of every line of the alignment files (concatenated in order, as the training
    files are): line l's pairs are `pairs[offsets[l]:offsets[l + 1]]`, each (source, target)."""

    def __init__(self, pairs, offsets, files, file_lines):
        self.pairs = np.asarray(pairs, dtype=np.int32).reshape(-1, 2)
        self.offsets = np.asarray(offsets, dtype=np.int64)
        self.files = files
        self.file_lines = list(file_lines)  # lines in each file

    def __len__(self):
        return len(self.offsets) - 1

    def where(self, line):
        """(file, 1-based line in that file) of 0-based global line `line`."""
        for path, count in zip(self.files, self.file_lines):
            if line < count:
                return path, line + 1
            line -= count
        raise IndexError(line)

    def _rows(self, lines):
        """(example position of each pair, pairs [n, 2]) of the global lines `lines`."""
        starts = self.offsets[lines]
        counts = self.offsets[np.asarray(lines) + 1] - starts
        positions = np.repeat(np.arange(len(lines)), counts)
        return positions, self.pairs[_ranges(starts, counts)]

    def check_lengths(self, lines, source_lengths, target_lengths):
        """DataError for the first of `lines` (global 0-based) with a pair past its example's
        source or target tokens (`source_lengths` / `target_lengths`: tokens, no specials)."""
        positions, pairs = self._rows(np.asarray(lines, dtype=np.int64))
        bad = (pairs[:, 0] >= np.asarray(source_lengths)[positions]) | (
            pairs[:, 1] >= np.asarray(target_lengths)[positions])
        if not bad.any():
            return
        first = np.flatnonzero(bad)[np.argmin(np.asarray(lines)[positions[bad]])]
        example = positions[first]
        path, number = self.where(int(lines[example]))
        source, target = pairs[first]
        raise DataError(
            f"alignment file {path}, line {number}: pair {source}-{target} is past the sentence "
            f"({source_lengths[example]} source and {target_lengths[example]} target tokens after "
            f"tokenization); check that the file is aligned with the training files and indexes "
            f"their tokens (OpenNMT-tf 2.32 stops training on such a line)")

    def matrices(self, lines, target_time, source_time, source_shift=0):
        """Gold matrices float32 [len(lines), target_time, source_time] of global lines `lines`:
        [e, j, i + source_shift] = 1 for each pair i-j of line lines[e] (rows and columns past
        the pairs 0; `source_shift` 1 past a source `<s>` sequence control, whose column, like a
        source `</s>`'s, stays 0)."""
        positions, pairs = self._rows(np.asarray(lines, dtype=np.int64))
        out = np.zeros((len(lines), target_time, source_time), dtype=np.float32)
        out[positions, pairs[:, 1], pairs[:, 0] + source_shift] = 1.0
        return out


def read_alignments(alignment_files, features_files):
    """The `Alignments` of `alignment_files` (a path or a list), one file per training source
    file, each with as many lines. DataError (naming the file and line) otherwise."""
    alignment_files = as_file_list(alignment_files)
    features_files = as_file_list(features_files)
    if len(alignment_files) != len(features_files):
        raise DataError(
            f"data.train_alignments: {len(alignment_files)} alignment file(s) for "
            f"{len(features_files)} training file(s); give one per training file")
    all_pairs, all_counts, file_lines = [], [], []
    for path, features in zip(alignment_files, features_files):
        lines = read_lines(path, kind="alignment")
        expected = count_lines(features)
        if len(lines) != expected:
            raise DataError(
                f"alignment file {path} has {len(lines)} lines but the training file {features} "
                f"has {expected}: one alignment line is needed per training example")
        pairs, counts = _parse(lines, path, first_line=1)
        all_pairs.append(pairs)
        all_counts.append(counts)
        file_lines.append(len(lines))
    counts = np.concatenate(all_counts)
    offsets = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    return Alignments(np.concatenate(all_pairs), offsets, alignment_files, file_lines)
