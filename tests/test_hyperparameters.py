"""The model's hyper-parameters: one carrier, its checks and dict round trip; loading a config
does not start TensorFlow."""

import pathlib
import subprocess
import sys

import pytest

from opennmt_lite.hyperparameters import PRESETS, ModelHyperparameters

REPO = pathlib.Path(__file__).parents[1]


def test_loading_a_config_imports_neither_tensorflow_nor_keras():
    script = ("import sys\n"
              "from opennmt_lite.config import load_config\n"
              "config = load_config('configs/sample.yml')\n"
              "config.model.hyperparameters\n"
              "print(sorted(m for m in ('tensorflow', 'keras') if m in sys.modules))\n")
    result = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True,
                            text=True, check=True)
    assert result.stdout.strip() == "[]", result.stdout + result.stderr


def test_defaults_are_opennmt_tf_transformer_base():
    assert ModelHyperparameters() == ModelHyperparameters(**PRESETS["TransformerBase"])
    assert ModelHyperparameters().absolute_position_encoding == "sinusoidal"
    relative = ModelHyperparameters(**PRESETS["TransformerRelative"])
    assert relative.absolute_position_encoding == "none"
    assert ModelHyperparameters(maximum_relative_position=4, position_encoding="sinusoidal"
                                ).absolute_position_encoding == "sinusoidal"


def test_dict_round_trip_and_unknown_names():
    hyper = ModelHyperparameters(num_layers=2, num_units=16, num_heads=2, ffn_inner_dim=32,
                                 maximum_relative_position=4, share_embeddings="all")
    assert ModelHyperparameters.from_dict(hyper.to_dict()) == hyper
    with pytest.raises(ValueError, match="unknown model hyper-parameters: num_unit"):
        ModelHyperparameters.from_dict({"num_unit": 8})


@pytest.mark.parametrize("values, message", [
    (dict(num_units=10, num_heads=4), r"num_units \(10\) must be divisible by num_heads \(4\)"),
    (dict(num_layers=0), "num_layers must be a positive integer"),
    (dict(dropout=1.0), r"dropout must be in \[0, 1\)"),
    (dict(share_embeddings="everything"), "share_embeddings must be one of"),
    (dict(position_encoding="learned"), "position_encoding must be one of"),
    (dict(maximum_relative_position=0), "maximum_relative_position must be None or a positive"),
])
def test_invalid_values_are_refused_by_name(values, message):
    with pytest.raises(ValueError, match=message):
        ModelHyperparameters(**values)
