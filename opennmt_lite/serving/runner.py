"""Loading the served models and running the HTTP server until SIGTERM.

Every model is loaded before the server listens: one that cannot be loaded stops it at start
with one line naming its serve.models entry (exit status 2). SIGTERM stops the server
gracefully: it stops accepting connections, answers every request it has received (within
serve.request_timeout), logs the count, and returns (exit status 0). A first Ctrl-C does the
same, then ends as every command ends on Ctrl-C (status 130).
"""

import logging
import signal

from opennmt_lite.serving.app import Server
from opennmt_lite.serving.backends import load_model
from opennmt_lite.serving.metrics import Metrics

logger = logging.getLogger("opennmt_lite")


def model_entries(config):
    """serve.models, or (none listed) this config's newest checkpoint as model 0."""
    if config.serve.models is None:
        return [{"id": 0, "config": None, "backend": "checkpoint", "path": None}]
    return [dict(entry) for entry in config.serve.models]


def load_models(config):
    """{id: backends.Model}, in serve.models' order. An entry without `config` uses `config`."""
    from opennmt_lite.config import load_config

    models, loaded = {}, {}
    for entry in model_entries(config):
        entry_config = config
        if entry["config"]:
            if entry["config"] not in loaded:
                loaded[entry["config"]] = load_config([entry["config"]])
            entry_config = loaded[entry["config"]]
        if entry_config.model.is_language_model:
            from opennmt_lite.config import ConfigError

            raise ConfigError(f"serve: model {entry['id']} is a language model "
                              "(model.type: language_model): run.py serve translates; serve its "
                              "SavedModel or CTranslate2 export (run.py export) instead")
        logger.info("loading model %d (%s)", entry["id"], entry["backend"])
        model = models[entry["id"]] = load_model(entry, entry_config, config.serve.batch_workers)
        # One translation now (the checkpoint's decoding function is traced on its first call,
        # seconds), so that the first client does not wait for it.
        model.translate(model.prepare(["warm up"]), model.options())
    return models


def serve(config, host=None, port=None):
    """Serves the models of `config` (a loaded Config) until SIGTERM; returns then."""
    import uvicorn

    settings = config.serve
    host = settings.host if host is None else host
    port = settings.port if port is None else port
    sock = listening_socket(host, port)  # (first: a port in use costs no model loading)
    port = sock.getsockname()[1]
    try:
        models = load_models(config)
    except BaseException:
        sock.close()
        raise
    metrics = Metrics()
    server = Server(models, settings, metrics)
    uvicorn_config = uvicorn.Config(
        server.app(), host=host, port=port, log_level="warning", access_log=False, log_config=None,
        lifespan="on",
        # (the requests under way may take this long to be answered after SIGTERM)
        timeout_graceful_shutdown=int(settings.request_timeout) + 5,
        # (bounds the open connections and requests under way: past it uvicorn answers 503)
        limit_concurrency=settings.max_connections,
        timeout_keep_alive=5)
    http = uvicorn.Server(uvicorn_config)
    # uvicorn turns SIGTERM into a graceful stop, then raises it again for the handler that was
    # there before: a graceful stop is this command's success, so that handler does nothing.
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: None)
    try:
        logger.info("serving %d model(s) (%s) on http://%s:%d%s", len(models),
                    ", ".join(f"{i}: {m.backend}" for i, m in models.items()), host, port,
                    settings.url_root)
        http.run(sockets=[sock])
    finally:
        signal.signal(signal.SIGTERM, previous)
        sock.close()


def listening_socket(host, port):
    """A socket bound to host:port (before uvicorn, which exits the process when it cannot)."""
    import socket

    from opennmt_lite.errors import ArgumentError

    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        family, kind, protocol, _, address = infos[0]
        sock = socket.socket(family, kind, protocol)
    except (OSError, UnicodeError, ValueError) as error:
        raise ArgumentError(f"--host {host[:80]}: not an address to listen on ({error})") from None
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(2048)
    except OSError as error:
        sock.close()
        raise ArgumentError(f"cannot listen on {host[:80]}:{port}: {error.strerror or error}") from None
    sock.set_inheritable(True)
    return sock
