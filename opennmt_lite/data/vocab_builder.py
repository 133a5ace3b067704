"""Building vocabularies (and SentencePiece models) from training files, like `onmt-build-vocab`.

Config-free: every input is an explicit argument. Two kinds:

* `build_vocab`: one SentencePiece model per side trained on the raw training text, and its
  OpenNMT-tf vocabulary (see `opennmt_lite.data.tokenizers.train_sentencepiece` for the exact
  conversion and the meaning of the sizes).
* `build_word_vocab`: counts the tokens of pre-tokenized files (`onmt-build-vocab` without
  `--sentencepiece`).
"""

import collections
import logging
import os

from opennmt_lite.data import fingerprints
from opennmt_lite.data.text import read_lines
from opennmt_lite.data.tokenizers import SpaceTokenizer, train_sentencepiece
from opennmt_lite.data.vocab import SPECIAL_TOKENS, Vocabulary
from opennmt_lite.files import Staging

logger = logging.getLogger("opennmt_lite")


def build_vocab(
    *,
    features_file,
    labels_file,
    source_model_prefix,
    target_model_prefix,
    source_vocabulary,
    target_vocabulary,
    source_size,
    target_size,
    model_type="unigram",
    character_coverage=1.0,
    seed=1234,
    num_threads=2,
):
    """Trains a source and a target SentencePiece model (`<prefix>.model`, `<prefix>.vocab`) and
    writes their OpenNMT-tf vocabularies to `source_vocabulary` / `target_vocabulary`.

    `features_file` / `labels_file`: a path or a list of paths (raw text). `source_size` /
    `target_size`: SentencePiece vocab_size of each model (the vocabulary files get size + 2
    lines). Parent directories are created. Returns a dict of the written paths and sizes.

    The four files (and the vocabularies' fingerprints) are written under temporary names and
    renamed together at the end (see `fingerprints.commit`): an interrupted rebuild leaves either
    the previous files or a set that `build.assets` refuses, never a model and a vocabulary that
    silently disagree.
    """
    result = {}
    staging = Staging()
    for side, files, prefix, vocab_path, size in (
        ("source", features_file, source_model_prefix, source_vocabulary, source_size),
        ("target", labels_file, target_model_prefix, target_vocabulary, target_size),
    ):
        model_path, vocabulary = train_sentencepiece(
            files,
            prefix,
            size,
            model_type=model_type,
            character_coverage=character_coverage,
            seed=seed,
            num_threads=num_threads,
            vocabulary_path=vocab_path,
            staging=staging,
        )
        logger.info(
            "%s: SentencePiece model %s (%d pieces), vocabulary %s (%d lines, %d ids with <unk>)",
            side, model_path, size, vocab_path, vocabulary.size, vocabulary.num_ids,
        )
        result[f"{side}_model"] = model_path
        result[f"{side}_vocabulary"] = os.fspath(vocab_path)
        result[f"{side}_vocabulary_size"] = vocabulary.size
    fingerprints.commit(staging, [source_vocabulary, target_vocabulary])
    return result


def count_tokens(files, tokenizer=None):
    """Token frequencies over files, in first-seen order (a Counter keeps insertion order)."""
    if isinstance(files, (str, os.PathLike)):
        files = [files]
    tokenizer = tokenizer or SpaceTokenizer()
    counts = collections.Counter()
    for path in files:
        for tokens in tokenizer.tokenize_batch(read_lines(path)):
            counts.update(tokens)
    return counts


def word_vocabulary_tokens(counts, size=0, min_frequency=1, size_multiple=1):
    """The vocabulary lines from token frequencies, as `onmt-build-vocab` orders them.

    The special tokens first, then tokens by decreasing frequency, ties in first-seen order
    (a stable sort of the first-seen order); tokens seen fewer than `min_frequency` times are left
    out; `size` > 0 caps the number of lines, special tokens included; `size_multiple` > 1 appends
    filler tokens `averyunlikelytoken<i>` until lines + 1 (the `<unk>` id) is a multiple of it.
    Occurrences of the special tokens themselves in the data are not counted as new tokens.
    """
    ranked = sorted(
        ((token, count) for token, count in counts.items() if token not in SPECIAL_TOKENS),
        key=lambda item: -item[1],
    )
    tokens = list(SPECIAL_TOKENS) + [t for t, c in ranked if c >= min_frequency]
    if size and size > 0:
        tokens = tokens[:size]
    if size_multiple > 1:
        present = set(tokens)
        index = 0
        while (len(tokens) + 1) % size_multiple != 0:
            filler = f"averyunlikelytoken{index}"
            index += 1
            if filler not in present:
                tokens.append(filler)
    return tokens


def build_word_vocab(files, path, size=0, min_frequency=1, size_multiple=1, tokenizer=None,
                     staging=None, counts=None):
    """Writes the vocabulary of `files` tokenized by `tokenizer` (default: pre-tokenized text
    split on ASCII whitespace, like the data pipeline; `onmt-build-vocab` splits with Python's
    str.split, which also splits on other Unicode spaces) to `path`, replaced whole; with
    `staging` (an `opennmt_lite.files.Staging`) under a temporary name the caller commits.
    `counts` (from count_tokens) replaces the counting of `files` (then only named in the log).
    Returns the Vocabulary."""
    if counts is None:
        counts = count_tokens(files, tokenizer=tokenizer)
    vocabulary = Vocabulary(
        word_vocabulary_tokens(counts, size=size, min_frequency=min_frequency,
                               size_multiple=size_multiple),
        path=os.fspath(path),
    )
    vocabulary.save(staging.path(path) if staging is not None else path)
    logger.info(
        "word vocabulary %s: %d lines (%d distinct tokens in %s)",
        path, vocabulary.size, len(counts), ", ".join(map(os.fspath, _as_list(files))),
    )
    return vocabulary


def _as_list(files):
    return [files] if isinstance(files, (str, os.PathLike)) else list(files)
