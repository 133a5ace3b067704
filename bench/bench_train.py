"""Training throughput and memory, opennmt-lite vs OpenNMT-tf 2.32, side by side.

    python bench/bench_train.py [--runs 3] [--steps 60] [--only onmt|lite]
                                [--dtype float32 [mixed_bfloat16]] [--lite-extra "key=value ..."]
                                [--backend tensorflow [jax]]
                                [--benchmark bench/configs/sample_benchmark.yml]

The measurement: both configs are rendered from bench/configs/train_benchmark.yml (the
performance issue's config; --benchmark bench/configs/sample_benchmark.yml is configs/sample.yml):
same data files (bench/prepare.py, cached in runs/bench_cache/), vocabularies, model and
hyper-parameters; each lite config adds `train.mixed_precision` from one --dtype and the
--lite-extra overrides. They are saved in runs/bench_results/<name>-<timestamp>/configs/. Every
run trains from scratch in a fresh process and a fresh model_dir:

* OpenNMT-tf: bench/onmt_train.py (onmt-main ... --auto_config train, its log reports parsed);
* opennmt-lite: `python run.py train --config <lite.yml>`; its trainer appends one JSON object
  per report to <model_dir>/metrics.jsonl (see bench/README.md for the exact contract).

`--backend tensorflow jax` adds, for each --dtype, a side training the same config with
KERAS_BACKEND=jax (training/jax_step.py; its batches in the XLA planner's `train.xla_shapes`
shapes); with `--only lite` the TensorFlow side is then the ratio's baseline. The JAX side's
runs share one persistent compilation cache (JAX_COMPILATION_CACHE_DIR in the run folder), so
that only its first run compiles the step's shapes: the figure is the steady state.

In both, the first report (warm-up, tracing, the step-1 checkpoint of OpenNMT-tf) is dropped and
the median over the remaining reports is the run's figure (--statistic mean: their time-weighted
mean). The harness (bench/harness.py) alternates the runs, measures peak memory, and writes the
table's numbers and every report to runs/bench_results/<name>-<timestamp>.json.
"""

import copy
import json
import os
import shutil
import sys

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, BENCH_DIR)

import harness  # noqa: E402
import prepare  # noqa: E402

ROOT = harness.ROOT
LITE, ONMT = harness.LITE, harness.ONMT
LITE_ENTRY = os.path.join(ROOT, "run.py")


def lite_side(dtype, backend="tensorflow"):
    """The side name of opennmt-lite running in `dtype`, e.g. "opennmt-lite (float32)", or on
    Keras' JAX backend "opennmt-lite JAX (float32)"."""
    return f"{LITE}{' JAX' if backend == 'jax' else ''} ({dtype})"


def common_config(benchmark, cache_dir, steps, summary_steps):
    """The benchmark's config with absolute data paths and the run length; no model_dir."""
    common = copy.deepcopy(benchmark)
    common["data"] = {key: os.path.join(cache_dir, value) for key, value in common["data"].items()}
    common["train"]["max_step"] = int(steps)
    common["train"]["save_summary_steps"] = int(summary_steps)
    return common


def lite_config(common, dtype, lite_extra=""):
    """`common` + train.mixed_precision of `dtype` + the --lite-extra overrides."""
    config = copy.deepcopy(common)
    config["train"]["mixed_precision"] = harness.DTYPE_TO_MIXED_PRECISION[dtype]
    for key, value in harness.parse_overrides(lite_extra):
        harness.set_dotted(config, key, value)
    return config


def read_lite_metrics(model_dir, drop_first):
    """Reports of `<model_dir>/metrics.jsonl` -> a result dict like onmt_train.py's."""
    path = os.path.join(model_dir, "metrics.jsonl")
    try:
        with open(path, encoding="utf-8") as stream:
            reports = [json.loads(line) for line in stream if line.strip()]
    except OSError as error:
        return dict(error=f"cannot read {path}: {error}")
    except ValueError as error:
        return dict(error=f"{path}: invalid JSON line: {error}")
    reports.sort(key=lambda r: r.get("step", 0))
    if not reports:
        return dict(error=f"{path} holds no report")
    missing = [k for k in ("step", "tokens_per_sec") if k not in reports[0]]
    if missing:
        return dict(error=f"{path}: reports lack {missing}")
    for index, report in enumerate(reports):
        report["kept"] = index >= drop_first
        # steps/s: 1 / seconds_per_step, as OpenNMT-tf reports it.
        if report.get("seconds_per_step"):
            report["steps_per_sec"] = 1.0 / report["seconds_per_step"]
    kept = [r for r in reports if r["kept"]]
    result = dict(framework=LITE, reports=reports, dropped_reports=len(reports) - len(kept),
                  steps=reports[-1]["step"])
    if not kept:
        result.update(tokens_per_sec=None,
                      error=f"no report left after dropping {drop_first} (got {len(reports)})")
        return result
    for key in ("tokens_per_sec", "source_tokens_per_sec", "target_tokens_per_sec",
                "steps_per_sec"):
        result[key] = harness.median(r.get(key) for r in kept)
    return result


def apply_time_weighted_mean(result):
    """Replaces the run's tokens/s and steps/s (medians of its kept reports) by the time-weighted
    means over the kept reports: sum(rate * interval) / sum(interval), the interval of a report
    being the time since the previous report (`elapsed`). The medians stay under *_median.

    Why: a median of 5-step reports ignores the few reports where OpenNMT-tf flushes its
    partly filled length buckets at the end of an epoch; over a run of several epochs the mean is
    what training really gets."""
    reports = result["reports"]
    weighted = {key: 0.0 for key in ("tokens_per_sec", "steps_per_sec")}
    total = 0.0
    for previous, report in zip(reports, reports[1:]):
        interval = report.get("elapsed", 0) - previous.get("elapsed", 0)
        if not report.get("kept") or interval <= 0:
            continue
        total += interval
        for key in weighted:
            weighted[key] += report[key] * interval
    if total > 0:
        for key, value in weighted.items():
            result[key + "_median"] = result.get(key)
            result[key] = value / total


def training_side(name, config, run_dir, drop_first=1, statistic="median",
                  keep_model_dirs=False, peak_dtype="float32", onmt_python=None,
                  lite_entry=LITE_ENTRY, backend="tensorflow"):
    """A harness.Side that trains `config` (a dict; each run gets its own model_dir) from
    scratch: OpenNMT-tf (bench/onmt_train.py) with `onmt_python`, else opennmt-lite's
    `lite_entry` (this checkout's run.py, or another checkout's: --lite-baseline) on Keras'
    `backend`."""
    label = harness.file_label(name)

    def model_dir(index):
        return os.path.join(run_dir, "model_dirs", f"{label}-{index}")

    def command(index):
        path = os.path.join(run_dir, "configs", f"{label}-run{index}.yml")
        harness.dump_yaml(dict(config, model_dir=model_dir(index)), path)
        if onmt_python:
            return [onmt_python, os.path.join(BENCH_DIR, "onmt_train.py"), "--config", path,
                    "--drop-first", str(drop_first), "--work-dir", model_dir(index) + "-work"]
        argv = [sys.executable, lite_entry, "train", "--config", path]
        if backend == "jax":
            cache = os.path.join(run_dir, "jax_cache")
            argv = ["env", "KERAS_BACKEND=jax", f"JAX_COMPILATION_CACHE_DIR={cache}"] + argv
        return argv

    def finish(record, index):
        if not onmt_python:  # opennmt-lite writes its reports to metrics.jsonl
            record["result"] = read_lite_metrics(model_dir(index), drop_first)
        if statistic == "mean" and (record["result"] or {}).get("reports"):
            apply_time_weighted_mean(record["result"])
        if not keep_model_dirs:
            shutil.rmtree(model_dir(index), ignore_errors=True)
            shutil.rmtree(model_dir(index) + "-work", ignore_errors=True)

    return harness.Side(name, command, peak_dtype, finish)


def flops_per_token(model, stats):
    """harness.training_flops_per_token of the benchmark model on the prepared corpus."""
    lengths = stats["train"]["after_length_filter"]
    return harness.training_flops_per_token(
        model["num_layers"], model["num_units"], model["ffn_inner_dim"],
        stats["sentencepiece"]["de"]["vocabulary_size_with_oov"],
        lengths["mean_source_length"], lengths["mean_target_length"],
        lengths["source_attention_span"], lengths["target_attention_span"],
        lengths["cross_attention_span"], relative=bool(model.get("maximum_relative_position")),
    )


def main(argv=None):
    parser = harness.parser(__doc__, name="train", timeout=3600)
    parser.add_argument("--steps", type=int, default=60, help="training steps per run")
    parser.add_argument("--summary-steps", type=int, default=None,
                        help="steps per report (default: the benchmark's, 5)")
    parser.add_argument("--drop-first", type=int, default=1, help="reports dropped per run")
    parser.add_argument("--dtype", choices=sorted(harness.DTYPE_TO_MIXED_PRECISION), nargs="+",
                        default=["float32"],
                        help="opennmt-lite compute dtype(s), each a side of its own, e.g. "
                             "--dtype float32 mixed_bfloat16 (OpenNMT-tf always runs float32)")
    parser.add_argument("--lite-extra", default="",
                        help='opennmt-lite config overrides, e.g. "train.jit_compile=true"')
    parser.add_argument("--keep-model-dirs", action="store_true")
    harness.add_lite_baseline_argument(parser)
    parser.add_argument("--backend", choices=("tensorflow", "jax"), nargs="+",
                        default=["tensorflow"],
                        help="Keras backend(s) of the opennmt-lite sides, each a side of its own "
                             "per --dtype (e.g. --backend tensorflow jax)")
    parser.add_argument(
        "--statistic", choices=("median", "mean"), default="median",
        help="per run: median of the kept reports, or their time-weighted mean (total tokens / "
             "total time; use with --steps covering whole epochs, see bench/README.md)")
    args = parser.parse_args(argv)

    benchmark = harness.load_yaml(args.benchmark)
    args.summary_steps = args.summary_steps or benchmark["train"].get("save_summary_steps", 5)
    args.dtype = list(dict.fromkeys(args.dtype))  # each dtype once, in the given order
    args.backend = list(dict.fromkeys(args.backend))
    if args.steps // args.summary_steps <= args.drop_first:
        parser.error(f"--steps {args.steps} gives {args.steps // args.summary_steps} report(s) "
                     f"of {args.summary_steps} steps: nothing left after dropping "
                     f"{args.drop_first}")
    # A benchmark may ask for other data preparation (e.g. the sample's 4 000-piece vocabularies);
    # it then gets a cache of its own beside the default one.
    prepare_overrides = benchmark.pop("prepare", None) or {}
    if prepare_overrides and args.cache_dir == prepare.DEFAULT_CACHE_DIR:
        name = os.path.splitext(os.path.basename(args.benchmark))[0]
        args.cache_dir = os.path.join(prepare.DEFAULT_CACHE_DIR, name)
    session = harness.Session(args.name, args.cache_dir, **prepare_overrides)
    stats = prepare.read_stats(args.cache_dir)

    common = common_config(benchmark, session.paths["cache_dir"], args.steps, args.summary_steps)
    configs = {ONMT: common} if args.only != "lite" else {}
    config_dir = os.path.join(session.run_dir, "configs")
    harness.dump_yaml(common, os.path.join(config_dir, "common.yml"))
    harness.dump_yaml(dict(common, model_dir=None), os.path.join(config_dir, "onmt.yml"))
    sides = []
    options = dict(run_dir=session.run_dir, drop_first=args.drop_first,
                   statistic=args.statistic, keep_model_dirs=args.keep_model_dirs)
    baselines = []
    for dtype in args.dtype if args.only != "onmt" else []:
        config = lite_config(common, dtype, args.lite_extra)
        configs[lite_side(dtype)] = config
        harness.dump_yaml(dict(config, model_dir=None),
                          os.path.join(config_dir, f"lite-{dtype}.yml"))
        peak_dtype = "bfloat16" if "bfloat16" in dtype else "float32"
        for backend in args.backend:
            sides.append(training_side(lite_side(dtype, backend), config, peak_dtype=peak_dtype,
                                       backend=backend, **options))
            if backend == "jax":
                configs[lite_side(dtype, backend)] = config
        if args.only == "lite" and "jax" in args.backend and "tensorflow" in args.backend:
            baselines.append(lite_side(dtype))
        if args.lite_baseline:
            name = harness.lite_checkout_side(args.lite_baseline, dtype)
            configs[name] = config
            entry = os.path.join(os.path.abspath(args.lite_baseline), "run.py")
            sides.append(training_side(name, config, peak_dtype=peak_dtype, lite_entry=entry,
                                       **options))
            baselines.append(name)
    if args.only != "lite":
        sides.append(training_side(ONMT, common, onmt_python=session.ensure_onmt(True),
                                   **options))
    baseline = baselines[0] if args.only == "lite" and baselines else ONMT

    flops = flops_per_token(benchmark["model"], stats)
    # The peak MFU is computed against: the best of square products and of the model's own
    # products on one batch (train.batch_size tokens per side).
    shapes = harness.model_matmul_shapes(
        benchmark["model"], benchmark["train"]["batch_size"],
        stats["sentencepiece"]["de"]["vocabulary_size_with_oov"])
    peak, peak_table = ({}, {}) if args.no_mfu else harness.measure_peak_flops(
        ("float32", "bfloat16"), shapes)
    runs, summary = harness.compare(
        sides, args.runs, ["tokens_per_sec", "steps_per_sec"], session.run_dir,
        timeout=args.timeout, baseline=baseline, flops_per_token=flops, peak=peak)
    print()
    print(render_table(summary, peak, flops, args, baseline, peak_table))
    session.finish(dict(benchmark="train", arguments=vars(args), configs=configs,
                        peak_matmul_flops=peak, peak_matmul_shapes=peak_table,
                        training_flops_per_token=flops,
                        data_stats=stats, summary=summary, runs=runs))
    return 0


def render_table(summary, peak, flops, args, baseline=ONMT, peak_table=None):
    headers = ["framework", "runs ok", "tokens/s", "steps/s", "peak RSS GB", "MFU", "per run"]
    rows = [[side, f"{s['ok']}/{s['runs']}", harness.fmt(s["tokens_per_sec"]),
             harness.fmt(s["steps_per_sec"], ".3f"), harness.gb(s["peak_rss_bytes"]),
             harness.percent(s["mfu"]),
             " ".join(harness.fmt(v) for v in s["tokens_per_sec_per_run"])]
            for side, s in summary.items()]
    for side, s in summary.items():
        if "ratio" in s:
            r = s["ratio"]
            rows.append([f"ratio {side} / {baseline}", "", harness.fmt(r["tokens_per_sec"], ".3f"),
                         harness.fmt(r["steps_per_sec"], ".3f"), harness.fmt(r["peak_rss"], ".3f"),
                         "", "paired median "
                         + harness.fmt(r["tokens_per_sec_paired_median"], ".3f")])
    statistic = "time-weighted mean" if args.statistic == "mean" else "median"
    lines = [f"Training: {args.steps} steps per run, report every {args.summary_steps} steps, "
             f"first {args.drop_first} report(s) dropped, medians over runs (each run: "
             f"{statistic} over its reports)", harness.format_table(headers, rows)]
    if peak:
        lines.append(f"MFU = tokens/s x {flops / 1e6:.1f} MFLOP/token (estimate, harness."
                     f"training_flops_per_token) / matmul peak {harness.peak_text(peak, peak_table)}"
                     " (best of square and model-shaped products)")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
