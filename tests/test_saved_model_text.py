"""The SavedModel's text signatures (`translate_text`, `encode_text`): SentencePiece inside the
graph, served in a fresh process where opennmt_lite is not importable, against `run.py infer`'s
output for the same sentences, and the defined result of each bad input.

The model is tests/fixtures/ct2_models/postnorm (separate source and target SentencePiece models)
with infer.maximum_features_length 12 and n_best 2, so that long sentences are cut in both paths.
"""

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import run
from conftest import FIXTURES
from opennmt_lite import build
from opennmt_lite.config import load_config

pytest.importorskip("tensorflow_text")

CONFIG = FIXTURES / "ct2_models" / "postnorm" / "config.yml"
REPO = FIXTURES.parents[1]
MAXIMUM_LENGTH = 12
N_BEST = 2

SERVE = textwrap.dedent("""
    import importlib.util, json, sys
    assert importlib.util.find_spec("opennmt_lite") is None, "opennmt_lite is importable"
    import tensorflow as tf
    import tensorflow_text  # registers the SentencePiece ops
    model = tf.saved_model.load(sys.argv[1])
    requests = json.load(open(sys.argv[2]))
    def strings(values):
        return tf.constant([bytes.fromhex(v) for v in values], tf.string, shape=[len(values)])
    def text(array):
        return [[v.decode("utf-8") for v in row] for row in array.numpy()]
    results = {"signatures": sorted(model.signatures)}
    for name, lines in requests.items():
        translated = model.signatures["translate_text"](text=strings(lines))
        encoded = model.signatures["encode_text"](text=strings(lines))
        results[name] = {
            "translations": text(translated["translations"]),
            "translations_shape": translated["translations"].shape.as_list(),
            "log_probs": translated["log_probs"].numpy().tolist(),
            "tokens": text(encoded["tokens"]),
            "length": encoded["length"].numpy().tolist(),
            "outputs": encoded["outputs"].numpy().tolist(),
        }
    assert not any(m.startswith("opennmt_lite") for m in sys.modules)
    json.dump(results, open(sys.argv[3], "w"))
""")


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    directory = tmp_path_factory.mktemp("text")
    override = directory / "override.yml"
    override.write_text(f"infer: {{maximum_features_length: {MAXIMUM_LENGTH}, n_best: {N_BEST}}}\n"
                        f"params: {{beam_width: 2}}\n")
    configs = [str(CONFIG), str(override)]
    lines = (REPO / "data" / "test.en").read_text(encoding="utf-8").splitlines()[:5]
    features = directory / "sentences.txt"
    features.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    predictions = directory / "predictions.txt"
    assert run.main(["infer", "--config", *configs, "--features_file", str(features),
                     "--predictions_file", str(predictions), "--with_scores"]) == 0
    exported = str(directory / "model")
    assert run.main(["export", "--config", *configs, "--output", exported]) == 0
    return load_config(configs), lines, predictions.read_text(encoding="utf-8").splitlines(), exported


def serve(directory, requests, tmp_path):
    request_path, result_path = tmp_path / "requests.json", tmp_path / "results.json"
    request_path.write_text(json.dumps({name: [line.hex() for line in lines]
                                        for name, lines in requests.items()}))
    env = dict(os.environ, PYTHONPATH="")  # the repository is not importable from tmp_path
    subprocess.run([sys.executable, "-c", SERVE, directory, str(request_path), str(result_path)],
                   check=True, cwd=str(tmp_path), env=env, timeout=300)
    return json.loads(result_path.read_text())


def test_translate_text_in_a_fresh_process_gives_infer_output_and_bad_inputs_defined_results(
        setup, tmp_path):
    config, lines, predictions, exported = setup
    long_line = lines[0]
    invalid = b"\xff\xfe" + long_line.encode() + b" \xc3( ok"
    requests = {
        "lines": [line.encode() for line in lines],
        "empty_batch": [],
        "empty_lines": [b"", b"   ", b" \t\n ", lines[1].encode()],
        "invalid_utf8": [invalid, invalid.decode("utf-8", errors="replace").encode()],
    }
    served = serve(exported, requests, tmp_path)
    assert {"translate_text", "encode_text", "translate", "encode"} <= set(served["signatures"])

    # exactly `run.py infer --with_scores`'s lines (n_best per sentence), scores to 1e-5
    result = served["lines"]
    assert result["translations_shape"] == [len(lines), N_BEST]
    expected = [line.split(" ||| ", 1) for line in predictions]
    assert len(expected) == len(lines) * N_BEST
    assert [t for row in result["translations"] for t in row] == [text for _, text in expected]
    assert np.abs(np.ravel(result["log_probs"]) - [float(s) for s, _ in expected]).max() < 1e-5

    # the source pieces are the Python SentencePiece model's, cut at the maximum length
    assets = build.assets(config.data)
    pieces = assets.source_tokenizer.tokenize_batch(lines)
    assert max(len(p) for p in pieces) > MAXIMUM_LENGTH
    pieces = [p[:MAXIMUM_LENGTH] for p in pieces]
    assert result["length"] == [len(p) for p in pieces]
    assert [row[:len(p)] for row, p in zip(result["tokens"], pieces)] == pieces

    # encoder outputs: the in-process model's on the same ids
    model, assets, _ = build.inference_model(config)
    width = max(len(p) for p in pieces)
    ids = np.zeros([len(pieces), width], np.int32)
    for row, p in enumerate(pieces):
        ids[row, :len(p)] = assets.source_vocabulary.lookup(p)
    encoded = model.encode(ids, np.array([len(p) for p in pieces], np.int32)).numpy()
    outputs = np.array(result["outputs"])
    for row, p in enumerate(pieces):
        assert np.abs(outputs[row, :len(p)] - encoded[row, :len(p)]).max() <= 1e-5

    # an empty or whitespace-only sentence: no piece, "" and log-probability 0 (beside a real one)
    empty = served["empty_lines"]
    assert empty["length"][:3] == [0, 0, 0]
    assert empty["translations"][:3] == [[""] * N_BEST] * 3
    assert empty["log_probs"][:3] == [[0.0] * N_BEST] * 3
    assert empty["translations"][3] == result["translations"][1]

    # an empty batch: empty outputs of the right rank
    assert served["empty_batch"]["translations_shape"] == [0, N_BEST]
    assert served["empty_batch"]["tokens"] == [] and served["empty_batch"]["length"] == []

    # invalid UTF-8 bytes: replaced by U+FFFD as Python's decode(errors="replace") does
    bad, replaced = (served["invalid_utf8"][key] for key in ("translations", "tokens"))
    assert bad[0] == bad[1] and replaced[0] == replaced[1]
    assert served["invalid_utf8"]["length"][0] == MAXIMUM_LENGTH

