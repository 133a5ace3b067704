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


# -- test-only views of the data package's objects (the package itself never needs them) ------


def padding_stats(batches, source_lengths, target_lengths, pad_to_multiple=1):
    """Token counts of batches (index arrays): real tokens, padded tokens (source + target,
    target lengths as given, i.e. pieces + 1), the padding ratio padding / padded tokens,
    batches, examples."""
    from opennmt_lite.data.batching import round_up

    real = padded = examples = 0
    max_tokens = 0
    for batch in batches:
        s = source_lengths[batch]
        t = target_lengths[batch]
        ps = int(round_up(int(s.max()), pad_to_multiple)) if len(batch) else 0
        pt = int(round_up(int(t.max()), pad_to_multiple)) if len(batch) else 0
        real += int(s.sum()) + int(t.sum())
        padded += len(batch) * (ps + pt)
        examples += len(batch)
        max_tokens = max(max_tokens, len(batch) * ps, len(batch) * pt)
    return {
        "batches": len(batches),
        "examples": examples,
        "real_tokens": real,
        "padded_tokens": padded,
        "padding_tokens": padded - real,
        "padding_ratio": (padded - real) / padded if padded else 0.0,
        "max_side_tokens": max_tokens,
    }


def epoch_padding_stats(training_input, epoch=0):
    """padding_stats of one epoch's plan of a TrainingInput."""
    corpus = training_input.corpus
    return padding_stats(training_input.epoch_batches(epoch), corpus.source_lengths,
                         corpus.target_lengths, training_input.pad_to_multiple)


def restore_order(indices, values):
    """`values` (one per example, in batch order) put back in file order by their `indices`.
    Every index from 0 to len - 1 must appear once."""
    import numpy as np

    indices = np.asarray(indices, dtype=np.int64).reshape(-1)
    values = list(values)
    if len(indices) != len(values):
        raise ValueError(f"{len(indices)} indices for {len(values)} values")
    if len(indices) and not np.array_equal(np.sort(indices), np.arange(len(indices))):
        raise ValueError("indices must be a permutation of 0..n-1")
    result = [None] * len(values)
    for index, value in zip(indices.tolist(), values):
        result[index] = value
    return result


def evaluation_dataset(evaluation_input):
    """The batches of an EvaluationInput as a tf.data.Dataset (with `index` [B] int64)."""
    import tensorflow as tf

    from opennmt_lite.data.pipeline import batch_signature

    dataset = tf.data.Dataset.from_generator(
        evaluation_input.numpy_batches, output_signature=batch_signature(with_index=True))
    return dataset.prefetch(tf.data.AUTOTUNE)


def inference_dataset(inference_input):
    """The batches of an InferenceInput as a tf.data.Dataset: source_ids [B, T] int32,
    source_length [B] int32, index [B] int64."""
    import tensorflow as tf

    signature = {
        "source_ids": tf.TensorSpec([None, None], tf.int32),
        "source_length": tf.TensorSpec([None], tf.int32),
        "index": tf.TensorSpec([None], tf.int64),
    }
    dataset = tf.data.Dataset.from_generator(inference_input.numpy_batches,
                                             output_signature=signature)
    return dataset.prefetch(tf.data.AUTOTUNE)


def ragged_ids(sequences):
    """A RaggedIds of a list of id sequences."""
    import numpy as np

    from opennmt_lite.data import RaggedIds

    lengths = np.fromiter((len(s) for s in sequences), dtype=np.int64, count=len(sequences))
    offsets = np.zeros(len(sequences) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    flat = np.zeros(int(offsets[-1]), dtype=np.int32)
    for sequence, start in zip(sequences, offsets[:-1].tolist()):
        flat[start:start + len(sequence)] = sequence
    return RaggedIds(flat, offsets)
