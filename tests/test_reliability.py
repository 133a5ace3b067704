"""Reliability: derived files replaced whole and checked, one trainer per model_dir, user errors
as one line with exit status 2, exit statuses after signals, inputs that cannot be translated."""

import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import sentencepiece as spm
import tensorflow as tf
import yaml

import run
from conftest import ONMT_FIXTURE
from data_helpers import REPO
from training_helpers import TINY_MODEL, training_user, write_slice
from opennmt_lite import build
from opennmt_lite.checkpointing import store
from opennmt_lite.config import build_config, load_config
from opennmt_lite.data.fingerprints import fingerprint_path
from opennmt_lite.data.tokenizers import sentencepiece_to_vocabulary_tokens, train_sentencepiece
from opennmt_lite.data.vocab import Vocabulary, VocabularyError
from opennmt_lite.data.vocab_builder import build_vocab

RUN = [sys.executable, os.path.join(REPO, "run.py")]
ENV = dict(os.environ, TF_DETERMINISTIC_OPS="1", TF_CPP_MIN_LOG_LEVEL="3")
FIXTURE_CONFIG = ONMT_FIXTURE.parent / "onmt_fixture.yml"
SOURCE_LINES = str(ONMT_FIXTURE / "test.first8.tok.en")


def main(capsys, argv):
    """(exit status, stderr) of `run.py argv` run in this process."""
    capsys.readouterr()
    code = run.main([str(a) for a in argv])
    return code, capsys.readouterr().err


def error_lines(err):
    """stderr without tqdm's progress lines."""
    return [line for line in err.splitlines() if line.strip() and "\r" not in line]


def write_yaml(path, content):
    path.write_text(content if isinstance(content, str) else yaml.safe_dump(content))
    return path


# -- derived files: vocabularies and SentencePiece models, replaced together -------------------

def small_vocab_kwargs(directory, size):
    files = write_slice(str(directory / "data"), lines=300)
    return dict(features_file=files["train.en"], labels_file=files["train.de"],
                source_model_prefix=str(directory / "sp" / "en"),
                target_model_prefix=str(directory / "sp" / "de"),
                source_vocabulary=str(directory / "vocab" / "en.txt"),
                target_vocabulary=str(directory / "vocab" / "de.txt"),
                source_size=size, target_size=size)


def data_section(kwargs):
    user = {"model_dir": "unused", "model": TINY_MODEL, "data": {
        "source_vocabulary": kwargs["source_vocabulary"],
        "target_vocabulary": kwargs["target_vocabulary"],
        "source_tokenization": {"model": kwargs["source_model_prefix"] + ".model"},
        "target_tokenization": {"model": kwargs["target_model_prefix"] + ".model"}}}
    return build_config(user).data


def side_state(vocabulary_path, model_path):
    """The number of pieces of the model, after checking that the vocabulary file holds exactly
    the model's pieces (what a vocabulary built from it holds)."""
    processor = spm.SentencePieceProcessor(model_file=model_path)
    pieces = [processor.id_to_piece(i) for i in range(processor.get_piece_size())]
    vocabulary = Vocabulary.from_file(vocabulary_path)
    assert vocabulary.tokens == sentencepiece_to_vocabulary_tokens(pieces, processor), vocabulary_path
    return len(pieces)


def test_vocabulary_rebuild_killed_at_any_point_is_refused_or_whole(tmp_path, monkeypatch):
    kwargs = small_vocab_kwargs(tmp_path, size=120)
    build_vocab(**kwargs)
    data = data_section(kwargs)
    build.assets(data)
    snapshot = tmp_path / "snapshot"
    shutil.copytree(tmp_path / "sp", snapshot / "sp")
    shutil.copytree(tmp_path / "vocab", snapshot / "vocab")
    rebuilt = dict(kwargs, source_size=140, target_size=140)
    real_replace = os.replace
    outcomes = []
    for kill_at in range(100):
        for name in ("sp", "vocab"):
            shutil.rmtree(tmp_path / name)
            shutil.copytree(snapshot / name, tmp_path / name)
        calls = []

        def replace(source, target):
            if len(calls) == kill_at:  # the process dies here (a kill -9 would also leave the temporaries)
                raise KeyboardInterrupt
            calls.append(target)
            return real_replace(source, target)

        monkeypatch.setattr(os, "replace", replace)
        try:
            build_vocab(**rebuilt)
            finished = True
        except KeyboardInterrupt:
            finished = False
        finally:
            monkeypatch.setattr(os, "replace", real_replace)
        try:
            build.assets(data)
        except VocabularyError as error:
            assert "rebuild the vocabularies and SentencePiece models" in str(error)
            outcomes.append("refused")
        else:
            # accepted: each side's vocabulary is its model's, and both sides are of one build
            sizes = {side_state(kwargs[f"{side}_vocabulary"], kwargs[f"{side}_model_prefix"] + ".model")
                     for side in ("source", "target")}
            assert sizes in ({120}, {140}), sizes
            outcomes.append(sizes.pop())
        if finished:
            break
    assert finished and outcomes[-1] == 140
    assert outcomes[0] == 120  # killed before any rename: the previous files, untouched
    assert "refused" in outcomes  # mid-way states exist, and every one of them is refused
    assert set(outcomes) == {120, 140, "refused"}


def test_train_refuses_a_vocabulary_whose_model_changed(tmp_path, capsys):
    kwargs = small_vocab_kwargs(tmp_path, size=120)
    build_vocab(**kwargs)
    # a rebuild killed between the two sides: the target model is new, its vocabulary is not
    other = tmp_path / "other"
    train_sentencepiece(kwargs["labels_file"], str(other / "de"), 100, vocabulary_path=str(other / "de.txt"))
    shutil.copy(other / "de.model", kwargs["target_model_prefix"] + ".model")
    user = training_user(tmp_path, model=TINY_MODEL, lines=300)
    user["data"].update(source_vocabulary=kwargs["source_vocabulary"],
                        target_vocabulary=kwargs["target_vocabulary"],
                        source_tokenization={"model": kwargs["source_model_prefix"] + ".model"},
                        target_tokenization={"model": kwargs["target_model_prefix"] + ".model"})
    config = write_yaml(tmp_path / "train.yml", user)
    code, err = main(capsys, ["train", "--config", config])
    assert code == 2
    assert error_lines(err) == [err.strip()] and err.startswith("error: data.target_vocabulary: ")
    assert "was not built from the SentencePiece model" in err and "build-vocab" in err
    assert not os.path.exists(os.path.join(user["model_dir"], "checkpoints"))
    # a vocabulary without a fingerprint (OpenNMT-tf's, hand-made) is taken as it is
    os.remove(fingerprint_path(kwargs["target_vocabulary"]))
    build.assets(load_config(config).data)


# -- one trainer per model directory ---------------------------------------------------------

def tiny_train_config(tmp_path, name, **train):
    user = training_user(tmp_path / name, model=TINY_MODEL, lines=400,
                         train={"save_checkpoints_steps": 2, "save_summary_steps": 1, **train})
    return write_yaml(tmp_path / f"{name}.yml", user), user["model_dir"]


def reported_steps(model_dir):
    path = os.path.join(model_dir, "metrics.jsonl")
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line)["step"] for line in f if line.strip()]


def wait_for_step(model_dir, step, process, timeout=300):
    deadline = time.time() + timeout
    while time.time() < deadline and process.poll() is None:
        steps = reported_steps(model_dir)
        if steps and steps[-1] >= step:
            return steps[-1]
        time.sleep(0.05)
    raise AssertionError(f"step {step} not reached (exit status {process.poll()})")


def newest_checkpoint_step(model_dir):
    """The step of the checkpoint a resumed run would restore."""
    return int(tf.train.load_checkpoint(store.latest(model_dir)).get_tensor(
        "optimizer/iterations/.ATTRIBUTES/VARIABLE_VALUE"))


def test_second_trainer_fails_at_once_and_a_killed_ones_lock_is_taken_over(tmp_path, capsys, caplog):
    config, model_dir = tiny_train_config(tmp_path, "locked", max_step=100000)
    first = subprocess.Popen(RUN + ["train", "--config", config], env=ENV,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for_step(model_dir, 3, first)
        started = time.time()
        code, err = main(capsys, ["train", "--config", config])
        assert code == 2 and time.time() - started < 10
        assert len(error_lines(err)) == 1, err
        assert f"is already being trained by pid {first.pid} on host " in err and " since " in err
        assert first.poll() is None  # the first trainer goes on
    finally:
        first.kill()  # kill -9: no chance to release anything
        first.wait()
    assert f"pid {first.pid}" in open(os.path.join(model_dir, ".lock")).read()
    # a new trainer takes over (the kernel released the dead one's lock) and resumes
    step = newest_checkpoint_step(model_dir)
    resumed = tmp_path / "resumed.yml"
    user = yaml.safe_load(open(config))
    user["train"]["max_step"] = step + 2
    write_yaml(resumed, user)
    with caplog.at_level(logging.INFO, logger="opennmt_lite"):
        code, err = main(capsys, ["train", "--config", resumed])
    assert code == 0, err
    assert f"left by pid {first.pid} on host" in caplog.text
    assert newest_checkpoint_step(model_dir) == step + 2
    assert open(os.path.join(model_dir, ".lock")).read() == ""  # released on exit


# -- signals: exit statuses 130 and 143, after saving --------------------------------------

# (SIGTERM: 143, in test_interruption.py)
@pytest.mark.parametrize("signum, status", [(signal.SIGINT, 130)])
def test_signal_saves_then_exits_with_128_plus_its_number(tmp_path, signum, status):
    config, model_dir = tiny_train_config(tmp_path, "signal", max_step=100000, save_checkpoints_steps=1000)
    process = subprocess.Popen(RUN + ["train", "--config", config], env=ENV, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)
    wait_for_step(model_dir, 3, process)
    process.send_signal(signum)
    output, _ = process.communicate(timeout=120)
    assert process.returncode == status, output
    assert "Traceback" not in output
    name = signal.Signals(signum).name
    assert f"stopped by {name} at step" in output
    assert newest_checkpoint_step(model_dir) == reported_steps(model_dir)[-1]


def test_second_ctrl_c_stops_at_once_with_one_line(tmp_path):
    config, model_dir = tiny_train_config(tmp_path, "twice", max_step=100000, save_checkpoints_steps=1000)
    process = subprocess.Popen(RUN + ["train", "--config", config], env=ENV, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)
    wait_for_step(model_dir, 3, process)
    process.send_signal(signal.SIGINT)
    time.sleep(0.05)
    process.send_signal(signal.SIGINT)
    output, _ = process.communicate(timeout=120)
    assert process.returncode == 130, output
    assert "Traceback" not in output and "KeyboardInterrupt" not in output


# -- user errors: one line, exit status 2, whatever the command -------------------------------

@pytest.fixture(scope="module")
def configs(tmp_path_factory):
    """Base configs: `train` (a tiny model on a data slice), `infer` (the OpenNMT-tf fixture)."""
    directory = tmp_path_factory.mktemp("configs")
    fixture = yaml.safe_load(FIXTURE_CONFIG.read_text())
    fixture["model_dir"] = os.path.join(REPO, fixture["model_dir"])
    train = training_user(directory / "train", model=TINY_MODEL, lines=300)
    (directory / "a_file").write_text("x\n")
    (directory / "empty.txt").write_text("")
    (directory / "two.txt").write_text("a\nb\n")
    (directory / "full").mkdir()
    (directory / "full" / "saved_model.pb").write_text("x")
    return {"train": train, "infer": fixture, "dir": directory}


def merged(base, changes):
    result = json.loads(json.dumps(base))
    for dotted, value in changes.items():
        *parents, name = dotted.split(".")
        node = result
        for parent in parents:
            if not isinstance(node.get(parent), dict):
                node[parent] = {}
            node = node[parent]
        if value is DELETE:
            node.pop(name, None)
        else:
            node[name] = value
    return result


DELETE = object()
FILE = "{dir}/a_file"  # an existing file, where a directory is expected
TRAIN_ARGS = ["train", "--config", "{config}"]
INFER_ARGS = ["infer", "--config", "{config}", "--features_file", SOURCE_LINES]
EXPORT_ARGS = ["export", "--config", "{config}"]
INSPECT_ARGS = ["inspect", "--config", "{config}"]
VOCAB_ARGS = ["build-vocab", "--config", "{config}"]

# (id, base config or raw YAML, config changes, arguments, what the message must name)
HOSTILE = [
    # build-vocab
    ("vocab-size-negative", "train", {}, VOCAB_ARGS + ["--size", "-1"], "argument --size"),
    ("vocab-size-text", "train", {}, VOCAB_ARGS + ["--size", "ten"], "argument --size"),
    ("vocab-spm-size-0", "train", {"data.source_tokenization.vocabulary_size": 0}, VOCAB_ARGS,
     "data.source_tokenization.vocabulary_size"),
    ("vocab-one-side-only", "train", {"data.target_tokenization": DELETE}, VOCAB_ARGS,
     "data.target_tokenization"),
    ("vocab-model-type", "train", {"data.source_tokenization.model_type": "words"}, VOCAB_ARGS,
     "data.source_tokenization.model_type"),
    ("vocab-missing-training-file", "train", {"data.train_features_file": "/no/such/train.en",
                                              "data.source_tokenization.model": "{dir}/new/en.model",
                                              "data.target_tokenization.model": "{dir}/new/de.model"},
     VOCAB_ARGS, "/no/such/train.en"),
    ("vocab-one-vocabulary-two-models", "train", {"data.target_vocabulary": "{dir}/shared.txt",
                                                  "data.source_vocabulary": "{dir}/shared.txt"},
     VOCAB_ARGS, "data.source_vocabulary"),
    # train
    ("num-devices-0", "train", {}, TRAIN_ARGS + ["--num_devices", "0"], "argument --num_devices"),
    ("num-devices-negative", "train", {}, TRAIN_ARGS + ["--num_devices", "-3"], "argument --num_devices"),
    ("num-devices-text", "train", {}, TRAIN_ARGS + ["--num_devices", "two"], "argument --num_devices"),
    ("log-level", "train", {}, TRAIN_ARGS + ["--log_level", "LOUD"], "argument --log_level"),
    ("batch-size-0", "train", {"train.batch_size": 0}, TRAIN_ARGS, "train.batch_size"),
    ("batch-size-text", "train", {"train.batch_size": "big"}, TRAIN_ARGS, "train.batch_size"),
    ("max-step-negative", "train", {"train.max_step": -5}, TRAIN_ARGS, "train.max_step"),
    ("mixed-precision", "train", {"train.mixed_precision": "float64"}, TRAIN_ARGS, "train.mixed_precision"),
    ("batch-type", "train", {"train.batch_type": "sentences"}, TRAIN_ARGS, "train.batch_type"),
    ("keep-checkpoint-max-0", "train", {"train.keep_checkpoint_max": 0}, TRAIN_ARGS, "train.keep_checkpoint_max"),
    ("save-steps-0", "train", {"train.save_checkpoints_steps": 0}, TRAIN_ARGS, "train.save_checkpoints_steps"),
    ("effective-batch-0", "train", {"train.effective_batch_size": 0}, TRAIN_ARGS, "train.effective_batch_size"),
    ("misspelt-key", "train", {"train.batch_sise": 3}, TRAIN_ARGS, "train.batch_sise: unknown key"),
    ("learning-rate-negative", "train", {"params.learning_rate": -1.0}, TRAIN_ARGS, "params.learning_rate"),
    ("optimizer", "train", {"params.optimizer": "Adamax"}, TRAIN_ARGS, "params.optimizer"),
    ("optimizer-params", "train", {"params.optimizer_params": {"beta_3": 0.5}}, TRAIN_ARGS,
     "params.optimizer_params"),
    ("warmup-0", "train", {"params.decay_params": {"warmup_steps": 0}}, TRAIN_ARGS,
     "params.decay_params.warmup_steps"),
    ("label-smoothing", "train", {"params.label_smoothing": 1.5}, TRAIN_ARGS, "params.label_smoothing"),
    ("heads-do-not-divide", "train", {"model.num_heads": 3}, TRAIN_ARGS, "model.num_heads"),
    ("dropout-1", "train", {"model.dropout": 1.0}, TRAIN_ARGS, "model.dropout"),
    ("layers-0", "train", {"model.num_layers": 0}, TRAIN_ARGS, "model.num_layers"),
    ("scorer", "train", {"eval.scorers": ["meteor"]}, TRAIN_ARGS, "eval.scorers"),
    ("early-stopping-metric", "train", {"eval.early_stopping": {"metric": "bleu", "steps": 2}},
     TRAIN_ARGS, "eval.early_stopping.metric"),
    ("model-dir-is-a-file", "train", {"model_dir": FILE}, TRAIN_ARGS, "model_dir {dir}/a_file is a file"),
    ("model-dir-cannot-be-created", "train", {"model_dir": FILE + "/run"}, TRAIN_ARGS,
     "model_dir {dir}/a_file/run cannot be created"),
    ("duplicate-key", "model_dir: x\ntrain:\n  batch_size: 8\n  max_step: 3\n  batch_size: 16\n", {},
     TRAIN_ARGS, "line 5: duplicate key train.batch_size (first set on line 3)"),
    ("duplicate-top-key", "model_dir: x\nauto_config: true\nmodel_dir: y\n", {}, TRAIN_ARGS,
     "line 3: duplicate key model_dir"),
    ("invalid-yaml", "model_dir: [x\n", {}, TRAIN_ARGS, "invalid YAML"),
    ("config-missing", None, {}, ["train", "--config", "{dir}/nothing.yml"], "config file {dir}/nothing.yml not found"),
    ("config-is-a-directory", None, {}, ["train", "--config", "{dir}"], "config file {dir} is a directory"),
    # infer
    ("beam-0", "infer", {}, INFER_ARGS + ["--beam_width", "0"], "argument --beam_width"),
    ("beam-negative", "infer", {}, INFER_ARGS + ["--beam_width", "-3"], "argument --beam_width"),
    ("n-best-0", "infer", {}, INFER_ARGS + ["--n_best", "0"], "argument --n_best"),
    ("n-best-above-beam", "infer", {}, INFER_ARGS + ["--n_best", "5"], "n_best (5) cannot exceed"),
    ("infer-batch-0", "infer", {"infer.batch_size": 0}, INFER_ARGS, "infer.batch_size"),
    ("infer-maximum-length-0", "infer", {"infer.maximum_features_length": 0}, INFER_ARGS,
     "infer.maximum_features_length"),
    ("features-missing", "infer", {}, ["infer", "--config", "{config}", "--features_file", "/no/such.en"],
     "/no/such.en"),
    ("predictions-is-a-directory", "infer", {}, INFER_ARGS + ["--predictions_file", "{dir}"],
     "--predictions_file {dir} is a directory"),
    ("checkpoint-missing", "infer", {}, INFER_ARGS + ["--checkpoint", "{dir}/ckpt-7"], "{dir}/ckpt-7"),
    ("vocabulary-missing", "infer", {"data.source_vocabulary": "/no/vocab.txt"}, INFER_ARGS,
     "data.source_vocabulary"),
    ("with-scores-text", "infer", {"infer.with_scores": "yes"}, INFER_ARGS, "infer.with_scores"),
    # export
    ("export-output-not-empty", "infer", {}, EXPORT_ARGS + ["--output", "{dir}/full"], "--output {dir}/full"),
    ("export-output-is-a-file", "infer", {}, EXPORT_ARGS + ["--output", FILE], "--output {dir}/a_file"),
    ("export-format", "infer", {}, EXPORT_ARGS + ["--output", "{dir}/x", "--format", "onnx"], "argument --format"),
    # evaluate
    ("evaluate-empty", None, {}, ["evaluate", "--predictions_file", "{dir}/empty.txt",
                                  "--references_file", "{dir}/empty.txt"], "{dir}/empty.txt is empty"),
    ("evaluate-missing", None, {}, ["evaluate", "--predictions_file", "/no/pred.txt",
                                    "--references_file", "{dir}/two.txt"], "/no/pred.txt"),
    ("evaluate-misaligned", None, {}, ["evaluate", "--predictions_file", "{dir}/two.txt",
                                       "--references_file", SOURCE_LINES], "{dir}/two.txt has 2 lines"),
    ("evaluate-directory", None, {}, ["evaluate", "--predictions_file", "{dir}",
                                      "--references_file", "{dir}/two.txt"], "{dir}"),
    # inspect
    ("inspect-ids-text", "infer", {}, INSPECT_ARGS + ["--ids", "5 nine"], "--ids"),
    ("inspect-ids-outside", "infer", {}, INSPECT_ARGS + ["--ids", "5 99999"], "--ids: 99999"),
    ("inspect-empty-sentence", "infer", {}, INSPECT_ARGS + ["--sentence", " "], "--sentence"),
    ("inspect-png-is-a-file", "infer", {}, INSPECT_ARGS + ["--ids", "5", "--attention_png", FILE],
     "--attention_png {dir}/a_file"),
]


@pytest.mark.parametrize("base, changes, argv, named", [case[1:] for case in HOSTILE],
                         ids=[case[0] for case in HOSTILE])
def test_hostile_values_are_one_line_user_errors(configs, capsys, base, changes, argv, named):
    directory = str(configs["dir"])
    config = configs["dir"] / "case.yml"
    if base in ("train", "infer"):
        changes = {k: v.format(dir=directory) if isinstance(v, str) else v for k, v in changes.items()}
        write_yaml(config, merged(configs[base], changes))
    elif base is not None:
        write_yaml(config, base)
    argv = [a.format(dir=directory, config=config) for a in argv]
    code, err = main(capsys, argv)
    assert code == 2, err
    assert "Traceback" not in err
    lines = error_lines(err)
    assert named.format(dir=directory) in lines[-1], err
    assert len(lines) == 1 or lines[-1].startswith(f"run.py {argv[0]}: error: argument")  # argparse: usage first


def test_bugs_print_the_traceback_and_say_so(monkeypatch, capsys):
    from opennmt_lite.commands import evaluate

    monkeypatch.setattr(evaluate, "score_files", lambda *args: {}["no such key"])
    code, err = main(capsys, ["evaluate", "--predictions_file", SOURCE_LINES, "--references_file", SOURCE_LINES])
    assert code == 1
    assert "Traceback" in err and "KeyError" in err
    assert err.strip().splitlines()[-1].startswith("this is a bug in opennmt-lite")


# -- surprising but legal values: said once in the log ----------------------------------------

def test_surprising_values_are_logged_once(caplog, monkeypatch):
    from opennmt_lite import cpu

    user = {"model_dir": "unused", "model": TINY_MODEL, "train": {
        "batch_size": 4096, "effective_batch_size": 1000, "mixed_precision": "bfloat16"}}
    train = build_config(user).train
    monkeypatch.setattr(cpu, "cpu_features", lambda: cpu.CpuFeatures(frozenset({"avx2", "fma"})))
    with caplog.at_level(logging.WARNING, logger="opennmt_lite"):
        build.warn_surprises(train)
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 2
    assert "train.effective_batch_size (1000) is smaller than train.batch_size (4096)" in messages[0]
    assert "bfloat16 on a CPU without bfloat16 instructions" in messages[1] and "0.66x" in messages[1]
    caplog.clear()
    monkeypatch.setattr(cpu, "cpu_features", lambda: cpu.CpuFeatures(frozenset({"avx512_bf16"})))
    with caplog.at_level(logging.WARNING, logger="opennmt_lite"):
        build.warn_surprises(build_config(dict(user, train={"batch_size": 4096})).train)
    assert not caplog.records


# -- inputs that cannot be translated ---------------------------------------------------------

def infer_config(tmp_path, **infer):
    fixture = yaml.safe_load(FIXTURE_CONFIG.read_text())
    fixture["model_dir"] = os.path.join(REPO, fixture["model_dir"])
    fixture["infer"].update(infer)
    return write_yaml(tmp_path / "infer.yml", fixture)


def lines_with_an_enormous_one(tmp_path):
    lines = open(SOURCE_LINES, encoding="utf-8").read().splitlines()[:3]
    enormous = " ".join([lines[0]] * 5000)  # about 50 000 tokens
    path = tmp_path / "source.txt"
    path.write_text("\n".join([lines[0], enormous, lines[2]]) + "\n", encoding="utf-8")
    return path, lines


def test_an_enormous_line_is_translated_truncated_and_named(tmp_path, capsys, caplog):
    config = infer_config(tmp_path, maximum_features_length=40)
    source, lines = lines_with_an_enormous_one(tmp_path)
    output = tmp_path / "pred.txt"
    with caplog.at_level(logging.WARNING, logger="opennmt_lite"):
        code, err = main(capsys, ["infer", "--config", config, "--features_file", source,
                                  "--predictions_file", output])
    assert code == 0, err
    assert f"{source}, line 2: " in caplog.text and "translating its first 40 tokens" in caplog.text
    translated = output.read_text(encoding="utf-8").splitlines()
    assert len(translated) == 3 and translated[1]
    reference = tmp_path / "reference.txt"
    (tmp_path / "two.txt").write_text(f"{lines[0]}\n{lines[2]}\n", encoding="utf-8")
    assert main(capsys, ["infer", "--config", config, "--features_file", tmp_path / "two.txt",
                         "--predictions_file", reference])[0] == 0
    assert reference.read_text(encoding="utf-8").splitlines() == [translated[0], translated[2]]
    assert load_config(FIXTURE_CONFIG).infer.maximum_features_length == 1024  # the default


def test_a_line_that_does_not_fit_in_memory_is_reported_and_the_rest_translated(tmp_path, monkeypatch, caplog):
    from opennmt_lite.inference import translate

    real = translate.translation_function

    def running_out_of_memory(model, options, return_attention=False):
        decode = real(model, options, return_attention)

        def run(source_ids, source_length):
            if int(np.max(source_length)) > 30:
                raise tf.errors.ResourceExhaustedError(None, None, "OOM when allocating tensor")
            return decode(source_ids, source_length)
        return run

    monkeypatch.setattr(translate, "translation_function", running_out_of_memory)
    config = load_config(infer_config(tmp_path, maximum_features_length=200, batch_size=3))
    source, _ = lines_with_an_enormous_one(tmp_path)
    model, assets, _ = build.inference_model(config)
    data = build.inference_input(str(source), config.infer, assets)
    with caplog.at_level(logging.WARNING, logger="opennmt_lite"):
        results = translate.translate_file(model, assets, data, build.decoding_options(
            config.params, config.infer), progress=False)
    assert results[1] == [("", float("-inf"))]
    assert results[0][0][0] and results[2][0][0]
    assert "line 2 (200 tokens) could not be translated: not enough memory" in caplog.text
    assert "1 line(s) of 3 could not be translated" in caplog.text


def test_infer_replaces_its_output_whole(tmp_path, monkeypatch, capsys):
    from opennmt_lite.inference import translate

    output = tmp_path / "pred.txt"
    output.write_text("the previous translations\n")

    def interrupted(results, with_scores, alignments=None):
        yield "a first line"
        raise KeyboardInterrupt  # Ctrl-C while writing

    monkeypatch.setattr(translate, "format_lines", interrupted)
    code, err = main(capsys, ["infer", "--config", infer_config(tmp_path), "--features_file",
                              SOURCE_LINES, "--predictions_file", output])
    assert code == 130 and "Traceback" not in err
    assert output.read_text() == "the previous translations\n"
    assert sorted(os.listdir(tmp_path)) == ["infer.yml", "pred.txt"]
