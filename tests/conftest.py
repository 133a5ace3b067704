import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import pathlib

import opennmt_lite  # noqa: F401,I001 (before keras: it imports pyonmttok before TensorFlow)
import keras
import pytest

FIXTURES = pathlib.Path(__file__).parent / "fixtures"
ONMT_FIXTURE = FIXTURES / "onmt_tf_relative"


@pytest.fixture(autouse=True)
def _float32_policy_and_seed():
    """Every test starts in float32 with fixed seeds, and leaves the global policy as it found it."""
    keras.config.set_dtype_policy("float32")
    keras.utils.set_random_seed(1234)
    yield
    keras.config.set_dtype_policy("float32")
