"""The commands of a sequence tagger and classifier (model.type sequence_tagger /
sequence_classifier): OpenNMT-tf 2.32's own command lines on the fixtures it made
(tests/fixtures/onmt_tf_{tagger_crf,tagger,classifier}: their config.yml and model.py, as
bench/onmt_model_fixtures.py ran `onmt-main`) give its outputs, and run.py's train, infer,
evaluate, average_checkpoints, export and inspect run a tagger and a classifier end to end."""

import ast
import os
import shutil

import numpy as np
import pytest
import yaml

import run
from opennmt_lite.onmt import main as onmt_main

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures")
KINDS = {"tagger_crf": "tags", "tagger": "tags", "classifier": "labels"}


def lines(path):
    with open(path, encoding="utf-8") as f:
        return f.read().splitlines()


def fixture_dir(name):
    return os.path.join(FIXTURES, f"onmt_tf_{name}")


def project(name, directory):
    """The folder OpenNMT-tf ran in, rebuilt: config.yml, model.py, vocabularies, the checkpoint
    and the test files; train.* are the first 200 training lines (what the fixture keeps)."""
    source, kind = fixture_dir(name), KINDS[name]
    os.makedirs(directory, exist_ok=True)
    for file in os.listdir(source):
        if file.endswith((".yml", ".py", ".txt", ".en", ".tags", ".labels")) or \
                file.startswith(("ckpt-", "checkpoint")):
            shutil.copy(os.path.join(source, file), directory)
    for suffix in ("tok.en", kind):
        shutil.copy(os.path.join(source, f"train.first200.{suffix}"),
                    os.path.join(directory, f"train.{suffix}"))
    return directory


def onmt(directory, *argv):
    """`onmt-main ARGV` in `directory`, in this process; it must succeed."""
    previous = os.getcwd()
    os.chdir(directory)
    try:
        assert onmt_main.main(list(argv)) == 0, argv
    finally:
        os.chdir(previous)


MAIN = ("--model", "model.py", "--config", "config.yml")


@pytest.mark.parametrize("name", sorted(KINDS))
def test_onmt_main_infer_and_eval_equal_opennmt_tf(name, tmp_path, capsys):
    """make's command lines: `infer` writes OpenNMT-tf's lines 100/100 (with and without CRF);
    `eval` prints its metrics, each within 1e-4 (the CRF's loss is its per-batch mean)."""
    work = project(name, str(tmp_path / name))
    kind = KINDS[name]
    onmt(work, *MAIN, "--checkpoint_path", "ckpt-1000", "infer", "--features_file",
         "test.first100.tok.en", "--predictions_file", "pred.txt")
    ours, theirs = lines(os.path.join(work, "pred.txt")), lines(
        os.path.join(fixture_dir(name), f"pred.first100.{kind}"))
    assert len(ours) == 100 and sum(a == b for a, b in zip(ours, theirs)) == 100
    capsys.readouterr()
    onmt(work, *MAIN, "--checkpoint_path", "ckpt-1000", "eval", "--features_file", "eval.tok.en",
         "--labels_file", f"eval.{kind}")
    metrics = ast.literal_eval(capsys.readouterr().out.strip().splitlines()[-1])
    expected = ast.literal_eval(open(os.path.join(fixture_dir(name), "eval.result.txt")).read())
    assert list(metrics) == list(expected)  # (the names, in OpenNMT-tf's order)
    for key, value in expected.items():
        assert abs(metrics[key] - value) <= 1e-4 * max(1.0, abs(value)), (key, metrics[key], value)
    # the model description is kept in model_dir, as OpenNMT-tf keeps it
    assert lines(os.path.join(work, "model_description.py")) == lines(os.path.join(work, "model.py"))


def test_onmt_main_trains_on_from_the_opennmt_tf_checkpoint(tmp_path):
    """`onmt-main ... train` with one more config file (max_step 1002): the OpenNMT-tf
    checkpoint is imported with its Adam state (the step goes on from 1000), two updates are
    made on the CRF tagger, and the tags it then writes stay close to OpenNMT-tf's."""
    import tensorflow as tf

    work = project("tagger_crf", str(tmp_path / "crf"))
    with open(os.path.join(work, "more.yml"), "w") as f:
        yaml.safe_dump({"train": {"max_step": 1002, "save_checkpoints_steps": 1002,
                                  "sub_batches": 1}}, f)
    onmt(work, *MAIN[:3], "config.yml", "more.yml", "--seed", "1", "train")
    prefix = os.path.join(work, "checkpoints", "ckpt-1002")
    assert os.path.exists(prefix + ".index")
    reader = tf.train.load_checkpoint(prefix)
    names = {name for name, _ in tf.train.list_variables(prefix)}
    step_name = next(n for n in names if n.endswith("iterations/.ATTRIBUTES/VARIABLE_VALUE"))
    assert reader.get_tensor(step_name) == 1002
    transitions = next(n for n in names if n.startswith("model/transition_params")
                       and n.endswith("VARIABLE_VALUE"))
    before = tf.train.load_checkpoint(os.path.join(work, "ckpt-1000")).get_tensor(
        "model/transition_params/.ATTRIBUTES/VARIABLE_VALUE")
    after = reader.get_tensor(transitions)
    assert 0 < np.abs(after - before).max() < 0.01  # two Adam steps of lr 0.002 moved them
    onmt(work, *MAIN, "infer", "--features_file", "test.first100.tok.en", "--predictions_file",
         "pred.txt")  # (the newest checkpoint: opennmt-lite's ckpt-1002)
    ours = lines(os.path.join(work, "pred.txt"))
    theirs = lines(os.path.join(fixture_dir("tagger_crf"), "pred.first100.tags"))
    assert sum(a == b for a, b in zip(ours, theirs)) >= 90


def run_py(*argv):
    return run.main(list(argv))


@pytest.fixture(scope="module")
def classifier_run(tmp_path_factory):
    """A classifier trained by run.py from scratch on the fixture's 200 lines (6 steps,
    evaluated at 3 and 6), its config path and folder."""
    root = tmp_path_factory.mktemp("classifier")
    source = fixture_dir("classifier")
    user = {
        "model_dir": str(root / "run"),
        "data": {"train_features_file": os.path.join(source, "train.first200.tok.en"),
                 "train_labels_file": os.path.join(source, "train.first200.labels"),
                 "eval_features_file": os.path.join(source, "eval.tok.en"),
                 "eval_labels_file": os.path.join(source, "eval.labels"),
                 "source_vocabulary": os.path.join(source, "src-vocab.txt"),
                 "target_vocabulary": os.path.join(source, "labels-vocab.txt")},
        "model": {"type": "sequence_classifier", "num_layers": 1, "num_units": 16,
                  "num_heads": 2, "ffn_inner_dim": 32},
        "params": {"optimizer": "Adam", "learning_rate": 0.003},
        "train": {"batch_type": "examples", "batch_size": 32, "effective_batch_size": 64,
                  "max_step": 6, "save_checkpoints_steps": 3, "save_summary_steps": 3,
                  "seed": 3},
        "eval": {"steps": 3, "batch_size": 16, "export_on_best": "accuracy",
                 "max_exports_to_keep": 1},
        "infer": {"batch_size": 16},
    }
    config = root / "config.yml"
    config.write_text(yaml.safe_dump(user))
    assert run_py("train", "--config", str(config)) == 0
    return str(config), root


def test_run_py_trains_a_classifier_and_evaluates_it(classifier_run):
    """Accumulation (2 batches per step), evaluation at steps 3 and 6 with OpenNMT-tf's metrics;
    `infer` writes one vocabulary label per line, and `evaluate` on them gives the accuracy the
    training evaluation recorded for the same checkpoint."""
    import json

    config, root = classifier_run
    history = [json.loads(line) for line in lines(root / "run" / "eval" / "history.jsonl")]
    assert [entry["step"] for entry in history] == [3, 6]
    assert set(history[-1]) == {"step", "loss", "perplexity", "accuracy"}
    # export on best accuracy: the SavedModel of the best evaluation (the newest one kept)
    best = 6 if history[1]["accuracy"] > history[0]["accuracy"] else 3
    assert os.listdir(root / "run" / "export") == [str(best)]
    assert os.path.exists(root / "run" / "export" / str(best) / "saved_model.pb")
    predictions = root / "pred.txt"
    source = fixture_dir("classifier")
    assert run_py("infer", "--config", config, "--features_file",
                  os.path.join(source, "eval.tok.en"), "--predictions_file", str(predictions)) == 0
    predicted = lines(predictions)
    assert len(predicted) == 100 and set(predicted) <= set(lines(os.path.join(source,
                                                                              "labels-vocab.txt")))
    from opennmt_lite.commands.evaluate import label_scores

    scores = label_scores(str(predictions), os.path.join(source, "eval.labels"),
                          "sequence_classifier")
    assert scores["lines"] == 100
    assert abs(scores["accuracy"] - history[-1]["accuracy"]) <= 1e-4


def test_run_py_average_export_and_refusals(classifier_run, tmp_path, capsys):
    """average_checkpoints averages the run's checkpoints; the SavedModel's serving_default
    gives infer's labels (OpenNMT-tf's `classes` key); score and a CTranslate2 export are
    refused in one line each."""
    import tensorflow as tf

    config, root = classifier_run
    source = fixture_dir("classifier")
    assert run_py("average_checkpoints", "--config", config, "--output_dir",
                  str(tmp_path / "avg")) == 0
    assert any(name.endswith(".index") for name in os.listdir(tmp_path / "avg"))
    assert run_py("export", "--config", config, "--output", str(tmp_path / "export")) == 0
    exported = tf.saved_model.load(str(tmp_path / "export"))
    assert {"encode", "classify", "serving_default"} <= set(exported.signatures)
    sentences = [line.split() for line in lines(os.path.join(source, "eval.tok.en"))[:16]]
    width = max(map(len, sentences))
    outputs = exported.signatures["serving_default"](
        tokens=tf.constant([s + [""] * (width - len(s)) for s in sentences]),
        length=tf.constant([len(s) for s in sentences], tf.int32))
    labels = [label.decode() for label in outputs["classes"].numpy()]
    assert labels == lines(root / "pred.txt")[:16]
    capsys.readouterr()
    for argv in (("score", "--config", config, "--features_file", "x", "--predictions_file", "y"),
                 ("export", "--config", config, "--output", str(tmp_path / "ct2"), "--format",
                  "ctranslate2"),
                 ("infer", "--config", config, "--features_file",
                  os.path.join(source, "eval.tok.en"), "--beam_width", "4")):
        assert run_py(*argv) == 2, argv
        errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
        assert len(errors) == 1 and "sequence_classifier" in errors[0], errors


def test_run_py_resumes_a_classifier_in_mixed_precision(classifier_run, tmp_path):
    """train again with max_step 8 and train.mixed_precision bfloat16: it resumes from step 6
    (opennmt-lite's checkpoint, its data position) and evaluates at the end."""
    import json

    import tensorflow as tf

    config, root = classifier_run
    with open(config) as f:
        user = yaml.safe_load(f)
    user["train"].update(max_step=8, mixed_precision="bfloat16")
    again = tmp_path / "again.yml"
    again.write_text(yaml.safe_dump(user))
    assert run_py("train", "--config", str(again)) == 0
    history = [json.loads(line) for line in lines(root / "run" / "eval" / "history.jsonl")]
    assert [entry["step"] for entry in history] == [3, 6, 8]
    assert 0.0 <= history[-1]["accuracy"] <= 1.0 and np.isfinite(history[-1]["loss"])
    prefix = str(root / "run" / "checkpoints" / "ckpt-8")
    step = next(name for name, _ in tf.train.list_variables(prefix)
                if name.endswith("iterations/.ATTRIBUTES/VARIABLE_VALUE"))
    assert tf.train.load_checkpoint(prefix).get_tensor(step) == 8


def test_tagging_scheme_bio_gives_the_accuracy_alone(tmp_path):
    """With `tagging_scheme: bio`, OpenNMT-tf prints the accuracy alone (its F1 is bioes'):
    so does evaluate, from the same files that give bioes' chunk scores."""
    from opennmt_lite.commands.evaluate import label_scores

    source = fixture_dir("tagger_crf")
    files = (os.path.join(source, "pred.first100.tags"), os.path.join(source, "test.first100.tags"))
    bio = label_scores(*files, "sequence_tagger", "bio")
    bioes = label_scores(*files, "sequence_tagger", "bioes")
    assert set(bio) == {"accuracy", "lines"} and bio["accuracy"] == bioes["accuracy"]
    assert set(bioes) == {"accuracy", "f1", "precision", "recall", "lines"}
    gold = [line.split() for line in lines(files[1])]
    predicted = [line.split() for line in lines(files[0])]
    right = sum(g == p for a, b in zip(gold, predicted) for g, p in zip(a, b))
    assert bio["accuracy"] == round(right / sum(map(len, gold)), 4)


def test_run_py_inspect_walks_through_a_tagger(tmp_path, capsys):
    """inspect on the OpenNMT-tf CRF tagger: the encoder's recorded steps, the tags it writes
    (those of `onmt-main infer`) and the HTML page."""
    source = fixture_dir("tagger_crf")
    config = tmp_path / "config.yml"
    with open(os.path.join(source, "config.yml")) as f:
        user = yaml.safe_load(f)
    user["model_dir"] = source
    user["data"] = {name: os.path.join(source, value) if name.endswith(("vocabulary", "_file"))
                    else value for name, value in user["data"].items()}
    user["model"] = {"type": "sequence_tagger", "crf_decoding": True, "num_layers": 2,
                     "num_units": 32, "num_heads": 2, "ffn_inner_dim": 64}
    config.write_text(yaml.safe_dump(user))
    sentence = lines(os.path.join(source, "test.first100.tok.en"))[0]
    capsys.readouterr()
    assert run_py("inspect", "--config", str(config), "--sentence", sentence, "--html",
                  str(tmp_path / "page.html")) == 0
    out = capsys.readouterr().out
    assert "encoder/layers/1/ffn" in out and "source_embedded" in out
    tags = next(line for line in out.splitlines() if line.startswith("tags: "))
    assert tags[len("tags: "):] == lines(os.path.join(source, "pred.first100.tags"))[0]
    assert "layer 1" in (tmp_path / "page.html").read_text()


def test_build_vocab_writes_the_source_and_the_tags_vocabularies(tmp_path):
    """build-vocab of a tagger: the word vocabulary of the features (special tokens first) and,
    the tags vocabulary being missing, the training tags sorted; an existing tags vocabulary is
    kept as it is (its order is the output layer's)."""
    source = fixture_dir("tagger")
    user = {"model_dir": str(tmp_path / "run"),
            "data": {"train_features_file": os.path.join(source, "train.first200.tok.en"),
                     "train_labels_file": os.path.join(source, "train.first200.tags"),
                     "source_vocabulary": str(tmp_path / "src.txt"),
                     "target_vocabulary": str(tmp_path / "tags.txt")},
            "model": {"type": "sequence_tagger", "num_layers": 1, "num_units": 16,
                      "num_heads": 2, "ffn_inner_dim": 32}}
    config = tmp_path / "config.yml"
    config.write_text(yaml.safe_dump(user))
    assert run_py("build-vocab", "--config", str(config)) == 0
    tags = {tag for line in lines(os.path.join(source, "train.first200.tags")) for tag in line.split()}
    assert lines(tmp_path / "tags.txt") == sorted(tags)
    words = {word for line in lines(os.path.join(source, "train.first200.tok.en"))
             for word in line.split()}
    vocabulary = lines(tmp_path / "src.txt")
    assert vocabulary[:3] == ["<blank>", "<s>", "</s>"] and set(vocabulary[3:]) == words
    (tmp_path / "tags.txt").write_text("S-NUM\nO\nB-CAP\nI-CAP\nE-CAP\nS-CAP\n")
    assert run_py("build-vocab", "--config", str(config)) == 0
    assert lines(tmp_path / "tags.txt")[:2] == ["S-NUM", "O"]
