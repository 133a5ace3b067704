"""OpenNMT-tf's helper commands (opennmt_lite/onmt/tools.py), run in this process, against
OpenNMT-tf 2.32's own outputs in tests/fixtures/onmt_cli/ (its README gives the commands): the
same vocabulary files, tokens and merged configuration; the same command lines accepted; user
errors as one line with exit status 2."""

import io
import os
import sys

import pytest
import sentencepiece as spm

from conftest import FIXTURES
from opennmt_lite.onmt import tools

CLI = FIXTURES / "onmt_cli"
DATA = FIXTURES.parents[1] / "data"

# fixture file -> the arguments OpenNMT-tf's onmt-build-vocab was given (besides --save_vocab),
# relative to tests/fixtures/onmt_cli/
WORD_VOCABULARIES = {
    "en.size300.multiple16.vocab": ["--size", "300", "--size_multiple", "16", DATA / "valid.en",
                                    DATA / "test.en"],
    "de.min3.noseq.vocab": ["--min_frequency", "3", "--without_sequence_tokens", DATA / "valid.de"],
    "de.aggressive.vocab": ["--tokenizer_config", "tokenizer.yml", "--size", "200", DATA / "valid.de"],
    "en.from_sp.vocab": ["--from_vocab", "pieces.sp.vocab", "--from_format", "sentencepiece",
                         "--size", "150", DATA / "test.en"],
    "de.from_vocab.vocab": ["--from_vocab", "de.min3.noseq.vocab", "--min_frequency", "2",
                            DATA / "test.de"],
}


def usage(help_text):
    """The usage paragraph of a --help output, whitespace normalised."""
    return " ".join(help_text.split("\n\n")[0].split())


@pytest.mark.parametrize("command", ["onmt-build-vocab", "onmt-tokenize-text",
                                     "onmt-detokenize-text", "onmt-merge-config"])
def test_the_command_line_is_opennmt_tfs(command, capsys):
    """Every option and positional argument of OpenNMT-tf's --help, in its order, with its
    choices: the same usage line."""
    function = getattr(tools, command.removeprefix("onmt-").replace("-", "_"))
    assert function(["--help"]) == 0
    ours = capsys.readouterr().out
    assert usage(ours) == usage((CLI / f"{command}.help.txt").read_text(encoding="utf-8"))


@pytest.mark.parametrize("name", sorted(WORD_VOCABULARIES))
def test_build_vocab_writes_the_file_opennmt_tf_writes(name, tmp_path, monkeypatch):
    monkeypatch.chdir(CLI)
    output = tmp_path / name
    argv = [str(a) for a in WORD_VOCABULARIES[name]] + ["--save_vocab", str(output)]
    assert tools.build_vocab(argv) == 0
    assert output.read_bytes() == (CLI / name).read_bytes()


def test_build_vocab_sentencepiece_trains_the_model_opennmt_tf_trains(tmp_path):
    prefix = tmp_path / "en.sp"
    assert tools.build_vocab(["--sentencepiece", "character_coverage=1.0", "--size", "120",
                              "--save_vocab", str(prefix), str(DATA / "valid.en")]) == 0
    assert (tmp_path / "en.sp.vocab").read_bytes() == (CLI / "en.sp.vocab").read_bytes()
    # (the model files differ only in the training paths they record)
    ours, theirs = (spm.SentencePieceProcessor(model_file=str(path))
                    for path in (tmp_path / "en.sp.model", CLI / "en.sp.model"))
    assert ([(ours.id_to_piece(i), ours.get_score(i)) for i in range(ours.get_piece_size())]
            == [(theirs.id_to_piece(i), theirs.get_score(i)) for i in range(theirs.get_piece_size())])


def test_build_vocab_sentencepiece_on_opennmt_tokens_counts_what_opennmt_tf_counts(tmp_path, monkeypatch):
    """--tokenizer_config with --sentencepiece: SentencePiece learns on the OpenNMT Tokenizer's
    tokens, and the vocabulary is the most frequent tokens of the data tokenized with both."""
    monkeypatch.chdir(CLI)
    assert tools.build_vocab(["--sentencepiece", "--tokenizer_config", "tokenizer.yml", "--size", "150",
                              "--size_multiple", "8", "--save_vocab", str(tmp_path / "de.sp_pretok"),
                              str(DATA / "valid.de")]) == 0
    assert (tmp_path / "de.sp_pretok.vocab").read_bytes() == (CLI / "de.sp_pretok.vocab").read_bytes()


def run_with_stdin(function, argv, data, monkeypatch):
    """(exit status, standard output bytes) of `function(argv)` reading `data` on stdin."""
    stdout = io.TextIOWrapper(io.BytesIO(), encoding="utf-8")
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data), encoding="utf-8"))
    monkeypatch.setattr(sys, "stdout", stdout)
    status = function(argv)
    stdout.flush()
    return status, stdout.buffer.getvalue()


def test_tokenize_and_detokenize_text_print_what_opennmt_tf_prints(monkeypatch):
    monkeypatch.chdir(CLI)
    source = (CLI / "valid20.de").read_bytes()
    tokenized = (CLI / "valid20.aggressive.de").read_bytes()
    assert run_with_stdin(tools.tokenize_text, ["--tokenizer_config", "tokenizer.yml"], source,
                          monkeypatch) == (0, tokenized)
    assert run_with_stdin(tools.detokenize_text, ["--tokenizer_config", "tokenizer.yml"], tokenized,
                          monkeypatch) == (0, (CLI / "valid20.detok.de").read_bytes())


def test_space_and_character_tokenizers_round_trip(monkeypatch):
    text = "Datei  nicht\tgefunden \n\nOK\n".encode()
    assert run_with_stdin(tools.tokenize_text, ["--delimiter", "|"], text, monkeypatch) == (
        0, "Datei|nicht|gefunden\n\nOK\n".encode())
    character = ["--tokenizer_config", '{"type": "CharacterTokenizer"}']
    status, tokens = run_with_stdin(tools.tokenize_text, character, "ab c\n".encode(), monkeypatch)
    assert (status, tokens.decode()) == (0, "a b \u2581 c\n")
    assert run_with_stdin(tools.detokenize_text, character, tokens, monkeypatch) == (0, b"ab c\n")


def test_a_delimiter_that_is_not_utf8_is_printed_as_its_bytes(monkeypatch):
    """argv holds such bytes as lone surrogates (os.fsdecode); they were a traceback once."""
    delimiter = os.fsdecode(b"\xff")
    assert run_with_stdin(tools.tokenize_text, ["--delimiter", delimiter], b"a b\n", monkeypatch) == (
        0, b"a\xffb\n")


def test_merge_config_prints_what_opennmt_tf_prints(capsys, monkeypatch):
    monkeypatch.chdir(CLI)
    assert tools.merge_config(["base.yml", "override.yml"]) == 0
    assert capsys.readouterr().out == (CLI / "merged.yml").read_text(encoding="utf-8")


@pytest.mark.parametrize("command, argv, message", [
    ("build_vocab", ["--save_vocab", "{tmp}/v", "{tmp}/missing.txt"], "not found: {tmp}/missing.txt"),
    ("build_vocab", ["--save_vocab", "{tmp}/no/such/dir/v", str(DATA / "valid.en")], "{tmp}/no/such/dir/v"),
    ("build_vocab", ["--sentencepiece", "--min_frequency", "2", "--save_vocab", "{tmp}/v",
                     str(DATA / "valid.en")], "--min_frequency: not supported with --sentencepiece"),
    ("build_vocab", ["--sentencepiece", "vocab_size", "--save_vocab", "{tmp}/v", str(DATA / "valid.en")],
     "--sentencepiece: expected key=value, got 'vocab_size'"),
    ("build_vocab", ["--size_multiple", "0", "--save_vocab", "{tmp}/v"], "--size_multiple: must be at least 1"),
    ("build_vocab", ["--size", "-1", "--save_vocab", "{tmp}/v", str(DATA / "valid.en")],
     "argument --size: must be at least 0, got -1"),
    ("build_vocab", ["--sentencepiece", "--size", "99999999999", "--save_vocab", "{tmp}/v", str(DATA / "valid.en")],
     "argument --size: must be at most 2147483647"),
    ("build_vocab", ["--from_vocab", str(CLI / "tokenizer.yml"), "--from_format", "sentencepiece",
                     "--save_vocab", "{tmp}/v"], "line 1: expected piece<TAB>score"),
    ("tokenize_text", ["--tokenizer_config", '{"type": "OpenNMTTokenizer", "params": {"mode": '
                       '"aggressive", "bpe_dropout": 0.1}}'], "bpe_dropout: subword sampling"),
    ("tokenize_text", ["--tokenizer_config", "{tmp}/missing.yml"], "missing.yml not found"),
    ("detokenize_text", ["--tokenizer_config", '{"type": "Moses"}'], "Moses"),
    ("merge_config", ["{tmp}/missing.yml"], "{tmp}/missing.yml: No such file or directory"),
    ("merge_config", ["{tmp}/bad.yml"], "bad.yml: invalid YAML at line 2"),
])
def test_user_errors_are_one_line_with_status_2(command, argv, message, tmp_path, capsys, monkeypatch):
    (tmp_path / "bad.yml").write_text("a: 1\n b: [\n")
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"x\n"), encoding="utf-8"))
    status = getattr(tools, command)([a.replace("{tmp}", str(tmp_path)) for a in argv])
    err = capsys.readouterr().err
    assert status == 2, err
    assert err.count("\n") == 1 and err.startswith("error: ") and "Traceback" not in err
    assert message.replace("{tmp}", str(tmp_path)) in err


def test_python_m_opennmt_lite_onmt_runs_each_command_by_name(capsys, monkeypatch):
    from opennmt_lite.onmt import __main__ as by_name

    monkeypatch.chdir(CLI)
    assert by_name.main(["onmt-merge-config", "base.yml", "override.yml"]) == 0
    assert capsys.readouterr().out == (CLI / "merged.yml").read_text(encoding="utf-8")
    assert by_name.main(["onmt-train"]) == 2
    assert capsys.readouterr().err.startswith("usage: python -m opennmt_lite.onmt {onmt-main,")
    assert sorted(by_name.COMMANDS) == sorted(
        line.split(" = ")[0] for line in (FIXTURES.parents[1] / "pyproject.toml").read_text().splitlines()
        if line.startswith("onmt-"))
