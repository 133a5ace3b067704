"""`run.py serve`: a translation server with OpenNMT-py's REST API (app.py), batching across
requests (batcher.py), the checkpoint, CTranslate2 and SavedModel backends (backends.py) and
Prometheus metrics (metrics.py). `serve(...)` loads the models, then serves until SIGTERM or
Ctrl-C."""
