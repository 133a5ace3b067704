"""A language model (model.type: language_model) through the commands: OpenNMT-tf 2.32's own
command lines on the onmt_tf_lm fixture (its config.yml and model.py, as
bench/onmt_model_fixtures.py ran them) give OpenNMT-tf's continuations, scores and evaluation, and
train on from its checkpoint; `run.py` infers (greedy over prefixes of mixed lengths, sampling,
beam), exports a SavedModel and a CTranslate2 Generator whose outputs equal `run.py infer`'s,
averages checkpoints and refuses bad input with one line."""

import functools
import json
import os
import shutil

import numpy as np
import pytest
import yaml
from test_onmt_main import inside, lines, onmt

from opennmt_lite import cli
from opennmt_lite.onmt import main as onmt_main

FIXTURE = os.path.join(os.path.dirname(__file__), "fixtures", "onmt_tf_lm")
CHECKPOINT = ["--checkpoint_path", "ckpt-3000"]
MAIN = ["--model", "model.py", "--config", "config.yml"]
# What the fixture's model.py describes, as run.py's model section.
MODEL = {"type": "language_model", "num_layers": 2, "num_units": 32, "num_heads": 2,
         "ffn_inner_dim": 64, "ffn_activation": "gelu", "gelu_approximation": True,
         "maximum_position": 128}


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    """The folder OpenNMT-tf ran in: its config.yml, model.py, vocabulary, checkpoint and test
    files (the first 200 training lines as train.tok.en)."""
    directory = tmp_path_factory.mktemp("onmt_lm")
    for name in ("config.yml", "model.py", "vocab.txt", "checkpoint", "ckpt-3000.index",
                 "ckpt-3000.data-00000-of-00001", "test.first100.prefix.en",
                 "test.first100.tok.en", "eval.tok.en"):
        shutil.copyfile(os.path.join(FIXTURE, name), directory / name)
    shutil.copyfile(os.path.join(FIXTURE, "train.first200.tok.en"), directory / "train.tok.en")
    return directory


def _scores(path):
    return np.array([float(line.split(" ||| ")[0]) for line in lines(path)])


def test_onmt_main_infer_score_and_eval_equal_opennmt_tf(work, capsys):
    onmt(work, *MAIN, *CHECKPOINT, "infer", "--features_file", "test.first100.prefix.en",
         "--predictions_file", "pred.txt")
    expected = lines(os.path.join(FIXTURE, "pred.first100.greedy.en"))
    assert sum(a == b for a, b in zip(lines(work / "pred.txt"), expected)) >= 99
    onmt(work, *MAIN, *CHECKPOINT, "score", "--features_file", "test.first100.tok.en",
         "--output_file", "score.txt")
    reference = os.path.join(FIXTURE, "score.first100.txt")
    assert np.abs(_scores(work / "score.txt") - _scores(reference)).max() < 1e-4
    assert [l.split(" ||| ")[1] for l in lines(work / "score.txt")] == \
        [l.split(" ||| ")[1] for l in lines(reference)]
    capsys.readouterr()
    onmt(work, *MAIN, *CHECKPOINT, "eval", "--features_file", "eval.tok.en")
    printed = eval(capsys.readouterr().out.strip().splitlines()[-1])  # noqa: S307 (a dict)
    with open(os.path.join(FIXTURE, "eval.result.txt")) as stream:
        expected = eval(stream.read())  # noqa: S307
    for name in ("loss", "perplexity"):
        assert abs(printed[name] - expected[name]) < 1e-4 * max(1.0, expected[name]), name


def test_onmt_main_trains_on_from_the_opennmt_tf_checkpoint(work):
    more = work / "more.yml"
    more.write_text(yaml.safe_dump({"train": {"max_step": 3004, "save_checkpoints_steps": 2,
                                              "length_bucket_width": 1, "sub_batches": 1,
                                              "keep_checkpoint_max": 2}}))
    onmt(work, *MAIN[:2], "--config", "config.yml", "more.yml", "--seed", "1", "train")
    saved = sorted(os.listdir(work / "checkpoints"))
    assert "ckpt-3004.index" in saved and "ckpt-3002.index" in saved
    # the imported weights were trained on: the new checkpoint scores the held-out lines close
    # to OpenNMT-tf's (a few steps from its weights), not like a fresh model (about 8.3 per token)
    onmt(work, *MAIN, "score", "--features_file", "test.first100.tok.en",
         "--output_file", "after.txt")
    before, after = _scores(os.path.join(FIXTURE, "score.first100.txt")), _scores(work / "after.txt")
    assert not np.allclose(before, after)
    assert abs(after.mean() - before.mean()) < 0.1 * before.mean()
    # averaging the two new checkpoints
    onmt(work, *MAIN, "average_checkpoints", "--output_dir", "avg", "--max_count", "2")
    assert any(name.endswith(".index") for name in os.listdir(work / "avg"))


def test_onmt_main_gpt2_small_model_type(tmp_path):
    """--model_type GPT2Small is the catalog's language model (its configuration only: the
    variables' layout is tests/test_language_model.py's); with --auto_config, refused in one
    line (its schedule, CosineAnnealing, is not implemented)."""
    (tmp_path / "config.yml").write_text(yaml.safe_dump(
        {"model_dir": str(tmp_path / "run"), "data": {"vocabulary": "vocab.txt"}}))
    args = onmt_main.parse_args(["--config", str(tmp_path / "config.yml"), "--model_type",
                                 "GPT2Small", "infer", "--features_file", "x"])
    config = onmt_main.configure(args)
    assert config.model.is_language_model and config.model.maximum_position == 1024
    assert (config.model.num_layers, config.model.num_units, config.model.ffn_inner_dim) == \
        (12, 768, 3072)
    assert config.model.gelu_approximation and config.data.target_sequence_controls.end
    assert not config.data.target_sequence_controls.start
    with inside(tmp_path):
        code = onmt_main.main(["--config", "config.yml", "--model_type", "GPT2Small",
                               "--auto_config", "infer", "--features_file", "x"])
    assert code == 2


@pytest.fixture(scope="module")
def config(work):
    """run.py's config of the fixture's model (its checkpoint in model_dir)."""
    path = work / "run.yml"
    path.write_text(yaml.safe_dump({
        "model_dir": str(work), "data": {"vocabulary": str(work / "vocab.txt")}, "model": MODEL,
        "params": {"maximum_decoding_length": 30}, "infer": {"length_bucket_width": 0}}))
    return str(path)


def run(*argv):
    assert cli.main(list(argv)) == 0, argv


def test_mixed_prefix_lengths_in_one_batch(config, work):
    """infer.length_bucket_width 0 and batches of 100: every prefix length in one batch, and
    the continuations are still OpenNMT-tf's (which decoded one length per batch)."""
    (work / "big.yml").write_text("infer: {batch_size: 100}\n")
    run("infer", "--config", config, str(work / "big.yml"), "--checkpoint",
        str(work / "ckpt-3000"), "--features_file", str(work / "test.first100.prefix.en"),
        "--predictions_file", str(work / "mixed.txt"))
    expected = lines(os.path.join(FIXTURE, "pred.first100.greedy.en"))
    assert sum(a == b for a, b in zip(lines(work / "mixed.txt"), expected)) >= 99


def _infer(config, work, name, *options, extra=None):
    argv = ["infer", "--config", config]
    if extra:
        (work / f"{name}.yml").write_text(yaml.safe_dump(extra))
        argv.append(str(work / f"{name}.yml"))
    prefixes = work / "prefixes.txt"
    prefixes.write_text("".join(line + "\n" for line in
                                lines(work / "test.first100.prefix.en")[:6]))
    if "--ctranslate2" not in options:
        argv += ["--checkpoint", str(work / "ckpt-3000")]
    run(*argv, "--features_file", str(prefixes), "--predictions_file", str(work / f"{name}.txt"),
        *options)
    return lines(work / f"{name}.txt")


@functools.lru_cache(maxsize=1)
def _fixture_model():
    from test_language_model import _load

    return _load()


def _log_probability(prefix, continuation):
    """log p(continuation + </s> | prefix) under the fixture's model, position by position."""
    model, vocabulary = _fixture_model()
    ids = [int(i) for i in vocabulary.lookup(prefix + continuation)]
    logits = np.asarray(model(np.array([ids], np.int32), np.array([len(ids)], np.int32)),
                        np.float64)[0]
    top = logits.max(-1, keepdims=True)
    log_probs = logits - top - np.log(np.exp(logits - top).sum(-1, keepdims=True))
    targets = ids[len(prefix):] + [2]
    return sum(log_probs[len(prefix) - 1 + i, t] for i, t in enumerate(targets))


def test_sampling_is_seeded_and_beam_scores_are_the_model_s(config, work):
    greedy = _infer(config, work, "greedy")
    sampling = {"params": {"sampling_topk": 0, "sampling_temperature": 1.5,
                           "maximum_decoding_length": 30}}
    first = _infer(config, work, "sampled", "--seed", "7", extra=sampling)
    assert _infer(config, work, "sampled", "--seed", "7", extra=sampling) == first
    assert first != greedy
    for output, prefix in zip(first, lines(work / "prefixes.txt")):  # (<unk>: unknown words)
        assert all(a in (b, "<unk>") for a, b in zip(output.split(), prefix.split()))
        assert len(output.split()) >= len(prefix.split())
    beam = _infer(config, work, "beam", "--beam_width", "4", "--n_best", "2", "--with_scores")
    assert len(beam) == 12
    prefixes = lines(work / "prefixes.txt")
    for index in (0, 3):
        score, text = beam[2 * index].split(" ||| ")
        prefix = prefixes[index].split()
        continuation = text.split()[len(prefix):]
        assert abs(float(score) - _log_probability(prefix, continuation)) < 1e-4
        assert float(score) >= float(beam[2 * index + 1].split(" ||| ")[0])


def test_exports_continue_as_infer(config, work):
    """The 100 held-out prefixes: CTranslate2's Generator on the export and the SavedModel's
    `continue` signature (all of them in one batch, of mixed lengths) give `run.py infer`'s
    continuations (OpenNMT-tf's, 100/100 as shown above); its `score` signature gives
    `run.py score`'s numbers."""
    import ctranslate2  # noqa: F401 (the export needs it)
    import tensorflow as tf

    greedy = lines(os.path.join(FIXTURE, "pred.first100.greedy.en"))
    prefix_file = str(work / "test.first100.prefix.en")
    run("export", "--config", config, "--checkpoint", str(work / "ckpt-3000"), "--output",
        str(work / "ct2"), "--format", "ctranslate2")
    run("infer", "--config", config, "--ctranslate2", str(work / "ct2"), "--features_file",
        prefix_file, "--predictions_file", str(work / "generator.txt"))
    assert lines(work / "generator.txt") == greedy
    run("export", "--config", config, "--checkpoint", str(work / "ckpt-3000"), "--output",
        str(work / "saved"))
    loaded = tf.saved_model.load(str(work / "saved"))
    prefixes = [line.split() for line in lines(prefix_file)]
    width = max(map(len, prefixes))
    tokens = tf.constant([p + [""] * (width - len(p)) for p in prefixes])
    length = tf.constant([len(p) for p in prefixes], tf.int32)
    output = loaded.signatures["continue"](tokens=tokens, length=length)
    texts = [" ".join(t.decode() for t in row[0][:n[0]])
             for row, n in zip(output["tokens"].numpy(), output["length"].numpy())]
    assert texts == greedy
    scored = loaded.signatures["score"](tokens=tokens, length=length)["score"].numpy()
    run("score", "--config", config, "--checkpoint", str(work / "ckpt-3000"), "--features_file",
        prefix_file, "--output_file", str(work / "prefix_scores.txt"))
    assert np.abs(scored - _scores(work / "prefix_scores.txt")).max() < 1e-4


@pytest.mark.parametrize("change, message", [
    ({"data": {"source_vocabulary": "v.txt"}}, "data.source_vocabulary is not a language model's key"),
    ({"data": {"train_labels_file": "t.txt"}}, "data.train_labels_file is not a language model's key"),
    ({"eval": {"scorers": "bleu"}}, "eval.scorers: a language model is evaluated by its loss"),
    ({"model": {"gelu_approximation": True, "ffn_activation": "relu"}},
     "model.gelu_approximation needs model.ffn_activation: gelu"),
    ({"model": {"type": "transformer", "gelu_approximation": None}},
     "model.maximum_position is a language model's key"),
    ({"params": {"guided_alignment_type": "ce"}}, "params.guided_alignment_type: not for a "
                                                   "language model"),
])
def test_config_errors_name_the_key(tmp_path, change, message):
    from opennmt_lite.config import ConfigError, build_config, merge

    user = merge({"model_dir": str(tmp_path), "data": {"vocabulary": "vocab.txt"},
                  "model": MODEL}, change)
    with pytest.raises(ConfigError, match=message.replace(".", r"\.")):
        build_config(user)


def test_sequence_controls_are_the_language_model_s(tmp_path):
    from opennmt_lite.config import build_config

    base = {"model_dir": str(tmp_path), "data": {"vocabulary": "v.txt"}, "model": MODEL}
    controls = build_config(base).data.target_sequence_controls
    assert (controls.start, controls.end) == (False, True)
    # (OpenNMT-tf's LanguageModelInputter: a flag left out keeps the language model's default)
    started = dict(base, data={"vocabulary": "v.txt", "sequence_controls": {"start": True}})
    controls = build_config(started).data.target_sequence_controls
    assert (controls.start, controls.end) == (True, True)


def test_empty_prefix_and_score_predictions_are_refused(config, work, capsys):
    (work / "with_empty.txt").write_text("Install\n\nUser\n")
    code = cli.main(["infer", "--config", config, "--checkpoint", str(work / "ckpt-3000"),
                     "--features_file", str(work / "with_empty.txt")])
    error = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and "with_empty.txt, line 2: an empty prefix" in error[-1]
    code = cli.main(["score", "--config", config, "--features_file", str(work / "eval.tok.en"),
                     "--predictions_file", str(work / "eval.tok.en")])
    error = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and "--predictions_file: a language model scores" in error[-1]
    code = cli.main(["update_vocab", "--config", config, "--tgt_vocab", str(work / "vocab.txt"),
                     "--output_dir", str(work / "updated")])
    error = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and "update_vocab: not implemented for a language model" in error[-1]


def test_inspect_walks_through_the_decoder(config, work):
    """inspect of a language model: the decoder's recorded logits are the model's (as `score`
    computes them), and the HTML page walks through its causal mask and output layer."""
    from opennmt_lite.commands import inspect
    from opennmt_lite.config import load_config

    import argparse

    shown = []
    args = argparse.Namespace(config=[config], checkpoint=str(work / "ckpt-3000"),
                              sentence="User ID", ids=None, batch=None, attention_png=None,
                              values=False, html=str(work / "lm.html"), target=None)
    tensors = inspect.run(args, load_config(config), out=shown.append)
    model, vocabulary = _fixture_model()
    ids = np.array([vocabulary.lookup(["User", "ID"])], np.int32)
    expected = np.asarray(model(ids, np.array([2], np.int32)))
    assert np.abs(tensors["decoder/logits"] - expected).max() < 1e-5
    mask = tensors["decoder/mask"][0]
    assert mask.tolist() == [[1.0, 0.0], [1.0, 1.0]]
    page = (work / "lm.html").read_text(encoding="utf-8")
    assert "Causal mask" in page and "Learned position embedding" in page
    assert "next-token logits" in page


def test_start_control_reads_and_predicts_as_opennmt_tf(tmp_path):
    """data.sequence_controls {start: true}: a training line is read as `<s>` + tokens and
    predicted as tokens + `</s>` (OpenNMT-tf's decoder mode); a prefix is continued from `<s>` +
    its tokens, and an empty prefix is then a valid start."""
    from opennmt_lite import build
    from opennmt_lite.config import build_config

    text = tmp_path / "text.txt"
    text.write_text("User ID\n\nInstall older version\n")
    user = {"model_dir": str(tmp_path), "model": MODEL,
            "data": {"vocabulary": os.path.join(FIXTURE, "vocab.txt"),
                     "eval_features_file": str(text), "sequence_controls": {"start": True}}}
    config = build_config(user)
    assets = build.assets(config.data)
    batch = next(build.evaluation_input(config.data, config.eval, assets).numpy_batches())
    row = list(batch["index"]).index(0)
    user_id = list(assets.target_vocabulary.lookup(["User", "ID"]))
    assert batch["target_ids_in"][row, :3].tolist() == [1] + user_id
    assert batch["target_ids_out"][row, :3].tolist() == user_id + [2]
    assert batch["target_length"][row] == 3
    prefixes = build.prefix_input(str(text), config.infer, assets, config.data)
    lengths = {}
    for prefix_batch in prefixes.numpy_batches():
        lengths.update(zip(prefix_batch["index"].tolist(), prefix_batch["source_length"].tolist()))
    assert lengths == {0: 3, 1: 1, 2: 4}  # (`<s>` counted; no `</s>`)


def test_training_accumulates_in_bfloat16_and_resumes_exactly(work, tmp_path, caplog):
    """run.py train of a language model from scratch, with accumulation (2 batches an update)
    and bfloat16 mixed precision: stopped at step 3 and resumed to 5, the weights equal a run
    straight to 5 (the same batches, the same updates: the data position is in the checkpoint),
    and the loss fell."""
    import keras

    from opennmt_lite.checkpointing import bundle

    def train(name, steps, model_dir):
        path = tmp_path / f"{name}.yml"
        path.write_text(yaml.safe_dump({
            "model_dir": str(model_dir),
            "data": {"vocabulary": str(work / "vocab.txt"),
                     "train_features_file": str(work / "train.tok.en")},
            "model": MODEL, "params": {"optimizer": "Adam", "learning_rate": 0.002},
            "train": {"batch_type": "tokens", "batch_size": 256, "effective_batch_size": 512,
                      "max_step": steps, "save_checkpoints_steps": 100, "seed": 3,
                      "mixed_precision": "bfloat16", "save_summary_steps": 1,
                      "sub_batches": 1}}))
        run("train", "--config", str(path))

    def weights(model_dir, step):
        values = bundle.read_bundle(str(model_dir / "checkpoints" / f"ckpt-{step}"))
        return {name: value for name, value in values.items() if name.startswith("model/")}

    with caplog.at_level("INFO", logger="opennmt_lite"):
        train("straight", 5, tmp_path / "straight")
    assert "2 batch(es) per step (accum_steps)" in caplog.text
    # (the trainer ran in this process: the policy it set is still Keras' global one)
    assert keras.config.dtype_policy().name == "mixed_bfloat16"
    keras.config.set_dtype_policy("float32")
    train("first", 3, tmp_path / "resumed")
    train("then", 5, tmp_path / "resumed")
    straight, resumed = weights(tmp_path / "straight", 5), weights(tmp_path / "resumed", 5)
    assert straight.keys() == resumed.keys() and len(straight) > 10
    for name in straight:
        np.testing.assert_array_equal(straight[name], resumed[name], err_msg=name)
    with open(tmp_path / "straight" / "metrics.jsonl") as stream:
        losses = [record["loss"] for record in map(json.loads, stream)
                  if "loss" in record]
    assert len(losses) == 5 and losses[-1] < losses[0], losses
