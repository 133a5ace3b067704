"""Training the other model types on Keras' JAX backend (training/jax_step.py with the model
type's own loss, `objective.forward`) against the TensorFlow backend's TrainStep, and their
commands on JAX, in one JAX subprocess (tests/jax_worker.py's `other_models` job, TensorFlow
unimportable there, as in an install without it):
- a sequence tagger with and without CRF, a classifier and a language model
  (tests/jax_other_models_case.py), from the same weights and batches, 4 updates of 2
  accumulated batches: each float32 loss within 1e-4 relative of TensorFlow's, the trained
  weights close (the CRF's transitions included: JAX differentiates through them);
- `run.py train` on JAX of a CRF tagger from OpenNMT-tf's checkpoint (accumulation, dropout,
  evaluation every 2 steps), stopped at 1002 and resumed to 1004: bit for bit the run straight to
  1004, its evaluation the TensorFlow backend's evaluator's on the same checkpoint, and `infer`
  on JAX the TensorFlow backend's tags from it;
- `infer` of OpenNMT-tf's classifier and language model, and the language model's `score`, on
  JAX: OpenNMT-tf's labels and continuations, the TensorFlow backend's scores within 1e-5; the
  classifier's evaluator on JAX: the TensorFlow backend's metrics and OpenNMT-tf's."""

import json
import os
import shutil

import numpy as np
import pytest
import yaml

import jax_other_models_case as case
import jax_worker
import run
from opennmt_lite.checkpointing.bundle import read_bundle
from opennmt_lite.training.step import TrainStep

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures")
TAGGER = os.path.join(FIXTURES, "onmt_tf_tagger_crf")
CLASSIFIER = os.path.join(FIXTURES, "onmt_tf_classifier")
LM = os.path.join(FIXTURES, "onmt_tf_lm")
# (the fixtures' models: OpenNMT-tf's model.py files)
ENCODER = {"num_layers": 2, "num_units": 32, "num_heads": 2, "ffn_inner_dim": 64}
LM_MODEL = {"type": "language_model", **ENCODER, "ffn_activation": "gelu",
            "gelu_approximation": True, "maximum_position": 128}
PREFIXES = 4


def lines(path):
    with open(path, encoding="utf-8") as f:
        return f.read().splitlines()


def write(directory, name, content):
    path = directory / f"{name}.yml"
    path.write_text(yaml.safe_dump(content))
    return str(path)


def copied_checkpoint(source, model_dir):
    """model_dir made, with a copy of OpenNMT-tf's ckpt-1000 of the fixture `source`."""
    model_dir.mkdir()
    for file in ("checkpoint", "ckpt-1000.index", "ckpt-1000.data-00000-of-00001"):
        shutil.copy(os.path.join(source, file), model_dir)
    return str(model_dir)


def tagger_config(directory, name):
    """OpenNMT-tf's CRF tagger (bioes) trained on from its ckpt-1000 (copied into model_dir) on
    the fixture's 200 lines: batches of 32 lines, 2 per update, in one padded shape; a
    checkpoint and an evaluation every 2 steps, up to 1004."""
    return write(directory, name, {
        "model_dir": copied_checkpoint(TAGGER, directory / name),
        "data": {"train_features_file": os.path.join(TAGGER, "train.first200.tok.en"),
                 "train_labels_file": os.path.join(TAGGER, "train.first200.tags"),
                 "eval_features_file": os.path.join(TAGGER, "eval.tok.en"),
                 "eval_labels_file": os.path.join(TAGGER, "eval.tags"),
                 "source_vocabulary": os.path.join(TAGGER, "src-vocab.txt"),
                 "target_vocabulary": os.path.join(TAGGER, "tags-vocab.txt"),
                 "tagging_scheme": "bioes"},
        "model": {"type": "sequence_tagger", "crf_decoding": True, **ENCODER},
        "params": {"optimizer": "Adam", "learning_rate": 0.002},
        "train": {"batch_type": "examples", "batch_size": 32, "effective_batch_size": 64,
                  "max_step": 1004, "save_checkpoints_steps": 2, "save_summary_steps": 1,
                  "seed": 3, "xla_shapes": 1},
        "eval": {"steps": 2, "batch_size": 100},
        "infer": {"batch_size": 100}})


def fixture_configs(directory):
    """run.py's configs of OpenNMT-tf's classifier (its checkpoint copied: its evaluator writes
    into model_dir) and language model (the fixture's folder: infer and score write nothing
    there)."""
    classifier = write(directory, "classifier", {
        "model_dir": copied_checkpoint(CLASSIFIER, directory / "classifier"),
        "data": {"source_vocabulary": os.path.join(CLASSIFIER, "src-vocab.txt"),
                 "target_vocabulary": os.path.join(CLASSIFIER, "labels-vocab.txt"),
                 "eval_features_file": os.path.join(CLASSIFIER, "eval.tok.en"),
                 "eval_labels_file": os.path.join(CLASSIFIER, "eval.labels")},
        "eval": {"batch_size": 30},
        "model": {"type": "sequence_classifier", **ENCODER}, "infer": {"batch_size": 100}})
    language_model = write(directory, "language_model", {
        "model_dir": LM, "data": {"vocabulary": os.path.join(LM, "vocab.txt")},
        "model": LM_MODEL, "params": {"maximum_decoding_length": 30},
        "infer": {"length_bucket_width": 0}, "score": {"batch_size": 32}})
    return classifier, language_model


def inference_lines(directory, backend, configs):
    """{name: argv} of infer (and score) with each model, writing into directory/backend/."""
    out = directory / backend
    out.mkdir()
    prefixes = directory / "prefixes.txt"
    prefixes.write_text("".join(line + "\n" for line in
                                lines(os.path.join(LM, "test.first100.prefix.en"))[:PREFIXES]))
    return {
        "infer.tagger": ["infer", "--config", configs["tagger"], "--features_file",
                         os.path.join(TAGGER, "test.first100.tok.en"),
                         "--predictions_file", str(out / "tagger.txt")],
        "infer.classifier": ["infer", "--config", configs["classifier"], "--features_file",
                             os.path.join(CLASSIFIER, "test.first100.tok.en"),
                             "--predictions_file", str(out / "classifier.txt")],
        "infer.language_model": ["infer", "--config", configs["language_model"],
                                 "--features_file", str(prefixes),
                                 "--predictions_file", str(out / "language_model.txt")],
        "score.language_model": ["score", "--config", configs["language_model"],
                                 "--features_file", os.path.join(LM, "test.first100.tok.en"),
                                 "--output_file", str(out / "scores.txt")],
    }


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    """The JAX subprocess' arrays and command results, its folder and the configs."""
    directory = tmp_path_factory.mktemp("jax_other_models")
    configs = dict(zip(("classifier", "language_model"), fixture_configs(directory)))
    configs["tagger"] = tagger_config(directory, "tagger")
    first = write(directory, "first", {"train": {"max_step": 1002}})
    commands = {
        "train.tagger.first": ["train", "--config", configs["tagger"], first],
        "train.tagger.resumed": ["train", "--config", configs["tagger"]],
        "train.tagger.straight": ["train", "--config", tagger_config(directory, "straight")],
        **inference_lines(directory, "jax", configs),
    }
    (directory / "commands.json").write_text(json.dumps(commands))
    (directory / "evaluations.json").write_text(json.dumps({"classifier": [configs["classifier"]]}))
    arrays, results = jax_worker.run("other_models", directory)
    return directory, configs, arrays, results


@pytest.mark.parametrize("kind", case.KINDS)
def test_updates_equal_tensorflow(work, kind):
    _, _, arrays, _ = work
    expected = case.train(kind, TrainStep)
    losses, tf_losses = arrays[f"{kind}/loss"], expected["loss"]
    assert len(losses) == len(tf_losses) == case.UPDATES
    assert tf_losses[-1] < tf_losses[0] - 0.05, tf_losses  # (the same group: it is learnt)
    relative = np.abs(losses - tf_losses) / np.abs(tf_losses)
    assert relative.max() <= 1e-4, (relative.max(), losses, tf_losses)
    # (the attention's key biases left out: softmax is invariant to them, their exact gradient
    # is zero, and Adam turns the rounding noise of theirs into full-size steps)
    names = [name for name in expected
             if name.startswith("weight/") and "linear_keys/bias" not in name]
    assert names and all(f"{kind}/{name}" in arrays for name in names)
    initial = case.make_model(kind)
    from opennmt_lite.checkpointing.names import named_trainable

    start = {name: np.asarray(v.numpy()) for name, v in named_trainable(initial).items()}
    for name in names:
        got, value = arrays[f"{kind}/{name}"], expected[name]
        scale = np.linalg.norm(value - start[name[len("weight/"):]])
        assert scale > 0, name  # (every weight was trained, on TensorFlow...)
        # (...and on JAX by the same steps: Adam's 4 steps agree within 1 % of their size)
        assert np.linalg.norm(got - value) <= 0.01 * scale, (name, np.linalg.norm(got - value),
                                                              scale)
    if kind == "tagger_crf":
        assert "weight/transition_params" in names


def test_commands_ran_on_jax_without_tensorflow(work):
    _, _, _, results = work
    results = {name: result for name, result in results.items() if name != "evaluations"}
    assert results.keys() == {"train.tagger.first", "train.tagger.resumed", "train.tagger.straight",
                              "infer.tagger", "infer.classifier", "infer.language_model",
                              "score.language_model"}
    for name, result in results.items():
        assert result["status"] == 0, (name, result["stderr"][-3000:])


def metrics_steps(model_dir):
    return [json.loads(line)["step"] for line in lines(model_dir / "metrics.jsonl")]


def test_resumed_tagger_equals_the_straight_run(work):
    """The CRF tagger stopped at 1002 and resumed (its data position, dropout seeds and Adam's
    state) holds at 1004 the checkpoint of the run straight to 1004, and evaluated the same."""
    directory, _, _, _ = work
    # (each step reported once: the second run went on from 1002, it did not start again)
    assert metrics_steps(directory / "tagger") == metrics_steps(directory / "straight") == [
        1001, 1002, 1003, 1004]
    resumed = read_bundle(str(directory / "tagger" / "checkpoints" / "ckpt-1004"))
    straight = read_bundle(str(directory / "straight" / "checkpoints" / "ckpt-1004"))
    assert resumed.keys() == straight.keys()
    assert any("transition_params" in name for name in resumed)
    for name, value in straight.items():
        np.testing.assert_array_equal(resumed[name], value, err_msg=name)
    histories = [[json.loads(line) for line in
                  lines(directory / run_dir / "eval" / "history.jsonl")]
                 for run_dir in ("tagger", "straight")]
    assert [entry["step"] for entry in histories[0]] == [1002, 1004]
    assert histories[0] == histories[1]


def test_jax_evaluation_equals_tensorflow_s(work):
    """The JAX run's evaluation at 1004 (loss, perplexity, accuracy, bioes P/R/F1) is the
    TensorFlow backend's evaluator's on the same checkpoint."""
    from opennmt_lite import build
    from opennmt_lite.config import load_config

    directory, configs, _, _ = work
    config = load_config([configs["tagger"]])
    model, assets, _ = build.inference_model(config)
    got = [json.loads(line) for line in lines(directory / "tagger" / "eval" / "history.jsonl")][-1]
    # (compute: the metrics alone, the run's history is left as the JAX run wrote it)
    expected = build.evaluator(config, model, assets, got["step"]).compute(got["step"])
    assert list(got) == list(expected) == ["step", "loss", "perplexity", "accuracy", "f1",
                                           "precision", "recall"]
    assert got["step"] == 1004 and 0.1 < expected["f1"] < 1.0  # (chunks found, not all)
    for key, value in expected.items():
        assert abs(got[key] - value) <= 1e-5 * max(1.0, abs(value)), (key, got[key], value)


def test_jax_classifier_evaluation_equals_tensorflow_s_and_opennmt_tf_s(work):
    """The evaluator of OpenNMT-tf's classifier on JAX (4 batches, the last one short): the
    TensorFlow backend's metrics, and OpenNMT-tf's own `eval` within 1e-4."""
    import ast

    from opennmt_lite import build
    from opennmt_lite.config import load_config

    _, configs, _, results = work
    got = results["evaluations"]["classifier"]
    config = load_config([configs["classifier"]])
    model, assets, _ = build.inference_model(config)
    expected = build.evaluator(config, model, assets).compute(0)
    assert list(got) == list(expected) == ["step", "loss", "perplexity", "accuracy"]
    for key, value in expected.items():
        assert abs(got[key] - value) <= 1e-5 * max(1.0, abs(value)), (key, got[key], value)
    with open(os.path.join(CLASSIFIER, "eval.result.txt")) as f:
        theirs = ast.literal_eval(f.read())
    for key in ("loss", "accuracy"):
        assert abs(got[key] - theirs[key]) <= 1e-4, (key, got[key], theirs[key])


def test_jax_inference_equals_tensorflow_s(work):
    """infer on JAX: the tags of the tagger trained on JAX = the TensorFlow backend's from its
    checkpoint; OpenNMT-tf's classifier's labels and language model's continuations = OpenNMT-tf's
    own (and the TensorFlow backend's); the language model's scores = the TensorFlow backend's
    within 1e-5."""
    directory, configs, _, _ = work
    for name, argv in inference_lines(directory, "tensorflow", configs).items():
        assert run.main(argv) == 0, name
    for name in ("tagger", "classifier", "language_model"):
        ours, theirs = (lines(directory / backend / f"{name}.txt")
                        for backend in ("jax", "tensorflow"))
        assert len(ours) == (PREFIXES if name == "language_model" else 100)
        assert ours == theirs, name
    # (the tagger trained on: its tags moved away from OpenNMT-tf's ckpt-1000, but not far)
    tags = lines(directory / "jax" / "tagger.txt")
    onmt_tags = lines(os.path.join(TAGGER, "pred.first100.tags"))
    assert 80 <= sum(a == b for a, b in zip(tags, onmt_tags))
    assert lines(directory / "jax" / "classifier.txt") == lines(
        os.path.join(CLASSIFIER, "pred.first100.labels"))
    assert lines(directory / "jax" / "language_model.txt") == lines(
        os.path.join(LM, "pred.first100.greedy.en"))[:PREFIXES]
    scores = [[line.split(" ||| ") for line in lines(directory / backend / "scores.txt")]
              for backend in ("jax", "tensorflow")]
    assert len(scores[0]) == 100 and [s[1] for s in scores[0]] == [s[1] for s in scores[1]]
    np.testing.assert_allclose([float(s[0]) for s in scores[0]],
                               [float(s[0]) for s in scores[1]], rtol=1e-5)
