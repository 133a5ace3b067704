"""Translation throughput (beam search), opennmt-lite vs OpenNMT-tf 2.32, side by side.

    python bench/bench_translate.py [--runs 3] [--repeats 2] [--only onmt|lite]
                                    [--beam-width 4] [--batch-size 32] [--steps 1500]

The measurement:

* The batches, defined once: OpenNMT-tf's own inference pipeline over the test source
  (runs/bench_cache/test.tok.en, 500 sentences), with auto_config's `infer:` settings
  `batch_size: 32, batch_type: examples, length_bucket_width: 5` (`--batch-size`,
  `--batch-type`, `--length-bucket-width`), saved with each sentence's line number in
  runs/bench_cache/translate/batches-<type><size>-w<width>.npz. Both sides run these very
  batches, in the same order.
* The model, trained once: a randomly initialised model emits `maximum_decoding_length` tokens
  of garbage for every sentence, which says nothing about real translation. So the benchmark
  model (bench/configs/train_benchmark.yml) is pre-trained briefly BY OPENNMT-TF ITSELF
  (`onmt-main --auto_config --seed 1234 train`, `--steps` steps, default 1 500, with the
  PRETRAIN overrides below: 2 048-token batches without accumulation, Noam schedule scaled 1.0
  with 600 warm-up steps), cached in runs/bench_cache/translate/pretrain/ (a larger --steps
  resumes the cached training, a smaller one is refused). Both sides load that checkpoint
  (opennmt-lite through `opennmt_lite.checkpointing.onmt_names.load_onmt_model`).
  `--checkpoint PATH` uses another OpenNMT-tf checkpoint instead (e.g. the untrained
  runs/bench_cache/onmt_init_ckpt, with a small `--maximum-decoding-length`).
* Each run (a fresh process; the harness alternates opennmt-lite, OpenNMT-tf, ...) traces its
  function, makes one untimed warm-up pass over all batches, then `--repeats` timed passes;
  each batch's outputs are fetched to numpy inside the timed loop. The run's figures are the
  medians over passes of target tokens / s and sentences / s.
* Printed besides the table: how many of the translations are identical between the two
  frameworks; the hypotheses of every run are in
  runs/bench_results/<name>-<timestamp>/runN-<side>.hyp (test-set order).

Target tokens: the best hypothesis' length WITHOUT `</s>` (OpenNMT-tf's `predictions["length"]`,
opennmt-lite's `DecodingResult.lengths`), summed over the 500 sentences; identical on both sides
when the translations are.

OpenNMT-tf side: bench/onmt_translate.py (`tf.function(model.infer)` with the beam search params,
as `onmt-main infer` runs it). opennmt-lite side (this file, `--worker lite`):
`Transformer(ModelHyperparameters(**model), ...)`, `load_onmt_model(checkpoint, model)`,
`opennmt_lite.inference.decoding.translation_function(model, DecodingOptions(beam_width=4,
n_best=1, length_penalty=0, maximum_decoding_length=250))` (a tf.function over [None, None] int32 ids and
[None] int32 lengths). Without --checkpoint the worker uses seeded random weights (bench/gpu.py).
"""

import copy
import os
import statistics
import sys
import time

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, BENCH_DIR)

import harness  # noqa: E402
import prepare  # noqa: E402

ROOT = harness.ROOT
LITE, ONMT = harness.LITE, harness.ONMT
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


def target_vocabulary(cache_dir, benchmark):
    """id -> token of the target vocabulary; the OOV id (= number of lines) -> <unk>."""
    path = os.path.join(cache_dir, benchmark["data"]["target_vocabulary"])
    with open(path, encoding="utf-8") as stream:
        tokens = stream.read().split("\n")
    if tokens and tokens[-1] == "":
        tokens.pop()
    return tokens + ["<unk>"]


def lite_worker(args):
    """Measures opennmt-lite's translation; prints one JSON line."""
    import numpy as np
    import tensorflow as tf

    benchmark = harness.load_yaml(args.benchmark)
    stats = prepare.read_stats(args.cache_dir)
    model, prefix = harness.lite_model(
        benchmark["model"], stats["sentencepiece"]["en"]["vocabulary_size_with_oov"],
        stats["sentencepiece"]["de"]["vocabulary_size_with_oov"],
        dtype=args.dtype, checkpoint=args.checkpoint)
    from opennmt_lite.inference import decoding  # (lite_model: on sys.path)

    options = dict(beam_width=args.beam_width, n_best=1, length_penalty=args.length_penalty,
                   maximum_decoding_length=args.maximum_decoding_length)
    if hasattr(decoding, "DecodingOptions"):
        translate = decoding.translation_function(model, decoding.DecodingOptions(**options))
    else:  # a checkout from before DecodingOptions (--lite-baseline)
        translate = decoding.translation_function(model, **options)
    batches = prepare.load_batches(args.batches)[: args.max_batches]
    tensors = [(tf.constant(ids.astype(np.int32)), tf.constant(length.astype(np.int32)))
               for ids, length, _ in batches]
    sentences = int(sum(len(index) for _, _, index in batches))

    start = time.perf_counter()
    translate.get_concrete_function()
    trace_seconds = time.perf_counter() - start

    def one_pass():
        outputs = []
        for ids, length in tensors:
            decoded = translate(ids, length)
            outputs.append((decoded.ids.numpy(), decoded.lengths.numpy(),
                            decoded.log_probs.numpy()))
        return outputs

    warmup, seconds, outputs = harness.timed_passes(one_pass, args.repeats)
    target_tokens = int(sum(int(lengths[:, 0].sum()) for _, lengths, _ in outputs))
    passes = [dict(seconds=s, target_tokens=target_tokens, target_tokens_per_sec=target_tokens / s,
                   sentences_per_sec=sentences / s) for s in seconds]

    # The best hypotheses by line number (None for lines left out by --max-batches).
    vocabulary = target_vocabulary(args.cache_dir, benchmark)
    lines = 1 + max(int(line) for _, _, index in batches for line in index)
    hypotheses, log_probs, lengths_out = [None] * lines, [None] * lines, [None] * lines
    for (_, _, index), (ids, lengths, scores) in zip(batches, outputs):
        for row, line in enumerate(index):
            length = int(lengths[row, 0])
            hypotheses[line] = " ".join(vocabulary[i] for i in ids[row, 0, :length])
            log_probs[line] = float(scores[row, 0])
            lengths_out[line] = length
    harness.print_worker_result(dict(
        framework=LITE, dtype=args.dtype, checkpoint=prefix, params=options,
        batches=len(batches), sentences=sentences,
        source_tokens=int(sum(int(length.sum()) for _, length, _ in batches)),
        trace_seconds=trace_seconds, warmup_seconds=warmup, passes=passes,
        target_tokens=target_tokens,
        target_tokens_per_sec=harness.median(p["target_tokens_per_sec"] for p in passes),
        sentences_per_sec=harness.median(p["sentences_per_sec"] for p in passes),
        hypotheses=hypotheses, lengths=lengths_out, log_probs=log_probs))
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
    return prepare.read_json(paths["manifest"])


def ensure_batches(session, args):
    """The test-set batches made by OpenNMT-tf's inference pipeline; returns the npz path."""
    onmt_python, paths = session.onmt_python, session.paths
    directory = translate_cache_dir(paths["cache_dir"])
    name = f"batches-{args.batch_type}{args.batch_size}-w{args.length_bucket_width}"
    npz = os.path.join(directory, name + ".npz")
    sidecar = os.path.join(directory, name + ".json")
    wanted = dict(data=data_fingerprint(paths), features="test.tok.en",
                  batch_size=args.batch_size, batch_type=args.batch_type,
                  length_bucket_width=args.length_bucket_width)
    recorded = prepare.read_json(sidecar)
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
        os.path.join(session.run_dir, "write-batches"),
    )
    if record["returncode"] != 0 or not record["result"]:
        raise SystemExit("writing the batches failed:\n" + harness.tail(record["stderr"]))
    recorded = dict(wanted=wanted, result=record["result"])
    prepare.write_json(sidecar, recorded)
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


def ensure_pretrained(session, args):
    """The checkpoint trained by OpenNMT-tf for --steps steps. Returns (prefix, info).

    Cached in runs/bench_cache/translate/pretrain/ (one model_dir, the last checkpoint kept).
    Asking for more steps than cached resumes OpenNMT-tf's training there (it restores the
    model and optimizer and trains up to the new max_step; the data order restarts from the
    seed); asking for fewer is refused (delete the directory to retrain); a change of the data or
    of PRETRAIN trains again from scratch."""
    import shutil

    onmt_python, paths, run_dir = session.onmt_python, session.paths, session.run_dir
    directory = os.path.join(translate_cache_dir(paths["cache_dir"]), "pretrain")
    done = os.path.join(directory, "done.json")
    benchmark = harness.load_yaml(args.benchmark)
    model_dir = os.path.join(directory, "model_dir")
    config = pretrain_config(benchmark, paths["cache_dir"], args.steps, model_dir)
    base = copy.deepcopy(config)
    for key in ("max_step", "save_checkpoints_steps", "save_summary_steps"):
        base["train"].pop(key)
    wanted = dict(data=data_fingerprint(paths), config=base, seed=PRETRAIN_SEED)
    recorded = prepare.read_json(done)
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
    prepare.write_json(done, recorded)
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
# The sides and their outputs


def translation_side(name, command, run_dir, maximum_length, batch_indices, outputs):
    """A harness.Side whose runs' translations are taken out of the JSON result: into
    `<run_dir>/runN-<side>.hyp` and `outputs[(name, N)]`, their length statistics into the run
    record (`output`). `batch_indices`: the line numbers of each batch."""
    label = harness.file_label(name)

    def finish(record, index):
        result = record["result"] or {}
        if "hypotheses" not in result:
            return
        output = {key: result.pop(key) for key in ("hypotheses", "log_probs", "lengths")}
        outputs[(name, index)] = output
        record["hypotheses_file"] = os.path.join(run_dir, f"run{index}-{label}.hyp")
        with open(record["hypotheses_file"], "w", encoding="utf-8") as stream:
            stream.write("".join((h or "") + "\n" for h in output["hypotheses"]))
        record["output"] = output_stats(output, maximum_length, batch_indices)

    return harness.Side(name, command, finish=finish)


def compare_outputs(a, b):
    """Identical translations between two results (by line), and the largest |log-prob
    difference| among the identical ones."""
    ha, hb = a.get("hypotheses") or [], b.get("hypotheses") or []
    pa, pb = a.get("log_probs") or [], b.get("log_probs") or []
    both = [i for i, (x, y) in enumerate(zip(ha, hb)) if x is not None and y is not None]
    identical = [i for i in both if ha[i] == hb[i]]
    diffs = [abs(pa[i] - pb[i]) for i in identical if i < len(pa) and i < len(pb)]
    return dict(
        identical=len(identical),
        compared=len(both),
        different_lines=[i for i in both if ha[i] != hb[i]],
        max_abs_log_prob_diff_identical=max(diffs) if diffs else None,
    )


def output_stats(result, maximum_length, batch_indices=()):
    """Length statistics of the best hypotheses; `batch_indices`: the line numbers of each batch
    (a batch decodes until its longest hypothesis ends)."""
    by_line = result.get("lengths") or []
    lengths = [n for n in by_line if n is not None]
    if not lengths:
        return {}
    return dict(
        batches_at_maximum_decoding_length=sum(
            1 for index in batch_indices if max(by_line[int(i)] for i in index) >= maximum_length),
        target_tokens=sum(lengths),
        mean_length=sum(lengths) / len(lengths),
        median_length=statistics.median(lengths),
        max_length=max(lengths),
        at_maximum_decoding_length=sum(1 for n in lengths if n >= maximum_length),
        empty=sum(1 for n in lengths if n == 0),
    )


def summarize_outputs(summary, records, outputs):
    """Adds to each side's summary its first translating run's output statistics and how many
    translations of its later runs are identical to it; returns the comparison of the first two
    sides' first runs (None without two)."""
    firsts = {}
    for side, runs in records.items():
        done = [i for i in range(len(runs)) if (side, i) in outputs]
        if not done:
            continue
        firsts[side] = outputs[(side, done[0])]
        summary[side]["output"] = runs[done[0]]["output"]
        summary[side]["identical_across_runs"] = [
            compare_outputs(firsts[side], outputs[(side, i)])["identical"] for i in done[1:]]
    if len(firsts) < 2:
        return None
    (a, first_a), (b, first_b) = list(firsts.items())[:2]
    return dict(compare_outputs(first_a, first_b), sides=[a, b])


def print_outputs(summary, comparison, batches):
    """The output lines printed under the table."""
    for side, s in summary.items():
        out = s.get("output")
        if out:
            print(f"{side} output: {out['target_tokens']:,} target tokens, mean length "
                  f"{out['mean_length']:.1f}, longest {out['max_length']}, "
                  f"{out['at_maximum_decoding_length']} at the maximum decoding length (in "
                  f"{out['batches_at_maximum_decoding_length']} of {batches} batches)"
                  + (f"; identical across its runs: {s['identical_across_runs']}"
                     if s.get("identical_across_runs") else ""))
    if comparison:
        diff = comparison["max_abs_log_prob_diff_identical"]
        print(f"identical translations {' vs '.join(comparison['sides'])}: "
              f"{comparison['identical']}/{comparison['compared']}"
              + (f" (max |log-prob difference| among them {diff:.2e})" if diff is not None
                 else ""))


# --------------------------------------------------------------------------------------------
# The driver


def main(argv=None):
    parser = harness.parser(__doc__, name="translate", timeout=3600, mfu=False)
    harness.add_worker_arguments(parser, repeats=2, checkpoint_help=(
        "OpenNMT-tf checkpoint to use on both sides instead of the pre-trained one"))
    parser.add_argument("--beam-width", type=int, default=4)
    parser.add_argument("--length-penalty", type=float, default=0.0)
    parser.add_argument("--maximum-decoding-length", type=int, default=250)
    parser.add_argument("--batch-size", type=int, default=32, help="inference batch size")
    parser.add_argument("--batch-type", choices=("examples", "tokens"), default="examples")
    parser.add_argument("--length-bucket-width", type=int, default=5)
    parser.add_argument("--steps", type=int, default=1500,
                        help="OpenNMT-tf pre-training steps of the benchmark model (cached)")
    args = parser.parse_args(argv)
    if args.worker == "lite":
        return lite_worker(args)

    session = harness.Session(args.name, args.cache_dir)
    onmt_python = session.ensure_onmt(required=args.only != "lite")
    batches_path, batches_info = ensure_batches(session, args)
    pretrain_info = None
    if args.checkpoint:
        checkpoint = os.path.abspath(args.checkpoint)
    else:
        checkpoint, pretrain_info = ensure_pretrained(session, args)

    measure_args = ["--benchmark", args.benchmark, "--cache-dir", session.paths["cache_dir"],
                    "--checkpoint", checkpoint, "--batches", batches_path,
                    "--repeats", str(args.repeats), "--beam-width", str(args.beam_width),
                    "--length-penalty", str(args.length_penalty),
                    "--maximum-decoding-length", str(args.maximum_decoding_length)]
    batch_indices = [index for _, _, index in prepare.load_batches(batches_path)]
    outputs = {}  # (side, run index) -> hypotheses/log_probs/lengths, kept out of the JSON
    options = dict(run_dir=session.run_dir, maximum_length=args.maximum_decoding_length,
                   batch_indices=batch_indices, outputs=outputs)
    sides = []
    if args.only != "onmt":
        command = [sys.executable, os.path.abspath(__file__), "--worker", "lite", *measure_args]
        sides.append(translation_side(LITE, lambda index: command, **options))
    if args.only != "lite":
        onmt_command = [onmt_python, os.path.join(BENCH_DIR, "onmt_translate.py"), *measure_args]
        sides.append(translation_side(ONMT, lambda index: onmt_command, **options))
    runs, summary = harness.compare(
        sides, args.runs, ["target_tokens_per_sec", "sentences_per_sec"], session.run_dir,
        timeout=args.timeout, baseline=ONMT)
    comparison = summarize_outputs(summary, runs, outputs)

    headers = ["framework", "runs ok", "target tok/s", "sentences/s", "peak RSS GB",
               "x onmt tok/s", "x onmt paired", "x onmt RSS", "per run"]
    rows = []
    for side, s in summary.items():
        r = s.get("ratio") or {}
        rows.append([
            side, f"{s['ok']}/{s['runs']}", harness.fmt(s["target_tokens_per_sec"]),
            harness.fmt(s["sentences_per_sec"], ".1f"), harness.gb(s["peak_rss_bytes"]),
            harness.fmt(r.get("target_tokens_per_sec"), ".3f"),
            harness.fmt(r.get("target_tokens_per_sec_paired_median"), ".3f"),
            harness.fmt(r.get("peak_rss"), ".3f"),
            " ".join(harness.fmt(v) for v in s["target_tokens_per_sec_per_run"]),
        ])
    batches = batches_info["result"]
    model_text = (f"OpenNMT-tf pre-trained {args.steps} steps" if pretrain_info
                  else f"checkpoint {os.path.relpath(checkpoint, ROOT)}")
    print(f"\nTranslation: test set, {batches['sentences']} sentences in {batches['batches']} "
          f"batches ({args.batch_type} {args.batch_size}, length_bucket_width "
          f"{args.length_bucket_width}), beam {args.beam_width}, length_penalty "
          f"{args.length_penalty:g}, maximum_decoding_length {args.maximum_decoding_length}, "
          f"{model_text}; warm-up pass + {args.repeats} timed passes per run, medians; target "
          "tokens exclude </s>")
    print(harness.format_table(headers, rows))
    print_outputs(summary, comparison, len(batch_indices))
    session.finish(dict(benchmark="translate", arguments=vars(args), checkpoint=checkpoint,
                        pretrain=pretrain_info, batches=dict(path=batches_path, **batches_info),
                        summary=summary, comparison=comparison, runs=runs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
