"""Serving: OpenNMT-tf 2.32 (from its checkpoint and from its own exported SavedModel),
opennmt-lite's SavedModel and CTranslate2 (float32, int8), side by side on the same weights; and
the BLEU of CTranslate2's quantizations.

    python bench/bench_ctranslate2.py [--model fixture|sample] [--runs 2] [--repeats 5]
        [--latency-sentences 50] [--sides opennmt-tf onmt-savedmodel savedmodel ct2-float32 ct2-int8]
        [--ct2-threads 2x1 1x1 1x2]
    python bench/bench_ctranslate2.py --bleu [--config configs/sample.yml] [--checkpoint K]
        [--quantizations float32 int8 int16]

Speed (default mode). The weights, loaded by every side, two models (--model):

* fixture (default): OpenNMT-tf 2.32's own model, tests/fixtures/onmt_tf_relative (2 layers, 64
  units, relative positions, pre-norm), and its 100 tokenized test sentences
  (test.first100.tok.en); cache runs/bench_cache/ctranslate2/onmt_fixture/;
* sample: configs/sample.yml's model (3 layers, 256 units, 4 000-piece SentencePiece vocabularies)
  trained ONCE by OpenNMT-tf 2.32 for SAMPLE_STEPS steps, built when absent in
  runs/bench_cache/ctranslate2/sample/ (15-30 minutes of both cores; `sample_model`), and the
  first SAMPLE_SENTENCES lines of data/test.en tokenized with the sample's SentencePiece model.

The sides: `opennmt-tf`: OpenNMT-tf from the checkpoint (bench/onmt_translate.py);
`onmt-savedmodel`: OpenNMT-tf's own SavedModel (`onmt-main ... export --format saved_model`,
cached), served through its `serving_default` signature in OpenNMT-tf's TensorFlow 2.13
(bench/onmt_saved_model.py); `savedmodel`: opennmt-lite's import of the checkpoint (README,
"OpenNMT-tf projects") exported by the project's own code, its `translate` signature; `ct2-*`:
the project's CTranslate2 export, translated as `run.py infer --ctranslate2` does (its threads,
`thread_settings`, and its submission of every batch ahead). Sentences mapped to ids once with
the vocabulary (OOV id = vocabulary size, as OpenNMT-tf). Beam 4, length penalty 0, at most 250
tokens, 1 hypothesis (every export is made with these options).

* throughput: target tokens / s translating the sentences in file-order batches of 32 (the
  same batches for every side); a warm-up pass, then --repeats timed passes, median; target
  tokens = the best hypothesis' tokens without `</s>`;
* latency: median milliseconds to translate one sentence alone (batch 1) over the first
  --latency-sentences sentences (after the throughput passes: warm);
* peak memory: the run's peak RSS (the harness: process tree, polled, and ru_maxrss);
* "same as": translations identical to the first side's (OpenNMT-tf's by default).

TensorFlow sides use their default thread pools (both cores). CTranslate2 uses the threads
`run.py infer --ctranslate2` picks (inter_threads = cores, intra_threads 1: see
opennmt_lite/inference/ctranslate2.py, thread_settings), or with --ct2-threads each CTranslate2
side once per setting (named ct2-int8@2x1...). Sides alternate in fresh processes
(bench/harness.py), --runs rounds; the table gives medians and the ratios to OpenNMT-tf; the JSON
record (runs/bench_results/ctranslate2-<stamp>.json) has the machine (CPU model, instruction sets,
load). The OpenNMT-tf interpreter: bench/onmt_env.py (ONMT_PYTHON=... to use an existing one).

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
SIDES = ("opennmt-tf", "onmt-savedmodel", "savedmodel", "ct2-float32", "ct2-int8")
SAMPLE_CONFIG = os.path.join(ROOT, "configs", "sample.yml")
MODEL_CACHES = {"fixture": "onmt_fixture", "sample": "sample"}
SAMPLE_STEPS = 400  # (configs/sample.yml trains 800: half, to keep the one-time build short)
SAMPLE_SENTENCES = 100  # the first lines of data/test.en
BATCH = 32
OPTIONS = dict(beam_width=4, length_penalty=0.0, n_best=1, maximum_decoding_length=250,
               minimum_decoding_length=0)
# OpenNMT-tf's model, for bench/onmt_translate.py (its --benchmark file: model and vocabularies).
ONMT_MODEL = dict(num_layers=2, num_units=64, num_heads=2, ffn_inner_dim=128, dropout=0.1,
                  attention_dropout=0.1, ffn_dropout=0.1, maximum_relative_position=8,
                  pre_norm=True)


def thread_setting(text):
    """"INTERxINTRA" -> {"inter_threads": INTER, "intra_threads": INTRA}."""
    try:
        inter, intra = (int(n) for n in text.split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected INTERxINTRA, e.g. 2x1") from None
    if inter < 1 or intra < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: thread counts are at least 1")
    return dict(inter_threads=inter, intra_threads=intra)


def parse_args(argv=None):
    parser = harness.parser(__doc__, name="ctranslate2", runs=2, timeout=1800, sides=False,
                            mfu=False)
    parser.add_argument("--repeats", type=int, default=5, help="timed passes per run")
    parser.add_argument("--latency-sentences", type=int, default=50)
    parser.add_argument("--sides", nargs="+", choices=SIDES, default=list(SIDES))
    parser.add_argument("--ct2-threads", nargs="+", type=thread_setting, metavar="INTERxINTRA",
                        help="CTranslate2 sides once per setting (inter_threads x intra_threads, "
                        "e.g. 2x1 1x2 1x1; side names ct2-int8@2x1...) instead of the threads "
                        "`run.py infer --ctranslate2` picks")
    parser.add_argument("--bleu", action="store_true", help="BLEU of the quantizations instead")
    parser.add_argument("--config", default=os.path.join(ROOT, "configs", "sample.yml"))
    parser.add_argument("--checkpoint")
    parser.add_argument("--quantizations", nargs="+", default=["float32", "int8", "int16"])
    parser.add_argument("--bleu-threads", type=int, default=1,
                        help="--bleu: CTranslate2 threads (1: immune to a busy machine's "
                        "OpenMP contention; speed is not what --bleu measures)")
    parser.add_argument("--model", choices=tuple(MODEL_CACHES), default="fixture",
                        help="fixture: OpenNMT-tf's 2-layer 64-unit test model; sample: "
                        "configs/sample.yml's model trained by OpenNMT-tf (built once, ~15-30 "
                        "minutes of both cores)")
    parser.add_argument("--prepare", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--onmt-python", help=argparse.SUPPRESS)
    parser.add_argument("--worker", choices=("savedmodel", "ct2"), help=argparse.SUPPRESS)
    parser.add_argument("--model-path", help=argparse.SUPPRESS)
    parser.add_argument("--batches", help=argparse.SUPPRESS)
    parser.add_argument("--sentences", help=argparse.SUPPRESS)
    parser.add_argument("--latency-batches", help=argparse.SUPPRESS)
    parser.add_argument("--ct2-arguments", help=argparse.SUPPRESS)
    parser.add_argument("--threads", type=thread_setting, help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def directory_size(path):
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(path) for f in files)


# -- preparation (a child process: the parent stays small, its children's ru_maxrss too) -------

def run_logged(command, what):
    """Runs `command` (a long preparation step), its output on stderr; fails naming `what`."""
    print(f"[bench_ctranslate2] {what}: {' '.join(command)}", file=sys.stderr, flush=True)
    start = time.perf_counter()
    subprocess.run(command, check=True, stdout=sys.stderr, cwd=ROOT)
    print(f"[bench_ctranslate2] {what}: done in {time.perf_counter() - start:.0f} s",
          file=sys.stderr, flush=True)


def fixture_model():
    """The fixture: (lite config file, tokenized sentences, OpenNMT-tf model section, its model
    file, its vocabularies' folder, its checkpoint)."""
    return dict(config=FIXTURE_CONFIG, sentences=SENTENCES, onmt_model=ONMT_MODEL,
                model_file=os.path.join(FIXTURE, "model.py"), vocabularies=FIXTURE,
                checkpoint=os.path.join(FIXTURE, "ckpt-500"))


def sample_model(cache, onmt_python):
    """configs/sample.yml's model trained once by OpenNMT-tf 2.32 (cached in `cache`), the same
    dict as `fixture_model`. Steps, each skipped when its files exist: the sample's SentencePiece
    models and vocabularies by `run.py build-vocab` (the project's own), data/train.* and the first
    SAMPLE_SENTENCES lines of data/test.en tokenized with them (OpenNMT-tf's SentencePiece needs
    tensorflow-text, absent from its venv: it reads pieces), then `onmt-main --auto_config train`
    for SAMPLE_STEPS steps with the sample's settings (bench/onmt_translate.py --pretrain)."""
    sample = harness.load_yaml(SAMPLE_CONFIG)
    vocabularies = {side: os.path.join(cache, f"{side}-vocab.txt") for side in ("src", "tgt")}
    tokenization = {side: dict(sample["data"][f"{name}_tokenization"],
                               model=os.path.join(cache, f"{side}.model"))
                    for side, name in (("src", "source"), ("tgt", "target"))}
    onmt_dir = os.path.join(cache, "onmt")
    lite_config = os.path.join(cache, "lite.yml")
    # The import: the OpenNMT-tf model_dir with the sample's tokenization (README, "OpenNMT-tf
    # projects"); auto_config stays on, as the model was trained with --auto_config.
    harness.dump_yaml(dict(
        model_dir=onmt_dir,
        data=dict(train_features_file=os.path.join(ROOT, "data", "train.en"),
                  train_labels_file=os.path.join(ROOT, "data", "train.de"),
                  source_vocabulary=vocabularies["src"], target_vocabulary=vocabularies["tgt"],
                  source_tokenization=tokenization["src"],
                  target_tokenization=tokenization["tgt"]),
        model=sample["model"],
        params={key: value for key, value in sample["params"].items()
                if key != "maximum_decoding_length"},
    ), lite_config)
    if not all(os.path.isfile(p) for p in [*vocabularies.values(),
                                           *(t["model"] for t in tokenization.values())]):
        run_logged([sys.executable, os.path.join(ROOT, "run.py"), "build-vocab", "--config",
                    lite_config], "SentencePiece models of configs/sample.yml (about a minute)")
    from opennmt_lite import build
    from opennmt_lite.config import load_config

    assets = build.assets(load_config([lite_config]).data)
    files = {}
    for name, source, tokenizer, count in (
            ("train.tok.en", "train.en", assets.source_tokenizer, None),
            ("train.tok.de", "train.de", assets.target_tokenizer, None),
            (f"test.first{SAMPLE_SENTENCES}.tok.en", "test.en", assets.source_tokenizer,
             SAMPLE_SENTENCES)):
        files[name] = os.path.join(cache, name)
        if os.path.isfile(files[name]):
            continue
        with open(os.path.join(ROOT, "data", source), encoding="utf-8") as f:
            lines = f.read().splitlines()[:count]
        with open(files[name] + ".tmp", "w", encoding="utf-8") as f:
            f.writelines(" ".join(tokens) + "\n" for tokens in tokenizer.tokenize_batch(lines))
        os.replace(files[name] + ".tmp", files[name])
    checkpoint = os.path.join(onmt_dir, f"ckpt-{SAMPLE_STEPS}")
    if not os.path.isfile(checkpoint + ".index"):
        # configs/sample.yml's training settings, its schedule written out (model_dim) as
        # bench/configs/sample_benchmark.yml does; no evaluation; checkpoints every 200 steps
        # so that an interrupted build resumes.
        benchmark = harness.load_yaml(os.path.join(BENCH_DIR, "configs", "sample_benchmark.yml"))
        train = dict(benchmark["train"], max_step=SAMPLE_STEPS, save_checkpoints_steps=200,
                     keep_checkpoint_max=2, save_summary_steps=25)
        pretrain = os.path.join(cache, "onmt_train.yml")
        harness.dump_yaml(dict(
            model=sample["model"], model_dir=onmt_dir,
            data=dict(train_features_file=files["train.tok.en"],
                      train_labels_file=files["train.tok.de"],
                      source_vocabulary=vocabularies["src"],
                      target_vocabulary=vocabularies["tgt"]),
            params=benchmark["params"], train=train), pretrain)
        run_logged(["nice", "-n", "10", onmt_python, os.path.join(BENCH_DIR, "onmt_translate.py"),
                    "--pretrain", pretrain, "--work-dir", os.path.join(cache, "onmt-work"),
                    "--seed", "1234"],
                   f"training configs/sample.yml's model with OpenNMT-tf 2.32, once, "
                   f"{SAMPLE_STEPS} steps (15-30 minutes of both cores)")
    return dict(config=lite_config, sentences=files[f"test.first{SAMPLE_SENTENCES}.tok.en"],
                onmt_model=sample["model"],
                model_file=os.path.join(cache, "onmt-work", "model.py"), vocabularies=cache,
                checkpoint=checkpoint)


def onmt_export(model, path, onmt_python):
    """OpenNMT-tf's own SavedModel of `model` (`onmt-main ... export --format saved_model`) with
    the benchmark's decoding options; its model_dir is a scratch folder beside `path` (onmt-main
    writes model_description.py there)."""
    work = path + "-work"
    os.makedirs(work, exist_ok=True)
    config = os.path.join(work, "config.yml")
    harness.dump_yaml(dict(
        model_dir=work,
        data={f"{side}_vocabulary": os.path.join(model["vocabularies"], f"{prefix}-vocab.txt")
              for side, prefix in (("source", "src"), ("target", "tgt"))},
        params=dict(beam_width=OPTIONS["beam_width"], length_penalty=OPTIONS["length_penalty"],
                    maximum_decoding_length=OPTIONS["maximum_decoding_length"],
                    num_hypotheses=OPTIONS["n_best"])), config)
    run_logged([onmt_python, "-c", "import sys; from opennmt.bin.main import main; sys.exit(main())",
                "--model", model["model_file"], "--config", config,
                "--checkpoint_path", model["checkpoint"],
                "export", "--output_dir", path, "--format", "saved_model"],
               "OpenNMT-tf's SavedModel export")


def prepare(args):
    """Exports the models of `args.model` (once) and writes the batches; prints paths."""
    import numpy as np

    cache = os.path.join(CACHE, MODEL_CACHES[args.model])
    os.makedirs(cache, exist_ok=True)
    model = (fixture_model() if args.model == "fixture"
             else sample_model(cache, args.onmt_python))

    from opennmt_lite import build
    from opennmt_lite.config import load_config
    from opennmt_lite.export import ctranslate2, saved_model
    from opennmt_lite.inference.ctranslate2 import thread_settings, translate_options
    from opennmt_lite.inference.decoding import DecodingOptions

    config = load_config([model["config"]])
    paths = {"savedmodel": os.path.join(cache, "savedmodel-beam4"),
             "ct2-float32": os.path.join(cache, "ct2-float32"),
             "ct2-int8": os.path.join(cache, "ct2-int8")}
    options = DecodingOptions(**OPTIONS)
    assets = build.assets(config.data)
    if not all(os.path.isdir(p) for p in paths.values()):
        lite_model, assets, _ = build.inference_model(config, model["checkpoint"])
        for side, path in paths.items():
            if os.path.isdir(path):
                continue
            if side == "savedmodel":
                saved_model.export_model(lite_model, assets, options, config.data, path)
            else:
                ctranslate2.export_model(lite_model, assets, options, config.data, path,
                                         quantization=side.split("-")[1])
    if args.onmt_python:
        paths["onmt-savedmodel"] = os.path.join(cache, "onmt-savedmodel-beam4")
        if not os.path.isdir(paths["onmt-savedmodel"]):
            onmt_export(model, paths["onmt-savedmodel"], args.onmt_python)
    with open(model["sentences"], encoding="utf-8") as f:
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
    harness.dump_yaml({"model": model["onmt_model"], "data": {
        "source_vocabulary": os.path.join(model["vocabularies"], "src-vocab.txt"),
        "target_vocabulary": os.path.join(model["vocabularies"], "tgt-vocab.txt")}}, benchmark)
    # CTranslate2's translate_batch arguments that decode as opennmt-lite (and OpenNMT-tf) do,
    # and the threads `run.py infer --ctranslate2` picks; in a file, so that the CTranslate2
    # worker imports neither opennmt_lite nor TensorFlow.
    ct2_arguments = os.path.join(cache, "ct2_arguments.json")
    with open(ct2_arguments, "w") as f:
        json.dump(dict(translate=translate_options(options), threads=thread_settings(options)), f)
    print(json.dumps(dict(model=args.model, paths=paths, batches=batches, latency=latency,
                          benchmark=benchmark, sentences=model["sentences"],
                          checkpoint=model["checkpoint"], ct2_arguments=ct2_arguments,
                          sizes={side: directory_size(p) for side, p in paths.items()})))


# -- workers (one fresh process per run) ------------------------------------------------------

def load_batches(path, count=None):
    import numpy as np

    with np.load(path) as data:
        n = int(data["num_batches"]) if count is None else min(count, int(data["num_batches"]))
        return [(data[f"ids_{i:05d}"], data[f"length_{i:05d}"], data[f"index_{i:05d}"])
                for i in range(n)]


def tokens_of(batches, sentences_file):
    """The batches as lists of source tokens (the lines of `sentences_file`)."""
    with open(sentences_file, encoding="utf-8") as f:
        sentences = [line.split() for line in f]
    return [[sentences[int(i)] for i in index] for _, _, index in batches]


def savedmodel_translator(path):
    import tensorflow as tf

    with open(os.path.join(path, "saved_model.pb"), "rb") as f:
        text_signatures = b"SentencepieceOp" in f.read()
    if text_signatures:
        # (its text signatures hold SentencePiece ops: tensorflow_text registers them, as in any
        # serving process; see opennmt_lite/export/saved_model.py)
        import tensorflow_text  # noqa: F401

    signature = tf.saved_model.load(path).signatures["translate"]

    def translate(batches):
        outputs = []
        for batch in batches:
            width = max(len(s) for s in batch)
            result = signature(tokens=tf.constant([s + [""] * (width - len(s)) for s in batch]),
                               length=tf.constant([len(s) for s in batch], tf.int32))
            pieces, lengths = result["tokens"].numpy(), result["length"].numpy()
            outputs.append([[p.decode() for p in pieces[i, 0, :lengths[i, 0]]]
                            for i in range(len(batch))])
        return outputs

    return translate


def ct2_translator(path, arguments_file, threads=None):
    """Translates a list of batches as `run.py infer --ctranslate2` does: the threads of
    `thread_settings`, every batch submitted at once (with several inter_threads, batches are
    translated in parallel), the results read in order."""
    import ctranslate2

    with open(arguments_file) as f:
        settings = json.load(f)
    translator = ctranslate2.Translator(path, device="cpu", **(threads or settings["threads"]))

    def translate(batches):
        pending = [translator.translate_batch(batch, max_batch_size=0, asynchronous=True,
                                              **settings["translate"]) for batch in batches]
        return [[r.result().hypotheses[0] for r in results] for results in pending]

    return translate


def worker(args):
    batches = tokens_of(load_batches(args.batches), args.sentences)
    latency_batches = tokens_of(load_batches(args.latency_batches, args.latency_sentences),
                                args.sentences)
    translate = (savedmodel_translator(args.model_path) if args.worker == "savedmodel"
                 else ct2_translator(args.model_path, args.ct2_arguments, args.threads))

    def one_pass():
        return translate(batches)

    warmup, seconds, outputs = harness.timed_passes(one_pass, args.repeats)
    target_tokens = sum(len(h) for batch in outputs for h in batch)
    latencies = []
    for batch in latency_batches:
        start = time.perf_counter()
        translate([batch])
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
    needs_onmt = bool({"opennmt-tf", "onmt-savedmodel"} & set(args.sides)) or args.model == "sample"
    onmt_python = session.ensure_onmt(required=True) if needs_onmt else None
    if args.model == "sample" and not os.path.isdir(os.path.join(CACHE, "sample", "onmt")):
        print(f"--model sample: first use, building the model once in {CACHE}/sample/: "
              f"SentencePiece models, then OpenNMT-tf 2.32 trains configs/sample.yml's model "
              f"for {SAMPLE_STEPS} steps (15-30 minutes of both cores)", file=sys.stderr,
              flush=True)
    prepare_command = [sys.executable, __file__, "--prepare", "--model", args.model]
    if onmt_python:
        prepare_command += ["--onmt-python", onmt_python]
    output = subprocess.run(prepare_command, check=True, stdout=subprocess.PIPE, cwd=ROOT).stdout
    prepared = json.loads(output.decode().strip().splitlines()[-1])
    common = ["--batches", prepared["batches"], "--latency-batches", prepared["latency"],
              "--repeats", str(args.repeats), "--latency-sentences", str(args.latency_sentences)]
    sides = []
    for name in args.sides:
        if name == "opennmt-tf":
            command = [onmt_python, os.path.join(BENCH_DIR, "onmt_translate.py"),
                       "--benchmark", prepared["benchmark"], "--cache-dir", CACHE,
                       "--checkpoint", prepared["checkpoint"], "--batches", prepared["batches"],
                       "--latency-batches", prepared["latency"],
                       "--latency-sentences", str(args.latency_sentences),
                       "--repeats", str(args.repeats), "--beam-width", "4",
                       "--maximum-decoding-length", str(OPTIONS["maximum_decoding_length"])]
        elif name == "onmt-savedmodel":
            command = [onmt_python, os.path.join(BENCH_DIR, "onmt_saved_model.py"),
                       "--model-path", prepared["paths"][name],
                       "--sentences", prepared["sentences"], *common]
        else:
            kind = "savedmodel" if name == "savedmodel" else "ct2"
            command = [sys.executable, __file__, "--worker", kind, "--model-path",
                       prepared["paths"][name], "--ct2-arguments", prepared["ct2_arguments"],
                       "--sentences", prepared["sentences"], *common]
            if kind == "ct2" and args.ct2_threads:
                for threads in args.ct2_threads:
                    setting = f"{threads['inter_threads']}x{threads['intra_threads']}"
                    variant = command + ["--threads", setting]
                    sides.append(harness.Side(f"{name}@{setting}",
                                              lambda index, command=variant: command))
                continue
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
    first = next(iter(summary))  # (the first side run: the reference of "same as")
    reference = hypotheses.get(first)
    headers = ["side", "runs ok", "target tok/s (batch 32)", "x OpenNMT-tf", "x paired",
               "latency ms (batch 1)", "peak RSS GB", "model MB", f"same as {first}"]
    rows = []
    identical = {name: sum(a == b for a, b in zip(hypotheses[name], reference))
                 for name in hypotheses if reference}
    for name, s in summary.items():
        r = s.get("ratio") or {}
        same = hypotheses.get(name)
        rows.append([
            name, f"{s['ok']}/{s['runs']}", harness.fmt(s["target_tokens_per_sec"]),
            harness.fmt(r.get("target_tokens_per_sec"), ".2f"),
            harness.fmt(r.get("target_tokens_per_sec_paired_median"), ".2f"),
            harness.fmt(s["latency_ms_median"], ".1f"), harness.gb(s["peak_rss_bytes"]),
            harness.fmt(prepared["sizes"].get(name.split("@")[0], 0) / 1e6 or None, ".2f"),
            f"{identical[name]}/{len(reference)}" if same and reference else "-",
        ])
    machine = harness.machine_info()
    isa = "AVX-512" if machine["cpu"]["avx512"] else ("AVX2" if machine["cpu"]["avx2"] else "-")
    description = {"fixture": "OpenNMT-tf 2.32's fixture model (2 layers, 64 units)",
                   "sample": f"configs/sample.yml's model (3 layers, 256 units) trained "
                             f"{SAMPLE_STEPS} steps by OpenNMT-tf 2.32"}[args.model]
    with open(prepared["ct2_arguments"]) as f:
        threads = json.load(f)["threads"]
    print(f"\nServing: {description}, {len(reference or [])} sentences, beam 4, "
          f"batch {BATCH} (throughput, median of {args.repeats} passes) and 1 (latency, "
          f"{args.latency_sentences} sentences); {machine['affinity']} cores, {isa} "
          f"({machine['cpu']['model']}), load average {machine['load_average'][0]:.1f}; "
          f"medians of {args.runs} runs per side; CTranslate2 "
          + ("inter_threads x intra_threads as named" if args.ct2_threads else
             f"inter_threads {threads['inter_threads']}, intra_threads "
             f"{threads['intra_threads']}"))
    if reference:
        lengths = [len(h.split()) for h in reference]
        print(f"{first} output: {sum(lengths)} target tokens, mean length "
              f"{sum(lengths) / len(lengths):.1f}, longest {max(lengths)}, "
              f"{sum(n >= OPTIONS['maximum_decoding_length'] for n in lengths)} at the maximum "
              f"decoding length ({OPTIONS['maximum_decoding_length']})")
    print(harness.format_table(headers, rows))
    session.finish(dict(benchmark="ctranslate2", arguments=vars(args), prepared=prepared,
                        ct2_threads=threads, reference_side=first, identical=identical,
                        reference_lengths=[len(h.split()) for h in reference or []],
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
        return prepare(args)
    if args.worker:
        return worker(args)
    if args.bleu:
        return bleu(args)
    return speed(args)


if __name__ == "__main__":
    sys.exit(main())
