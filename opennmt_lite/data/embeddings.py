"""Pretrained word vectors (`data.source_embedding` / `data.target_embedding`), read as
OpenNMT-tf 2.32's `load_pretrained_embeddings` reads them.

The file is text, one `word v1 ... vN` per line (fields split on whitespace), after a header line
`count N` unless `with_header: false`. Each row of the embedding table (vocabulary line i, then
the out-of-vocabulary row) starts from a draw of N(0, 1), as in OpenNMT-tf; then every file word
found in the vocabulary gives its vector to the rows of that word (a later line of the same word
wins). With `case_insensitive` (the default) the vocabulary's tokens are lowercased before
matching and the file's words are taken as written: OpenNMT-tf assumes vectors trained on
lowercase text, so "the" in the file fills the rows of "the", "The" and "THE", and a capitalised
word of the file matches nothing.

Where OpenNMT-tf would fail deep in TensorFlow or NumPy, this names the file and the line: a
vector whose size is not the model's embedding size (model.num_units), a value that is not a
finite number, a header that is not `count N`, a file without vectors. Blank lines are skipped.
Only the vectors of vocabulary words are parsed (a big file is mostly words the vocabulary lacks).
"""

import logging

import numpy as np

from opennmt_lite.data.text import DataError, parse_number
from opennmt_lite.errors import MissingFileError, NotAFileError

logger = logging.getLogger("opennmt_lite")


class EmbeddingFileError(DataError):
    """A pretrained embedding file that cannot fill the model's table."""


def _lines(path, key):
    """(line number, text) of the file, decoded line by line (the error names the line)."""
    try:
        stream = open(path, "rb")  # noqa: SIM115 (closed below; open errors reported first)
    except FileNotFoundError:
        raise MissingFileError(f"{key}.path: embedding file not found: {path}") from None
    except IsADirectoryError:
        raise NotAFileError(f"{key}.path: {path} is a directory, not an embedding file") from None
    with stream:
        for number, raw in enumerate(stream, start=1):
            try:
                yield number, raw.decode("utf-8")
            except UnicodeDecodeError as error:
                raise EmbeddingFileError(f"{key}: {path}, line {number}: invalid UTF-8 "
                                         f"({error.reason})") from None


def _is_header(fields):
    return len(fields) == 2 and all(field.isdigit() for field in fields)


def load_pretrained_embeddings(path, vocabulary, embedding_size, *, with_header=True,
                               case_insensitive=True, rng=None, key="data.source_embedding"):
    """(table float32 [vocabulary.num_ids, embedding_size], number of rows taken from the file).

    `vocabulary`: a `Vocabulary` (its lines are rows 0..size-1; row `size` is the
    out-of-vocabulary id). `rng`: the NumPy Generator of the N(0, 1) rows. `key` names the
    config section in the errors. Raises EmbeddingFileError (or MissingFileError)."""
    rng = np.random.default_rng() if rng is None else rng
    rows = {}  # file word -> vocabulary rows it fills
    for index, token in enumerate(vocabulary.tokens):
        rows.setdefault(token.lower() if case_insensitive else token, []).append(index)
    table = rng.normal(size=(vocabulary.num_ids, embedding_size))
    filled = np.zeros(vocabulary.num_ids, dtype=bool)
    vectors = 0
    size_hint = f"the model's embedding size (model.num_units) is {embedding_size}"
    for number, line in _lines(path, key):
        fields = line.split()
        if not fields:
            continue
        where = f"{key}: {path}, line {number}"
        if number == 1 and with_header:
            if not _is_header(fields):
                raise EmbeddingFileError(
                    f"{where}: not a header line 'count size' ({key}.with_header is true, "
                    "OpenNMT-tf's default; set it to false for a file without one)")
            if int(fields[1]) != embedding_size:
                raise EmbeddingFileError(f"{where}: the header gives vectors of {fields[1]} "
                                         f"values, but {size_hint}")
            continue
        if len(fields) - 1 != embedding_size:
            hint = ""
            if number == 1 and _is_header(fields):
                hint = f" (a header line? set {key}.with_header: true)"
            raise EmbeddingFileError(f"{where}: a vector of {len(fields) - 1} values, but "
                                     f"{size_hint}{hint}")
        vectors += 1
        indices = rows.get(fields[0])
        if indices is None:
            continue
        try:
            vector = np.array(fields[1:], dtype=np.float64)
        except ValueError:
            bad = next(f for f in fields[1:] if parse_number(f) is None)
            raise EmbeddingFileError(f"{where}: {bad!r} is not a number") from None
        if not np.isfinite(vector).all():
            raise EmbeddingFileError(f"{where}: the vector of {fields[0]!r} holds "
                                     f"{vector[~np.isfinite(vector)][0]} (values must be finite)")
        table[indices] = vector
        filled[indices] = True
    if not vectors:
        raise EmbeddingFileError(f"{key}: {path} holds no vectors")
    return table.astype(np.float32), int(filled.sum())
