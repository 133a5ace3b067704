"""A full disk, a file-size limit, a read-only or permission-denied directory, met in the middle
of a write, and output paths that cannot be written at all.

Every writing command, at 5 points of each write or more: it stops with one `error:` line (exit
status 2) naming the path and the OS error, no traceback; nothing is left at the final name of
what it was writing; every file that was there before is byte for byte the same; and, for
training, the next run resumes from the newest intact checkpoint.

Two ways to fail a write: files TensorFlow writes (checkpoints, SavedModels) and the C++
writers (SentencePiece) are cut by RLIMIT_FSIZE at chosen byte counts, in a subprocess that
ignores SIGXFSZ (tests/fault_worker.py: writes past the limit fail with EFBIG); files Python
writes get an injected OSError (ENOSPC, EROFS, EACCES) at the k-th open, write, fsync, rename or
removal. (chmod is no test: root, which CI runs as, writes anyway.)
"""

import builtins
import copy
import errno
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys

import pytest
import yaml

import run
from data_helpers import REPO
from training_helpers import TINY_MODEL, training_user
from opennmt_lite import build, files, outputs
from opennmt_lite.checkpointing import store
from opennmt_lite.config import build_config, load_config
from opennmt_lite.errors import OutputError

WORKER = os.path.join(REPO, "tests", "fault_worker.py")
OS_ERRORS = {errno.ENOSPC: "No space left on device (ENOSPC)",
             errno.EROFS: "Read-only file system (EROFS)",
             errno.EACCES: "Permission denied (EACCES)"}
EFBIG = ("File too large", "EFBIG")


# -- helpers ---------------------------------------------------------------------------------

def checksums(directory):
    """{path relative to directory: sha256} of every file under `directory`."""
    found = {}
    for root, _, names in os.walk(directory):
        for name in names:
            path = os.path.join(root, name)
            with open(path, "rb") as f:
                found[os.path.relpath(path, directory)] = hashlib.sha256(f.read()).hexdigest()
    return found


def leftovers(directory):
    """Temporary files and folders of writes under `directory` (none may survive a failure)."""
    pattern = re.compile(r"(\.partial|\.previous|\.tmp|_temp)$|^\.write-test-|^\.ctranslate2-")
    return [os.path.join(root, name) for root, dirs, names in os.walk(directory)
            for name in dirs + names if pattern.search(name)]


def one_error(code, err, *named, exit_code=2):
    """The one `error:` line of a failed command, which names each of `named`."""
    assert code == exit_code, err
    assert "Traceback" not in err, err
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, err
    for text in named:
        assert text in lines[0], (text, lines[0])
    return lines[0]


def names_os_error(line, *options):
    assert any(option in line for option in options), line


def main(capsys, argv):
    capsys.readouterr()
    code = run.main([str(a) for a in argv])
    return code, capsys.readouterr().err


def write_config(path, user):
    path.write_text(yaml.safe_dump(user))
    return str(path)


class Faults:
    """Replaces `module.name` (open, os.replace, os.fsync, os.remove...) so that its `nth`
    call whose first argument's path contains `where` raises OSError(`error`) (for `open`, the
    nth opening for writing). With `after_bytes`, the file opened fails each write once that
    many bytes have been written to it."""

    def __init__(self, monkeypatch, module, name, error, nth=1, where="", after_bytes=None):
        self.real = getattr(module, name)
        where = "" if name == "fsync" else where  # (called with a descriptor, not a path)
        self.opens = self.real is builtins.open
        self.error, self.nth, self.where, self.after_bytes = error, nth, where, after_bytes
        self.calls, self.failed = 0, None
        monkeypatch.setattr(module, name, self)

    def __call__(self, *args, **kwargs):
        target = os.fspath(args[0]) if args and isinstance(args[0], (str, bytes, os.PathLike)) else ""
        mode = args[1] if len(args) > 1 else kwargs.get("mode", "r")
        if self.opens and "w" not in mode:
            return self.real(*args, **kwargs)  # (only files opened for writing count)
        if self.failed is None and self.where in str(target):
            self.calls += 1
            if self.calls == self.nth:
                if self.after_bytes is not None:
                    return _FillingFile(self.real(*args, **kwargs), self)
                self.failed = target
                raise OSError(self.error, os.strerror(self.error), target)
        return self.real(*args, **kwargs)


class _FillingFile:
    """A file that takes `after_bytes` bytes, then fails each write with the injected error."""

    def __init__(self, stream, faults):
        self._stream, self._faults, self._written = stream, faults, 0

    def write(self, data):
        room = self._faults.after_bytes - self._written
        if len(data) > room:
            self._stream.write(data[:max(room, 0)])
            self._written += max(room, 0)
            self._faults.failed = self._stream.name
            raise OSError(self._faults.error, os.strerror(self._faults.error), self._stream.name)
        self._written += len(data)
        return self._stream.write(data)

    def __getattr__(self, name):
        return getattr(self._stream, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._stream.close()


# -- a small trained run, shared ----------------------------------------------------------------

@pytest.fixture(scope="module")
def project(tmp_path_factory):
    """A tiny model trained 4 steps (checkpoints 1, 2 and 4), its config file, a source file."""
    root = tmp_path_factory.mktemp("faults")
    user = training_user(root, model=TINY_MODEL, lines=200, params={"maximum_decoding_length": 8}, train={
        "max_step": 4, "save_checkpoints_steps": 2, "keep_checkpoint_max": 3,
        "save_summary_steps": 1000})
    build.trainer(build_config(user)).run()
    source = root / "source.txt"
    source.write_text("Hello world .\nThe house is small .\n")
    return {"root": root, "user": user, "config": write_config(root / "config.yml", user),
            "source": str(source)}


def copy_run(project, directory, **train):
    """A copy of the trained run in `directory` and its config (train keys overridden)."""
    user = copy.deepcopy(project["user"])
    user["model_dir"] = str(directory / "run")
    user["train"].update(train)
    shutil.copytree(project["user"]["model_dir"], user["model_dir"])
    return user, write_config(directory / "config.yml", user)


@pytest.fixture(scope="module")
def saver(project):
    """A training checkpoint of the project's model, built once, pointed at a folder per test."""
    return build.training_checkpoint(build_config(project["user"]))


def fresh_checkpoints(project, saver, directory):
    """saver restored from a copy (in `directory`) of the trained run's checkpoints."""
    _, _ = copy_run(project, directory)
    folder = str(directory / "run" / "checkpoints")
    saver.save_dir = saver.restore_dir = folder
    saver.latest, saver.max_to_keep = None, 3  # (as train.keep_checkpoint_max: 3)
    assert saver.restore().endswith("ckpt-4")
    return folder


# -- the output-path policy ----------------------------------------------------------------

def test_output_file_policy(tmp_path, monkeypatch):
    blocker = tmp_path / "a_file"
    blocker.write_text("x")
    with pytest.raises(OutputError, match=r"^--out .* is a directory, not a file$"):
        outputs.check_file(tmp_path, "--out")
    with pytest.raises(OutputError, match=f"^--out {blocker}/x.txt cannot be created: {blocker} is a file"):
        outputs.check_file(blocker / "x.txt", "--out")
    with pytest.raises(OutputError, match=f"^--out {tmp_path}/new/x.txt: directory {tmp_path}/new does not exist$"):
        outputs.check_file(tmp_path / "new" / "x.txt", "--out")
    assert not (tmp_path / "new").exists()
    outputs.check_file(tmp_path / "made" / "deep" / "x.txt", "data.x", create_parents=True)  # a config's path
    assert (tmp_path / "made" / "deep").is_dir() and not (tmp_path / "made" / "deep" / "x.txt").exists()
    for code, text in OS_ERRORS.items():  # a directory that refuses files: found by writing one
        Faults(monkeypatch, outputs.tempfile, "mkstemp", code)
        with pytest.raises(OutputError, match=re.escape(f"--out {tmp_path}/x.txt cannot be written: {tmp_path}: {text}")):
            outputs.check_file(tmp_path / "x.txt", "--out")
        monkeypatch.undo()
    assert not leftovers(tmp_path)


def test_output_directory_and_model_dir_policy(tmp_path, monkeypatch):
    blocker = tmp_path / "a_file"
    blocker.write_text("x")
    full = tmp_path / "full"
    full.mkdir()
    (full / "notes.txt").write_text("keep")
    with pytest.raises(OutputError, match=f"^--dir {blocker} is a file, not a directory$"):
        outputs.check_directory(blocker, "--dir")
    with pytest.raises(OutputError, match=f"^--dir {full} already holds files: give a new or empty directory, or --force"):
        outputs.check_directory(full, "--dir")
    with pytest.raises(OutputError, match=r"holds files: give a new or empty directory$"):
        outputs.check_directory(full, "--dir", force_option=None)
    outputs.check_directory(full, "--dir", force=True)
    outputs.check_directory(tmp_path / "new", "--dir")
    with pytest.raises(OutputError, match=f"^--dir {blocker}/out cannot be created: {blocker} is a file"):
        outputs.check_directory(blocker / "out", "--dir")
    with pytest.raises(OutputError, match=f"^model_dir {blocker} is a file, not a directory$"):
        outputs.check_model_dir(blocker)
    with pytest.raises(OutputError, match=f"^model_dir {blocker}/run cannot be created: {blocker} is a file"):
        outputs.check_model_dir(blocker / "run")
    assert outputs.check_model_dir(tmp_path / "runs" / "one") and (tmp_path / "runs" / "one").is_dir()
    Faults(monkeypatch, outputs.tempfile, "mkstemp", errno.EROFS)
    with pytest.raises(OutputError, match=re.escape(f"model_dir {full} cannot be written: {full}: Read-only file system (EROFS)")):
        outputs.check_model_dir(full)
    assert (full / "notes.txt").read_text() == "keep"


def test_every_writing_command_refuses_an_output_under_a_file(project, tmp_path, capsys):
    blocker = tmp_path / "a_file"
    blocker.write_text("x")
    config, source = project["config"], project["source"]
    vocabulary = project["user"]["data"]["target_vocabulary"]
    cases = [
        (["infer", "--config", config, "--features_file", source, "--predictions_file", blocker / "p.txt"], "--predictions_file"),
        (["score", "--config", config, "--features_file", source, "--predictions_file", source,
          "--output_file", blocker / "s.txt"], "--output_file"),
        (["export", "--config", config, "--output", blocker / "m"], "--output"),
        (["export", "--config", config, "--output", blocker / "m", "--format", "ctranslate2"], "--output"),
        (["average_checkpoints", "--config", config, "--output_dir", blocker / "avg"], "--output_dir"),
        (["update_vocab", "--config", config, "--tgt_vocab", vocabulary, "--output_dir", blocker / "u"], "--output_dir"),
        (["inspect", "--config", config, "--ids", "5", "--html", blocker / "p.html"], "--html"),
        (["inspect", "--config", config, "--ids", "5", "--attention_png", blocker / "png"], "--attention_png"),
    ]
    for argv, option in cases:
        code, err = main(capsys, argv)
        one_error(code, err, f"{option} {blocker}/", f"cannot be created: {blocker} is a file")
    user = copy.deepcopy(project["user"])
    user["data"]["source_vocabulary"] = str(blocker / "en.txt")
    code, err = main(capsys, ["build-vocab", "--config", write_config(tmp_path / "bv.yml", user)])
    one_error(code, err, f"data.source_vocabulary {blocker}/en.txt cannot be created")
    assert blocker.read_text() == "x"


def test_checkpoint_outputs_need_a_new_or_empty_directory_unless_forced(project, tmp_path, capsys):
    config = project["config"]
    full = tmp_path / "full"
    full.mkdir()
    (full / "checkpoint").write_text("someone else's state file")
    vocabulary = project["user"]["data"]["target_vocabulary"]
    for argv in (["average_checkpoints", "--config", config, "--output_dir", full],
                 ["update_vocab", "--config", config, "--tgt_vocab", vocabulary, "--output_dir", full]):
        code, err = main(capsys, argv)
        one_error(code, err, f"--output_dir {full} already holds files", "--force")
        assert os.listdir(full) == ["checkpoint"]
    assert main(capsys, ["average_checkpoints", "--config", config, "--output_dir", full, "--force"])[0] == 0
    assert store.latest(str(full)) == str(full / "ckpt-4")


def test_infer_with_a_directory_that_is_not_a_ctranslate2_model(project, tmp_path, capsys):
    config, source = project["config"], project["source"]
    model = tmp_path / "ct2"
    assert main(capsys, ["export", "--config", config, "--output", model, "--format", "ctranslate2"])[0] == 0
    empty = tmp_path / "empty"
    empty.mkdir()
    corrupt = tmp_path / "corrupt"
    shutil.copytree(model, corrupt)
    (corrupt / "model.bin").write_bytes(b"\x00garbage" * 10)
    no_config = tmp_path / "no_config"
    shutil.copytree(model, no_config)
    os.remove(no_config / "config.json")
    bad_config = tmp_path / "bad_config"
    shutil.copytree(model, bad_config)
    (bad_config / "config.json").write_bytes(b"\xff{not json")
    cases = [(empty, "no CTranslate2 model (model.bin)"), (project["source"], "no CTranslate2 model"),
             (corrupt, "not a loadable CTranslate2 model"), (no_config, "no config.json"),
             (bad_config, "config.json cannot be read")]
    for directory, message in cases:
        code, err = main(capsys, ["infer", "--config", config, "--features_file", source,
                                  "--ctranslate2", directory])
        one_error(code, err, f"--ctranslate2 {directory}", message)


# -- files Python writes: an injected OSError at the k-th operation -------------------------

# (function replaced, its module, which call fails, bytes written first, error)
PYTHON_POINTS = [
    ("open", builtins, 1, None, errno.ENOSPC),  # creating the temporary file
    ("open", builtins, 1, 0, errno.ENOSPC),  # its first byte
    ("open", builtins, 1, 1, errno.ENOSPC),  # after its first byte
    ("fsync", os, 1, None, errno.EROFS),  # syncing it
    ("replace", os, 1, None, errno.EACCES),  # renaming it onto the output
]


def _point_id(point):
    name, _, nth, after, code = point
    return f"{name}{nth}-{'' if after is None else f'at{after}-'}{errno.errorcode[code]}"


@pytest.mark.parametrize("point", PYTHON_POINTS, ids=_point_id)
def test_infer_predictions_file_write_fault(project, tmp_path, capsys, monkeypatch, point):
    name, module, nth, after, code = point
    predictions = tmp_path / "out" / "pred.txt"
    predictions.parent.mkdir()
    predictions.write_text("the previous translations\n")
    before = checksums(tmp_path)
    where = str(tmp_path / "out")
    Faults(monkeypatch, module, name, code, nth, where=where, after_bytes=after)
    status, err = main(capsys, ["infer", "--config", project["config"], "--features_file",
                                project["source"], "--predictions_file", predictions])
    monkeypatch.undo()
    one_error(status, err, f"--predictions_file {predictions}", OS_ERRORS[code])
    assert checksums(tmp_path) == before and not leftovers(tmp_path)


WORD_POINTS = PYTHON_POINTS + [
    ("open", builtins, 2, 3, errno.ENOSPC),  # the second vocabulary
    ("replace", os, 2, None, errno.EROFS),  # the second rename: the first one is undone
]


@pytest.mark.parametrize("point", WORD_POINTS, ids=_point_id)
def test_build_vocab_write_fault(project, tmp_path, capsys, monkeypatch, point):
    name, module, nth, after, code = point
    user = copy.deepcopy(project["user"])
    user["data"].update(source_vocabulary=str(tmp_path / "vocab" / "en.txt"),
                        target_vocabulary=str(tmp_path / "vocab" / "de.txt"),
                        source_tokenization={"type": "space"}, target_tokenization={"type": "space"})
    config = write_config(tmp_path / "config.yml", user)
    (tmp_path / "vocab").mkdir()
    for side in ("en", "de"):
        (tmp_path / "vocab" / f"{side}.txt").write_text(f"<blank>\n<s>\n</s>\nold-{side}\n")
    before = checksums(tmp_path / "vocab")
    Faults(monkeypatch, module, name, code, nth, where=str(tmp_path / "vocab"), after_bytes=after)
    status, err = main(capsys, ["build-vocab", "--config", config])
    monkeypatch.undo()
    one_error(status, err, "build-vocab: cannot write", str(tmp_path / "vocab"), OS_ERRORS[code])
    assert checksums(tmp_path / "vocab") == before and not leftovers(tmp_path)
    assert main(capsys, ["build-vocab", "--config", config])[0] == 0  # and with room again
    assert checksums(tmp_path / "vocab") != before


def onmt_tool(capsys, command, argv):
    """(exit status, stderr) of one of OpenNMT-tf's helper commands run in this process."""
    from opennmt_lite.onmt import tools

    capsys.readouterr()
    code = getattr(tools, command)([str(a) for a in argv])
    return code, capsys.readouterr().err


@pytest.mark.parametrize("sentencepiece", [False, True], ids=["words", "sentencepiece"])
@pytest.mark.parametrize("point", PYTHON_POINTS, ids=_point_id)
def test_onmt_build_vocab_write_fault(tmp_path, capsys, monkeypatch, point, sentencepiece):
    """onmt-build-vocab over the files of an earlier run: the faults of the files Python writes
    (the vocabulary; with --sentencepiece also the model's rewrite with its final prefix, its
    sync and its move out of the training directory) keep them as they were."""
    name, module, nth, after, code = point
    output = tmp_path / "out"
    output.mkdir()
    prefix = output / "vocab"
    argv = ["--save_vocab", prefix, os.path.join(REPO, "data", "valid.en")]
    if sentencepiece:
        argv = ["--sentencepiece", "--size", "120"] + argv
    assert onmt_tool(capsys, "build_vocab", argv)[0] == 0
    before = checksums(output)
    Faults(monkeypatch, module, name, code, nth, where=str(output), after_bytes=after)
    status, err = onmt_tool(capsys, "build_vocab", argv)
    monkeypatch.undo()
    one_error(status, err, f"--save_vocab {prefix}: cannot write {prefix}", OS_ERRORS[code])
    assert checksums(output) == before and not leftovers(tmp_path)
    assert not [n for n in os.listdir(output) if n.startswith(".vocab-")]  # (its training directory)


# The checkpoint's own files are TensorFlow's (see the RLIMIT tests below); Python writes the
# `checkpoint` state file and deletes the rotated checkpoints.
SAVE_POINTS = [
    ("open", builtins, 1, None, errno.ENOSPC, "checkpoint.tmp"),
    ("open", builtins, 1, 10, errno.ENOSPC, "checkpoint.tmp"),
    ("fsync", os, 1, None, errno.EROFS, ""),
    ("replace", os, 1, None, errno.EACCES, "checkpoint.tmp"),
    ("remove", os, 1, None, errno.EROFS, "ckpt-1"),  # rotation
    ("remove", os, 2, None, errno.EACCES, "ckpt-1"),  # rotation, second file of the old checkpoint
]


@pytest.mark.parametrize("point", SAVE_POINTS, ids=lambda p: _point_id(p[:5]))
def test_checkpoint_state_file_and_rotation_faults(project, saver, tmp_path, monkeypatch, point):
    name, module, nth, after, code, where = point
    folder = fresh_checkpoints(project, saver, tmp_path)
    before = checksums(folder)
    Faults(monkeypatch, module, name, code, nth, where=os.path.join(folder, where), after_bytes=after)
    with pytest.raises(OutputError) as raised:
        saver.save(5)
    monkeypatch.undo()
    message = str(raised.value)
    assert "\n" not in message and OS_ERRORS[code] in message and "ckpt-5" in message
    # The new checkpoint is complete (verified before the state file and the rotation): the
    # one to resume from; the older ones and their files are untouched, none deleted.
    kept = {k: v for k, v in before.items() if k.startswith(("ckpt-2.", "ckpt-4."))}
    assert {k: v for k, v in checksums(folder).items() if k in kept} == kept
    assert store.latest(os.path.dirname(folder)) == os.path.join(folder, "ckpt-5")
    assert store.damage(os.path.join(folder, "ckpt-5")) is None and not leftovers(folder)


def test_a_failed_save_in_training_is_one_line_and_the_next_run_resumes(project, tmp_path, capsys,
                                                                          monkeypatch):
    """The state file after the save at step 6 cannot be written: `train` stops with status 2;
    the next run resumes from ckpt-6 (intact), nothing redone before it."""
    user, config = copy_run(project, tmp_path, max_step=8)
    folder = os.path.join(user["model_dir"], "checkpoints")
    Faults(monkeypatch, builtins, "open", errno.ENOSPC, 1, where=os.path.join(folder, "checkpoint.tmp"))
    status, err = main(capsys, ["train", "--config", config])
    monkeypatch.undo()
    one_error(status, err, os.path.join(folder, "ckpt-6"), OS_ERRORS[errno.ENOSPC])
    trainer = build.trainer(load_config([config]))
    assert trainer.step == 6 and trainer.checkpoint.latest == os.path.join(folder, "ckpt-6")
    assert int(trainer.groups_done.numpy()) == 6  # the data position saved with it


# -- files TensorFlow (and C++) writes: RLIMIT_FSIZE in a subprocess ------------------------------

def run_worker(tmp_path, jobs):
    """tests/fault_worker.py's results for `jobs` (one subprocess: TensorFlow starts once)."""
    jobs_path, results_path = tmp_path / "jobs.json", tmp_path / "results.json"
    jobs_path.write_text(json.dumps(jobs))
    # (its output on pipes: a captured file would be cut by the limit as well)
    done = subprocess.run([sys.executable, WORKER, str(jobs_path), str(results_path)], cwd=REPO,
                          timeout=600, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"),
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-5000:]
    return json.loads(results_path.read_text())


def stream_output(command, argv, data):
    """The standard output (bytes) of a stdin-to-stdout helper command given `data`."""
    import io

    stdin, stdout = sys.stdin, sys.stdout
    sys.stdin = io.TextIOWrapper(io.BytesIO(data), encoding="utf-8")
    sys.stdout = io.TextIOWrapper(io.BytesIO(), encoding="utf-8")
    try:
        assert command(argv) == 0
        sys.stdout.flush()
        return sys.stdout.buffer.getvalue()
    finally:
        sys.stdin, sys.stdout = stdin, stdout


@pytest.fixture(scope="module")
def limited(project, tmp_path_factory):
    """Every TensorFlow-written output cut at 5 byte counts, in one worker: checkpoint saves,
    a training run, averages, vocabulary updates, SavedModel and CTranslate2 exports,
    build-vocab's SentencePiece models, onmt-build-vocab's files and the standard output of
    onmt-tokenize-text / onmt-detokenize-text. {kind: [(limit, result, context)]}."""
    root = tmp_path_factory.mktemp("limited")
    config = project["config"]
    model_dir = project["user"]["model_dir"]
    data_size = os.path.getsize(os.path.join(model_dir, "checkpoints", "ckpt-4.data-00000-of-00001"))
    # From nothing written to the last bytes of the largest file (a checkpoint's data; a
    # SavedModel's or CTranslate2 model's weights are a third of it: no Adam moments).
    limits = [0, 512, 16384, data_size // 8, data_size // 4]
    # (a checkpoint's size varies by a few bytes: its object graph is stored with the data)
    near_end = data_size * 99 // 100
    jobs, contexts = [], []

    def add(kind, limit, job, context):
        jobs.append(dict(job, limit=limit))
        contexts.append((kind, limit, context))

    for limit in limits + [near_end]:
        directory = root / f"save-{limit}"
        directory.mkdir()
        _, saved_config = copy_run(project, directory)
        folder = str(directory / "run" / "checkpoints")
        add("save", limit, {"save": {"config": saved_config, "directory": folder, "step": 5}},
            {"folder": folder, "before": checksums(folder)})
    for limit in limits:
        output = root / f"avg-{limit}"
        add("average", limit, {"argv": ["average_checkpoints", "--config", config, "--output_dir", str(output)]},
            {"output": str(output)})
    new_vocabulary = root / "new-de.txt"
    tokens = open(project["user"]["data"]["target_vocabulary"], encoding="utf-8").read().split("\n")
    new_vocabulary.write_text("\n".join(tokens[:-20] + ["brand-new"]) + "\n")
    for limit in limits:
        output = root / f"vocab-{limit}"
        add("update_vocab", limit, {"argv": ["update_vocab", "--config", config, "--tgt_vocab",
                                             str(new_vocabulary), "--output_dir", str(output)]},
            {"output": str(output)})
    for limit in limits:
        output = root / f"saved_model-{limit}"
        add("saved_model", limit, {"argv": ["export", "--config", config, "--output", str(output)]},
            {"output": str(output)})
    previous = root / "ct2-previous"  # a model replaced with --force: kept whole on a failure
    assert run.main(["export", "--config", config, "--output", str(previous), "--format", "ctranslate2"]) == 0
    for limit in limits:
        output = root / f"ct2-{limit}"
        if limit == limits[-1]:
            output = previous
        add("ctranslate2", limit, {"argv": ["export", "--config", config, "--output", str(output),
                                            "--format", "ctranslate2", "--force"]},
            {"output": str(output), "before": checksums(output) if output.exists() else None})
    # build-vocab: SentencePiece models trained again over models already there.
    user = copy.deepcopy(project["user"])
    vocab_dir = root / "spm"
    user["data"].update(source_vocabulary=str(vocab_dir / "en.txt"), target_vocabulary=str(vocab_dir / "de.txt"),
                        source_tokenization={"type": "sentencepiece", "model": str(vocab_dir / "en.model"),
                                             "vocabulary_size": 300},
                        target_tokenization={"type": "sentencepiece", "model": str(vocab_dir / "de.model"),
                                             "vocabulary_size": 300})
    vocab_config = write_config(root / "spm.yml", user)
    assert run.main(["build-vocab", "--config", vocab_config]) == 0
    model_size = os.path.getsize(vocab_dir / "en.model")
    for limit in (0, 100, 2000, model_size // 2, model_size - 1):
        add("build-vocab", limit, {"argv": ["build-vocab", "--config", vocab_config]},
            {"output": str(vocab_dir), "before": checksums(vocab_dir)})
    # OpenNMT-tf's helper commands, over the files of an earlier run: onmt-build-vocab's word
    # vocabulary and its SentencePiece model (above the size of the data pyonmttok's learner
    # copies to a temporary file, so that only the model is cut), and the standard output of
    # onmt-tokenize-text / onmt-detokenize-text redirected to a file.
    onmt_dir = root / "onmt"
    onmt_dir.mkdir()
    vocab_dir = onmt_dir / "vocab"  # (only the files onmt-build-vocab writes)
    vocab_dir.mkdir()
    sample = onmt_dir / "sample.en"
    with open(os.path.join(REPO, "data", "valid.en"), encoding="utf-8") as stream:
        sample.write_text("".join(stream.readlines()[:200]))
    words = ["--save_vocab", str(vocab_dir / "words.txt"), str(sample)]
    pieces = ["--sentencepiece", "--size", "100", "--save_vocab", str(vocab_dir / "sp"), str(sample)]
    from opennmt_lite.onmt import tools

    assert tools.build_vocab(words) == 0 and tools.build_vocab(pieces) == 0
    onmt_size = os.path.getsize(vocab_dir / "sp.model")
    words_size = os.path.getsize(vocab_dir / "words.txt")
    for limit in (0, 10, words_size - 1):
        add("onmt-build-vocab", limit, {"onmt": "build_vocab", "argv": words},
            {"output": str(vocab_dir / "words.txt"), "directory": str(vocab_dir), "before": checksums(vocab_dir)})
    for limit in (sample.stat().st_size + 4096, onmt_size // 2, onmt_size - 1):
        add("onmt-build-vocab", limit, {"onmt": "build_vocab", "argv": pieces},
            {"output": str(vocab_dir / "sp.model"), "directory": str(vocab_dir), "before": checksums(vocab_dir)})
    tokenized = onmt_dir / "sample.tok"
    tokenized.write_bytes(stream_output(tools.tokenize_text, ["--delimiter", "|"], sample.read_bytes()))
    for command, stdin in (("tokenize_text", sample), ("detokenize_text", tokenized)):
        expected = stream_output(getattr(tools, command), ["--delimiter", "|"], stdin.read_bytes())
        for limit in (0, 10, len(expected) // 2):
            stdout = onmt_dir / f"{command}-{limit}.out"
            add("onmt-stdout", limit, {"onmt": command, "argv": ["--delimiter", "|"],
                                       "stdin": str(stdin), "stdout": str(stdout)},
                {"output": str(stdout), "expected": expected.decode("utf-8")})
    # train: the first save of a resumed run cut short
    train_dir = root / "train"
    train_dir.mkdir()
    train_user, train_config = copy_run(project, train_dir, max_step=8)
    add("train", near_end, {"argv": ["train", "--config", train_config]},
        {"config": train_config, "folder": os.path.join(train_user["model_dir"], "checkpoints"),
         "before": checksums(os.path.join(train_user["model_dir"], "checkpoints"))})
    results = run_worker(root, jobs)
    grouped = {}
    for (kind, limit, context), result in zip(contexts, results):
        grouped.setdefault(kind, []).append((limit, result, context))
    return grouped


def test_checkpoint_save_cut_at_each_byte_count(limited):
    for limit, result, context in limited["save"]:
        line = one_error(result["code"], result["stderr"], "saving checkpoint", "ckpt-5")
        names_os_error(line, *EFBIG)
        folder = context["folder"]
        assert checksums(folder) == context["before"], limit  # ckpt-1, 2, 4 and the state file
        assert not [n for n in os.listdir(folder) if n.startswith("ckpt-5")], limit
        assert store.latest(os.path.dirname(folder)) == os.path.join(folder, "ckpt-4")


def test_training_cut_short_resumes_from_the_newest_intact_checkpoint(limited):
    [(limit, result, context)] = limited["train"]
    folder = context["folder"]
    line = one_error(result["code"], result["stderr"], os.path.join(folder, "ckpt-6"), "ckpt-4")
    names_os_error(line, *EFBIG)
    assert checksums(folder) == context["before"] and not leftovers(folder)
    trainer = build.trainer(load_config([context["config"]]))
    assert trainer.step == 4 and trainer.checkpoint.latest == os.path.join(folder, "ckpt-4")
    assert trainer.run()["checkpoint"] == os.path.join(folder, "ckpt-8")


@pytest.mark.parametrize("kind", ["average", "update_vocab"])
def test_checkpoint_outputs_cut_at_each_byte_count(project, limited, kind):
    for limit, result, context in limited[kind]:
        line = one_error(result["code"], result["stderr"], context["output"], "ckpt-4")
        names_os_error(line, *EFBIG)
        output = context["output"]
        assert not os.path.exists(output) or os.listdir(output) == [], (limit, os.listdir(output))
    assert store.damage(os.path.join(project["user"]["model_dir"], "checkpoints", "ckpt-4")) is None


@pytest.mark.parametrize("kind", ["saved_model", "ctranslate2"])
def test_exports_cut_at_each_byte_count(limited, kind):
    for limit, result, context in limited[kind]:
        line = one_error(result["code"], result["stderr"], f"--output {context['output']}")
        names_os_error(line, *EFBIG)
        output = context["output"]
        if context.get("before"):  # a model replaced with --force: the previous one intact
            assert checksums(output) == context["before"], limit
        else:
            assert not os.path.exists(output), limit
        assert not leftovers(os.path.dirname(output)), limit


def test_build_vocab_cut_at_each_byte_count(limited):
    for limit, result, context in limited["build-vocab"]:
        line = one_error(result["code"], result["stderr"], context["output"])
        # (SentencePiece does not report its failed writes: a model cut short is found by reading it)
        names_os_error(line, *EFBIG, "only in part (no space left or a file-size limit?)")
        assert checksums(context["output"]) == context["before"], limit
        assert not leftovers(context["output"]), limit


def test_onmt_build_vocab_cut_at_each_byte_count(limited):
    for limit, result, context in limited["onmt-build-vocab"]:
        line = one_error(result["code"], result["stderr"], context["output"])
        names_os_error(line, *EFBIG, "only in part (no space left or a file-size limit?)")
        assert checksums(context["directory"]) == context["before"], limit
        assert not leftovers(context["directory"]), limit
        assert not [n for n in os.listdir(context["directory"]) if n.startswith(".sp-")], limit


def test_tokenize_and_detokenize_output_cut_at_each_byte_count(limited):
    """Standard output redirected to a file that cannot grow: one line naming that file; what
    was written is the beginning of the whole output, byte for byte; the input is unchanged."""
    for limit, result, context in limited["onmt-stdout"]:
        line = one_error(result["code"], result["stderr"], f"standard output ({context['output']})")
        names_os_error(line, *EFBIG)
        with open(context["output"], encoding="utf-8") as stream:
            written = stream.read()
        assert len(written.encode("utf-8")) == limit, limit
        assert context["expected"].encode("utf-8").startswith(written.encode("utf-8")), limit


def test_a_checkpoint_written_again_is_kept_until_its_replacement_is_verified(project, saver, tmp_path,
                                                                              monkeypatch):
    """average_checkpoints --force into its own output writes the same step again: when that
    write fails, the checkpoint there before is put back whole."""
    folder = fresh_checkpoints(project, saver, tmp_path)
    before = checksums(folder)
    import tensorflow as tf

    real_write = saver._checkpoint.write

    def failing_write(prefix):
        real_write(prefix)  # the new files written over the names of the old ones...
        raise tf.errors.ResourceExhaustedError(None, None, f"{prefix}: No space left on device")

    monkeypatch.setattr(saver._checkpoint, "write", failing_write)
    with pytest.raises(OutputError, match="ckpt-4 failed: .*No space left on device"):
        saver.save(4)
    monkeypatch.undo()
    assert checksums(folder) == before and not [n for n in os.listdir(folder) if n.endswith(".replaced")]
    assert store.latest(os.path.dirname(folder)) == os.path.join(folder, "ckpt-4")


def test_an_empty_path_names_no_output():
    for check in (outputs.check_file, outputs.check_directory, outputs.check_model_dir):
        with pytest.raises(OutputError, match="^--out: an empty path names no output$"):
            check("", "--out")
