"""`model.preset: ScalingNmtEnDe | ScalingNmtEnFr` (and `onmt-main --model_type`, and model files
subclassing them) against OpenNMT-tf 2.32: its auto_config, its EmbeddingsSharingLevel.AUTO, its
InvSqrtDecay, and a small ScalingNmtEnDe that OpenNMT-tf trained, loaded and translated here
(tests/fixtures/onmt_tf_scaling/README.md)."""

import dataclasses
import shutil

import numpy as np
import pytest
import yaml

from conftest import FIXTURES
from opennmt_lite.config import ConfigError, build_config
from opennmt_lite.onmt import main as onmt_main

SCALING = FIXTURES / "onmt_tf_scaling"
SCORE_TOLERANCE = 1e-4


def test_inv_sqrt_decay_is_opennmt_tf_s():
    """Values printed by OpenNMT-tf 2.32's opennmt.schedules.InvSqrtDecay(*arguments)(step)."""
    import tensorflow as tf

    from opennmt_lite.training.schedules import InvSqrtDecay

    steps = [0, 1, 5, 9, 10, 11, 199, 200, 201, 3999, 4000, 4001, 100000]
    expected = {
        (0.001, 4000, 1e-7): [3.4997501e-07, 5.9995006e-07, 1.5998501e-06, 2.5997501e-06,
                              2.8497252e-06, 3.0997003e-06, 5.0095005e-05, 5.0344981e-05,
                              5.0594954e-05, 0.0010000000, 0.00099987502, 0.00099975010,
                              0.00019999902],
        (2.0, 10, 0.0): [0.2, 0.4, 1.2, 2.0, 1.9069252, 1.8257419, 0.44721359, 0.44609973,
                         0.44499415, 0.1, 0.099987507, 0.099975005, 0.019999901],
    }
    for arguments, values in expected.items():
        schedule = InvSqrtDecay(*arguments)
        ours = [float(schedule(tf.constant(step, tf.int64))) for step in steps]
        np.testing.assert_allclose(ours, values, rtol=1e-6)


def test_automatic_sharing_follows_the_vocabulary_paths():
    def sharing(source, target, preset="ScalingNmtEnDe"):
        config = build_config({"model_dir": "x", "model": {"preset": preset},
                               "data": {"source_vocabulary": source, "target_vocabulary": target}})
        return config.model.hyperparameters.share_embeddings

    assert sharing("vocab.txt", "vocab.txt") == "all"
    assert sharing("src.txt", "tgt.txt") == "target"
    assert sharing("vocab.txt", "./vocab.txt") == "target"  # (OpenNMT-tf compares the strings)
    config = build_config({"model_dir": "x", "model": {"preset": "TransformerTiny",
                                                       "share_embeddings": "auto"}})
    assert config.model.hyperparameters.share_embeddings == "target"


def test_an_unknown_preset_exits_2_with_one_line(tmp_path, capsys):
    import run

    path = tmp_path / "config.yml"
    path.write_text(yaml.safe_dump({"model_dir": str(tmp_path), "model": {"preset": "ScalingNmtEnGe"}}))
    assert run.main(["infer", "--config", str(path), "--features_file", "x"]) == 2
    error = capsys.readouterr().err.strip()
    assert "model.preset: must be one of" in error and "ScalingNmtEnFr" in error
    assert len(error.splitlines()) == 1 and "Traceback" not in error


# -- the OpenNMT-tf project ----------------------------------------------------------------------

@pytest.fixture(scope="module")
def project(tmp_path_factory):
    """A copy of the fixture folder (onmt-main writes model_description.py into model_dir)."""
    directory = tmp_path_factory.mktemp("scaling") / "project"
    shutil.copytree(SCALING, directory)
    return directory


@pytest.fixture
def in_project(project, monkeypatch):
    """Runs in the project folder, as its commands run (model_dir "." and its paths)."""
    monkeypatch.chdir(project)
    return project


def configure(*argv):
    return onmt_main.configure(onmt_main.parse_args(list(argv)))


def project_config():
    return configure("--auto_config", "--model", "model.py", "--config", "config.yml",
                     "infer", "--features_file", "test.first100.tok.en")


def test_the_auto_config_is_what_opennmt_tf_used(in_project):
    """Every value OpenNMT-tf printed for this project (`Using parameters:` of its training run:
    the Transformer's auto_config, ScalingNmtEnDe's over it, then config.yml) is opennmt-lite's,
    but OpenNMT-tf's misspelt `save_checkpoint_steps` (ignored by both)."""
    config = project_config()
    printed = yaml.safe_load((SCALING / "onmt_parameters.yml").read_text())
    assert printed["data"].pop("source_sequence_controls") == {"end": True}
    controls = config.data.source_sequence_controls
    assert (controls.start, controls.end) == (False, True)
    assert printed["train"].pop("save_checkpoint_steps") == 1000
    for section in ("params", "train", "eval", "infer", "score"):
        for name, value in printed[section].items():
            ours = getattr(getattr(config, section), name)
            assert (dict(ours) if isinstance(value, dict) else ours) == value, (section, name)
    hyperparameters = config.model.hyperparameters
    assert (hyperparameters.pre_norm, hyperparameters.output_layer_bias,
            hyperparameters.share_embeddings, hyperparameters.ffn_dropout) == (False, False, "all", 0.0)
    # The preset in a YAML model section, at the same sizes, is the same model and config.
    section = yaml.safe_load((SCALING / "config.yml").read_text())
    section.update(model={
        "preset": "ScalingNmtEnDe", "num_layers": 2, "num_units": 32, "num_heads": 2,
        "ffn_inner_dim": 64, "dropout": 0.1})
    from_preset = build_config(section)
    assert from_preset.model.hyperparameters == dataclasses.replace(hyperparameters,
                                                                    position_encoding="auto")
    assert from_preset.params == config.params and from_preset.train == config.train
    assert from_preset.data.source_sequence_controls == config.data.source_sequence_controls


def test_model_type_names_the_catalog_models(in_project):
    config = configure("--auto_config", "--model_type", "ScalingNmtEnFr", "--config",
                       "config.yml", "infer", "--features_file", "test.first100.tok.en")
    hyperparameters = config.model.hyperparameters
    assert (hyperparameters.num_layers, hyperparameters.num_units, hyperparameters.num_heads,
            hyperparameters.ffn_inner_dim) == (6, 1024, 16, 4096)
    assert (hyperparameters.dropout, hyperparameters.attention_dropout) == (0.1, 0.0)
    assert hyperparameters.share_embeddings == "all" and not hyperparameters.pre_norm
    assert config.params.decay_type == "InvSqrtDecay" and config.params.learning_rate == 0.003
    assert config.train.effective_batch_size == 2048  # (config.yml over the auto_config)
    assert config.data.source_sequence_controls.end is True
    # without --auto_config, no recipe: no source </s>, the Transformer's fallbacks
    config = configure("--model_type", "ScalingNmtEnDe", "--config", "config.yml",
                       "infer", "--features_file", "test.first100.tok.en")
    assert config.data.source_sequence_controls.end is False and config.params.decay_type is None
    (in_project / "model_description.py").unlink()


def read_lines(name):
    return (SCALING / name).read_text(encoding="utf-8").splitlines()


def test_opennmt_tf_s_checkpoint_translates_and_scores_identically(in_project):
    """OpenNMT-tf's checkpoint (one shared embedding, no output-layer variable) loads whole; beam
    4 translations (with the source `</s>` of the recipe) and scores are OpenNMT-tf's."""
    from opennmt_lite import build
    from opennmt_lite.inference.score import format_lines as score_lines
    from opennmt_lite.inference.score import score_pairs
    from opennmt_lite.inference.translate import format_lines, translate_file

    project = in_project
    config = project_config()
    model, assets, _ = build.inference_model(config, "ckpt-400")
    assert model.decoder.output_layer.bias is None
    data = build.inference_input(str(project / "test.first100.tok.en"), config.infer, assets,
                                 config.data)
    options = build.decoding_options(config.params, config.infer)
    assert options.beam_width == 4
    ours = list(format_lines(translate_file(model, assets, data, options, progress=False), True))
    theirs = read_lines("pred.first100.beam4.scores.tok.de")
    equal = 0
    for mine, reference in zip(ours, theirs):
        (score, text), (expected_score, expected_text) = mine.split(" ||| "), reference.split(" ||| ")
        if text == expected_text:
            equal += 1
            tolerance = 1e-3 if len(text.split()) >= 250 else SCORE_TOLERANCE
            assert abs(float(score) - float(expected_score)) <= tolerance
    assert len(ours) == len(theirs) == 100 and equal >= 99
    pairs = build.scoring_input(str(project / "test.first100.tok.en"),
                                str(project / "test.first100.tok.de"), config.score, assets,
                                config.data)
    targets = [line.split() for line in read_lines("test.first100.tok.de")]
    for mine, reference in zip(score_lines(score_pairs(model, pairs), targets),
                               read_lines("score.first100.txt")):
        assert mine.split(" ||| ")[1] == reference.split(" ||| ")[1]
        assert abs(float(mine.split(" ||| ")[0]) - float(reference.split(" ||| ")[0])) <= SCORE_TOLERANCE


def test_a_bad_decay_parameter_is_named():
    with pytest.raises(ConfigError, match="params.decay_params.initial_learning_rate must be a "
                                          "non-negative number for InvSqrtDecay, got 'x'"):
        build_config({"model_dir": "x", "model": {"preset": "ScalingNmtEnDe"},
                      "params": {"decay_params": {"warmup_steps": 10, "initial_learning_rate": "x"}}})
