"""bench/bench_serve.py's model options, without starting a server or building a model: the
argument checks, and the decoding length `--base-model` forces."""

import importlib.util
import os
import statistics
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def bench_serve():
    spec = importlib.util.spec_from_file_location("bench_serve",
                                                  os.path.join(ROOT, "bench", "bench_serve.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("arguments, message", [
    (["--sample-model", "--base-model"], "not allowed with argument"),
    (["--base-model", "--ct2-quantization", "int4"], "invalid choice: 'int4'"),
])
def test_refused_arguments(arguments, message, monkeypatch, capsys):
    module = bench_serve()
    monkeypatch.setattr(sys, "argv", ["bench_serve.py"] + arguments)
    with pytest.raises(SystemExit) as exit_info:
        module.main()
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_reference_length_is_the_mean_of_test_de_in_pieces():
    import pyonmttok

    model = os.path.join("tests", "fixtures", "ct2_models", "postnorm", "tgt.model")
    tokenizer = pyonmttok.Tokenizer("none", sp_model_path=os.path.join(ROOT, model))
    with open(os.path.join(ROOT, "data", "test.de"), encoding="utf-8") as f:
        lengths = [len(tokenizer.tokenize(line.strip())[0]) for line in f if line.strip()]
    expected = round(statistics.mean(lengths))
    assert 5 < expected < 60  # (sentences, not characters or words lost)
    assert bench_serve().reference_length(model) == expected
