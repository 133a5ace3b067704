"""The CPU's instruction sets, read once, and how bfloat16 matrix products are computed on it.

TensorFlow 2.21's bfloat16 MatMul on a CPU without AVX512_BF16 or AMX (measured on an AVX2 AMD
EPYC, with and without oneDNN) truncates its float32 accumulations to bfloat16 instead of rounding
them to nearest: products come out 0.28 % too small on average, which biases mixed_bfloat16
gradients toward zero, and it is slower than a float32 MatMul between two casts. On such a CPU the
layers multiply bfloat16 operands in float32 and round the result once (`FLOAT32`, see
`opennmt_lite.layers.fast_paths.matmul`); CPUs with native bfloat16 arithmetic, and GPUs, keep the
bfloat16 op (`NATIVE`). The environment variable OPENNMT_LITE_BF16_MATMUL=native|float32 forces
either path. `opennmt_lite.layers.fast_paths.configure` calls `bfloat16_matmul_path` once, at
start-up, and the layers consult what it stored, not the environment.

It also chooses `train.sub_batches` when the config leaves it unset (`default_sub_batches`): two
single-threaded passes side by side on a CPU of two or more cores, which beat one pass over both
cores on every 2-core host measured (AVX2 EPYC: +14 %; AVX-512 EPYC with the pooling allocator:
+12 % float32, +18 % mixed_bfloat16; docs/performance.md), and the kernels of float32 training
(`choose_training_kernels`): TensorFlow's own (Eigen) kernels rather than oneDNN's, which run
those two passes as fast in 0.25 GB less memory.
"""

import dataclasses
import functools
import logging
import os
import sys

from opennmt_lite import keras_backend
from opennmt_lite.errors import EnvironmentVariableError

logger = logging.getLogger("opennmt_lite")

BF16_MATMUL_ENV = "OPENNMT_LITE_BF16_MATMUL"
NATIVE = "native"
FLOAT32 = "float32"
CPUINFO = "/proc/cpuinfo"


@dataclasses.dataclass(frozen=True)
class CpuFeatures:
    """The instruction-set flags the kernel reports (/proc/cpuinfo names; empty when unknown)."""

    flags: frozenset = frozenset()

    @property
    def avx2(self):
        return "avx2" in self.flags

    @property
    def fma(self):
        return "fma" in self.flags

    @property
    def avx512(self):
        """The AVX-512 extensions, sorted (avx512_bf16, ..., avx512f); [] without AVX-512."""
        return sorted(flag for flag in self.flags if flag.startswith("avx512"))

    @property
    def avx512_bf16(self):
        return "avx512_bf16" in self.flags

    @property
    def amx_bf16(self):
        return "amx_bf16" in self.flags and "amx_tile" in self.flags

    @property
    def native_bfloat16(self):
        """Whether the CPU multiplies bfloat16 in hardware (with round-to-nearest results)."""
        return self.avx512_bf16 or self.amx_bf16

    def describe(self):
        """A short name of the ISA for logs, e.g. "AVX2, FMA (no AVX-512, no AVX512_BF16/AMX)"."""
        if not self.flags:
            return "unknown instruction sets"
        names = [name for name, present in (("AVX2", self.avx2), ("FMA", self.fma)) if present]
        if self.avx512:
            names.append("AVX-512 (%s)" % " ".join(self.avx512))
        if self.amx_bf16:
            names.append("AMX-BF16")
        missing = [] if self.avx512 else ["AVX-512"]
        if not self.native_bfloat16:
            missing.append("AVX512_BF16/AMX")
        text = ", ".join(names) or "no AVX2"
        return text + (" (no %s)" % ", no ".join(missing) if missing else "")


def parse_cpuinfo(text):
    """CpuFeatures from the text of /proc/cpuinfo: the first x86 `flags` line (every core lists the
    same); other formats (ARM's `Features`, ...) give no flags."""
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "flags":
            return CpuFeatures(frozenset(value.split()))
    return CpuFeatures()


@functools.lru_cache(maxsize=None)
def cpu_features():
    """This machine's CpuFeatures, read once (empty where /proc/cpuinfo does not exist)."""
    try:
        with open(CPUINFO, encoding="utf-8", errors="replace") as f:
            return parse_cpuinfo(f.read())
    except OSError:
        return CpuFeatures()


@functools.lru_cache(maxsize=None)
def _gpu_visible():
    if keras_backend.selected() != "tensorflow":
        return _jax_gpu()
    import tensorflow as tf  # here, not at import: the ISA parsing needs no TensorFlow

    return bool(tf.config.list_logical_devices("GPU"))


def _jax_gpu():
    """Whether JAX (Keras' JAX backend) computes on a GPU."""
    import jax

    return jax.default_backend() == "gpu"


@functools.lru_cache(maxsize=None)
def _log_choice(path, reason):
    # Cached: one line per distinct choice (normally one per process).
    how = ("the native bfloat16 op" if path == NATIVE
           else "in float32, rounded to bfloat16")
    logger.info("CPU: %s; bfloat16 matrix products: %s (%s)",
                cpu_features().describe(), how, reason)


def gpu_present():
    """Whether TensorFlow finds a GPU. Physical devices: listing them does not start TensorFlow's
    runtime, so the thread pools can still be configured afterwards. On Keras' JAX backend:
    whether JAX computes on a GPU."""
    if keras_backend.selected() != "tensorflow":
        return _jax_gpu()
    import tensorflow as tf

    return bool(tf.config.list_physical_devices("GPU"))


def use_xla_cache(model_dir):
    """XLA's persistent compilation cache in <model_dir>/xla_cache (unless TF_XLA_FLAGS already
    names a directory): a later run on this corpus loads the compiled programs instead of
    compiling them again. TensorFlow reads TF_XLA_FLAGS once, at its first device query (or
    first compilation): this must run before (`opennmt_lite.cli` calls it before it starts
    TensorFlow; `build.trainer` again, for programs that build a trainer themselves)."""
    flags = os.environ.get("TF_XLA_FLAGS", "")
    if "--tf_xla_persistent_cache_directory" in flags:
        return
    directory = os.path.join(model_dir, "xla_cache")
    os.environ["TF_XLA_FLAGS"] = f"{flags} --tf_xla_persistent_cache_directory={directory}".strip()
    logger.info("XLA: compiled programs cached in %s", directory)


ONEDNN_ENV = "TF_ENABLE_ONEDNN_OPTS"


def choose_training_kernels(mixed_precision, sub_batches=None, environ=None):
    """Float32 training on a CPU, in side-by-side sub-batches, runs TensorFlow's own (Eigen)
    kernels: sets TF_ENABLE_ONEDNN_OPTS=0 in `environ` (default os.environ) before TensorFlow
    starts. Not when the variable is already set, a mixed precision is asked for (bfloat16's fast
    products are oneDNN's), `sub_batches` (train.sub_batches; None: unset) is 1 or would default
    to 1 (one pass over both cores is faster with oneDNN), a GPU trains, or TensorFlow has already
    started in this process (it reads the variable once, at import). Measured on a 2-core AVX-512
    EPYC, two sub-batches: the same tokens/s as with oneDNN (5 762 / 5 725 against 5 778 /
    5 913) in 1.55 GB of memory instead of 1.78; one pass: 4 598 / 4 894 against 5 177 / 5 163.
    Where TensorFlow leaves oneDNN off anyway (CPUs without AVX-512) it changes nothing.
    Returns whether it set the variable."""
    environ = os.environ if environ is None else environ
    if sub_batches is None:
        sub_batches = 2 if (os.cpu_count() or 1) >= 2 and cpu_features().flags else 1
    if (ONEDNN_ENV in environ or mixed_precision not in (None, False, "false", "float32")
            or sub_batches < 2 or os.path.exists("/proc/driver/nvidia")
            or "tensorflow" in sys.modules):
        return False
    environ[ONEDNN_ENV] = "0"
    return True


def onednn_enabled():
    """Whether this process' TensorFlow runs oneDNN's kernels (it decides at import); None on
    another Keras backend."""
    if keras_backend.selected() != "tensorflow":
        return None
    try:
        from tensorflow.python.util import _pywrap_util_port
    except ImportError:  # (another TensorFlow build)
        return None
    return bool(_pywrap_util_port.IsMklEnabled())


def default_sub_batches(num_devices=1, jit_compile=False):
    """`train.sub_batches` when the config does not set it: 2 on a CPU with at least 2 cores and
    known instruction sets, training on one device without XLA and without a GPU; 1 otherwise.
    Logged, with the kernels TensorFlow runs."""
    features = cpu_features()
    if num_devices > 1 or jit_compile:
        value, reason = 1, "several devices" if num_devices > 1 else "train.jit_compile"
    elif (os.cpu_count() or 1) < 2:
        value, reason = 1, "one core"
    elif not features.flags:
        value, reason = 1, "instruction sets unknown"
    elif gpu_present():
        value, reason = 1, "GPU"
    else:
        value, reason = 2, "two single-threaded passes side by side are faster"
    kernels = {True: "oneDNN kernels", False: "TensorFlow's own kernels", None: "kernels unknown"}
    logger.info("CPU: %s, %s; train.sub_batches unset: %d (%s)", features.describe(),
                kernels[onednn_enabled()], value, reason)
    return value


def bfloat16_matmul_path():
    """NATIVE or FLOAT32: how the layers compute a matrix product of bfloat16 operands.

    OPENNMT_LITE_BF16_MATMUL (native or float32) decides when set; otherwise NATIVE on a CPU with
    AVX512_BF16 or AMX whose TensorFlow runs oneDNN, or when TensorFlow sees a GPU, and FLOAT32
    elsewhere. (With oneDNN off, TensorFlow's own bfloat16 MatMul on an AVX512_BF16 CPU errs twice
    as much as one rounding of the float32 product: mean relative error 2.8e-3 against 1.4e-3,
    measured on an AMD EPYC.) Reads the variable
    on each call: `opennmt_lite.layers.fast_paths.configure` calls it once, at start-up, and the
    layers use what it stored. Another value of the variable raises EnvironmentVariableError.
    """
    override = os.environ.get(BF16_MATMUL_ENV, "").strip().lower()
    if override:
        if override not in (NATIVE, FLOAT32):
            raise EnvironmentVariableError(
                f"{BF16_MATMUL_ENV} must be '{NATIVE}' or '{FLOAT32}' (or unset), "
                f"got {override!r}")
        path, reason = override, f"{BF16_MATMUL_ENV}={override}"
    elif cpu_features().native_bfloat16 and onednn_enabled() is not False:
        path, reason = NATIVE, "native bfloat16 CPU"
    elif _gpu_visible():
        path, reason = NATIVE, "GPU"
    elif cpu_features().native_bfloat16:
        path, reason = FLOAT32, "native bfloat16 CPU, but TensorFlow runs without oneDNN"
    else:
        path, reason = FLOAT32, "no native bfloat16 on this CPU"
    _log_choice(path, reason)
    return path
