"""The side-by-side harness every benchmark uses, and its shared helpers.

A benchmark file defines its measurement (the commands of its sides, and for opennmt-lite the
worker that runs in that command's process) and its table; this module does the rest:

* `parser(...)`: the common options (--runs, --only, --name, --timeout, --benchmark,
  --cache-dir, --no-mfu).
* `Session(name, cache_dir)`: one invocation: timestamp, results folder
  runs/bench_results/<name>-<stamp>/, the load-average warning, the prepared data
  (bench/prepare.py), the OpenNMT-tf interpreter (`ensure_onmt`), and `finish(payload)`,
  which writes runs/bench_results/<name>-<stamp>.json with the machine record (`machine_info`:
  CPU model and instruction sets, GPUs, load, versions, git commit).
* `Side(name, command, ...)`: one side of a comparison: how to start one run of it.
* `compare(sides, runs, metrics, log_dir, ...)`: alternates the sides (A, B, A, B, ...; slow
  drifts of the machine hit every side alike), each run a fresh process whose peak memory
  `run_measured` measures; then `summarize`: per side the medians over its successful runs, and
  against the baseline side the ratios of the medians and the median of the per-round (paired)
  ratios.
* opennmt-lite workers (TensorFlow imported lazily, in the worker's process only):
  `lite_model`, `timed_passes`, `print_worker_result`; `lite_trainer`, the trainer of a
  config dict (bench_ctranslate2.py also uses opennmt_lite.config and opennmt_lite.build).
* `peak_matmul_flops` / `measure_peak_flops`, `training_flops_per_token`,
  `encoder_flops_per_token`: the MFU ingredients (`python bench/harness.py peak-flops`).

Standard library only at import time (the OpenNMT-tf venv may import it too).
"""

import argparse
import dataclasses
import datetime
import json
import os
import platform
import re
import resource
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
import typing

import prepare

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCH_DIR = os.path.join(ROOT, "bench")
RESULTS_DIR = os.path.join(ROOT, "runs", "bench_results")
CACHE_DIR = prepare.DEFAULT_CACHE_DIR
DEFAULT_BENCHMARK = os.path.join(BENCH_DIR, "configs", "train_benchmark.yml")
LITE, ONMT = "opennmt-lite", "opennmt-tf"
# Compute dtype of a lite side -> its config's `train.mixed_precision`.
DTYPE_TO_MIXED_PRECISION = {"float32": False, "mixed_bfloat16": "bfloat16",
                            "mixed_float16": "float16"}
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
    total, seen, stack = 0, set(), [pid]
    while stack:
        current = stack.pop()
        if current not in seen:
            seen.add(current)
            total += _rss_bytes(current)
            stack.extend(_children(current))
    return total


class _TreeMonitor(threading.Thread):
    """Polls the RSS of a process tree and keeps the largest sum."""

    def __init__(self, pid, interval):
        super().__init__(daemon=True)
        self.pid, self.interval, self.peak = pid, interval, 0
        self._stop_event = threading.Event()

    def run(self):
        while not self._stop_event.is_set():
            self.peak = max(self.peak, tree_rss_bytes(self.pid))
            self._stop_event.wait(self.interval)

    def stop(self):
        self._stop_event.set()
        self.join()


def run_measured(cmd, log_prefix, env=None, cwd=ROOT, timeout=None, poll_interval=0.1):
    """Runs `cmd` (a list) with stdout -> `<log_prefix>.out`, stderr -> `<log_prefix>.err`.

    Returns a dict: returncode, timed_out, wall_seconds, peak_rss_bytes (max of the two measures
    below), maxrss_bytes (ru_maxrss from wait4: the largest single process, kernel high-water
    mark), tree_peak_rss_bytes (largest polled sum over the process tree, every 0.1 s), result
    (the last line of stdout that is a JSON object, or None), the log paths and the command.
    """
    os.makedirs(os.path.dirname(os.path.abspath(log_prefix)), exist_ok=True)
    out_path, err_path = log_prefix + ".out", log_prefix + ".err"
    full_env = dict(os.environ, **(env or {}))
    full_env.setdefault("PYTHONUNBUFFERED", "1")
    start = time.time()
    timed_out = []
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        # Its own process group, so that a timeout or Ctrl-C kills the whole tree.
        process = subprocess.Popen(cmd, stdout=out, stderr=err, cwd=cwd, env=full_env,
                                   start_new_session=True)
        monitor = _TreeMonitor(process.pid, poll_interval)
        monitor.start()

        def kill():
            timed_out.append(True)
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except OSError:
                pass

        timer = threading.Timer(timeout, kill) if timeout else None
        if timer:
            timer.start()
        try:
            _, status, usage = os.wait4(process.pid, 0)
        except KeyboardInterrupt:
            kill()
            os.wait4(process.pid, 0)
            raise
        finally:
            if timer:
                timer.cancel()
            monitor.stop()
    maxrss = usage.ru_maxrss * 1024  # Linux: kilobytes
    return dict(
        command=cmd,
        returncode=os.waitstatus_to_exitcode(status),
        timed_out=bool(timed_out),
        wall_seconds=time.time() - start,
        maxrss_bytes=maxrss,
        tree_peak_rss_bytes=monitor.peak,
        peak_rss_bytes=max(maxrss, monitor.peak),
        stdout=out_path,
        stderr=err_path,
        result=last_json_object(out_path),
    )


def last_json_object(path):
    """The last line of a file that parses as a JSON object, or None."""
    try:
        with open(path, encoding="utf-8", errors="replace") as stream:
            lines = stream.read().splitlines()
    except OSError:
        return None
    for line in reversed(lines):
        if line.strip().startswith("{"):
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


# --------------------------------------------------------------------------------------------
# The machine


def cpu_info(path="/proc/cpuinfo"):
    """The CPU model and the instruction sets that decide the float32/bfloat16 figures: AVX2,
    every avx512* flag (AVX512_BF16 among them, also given on its own) and the AMX flags."""
    model, flags = None, set()
    try:
        with open(path) as stream:
            for line in stream:
                name, _, value = line.partition(":")
                if name.strip() == "model name" and model is None:
                    model = value.strip()
                elif name.strip() == "flags" and not flags:
                    flags = set(value.split())
    except OSError:
        pass
    return dict(model=model, avx2="avx2" in flags,
                avx512=sorted(f for f in flags if f.startswith("avx512")),
                avx512_bf16="avx512_bf16" in flags,
                amx=sorted(f for f in flags if f.startswith("amx")))


def gpu_info():
    """[{name, memory, driver}] of the NVIDIA GPUs (nvidia-smi), [] without any."""
    if not shutil.which("nvidia-smi"):
        return []
    try:
        output = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,memory.total,driver_version",
             "--format=csv,noheader"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [dict(zip(("name", "memory", "driver"), (p.strip() for p in line.split(","))))
            for line in output.splitlines() if line.strip()]


def add_lite_baseline_argument(parser):
    """`--lite-baseline DIR`: another opennmt-lite checkout run as one more side per dtype."""
    parser.add_argument(
        "--lite-baseline", metavar="DIR",
        help="another opennmt-lite checkout (e.g. `git worktree add /tmp/base <commit>`): one "
             "more side per dtype, run by that checkout's own code, and the baseline of the "
             "ratios with --only lite")


def lite_checkout_side(directory, dtype):
    """The side name of the opennmt-lite checkout at `directory` in `dtype`, e.g.
    "opennmt-lite@4c243dfb (float32)"."""
    return f"{LITE}@{git_commit(directory)[:8]} ({dtype})"


def git_commit(directory=ROOT):
    """HEAD of the checkout at `directory`, with "+dirty" when tracked files differ from it."""
    def git(*args):
        return subprocess.run(["git", *args], cwd=directory, capture_output=True,
                              text=True).stdout.strip()

    try:
        dirty = git("status", "--porcelain", "--untracked-files=no")
        return git("rev-parse", "HEAD") + ("+dirty" if dirty else "")
    except OSError:
        return None


def machine_info():
    return dict(
        platform=platform.platform(),
        python=sys.version.split()[0],
        cpu_count=os.cpu_count(),
        affinity=len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        load_average=os.getloadavg() if hasattr(os, "getloadavg") else None,
        cpu=cpu_info(),
        gpus=gpu_info(),
        git_commit=git_commit(),
    )


def warn_if_busy(threshold=0.5):
    """A warning (also logged) when the 1-minute load average is above `threshold` per core
    before a benchmark starts, else None."""
    try:
        load = os.getloadavg()[0]
    except OSError:
        return None
    cores = os.cpu_count() or 1
    if load <= threshold * cores:
        return None
    warning = (f"the machine is busy (1-minute load average {load:.2f} on {cores} cores): "
               "the figures will be low and noisy; measure on an idle machine")
    log("WARNING: " + warning)
    return warning


# --------------------------------------------------------------------------------------------
# Statistics, tables, results


def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def ratio(a, b):
    return a / b if a is not None and b not in (None, 0) else None


def fmt(value, spec=",.0f", missing="-"):
    return missing if value is None else format(value, spec)


def gb(value):
    """Bytes as GB with 2 decimals, "-" when unknown."""
    return fmt(None if value is None else value / GB, ".2f")


def percent(value):
    return "-" if value is None else f"{100 * value:.1f}%"


def format_table(headers, rows):
    """Plain-text table; columns right-aligned except the first."""
    cells = [list(map(str, headers))] + [[str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]

    def line(row):
        return "  ".join(cell.ljust(widths[i]) if i == 0 else cell.rjust(widths[i])
                         for i, cell in enumerate(row))

    rule = "  ".join("-" * w for w in widths)
    return "\n".join([line(cells[0]), rule] + [line(row) for row in cells[1:]])


def timestamp():
    return datetime.datetime.now().strftime("%Y%m%d-%H%M%S")


def write_results(name, stamp, payload):
    """Writes runs/bench_results/<name>-<stamp>.json; returns its path."""
    os.makedirs(RESULTS_DIR, exist_ok=True)
    path = os.path.join(RESULTS_DIR, f"{name}-{stamp}.json")
    with open(path, "w", encoding="utf-8") as stream:
        json.dump(payload, stream, indent=2, default=str)
        stream.write("\n")
    return path


# --------------------------------------------------------------------------------------------
# The side-by-side comparison


def parser(doc, name, runs=3, timeout=3600, sides=True, mfu=True):
    """The argument parser with the options every side-by-side benchmark shares."""
    result = argparse.ArgumentParser(description=doc.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    result.add_argument("--runs", type=int, default=runs, help="runs per side (alternated)")
    if sides:
        result.add_argument("--only", choices=("onmt", "lite"), default=None)
    result.add_argument("--name", default=name, help="results name prefix")
    result.add_argument("--timeout", type=float, default=timeout, help="seconds per run")
    result.add_argument("--benchmark", default=DEFAULT_BENCHMARK)
    result.add_argument("--cache-dir", default=CACHE_DIR)
    if mfu:
        result.add_argument("--no-mfu", action="store_true",
                            help="skip the matmul peak measurement")
    return result


def add_worker_arguments(parser, repeats, checkpoint_help):
    """The options of a benchmark whose runs are inference workers: --repeats (timed passes
    per run), --checkpoint (the OpenNMT-tf checkpoint both sides load; a lite worker given none
    uses seeded random weights), and the hidden ones of its opennmt-lite worker mode (`--worker
    lite`): the Keras dtype policy, the batches file and how many of its batches to run."""
    parser.add_argument("--repeats", type=int, default=repeats, help="timed passes per run")
    parser.add_argument("--checkpoint", default=None, help=checkpoint_help)
    parser.add_argument("--worker", choices=("lite",), help=argparse.SUPPRESS)
    parser.add_argument("--dtype", choices=sorted(DTYPE_TO_MIXED_PRECISION), default="float32",
                        help=argparse.SUPPRESS)
    parser.add_argument("--batches", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--max-batches", type=int, default=None, help=argparse.SUPPRESS)


@dataclasses.dataclass
class Side:
    """One side of a comparison.

    `command(index)` returns the argv of run `index` (a fresh process); its last stdout line
    that is a JSON object becomes `record["result"]`. `finish(record, index)`, optional, completes
    or reshapes that result once the process has ended (e.g. reads files the run wrote).
    `peak_dtype` names the matmul peak its MFU is computed against."""

    name: str
    command: typing.Callable
    peak_dtype: str = "float32"
    finish: typing.Callable = None

    @property
    def label(self):
        return file_label(self.name)


def file_label(name):
    """A side's name as a file name part: "opennmt-lite (float32)" -> "opennmt-lite-float32"."""
    return re.sub(r"[^A-Za-z0-9_.]+", "-", name).strip("-")


class Session:
    """One invocation of a benchmark: its timestamp, folder, prepared data and machine record.

    `paths`: with a `cache_dir`, the files of that data cache (bench/prepare.py, built or
    checked here; `prepare_overrides` as for `prepare.prepare`), else None."""

    def __init__(self, name, cache_dir=None, **prepare_overrides):
        self.name = name
        self.stamp = timestamp()
        self.load_warning = warn_if_busy()
        self.run_dir = os.path.join(RESULTS_DIR, f"{name}-{self.stamp}")
        os.makedirs(self.run_dir, exist_ok=True)
        self.paths = prepare.prepare(cache_dir, **prepare_overrides) if cache_dir else None
        self.onmt_python = None

    def ensure_onmt(self, required):
        """The OpenNMT-tf interpreter (bench/onmt_env.py), created if `required`; without
        `required` an existing one or None."""
        import onmt_env

        try:
            self.onmt_python = onmt_env.ensure_onmt_python(create=required)
        except RuntimeError:
            if required:
                raise
        return self.onmt_python

    def finish(self, payload):
        """Writes the JSON record (payload + timestamp, machine, load warning, OpenNMT-tf
        versions) and prints where it is."""
        record = dict(payload, timestamp=self.stamp, machine=machine_info(),
                      load_warning=self.load_warning)
        if self.onmt_python:
            import onmt_env

            record["onmt_versions"] = onmt_env.onmt_versions(self.onmt_python)
        path = write_results(self.name, self.stamp, record)
        print(f"\nresults: {os.path.relpath(path, ROOT)} (logs: "
              f"{os.path.relpath(self.run_dir, ROOT)}/)")
        return path


def _value(record, metric):
    """The run's figure, or None when the run failed or was not run."""
    if record.get("error") or record.get("skipped"):
        return None
    return (record.get("result") or {}).get(metric)


def compare(sides, runs, metrics, log_dir, timeout=None, baseline=None, flops_per_token=None,
            peak=None):
    """Runs `runs` rounds of the sides in turn (A, B, A, B, ...), logs in `log_dir`.

    `metrics`: keys of the runs' results, the first being THE figure (tokens/s): per run, per
    round ratio, MFU. A run fails when its process fails, its result has an "error" or lacks
    the figure; a side that failed once is not run again (its remaining runs are recorded as
    skipped). With `flops_per_token` and `peak` ({dtype: FLOP/s}) each run gets its MFU.
    Returns (records {side name: [run record]}, summary: see `summarize`)."""
    main = metrics[0]
    records = {side.name: [] for side in sides}
    failed = {}
    for index in range(runs):
        for side in sides:
            if side.name in failed:
                records[side.name].append(dict(skipped=f"not run: {failed[side.name]}"))
                continue
            cmd = side.command(index)
            log(f"run {index + 1}/{runs} {side.name}: {shlex.join(cmd)}")
            record = run_measured(cmd, os.path.join(log_dir, f"run{index}-{side.label}"),
                                  timeout=timeout)
            if side.finish:
                side.finish(record, index)
            result = record["result"] or {}
            if record["returncode"] != 0 or result.get("error") or result.get(main) is None:
                record["error"] = result.get("error") or (
                    "timed out" if record["timed_out"] else f"exit status {record['returncode']}")
                failed[side.name] = record["error"]
                log(f"  {side.name} run FAILED ({record['error']}); stderr tail:\n"
                    + tail(record["stderr"], 15))
            else:
                side_peak = (peak or {}).get(side.peak_dtype)
                if flops_per_token and side_peak:
                    record["mfu"] = result[main] * flops_per_token / side_peak
                log(f"  {side.name}: {main} {result[main]:,.1f}, peak RSS "
                    f"{gb(record['peak_rss_bytes'])} GB, {record['wall_seconds']:.0f} s wall")
            records[side.name].append(record)
    return records, summarize(records, metrics, baseline)


def summarize(records, metrics, baseline=None):
    """{side: {runs, ok, <metric>: median over ok runs, peak_rss_bytes, mfu, <main>_per_run,
    ratio: {<metric>: ratio of the medians to the baseline's, <main>_paired_median: median of
    the per-round ratios, peak_rss}}} (`ratio` only beside a baseline that ran)."""
    main = metrics[0]
    summary = {}
    for name, runs in records.items():
        ok = [r for r in runs if _value(r, main) is not None]
        summary[name] = dict(
            runs=len(runs), ok=len(ok),
            **{m: median(r["result"].get(m) for r in ok) for m in metrics},
            peak_rss_bytes=median(r["peak_rss_bytes"] for r in ok),
            mfu=median(r.get("mfu") for r in ok),
            **{f"{main}_per_run": [_value(r, main) for r in runs]},
        )
    base = summary.get(baseline)
    for name, side in summary.items():
        if base is None or name == baseline:
            continue
        paired = [ratio(_value(a, main), _value(b, main))
                  for a, b in zip(records[name], records[baseline])]
        side["ratio"] = dict(**{m: ratio(side[m], base[m]) for m in metrics},
                             **{f"{main}_paired_median": median(paired)},
                             peak_rss=ratio(side["peak_rss_bytes"], base["peak_rss_bytes"]))
    return summary


# --------------------------------------------------------------------------------------------
# Configs: YAML and dotted overrides


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

    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w", encoding="utf-8") as stream:
        yaml.safe_dump(value, stream, sort_keys=False, allow_unicode=True)


def parse_overrides(text):
    """'train.mixed_precision=bfloat16 model.x=1'
    -> [('train.mixed_precision', 'bfloat16'), ('model.x', 1)]."""
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
# opennmt-lite workers (these functions run in the worker's own process)


def _import_lite():
    """Makes this checkout's opennmt_lite importable; appended, so that a checkout put first on
    sys.path (profile_step.py --code-root) wins."""
    if ROOT not in sys.path:
        sys.path.append(ROOT)


def lite_trainer(user_config):
    """The opennmt-lite Trainer of a config dict (evaluation left out).

    Used by profile_step.py (and step_time.py through it); the other training benchmarks
    train through `python run.py train --config ...`. bench_ctranslate2.py also uses
    opennmt_lite.config and opennmt_lite.build, to export and translate."""
    _import_lite()
    from opennmt_lite import build
    from opennmt_lite.config import build_config

    return build.trainer(build_config(user_config), with_evaluation=False)


def lite_model(model_config, source_size, target_size, dtype="float32", checkpoint=None,
               seed=1234):
    """The opennmt-lite Transformer of a benchmark's `model:` section (a `preset:` key expanded
    from opennmt_lite.hyperparameters.PRESETS) under the Keras dtype policy `dtype`. Weights: those
    of the OpenNMT-tf `checkpoint`, else seeded random ones. Returns (model, checkpoint prefix)."""
    _import_lite()
    import keras
    from opennmt_lite.checkpointing.onmt_names import load_onmt_model
    from opennmt_lite.hyperparameters import PRESETS, ModelHyperparameters
    from opennmt_lite.models import Transformer

    model_config = dict(model_config)
    preset = model_config.pop("preset", None)
    if preset:
        model_config = dict(PRESETS[preset], **model_config)
    keras.config.set_dtype_policy(dtype)  # before the layers are made
    keras.utils.set_random_seed(seed)
    model = Transformer(ModelHyperparameters(**model_config), source_size, target_size)
    if checkpoint:
        return model, load_onmt_model(checkpoint, model)
    model.build()
    return model, None


def timed_passes(one_pass, repeats):
    """One untimed warm-up call of `one_pass()` (tracing, caches), then `repeats` timed calls.
    `one_pass` must end with its outputs on the host. Returns (warm-up seconds, [seconds of each
    timed call], the last call's return value)."""
    start = time.perf_counter()
    outputs = one_pass()
    warmup = time.perf_counter() - start
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        outputs = one_pass()
        seconds.append(time.perf_counter() - start)
    return warmup, seconds, outputs


def print_worker_result(result):
    """Prints a lite worker's result as its last stdout line (what `run_measured` reads), with
    the versions, the devices TensorFlow sees and the process' own peak RSS."""
    import keras
    import tensorflow as tf

    result.update(
        tensorflow=tf.__version__, keras=keras.__version__,
        devices=[tf.config.experimental.get_device_details(d).get("device_name", d.name)
                 for d in tf.config.list_physical_devices("GPU")] or ["CPU"],
        peak_rss_self_bytes=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
    print(json.dumps(result), flush=True)


# --------------------------------------------------------------------------------------------
# Peak matmul throughput and FLOP estimates


# Square products of several sizes: on some CPUs the largest is not the fastest (measured on an
# AVX2 EPYC: 1024^3 156 GFLOP/s, 4096^3 92), so a peak taken from one size alone says more about
# that size than about the machine.
CUBES = ((1024, 1024, 1024), (2048, 2048, 2048), (4096, 4096, 4096))


def model_matmul_shapes(model, rows, vocabulary_size):
    """The (m, k, n) products a Transformer's training step spends its time in, on `rows`
    tokens: the attention projections [rows, d] x [d, d], the FFN's inner [rows, d] x [d, ffn]
    and outer [rows, ffn] x [ffn, d], and the output layer [rows, d] x [d, vocabulary]."""
    d, ffn = model["num_units"], model["ffn_inner_dim"]
    return ((rows, d, d), (rows, d, ffn), (rows, ffn, d), (rows, d, vocabulary_size))


def shape_name(shape):
    return "x".join(str(size) for size in shape)


def peak_matmul_flops(dtype="float32", shapes=CUBES, repeats=7, warmup=2):
    """Measured matmul throughput of this machine in the current TensorFlow, per shape:
    {"m x k x n": FLOP/s} for [m, k] x [k, n] products under tf.function with TensorFlow's default
    threading (all cores), 2 m k n FLOP per call, median over `repeats` timed calls after
    `warmup` calls. Imports TensorFlow."""
    import tensorflow as tf

    tf_dtype = tf.as_dtype(dtype)

    @tf.function
    def product(x, y):
        # The reduction (m n adds) only forces completion; it is < 0.1 % of the matmul.
        return tf.reduce_sum(tf.cast(tf.matmul(x, y), tf.float32))

    rates = {}
    for m, k, n in shapes:
        a = tf.cast(tf.random.stateless_normal([m, k], seed=[1, 2]), tf_dtype)
        b = tf.cast(tf.random.stateless_normal([k, n], seed=[3, 4]), tf_dtype)
        for _ in range(warmup):
            product(a, b).numpy()
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            product(a, b).numpy()
            times.append(time.perf_counter() - start)
        rates[shape_name((m, k, n))] = 2.0 * m * k * n / statistics.median(times)
    return rates


def measure_peak_flops(dtypes=("float32", "bfloat16"), shapes=(), python=None, repeats=7):
    """Runs `peak_matmul_flops` on CUBES and `shapes` (e.g. `model_matmul_shapes`) for each
    dtype in a fresh TensorFlow 2.21 subprocess (the harness process itself never imports
    TensorFlow). Returns ({dtype: the best rate, the peak MFU is computed against, or None},
    {dtype: {shape: FLOP/s}}): record both."""
    log("measuring the matmul peak (TensorFlow 2.21)")
    all_shapes = list(CUBES) + [tuple(shape) for shape in shapes if tuple(shape) not in CUBES]
    cmd = [python or sys.executable, os.path.abspath(__file__), "peak-flops",
           "--repeats", str(repeats), "--dtypes", *dtypes,
           "--shapes", *(shape_name(shape) for shape in all_shapes)]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    output = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env)
    for line in reversed(output.stdout.splitlines()):
        try:
            table = json.loads(line)
        except ValueError:
            continue
        return {dtype: max(rates.values()) for dtype, rates in table.items()}, table
    log("peak FLOP/s measurement failed:\n" + output.stderr[-2000:])
    return {dtype: None for dtype in dtypes}, {}


def peak_text(peak, table=None):
    """"float32 216 GFLOP/s, bfloat16 400 GFLOP/s" for the table footers (with `table`, each
    peak's shape: "float32 216 GFLOP/s (1024x1024x1024)")."""
    def best_shape(dtype):
        rates = (table or {}).get(dtype) or {}
        return f" ({max(rates, key=rates.get)})" if rates else ""

    return ", ".join(f"{k} {v / 1e9:.0f} GFLOP/s{best_shape(k)}" for k, v in peak.items() if v)


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
    main_parser = argparse.ArgumentParser(description="harness utilities")
    sub = main_parser.add_subparsers(dest="command", required=True)
    peak = sub.add_parser("peak-flops", help="measure the matmul peak (JSON on stdout)")
    peak.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16"])
    peak.add_argument("--shapes", nargs="+", default=[shape_name(shape) for shape in CUBES],
                      help="products m x k x n, written MxKxN")
    peak.add_argument("--repeats", type=int, default=7)
    args = main_parser.parse_args(argv)
    shapes = [tuple(int(size) for size in text.split("x")) for text in args.shapes]
    result = {}
    for dtype in args.dtypes:
        result[dtype] = peak_matmul_flops(dtype, shapes=shapes, repeats=args.repeats)
        for shape, rate in result[dtype].items():
            log(f"matmul {dtype} {shape}: {rate / 1e9:.0f} GFLOP/s")
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    _main()
