"""Tags and class-label files (opennmt_lite/data/labels.py): the fixtures' files read back, and
each user mistake is one line naming the file and line."""

import os

import pytest

from opennmt_lite.data import labels as data
from opennmt_lite.data.text import DataError

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures")
TAGGER = os.path.join(FIXTURES, "onmt_tf_tagger_crf")
CLASSIFIER = os.path.join(FIXTURES, "onmt_tf_classifier")


def _write(tmp_path, name, lines):
    path = tmp_path / name
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return str(path)


def test_fixture_files_read():
    tags = data.read_label_vocabulary(os.path.join(TAGGER, "tags-vocab.txt"))
    assert tags == ["O", "B-CAP", "I-CAP", "E-CAP", "S-CAP", "S-NUM"]
    examples = data.read_tagged(os.path.join(TAGGER, "test.first100.tok.en"),
                                os.path.join(TAGGER, "test.first100.tags"), tags)
    assert len(examples) == 100
    assert examples[1] == (["User", "ID"], [0, 4])
    labels = data.read_label_vocabulary(os.path.join(CLASSIFIER, "labels-vocab.txt"), "labels")
    classified = data.read_classified(os.path.join(CLASSIFIER, "test.first100.tok.en"),
                                      os.path.join(CLASSIFIER, "test.first100.labels"), labels)
    assert [label for _, label in classified[:3]] == [2, 2, 1]


@pytest.mark.parametrize("features, tags, message", [
    (["a b c", "d e"], ["O O O", "O"], r"tags\.txt, line 2: 1 tags for the 2 tokens"),
    (["a b", "c"], ["O O", "B-FOO"], r"tags\.txt, line 2: tag 'B-FOO' is not in the tags "),
    (["a b", "c"], ["O O"], r"tags\.txt has 1 lines, features file .* has 2"),
])
def test_tag_errors(tmp_path, features, tags, message):
    with pytest.raises(DataError, match=message) as error:
        data.read_tagged(_write(tmp_path, "features.txt", features),
                         _write(tmp_path, "tags.txt", tags), ["O", "S-X"])
    assert "\n" not in str(error.value)


@pytest.mark.parametrize("labels, message", [
    (["x", "z"], r"labels\.txt, line 2: label 'z' is not in the labels vocabulary"),
    (["x", "x y"], r"labels\.txt, line 2: expected one label, got 'x y'"),
    (["", "x"], r"labels\.txt, line 1: expected one label, got ''"),
])
def test_label_errors(tmp_path, labels, message):
    with pytest.raises(DataError, match=message):
        data.read_classified(_write(tmp_path, "features.txt", ["a", "b"]),
                             _write(tmp_path, "labels.txt", labels), ["x", "y"])


@pytest.mark.parametrize("lines, message", [
    (["O", "O"], r"line 2: 'O' repeats line 1"),
    (["O", "B X"], r"line 2: 'B X' is not one tag"),
    ([], r"is empty"),
])
def test_vocabulary_errors(tmp_path, lines, message):
    with pytest.raises(DataError, match=message):
        data.read_label_vocabulary(_write(tmp_path, "tags-vocab.txt", lines))
