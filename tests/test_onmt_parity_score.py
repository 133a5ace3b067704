"""`score.with_token_level` and `score.with_alignments` against OpenNMT-tf 2.32's own `score`
output on its fixture model (tests/fixtures/onmt_tf_relative/decoding_options.README.md): the
references and the beam-4 translations of test.first100, run through `onmt-main` with the very
command line OpenNMT-tf ran, and once through `run.py score`. The token texts must be equal on
at least 99/100 lines; the NLL and token-level scores within 1e-4, the hard alignments equal,
the soft ones within 1e-5."""

import gzip
import shutil

import numpy as np
import pytest
import yaml

import run
from conftest import FIXTURES, ONMT_FIXTURE
from opennmt_lite.onmt import main as onmt_main

SCORE_TOLERANCE = 1e-4
SOFT_TOLERANCE = 1e-5
TARGETS = {"ref": "test.first100.tok.de", "beam4": "pred.first100.beam4.tok.de"}


def read_lines(path):
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as stream:
        return stream.read().splitlines()


@pytest.fixture(scope="module")
def fixture_copy(tmp_path_factory):
    """The files OpenNMT-tf's score ran on, copied (onmt-main writes model_description.py)."""
    work = tmp_path_factory.mktemp("onmt_tf_relative")
    for path in ONMT_FIXTURE.iterdir():
        if path.name.startswith(("ckpt-", "checkpoint", "config", "model", "score.", "test.",
                                 "pred.first100.beam4.tok", "src-", "tgt-")):
            shutil.copyfile(path, work / path.name)
    return work


def compare(ours, theirs, alignment):
    """Lines `NLL ||| tokens[ ||| token scores] ||| alignment`: the number of lines whose
    tokens are equal; on those, every number within its tolerance."""
    assert len(ours) == len(theirs) == 100
    equal = 0
    for mine, reference in zip(ours, theirs):
        a, b = mine.split(" ||| "), reference.split(" ||| ")
        assert len(a) == len(b) == (4 if alignment == "hard" else 3), (mine, reference)
        if a[1] != b[1]:
            continue
        equal += 1
        assert abs(float(a[0]) - float(b[0])) <= SCORE_TOLERANCE
        if alignment == "hard":
            np.testing.assert_allclose(np.array(a[2].split(), float), np.array(b[2].split(), float),
                                       rtol=0, atol=SCORE_TOLERANCE)
            assert a[3] == b[3], (mine, reference)
        else:
            vectors = [[float(x) for x in v.split()] for v in a[2].split(" ; ")]
            expected = [[float(x) for x in v.split()] for v in b[2].split(" ; ")]
            np.testing.assert_allclose(vectors, expected, rtol=0, atol=SOFT_TOLERANCE)
    return equal


@pytest.mark.parametrize("target", sorted(TARGETS))
@pytest.mark.parametrize("options, alignment", [("token_level.hard", "hard"), ("soft", "soft")])
def test_onmt_main_score_prints_what_opennmt_prints(fixture_copy, monkeypatch, target, options,
                                                    alignment):
    monkeypatch.chdir(fixture_copy)
    output = f"ours.{target}.{options}.txt"
    assert onmt_main.main([
        "--model", "model.py", "--config", "config.yml", f"score.{options}.yml",
        "--checkpoint_path", "ckpt-500", "score", "--features_file", "test.first100.tok.en",
        "--predictions_file", TARGETS[target], "--output_file", output]) == 0
    suffix = ".gz" if alignment == "soft" else ""
    theirs = read_lines(ONMT_FIXTURE / f"score.first100.{target}.{options}.txt{suffix}")
    assert compare(read_lines(fixture_copy / output), theirs, alignment) >= 99
    if alignment == "hard":  # the alignments are not all on one source position
        assert len({pair.split("-")[0] for line in theirs for pair in line.split(" ||| ")[3].split()}) > 10


def test_run_py_score_options(tmp_path):
    """The same through `run.py score` and an opennmt-lite config; the plain line is unchanged
    by the options (NLL and tokens are its first two fields)."""
    config = yaml.safe_load((FIXTURES / "onmt_fixture.yml").read_text())
    config["score"] = {"batch_size": 16, "with_token_level": True, "with_alignments": "hard"}
    path = tmp_path / "config.yml"
    path.write_text(yaml.safe_dump(config))
    arguments = ["score", "--config", str(path), "--features_file",
                 str(ONMT_FIXTURE / "test.first100.tok.en"), "--predictions_file",
                 str(ONMT_FIXTURE / TARGETS["ref"])]
    assert run.main(arguments + ["--output_file", str(tmp_path / "ours.txt")]) == 0
    ours = read_lines(tmp_path / "ours.txt")
    theirs = read_lines(ONMT_FIXTURE / "score.first100.ref.token_level.hard.txt")
    assert compare(ours, theirs, "hard") >= 99
    del config["score"]["with_token_level"], config["score"]["with_alignments"]
    path.write_text(yaml.safe_dump(config))
    assert run.main(arguments + ["--output_file", str(tmp_path / "plain.txt")]) == 0
    plain = read_lines(tmp_path / "plain.txt")
    assert plain == [" ||| ".join(line.split(" ||| ")[:2]) for line in ours]


def test_bad_score_alignment_type_is_one_line(tmp_path, capsys):
    config = yaml.safe_load((FIXTURES / "onmt_fixture.yml").read_text())
    config["score"] = {"with_alignments": "diagonal"}
    path = tmp_path / "config.yml"
    path.write_text(yaml.safe_dump(config))
    assert run.main(["score", "--config", str(path), "--features_file",
                     str(ONMT_FIXTURE / "test.first8.tok.en"), "--predictions_file",
                     str(ONMT_FIXTURE / "test.first8.tok.de")]) == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and "score.with_alignments" in error[0], error
