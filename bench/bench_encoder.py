"""Encoder inference throughput, opennmt-lite vs OpenNMT-tf 2.32, side by side.

    python bench/bench_encoder.py [--runs 3] [--repeats 5] [--only onmt|lite]
                                  [--lite-dtypes float32 mixed_bfloat16] [--jit]

The measurement: the batches of every training source sentence, sorted by length, <= 2 048
padded tokens each (bench/prepare.py, runs/bench_cache/encoder_batches.npz), encoded with the
weights of a freshly initialised OpenNMT-tf checkpoint of the benchmark model
(runs/bench_cache/onmt_init_ckpt/, written once by bench/onmt_encoder.py), which both sides load.
Each run (a fresh process): one untimed warm-up pass over all batches, then --repeats timed
passes; its figure is the median over passes of real (non-padding) source tokens / second. The
harness alternates opennmt-lite float32, opennmt-lite mixed_bfloat16, OpenNMT-tf, ...

OpenNMT-tf side: bench/onmt_encoder.py (WordEmbedder + SelfAttentionEncoder under one
tf.function with a dynamic input signature, as its inference does).
opennmt-lite side (this file, `--worker lite`): `Transformer(ModelHyperparameters(**model), ...)`,
`load_onmt_model(checkpoint, model)`, then `model.encode(ids, length, training=False)` under the
same kind of tf.function (`jit_compile=True` with --jit); for a mixed dtype,
`keras.config.set_dtype_policy(dtype)` is called before the model is built. Without
--checkpoint the worker uses seeded random weights (bench/gpu.py).
"""

import os
import sys

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, BENCH_DIR)

import harness  # noqa: E402
import prepare  # noqa: E402

ROOT = harness.ROOT
LITE, ONMT = harness.LITE, harness.ONMT
LITE_DTYPES = ("float32", "mixed_bfloat16")


def lite_side(dtype):
    return LITE if dtype == "float32" else f"{LITE} {dtype}"


def lite_worker(args):
    """Measures opennmt-lite's encoder; prints one JSON line."""
    import numpy as np
    import tensorflow as tf

    stats = prepare.read_stats(args.cache_dir)
    model, prefix = harness.lite_model(
        harness.load_yaml(args.benchmark)["model"],
        stats["sentencepiece"]["en"]["vocabulary_size_with_oov"],
        stats["sentencepiece"]["de"]["vocabulary_size_with_oov"],
        dtype=args.dtype, checkpoint=args.checkpoint)
    batches = prepare.load_batches(args.batches or prepare.cache_paths(args.cache_dir)[
        "encoder_batches"])[: args.max_batches]
    tensors = [(tf.constant(b[0].astype(np.int32)), tf.constant(b[1].astype(np.int32)))
               for b in batches]
    real_tokens = int(sum(int(b[1].sum()) for b in batches))
    padded_tokens = int(sum(int(b[0].size) for b in batches))

    @tf.function(input_signature=(tf.TensorSpec([None, None], tf.int32),
                                  tf.TensorSpec([None], tf.int32)),
                 jit_compile=True if args.jit else None)
    def encode(ids, length):
        return model.encode(ids, length, training=False)

    def one_pass():
        for ids, length in tensors:
            outputs = encode(ids, length)
        # Fetching a value of the last output waits for the whole pass.
        return float(tf.reduce_sum(tf.cast(outputs[0, 0], tf.float32))), outputs.dtype.name

    warmup, seconds, (checksum, output_dtype) = harness.timed_passes(one_pass, args.repeats)
    passes = [dict(seconds=s, tokens_per_sec=real_tokens / s,
                   padded_tokens_per_sec=padded_tokens / s) for s in seconds]
    harness.print_worker_result(dict(
        framework=LITE, dtype=args.dtype, jit_compile=args.jit, checkpoint=prefix,
        output_dtype=output_dtype, batches=len(batches), real_tokens=real_tokens,
        padded_tokens=padded_tokens, warmup_seconds=warmup, passes=passes,
        tokens_per_sec=harness.median(p["tokens_per_sec"] for p in passes),
        padded_tokens_per_sec=harness.median(p["padded_tokens_per_sec"] for p in passes),
        last_checksum=checksum))
    return 0


def ensure_checkpoint(session, benchmark):
    """The shared initial checkpoint (written once with OpenNMT-tf). Returns its directory."""
    onmt_python, cache_dir = session.onmt_python, session.paths["cache_dir"]
    directory = session.paths["encoder_checkpoint"]
    if os.path.exists(os.path.join(directory, "checkpoint")):
        return directory
    if onmt_python is None:
        raise SystemExit(f"no checkpoint in {directory}: it is written by the OpenNMT-tf side; "
                         "run once without --only lite")
    harness.log(f"writing the initial OpenNMT-tf checkpoint to {directory}")
    record = harness.run_measured(
        [onmt_python, os.path.join(BENCH_DIR, "onmt_encoder.py"), "--benchmark", benchmark,
         "--cache-dir", cache_dir, "--write-checkpoint", directory],
        os.path.join(session.run_dir, "write-checkpoint"),
    )
    if record["returncode"] != 0:
        raise SystemExit("writing the checkpoint failed:\n" + harness.tail(record["stderr"]))
    return directory


def main(argv=None):
    parser = harness.parser(__doc__, name="encoder", timeout=1800)
    harness.add_worker_arguments(parser, repeats=5, checkpoint_help=(
        "OpenNMT-tf checkpoint to use on both sides (default: the shared freshly initialised "
        "one in the cache)"))
    parser.add_argument("--lite-dtypes", nargs="+", choices=LITE_DTYPES, default=list(LITE_DTYPES),
                        help="opennmt-lite variants to run (OpenNMT-tf runs float32)")
    parser.add_argument("--jit", action="store_true",
                        help="opennmt-lite: tf.function(jit_compile=True)")
    harness.add_lite_baseline_argument(parser)
    args = parser.parse_args(argv)
    if args.worker == "lite":
        return lite_worker(args)

    session = harness.Session(args.name, args.cache_dir)
    stats = prepare.read_stats(args.cache_dir)
    onmt_python = session.ensure_onmt(required=args.only != "lite")
    checkpoint = os.path.abspath(args.checkpoint or ensure_checkpoint(session, args.benchmark))
    common = ["--benchmark", args.benchmark, "--cache-dir", session.paths["cache_dir"],
              "--checkpoint", checkpoint, "--repeats", str(args.repeats)]
    common += ["--batches", args.batches] if args.batches else []
    sides = []
    # (checkout, worker script): this one, and --lite-baseline's own worker
    checkouts = [(None, os.path.abspath(__file__))]
    if args.lite_baseline:
        checkouts.append((args.lite_baseline, os.path.join(
            os.path.abspath(args.lite_baseline), "bench", "bench_encoder.py")))
    for dtype in args.lite_dtypes if args.only != "onmt" else []:
        for checkout, worker in checkouts:
            command = [sys.executable, worker, "--worker", "lite",
                       "--dtype", dtype, *common] + (["--jit"] if args.jit else [])
            name = lite_side(dtype) if checkout is None else harness.lite_checkout_side(
                checkout, dtype)
            sides.append(harness.Side(name, lambda index, c=command: c,
                                      "bfloat16" if dtype == "mixed_bfloat16" else "float32"))
    if args.only != "lite":
        command = [onmt_python, os.path.join(BENCH_DIR, "onmt_encoder.py"), *common]
        sides.append(harness.Side(ONMT, lambda index: command))

    model = harness.load_yaml(args.benchmark)["model"]
    flops = harness.encoder_flops_per_token(
        model["num_layers"], model["num_units"], model["ffn_inner_dim"],
        stats["encoder_batches"]["attention_span"],
        relative=bool(model.get("maximum_relative_position")))
    # The peak: the best of square products and of the model's own on a 2048-token batch (the
    # encoder's products: no output layer, so the vocabulary shape is the FFN's).
    shapes = harness.model_matmul_shapes(model, 2048, model["ffn_inner_dim"])
    peak, peak_table = ({}, {}) if args.no_mfu else harness.measure_peak_flops(
        ("float32", "bfloat16"), shapes)
    baseline = ONMT
    if args.only == "lite" and args.lite_baseline:
        baseline = harness.lite_checkout_side(args.lite_baseline, args.lite_dtypes[0])
    runs, summary = harness.compare(
        sides, args.runs, ["tokens_per_sec", "padded_tokens_per_sec"], session.run_dir,
        timeout=args.timeout, baseline=baseline, flops_per_token=flops, peak=peak)

    versus = "onmt" if baseline == ONMT else "base"
    headers = ["framework", "runs ok", "tokens/s", "peak RSS GB", "MFU", f"x {versus} tok/s",
               f"x {versus} RSS", "per run"]
    rows = []
    for side, s in summary.items():
        r = s.get("ratio") or {}
        rows.append([side + (" (jit)" if args.jit and side != ONMT else ""),
                     f"{s['ok']}/{s['runs']}", harness.fmt(s["tokens_per_sec"]),
                     harness.gb(s["peak_rss_bytes"]), harness.percent(s["mfu"]),
                     harness.fmt(r.get("tokens_per_sec"), ".3f"),
                     harness.fmt(r.get("peak_rss"), ".3f"),
                     " ".join(harness.fmt(v) for v in s["tokens_per_sec_per_run"])])
    batches = stats["encoder_batches"]
    print(f"\nEncoder inference: {batches['num_batches']} batches of <= "
          f"{batches['max_batch_tokens']} padded tokens ({batches['real_tokens']:,} real source "
          f"tokens, {100 * batches['padding_fraction']:.1f}% padding), warm-up pass + "
          f"{args.repeats} timed passes per run, medians")
    print(harness.format_table(headers, rows))
    if peak:
        print(f"MFU = tokens/s x {flops / 1e6:.2f} MFLOP/token (estimate, harness."
              f"encoder_flops_per_token) / matmul peak {harness.peak_text(peak, peak_table)}")
    session.finish(dict(benchmark="encoder", arguments=vars(args), checkpoint=checkpoint,
                        peak_matmul_flops=peak, peak_matmul_shapes=peak_table,
                        encoder_flops_per_token=flops,
                        data_stats=stats, summary=summary, runs=runs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
