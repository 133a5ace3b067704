"""OpenNMT-tf 2.32 side of the encoder benchmark. Runs INSIDE the OpenNMT-tf virtual environment.

    # once: a freshly initialised (seeded) checkpoint of the benchmark model, in OpenNMT-tf's
    # format, that the opennmt-lite side loads too (opennmt_lite.checkpointing.onmt_names.load_onmt_model)
    bench/.venv-onmt/bin/python bench/onmt_encoder.py --write-checkpoint runs/bench_cache/onmt_init_ckpt

    # the measurement
    bench/.venv-onmt/bin/python bench/onmt_encoder.py --checkpoint runs/bench_cache/onmt_init_ckpt \
        [--batches runs/bench_cache/encoder_batches.npz] [--repeats 5]

The model is `opennmt.models.Transformer(**model, position_encoder_class=None)` with the `model:`
section and the vocabularies of bench/configs/train_benchmark.yml (vocabulary paths relative to
the cache directory). Only its source WordEmbedder and encoder run:

    @tf.function(input_signature=(ids [None, None] int64, length [None] int32))
    def encode(ids, length):
        inputs = model.features_inputter({"ids": ids, "length": length}, training=False)
        outputs, _, _ = model.encoder(inputs, sequence_length=length, training=False)

one trace with dynamic shapes, as OpenNMT-tf's own inference (`inference.predict_dataset` wraps
`model.infer` in a tf.function with the dataset's input signature). The batches are those of
bench/prepare.py (every training source sentence, sorted by length, <= 2 048 padded tokens per
batch), converted to tensors before timing. One untimed warm-up pass over all batches, then
`--repeats` timed passes; each pass ends by fetching a scalar of the last output.

Prints, as the LAST line of stdout, one JSON object: {"framework": "opennmt-tf", "tokens_per_sec":
median over passes of real (non-padding) source tokens / pass seconds, "passes": [...], ...}.
"""

import argparse
import json
import os
import resource
import statistics
import sys
import time

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(BENCH_DIR)
DEFAULT_BENCHMARK = os.path.join(BENCH_DIR, "configs", "train_benchmark.yml")
DEFAULT_CACHE = os.path.join(ROOT, "runs", "bench_cache")
SEED = 1234


def build_model(benchmark_path, cache_dir):
    """The benchmark's OpenNMT-tf model, initialised with its vocabularies, variables created."""
    import yaml
    import tensorflow as tf
    import opennmt

    with open(benchmark_path, encoding="utf-8") as stream:
        benchmark = yaml.safe_load(stream)
    model = opennmt.models.Transformer(**benchmark["model"], position_encoder_class=None)
    data = {
        key: os.path.join(cache_dir, benchmark["data"][key])
        for key in ("source_vocabulary", "target_vocabulary")
    }
    model.initialize(data)
    tf.random.set_seed(SEED)
    model.create_variables()
    return model


def write_checkpoint(model, directory):
    """Writes the model as an OpenNMT-tf checkpoint (`model/...` names) in `directory`."""
    import tensorflow as tf

    checkpoint = tf.train.Checkpoint(model=model)
    manager = tf.train.CheckpointManager(checkpoint, directory, max_to_keep=1)
    return manager.save(checkpoint_number=0)


def restore_checkpoint(model, path):
    import tensorflow as tf

    prefix = tf.train.latest_checkpoint(path) if os.path.isdir(path) else path
    if prefix is None:
        raise FileNotFoundError(f"no checkpoint in {path}")
    status = tf.train.Checkpoint(model=model).restore(prefix)
    status.expect_partial()  # a training checkpoint also holds the optimizer
    status.assert_existing_objects_matched()
    return prefix


def main(argv=None):
    parser = argparse.ArgumentParser(description="OpenNMT-tf encoder inference throughput.")
    parser.add_argument("--benchmark", default=DEFAULT_BENCHMARK,
                        help="benchmark definition (model: and data: vocabularies)")
    parser.add_argument("--cache-dir", default=DEFAULT_CACHE)
    parser.add_argument("--write-checkpoint", metavar="DIR",
                        help="write a freshly initialised checkpoint to DIR and exit")
    parser.add_argument("--checkpoint", help="checkpoint prefix or directory to measure with")
    parser.add_argument("--batches", default=None, help="default: <cache-dir>/encoder_batches.npz")
    parser.add_argument("--repeats", type=int, default=5, help="timed passes")
    args = parser.parse_args(argv)

    sys.path.insert(0, BENCH_DIR)
    import prepare  # noqa: E402 (numpy-only loader)

    import numpy as np
    import tensorflow as tf
    import opennmt

    model = build_model(args.benchmark, args.cache_dir)
    if args.write_checkpoint:
        path = write_checkpoint(model, args.write_checkpoint)
        print(json.dumps({"checkpoint": path}), flush=True)
        return 0
    if not args.checkpoint:
        parser.error("--checkpoint (or --write-checkpoint) is required")
    prefix = restore_checkpoint(model, args.checkpoint)

    batches = prepare.load_encoder_batches(
        args.batches or os.path.join(args.cache_dir, "encoder_batches.npz")
    )
    tensors = [(tf.constant(ids.astype(np.int64)), tf.constant(lengths.astype(np.int32)))
               for ids, lengths in batches]
    real_tokens = int(sum(int(lengths.sum()) for _, lengths in batches))
    padded_tokens = int(sum(int(ids.size) for ids, _ in batches))

    @tf.function(input_signature=(tf.TensorSpec([None, None], tf.int64),
                                  tf.TensorSpec([None], tf.int32)))
    def encode(ids, length):
        inputs = model.features_inputter({"ids": ids, "length": length}, training=False)
        outputs, _, _ = model.encoder(inputs, sequence_length=length, training=False)
        return outputs

    def one_pass():
        start = time.perf_counter()
        outputs = None
        for ids, length in tensors:
            outputs = encode(ids, length)
        checksum = float(tf.reduce_sum(outputs[0, 0]))
        return time.perf_counter() - start, checksum

    warmup_seconds, _ = one_pass()
    passes = []
    for _ in range(args.repeats):
        seconds, checksum = one_pass()
        passes.append(dict(seconds=seconds, tokens_per_sec=real_tokens / seconds,
                           padded_tokens_per_sec=padded_tokens / seconds))
    result = dict(
        framework="opennmt-tf",
        version=opennmt.__version__,
        tensorflow=tf.__version__,
        dtype="float32",
        checkpoint=prefix,
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


if __name__ == "__main__":
    sys.exit(main())
