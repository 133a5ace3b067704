"""The exported SavedModel serves in a fresh process without opennmt_lite, with identical results."""

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from conftest import ONMT_FIXTURE
from opennmt_lite.config import load_config
from opennmt_lite.export.saved_model import export_model
from opennmt_lite.inference.decoding import DecodingOptions, translation_function
from opennmt_lite import build

CONFIG = ONMT_FIXTURE.parent / "onmt_fixture.yml"

SERVE = textwrap.dedent("""
    import json, sys
    import numpy as np
    import tensorflow as tf
    model = tf.saved_model.load(sys.argv[1])
    requests = json.load(open(sys.argv[2]))
    results = {}
    for name, request in requests.items():
        tokens = tf.constant(request["tokens"], tf.string, shape=request["shape"])
        length = tf.constant(request["length"], tf.int32, shape=[request["shape"][0]])
        encoded = model.signatures["encode"](tokens=tokens, length=length)
        translated = model.signatures["translate"](tokens=tokens, length=length)
        results[name] = {
            "outputs": encoded["outputs"].numpy().tolist(),
            "tokens": [[[t.decode() for t in hyp] for hyp in row] for row in translated["tokens"].numpy()],
            "length": translated["length"].numpy().tolist(),
            "log_probs": translated["log_probs"].numpy().tolist(),
        }
    assert not any(m.startswith("opennmt_lite") for m in sys.modules), "opennmt_lite was imported"
    results["signatures"] = sorted(model.signatures)
    json.dump(results, open(sys.argv[3], "w"))
""")


def padded(sentences):
    width = max([len(s) for s in sentences] + [1])
    return [s + [""] * (width - len(s)) for s in sentences], [len(s) for s in sentences]


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    config = load_config(CONFIG)
    model, assets, _ = build.inference_model(config)
    directory = str(tmp_path_factory.mktemp("export") / "model")
    export_model(model, assets, build.decoding_options(config.params, config.infer), config.data, directory)
    return config, assets, model, directory


def serve(directory, requests, tmp_path):
    request_path, result_path = tmp_path / "requests.json", tmp_path / "results.json"
    request_path.write_text(json.dumps(requests))
    env = dict(os.environ, PYTHONPATH="")  # the repository is not importable from there
    subprocess.run([sys.executable, "-c", SERVE, directory, str(request_path), str(result_path)],
                   check=True, cwd=str(tmp_path), env=env, timeout=300)
    return json.loads(result_path.read_text())


def test_savedmodel_in_fresh_process_matches_in_process_model(exported, tmp_path):
    config, assets, model, directory = exported
    sentences = [line.split() for line in (ONMT_FIXTURE / "test.first8.tok.en").read_text().splitlines()]
    tokens, lengths = padded(sentences)
    served = serve(directory, {"batch": {"tokens": tokens, "length": lengths,
                                         "shape": [len(tokens), len(tokens[0])]}}, tmp_path)
    # a pre-tokenized model (no SentencePiece) has the token signatures only
    signatures = served.pop("signatures")
    assert {"encode", "translate"} <= set(signatures) and not {"encode_text", "translate_text"} & set(signatures)
    served = served["batch"]

    ids = np.array([assets.source_vocabulary.lookup(row) for row in tokens], np.int32)
    ids[np.arange(ids.shape[1])[None, :] >= np.array(lengths)[:, None]] = 0
    encoded = model.encode(ids, np.array(lengths, np.int32)).numpy()
    real = np.arange(ids.shape[1])[None, :] < np.array(lengths)[:, None]
    assert np.abs(np.array(served["outputs"])[real] - encoded[real]).max() <= 1e-5

    decode = translation_function(model, DecodingOptions(beam_width=4, n_best=1))
    result = decode(ids, np.array(lengths, np.int32))
    for row in range(len(sentences)):
        length = int(result.lengths[row, 0])
        expected = assets.target_vocabulary.to_tokens(result.ids[row, 0, :length].numpy())
        assert served["tokens"][row][0][:length] == expected
        assert served["length"][row][0] == length
    # and these are OpenNMT-tf's own beam-4 translations
    reference = (ONMT_FIXTURE / "pred.first8.beam4.tok.de").read_text().splitlines()
    served_lines = [" ".join(t for t in row[0] if t) for row in served["tokens"]]
    assert served_lines == reference


def test_bad_input_to_signatures_gets_defined_results(exported, tmp_path):
    _, assets, model, directory = exported
    requests = {
        "empty_batch": {"tokens": [], "length": [], "shape": [0, 3]},
        "zero_length": {"tokens": [["▁the", "▁file"], ["", ""]], "length": [2, 0], "shape": [2, 2]},
        "unknown": {"tokens": [["qqqq-not-a-piece", "▁the"]], "length": [2], "shape": [1, 2]},
        "length_too_long": {"tokens": [["▁the"]], "length": [5], "shape": [1, 1]},
    }
    served = serve(directory, requests, tmp_path)
    assert np.array(served["empty_batch"]["outputs"]).size == 0
    assert served["empty_batch"]["tokens"] == []
    zero = served["zero_length"]
    assert np.isfinite(np.array(zero["outputs"])).all() and np.isfinite(zero["log_probs"]).all()
    assert len(zero["length"]) == 2
    # an unknown piece is the out-of-vocabulary id, as in training
    unknown = served["unknown"]
    the = int(assets.source_vocabulary.lookup(["▁the"])[0])
    expected = model.encode(np.array([[assets.source_vocabulary.oov_id, the]], np.int32),
                            np.array([2], np.int32)).numpy()
    assert np.abs(np.array(unknown["outputs"]) - expected).max() <= 1e-5
    # a length beyond the tokens is clipped to them: the same as the correct length
    expected = model.encode(np.array([[the]], np.int32), np.array([1], np.int32)).numpy()
    assert np.abs(np.array(served["length_too_long"]["outputs"]) - expected).max() <= 1e-5
