"""Shared helpers of the data tests: small SentencePiece models trained once per process."""

import atexit
import functools
import os
import shutil
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(REPO, "data")
FIXTURE = os.path.join(REPO, "tests", "fixtures", "onmt_tf_relative")
TRAIN_EN = os.path.join(DATA, "train.en")
TRAIN_DE = os.path.join(DATA, "train.de")
VALID_EN = os.path.join(DATA, "valid.en")
VALID_DE = os.path.join(DATA, "valid.de")
TEST_EN = os.path.join(DATA, "test.en")
TEST_DE = os.path.join(DATA, "test.de")

SP_SIZE = 1000


@functools.lru_cache(maxsize=None)
def scratch_dir():
    path = tempfile.mkdtemp(prefix="opennmt_lite_data_tests_")
    atexit.register(shutil.rmtree, path, True)
    return path


@functools.lru_cache(maxsize=None)
def sp_models():
    """{"source_model", "target_model", "source_vocabulary", "target_vocabulary"} of 1000-piece
    unigram models trained on data/train.{en,de} (once per test process)."""
    from opennmt_lite.data.vocab_builder import build_vocab

    directory = scratch_dir()
    return build_vocab(
        features_file=TRAIN_EN,
        labels_file=TRAIN_DE,
        source_model_prefix=os.path.join(directory, "sp", "en"),
        target_model_prefix=os.path.join(directory, "sp", "de"),
        source_vocabulary=os.path.join(directory, "vocab", "en.txt"),
        target_vocabulary=os.path.join(directory, "vocab", "de.txt"),
        source_size=SP_SIZE,
        target_size=SP_SIZE,
    )


def sp_data_kwargs():
    """Vocabulary and tokenizer arguments of the data functions for the sp_models()."""
    models = sp_models()
    return dict(
        source_vocabulary=models["source_vocabulary"],
        target_vocabulary=models["target_vocabulary"],
        source_tokenizer={"type": "sentencepiece", "model": models["source_model"]},
        target_tokenizer={"type": "sentencepiece", "model": models["target_model"]},
    )


@functools.lru_cache(maxsize=None)
def train_corpus(maximum_features_length=None, maximum_labels_length=None):
    """The tokenized data/train.* corpus (cached; treat as read-only)."""
    from opennmt_lite.data import load_parallel_corpus

    return load_parallel_corpus(
        TRAIN_EN, TRAIN_DE,
        maximum_features_length=maximum_features_length,
        maximum_labels_length=maximum_labels_length,
        **sp_data_kwargs(),
    )


def write_text(path, text, encoding="utf-8"):
    """Writes `text` (str, or bytes written as is) and returns the path as a string."""
    path = os.fspath(path)
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    data = text if isinstance(text, bytes) else text.encode(encoding)
    with open(path, "wb") as stream:
        stream.write(data)
    return path


def read_lines_plain(path):
    with open(path, encoding="utf-8") as stream:
        return stream.read().split("\n")[:-1]
