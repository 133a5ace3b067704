"""`run.py serve` as a client sees it: a real server process on 127.0.0.1 (a free port), started
once for the module, asked over HTTP (http.client).

The model is tests/fixtures/ct2_models/postnorm, served three ways at once: its checkpoint (id 0),
its CTranslate2 export (id 1) and its SavedModel export (id 2), exported here. Each answer must be
what `run.py infer` (or `infer --ctranslate2`) writes for the same sentences and options: the same
translations, scores within 1e-4 (the server batches other sentences together than infer does;
infer prints 6 decimals), for single requests, one batched request, and concurrent requests that
the server batches together. A table of malformed requests: each gets its status code and a JSON
error, and the server keeps serving. A second server is stopped by SIGTERM while clients send:
every request it received is answered, and it exits 0.
"""

import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest
import yaml

import run
from conftest import FIXTURES
from opennmt_lite import build
from opennmt_lite.config import load_config

pytest.importorskip("ctranslate2")
pytest.importorskip("tensorflow_text")

REPO = FIXTURES.parents[1]
CONFIG = FIXTURES / "ct2_models" / "postnorm" / "config.yml"
SENTENCES = [line for line in (REPO / "data" / "test.en").read_text(encoding="utf-8").splitlines()
             if line.strip()][:10]
SCORE_TOLERANCE = 1e-4
# (a batch waits up to 50 ms for more sentences: concurrent requests share batches)
LIMITS = {"max_request_sentences": 20, "max_sentence_characters": 2000, "queue_limit": 16,
          "max_request_bytes": 100_000, "max_beam_size": 8, "batch_timeout_ms": 50}
START_TIMEOUT = 180


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def request(port, method, path, body=None, headers=None, timeout=60):
    """(status, headers, parsed JSON or text) of one request on a fresh connection."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        if isinstance(body, (list, dict)):
            body = json.dumps(body).encode()
        connection.request(method, path, body=body, headers=headers or {})
        response = connection.getresponse()
        data = response.read()
        try:
            data = json.loads(data)
        except ValueError:
            data = data.decode("utf-8", "replace")
        return response.status, dict(response.getheaders()), data
    finally:
        connection.close()


def translate(port, items):
    status, _, data = request(port, "POST", "/translator/translate", items)
    assert status == 200, data
    return data


def start_server(configs, port, log):
    process = subprocess.Popen(
        [sys.executable, "run.py", "serve", "--config", *map(str, configs), "--port", str(port)],
        cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"the server exited with {process.returncode}")
        try:
            if request(port, "GET", "/translator/health", timeout=2)[0] == 200:
                return process
        except OSError:
            time.sleep(0.5)
    process.kill()
    raise AssertionError("the server did not start")


def stop(process):
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            return process.wait(60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    return process.returncode


@pytest.fixture(scope="module")
def exports(tmp_path_factory):
    from opennmt_lite.export import ctranslate2 as ct2_export
    from opennmt_lite.export.saved_model import export_model

    directory = tmp_path_factory.mktemp("serve")
    config = load_config([str(CONFIG)])
    model, assets, _ = build.inference_model(config)
    options = build.decoding_options(config.params, config.infer)
    ct2_export.export_model(model, assets, options, config.data, str(directory / "ct2"))
    export_model(model, assets, options, config.data, str(directory / "saved_model"),
                 maximum_source_length=config.infer.maximum_features_length)
    return directory


MAXIMUM_LENGTH = 12  # (model 3: the same checkpoint, infer.maximum_features_length 12)


@pytest.fixture(scope="module")
def short_config(exports):
    """CONFIG with infer.maximum_features_length 12, as one file (a served model's config)."""
    user = yaml.safe_load(CONFIG.read_text())
    user["model_dir"] = str(REPO / user["model_dir"])
    user["infer"] = {"maximum_features_length": MAXIMUM_LENGTH}
    path = exports / "short.yml"
    path.write_text(yaml.safe_dump(user))
    return path


@pytest.fixture(scope="module")
def server(exports, short_config):
    serve_config = exports / "serve.yml"
    serve_config.write_text(yaml.safe_dump({"serve": dict(LIMITS, models=[
        {"id": 0, "backend": "checkpoint"},
        {"id": 1, "backend": "ctranslate2", "path": str(exports / "ct2")},
        {"id": 2, "backend": "saved_model", "path": str(exports / "saved_model")},
        {"id": 3, "backend": "checkpoint", "config": str(short_config)},
    ])}))
    port = free_port()
    with open(exports / "server.log", "wb") as log:
        process = start_server([CONFIG, serve_config], port, log)
        yield port
        assert stop(process) == 0


@pytest.fixture(scope="module")
def sources(exports):
    path = exports / "sources.en"
    path.write_text("".join(f"{line}\n" for line in SENTENCES), encoding="utf-8")
    return path


def infer(sources, tmp_path, *extra, configs=(CONFIG,)):
    """[[(score, text[, alignment])] n_best per source] that `run.py infer` writes."""
    output = tmp_path / f"pred{len(list(tmp_path.iterdir()))}.txt"
    assert run.main(["infer", "--config", *map(str, configs), "--features_file", str(sources),
                     "--predictions_file", str(output), "--with_scores", *extra]) == 0
    lines = [line.split(" ||| ") for line in output.read_text(encoding="utf-8").splitlines()]
    n_best = len(lines) // len(SENTENCES)
    return [[(float(parts[0]), *parts[1:]) for parts in lines[i * n_best:(i + 1) * n_best]]
            for i in range(len(SENTENCES))]


def assert_same(answers, expected, alignments=False):
    """`answers`: the API's n_best lists; `expected`: infer's hypotheses per source."""
    n_best = len(expected[0])
    assert len(answers) == n_best
    for rank in range(n_best):
        assert [a["src"] for a in answers[rank]] == SENTENCES
        for answer, hypotheses in zip(answers[rank], expected):
            score, text, *alignment = hypotheses[rank]
            assert answer["tgt"] == text and answer["n_best"] == n_best
            assert abs(answer["pred_score"] - score) <= SCORE_TOLERANCE, (answer, score)
            if alignments:
                assert answer["align"] == alignment
            else:
                assert "align" not in answer


def merged(answers_per_request):
    """The n_best lists of several one-sentence requests, as one request's."""
    return [[answers[rank][0] for answers in answers_per_request]
            for rank in range(len(answers_per_request[0]))]


def concurrently(port, item_lists):
    results = [None] * len(item_lists)

    def send(index):
        results[index] = translate(port, item_lists[index])

    threads = [threading.Thread(target=send, args=(i,)) for i in range(len(item_lists))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


# -- answers equal to infer's ------------------------------------------------------------------

@pytest.mark.parametrize("model_id", [0, 1, 2], ids=["checkpoint", "ctranslate2", "saved_model"])
def test_single_batched_and_concurrent_requests_equal_infer(server, exports, sources, tmp_path, model_id):
    extra = ["--ctranslate2", str(exports / "ct2")] if model_id == 1 else []
    expected = infer(sources, tmp_path, *extra)  # (the config's beam 4; the SavedModel's too)
    single = [translate(server, [{"src": s, "id": model_id}]) for s in SENTENCES]
    assert_same(merged(single), expected)
    assert_same(translate(server, [{"src": s, "id": model_id} for s in SENTENCES]), expected)
    batches = metric(server, f'opennmt_lite_serve_batch_size_count{{model="{model_id}"}}')
    together = concurrently(server, [[{"src": s, "id": model_id}] for s in SENTENCES])
    assert_same(merged(together), expected)
    # (batched across requests: fewer batches than requests)
    assert metric(server, f'opennmt_lite_serve_batch_size_count{{model="{model_id}"}}') - batches < len(SENTENCES)


@pytest.mark.parametrize("model_id", [0, 1], ids=["checkpoint", "ctranslate2"])
def test_beam_size_and_n_best_options_equal_infer(server, exports, sources, tmp_path, model_id):
    extra = ["--ctranslate2", str(exports / "ct2")] if model_id == 1 else []
    for beam, n_best in ((1, 1), (3, 2)):
        expected = infer(sources, tmp_path, "--beam_width", str(beam), "--n_best", str(n_best), *extra)
        items = [{"src": s, "id": model_id, "beam_size": beam, "n_best": n_best} for s in SENTENCES]
        assert_same(translate(server, items), expected)


def test_alignments_equal_infer_hard_alignments(server, exports, sources, tmp_path):
    hard = tmp_path / "hard.yml"
    hard.write_text("infer:\n  with_alignments: hard\n")
    for model_id, extra in ((0, []), (2, [])):
        expected = infer(sources, tmp_path, *extra, configs=(CONFIG, hard))
        items = [{"src": s, "id": model_id, "report_align": True} for s in SENTENCES]
        answers = translate(server, items)
        for answer, ((score, text, alignment),) in zip(answers[0], expected):
            assert answer["tgt"] == text and answer["align"] == [alignment]


def test_a_sentence_longer_than_the_maximum_is_cut_as_infer_cuts_it(server, short_config, tmp_path):
    long = " ".join(SENTENCES)
    path = tmp_path / "long.en"
    path.write_text(long + "\n" + SENTENCES[0] + "\n", encoding="utf-8")
    output = tmp_path / "long.de"
    assert run.main(["infer", "--config", str(short_config), "--features_file", str(path),
                     "--predictions_file", str(output), "--with_scores"]) == 0
    expected = [line.split(" ||| ") for line in output.read_text(encoding="utf-8").splitlines()]
    answers = translate(server, [{"src": long, "id": 3}, {"src": SENTENCES[0], "id": 3}])[0]
    for answer, (score, text) in zip(answers, expected):
        assert answer["tgt"] == text and abs(answer["pred_score"] - float(score)) <= SCORE_TOLERANCE
    # (cut: not what the whole sentence gives)
    assert translate(server, [{"src": long, "id": 0}])[0][0]["tgt"] != answers[0]["tgt"]


def test_default_model_whitespace_and_empty_source(server):
    answers = translate(server, [{"src": f"  {SENTENCES[0]}\t"}, {"src": "   "}])[0]
    alone = translate(server, [{"src": SENTENCES[0], "id": 0}])[0][0]
    assert answers[0]["tgt"] == f"  {alone['tgt']}\t"  # (OpenNMT-py puts the spaces back)
    assert answers[1]["tgt"] == "   " and answers[1]["pred_score"] == 0


def test_models_health_and_metrics(server):
    status, _, models = request(server, "GET", "/translator/models")
    assert status == 200
    assert [(m["model_id"], m["backend"]) for m in models] == [
        (0, "checkpoint"), (1, "ctranslate2"), (2, "saved_model"), (3, "checkpoint")]
    assert models[3]["opt"]["max_source_length"] == MAXIMUM_LENGTH
    assert models[0]["opt"]["beam_size"] == 4 and models[0]["loaded"] is True
    assert request(server, "GET", "/translator/health")[2] == {"status": "ok"}
    before = metric(server, 'opennmt_lite_serve_sentences_total{model="1"}')
    translate(server, [{"src": s, "id": 1} for s in SENTENCES[:3]])
    assert metric(server, 'opennmt_lite_serve_sentences_total{model="1"}') == before + 3
    status, headers, text = request(server, "GET", "/metrics")
    assert headers["content-type"].startswith("text/plain")
    for name in ("requests_total", "source_tokens_total", "target_tokens_total", "queue_depth",
                 "batch_size_bucket", "request_latency_seconds_bucket"):
        assert f"opennmt_lite_serve_{name}" in text
    assert re.search(r'request_latency_percentile_seconds\{quantile="0.99"\} [0-9.e-]+', text)


def metric(port, name):
    text = request(port, "GET", "/metrics")[2]
    values = [float(line.split()[-1]) for line in text.splitlines() if line.startswith(name + " ")]
    return values[0] if values else 0.0


# -- malformed requests ------------------------------------------------------------------------

def items(**extra):
    return json.dumps([dict({"src": "Hello world."}, **extra)]).encode()


MALFORMED = [
    ("bad JSON", "POST", b'[{"src": "a"', 400),
    ("empty body", "POST", b"", 400),
    ("an object, not a list", "POST", b'{"src": "a"}', 400),
    ("empty list", "POST", b"[]", 400),
    ("a list of strings", "POST", b'["a", "b"]', 400),
    ("no src", "POST", b'[{"id": 0}]', 400),
    ("src a number", "POST", b'[{"src": 5}]', 400),
    ("src null", "POST", b'[{"src": null}]', 400),
    ("src a list", "POST", b'[{"src": ["a"]}]', 400),
    ("id a string", "POST", items(id="0"), 400),
    ("id negative", "POST", items(id=-1), 400),
    ("id true", "POST", items(id=True), 400),
    ("id a float", "POST", items(id=0.5), 400),
    ("unknown model id", "POST", items(id=7), 404),
    ("two models in one request", "POST", b'[{"src": "a", "id": 0}, {"src": "b", "id": 1}]', 400),
    ("negative beam size", "POST", items(beam_size=-1), 400),
    ("zero beam size", "POST", items(beam_size=0), 400),
    ("beam size a float", "POST", items(beam_size=1.5), 400),
    ("beam size past serve.max_beam_size", "POST", items(beam_size=9), 400),
    ("n_best above the beam size", "POST", items(beam_size=2, n_best=3), 400),
    ("beam size other than the SavedModel's", "POST", items(id=2, beam_size=2), 400),
    ("options differing between items", "POST", b'[{"src": "a", "n_best": 1}, {"src": "b", "n_best": 2}]', 400),
    ("report_align a string", "POST", items(report_align="yes"), 400),
    ("unknown key", "POST", items(tgt="x"), 400),
    ("NaN", "POST", b'[{"src": "a", "beam_size": NaN}]', 400),
    ("invalid UTF-8", "POST", b'[{"src": "caf\xe9 \xff"}]', 400),
    ("a lone surrogate", "POST", b'[{"src": "a \\ud800 b"}]', 400),
    ("nested a million deep", "POST", b"[" * 1_000_000 + b"]" * 1_000_000, 413),
    ("nested deeply", "POST", b"[" * 50_000 + b"]" * 50_000, 400),
    ("huge sentence", "POST", items(src="word " * 1000), 413),
    ("too many sentences", "POST", json.dumps([{"src": "a"}] * 21).encode(), 413),
    ("more sentences than the queue takes", "POST", json.dumps([{"src": "a b"}] * 17).encode(), 503),
    ("GET on translate", "GET", None, 405),
    ("unknown path", "POST", b"[]", 404),
]


def test_every_malformed_request_gets_its_status_and_a_json_error(server):
    assert len(MALFORMED) >= 20
    for name, method, body, expected in MALFORMED:
        path = "/translator/nothing" if name == "unknown path" else "/translator/translate"
        status, headers, data = request(server, method, path, body,
                                        headers={"Content-Type": "application/json"})
        assert status == expected, (name, status, data)
        assert isinstance(data, dict) and data["status"] == "error", (name, data)
        assert isinstance(data["error"], str) and data["error"] and "\n" not in data["error"], name
        if expected == 503:
            assert int(headers["retry-after"]) >= 1, name
        # the server keeps serving
        assert translate(server, [{"src": SENTENCES[0]}])[0][0]["tgt"]


def test_a_declared_body_too_large_is_refused_before_it_is_read(server):
    connection = http.client.HTTPConnection("127.0.0.1", server, timeout=30)
    try:
        connection.putrequest("POST", "/translator/translate")
        connection.putheader("Content-Length", str(LIMITS["max_request_bytes"] + 1))
        connection.endheaders()
        response = connection.getresponse()
        assert response.status == 413 and json.loads(response.read())["status"] == "error"
    finally:
        connection.close()


# -- start and stop ----------------------------------------------------------------------------

def test_a_port_in_use_stops_the_server_with_one_line(server):
    result = subprocess.run([sys.executable, "run.py", "serve", "--config", str(CONFIG), "--port",
                             str(server)], cwd=REPO, capture_output=True, text=True, timeout=300)
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert result.returncode == 2 and len(errors) == 1 and f":{server}" in errors[0], result.stderr[-2000:]


def test_a_model_that_cannot_be_loaded_stops_the_server_with_one_line(tmp_path):
    serve_config = tmp_path / "serve.yml"
    serve_config.write_text(yaml.safe_dump({"serve": {"models": [
        {"id": 0, "backend": "checkpoint"},
        {"id": 3, "backend": "ctranslate2", "path": str(tmp_path / "no_model")}]}}))
    result = subprocess.run([sys.executable, "run.py", "serve", "--config", str(CONFIG),
                             str(serve_config), "--port", str(free_port())],
                            cwd=REPO, capture_output=True, text=True, timeout=300)
    assert result.returncode == 2, result.stderr[-2000:]
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "model 3 (ctranslate2" in errors[0] and "Traceback" not in result.stderr


def test_sigterm_under_load_answers_every_received_request_and_exits_0(exports, tmp_path):
    serve_config = tmp_path / "serve.yml"
    # (a long batch wait: requests are still queued when the signal comes)
    serve_config.write_text(yaml.safe_dump({"serve": {"batch_timeout_ms": 300, "models": [
        {"id": 0, "backend": "ctranslate2", "path": str(exports / "ct2")}]}}))
    port = free_port()
    log_path = tmp_path / "server.log"
    with open(log_path, "wb") as log:
        process = start_server([CONFIG, serve_config], port, log)
        answered, refused, lock, stopping = [], [], threading.Lock(), threading.Event()

        def client(index):
            while True:
                sentence = SENTENCES[index % len(SENTENCES)]
                try:
                    status, _, data = request(port, "POST", "/translator/translate",
                                              [{"src": sentence}], timeout=120)
                except OSError:  # (refused or reset: the server had stopped accepting)
                    with lock:
                        refused.append(index)
                    if stopping.is_set():
                        return
                    continue
                with lock:
                    answered.append((status, data))

        threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(16)]
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + 120
        while len(answered) < 20 and time.monotonic() < deadline and process.poll() is None:
            time.sleep(0.05)
        stopping.set()
        code = stop(process)
        for thread in threads:
            thread.join(60)
    assert len(answered) >= 20, "the clients got too few answers before the signal"
    assert code == 0
    assert answered and all(status == 200 and data[0][0]["tgt"] for status, data in answered)
    text = log_path.read_text()
    received, replied = map(int, re.search(r"(\d+) translation requests received, (\d+) answered",
                                           text).groups())
    assert received == replied == len(answered)


def test_request_timeout_answers_503_and_withdraws_the_sentences_under_its_url_root(exports, tmp_path):
    serve_config = tmp_path / "serve.yml"
    # (a batch waits 2 s to fill, a request only 0.3 s: a lone sentence times out)
    serve_config.write_text(yaml.safe_dump({"serve": {
        "url_root": "/api/v1", "batch_timeout_ms": 2000, "request_timeout": 0.3, "max_batch_size": 4,
        "models": [{"id": 0, "backend": "ctranslate2", "path": str(exports / "ct2")}]}}))
    port = free_port()
    with open(tmp_path / "server.log", "wb") as log:
        process = subprocess.Popen(
            [sys.executable, "run.py", "serve", "--config", str(CONFIG), str(serve_config),
             "--port", str(port)], cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + START_TIMEOUT
            while True:
                assert process.poll() is None and time.monotonic() < deadline
                try:
                    if request(port, "GET", "/api/v1/health", timeout=2)[0] == 200:
                        break
                except OSError:
                    time.sleep(0.5)
            assert request(port, "GET", "/translator/health")[0] == 404
            start = time.monotonic()
            status, headers, data = request(port, "POST", "/api/v1/translate", [{"src": SENTENCES[0]}])
            assert time.monotonic() - start < 1.5  # (answered at the timeout, not after the batch)
            assert status == 503 and int(headers["retry-after"]) >= 1
            assert "serve.request_timeout" in data["error"] and data["status"] == "error"
            assert metric(port, 'opennmt_lite_serve_queue_depth{model="0"}') == 0  # (withdrawn)
            assert metric(port, 'opennmt_lite_serve_requests_total{code="503",model="0"}') == 1
        finally:
            assert stop(process) == 0


# -- which sentences share a batch -------------------------------------------------------------

def test_batches_take_the_oldest_sentences_with_the_same_options_within_both_limits():
    import asyncio
    import types

    import numpy as np

    from opennmt_lite.inference.decoding import DecodingOptions
    from opennmt_lite.serving.backends import Source
    from opennmt_lite.serving.batcher import Batcher, Job, Overloaded
    from opennmt_lite.serving.metrics import Metrics

    def sources(*lengths):
        return [Source(["x"] * n, np.arange(n, dtype=np.int32), n) for n in lengths]

    settings = types.SimpleNamespace(max_batch_size=3, max_batch_tokens=12, batch_timeout_ms=0,
                                     queue_limit=8, batch_workers=1)
    batcher = Batcher(types.SimpleNamespace(model_id=0), settings, Metrics())
    loop = asyncio.new_event_loop()
    try:
        batcher._arrived = asyncio.Event()
        four, one = DecodingOptions(beam_width=4, n_best=2), DecodingOptions(beam_width=1)
        beam4, beam1 = Job(sources(2, 3), four, None, loop), Job(sources(2), one, None, loop)
        long = Job(sources(5, 1), four, None, loop)
        for job in (beam4, beam1, long):
            batcher.submit(job)
        # beam4's two sentences, then long's first would make 3 rows x 5 = 15 tokens > 12: left
        assert [(job, i) for job, i in batcher._take()] == [(beam4, 0), (beam4, 1)]
        assert [(job, i) for job, i in batcher._take()] == [(beam1, 0)]
        assert [(job, i) for job, i in batcher._take()] == [(long, 0), (long, 1)]
        assert batcher.depth == 0
        with pytest.raises(Overloaded):
            batcher.submit(Job(sources(*[1] * 9), four, None, loop))
        empty = Job(sources(0, 0), four, None, loop)
        batcher.submit(empty)  # (no token: answered at once, nothing queued)
        assert empty.done.result() == [[("", 0.0)] * 2] * 2 and batcher.depth == 0  # (n_best 2)
    finally:
        loop.close()


# -- the serve section -------------------------------------------------------------------------

@pytest.mark.parametrize("serve, message", [
    ({"models": []}, "serve.models is an empty list"),
    ({"models": ["model.bin"]}, "serve.models[0]: expected a mapping"),
    ({"models": [{"backend": "checkpoint"}]}, "serve.models[0].id: must be set"),
    ({"models": [{"id": -1}]}, "serve.models[0].id must be at least 0"),
    ({"models": [{"id": 1}, {"id": 1}]}, "serve.models[1].id: 1 is already the id of serve.models[0]"),
    ({"models": [{"id": 0, "backend": "onnx"}]}, "serve.models[0].backend: must be one of"),
    ({"models": [{"id": 0, "backend": "ctranslate2"}]}, "serve.models[0].path: must name"),
    ({"models": [{"id": 0, "pth": "x"}]}, "serve.models[0].pth: unknown key (did you mean path?)"),
    ({"models": [{"id": 0, "config": 3}]}, "serve.models[0].config: expected a string"),
    ({"port": 70000}, "serve.port must be at most 65535"),
    ({"url_root": "translator/"}, "serve.url_root must be a path"),
    ({"queue_limit": 0}, "serve.queue_limit must be at least 1"),
    ({"batch_size": 8}, "serve.batch_size: unknown key"),
])
def test_the_serve_section_refuses_with_one_line_naming_the_key(serve, message):
    from opennmt_lite.config import ConfigError, build_config

    with pytest.raises(ConfigError) as error:
        build_config({"model_dir": "x", "model": {"num_layers": 1, "num_units": 8, "num_heads": 1,
                                                  "ffn_inner_dim": 8}, "serve": serve})
    assert message in str(error.value) and "\n" not in str(error.value)
