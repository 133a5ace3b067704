"""A generated battery of hostile values: for every config key of the schema and every option of
every command's parser, values of the wrong type, out of range, NaN and infinities, empty and
huge strings, invalid UTF-8, missing files, directories where files are expected and paths under
a file. Each must end in exit status 0, or 2 with one `error:` line naming the key, option or
file: never a traceback, never a hang (a case running past its time limit fails).

The cases are generated from `opennmt_lite.config.SCHEMA` and from the commands' own argparse
declarations (`opennmt_lite.commands.<command>.add_arguments`; OpenNMT-tf's `onmt-main` and its
run types, and `opennmt_lite.onmt.tools.PARSERS`), with a fixed seed; a test checks that every
key and every option got cases. Every seed, size and count also gets the values just outside its
range (below the lower bound its key or `config.integer_option` declares, past LARGEST_INT),
which must be refused: an int key without a range (not in UNBOUNDED_INT_KEYS) or a number
option without `integer_option` fails the coverage checks. Config cases go through the config loader, option
cases through `run.main(argv)`, in this process. Cases the parser accepts run the command for
real on a tiny trained model, one per option here (`CASES_PER_OPTION`); bench/hostile_battery.py
runs them all, with more random values.
"""

import argparse
import copy
import math
import os
import random
import shutil
import signal

import pytest
import yaml

import run
from training_helpers import TINY_MODEL, training_user
from opennmt_lite import build
from opennmt_lite.commands import COMMANDS
from opennmt_lite.config import LARGEST_INT, SCHEMA, UNBOUNDED_INT_KEYS, build_config, load_config
from opennmt_lite.errors import UserError

# bench/hostile_battery.py sets these higher (the environment variables below).
SEED = int(os.environ.get("HOSTILE_SEED", 28))
CASES_PER_OPTION = int(os.environ.get("HOSTILE_CASES_PER_OPTION", 1))  # commands run for real
# per option (the parser's refusals: all of them)
RANDOM_VALUES = int(os.environ.get("HOSTILE_RANDOM_VALUES", 1))  # random values per key, option
TIME_LIMIT = 60  # seconds per case: past it, a hang


def leaves(schema=SCHEMA, prefix=""):
    """[(dotted key, Key)] of every leaf of the schema."""
    found = []
    for name, value in schema.items():
        if isinstance(value, dict):
            found += leaves(value, f"{prefix}{name}.")
        else:
            found.append((f"{prefix}{name}", value))
    return found


def hostile_values(kind, rng, directory):
    """Hostile YAML values for a key of `kind` (the schema's kinds), fixed ones then random."""
    common = [None, "", "x" * 100_000, [1, "a"], {"a": 1}, True, float("nan"), float("inf"),
              -float("inf"), "caf\udce9"]  # (a lone surrogate: invalid UTF-8 bytes read as text)
    by_kind = {
        "int": [-1, 0, 10**30, -(10**30), 1.5, "12"],
        "float": [-1.0, 1e308 * 10, -1e-320, 10**400, "0.5"],
        "bool": ["yes", 1, 0.5],
        "str": ["none", "\x00", "é" * 10],
        "path": ["/no/such/file", str(directory), str(directory / "a_file" / "under"),
                 str(directory / "bad_utf8.txt"), str(directory / "empty.txt"), 7],
        "paths": ["/no/such/file", str(directory), [], [str(directory), 7], [None],
                  ["/no/such/file"] * 3, 7],
        "dict": [{"unknown": float("nan")}, ["x"], 3],
        "list": [[None], [float("nan")], "bleu,bleu", 3],
    }
    extra = []
    for _ in range(RANDOM_VALUES):
        extra += [rng.randint(-(2**70), 2**70), rng.uniform(-1e6, 1e6),
                  "".join(chr(rng.randint(1, 0x2FFF)) for _ in range(rng.randint(1, 40)))]
    return common + by_kind[kind] + extra


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    directory = tmp_path_factory.mktemp("hostile")
    (directory / "a_file").write_text("x")
    (directory / "bad_utf8.txt").write_bytes(b"ok line\n\xff\xfe broken \xc3\n")
    (directory / "empty.txt").write_text("")
    return directory


def set_key(user, dotted, value):
    node = user
    *parents, last = dotted.split(".")
    for name in parents:
        node = node.setdefault(name, {}) if isinstance(node.get(name), dict) or name not in node else node[name]
        if not isinstance(node, dict):
            return
    node[last] = value


def config_cases(directory):
    rng = random.Random(SEED)
    return [(key, value) for key, leaf in leaves() for value in hostile_values(leaf.kind, rng, directory)]


def check_config_error(error, key):
    """A user error whose one line names the key (or, for the nested ones, its section)."""
    message = str(error)
    assert isinstance(error, UserError), repr(error)
    names = {key, key.rsplit(".", 1)[0], key.split(".")[-1]}
    assert any(name in message for name in names), (key, message[:300])


def test_every_config_key_holds_up_to_hostile_values(files):
    base = {"model_dir": str(files / "run"), "model": dict(TINY_MODEL)}
    failures, counted = [], {}
    for key, value in config_cases(files):
        counted[key] = counted.get(key, 0) + 1
        user = copy.deepcopy(base)
        set_key(user, key, value)
        try:
            config = build_config(user)
            build.decoding_options(config.params, config.infer)  # (checked when made)
        except Exception as error:  # noqa: BLE001 (the point: which kind it is)
            try:
                check_config_error(error, key)
            except AssertionError as problem:
                failures.append(f"{key}={value!r:.60}: {problem}")
    assert not failures, "\n".join(failures[:40])
    assert set(counted) == {key for key, _ in leaves()}  # every key of the schema got cases


def out_of_range_cases():
    """(key, value) just outside the range of every int key (below its lower bound, past
    LARGEST_INT) and of every float key with a lower bound: each must be refused naming it."""
    cases = []
    for key, leaf in leaves():
        if leaf.kind == "int" and key not in UNBOUNDED_INT_KEYS:
            cases += [(key, (leaf.minimum if leaf.minimum is not None else 0) - 1), (key, LARGEST_INT + 1)]
        elif leaf.kind == "float" and leaf.minimum is not None:
            cases += [(key, leaf.minimum - 1e-3)]
    return cases


def test_every_seed_size_and_count_key_refuses_values_outside_its_range(files):
    """Every int key (a seed, size, count, length or step) declares its lower bound unless it is
    one of UNBOUNDED_INT_KEYS (with the reason); a value outside the range is refused naming
    the key, so that none reaches a library that raises (keras.utils.set_random_seed, NumPy's
    generators, SentencePiece, TensorFlow's int32)."""
    ints = {key for key, leaf in leaves() if leaf.kind == "int"}
    assert set(UNBOUNDED_INT_KEYS) <= ints
    unbounded = sorted(key for key, leaf in leaves()
                       if leaf.kind == "int" and leaf.minimum is None and key not in UNBOUNDED_INT_KEYS)
    assert not unbounded, f"int keys without a range: {unbounded}"
    base = {"model_dir": str(files / "run"), "model": dict(TINY_MODEL)}
    counted = set()
    for key, value in out_of_range_cases():
        counted.add(key)
        user = copy.deepcopy(base)
        set_key(user, key, value)
        with pytest.raises(UserError) as refused:
            build_config(user)
        check_config_error(refused.value, key)
    assert counted >= ints - set(UNBOUNDED_INT_KEYS)  # every seed, size and count got cases
    assert {"train.seed", "params.coverage_penalty", "data.source_tokenization.vocabulary_size"} <= counted


def test_config_files_that_are_not_text_or_not_yaml(files, tmp_path):
    cases = {"invalid-utf8.yml": b"model_dir: \xff\xfe\n", "nul.yml": b"model_dir: a\x00b\n",
             "nan.yml": b"model_dir: x\nparams:\n  learning_rate: .nan\n",
             "huge.yml": b"model_dir: " + b"y" * 1_000_000 + b"\n", "list.yml": b"- 1\n- 2\n",
             "deep.yml": b"model_dir: x\ntrain: " + b"[" * 5000 + b"]" * 5000 + b"\n"}
    for name, content in cases.items():
        path = tmp_path / name
        path.write_bytes(content)
        try:
            load_config([str(path)])
        except Exception as error:  # noqa: BLE001
            assert isinstance(error, UserError), (name, repr(error)[:300])
            assert "\n" not in str(error) and (str(path) in str(error) or "learning_rate" in str(error)), name


# -- command-line options ----------------------------------------------------------------------

def parsers():
    """{command: its argparse parser}, declared as run.py declares them."""
    import importlib

    found = {}
    for name, module_name in COMMANDS.items():
        module = importlib.import_module(f"opennmt_lite.commands.{module_name}")
        parser = argparse.ArgumentParser(prog=f"run.py {name}")
        parser.add_argument("--config", nargs="+")
        parser.add_argument("--log_level", default="INFO", type=str.upper,
                            choices=("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"))
        module.add_arguments(parser)
        found[name] = parser
    return found


def option_values(action, directory, rng):
    """Hostile command-line values for one option."""
    if action.nargs == 0:  # a flag
        return [None]
    values = ["", "0", "-1", "nan", "inf", "9" * 400, "x" * 5000, "caf\udce9", "--",
              "/no/such/file", str(directory), str(directory / "a_file" / "under"),
              str(directory / "bad_utf8.txt"), str(directory / "empty.txt")]
    for _ in range(RANDOM_VALUES):
        values.append("".join(chr(rng.randint(1, 0x2FFF)) for _ in range(rng.randint(1, 30))))
        values.append(str(rng.randint(-(2**40), 2**40)))
    return values + out_of_range_values(action)


def out_of_range_values(action):
    """Just outside the range of a number option (config.integer_option: its bounds)."""
    if getattr(action.type, "__name__", "") != "integer":
        return []
    return [str((action.type.minimum or 0) - 1), str(action.type.maximum + 1)]


def check_numbers_are_ranged(tables):
    """Every number option is a config.integer_option (checked by the config's own check, with
    its range): a plain `type=int` or `float` would let any value through to the library."""
    plain = [(command, action.option_strings[-1]) for command, parser in tables.items()
             for action in parser._actions if action.type in (int, float)]
    assert not plain, f"options without a range check: {plain}"


class Hang(Exception):
    pass


def run_case(call, capsys, tmp_path):
    """(exit code or "hang", standard error) of one hostile case, under TIME_LIMIT; the case's
    output folder removed."""
    capsys.readouterr()
    signal.alarm(TIME_LIMIT)
    try:
        code = call()
    except Hang:
        code = "hang"
    finally:
        signal.alarm(0)
    err = capsys.readouterr().err
    shutil.rmtree(tmp_path / "out", ignore_errors=True)
    return code, err


def _alarm(signum, frame):
    raise Hang()


@pytest.fixture(scope="module")
def project(files):
    root = files / "project"
    user = training_user(root, model=TINY_MODEL, lines=200, params={"maximum_decoding_length": 8},
                         train={"max_step": 2, "save_checkpoints_steps": 1, "save_summary_steps": 1000})
    build.trainer(build_config(user)).run()
    path = root / "config.yml"
    path.write_text(yaml.safe_dump(user))
    source = root / "source.txt"
    source.write_text("Hello world .\n")
    return {"config": str(path), "source": str(source), "user": user}


def base_argv(command, project, directory):
    """A valid, quick invocation of `command`, as {option: value}."""
    config, source = project["config"], project["source"]
    out = directory / "out"
    return {
        "build-vocab": {"--config": config},
        "train": {"--config": config},
        "infer": {"--config": config, "--features_file": source},
        "export": {"--config": config, "--output": str(out / "export")},
        "evaluate": {"--predictions_file": source, "--references_file": source},
        "score": {"--config": config, "--features_file": source, "--predictions_file": source},
        "average_checkpoints": {"--config": config, "--output_dir": str(out / "avg")},
        "update_vocab": {"--config": config, "--tgt_vocab": project["user"]["data"]["target_vocabulary"],
                         "--output_dir": str(out / "vocab")},
        "inspect": {"--config": config, "--ids": "5 6"},
        "serve": {"--config": config},
    }[command]


def option_cases(directory):
    rng = random.Random(SEED)
    cases = []
    for command, parser in parsers().items():
        for action in parser._actions:
            if not action.option_strings or action.dest == "help":
                continue
            option = action.option_strings[-1]
            for value in option_values(action, directory, rng):
                cases.append((command, option, value))
    return cases


def test_every_option_holds_up_to_hostile_values(project, files, tmp_path, capsys):
    failures, counted, ran = [], {}, {}
    tables = parsers()
    previous = signal.signal(signal.SIGALRM, _alarm)
    try:
        for command, option, value in option_cases(files):
            counted[(command, option)] = counted.get((command, option), 0) + 1
            arguments = dict(base_argv(command, project, tmp_path))
            arguments[option] = value
            argv = [command] + [part for name, given in arguments.items()
                                for part in ([name] if given is None else [name, given])]
            try:
                tables[command].parse_args(argv[1:])
                accepted = True
            except SystemExit:
                accepted = False
            if accepted and value in out_of_range_values(action_of(tables[command], option)):
                failures.append(f"{command} {option} {value}: out of range, accepted")
            if accepted:  # runs the command for real: a bounded number of them
                # (train and serve run until stopped: their parsers' refusals only; serve's bad
                # addresses in tests/test_serve.py)
                if command in ("train", "serve") or ran.get((command, option), 0) >= CASES_PER_OPTION:
                    continue
                ran[(command, option)] = ran.get((command, option), 0) + 1
            code, err = run_case(lambda: run.main(argv), capsys, tmp_path)
            lines = [line for line in err.splitlines() if line.startswith("error:")]
            case = f"{command} {option} {value!r:.50}"
            if code == "hang" or "Traceback" in err or code not in (0, 2):
                failures.append(f"{case}: exit {code}: {err.strip().splitlines()[-1:] if err.strip() else ''}")
            elif code == 2 and accepted and len(lines) != 1:
                failures.append(f"{case}: {len(lines)} error lines: {err[-300:]}")
            elif code == 2 and not accepted and "error:" not in err:
                failures.append(f"{case}: no error line")
    finally:
        signal.signal(signal.SIGALRM, previous)
    assert not failures, "\n".join(failures[:40])
    expected = {(c, a.option_strings[-1]) for c, p in tables.items() for a in p._actions
                if a.option_strings and a.dest != "help"}
    assert set(counted) == expected  # every option of every command got cases
    check_numbers_are_ranged(tables)


def action_of(parser, option):
    return next(a for a in parser._actions if a.option_strings and a.option_strings[-1] == option)


def test_nan_and_infinity_are_refused_for_every_float_key(files):
    base = {"model_dir": str(files / "run"), "model": dict(TINY_MODEL)}
    for key, leaf in leaves():
        if leaf.kind != "float":
            continue
        for value in (math.nan, math.inf, -math.inf):
            user = copy.deepcopy(base)
            set_key(user, key, value)
            with pytest.raises(UserError, match=key.split(".")[-1]):
                build_config(user)


# -- OpenNMT-tf's command lines ------------------------------------------------------------------

def onmt_parsers():
    """{name: parser} of OpenNMT-tf's commands: the four helper commands, onmt-main's global
    options (as "onmt-main", run with `infer`) and each run type's (as "onmt-main <run type>")."""
    from opennmt_lite.onmt import main as onmt_main
    from opennmt_lite.onmt import tools

    found = {name: make() for name, make in tools.PARSERS.items()}
    parser = onmt_main.build_parser()
    found["onmt-main"] = parser
    for run_type, sub in parser.run_types.items():
        found[f"onmt-main {run_type}"] = sub
    return found


def covered(parser):
    """[(name, action)]: every option of `parser` (its last spelling) and positional argument
    (its dest), but --help, the hidden ones and the run-type choice."""
    return [(action.option_strings[-1] if action.option_strings else action.dest, action)
            for action in parser._actions
            if action.dest != "help" and action.help != argparse.SUPPRESS
            and not isinstance(action, argparse._SubParsersAction)]


def onmt_base(command, project, directory):
    """A valid, quick invocation of `command`: ({option or positional: value}, run type)."""
    config, source = project["config"], project["source"]
    out = directory / "out"
    if command == "onmt-build-vocab":
        return {"data": source, "--save_vocab": str(out / "vocab.txt")}, None
    if command in ("onmt-tokenize-text", "onmt-detokenize-text"):
        return {}, None
    if command == "onmt-merge-config":
        return {"config": config}, None
    run_type = command.split(" ")[1] if " " in command else "infer"
    per_run_type = {
        "train": {}, "eval": {}, "infer": {"--features_file": source},
        "export": {"--output_dir": str(out / "export")},
        "score": {"--features_file": source, "--predictions_file": source},
        "average_checkpoints": {"--output_dir": str(out / "avg")},
        "update_vocab": {"--output_dir": str(out / "vocab"),
                         "--tgt_vocab": project["user"]["data"]["target_vocabulary"]},
    }
    return {"--config": config, run_type: per_run_type[run_type]}, run_type


def onmt_argv(command, name, value, project, directory):
    """The command line of one case: the base invocation with `name` given `value`."""
    base, run_type = onmt_base(command, project, directory)

    def parts(options):
        positional = [v for k, v in options.items() if not k.startswith("-")]
        flags = [p for k, v in options.items() if k.startswith("-")
                 for p in ([k] if v is None else [k, v])]
        return positional + flags  # (positionals first: --sentencepiece takes what follows it)

    if run_type is None:
        return parts(dict(base, **{name: value}))
    sub = dict(base.pop(run_type))
    if command == "onmt-main":
        base[name] = value
    else:
        sub[name] = value
    return parts(base) + [run_type] + parts(sub)


def onmt_cases(directory):
    rng = random.Random(SEED)
    return [(command, name, value) for command, parser in onmt_parsers().items()
            for name, action in covered(parser) for value in option_values(action, directory, rng)]


def run_onmt(command, argv):
    """Exit status of OpenNMT-tf's `command` run in this process on `argv` (standard input: a
    line of text), leaving TensorFlow's and logging's process settings as they were."""
    import io
    import logging
    import sys

    import tensorflow as tf

    from opennmt_lite.onmt import main as onmt_main
    from opennmt_lite.onmt import tools

    stdin, level = sys.stdin, logging.getLogger("opennmt_lite").level
    sys.stdin = io.TextIOWrapper(io.BytesIO(b"Hello world .\n"), encoding="utf-8")
    try:
        if command.startswith("onmt-main"):
            return onmt_main.main(argv)
        return getattr(tools, command.removeprefix("onmt-").replace("-", "_"))(argv)
    finally:
        sys.stdin = stdin
        tf.config.run_functions_eagerly(False)  # (--eager_execution)
        logging.getLogger("opennmt_lite").setLevel(level)


def parsed(command, argv):
    """Whether `command`'s parser accepts `argv`."""
    from opennmt_lite.onmt import main as onmt_main
    from opennmt_lite.onmt import tools

    try:
        if command.startswith("onmt-main"):
            onmt_main.parse_args(argv)
        else:
            tools.PARSERS[command]().parse_args(argv)
    except SystemExit:
        return False
    return True


def test_every_option_of_opennmt_tfs_commands_holds_up_to_hostile_values(project, files, tmp_path, capsys):
    """onmt-build-vocab, onmt-tokenize-text, onmt-detokenize-text, onmt-merge-config and every
    option of onmt-main (each run type's): the values of run.py's options, and for a number the
    values just outside its range, which the parser must refuse."""
    tables = onmt_parsers()
    failures, counted, ran = [], {}, {}
    (tmp_path / "out").mkdir()
    previous = signal.signal(signal.SIGALRM, _alarm)
    try:
        for command, name, value in onmt_cases(files):
            counted[(command, name)] = counted.get((command, name), 0) + 1
            argv = onmt_argv(command, name, value, project, tmp_path)
            action = dict(covered(tables[command]))[name]
            accepted = parsed(command, argv)
            case = f"{command} {name} {value!r:.50}"
            if accepted and value in out_of_range_values(action):
                failures.append(f"{case}: out of range, accepted")
            if accepted:
                if command == "onmt-main train" or ran.get((command, name), 0) >= CASES_PER_OPTION:
                    continue
                ran[(command, name)] = ran.get((command, name), 0) + 1
            code, err = run_case(lambda: run_onmt(command, argv), capsys, tmp_path)
            (tmp_path / "out").mkdir()
            lines = [line for line in err.splitlines() if "error:" in line]
            if code == "hang" or "Traceback" in err or code not in (0, 2):
                failures.append(f"{case}: exit {code}: {err.strip().splitlines()[-1:] if err.strip() else ''}")
            elif code == 2 and len(lines) != 1:
                failures.append(f"{case}: {len(lines)} error lines: {err[-300:]}")
    finally:
        signal.signal(signal.SIGALRM, previous)
    assert not failures, "\n".join(failures[:40])
    expected = {(command, name) for command, parser in tables.items() for name, _ in covered(parser)}
    assert set(counted) == expected  # every option of every command got cases
    check_numbers_are_ranged(tables)


# -- a sequence tagger's and classifier's files and keys ----------------------------------------

ENCODER_FIXTURE = os.path.join(os.path.dirname(__file__), "fixtures", "onmt_tf_tagger_crf")
ENCODER_MODEL = {"num_layers": 1, "num_units": 16, "num_heads": 2, "ffn_inner_dim": 32}


def encoder_user(directory, kind):
    """A tiny tagger's (kind "tags", CRF, bioes) or classifier's ("labels") config on 40 lines
    derived from the CRF fixture's (a label per line: its first tag's chunk type)."""
    directory.mkdir(parents=True, exist_ok=True)
    features = [line for line in open(os.path.join(ENCODER_FIXTURE, "train.first200.tok.en"),
                                      encoding="utf-8").read().splitlines()[:40]]
    tags = open(os.path.join(ENCODER_FIXTURE, "train.first200.tags"),
                encoding="utf-8").read().splitlines()[:40]
    labels = [line.split()[0].split("-")[-1] for line in tags]
    (directory / "train.tok").write_text("\n".join(features) + "\n", encoding="utf-8")
    (directory / "train.tags").write_text("\n".join(tags if kind == "tags" else labels) + "\n",
                                          encoding="utf-8")
    vocabulary = (open(os.path.join(ENCODER_FIXTURE, "tags-vocab.txt")).read().split()
                  if kind == "tags" else sorted(set(labels)))
    (directory / "labels-vocab.txt").write_text("\n".join(vocabulary) + "\n")
    files = {"train_features_file": str(directory / "train.tok"),
             "train_labels_file": str(directory / "train.tags"),
             "source_vocabulary": os.path.join(ENCODER_FIXTURE, "src-vocab.txt"),
             "target_vocabulary": str(directory / "labels-vocab.txt")}
    files.update(eval_features_file=files["train_features_file"],
                 eval_labels_file=files["train_labels_file"])
    model = dict(ENCODER_MODEL, type="sequence_tagger" if kind == "tags" else "sequence_classifier")
    if kind == "tags":
        model["crf_decoding"] = True
        files["tagging_scheme"] = "bioes"
    return {"model_dir": str(directory / "run"), "data": files, "model": model,
            "params": {"optimizer": "Adam", "learning_rate": 0.002},
            "train": {"batch_type": "examples", "batch_size": 16, "max_step": 1,
                      "save_checkpoints_steps": 1, "sub_batches": 1},
            "eval": {"steps": 1}}


@pytest.mark.parametrize("kind", ["tags", "labels"])
def test_every_config_key_holds_up_for_a_tagger_and_a_classifier(files, kind):
    """The config battery again with a sequence tagger's (classifier's) model section: every
    key's hostile values, and each key of config.ENCODER_MODEL_REFUSED (the Transformer's), is
    refused naming it, or accepted."""
    from opennmt_lite.config import ENCODER_MODEL_REFUSED

    base = encoder_user(files / f"encoder-{kind}", kind)
    failures, counted = [], set()
    keys = {"model.type", "model.crf_decoding", "model.share_embeddings", "model.preset",
            "data.tagging_scheme", *ENCODER_MODEL_REFUSED}
    rng = random.Random(SEED)
    cases = [(key, value) for key, leaf in leaves()
             if any(key == name or key.startswith(name + ".") for name in keys)
             for value in hostile_values(leaf.kind, rng, files)]
    sections = {"data.source_embedding": {"path": base["data"]["source_vocabulary"]},
                "data.target_embedding": {"path": base["data"]["source_vocabulary"]},
                "data.target_tokenization": {"type": "space"},
                "data.source_sequence_controls": {"start": True},
                "data.target_sequence_controls": {"end": True},
                "data.sequence_controls": {"start": True, "end": True}}
    cases += list(sections.items())
    cases += [("model.crf_decoding", True), ("data.tagging_scheme", "IOB2"),
              ("model.share_embeddings", "all"), ("model.preset", "TransformerBase"),
              ("data.train_features_file", [base["data"]["train_features_file"]] * 2)]
    for key, value in cases:
        counted.add(key)
        user = copy.deepcopy(base)
        set_key(user, key, value)
        try:
            build_config(user)
        except Exception as error:  # noqa: BLE001 (the point: which kind it is)
            try:
                check_config_error(error, key)
            except AssertionError as problem:
                failures.append(f"{key}={value!r:.60}: {problem}")
        else:  # (accepted: only what these models can use)
            must_refuse = (
                (key in ENCODER_MODEL_REFUSED and value not in (None, False, 0, 0.0, [], ()))
                or (key in sections and value == sections[key])
                or (key, str(value)) in {("data.tagging_scheme", "IOB2"),
                                         ("model.share_embeddings", "all"),
                                         ("model.preset", "TransformerBase")}
                or (key == "model.crf_decoding" and value is True and kind == "labels")
                or (key == "data.tagging_scheme" and value is not None and kind == "labels")
                or (key == "data.train_features_file" and isinstance(value, list)))
            if must_refuse:
                failures.append(f"{key}={value!r:.60}: accepted")
    assert not failures, "\n".join(failures[:40])
    assert counted >= keys


def corrupted_files(kind):
    """[(what, file key, content or None (a directory), text the one error line must hold)]: the
    data mistakes of a tagger's or classifier's files."""
    tags = kind == "tags"
    cases = [
        ("fewer label lines", "train_labels_file", ("S-X\n" if not tags else "O O O\n"), "lines"),
        ("invalid UTF-8", "train_labels_file", b"O \xff\xfe O\n", "line 1"),
        ("a directory", "train_labels_file", None, "train"),
        ("an empty vocabulary", "target_vocabulary", "", "empty"),
        ("a repeated vocabulary entry", "target_vocabulary", "O\nO\n", "line 2"),
        ("a vocabulary entry with a space", "target_vocabulary", "O\nB X\n", "line 2"),
        ("an empty vocabulary line", "target_vocabulary", "O\n\nS-X\n", "line 2"),
        ("an evaluation file of other length", "eval_labels_file", "O\n", "lines"),
    ]
    if tags:
        cases += [("a tag too few", "train_labels_file", None, "line 3"),
                  ("a tag not in the vocabulary", "train_labels_file", None, "line 3"),
                  ("an eval tag too many", "eval_labels_file", None, "line 3")]
    else:
        cases += [("two labels on a line", "train_labels_file", None, "line 3"),
                  ("an empty label line", "train_labels_file", None, "line 3"),
                  ("a label not in the vocabulary", "eval_labels_file", None, "line 3")]
    return cases


def _corrupt(user, what, key, content, directory):
    """Writes the corrupted file of one case (a copy of the good one changed at line 3 for the
    line cases) and points `key` at it."""
    path = directory / f"{key}.bad"
    good = user["data"][key]
    if content is None and what == "a directory":
        path.mkdir()
    elif content is None:
        rows = open(good, encoding="utf-8").read().splitlines()
        words = rows[2].split()
        rows[2] = {"a tag too few": " ".join(words[:-1]),
                   "a tag not in the vocabulary": " ".join(["NOT-A-TAG"] + words[1:]),
                   "an eval tag too many": " ".join(words + ["O"]),
                   "two labels on a line": f"{rows[2]} {rows[2]}",
                   "an empty label line": "",
                   "a label not in the vocabulary": "NOT-A-LABEL"}[what]
        path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    elif isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8")
    user["data"][key] = str(path)
    return str(path)


@pytest.mark.parametrize("kind", ["tags", "labels"])
def test_every_mistake_in_a_tagger_or_classifier_file_is_one_line(files, tmp_path, capsys, kind):
    """run.py train on each corrupted file (and `evaluate` on a tags file of other length):
    exit 2, one `error:` line naming the file (and its line where the mistake is on one)."""
    failures = []
    previous = signal.signal(signal.SIGALRM, _alarm)
    try:
        for number, (what, key, content, expected) in enumerate(corrupted_files(kind)):
            directory = tmp_path / f"case{number}"
            directory.mkdir()
            user = encoder_user(directory / "project", kind)
            path = _corrupt(user, what, key, content, directory)
            config = directory / "config.yml"
            config.write_text(yaml.safe_dump(user))
            code, err = run_case(lambda: run.main(["train", "--config", str(config)]), capsys,
                                 tmp_path)
            errors = [line for line in err.splitlines() if line.startswith("error:")]
            if code != 2 or len(errors) != 1 or "Traceback" in err:
                failures.append(f"{what}: exit {code}: {err.strip().splitlines()[-1:]}")
            elif path not in errors[0] or expected not in errors[0]:
                failures.append(f"{what}: {errors[0]!r} names not {path} / {expected!r}")
        user = encoder_user(tmp_path / "evaluate", kind)
        config = tmp_path / "evaluate" / "config.yml"
        config.write_text(yaml.safe_dump(user))
        predictions = tmp_path / "predictions.txt"
        rows = open(user["data"]["train_labels_file"], encoding="utf-8").read().splitlines()
        predictions.write_text("\n".join(rows[:2] + [rows[2] + " O"] + rows[3:]) + "\n")
        code, err = run_case(lambda: run.main(["evaluate", "--config", str(config),
                                               "--predictions_file", str(predictions),
                                               "--references_file",
                                               user["data"]["train_labels_file"]]),
                             capsys, tmp_path)
        errors = [line for line in err.splitlines() if line.startswith("error:")]
        if kind == "tags" and (code != 2 or len(errors) != 1 or "line 3" not in errors[0]):
            failures.append(f"evaluate, a tag too many: exit {code}: {err[-300:]}")
        if kind == "labels" and code != 0:  # (one label per line: "x O" is a wrong label)
            failures.append(f"evaluate, classifier: exit {code}: {err[-300:]}")
    finally:
        signal.signal(signal.SIGALRM, previous)
    assert not failures, "\n".join(failures)
# -- a language model's keys and files (model.type: language_model) --------------------------

LM_FIXTURE = os.path.join(os.path.dirname(__file__), "fixtures", "onmt_tf_lm")
LM_MODEL = {"type": "language_model", "num_layers": 2, "num_units": 32, "num_heads": 2,
            "ffn_inner_dim": 64, "ffn_activation": "gelu", "gelu_approximation": True,
            "maximum_position": 128}
# The keys a language model reads (or refuses), with their YAML kinds (see config.py's
# _finalize_model_type).
LM_KEYS = ("model.type", "model.maximum_position", "model.gelu_approximation", "data.vocabulary",
           "data.tokenization", "data.tokenization.type", "data.tokenization.model",
           "data.sequence_controls.start", "data.sequence_controls.end",
           "data.train_features_file", "data.eval_features_file", "data.source_vocabulary",
           "data.train_labels_file", "data.target_sequence_controls", "eval.scorers",
           "params.guided_alignment_type", "params.decoding_noise", "infer.with_alignments",
           "eval.save_eval_predictions", "params.coverage_penalty")


def _kind(dotted):
    node = SCHEMA
    for name in dotted.split("."):
        node = node[name]
    return "dict" if isinstance(node, dict) else node.kind


def test_language_model_keys_hold_up_to_hostile_values(files):
    """Every key a language model reads or refuses, with hostile values in a language model's
    config: loaded, or refused in one line naming the key."""
    rng = random.Random(SEED)
    base = {"model_dir": str(files / "lm"), "model": dict(LM_MODEL),
            "data": {"vocabulary": os.path.join(LM_FIXTURE, "vocab.txt")}}
    failures = []
    for key in LM_KEYS:
        for value in hostile_values(_kind(key), rng, files) + ["x.txt", 1, True]:
            user = copy.deepcopy(base)
            set_key(user, key, value)
            try:
                config = build_config(user)
                build.decoding_options(config.params, config.infer)
            except Exception as error:  # noqa: BLE001 (the point: which kind it is)
                try:
                    check_config_error(error, key)
                    assert "\n" not in str(error), str(error)[:300]
                except AssertionError as problem:
                    failures.append(f"{key}={value!r:.60}: {problem}")
    assert not failures, "\n".join(failures[:40])


@pytest.fixture(scope="module")
def lm_project(files):
    """The onmt_tf_lm fixture's model as run.py's config (its checkpoint in model_dir)."""
    root = files / "lm_project"
    root.mkdir()
    for name in ("checkpoint", "ckpt-3000.index", "ckpt-3000.data-00000-of-00001"):
        shutil.copyfile(os.path.join(LM_FIXTURE, name), root / name)
    user = {"model_dir": str(root), "model": dict(LM_MODEL),
            "data": {"vocabulary": os.path.join(LM_FIXTURE, "vocab.txt"),
                     "train_features_file": os.path.join(LM_FIXTURE, "train.first200.tok.en")},
            "params": {"maximum_decoding_length": 4},
            # (the checkpoint's step: a train case reads its data, then stops, exit 2)
            "train": {"max_step": 3000, "batch_size": 256, "batch_type": "tokens"}}
    path = root / "config.yml"
    path.write_text(yaml.safe_dump(user))
    return {"config": str(path), "user": user, "root": root}


def test_language_model_files_hold_up(lm_project, files, tmp_path, capsys):
    """The language model's files (the text it trains on, its vocabulary, the prefixes it
    continues, the lines it scores), each missing, a directory, a path under a file, invalid
    UTF-8, empty, or with an empty line: exit 0, or 2 with one `error:` line naming the file or
    its key; never a traceback."""
    previous = signal.signal(signal.SIGALRM, _alarm)
    hostile = ["/no/such/file", str(files), str(files / "a_file" / "under"),
               str(files / "bad_utf8.txt"), str(files / "empty.txt")]
    empty_line = tmp_path / "empty_line.txt"
    empty_line.write_text("Install\n\nUser ID\n")
    cases = []
    for path in hostile + [str(empty_line)]:
        for command in ("infer", "score"):
            cases.append(([command, "--config", lm_project["config"], "--features_file", path],
                          ("--features_file", path)))
    for number, path in enumerate(hostile[:1] + hostile[3:]):  # (missing, invalid UTF-8, empty)
        for key in ("train_features_file", "vocabulary"):
            user = copy.deepcopy(lm_project["user"])
            user["data"][key] = path
            config = tmp_path / f"{key}.{number}.yml"
            config.write_text(yaml.safe_dump(user))
            argv = ["train", "--config", str(config)] if key == "train_features_file" else [
                "infer", "--config", str(config), "--features_file", str(empty_line)]
            cases.append((argv, (f"data.{key}", path)))
    failures = []
    try:
        for argv, named in cases:
            code, err = run_case(lambda: run.main(argv), capsys, tmp_path)
            lines = [line for line in err.splitlines() if line.startswith("error:")]
            if code not in (0, 2) or "Traceback" in err:
                failures.append(f"{argv}: exit {code}: {err[-300:]}")
            elif code == 2 and (len(lines) != 1 or not any(n in lines[0] for n in named)):
                failures.append(f"{argv}: {lines}")
    finally:
        signal.signal(signal.SIGALRM, previous)
        shutil.rmtree(lm_project["root"] / "checkpoints", ignore_errors=True)
    assert not failures, "\n".join(failures[:20])
