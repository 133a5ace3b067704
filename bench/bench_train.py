"""Training throughput and memory, opennmt-lite vs OpenNMT-tf 2.32, side by side.

    python bench/bench_train.py [--runs 3] [--steps 60] [--only onmt|lite]
                                [--dtype float32 [mixed_bfloat16]] [--lite-extra "key=value ..."]
                                [--benchmark bench/configs/sample_benchmark.yml]

1. Prepares the data once (bench/prepare.py, cached in runs/bench_cache/).
2. Renders both configs from bench/configs/train_benchmark.yml (the performance issue's config;
   --benchmark bench/configs/sample_benchmark.yml is configs/sample.yml) (same data files, vocabularies,
   model and hyper-parameters; each lite config adds `train.mixed_precision` from one --dtype and
   the --lite-extra overrides). They are saved in runs/bench_results/<name>-<timestamp>/configs/.
3. Ensures the OpenNMT-tf venv (bench/onmt_env.py; ONMT_PYTHON=... reuses an interpreter).
4. Measures the matmul peak of the machine in TensorFlow 2.21 (for MFU; --no-mfu skips it).
5. Alternates runs: opennmt-lite (one per --dtype), OpenNMT-tf, opennmt-lite, OpenNMT-tf, ...
   each in a fresh process with a fresh model_dir, its peak memory measured by the harness.
6. Prints the table (median tokens/s, steps/s, peak RSS, MFU, ratios lite / OpenNMT-tf) and writes
   every number to runs/bench_results/<name>-<timestamp>.json (logs in the folder of that name).

OpenNMT-tf side: bench/onmt_train.py (onmt-main ... --auto_config train, its log reports parsed).
opennmt-lite side: `python run.py train --config <lite.yml>`; its trainer appends one JSON object
per report to <model_dir>/metrics.jsonl (see bench/README.md for the exact contract). In both,
the first report (warm-up, tracing, the step-1 checkpoint of OpenNMT-tf) is dropped and the
median over the remaining reports is the run's figure.
"""

import argparse
import copy
import json
import os
import shutil
import sys

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, BENCH_DIR)

import harness  # noqa: E402
import onmt_env  # noqa: E402
import prepare  # noqa: E402

ROOT = harness.ROOT
DEFAULT_BENCHMARK = os.path.join(BENCH_DIR, "configs", "train_benchmark.yml")
LITE, ONMT = "opennmt-lite", "opennmt-tf"
LITE_ENTRY = os.path.join(ROOT, "run.py")
DTYPE_TO_MIXED_PRECISION = {"float32": False, "mixed_bfloat16": "bfloat16"}


def lite_side(dtype):
    """The side name of opennmt-lite running in `dtype`, e.g. "opennmt-lite (float32)"."""
    return f"{LITE} ({dtype})"


def render_configs(benchmark, cache_dir, steps, summary_steps, dtypes, lite_extra):
    """(common, onmt, {lite side: lite config}) config dicts; `model_dir` is filled in per run.

    All start from the same `common` (model, data with absolute cache paths, params, train).
    OpenNMT-tf: common as is (run with --auto_config, fp32). opennmt-lite, one per dtype: common
    plus train.mixed_precision (False for float32, "bfloat16" for mixed_bfloat16) and the
    --lite-extra overrides.
    """
    common = copy.deepcopy(benchmark)
    common["data"] = {key: os.path.join(cache_dir, value) for key, value in common["data"].items()}
    common["train"]["max_step"] = int(steps)
    common["train"]["save_summary_steps"] = int(summary_steps)
    onmt = dict(model_dir=None, **copy.deepcopy(common))
    lites = {}
    for dtype in dtypes:
        lite = dict(model_dir=None, **copy.deepcopy(common))
        lite["train"]["mixed_precision"] = DTYPE_TO_MIXED_PRECISION[dtype]
        for key, value in harness.parse_overrides(lite_extra):
            harness.set_dotted(lite, key, value)
        lites[lite_side(dtype)] = lite
    return common, onmt, lites


def read_lite_metrics(model_dir, drop_first):
    """Reports of `<model_dir>/metrics.jsonl` -> a result dict like onmt_train.py's."""
    path = os.path.join(model_dir, "metrics.jsonl")
    reports = []
    try:
        with open(path, encoding="utf-8") as stream:
            for line in stream:
                line = line.strip()
                if line:
                    reports.append(json.loads(line))
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
    first_steps = {r["step"] for r in reports[:drop_first]}
    kept = [r for r in reports if r["step"] not in first_steps]
    # steps/s: 1 / seconds_per_step when reported, else between consecutive reports from the
    # cumulative `elapsed` (seconds since the start of training).
    for report in reports:
        if report.get("seconds_per_step"):
            report.setdefault("steps_per_sec", 1.0 / report["seconds_per_step"])
    for previous, report in zip(reports, reports[1:]):
        interval = (report.get("elapsed") or 0) - (previous.get("elapsed") or 0)
        if "elapsed" in report and "elapsed" in previous and interval > 0:
            report.setdefault("steps_per_sec", (report["step"] - previous["step"]) / interval)
    for report in reports:
        report["kept"] = report in kept
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


def lite_unavailable_reason():
    if not os.path.exists(LITE_ENTRY):
        return f"{os.path.relpath(LITE_ENTRY, ROOT)} does not exist yet"
    return None


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3, help="runs per framework (alternated)")
    parser.add_argument("--steps", type=int, default=60, help="training steps per run")
    parser.add_argument("--summary-steps", type=int, default=None,
                        help="steps per report (default: the benchmark's, 5)")
    parser.add_argument("--drop-first", type=int, default=1, help="reports dropped per run")
    parser.add_argument("--only", choices=("onmt", "lite"), default=None)
    parser.add_argument("--dtype", choices=sorted(DTYPE_TO_MIXED_PRECISION), nargs="+",
                        default=["float32"],
                        help="opennmt-lite compute dtype(s), each a side of its own, e.g. "
                             "--dtype float32 mixed_bfloat16 (OpenNMT-tf always runs float32)")
    parser.add_argument("--lite-extra", default="",
                        help='opennmt-lite config overrides, e.g. "train.jit_compile=true"')
    parser.add_argument("--benchmark", default=DEFAULT_BENCHMARK)
    parser.add_argument("--cache-dir", default=prepare.DEFAULT_CACHE_DIR)
    parser.add_argument("--name", default="train", help="results name prefix")
    parser.add_argument("--timeout", type=float, default=3600, help="seconds per run")
    parser.add_argument("--no-mfu", action="store_true", help="skip the matmul peak measurement")
    parser.add_argument("--keep-model-dirs", action="store_true")
    parser.add_argument(
        "--statistic", choices=("median", "mean"), default="median",
        help="per run: median of the kept reports, or their time-weighted mean (total tokens / "
             "total time; use with --steps covering whole epochs, see bench/README.md)")
    args = parser.parse_args(argv)

    stamp = harness.timestamp()
    warning = harness.warn_if_busy()
    benchmark = harness.load_yaml(args.benchmark)
    # A benchmark may ask for other data preparation (e.g. the sample's 4 000-piece vocabularies);
    # it then gets a cache of its own beside the default one.
    prepare_overrides = benchmark.pop("prepare", None) or {}
    if prepare_overrides and args.cache_dir == prepare.DEFAULT_CACHE_DIR:
        name = os.path.splitext(os.path.basename(args.benchmark))[0]
        args.cache_dir = os.path.join(prepare.DEFAULT_CACHE_DIR, name)
    paths = prepare.prepare(args.cache_dir, **prepare_overrides)
    stats = prepare.read_stats(args.cache_dir)
    summary_steps = args.summary_steps or benchmark["train"].get("save_summary_steps", 5)
    args.summary_steps = summary_steps
    args.dtype = list(dict.fromkeys(args.dtype))  # each dtype once, in the given order
    common, onmt_config, lite_configs = render_configs(
        benchmark, paths["cache_dir"], args.steps, summary_steps, args.dtype, args.lite_extra
    )
    if args.steps // summary_steps <= args.drop_first:
        parser.error(f"--steps {args.steps} gives {args.steps // summary_steps} report(s) of "
                     f"{summary_steps} steps: nothing left after dropping {args.drop_first}")

    run_dir = harness.run_directory(args.name, stamp)
    config_dir = os.path.join(run_dir, "configs")
    os.makedirs(config_dir, exist_ok=True)
    harness.dump_yaml(common, os.path.join(config_dir, "common.yml"))
    harness.dump_yaml(onmt_config, os.path.join(config_dir, "onmt.yml"))
    for dtype, lite_config in zip(args.dtype, lite_configs.values()):
        harness.dump_yaml(lite_config, os.path.join(config_dir, f"lite-{dtype}.yml"))

    lite_sides = list(lite_configs)
    sides = {None: lite_sides + [ONMT], "lite": lite_sides, "onmt": [ONMT]}[args.only]
    skipped = {}
    onmt_python = None
    if ONMT in sides:
        onmt_python = onmt_env.ensure_onmt_python()
    reason = lite_unavailable_reason()
    if reason and set(lite_sides) & set(sides):
        for side in lite_sides:
            skipped[side] = reason
        harness.log(f"opennmt-lite sides SKIPPED: {reason} (the trainer `python run.py train "
                    "--config <yaml>` writing <model_dir>/metrics.jsonl is not available)")
        sides = [side for side in sides if side not in lite_sides]
    if not sides:
        harness.log("nothing to run")
        return 1

    model = benchmark["model"]
    target_vocab = stats["sentencepiece"]["de"]["vocabulary_size_with_oov"]
    lengths = stats["train"]["after_length_filter"]
    flops_per_token = harness.training_flops_per_token(
        model["num_layers"], model["num_units"], model["ffn_inner_dim"], target_vocab,
        lengths["mean_source_length"], lengths["mean_target_length"],
        lengths["source_attention_span"], lengths["target_attention_span"],
        lengths["cross_attention_span"], relative=bool(model.get("maximum_relative_position")),
    )
    peak = {}
    if not args.no_mfu:
        harness.log("measuring the matmul peak (TensorFlow %s)" % "2.21")
        peak = harness.measure_peak_flops(("float32", "bfloat16"))
    # MFU of each side against the peak of the dtype its matmuls run in.
    peak_dtype = {ONMT: "float32"}
    for side, config in lite_configs.items():
        bf16 = config["train"].get("mixed_precision") == "bfloat16"
        peak_dtype[side] = "bfloat16" if bf16 else "float32"
    file_label = {ONMT: ONMT, **{lite_side(d): f"{LITE}-{d}" for d in args.dtype}}

    lite_failed = set()

    def run_one(side, index):
        label = file_label[side]
        model_dir = os.path.join(run_dir, "model_dirs", f"{label}-{index}")
        log_prefix = os.path.join(run_dir, f"run{index}-{label}")
        if side in lite_failed:
            return dict(skipped="an earlier run of this side failed", result=None)
        config = copy.deepcopy(onmt_config if side == ONMT else lite_configs[side])
        config["model_dir"] = model_dir
        config_path = os.path.join(config_dir, f"{label}-run{index}.yml")
        harness.dump_yaml(config, config_path)
        if side == ONMT:
            cmd = [onmt_python, os.path.join(BENCH_DIR, "onmt_train.py"), "--config", config_path,
                   "--drop-first", str(args.drop_first),
                   "--work-dir", model_dir + "-work"]
        else:
            cmd = [sys.executable, LITE_ENTRY, "train", "--config", config_path]
        harness.log(f"run {index + 1}/{args.runs} {side}: {' '.join(cmd)}")
        record = harness.run_measured(cmd, log_prefix, timeout=args.timeout)
        if side != ONMT:
            record["result"] = read_lite_metrics(model_dir, args.drop_first)
        result = record["result"] or {}
        if args.statistic == "mean" and result.get("reports"):
            apply_time_weighted_mean(result)
        if record["returncode"] != 0 or result.get("error") or result.get("tokens_per_sec") is None:
            why = result.get("error") or f"exit status {record['returncode']}"
            record["error"] = why
            harness.log(f"  {side} run FAILED ({why}); stderr tail:\n"
                        + harness.tail(record["stderr"], 15))
            if side != ONMT:
                lite_failed.add(side)
        else:
            tokens = result["tokens_per_sec"]
            record["mfu"] = (tokens * flops_per_token / peak[peak_dtype[side]]
                             if peak.get(peak_dtype[side]) else None)
            harness.log(f"  {side}: {tokens:,.0f} tokens/s, peak RSS "
                        f"{record['peak_rss_bytes'] / harness.GB:.2f} GB, "
                        f"{record['wall_seconds']:.0f} s wall")
        if not args.keep_model_dirs:
            shutil.rmtree(model_dir, ignore_errors=True)
            shutil.rmtree(model_dir + "-work", ignore_errors=True)
        return record

    runs = harness.alternate(args.runs, sides, run_one)
    summary = summarize(runs, sides)
    if ONMT in summary:
        for side in lite_sides:
            if side in summary:
                summary.setdefault("ratios_over_onmt", {})[side] = ratios(runs, summary, side)

    print()
    print(render_table(summary, sides, peak, peak_dtype, flops_per_token, args, skipped))
    payload = dict(
        benchmark="train",
        timestamp=stamp,
        arguments=vars(args),
        machine=harness.machine_info(),
        load_warning=warning,
        onmt_versions=onmt_env.onmt_versions(onmt_python) if onmt_python else None,
        configs=dict(common=common, onmt=onmt_config, lite=lite_configs),
        peak_matmul_flops=peak,
        training_flops_per_token=flops_per_token,
        data_stats=stats,
        skipped=skipped,
        summary=summary,
        runs=runs,
    )
    path = harness.write_results(args.name, stamp, payload)
    print(f"\nresults: {os.path.relpath(path, ROOT)} (logs and configs: "
          f"{os.path.relpath(run_dir, ROOT)}/)")
    return 0


def summarize(runs, sides):
    summary = {}
    for side in sides:
        ok = [r for r in runs[side] if not r.get("error") and r.get("result")
              and r["result"].get("tokens_per_sec") is not None]
        summary[side] = dict(
            runs=len(runs[side]),
            ok=len(ok),
            tokens_per_sec=harness.median(r["result"]["tokens_per_sec"] for r in ok),
            steps_per_sec=harness.median(r["result"].get("steps_per_sec") for r in ok),
            peak_rss_bytes=harness.median(r["peak_rss_bytes"] for r in ok),
            mfu=harness.median(r.get("mfu") for r in ok),
            tokens_per_sec_per_run=[r["result"]["tokens_per_sec"] if r in ok else None
                                    for r in runs[side]],
        )
    return summary


def ratios(runs, summary, side):
    """`side` / OpenNMT-tf: of the medians, and the median of the per-round ratios."""
    lite, onmt = summary[side], summary[ONMT]
    paired = []
    for a, b in zip(runs[side], runs[ONMT]):
        ta = (a.get("result") or {}).get("tokens_per_sec") if not a.get("error") else None
        tb = (b.get("result") or {}).get("tokens_per_sec") if not b.get("error") else None
        paired.append(harness.ratio(ta, tb))
    return dict(
        tokens_per_sec=harness.ratio(lite["tokens_per_sec"], onmt["tokens_per_sec"]),
        tokens_per_sec_paired_median=harness.median(paired),
        steps_per_sec=harness.ratio(lite["steps_per_sec"], onmt["steps_per_sec"]),
        peak_rss=harness.ratio(lite["peak_rss_bytes"], onmt["peak_rss_bytes"]),
    )


def render_table(summary, sides, peak, peak_dtype, flops_per_token, args, skipped):
    headers = ["framework", "runs ok", "tokens/s", "steps/s", "peak RSS GB", "MFU", "per run"]
    rows = []
    for side in sides:
        s = summary[side]
        rows.append([
            side, f"{s['ok']}/{s['runs']}", harness.fmt(s["tokens_per_sec"]),
            harness.fmt(s["steps_per_sec"], ".3f"),
            harness.fmt(None if s["peak_rss_bytes"] is None else s["peak_rss_bytes"] / harness.GB,
                        ".2f"),
            harness.fmt(None if s["mfu"] is None else 100 * s["mfu"], ".1f") + (
                "%" if s["mfu"] is not None else ""),
            " ".join(harness.fmt(v) for v in s["tokens_per_sec_per_run"]),
        ])
    for side, r in summary.get("ratios_over_onmt", {}).items():
        rows.append([
            f"ratio {side} / {ONMT}", "", harness.fmt(r["tokens_per_sec"], ".3f"),
            harness.fmt(r["steps_per_sec"], ".3f"), harness.fmt(r["peak_rss"], ".3f"), "",
            "paired median " + harness.fmt(r["tokens_per_sec_paired_median"], ".3f"),
        ])
    lines = [f"Training: {args.steps} steps per run, report every "
             f"{args.summary_steps} steps, first {args.drop_first} report(s) dropped, "
             "medians over runs (each run: "
             + ("time-weighted mean" if args.statistic == "mean" else "median")
             + " over its reports)",
             harness.format_table(headers, rows)]
    if peak:
        lines.append("MFU = tokens/s x %.1f MFLOP/token (estimate, harness."
                     "training_flops_per_token) / matmul peak %s" % (
                         flops_per_token / 1e6,
                         ", ".join(f"{k} {v / 1e9:.0f} GFLOP/s" for k, v in peak.items() if v)))
    for side, reason in skipped.items():
        lines.append(f"{side}: SKIPPED ({reason})")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
