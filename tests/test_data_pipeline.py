import collections
import os

import numpy as np
import pytest
import sentencepiece as spm
import tensorflow as tf

from data_helpers import (
    FIXTURE,
    TRAIN_DE,
    TRAIN_EN,
    VALID_DE,
    VALID_EN,
    epoch_padding_stats,
    evaluation_dataset,
    inference_dataset,
    padding_stats,
    ragged_ids,
    read_lines_plain,
    restore_order,
    sp_data_kwargs,
    sp_models,
    train_corpus,
    write_text,
)
from opennmt_lite.data import (
    DataError,
    EvaluationInput,
    InferenceInput,
    TrainingInput,
    accum_steps,
    filter_mask,
    load_parallel_corpus,
    plan_opennmt_batches,
    read_lines,
    read_parallel,
)
from opennmt_lite.data.batching import opennmt_bucket, opennmt_shuffle, opennmt_window_size
from opennmt_lite.data.pipeline import pad_parallel_batch
from opennmt_lite.data.vocab import Vocabulary

MAX_LEN = 100
BATCH = 4096


def _lengths(corpus):
    return corpus.source_lengths, corpus.target_lengths


def _real_examples(corpus, indices):
    return [(tuple(corpus.source[i].tolist()), tuple(corpus.target[i].tolist())) for i in indices]


def _batch_examples(batch):
    """(source ids, target ids without specials) of each row of a padded batch."""
    rows = []
    for row in range(batch["source_ids"].shape[0]):
        s = int(batch["source_length"][row])
        t = int(batch["target_length"][row])
        rows.append((tuple(batch["source_ids"][row, :s].tolist()),
                     tuple(batch["target_ids_out"][row, :t - 1].tolist())))
    return rows


def _check_batch_layout(batch):
    """Padding zeros, <s>/</s> placement, shapes of one padded batch (NumPy)."""
    size = batch["source_ids"].shape[0]
    assert batch["source_length"].shape == batch["target_length"].shape == (size,)
    assert batch["target_ids_in"].shape == batch["target_ids_out"].shape
    time_s = batch["source_ids"].shape[1]
    time_t = batch["target_ids_in"].shape[1]
    assert time_s == max(batch["source_length"].max(), 1)
    assert time_t == batch["target_length"].max()
    src_mask = np.arange(time_s)[None] < batch["source_length"][:, None]
    tgt_mask = np.arange(time_t)[None] < batch["target_length"][:, None]
    assert (batch["source_ids"][~src_mask] == 0).all() and (batch["source_ids"][src_mask] > 2).all()
    assert (batch["target_ids_in"][~tgt_mask] == 0).all()
    assert (batch["target_ids_out"][~tgt_mask] == 0).all()
    assert (batch["target_ids_in"][:, 0] == 1).all()
    rows = np.arange(size)
    assert (batch["target_ids_out"][rows, batch["target_length"] - 1] == 2).all()
    # ids_in shifted by one is ids_out without its final </s>.
    assert (batch["target_ids_in"][:, 1:] * tgt_mask[:, 1:]
            == batch["target_ids_out"][:, :-1] * tgt_mask[:, 1:]).all()


# -------------------------------------------------------------------------------------------
# Reading


def test_read_lines_splits_on_newline_only(tmp_path):
    path = write_text(tmp_path / "a.txt", b"one\r\ntwo\x0cstill two\xe2\x80\xa8same\n\nfour")
    assert read_lines(path) == ["one", "two\x0cstill two\u2028same", "", "four"]
    assert read_lines(write_text(tmp_path / "b.txt", "x\n")) == ["x"]
    assert read_lines(write_text(tmp_path / "c.txt", "")) == []
    assert len(read_lines(TRAIN_EN)) == 44846


def test_missing_file_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match=f"data file not found: {tmp_path}/nope.de"):
        read_parallel(TRAIN_EN, tmp_path / "nope.de")
    with pytest.raises(FileNotFoundError, match="nope.en"):
        TrainingInput(tmp_path / "nope.en", TRAIN_DE, batch_size=10, **sp_data_kwargs())


def test_line_count_mismatch_names_both_files(tmp_path):
    src = write_text(tmp_path / "s.txt", "a\nb\nc\n")
    tgt = write_text(tmp_path / "t.txt", "a\nb\n")
    with pytest.raises(DataError) as info:
        read_parallel(src, tgt)
    assert str(info.value) == (
        f"parallel files differ in length: {src} has 3 lines, {tgt} has 2 lines")


def test_invalid_utf8_names_file_and_line(tmp_path):
    src = write_text(tmp_path / "s.txt", "a\nb\nc\n")
    tgt = write_text(tmp_path / "t.txt", b"x\ny \xc3\x28 z\nw\n")
    with pytest.raises(DataError, match=f"{tgt}, line 2: invalid UTF-8 .*byte 3 of the line"):
        load_parallel_corpus(src, tgt, source_vocabulary=_tiny_vocab(tmp_path),
                             target_vocabulary=_tiny_vocab(tmp_path))


def _tiny_vocab(tmp_path):
    path = tmp_path / "tiny.txt"
    Vocabulary(["<blank>", "<s>", "</s>", "a", "b", "c"]).save(path)
    return path


def test_empty_after_filtering_names_files_and_limits(tmp_path):
    src = write_text(tmp_path / "s.txt", "a b c\n\na a a a\n")
    tgt = write_text(tmp_path / "t.txt", "a\nb\nc c c\n")
    vocab = _tiny_vocab(tmp_path)
    with pytest.raises(DataError) as info:
        load_parallel_corpus(src, tgt, source_vocabulary=vocab, target_vocabulary=vocab,
                             maximum_features_length=2, maximum_labels_length=10)
    message = str(info.value)
    assert src in message and tgt in message
    assert "3 lines read" in message
    assert "empty_source: 1" in message and "source_too_long: 2" in message
    assert "maximum_features_length=2" in message and "maximum_labels_length=10" in message


# -------------------------------------------------------------------------------------------
# Conventions and filter


def test_fixture_batch_matches_opennmt_tf_arrays():
    """OpenNMT-tf's own padded batch of the fixture's 8 pre-tokenized test sentences."""
    expected = np.load(os.path.join(FIXTURE, "expected.npz"))
    evaluation = EvaluationInput(
        os.path.join(FIXTURE, "test.first8.tok.en"), os.path.join(FIXTURE, "test.first8.tok.de"),
        source_vocabulary=os.path.join(FIXTURE, "src-vocab.txt"),
        target_vocabulary=os.path.join(FIXTURE, "tgt-vocab.txt"),
        batch_size=8,
    )
    (batch,) = list(evaluation.numpy_batches())
    for key in ("source_ids", "source_length", "target_ids_in", "target_ids_out", "target_length"):
        assert batch[key].dtype == np.int32
        np.testing.assert_array_equal(batch[key], expected[key], err_msg=key)
    assert batch["index"].tolist() == list(range(8))
    assert int((batch["source_ids"] == 800).sum()) == 10


def test_filter_boundaries_follow_opennmt_tf(tmp_path):
    # Source lengths 3, 4, 0; target pieces 2, 3, 1 (decoder lengths 3, 4, 2).
    src = write_text(tmp_path / "s.txt", "a b c\na b c a\n\nc\nb\n")
    tgt = write_text(tmp_path / "t.txt", "a b\na b c\nc\n\nb b b b b\n")
    vocab = _tiny_vocab(tmp_path)
    corpus = load_parallel_corpus(src, tgt, source_vocabulary=vocab, target_vocabulary=vocab,
                                  maximum_features_length=3, maximum_labels_length=4)
    # Kept: line 0 (source 3 <= 3, target 2 + 1 <= 4). Dropped: line 1 (source 4 > 3),
    # line 2 (empty source), line 3 (empty target), line 4 (target 5 + 1 > 4).
    assert corpus.line_index.tolist() == [0]
    assert corpus.stats.dropped == {"empty_source": 1, "empty_target": 1,
                                    "source_too_long": 1, "target_too_long": 1}
    assert corpus.stats.num_lines == 5 and corpus.stats.num_examples == 1
    # A target of maximum_labels_length - 1 pieces is the longest kept.
    keep, _ = filter_mask([1, 1, 1], [2, 3, 4], None, 4)
    assert keep.tolist() == [True, True, False]
    # OpenNMT-tf keeps empty targets (length 1): drop_empty_target=False does too.
    keep, _ = filter_mask([1, 1], [0, 1], None, None, drop_empty_target=False)
    assert keep.tolist() == [True, True]


def test_dropped_counts_match_an_independent_count():
    corpus = train_corpus(MAX_LEN, MAX_LEN)
    models = sp_models()
    sp_en = spm.SentencePieceProcessor(model_file=models["source_model"])
    sp_de = spm.SentencePieceProcessor(model_file=models["target_model"])
    src_len = np.array([len(p) for p in sp_en.encode(read_lines_plain(TRAIN_EN))])
    tgt_len = np.array([len(p) for p in sp_de.encode(read_lines_plain(TRAIN_DE))])
    too_long_src = src_len > MAX_LEN
    too_long_tgt = ~too_long_src & (tgt_len + 1 > MAX_LEN)
    assert too_long_src.sum() > 0 and too_long_tgt.sum() > 0
    assert corpus.stats.dropped == {
        "empty_source": 0, "empty_target": 0,
        "source_too_long": int(too_long_src.sum()), "target_too_long": int(too_long_tgt.sum())}
    kept = np.flatnonzero(~too_long_src & ~too_long_tgt)
    assert corpus.line_index.tolist() == kept.tolist()
    assert corpus.source_lengths.tolist() == src_len[kept].tolist()
    assert corpus.target_lengths.tolist() == (tgt_len[kept] + 1).tolist()
    assert corpus.stats.num_source_tokens == int(src_len[kept].sum())


def test_ids_decode_back_to_the_text():
    corpus = train_corpus(MAX_LEN, MAX_LEN)
    models = sp_models()
    sp_en = spm.SentencePieceProcessor(model_file=models["source_model"])
    sp_de = spm.SentencePieceProcessor(model_file=models["target_model"])
    src_vocab = Vocabulary.from_file(models["source_vocabulary"])
    tgt_vocab = Vocabulary.from_file(models["target_vocabulary"])
    src_lines = read_lines_plain(TRAIN_EN)
    tgt_lines = read_lines_plain(TRAIN_DE)
    training = TrainingInput(corpus=corpus, batch_size=BATCH, shuffle=False, repeat=False)
    checked = with_oov = 0
    for indices, batch in zip(training.index_batches(), training.numpy_batches()):
        _check_batch_layout(batch)
        for row, (src_ids, tgt_ids) in enumerate(_batch_examples(batch)):
            line = int(corpus.line_index[indices[row]])
            src_pieces = src_vocab.to_tokens(src_ids)
            tgt_pieces = tgt_vocab.to_tokens(tgt_ids)
            if "<unk>" in src_pieces or "<unk>" in tgt_pieces:
                with_oov += 1
                continue
            assert sp_en.decode(src_pieces) == sp_en.decode(sp_en.encode(src_lines[line]))
            assert sp_de.decode(tgt_pieces) == sp_de.decode(sp_de.encode(tgt_lines[line]))
            checked += 1
        if checked > 4000:
            break
    assert checked > 4000 and with_oov < checked // 10


# -------------------------------------------------------------------------------------------
# The sorted scheme


@pytest.mark.parametrize("multiple", [1, 8])
def test_sorted_epoch_budget_multiple_and_exactly_once(multiple):
    corpus = train_corpus(MAX_LEN, MAX_LEN)
    training = TrainingInput(corpus=corpus, batch_size=BATCH, batch_size_multiple=multiple,
                             shuffle=False, repeat=False)
    seen = []
    shapes = []
    for batch in training.numpy_batches():
        size = batch["source_ids"].shape[0]
        shapes.append((batch["source_ids"].shape, batch["target_ids_in"].shape))
        assert size % multiple == 0
        assert batch["source_ids"].size <= BATCH and batch["target_ids_in"].size <= BATCH
        seen.extend(_batch_examples(batch))
    expected = _real_examples(corpus, range(len(corpus)))
    dropped = training.dropped_remainder
    assert dropped == len(corpus) % multiple
    assert len(seen) == len(expected) - dropped
    counts = collections.Counter(expected)
    counts.subtract(collections.Counter(seen))
    assert all(c >= 0 for c in counts.values())  # nothing duplicated, nothing invented
    assert sum(counts.values()) == dropped
    if multiple == 1:
        assert +counts == collections.Counter()  # every kept example exactly once
    # Without shuffling the order is fixed.
    again = [(b["source_ids"].shape, b["target_ids_in"].shape) for b in training.numpy_batches()]
    assert again == shapes


def test_sorted_padding_beats_opennmt_on_real_data():
    corpus = train_corpus(MAX_LEN, MAX_LEN)
    src_len, tgt_len = _lengths(corpus)
    sorted_input = TrainingInput(corpus=corpus, batch_size=BATCH, seed=3)
    opennmt_input = TrainingInput(corpus=corpus, batch_size=BATCH, seed=3, scheme="opennmt")
    sorted_stats = epoch_padding_stats(sorted_input)
    opennmt_stats = epoch_padding_stats(opennmt_input)
    assert sorted_stats["examples"] == opennmt_stats["examples"] == len(corpus)
    assert sorted_stats["max_side_tokens"] <= BATCH
    assert sorted_stats["padding_ratio"] <= 0.05
    assert sorted_stats["padding_ratio"] < 0.6 * opennmt_stats["padding_ratio"]
    # Not by making many small batches: fewer batches than OpenNMT-tf's scheme.
    assert sorted_stats["batches"] < opennmt_stats["batches"]
    # The statistics agree with the padded arrays.
    batches = sorted_input.epoch_batches(0)
    padded = sum(pad_parallel_batch(corpus, b)["source_ids"].size
                 + pad_parallel_batch(corpus, b)["target_ids_in"].size for b in batches[:20])
    assert padded == padding_stats(batches[:20], src_len, tgt_len)["padded_tokens"]


def test_pad_to_multiple_and_length_bucket_width():
    corpus = train_corpus(MAX_LEN, MAX_LEN)
    training = TrainingInput(corpus=corpus, batch_size=BATCH, pad_to_multiple=8,
                             length_bucket_width=4, seed=0, repeat=False)
    shapes = set()
    for batch in training.numpy_batches():
        assert batch["source_ids"].shape[1] % 8 == 0 and batch["target_ids_in"].shape[1] % 8 == 0
        assert batch["source_ids"].size <= BATCH and batch["target_ids_in"].size <= BATCH
        shapes.add(batch["target_ids_in"].shape[1])
    assert len(shapes) <= MAX_LEN // 8 + 1


def test_seed_determinism_and_reshuffling():
    corpus = train_corpus(MAX_LEN, MAX_LEN)

    def first_batches(seed, count, **kwargs):
        training = TrainingInput(corpus=corpus, batch_size=BATCH, seed=seed, **kwargs)
        out = []
        for indices in training.index_batches():
            out.append(indices.copy())
            if len(out) == count:
                return out

    epoch_size = len(TrainingInput(corpus=corpus, batch_size=BATCH, seed=7).epoch_batches(0))
    a = first_batches(7, epoch_size + 20)
    b = first_batches(7, epoch_size + 20)
    c = first_batches(8, 20)
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    assert not all(np.array_equal(x, y) for x, y in zip(a, c))
    first, second = a[:epoch_size], a[epoch_size:]
    assert sorted(np.concatenate(first).tolist()) == list(range(len(corpus)))
    assert not all(np.array_equal(x, y) for x, y in zip(first, second))  # reshuffled
    # The opennmt scheme is seeded too.
    d = first_batches(7, 50, scheme="opennmt")
    e = first_batches(7, 50, scheme="opennmt")
    f = first_batches(9, 50, scheme="opennmt")
    assert all(np.array_equal(x, y) for x, y in zip(d, e))
    assert not all(np.array_equal(x, y) for x, y in zip(d, f))


def test_repeat_carries_the_remainder_into_the_next_epoch():
    corpus = train_corpus(MAX_LEN, MAX_LEN)
    training = TrainingInput(corpus=corpus, batch_size=BATCH, batch_size_multiple=8, seed=1)
    counts = np.zeros(len(corpus), dtype=np.int64)
    batches = training.index_batches()
    total = 0
    while total < 3 * len(corpus) - 8:
        indices = next(batches)
        assert len(indices) % 8 == 0
        np.add.at(counts, indices, 1)
        total += len(indices)
    batches.close()
    # Three epochs' worth: every example used 2 or 3 times (the carry moves a few).
    assert counts.min() >= 2 and counts.max() <= 3
    assert (counts == 3).sum() >= len(corpus) - 16


def test_sample_buffer_windows_keep_everything():
    corpus = train_corpus(MAX_LEN, MAX_LEN)
    training = TrainingInput(corpus=corpus, batch_size=BATCH, sample_buffer_size=10000,
                             seed=2, repeat=False)
    indices = np.concatenate(list(training.index_batches()))
    assert sorted(indices.tolist()) == list(range(len(corpus)))


def test_examples_batch_type():
    corpus = train_corpus(MAX_LEN, MAX_LEN)
    training = TrainingInput(corpus=corpus, batch_size=100, batch_type="examples",
                             batch_size_multiple=8, shuffle=False, repeat=False)
    sizes = [len(b) for b in training.index_batches()]
    assert all(size == 96 for size in sizes[:-1]) and sizes[-1] % 8 == 0 and sizes[-1] <= 96
    assert sum(sizes) + training.dropped_remainder == len(corpus)
    assert training.dropped_remainder == len(corpus) % 8


# -------------------------------------------------------------------------------------------
# OpenNMT-tf's scheme


def test_opennmt_scheme_rules():
    corpus = train_corpus(MAX_LEN, MAX_LEN)
    src_len, tgt_len = _lengths(corpus)
    for multiple, width in ((1, 1), (8, 3)):
        order = opennmt_shuffle(np.arange(len(corpus)), -1, np.random.default_rng(0))
        batches = plan_opennmt_batches(order, src_len, tgt_len, batch_size=BATCH,
                                       batch_type="tokens", batch_size_multiple=multiple,
                                       length_bucket_width=width)
        assert sorted(np.concatenate(batches).tolist()) == list(range(len(corpus)))
        partial = collections.Counter()
        flushing = False
        for batch in batches:
            keys = opennmt_bucket(src_len[batch], tgt_len[batch], width)
            assert (keys == keys[0]).all()
            key = int(keys[0])
            size = opennmt_window_size(key, BATCH, "tokens", multiple, width)
            assert size == max((BATCH // ((key + 1) * width)) // multiple * multiple, multiple)
            longest = int(np.maximum(src_len[batch], tgt_len[batch]).max())
            assert longest <= (key + 1) * width
            if len(batch) != size:
                flushing = True
                partial[key] += 1
                assert len(batch) < size
            else:
                assert not flushing  # full batches all come before the end-of-epoch flush
        assert max(partial.values()) == 1  # one flushed partial batch per bucket at most
        flushed = [int(opennmt_bucket(src_len[b[:1]], tgt_len[b[:1]], width)[0])
                   for b in batches[len(batches) - len(partial):]]
        assert flushed == sorted(flushed)
    # Bucket ids: length 1..width -> 0, width + 1..2 width -> 1.
    assert opennmt_bucket(np.array([1, 3, 4, 2]), np.array([2, 1, 1, 7]), 3).tolist() == [0, 0, 1, 2]


def test_opennmt_shuffle_random_shards():
    rng = np.random.default_rng(0)
    order = opennmt_shuffle(np.arange(10), 3, rng)
    # linspace(0, 10, 4) -> offsets 0, 2, 5, 7: shards [0:3] [2:5] [5:8] [7:10] (2 and 7 twice).
    assert sorted(order.tolist()) == [0, 1, 2, 2, 3, 4, 5, 6, 7, 7, 8, 9]
    assert sorted(opennmt_shuffle(np.arange(10), -1, rng).tolist()) == list(range(10))
    assert opennmt_shuffle(np.arange(5), 0, rng).tolist() == list(range(5))


# -------------------------------------------------------------------------------------------
# tf.data, accumulation, shards


def test_tf_dataset_elements_and_accumulation():
    corpus = train_corpus(MAX_LEN, MAX_LEN)
    plain = TrainingInput(corpus=corpus, batch_size=BATCH, seed=5, repeat=False)
    grouped = TrainingInput(corpus=corpus, batch_size=BATCH, seed=5, repeat=False, accum_steps=3)
    # The dataset yields what the train step consumes: groups of accum_steps batches.
    dataset = plain.dataset()
    assert isinstance(dataset.element_spec, tuple) and len(dataset.element_spec) == 1
    spec = dataset.element_spec[0]
    assert set(spec) == {"source_ids", "source_length", "target_ids_in", "target_ids_out",
                         "target_length"}
    assert spec["source_ids"].shape.as_list() == [None, None] and spec["source_ids"].dtype == tf.int32
    flat = [tf.nest.map_structure(lambda t: t.numpy(), g[0]) for g in dataset.take(9)]
    groups = list(grouped.dataset().take(3))
    assert isinstance(grouped.dataset().element_spec, tuple) and len(groups[0]) == 3
    for g, group in enumerate(groups):
        for k, batch in enumerate(group):
            for key in batch:
                np.testing.assert_array_equal(batch[key].numpy(), flat[3 * g + k][key])
    # Resuming after 2 groups starts at the third.
    resumed = next(iter(grouped.dataset(skip_groups=2)))
    np.testing.assert_array_equal(resumed[0]["source_ids"].numpy(), flat[6]["source_ids"])


def test_accum_steps_formula():
    assert accum_steps(200_000, 6_250) == 32
    assert accum_steps(25_000, 3_072) == 9
    assert accum_steps(25_000, 3_072, num_replicas=2) == 5
    assert accum_steps(4096, 4096) == 1
    assert accum_steps(None, 4096) == 1


def test_shards_partition_the_lines(tmp_path):
    kwargs = dict(maximum_features_length=MAX_LEN, maximum_labels_length=MAX_LEN, **sp_data_kwargs())
    shards = [load_parallel_corpus(VALID_EN, VALID_DE, num_shards=3, shard_index=i, **kwargs)
              for i in range(3)]
    whole = load_parallel_corpus(VALID_EN, VALID_DE, **kwargs)
    for i, shard in enumerate(shards):
        assert (shard.line_index % 3 == i).all()
    merged = np.sort(np.concatenate([s.line_index for s in shards]))
    assert merged.tolist() == whole.line_index.tolist()
    assert sum(s.stats.num_lines for s in shards) == 500


# -------------------------------------------------------------------------------------------
# Evaluation and inference


def test_inference_bucketing_restores_file_order(tmp_path):
    lines = read_lines_plain(VALID_EN)[:97] + [""]
    path = write_text(tmp_path / "in.txt", "\n".join(lines) + "\n")
    kwargs = sp_data_kwargs()
    inference = InferenceInput(path, source_vocabulary=kwargs["source_vocabulary"],
                               source_tokenizer=kwargs["source_tokenizer"], batch_size=16,
                               length_bucket_width=5)
    dataset = inference_dataset(inference)
    indices, sources = [], []
    for batch in dataset:
        assert batch["source_ids"].shape[0] <= 16
        lengths = batch["source_length"].numpy()
        keys = np.maximum(-(-lengths // 5) - 1, 0)
        assert (keys == keys[0]).all()
        for row, length in enumerate(lengths):
            sources.append(batch["source_ids"][row, :length].numpy().tolist())
        indices.extend(batch["index"].numpy().tolist())
    assert indices != list(range(len(lines)))  # reordered by length
    restored = restore_order(indices, sources)
    for i, ids in enumerate(restored):
        assert ids == inference.corpus.source[i].tolist()
    assert restored[-1] == []  # the empty line is kept
    assert len(restored) == 98
    with pytest.raises(ValueError):
        restore_order([0, 0], ["a", "b"])
    # Without a width: file order.
    plain = InferenceInput(path, source_vocabulary=kwargs["source_vocabulary"],
                           source_tokenizer=kwargs["source_tokenizer"], batch_size=16)
    assert np.concatenate(plain.batches).tolist() == list(range(98))


def test_evaluation_keeps_every_pair(tmp_path):
    kwargs = sp_data_kwargs()
    src_lines = read_lines_plain(VALID_EN)
    src = write_text(tmp_path / "s.txt", "\n".join(src_lines[:20] + [" ".join(["word"] * 150)]) + "\n")
    tgt_lines = read_lines_plain(VALID_DE)
    tgt = write_text(tmp_path / "t.txt", "\n".join(tgt_lines[:20] + ["Wort"]) + "\n")
    evaluation = EvaluationInput(src, tgt, batch_size=8, length_bucket_width=5, **kwargs)
    seen = []
    for batch in evaluation_dataset(evaluation):
        batch = tf.nest.map_structure(lambda t: t.numpy(), batch)
        _check_batch_layout(batch)
        seen.extend(batch["index"].tolist())
    assert sorted(seen) == list(range(21))
    assert evaluation.corpus.source_lengths[20] >= 150  # not filtered


def test_skip_batches_resumes_the_same_stream():
    corpus = train_corpus(MAX_LEN, MAX_LEN)
    training = TrainingInput(corpus=corpus, batch_size=BATCH, seed=11)
    stream = training.index_batches()
    reference = [next(stream) for _ in range(300)]
    stream.close()
    resumed = training.index_batches(skip_batches=290)
    for expected in reference[290:]:
        np.testing.assert_array_equal(next(resumed), expected)
    resumed.close()
    grouped = TrainingInput(corpus=corpus, batch_size=BATCH, seed=11, accum_steps=2)
    group = next(iter(grouped.numpy_batches(skip_batches=4)))
    np.testing.assert_array_equal(group[1]["source_length"],
                                  corpus.source_lengths[reference[5]])


def _brute_force_cut(ps, pt, budget, multiple, overhead):
    """Minimum of the DP objective over every split of the ordered list into batches."""
    n = len(ps)
    usable = n - n % multiple
    best = {0: 0.0}
    for end in range(multiple, usable + 1, multiple):
        options = []
        for start in range(0, end, multiple):
            size = end - start
            s, t = max(ps[start:end]), max(pt[start:end])
            if size * max(s, t) > budget and size != multiple:
                continue
            options.append(best[start] + size * (s + t) + overhead * budget)
        best[end] = min(options)
    return best[usable]


def test_cut_tokens_batches_is_optimal_and_respects_the_budget():
    from opennmt_lite.data.batching import cut_tokens_batches

    rng = np.random.default_rng(0)
    for trial in range(60):
        n = int(rng.integers(1, 11))
        multiple = int(rng.choice([1, 2, 3]))
        ps = rng.integers(1, 9, n)
        pt = rng.integers(1, 9, n)
        budget = int(rng.integers(8, 30))
        ranges, usable = cut_tokens_batches(ps, pt, budget, multiple, batch_overhead=0.15)
        assert usable == n - n % multiple
        # Consecutive ranges covering 0..usable.
        bounds = [0] + [b for _, b in ranges]
        assert [a for a, _ in ranges] == bounds[:-1] and bounds[-1] == usable
        cost = 0.0
        for a, b in ranges:
            size = b - a
            assert size % multiple == 0
            longest = max(ps[a:b].max(), pt[a:b].max())
            assert size * longest <= budget or size == multiple
            cost += size * (ps[a:b].max() + pt[a:b].max()) + 0.15 * budget
        assert cost == pytest.approx(_brute_force_cut(ps, pt, budget, multiple, 0.15))
    # An example longer than the budget forms a batch alone (of `multiple` examples).
    ranges, _ = cut_tokens_batches([2, 50, 2], [2, 3, 2], 10, 1)
    assert (1, 2) in ranges


def test_ragged_ids_padding_and_selection():
    ragged = ragged_ids([[5, 6], [], [7, 8, 9]])
    assert ragged.lengths.tolist() == [2, 0, 3] and ragged[2].tolist() == [7, 8, 9]
    assert ragged.select([2, 0]).flat.tolist() == [7, 8, 9, 5, 6]
    assert ragged.padded([2, 1, 0], 5, prefix=1).tolist() == [
        [1, 7, 8, 9, 0], [1, 0, 0, 0, 0], [1, 5, 6, 0, 0]]
    assert ragged.padded([0, 1, 2], 4, suffix=2).tolist() == [
        [5, 6, 2, 0], [2, 0, 0, 0], [7, 8, 9, 2]]
