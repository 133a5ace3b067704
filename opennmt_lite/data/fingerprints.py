"""Which SentencePiece model a vocabulary was built from.

`build-vocab` writes `<vocabulary>.fingerprint` beside each vocabulary it derives from a
SentencePiece model: a small JSON file holding the SHA-256 of the model file. The commands that
load assets (`build.assets`) check it, so that a vocabulary is never used with a model it does not
belong to (a rebuild killed half-way, one side rebuilt and not the other, a model replaced by
hand): the ids would silently mean other pieces. A vocabulary without a fingerprint (OpenNMT-tf's,
hand-made) is accepted as it is.

While build-vocab replaces files, each fingerprint first says "incomplete" (see
`commands/build_vocab.py`): a run killed at any point of the renames leaves a state that is
refused, whatever the files held before.
"""

import hashlib
import json
import os

from opennmt_lite.data.vocab import VocabularyError

SUFFIX = ".fingerprint"
FORMAT = 1


def fingerprint_path(vocabulary_path):
    return os.fspath(vocabulary_path) + SUFFIX


def file_hash(path):
    digest = hashlib.sha256()
    with open(path, "rb") as stream:
        for block in iter(lambda: stream.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def fingerprint(model_path):
    """The fingerprint text of a vocabulary built from the SentencePiece model `model_path`."""
    return json.dumps({"format": FORMAT, "sentencepiece_model": os.path.basename(model_path),
                       "sha256": file_hash(model_path)}) + "\n"


INCOMPLETE = json.dumps({"format": FORMAT, "incomplete": True}) + "\n"


def check(vocabulary_path, model_path, name="vocabulary", rebuild="python run.py build-vocab --config ..."):
    """Raises VocabularyError unless the vocabulary `vocabulary_path` belongs to the SentencePiece
    model `model_path` (or has no fingerprint). `name` is its config key in messages."""
    path = fingerprint_path(vocabulary_path)
    if not os.path.exists(path):
        return
    advice = f"rebuild the vocabularies and SentencePiece models: {rebuild}"
    try:
        with open(path, encoding="utf-8") as stream:
            recorded = json.load(stream)
        incomplete = bool(recorded.get("incomplete"))
        expected = None if incomplete else str(recorded["sha256"])
    except (OSError, ValueError, KeyError, AttributeError, TypeError):
        raise VocabularyError(f"{name}: the fingerprint {path} is unreadable; {advice}") from None
    if incomplete:
        raise VocabularyError(
            f"{name}: {vocabulary_path} comes from a build-vocab run that did not finish (the "
            f"vocabularies and models may not match); {advice}")
    if file_hash(model_path) != expected:
        raise VocabularyError(
            f"{name}: {vocabulary_path} was not built from the SentencePiece model {model_path} "
            f"(the model changed since, e.g. an interrupted or partial rebuild); {advice}")


def commit(staging, vocabulary_paths):
    """Renames the staged files (`opennmt_lite.files.Staging`: models, vocabularies, then their
    fingerprints) onto their real names, after marking the fingerprint of each vocabulary in
    `vocabulary_paths` "incomplete": until the last rename, the set is refused as a whole."""
    from opennmt_lite.files import atomic_write

    for path in dict.fromkeys(os.fspath(p) for p in vocabulary_paths):
        # (another temporary name than the staged fingerprint's, which must survive this)
        with atomic_write(fingerprint_path(path), suffix=".marking", encoding="utf-8") as stream:
            stream.write(INCOMPLETE)
    staging.commit()
