"""OpenNMT-tf keys read with OpenNMT-tf 2.32's meaning at config load: the input-pipeline keys
accepted with one warning each, eval.external_evaluators (the older name of eval.scorers), the
pretrained-embedding sections and train.pad_to_bucket_boundary."""

import logging

import pytest
import yaml

from opennmt_lite.config import INEFFECTIVE_ONMT_KEYS, ConfigError, load_config

MINIMAL = {"model_dir": "runs/x", "model": {"preset": "TransformerTiny"}}


def write(tmp_path, content, name="config.yml"):
    path = tmp_path / name
    path.write_text(yaml.safe_dump(content))
    return str(path)


def test_input_pipeline_keys_warn_once_each(tmp_path, caplog):
    values = {"data.export_vocabulary_assets": False, "train.prefetch_buffer_size": 4,
              "train.num_threads": 8, "train.batch_autotune_mode": False,
              "eval.prefetch_buffer_size": 1, "infer.prefetch_buffer_size": 2,
              "score.prefetch_buffer_size": 3, "data.tagging_scheme": "bioes",
              "params.scheduled_sampling_k": 0.5}
    assert set(values) == set(INEFFECTIVE_ONMT_KEYS)
    user = dict(MINIMAL)
    for name, value in values.items():
        section, key = name.split(".")
        user[section] = {**user.get(section, {}), key: value}
    path = write(tmp_path, user)
    with caplog.at_level(logging.WARNING, logger="opennmt_lite"):
        load_config(path)
    lines = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(lines) == len(values)
    for name in values:
        (line,) = [line for line in lines if f": {name} has no effect in opennmt-lite (" in line]
        assert line.startswith(path)
    assert any("always holds its vocabularies as asset files" in line for line in lines)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="opennmt_lite"):
        load_config(write(tmp_path, dict(MINIMAL, train={"num_threads": None})))
    assert not caplog.records  # (null: not set)


@pytest.mark.parametrize("value, scorers", [("BLEU", ("bleu",)), (["bleu", "ChrF"], ("bleu", "chrf"))])
def test_external_evaluators_is_the_older_name_of_scorers(tmp_path, value, scorers):
    config = load_config(write(tmp_path, dict(MINIMAL, eval={"external_evaluators": value})))
    assert config.eval.scorers == scorers and config.eval.external_evaluators is None
    stopping = {"metric": "bleu", "steps": 2}
    config = load_config(write(tmp_path, dict(MINIMAL, eval={"external_evaluators": value,
                                                             "early_stopping": stopping})))
    assert config.eval.early_stopping.metric == "bleu"


@pytest.mark.parametrize("evaluation, message", [
    ({"external_evaluators": "bleu", "scorers": "chrf"},
     r"config.yml: eval.scorers and eval.external_evaluators \(OpenNMT-tf's older name of scorers\) "
     r"are both set: keep one$"),
    ({"external_evaluators": ["bleu", "rouge"]}, r"config.yml: eval.external_evaluators: unknown scorer\(s\) \['rouge'\]"),
])
def test_external_evaluators_errors(tmp_path, evaluation, message):
    with pytest.raises(ConfigError, match=message):
        load_config(write(tmp_path, dict(MINIMAL, eval=evaluation)))


def test_embedding_sections(tmp_path):
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    (model_dir / "src.vec").write_text("1 512\n")
    data = {"source_embedding": {"path": "src.vec", "trainable": False},
            "target_embedding": {"path": "tgt.vec", "with_header": False, "case_insensitive": False}}
    config = load_config(write(tmp_path, dict(MINIMAL, model_dir=str(model_dir), data=data)))
    source, target = config.data.source_embedding, config.data.target_embedding
    assert source.path == str(model_dir / "src.vec")  # resolved like the data paths
    assert (source.with_header, source.case_insensitive, source.trainable) == (True, True, False)
    assert target.path == "tgt.vec" and (target.with_header, target.case_insensitive, target.trainable) == (False, False, True)
    assert load_config(write(tmp_path, MINIMAL)).data.source_embedding is None
    with pytest.raises(ConfigError, match=r"config.yml: data.source_embedding.path must name the embedding file"):
        load_config(write(tmp_path, dict(MINIMAL, data={"source_embedding": {"trainable": False}})))
    with pytest.raises(ConfigError, match=r"data.target_embedding.trainabel: unknown key \(did you mean data.target_embedding.trainable\?\)"):
        load_config(write(tmp_path, dict(MINIMAL, data={"target_embedding": {"path": "x", "trainabel": False}})))


def test_pad_to_bucket_boundary_key(tmp_path):
    assert load_config(write(tmp_path, MINIMAL)).train.pad_to_bucket_boundary is False
    config = load_config(write(tmp_path, dict(MINIMAL, train={"pad_to_bucket_boundary": True})))
    assert config.train.pad_to_bucket_boundary is True
    with pytest.raises(ConfigError, match=r"train.pad_to_bucket_boundary: expected true or false"):
        load_config(write(tmp_path, dict(MINIMAL, train={"pad_to_bucket_boundary": 5})))
