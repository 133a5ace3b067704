"""Batch shapes and padding of the training benchmark's corpus under each batching, for XLA.

    python bench/xla_plan.py [--long] [--shapes 8 16 24] [--epochs 2]

Plans `--epochs` epochs (as many examples, of an endless stream) of the training benchmark's batches (bench/configs/train_benchmark.yml:
2 048-token batches; `--long`: on the long-sentence cache, `bench/prepare.py --long`) with
  * `sorted`: the default sorted scheme (each batch padded to its own longest sentences);
  * `opennmt-xla`: OpenNMT-tf's XLA mode (opennmt scheme, width 8, padded to the bucket
    boundary, batch sizes multiple of 8);
  * `shapes-K`: the bounded-shape plan of `train.jit_compile` with `train.xla_shapes: K`;
and prints one JSON line per variant: distinct (batch, source, target) shapes (= XLA
compilations of the accumulation function), batches, padding fraction (padded tokens that are
not real, both sides), real tokens per batch. NumPy only: no model is run.
"""

import argparse
import json
import os
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(ROOT, "bench"))
sys.path.insert(0, ROOT)

import prepare  # noqa: E402


def summary(name, data, epochs):
    shapes, batches, real, padded, examples = set(), 0, 0, 0, 0
    for indices in data.index_batches():  # (endless: no end-of-pass flush)
        if examples >= epochs * len(data.corpus):
            break
        examples += len(indices)
        batch = data._pad(0, indices)
        size, source_time = batch["source_ids"].shape
        target_time = batch["target_ids_in"].shape[1]
        shapes.add((size, source_time, target_time))
        batches += 1
        real += int(batch["source_length"].sum() + batch["target_length"].sum())
        padded += size * (source_time + target_time)
    return dict(variant=name, shapes=len(shapes), batches=batches,
                padding=round(1 - real / padded, 4), real_tokens_per_batch=round(real / batches))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--long", action="store_true")
    parser.add_argument("--shapes", type=int, nargs="+", default=[8, 16, 24])
    parser.add_argument("--epochs", type=int, default=2)
    args = parser.parse_args()
    cache = os.path.join(ROOT, "runs", "bench_cache")
    paths = prepare.prepare_long(cache) if args.long else prepare.prepare(cache)
    from opennmt_lite.data import TrainingInput, load_parallel_corpus

    corpus = load_parallel_corpus(paths["train_en"], paths["train_de"],
                                  source_vocabulary=paths["vocab_en"],
                                  target_vocabulary=paths["vocab_de"],
                                  maximum_features_length=100, maximum_labels_length=100)
    common = dict(corpus=corpus, batch_size=2048, batch_type="tokens", seed=1234,
                  repeat=True)
    variants = [("sorted", dict(length_bucket_width=1)),
                ("opennmt-xla", dict(scheme="opennmt", length_bucket_width=8,
                                     pad_to_bucket_boundary=True, batch_size_multiple=8,
                                     sample_buffer_size=500000))]
    variants += [(f"shapes-{k}", dict(max_shapes=k, batch_size_multiple=8)) for k in args.shapes]
    for name, arguments in variants:
        data = TrainingInput(**common, **arguments)
        print(json.dumps(dict(summary(name, data, args.epochs), long=args.long)), flush=True)


if __name__ == "__main__":
    main()
