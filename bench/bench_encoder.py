"""Encoder inference throughput, opennmt-lite vs OpenNMT-tf 2.32, side by side.

    python bench/bench_encoder.py [--runs 3] [--repeats 5] [--only onmt|lite]
                                  [--lite-dtypes float32 mixed_bfloat16] [--jit]

1. Prepares the data once (bench/prepare.py): the batches of every training source sentence,
   sorted by length, <= 2 048 padded tokens each (runs/bench_cache/encoder_batches.npz).
2. Ensures the OpenNMT-tf venv and a freshly initialised OpenNMT-tf checkpoint of the benchmark
   model (runs/bench_cache/onmt_init_ckpt/, written once by bench/onmt_encoder.py); both sides
   load these very weights.
3. Alternates runs, each a fresh process: opennmt-lite float32, opennmt-lite mixed_bfloat16,
   OpenNMT-tf, opennmt-lite float32, ... Each run: one untimed warm-up pass over all batches,
   then --repeats timed passes; its figure is the median over passes of real (non-padding)
   source tokens / second.
4. Prints the table (median tokens/s over runs, peak RSS, MFU, ratios to OpenNMT-tf) and writes
   runs/bench_results/<name>-<timestamp>.json.

OpenNMT-tf side: bench/onmt_encoder.py (WordEmbedder + SelfAttentionEncoder under one
tf.function with a dynamic input signature, as its inference does).
opennmt-lite side (this file, `--worker lite`): `opennmt_lite.models.Transformer(**model)`,
`load_onmt_model(checkpoint, model)`, then `model.encode(ids, length, training=False)` under the
same kind of tf.function (`jit_compile=True` with --jit); for mixed_bfloat16,
`keras.config.set_dtype_policy("mixed_bfloat16")` is called before the model is built.
"""

import argparse
import json
import os
import resource
import statistics
import sys
import time

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, BENCH_DIR)

import harness  # noqa: E402
import prepare  # noqa: E402

ROOT = harness.ROOT
DEFAULT_BENCHMARK = os.path.join(BENCH_DIR, "configs", "train_benchmark.yml")
ONMT = "opennmt-tf"
LITE_DTYPES = ("float32", "mixed_bfloat16")
SKIPPED_EXIT = 3


def lite_side(dtype):
    return "opennmt-lite" if dtype == "float32" else f"opennmt-lite {dtype}"


# --------------------------------------------------------------------------------------------
# The opennmt-lite worker (a separate process, like the OpenNMT-tf side)


def lite_worker(args):
    """Measures opennmt-lite's encoder; prints one JSON line. Exit status 3 = not available."""
    sys.path.insert(0, ROOT)
    result = dict(framework="opennmt-lite", dtype=args.dtype, jit_compile=args.jit)
    try:
        import keras
        import numpy as np
        import tensorflow as tf
        from opennmt_lite.models import Transformer
        from opennmt_lite.onmt_compat import load_onmt_model
    except ImportError as error:
        result["skipped"] = f"opennmt-lite is not importable: {error}"
        print(json.dumps(result), flush=True)
        return SKIPPED_EXIT
    if not hasattr(Transformer, "encode"):
        result["skipped"] = "opennmt_lite.models.Transformer has no encode()"
        print(json.dumps(result), flush=True)
        return SKIPPED_EXIT
    import yaml

    with open(args.benchmark, encoding="utf-8") as stream:
        benchmark = yaml.safe_load(stream)
    stats = prepare.read_stats(args.cache_dir)
    if args.dtype != "float32":
        keras.config.set_dtype_policy(args.dtype)
    model = Transformer(
        stats["sentencepiece"]["en"]["vocabulary_size_with_oov"],
        stats["sentencepiece"]["de"]["vocabulary_size_with_oov"],
        **benchmark["model"],
    )
    prefix = load_onmt_model(args.checkpoint, model)

    batches = prepare.load_encoder_batches(
        args.batches or os.path.join(args.cache_dir, "encoder_batches.npz")
    )
    tensors = [(tf.constant(ids.astype(np.int32)), tf.constant(lengths.astype(np.int32)))
               for ids, lengths in batches]
    real_tokens = int(sum(int(lengths.sum()) for _, lengths in batches))
    padded_tokens = int(sum(int(ids.size) for ids, _ in batches))

    @tf.function(input_signature=(tf.TensorSpec([None, None], tf.int32),
                                  tf.TensorSpec([None], tf.int32)),
                 jit_compile=True if args.jit else None)
    def encode(ids, length):
        return model.encode(ids, length, training=False)

    def one_pass():
        start = time.perf_counter()
        outputs = None
        for ids, length in tensors:
            outputs = encode(ids, length)
        checksum = float(tf.reduce_sum(tf.cast(outputs[0, 0], tf.float32)))
        return time.perf_counter() - start, checksum

    warmup_seconds, _ = one_pass()
    passes = []
    for _ in range(args.repeats):
        seconds, checksum = one_pass()
        passes.append(dict(seconds=seconds, tokens_per_sec=real_tokens / seconds,
                           padded_tokens_per_sec=padded_tokens / seconds))
    result.update(
        tensorflow=tf.__version__,
        keras=keras.__version__,
        checkpoint=prefix,
        output_dtype=str(outputs_dtype(encode, tensors[0])),
        batches=len(batches),
        real_tokens=real_tokens,
        padded_tokens=padded_tokens,
        warmup_seconds=warmup_seconds,
        passes=passes,
        tokens_per_sec=statistics.median(p["tokens_per_sec"] for p in passes),
        padded_tokens_per_sec=statistics.median(p["padded_tokens_per_sec"] for p in passes),
        last_checksum=checksum,
        peak_rss_self_bytes=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
    )
    print(json.dumps(result), flush=True)
    return 0


def outputs_dtype(encode, batch):
    return encode(*batch).dtype.name


# --------------------------------------------------------------------------------------------
# The driver


def ensure_checkpoint(onmt_python, cache_dir, benchmark, run_dir):
    """The shared initial checkpoint (written once with OpenNMT-tf). Returns its directory."""
    directory = prepare.cache_paths(cache_dir)["encoder_checkpoint"]
    if os.path.exists(os.path.join(directory, "checkpoint")):
        return directory
    if onmt_python is None:
        raise SystemExit(f"no checkpoint in {directory}: it is written by the OpenNMT-tf side; "
                         "run once without --only lite")
    harness.log(f"writing the initial OpenNMT-tf checkpoint to {directory}")
    record = harness.run_measured(
        [onmt_python, os.path.join(BENCH_DIR, "onmt_encoder.py"), "--benchmark", benchmark,
         "--cache-dir", cache_dir, "--write-checkpoint", directory],
        os.path.join(run_dir, "write-checkpoint"),
    )
    if record["returncode"] != 0:
        raise SystemExit("writing the checkpoint failed:\n" + harness.tail(record["stderr"]))
    return directory


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3, help="runs per framework (alternated)")
    parser.add_argument("--repeats", type=int, default=5, help="timed passes per run")
    parser.add_argument("--only", choices=("onmt", "lite"), default=None)
    parser.add_argument("--lite-dtypes", nargs="+", choices=LITE_DTYPES, default=list(LITE_DTYPES),
                        help="opennmt-lite variants to run (OpenNMT-tf runs float32)")
    parser.add_argument("--jit", action="store_true",
                        help="opennmt-lite: tf.function(jit_compile=True)")
    parser.add_argument("--benchmark", default=DEFAULT_BENCHMARK)
    parser.add_argument("--cache-dir", default=prepare.DEFAULT_CACHE_DIR)
    parser.add_argument("--checkpoint", default=None,
                        help="OpenNMT-tf checkpoint to use on both sides (default: the shared "
                             "freshly initialised one in the cache)")
    parser.add_argument("--batches", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--name", default="encoder", help="results name prefix")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds per run")
    parser.add_argument("--no-mfu", action="store_true", help="skip the matmul peak measurement")
    parser.add_argument("--worker", choices=("lite",), help=argparse.SUPPRESS)
    parser.add_argument("--dtype", choices=LITE_DTYPES, default="float32", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker == "lite":
        return lite_worker(args)

    import onmt_env

    stamp = harness.timestamp()
    warning = harness.warn_if_busy()
    paths = prepare.prepare(args.cache_dir)
    stats = prepare.read_stats(args.cache_dir)
    run_dir = harness.run_directory(args.name, stamp)

    onmt_python = None
    if args.only != "lite":
        onmt_python = onmt_env.ensure_onmt_python()
    checkpoint = args.checkpoint or ensure_checkpoint(
        onmt_python, paths["cache_dir"], args.benchmark, run_dir
    )
    checkpoint = os.path.abspath(checkpoint)

    sides = []
    if args.only != "onmt":
        sides += [lite_side(dtype) for dtype in args.lite_dtypes]
    if args.only != "lite":
        sides.append(ONMT)
    dtype_of = {lite_side(d): d for d in LITE_DTYPES}
    dtype_of[ONMT] = "float32"

    import yaml

    with open(args.benchmark, encoding="utf-8") as stream:
        model = yaml.safe_load(stream)["model"]
    span = stats["encoder_batches"]["attention_span"]
    flops_per_token = harness.encoder_flops_per_token(
        model["num_layers"], model["num_units"], model["ffn_inner_dim"], span,
        relative=bool(model.get("maximum_relative_position")),
    )
    peak = {}
    if not args.no_mfu:
        harness.log("measuring the matmul peak (TensorFlow 2.21)")
        peak = harness.measure_peak_flops(("float32", "bfloat16"))
    peak_key = lambda side: "bfloat16" if dtype_of[side] == "mixed_bfloat16" else "float32"  # noqa: E731

    skipped = {}

    def run_one(side, index):
        if side in skipped:
            return dict(skipped=skipped[side], result=None)
        log_prefix = os.path.join(run_dir, f"run{index}-{side.replace(' ', '-')}")
        common = ["--benchmark", args.benchmark, "--cache-dir", paths["cache_dir"],
                  "--checkpoint", checkpoint, "--repeats", str(args.repeats)]
        if args.batches:
            common += ["--batches", args.batches]
        if side == ONMT:
            cmd = [onmt_python, os.path.join(BENCH_DIR, "onmt_encoder.py"), *common]
        else:
            cmd = [sys.executable, os.path.abspath(__file__), "--worker", "lite",
                   "--dtype", dtype_of[side], *common] + (["--jit"] if args.jit else [])
        harness.log(f"run {index + 1}/{args.runs} {side}")
        record = harness.run_measured(cmd, log_prefix, timeout=args.timeout)
        result = record["result"] or {}
        if result.get("skipped"):
            skipped[side] = result["skipped"]
            record["skipped"] = result["skipped"]
            harness.log(f"  {side} SKIPPED: {result['skipped']}")
        elif record["returncode"] != 0 or result.get("tokens_per_sec") is None:
            record["error"] = f"exit status {record['returncode']}"
            harness.log(f"  {side} run FAILED; stderr tail:\n" + harness.tail(record["stderr"], 15))
        else:
            tokens = result["tokens_per_sec"]
            record["mfu"] = (tokens * flops_per_token / peak[peak_key(side)]
                             if peak.get(peak_key(side)) else None)
            harness.log(f"  {side}: {tokens:,.0f} tokens/s, peak RSS "
                        f"{record['peak_rss_bytes'] / harness.GB:.2f} GB")
        return record

    runs = harness.alternate(args.runs, sides, run_one)
    summary = {}
    for side in sides:
        ok = [r for r in runs[side] if not r.get("error") and not r.get("skipped")
              and (r.get("result") or {}).get("tokens_per_sec") is not None]
        summary[side] = dict(
            runs=len(runs[side]), ok=len(ok),
            tokens_per_sec=harness.median(r["result"]["tokens_per_sec"] for r in ok),
            padded_tokens_per_sec=harness.median(r["result"]["padded_tokens_per_sec"] for r in ok),
            peak_rss_bytes=harness.median(r["peak_rss_bytes"] for r in ok),
            mfu=harness.median(r.get("mfu") for r in ok),
            tokens_per_sec_per_run=[(r.get("result") or {}).get("tokens_per_sec")
                                    if r in ok else None for r in runs[side]],
        )
    if ONMT in summary:
        base = summary[ONMT]
        for side in sides:
            if side == ONMT:
                continue
            paired = []
            for a, b in zip(runs[side], runs[ONMT]):
                ta = (a.get("result") or {}).get("tokens_per_sec") if not a.get("error") else None
                tb = (b.get("result") or {}).get("tokens_per_sec") if not b.get("error") else None
                paired.append(harness.ratio(ta, tb))
            summary[side]["ratio_to_onmt"] = dict(
                tokens_per_sec=harness.ratio(summary[side]["tokens_per_sec"],
                                             base["tokens_per_sec"]),
                tokens_per_sec_paired_median=harness.median(paired),
                peak_rss=harness.ratio(summary[side]["peak_rss_bytes"], base["peak_rss_bytes"]),
            )

    headers = ["framework", "runs ok", "tokens/s", "peak RSS GB", "MFU", "x onmt tok/s",
               "x onmt RSS", "per run"]
    rows = []
    for side in sides:
        s = summary[side]
        r = s.get("ratio_to_onmt") or {}
        label = side + (" (jit)" if args.jit and side != ONMT else "")
        rows.append([
            label, f"{s['ok']}/{s['runs']}", harness.fmt(s["tokens_per_sec"]),
            harness.fmt(None if s["peak_rss_bytes"] is None else s["peak_rss_bytes"] / harness.GB,
                        ".2f"),
            (harness.fmt(100 * s["mfu"], ".1f") + "%") if s["mfu"] is not None else "-",
            harness.fmt(r.get("tokens_per_sec"), ".3f"), harness.fmt(r.get("peak_rss"), ".3f"),
            " ".join(harness.fmt(v) for v in s["tokens_per_sec_per_run"]),
        ])
    batches = stats["encoder_batches"]
    print()
    print(f"Encoder inference: {batches['num_batches']} batches of <= "
          f"{batches['max_batch_tokens']} padded tokens ({batches['real_tokens']:,} real source "
          f"tokens, {100 * batches['padding_fraction']:.1f}% padding), warm-up pass + "
          f"{args.repeats} timed passes per run, medians")
    print(harness.format_table(headers, rows))
    if peak:
        print("MFU = tokens/s x %.2f MFLOP/token (estimate, harness.encoder_flops_per_token) / "
              "matmul peak %s" % (flops_per_token / 1e6, ", ".join(
                  f"{k} {v / 1e9:.0f} GFLOP/s" for k, v in peak.items() if v)))
    for side, reason in skipped.items():
        print(f"{side}: SKIPPED ({reason})")
    payload = dict(
        benchmark="encoder",
        timestamp=stamp,
        arguments=vars(args),
        machine=harness.machine_info(),
        load_warning=warning,
        onmt_versions=onmt_env.onmt_versions(onmt_python) if onmt_python else None,
        checkpoint=checkpoint,
        peak_matmul_flops=peak,
        encoder_flops_per_token=flops_per_token,
        data_stats=stats,
        skipped=skipped,
        summary=summary,
        runs=runs,
    )
    path = harness.write_results(args.name, stamp, payload)
    print(f"\nresults: {os.path.relpath(path, ROOT)} (logs: {os.path.relpath(run_dir, ROOT)}/)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
