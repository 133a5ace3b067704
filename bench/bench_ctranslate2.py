"""Serving speed: opennmt-lite's SavedModel vs CTranslate2 (float32 and int8), side by side.

    python bench/bench_ctranslate2.py [--config configs/sample.yml] [--checkpoint K]
        [--sentences 500] [--latency-sentences 50] [--rounds 3] [--beam-width 4]
        [--sides savedmodel ct2-float32 ct2-int8] [--onmt-command 'CMD ...']

What is measured, for the same weights (the config's latest checkpoint, or --checkpoint) and the
same test sentences (the first --sentences lines of data/test.en, tokenized once by the config's
source SentencePiece model, so tokenization is not timed):

* throughput: target tokens / s translating all sentences in batches of 32, in file order
  (the same batches for every side), beam --beam-width; target tokens = the best hypothesis'
  tokens without `</s>`;
* latency: median and 90th percentile milliseconds to translate one sentence (batch 1) over the
  first --latency-sentences sentences;
* peak memory: the worker process' maximum resident set size (os.wait4's ru_maxrss).

Each run is a fresh process (`--worker SIDE`) that loads its model, makes one untimed warm-up
pass, then the timed passes. Sides alternate (A, B, C, A, B, C...) for --rounds rounds so slow
drifts of a shared machine hit every side alike; the table gives medians over rounds. Every
side uses all the cores this process may use (TensorFlow's default; CTranslate2 intra_threads).

Models are exported once into runs/bench_cache/ctranslate2/<config name>/ (SavedModel with the
beam width, CTranslate2 float32 and int8) with the project's own `export` code.

OpenNMT-tf 2.32 (not installed here) plugs in with --onmt-command: a shell command template run
as one more side, with {input} (the tokenized sentences file), {beam} and {batch} replaced; it
must print, as its last stdout line, a JSON object {"tokens_per_sec": ..., "latency_ms_median":
..., "latency_ms_p90": ...} measured as above (e.g. a variant of bench/onmt_translate.py run by
bench/.venv-onmt/bin/python on the OpenNMT-tf checkpoint of the same weights).
"""

import argparse
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
SIDES = ("savedmodel", "ct2-float32", "ct2-int8")
BATCH = 32


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=os.path.join(ROOT, "configs", "sample.yml"))
    parser.add_argument("--checkpoint")
    parser.add_argument("--sentences", type=int, default=500)
    parser.add_argument("--latency-sentences", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--beam-width", type=int, default=4)
    parser.add_argument("--sides", nargs="+", choices=SIDES, default=list(SIDES))
    parser.add_argument("--onmt-command", help="OpenNMT-tf side (see the module docstring)")
    parser.add_argument("--cache-dir", help="default runs/bench_cache/ctranslate2/<config name>")
    parser.add_argument("--prepare", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--worker", choices=SIDES, help=argparse.SUPPRESS)
    parser.add_argument("--model", help=argparse.SUPPRESS)
    parser.add_argument("--input", help=argparse.SUPPRESS)
    return parser.parse_args()


# -- preparation (once) -----------------------------------------------------------------------

def prepare(args):
    """Exports the three models (if not cached) and writes the tokenized sentences."""
    from opennmt_lite import build
    from opennmt_lite.config import load_config
    from opennmt_lite.export import ctranslate2, saved_model

    config = load_config([args.config])
    name = os.path.splitext(os.path.basename(args.config))[0]
    cache = args.cache_dir or os.path.join(ROOT, "runs", "bench_cache", "ctranslate2", name)
    os.makedirs(cache, exist_ok=True)
    paths = {"savedmodel": os.path.join(cache, f"savedmodel-beam{args.beam_width}"),
             "ct2-float32": os.path.join(cache, "ct2-float32"),
             "ct2-int8": os.path.join(cache, "ct2-int8")}
    model, assets, checkpoint = build.inference_model(config, args.checkpoint)
    stamp = os.path.join(cache, "checkpoint.txt")  # a new checkpoint invalidates the cache
    if not os.path.exists(stamp) or open(stamp).read() != checkpoint:
        options = build.decoding_options(config.params, config.infer, args.beam_width, 1)
        for side, path in paths.items():
            shutil.rmtree(path, ignore_errors=True)
            if side == "savedmodel":
                saved_model.export_model(model, assets, options, config.data, path)
            else:
                ctranslate2.export_model(model, assets, options, config.data, path,
                                         quantization=side.split("-")[1])
        with open(stamp, "w") as f:
            f.write(checkpoint)
    with open(os.path.join(ROOT, "data", "test.en"), encoding="utf-8") as f:
        lines = [next(f).rstrip("\n") for _ in range(args.sentences)]
    tokens = assets.source_tokenizer.tokenize_batch(lines)
    input_file = os.path.join(cache, f"test.first{args.sentences}.tok.en")
    with open(input_file, "w", encoding="utf-8") as f:
        f.writelines(" ".join(t) + "\n" for t in tokens)
    sizes = {side: directory_size(path) for side, path in paths.items()}
    return paths, input_file, sizes, checkpoint


def directory_size(path):
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(path) for f in files)


# -- workers (one process per run) ------------------------------------------------------------

def read_sentences(path):
    with open(path, encoding="utf-8") as f:
        return [line.split() for line in f]


def savedmodel_translate(path, beam):
    import tensorflow as tf

    model = tf.saved_model.load(path)
    signature = model.signatures["translate"]

    def translate(batch):
        length = max(len(s) for s in batch)
        tokens = tf.constant([s + [""] * (length - len(s)) for s in batch])
        result = signature(tokens=tokens, length=tf.constant([len(s) for s in batch], tf.int32))
        pieces, lengths = result["tokens"].numpy(), result["length"].numpy()
        return [[p.decode() for p in pieces[i, 0, :lengths[i, 0]]] for i in range(len(batch))]

    return translate


def ct2_translate(path, beam):
    import ctranslate2

    translator = ctranslate2.Translator(path, device="cpu", inter_threads=1,
                                        intra_threads=len(os.sched_getaffinity(0)))

    def translate(batch):
        results = translator.translate_batch(batch, beam_size=beam, length_penalty=0.0,
                                             max_decoding_length=250, min_decoding_length=0,
                                             max_input_length=0, max_batch_size=0)
        return [r.hypotheses[0] for r in results]

    return translate


def worker(args):
    sentences = read_sentences(args.input)
    load = savedmodel_translate if args.worker == "savedmodel" else ct2_translate
    translate = load(args.model, args.beam_width)
    batches = [sentences[i:i + BATCH] for i in range(0, len(sentences), BATCH)]
    for batch in batches:  # warm-up (tracing, allocations)
        translate(batch)
    start = time.perf_counter()
    outputs = [hypothesis for batch in batches for hypothesis in translate(batch)]
    elapsed = time.perf_counter() - start
    latencies = []
    for sentence in sentences[:args.latency_sentences]:
        start = time.perf_counter()
        translate([sentence])
        latencies.append(1000 * (time.perf_counter() - start))
    latencies.sort()
    print(json.dumps({
        "tokens_per_sec": sum(len(h) for h in outputs) / elapsed,
        "latency_ms_median": statistics.median(latencies),
        "latency_ms_p90": latencies[int(0.9 * (len(latencies) - 1))],
        "hypotheses": [" ".join(h) for h in outputs],
    }))


# -- the comparison ---------------------------------------------------------------------------

def run_side(command):
    """Runs `command`; -> (its last JSON line, peak RSS in GB)."""
    process = subprocess.Popen(command, stdout=subprocess.PIPE, cwd=ROOT,
                               env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
    output = process.stdout.read().decode()
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0:
        raise RuntimeError(f"{command} failed with status {process.returncode}")
    return json.loads(output.strip().splitlines()[-1]), usage.ru_maxrss * 1024 / 1e9


def main():
    args = parse_args()
    if args.worker:
        return worker(args)
    if args.prepare:
        return print(json.dumps(prepare(args)))
    load = os.getloadavg()[0]
    if load > 0.5:
        print(f"warning: load average {load:.1f}: the machine is busy, figures are noisy",
              file=sys.stderr)
    # Prepared in a child process: this one must stay small, since a child's peak RSS
    # (ru_maxrss) starts from the size of the process it was forked from.
    command = [sys.executable, __file__, "--prepare"] + sys.argv[1:]
    output = subprocess.run(command, check=True, stdout=subprocess.PIPE, cwd=ROOT).stdout
    paths, input_file, sizes, checkpoint = json.loads(output.decode().strip().splitlines()[-1])
    commands = {side: [sys.executable, __file__, "--worker", side, "--model", paths[side],
                       "--input", input_file, "--beam-width", str(args.beam_width),
                       "--latency-sentences", str(args.latency_sentences)]
                for side in args.sides}
    if args.onmt_command:
        command = args.onmt_command  # (replace, not format: the command may hold braces)
        for key, value in (("{input}", shlex.quote(input_file)), ("{beam}", str(args.beam_width)),
                           ("{batch}", str(BATCH))):
            command = command.replace(key, value)
        commands["opennmt-tf"] = ["sh", "-c", command]
    records = {side: [] for side in commands}
    for round_index in range(args.rounds):
        for side, command in commands.items():
            result, peak = run_side(command)
            result["peak_gb"] = peak
            records[side].append(result)
            print(f"round {round_index + 1} {side}: {result['tokens_per_sec']:.0f} tok/s, "
                  f"{result['latency_ms_median']:.1f} ms, {peak:.2f} GB", file=sys.stderr)
    reference = records[args.sides[0]][0].get("hypotheses")
    print(f"checkpoint {checkpoint}; {args.sentences} sentences, beam {args.beam_width}, "
          f"batch {BATCH} (throughput) and 1 (latency, {args.latency_sentences} sentences), "
          f"{len(os.sched_getaffinity(0))} cores, medians of {args.rounds} rounds")
    print(f"| side | target tok/s (batch {BATCH}) | latency ms, median / p90 (batch 1) | "
          f"peak memory | model size | identical to {args.sides[0]} |")
    print("|---|---:|---:|---:|---:|---:|")
    for side, runs in records.items():
        median = lambda key: statistics.median(r[key] for r in runs)  # noqa: E731
        hypotheses = runs[0].get("hypotheses")
        same = ("-" if not (reference and hypotheses) else
                f"{sum(a == b for a, b in zip(hypotheses, reference))}/{len(reference)}")
        size = f"{sizes[side] / 1e6:.1f} MB" if side in sizes else "-"
        print(f"| {side} | {median('tokens_per_sec'):,.0f} | {median('latency_ms_median'):.1f} / "
              f"{median('latency_ms_p90'):.1f} | {median('peak_gb'):.2f} GB | {size} | {same} |")


if __name__ == "__main__":
    main()
