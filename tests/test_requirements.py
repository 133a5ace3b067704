"""Every module the tests import is the standard library, the project, or a declared requirement.

A fresh virtual environment made from requirements.txt alone must run the suite: a package that
happens to be installed on the developer's machine (scipy once was) is not enough. The check reads
the tests' own import statements and the Python code they hand to a subprocess (`python -c ...`),
maps each top-level module to the distribution that installs it, and looks that distribution up in
requirements.txt and in pyproject.toml (dependencies, the `test` and `tflite` extras).
"""

import ast
import functools
import importlib.metadata
import pathlib
import re
import sys
import tomllib

import pytest

ROOT = pathlib.Path(__file__).parents[1]
TESTS = ROOT / "tests"

# `opennmt` is the stand-in package that opennmt_lite/onmt/model_file.py puts in sys.modules while
# an OpenNMT-tf model.py runs: the tests' model.py texts import it, and it is the project's own.
STAND_INS = {"opennmt"}


def normalized(name):
    """A distribution name as PEP 503 compares them: `PyYAML` and `pyyaml`, `ai_edge` and `ai-edge`."""
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_name(line):
    """`numpy==2.4.6  # why` -> 'numpy'; comments and blank lines -> None."""
    line = line.split("#", 1)[0].strip()
    if not line:
        return None
    return normalized(re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", line).group(0))


def requirements_txt():
    text = (ROOT / "requirements.txt").read_text(encoding="utf-8")
    return {name for name in map(requirement_name, text.splitlines()) if name}


def pyproject_requirements():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    lines = list(project["dependencies"])
    for extra in project["optional-dependencies"].values():
        lines += extra
    return {requirement_name(line) for line in lines}


def project_modules():
    """Top-level names that resolve to files of this repository: the package, run.py, the tests'
    helper modules, bench/ scripts."""
    names = {"opennmt_lite", "run", "bench"} | STAND_INS
    for folder in (ROOT, TESTS, ROOT / "bench"):
        names |= {path.stem for path in folder.glob("*.py")}
    return names


def written_by_the_tests(tree):
    """Modules a test writes itself before importing them: a `tmp_path / "name.py"` or
    `tmp_path / "name"` path in the same file."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            if isinstance(node.right, ast.Constant) and isinstance(node.right.value, str):
                names.add(node.right.value.removesuffix(".py"))
    return names


def imported_modules(tree):
    """Top-level modules imported by a module's statements, and by the Python code in its string
    constants (what it runs with `python -c`), with the line of each."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name.split(".")[0], node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            found.append((node.module.split(".")[0], node.lineno))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and "import" in node.value:
            try:
                code = ast.parse(node.value)
            except SyntaxError:
                continue  # prose, a config, a template: not code
            found += [(name, node.lineno) for name, _ in imported_modules(code)]
    return found


@functools.cache
def installed_distributions():
    return importlib.metadata.packages_distributions()


def distributions_of(module):
    return {normalized(d) for d in installed_distributions().get(module, ())}


def undeclared(paths, declared_txt, declared_toml):
    """One line per import in `paths` that neither the standard library, the project nor a
    declared distribution provides."""
    ours, standard = project_modules(), sys.stdlib_module_names
    problems = []
    for path in paths:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        own = ours | written_by_the_tests(tree)
        for module, line in imported_modules(tree):
            if module in standard or module in own or module == "__future__":
                continue
            where = f"{path.name}:{line}: {module}"
            distributions = distributions_of(module)
            if not distributions:
                problems.append(f"{where} is not installed, so no requirement provides it")
            elif not distributions & declared_txt:
                problems.append(f"{where} comes from {sorted(distributions)}, not in requirements.txt")
            elif not distributions & declared_toml:
                problems.append(f"{where} comes from {sorted(distributions)}, not in pyproject.toml")
    return problems


def test_every_module_a_test_imports_is_declared():
    problems = undeclared(sorted(TESTS.glob("*.py")), requirements_txt(), pyproject_requirements())
    assert not problems, "\n".join(problems)


def test_the_check_reports_what_is_undeclared(tmp_path):
    """The walk sees a top-level import, a nested one and one inside `python -c` code, skips a
    module the test writes itself, and reports a package missing from either file or from the
    environment."""
    missing = "no_such_" + "module_anywhere"  # spelled in two parts: this file is checked too
    source = ("import os\nimport numpy\n\ndef f(tmp_path):\n    (tmp_path / 'helper.py').write_text('')\n"
              "    import helper\n    from yaml import safe_load\n\n"
              f"CODE = 'import json, {missing}\\nprint(1)'\n")
    assert dict(imported_modules(ast.parse(source))) == {
        "os": 1, "numpy": 2, "helper": 6, "yaml": 7, "json": 9, missing: 9}
    path = tmp_path / "test_fake.py"
    path.write_text(source)
    assert undeclared([path], {"numpy", "pyyaml"}, {"numpy"}) == [
        "test_fake.py:7: yaml comes from ['pyyaml'], not in pyproject.toml",
        f"test_fake.py:9: {missing} is not installed, so no requirement provides it"]
    assert undeclared([path], {"pyyaml"}, {"numpy", "pyyaml"})[0] == (
        "test_fake.py:2: numpy comes from ['numpy'], not in requirements.txt")


@pytest.mark.parametrize("line, name", [("PyYAML==6.0.3", "pyyaml"), ("ai-edge-litert==2.3.0", "ai-edge-litert"),
                                        ("# a comment", None), ("tensorflow~=2.21.0  # why", "tensorflow"),
                                        ("Pillow>=13,<14", "pillow")])
def test_requirement_names(line, name):
    assert requirement_name(line) == name
