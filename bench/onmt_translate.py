"""OpenNMT-tf 2.32 side of the translation benchmark. Runs INSIDE the OpenNMT-tf virtual environment.

Three modes, all driven by bench/bench_translate.py:

    # 1. once: the benchmark batches of the test set, made by OpenNMT-tf's own inference
    #    pipeline (`make_inference_dataset`, as `onmt-main infer` with auto_config's
    #    `infer: {batch_size: 32, batch_type: examples, length_bucket_width: 5}`)
    python bench/onmt_translate.py --write-batches OUT.npz --features runs/bench_cache/test.tok.en \
        [--batch-size 32] [--batch-type examples] [--length-bucket-width 5]

    # 2. once: brief pre-training of the benchmark model with OpenNMT-tf itself, so that the
    #    translations have sensible lengths (a random model emits 250 tokens of garbage):
    #    `onmt-main --model model.py --config config.yml --auto_config --seed S train` in-process
    python bench/onmt_translate.py --pretrain CONFIG.yml --work-dir DIR [--seed 1234]

    # 3. the measurement
    python bench/onmt_translate.py --checkpoint CKPT --batches BATCHES.npz [--repeats 2] \
        [--beam-width 4] [--length-penalty 0] [--maximum-decoding-length 250] \
        [--latency-batches ONE_SENTENCE_BATCHES.npz --latency-sentences 50]

Measurement: `opennmt.models.Transformer(**model, position_encoder_class=None)` (the `model:`
section of bench/configs/train_benchmark.yml), initialised with the cache's vocabularies and the
inference params (beam_width, length_penalty, maximum_decoding_length, num_hypotheses 1), its
weights restored from the checkpoint. Inference is `tf.function(model.infer,
input_signature=({"ids": [None, None] int64, "length": [None] int32},))`, i.e. what
`opennmt.inference.predict_dataset` runs for `onmt-main infer` (encoder, tiled memory, beam
search, ids -> tokens lookup), one trace for all batches. The batches (mode 1) are converted to
tensors before timing; each batch's predictions are fetched to numpy as predict_dataset does (the
printing / order restoring / file writing of predict_dataset is not timed). One untimed warm-up
pass over all batches, then `--repeats` timed passes.

Target tokens = the hypotheses' lengths as OpenNMT-tf returns them (`predictions["length"]`:
tokens before `</s>`, `</s>` NOT counted), best hypothesis of each sentence.

Prints, as the LAST line of stdout, one JSON object: {"framework": "opennmt-tf",
"target_tokens_per_sec": median over passes, "sentences_per_sec": median, "passes": [...],
"hypotheses": [500 token strings in test-set order], "log_probs": [...], ...}.
"""

import argparse
import json
import os
import resource
import statistics
import sys
import tempfile
import time

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(BENCH_DIR)
DEFAULT_BENCHMARK = os.path.join(BENCH_DIR, "configs", "train_benchmark.yml")
DEFAULT_CACHE = os.path.join(ROOT, "runs", "bench_cache")


def _load_yaml(path):
    import yaml

    with open(path, encoding="utf-8") as stream:
        return yaml.safe_load(stream)


def build_model(benchmark_path, cache_dir, params=None):
    """The benchmark's OpenNMT-tf Transformer with its vocabularies and `params`."""
    import opennmt

    benchmark = _load_yaml(benchmark_path)
    model = opennmt.models.Transformer(**benchmark["model"], position_encoder_class=None)
    data = {
        key: os.path.join(cache_dir, benchmark["data"][key])
        for key in ("source_vocabulary", "target_vocabulary")
    }
    model.initialize(data, params=params or {})
    return model


# --------------------------------------------------------------------------------------------
# Mode 1: the batches


def write_batches(args):
    """OpenNMT-tf's inference batches of `--features`, saved as npz: ids_i (int32 [B, T], the
    source ids of OpenNMT-tf's vocabulary lookup), length_i, index_i (line numbers)."""
    import numpy as np

    model = build_model(args.benchmark, args.cache_dir)
    dataset = model.examples_inputter.make_inference_dataset(
        args.features, args.batch_size, batch_type=args.batch_type,
        length_bucket_width=args.length_bucket_width,
    )
    arrays = {}
    count = 0
    for count, features in enumerate(dataset, start=1):
        arrays[f"ids_{count - 1:05d}"] = features["ids"].numpy().astype(np.int32)
        arrays[f"length_{count - 1:05d}"] = features["length"].numpy().astype(np.int32)
        arrays[f"index_{count - 1:05d}"] = features["index"].numpy().astype(np.int64)
    arrays["num_batches"] = np.asarray(count)
    tmp = args.write_batches + ".tmp.npz"
    np.savez(tmp, **arrays)
    os.replace(tmp, args.write_batches)
    sentences = sum(int(v.shape[0]) for k, v in arrays.items() if k.startswith("index_"))
    print(json.dumps(dict(batches=count, sentences=sentences, path=args.write_batches)),
          flush=True)
    return 0


def load_batches(path):
    """[(ids int32 [B, T], length int32 [B], index int64 [B])] as written by --write-batches."""
    import numpy as np

    with np.load(path) as data:
        count = int(data["num_batches"])
        return [(data[f"ids_{i:05d}"], data[f"length_{i:05d}"], data[f"index_{i:05d}"])
                for i in range(count)]


# --------------------------------------------------------------------------------------------
# Mode 2: the pre-training


def pretrain(args):
    """`onmt-main --model model.py --config config.yml --auto_config --seed S train`, in-process.

    CONFIG has a `model:` section (keyword arguments of opennmt.models.Transformer, rendered into
    model.py as bench/onmt_train.py does) and the usual OpenNMT-tf sections (model_dir, data,
    params, train)."""
    import yaml

    sys.path.insert(0, BENCH_DIR)
    from onmt_train import render_model_file  # noqa: E402

    config = _load_yaml(args.pretrain)
    model_config = config.pop("model")
    work_dir = args.work_dir or tempfile.mkdtemp(prefix="onmt-pretrain-")
    os.makedirs(work_dir, exist_ok=True)
    model_file = os.path.join(work_dir, "model.py")
    config_file = os.path.join(work_dir, "config.yml")
    render_model_file(model_config, model_file)
    with open(config_file, "w", encoding="utf-8") as stream:
        yaml.safe_dump(config, stream, sort_keys=False)

    import tensorflow as tf
    from opennmt.bin import main as onmt_main

    command = ["onmt-main", "--model", model_file, "--config", config_file, "--auto_config",
               "--seed", str(args.seed), "train"]
    print("[onmt_translate] " + " ".join(command), file=sys.stderr, flush=True)
    saved_argv = sys.argv
    sys.argv = command
    start = time.time()
    try:
        onmt_main.main()
    finally:
        sys.argv = saved_argv
    checkpoint = tf.train.latest_checkpoint(config["model_dir"])
    print(json.dumps(dict(checkpoint=checkpoint, wall_seconds=time.time() - start,
                          command=command)), flush=True)
    return 0 if checkpoint else 1


# --------------------------------------------------------------------------------------------
# Mode 3: the measurement


def restore_checkpoint(model, path):
    import tensorflow as tf

    prefix = tf.train.latest_checkpoint(path) if os.path.isdir(path) else path
    if prefix is None:
        raise FileNotFoundError(f"no checkpoint in {path}")
    model.create_variables()
    status = tf.train.Checkpoint(model=model).restore(prefix)
    status.expect_partial()  # a training checkpoint also holds the optimizer
    status.assert_existing_objects_matched()
    return prefix


def measure(args):
    import numpy as np
    import tensorflow as tf
    import opennmt

    params = dict(
        beam_width=args.beam_width,
        length_penalty=args.length_penalty,
        maximum_decoding_length=args.maximum_decoding_length,
        num_hypotheses=1,
    )
    model = build_model(args.benchmark, args.cache_dir, params=params)
    prefix = restore_checkpoint(model, args.checkpoint)

    batches = load_batches(args.batches)
    tensors = [{"ids": tf.constant(ids.astype(np.int64)), "length": tf.constant(length)}
               for ids, length, _ in batches]
    sentences = int(sum(len(index) for _, _, index in batches))
    source_tokens = int(sum(int(length.sum()) for _, length, _ in batches))

    infer_fn = tf.function(model.infer, input_signature=({
        "ids": tf.TensorSpec([None, None], tf.int64),
        "length": tf.TensorSpec([None], tf.int32),
    },))
    start = time.perf_counter()
    infer_fn.get_concrete_function()  # traced before the warm-up, as predict_dataset does
    trace_seconds = time.perf_counter() - start

    def one_pass():
        outputs = []
        start = time.perf_counter()
        for features in tensors:
            predictions = infer_fn(features)
            outputs.append(tf.nest.map_structure(lambda t: t.numpy(), predictions))
        return time.perf_counter() - start, outputs

    warmup_seconds, outputs = one_pass()
    passes = []
    for _ in range(args.repeats):
        seconds, outputs = one_pass()
        target_tokens = int(sum(int(p["length"][:, 0].sum()) for p in outputs))
        passes.append(dict(seconds=seconds, target_tokens=target_tokens,
                           target_tokens_per_sec=target_tokens / seconds,
                           sentences_per_sec=sentences / seconds))

    latencies = []  # batch 1, after the timed passes (warm): ms per sentence
    for ids, length, _ in (load_batches(args.latency_batches)[:args.latency_sentences]
                           if args.latency_batches else []):
        features = {"ids": tf.constant(ids.astype(np.int64)), "length": tf.constant(length)}
        start = time.perf_counter()
        tf.nest.map_structure(lambda t: t.numpy(), infer_fn(features))
        latencies.append(1000 * (time.perf_counter() - start))

    hypotheses = [None] * sentences
    log_probs = [None] * sentences
    lengths = [None] * sentences
    for (_, _, index), predictions in zip(batches, outputs):
        for row, line in enumerate(index):
            length = int(predictions["length"][row, 0])
            tokens = predictions["tokens"][row, 0, :length]
            hypotheses[int(line)] = " ".join(t.decode("utf-8") for t in tokens)
            log_probs[int(line)] = float(predictions["log_probs"][row, 0])
            lengths[int(line)] = length
    result = dict(
        framework="opennmt-tf",
        version=opennmt.__version__,
        tensorflow=tf.__version__,
        checkpoint=prefix,
        params=params,
        batches=len(batches),
        sentences=sentences,
        source_tokens=source_tokens,
        trace_seconds=trace_seconds,
        warmup_seconds=warmup_seconds,
        passes=passes,
        target_tokens=passes[-1]["target_tokens"] if passes else None,
        target_tokens_per_sec=statistics.median(p["target_tokens_per_sec"] for p in passes),
        sentences_per_sec=statistics.median(p["sentences_per_sec"] for p in passes),
        latency_ms_median=statistics.median(latencies) if latencies else None,
        peak_rss_self_bytes=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        hypotheses=hypotheses,
        lengths=lengths,
        log_probs=log_probs,
    )
    print(json.dumps(result), flush=True)
    return 0


def main(argv=None):
    parser = argparse.ArgumentParser(description="OpenNMT-tf translation throughput.")
    parser.add_argument("--benchmark", default=DEFAULT_BENCHMARK,
                        help="benchmark definition (model: and data: vocabularies)")
    parser.add_argument("--cache-dir", default=DEFAULT_CACHE)
    # mode 1
    parser.add_argument("--write-batches", metavar="NPZ", help="write the test-set batches")
    parser.add_argument("--features", help="pre-tokenized source file (with --write-batches)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--batch-type", choices=("examples", "tokens"), default="examples")
    parser.add_argument("--length-bucket-width", type=int, default=5)
    # mode 2
    parser.add_argument("--pretrain", metavar="CONFIG", help="pre-train with onmt-main")
    parser.add_argument("--work-dir", default=None)
    parser.add_argument("--seed", type=int, default=1234)
    # mode 3
    parser.add_argument("--checkpoint", help="checkpoint prefix or directory")
    parser.add_argument("--batches", help="npz written by --write-batches")
    parser.add_argument("--repeats", type=int, default=2, help="timed passes")
    parser.add_argument("--latency-batches", help="npz of one-sentence batches: median latency")
    parser.add_argument("--latency-sentences", type=int, default=50)
    parser.add_argument("--beam-width", type=int, default=4)
    parser.add_argument("--length-penalty", type=float, default=0.0)
    parser.add_argument("--maximum-decoding-length", type=int, default=250)
    args = parser.parse_args(argv)
    if args.write_batches:
        if not args.features:
            parser.error("--write-batches needs --features")
        return write_batches(args)
    if args.pretrain:
        return pretrain(args)
    if not args.checkpoint or not args.batches:
        parser.error("--checkpoint and --batches are required")
    return measure(args)


if __name__ == "__main__":
    sys.exit(main())
