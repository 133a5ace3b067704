import hashlib
import os

import pytest
import sentencepiece as spm

from data_helpers import SP_SIZE, TRAIN_DE, VALID_EN, TEST_EN, read_lines_plain, sp_models, write_text
from opennmt_lite.data.tokenizers import (
    SentencePieceTokenizer,
    SpaceTokenizer,
    make_tokenizer,
    sentencepiece_to_vocabulary_tokens,
    train_sentencepiece,
)
from opennmt_lite.data.vocab import Vocabulary


def test_space_tokenizer_splits_like_tf_strings_split():
    import tensorflow as tf

    tokenizer = SpaceTokenizer()
    samples = [
        "a b  c",
        "  lead\ttab\x0bvt\x0cff\rcr end  ",
        "nbsp\u00a0stays thin\u2009too \u3000ideo\x1cfs",
        "",
        "   ",
    ]
    for text in samples:
        expected = [t.decode("utf-8") for t in tf.strings.split(tf.constant(text)).numpy()]
        assert tokenizer.tokenize(text) == expected
    assert tokenizer.tokenize(samples[2]) == ["nbsp\u00a0stays", "thin\u2009too", "\u3000ideo\x1cfs"]
    assert tokenizer.tokenize_batch(samples[:2]) == [["a", "b", "c"],
                                                      ["lead", "tab", "vt", "ff", "cr", "end"]]
    assert tokenizer.detokenize(["a", "b"]) == "a b"


def test_make_tokenizer():
    assert isinstance(make_tokenizer(None), SpaceTokenizer)
    assert isinstance(make_tokenizer({"type": "space"}), SpaceTokenizer)
    model = sp_models()["source_model"]
    tokenizer = make_tokenizer({"type": "sentencepiece", "model": model})
    assert isinstance(tokenizer, SentencePieceTokenizer) and tokenizer.model_path == model
    assert make_tokenizer(tokenizer) is tokenizer
    with pytest.raises(FileNotFoundError, match="SentencePiece model not found: /nonexistent/m.model"):
        make_tokenizer({"type": "sentencepiece", "model": "/nonexistent/m.model"})
    with pytest.raises(ValueError, match="'model' option"):
        make_tokenizer({"type": "sentencepiece"})
    with pytest.raises(ValueError, match="unknown tokenizer type 'moses'"):
        make_tokenizer({"type": "moses"})
    with pytest.raises(ValueError, match=r"unknown option\(s\) \['modle'\]"):
        make_tokenizer({"type": "sentencepiece", "modle": model})


def test_corrupt_model_is_named(tmp_path):
    path = write_text(tmp_path / "bad.model", b"not a model")
    with pytest.raises(ValueError, match=f"cannot load SentencePiece model {path}"):
        SentencePieceTokenizer(path)


def test_sentencepiece_tokenize_batch_matches_single_and_round_trips():
    tokenizer = SentencePieceTokenizer(sp_models()["source_model"], num_threads=2)
    processor = spm.SentencePieceProcessor(model_file=sp_models()["source_model"])
    lines = read_lines_plain(VALID_EN)[:200] + ["", "  two  spaces ", "ﬁne\u00a0ligature"]
    batch = tokenizer.tokenize_batch(lines)
    assert batch == [tokenizer.tokenize(line) for line in lines]
    assert batch == [processor.encode(line, out_type=str) for line in lines]
    assert tokenizer.tokenize("") == []
    assert tokenizer.tokenize_batch([]) == []
    for line, pieces in zip(lines, batch):
        # The model normalises (NFKC, whitespace): decoding gives the normalised text.
        assert tokenizer.detokenize(pieces) == processor.decode(processor.encode(line))
        assert tokenizer.detokenize(pieces) == tokenizer.normalize(line)
    assert tokenizer.detokenize(tokenizer.tokenize("  two  spaces ")) == "two spaces"
    assert tokenizer.normalize("ﬁne") == "fine"


def test_trained_vocabulary_layout():
    models = sp_models()
    for side in ("source", "target"):
        vocab = Vocabulary.from_file(models[f"{side}_vocabulary"])
        processor = spm.SentencePieceProcessor(model_file=models[f"{side}_model"])
        pieces = [processor.id_to_piece(i) for i in range(processor.get_piece_size())]
        assert processor.get_piece_size() == SP_SIZE
        assert pieces[0] == "<unk>" and processor.unk_id() == 0
        assert processor.bos_id() == -1 and processor.eos_id() == -1 and processor.pad_id() == -1
        # <blank> <s> </s>, then the pieces in id order without <unk>: size + 2 lines.
        assert vocab.tokens == ["<blank>", "<s>", "</s>"] + pieces[1:]
        assert vocab.size == SP_SIZE + 2 and vocab.num_ids == SP_SIZE + 3
        assert models[f"{side}_vocabulary_size"] == vocab.size


def test_sentencepiece_to_vocabulary_tokens_like_onmt_build_vocab():
    # OpenNMT-tf's conversion of a default SentencePiece vocabulary (<unk> <s> </s> first).
    pieces = ["<unk>", "<s>", "</s>", "▁a", "b"]
    assert sentencepiece_to_vocabulary_tokens(pieces) == ["<blank>", "<s>", "</s>", "▁a", "b"]


def _digest(path):
    with open(path, "rb") as stream:
        return hashlib.sha256(stream.read()).hexdigest()


def test_training_is_deterministic(tmp_path):
    inputs = [VALID_EN, TEST_EN]
    first = train_sentencepiece(inputs, tmp_path / "a" / "m", 300, model_type="bpe")
    second = train_sentencepiece(inputs, tmp_path / "b" / "m", 300, model_type="bpe")
    # Same data, same base name, another directory: the same bytes.
    assert _digest(first[0]) == _digest(second[0])
    assert first[1].tokens == second[1].tokens
    assert first[1].path == os.fspath(tmp_path / "a" / "m") + ".onmt.vocab"
    assert Vocabulary.from_file(first[1].path) == first[1]
    unigram_a = train_sentencepiece(inputs, tmp_path / "c" / "m", 300)[0]
    unigram_b = train_sentencepiece(inputs, tmp_path / "d" / "m", 300)[0]
    assert _digest(unigram_a) == _digest(unigram_b)


def test_8000_pieces_on_the_shipped_data(tmp_path):
    model, vocab = train_sentencepiece(TRAIN_DE, tmp_path / "de8k", 8000,
                                       vocabulary_path=tmp_path / "de8k.txt")
    assert spm.SentencePieceProcessor(model_file=model).get_piece_size() == 8000
    assert vocab.size == 8002
    assert Vocabulary.from_file(tmp_path / "de8k.txt").oov_id == 8002


def test_training_errors_name_the_files(tmp_path):
    with pytest.raises(FileNotFoundError, match="training file not found: /no/such.txt"):
        train_sentencepiece(["/no/such.txt"], tmp_path / "m", 100)
    with pytest.raises(ValueError, match=f"SentencePiece training on {VALID_EN}.*too high"):
        train_sentencepiece([VALID_EN], tmp_path / "m", 8000)
