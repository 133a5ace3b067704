"""Vocabularies in OpenNMT-tf's file format.

A vocabulary file holds one token per line; line i (0-based) is id i. Lines 1-3 are the special
tokens `<blank>` (padding, id 0), `<s>` (start of sequence, id 1) and `</s>` (end of sequence,
id 2). `<unk>` is not written in the file: every token that is not in the file maps to one extra
out-of-vocabulary id equal to the number of lines, so an embedding table needs lines + 1 rows.

OpenNMT-tf itself loads any file as is (it only warns about and skips duplicates, which then
break its lookup table); it relies on `onmt-build-vocab` having put the special tokens first.
Here a file that does not start with them, repeats a token or holds an empty line is rejected
with an error naming the file and the line.
"""

import os

import numpy as np

from opennmt_lite.data.text import read_lines
from opennmt_lite.errors import UserError

PAD_TOKEN = "<blank>"
BOS_TOKEN = "<s>"
EOS_TOKEN = "</s>"
UNK_TOKEN = "<unk>"
PAD_ID = 0
BOS_ID = 1
EOS_ID = 2
SPECIAL_TOKENS = (PAD_TOKEN, BOS_TOKEN, EOS_TOKEN)


class VocabularyError(UserError, ValueError):
    """An invalid vocabulary file or token list."""


class Vocabulary:
    """Token <-> id maps of one vocabulary file, plus the out-of-vocabulary id."""

    def __init__(self, tokens, path=None):
        """`tokens`: the file's lines in order (special tokens included). `path` only names the
        source in error messages."""
        self.path = path
        tokens = list(tokens)
        where = f"vocabulary {path}" if path is not None else "vocabulary"
        head = tokens[: len(SPECIAL_TOKENS)]
        if tuple(head) != SPECIAL_TOKENS:
            found = ", ".join(f"line {i + 1}: {t!r}" for i, t in enumerate(head)) or "no lines"
            hint = ""
            if head and isinstance(head[0], str) and "\t" in head[0]:
                hint = (
                    " (this looks like a SentencePiece .vocab file, 'piece<TAB>score'; convert it "
                    "with opennmt_lite.data.vocab_builder)"
                )
            raise VocabularyError(
                f"{where}: lines 1-3 must be the special tokens {PAD_TOKEN!r} (padding), "
                f"{BOS_TOKEN!r} (start) and {EOS_TOKEN!r} (end), in this order; found {found}"
                f"{hint}. Build it with opennmt_lite.data.vocab_builder (or onmt-build-vocab), or "
                "prepend these three lines"
            )
        self._token_to_id = {}
        for index, token in enumerate(tokens):
            if not isinstance(token, str):
                raise VocabularyError(f"{where}, line {index + 1}: token {token!r} is not a string")
            if token == "":
                raise VocabularyError(
                    f"{where}, line {index + 1}: empty line (an OpenNMT-tf vocabulary cannot hold "
                    "an empty token; remove the line)"
                )
            if "\n" in token:
                raise VocabularyError(f"{where}, line {index + 1}: token {token!r} contains a newline")
            previous = self._token_to_id.get(token)
            if previous is not None:
                raise VocabularyError(
                    f"{where}: duplicate token {token!r} on line {previous + 1} and line {index + 1}"
                )
            self._token_to_id[token] = index
        self._tokens = tokens

    @classmethod
    def from_file(cls, path):
        """Loads a vocabulary file (UTF-8, `\\n` or `\\r\\n` line ends)."""
        path = os.fspath(path)
        return cls(read_lines(path, "vocabulary", VocabularyError), path=path)

    @property
    def tokens(self):
        """The tokens in id order (a copy)."""
        return list(self._tokens)

    @property
    def size(self):
        """The number of lines (special tokens included, the out-of-vocabulary id excluded)."""
        return len(self._tokens)

    def __len__(self):
        return len(self._tokens)

    @property
    def oov_id(self):
        """The id of every token not in the file (= size)."""
        return len(self._tokens)

    @property
    def num_ids(self):
        """Number of distinct ids (size + 1): rows of an embedding or output layer."""
        return len(self._tokens) + 1

    def __contains__(self, token):
        return token in self._token_to_id

    def id(self, token):
        """The id of one token (oov_id when unknown)."""
        return self._token_to_id.get(token, len(self._tokens))

    def lookup(self, tokens):
        """Ids of a sequence of tokens as an int32 array; unknown tokens get oov_id."""
        get = self._token_to_id.get
        oov = len(self._tokens)
        return np.fromiter((get(token, oov) for token in tokens), dtype=np.int32, count=len(tokens))

    def to_tokens(self, ids):
        """Tokens of a sequence of ids; oov_id gives `<unk>`. Other ids out of range raise."""
        tokens = []
        oov = len(self._tokens)
        for value in np.asarray(ids).reshape(-1).tolist():
            if 0 <= value < oov:
                tokens.append(self._tokens[value])
            elif value == oov:
                tokens.append(UNK_TOKEN)
            else:
                where = f"vocabulary {self.path}" if self.path else "vocabulary"
                raise IndexError(f"id {value} out of range for {where} (ids 0..{oov})")
        return tokens

    def save(self, path):
        """Writes the file: one token per line, `\\n` line ends, UTF-8. The file is replaced
        whole (written beside, then renamed): never left half-written."""
        from opennmt_lite.files import atomic_write

        path = os.fspath(path)
        directory = os.path.dirname(path)
        if directory:
            os.makedirs(directory, exist_ok=True)
        with atomic_write(path, encoding="utf-8", newline="\n") as stream:
            for token in self._tokens:
                stream.write(token)
                stream.write("\n")

    def __eq__(self, other):
        return isinstance(other, Vocabulary) and self._tokens == other._tokens

    def __repr__(self):
        return f"Vocabulary(size={self.size}, path={self.path!r})"


def as_vocabulary(vocabulary):
    """A Vocabulary from a Vocabulary or a path."""
    if isinstance(vocabulary, Vocabulary):
        return vocabulary
    if vocabulary is None:
        raise ValueError("a vocabulary (file path or Vocabulary) is required")
    return Vocabulary.from_file(vocabulary)
