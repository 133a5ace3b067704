"""The GPU measurement in one command: opennmt-lite in float32 against mixed_float16.

    python bench/gpu.py                      # the three measurements, ~6-8 minutes on one H100
    python bench/gpu.py --only train         # some of: train encoder translate
    python bench/gpu.py --quick              # smoke run on any machine: tiny model, few steps
    python bench/gpu.py --backend jax [--quick]   # Keras' JAX backend beside PyTorch: gpu_jax.py

`--backend jax` is another measurement, described in bench/gpu_jax.py (no TensorFlow needed).
The rest of this page is the TensorFlow backend's (the default, `--backend tensorflow`):

Needs only this repository and its requirements, with TensorFlow's CUDA libraries added:

    pip install -r requirements.txt "tensorflow[and-cuda]==2.21.0"

No OpenNMT-tf: these are opennmt-lite's own figures. The data are made from the shipped data/
files by bench/prepare.py (once, cached in runs/bench_cache/). Each measurement alternates
float32 and mixed_float16 runs, each a fresh process (bench/harness.py), --runs of each:

1. training: TransformerBase (bench/configs/gpu_benchmark.yml) trained from scratch by
   `python run.py train` for --steps steps of --batch-size-token batches, no accumulation; a
   run's figure is the median tokens/s of its reports after the first (bench_train.py's side);
2. encoder inference: every training source sentence, sorted by length, in batches of
   <= --encoder-batch-tokens padded tokens; warm-up pass + --repeats timed passes, real source
   tokens/s (bench_encoder.py's worker);
3. translation: the 500 test sentences in batches of --translate-batch-size, beam --beam-width,
   at most --maximum-decoding-length tokens; warm-up pass + --repeats timed passes, target
   tokens/s (bench_translate.py's worker).

Encoder and translation use seeded random weights, the same for both dtypes (a fresh machine has
no trained checkpoint). A random model rarely emits </s>, so nearly every sentence is decoded to
--maximum-decoding-length tokens: the figure is the decoder's throughput at that length, not
what a converged model's short outputs give (the output lines under the table say how many hit
the maximum).

Prints one table (medians; mixed_float16 / float32: ratio of the medians and median of the
per-round ratios) and writes runs/bench_results/gpu-<timestamp>.json (the machine record with
its GPUs, the rendered model and configs, every run); logs in the folder of the same name.
"""

import argparse
import os
import sys
import time

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, BENCH_DIR)

import bench_train  # noqa: E402
import bench_translate  # noqa: E402
import harness  # noqa: E402
import prepare  # noqa: E402

DTYPES = ("float32", "mixed_float16")
MEASUREMENTS = ("train", "encoder", "translate")
# --quick: every code path in a minute or two on 2 CPU cores (after the data preparation).
QUICK = dict(runs=1, preset="TransformerTiny", steps=4, summary_steps=2, batch_size=512,
             repeats=1, encoder_max_batches=3, translate_max_batches=2,
             maximum_decoding_length=8)


def worker_command(dtype, script, arguments):
    """`python bench/<script> --worker lite --dtype <dtype> <arguments>`."""
    return [sys.executable, os.path.join(BENCH_DIR, script), "--worker", "lite",
            "--dtype", dtype, *arguments]


def measure_train(args, paths, benchmark_path, run_dir):
    common = bench_train.common_config(harness.load_yaml(benchmark_path), paths["cache_dir"],
                                       args.steps, args.summary_steps)
    common["train"]["batch_size"] = common["train"]["effective_batch_size"] = args.batch_size
    sides = [bench_train.training_side(dtype, bench_train.lite_config(common, dtype), run_dir)
             for dtype in DTYPES]
    runs, summary = harness.compare(sides, args.runs, ["tokens_per_sec", "steps_per_sec"],
                                    run_dir, timeout=args.timeout, baseline="float32")
    return dict(config=common, summary=summary, runs=runs)


def measure_encoder(args, paths, benchmark_path, run_dir):
    batches_path = os.path.join(run_dir, "batches.npz")
    os.makedirs(run_dir, exist_ok=True)
    prepare.save_batches(batches_path, prepare.make_encoder_batches(
        paths["train_en"], paths["vocab_en"], max_tokens=args.encoder_batch_tokens))
    arguments = ["--benchmark", benchmark_path, "--cache-dir", paths["cache_dir"],
                 "--batches", batches_path, "--repeats", str(args.repeats)]
    if args.encoder_max_batches:
        arguments += ["--max-batches", str(args.encoder_max_batches)]
    sides = [harness.Side(dtype, lambda index, c=worker_command(dtype, "bench_encoder.py",
                                                                 arguments): c)
             for dtype in DTYPES]
    runs, summary = harness.compare(sides, args.runs, ["tokens_per_sec", "padded_tokens_per_sec"],
                                    run_dir, timeout=args.timeout, baseline="float32")
    return dict(summary=summary, runs=runs)


def measure_translate(args, paths, benchmark_path, run_dir):
    batches = prepare.make_batches(paths["test_en"], paths["vocab_en"],
                                   max_examples=args.translate_batch_size)
    batches_path = os.path.join(run_dir, "batches.npz")
    os.makedirs(run_dir, exist_ok=True)
    prepare.save_batches(batches_path, batches)
    arguments = ["--benchmark", benchmark_path, "--cache-dir", paths["cache_dir"],
                 "--batches", batches_path, "--repeats", str(args.repeats),
                 "--beam-width", str(args.beam_width),
                 "--maximum-decoding-length", str(args.maximum_decoding_length)]
    if args.translate_max_batches:
        arguments += ["--max-batches", str(args.translate_max_batches)]
    batch_indices = [index for _, _, index in batches][: args.translate_max_batches]
    outputs = {}  # (side, run index) -> translations, kept out of the JSON
    sides = [bench_translate.translation_side(
        dtype, lambda index, c=worker_command(dtype, "bench_translate.py", arguments): c,
        run_dir, args.maximum_decoding_length, batch_indices, outputs) for dtype in DTYPES]
    runs, summary = harness.compare(sides, args.runs, ["target_tokens_per_sec"], run_dir,
                                    timeout=args.timeout, baseline="float32")
    comparison = bench_translate.summarize_outputs(summary, runs, outputs)
    return dict(summary=summary, runs=runs, comparison=comparison, batches=len(batch_indices))


def render_table(args, results, model):
    """One row per measurement: the dtypes' medians, their ratios, the runs."""
    titles = dict(
        train=(f"training, {args.steps} steps x {args.batch_size} tokens", "tokens/s"),
        encoder=(f"encoder, <= {args.encoder_batch_tokens}-token batches", "source tok/s"),
        translate=(f"translation, beam {args.beam_width}, {args.translate_batch_size} "
                   f"sentences/batch, <= {args.maximum_decoding_length} tokens",
                   "target tok/s"),
    )
    headers = ["measurement", "unit", *DTYPES, "ratio", "paired", "runs ok", "per run"]
    rows = []
    for name, result in results.items():
        metric = "target_tokens_per_sec" if name == "translate" else "tokens_per_sec"
        fp32, fp16 = (result["summary"][dtype] for dtype in DTYPES)
        ratio = fp16.get("ratio") or {}
        rows.append([*titles[name], harness.fmt(fp32[metric]), harness.fmt(fp16[metric]),
                     harness.fmt(ratio.get(metric), ".3f"),
                     harness.fmt(ratio.get(f"{metric}_paired_median"), ".3f"),
                     f"{fp32['ok']}/{fp32['runs']} {fp16['ok']}/{fp16['runs']}",
                     " | ".join(" ".join(harness.fmt(v) for v in side[f"{metric}_per_run"])
                                for side in (fp32, fp16))])
    gpus = ", ".join(gpu["name"] for gpu in harness.gpu_info()) or "no GPU found (nvidia-smi)"
    return (f"opennmt-lite on {gpus}: model {model}, {args.runs} run(s) per dtype alternated, "
            "medians; ratio = mixed_float16 / float32 (paired: median of the per-round "
            f"ratios)\n{harness.format_table(headers, rows)}")


def main(argv=None):
    backend = argparse.ArgumentParser(add_help=False)
    backend.add_argument("--backend", choices=("tensorflow", "jax"), default="tensorflow")
    chosen, rest = backend.parse_known_args(argv)
    if chosen.backend == "jax":
        import gpu_jax

        return gpu_jax.main(rest)
    argv = rest
    parser = harness.parser(__doc__, name="gpu", runs=2, timeout=900, sides=False, mfu=False)
    parser.set_defaults(benchmark=os.path.join(BENCH_DIR, "configs", "gpu_benchmark.yml"))
    parser.add_argument("--only", nargs="+", choices=MEASUREMENTS, default=list(MEASUREMENTS),
                        help="the measurements to run (default: all three)")
    parser.add_argument("--quick", action="store_true",
                        help="smoke run: " + ", ".join(f"{k}={v}" for k, v in QUICK.items()))
    parser.add_argument("--preset", default=None,
                        help="model preset instead of the benchmark's (TransformerBase)")
    parser.add_argument("--steps", type=int, default=100, help="training steps per run")
    parser.add_argument("--summary-steps", type=int, default=10, help="steps per report")
    parser.add_argument("--batch-size", type=int, default=4096, help="training tokens per step")
    parser.add_argument("--repeats", type=int, default=3, help="timed inference passes per run")
    parser.add_argument("--encoder-batch-tokens", type=int, default=8192)
    parser.add_argument("--translate-batch-size", type=int, default=128, help="sentences")
    parser.add_argument("--beam-width", type=int, default=4)
    parser.add_argument("--maximum-decoding-length", type=int, default=100)
    parser.add_argument("--encoder-max-batches", type=int, default=None,
                        help="only the first N encoder batches")
    parser.add_argument("--translate-max-batches", type=int, default=None,
                        help="only the first N translation batches")
    args = parser.parse_args(argv)
    if args.quick:
        vars(args).update(QUICK)
    started = time.time()

    session = harness.Session(args.name, args.cache_dir)
    benchmark = harness.load_yaml(args.benchmark)
    if args.preset:
        benchmark["model"] = dict(preset=args.preset)
    benchmark_path = os.path.join(session.run_dir, "benchmark.yml")
    harness.dump_yaml(benchmark, benchmark_path)  # what the workers build
    measures = dict(train=measure_train, encoder=measure_encoder, translate=measure_translate)
    results = {}
    for name in (m for m in MEASUREMENTS if m in args.only):  # in this order
        results[name] = measures[name](args, session.paths, benchmark_path,
                                       os.path.join(session.run_dir, name))

    print()
    print(render_table(args, results, benchmark["model"]))
    if "translate" in results:
        translate = results["translate"]
        bench_translate.print_outputs(translate["summary"], translate["comparison"],
                                      translate["batches"])
    wall = time.time() - started
    print(f"wall time {wall / 60:.1f} min")
    session.finish(dict(benchmark="gpu", arguments=vars(args), model=benchmark["model"],
                        wall_seconds=wall, **results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
