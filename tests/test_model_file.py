"""OpenNMT-tf model files (`onmt-main --model model.py`) read without OpenNMT-tf (issue 26):
what the fixtures' model files and the catalog give, what OpenNMT-tf 2.32 itself builds from a
set of model files (tests/fixtures/onmt_cli/model_files.json), and the refusals, each naming
its file and line."""

import ast
import dataclasses
import json
import sys
import types

import pytest
import yaml

from conftest import FIXTURES, ONMT_FIXTURE
from opennmt_lite.hyperparameters import PRESETS, ModelHyperparameters
from opennmt_lite.onmt.model_file import ModelFileError, read_model_file

TESTS = FIXTURES.parent
ONMT_BUILT = json.loads((FIXTURES / "onmt_cli" / "model_files.json").read_text())["model_files"]
SMALL = "num_layers=2, num_units=64, num_heads=2, ffn_inner_dim=128"


def read(tmp_path, source, name="model.py"):
    path = tmp_path / name
    path.write_text(source)
    return read_model_file(path)


def resolved(values):
    """(The ModelHyperparameters of `values`, its position encoding as the stacks apply it,
    whether it shares embeddings automatically)."""
    # (EmbeddingsSharingLevel.AUTO is decided when the config is loaded: told apart here)
    automatic = values.get("share_embeddings") == "auto"
    hyperparameters = ModelHyperparameters(**dict(values, **({"share_embeddings": "all"} if automatic else {})))
    return dataclasses.replace(hyperparameters,
                               position_encoding=hyperparameters.absolute_position_encoding), automatic


def module_constant(path, name):
    """A literal assigned at module level in a test file (read, not imported: no TensorFlow)."""
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == name for t in node.targets):
            return ast.literal_eval(node.value)
    raise KeyError(name)


def test_fixture_model_files_give_the_hyperparameters_their_tests_use():
    project = read_model_file(FIXTURES / "onmt_project" / "model.py")
    assert resolved(project["model"]) == resolved(module_constant(TESTS / "test_onmt_project.py", "MODEL"))
    relative = read_model_file(ONMT_FIXTURE / "model.py")
    with open(FIXTURES / "onmt_fixture.yml") as f:
        assert resolved(relative["model"]) == resolved(yaml.safe_load(f)["model"])
    assert project["auto_config"] is None and relative["auto_config"] is None


@pytest.mark.parametrize("name", sorted(ONMT_BUILT))
def test_what_opennmt_tf_builds_from_the_same_file(tmp_path, name):
    expected = ONMT_BUILT[name]
    result = read(tmp_path, expected["source"])
    assert result["model"] == expected["model"]
    assert result["auto_config"] == expected["auto_config"]
    ModelHyperparameters(**result["model"])


def test_the_stand_in_transformer_auto_config_is_opennmt_tf_s():
    # (what --auto_config applies when the file's classes define no auto_config of their own)
    from opennmt_lite.onmt import model_file
    for expected in ONMT_BUILT.values():
        num_units = expected["model"]["num_units"]
        transformer = model_file.Transformer(num_units=num_units, num_heads=2)
        assert transformer.auto_config() == expected["transformer_auto_config"]


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_each_catalog_class_is_its_preset(tmp_path, name):
    result = read(tmp_path, f"import opennmt\n\nmodel = opennmt.models.catalog.{name}\n")
    assert resolved(result["model"]) == resolved(PRESETS[name])
    # (only the ScalingNmt* classes have an auto_config of their own)
    assert (result["auto_config"] is None) != name.startswith("ScalingNmt")
    if name != "TransformerRelative":  # (only in the catalog module, as in OpenNMT-tf)
        called = read(tmp_path, f"import opennmt as onmt\n\nmodel = lambda: onmt.models.{name}()\n")
        expected = PRESETS["TransformerBase" if name == "Transformer" else name]
        assert resolved(called["model"]) == resolved(expected)


@pytest.mark.parametrize("source", [
    f"import opennmt\n\n\ndef model():\n    return opennmt.models.Transformer({SMALL})\n",
    f"import opennmt as onmt\n\nmodel = lambda: onmt.models.Transformer({SMALL})\n",
    f"from opennmt import models\n\nmodel = models.Transformer({SMALL})\n",
    f"from opennmt.models import Transformer\n\n\nclass Small(Transformer):\n"
    f"    def __init__(self):\n        super().__init__({SMALL})\n\n\nmodel = Small\n",
])
def test_the_ways_a_file_gives_its_model(tmp_path, source):
    result = read(tmp_path, source)
    assert {k: result["model"][k] for k in ("num_layers", "num_units", "num_heads", "ffn_inner_dim")} == {
        "num_layers": 2, "num_units": 64, "num_heads": 2, "ffn_inner_dim": 128}
    assert result["model"] == dict(ModelHyperparameters(**result["model"]).to_dict())


def test_a_subclass_auto_config_is_returned_merged_over_the_transformer_s(tmp_path):
    result = read(tmp_path, (
        "import opennmt\nfrom opennmt import config as config_util\n\n\n"
        "class Mine(opennmt.models.TransformerTiny):\n"
        "    def auto_config(self, num_replicas=1):\n"
        "        config = super().auto_config(num_replicas=num_replicas)\n"
        "        config = config_util.merge_config(config, {'train': {'batch_size': 64 * num_replicas},\n"
        "                                                   'params': {'decay_params': {'warmup_steps': 10}}})\n"
        "        config['eval'] = {'steps': self._num_units}\n"
        "        return config\n\n\nmodel = Mine\n"))
    config = result["auto_config"]
    assert config["train"]["batch_size"] == 64 and config["train"]["maximum_labels_length"] == 100
    assert config["params"]["decay_params"] == {"warmup_steps": 10}  # (replaced whole, as OpenNMT-tf)
    assert config["params"]["optimizer"] == "LazyAdam" and config["eval"] == {"steps": 64}
    assert resolved(result["model"]) == resolved(PRESETS["TransformerTiny"])
    path = tmp_path / "model.py"
    assert read_model_file(path, num_replicas=2)["auto_config"]["train"]["batch_size"] == 128


@pytest.mark.parametrize("level, name", [("NONE", "none"), ("SOURCE_TARGET_INPUT", "source_target_input"),
                                         ("TARGET", "target"), ("ALL", "all")])
def test_embeddings_sharing_levels(tmp_path, level, name):
    result = read(tmp_path, f"import opennmt\nmodel = lambda: opennmt.models.Transformer("
                            f"share_embeddings=opennmt.models.EmbeddingsSharingLevel.{level})\n")
    assert result["model"]["share_embeddings"] == name


@pytest.mark.parametrize("argument, encoding", [
    ("", "sinusoidal"), ("position_encoder_class=None", "none"),
    ("position_encoder_class=opennmt.layers.SinusoidalPositionEncoder", "sinusoidal"),
    ("position_encoder_class=lambda: opennmt.layers.SinusoidalPositionEncoder()", "sinusoidal")])
def test_position_encoder_class(tmp_path, argument, encoding):
    result = read(tmp_path, f"import opennmt\nmodel = lambda: opennmt.models.Transformer({argument})\n")
    assert result["model"]["position_encoding"] == encoding


def test_activations_are_tensorflow_s_functions(tmp_path):
    for name, expected in (("relu", "relu"), ("gelu", "gelu"), ("swish", "swish"), ("silu", "swish")):
        result = read(tmp_path, f"import opennmt\nimport tensorflow as tf\n"
                                f"model = lambda: opennmt.models.Transformer(ffn_activation=tf.nn.{name})\n")
        assert result["model"]["ffn_activation"] == expected


def test_a_file_imports_its_neighbours(tmp_path):
    (tmp_path / "sizes.py").write_text("UNITS = 64\n")
    (tmp_path / "encoders.py").write_text("import opennmt\n\nRNN = opennmt.encoders.RNNEncoder\n")
    try:
        result = read(tmp_path, "import opennmt\nimport sizes\n\n"
                                "model = lambda: opennmt.models.Transformer(num_units=sizes.UNITS, num_heads=2)\n")
        assert result["model"]["num_units"] == 64
        # (a refusal names the line that used the stand-in, in the neighbour)
        with pytest.raises(ModelFileError) as caught:
            read(tmp_path, "import encoders\n")
        assert str(caught.value).startswith(f"{tmp_path / 'encoders.py'}, line 3: opennmt.encoders.RNNEncoder")
    finally:
        sys.modules.pop("sizes", None)
        sys.modules.pop("encoders", None)


# (source, the line named, a fragment of the message)
REFUSED = {
    "rnn encoder": ("import opennmt\n\n\ndef model():\n    encoder = opennmt.encoders.RNNEncoder(num_layers=2)\n"
                    "    return opennmt.models.Transformer()\n", 5, "opennmt.encoders.RNNEncoder"),
    "rnn encoder imported": ("from opennmt.encoders import RNNEncoder\nmodel = None\n", 1,
                             "opennmt.encoders.RNNEncoder"),
    "rnn model": ("import opennmt\nmodel = opennmt.models.catalog.LuongAttention\n", 2, "LuongAttention"),
    "custom layer class": ("import opennmt\n\n\nclass Mine(opennmt.layers.PositionEncoder):\n    pass\n", 4,
                           "opennmt.layers.PositionEncoder"),
    "custom position encoder": ("import opennmt\n\n\nclass Mine:\n    pass\n\n\n"
                                "model = lambda: opennmt.models.Transformer(position_encoder_class=Mine)\n",
                                8, "position_encoder_class"),
    "custom activation": ("import opennmt\n\n\ndef act(x):\n    return x\n\n\n"
                          "def model():\n    return opennmt.models.Transformer(ffn_activation=act)\n",
                          9, "ffn_activation='act'"),
    "unknown keyword": ("import opennmt\n\nmodel = lambda: opennmt.models.Transformer(num_layers=2, colour=3)\n",
                        3, "colour"),
    "unknown submodule": ("import opennmt.utils.misc\nmodel = None\n", 1, "opennmt.utils"),
    "embedding size": ("import opennmt\n\n\ndef model():\n    source = opennmt.inputters.WordEmbedder(embedding_size=32)\n"
                       "    return opennmt.models.Transformer(source_inputter=source, num_units=64, num_heads=2)\n",
                       5, "embedding_size=32"),
    "embedding dropouts differ": ("import opennmt\n\n\ndef model():\n    return opennmt.models.Transformer(\n"
                                  "        source_inputter=opennmt.inputters.WordEmbedder(512, dropout=0.1))\n",
                                  6, "dropouts 0.1 (source) and 0.0 (target)"),
    "embedding dropout not a number": ("import opennmt\nx = opennmt.inputters.WordEmbedder(512, dropout='a')\n",
                                       2, "WordEmbedder dropout must be a number"),
    "attention reduction": ("import opennmt\nmodel = lambda: opennmt.models.Transformer(attention_reduction="
                            "opennmt.layers.MultiHeadAttentionReduction.AVERAGE_LAST_LAYER)\n", 2,
                            "attention_reduction"),
    "different depths": ("import opennmt\nmodel = lambda: opennmt.models.Transformer(num_layers=(6, 3))\n", 2,
                         "num_layers"),
    "invalid size": ("import opennmt\nmodel = lambda: opennmt.models.Transformer(num_units=100, num_heads=8)\n", 2,
                     "divisible"),
    "overridden call": ("import opennmt\n\n\nclass Mine(opennmt.models.TransformerBase):\n"
                        "    def call(self, inputs):\n        return inputs\n\n\nmodel = Mine\n", 5, "Mine.call"),
    "syntax error": ("import opennmt\n\ndef model(:\n    pass\n", 3, "invalid Python"),
    "exception": ("import opennmt\n\n\ndef model():\n    return opennmt.models.Transformer(num_layers=1 // 0)\n",
                  5, "ZeroDivisionError"),
    "not a transformer": ("def model():\n    return 42\n", 1, "not an opennmt.models.Transformer"),
    "auto_config not a dict": ("import opennmt\n\n\nclass Mine(opennmt.models.TransformerBase):\n"
                               "    def auto_config(self, num_replicas=1):\n        return None\n\n\nmodel = Mine\n",
                               5, "not a dict"),
}


def test_word_embedders_dropout_and_size_from_pretrained_vectors(tmp_path):
    """WordEmbedder(dropout=r) on both sides is the model's embedding_dropout; WordEmbedder()
    without embedding_size (OpenNMT-tf: the pretrained vectors' size) is accepted and named, for
    the configuration to require data.<side>_embedding (tests/test_onmt_main.py)."""
    source = ("import opennmt\n\n\ndef model():\n"
              "    source = opennmt.inputters.WordEmbedder(dropout=0.2)\n"
              "    target = opennmt.inputters.WordEmbedder(embedding_size=64, dropout=0.2)\n"
              "    return opennmt.models.Transformer(source, target, num_units=64, num_heads=2)\n")
    result = read(tmp_path, source)
    assert result["model"]["embedding_dropout"] == 0.2 and result["model"]["dropout"] == 0.1
    assert result["embedding_sizes_from_files"] == {"source": (str(tmp_path / "model.py"), 5)}
    plain = read(tmp_path, "import opennmt\nmodel = opennmt.models.TransformerBase\n")
    assert plain["embedding_sizes_from_files"] == {} and plain["model"]["embedding_dropout"] == 0.0


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_refused_naming_the_file_and_line(tmp_path, name):
    source, line, fragment = REFUSED[name]
    path = tmp_path / "model.py"
    path.write_text(source)
    with pytest.raises(ModelFileError) as caught:
        read_model_file(path)
    message = str(caught.value)
    assert message.startswith(f"{path}, line {line}: "), message
    assert fragment in message and "\n" not in message


def test_a_file_without_model_is_refused_naming_it(tmp_path):
    path = tmp_path / "model.py"
    path.write_text("import opennmt\nx = 1\n")
    with pytest.raises(ModelFileError, match="defines no `model`") as caught:
        read_model_file(path)
    assert str(caught.value).startswith(f"{path}: ")
    with pytest.raises(ModelFileError, match="not found"):
        read_model_file(tmp_path / "missing.py")


def test_the_stand_in_is_present_only_while_the_file_loads(tmp_path):
    path_before = list(sys.path)
    read(tmp_path, "import opennmt\nmodel = opennmt.models.TransformerBase\n")
    with pytest.raises(ModelFileError):
        read(tmp_path, "import opennmt\nopennmt.encoders.RNNEncoder\n")
    assert not [name for name in sys.modules if name == "opennmt" or name.startswith("opennmt.")]
    assert sys.path == path_before


def test_an_opennmt_already_imported_is_put_back_and_not_used(tmp_path, monkeypatch):
    real = types.ModuleType("opennmt")
    real.models = types.ModuleType("opennmt.models")
    monkeypatch.setitem(sys.modules, "opennmt", real)
    monkeypatch.setitem(sys.modules, "opennmt.models", real.models)
    result = read(tmp_path, "import opennmt\nmodel = opennmt.models.TransformerBig\n")
    assert result["model"]["num_units"] == 1024
    assert sys.modules["opennmt"] is real and sys.modules["opennmt.models"] is real.models
