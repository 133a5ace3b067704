"""`bench/gpu.py --backend jax`: opennmt-lite on Keras' JAX backend, on a GPU, beside PyTorch.

    python bench/gpu.py --backend jax            # TransformerBase and TransformerBig, ~10 min
    python bench/gpu.py --backend jax --quick    # the whole script on a CPU, tiny model

Needs JAX (with CUDA for the real figures), Keras and this checkout; no TensorFlow, no
tokenizer, no data: every batch is made of seeded random token ids. Measured, each in a fresh
process (this file's `--worker` modes), `--runs` times, medians reported:

1. the matmul peak: the rate of one large product per dtype ([8192, 8192] x [8192, 8192]), and
   of the products at the model's own shapes ([tokens, d] x [d, d|ffn|vocabulary]): the MFU
   column divides by the large product's rate, the table says both;
2. training, for each preset x dtype (float32; bfloat16 = Keras' mixed_bfloat16: float32 weights,
   bfloat16 products): OpenNMT-tf's train step (training/jax_step.py: label smoothing 0.1, Adam
   with OpenNMT-tf's constants and Noam schedule) on batches of `--batch-tokens` tokens (source
   plus target, as OpenNMT-tf counts them; its auto_config's ~25 000 per update), every sentence
   `--length` tokens long on both sides (so no padding: a real corpus pads, and does less useful
   work per step). tokens/s over `--steps` timed updates after `--warmup` (compilation) updates.
   MFU = tokens/s x training FLOP per token (bench/harness.training_flops_per_token: matmuls
   only, backward = 2 x forward) / the peak;
3. the PyTorch side (bench/gpu_torch.py): the same shapes, batches, loss and optimizer with
   `torch.nn.Transformer` under `torch.compile` (bfloat16 through autocast), the peer a user
   would pick instead; skipped with a line where PyTorch is not installed;
4. translation: TransformerBase with seeded random weights, `--translate-batch` sentences of
   `--length` tokens, beam 4, the portable search (inference/portable_decoding.py) under
   `jax.jit`, up to `--maximum-decoding-length` tokens (a random model rarely stops early:
   the figure is the decoder's throughput at that length); target tokens/s.

float32 products: JAX's default precision (on NVIDIA GPUs TF32 for float32 matmuls), so the
PyTorch side sets `torch.set_float32_matmul_precision("high")` (TF32) to match.

Prints one table and writes runs/bench_results/gpu-jax-<timestamp>.json.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(BENCH_DIR)
sys.path.insert(0, BENCH_DIR)

import harness  # noqa: E402  (standard library only at import)

PRESETS = ("TransformerBase", "TransformerBig")
DTYPES = ("float32", "bfloat16")
# --quick: every path of the script in a few minutes on 2 CPU cores.
QUICK = dict(presets=["TransformerTiny"], runs=1, steps=3, warmup=1, batch_tokens=512,
             length=16, vocabulary_size=512, translate_batch=4, translate_repeats=1, maximum_decoding_length=8,
             peak_size=256)


def worker_env():
    env = dict(os.environ, KERAS_BACKEND="jax", PYTHONPATH=os.pathsep.join(
        [ROOT, os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep))
    env.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    return env


# -------------------------------------------------------------------------------------------
# The workers (each in a fresh process with KERAS_BACKEND=jax)

def random_batch(rng, batch, length, vocabulary_size):
    """A training batch (the pipeline's keys) of `batch` sentence pairs, each side `length`
    tokens (the target's input starts with <s>, its output ends with </s>)."""
    import numpy as np

    source = rng.integers(3, vocabulary_size, size=(batch, length), dtype=np.int32)
    pieces = rng.integers(3, vocabulary_size, size=(batch, length - 1), dtype=np.int32)
    return dict(
        source_ids=source,
        source_length=np.full((batch,), length, np.int32),
        target_ids_in=np.concatenate([np.ones((batch, 1), np.int32), pieces], axis=1),
        target_ids_out=np.concatenate([pieces, np.full((batch, 1), 2, np.int32)], axis=1),
        target_length=np.full((batch,), length, np.int32),
    )


def sentences_per_batch(batch_tokens, length):
    """Sentence pairs in a batch of `batch_tokens` source + target tokens."""
    return max(1, batch_tokens // (2 * length))


def build_model(preset, vocabulary_size, dtype, seed=1234):
    """The preset's Transformer on the JAX backend, built, weights from `seed`."""
    import keras

    from opennmt_lite import build
    from opennmt_lite.hyperparameters import PRESETS as MODEL_PRESETS, ModelHyperparameters
    from opennmt_lite.models.transformer import Transformer

    build.set_precision("mixed_bfloat16" if dtype == "bfloat16" else "float32")
    keras.utils.set_random_seed(seed)
    model = Transformer(ModelHyperparameters(**MODEL_PRESETS[preset]), vocabulary_size,
                        vocabulary_size)
    model.build()
    return model


def opennmt_optimizer(model):
    """OpenNMT-tf's auto_config optimizer: Adam (0.9, 0.998), Noam decay (scale 2, 8 000 warm-up
    steps) — the project's own objects (build.optimizer's)."""
    from opennmt_lite.training import adam, schedules

    rate = schedules.ScheduleWrapper(schedules.NoamDecay(
        scale=2.0, model_dim=model.hyperparameters.num_units, warmup_steps=8000))
    optimizer = adam.Adam(learning_rate=rate, beta_1=0.9, beta_2=0.998, epsilon=1e-7)
    optimizer.build(model.trainable_variables)
    return optimizer


def train_worker(args):
    import jax
    import numpy as np

    from opennmt_lite.training.jax_step import JaxTrainStep

    model = build_model(args.preset, args.vocabulary_size, args.dtype)
    step = JaxTrainStep(model, opennmt_optimizer(model), 1, label_smoothing=0.1)
    rng = np.random.default_rng(0)
    batch = sentences_per_batch(args.batch_tokens, args.length)
    # A few distinct batches, reused: drawing ids is not what is measured.
    batches = [random_batch(rng, batch, args.length, args.vocabulary_size) for _ in range(4)]
    losses = []
    for index in range(args.warmup):
        losses.append(float(step([(batches[index % 4],)])["loss"]))
    started = time.perf_counter()
    stats = None
    for index in range(args.steps):
        stats = step([(batches[index % 4],)])
    losses.append(float(jax.block_until_ready(stats["loss"])))
    seconds = time.perf_counter() - started
    tokens = 2 * batch * args.length * args.steps
    return dict(tokens_per_sec=tokens / seconds, steps_per_sec=args.steps / seconds,
                batch_sentences=batch, first_loss=losses[0], last_loss=losses[-1],
                device=str(jax.devices()[0]))


def translate_worker(args):
    import jax
    import numpy as np

    from opennmt_lite.inference.options import DecodingOptions
    from opennmt_lite.inference.portable_decoding import translation_function

    model = build_model(args.preset, args.vocabulary_size, args.dtype)
    options = DecodingOptions(beam_width=args.beam_width,
                              maximum_decoding_length=args.maximum_decoding_length)
    translate = translation_function(model, options)
    rng = np.random.default_rng(1)
    source = rng.integers(3, args.vocabulary_size, size=(args.translate_batch, args.length),
                          dtype=np.int32)
    lengths = np.full((args.translate_batch,), args.length, np.int32)
    translate(source, lengths)  # compilation
    started = time.perf_counter()
    produced = 0
    for _ in range(args.translate_repeats):
        result = translate(source, lengths)
        produced += int(np.sum(result.lengths[:, 0]))
    seconds = time.perf_counter() - started
    sentences = args.translate_repeats * args.translate_batch
    return dict(target_tokens_per_sec=produced / seconds, sentences_per_sec=sentences / seconds,
                mean_output_length=produced / sentences,
                device=str(jax.devices()[0]))


def peak_worker(args):
    """{dtype: {"m x k x n": FLOP/s}}: median of timed jitted products after a warm-up."""
    import jax
    import jax.numpy as jnp

    shapes = [tuple(int(v) for v in name.split("x")) for name in args.shapes]
    table = {}
    for dtype in args.dtypes:
        rates = {}
        for m, k, n in shapes:
            key = jax.random.key(0)
            x = jax.random.normal(key, (m, k), jnp.float32).astype(dtype)
            y = jax.random.normal(jax.random.fold_in(key, 1), (k, n), jnp.float32).astype(dtype)
            product = jax.jit(lambda a, b: a @ b)
            jax.block_until_ready(product(x, y))
            times = []
            for _ in range(args.repeats):
                started = time.perf_counter()
                jax.block_until_ready(product(x, y))
                times.append(time.perf_counter() - started)
            rates[harness.shape_name((m, k, n))] = 2 * m * k * n / statistics.median(times)
        table[dtype] = rates
    return table


WORKERS = dict(train=train_worker, translate=translate_worker, peak=peak_worker)


# -------------------------------------------------------------------------------------------
# The driver

def run_worker(command, timeout):
    """Runs a worker; -> (its JSON result or None, error text or None, seconds)."""
    started = time.time()
    try:
        done = subprocess.run(command, capture_output=True, text=True, env=worker_env(),
                              cwd=ROOT, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, f"timed out after {timeout} s", time.time() - started
    for line in reversed(done.stdout.splitlines()):
        if line.startswith("{"):
            return json.loads(line), None, time.time() - started
    return None, (done.stderr or done.stdout)[-3000:] or f"exit {done.returncode}", \
        time.time() - started


def torch_available():
    done = subprocess.run([sys.executable, "-c", "import torch"], capture_output=True)
    return done.returncode == 0


def median_of(results, key):
    values = [r[key] for r in results if r and r.get(key) is not None]
    return statistics.median(values) if values else None


def flops_per_token(preset, args):
    from_presets = _model_shape(preset)
    return harness.training_flops_per_token(
        from_presets["num_layers"], from_presets["num_units"], from_presets["ffn_inner_dim"],
        args.vocabulary_size, args.length, args.length, args.length, args.length, args.length,
        relative=False)


def _model_shape(preset):
    """num_layers, num_units, ffn_inner_dim, num_heads of a preset (read in a subprocess-free
    way: hyperparameters.py imports nothing heavy)."""
    sys.path.insert(0, ROOT)
    from opennmt_lite.hyperparameters import PRESETS as MODEL_PRESETS, ModelHyperparameters

    hp = ModelHyperparameters(**MODEL_PRESETS[preset])
    return dict(num_layers=hp.num_layers, num_units=hp.num_units,
                ffn_inner_dim=hp.ffn_inner_dim, num_heads=hp.num_heads)


def worker_arguments(args, preset, dtype):
    return ["--preset", preset, "--dtype", dtype, "--batch-tokens", str(args.batch_tokens),
            "--length", str(args.length), "--vocabulary-size", str(args.vocabulary_size),
            "--steps", str(args.steps), "--warmup", str(args.warmup)]


def measure(args):
    me = [sys.executable, os.path.abspath(__file__), "--worker"]
    record = dict(machine=harness.machine_info(), arguments=vars(args))
    log = harness.log

    # 1. the peak
    rows = sentences_per_batch(args.batch_tokens, args.length) * args.length
    model_shapes = set()
    for preset in args.presets:
        model_shapes.update(harness.model_matmul_shapes(_model_shape(preset), rows,
                                                        args.vocabulary_size))
    cube = (args.peak_size,) * 3
    shapes = [cube] + sorted(model_shapes)
    log("measuring the matmul peak")
    peak_table, error, _ = run_worker(
        me + ["peak", "--dtypes", *DTYPES, "--shapes", *map(harness.shape_name, shapes)],
        args.timeout)
    if peak_table is None:
        raise SystemExit(f"gpu.py --backend jax: the peak measurement failed:\n{error}")
    peak = {dtype: peak_table[dtype][harness.shape_name(cube)] for dtype in DTYPES}
    record.update(peak_flops=peak, peak_table=peak_table)

    # 2-3. training, JAX and PyTorch, alternated run by run
    with_torch = not args.no_torch and torch_available()
    if not with_torch:
        log("the PyTorch side is skipped: " + ("--no-torch" if args.no_torch
                                               else "PyTorch is not installed here"))
    training = {}
    for preset in args.presets:
        for dtype in DTYPES:
            sides = {"opennmt-lite JAX": me + ["train", *worker_arguments(args, preset, dtype)]}
            if with_torch:
                sides["PyTorch"] = [sys.executable, os.path.join(BENCH_DIR, "gpu_torch.py"),
                                    *worker_arguments(args, preset, dtype)]
                if args.no_compile:
                    sides["PyTorch"].append("--no-compile")
            runs = {name: [] for name in sides}
            for index in range(args.runs):
                for name, command in sides.items():
                    log(f"training {preset} {dtype}, {name}, run {index + 1}/{args.runs}")
                    result, error, seconds = run_worker(command, args.timeout)
                    if error:
                        log(f"  FAILED: {error}")
                    else:
                        log(f"  {result['tokens_per_sec']:,.0f} tokens/s ({seconds:.0f} s)")
                    runs[name].append(result or dict(error=error))
            training[f"{preset} {dtype}"] = runs
    record["training"] = training

    # 4. translation
    translation = {}
    preset = args.presets[0]
    for dtype in DTYPES:
        arguments = worker_arguments(args, preset, dtype) + [
            "--translate-batch", str(args.translate_batch), "--beam-width", str(args.beam_width),
            "--translate-repeats", str(args.translate_repeats),
            "--maximum-decoding-length", str(args.maximum_decoding_length)]
        runs = []
        for index in range(args.runs):
            log(f"translating, {preset} {dtype}, run {index + 1}/{args.runs}")
            result, error, _ = run_worker(me + ["translate", *arguments], args.timeout)
            if error:
                log(f"  FAILED: {error}")
            runs.append(result or dict(error=error))
        translation[f"{preset} {dtype}"] = runs
    record["translation"] = translation
    return record


def render(record, args):
    peak = record["peak_flops"]
    headers = ["measurement", "opennmt-lite JAX", "MFU", "PyTorch", "JAX / PyTorch", "runs"]
    rows = []
    for name, runs in record["training"].items():
        preset, dtype = name.split()
        jax_value = median_of(runs["opennmt-lite JAX"], "tokens_per_sec")
        torch_value = median_of(runs.get("PyTorch", []), "tokens_per_sec")
        mfu = (jax_value * flops_per_token(preset, args) / peak[dtype]
               if jax_value and peak.get(dtype) else None)
        rows.append([f"training {name}, tokens/s", harness.fmt(jax_value), harness.percent(mfu),
                     harness.fmt(torch_value), harness.fmt(harness.ratio(jax_value, torch_value),
                                                           ".2f"),
                     str(len(runs["opennmt-lite JAX"]))])
    for name, runs in record["translation"].items():
        rows.append([f"translation {name}, beam {args.beam_width}, target tokens/s",
                     harness.fmt(median_of(runs, "target_tokens_per_sec")), "-", "-", "-",
                     str(len(runs))])
    devices = {r.get("device") for side in record["training"].values()
               for results in side.values() for r in results if r and r.get("device")}
    peak_line = ", ".join(f"{dtype} {value / 1e12:.1f} TFLOP/s" for dtype, value in peak.items())
    best_model = {dtype: max((v for k, v in table.items()
                              if k != harness.shape_name((args.peak_size,) * 3)), default=None)
                  for dtype, table in record["peak_table"].items()}
    model_line = ", ".join(f"{dtype} {value / 1e12:.1f} TFLOP/s" for dtype, value
                           in best_model.items() if value)
    return (f"opennmt-lite on Keras' JAX backend, device {', '.join(sorted(devices)) or '?'}; "
            f"batches of {args.batch_tokens} tokens (sentences of {args.length}), medians of "
            f"{args.runs} run(s)\n{harness.format_table(headers, rows)}\n"
            f"MFU against a {args.peak_size}^3 product: {peak_line} (best product at the "
            f"model's shapes: {model_line})")


def parse(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--backend", choices=["jax"], default="jax")
    parser.add_argument("--worker", choices=sorted(WORKERS))
    parser.add_argument("--quick", action="store_true",
                        help="smoke run: " + ", ".join(f"{k}={v}" for k, v in QUICK.items()))
    parser.add_argument("--presets", nargs="+", default=list(PRESETS))
    parser.add_argument("--preset", default="TransformerBase", help="(workers)")
    parser.add_argument("--dtype", choices=DTYPES, default="float32", help="(workers)")
    parser.add_argument("--dtypes", nargs="+", default=list(DTYPES), help="(peak worker)")
    parser.add_argument("--shapes", nargs="+", default=[], help="(peak worker) MxKxN")
    parser.add_argument("--repeats", type=int, default=10, help="(peak worker)")
    parser.add_argument("--runs", type=int, default=2, help="fresh processes per side")
    parser.add_argument("--steps", type=int, default=30, help="timed updates (or translations)")
    parser.add_argument("--warmup", type=int, default=5, help="updates before the timing")
    parser.add_argument("--batch-tokens", type=int, default=25000)
    parser.add_argument("--length", type=int, default=32, help="tokens per sentence, each side")
    parser.add_argument("--vocabulary-size", type=int, default=32000)
    parser.add_argument("--translate-batch", type=int, default=64, help="sentences")
    parser.add_argument("--translate-repeats", type=int, default=5,
                        help="timed translations of the batch, after one compiling it")
    parser.add_argument("--beam-width", type=int, default=4)
    parser.add_argument("--maximum-decoding-length", type=int, default=128)
    parser.add_argument("--peak-size", type=int, default=8192)
    parser.add_argument("--timeout", type=int, default=900, help="seconds per worker")
    parser.add_argument("--no-torch", action="store_true", help="skip the PyTorch side")
    parser.add_argument("--no-compile", action="store_true", help="PyTorch without torch.compile")
    args = parser.parse_args(argv)
    if args.quick:
        vars(args).update(QUICK)
    for name in ("runs", "steps", "batch_tokens", "length", "vocabulary_size",
                 "translate_batch", "translate_repeats", "maximum_decoding_length", "peak_size",
                 "repeats", "beam_width"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if args.length < 2:
        parser.error(f"--length must be >= 2, got {args.length}")
    return args


def main(argv=None):
    args = parse(argv)
    if args.worker:
        print(json.dumps(WORKERS[args.worker](args)), flush=True)
        return 0
    started = time.time()
    record = measure(args)
    print()
    print(render(record, args))
    record["wall_seconds"] = time.time() - started
    path = harness.write_results("gpu-jax", harness.timestamp(), record)
    print(f"wall time {record['wall_seconds'] / 60:.1f} min; record: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
