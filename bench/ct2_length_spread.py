"""What a real spread of target lengths costs CTranslate2's batches, against lengths forced equal:
the gain of batches of 16 over batches of 1 (beam 4, one thread, CPU time), for sentences all
decoding the mean length, and for data/test.de's reference lengths (a batch decodes until its
longest sentence ends, with fewer sentences at every step after the shortest ends).

    python bench/ct2_length_spread.py [--model runs/bench_cache/serve/base-ctranslate2]
        [--tokenizers runs/bench_cache/serve/base]

A model of the cost, not a measurement of a server: t(b), one decoding step with b sentences
still decoding, is (cost at 24 pieces - cost at 12) / 12, measured with the decoding length forced
(the untrained `bench_serve.py --base-model` chooses its lengths at random); the rest of a batch's
cost (encoder, set-up) is the cost at 12 less 12 t(b). A batch of reference lengths L_i then costs
the rest + sum over steps s of t(#{i: L_i >= s}) (L_i counts </s>), averaged over 2 000 random
batches of 16. (docs/performance.md, issue 38.)
"""

import argparse
import os
import random
import statistics
import time

import pyonmttok  # (before anything that loads TensorFlow)
import ctranslate2

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SIZES = [1, 2, 4, 8, 12, 16]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model",
                        default=os.path.join(ROOT, "runs/bench_cache/serve/base-ctranslate2"))
    parser.add_argument("--tokenizers", default=os.path.join(ROOT, "runs/bench_cache/serve/base"),
                        help="the directory of src.model and tgt.model")
    args = parser.parse_args()
    source = pyonmttok.Tokenizer("none", sp_model_path=os.path.join(args.tokenizers, "src.model"))
    target = pyonmttok.Tokenizer("none", sp_model_path=os.path.join(args.tokenizers, "tgt.model"))
    with open(os.path.join(ROOT, "data", "test.en"), encoding="utf-8") as en, \
            open(os.path.join(ROOT, "data", "test.de"), encoding="utf-8") as de:
        pairs = [(source.tokenize(e.strip())[0], len(target.tokenize(d.strip())[0]) + 1)
                 for e, d in zip(en, de) if e.strip()]
    translator = ctranslate2.Translator(args.model, device="cpu", inter_threads=1, intra_threads=1)
    random.seed(0)

    def cost(size, length, repeats):
        """Median CPU seconds of a batch of `size` test.en sentences decoding `length` pieces."""
        times = []
        for _ in range(repeats):
            batch = [pair[0] for pair in random.sample(pairs, size)]
            start = time.process_time()
            translator.translate_batch(batch, beam_size=4, max_decoding_length=length,
                                       min_decoding_length=length, max_batch_size=0)
            times.append(time.process_time() - start)
        return statistics.median(times)

    cost(4, 12, 2)  # (warm-up)
    costs = {(b, n): cost(b, n, 7 if b < 8 else 5) for b in SIZES for n in (12, 24)}
    step = {b: (costs[b, 24] - costs[b, 12]) / 12 for b in SIZES}
    rest = {b: costs[b, 12] - 12 * step[b] for b in SIZES}

    def step_cost(alive):
        low = max(b for b in SIZES if b <= alive)
        high = min(b for b in SIZES if b >= alive)
        if low == high:
            return step[low]
        return step[low] + (step[high] - step[low]) * (alive - low) / (high - low)

    lengths = [pair[1] for pair in pairs]
    for b in SIZES:
        print(f"batch {b:2}: a step {1000 * step[b]:6.2f} ms, the rest {1000 * rest[b]:6.1f} ms")
    one = statistics.mean(rest[1] + n * step[1] for n in lengths)
    spread = statistics.mean(
        (rest[16] + sum(step_cost(sum(n >= s for n in batch)) for s in range(1, max(batch) + 1))) / 16
        for batch in (random.sample(lengths, 16) for _ in range(2000)))
    mean = round(statistics.mean(lengths))  # (pieces + </s>)
    forced = (rest[1] + mean * step[1]) / ((rest[16] + mean * step[16]) / 16)
    print(f"load average {os.getloadavg()[0]:.1f}; data/test.de: {statistics.mean(lengths) - 1:.1f} "
          f"pieces on average (standard deviation {statistics.pstdev(lengths):.1f})")
    print(f"batches of 16 over batches of 1: {forced:.2f}x at {mean - 1} pieces each, "
          f"{one / spread:.2f}x with the references' lengths")


if __name__ == "__main__":
    main()
