"""OpenNMT-tf model files of taggers, classifiers and language models (opennmt_lite/onmt/
other_model_files.py): the fixtures' own model.py files give models that load OpenNMT-tf's
checkpoints and reproduce its outputs; catalog models of RNN/CNN pieces are refused by name."""

import os

import numpy as np
import pytest

from opennmt_lite.onmt.model_file import ModelFileError
from opennmt_lite.onmt.other_model_files import build_model, read_other_model_file

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures")


def _lines(path):
    with open(path, encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f]


@pytest.mark.parametrize("name, kind, crf", [("tagger_crf", "SequenceTagger", True),
                                             ("tagger", "SequenceTagger", False),
                                             ("classifier", "SequenceClassifier", False)])
def test_fixture_model_files_reproduce_opennmt_tf(name, kind, crf):
    from opennmt_lite.checkpointing.onmt_encoder_models import load_onmt_model
    from opennmt_lite.data.labels import read_label_vocabulary
    from opennmt_lite.data.vocab import Vocabulary

    fixture = os.path.join(FIXTURES, f"onmt_tf_{name}")
    description = read_other_model_file(os.path.join(fixture, "model.py"))
    assert description["type"] == kind and description["crf_decoding"] == crf
    assert description["hyperparameters"]["num_units"] == 32
    vocabulary = Vocabulary.from_file(os.path.join(fixture, "src-vocab.txt"))
    labels_kind = "labels" if kind == "SequenceClassifier" else "tags"
    labels = read_label_vocabulary(os.path.join(fixture, f"{labels_kind}-vocab.txt"), labels_kind)
    model = build_model(description, vocabulary.num_ids, len(labels))
    load_onmt_model(fixture, model)
    sentences = _lines(os.path.join(fixture, "test.first100.tok.en"))[:32]
    ids = [vocabulary.lookup(s.split()) for s in sentences]
    length = np.array([len(i) for i in ids], np.int32)
    padded = np.zeros((len(ids), length.max()), np.int32)
    for row, values in zip(padded, ids):
        row[: len(values)] = values
    if kind == "SequenceTagger":
        tags = np.asarray(model.predict_tags(padded, length))
        predicted = [" ".join(labels[t] for t in row[:n]) for row, n in zip(tags, length)]
        expected = _lines(os.path.join(fixture, "pred.first100.tags"))[:32]
    else:
        predicted = [labels[i] for i in np.asarray(model.predict_labels(padded, length))]
        expected = _lines(os.path.join(fixture, "pred.first100.labels"))[:32]
    assert predicted == expected


def test_language_model_file_and_gpt2_small(tmp_path):
    description = read_other_model_file(os.path.join(FIXTURES, "onmt_tf_lm", "model.py"))
    assert description["type"] == "LanguageModel"
    assert description["maximum_position"] == 128 and description["gelu_approximation"]
    catalog = tmp_path / "gpt2.py"
    catalog.write_text("import opennmt\n\ndef model():\n    return opennmt.models.GPT2Small()\n")
    gpt2 = read_other_model_file(str(catalog))
    assert gpt2["hyperparameters"]["num_layers"] == 12
    assert gpt2["maximum_position"] == 1024 and gpt2["gelu_approximation"]


@pytest.mark.parametrize("body, message", [
    ("opennmt.models.LstmCnnCrfTagger()", r"model\.py, line 4: LstmCnnCrfTagger is built from "
                                          r"RNN or CNN layers"),
    ("opennmt.models.SequenceTagger(opennmt.inputters.WordEmbedder(32), "
     "opennmt.encoders.RNNEncoder(1, 32))", r"line 4: opennmt\.encoders\.RNNEncoder has no "),
    ("opennmt.models.LanguageModel(opennmt.decoders.SelfAttentionDecoder(2, num_units=32))",
     r"only SelfAttentionDecoder\(num_sources=0\)"),
    ("opennmt.models.SequenceClassifier(opennmt.inputters.WordEmbedder(64), "
     "opennmt.encoders.SelfAttentionEncoder(2, num_units=32))", r"embedding_size=64 differs"),
])
def test_refused_one_line(tmp_path, body, message):
    path = tmp_path / "model.py"
    path.write_text(f"import opennmt\n\ndef model():\n    return {body}\n")
    with pytest.raises(ModelFileError, match=message) as error:
        read_other_model_file(str(path))
    assert "\n" not in str(error.value)


@pytest.mark.parametrize("name", ["tagger_crf", "classifier", "lm"])
def test_inference_lines_equal_opennmt_tf_files(name):
    """opennmt_lite/inference/other_models.py's lines, model built from the fixture's model.py:
    the files `onmt-main infer` / `score` wrote, all 100 lines (scores within 1e-4). (The
    language model's continuations: tests/test_language_model.py, `continue_lines` there.)"""
    from opennmt_lite.checkpointing.onmt_encoder_models import (load_onmt_language_model,
                                                                load_onmt_model)
    from opennmt_lite.data.labels import read_label_vocabulary
    from opennmt_lite.data.vocab import Vocabulary
    from opennmt_lite.inference import other_models

    fixture = os.path.join(FIXTURES, f"onmt_tf_{name}")
    description = read_other_model_file(os.path.join(fixture, "model.py"))
    if name == "lm":
        vocabulary = Vocabulary.from_file(os.path.join(fixture, "vocab.txt"))
        model = build_model(description, vocabulary.num_ids)
        load_onmt_language_model(fixture, model)
        scored = other_models.score_lines(model, vocabulary,
                                          _lines(os.path.join(fixture, "test.first100.tok.en")),
                                          batch_size=100)
        expected = _lines(os.path.join(fixture, "score.first100.txt"))
        assert [s.split(" ||| ")[1] for s in scored] == [e.split(" ||| ")[1] for e in expected]
        np.testing.assert_allclose([float(s.split(" ||| ")[0]) for s in scored],
                                   [float(e.split(" ||| ")[0]) for e in expected], atol=1e-4)
        return
    vocabulary = Vocabulary.from_file(os.path.join(fixture, "src-vocab.txt"))
    kind = "labels" if name == "classifier" else "tags"
    labels = read_label_vocabulary(os.path.join(fixture, f"{kind}-vocab.txt"), kind)
    model = build_model(description, vocabulary.num_ids, len(labels))
    load_onmt_model(fixture, model)
    inputs = _lines(os.path.join(fixture, "test.first100.tok.en"))
    if name == "classifier":
        lines = other_models.classify_lines(model, vocabulary, labels, inputs, batch_size=16)
        assert lines == _lines(os.path.join(fixture, "pred.first100.labels"))
    else:
        lines = other_models.tag_lines(model, vocabulary, labels, inputs, batch_size=16)
        assert lines == _lines(os.path.join(fixture, "pred.first100.tags"))
