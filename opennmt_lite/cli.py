"""opennmt-lite command line: build-vocab, train, infer, export, evaluate, inspect, serve.

Each command is one module of `opennmt_lite/commands/` (see README.md). This module parses the
arguments, loads the YAML config(s) (OpenNMT-tf's keys plus a `model` section) and dispatches.
Installed, it is the `opennmt-lite` command (`run()`); `run.py` and `python -m opennmt_lite`
call the same `main`.
"""

import argparse
import importlib
import logging
import os
import signal
import sys
import threading
import traceback

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# TensorFlow's pooling (BFC) allocator for CPU tensors. Where TensorFlow leaves oneDNN off (CPUs
# without AVX512_VNNI/BF16 or AMX), TF 2.21's default CPU allocator hands every fresh tensor new
# pages, which the first write faults in: a training step ran 1.45x faster with this set
# (TF_ENABLE_ONEDNN_OPTS=0, bench/step_time.py), serving 1.2x; with oneDNN on, no change.
# Read once, at TensorFlow's first allocation: set before TensorFlow starts. A value given wins.
os.environ.setdefault("TF_CPU_ALLOCATOR_USE_BFC", "true")

from opennmt_lite import keras_backend  # noqa: E402
from opennmt_lite.commands import COMMANDS  # noqa: E402 (after the TensorFlow log setting)
from opennmt_lite.errors import EXIT_BUG, EXIT_USER_ERROR, Interrupted, UserError  # noqa: E402

PROG = "opennmt-lite"
_tensorflow_imported = False


def import_tensorflow_quietly():
    """The full TensorFlow wheel (requirements.txt: tensorflow-text needs it) probes for CUDA when
    imported and on its first device query, and on a machine without an NVIDIA driver writes
    5 lines about it to stderr below TF_CPP_MIN_LOG_LEVEL's reach. Both happen here, with stderr
    sent to /dev/null, unless a driver is present or TF_CPP_MIN_LOG_LEVEL is 0. A failing import
    still raises (its error is printed once stderr is back). Once per process; nothing on Keras'
    JAX backend, or where TensorFlow is not installed (`main` then reports the backend)."""
    global _tensorflow_imported
    if _tensorflow_imported:
        return
    if keras_backend.selected() != "tensorflow" or not keras_backend.tensorflow_installed():
        return
    _tensorflow_imported = True
    if os.path.exists("/proc/driver/nvidia") or os.environ["TF_CPP_MIN_LOG_LEVEL"] == "0":
        _import_tensorflow()
        return
    sys.stderr.flush()
    saved, devnull = os.dup(2), os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    try:
        tensorflow = _import_tensorflow()
        tensorflow.config.list_physical_devices("GPU")
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


# Modules that `import tensorflow` imports eagerly when they are installed, each behind an
# ImportError fallback, for code a command never runs: Keras 3 imports IPython (to detect a
# notebook), matplotlib.pyplot (its image gallery) and PIL (its image utilities); TensorFlow's
# legacy tf.keras (imported by its feature columns) imports h5py and scipy.sparse.
_UNUSED_IMPORTS = ("IPython", "matplotlib", "PIL", "h5py", "scipy")


def _import_tensorflow():
    """`import tensorflow` (which imports Keras) with `_UNUSED_IMPORTS` hidden, so that those
    libraries take their fallbacks: 73 MB less resident memory in every command (644 -> 571 MB
    after the import, measured with TensorFlow 2.21, Keras 3.15, IPython 8.12, matplotlib 3.11).
    They are importable again afterwards (`inspect` draws with matplotlib; Keras imports h5py
    when it saves an .h5 file). -> the module."""
    # (JAX imports scipy: on Keras' JAX backend nothing is hidden)
    jax = os.environ.get("KERAS_BACKEND", "tensorflow") == "jax"
    hidden = [name for name in _UNUSED_IMPORTS if name not in sys.modules and not jax]
    for name in hidden:
        sys.modules[name] = None  # (None in sys.modules: `import name` raises ImportError)
    try:
        import tensorflow
    finally:
        for name in hidden:
            if name in sys.modules and sys.modules[name] is None:
                del sys.modules[name]
    return tensorflow


def command_module(name):
    return importlib.import_module(f"opennmt_lite.commands.{COMMANDS[name]}")


def parse_args(argv, prog=PROG):
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name in COMMANDS:
        module = command_module(name)
        p = sub.add_parser(name, help=module.HELP)
        p.add_argument("--config", nargs="+", required=name != "evaluate",
                       help="YAML config file(s), merged left to right")
        p.add_argument("--log_level", default="INFO", type=str.upper,
                       choices=("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"))
        module.add_arguments(p)
    return parser.parse_args(argv)


def _terminate(signum, frame):
    # SIGTERM outside training (where the trainer handles it): unwind like Ctrl-C, so that
    # temporary files are removed, and exit with status 143.
    raise Interrupted(signum, "terminated (SIGTERM)")


def guarded(action, what):
    """Runs `action()` the way every console command does; returns the exit status: 0, 2 for a
    user error (one `error:` line on stderr), 1 for a bug (its traceback, then a line naming
    `what`, e.g. "run.py train"), 128 + N after signal N (130 SIGINT, 143 SIGTERM)."""
    in_main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _terminate) if in_main_thread else None
    try:
        action()
    except UserError as error:  # raised where the program knows what the user did wrong
        print(f"error: {error}", file=sys.stderr)
        return EXIT_USER_ERROR
    except Interrupted as stop:
        print(f"{stop}", file=sys.stderr)
        return stop.exit_code
    except KeyboardInterrupt:
        print("interrupted (SIGINT)", file=sys.stderr)
        return 128 + signal.SIGINT
    except Exception:  # noqa: BLE001 (everything else is a bug, shown in full)
        traceback.print_exc()
        print(f"this is a bug in opennmt-lite ({what}), not a problem with your options, "
              "configuration or data: please report it with the traceback above", file=sys.stderr)
        return EXIT_BUG
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    return 0


def before_tensorflow(argv):
    """What `train` must settle before TensorFlow starts, which reads its flags once: XLA's cache
    directory with train.jit_compile (`cpu.use_xla_cache`), and the CPU kernels of float32
    training (`cpu.choose_training_kernels`). The config files (and no other option) are read here
    for that alone, without TensorFlow; a config that fails to load is left to the command, which
    reports it."""
    if not argv or argv[0] != "train" or "--config" not in argv or "--num_devices" in argv:
        return
    files = []
    for item in argv[argv.index("--config") + 1:]:
        if item.startswith("-"):
            break
        files.append(item)
    from opennmt_lite import cpu
    from opennmt_lite.config import load_config

    try:
        config = load_config(files, {})
    except Exception:  # (reported by the command)
        return
    if config.train.num_devices != 1:
        return
    if config.train.jit_compile:
        cpu.use_xla_cache(config.model_dir)
    cpu.choose_training_kernels(config.train.mixed_precision, config.train.sub_batches)


def main(argv=None, prog=PROG):
    """Runs one command; returns the exit status (see `guarded`). `prog` is the name the help
    and the messages give the program (`run.py` when run so)."""
    try:
        backend = keras_backend.check()  # (before Keras is imported: an unknown one is one line)
    except UserError as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_USER_ERROR
    if backend == "tensorflow":
        if "tensorflow" not in sys.modules:  # (run.py has done it, and started TensorFlow, already)
            before_tensorflow(sys.argv[1:] if argv is None else argv)
        import_tensorflow_quietly()
    try:
        args = parse_args(sys.argv[1:] if argv is None else argv, prog)
    except SystemExit as exit:  # argparse: --help (0), or a bad option, already printed (2)
        return exit.code
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(message)s",
                        datefmt="%H:%M:%S")
    logging.getLogger("opennmt_lite").info("Keras backend: %s", keras_backend.describe())
    module = command_module(args.command)

    def run_command():
        config = None
        if args.config:
            from opennmt_lite.config import load_config

            overrides = getattr(module, "config_overrides", lambda args: {})(args)
            config = load_config(args.config, overrides)
        module.run(args, config)

    return guarded(run_command, f"{prog} {args.command}")


def exit_with(status):
    """Exits the process with `status`, ignoring a late Ctrl-C (no KeyboardInterrupt traceback
    while the interpreter shuts down)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    sys.exit(status)


def run(prog=PROG):
    """The `opennmt-lite` console command."""
    exit_with(main(prog=prog))
