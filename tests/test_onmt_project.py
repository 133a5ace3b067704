"""A whole OpenNMT-tf project brought across (issue 16), against the real OpenNMT-tf 2.32:
the `onmt_project` fixture (tests/fixtures/onmt_project/make_fixtures.py: OpenNMT Tokenizer
configs on raw text, onmt-build-vocab, 400 training steps, average, infer, score, update_vocab)
and the public `onmt_tf_relative` fixture's score files."""

import shutil

import numpy as np
import pytest
import tensorflow as tf
import yaml

import run
from conftest import FIXTURES, ONMT_FIXTURE
from data_helpers import TRAIN_DE, TRAIN_EN, VALID_DE, VALID_EN

PROJECT = FIXTURES / "onmt_project"
TOKENIZER = {"mode": "aggressive", "joiner_annotate": True, "segment_numbers": True}
MODEL = {"num_layers": 2, "num_units": 32, "num_heads": 2, "ffn_inner_dim": 64,
         "maximum_relative_position": 8, "position_encoding": "none"}


def project_config(tmp_path, model_dir=PROJECT / "run", **data):
    """An opennmt-lite config of the fixture project as its README says to write one: the
    OpenNMT-tf data section (source tokenizer as a YAML file, target inline) plus a model
    section."""
    source_yaml = tmp_path / "source_tokenizer.yml"
    source_yaml.write_text(yaml.safe_dump({"type": "OpenNMTTokenizer", "params": dict(
        TOKENIZER, sp_model_path=str(PROJECT / "sp-en.model"))}))
    config = {
        "model_dir": str(model_dir),
        "data": {
            "source_vocabulary": str(PROJECT / "src-vocab.txt"),
            "target_vocabulary": str(PROJECT / "tgt-vocab.txt"),
            "source_tokenization": str(source_yaml),
            "target_tokenization": {"type": "OpenNMTTokenizer", "params": dict(
                TOKENIZER, sp_model_path=str(PROJECT / "sp-de.model"))},
            **data,
        },
        "model": MODEL,
        "params": {"beam_width": 1},
        "infer": {"batch_size": 16, "length_bucket_width": 0},
        "score": {"batch_size": 16},
    }
    path = tmp_path / "config.yml"
    path.write_text(yaml.safe_dump(config))
    return str(path)


def lines(path):
    return open(path, encoding="utf-8").read().splitlines()


def test_build_vocab_matches_onmt_build_vocab(tmp_path):
    config = project_config(tmp_path, model_dir=tmp_path / "run", train_features_file=TRAIN_EN,
                            train_labels_file=TRAIN_DE,
                            source_vocabulary=str(tmp_path / "src.txt"),
                            target_vocabulary=str(tmp_path / "tgt.txt"))
    assert run.main(["build-vocab", "--config", config, "--size", "500"]) == 0
    assert lines(tmp_path / "src.txt") == lines(PROJECT / "src-vocab.txt")
    assert lines(tmp_path / "tgt.txt") == lines(PROJECT / "tgt-vocab.txt")
    # Word vocabularies of the plain aggressive tokenizer (a YAML file, as onmt-build-vocab was
    # given): --size; --min_frequency with --size_multiple.
    word = {"model_dir": str(tmp_path / "run"), "model": MODEL, "data": {
        "source_tokenization": str(PROJECT / "aggressive.yml"),
        "target_tokenization": str(PROJECT / "aggressive.yml"),
        "source_vocabulary": str(tmp_path / "w-src.txt"),
        "target_vocabulary": str(tmp_path / "w-tgt.txt")}}
    for files, options, expected in (
            ((TRAIN_EN, TRAIN_DE), ["--size", "400"], "word-vocab.size400.txt"),
            ((VALID_EN, VALID_DE), ["--min_frequency", "2", "--size_multiple", "8"],
             "valid-vocab.minfreq2.mult8.txt")):
        word["data"].update(train_features_file=files[0], train_labels_file=files[1])
        (tmp_path / "word.yml").write_text(yaml.safe_dump(word))
        assert run.main(["build-vocab", "--config", str(tmp_path / "word.yml"), *options]) == 0
        assert lines(tmp_path / "w-src.txt") == lines(PROJECT / expected), expected
    assert len(lines(PROJECT / "valid-vocab.minfreq2.mult8.txt")) % 8 == 7


@pytest.mark.parametrize("checkpoint,beam", [("ckpt400", 1), ("ckpt400", 4), ("avg", 4)])
def test_translations_of_raw_text_match_opennmt(tmp_path, checkpoint, beam):
    """OpenNMT-tf's checkpoints (the last one, and its own average), raw English in, detokenized
    German out through the OpenNMT Tokenizer: the same lines as `onmt-main infer`."""
    path = {"ckpt400": PROJECT / "run" / "ckpt-400", "avg": PROJECT / "run" / "avg"}[checkpoint]
    output = tmp_path / "pred.de"
    assert run.main(["infer", "--config", project_config(tmp_path), "--features_file",
                     str(PROJECT / "test.first100.en"), "--checkpoint", str(path),
                     "--beam_width", str(beam), "--predictions_file", str(output)]) == 0
    ours, reference = lines(output), lines(PROJECT / f"pred.{checkpoint}.beam{beam}.de")
    assert len(ours) == len(reference) == 100
    same = sum(a == b for a, b in zip(ours, reference))
    assert same >= 99, [(a, b) for a, b in zip(ours, reference) if a != b]
    assert sum("\uffed" in line for line in ours) == 0  # detokenized: no joiner left
    assert sum(" " in line for line in reference) > 30


def _weights(config, checkpoint):
    from opennmt_lite import build
    from opennmt_lite.config import load_config

    model, _, _ = build.inference_model(load_config(config), str(checkpoint))
    return {index: v.numpy() for index, v in enumerate(model.weights) if "float" in str(v.dtype)}


def test_average_checkpoints_equals_opennmt_average(tmp_path):
    config = project_config(tmp_path)
    output = tmp_path / "avg"
    assert run.main(["average_checkpoints", "--config", config, "--max_count", "3",
                     "--output_dir", str(output)]) == 0
    assert (output / "ckpt-400.index").exists()
    ours = _weights(config, output)
    reference = _weights(config, PROJECT / "run" / "avg" / "ckpt-400")
    last = _weights(config, PROJECT / "run" / "ckpt-400")
    assert ours.keys() == reference.keys() and len(ours) > 50
    assert max(float(np.max(np.abs(ours[k] - reference[k]))) for k in ours) <= 1e-6
    assert max(float(np.max(np.abs(ours[k] - last[k]))) for k in ours) > 1e-3  # really averaged
    # the optimizer state and step are the newest checkpoint's, as OpenNMT-tf keeps them
    stored = tf.train.load_checkpoint(str(output / "ckpt-400"))
    assert stored.get_tensor("optimizer/iterations/.ATTRIBUTES/VARIABLE_VALUE") == 400
    # averaging 2 (--max_count) differs from averaging 3
    assert run.main(["average_checkpoints", "--config", config, "--max_count", "2",
                     "--output_dir", str(tmp_path / "avg2")]) == 0
    two = _weights(config, tmp_path / "avg2")
    assert max(float(np.max(np.abs(two[k] - ours[k]))) for k in ours) > 1e-4


def _scores(path):
    pairs = [line.split(" ||| ", 1) for line in lines(path)]
    return [float(score) for score, _ in pairs], [text for _, text in pairs]


@pytest.mark.parametrize("predictions,reference", [
    ("test.first100.de", "score.ckpt400.references.txt"),
    ("pred.ckpt400.beam4.de", "score.ckpt400.beam4.txt")])
def test_score_matches_opennmt_score(tmp_path, predictions, reference):
    output = tmp_path / "score.txt"
    assert run.main(["score", "--config", project_config(tmp_path), "--features_file",
                     str(PROJECT / "test.first100.en"), "--predictions_file",
                     str(PROJECT / predictions), "--checkpoint", str(PROJECT / "run" / "ckpt-400"),
                     "--output_file", str(output)]) == 0
    ours, our_tokens = _scores(output)
    expected, expected_tokens = _scores(PROJECT / reference)
    assert our_tokens == expected_tokens  # tokenized by the OpenNMT Tokenizer, joiners shown
    assert max(abs(a - b) for a, b in zip(ours, expected)) <= 1e-4
    assert len(ours) == 100 and min(ours) > 0


def test_score_matches_public_fixture(tmp_path, tag="beam4.nbest4.scores", n_best=4):
    """The public fixture: its references (score.first8.txt) and the rescored n-best lists."""
    config = str(FIXTURES / "onmt_fixture.yml")
    output = tmp_path / "score.txt"
    assert run.main(["score", "--config", config, "--features_file",
                     str(ONMT_FIXTURE / "test.first8.tok.en"), "--predictions_file",
                     str(ONMT_FIXTURE / "test.first8.tok.de"), "--output_file", str(output)]) == 0
    ours, tokens = _scores(output)
    expected, expected_tokens = _scores(ONMT_FIXTURE / "score.first8.txt")
    assert tokens == expected_tokens and max(abs(a - b) for a, b in zip(ours, expected)) <= 1e-4
    # rescore: each hypothesis of pred.first100.<tag> against its source line
    sources = lines(ONMT_FIXTURE / "test.first100.tok.en")
    hypotheses = [line.split(" ||| ", 1)[1] for line in
                  lines(ONMT_FIXTURE / f"pred.first100.{tag}.tok.de")]
    (tmp_path / "src.txt").write_text("".join(s + "\n" for s in sources for _ in range(n_best)))
    (tmp_path / "hyp.txt").write_text("".join(h + "\n" for h in hypotheses))
    assert run.main(["score", "--config", config, "--features_file", str(tmp_path / "src.txt"),
                     "--predictions_file", str(tmp_path / "hyp.txt"), "--output_file",
                     str(output)]) == 0
    ours, tokens = _scores(output)
    expected, expected_tokens = _scores(ONMT_FIXTURE / f"rescore.first100.{tag}.txt")
    assert len(ours) == 100 * n_best
    assert tokens == expected_tokens and max(abs(a - b) for a, b in zip(ours, expected)) <= 1e-4


def test_update_vocab_matches_opennmt_and_trains_on(tmp_path):
    from opennmt_lite.checkpointing import store
    from opennmt_lite.data.vocab import Vocabulary
    from opennmt_lite.checkpointing.onmt_names import SOURCE_EMBEDDING, TARGET_EMBEDDING

    config = project_config(tmp_path)
    output = tmp_path / "updated"
    assert run.main(["update_vocab", "--config", config, "--src_vocab",
                     str(PROJECT / "new-src-vocab.txt"), "--tgt_vocab",
                     str(PROJECT / "new-tgt-vocab.txt"), "--output_dir", str(output)]) == 0
    ours = tf.train.load_checkpoint(str(output / "ckpt-400"))
    onmt = tf.train.load_checkpoint(str(PROJECT / "updated" / "ckpt-400"))
    old = tf.train.load_checkpoint(str(PROJECT / "run" / "ckpt-400"))
    suffix = "/.ATTRIBUTES/VARIABLE_VALUE"
    pairs = {  # ours -> OpenNMT-tf's
        "model/source_inputter/embedding": SOURCE_EMBEDDING,
        "model/target_inputter/embedding": TARGET_EMBEDDING,
        "model/decoder/output_layer/kernel": "model/decoder/output_layer/kernel",
        "model/decoder/output_layer/bias": "model/decoder/output_layer/bias",
    }
    for name, onmt_name in pairs.items():
        value = ours.get_tensor(name + suffix)
        assert value.shape == onmt.get_tensor(onmt_name + suffix).shape
        np.testing.assert_array_equal(value, onmt.get_tensor(onmt_name + suffix))
        for slot in ("m", "v"):
            np.testing.assert_array_equal(
                ours.get_tensor(f"optimizer/{slot}/{name[len('model/'):]}{suffix}"),
                onmt.get_tensor(f"{onmt_name}/.OPTIMIZER_SLOT/optimizer/{slot}{suffix}"))
    # kept tokens keep their rows exactly; new ones are zero (as OpenNMT-tf)
    old_vocab = Vocabulary.from_file(PROJECT / "src-vocab.txt")
    new_vocab = Vocabulary.from_file(PROJECT / "new-src-vocab.txt")
    embedding = ours.get_tensor("model/source_inputter/embedding" + suffix)
    old_embedding = old.get_tensor(SOURCE_EMBEDDING + suffix)
    kept = [t for t in new_vocab.tokens if t in old_vocab]
    assert 100 < len(kept) <= new_vocab.size
    for token in new_vocab.tokens:
        row = embedding[new_vocab.id(token)]
        if token in old_vocab:
            np.testing.assert_array_equal(row, old_embedding[old_vocab.id(token)])
        else:
            assert not row.any()
    np.testing.assert_array_equal(embedding[-1], old_embedding[-1])  # <unk>
    # every other weight unchanged, step kept
    for name in ("model/encoder/layers/0/ffn/layer/inner/kernel", "model/decoder/layer_norm/gamma"):
        np.testing.assert_array_equal(ours.get_tensor(name + suffix), old.get_tensor(name + suffix))
    assert ours.get_tensor("optimizer/iterations" + suffix) == 400
    # it trains on: model_dir = the output, the config's vocabularies the new ones
    train_config = project_config(
        tmp_path, model_dir=output, source_vocabulary=str(PROJECT / "new-src-vocab.txt"),
        target_vocabulary=str(PROJECT / "new-tgt-vocab.txt"), train_features_file=VALID_EN,
        train_labels_file=VALID_DE)
    with open(train_config) as stream:
        values = yaml.safe_load(stream)
    values["train"] = {"batch_size": 512, "max_step": 402, "save_checkpoints_steps": 1,
                       "average_last_checkpoints": 0, "sample_buffer_size": 1000}
    values["auto_config"] = True
    with open(train_config, "w") as stream:
        yaml.safe_dump(values, stream)
    assert run.main(["train", "--config", train_config]) == 0
    prefix = store.latest(str(output))
    assert prefix.endswith("checkpoints/ckpt-402")
    trained = tf.train.load_checkpoint(prefix)
    assert trained.get_tensor("optimizer/iterations" + suffix) == 402
    assert not np.array_equal(trained.get_tensor("model/source_inputter/embedding" + suffix), embedding)


def _error(capsys, argv):
    assert run.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("error: "), err
    return err


def test_bad_input_is_one_clear_error(tmp_path, capsys):
    base = yaml.safe_load(open(project_config(tmp_path)))

    def with_data(**data):
        values = dict(base, data=dict(base["data"], **data))
        path = tmp_path / "bad.yml"
        path.write_text(yaml.safe_dump(values))
        return str(path)

    features = str(PROJECT / "test.first100.en")
    infer = ["infer", "--features_file", features, "--checkpoint", str(PROJECT / "run")]
    err = _error(capsys, infer[:1] + ["--config", with_data(target_tokenization={
        "type": "MosesTokenizer"})] + infer[1:])
    assert "data.target_tokenization.type" in err and "OpenNMTTokenizer" in err
    err = _error(capsys, infer[:1] + ["--config", with_data(target_tokenization={
        "type": "OpenNMTTokenizer", "params": {"mode": "aggressive", "joiner_anotate": True}})]
        + infer[1:])
    assert "data.target_tokenization.params.joiner_anotate: unknown OpenNMT Tokenizer option " \
           "(did you mean joiner_annotate?)" in err
    err = _error(capsys, infer[:1] + ["--config", with_data(target_tokenization={
        "type": "OpenNMTTokenizer", "params": {"mode": "agressive"}})] + infer[1:])
    assert "data.target_tokenization.params: invalid tokenization mode: agressive" in err
    err = _error(capsys, infer[:1] + ["--config", with_data(
        source_tokenization=str(tmp_path / "missing.yml"))] + infer[1:])
    assert "data.source_tokenization: tokenizer configuration file" in err and "missing.yml" in err
    err = _error(capsys, infer[:1] + ["--config", with_data(target_tokenization={
        "type": "OpenNMTTokenizer", "params": {"mode": "aggressive", "bpe_dropout": 0.1}})]
        + infer[1:])
    assert "params.bpe_dropout: subword sampling is not supported" in err
    # averaging fewer than 2 checkpoints; checkpoints of different shapes
    single = tmp_path / "single"
    single.mkdir()
    for name in ("ckpt-400.index", "ckpt-400.data-00000-of-00001"):
        shutil.copy(PROJECT / "run" / name, single / name)
    config = project_config(tmp_path, model_dir=single)
    err = _error(capsys, ["average_checkpoints", "--config", config])
    assert "averaging needs at least 2 checkpoints: found 1 readable in" in err
    for name in ("ckpt-400.index", "ckpt-400.data-00000-of-00001"):
        shutil.copy(PROJECT / "updated" / name, single / name.replace("400", "500"))
    err = _error(capsys, ["average_checkpoints", "--config", config])
    assert "cannot average" in err and "is of shape (501,) in the first and of shape (301,)" in err
    # score: line counts differ
    short = tmp_path / "short.de"
    short.write_text("eins\nzwei\n")
    err = _error(capsys, ["score", "--config", project_config(tmp_path), "--features_file",
                          features, "--predictions_file", str(short)])
    assert f"--features_file {features} has 100 lines but --predictions_file {short} has 2" in err
    # update_vocab: a vocabulary without the special tokens
    bad_vocab = tmp_path / "bad-vocab.txt"
    bad_vocab.write_text("a\nb\nc\n")
    err = _error(capsys, ["update_vocab", "--config", project_config(tmp_path), "--src_vocab",
                          str(bad_vocab), "--output_dir", str(tmp_path / "out")])
    assert str(bad_vocab) in err
