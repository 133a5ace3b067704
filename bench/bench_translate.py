"""Translation throughput (beam search), opennmt-lite vs OpenNMT-tf 2.32, side by side.

    python bench/bench_translate.py [--runs 3] [--repeats 2] [--only onmt|lite]
                                    [--beam-width 4] [--batch-size 32] [--steps 1500]

1. Prepares the shared data once (bench/prepare.py, runs/bench_cache/).
2. The batches, defined once: OpenNMT-tf's own inference pipeline over the test source
   (runs/bench_cache/test.tok.en, 500 sentences), with auto_config's `infer:` settings
   `batch_size: 32, batch_type: examples, length_bucket_width: 5` (`--batch-size`,
   `--batch-type`, `--length-bucket-width`), saved with each sentence's line number in
   runs/bench_cache/translate/batches-<type><size>-w<width>.npz. Both sides run these very
   batches, in the same order.
3. The model, trained once: a randomly initialised model emits `maximum_decoding_length` tokens
   of garbage for every sentence, which says nothing about real translation. So the benchmark
   model (bench/configs/train_benchmark.yml) is pre-trained briefly BY OPENNMT-TF ITSELF
   (`onmt-main --auto_config --seed 1234 train`, `--steps` steps, default 1 500, with the
   PRETRAIN overrides below: 2 048-token batches without accumulation, Noam schedule scaled 1.0
   with 600 warm-up steps), cached in runs/bench_cache/translate/pretrain/ (a larger --steps
   resumes the cached training, a smaller one is refused). Both sides
   load that checkpoint (opennmt-lite through `opennmt_lite.onmt_compat.load_onmt_model`).
   `--checkpoint PATH` uses another OpenNMT-tf checkpoint instead (e.g. the untrained
   runs/bench_cache/onmt_init_ckpt, with a small `--maximum-decoding-length`).
4. Alternates runs, each a fresh process: opennmt-lite, OpenNMT-tf, opennmt-lite, ... Each run
   traces its function, makes one untimed warm-up pass over all batches, then `--repeats` timed
   passes; each batch's outputs are fetched to numpy inside the timed loop. The run's figures
   are the medians over passes of target tokens / s and sentences / s.
5. Prints the table (median over runs, peak RSS, ratios lite / OpenNMT-tf, the median of the
   per-round paired ratios), how many of the translations are identical between the two
   frameworks, and writes runs/bench_results/<name>-<timestamp>.json; the hypotheses of every
   run are in runs/bench_results/<name>-<timestamp>/runN-<side>.hyp (test-set order).

Target tokens: the best hypothesis' length WITHOUT `</s>` (OpenNMT-tf's `predictions["length"]`,
opennmt-lite's `DecodingResult.lengths`), summed over the 500 sentences; identical on both sides
when the translations are.

OpenNMT-tf side: bench/onmt_translate.py (`tf.function(model.infer)` with the beam search params,
as `onmt-main infer` runs it). opennmt-lite side (this file, `--worker lite`):
`Transformer(**model)`, `load_onmt_model(checkpoint, model)`,
`opennmt_lite.inference.translation_function(model, beam_width=4, n_best=1,
length_penalty=0, maximum_decoding_length=250)` (a tf.function over [None, None] int32 ids and
[None] int32 lengths).
"""

import argparse
import copy
import json
import os
import resource
import statistics
import sys
import time

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, BENCH_DIR)

import harness  # noqa: E402
import prepare  # noqa: E402

ROOT = harness.ROOT
DEFAULT_BENCHMARK = os.path.join(BENCH_DIR, "configs", "train_benchmark.yml")
LITE, ONMT = "opennmt-lite", "opennmt-tf"
SKIPPED_EXIT = 3
PRETRAIN_SEED = 1234

# The pre-training: the benchmark's model, data, optimizer and label smoothing, with these
# overrides (a short run needs a larger early learning rate than auto_config's 8 000 warm-up
# steps give, and more updates per second than 8 192-token accumulated batches).
PRETRAIN = dict(
    params=dict(learning_rate=1.0, decay_params=dict(model_dim=256, warmup_steps=600)),
    train=dict(
        batch_type="tokens",
        batch_size=2048,
        effective_batch_size=2048,   # no accumulation (auto_config would set 25 000)
        save_summary_steps=50,
        keep_checkpoint_max=1,
        average_last_checkpoints=0,  # auto_config's 8 would average into model_dir/avg
    ),
)


def read_json(path):
    try:
        with open(path, encoding="utf-8") as stream:
            return json.load(stream)
    except (OSError, ValueError):
        return None


def write_json(path, value):
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as stream:
        json.dump(value, stream, indent=2, sort_keys=True)
        stream.write("\n")
    os.replace(tmp, path)


def target_vocabulary(cache_dir, benchmark):
    """id -> token of the target vocabulary; the OOV id (= number of lines) -> <unk>."""
    path = os.path.join(cache_dir, benchmark["data"]["target_vocabulary"])
    with open(path, encoding="utf-8") as stream:
        tokens = stream.read().split("\n")
    if tokens and tokens[-1] == "":
        tokens.pop()
    return tokens + ["<unk>"]


# --------------------------------------------------------------------------------------------
# The opennmt-lite worker (a separate process, like the OpenNMT-tf side)


def lite_worker(args):
    """Measures opennmt-lite's translation; prints one JSON line. Exit status 3 = not available."""
    sys.path.insert(0, ROOT)
    sys.path.insert(0, BENCH_DIR)
    result = dict(framework=LITE)
    try:
        import keras
        import numpy as np
        import tensorflow as tf
        from opennmt_lite.inference import translation_function
        from opennmt_lite.models import Transformer
        from opennmt_lite.onmt_compat import load_onmt_model
    except ImportError as error:
        result["skipped"] = f"opennmt-lite is not importable: {error}"
        print(json.dumps(result), flush=True)
        return SKIPPED_EXIT
    from onmt_translate import load_batches  # numpy-only

    benchmark = harness.load_yaml(args.benchmark)
    stats = prepare.read_stats(args.cache_dir)
    model = Transformer(
        stats["sentencepiece"]["en"]["vocabulary_size_with_oov"],
        stats["sentencepiece"]["de"]["vocabulary_size_with_oov"],
        **benchmark["model"],
    )
    prefix = load_onmt_model(args.checkpoint, model)
    options = dict(beam_width=args.beam_width, n_best=1, length_penalty=args.length_penalty,
                   maximum_decoding_length=args.maximum_decoding_length)
    translate = translation_function(model, **options)

    batches = load_batches(args.batches)
    tensors = [(tf.constant(ids.astype(np.int32)), tf.constant(length.astype(np.int32)))
               for ids, length, _ in batches]
    sentences = int(sum(len(index) for _, _, index in batches))
    source_tokens = int(sum(int(length.sum()) for _, length, _ in batches))

    start = time.perf_counter()
    translate.get_concrete_function()
    trace_seconds = time.perf_counter() - start

    def one_pass():
        outputs = []
        start = time.perf_counter()
        for ids, length in tensors:
            decoded = translate(ids, length)
            outputs.append((decoded.ids.numpy(), decoded.lengths.numpy(),
                            decoded.log_probs.numpy()))
        return time.perf_counter() - start, outputs

    warmup_seconds, outputs = one_pass()
    passes = []
    for _ in range(args.repeats):
        seconds, outputs = one_pass()
        target_tokens = int(sum(int(lengths[:, 0].sum()) for _, lengths, _ in outputs))
        passes.append(dict(seconds=seconds, target_tokens=target_tokens,
                           target_tokens_per_sec=target_tokens / seconds,
                           sentences_per_sec=sentences / seconds))

    vocabulary = target_vocabulary(args.cache_dir, benchmark)
    hypotheses = [None] * sentences
    log_probs = [None] * sentences
    lengths_out = [None] * sentences
    for (_, _, index), (ids, lengths, scores) in zip(batches, outputs):
        for row, line in enumerate(index):
            length = int(lengths[row, 0])
            hypotheses[int(line)] = " ".join(vocabulary[i] for i in ids[row, 0, :length])
            log_probs[int(line)] = float(scores[row, 0])
            lengths_out[int(line)] = length
    result.update(
        tensorflow=tf.__version__,
        keras=keras.__version__,
        checkpoint=prefix,
        params=options,
        batches=len(batches),
        sentences=sentences,
        source_tokens=source_tokens,
        trace_seconds=trace_seconds,
        warmup_seconds=warmup_seconds,
        passes=passes,
        target_tokens=passes[-1]["target_tokens"] if passes else None,
        target_tokens_per_sec=statistics.median(p["target_tokens_per_sec"] for p in passes),
        sentences_per_sec=statistics.median(p["sentences_per_sec"] for p in passes),
        peak_rss_self_bytes=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        hypotheses=hypotheses,
        lengths=lengths_out,
        log_probs=log_probs,
    )
    print(json.dumps(result), flush=True)
    return 0


# --------------------------------------------------------------------------------------------
# Cached inputs: batches and the pre-trained checkpoint


def translate_cache_dir(cache_dir):
    path = os.path.join(cache_dir, "translate")
    os.makedirs(path, exist_ok=True)
    return path


def data_fingerprint(paths):
    """The shared cache's manifest (inputs' hashes and parameters): the batches and the trained
    checkpoint are rebuilt when it changes."""
    return read_json(paths["manifest"])


def ensure_batches(onmt_python, paths, args, run_dir):
    """The test-set batches made by OpenNMT-tf's inference pipeline; returns the npz path."""
    directory = translate_cache_dir(paths["cache_dir"])
    name = f"batches-{args.batch_type}{args.batch_size}-w{args.length_bucket_width}"
    npz = os.path.join(directory, name + ".npz")
    sidecar = os.path.join(directory, name + ".json")
    wanted = dict(data=data_fingerprint(paths), features="test.tok.en",
                  batch_size=args.batch_size, batch_type=args.batch_type,
                  length_bucket_width=args.length_bucket_width)
    recorded = read_json(sidecar)
    if os.path.exists(npz) and recorded and recorded.get("wanted") == wanted:
        return npz, recorded
    if onmt_python is None:
        raise SystemExit(f"{npz} is missing or stale: it is written by OpenNMT-tf; run once "
                         "without --only lite")
    harness.log(f"writing the test-set batches with OpenNMT-tf's inference pipeline: {npz}")
    record = harness.run_measured(
        [onmt_python, os.path.join(BENCH_DIR, "onmt_translate.py"), "--benchmark", args.benchmark,
         "--cache-dir", paths["cache_dir"], "--write-batches", npz,
         "--features", paths["test_en"], "--batch-size", str(args.batch_size),
         "--batch-type", args.batch_type, "--length-bucket-width", str(args.length_bucket_width)],
        os.path.join(run_dir, "write-batches"),
    )
    if record["returncode"] != 0 or not record["result"]:
        raise SystemExit("writing the batches failed:\n" + harness.tail(record["stderr"]))
    recorded = dict(wanted=wanted, result=record["result"])
    write_json(sidecar, recorded)
    return npz, recorded


def pretrain_config(benchmark, cache_dir, steps, model_dir):
    config = copy.deepcopy(benchmark)
    config["model_dir"] = model_dir
    config["data"] = {key: os.path.join(cache_dir, value) for key, value in config["data"].items()}
    for section, values in PRETRAIN.items():
        for key, value in values.items():
            config[section][key] = copy.deepcopy(value)
    config["train"]["max_step"] = int(steps)
    config["train"]["save_checkpoints_steps"] = int(steps)
    config["train"]["save_summary_steps"] = min(PRETRAIN["train"]["save_summary_steps"],
                                                int(steps))
    return config


def ensure_pretrained(onmt_python, paths, args, run_dir):
    """The checkpoint trained by OpenNMT-tf for --steps steps. Returns (prefix, info).

    Cached in runs/bench_cache/translate/pretrain/ (one model_dir, the last checkpoint kept).
    Asking for more steps than cached resumes OpenNMT-tf's training there (it restores the
    model and optimizer and trains up to the new max_step; the data order restarts from the
    seed); asking for fewer is refused (delete the directory to retrain); a change of the data or
    of PRETRAIN trains again from scratch."""
    import shutil

    directory = os.path.join(translate_cache_dir(paths["cache_dir"]), "pretrain")
    done = os.path.join(directory, "done.json")
    benchmark = harness.load_yaml(args.benchmark)
    model_dir = os.path.join(directory, "model_dir")
    config = pretrain_config(benchmark, paths["cache_dir"], args.steps, model_dir)
    base = copy.deepcopy(config)
    for key in ("max_step", "save_checkpoints_steps", "save_summary_steps"):
        base["train"].pop(key)
    wanted = dict(data=data_fingerprint(paths), config=base, seed=PRETRAIN_SEED)
    recorded = read_json(done)
    usable = bool(recorded and recorded.get("wanted") == wanted and recorded.get("checkpoint")
                  and os.path.exists(recorded["checkpoint"] + ".index"))
    if usable and recorded["steps"] == args.steps:
        return recorded["checkpoint"], recorded
    if usable and recorded["steps"] > args.steps:
        raise SystemExit(f"{directory} holds a model trained for {recorded['steps']} steps, more "
                         f"than --steps {args.steps}; use --steps {recorded['steps']}, or delete "
                         "that directory to train from scratch")
    resume = usable
    if onmt_python is None:
        raise SystemExit(f"no checkpoint of {args.steps} steps in {directory}: it is trained by "
                         "OpenNMT-tf; run once without --only lite (or pass --checkpoint)")
    if not resume:
        shutil.rmtree(directory, ignore_errors=True)
        recorded = dict(wanted=wanted, steps=0, segments=[])
    os.makedirs(directory, exist_ok=True)
    config_path = os.path.join(directory, "pretrain.yml")
    harness.dump_yaml(config, config_path)
    harness.log(f"pre-training the benchmark model with OpenNMT-tf from step {recorded['steps']} "
                f"to {args.steps} (once, cached in {os.path.relpath(directory, ROOT)}; log: "
                f"{os.path.relpath(run_dir, ROOT)}/pretrain.err)")
    start = time.time()
    record = harness.run_measured(
        [onmt_python, os.path.join(BENCH_DIR, "onmt_translate.py"), "--pretrain", config_path,
         "--work-dir", directory, "--seed", str(PRETRAIN_SEED)],
        os.path.join(run_dir, "pretrain"),
    )
    if record["returncode"] != 0 or not (record["result"] or {}).get("checkpoint"):
        raise SystemExit("pre-training failed:\n" + harness.tail(record["stderr"]))
    reports = parse_onmt_reports(record["stderr"])
    recorded["segments"].append(dict(from_step=recorded["steps"], to_step=args.steps,
                                     wall_seconds=time.time() - start, reports=reports))
    recorded.update(steps=args.steps, checkpoint=record["result"]["checkpoint"])
    write_json(done, recorded)
    harness.log(f"pre-trained in {time.time() - start:.0f} s; last loss "
                f"{reports[-1]['loss'] if reports else '?'}")
    return recorded["checkpoint"], recorded


def parse_onmt_reports(stderr_path):
    """OpenNMT-tf's training reports (step, loss, tokens/s) from its log."""
    from onmt_train import REPORT

    reports = []
    try:
        with open(stderr_path, encoding="utf-8", errors="replace") as stream:
            for line in stream:
                match = REPORT.search(line)
                if match:
                    reports.append(dict(step=int(match.group("step")),
                                        loss=float(match.group("loss")),
                                        learning_rate=float(match.group("lr")),
                                        tokens_per_sec=int(match.group("tokens"))))
    except OSError:
        pass
    return reports


# --------------------------------------------------------------------------------------------
# Comparison of the outputs


def compare(a, b):
    """Identical translations between two results (test-set order), and the largest
    |log-prob difference| among the identical ones."""
    ha, hb = a.get("hypotheses") or [], b.get("hypotheses") or []
    pa, pb = a.get("log_probs") or [], b.get("log_probs") or []
    identical = [i for i, (x, y) in enumerate(zip(ha, hb)) if x == y]
    diffs = [abs(pa[i] - pb[i]) for i in identical if i < len(pa) and i < len(pb)]
    return dict(
        identical=len(identical),
        compared=min(len(ha), len(hb)),
        different_lines=[i for i in range(min(len(ha), len(hb))) if ha[i] != hb[i]],
        max_abs_log_prob_diff_identical=max(diffs) if diffs else None,
    )


def output_stats(result, maximum_length, batch_indices=()):
    """Length statistics of the best hypotheses; `batch_indices`: the line numbers of each batch
    (a batch decodes until its longest hypothesis ends)."""
    lengths = result.get("lengths") or []
    if not lengths:
        return {}
    return dict(
        batches_at_maximum_decoding_length=sum(
            1 for index in batch_indices if max(lengths[int(i)] for i in index) >= maximum_length),
        target_tokens=sum(lengths),
        mean_length=sum(lengths) / len(lengths),
        median_length=statistics.median(lengths),
        max_length=max(lengths),
        at_maximum_decoding_length=sum(1 for n in lengths if n >= maximum_length),
        empty=sum(1 for n in lengths if n == 0),
    )


def write_hypotheses(path, result):
    with open(path, "w", encoding="utf-8") as stream:
        stream.write("".join(h + "\n" for h in result.get("hypotheses") or []))


# --------------------------------------------------------------------------------------------
# The driver


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3, help="runs per framework (alternated)")
    parser.add_argument("--repeats", type=int, default=2, help="timed passes per run")
    parser.add_argument("--only", choices=("onmt", "lite"), default=None)
    parser.add_argument("--beam-width", type=int, default=4)
    parser.add_argument("--length-penalty", type=float, default=0.0)
    parser.add_argument("--maximum-decoding-length", type=int, default=250)
    parser.add_argument("--batch-size", type=int, default=32, help="inference batch size")
    parser.add_argument("--batch-type", choices=("examples", "tokens"), default="examples")
    parser.add_argument("--length-bucket-width", type=int, default=5)
    parser.add_argument("--steps", type=int, default=1500,
                        help="OpenNMT-tf pre-training steps of the benchmark model (cached)")
    parser.add_argument("--checkpoint", default=None,
                        help="OpenNMT-tf checkpoint to use on both sides instead of the "
                             "pre-trained one")
    parser.add_argument("--benchmark", default=DEFAULT_BENCHMARK)
    parser.add_argument("--cache-dir", default=prepare.DEFAULT_CACHE_DIR)
    parser.add_argument("--name", default="translate", help="results name prefix")
    parser.add_argument("--timeout", type=float, default=3600, help="seconds per run")
    parser.add_argument("--worker", choices=("lite",), help=argparse.SUPPRESS)
    parser.add_argument("--batches", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker == "lite":
        return lite_worker(args)

    import onmt_env

    stamp = harness.timestamp()
    warning = harness.warn_if_busy()
    paths = prepare.prepare(args.cache_dir)
    run_dir = harness.run_directory(args.name, stamp)

    onmt_python = None
    try:
        onmt_python = onmt_env.ensure_onmt_python(create=args.only != "lite")
    except RuntimeError:
        if args.only != "lite":
            raise
    batches_path, batches_info = ensure_batches(onmt_python, paths, args, run_dir)
    pretrain_info = None
    if args.checkpoint:
        checkpoint = os.path.abspath(args.checkpoint)
    else:
        checkpoint, pretrain_info = ensure_pretrained(onmt_python, paths, args, run_dir)

    sides = ([LITE] if args.only != "onmt" else []) + ([ONMT] if args.only != "lite" else [])
    skipped = {}
    measure_args = ["--benchmark", args.benchmark, "--cache-dir", paths["cache_dir"],
                    "--checkpoint", checkpoint, "--batches", batches_path,
                    "--repeats", str(args.repeats), "--beam-width", str(args.beam_width),
                    "--length-penalty", str(args.length_penalty),
                    "--maximum-decoding-length", str(args.maximum_decoding_length)]
    from onmt_translate import load_batches  # numpy-only

    batch_indices = [index for _, _, index in load_batches(batches_path)]
    outputs = {}  # (side, index) -> hypotheses/log_probs/lengths, kept out of the JSON records

    def run_one(side, index):
        if side in skipped:
            return dict(skipped=skipped[side], result=None)
        log_prefix = os.path.join(run_dir, f"run{index}-{side}")
        if side == ONMT:
            cmd = [onmt_python, os.path.join(BENCH_DIR, "onmt_translate.py"), *measure_args]
        else:
            cmd = [sys.executable, os.path.abspath(__file__), "--worker", "lite", *measure_args]
        harness.log(f"run {index + 1}/{args.runs} {side}")
        record = harness.run_measured(cmd, log_prefix, timeout=args.timeout)
        result = record["result"] or {}
        if result.get("skipped"):
            skipped[side] = result["skipped"]
            record["skipped"] = result["skipped"]
            harness.log(f"  {side} SKIPPED: {result['skipped']}")
        elif record["returncode"] != 0 or result.get("target_tokens_per_sec") is None:
            record["error"] = f"exit status {record['returncode']}"
            harness.log(f"  {side} run FAILED; stderr tail:\n" + harness.tail(record["stderr"], 15))
        else:
            outputs[(side, index)] = {key: result.pop(key) for key in
                                      ("hypotheses", "log_probs", "lengths")}
            write_hypotheses(log_prefix + ".hyp", outputs[(side, index)])
            record["hypotheses_file"] = log_prefix + ".hyp"
            record["output"] = output_stats(outputs[(side, index)], args.maximum_decoding_length,
                                            batch_indices)
            harness.log(f"  {side}: {result['target_tokens_per_sec']:,.0f} target tokens/s, "
                        f"{result['sentences_per_sec']:.1f} sentences/s, peak RSS "
                        f"{record['peak_rss_bytes'] / harness.GB:.2f} GB")
        return record

    runs = harness.alternate(args.runs, sides, run_one)

    def ok_runs(side):
        return [r for r in runs[side] if not r.get("error") and not r.get("skipped")
                and (r.get("result") or {}).get("target_tokens_per_sec") is not None]

    summary = {}
    for side in sides:
        ok = ok_runs(side)
        summary[side] = dict(
            runs=len(runs[side]), ok=len(ok),
            target_tokens_per_sec=harness.median(
                r["result"]["target_tokens_per_sec"] for r in ok),
            sentences_per_sec=harness.median(r["result"]["sentences_per_sec"] for r in ok),
            peak_rss_bytes=harness.median(r["peak_rss_bytes"] for r in ok),
            target_tokens_per_sec_per_run=[
                (r.get("result") or {}).get("target_tokens_per_sec") if r in ok else None
                for r in runs[side]],
            output=ok[0]["output"] if ok else None,
        )
        # Determinism inside a side: every run against its first successful run.
        indices = [i for i in range(args.runs) if (side, i) in outputs]
        if len(indices) > 1:
            first = outputs[(side, indices[0])]
            summary[side]["identical_across_runs"] = [
                compare(first, outputs[(side, i)])["identical"] for i in indices[1:]]

    comparison = None
    if LITE in summary and ONMT in summary:
        base, lite = summary[ONMT], summary[LITE]
        paired = []
        for a, b in zip(runs[LITE], runs[ONMT]):
            ta = (a.get("result") or {}).get("target_tokens_per_sec") if not a.get("error") else None
            tb = (b.get("result") or {}).get("target_tokens_per_sec") if not b.get("error") else None
            paired.append(harness.ratio(ta, tb))
        lite["ratio_to_onmt"] = dict(
            target_tokens_per_sec=harness.ratio(lite["target_tokens_per_sec"],
                                                base["target_tokens_per_sec"]),
            target_tokens_per_sec_paired_median=harness.median(paired),
            sentences_per_sec=harness.ratio(lite["sentences_per_sec"],
                                            base["sentences_per_sec"]),
            peak_rss=harness.ratio(lite["peak_rss_bytes"], base["peak_rss_bytes"]),
        )
        lite_i = [i for i in range(args.runs) if (LITE, i) in outputs]
        onmt_i = [i for i in range(args.runs) if (ONMT, i) in outputs]
        if lite_i and onmt_i:
            comparison = compare(outputs[(LITE, lite_i[0])], outputs[(ONMT, onmt_i[0])])
            comparison["runs_compared"] = dict(lite=lite_i[0], onmt=onmt_i[0])

    headers = ["framework", "runs ok", "target tok/s", "sentences/s", "peak RSS GB",
               "x onmt tok/s", "x onmt paired", "x onmt RSS", "per run"]
    rows = []
    for side in sides:
        s = summary[side]
        r = s.get("ratio_to_onmt") or {}
        rows.append([
            side, f"{s['ok']}/{s['runs']}", harness.fmt(s["target_tokens_per_sec"]),
            harness.fmt(s["sentences_per_sec"], ".1f"),
            harness.fmt(None if s["peak_rss_bytes"] is None else s["peak_rss_bytes"] / harness.GB,
                        ".2f"),
            harness.fmt(r.get("target_tokens_per_sec"), ".3f"),
            harness.fmt(r.get("target_tokens_per_sec_paired_median"), ".3f"),
            harness.fmt(r.get("peak_rss"), ".3f"),
            " ".join(harness.fmt(v) for v in s["target_tokens_per_sec_per_run"]),
        ])
    batches = batches_info["result"]
    model_text = (f"OpenNMT-tf pre-trained {args.steps} steps" if pretrain_info
                  else f"checkpoint {os.path.relpath(checkpoint, ROOT)}")
    print()
    print(f"Translation: test set, {batches['sentences']} sentences in {batches['batches']} "
          f"batches ({args.batch_type} {args.batch_size}, length_bucket_width "
          f"{args.length_bucket_width}), beam {args.beam_width}, length_penalty "
          f"{args.length_penalty:g}, maximum_decoding_length {args.maximum_decoding_length}, "
          f"{model_text}; warm-up pass + {args.repeats} timed passes per run, medians; target "
          "tokens exclude </s>")
    print(harness.format_table(headers, rows))
    for side in sides:
        out = summary[side].get("output")
        if out:
            print(f"{side} output: {out['target_tokens']:,} target tokens, mean length "
                  f"{out['mean_length']:.1f}, longest {out['max_length']}, "
                  f"{out['at_maximum_decoding_length']} at the maximum decoding length (in "
                  f"{out['batches_at_maximum_decoding_length']} of {len(batch_indices)} batches)"
                  + (f"; identical across its runs: {summary[side]['identical_across_runs']}"
                     if summary[side].get("identical_across_runs") else ""))
    if comparison:
        diff = comparison["max_abs_log_prob_diff_identical"]
        print(f"identical translations lite vs OpenNMT-tf: {comparison['identical']}/"
              f"{comparison['compared']}" + (f" (max |log-prob difference| among them "
                                             f"{diff:.2e})" if diff is not None else ""))
    for side, reason in skipped.items():
        print(f"{side}: SKIPPED ({reason})")
    payload = dict(
        benchmark="translate",
        timestamp=stamp,
        arguments=vars(args),
        machine=harness.machine_info(),
        load_warning=warning,
        onmt_versions=onmt_env.onmt_versions(onmt_python) if onmt_python else None,
        checkpoint=checkpoint,
        pretrain=pretrain_info,
        batches=dict(path=batches_path, **batches_info),
        skipped=skipped,
        summary=summary,
        comparison=comparison,
        runs=runs,
    )
    path = harness.write_results(args.name, stamp, payload)
    print(f"\nresults: {os.path.relpath(path, ROOT)} (logs and hypotheses: "
          f"{os.path.relpath(run_dir, ROOT)}/)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
