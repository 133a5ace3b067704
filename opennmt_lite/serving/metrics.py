"""What the server counts, for GET /metrics (Prometheus' text format, through prometheus_client)
and for its log line every serve.log_every seconds.

Counters: requests (by model and HTTP status), sentences, source and target tokens (target:
the best hypothesis, counted by the target tokenizer), batches. Gauges: sentences waiting for a
batch, sentences being translated. Histograms: sentences per batch, request latency (seconds,
from the request's arrival to its answer). Percentiles (p50, p95, p99) of the latencies of the
last LATENCY_WINDOW answered requests, a gauge updated when read.
"""

import collections
import logging
import threading

import numpy as np
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

logger = logging.getLogger("opennmt_lite")
LATENCY_WINDOW = 2000
PERCENTILES = (50, 95, 99)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)


class Metrics:
    def __init__(self):
        self.registry = registry = CollectorRegistry()
        prefix = "opennmt_lite_serve"
        self.requests = Counter(f"{prefix}_requests", "HTTP requests answered, by model and status",
                                ["model", "code"], registry=registry)
        self.sentences = Counter(f"{prefix}_sentences", "sentences translated", ["model"], registry=registry)
        self.source_tokens = Counter(f"{prefix}_source_tokens", "source tokens translated",
                                     ["model"], registry=registry)
        self.target_tokens = Counter(f"{prefix}_target_tokens", "target tokens of the best "
                                     "hypotheses", ["model"], registry=registry)
        self.queue_depth = Gauge(f"{prefix}_queue_depth", "sentences waiting for a batch",
                                 ["model"], registry=registry)
        self.in_flight = Gauge(f"{prefix}_sentences_in_flight", "sentences being translated",
                               ["model"], registry=registry)
        self.batch_size = Histogram(f"{prefix}_batch_size", "sentences per batch", ["model"],
                                    buckets=BATCH_BUCKETS, registry=registry)
        self.latency = Histogram(f"{prefix}_request_latency_seconds", "time from a translation "
                                 "request's arrival to its answer", ["model"],
                                 buckets=LATENCY_BUCKETS, registry=registry)
        self.latency_percentile = Gauge(f"{prefix}_request_latency_percentile_seconds",
                                        f"latency percentiles of the last {LATENCY_WINDOW} "
                                        "translation requests", ["quantile"], registry=registry)
        self._recent = collections.deque(maxlen=LATENCY_WINDOW)
        self._lock = threading.Lock()
        self.totals = collections.Counter()  # (for the log: requests, sentences, tokens, batches)
        self._logged = collections.Counter()

    def answered(self, model, code, latency=None):
        self.requests.labels(str(model), str(code)).inc()
        self.totals["requests"] += 1
        self.totals["translated" if code == 200 else "refused"] += 1
        if latency is not None:
            self.latency.labels(str(model)).observe(latency)
            with self._lock:
                self._recent.append(latency)

    def batch(self, model, sentences, source_tokens, target_tokens):
        label = str(model)
        self.batch_size.labels(label).observe(sentences)
        self.sentences.labels(label).inc(sentences)
        self.source_tokens.labels(label).inc(source_tokens)
        self.target_tokens.labels(label).inc(target_tokens)
        self.totals.update(batches=1, sentences=sentences, source_tokens=source_tokens,
                           target_tokens=target_tokens)

    def percentiles(self):
        """{percentile: seconds} of the recent latencies (empty before any)."""
        with self._lock:
            recent = np.array(self._recent)
        if not len(recent):
            return {}
        return {p: float(np.percentile(recent, p)) for p in PERCENTILES}

    def exposition(self):
        """GET /metrics' body (bytes)."""
        for p, value in self.percentiles().items():
            self.latency_percentile.labels(f"{p / 100:g}").set(value)
        return generate_latest(self.registry)

    def log_line(self, queue_depth):
        """The periodic log line (None when nothing happened since the last one)."""
        totals, since = dict(self.totals), self.totals - self._logged
        if not since["requests"] and not queue_depth:
            return None
        self._logged = collections.Counter(totals)
        batches = since["batches"]
        mean = since["sentences"] / batches if batches else 0.0
        latency = " ".join(f"p{p} {v * 1000:.1f} ms" for p, v in self.percentiles().items())
        return (f"serve: {since['requests']} requests ({since['refused']} refused), "
                f"{since['sentences']} sentences, {since['source_tokens']} source / "
                f"{since['target_tokens']} target tokens, {batches} batches (mean {mean:.1f} "
                f"sentences), queue {queue_depth}; latency {latency or '-'}; since start "
                f"{totals.get('requests', 0)} requests")
