"""Config loading: OpenNMT-tf's defaults and merge rules, and clear errors naming the key."""

import os

import pytest
import yaml

from opennmt_lite.config import ConfigError, load_config

MINIMAL = {"model_dir": "runs/x", "model": {"preset": "TransformerBaseRelative"}}


def write(tmp_path, content, name="config.yml"):
    path = tmp_path / name
    path.write_text(yaml.safe_dump(content) if not isinstance(content, str) else content)
    return str(path)


def test_auto_config_defaults_are_opennmt_transformer_defaults(tmp_path):
    config = load_config(write(tmp_path, MINIMAL))
    params, train = config.params, config.train
    assert params.optimizer == "LazyAdam" and params.optimizer_params == {"beta_1": 0.9, "beta_2": 0.998}
    assert params.learning_rate == 2.0 and params.decay_type == "NoamDecay"
    assert params.decay_params == {"model_dim": 512, "warmup_steps": 8000}
    assert params.label_smoothing == 0.1 and params.beam_width == 4
    assert params.average_loss_in_time is True
    assert train.batch_type == "tokens" and train.batch_size == 3072
    assert train.effective_batch_size == 25000 and train.max_step == 500000
    assert train.maximum_features_length == 100 and train.sample_buffer_size == -1
    assert train.keep_checkpoint_max == 8 and train.save_checkpoints_steps == 5000
    assert config.infer.batch_size == 32 and config.eval.length_bucket_width == 5
    model = config.model
    assert (model.num_layers, model.num_units, model.num_heads, model.ffn_inner_dim) == (6, 512, 8, 2048)
    assert model.maximum_relative_position == 20 and model.pre_norm is True


def test_user_values_win_and_params_dicts_are_replaced_whole(tmp_path):
    user = dict(MINIMAL, params={"optimizer_params": {"beta_2": 0.98}, "learning_rate": 1.0},
                train={"batch_size": 1024}, model={"preset": "TransformerBig", "num_layers": 2})
    config = load_config(write(tmp_path, user))
    assert config.params.optimizer_params == {"beta_2": 0.98}  # beta_1 not merged in
    assert config.params.learning_rate == 1.0
    assert config.train.batch_size == 1024 and config.train.effective_batch_size == 25000
    assert config.model.num_layers == 2 and config.model.num_units == 1024


def test_several_files_merge_left_to_right(tmp_path):
    first = write(tmp_path, MINIMAL, "a.yml")
    second = write(tmp_path, {"train": {"batch_size": 77}, "model": {"num_heads": 4}}, "b.yml")
    config = load_config([first, second])
    assert config.train.batch_size == 77 and config.model.num_heads == 4


def test_without_auto_config_opennmt_fallbacks_apply(tmp_path):
    config = load_config(write(tmp_path, dict(MINIMAL, auto_config=False)))
    assert config.train.batch_type == "examples" and config.train.length_bucket_width == 2
    assert config.train.sample_buffer_size == 500000 and config.params.beam_width == 1
    assert config.train.effective_batch_size is None


@pytest.mark.parametrize(
    "content, message",
    [
        (dict(MINIMAL, train={"batch_sise": 10}), r"config.yml: train.batch_sise: unknown key \(did you mean train.batch_size\?\)"),
        (dict(MINIMAL, train={"batch_size": "big"}), r"train.batch_size: expected an integer, got 'big'"),
        (dict(MINIMAL, params={"label_smoothing": "0.1x"}), r"params.label_smoothing: expected a number"),
        (dict(MINIMAL, model={"preset": "TransformerHuge"}), r"model.preset: must be one of"),
        (dict(MINIMAL, model={"num_layers": 2, "num_units": 10, "num_heads": 4, "ffn_inner_dim": 8}),
         r"model.num_units \(10\) must be divisible by model.num_heads \(4\)"),
        ({"model": {"preset": "Transformer"}}, r"model_dir must be set"),
        (dict(MINIMAL, eval={"early_stopping": {"metric": "bleu"}}), r"eval.early_stopping.steps must be"),
        (dict(MINIMAL, data={"source_tokenization": {"type": "sentencepiece"}}),
         r"data.source_tokenization.model must name the SentencePiece model file"),
        (dict(MINIMAL, train={"mixed_precision": "fp8"}), r"train.mixed_precision: must be one of"),
        (dict(MINIMAL, train={"sub_batches": 0}), r"config.yml: train.sub_batches must be at least 1, got 0"),
        (dict(MINIMAL, model={**MINIMAL["model"], "dropout": -0.1}), r"config.yml: model.dropout must be in \[0, 1\), got -0.1"),
        (dict(MINIMAL, model={**MINIMAL["model"], "attention_dropout": 1.0}), r"model.attention_dropout must be in \[0, 1\), got 1.0"),
        (dict(MINIMAL, model={**MINIMAL["model"], "ffn_dropout": 1.5}), r"model.ffn_dropout must be in \[0, 1\), got 1.5"),
        (dict(MINIMAL, params={"label_smoothing": 1}), r"params.label_smoothing must be in \[0, 1\), got 1"),
        ({"model_dir": "x", "model": {"num_units": 512}}, r"model.num_layers is not set"),
        (dict(MINIMAL, infer={"n_best": 5}), r"infer.n_best \(5\) cannot exceed params.beam_width \(4\)"),
        (dict(MINIMAL, params={"sampling_topk": -1}), r"config.yml: params.sampling_topk must be at least 0, got -1"),
        (dict(MINIMAL, params={"sampling_temperature": 0}), r"config.yml: params.sampling_temperature must be positive, got 0"),
        (dict(MINIMAL, train={"seed": -5}), r"config.yml: train.seed must be at least 0, got -5"),
        (dict(MINIMAL, params={"coverage_penalty": -0.2}), r"config.yml: params.coverage_penalty must be at least 0, got -0.2"),
        (dict(MINIMAL, eval={"early_stopping": {"steps": 0}}), r"eval.early_stopping.steps must be at least 1, got 0"),
        ("model_dir: [unclosed", r"config.yml: invalid YAML"),
    ],
)
def test_bad_configs_name_the_key(tmp_path, content, message):
    with pytest.raises(ConfigError, match=message):
        load_config(write(tmp_path, content))


def test_missing_config_file(tmp_path):
    with pytest.raises(ConfigError, match="config file .*nope.yml not found"):
        load_config(str(tmp_path / "nope.yml"))


def test_mixed_precision_accepts_booleans(tmp_path):
    config = load_config(write(tmp_path, dict(MINIMAL, train={"mixed_precision": True})))
    assert config.train.mixed_precision == "true"


def test_relative_data_paths_resolve_under_model_dir(tmp_path):
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    (model_dir / "src-vocab.txt").write_text("<blank>\n<s>\n</s>\n")
    content = dict(MINIMAL, model_dir=str(model_dir), data={"source_vocabulary": "src-vocab.txt",
                                                            "target_vocabulary": "elsewhere.txt"})
    config = load_config(write(tmp_path, content))
    assert config.data.source_vocabulary == str(model_dir / "src-vocab.txt")
    assert config.data.target_vocabulary == "elsewhere.txt"  # not found anywhere: as given


def test_shipped_configs_load_with_their_presets():
    import pathlib

    from opennmt_lite.hyperparameters import PRESETS

    directory = pathlib.Path(__file__).parents[1] / "configs"
    names = sorted(p.name for p in directory.glob("*.yml"))
    assert "sample.yml" in names and len(names) >= 6
    for path in sorted(directory.glob("*.yml")):
        config = load_config(str(path))
        preset = config.model.preset
        if preset:
            for key, value in PRESETS[preset].items():
                assert getattr(config.model, key) == value, (path.name, key)
        if path.name == "walkthrough.yml":  # the inspect worked example: a vocabulary, no data
            assert config.data.train_features_file is None
            assert os.path.isfile(config.data.source_vocabulary)
            continue
        if config.model.is_encoder_model:  # (tasks derived from data/ by data/make_tasks.py)
            assert config.data.train_features_file.startswith("runs/tasks/")
            continue
        assert config.data.train_features_file == "data/train.en"


def test_catalog_presets_match_opennmt_catalog():
    from opennmt_lite.hyperparameters import PRESETS

    # OpenNMT-tf 2.32 opennmt/models/catalog.py
    assert PRESETS["TransformerBig"] == dict(PRESETS["TransformerBase"], num_units=1024, num_heads=16,
                                             ffn_inner_dim=4096)
    assert PRESETS["TransformerBigRelative"]["maximum_relative_position"] == 20
    assert PRESETS["TransformerBaseRelative"] == PRESETS["TransformerRelative"]
    assert PRESETS["TransformerBaseSharedEmbeddings"]["share_embeddings"] == "all"
    assert all(p["dropout"] == 0.1 and p["pre_norm"] for name, p in PRESETS.items()
               if name.startswith("Transformer"))
    # ScalingNmtEnDe / ScalingNmtEnFr: the big sizes, post-norm, no FFN dropout nor output bias,
    # EmbeddingsSharingLevel.AUTO
    assert PRESETS["ScalingNmtEnDe"] == dict(
        PRESETS["TransformerBig"], pre_norm=False, dropout=0.3, attention_dropout=0.1,
        ffn_dropout=0.0, share_embeddings="auto", output_layer_bias=False)
    assert PRESETS["ScalingNmtEnFr"] == dict(PRESETS["ScalingNmtEnDe"], dropout=0.1,
                                             attention_dropout=0.0)
    assert PRESETS["TransformerTiny"]["num_layers"] == 2 and PRESETS["TransformerTiny"]["ffn_inner_dim"] == 64


def test_the_refused_keys_table_is_the_config_s():
    """docs/opennmt-tf.md lists exactly the OpenNMT-tf keys the config refuses, with its reason."""
    import pathlib
    import re

    from opennmt_lite.config import UNSUPPORTED_ONMT_KEYS

    text = (pathlib.Path(__file__).parents[1] / "docs" / "opennmt-tf.md").read_text(encoding="utf-8")
    rows = dict(re.findall(r"^\| `([a-z_]+\.[a-z_]+)` \| (.*?) \|$", text, flags=re.M))
    assert rows == UNSUPPORTED_ONMT_KEYS
