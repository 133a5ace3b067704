"""`run.py serve`: a translation server with OpenNMT-py's REST API (see opennmt_lite.serving)."""

from opennmt_lite.commands import int_at_least

HELP = "serve translations over HTTP (OpenNMT-py's REST API)"


def port_number(text):
    value = int_at_least(0)(text)
    if value > 65535:
        import argparse

        raise argparse.ArgumentTypeError(f"must be at most 65535, got {value}")
    return value


def add_arguments(parser):
    parser.add_argument("--host", help="address to listen on (default serve.host, 127.0.0.1)")
    parser.add_argument("--port", type=port_number, help="port (default serve.port, 5000; 0: any free port)")


def run(args, config):
    import importlib.util

    from opennmt_lite.config import ConfigError
    from opennmt_lite.errors import UserError

    missing = [name for name in ("starlette", "uvicorn", "prometheus_client")
               if importlib.util.find_spec(name) is None]
    if missing:  # (requirements-jax.txt leaves the server out)
        raise UserError(f"serve needs {', '.join(missing)}, not installed: install "
                        "requirements.txt (requirements-jax.txt leaves the server out)")
    from opennmt_lite.serving.runner import serve

    if config.model.is_encoder_model:  # (the server's API is OpenNMT-py's translation API)
        raise ConfigError(f"serve: model.type {config.model.type} is not served (the server "
                          f"translates); export --format saved_model serves it with TensorFlow "
                          f"Serving")

    serve(config, args.host, args.port)
