"""Input pipeline benchmark: throughput and padding of the training batches.

    python bench/bench_pipeline.py [--runs 5] [--batch-size 4096] [--batch-size-multiple 1]

On data/train.{en,de} with one 8 000-piece unigram SentencePiece model per side (trained by this
script once, cached under runs/bench_cache/pipeline/), tokens batches of `--batch-size`,
length_bucket_width 1, maximum lengths 100/100 (the training benchmark's), for both batching
schemes (`sorted`, `opennmt`):

* load: reading + SentencePiece encoding + id mapping of the whole corpus (once per process);
* one warm-up epoch, then `--runs` timed epochs (each with another shuffling seed) through the
  real tf.data.Dataset (from_generator + prefetch), planning included: examples/s, real
  tokens/s (source + target, target counted as pieces + 1) and padded tokens/s, medians;
* padding ratio = padding tokens / all tokens of the padded batches (source + target), median
  over the timed epochs (min-max in the JSON), batches per epoch, real tokens per batch;
* plan: the time of planning one epoch alone (median).

Prints a table and writes runs/bench_results/pipeline-<timestamp>.json.
"""

import argparse
import json
import logging
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "bench"))

import harness  # noqa: E402

CACHE_DIR = os.path.join(ROOT, "runs", "bench_cache", "pipeline")
SP_PARAMS = dict(vocab_size=8000, model_type="unigram", character_coverage=1.0, seed=1234,
                 num_threads=2)


def prepare_models(cache_dir=CACHE_DIR, force=False):
    """Trains (or reuses) the two SentencePiece models and vocabularies; returns their paths."""
    from opennmt_lite.data.tokenizers import train_sentencepiece

    manifest_path = os.path.join(cache_dir, "manifest.json")
    paths = {}
    for side, lang in (("source", "en"), ("target", "de")):
        paths[f"{side}_model"] = os.path.join(cache_dir, f"sp.{lang}.model")
        paths[f"{side}_vocabulary"] = os.path.join(cache_dir, f"vocab.{lang}")
    wanted = dict(SP_PARAMS, data={lang: os.path.getsize(os.path.join(ROOT, "data", f"train.{lang}"))
                                   for lang in ("en", "de")})
    if not force and os.path.exists(manifest_path) and all(map(os.path.exists, paths.values())):
        with open(manifest_path, encoding="utf-8") as stream:
            if json.load(stream) == wanted:
                return paths
    os.makedirs(cache_dir, exist_ok=True)
    for side, lang in (("source", "en"), ("target", "de")):
        started = time.perf_counter()
        train_sentencepiece(
            os.path.join(ROOT, "data", f"train.{lang}"), os.path.join(cache_dir, f"sp.{lang}"),
            SP_PARAMS["vocab_size"], model_type=SP_PARAMS["model_type"],
            character_coverage=SP_PARAMS["character_coverage"], seed=SP_PARAMS["seed"],
            num_threads=SP_PARAMS["num_threads"], vocabulary_path=paths[f"{side}_vocabulary"])
        harness.log(f"trained sp.{lang}.model in {time.perf_counter() - started:.1f} s")
    with open(manifest_path, "w", encoding="utf-8") as stream:
        json.dump(wanted, stream, indent=2)
    return paths


def time_epoch(training_input):
    """Iterates one epoch of the tf.data pipeline; returns its counts and duration."""
    import numpy as np

    examples = real = padded = batches = 0
    started = time.perf_counter()
    for batch in training_input.dataset(num_epochs=1):
        source_length = batch["source_length"].numpy()
        target_length = batch["target_length"].numpy()
        size = len(source_length)
        examples += size
        batches += 1
        real += int(np.sum(source_length)) + int(np.sum(target_length))
        padded += size * (batch["source_ids"].shape[1] + batch["target_ids_in"].shape[1])
    seconds = time.perf_counter() - started
    return dict(seconds=seconds, examples=examples, batches=batches, real_tokens=real,
                padded_tokens=padded, padding_ratio=(padded - real) / padded)


def bench_scheme(corpus, scheme, args):
    from opennmt_lite.data import TrainingInput

    def make(seed):
        return TrainingInput(
            corpus=corpus, batch_size=args.batch_size, batch_type="tokens",
            batch_size_multiple=args.batch_size_multiple, scheme=scheme, length_bucket_width=1,
            sample_buffer_size=-1, shuffle=True, seed=seed, repeat=False)

    time_epoch(make(0))  # warm-up: tf.data, generator, caches
    epochs = [time_epoch(make(seed)) for seed in range(1, args.runs + 1)]
    plan_seconds = []
    for seed in range(1, args.runs + 1):
        training_input = make(seed)
        started = time.perf_counter()
        training_input.epoch_batches(0)
        plan_seconds.append(time.perf_counter() - started)
    med = harness.median
    return dict(
        scheme=scheme,
        epochs=epochs,
        examples_per_s=med([e["examples"] / e["seconds"] for e in epochs]),
        real_tokens_per_s=med([e["real_tokens"] / e["seconds"] for e in epochs]),
        padded_tokens_per_s=med([e["padded_tokens"] / e["seconds"] for e in epochs]),
        epoch_seconds=med([e["seconds"] for e in epochs]),
        plan_seconds=med(plan_seconds),
        padding_ratio=med([e["padding_ratio"] for e in epochs]),
        padding_ratio_min=min(e["padding_ratio"] for e in epochs),
        padding_ratio_max=max(e["padding_ratio"] for e in epochs),
        batches_per_epoch=med([e["batches"] for e in epochs]),
        real_tokens_per_batch=med([e["real_tokens"] / e["batches"] for e in epochs]),
    )


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="timed epochs per scheme (>= 5)")
    parser.add_argument("--batch-size", type=int, default=4096)
    parser.add_argument("--batch-size-multiple", type=int, default=1)
    parser.add_argument("--maximum-length", type=int, default=100,
                        help="maximum_features_length and maximum_labels_length (0: none)")
    parser.add_argument("--schemes", nargs="+", default=["sorted", "opennmt"])
    parser.add_argument("--cache-dir", default=CACHE_DIR)
    parser.add_argument("--force", action="store_true", help="retrain the SentencePiece models")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    warning = harness.warn_if_busy()

    from opennmt_lite.data import load_parallel_corpus

    paths = prepare_models(args.cache_dir, force=args.force)
    maximum = args.maximum_length or None
    started = time.perf_counter()
    corpus = load_parallel_corpus(
        os.path.join(ROOT, "data", "train.en"), os.path.join(ROOT, "data", "train.de"),
        source_vocabulary=paths["source_vocabulary"], target_vocabulary=paths["target_vocabulary"],
        source_tokenizer={"type": "sentencepiece", "model": paths["source_model"]},
        target_tokenizer={"type": "sentencepiece", "model": paths["target_model"]},
        maximum_features_length=maximum, maximum_labels_length=maximum)
    load_seconds = time.perf_counter() - started
    stats = corpus.stats

    results = [bench_scheme(corpus, scheme, args) for scheme in args.schemes]

    print(f"data/train.*: {stats.num_lines} pairs, {stats.num_examples} kept "
          f"(maximum lengths {maximum}), {stats.num_source_tokens + stats.num_target_tokens:,} "
          f"pieces; load + tokenize {load_seconds:.2f} s")
    print(f"batch_type tokens, batch_size {args.batch_size}, batch_size_multiple "
          f"{args.batch_size_multiple}, length_bucket_width 1; medians of {args.runs} epochs\n")
    headers = ["scheme", "padding %", "batches/epoch", "tokens/batch", "examples/s",
               "tokens/s (real)", "tokens/s (padded)", "epoch s", "plan s"]
    rows = [[r["scheme"], f"{100 * r['padding_ratio']:.2f}", f"{r['batches_per_epoch']:.0f}",
             harness.fmt(r["real_tokens_per_batch"]), harness.fmt(r["examples_per_s"]),
             harness.fmt(r["real_tokens_per_s"]), harness.fmt(r["padded_tokens_per_s"]),
             f"{r['epoch_seconds']:.2f}", f"{r['plan_seconds']:.2f}"] for r in results]
    print(harness.format_table(headers, rows))
    stamp = harness.timestamp()
    payload = dict(
        benchmark="pipeline", machine=harness.machine_info(), load_warning=warning,
        settings=dict(vars(args), sentencepiece=SP_PARAMS),
        corpus=stats.as_dict(), load_seconds=load_seconds, results=results)
    path = harness.write_results("pipeline", stamp, payload)
    print(f"\nresults: {os.path.relpath(path, ROOT)}")
    return payload


if __name__ == "__main__":
    main()
