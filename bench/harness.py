"""Shared helpers of the side-by-side benchmarks (bench_train.py, bench_encoder.py).

* `run_measured(cmd, ...)`: runs one benchmark process (its stdout/stderr to log files) and
  measures its peak memory: the kernel's high-water mark `ru_maxrss` of the process (from
  `os.wait4`, i.e. the largest single process among it and its waited-for descendants) and the
  largest SUM of the resident set sizes of the whole process tree, polled from /proc every
  0.1 s. `peak_rss_bytes` is the larger of the two.
* `alternate(runs, sides, run_one)`: A, B, A, B, ... so that slow drifts of the machine hit both
  frameworks alike.
* `median`, `format_table`, `write_results` (runs/bench_results/<name>-<timestamp>.json).
* `peak_matmul_flops(dtype)`: the measured matmul peak of this machine in TensorFlow 2.21
  (4096 x 4096 x 4096, tf.function, default threads, median of repeats), run in a subprocess by
  `measure_peak_flops()` so that the harness process itself never imports TensorFlow:
  `python bench/harness.py peak-flops --dtypes float32 bfloat16`.
* `training_flops_per_token(...)`, `encoder_flops_per_token(...)`: documented estimates of the
  useful (matmul) compute per token, for model FLOP utilisation (MFU) = tokens/s x FLOP/token /
  measured peak.

Standard library only at import time (the OpenNMT-tf venv may import it too).
"""

import argparse
import datetime
import json
import os
import platform
import shlex
import signal
import statistics
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS_DIR = os.path.join(ROOT, "runs", "bench_results")
_PAGE_SIZE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
GB = 1e9  # memory is reported in GB = 10^9 bytes


def log(message):
    print(f"[bench] {message}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------------------------
# Processes and memory


def _children(pid):
    """Direct children of a process (every thread's /proc/<pid>/task/<tid>/children)."""
    children = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return children
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as stream:
                children.extend(int(c) for c in stream.read().split())
        except OSError:
            continue
    return children


def _rss_bytes(pid):
    try:
        with open(f"/proc/{pid}/statm") as stream:
            return int(stream.read().split()[1]) * _PAGE_SIZE
    except (OSError, IndexError, ValueError):
        return 0


def tree_rss_bytes(pid):
    """Sum of the resident set sizes of a process and all its descendants (0 if gone)."""
    total = 0
    seen = set()
    stack = [pid]
    while stack:
        current = stack.pop()
        if current in seen:
            continue
        seen.add(current)
        total += _rss_bytes(current)
        stack.extend(_children(current))
    return total


class _TreeMonitor(threading.Thread):
    def __init__(self, pid, interval):
        super().__init__(daemon=True)
        self.pid = pid
        self.interval = interval
        self.peak = 0
        self.samples = 0
        self._stop_event = threading.Event()

    def run(self):
        while not self._stop_event.is_set():
            self.peak = max(self.peak, tree_rss_bytes(self.pid))
            self.samples += 1
            self._stop_event.wait(self.interval)

    def stop(self):
        self._stop_event.set()
        self.join()


def run_measured(cmd, log_prefix, env=None, cwd=ROOT, timeout=None, poll_interval=0.1):
    """Runs `cmd` (a list) with stdout -> `<log_prefix>.out`, stderr -> `<log_prefix>.err`.

    Returns a dict: returncode, wall_seconds, peak_rss_bytes (max of the two measures below),
    maxrss_bytes (ru_maxrss from wait4: the largest single process, kernel high-water mark),
    tree_peak_rss_bytes (largest polled sum over the process tree), result (the last line of
    stdout that is a JSON object, or None), the log paths and the command.
    """
    os.makedirs(os.path.dirname(os.path.abspath(log_prefix)), exist_ok=True)
    out_path, err_path = log_prefix + ".out", log_prefix + ".err"
    full_env = dict(os.environ)
    full_env.update(env or {})
    full_env.setdefault("PYTHONUNBUFFERED", "1")
    start = time.time()
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        process = subprocess.Popen(cmd, stdout=out, stderr=err, cwd=cwd, env=full_env,
                                   start_new_session=True)
        monitor = _TreeMonitor(process.pid, poll_interval)
        monitor.start()
        timer = None
        timed_out = []
        if timeout:
            def _kill():
                timed_out.append(True)
                try:
                    os.killpg(process.pid, signal.SIGKILL)
                except OSError:
                    pass
            timer = threading.Timer(timeout, _kill)
            timer.start()
        try:
            _, status, usage = os.wait4(process.pid, 0)
        except KeyboardInterrupt:
            os.killpg(process.pid, signal.SIGKILL)
            os.wait4(process.pid, 0)
            monitor.stop()
            raise
        finally:
            if timer is not None:
                timer.cancel()
        process.returncode = os.waitstatus_to_exitcode(status)
        monitor.stop()
    wall = time.time() - start
    maxrss = usage.ru_maxrss * 1024  # Linux: kilobytes
    record = dict(
        command=cmd,
        returncode=process.returncode,
        timed_out=bool(timed_out),
        wall_seconds=wall,
        maxrss_bytes=maxrss,
        tree_peak_rss_bytes=monitor.peak,
        peak_rss_bytes=max(maxrss, monitor.peak),
        stdout=out_path,
        stderr=err_path,
        result=last_json_object(out_path),
    )
    return record


def last_json_object(path):
    """The last line of a file that parses as a JSON object, or None."""
    try:
        with open(path, encoding="utf-8", errors="replace") as stream:
            lines = stream.read().splitlines()
    except OSError:
        return None
    for line in reversed(lines):
        line = line.strip()
        if line.startswith("{"):
            try:
                value = json.loads(line)
            except ValueError:
                continue
            if isinstance(value, dict):
                return value
    return None


def tail(path, lines=20):
    try:
        with open(path, encoding="utf-8", errors="replace") as stream:
            return "\n".join(stream.read().splitlines()[-lines:])
    except OSError:
        return ""


def alternate(runs, sides, run_one):
    """Calls run_one(side, index) for index in range(runs), for side in sides: A B A B ...
    Returns {side: [returned values]}."""
    results = {side: [] for side in sides}
    for index in range(runs):
        for side in sides:
            results[side].append(run_one(side, index))
    return results


# --------------------------------------------------------------------------------------------
# Statistics, tables, results


def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def ratio(a, b):
    return a / b if a is not None and b not in (None, 0) else None


def fmt(value, spec=",.0f", missing="-"):
    return missing if value is None else format(value, spec)


def format_table(headers, rows):
    """Plain-text table; columns right-aligned except the first."""
    cells = [list(map(str, headers))] + [[str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]

    def line(row):
        return "  ".join(
            (cell.ljust(widths[i]) if i == 0 else cell.rjust(widths[i]))
            for i, cell in enumerate(row)
        )

    rule = "  ".join("-" * w for w in widths)
    return "\n".join([line(cells[0]), rule] + [line(row) for row in cells[1:]])


def timestamp():
    return datetime.datetime.now().strftime("%Y%m%d-%H%M%S")


def run_directory(name, stamp):
    path = os.path.join(RESULTS_DIR, f"{name}-{stamp}")
    os.makedirs(path, exist_ok=True)
    return path


def write_results(name, stamp, payload):
    """Writes runs/bench_results/<name>-<stamp>.json; returns its path."""
    os.makedirs(RESULTS_DIR, exist_ok=True)
    path = os.path.join(RESULTS_DIR, f"{name}-{stamp}.json")
    with open(path, "w", encoding="utf-8") as stream:
        json.dump(payload, stream, indent=2, sort_keys=False, default=str)
        stream.write("\n")
    return path


def machine_info():
    info = dict(
        platform=platform.platform(),
        python=sys.version.split()[0],
        cpu_count=os.cpu_count(),
        affinity=len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        load_average=os.getloadavg() if hasattr(os, "getloadavg") else None,
    )
    try:
        with open("/proc/cpuinfo") as stream:
            for line in stream:
                if line.startswith("model name"):
                    info["cpu"] = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True,
                                text=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               cwd=ROOT, capture_output=True, text=True).stdout.strip()
        info["git_commit"] = commit + ("+dirty" if dirty else "")
    except OSError:
        pass
    return info


def load_warning(threshold=0.5):
    """A warning string when the machine does not look idle (load average of the last minute
    above `threshold` per core before a benchmark starts), else None."""
    try:
        load = os.getloadavg()[0]
    except OSError:
        return None
    cores = os.cpu_count() or 1
    if load > threshold * cores:
        return (f"the machine is busy (1-minute load average {load:.2f} on {cores} cores): "
                "the figures will be low and noisy; measure on an idle machine")
    return None



def warn_if_busy():
    """load_warning(), also logged when there is one; returns it (None on an idle machine)."""
    warning = load_warning()
    if warning:
        log("WARNING: " + warning)
    return warning

# --------------------------------------------------------------------------------------------
# Config overrides


def parse_scalar(text):
    """YAML-like scalar: true/false/null, int, float, else the string."""
    lowered = text.lower()
    if lowered in ("true", "yes", "on"):
        return True
    if lowered in ("false", "no", "off"):
        return False
    if lowered in ("null", "none", "~"):
        return None
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def load_yaml(path):
    import yaml

    with open(path, encoding="utf-8") as stream:
        return yaml.safe_load(stream)


def dump_yaml(value, path):
    import yaml

    with open(path, "w", encoding="utf-8") as stream:
        yaml.safe_dump(value, stream, sort_keys=False, allow_unicode=True)


def parse_overrides(text):
    """'train.mixed_precision=bfloat16 model.x=1' -> [('train.mixed_precision', 'bfloat16'), ...]."""
    overrides = []
    for item in shlex.split(text or ""):
        if "=" not in item:
            raise ValueError(f"override {item!r} is not key=value")
        key, value = item.split("=", 1)
        overrides.append((key.strip(), parse_scalar(value.strip())))
    return overrides


def set_dotted(config, key, value):
    node = config
    parts = key.split(".")
    for part in parts[:-1]:
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            raise ValueError(f"cannot set {key}: {part} is not a mapping")
    node[parts[-1]] = value


# --------------------------------------------------------------------------------------------
# Peak matmul throughput and FLOP estimates


def peak_matmul_flops(dtype="float32", n=4096, repeats=7, warmup=2):
    """Measured matmul throughput (FLOP/s) of this machine in the current TensorFlow: an n x n x n
    matmul under tf.function with TensorFlow's default threading (all cores), 2 n^3 FLOP per
    call, median over `repeats` timed calls after `warmup` calls. Imports TensorFlow."""
    import tensorflow as tf

    tf_dtype = tf.as_dtype(dtype)
    a = tf.cast(tf.random.stateless_normal([n, n], seed=[1, 2]), tf_dtype)
    b = tf.cast(tf.random.stateless_normal([n, n], seed=[3, 4]), tf_dtype)

    @tf.function
    def product(x, y):
        # The reduction (n^2 adds) only forces completion; it is < 0.1 % of the matmul.
        return tf.reduce_sum(tf.cast(tf.matmul(x, y), tf.float32))

    for _ in range(warmup):
        product(a, b).numpy()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        product(a, b).numpy()
        times.append(time.perf_counter() - start)
    return 2.0 * n ** 3 / statistics.median(times)


def measure_peak_flops(dtypes=("float32", "bfloat16"), python=None, n=4096, repeats=7):
    """Runs `peak_matmul_flops` for each dtype in a fresh TensorFlow 2.21 subprocess.
    Returns {dtype: FLOP/s or None}."""
    cmd = [python or sys.executable, os.path.abspath(__file__), "peak-flops", "--n", str(n),
           "--repeats", str(repeats), "--dtypes", *dtypes]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    output = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env)
    for line in reversed(output.stdout.splitlines()):
        try:
            return json.loads(line)
        except ValueError:
            continue
    log("peak FLOP/s measurement failed:\n" + output.stderr[-2000:])
    return {dtype: None for dtype in dtypes}


def _attention_flops(span, num_units, relative):
    """Per query position and layer: QK^T and attention x V, 2 * span * d each, plus with
    relative positions the query x relative-key and weights x relative-value products (another
    2 * span * d each; OpenNMT-tf uses both)."""
    return (8 if relative else 4) * span * num_units


def encoder_layer_flops(num_units, ffn_inner_dim, span, relative):
    """Forward FLOP of one encoder layer per position: Q, K, V, output projections (4 d^2
    multiply-adds), the FFN (2 d f) and the attention products."""
    d = num_units
    return 2 * (4 * d * d + 2 * d * ffn_inner_dim) + _attention_flops(span, d, relative)


def training_flops_per_token(num_layers, num_units, ffn_inner_dim, target_vocabulary_size,
                             mean_source_length, mean_target_length, source_span, target_span,
                             cross_span, relative=True, backward_factor=3.0):
    """Estimated training FLOP per token, counting tokens as OpenNMT-tf does: source length plus
    target length including </s> (the decoder runs on n + 1 positions).

    Forward, matmuls only (2 FLOP per multiply-add; embeddings gathers, softmax, layer norms and
    the loss are left out):
      per source position: L x [encoder layer (4 d^2 + 2 d f projections, attention over
        `source_span` positions, relative keys/values) + the cross-attention K, V projections of
        the memory (2 d^2)]
      per target position: L x [self-attention (4 d^2 + attention over `target_span`, relative),
        cross-attention Q and output (2 d^2) + attention over `cross_span` source positions,
        FFN (2 d f)] + the output projection (d V)
    Spans are token-weighted mean sequence lengths (sum T^2 / sum T) of the real, unpadded data,
    the full (masked) T x T products being computed for self-attention. Training = forward +
    backward ~= 3 x forward (`backward_factor`). For the benchmark model (3 x 256, FFN 1024,
    8 003-entry target vocabulary) on the prepared corpus this gives ~24 MFLOP per token.
    """
    d, f, L = num_units, ffn_inner_dim, num_layers
    per_source = L * (encoder_layer_flops(d, f, source_span, relative) + 2 * 2 * d * d)
    per_target = L * (
        2 * 4 * d * d + _attention_flops(target_span, d, relative)
        + 2 * 2 * d * d + _attention_flops(cross_span, d, False)
        + 2 * 2 * d * f
    ) + 2 * d * target_vocabulary_size
    forward = (mean_source_length * per_source + mean_target_length * per_target) / (
        mean_source_length + mean_target_length
    )
    return backward_factor * forward


def encoder_flops_per_token(num_layers, num_units, ffn_inner_dim, span, relative=True):
    """Forward (inference) encoder FLOP per real source token: L encoder layers (see
    `encoder_layer_flops`), `span` = token-weighted mean sequence length."""
    return num_layers * encoder_layer_flops(num_units, ffn_inner_dim, span, relative)


def _main(argv=None):
    parser = argparse.ArgumentParser(description="harness utilities")
    sub = parser.add_subparsers(dest="command", required=True)
    peak = sub.add_parser("peak-flops", help="measure the matmul peak (JSON on stdout)")
    peak.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16"])
    peak.add_argument("--n", type=int, default=4096)
    peak.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args(argv)
    if args.command == "peak-flops":
        result = {}
        for dtype in args.dtypes:
            result[dtype] = peak_matmul_flops(dtype, n=args.n, repeats=args.repeats)
            log(f"peak matmul {dtype}: {result[dtype] / 1e9:.0f} GFLOP/s")
        print(json.dumps(result), flush=True)


if __name__ == "__main__":
    _main()
