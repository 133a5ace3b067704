import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# A JAX subprocess given a persistent compilation cache by its test (JAX_COMPILATION_CACHE_DIR:
# tests/test_jax_training.py's killed and resumed runs) keeps every program there, not only
# those that took a second to compile (JAX's default): the runs after the first load the
# hundreds of small ones too (2 × 2 runs: the test took 40-46 s instead of 60-80 s). The same
# executables, loaded instead of compiled: the same numbers. (run.py's own cache in model_dir
# sets its threshold itself.)
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")

import pathlib

import opennmt_lite  # noqa: F401,I001 (before keras: it imports pyonmttok before TensorFlow)
import keras
import pytest

FIXTURES = pathlib.Path(__file__).parent / "fixtures"
ONMT_FIXTURE = FIXTURES / "onmt_tf_relative"


# Seconds the slowest test files take in `.ci/run` (2 workers, 2 cores; from `--durations` and
# per-file runs, 2026-11-29, rounded). With `--dist loadfile`, xdist queues files by their number
# of tests, most first, so these (few tests, each a subprocess or a long module fixture) would
# start last and one worker would finish alone, minutes after the other. Queued longest first
# instead (then the others, most tests first, as before), the short files fill in at the end.
# Only the order changes: an unlisted or mis-estimated file costs balance, never correctness.
SLOW_FILES = {
    "test_jax_install.py": 240,
    "test_hostile_battery.py": 180,
    "test_jax_layers.py": 150,
    "test_jax_training.py": 150,
    "test_write_faults.py": 130,
    "test_tflite.py": 120,
    "test_jax_commands.py": 90,
    "test_jax_training_options.py": 70,
    "test_jax_devices.py": 60,
    "test_interruption.py": 90,
    "test_package.py": 75,
    "test_jax_decoding.py": 60,
    "test_bench_gpu.py": 55,
    "test_saved_model_text.py": 40,
}


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """`--dist loadfile` with SLOW_FILES queued first, longest first (xdist's own order
    otherwise)."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class SlowFilesFirst(LoadFileScheduling):
        ordered = False

        def _assign_work_unit(self, node):
            # (the queue is complete at the first assignment: reordered once, before it)
            if not self.ordered:
                self.ordered = True
                queue = sorted(self.workqueue.items(),
                               key=lambda item: -SLOW_FILES.get(item[0].rsplit("/", 1)[-1], 0))
                self.workqueue.clear()
                self.workqueue.update(queue)
            super()._assign_work_unit(node)

    return SlowFilesFirst(config, log)


@pytest.fixture(autouse=True)
def _float32_policy_and_seed():
    """Every test starts in float32 with fixed seeds, and leaves the global policy as it found it."""
    keras.config.set_dtype_policy("float32")
    keras.utils.set_random_seed(1234)
    yield
    keras.config.set_dtype_policy("float32")
