"""The HTTP server: OpenNMT-py's REST API on Starlette, run by uvicorn.

Starlette on uvicorn: a small, maintained ASGI stack (Starlette is what FastAPI is built on;
uvicorn the ASGI server both document), which gives what the server needs and no more: routes,
streamed request bodies (to refuse a large one before reading it all), one asyncio loop on which
the batchers gather sentences from concurrent requests, and a graceful shutdown on SIGTERM
(stop accepting, let the requests under way finish). FastAPI's request models would only
duplicate the checks below, whose messages must name the item and the key.

API (under serve.url_root, default /translator; OpenNMT-py's `onmt/bin/server.py`):
  POST /translate  [{"src": "text", "id": 0}, ...] -> [[{"src", "tgt", "n_best", "pred_score"
                   [, "align"]} per source] per hypothesis rank (n_best lists)]. Optional keys of
                   each item (all items alike): "beam_size", "n_best", "report_align" (true: each
                   result has "align": [its hard alignment, `source-target` pairs]).
  GET  /models     [{"model_id", "backend", "opt", "models", "loaded", "timeout"}]
  GET  /health     {"status": "ok"}
  GET  /metrics    (at the root) Prometheus' text format (serving/metrics.py)
Errors: {"status": "error", "error": "..."} with 400 (malformed), 404 (unknown model or path),
405, 413 (too large), 503 (queue full or request timeout, with Retry-After), 500 (a bug).
A source's leading and trailing whitespace are put back around its translation, as OpenNMT-py
does; a source with no token is answered "" with score 0 without the model (OpenNMT-py's rule).
"""

import asyncio
import contextlib
import json
import logging
import math
import time

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from opennmt_lite.inference.translate import format_alignment
from opennmt_lite.serving.backends import OptionError
from opennmt_lite.serving.batcher import Batcher, Job, Overloaded

logger = logging.getLogger("opennmt_lite")
ITEM_KEYS = ("src", "id", "beam_size", "n_best", "report_align")
# Requests of at most this many characters are tokenized in the event loop (a few tens of
# microseconds: less than a hand-over to a thread).
INLINE_CHARACTERS = 2000
RETRY_AFTER = 1  # seconds


class RequestError(Exception):
    """A request refused with `status` and a one-line message."""

    def __init__(self, status, message, retry_after=None):
        super().__init__(message)
        self.status = status
        self.retry_after = retry_after


def error_response(status, message, retry_after=None):
    headers = {"Retry-After": str(retry_after)} if retry_after is not None else None
    return JSONResponse({"status": "error", "error": message}, status_code=status, headers=headers)


class Server:
    """The models (id -> backends.Model, the first the default), their batchers and the metrics."""

    def __init__(self, models, settings, metrics, workers=None):
        self.models = models
        self.default_id = next(iter(models))
        self.settings = settings
        self.metrics = metrics
        self.batchers = {i: Batcher(m, settings, metrics, workers) for i, m in models.items()}
        self.received = 0  # (requests to /translate; logged at exit against those answered)
        self.answered = 0

    # -- the request ---------------------------------------------------------------------------

    async def body(self, request):
        limit = self.settings.max_request_bytes
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            raise RequestError(413, f"request body of {declared} bytes, more than "
                               f"serve.max_request_bytes={limit}")
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise RequestError(413, f"request body of more than serve.max_request_bytes={limit} bytes")
            chunks.append(chunk)
        return b"".join(chunks)

    def parse(self, raw):
        """(model, sentences, {beam_size, n_best, report_align}) of a request body."""
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as error:
            raise RequestError(400, f"request body is not UTF-8 (byte {error.start})") from None
        try:
            items = json.loads(text, parse_constant=_refuse_constant)
        except (ValueError, RecursionError) as error:
            raise RequestError(400, f"request body is not JSON: {str(error)[:200]}") from None
        if not isinstance(items, list):
            raise RequestError(400, 'expected a JSON list of {"src": "...", "id": N} objects, got '
                               f"{type(items).__name__ if not isinstance(items, dict) else 'an object'}")
        if not items:
            raise RequestError(400, "the request holds no sentence (an empty list)")
        if len(items) > self.settings.max_request_sentences:
            raise RequestError(413, f"{len(items)} sentences in one request, more than "
                               f"serve.max_request_sentences={self.settings.max_request_sentences}")
        first = None
        for index, item in enumerate(items):
            where = f"item {index}"
            if not isinstance(item, dict):
                raise RequestError(400, f'{where}: expected an object {{"src": "...", "id": N}}, '
                                   f"got {json.dumps(item)[:60]}")
            unknown = [k for k in item if k not in ITEM_KEYS]
            if unknown:
                raise RequestError(400, f"{where}: unknown key {unknown[0][:60]!r} (known: "
                                   f"{', '.join(ITEM_KEYS)})")
            if "src" not in item:
                raise RequestError(400, f'{where}: no "src"')
            if not isinstance(item["src"], str):
                raise RequestError(400, f'{where}: "src" must be a string, got '
                                   f"{json.dumps(item['src'])[:60]}")
            if len(item["src"]) > self.settings.max_sentence_characters:
                raise RequestError(413, f'{where}: "src" has {len(item["src"])} characters, more '
                                   f"than serve.max_sentence_characters="
                                   f"{self.settings.max_sentence_characters}")
            try:
                item["src"].encode("utf-8")
            except UnicodeEncodeError:  # (a \\uDXXX escape: JSON, but not text)
                raise RequestError(400, f'{where}: "src" holds a lone surrogate (not Unicode '
                                   "text)") from None
            settings = {"id": item.get("id", self.default_id)}
            for name in ("id", "beam_size", "n_best"):
                value = item.get(name, settings.get(name))
                minimum = 0 if name == "id" else 1
                if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                          or value < minimum or value > 2**31 - 1):
                    raise RequestError(400, f'{where}: "{name}" must be an integer of at least '
                                       f"{minimum}, got {json.dumps(value)[:60]}")
                settings[name] = value
            align = item.get("report_align", False)
            if not isinstance(align, bool):
                raise RequestError(400, f'{where}: "report_align" must be true or false, got '
                                   f"{json.dumps(align)[:60]}")
            settings["report_align"] = align
            if first is None:
                first = settings
            elif settings != first:
                name = next(k for k in first if first[k] != settings[k])
                raise RequestError(400, f'{where}: "{name}" differs from item 0\'s: one request '
                                   "is translated by one model with one set of options")
        model = self.models.get(first["id"])
        if model is None:
            raise RequestError(404, f"no model with id {first['id']} (GET {self.settings.url_root}"
                               f"/models lists them)")
        return model, [item["src"] for item in items], first

    async def translate(self, request):
        arrival = time.monotonic()
        self.received += 1
        model_label = "none"
        try:
            model, sentences, settings = self.parse(await self.body(request))
            model_label = model.model_id
            try:
                options = model.options(settings["beam_size"], settings["n_best"],
                                        self.settings.max_beam_size)
            except (OptionError, ValueError) as error:
                raise RequestError(400, str(error)) from None
            alignments = "hard" if settings["report_align"] else None
            results = await self._translated(model, sentences, options, alignments)
        except RequestError as error:
            self.metrics.answered(model_label, error.status)
            self.answered += 1
            return error_response(error.status, str(error), error.retry_after)
        except ClientDisconnect:
            self.metrics.answered(model_label, 499)
            self.answered += 1
            return Response(status_code=400)
        except Exception as error:  # noqa: BLE001 (a failed batch: logged where it failed)
            self.metrics.answered(model_label, 500)
            self.answered += 1
            lines = str(error).strip().splitlines() or [""]
            return error_response(500, f"internal error: {type(error).__name__}: {lines[0][:200]} "
                                  "(see the server's log)")
        body = _response(sentences, results, options.n_best, alignments)
        self.metrics.answered(model_label, 200, time.monotonic() - arrival)
        self.answered += 1
        return JSONResponse(body)

    async def _translated(self, model, sentences, options, alignments):
        loop = asyncio.get_running_loop()
        stripped = [s.strip() for s in sentences]
        if sum(map(len, stripped)) <= INLINE_CHARACTERS:
            sources = model.prepare(stripped)
        else:  # (a large request is tokenized on a thread, not in the loop's time)
            sources = await loop.run_in_executor(None, model.prepare, stripped)
        batcher = self.batchers[model.model_id]
        job = Job(sources, options, alignments, loop)
        try:
            batcher.submit(job)
        except Overloaded as error:
            raise RequestError(503, f"{error}; retry later", retry_after=self.retry_after()) from None
        timeout = self.settings.request_timeout
        try:
            return await asyncio.wait_for(asyncio.shield(job.done), timeout)
        except asyncio.TimeoutError:
            batcher.withdraw(job)
            raise RequestError(503, f"not translated within serve.request_timeout={timeout:g} s "
                               "(the server is overloaded); retry later",
                               retry_after=self.retry_after()) from None

    def retry_after(self):
        """Seconds a refused client is told to wait (Retry-After): the HTTP header's smallest
        value; a batch takes milliseconds to seconds, and the queue drains batch by batch."""
        return RETRY_AFTER

    # -- the other routes ----------------------------------------------------------------------

    async def list_models(self, request):
        return JSONResponse([model.describe() for model in self.models.values()])

    async def health(self, request):
        return JSONResponse({"status": "ok"})

    async def metrics_page(self, request):
        for model_id, batcher in self.batchers.items():
            self.metrics.queue_depth.labels(str(model_id)).set(batcher.depth)
        return Response(self.metrics.exposition(),
                        media_type="text/plain; version=0.0.4; charset=utf-8")

    @property
    def queue_depth(self):
        return sum(b.depth for b in self.batchers.values())

    def app(self):
        root = self.settings.url_root
        routes = [Route(f"{root}/translate", self.translate, methods=["POST"]),
                  Route(f"{root}/models", self.list_models, methods=["GET"]),
                  Route(f"{root}/health", self.health, methods=["GET"]),
                  Route("/metrics", self.metrics_page, methods=["GET"])]

        async def http_error(request, error):
            return error_response(error.status_code, f"{error.detail}: {request.method} {request.url.path}")

        async def bug(request, error):
            logger.exception("a request failed", exc_info=error)
            return error_response(500, f"internal error: {type(error).__name__} (see the server's log)")

        @contextlib.asynccontextmanager
        async def lifespan(app):
            for batcher in self.batchers.values():
                batcher.start()
            logging_task = asyncio.get_running_loop().create_task(self._log_periodically())
            yield
            logging_task.cancel()
            for batcher in self.batchers.values():
                await batcher.stop()
            logger.info("serve: stopped; %d translation requests received, %d answered",
                        self.received, self.answered)
            line = self.metrics.log_line(self.queue_depth)
            if line:
                logger.info(line)

        return Starlette(routes=routes, lifespan=lifespan,
                         exception_handlers={HTTPException: http_error, Exception: bug})

    async def _log_periodically(self):
        every = self.settings.log_every
        if not every:
            return
        while True:
            await asyncio.sleep(every)
            line = self.metrics.log_line(self.queue_depth)
            if line:
                logger.info(line)


def _refuse_constant(name):
    raise ValueError(f"{name} is not JSON")


def _response(sentences, results, n_best, alignments):
    """OpenNMT-py's answer: n_best lists (rank k: each source's k-th hypothesis)."""
    out = [[] for _ in range(n_best)]
    for source, hypotheses in zip(sentences, results):
        stripped = source.strip()
        head = source[:len(source) - len(source.lstrip())]
        tail = source[len(source.rstrip()):] if stripped else ""
        for rank, (text, score, *alignment) in enumerate(hypotheses[:n_best]):
            # (-inf: a sentence that did not fit in memory, as infer reports it; JSON has null)
            answer = {"src": source, "tgt": f"{head}{text}{tail}", "n_best": n_best,
                      "pred_score": score if math.isfinite(score) else None}
            if alignments:
                answer["align"] = [format_alignment(alignment[0], "hard")]
            out[rank].append(answer)
    return out
