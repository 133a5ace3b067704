"""Choosing the Keras backend (opennmt_lite/keras_backend.py): the one in use is logged at
start-up; an unknown KERAS_BACKEND is one line, exit status 2, before Keras is imported; on the
JAX backend, what needs TensorFlow (SavedModel and TFLite export, multi-worker TF_CONFIG,
OpenNMT-tf's command line, export on best to a SavedModel) says so in one line, exit status 2,
even where TensorFlow is installed (this install), and nothing imports TensorFlow on the way.
(tests/test_jax_install.py runs the same on an install without TensorFlow.)"""

import os
import pathlib
import subprocess
import sys

import pytest

from conftest import ONMT_FIXTURE
from opennmt_lite import keras_backend

ROOT = pathlib.Path(__file__).parents[1]
CONFIG = str(ONMT_FIXTURE.parent / "onmt_fixture.yml")
# Run in the child before run.py: TensorFlow's import fails loudly, so that a command that
# imports it on the JAX backend shows as a traceback (exit status 1), not as a pass.
NO_TENSORFLOW = ("import runpy, sys; sys.modules['tensorflow'] = None; "
                 "sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')")


def command(argv, backend="jax", block_tensorflow=True, **env):
    """(exit status, stderr) of `run.py argv` in a child process with KERAS_BACKEND=backend."""
    environ = dict(os.environ, KERAS_BACKEND=backend, JAX_PLATFORMS="cpu", **env)
    prefix = [sys.executable, "-c", NO_TENSORFLOW] if block_tensorflow else [sys.executable]
    completed = subprocess.run(prefix + [str(ROOT / "run.py"), *map(str, argv)], cwd=str(ROOT),
                               env=environ, capture_output=True, text=True, timeout=300)
    return completed.returncode, completed.stderr


def one_line(code, err):
    assert code == 2, err[-3000:]
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "Traceback" not in err, err[-3000:]
    return lines[0]


@pytest.mark.parametrize("backend", ["torch", "numpy", "tensorflw"])
def test_unknown_backend_is_one_line(backend):
    line = one_line(*command(["infer", "--config", CONFIG, "--features_file", "x"], backend))
    assert line == (f"error: KERAS_BACKEND={backend}: opennmt-lite runs on Keras' 'tensorflow' "
                    "or 'jax' backend")


def test_backend_logged_at_start_up(tmp_path):
    sentences = tmp_path / "source.txt"
    sentences.write_text("Ein Haus .\n")
    code, err = command(["evaluate", "--predictions_file", sentences, "--references_file",
                         sentences])
    assert code == 0, err[-3000:]
    assert "INFO Keras backend: jax (jax " in err and ", keras 3." in err


@pytest.mark.parametrize("argv, what", [
    (["export", "--config", CONFIG, "--output", "{tmp}/out"], "export --format saved_model"),
    (["export", "--config", CONFIG, "--output", "{tmp}/out", "--format", "tflite"],
     "export --format tflite"),
    (["train", "--config", CONFIG], "multi-worker training (TF_CONFIG is set)"),
])
def test_what_needs_tensorflow_says_so_on_jax(argv, what, tmp_path):
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    env = {"TF_CONFIG": '{"cluster": {"worker": ["localhost:1", "localhost:2"]}, '
                        '"task": {"type": "worker", "index": 0}}'} if argv[0] == "train" else {}
    line = one_line(*command(argv, **env))
    assert line.startswith(f"error: {what} needs TensorFlow (this process runs Keras' jax "
                           "backend): run it with KERAS_BACKEND=tensorflow"), line
    assert not (tmp_path / "out").exists()


def test_onmt_main_needs_tensorflow(tmp_path):
    completed = subprocess.run(
        [sys.executable, "-m", "opennmt_lite.onmt", "onmt-main", "--config", CONFIG, "--model_type",
         "TransformerTiny", "infer", "--features_file", "x"], cwd=str(ROOT),
        env=dict(os.environ, KERAS_BACKEND="jax", JAX_PLATFORMS="cpu"), capture_output=True,
        text=True, timeout=300)
    line = one_line(completed.returncode, completed.stderr)
    assert "onmt-main (OpenNMT-tf's command line) needs TensorFlow" in line


def test_selected_backend_follows_keras_json_then_the_variable(tmp_path, monkeypatch):
    """Before Keras is imported: KERAS_BACKEND, else keras.json's "backend", else tensorflow."""
    monkeypatch.delitem(sys.modules, "keras")
    monkeypatch.setenv("KERAS_HOME", str(tmp_path))
    monkeypatch.delenv("KERAS_BACKEND", raising=False)
    assert keras_backend.selected() == "tensorflow"
    (tmp_path / "keras.json").write_text('{"backend": "jax", "floatx": "float32"}')
    assert keras_backend.selected() == "jax"
    monkeypatch.setenv("KERAS_BACKEND", "tensorflow")
    assert keras_backend.selected() == "tensorflow"
    (tmp_path / "keras.json").write_text("{not json")
    monkeypatch.delenv("KERAS_BACKEND")
    assert keras_backend.selected() == "tensorflow"


# The modules that are TensorFlow's own: the TensorFlow backend's decoding loop and train step,
# SavedModel and TFLite export (and the int8 weights of TFLite). Every other module of the
# package imports without TensorFlow (what it needs of TensorFlow, it imports where it uses it).
TENSORFLOW_MODULES = {
    "opennmt_lite.inference.decoding", "opennmt_lite.training.step",
    "opennmt_lite.export.saved_model", "opennmt_lite.export.tflite",
    "opennmt_lite.export.int8_weights",
    # taggers and classifiers export to a SavedModel only
    "opennmt_lite.export.encoder_models",
}
IMPORT_ALL = """
import importlib, json, sys, traceback
sys.modules["tensorflow"] = None
failed = {}
for name in json.loads(sys.argv[1]):
    try:
        importlib.import_module(name)
    except ImportError as error:
        failed[name] = "".join(traceback.format_exception_only(error)).strip()
print(json.dumps(failed))
"""


def package_modules():
    names = []
    for path in sorted((ROOT / "opennmt_lite").rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


def test_every_module_but_tensorflows_own_imports_without_tensorflow():
    import json

    names = [name for name in package_modules() if name not in TENSORFLOW_MODULES
             and name != "opennmt_lite.__main__"]
    completed = subprocess.run([sys.executable, "-c", IMPORT_ALL, json.dumps(names)],
                               cwd=str(ROOT), capture_output=True, text=True, timeout=300,
                               env=dict(os.environ, KERAS_BACKEND="jax", JAX_PLATFORMS="cpu"))
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert json.loads(completed.stdout.strip().splitlines()[-1]) == {}
    assert len(names) > 100


def test_tagger_export_on_jax_is_one_line(tmp_path):
    """A tagger's SavedModel needs TensorFlow: refused before anything is built (its training on
    JAX: tests/test_jax_other_models.py)."""
    (tmp_path / "train.txt").write_text("Paris is big\n")
    (tmp_path / "train.tags").write_text("S-CAP O O\n")
    (tmp_path / "src.txt").write_text("<blank>\n<s>\n</s>\nParis\nis\nbig\n")
    (tmp_path / "tags.txt").write_text("O\nS-CAP\n")
    config = tmp_path / "tagger.yml"
    config.write_text(
        f"model_dir: {tmp_path / 'run'}\n"
        f"data: {{train_features_file: {tmp_path / 'train.txt'}, train_labels_file: "
        f"{tmp_path / 'train.tags'}, source_vocabulary: {tmp_path / 'src.txt'}, "
        f"target_vocabulary: {tmp_path / 'tags.txt'}}}\n"
        "model: {type: sequence_tagger, num_layers: 1, num_units: 8, num_heads: 2, "
        "ffn_inner_dim: 8}\n"
        "train: {max_step: 2, batch_size: 64}\n")
    line = one_line(*command(["export", "--config", config, "--output", tmp_path / "out"]))
    assert line.startswith("error: export --format saved_model needs TensorFlow"), line
    assert not (tmp_path / "out").exists()
