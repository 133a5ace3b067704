"""The README stays true: the layer example (docs/layers.md) runs, and CI runs its test command."""

import contextlib
import io
import pathlib
import re

ROOT = pathlib.Path(__file__).parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
LAYERS = (ROOT / "docs" / "layers.md").read_text(encoding="utf-8")


def python_blocks():
    return re.findall(r"```python\n(.*?)```", LAYERS, flags=re.S)


def test_layer_example_runs_and_prints_what_it_says(monkeypatch):
    monkeypatch.chdir(ROOT)
    block = next(b for b in python_blocks() if "load_onmt_encoder" in b)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(block, "docs/layers.md", "exec"), {})
    assert out.getvalue().strip() == "(1, 3, 64)"


def test_quick_start_commands_exist():
    quick = README.split("## Quick start")[1].split("##")[0]
    commands = re.findall(r"^(python [^#\n]*?)\s*(?:#.*)?$", quick, flags=re.M)
    assert commands[:4] == ["python -m venv .venv && . .venv/bin/activate",
                        "python -m pip install -r requirements.txt",
                        "python run.py train --config configs/sample.yml",
                        "python -m pytest -q"]
    # The browser the page tests need is installed before the test line, as CI does.
    assert re.search(r"^sudo apt-get install -y chromium\s", quick, flags=re.M)
    # CI runs the README's test line itself, character for character, in a venv of its own.
    test_line = next(line for line in quick.splitlines() if line.startswith(commands[3]))
    ci_lines = (ROOT / ".ci" / "run").read_text().splitlines()
    assert any("-r requirements.txt" in line for line in ci_lines)
    assert any(re.match(r"python3? -m venv ", line) for line in ci_lines)
    assert any("apt-get install" in line and "chromium" in line for line in ci_lines)
    assert test_line in ci_lines
    assert (ROOT / "configs" / "sample.yml").exists()
