"""The package as a user installs it: `pip install .` (a wheel, not editable) into a fresh
virtual environment, then its console commands run from a directory outside the checkout, with
the checkout not on PYTHONPATH.

The virtual environment sees the already-installed requirements through a `.pth` file naming
this interpreter's site-packages directories (and pip installs with --no-deps --no-index), so
nothing is downloaded twice. A `.pth` rather than `venv --system-site-packages`: the latter
shows the *base* interpreter's packages, not those of a virtual environment the tests may run
in. One environment for the whole module.
"""

import os
import pathlib
import runpy
import shutil
import subprocess
import sys
import venv

import pytest
import yaml

from training_helpers import TINY_MODEL

ROOT = pathlib.Path(__file__).parents[1]
COMMANDS = ("opennmt-lite", "onmt-main", "onmt-build-vocab", "onmt-tokenize-text",
            "onmt-detokenize-text", "onmt-merge-config")


class Installed:
    """The virtual environment with the package installed, and a working directory outside the
    checkout."""

    def __init__(self, root):
        self.bin = root / "venv" / "bin"
        self.work = root / "work"
        self.work.mkdir()
        self.env = {name: value for name, value in os.environ.items()
                    if name not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
        self.env["PATH"] = f"{self.bin}{os.pathsep}{os.environ.get('PATH', '')}"
        self.env["TF_CPP_MIN_LOG_LEVEL"] = "2"

    def run(self, *argv, stdin=None, timeout=240):
        """The finished process of `argv` (a console command of the environment) in `work`."""
        return subprocess.run([str(self.bin / argv[0]), *map(str, argv[1:])], cwd=self.work,
                              env=self.env, input=stdin, capture_output=True, text=True,
                              timeout=timeout)

    def ok(self, *argv, stdin=None):
        result = self.run(*argv, stdin=stdin)
        assert result.returncode == 0, f"{argv}: {result.stderr[-3000:]}"
        return result.stdout


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    root = tmp_path_factory.mktemp("package")
    # What the wheel is built from, copied: the build leaves nothing in the checkout, and
    # whatever pyproject.toml forgets to package is missing from the wheel, not found here.
    source = root / "source"
    shutil.copytree(ROOT / "opennmt_lite", source / "opennmt_lite",
                    ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    venv.create(root / "venv", with_pip=False)
    site_packages = next((root / "venv" / "lib").glob("python3*/site-packages"))
    outer = [p for p in sys.path if os.path.basename(p) in ("site-packages", "dist-packages")
             and os.path.isdir(p)]
    (site_packages / "outer_environment.pth").write_text(
        "".join(f"import site; site.addsitedir({path!r})\n" for path in outer))
    python = root / "venv" / "bin" / "python"
    result = subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--no-deps",
                             "--no-build-isolation", "--no-index", "--disable-pip-version-check",
                             str(source)], cwd=root, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    return Installed(root)


def test_only_the_package_is_installed_and_imported_from_the_environment(installed):
    where = installed.ok("python", "-c", "import opennmt_lite.inspection.html as h; print(h.__file__)")
    package = pathlib.Path(where.strip()).parents[1]
    assert package.parent.name == "site-packages" and str(package).startswith(str(installed.bin.parent))
    assert (package / "inspection" / "page.css").read_text() == (
        ROOT / "opennmt_lite" / "inspection" / "page.css").read_text()
    assert (package / "inspection" / "page.js").is_file()
    top_level = sorted(p.name for p in package.parent.iterdir()
                       if not p.name.endswith((".dist-info", ".pth")) and p.name != "__pycache__")
    assert top_level == ["opennmt_lite"]
    for command in COMMANDS:  # (onmt-main: opennmt_lite.onmt.main's run)
        assert (installed.bin / command).is_file(), command


def test_help_of_the_commands(installed):
    out = installed.ok("opennmt-lite", "--help")
    assert out.startswith("usage: opennmt-lite ")
    for command in ("build-vocab", "train", "infer", "export", "inspect"):
        assert command in out
    assert "--save_vocab SAVE_VOCAB" in installed.ok("onmt-build-vocab", "--help")
    out = installed.ok("onmt-main", "--help")
    assert out.startswith("usage: onmt-main ") and "--model_type" in out
    # OpenNMT-tf's commands by module, beside OpenNMT-tf's own scripts (README: Installing)
    (installed.work / "a.yml").write_text("train: {batch_size: 8}\n")
    assert installed.ok("python", "-m", "opennmt_lite.onmt", "onmt-merge-config", "a.yml") == (
        "train:\n  batch_size: 8\n\n")


def test_python_m_opennmt_lite_is_the_command_line(monkeypatch, capsys):
    """`python -m opennmt_lite` (here in this process: the installed one is the same file)."""
    monkeypatch.setattr(sys, "argv", ["opennmt_lite", "--help"])
    with pytest.raises(SystemExit) as exit:
        runpy.run_module("opennmt_lite", run_name="__main__", alter_sys=True)
    assert exit.value.code == 0
    assert capsys.readouterr().out.startswith("usage: python -m opennmt_lite ")


def test_opennmt_tf_helper_commands(installed):
    work = installed.work
    (work / "a.yml").write_text("params: {optimizer_params: {beta_1: 0.8}, beam_width: 2}\ntrain: {batch_size: 8}\n")
    (work / "b.yml").write_text("params: {optimizer_params: {epsilon: 1.0e-7}}\ntrain: {max_step: 5}\n")
    merged = yaml.safe_load(installed.ok("onmt-merge-config", "a.yml", "b.yml"))
    assert merged == {"params": {"optimizer_params": {"epsilon": 1.0e-7}, "beam_width": 2},
                      "train": {"batch_size": 8, "max_step": 5}}
    config = '{"type": "OpenNMTTokenizer", "params": {"mode": "aggressive", "joiner_annotate": true}}'
    tokens = installed.ok("onmt-tokenize-text", "--tokenizer_config", config, stdin="Datei (neu)!\n")
    assert tokens == "Datei (￭ neu ￭) ￭!\n"
    assert installed.ok("onmt-detokenize-text", "--tokenizer_config", config, stdin=tokens) == "Datei (neu)!\n"


def test_train_export_and_inspect_from_the_installed_commands(installed):
    """A word vocabulary (both sides) by onmt-build-vocab, a few training steps, a SavedModel,
    the page."""
    work = installed.work
    for name in ("train.en", "train.de"):
        with open(ROOT / "data" / name, encoding="utf-8") as stream:
            (work / name).write_text("".join(next(stream) for _ in range(200)), encoding="utf-8")
    installed.ok("onmt-build-vocab", "--size_multiple", "8", "--save_vocab", "vocab.txt",
                 "train.en", "train.de")
    assert (work / "vocab.txt").read_text().startswith("<blank>\n<s>\n</s>\n")
    config = {
        "model_dir": "run",
        "data": {"train_features_file": "train.en", "train_labels_file": "train.de",
                 "source_vocabulary": "vocab.txt", "target_vocabulary": "vocab.txt"},
        "model": TINY_MODEL,
        "params": {"learning_rate": 2.0, "decay_params": {"warmup_steps": 10}},
        "train": {"batch_type": "tokens", "batch_size": 256, "max_step": 1,
                  "save_checkpoints_steps": 1, "maximum_features_length": 30,
                  "maximum_labels_length": 30},
    }
    (work / "tiny.yml").write_text(yaml.safe_dump(config))
    installed.ok("opennmt-lite", "train", "--config", "tiny.yml")
    installed.ok("opennmt-lite", "export", "--config", "tiny.yml", "--output", "exported")
    assert (work / "exported" / "saved_model.pb").is_file()
    installed.ok("opennmt-lite", "inspect", "--config", "tiny.yml", "--sentence", "Open file",
                 "--html", "page.html")
    page = (work / "page.html").read_text(encoding="utf-8")
    css = (ROOT / "opennmt_lite" / "inspection" / "page.css").read_text(encoding="utf-8")
    assert css in page
    # OpenNMT-tf's command line: the catalog's tiny model, no model section, then its export
    # from the model_description.py the run left in model_dir.
    onmt_config = dict(config, model_dir="onmt_run")
    del onmt_config["model"]
    (work / "onmt.yml").write_text(yaml.safe_dump(onmt_config))
    installed.ok("onmt-main", "--model_type", "TransformerTiny", "--config", "onmt.yml", "train")
    assert (work / "onmt_run" / "model_description.py").is_file()
    installed.ok("onmt-main", "--config", "onmt.yml", "export", "--output_dir", "onmt_export")
    assert (work / "onmt_export" / "saved_model.pb").is_file()
