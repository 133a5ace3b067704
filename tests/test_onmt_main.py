"""`onmt-main` (opennmt_lite/onmt/main.py): OpenNMT-tf 2.32's own command lines, as the
onmt_project fixture's make_fixtures.py ran them, give OpenNMT-tf's outputs; every option of
OpenNMT-tf's help (tests/fixtures/onmt_cli/) is implemented or refused with one line."""

import ast
import contextlib
import json
import math
import os
import re
import shutil
import subprocess
import sys
import textwrap
import types

import numpy as np
import pytest
import yaml

from conftest import FIXTURES
from data_helpers import DATA, VALID_DE, VALID_EN
from opennmt_lite.config import ALL_PRESETS
from opennmt_lite.hyperparameters import PRESETS
from opennmt_lite.onmt import main as onmt_main

PROJECT = FIXTURES / "onmt_project"
HELP = FIXTURES / "onmt_cli"
TOKENIZER = {"mode": "aggressive", "joiner_annotate": True, "segment_numbers": True}
# What the fixture's model.py describes, as a `model` section (for the stand-in reader below).
PROJECT_MODEL = {"num_layers": 2, "num_units": 32, "num_heads": 2, "ffn_inner_dim": 64,
                 "dropout": 0.1, "attention_dropout": 0.1, "ffn_dropout": 0.1,
                 "position_encoding": "none", "maximum_relative_position": 8, "pre_norm": True}
# make_fixtures.py's `main_args` (after onmt-main).
MAIN_ARGS = ["--config", "config.yml", "--model", "model.py", "--seed", "1234",
             "--intra_op_parallelism_threads", "2", "--inter_op_parallelism_threads", "1"]


@pytest.fixture(scope="module")
def model_file_reader():
    """opennmt_lite.onmt.model_file when it is there; else (until that module is merged) a
    stand-in that reads only the fixture project's model.py, so that the command lines below
    still run with `--model model.py`. Yields "real" or "stand-in"."""
    name = "opennmt_lite.onmt.model_file"
    try:
        __import__(name)
        yield "real"
        return
    except ImportError:
        pass
    import opennmt_lite.onmt as package

    stand_in = types.ModuleType(name)

    def read_model_file(path):
        assert open(path, encoding="utf-8").read() == (PROJECT / "model.py").read_text(), path
        return {"model": dict(PROJECT_MODEL), "auto_config": None}

    stand_in.read_model_file = read_model_file
    sys.modules[name], package.model_file = stand_in, stand_in
    yield "stand-in"
    del sys.modules[name], package.model_file


@pytest.fixture(scope="module")
def project(tmp_path_factory, model_file_reader):
    """The scratch folder make_fixtures.py ran OpenNMT-tf in, rebuilt: its config.yml (the
    SentencePiece model and training files at their paths here), source_tokenizer.yml,
    model.py, vocabularies, test files, beam{1,4}.yml and OpenNMT-tf's `run/` (a copy)."""
    work = tmp_path_factory.mktemp("onmt_project")
    config = yaml.safe_load((PROJECT / "config.yml").read_text())
    config["data"].update(train_features_file=os.path.join(DATA, "train.en"),
                          train_labels_file=os.path.join(DATA, "train.de"))
    config["data"]["target_tokenization"]["params"]["sp_model_path"] = str(PROJECT / "sp-de.model")
    (work / "config.yml").write_text(yaml.safe_dump(config))
    (work / "source_tokenizer.yml").write_text(yaml.safe_dump({"type": "OpenNMTTokenizer", "params": dict(
        TOKENIZER, sp_model_path=str(PROJECT / "sp-en.model"))}))
    for name in ("model.py", "src-vocab.txt", "tgt-vocab.txt", "new-src-vocab.txt",
                 "new-tgt-vocab.txt", "test.first100.en", "test.first100.de"):
        shutil.copyfile(PROJECT / name, work / name)
    shutil.copytree(PROJECT / "run", work / "run")
    for beam in (1, 4):
        (work / f"beam{beam}.yml").write_text(yaml.safe_dump({"params": {"beam_width": beam}}))
    return work


@contextlib.contextmanager
def inside(directory):
    previous = os.getcwd()
    os.chdir(directory)
    try:
        yield
    finally:
        os.chdir(previous)


def onmt(directory, *argv):
    """`onmt-main ARGV` run in `directory`, in this process; it must succeed."""
    with inside(directory):
        assert onmt_main.main(list(argv)) == 0, argv


def lines(path):
    return open(path, encoding="utf-8").read().splitlines()


def assert_same_translations(ours, reference):
    assert len(ours) == len(reference) == 100
    same = sum(a == b for a, b in zip(ours, reference))
    assert same >= 99, [(a, b) for a, b in zip(ours, reference) if a != b]


def test_infer_matches_opennmt(project, capsys):
    # make_fixtures.py's infer lines: --checkpoint_path a prefix, then a directory (OpenNMT-tf's
    # own average); without --predictions_file the translations go to standard output
    onmt(project, "--config", "config.yml", "beam4.yml", "--model", "model.py", "--checkpoint_path",
         "run/ckpt-400", "infer", "--features_file", "test.first100.en", "--predictions_file",
         "pred.ckpt400.beam4.de")
    assert_same_translations(lines(project / "pred.ckpt400.beam4.de"),
                             lines(PROJECT / "pred.ckpt400.beam4.de"))
    capsys.readouterr()
    onmt(project, "--config", "config.yml", "beam1.yml", "--model", "model.py", "--checkpoint_path",
         "run/avg", "infer", "--features_file", "test.first100.en", "--log_prediction_time")
    captured = capsys.readouterr()
    assert_same_translations(captured.out.splitlines(), lines(PROJECT / "pred.avg.beam1.de"))
    # the model file is kept in model_dir, as OpenNMT-tf keeps it
    assert (project / "run" / "model_description.py").read_text() == (PROJECT / "model.py").read_text()


def _scores(path):
    pairs = [line.split(" ||| ", 1) for line in lines(path)]
    return [float(score) for score, _ in pairs], [text for _, text in pairs]


def test_score_and_eval(project, capsys):
    onmt(project, *MAIN_ARGS, "--checkpoint_path", "run/ckpt-400", "score", "--features_file",
         "test.first100.en", "--predictions_file", "test.first100.de", "--output_file", "score.txt")
    ours, our_tokens = _scores(project / "score.txt")
    expected, expected_tokens = _scores(PROJECT / "score.ckpt400.references.txt")
    assert our_tokens == expected_tokens and len(ours) == 100
    assert max(abs(a - b) for a, b in zip(ours, expected)) <= 1e-4
    # eval: OpenNMT-tf prints the metrics dict
    capsys.readouterr()
    onmt(project, *MAIN_ARGS, "--checkpoint_path", "run/ckpt-400", "eval", "--features_file",
         "test.first100.en", "--labels_file", "test.first100.de")
    metrics = ast.literal_eval(capsys.readouterr().out.strip().splitlines()[-1])
    assert set(metrics) == {"loss", "perplexity"} and 0 < metrics["loss"] < 10
    assert math.isclose(metrics["perplexity"], math.exp(metrics["loss"]), rel_tol=1e-6)
    assert json.loads(lines(project / "run" / "eval" / "history.jsonl")[-1])["step"] == 400


def _weights(config, checkpoint):
    from opennmt_lite import build

    model, _, _ = build.inference_model(config, str(checkpoint))
    return [v.numpy() for v in model.weights if "float" in str(v.dtype)]


def test_average_checkpoints_and_update_vocab_match_opennmt(project):
    import tensorflow as tf

    from opennmt_lite.checkpointing.onmt_names import SOURCE_EMBEDDING

    onmt(project, *MAIN_ARGS, "average_checkpoints", "--output_dir", "avg3", "--max_count", "3")
    with inside(project):
        config = onmt_main.configure(onmt_main.parse_args(
            MAIN_ARGS + ["infer", "--features_file", "test.first100.en"]))
        ours, reference = _weights(config, "avg3"), _weights(config, PROJECT / "run" / "avg" / "ckpt-400")
    assert len(ours) == len(reference) > 50
    assert max(float(np.max(np.abs(a - b))) for a, b in zip(ours, reference)) <= 1e-6
    onmt(project, *MAIN_ARGS, "update_vocab", "--output_dir", "updated", "--src_vocab",
         "new-src-vocab.txt", "--tgt_vocab", "new-tgt-vocab.txt")
    suffix = "/.ATTRIBUTES/VARIABLE_VALUE"
    updated = tf.train.load_checkpoint(str(project / "updated" / "ckpt-400"))
    onmt_updated = tf.train.load_checkpoint(str(PROJECT / "updated" / "ckpt-400"))
    np.testing.assert_array_equal(updated.get_tensor("model/source_inputter/embedding" + suffix),
                                  onmt_updated.get_tensor(SOURCE_EMBEDDING + suffix))
    np.testing.assert_array_equal(updated.get_tensor("model/decoder/output_layer/bias" + suffix),
                                  onmt_updated.get_tensor("model/decoder/output_layer/bias" + suffix))


def test_train_evaluates_only_with_eval(project):
    """`train` without --with_eval does not evaluate even with evaluation files set; the
    checkpoint prefix a script writes for OpenNMT-tf's layout (model_dir/ckpt-N) is found; a
    later run without --model reads model_dir/model_description.py."""
    head = project / "valid.first10"
    for side, path in (("en", VALID_EN), ("de", VALID_DE)):
        (project / f"valid.first10.{side}").write_text("\n".join(lines(path)[:10]) + "\n")
    short = {"data": {"train_features_file": VALID_EN, "train_labels_file": VALID_DE,
                      "eval_features_file": f"{head}.en", "eval_labels_file": f"{head}.de"},
             "params": {"maximum_decoding_length": 10},
             "train": {"max_step": 2, "save_checkpoints_steps": 1, "average_last_checkpoints": 0,
                       "sample_buffer_size": 1000, "batch_size": 1024},
             "eval": {"steps": 100, "save_eval_predictions": True}}
    (project / "short.yml").write_text(yaml.safe_dump(short))
    onmt(project, "--config", "config.yml", "short.yml", "--model", "model.py", "--model_dir",
         "fresh", "train")
    fresh = project / "fresh"
    assert (fresh / "checkpoints" / "ckpt-2.index").exists()
    assert not (fresh / "eval").exists()
    assert (fresh / "model_description.py").read_text() == (PROJECT / "model.py").read_text()
    onmt(project, "--config", "config.yml", "short.yml", "--model_dir", "fresh",
         "--checkpoint_path", "fresh/ckpt-2", "infer", "--features_file", f"{head}.en",
         "--predictions_file", "fresh.de")
    assert len(lines(project / "fresh.de")) == 10
    short["train"]["max_step"] = 3
    (project / "short.yml").write_text(yaml.safe_dump(short))
    onmt(project, "--config", "config.yml", "short.yml", "--model_dir", "fresh", "train", "--with_eval")
    assert (fresh / "checkpoints" / "ckpt-3.index").exists()
    assert len(lines(fresh / "eval" / "predictions.txt.3")) == 10
    assert [json.loads(line)["step"] for line in lines(fresh / "eval" / "history.jsonl")] == [3]


SERVE = textwrap.dedent("""
    import json, sys
    import tensorflow as tf
    model = tf.saved_model.load(sys.argv[1])
    request = json.load(open(sys.argv[2]))
    tokens = tf.constant(request["tokens"], tf.string)
    length = tf.constant(request["length"], tf.int32)
    served = model.signatures["serving_default"](tokens=tokens, length=length)
    translated = model.signatures["translate"](tokens=tokens, length=length)
    assert not any(m.startswith("opennmt_lite") for m in sys.modules), "opennmt_lite was imported"
    json.dump({"keys": sorted(served), "inputs": sorted(
                   model.signatures["serving_default"].structured_input_signature[1]),
               "tokens": [[[t.decode() for t in h] for h in row] for row in served["tokens"].numpy()],
               "length": served["length"].numpy().tolist(),
               "log_probs": served["log_probs"].numpy().tolist(),
               "alignment": served["alignment"].numpy().tolist(),
               "translate_tokens": [[[t.decode() for t in h] for h in row]
                                    for row in translated["tokens"].numpy()]},
              open(sys.argv[3], "w"))
""")


def test_export_has_opennmt_serving_default(project, tmp_path):
    """A TensorFlow Serving client written for OpenNMT-tf: tokenize, call serving_default with
    `tokens` and `length`, read `tokens`/`length`/`log_probs`/`alignment`, detokenize."""
    import pyonmttok

    onmt(project, *MAIN_ARGS, "--checkpoint_path", "run/ckpt-400", "export", "--output_dir", "exported")
    source = pyonmttok.Tokenizer(**TOKENIZER, sp_model_path=str(PROJECT / "sp-en.model"))
    target = pyonmttok.Tokenizer(**TOKENIZER, sp_model_path=str(PROJECT / "sp-de.model"))
    sentences = [source.tokenize(line)[0] for line in lines(PROJECT / "test.first100.en")[:10]]
    width = max(len(s) for s in sentences)
    request = {"tokens": [s + [""] * (width - len(s)) for s in sentences],
               "length": [len(s) for s in sentences]}
    (tmp_path / "request.json").write_text(json.dumps(request))
    subprocess.run([sys.executable, "-c", SERVE, str(project / "exported"), str(tmp_path / "request.json"),
                    str(tmp_path / "result.json")], check=True, cwd=str(tmp_path),
                   env=dict(os.environ, PYTHONPATH=""), timeout=300)
    served = json.loads((tmp_path / "result.json").read_text())
    assert served["keys"] == ["alignment", "length", "log_probs", "tokens"]
    assert served["inputs"] == ["length", "tokens"]
    assert served["tokens"] == served["translate_tokens"]
    alignment = np.array(served["alignment"])  # [batch, n_best, time, source time]
    assert alignment.shape[:3] == np.array(served["tokens"]).shape and alignment.shape[3] == width
    for row, source_length in enumerate(request["length"]):
        length = served["length"][row][0]
        weights = alignment[row, 0]
        np.testing.assert_allclose(weights[:length].sum(-1), 1.0, atol=1e-4)
        assert np.abs(weights[:length, source_length:]).max(initial=0) < 1e-6  # padding: no weight
        assert not weights[length:].any()  # after the end: zeros
    texts = [target.detokenize(row[0][:n[0]]) for row, n in zip(served["tokens"], served["length"])]
    reference = lines(PROJECT / "pred.ckpt400.beam1.de")[:10]
    assert sum(a == b for a, b in zip(texts, reference)) >= 9, list(zip(texts, reference))


def _small_config(tmp_path, **extra):
    config = {"model_dir": str(tmp_path / "run"), "data": {
        "source_vocabulary": str(PROJECT / "src-vocab.txt"),
        "target_vocabulary": str(PROJECT / "tgt-vocab.txt")}, **extra}
    path = tmp_path / "config.yml"
    path.write_text(yaml.safe_dump(config))
    return str(path)


def configure(*argv):
    return onmt_main.configure(onmt_main.parse_args(list(argv)))


def test_model_type_builds_each_preset(tmp_path):
    config_path = _small_config(tmp_path)
    for name, values in PRESETS.items():
        config = configure("--config", config_path, "--model_type", name, "infer", "--features_file", "x")
        hyperparameters = config.model.hyperparameters
        if values["share_embeddings"] == "auto":  # (two vocabulary files: target sharing)
            values = dict(values, share_embeddings="target")
        assert {k: getattr(hyperparameters, k) for k in values} == values, name
        assert config.auto_config is False and config.params.beam_width == 1  # no --auto_config
    # the next run without --model_type reads the model_description.py that OpenNMT-tf writes
    description = (tmp_path / "run" / "model_description.py").read_text()
    assert 'get_model_from_catalog("TransformerTiny")' in description
    config = configure("--config", config_path, "--auto_config", "infer", "--features_file", "x")
    assert config.model.hyperparameters.num_units == 64
    assert config.auto_config is True and config.params.beam_width == 4  # Transformer's auto_config
    # a model section in the config: the command line wins (whole, not key by key)
    config_path = _small_config(tmp_path, model={"preset": "TransformerBig", "num_layers": 3},
                                auto_config=True)
    config = configure("--config", config_path, "--model_type", "TransformerBaseRelative",
                       "infer", "--features_file", "x")
    assert config.model.hyperparameters.num_layers == 6
    assert config.model.hyperparameters.maximum_relative_position == 20
    assert config.auto_config is False  # OpenNMT-tf's meaning, whatever the YAML says
    config = configure("--config", config_path, "infer", "--features_file", "x")
    assert config.model.hyperparameters.num_layers == 3  # without one, the model section


def test_global_options_reach_the_config(tmp_path):
    (tmp_path / "data").mkdir()
    shutil.copyfile(PROJECT / "src-vocab.txt", tmp_path / "data" / "src.txt")
    config_path = _small_config(tmp_path, model_dir="model")
    with open(config_path) as stream:
        values = yaml.safe_load(stream)
    values["data"]["source_vocabulary"] = "src.txt"
    (tmp_path / "config.yml").write_text(yaml.safe_dump(values))
    config = configure("--config", config_path, "--model_type", "TransformerTiny", "--run_dir",
                       str(tmp_path / "runs"), "--data_dir", str(tmp_path / "data"), "--seed", "7",
                       "train", "--num_gpus", "2")
    assert config.model_dir == str(tmp_path / "runs" / "model")
    assert config.data.source_vocabulary == str(tmp_path / "data" / "src.txt")
    assert config.train.seed == 7 and config.train.num_devices == 2
    config = configure("--config", config_path, "--model_dir", str(tmp_path / "other"),
                       "--model_type", "TransformerTiny", "--intra_op_parallelism_threads", "1",
                       "--jit_compile", "eval", "--features_file", "a.en", "--labels_file", "a.de")
    assert config.model_dir == str(tmp_path / "other")
    assert config.train.sub_batches == 1 and config.train.jit_compile is True
    assert config.data.eval_features_file == "a.en" and config.data.eval_labels_file == "a.de"


def test_checkpoint_path_in_either_layout(tmp_path):
    (tmp_path / "run" / "checkpoints").mkdir(parents=True)
    (tmp_path / "run" / "checkpoints" / "ckpt-5.index").write_text("")
    (tmp_path / "onmt").mkdir()
    (tmp_path / "onmt" / "ckpt-5.index").write_text("")
    argument = onmt_main.checkpoint_argument
    assert argument(str(tmp_path / "run" / "ckpt-5")) == str(tmp_path / "run" / "checkpoints" / "ckpt-5")
    assert argument(str(tmp_path / "onmt" / "ckpt-5")) == str(tmp_path / "onmt" / "ckpt-5")
    assert argument(str(tmp_path / "run")) == str(tmp_path / "run")
    assert argument(str(tmp_path / "run" / "ckpt-6")) == str(tmp_path / "run" / "ckpt-6")  # (its error)


def _error(capsys, argv):
    assert onmt_main.main(argv) == 2, argv
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "error: " in err, err
    return err


REFUSED_COMMAND_LINES = {  # REFUSED key -> the run type and options that give it
    "--horovod": ["train", "--horovod"],
    "--continue_from_checkpoint": ["train", "--continue_from_checkpoint"],
    "train --checkpoint_path": ["--checkpoint_path", "run/ckpt-1", "train"],
}


def test_refused_and_bad_options_are_one_line(tmp_path, capsys):
    config = ["--config", _small_config(tmp_path)]
    for name in onmt_main.REFUSED:
        option, _, value = name.partition(" ")
        if option == "--format":
            argv = config + ["--model_type", "TransformerTiny", "export", "--output_dir", "out", option, value]
        elif option == "--model_type":
            argv = config + [option, value, "infer", "--features_file", "x"]
        else:
            argv = config + ["--model_type", "TransformerTiny"] + REFUSED_COMMAND_LINES[name]
        err = _error(capsys, argv)
        assert name in err, err
    err = _error(capsys, config + ["--model_type", "TransformerTiny", "--bogus", "infer",
                                   "--features_file", "x"])
    assert "--bogus" in err
    err = _error(capsys, config + ["--model_type", "NoSuchModel", "infer", "--features_file", "x"])
    assert "NoSuchModel" in err
    err = _error(capsys, config + ["infer", "--features_file", "x"])
    assert "a model configuration is required" in err
    err = _error(capsys, config + ["--model_type", "TransformerTiny", "infer", "--features_file", "a", "b"])
    assert "multi-source" in err
    err = _error(capsys, config + ["--model_type", "TransformerTiny", "score", "--features_file", "a"])
    assert "--predictions_file" in err
    err = _error(capsys, config + ["--model", str(tmp_path / "missing.py"), "infer", "--features_file", "x"])
    assert "missing.py" in err
    # Numbers outside their range, refused by the parser before any work (--seed is train.seed:
    # keras.utils.set_random_seed would raise on a negative one).
    for option, value, message in (("--seed", "-1", "must be at least 0, got -1"),
                                   ("--seed", str(2**31), "must be at most 2147483647"),
                                   ("--intra_op_parallelism_threads", "-2", "must be at least 0")):
        err = _error(capsys, config + ["--model_type", "TransformerTiny", option, value, "train"])
        assert f"argument {option}: {message}" in err, err
    for argv, message in ((["train", "--num_gpus", "0"], "argument --num_gpus: must be at least 1, got 0"),
                          (["average_checkpoints", "--output_dir", "o", "--max_count", "0"],
                           "argument --max_count: must be at least 1, got 0")):
        err = _error(capsys, config + ["--model_type", "TransformerTiny"] + argv)
        assert message in err, err


def test_word_embedder_sized_by_pretrained_vectors(tmp_path, capsys):
    """A model file's WordEmbedder() without embedding_size needs data.source_embedding (as in
    OpenNMT-tf, which reads the size from it): without one, one line naming the file and line."""
    model = tmp_path / "model.py"
    model.write_text("import opennmt\n\n\ndef model():\n    return opennmt.models.Transformer(\n"
                     "        opennmt.inputters.WordEmbedder(), num_layers=1, num_units=64, num_heads=2,\n"
                     "        ffn_inner_dim=64)\n")
    argv = ["--model", str(model), "infer", "--features_file", "x"]
    err = _error(capsys, ["--config", _small_config(tmp_path)] + argv)
    assert f"{model}, line 6: WordEmbedder() without embedding_size" in err
    assert "data.source_embedding" in err and "data.target_embedding" not in err
    vectors = tmp_path / "vectors.txt"
    vectors.write_text("a " + " ".join(["0.5"] * 64) + "\n")
    config = configure("--config", _small_config(tmp_path, data={
        "source_vocabulary": str(PROJECT / "src-vocab.txt"),
        "target_vocabulary": str(PROJECT / "tgt-vocab.txt"),
        "source_embedding": {"path": str(vectors), "with_header": False}}), *argv)
    assert config.data.source_embedding.path == str(vectors)
    assert config.model.hyperparameters.num_units == 64


def _help_options(text):
    """The option strings of an argparse help text's "options:" section."""
    options, inside_options = set(), False
    for line in text.splitlines():
        if line.startswith("options:"):
            inside_options = True
        elif inside_options and re.match(r"^  -", line):
            for part in line.strip().split(", "):
                if part.startswith("-"):
                    options.add(part.split()[0])
    return options


def _choices(text, option):
    match = re.search(re.escape(option) + r" \{([^}]*)\}", text)
    return set(match.group(1).split(","))


def test_every_help_option_is_implemented_or_refused():
    parser = onmt_main.build_parser()
    # (the helper commands' help texts beside them are onmt-<command>.help.txt)
    texts = {path.stem: path.read_text() for path in HELP.glob("*.txt")
             if not path.name.startswith("onmt-")}
    assert set(texts) == {"main", *onmt_main.RUN_TYPES}
    for name, text in texts.items():
        ours = parser if name == "main" else parser.run_types[name]
        known = set(ours._option_string_actions)
        options = _help_options(text)
        assert len(options) >= 3 and options <= known, (name, options - known)
    # each value of the choices: implemented (a preset, an export format) or refused
    catalog = _choices(texts["main"], "--model_type")
    assert catalog == set(onmt_main.CATALOG)
    for name in catalog:
        # (GPT2Small: a language model's preset, config.ALL_PRESETS beside the Transformer's)
        assert (name in ALL_PRESETS) != (f"--model_type {name}" in onmt_main.REFUSED), name
    formats = _choices(texts["export"], "--format")
    assert formats == set(onmt_main.ALL_EXPORT_FORMATS)
    for name in formats:
        assert (name in onmt_main.EXPORT_FORMATS) != (f"--format {name}" in onmt_main.REFUSED), name
    run_types = _choices(texts["main"].split("positional arguments:")[1], "")
    assert run_types == set(onmt_main.RUN_TYPES) == set(onmt_main.RUNS)


def test_model_file_and_its_auto_config(tmp_path, monkeypatch, capsys):
    """--model goes through opennmt_lite.onmt.model_file.read_model_file (here a stand-in, to
    test the wiring alone): its model replaces the model section, its custom auto_config() sits
    above the Transformer's values and below the files, and only with --auto_config; its
    errors (a UserError naming the file and line) are one line."""
    import opennmt_lite.onmt as package
    from opennmt_lite.errors import UserError

    def read_model_file(path):
        if path.endswith("bad.py"):
            raise UserError(f"{path}, line 3: opennmt.encoders.RNNEncoder is not supported")
        if path.endswith("no_bias.py"):  # a carrier hyper-parameter without a model-section key
            return {"model": {"num_layers": 1, "num_units": 16, "num_heads": 2,
                              "ffn_inner_dim": 32, "mha_bias": False}, "auto_config": None}
        return {"model": {"num_layers": 1, "num_units": 16, "num_heads": 2, "ffn_inner_dim": 32,
                          "ffn_activation": "gelu", "mha_bias": True},
                "auto_config": {"params": {"beam_width": 2}, "train": {"batch_size": 100,
                                                                        "max_step": 7}}}

    stand_in = types.ModuleType("opennmt_lite.onmt.model_file")
    stand_in.read_model_file = read_model_file
    monkeypatch.setitem(sys.modules, "opennmt_lite.onmt.model_file", stand_in)
    monkeypatch.setattr(package, "model_file", stand_in, raising=False)
    for name in ("model.py", "bad.py", "no_bias.py"):
        (tmp_path / name).write_text("import opennmt\n")
    config_path = _small_config(tmp_path, train={"max_step": 9}, model={"num_layers": 5})
    common = ["--config", config_path, "--model", str(tmp_path / "model.py")]
    config = configure(*common, "--auto_config", "infer", "--features_file", "x")
    hyperparameters = config.model.hyperparameters
    assert (hyperparameters.num_layers, hyperparameters.ffn_activation) == (1, "gelu")
    assert config.params.beam_width == 2 and config.train.batch_size == 100  # its auto_config
    assert config.train.max_step == 9  # the file above it
    assert config.params.learning_rate == 2.0  # the Transformer's auto_config below it
    config = configure(*common, "infer", "--features_file", "x")
    assert config.params.beam_width == 1 and config.train.max_step == 9 and not config.auto_config
    err = _error(capsys, ["--config", config_path, "--model", str(tmp_path / "bad.py"), "infer",
                          "--features_file", "x"])
    assert "bad.py, line 3" in err
    err = _error(capsys, ["--config", config_path, "--model", str(tmp_path / "no_bias.py"),
                          "infer", "--features_file", "x"])
    assert "no_bias.py: mha_bias=False cannot be configured here" in err
