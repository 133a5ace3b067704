"""OpenNMT-tf 2.32's own exported SavedModel, served. Runs INSIDE the OpenNMT-tf virtual environment
(TensorFlow 2.13), driven by bench/bench_ctranslate2.py:

    python bench/onmt_saved_model.py --model-path DIR --sentences TOKENIZED.txt \
        --batches BATCHES.npz [--repeats 5] [--latency-batches ONE_SENTENCE_BATCHES.npz \
        --latency-sentences 50]

DIR is what `onmt-main --config C export --output_dir DIR --format saved_model` wrote (its
decoding options were fixed at export). Its `serving_default` signature takes `tokens` (string
[batch, time], padded with "") and `length` (int32 [batch]) and returns `tokens` (string [batch,
hypotheses, time]), `length` (int32 [batch, hypotheses], `</s>` not counted) and `log_probs`.
Each batch of the npz (its `index_i`: line numbers of TOKENIZED.txt) is given as these two tensors,
made before timing; the outputs are fetched to numpy inside the timed loop. One untimed warm-up
pass, then --repeats timed passes; then batch-1 latency over the first --latency-sentences.

Prints, as the last line of stdout, one JSON object: target_tokens_per_sec (median over passes),
latency_ms_median, hypotheses (in file order), ...
"""

import argparse
import json
import os
import resource
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from onmt_translate import load_batches  # noqa: E402


def main(argv=None):
    parser = argparse.ArgumentParser(description="OpenNMT-tf SavedModel translation throughput.")
    parser.add_argument("--model-path", required=True)
    parser.add_argument("--sentences", required=True, help="tokenized source, one per line")
    parser.add_argument("--batches", required=True)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--latency-batches")
    parser.add_argument("--latency-sentences", type=int, default=50)
    args = parser.parse_args(argv)

    import tensorflow as tf

    with open(args.sentences, encoding="utf-8") as f:
        sentences = [line.split() for line in f]

    def features(index):
        group = [sentences[int(i)] for i in index]
        width = max(len(s) for s in group)
        return dict(tokens=tf.constant([s + [""] * (width - len(s)) for s in group]),
                    length=tf.constant([len(s) for s in group], tf.int32))

    start = time.perf_counter()
    serve = tf.saved_model.load(args.model_path).signatures["serving_default"]
    load_seconds = time.perf_counter() - start
    batches = [(index, features(index)) for _, _, index in load_batches(args.batches)]

    def one_pass():
        start = time.perf_counter()
        outputs = [(index, {k: v.numpy() for k, v in serve(**inputs).items()})
                   for index, inputs in batches]
        return time.perf_counter() - start, outputs

    warmup_seconds, outputs = one_pass()
    passes = []
    for _ in range(args.repeats):
        seconds, outputs = one_pass()
        passes.append(seconds)
    target_tokens = int(sum(int(o["length"][:, 0].sum()) for _, o in outputs))
    latencies = []
    if args.latency_batches:
        for _, _, index in load_batches(args.latency_batches)[:args.latency_sentences]:
            inputs = features(index)
            start = time.perf_counter()
            {k: v.numpy() for k, v in serve(**inputs).items()}
            latencies.append(1000 * (time.perf_counter() - start))
    hypotheses = [None] * len(sentences)
    for index, output in outputs:
        for row, line in enumerate(index):
            tokens = output["tokens"][row, 0, :int(output["length"][row, 0])]
            hypotheses[int(line)] = " ".join(t.decode("utf-8") for t in tokens)
    print(json.dumps(dict(
        side="onmt-savedmodel", tensorflow=tf.__version__, load_seconds=load_seconds,
        warmup_seconds=warmup_seconds, passes=passes, target_tokens=target_tokens,
        target_tokens_per_sec=statistics.median(target_tokens / s for s in passes),
        latency_ms_median=statistics.median(latencies) if latencies else None,
        peak_rss_self_bytes=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        hypotheses=[h for h in hypotheses if h is not None],
    )), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
