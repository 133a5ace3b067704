"""Which Keras backend computes (TensorFlow or JAX), read without importing Keras or TensorFlow.

Keras picks its backend once, when it is first imported: the KERAS_BACKEND environment
variable, else the "backend" of Keras' keras.json, else "tensorflow". opennmt-lite runs on two of
them: "tensorflow" (the default; an install from requirements.txt) and "jax" (an install from
requirements.txt or, without TensorFlow, from requirements-jax.txt). What needs TensorFlow
itself (SavedModel and TFLite export, multi-worker training, OpenNMT-tf's command line) calls
`require_tensorflow`, which says so in one line (a UserError, exit status 2) on the JAX side.
"""

import importlib.metadata
import importlib.util
import json
import os
import sys

from opennmt_lite.errors import EnvironmentVariableError, UserError

SUPPORTED = ("tensorflow", "jax")


def _keras_json_backend():
    """The "backend" of Keras' keras.json (in $KERAS_HOME, else ~/.keras), or None."""
    directory = os.environ.get("KERAS_HOME") or os.path.join(os.path.expanduser("~"), ".keras")
    try:
        with open(os.path.join(directory, "keras.json"), encoding="utf-8") as f:
            value = json.load(f).get("backend")
    except (OSError, ValueError, AttributeError):
        return None
    return value if isinstance(value, str) else None


def selected():
    """The backend Keras uses in this process: Keras' own answer once it is imported, else the
    one it will pick (KERAS_BACKEND, keras.json, "tensorflow")."""
    keras = sys.modules.get("keras")
    if keras is not None and hasattr(keras, "backend"):
        return keras.backend.backend()
    return os.environ.get("KERAS_BACKEND") or _keras_json_backend() or "tensorflow"


def tensorflow_installed():
    """Whether TensorFlow can be imported (found, not imported)."""
    if "tensorflow" in sys.modules:
        return sys.modules["tensorflow"] is not None
    return importlib.util.find_spec("tensorflow") is not None


def check():
    """The backend's name, once it is known to be one opennmt-lite runs on and installed;
    otherwise an EnvironmentVariableError (one line)."""
    name = selected()
    if name not in SUPPORTED:
        raise EnvironmentVariableError(
            f"KERAS_BACKEND={name}: opennmt-lite runs on Keras' 'tensorflow' or 'jax' backend")
    if name == "tensorflow" and not tensorflow_installed():
        raise EnvironmentVariableError(
            "KERAS_BACKEND is 'tensorflow' (the default) but TensorFlow is not installed (an "
            "install from requirements-jax.txt): set KERAS_BACKEND=jax")
    if importlib.util.find_spec(name) is None:
        raise EnvironmentVariableError(f"KERAS_BACKEND={name}: the {name} package is not installed")
    return name


def require_tensorflow(what):
    """Raises a UserError naming `what` (e.g. "export --format saved_model") unless this process
    runs Keras' TensorFlow backend."""
    name = selected()
    if name == "tensorflow" and tensorflow_installed():
        return
    where = (f"this process runs Keras' {name} backend" if name != "tensorflow"
             else "TensorFlow is not installed")
    raise UserError(f"{what} needs TensorFlow ({where}): run it with KERAS_BACKEND=tensorflow on "
                    "an install from requirements.txt")


def describe():
    """One line for the start-up log, e.g. "jax (jax 0.10.2, Keras 3.15.1)"."""
    name = selected()
    versions = []
    for package in (name, "keras"):
        try:
            versions.append(f"{package} {importlib.metadata.version(package)}")
        except importlib.metadata.PackageNotFoundError:
            pass
    return f"{name} ({', '.join(versions)})" if versions else name
