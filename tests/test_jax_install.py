"""The TensorFlow-free install: a virtual environment made from requirements-jax.txt alone, in
which `import tensorflow` fails, runs opennmt-lite from this checkout with KERAS_BACKEND=jax:
build-vocab, train 20 steps and resume to 30, infer, inspect --html. The checkpoint it wrote is
then exported on the TensorFlow install (this process's) to a SavedModel whose translations
equal the JAX infer's.

The environment is built once per requirements-jax.txt (and Python version) and kept, outside
the checkout, in $OPENNMT_LITE_VENV_CACHE (default ~/.cache/opennmt-lite/venvs), keyed by the
file's hash: CI pays for it once (about 2.5 minutes with pip's download cache warm, 1 GB), then
reuses it. The test's own cost is kept low: a 1-layer 32-unit model, 300 training lines,
300-piece SentencePiece models, 30 steps, 6 sentences translated.
"""

import fcntl
import hashlib
import json
import os
import pathlib
import platform
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest
import yaml

ROOT = pathlib.Path(__file__).parents[1]
REQUIREMENTS = ROOT / "requirements-jax.txt"
DATA = ROOT / "data"
SENTENCES = 6
MODEL = {"num_layers": 1, "num_units": 32, "num_heads": 2, "ffn_inner_dim": 64,
         "maximum_relative_position": 4, "dropout": 0.1, "attention_dropout": 0.1,
         "ffn_dropout": 0.1}


def cache_root():
    default = pathlib.Path(os.environ.get("XDG_CACHE_HOME") or pathlib.Path.home() / ".cache")
    return pathlib.Path(os.environ.get("OPENNMT_LITE_VENV_CACHE")
                        or default / "opennmt-lite" / "venvs")


def environment_key():
    """What the environment depends on: requirements-jax.txt's pins (not its comments) and the
    Python that runs it."""
    digest = hashlib.sha256(json.dumps(sorted(pins(REQUIREMENTS).items())).encode())
    digest.update(f"{platform.python_version()} {sys.base_prefix}".encode())
    return digest.hexdigest()[:16]


def jax_environment():
    """The Python of the cached environment, built from requirements-jax.txt if missing (under a
    lock: two test runs never build the same one at once; an unfinished one is rebuilt)."""
    root = cache_root()
    root.mkdir(parents=True, exist_ok=True)
    directory = root / f"jax-{environment_key()}"
    python, ready = directory / "bin" / "python", directory / "ready"
    with open(root / f"{directory.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not ready.exists():
            shutil.rmtree(directory, ignore_errors=True)
            subprocess.run([sys.executable, "-m", "venv", str(directory)], check=True, timeout=300)
            install = subprocess.run(
                [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                 "-r", str(REQUIREMENTS)], capture_output=True, text=True, timeout=1500)
            assert install.returncode == 0, install.stderr[-4000:]
            ready.write_text(REQUIREMENTS.read_text())
        ready.touch()  # (its time: when the environment was last used)
    remove_stale(root, keep=directory)
    return python


def remove_stale(root, keep, days=14):
    """Removes the environments of other requirements files unused for `days` (each 1 GB)."""
    import time

    for other in root.glob("jax-*"):
        ready = other / "ready"
        if other == keep or not other.is_dir():
            continue
        if not ready.exists() or time.time() - ready.stat().st_mtime > days * 86400:
            with open(root / f"{other.name}.lock", "w") as lock:
                try:
                    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:  # (being built or used right now)
                    continue
                shutil.rmtree(other, ignore_errors=True)


def jax_env():
    """The environment variables of a command run in the JAX environment: nothing of this
    process's packages (PYTHONPATH, a virtual environment, the user's site-packages)."""
    env = {key: value for key, value in os.environ.items()
           if key not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME", "KERAS_BACKEND")}
    return dict(env, KERAS_BACKEND="jax", JAX_PLATFORMS="cpu", PYTHONNOUSERSITE="1")


@pytest.fixture(scope="module")
def venv():
    return jax_environment()


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    """The config (a 1-layer model on 300 lines of the shipped corpus) and its files."""
    directory = tmp_path_factory.mktemp("jax_install")
    (directory / "data").mkdir()
    for name, lines in (("train.en", 300), ("train.de", 300), ("valid.en", SENTENCES)):
        text = (DATA / name).read_text(encoding="utf-8").splitlines()[:lines]
        (directory / "data" / name).write_text("\n".join(text) + "\n", encoding="utf-8")
    run = directory / "run"
    config = {
        "model_dir": str(run),
        "data": {
            "train_features_file": str(directory / "data" / "train.en"),
            "train_labels_file": str(directory / "data" / "train.de"),
            "source_vocabulary": str(run / "src-vocab.txt"),
            "target_vocabulary": str(run / "tgt-vocab.txt"),
            "source_tokenization": {"type": "sentencepiece", "model": str(run / "src.model"),
                                    "vocabulary_size": 300},
            "target_tokenization": {"type": "sentencepiece", "model": str(run / "tgt.model"),
                                    "vocabulary_size": 300},
        },
        "model": MODEL,
        "params": {"learning_rate": 2.0, "decay_params": {"warmup_steps": 10},
                   "label_smoothing": 0.1, "beam_width": 2, "maximum_decoding_length": 20},
        "train": {"batch_type": "tokens", "batch_size": 512, "effective_batch_size": 512,
                  "length_bucket_width": 1, "maximum_features_length": 40,
                  "maximum_labels_length": 40, "max_step": 20, "save_checkpoints_steps": 10,
                  "save_summary_steps": 10, "keep_checkpoint_max": 5, "seed": 7,
                  "xla_shapes": 2},  # (2 compiled train steps; the resumed run loads them)
        "eval": {"steps": 0},
    }
    (directory / "config.yml").write_text(yaml.safe_dump(config))
    (directory / "more_steps.yml").write_text(yaml.safe_dump({"train": {"max_step": 30}}))
    return {"dir": directory, "config": str(directory / "config.yml"), "run": run,
            "more_steps": str(directory / "more_steps.yml"),
            "source": str(directory / "data" / "valid.en")}


def run_py(python, *argv, env=None, timeout=600):
    """`run.py argv` of this checkout under `python`: the CompletedProcess."""
    return subprocess.run([str(python), str(ROOT / "run.py"), *map(str, argv)], cwd=str(ROOT),
                          env=env, capture_output=True, text=True, timeout=timeout)


def succeeded(completed):
    assert completed.returncode == 0, completed.stderr[-6000:]
    return completed


def one_error_line(completed):
    errors = [line for line in completed.stderr.splitlines() if line.startswith("error:")]
    assert completed.returncode == 2 and len(errors) == 1, completed.stderr[-3000:]
    assert "Traceback" not in completed.stderr
    return errors[0]


def pins(path):
    """{normalized name: version} of a requirements file's `name==version` lines."""
    found = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, version = line.split("==")
            found[re.sub(r"[-_.]+", "-", name).lower()] = version
    return found


def test_requirements_jax_pins_the_versions_of_requirements_txt_without_tensorflow():
    jax_pins, full_pins = pins(REQUIREMENTS), pins(ROOT / "requirements.txt")
    assert not [name for name in jax_pins if name.startswith("tensorflow")]  # (nor -text)
    shared = set(jax_pins) & set(full_pins)
    assert {"keras", "jax", "jaxlib", "numpy", "sentencepiece", "pyonmttok"} <= shared
    assert {name: jax_pins[name] for name in shared} == {name: full_pins[name] for name in shared}


# The steps run in this order (pytest keeps a module's order); each later one needs the earlier.

def test_tensorflow_cannot_be_imported_there(venv):
    for module in ("tensorflow", "tensorflow_text"):
        completed = subprocess.run([str(venv), "-c", f"import {module}"], env=jax_env(),
                                   capture_output=True, text=True, timeout=60)
        assert completed.returncode == 1
        assert f"No module named '{module}'" in completed.stderr
    listed = subprocess.run([str(venv), "-m", "pip", "list", "--format", "json"], env=jax_env(),
                            capture_output=True, text=True, timeout=120, check=True)
    names = {package["name"].lower() for package in json.loads(listed.stdout)}
    assert not {name for name in names if name.startswith("tensorflow")}, names
    assert {"keras", "jax", "sentencepiece"} <= names


def test_the_default_backend_without_tensorflow_is_one_line(venv, project):
    env = dict(jax_env())
    del env["KERAS_BACKEND"]
    env["KERAS_HOME"] = str(project["dir"] / "no_keras_home")  # (no keras.json naming a backend)
    line = one_error_line(run_py(venv, "build-vocab", "--config", project["config"], env=env))
    assert "TensorFlow is not installed" in line and "KERAS_BACKEND=jax" in line


def test_build_vocab(venv, project):
    completed = succeeded(run_py(venv, "build-vocab", "--config", project["config"], env=jax_env()))
    assert "Keras backend: jax (jax " in completed.stderr
    for name in ("src.model", "tgt.model"):
        assert (project["run"] / name).stat().st_size > 0
    vocabulary = (project["run"] / "src-vocab.txt").read_text(encoding="utf-8").splitlines()
    assert vocabulary[:3] == ["<blank>", "<s>", "</s>"] and len(vocabulary) == 302


def test_train_20_steps_then_resume_to_30(venv, project):
    from opennmt_lite.checkpointing import store
    from opennmt_lite.checkpointing.training_checkpoint import GROUPS_DONE

    import tensorflow as tf

    succeeded(run_py(venv, "train", "--config", project["config"], env=jax_env()))
    first = store.latest(str(project["run"]))
    assert first is not None and first.endswith("ckpt-20"), first
    resumed = succeeded(run_py(venv, "train", "--config", project["config"], project["more_steps"],
                               env=jax_env()))
    assert "ckpt-20" in resumed.stderr  # (restored from it)
    # TensorBoard's scalars, written without TensorFlow
    assert list(project["run"].glob("events.out.tfevents.*"))
    last = store.latest(str(project["run"]))
    assert last.endswith("ckpt-30"), last
    before, after = tf.train.load_checkpoint(first), tf.train.load_checkpoint(last)
    names = dict(tf.train.list_variables(last))
    (groups_done,) = [name for name in names if name.startswith(GROUPS_DONE)]
    assert int(before.get_tensor(groups_done)) == 20 and int(after.get_tensor(groups_done)) == 30
    embeddings = [name for name in names if "embedding" in name and "/m/" not in name
                  and "/v/" not in name]
    assert embeddings and all(
        not np.array_equal(before.get_tensor(n), after.get_tensor(n)) for n in embeddings)


def test_infer(venv, project):
    predictions = project["dir"] / "predictions.txt"
    succeeded(run_py(venv, "infer", "--config", project["config"],
                     "--features_file", project["source"], "--predictions_file", predictions,
                     "--with_scores", env=jax_env()))
    lines = predictions.read_text(encoding="utf-8").splitlines()
    assert len(lines) == SENTENCES and all(" ||| " in line for line in lines)


def test_inspect_html(venv, project):
    page = project["dir"] / "inspect.html"
    completed = succeeded(run_py(venv, "inspect", "--config", project["config"], "--sentence",
                                 "Hello world .", "--html", page, env=jax_env()))
    assert "ckpt-30" in completed.stdout  # (the weights it shows)
    text = page.read_text(encoding="utf-8")
    data = json.loads(re.search(r'<script type="application/json" id="inspect-data">(.*?)</script>',
                                text, re.S).group(1))
    assert data and "ckpt-30" in json.dumps(data)


def test_what_needs_tensorflow_says_so(venv, project):
    line = one_error_line(run_py(venv, "export", "--config", project["config"], "--output",
                                 project["dir"] / "refused", env=jax_env()))
    assert "export --format saved_model needs TensorFlow" in line
    assert not (project["dir"] / "refused").exists()
    line = one_error_line(run_py(venv, "serve", "--config", project["config"], env=jax_env()))
    assert line.startswith("error: serve needs starlette, uvicorn, prometheus_client")


def test_score_evaluate_average_checkpoints_and_ctranslate2_export(venv, project):
    directory = project["dir"]
    lines = (directory / "predictions.txt").read_text(encoding="utf-8").splitlines()
    plain = directory / "plain.txt"
    plain.write_text("".join(line.split(" ||| ", 1)[1] + "\n" for line in lines), encoding="utf-8")
    scores = directory / "scores.txt"
    succeeded(run_py(venv, "score", "--config", project["config"], "--features_file",
                     project["source"], "--predictions_file", plain, "--output_file", scores,
                     env=jax_env()))
    # The same file scored by the TensorFlow backend (this process) from the same checkpoint.
    import run

    tf_scores = directory / "tf_scores.txt"
    assert run.main(["score", "--config", project["config"], "--features_file", project["source"],
                     "--predictions_file", str(plain), "--output_file", str(tf_scores)]) == 0
    jax_lines = scores.read_text(encoding="utf-8").splitlines()
    tf_lines = tf_scores.read_text(encoding="utf-8").splitlines()
    assert len(jax_lines) == len(tf_lines) == SENTENCES
    for ours, theirs in zip(jax_lines, tf_lines):
        (nll, pieces), (tf_nll, tf_pieces) = ours.split(" ||| "), theirs.split(" ||| ")
        assert pieces == tf_pieces and 0 < float(nll) and abs(float(nll) - float(tf_nll)) < 1e-4
    evaluated = succeeded(run_py(venv, "evaluate", "--predictions_file", plain,
                                 "--references_file", plain, env=jax_env()))
    assert evaluated.stdout.splitlines()[:2] == ["BLEU: 100.0", "chrF: 100.0"]
    succeeded(run_py(venv, "average_checkpoints", "--config", project["config"], "--max_count",
                     "2", "--output_dir", directory / "avg", env=jax_env()))
    assert list((directory / "avg").glob("ckpt-30.index"))
    succeeded(run_py(venv, "export", "--config", project["config"], "--format", "ctranslate2",
                     "--output", directory / "ct2", env=jax_env()))
    assert (directory / "ct2" / "model.bin").stat().st_size > 0


def test_the_jax_checkpoint_exports_on_tensorflow_to_the_same_translations(project):
    """The SavedModel (exported here, TensorFlow backend) translates the raw sentences as the
    JAX infer did: the same pieces detokenized, log-probabilities within 1e-4."""
    import tensorflow as tf
    import tensorflow_text  # noqa: F401 (registers the SentencePiece op of translate_text)

    import run

    output = project["dir"] / "saved_model"
    assert run.main(["export", "--config", project["config"], "--output", str(output)]) == 0
    model = tf.saved_model.load(str(output))
    sentences = pathlib.Path(project["source"]).read_text(encoding="utf-8").splitlines()
    result = model.signatures["translate_text"](text=tf.constant(sentences))
    translations = [t.decode("utf-8") for t in result["translations"].numpy()[:, 0]]
    log_probs = result["log_probs"].numpy()[:, 0]
    jax_lines = (project["dir"] / "predictions.txt").read_text(encoding="utf-8").splitlines()
    for translation, log_prob, line in zip(translations, log_probs, jax_lines):
        score, text = line.split(" ||| ", 1)
        assert translation == text
        assert abs(float(score) - float(log_prob)) < 1e-4, (score, log_prob)
