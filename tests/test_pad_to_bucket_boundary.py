"""train.pad_to_bucket_boundary: batches padded as OpenNMT-tf 2.32 pads them, value for value
(tests/fixtures/onmt_bucket_boundary: its batches of a small corpus, see the README there)."""

import dataclasses
import json

import numpy as np
import pytest

from conftest import FIXTURES
from opennmt_lite.data import TrainingInput
from opennmt_lite.data.batching import SortedPlanner, padded_lengths
from opennmt_lite.data.vocab import Vocabulary

FIXTURE = FIXTURES / "onmt_bucket_boundary"
with open(FIXTURE / "batches.json", encoding="utf-8") as stream:
    ONMT_BATCHES = json.load(stream)


def training_input(scheme="opennmt", pad_to_bucket_boundary=True, **arguments):
    vocabulary = Vocabulary.from_file(str(FIXTURE / "vocab.txt"))
    return TrainingInput(
        str(FIXTURE / "train.src"), str(FIXTURE / "train.tgt"), source_vocabulary=vocabulary,
        target_vocabulary=vocabulary, scheme=scheme, shuffle=False, repeat=False,
        sample_buffer_size=0, pad_to_bucket_boundary=pad_to_bucket_boundary, **arguments)


@pytest.mark.parametrize("case", sorted(ONMT_BATCHES))
def test_opennmt_scheme_batches_equal_opennmt_tf_s(case):
    """Same examples in the same batches, both sides padded to the bucket boundary with the same
    ids; the buckets left partial at the end dropped as OpenNMT-tf drops them."""
    expected = ONMT_BATCHES[case]["batches"]
    training = training_input(**ONMT_BATCHES[case]["arguments"])
    ours = list(training.numpy_batches())
    assert len(ours) == len(expected)
    width = ONMT_BATCHES[case]["arguments"]["length_bucket_width"]
    for batch, reference in zip(ours, expected):
        for name, values in reference.items():
            np.testing.assert_array_equal(batch[name], np.array(values), err_msg=name)
        assert batch["source_ids"].shape[1] == batch["target_ids_in"].shape[1]
        assert batch["source_ids"].shape[1] % width == 0
    assert training.dropped_remainder == len(training.corpus) - sum(len(b["source_length"]) for b in ours) > 0


def test_without_the_key_batches_keep_their_own_lengths():
    arguments = ONMT_BATCHES["tokens"]["arguments"]
    batches = list(training_input(pad_to_bucket_boundary=False, **arguments).numpy_batches())
    assert any(b["source_ids"].shape[1] != b["target_ids_in"].shape[1] for b in batches)
    assert sum(len(b["source_length"]) for b in batches) == len(training_input(**arguments).corpus)


def test_padded_lengths_rule():
    # ceil(max(source, target) / width) * width on both sides, then pad_to_multiple.
    source, target = padded_lengths(np.array([1, 7, 10, 3]), np.array([2, 3, 11, 3]), 1, 5)
    assert source.tolist() == target.tolist() == [5, 10, 15, 5]
    source, target = padded_lengths(np.array([1, 7]), np.array([2, 3]), 4, 5)
    assert source.tolist() == target.tolist() == [8, 12]
    source, target = padded_lengths(np.array([1, 7]), np.array([2, 3]), 4, None)
    assert source.tolist() == [4, 8] and target.tolist() == [4, 4]


def test_sorted_scheme_pads_both_sides_to_the_width_within_the_budget():
    training = training_input(scheme="sorted", batch_size=120, batch_type="tokens",
                              length_bucket_width=5, maximum_features_length=20)
    batches = list(training.numpy_batches())
    assert sum(len(b["source_length"]) for b in batches) == len(training.corpus)
    for batch in batches:
        time = batch["source_ids"].shape[1]
        longest = max(batch["source_length"].max(), batch["target_length"].max())
        assert time == batch["target_ids_in"].shape[1] == -(-longest // 5) * 5
        assert len(batch["source_length"]) * time <= 120
    planner = SortedPlanner([3, 9], [6, 2], batch_size=100, length_bucket_width=4,
                            pad_to_bucket_boundary=True)
    assert planner.padded_source.tolist() == planner.padded_target.tolist() == [8, 12]


def test_the_config_key_reaches_the_training_input(tmp_path, caplog):
    from opennmt_lite import build
    from opennmt_lite.config import build_config

    arguments = ONMT_BATCHES["tokens"]["arguments"]
    vocabulary = str(FIXTURE / "vocab.txt")
    user = {"model_dir": str(tmp_path), "auto_config": False, "model": {"preset": "TransformerTiny"},
            "data": {"train_features_file": str(FIXTURE / "train.src"),
                     "train_labels_file": str(FIXTURE / "train.tgt"),
                     "source_vocabulary": vocabulary, "target_vocabulary": vocabulary},
            "train": {"batching": "opennmt", "sample_buffer_size": 0, "single_pass": True,
                      "pad_to_bucket_boundary": True,
                      **{k: arguments[k] for k in ("batch_size", "batch_type", "batch_size_multiple",
                                                   "length_bucket_width", "maximum_features_length",
                                                   "maximum_labels_length")}}}
    config = build_config(user)
    (training,) = build.training_inputs(config.data, config.train, build.assets(config.data), None)
    assert training.bucket_width == 5
    ours = [batch["source_ids"].tolist() for batch in training.numpy_batches()]
    assert ours == [batch["source_ids"] for batch in ONMT_BATCHES["tokens"]["batches"]]
    build.warn_surprises(dataclasses.replace(config.train, length_bucket_width=0))
    assert "train.pad_to_bucket_boundary has no effect without train.length_bucket_width" in caplog.text
