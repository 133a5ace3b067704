import os

import numpy as np
import pytest

from data_helpers import FIXTURE, write_text
from opennmt_lite.data.vocab_builder import build_word_vocab, word_vocabulary_tokens
from opennmt_lite.data.vocab import (
    BOS_ID,
    EOS_ID,
    PAD_ID,
    Vocabulary,
    VocabularyError,
    as_vocabulary,
)

SRC_VOCAB = os.path.join(FIXTURE, "src-vocab.txt")
TGT_VOCAB = os.path.join(FIXTURE, "tgt-vocab.txt")


def test_fixture_vocabulary_loads_as_is():
    vocab = Vocabulary.from_file(SRC_VOCAB)
    with open(SRC_VOCAB, encoding="utf-8") as stream:
        lines = stream.read().split("\n")[:-1]
    assert vocab.size == len(lines) == 800
    assert vocab.oov_id == 800
    assert vocab.num_ids == 801
    assert vocab.tokens == lines
    assert vocab.tokens[:3] == ["<blank>", "<s>", "</s>"]
    assert (PAD_ID, BOS_ID, EOS_ID) == (0, 1, 2)
    assert vocab.lookup(["<blank>", "<s>", "</s>"]).tolist() == [0, 1, 2]
    # Every token maps to its line number.
    assert vocab.lookup(lines).tolist() == list(range(800))
    assert Vocabulary.from_file(TGT_VOCAB).oov_id == 800


def test_fixture_source_ids_match_opennmt_tf():
    """The ids OpenNMT-tf computed for the fixture's 8 test sentences (10 unknown pieces)."""
    expected = np.load(os.path.join(FIXTURE, "expected.npz"))
    vocab = Vocabulary.from_file(SRC_VOCAB)
    with open(os.path.join(FIXTURE, "test.first8.tok.en"), encoding="utf-8") as stream:
        lines = stream.read().split("\n")[:-1]
    for row, line in enumerate(lines):
        ids = vocab.lookup(line.split())
        length = int(expected["source_length"][row])
        assert ids.dtype == np.int32
        assert ids.tolist() == expected["source_ids"][row, :length].tolist()
    total_unknown = sum(int((vocab.lookup(line.split()) == 800).sum()) for line in lines)
    assert total_unknown == 10


def test_lookup_and_to_tokens():
    vocab = Vocabulary(["<blank>", "<s>", "</s>", "a", "b"])
    assert vocab.lookup(["b", "zz", "a", "<unk>"]).tolist() == [4, 5, 3, 5]
    assert vocab.lookup([]).tolist() == []
    assert vocab.to_tokens([3, 5, 0, 4]) == ["a", "<unk>", "<blank>", "b"]
    assert vocab.to_tokens(np.array([[1, 2]])) == ["<s>", "</s>"]
    assert vocab.id("b") == 4 and vocab.id("nope") == 5
    assert "a" in vocab and "<unk>" not in vocab
    with pytest.raises(IndexError, match="id 6 out of range"):
        vocab.to_tokens([6])
    with pytest.raises(IndexError, match="id -1"):
        vocab.to_tokens([-1])


def test_save_round_trip_and_crlf(tmp_path):
    vocab = Vocabulary(["<blank>", "<s>", "</s>", "▁der", "ß", "x y"])
    path = tmp_path / "sub" / "v.txt"
    vocab.save(path)
    assert path.read_bytes() == "<blank>\n<s>\n</s>\n▁der\nß\nx y\n".encode()
    assert Vocabulary.from_file(path) == vocab
    crlf = write_text(tmp_path / "crlf.txt", b"<blank>\r\n<s>\r\n</s>\r\nab\r\n")
    assert Vocabulary.from_file(crlf).tokens == ["<blank>", "<s>", "</s>", "ab"]
    no_final_newline = write_text(tmp_path / "nf.txt", "<blank>\n<s>\n</s>\nab")
    assert Vocabulary.from_file(no_final_newline).size == 4
    assert as_vocabulary(str(path)) == vocab
    assert as_vocabulary(vocab) is vocab


def test_missing_file(tmp_path):
    path = tmp_path / "nope.txt"
    with pytest.raises(FileNotFoundError, match=f"vocabulary file not found: {path}"):
        Vocabulary.from_file(path)


def test_missing_special_tokens(tmp_path):
    path = write_text(tmp_path / "v.txt", "a\nb\nc\n")
    with pytest.raises(VocabularyError) as info:
        Vocabulary.from_file(path)
    message = str(info.value)
    assert path in message
    assert "lines 1-3" in message and "'<blank>'" in message and "'</s>'" in message
    assert "line 1: 'a'" in message
    # Special tokens present but in the wrong order.
    path = write_text(tmp_path / "w.txt", "<s>\n<blank>\n</s>\nx\n")
    with pytest.raises(VocabularyError, match="line 1: '<s>', line 2: '<blank>'"):
        Vocabulary.from_file(path)


def test_sentencepiece_vocab_file_gets_a_hint(tmp_path):
    path = write_text(tmp_path / "sp.vocab", "<unk>\t0\n▁a\t-1.5\n")
    with pytest.raises(VocabularyError, match="SentencePiece .vocab file"):
        Vocabulary.from_file(path)


def test_duplicate_token(tmp_path):
    path = write_text(tmp_path / "v.txt", "<blank>\n<s>\n</s>\na\nb\na\n")
    with pytest.raises(VocabularyError) as info:
        Vocabulary.from_file(path)
    assert path in str(info.value)
    assert "duplicate token 'a' on line 4 and line 6" in str(info.value)


def test_invalid_utf8(tmp_path):
    path = write_text(tmp_path / "v.txt", b"<blank>\n<s>\n</s>\nok\nbad\xff\xfe\n")
    with pytest.raises(VocabularyError) as info:
        Vocabulary.from_file(path)
    assert f"{path}, line 5: invalid UTF-8" in str(info.value)
    assert "byte 4 of the line" in str(info.value)


def test_empty_line(tmp_path):
    path = write_text(tmp_path / "v.txt", "<blank>\n<s>\n</s>\na\n\nb\n")
    with pytest.raises(VocabularyError, match=f"{path}, line 5: empty line"):
        Vocabulary.from_file(path)
    trailing = write_text(tmp_path / "t.txt", "<blank>\n<s>\n</s>\na\n\n")
    with pytest.raises(VocabularyError, match="line 5: empty line"):
        Vocabulary.from_file(trailing)


def test_word_vocabulary_order_frequency_then_first_seen(tmp_path):
    # counts: c 3, a 2, b 2 (a seen before b), d 1, e 1; "<s>" in the data is not a new token.
    path = write_text(tmp_path / "d.txt", "b a c\nc a <s>\tb\nd c e\n")
    vocab = build_word_vocab([path], tmp_path / "out" / "v.txt")
    assert vocab.tokens == ["<blank>", "<s>", "</s>", "c", "b", "a", "d", "e"]
    assert Vocabulary.from_file(tmp_path / "out" / "v.txt") == vocab
    # size counts the special tokens; min_frequency drops rare tokens.
    assert build_word_vocab(path, tmp_path / "v5.txt", size=5).tokens[3:] == ["c", "b"]
    assert build_word_vocab(path, tmp_path / "m2.txt", min_frequency=2).tokens[3:] == ["c", "b", "a"]
    # size_multiple: lines + 1 (the <unk> id) becomes a multiple, with OpenNMT-tf's fillers.
    padded = build_word_vocab(path, tmp_path / "p.txt", size_multiple=6)
    assert padded.size + 1 == 12
    assert padded.tokens[8:] == [f"averyunlikelytoken{i}" for i in range(3)]


def test_word_vocabulary_tokens_ties_keep_first_seen_order():
    counts = {"z": 1, "y": 5, "x": 1, "w": 5}
    assert word_vocabulary_tokens(counts)[3:] == ["y", "w", "z", "x"]
