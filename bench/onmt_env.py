"""The OpenNMT-tf 2.32 virtual environment of the benchmarks.

    python bench/onmt_env.py            # create it if needed, print its python

OpenNMT-tf 2.32 needs TensorFlow 2.13 (and Keras 2), which cannot live next to TensorFlow 2.21 /
Keras 3, so it runs in its own venv, by default `bench/.venv-onmt/` (git-ignored), created on
first use with

    python -m venv bench/.venv-onmt
    bench/.venv-onmt/bin/pip install "tensorflow-cpu==2.13.*" "opennmt-tf==2.32.0"

`ONMT_PYTHON=/path/to/python` uses an existing interpreter instead (it must import opennmt 2.32.0),
e.g. `ONMT_PYTHON=/work/onmt-venv/bin/python` during development.
"""

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VENV_DIR = os.path.join(ROOT, "bench", ".venv-onmt")
REQUIREMENTS = ("tensorflow-cpu==2.13.*", "opennmt-tf==2.32.0")
EXPECTED_VERSION = "2.32.0"
_MARKER = ".bench-ok"
_PROBE = (
    "import json, opennmt, tensorflow as tf; "
    "print(json.dumps({'opennmt': opennmt.__version__, 'tensorflow': tf.__version__}))"
)


def _log(message):
    print(f"[onmt_env] {message}", file=sys.stderr, flush=True)


def probe(python):
    """{'opennmt': version, 'tensorflow': version} of an interpreter, or None if it cannot import
    them."""
    if not os.path.exists(python):
        return None
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONWARNINGS="ignore")
    try:
        output = subprocess.run(
            [python, "-c", _PROBE], capture_output=True, text=True, env=env, timeout=600
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if output.returncode != 0:
        return None
    for line in reversed(output.stdout.splitlines()):
        try:
            return json.loads(line)
        except ValueError:
            continue
    return None


def ensure_onmt_python(create=True):
    """Path of a python that runs OpenNMT-tf 2.32 (see the module docstring); creates the venv
    if needed and allowed. Raises RuntimeError when none can be had."""
    override = os.environ.get("ONMT_PYTHON")
    if override:
        versions = probe(override)
        if versions is None:
            raise RuntimeError(f"ONMT_PYTHON={override} cannot import opennmt and tensorflow")
        if versions["opennmt"] != EXPECTED_VERSION:
            raise RuntimeError(
                f"ONMT_PYTHON={override} has OpenNMT-tf {versions['opennmt']}, "
                f"expected {EXPECTED_VERSION}"
            )
        return override
    python = os.path.join(VENV_DIR, "bin", "python")
    marker = os.path.join(VENV_DIR, _MARKER)
    if os.path.exists(marker) and os.path.exists(python):
        return python
    versions = probe(python)
    if versions is None or versions["opennmt"] != EXPECTED_VERSION:
        if not create:
            raise RuntimeError(f"no OpenNMT-tf {EXPECTED_VERSION} venv at {VENV_DIR}")
        if not os.path.exists(python):
            _log(f"creating {VENV_DIR} (python {sys.version.split()[0]})")
            subprocess.run([sys.executable, "-m", "venv", VENV_DIR], check=True)
        _log("installing " + " ".join(REQUIREMENTS) + " (a few minutes)")
        subprocess.run([python, "-m", "pip", "install", "--quiet", "--upgrade", "pip"], check=True)
        subprocess.run([python, "-m", "pip", "install", *REQUIREMENTS], check=True)
        versions = probe(python)
        if versions is None or versions["opennmt"] != EXPECTED_VERSION:
            raise RuntimeError(f"{VENV_DIR}: OpenNMT-tf {EXPECTED_VERSION} not importable "
                               f"after installation ({versions})")
    with open(marker, "w", encoding="utf-8") as stream:
        json.dump(versions, stream)
    return python


def onmt_versions(python):
    """Versions recorded for the results (probes the interpreter)."""
    return probe(python) or {}


if __name__ == "__main__":
    import argparse

    # Parsed only so that --help explains instead of creating the venv.
    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()
    print(ensure_onmt_python())
