"""`run.py serve` under load, on loopback (127.0.0.1 only): throughput and latency with 1, 8, 32
and 128 concurrent clients, batched across requests against one request at a time, for the
CTranslate2 and SavedModel backends; then an overload run; then SIGTERM under load.

    python bench/bench_serve.py [--config CONFIG | --sample-model | --base-model] [--clients 1 8 32 128]
        [--seconds 10]
        [--max-requests 5000] [--backends ctranslate2 saved_model] [--overload-clients 512]
        [--ct2-quantization int8|int8_float32|float32] [--output runs/bench_results/serve-<time>.json]

The model is CONFIG's newest checkpoint (default: tests/fixtures/ct2_models/postnorm, 2 layers of
64 units, SentencePiece, beam 4), exported once (`run.py export`) into runs/bench_cache/serve/.
`--sample-model`: configs/sample.yml's model instead (3 layers of 256 units, beam 4), trained
once into runs/bench_cache/serve/sample/ for SAMPLE_STEPS steps (warm-up shortened so that its
translations end with </s> rather than run to the maximum length; ~15 minutes on 2 busy cores):
a model whose decoding, not the HTTP path, is most of a request's cost.
`--base-model`: OpenNMT-tf's TransformerBase (configs/transformer_base.yml: 6 layers of 512 units,
SentencePiece 8000, beam 4), the size users deploy, made once into runs/bench_cache/serve/base/
(~2 minutes on 2 busy cores): its weights are untrained (one training step), so its decoding
is forced to exactly data/test.de's mean length in target pieces (see `base_model`).
Each client sends one-sentence requests (the lines of data/test.en in turn, each client from its
own offset) one after another on a keep-alive connection, from an asyncio HTTP/1.1 client in this
process. A level runs --seconds or --max-requests requests, whichever comes first, then waits for
the answers still due (each bounded by a client timeout): it stops by itself.

Two servers per backend, both started once, measured one after the other at each level (so that
each pair sees the same load on a shared machine):
* batched: serve.max_batch_size 64, serve.batch_timeout_ms 0, serve.batch_workers: the default
  (every core for CTranslate2, 1 for TensorFlow);
* one at a time: max_batch_size 1 (no batching across requests), the same batch_workers: the same
  CTranslate2 threads, each translating one request at a time (with batch_workers 1 the batched
  server would have had twice the cores of this one on a 2-core machine).
Per level: sentences/s, target tokens/s (the server's counter: the best hypotheses' pieces),
p50/p95/p99 latency seen by the clients, and the mean batch size formed (the server's
`batch_size` histogram, read from GET /metrics before and after), the server process's CPU time
per sentence answered (/proc; on a shared machine a truer guide than sentences/s to an idle CPU's
figures) and the load average. The ratios batched / one at a time (sentences/s, and CPU per
sentence) are printed per level.

Overload: the batched CTranslate2 server with serve.queue_limit 64 and serve.request_timeout 2,
--overload-clients clients for --seconds: every request must end in its translation (200) or a
503, none hang (client timeout 30 s), none lost: the client's counts (sent = 200 + 503) and the
server's (requests counted in its metrics) agree; the server's peak RSS (VmHWM) is reported.

SIGTERM: 32 clients on the batched CTranslate2 server, SIGTERM after 2 s: every request the server
received is answered (its exit log line against the clients' count of answers), exit status 0.
"""

import argparse
import asyncio
import json
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import time

BENCH = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(BENCH)
DEFAULT_CONFIG = os.path.join("tests", "fixtures", "ct2_models", "postnorm", "config.yml")
CACHE = os.path.join(ROOT, "runs", "bench_cache", "serve")
HOST = "127.0.0.1"  # loopback only
BATCHED = {"max_batch_size": 64}
ONE_AT_A_TIME = {"max_batch_size": 1}  # (the same workers: as many one-sentence batches at once)
SAMPLE_STEPS = 150


def sample_model():
    """The config of configs/sample.yml's model trained briefly under CACHE/sample (trained once)."""
    import yaml

    directory = os.path.join(CACHE, "sample")
    config_path = os.path.join(directory, "config.yml")
    with open(os.path.join(ROOT, "configs", "sample.yml")) as f:
        text = f.read().replace("runs/sample", os.path.relpath(directory, ROOT))
    config = yaml.safe_load(text)
    config["params"]["decay_params"]["warmup_steps"] = 100  # (a short run must still learn </s>)
    # An undertrained model loops ("beimmmm...") or stops after a piece or two; decoding capped at
    # 16 pieces gives a translation's cost (data/test.de: 13 pieces on average).
    config["params"]["maximum_decoding_length"] = 16
    config["train"].update(max_step=SAMPLE_STEPS, save_checkpoints_steps=SAMPLE_STEPS)
    config["eval"]["steps"] = 10 * SAMPLE_STEPS  # (no evaluation: the benchmark needs none)
    os.makedirs(directory, exist_ok=True)
    with open(config_path, "w") as f:
        yaml.safe_dump(config, f, sort_keys=False)
    if not os.path.isfile(os.path.join(directory, "checkpoints", f"ckpt-{SAMPLE_STEPS}.index")):
        subprocess.run([sys.executable, "run.py", "train", "--config", config_path], cwd=ROOT, check=True)
    return config_path


def base_model():
    """The config of OpenNMT-tf's TransformerBase (configs/transformer_base.yml: 6 layers of 512
    units, 8 heads, feed-forward 2048, SentencePiece 8000) under CACHE/base, its weights those of
    one training step (as initialized: NoamDecay's first step moves them by ~1e-7); made once.
    Untrained weights never choose </s> as a trained model does: decoding is forced to exactly
    BASE_LENGTH pieces (params.minimum_decoding_length = maximum_decoding_length), the mean length
    of data/test.de's reference translations in the model's own target pieces."""
    import yaml

    directory = os.path.join(CACHE, "base")
    config_path = os.path.join(directory, "config.yml")
    with open(os.path.join(ROOT, "configs", "transformer_base.yml")) as f:
        text = f.read().replace("runs/transformer_base", os.path.relpath(directory, ROOT))
    config = yaml.safe_load(text)
    # One small step, no gradient accumulation: what is measured is decoding, not training.
    config["train"].update(max_step=1, save_checkpoints_steps=1, batch_type="tokens", batch_size=1024,
                           effective_batch_size=1024)
    config["train"]["average_last_checkpoints"] = 0
    for key in ("eval_features_file", "eval_labels_file"):  # (no evaluation: 9 minutes of decoding)
        config["data"].pop(key)
    config.setdefault("params", {}).update(beam_width=4)
    os.makedirs(directory, exist_ok=True)
    if not os.path.isfile(os.path.join(directory, "checkpoints", "ckpt-1.index")):
        with open(config_path, "w") as f:
            yaml.safe_dump(config, f, sort_keys=False)
        subprocess.run([sys.executable, "run.py", "train", "--config", config_path], cwd=ROOT, check=True)
    length = reference_length(config["data"]["target_tokenization"]["model"])
    config["params"].update(maximum_decoding_length=length, minimum_decoding_length=length)
    with open(config_path, "w") as f:
        yaml.safe_dump(config, f, sort_keys=False)
    print(f"base model: decoding forced to {length} target pieces (data/test.de's mean)")
    return config_path


def reference_length(sentencepiece_model):
    """The mean number of pieces of data/test.de's lines under `sentencepiece_model`, rounded."""
    import sentencepiece

    processor = sentencepiece.SentencePieceProcessor(model_file=os.path.join(ROOT, sentencepiece_model))
    with open(os.path.join(ROOT, "data", "test.de"), encoding="utf-8") as f:
        lengths = [len(processor.encode(line.strip())) for line in f if line.strip()]
    return round(statistics.mean(lengths))


# -- the client --------------------------------------------------------------------------------

class Client:
    """One keep-alive HTTP/1.1 connection; `post` returns (status, body bytes)."""

    def __init__(self, port):
        self.port = port
        self.reader = self.writer = None

    async def post(self, path, body, timeout):
        return await asyncio.wait_for(self._post(path, body), timeout)

    async def _post(self, path, body):
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(HOST, self.port)
        self.writer.write(f"POST {path} HTTP/1.1\r\nHost: {HOST}\r\nContent-Type: application/json\r\n"
                          f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
        await self.writer.drain()
        head = await self.reader.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:] if line)}
        data = await self.reader.readexactly(int(headers.get("content-length", 0)))
        if headers.get("connection", "").lower() == "close":
            self.close()
        return status, data

    def close(self):
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None


async def load(port, sentences, clients, seconds, max_requests, timeout=30.0, stop_on_error=False):
    """Runs `clients` clients; -> {statuses: {code: n}, latencies (200s), errors, sent, wall}.
    `stop_on_error`: a client stops at its first connection error (a server shutting down)."""
    sent, statuses, latencies, errors = [0], {}, [], []
    deadline = time.monotonic() + seconds

    async def client(index):
        connection = Client(port)
        position = index * 7
        while time.monotonic() < deadline and sent[0] < max_requests:
            sent[0] += 1
            body = json.dumps([{"src": sentences[position % len(sentences)]}]).encode()
            position += 1
            start = time.monotonic()
            try:
                status, data = await connection.post("/translator/translate", body, timeout)
            except (OSError, asyncio.IncompleteReadError, asyncio.TimeoutError) as error:
                errors.append(type(error).__name__)
                connection.close()
                if stop_on_error:
                    break
                continue
            statuses[status] = statuses.get(status, 0) + 1
            if status == 200:
                latencies.append(time.monotonic() - start)
                assert json.loads(data)[0][0]["tgt"] is not None
            elif status == 503:
                await asyncio.sleep(0.05)  # (a client backs off a little)
        connection.close()

    start = time.monotonic()
    await asyncio.gather(*(client(i) for i in range(clients)))
    return {"statuses": statuses, "latencies": latencies, "errors": errors, "sent": sent[0],
            "wall": time.monotonic() - start}


def percentile(values, p):
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]


# -- the server --------------------------------------------------------------------------------

def free_port():
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return sock.getsockname()[1]


def export(config, backend, quantization=None):
    """The export of `config`'s newest checkpoint for `backend` (cached); `quantization`: the
    CTranslate2 weights' type (`run.py export --quantization`; None: float32)."""
    name = os.path.basename(os.path.dirname(os.path.abspath(config)))
    fmt = "ctranslate2" if backend == "ctranslate2" else "saved_model"
    quantization = quantization if fmt == "ctranslate2" else None
    directory = os.path.join(CACHE, f"{name}-{backend}" + (f"-{quantization}" if quantization else ""))
    if not os.path.isdir(directory):
        os.makedirs(CACHE, exist_ok=True)
        subprocess.run([sys.executable, "run.py", "export", "--config", config, "--output", directory,
                        "--format", fmt] + (["--quantization", quantization] if quantization else []),
                       cwd=ROOT, check=True)
    return directory


class Server:
    def __init__(self, config, backend, path, settings, log_path):
        self.port = free_port()
        self.serve_config = log_path + ".yml"
        with open(self.serve_config, "w") as f:
            json.dump({"serve": dict(settings, log_every=0, models=[
                {"id": 0, "backend": backend, "path": path}])}, f)  # (JSON is YAML)
        self.log_path = log_path
        self.log = open(log_path, "wb")
        self.process = subprocess.Popen(
            [sys.executable, "run.py", "serve", "--config", config, self.serve_config,
             "--port", str(self.port)], cwd=ROOT, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 300
        while True:
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the server did not start: see {log_path}")
            try:
                self.get("/translator/health")
                break
            except OSError:
                time.sleep(0.5)

    def get(self, path):
        import http.client

        connection = http.client.HTTPConnection(HOST, self.port, timeout=30)
        try:
            connection.request("GET", path)
            return connection.getresponse().read().decode()
        finally:
            connection.close()

    def counters(self):
        """{metric name with labels: value} of GET /metrics."""
        values = {}
        for line in self.get("/metrics").splitlines():
            if line and not line.startswith("#"):
                name, _, value = line.rpartition(" ")
                values[name] = float(value)
        return values

    def peak_rss_mb(self):
        with open(f"/proc/{self.process.pid}/status") as f:
            return int(re.search(r"VmHWM:\s+(\d+)", f.read()).group(1)) / 1024

    def cpu_seconds(self):
        """The server process's CPU time so far (user + system, every thread)."""
        with open(f"/proc/{self.process.pid}/stat") as f:
            fields = f.read().rpartition(")")[2].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # (utime, stime)

    def stop(self):
        self.process.send_signal(signal.SIGTERM)
        code = self.process.wait(300)
        self.log.close()
        return code

    def exit_counts(self):
        with open(self.log_path) as f:
            found = re.search(r"(\d+) translation requests received, (\d+) answered", f.read())
        return tuple(map(int, found.groups())) if found else None


def total(counters, prefix):
    return sum(v for k, v in counters.items() if k.startswith(prefix))


def measure(server, sentences, clients, seconds, max_requests):
    before, cpu_before = server.counters(), server.cpu_seconds()
    result = asyncio.run(load(server.port, sentences, clients, seconds, max_requests))
    after, cpu = server.counters(), server.cpu_seconds() - cpu_before
    delta = {name: total(after, name) - total(before, name) for name in (
        "opennmt_lite_serve_sentences_total", "opennmt_lite_serve_target_tokens_total",
        "opennmt_lite_serve_batch_size_sum", "opennmt_lite_serve_batch_size_count")}
    answered = result["statuses"].get(200, 0)
    wall = result["wall"]
    return {"clients": clients, "requests": result["sent"], "answered": answered,
            "statuses": result["statuses"], "errors": len(result["errors"]),
            "sentences_per_s": answered / wall,
            "target_tokens_per_s": delta["opennmt_lite_serve_target_tokens_total"] / wall,
            "p50_ms": 1000 * percentile(result["latencies"], 50),
            "p95_ms": 1000 * percentile(result["latencies"], 95),
            "p99_ms": 1000 * percentile(result["latencies"], 99),
            "mean_batch": (delta["opennmt_lite_serve_batch_size_sum"]
                           / max(1, delta["opennmt_lite_serve_batch_size_count"])),
            # (what the server's threads spent per answer: on a machine shared with other jobs,
            # a truer guide than sentences/s to what an idle CPU would do)
            "server_cpu_ms_per_sentence": 1000 * cpu / max(1, answered),
            "seconds": wall}


def overload(config, path, sentences, clients, seconds, log_dir):
    settings = dict(BATCHED, queue_limit=64, request_timeout=2)
    server = Server(config, "ctranslate2", path, settings, os.path.join(log_dir, "overload.log"))
    try:
        result = asyncio.run(load(server.port, sentences, clients, seconds, 10**9, timeout=30))
        counted = total(server.counters(), "opennmt_lite_serve_requests_total")
        rss = server.peak_rss_mb()
    finally:
        code = server.stop()
    statuses = result["statuses"]
    return {"clients": clients, "sent": result["sent"], "statuses": statuses,
            "client_errors": len(result["errors"]),
            "lost": result["sent"] - statuses.get(200, 0) - statuses.get(503, 0),
            "server_counted": int(counted), "peak_rss_mb": round(rss, 1), "exit": code,
            "p99_ms_of_200s": 1000 * percentile(result["latencies"], 99)}


def sigterm(config, path, sentences, log_dir):
    server = Server(config, "ctranslate2", path, dict(BATCHED, batch_timeout_ms=200),
                    os.path.join(log_dir, "sigterm.log"))

    async def run():
        task = asyncio.ensure_future(load(server.port, sentences, 32, 6, 10**9, stop_on_error=True))
        await asyncio.sleep(2)
        server.process.send_signal(signal.SIGTERM)
        return await task

    result = asyncio.run(run())
    code = server.process.wait(300)
    server.log.close()
    received, answered = server.exit_counts()
    responses = sum(result["statuses"].values())
    return {"exit": code, "server_received": received, "server_answered": answered,
            "client_responses": responses, "client_200": result["statuses"].get(200, 0),
            "client_not_accepted": len(result["errors"])}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=DEFAULT_CONFIG)
    models = parser.add_mutually_exclusive_group()
    models.add_argument("--sample-model", action="store_true",
                        help="configs/sample.yml's model, trained briefly here once, not --config")
    models.add_argument("--base-model", action="store_true",
                        help="OpenNMT-tf's TransformerBase, untrained, decoding forced to "
                             "data/test.de's mean length (made here once), not --config")
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 8, 32, 128])
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--max-requests", type=int, default=5000)
    parser.add_argument("--backends", nargs="+", default=["ctranslate2", "saved_model"],
                        choices=["ctranslate2", "saved_model"])
    parser.add_argument("--overload-clients", type=int, default=512)
    parser.add_argument("--ct2-quantization", choices=["int8", "int8_float32", "float32"],
                        help="the CTranslate2 export's weights (run.py export --quantization; "
                             "default float32), the same for both servers")
    parser.add_argument("--output")
    args = parser.parse_args()
    os.chdir(ROOT)
    if args.sample_model:
        args.config = sample_model()
    elif args.base_model:
        args.config = base_model()
    stamp = time.strftime("%Y%m%d-%H%M%S")
    log_dir = os.path.join(ROOT, "runs", "bench_results", f"serve-{stamp}")
    os.makedirs(log_dir, exist_ok=True)
    with open(os.path.join(ROOT, "data", "test.en"), encoding="utf-8") as f:
        sentences = [line.rstrip("\n") for line in f if line.strip()]
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores "
          f"(a busy machine slows every figure)")
    report = {"config": args.config, "ct2_quantization": args.ct2_quantization or "float32",
              "levels": {}, "load_average": os.getloadavg()}
    paths = {backend: export(args.config, backend, args.ct2_quantization) for backend in args.backends}
    for backend in args.backends:
        # Both servers loaded at once (the one waiting takes no CPU) and measured alternately at
        # each level: on a shared machine the pair then sees the same load.
        servers = {}
        try:
            for mode, settings in (("batched", BATCHED), ("one_at_a_time", ONE_AT_A_TIME)):
                servers[mode] = Server(args.config, backend, paths[backend], settings,
                                       os.path.join(log_dir, f"{backend}-{mode}.log"))
                asyncio.run(load(servers[mode].port, sentences, 4, 2, 200))  # (warm-up: caches)
            for clients in args.clients:
                for mode, server in servers.items():
                    row = measure(server, sentences, clients, args.seconds, args.max_requests)
                    row["load_average"] = os.getloadavg()[0]
                    report["levels"][f"{backend}/{mode}/{clients}"] = row
                    print(f"{backend:12} {mode:14} {clients:4} clients: {row['sentences_per_s']:8.1f} "
                          f"sent/s {row['target_tokens_per_s']:9.1f} tok/s  p50 {row['p50_ms']:7.1f} "
                          f"p95 {row['p95_ms']:7.1f} p99 {row['p99_ms']:7.1f} ms  batch "
                          f"{row['mean_batch']:5.1f}  server CPU {row['server_cpu_ms_per_sentence']:6.1f} "
                          f"ms/sent  {row['statuses']} errors {row['errors']}  "
                          f"load {row['load_average']:.1f}", flush=True)
        finally:
            for server in servers.values():
                server.stop()
        for clients in args.clients:
            batched = report["levels"].get(f"{backend}/batched/{clients}")
            single = report["levels"].get(f"{backend}/one_at_a_time/{clients}")
            if batched and single and single["sentences_per_s"]:
                ratio = batched["sentences_per_s"] / single["sentences_per_s"]
                report["levels"][f"{backend}/ratio/{clients}"] = ratio
                cpu_ratio = single["server_cpu_ms_per_sentence"] / batched["server_cpu_ms_per_sentence"]
                report["levels"][f"{backend}/cpu_ratio/{clients}"] = cpu_ratio
                print(f"{backend}: {clients} clients, batched / one at a time: {ratio:.2f}x "
                      f"(server CPU per sentence: {cpu_ratio:.2f}x less)")
    if "ctranslate2" in paths:
        report["overload"] = overload(args.config, paths["ctranslate2"], sentences,
                                      args.overload_clients, args.seconds, log_dir)
        print("overload:", json.dumps(report["overload"]))
        report["sigterm"] = sigterm(args.config, paths["ctranslate2"], sentences, log_dir)
        print("sigterm:", json.dumps(report["sigterm"]))
    output = args.output or os.path.join(ROOT, "runs", "bench_results", f"serve-{stamp}.json")
    with open(output, "w") as f:
        json.dump(report, f, indent=1)
    print(f"wrote {output}")


if __name__ == "__main__":
    sys.exit(main())
