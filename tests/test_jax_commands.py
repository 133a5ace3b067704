"""`run.py infer`, `score` and `evaluate` with KERAS_BACKEND=jax against the TensorFlow backend,
on OpenNMT-tf's fixture models (tests/fixtures/onmt_tf_relative, onmt_tf_seqctl): the same command
lines, run in one JAX subprocess (tests/jax_worker.py's `commands` job) and in this process
(TensorFlow; the JAX process cannot import TensorFlow, as in an install without it), must write
the same files: translations, alignments (hard equal, soft within 1e-5)
and error lines identical, scores within 1e-5, or 4 float32 ulps of a larger sum (score's NLL
of 287 sums 76 token losses, where one ulp is 3e-5: measured 6.2e-5 there, 1.1e-5 at 54; 2e-6 at
most on the translations' log-probabilities).
The decoding options covered: beam 1 and 4, n_best, length and coverage penalties,
minimum/maximum_decoding_length (hypotheses stopped at the maximum), replace_unknown_target, hard
and soft alignments, decoding_noise, source and target sequence controls, with_scores; and an
opennmt-lite checkpoint (post-norm, GELU) translating raw text with SentencePiece.

Random sampling draws from JAX's generator on JAX and from TensorFlow's stateless one on
TensorFlow: the streams differ, so the files are not compared across backends. Instead, on JAX:
the same seed gives the same file twice, another seed another file, sampling over the whole
vocabulary at temperature 1e-6 gives greedy search's file; and on both backends the first tokens
drawn for 2048 copies of one sentence (greedy sampling, and beam 4 over 512 copies) follow
softmax(top-5 log-probabilities / 0.7): every draw among the 5 best, each frequency within 5
standard deviations of its probability, each score the drawn token's log-probability.
"""

import json

import numpy as np
import pytest
import yaml

import jax_worker
import run
from conftest import ONMT_FIXTURE

SEQCTL = ONMT_FIXTURE.parent / "onmt_tf_seqctl"
SEQCTL_MODEL = {"num_layers": 2, "num_units": 32, "num_heads": 2, "ffn_inner_dim": 64,
                "maximum_relative_position": 8}
FIRST8 = str(ONMT_FIXTURE / "test.first8.tok.en")
POSTNORM = ONMT_FIXTURE.parent / "ct2_models" / "postnorm"
RAW_TEXT = ONMT_FIXTURE.parents[2] / "data" / "test.en"  # (the shipped corpus: its first 8 lines)
SCORE_TOLERANCE = 1e-5
SOFT_TOLERANCE = 1e-5

# Extra YAML of each `infer` case (on top of the fixture's config and SHORT).
INFER_CASES = {
    "beam4.replace.hard": str(ONMT_FIXTURE / "infer-beam4.replace.hard.yml"),
    "beam1.replace.soft": str(ONMT_FIXTURE / "infer-beam1.replace.soft.yml"),
    "beam4.nbest2.noise": {"params": {"beam_width": 4, "decoding_noise": [{"dropout": 0.2},
                                                                          {"permutation": 3}]},
                           "infer": {"n_best": 2, "with_scores": True}},
    "beam4.nbest3.bounds.penalties.soft": {
        "params": {"beam_width": 4, "length_penalty": 0.6, "coverage_penalty": 0.2,
                   "minimum_decoding_length": 3, "maximum_decoding_length": 9},
        "infer": {"n_best": 3, "with_scores": True, "with_alignments": "soft"}},
    "greedy.scores": {"params": {"beam_width": 1}, "infer": {"with_scores": True}},
}
SAMPLING = {"params": {"beam_width": 1, "sampling_topk": 5, "sampling_temperature": 0.7},
            "infer": {"with_scores": True}}
# (temperature 1e-6 over the whole vocabulary: greedy search's tokens)
COLD = {"params": {"beam_width": 1, "sampling_topk": 0, "sampling_temperature": 1e-6},
        "infer": {"with_scores": True}}


def write_yaml(directory, name, content):
    if isinstance(content, str):
        return [content]
    if isinstance(content, list):
        return [path for item in content for path in write_yaml(directory, name, item)]
    path = directory / f"{name}.yml"
    path.write_text(yaml.safe_dump(content))
    return [str(path)]


def command_lines(directory, backend):
    """{name: argv} of every compared command, writing into directory/backend/."""
    out = directory / backend
    out.mkdir()
    relative = [str(ONMT_FIXTURE.parent / "onmt_fixture.yml")] + write_yaml(
        directory, "short", {"params": {"maximum_decoding_length": 80}})
    seqctl = [str(SEQCTL / "config.yml")] + write_yaml(
        directory, "seqctl", {"model_dir": str(SEQCTL), "auto_config": False, "model": SEQCTL_MODEL,
                              "infer": {"batch_size": 32}, "score": {"batch_size": 32},
                              "params": {"maximum_decoding_length": 80}})
    commands = {}
    for name, extra in INFER_CASES.items():
        commands[f"infer.{name}"] = ["infer", "--config", *relative,
                                     *write_yaml(directory, name, extra),
                                     "--features_file", FIRST8,
                                     "--predictions_file", str(out / f"infer.{name}.txt")]
    commands["infer.seqctl.source-bos.replace.hard"] = [
        "infer", "--config", *seqctl, str(SEQCTL / "infer-beam4.source-bos.replace.hard.yml"),
        "--features_file", str(SEQCTL / "test.first20.tok.en"),
        "--predictions_file", str(out / "infer.seqctl.txt")]
    # An opennmt-lite checkpoint (post-norm, GELU), SentencePiece on both sides: raw text in and out.
    raw8 = directory / "raw8.en"
    raw8.write_text("".join(RAW_TEXT.read_text(encoding="utf-8").splitlines(True)[:8]),
                    encoding="utf-8")
    commands["infer.postnorm.sentencepiece"] = [
        "infer", "--config", str(POSTNORM / "config.yml"),
        *write_yaml(directory, "postnorm", {"infer": {"batch_type": "examples", "batch_size": 8}}),
        "--features_file", str(raw8), "--with_scores",
        "--predictions_file", str(out / "infer.postnorm.txt")]
    commands["score.token_level.hard"] = [
        "score", "--config", *relative, str(ONMT_FIXTURE / "score.token_level.hard.yml"),
        "--features_file", FIRST8, "--predictions_file", str(ONMT_FIXTURE / "test.first8.tok.de"),
        "--output_file", str(out / "score.token_level.hard.txt")]
    commands["score.soft"] = [
        "score", "--config", *relative, str(ONMT_FIXTURE / "score.soft.yml"),
        *write_yaml(directory, "one_batch", {"score": {"batch_size": 128}}),
        "--features_file", str(ONMT_FIXTURE / "test.first100.tok.en"),
        "--predictions_file", str(ONMT_FIXTURE / "test.first100.tok.de"),
        "--output_file", str(out / "score.soft.txt")]
    commands["score.seqctl.no-start"] = [
        "score", "--config", *seqctl, str(SEQCTL / "score.token-level.no-start.yml"),
        "--features_file", str(SEQCTL / "test.first100.tok.en"),
        "--predictions_file", str(SEQCTL / "test.first100.tok.de"),
        "--output_file", str(out / "score.seqctl.txt")]
    commands["evaluate"] = ["evaluate", "--predictions_file", str(ONMT_FIXTURE / "pred.first8.beam4.tok.de"),
                            "--references_file", str(ONMT_FIXTURE / "test.first8.tok.de")]
    # Bad input: the same one line, exit 2, on both backends.
    commands["error.missing_features"] = ["infer", "--config", *relative, "--features_file",
                                          str(directory / "absent.txt")]
    commands["error.misaligned_score"] = [
        "score", "--config", *relative, "--features_file", FIRST8,
        "--predictions_file", str(ONMT_FIXTURE / "test.first100.tok.de")]
    return commands


def sampling_lines(directory):
    """JAX-only command lines: sampling with seeds 3, 3, 4, and at temperature 1e-6."""
    out = directory / "jax"
    relative = [str(ONMT_FIXTURE.parent / "onmt_fixture.yml"), str(directory / "short.yml")]
    commands = {}
    for name, seed in (("sampling.seed3", 3), ("sampling.seed3.again", 3), ("sampling.seed4", 4)):
        commands[name] = ["infer", "--config", *relative, *write_yaml(directory, "sampling", SAMPLING),
                          "--seed", str(seed), "--features_file", FIRST8,
                          "--predictions_file", str(out / f"{name}.txt")]
    commands["cold"] = ["infer", "--config", *relative, *write_yaml(directory, "cold", COLD),
                        "--features_file", FIRST8, "--predictions_file", str(out / "cold.txt")]
    return commands


def run_here(commands, capsys):
    results = {}
    for name, argv in commands.items():
        capsys.readouterr()
        status = run.main(argv)
        captured = capsys.readouterr()
        results[name] = {"status": status, "stdout": captured.out, "stderr": captured.err}
    return results


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    directory = tmp_path_factory.mktemp("jax_commands")
    jax_commands = command_lines(directory, "jax")
    jax_commands.update(sampling_lines(directory))
    (directory / "commands.json").write_text(json.dumps(jax_commands))
    arrays, results = jax_worker.run("commands", directory)
    return directory, arrays, results


def fields(line):
    return line.split(" ||| ")


def same_field(name, mine, theirs):
    """Asserts one ` ||| ` field equal: numbers (scores, soft alignment vectors) within their
    tolerance, text exactly."""
    try:
        a = np.array([[float(x) for x in vector.split()] for vector in mine.split(" ; ")])
        b = np.array([[float(x) for x in vector.split()] for vector in theirs.split(" ; ")])
    except ValueError:
        assert mine == theirs, name
        return
    assert a.shape == b.shape, name
    if a.size == 1:  # a score: within 1e-5, or 4 float32 ulps of a larger sum
        tolerance = max(SCORE_TOLERANCE, 4 * float(np.spacing(np.float32(abs(b.item())))))
        assert abs(a.item() - b.item()) <= tolerance, (name, mine, theirs)
    else:
        np.testing.assert_allclose(a, b, rtol=0, atol=SOFT_TOLERANCE, err_msg=name)


def compare_files(name, jax_file, tensorflow_file):
    mine = jax_file.read_text(encoding="utf-8").splitlines()
    theirs = tensorflow_file.read_text(encoding="utf-8").splitlines()
    assert len(mine) == len(theirs) > 0, name
    for number, (a, b) in enumerate(zip(mine, theirs), 1):
        a, b = fields(a), fields(b)
        assert len(a) == len(b), (name, number)
        for x, y in zip(a, b):
            same_field(f"{name}:{number}", x, y)
    return mine


def test_commands_on_jax_write_the_tensorflow_backends_files(runs, capsys):
    directory, _, jax_results = runs
    tensorflow_results = run_here(command_lines(directory, "tensorflow"), capsys)
    for name, expected in tensorflow_results.items():
        got = jax_results[name]
        assert got["status"] == expected["status"], (name, got["stderr"][-2000:])
        if name.startswith("error."):
            assert expected["status"] == 2
            error = [line for line in expected["stderr"].splitlines() if line.startswith("error:")]
            assert error and error[-1] in got["stderr"].splitlines(), (name, got["stderr"])
            continue
        assert expected["status"] == 0, (name, expected["stderr"][-2000:])
        if name == "evaluate":
            assert got["stdout"] == expected["stdout"] and "BLEU" in got["stdout"]
    for path in sorted((directory / "tensorflow").iterdir()):
        lines = compare_files(path.name, directory / "jax" / path.name, path)
        if path.name == "infer.beam4.replace.hard.txt":
            assert not any("<unk>" in line for line in lines)  # (replaced: 7 of 8 lines had one)
        if path.name == "infer.beam4.nbest3.bounds.penalties.soft.txt":
            assert len(lines) == 24
            pieces = [len(fields(line)[1].split()) for line in lines]
            assert min(pieces) >= 3 and max(pieces) == 9  # (</s> not before step 3; stopped at 9)


def test_sampling_on_jax_repeats_with_its_seed_and_is_greedy_when_cold(runs):
    directory, _, results = runs
    out = directory / "jax"
    for name in ("sampling.seed3", "sampling.seed3.again", "sampling.seed4", "cold"):
        assert results[name]["status"] == 0, results[name]["stderr"][-2000:]
    first = (out / "sampling.seed3.txt").read_text(encoding="utf-8")
    assert (out / "sampling.seed3.again.txt").read_text(encoding="utf-8") == first
    assert (out / "sampling.seed4.txt").read_text(encoding="utf-8") != first
    greedy = (out / "infer.greedy.scores.txt").read_text(encoding="utf-8")
    assert first != greedy
    assert (out / "cold.txt").read_text(encoding="utf-8") == greedy


def check_draws(values):
    """The draws of `jax_worker.SAMPLING_DRAWS` follow softmax(top-5 log-probs / 0.7)."""
    log_probs = values["log_probs"]
    top = np.argsort(-log_probs, kind="stable")[:5]
    probabilities = np.exp(log_probs[top] / 0.7 - np.logaddexp.reduce(log_probs[top] / 0.7))
    for name, (copies, options) in jax_worker.SAMPLING_DRAWS.items():
        tokens, scores = values[f"{name}/tokens"], values[f"{name}/scores"]
        assert tokens.shape == scores.shape == (copies, options.get("n_best", 1))
        assert np.isin(tokens, top).all(), name
        np.testing.assert_allclose(scores, log_probs[tokens], rtol=0, atol=1e-5)
        draws = tokens.size
        for token, p in zip(top, probabilities):
            count = int((tokens == token).sum())
            assert abs(count - draws * p) <= 5 * np.sqrt(draws * p * (1 - p)) + 1, (name, token,
                                                                                     count, draws * p)


def test_jax_commands_ran_without_tensorflow(runs):
    # (the worker made `import tensorflow` fail: the checkpoints were read by bundle.py)
    assert runs[1]["tensorflow_unimportable"]


def test_sampling_follows_its_distribution_on_jax(runs):
    check_draws(runs[1])


def test_sampling_follows_its_distribution_on_tensorflow():
    from opennmt_lite.inference.decoding import translation_function
    from opennmt_lite.inference.options import DecodingOptions

    check_draws(jax_worker.sampling_draws(translation_function, DecodingOptions))


def test_out_of_memory_is_told_on_both_backends():
    import tensorflow as tf

    from opennmt_lite.inference.translate import out_of_memory

    class XlaRuntimeError(RuntimeError):  # (JAX's runtime error, by name as jaxlib raises it)
        pass

    assert out_of_memory(MemoryError())
    assert out_of_memory(tf.errors.ResourceExhaustedError(None, None, "OOM when allocating"))
    assert out_of_memory(XlaRuntimeError("RESOURCE_EXHAUSTED: Out of memory allocating 4 GiB"))
    assert not out_of_memory(XlaRuntimeError("INVALID_ARGUMENT: shapes differ"))
    assert not out_of_memory(ValueError("RESOURCE_EXHAUSTED"))


def test_padded_sizes_are_few_and_hold_the_batch():
    from opennmt_lite.inference.portable_decoding import padded_size

    sizes = [padded_size(n) for n in range(1, 129)]
    assert sorted(set(sizes)) == [1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128]
    assert all(n <= size <= max(1.5 * n, 2) for n, size in enumerate(sizes, 1))
    assert padded_size(3, minimum=8) == 8 and padded_size(9, minimum=8) == 12
