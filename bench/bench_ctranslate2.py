"""Serving: OpenNMT-tf 2.32, opennmt-lite's SavedModel and CTranslate2 (float32, int8), side by
side on the same weights; and the BLEU of CTranslate2's quantizations.

    python bench/bench_ctranslate2.py [--runs 2] [--repeats 5] [--latency-sentences 50]
        [--sides opennmt-tf savedmodel ct2-float32 ct2-int8]
    python bench/bench_ctranslate2.py --bleu [--config configs/sample.yml] [--checkpoint K]
        [--quantizations float32 int8 int16]

Speed (default mode). The weights: OpenNMT-tf 2.32's own model, tests/fixtures/onmt_tf_relative
(2 layers, 64 units, relative positions, pre-norm), which every side can load: OpenNMT-tf from its
checkpoint (bench/onmt_translate.py), opennmt-lite by importing it (tests/fixtures/onmt_fixture.yml)
and exporting a SavedModel and CTranslate2 float32 / int8 models with the project's own export
code (cached in runs/bench_cache/ctranslate2/onmt_fixture/). The sentences: the fixture's 100
tokenized test sentences (test.first100.tok.en), mapped to ids once with its vocabulary (OOV id =
vocabulary size, as OpenNMT-tf). Beam 4, length penalty 0, at most 250 tokens, 1 hypothesis.

* throughput: target tokens / s translating the 100 sentences in file-order batches of 32 (the
  same batches for every side); a warm-up pass, then --repeats timed passes, median; target
  tokens = the best hypothesis' tokens without `</s>`;
* latency: median milliseconds to translate one sentence alone (batch 1) over the first
  --latency-sentences sentences (after the throughput passes: warm);
* peak memory: the run's peak RSS (the harness: process tree, polled, and ru_maxrss).

Every side uses both cores (TensorFlow's default thread pools; CTranslate2 intra_threads = the
cores this process may use, inter_threads 1). Sides alternate in fresh processes (bench/harness.py),
--runs rounds; the table gives medians and the ratios to OpenNMT-tf; the JSON record
(runs/bench_results/ctranslate2-<stamp>.json) has the machine (CPU model, instruction sets, load).
The OpenNMT-tf interpreter: bench/onmt_env.py (ONMT_PYTHON=... to use an existing one).

BLEU (--bleu): the config's newest checkpoint (or --checkpoint) exported to CTranslate2 in each
of --quantizations (cached in runs/bench_cache/ctranslate2/<config name>-<checkpoint>/), data/test.en
translated by `run.py infer --ctranslate2`'s code with the config's decoding settings, BLEU
(sacrebleu) against data/test.de, and each model's size. CTranslate2 has no int16 kernels on CPUs
without Intel MKL (AMD: "GEMM_S16 backend: none" with CT2_VERBOSE=1): an int16 model then runs
as int8_float32 (it says so in a warning).
"""

import argparse
import json
import os
import subprocess
import statistics
import sys
import time

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, BENCH_DIR)

import harness  # noqa: E402

ROOT = harness.ROOT
sys.path.insert(0, ROOT)
FIXTURE = os.path.join(ROOT, "tests", "fixtures", "onmt_tf_relative")
FIXTURE_CONFIG = os.path.join(ROOT, "tests", "fixtures", "onmt_fixture.yml")
SENTENCES = os.path.join(FIXTURE, "test.first100.tok.en")
CACHE = os.path.join(ROOT, "runs", "bench_cache", "ctranslate2")
SIDES = ("opennmt-tf", "savedmodel", "ct2-float32", "ct2-int8")
BATCH = 32
OPTIONS = dict(beam_width=4, length_penalty=0.0, n_best=1, maximum_decoding_length=250,
               minimum_decoding_length=0)
# OpenNMT-tf's model, for bench/onmt_translate.py (its --benchmark file: model and vocabularies).
ONMT_MODEL = dict(num_layers=2, num_units=64, num_heads=2, ffn_inner_dim=128, dropout=0.1,
                  attention_dropout=0.1, ffn_dropout=0.1, maximum_relative_position=8,
                  pre_norm=True)


def parse_args(argv=None):
    parser = harness.parser(__doc__, name="ctranslate2", runs=2, timeout=1800, sides=False,
                            mfu=False)
    parser.add_argument("--repeats", type=int, default=5, help="timed passes per run")
    parser.add_argument("--latency-sentences", type=int, default=50)
    parser.add_argument("--sides", nargs="+", choices=SIDES, default=list(SIDES))
    parser.add_argument("--bleu", action="store_true", help="BLEU of the quantizations instead")
    parser.add_argument("--config", default=os.path.join(ROOT, "configs", "sample.yml"))
    parser.add_argument("--checkpoint")
    parser.add_argument("--quantizations", nargs="+", default=["float32", "int8", "int16"])
    parser.add_argument("--bleu-threads", type=int, default=1,
                        help="--bleu: CTranslate2 threads (1: immune to a busy machine's "
                        "OpenMP contention; speed is not what --bleu measures)")
    parser.add_argument("--prepare", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--worker", choices=("savedmodel", "ct2"), help=argparse.SUPPRESS)
    parser.add_argument("--model", help=argparse.SUPPRESS)
    parser.add_argument("--batches", help=argparse.SUPPRESS)
    parser.add_argument("--latency-batches", help=argparse.SUPPRESS)
    parser.add_argument("--ct2-arguments", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def directory_size(path):
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(path) for f in files)


# -- preparation (a child process: the parent stays small, its children's ru_maxrss too) -------

def prepare():
    """Exports the three models of the fixture (once) and writes the batches; prints paths."""
    import numpy as np

    from opennmt_lite import build
    from opennmt_lite.config import load_config
    from opennmt_lite.export import ctranslate2, saved_model
    from opennmt_lite.inference.ctranslate2 import translate_options

    config = load_config([FIXTURE_CONFIG])
    cache = os.path.join(CACHE, "onmt_fixture")
    os.makedirs(cache, exist_ok=True)
    paths = {"savedmodel": os.path.join(cache, "savedmodel-beam4"),
             "ct2-float32": os.path.join(cache, "ct2-float32"),
             "ct2-int8": os.path.join(cache, "ct2-int8")}
    from opennmt_lite.inference.decoding import DecodingOptions

    options = DecodingOptions(**OPTIONS)
    assets = build.assets(config.data)
    if not all(os.path.isdir(p) for p in paths.values()):
        model, assets, _ = build.inference_model(config)
        for side, path in paths.items():
            if os.path.isdir(path):
                continue
            if side == "savedmodel":
                saved_model.export_model(model, assets, options, config.data, path)
            else:
                ctranslate2.export_model(model, assets, options, config.data, path,
                                         quantization=side.split("-")[1])
    with open(SENTENCES, encoding="utf-8") as f:
        sentences = [line.split() for line in f]
    ids = [np.asarray(assets.source_vocabulary.lookup(s), np.int32) for s in sentences]

    def write(path, groups):
        arrays = {"num_batches": np.asarray(len(groups))}
        for i, group in enumerate(groups):
            width = max(len(ids[j]) for j in group)
            batch = np.zeros([len(group), width], np.int32)
            for row, j in enumerate(group):
                batch[row, :len(ids[j])] = ids[j]
            arrays[f"ids_{i:05d}"] = batch
            arrays[f"length_{i:05d}"] = np.asarray([len(ids[j]) for j in group], np.int32)
            arrays[f"index_{i:05d}"] = np.asarray(group, np.int64)
        np.savez(path, **arrays)

    lines = list(range(len(sentences)))
    batches = os.path.join(cache, f"batches{BATCH}.npz")
    write(batches, [lines[i:i + BATCH] for i in range(0, len(lines), BATCH)])
    latency = os.path.join(cache, "batches1.npz")
    write(latency, [[i] for i in lines])
    benchmark = os.path.join(cache, "onmt_benchmark.yml")
    harness.dump_yaml({"model": ONMT_MODEL, "data": {"source_vocabulary": "src-vocab.txt",
                                                      "target_vocabulary": "tgt-vocab.txt"}},
                      benchmark)
    # CTranslate2's translate_batch arguments that decode as opennmt-lite (and OpenNMT-tf) do;
    # in a file, so that the CTranslate2 worker imports neither opennmt_lite nor TensorFlow.
    ct2_arguments = os.path.join(cache, "ct2_arguments.json")
    with open(ct2_arguments, "w") as f:
        json.dump(translate_options(options), f)
    print(json.dumps(dict(paths=paths, batches=batches, latency=latency, benchmark=benchmark,
                          ct2_arguments=ct2_arguments,
                          sizes={side: directory_size(p) for side, p in paths.items()})))


# -- workers (one fresh process per run) ------------------------------------------------------

def load_batches(path, count=None):
    import numpy as np

    with np.load(path) as data:
        n = int(data["num_batches"]) if count is None else min(count, int(data["num_batches"]))
        return [(data[f"ids_{i:05d}"], data[f"length_{i:05d}"], data[f"index_{i:05d}"])
                for i in range(n)]


def tokens_of(batches):
    """The batches as lists of source tokens (the fixture's sentences)."""
    with open(SENTENCES, encoding="utf-8") as f:
        sentences = [line.split() for line in f]
    return [[sentences[int(i)] for i in index] for _, _, index in batches]


def savedmodel_translator(path):
    import tensorflow as tf

    signature = tf.saved_model.load(path).signatures["translate"]

    def translate(batch):
        width = max(len(s) for s in batch)
        result = signature(tokens=tf.constant([s + [""] * (width - len(s)) for s in batch]),
                           length=tf.constant([len(s) for s in batch], tf.int32))
        pieces, lengths = result["tokens"].numpy(), result["length"].numpy()
        return [[p.decode() for p in pieces[i, 0, :lengths[i, 0]]] for i in range(len(batch))]

    return translate


def ct2_translator(path, arguments_file):
    import ctranslate2

    translator = ctranslate2.Translator(path, device="cpu", inter_threads=1,
                                        intra_threads=len(os.sched_getaffinity(0)))
    with open(arguments_file) as f:
        arguments = json.load(f)

    def translate(batch):
        results = translator.translate_batch(batch, max_batch_size=0, **arguments)
        return [r.hypotheses[0] for r in results]

    return translate


def worker(args):
    batches = tokens_of(load_batches(args.batches))
    latency_batches = tokens_of(load_batches(args.latency_batches, args.latency_sentences))
    translate = (savedmodel_translator(args.model) if args.worker == "savedmodel"
                 else ct2_translator(args.model, args.ct2_arguments))

    def one_pass():
        return [translate(batch) for batch in batches]

    warmup, seconds, outputs = harness.timed_passes(one_pass, args.repeats)
    target_tokens = sum(len(h) for batch in outputs for h in batch)
    latencies = []
    for batch in latency_batches:
        start = time.perf_counter()
        translate(batch)
        latencies.append(1000 * (time.perf_counter() - start))
    print(json.dumps(dict(
        side=args.worker, target_tokens=target_tokens, warmup_seconds=warmup, passes=seconds,
        target_tokens_per_sec=statistics.median(target_tokens / s for s in seconds),
        latency_ms_median=statistics.median(latencies),
        hypotheses=[" ".join(h) for batch in outputs for h in batch],
    )), flush=True)


# -- speed ------------------------------------------------------------------------------------

def speed(args):
    session = harness.Session(args.name)
    output = subprocess.run([sys.executable, __file__, "--prepare"], check=True,
                            stdout=subprocess.PIPE, cwd=ROOT).stdout
    prepared = json.loads(output.decode().strip().splitlines()[-1])
    common = ["--batches", prepared["batches"], "--latency-batches", prepared["latency"],
              "--repeats", str(args.repeats), "--latency-sentences", str(args.latency_sentences)]
    sides = []
    for name in args.sides:
        if name == "opennmt-tf":
            command = [session.ensure_onmt(required=True),
                       os.path.join(BENCH_DIR, "onmt_translate.py"),
                       "--benchmark", prepared["benchmark"], "--cache-dir", FIXTURE,
                       "--checkpoint", FIXTURE, "--batches", prepared["batches"],
                       "--latency-batches", prepared["latency"],
                       "--latency-sentences", str(args.latency_sentences),
                       "--repeats", str(args.repeats), "--beam-width", "4",
                       "--maximum-decoding-length", "250"]
        else:
            kind = "savedmodel" if name == "savedmodel" else "ct2"
            command = [sys.executable, __file__, "--worker", kind, "--model",
                       prepared["paths"][name], "--ct2-arguments", prepared["ct2_arguments"],
                       *common]
        sides.append(harness.Side(name, lambda index, command=command: command))
    runs, summary = harness.compare(sides, args.runs, ["target_tokens_per_sec",
                                                       "latency_ms_median"],
                                    session.run_dir, timeout=args.timeout,
                                    baseline="opennmt-tf" if "opennmt-tf" in args.sides else None)
    hypotheses = {}
    for name, records in runs.items():
        for record in records:
            result = record.get("result") or {}
            if "hypotheses" in result:
                hypotheses.setdefault(name, result.pop("hypotheses"))
    reference = hypotheses.get(args.sides[0])
    headers = ["side", "runs ok", "target tok/s (batch 32)", "x OpenNMT-tf", "x paired",
               "latency ms (batch 1)", "peak RSS GB", "model MB", f"same as {args.sides[0]}"]
    rows = []
    for name, s in summary.items():
        r = s.get("ratio") or {}
        same = hypotheses.get(name)
        rows.append([
            name, f"{s['ok']}/{s['runs']}", harness.fmt(s["target_tokens_per_sec"]),
            harness.fmt(r.get("target_tokens_per_sec"), ".2f"),
            harness.fmt(r.get("target_tokens_per_sec_paired_median"), ".2f"),
            harness.fmt(s["latency_ms_median"], ".1f"), harness.gb(s["peak_rss_bytes"]),
            harness.fmt(prepared["sizes"].get(name, 0) / 1e6 or None, ".2f"),
            (f"{sum(a == b for a, b in zip(same, reference))}/{len(reference)}"
             if same and reference else "-"),
        ])
    machine = harness.machine_info()
    isa = "AVX-512" if machine["cpu"]["avx512"] else ("AVX2" if machine["cpu"]["avx2"] else "-")
    print(f"\nServing: OpenNMT-tf 2.32's fixture model, {len(reference or [])} sentences, beam 4, "
          f"batch {BATCH} (throughput, median of {args.repeats} passes) and 1 (latency, "
          f"{args.latency_sentences} sentences); {machine['affinity']} cores, {isa} "
          f"({machine['cpu']['model']}), load average {machine['load_average'][0]:.1f}; "
          f"medians of {args.runs} runs per side")
    print(harness.format_table(headers, rows))
    session.finish(dict(benchmark="ctranslate2", arguments=vars(args), prepared=prepared,
                        summary=summary, runs=runs))


# -- BLEU of the quantizations ----------------------------------------------------------------

def bleu(args):
    import sacrebleu

    from opennmt_lite import build
    from opennmt_lite.config import load_config
    from opennmt_lite.data.text import read_lines
    from opennmt_lite.export import ctranslate2 as export
    from opennmt_lite.inference import ctranslate2 as infer

    session = harness.Session(args.name + "-bleu")
    config = load_config([args.config])
    model, assets, checkpoint = build.inference_model(config, args.checkpoint)
    options = build.decoding_options(config.params, config.infer)
    name = os.path.splitext(os.path.basename(args.config))[0]
    cache = os.path.join(CACHE, f"{name}-{os.path.basename(checkpoint)}")
    references = read_lines(os.path.join(ROOT, "data", "test.de"))
    data = build.inference_input(os.path.join(ROOT, "data", "test.en"), config.infer, assets)
    results = {}
    for quantization in args.quantizations:
        path = os.path.join(cache, quantization)
        if not os.path.isdir(path):
            export.export_model(model, assets, options, config.data, path,
                                quantization=quantization)
        translator = infer.load_translator(path, assets, threads=args.bleu_threads)
        start = time.perf_counter()
        output = infer.translate_file(translator, assets, data, options, progress=False,
                                      unk_token=infer.unknown_token(path))
        seconds = time.perf_counter() - start
        hypotheses = [n_best[0][0] for n_best in output]
        score = sacrebleu.corpus_bleu(hypotheses, [references])
        results[quantization] = dict(bleu=score.score, signature=str(score), seconds=seconds,
                                     size_bytes=os.path.getsize(os.path.join(path, "model.bin")),
                                     directory_bytes=directory_size(path))
    base = results.get("float32")
    print(f"\nBLEU on data/test.* ({len(references)} sentences), checkpoint {checkpoint}, "
          f"beam {options['beam_width']}, {args.bleu_threads} thread(s)")
    rows = [[q, f"{r['bleu']:.2f}", f"{r['bleu'] - base['bleu']:+.2f}" if base else "-",
             f"{r['size_bytes'] / 1e6:.1f}", f"{r['seconds']:.1f}"] for q, r in results.items()]
    print(harness.format_table(["quantization", "BLEU", "vs float32", "model.bin MB",
                                "seconds"], rows))
    session.finish(dict(benchmark="ctranslate2-bleu", arguments=vars(args),
                        checkpoint=checkpoint, options=options, results=results))


def main(argv=None):
    args = parse_args(argv)
    if args.prepare:
        return prepare()
    if args.worker:
        return worker(args)
    if args.bleu:
        return bleu(args)
    return speed(args)


if __name__ == "__main__":
    sys.exit(main())
