"""Does mixed bfloat16 training learn as well as float32? Validation loss after the same steps.

    python bench/bench_mixed_quality.py [--config configs/sample.yml] [--steps N]
                                        [--dtype float32 mixed_bfloat16] [--set "key=value ..."]
                                        [--reuse float32=runs/sample]

Trains the same config (same seed, so the same batches in the same order) once per dtype, each in
a fresh process and a fresh model_dir, with the config's own evaluation (`eval.steps`, validation
loss and its scorers), then compares the validation losses step by step: relative difference
|loss(dtype) - loss(float32)| / loss(float32). The performance issue's target is <= 2 % for
mixed_bfloat16 after the same number of steps.

The sample config is the default rather than the 60-step throughput benchmark: with its 8 000
warm-up steps the throughput benchmark's model barely moves in 60 steps, so its loss says
nothing about precision. The SentencePiece models and vocabularies are built once, by the first
run, into the results folder, and shared by the others. Wall time and peak memory of each run
are recorded too (but the throughput comparison is bench_train.py's job). `--reuse
DTYPE=MODEL_DIR` takes that dtype's evaluation history from a finished run of the same config
(e.g. the float32 `runs/sample` of `python run.py train --config configs/sample.yml`) instead of
training it again; the run's own config.yml copy is not checked, so it must be the same config.
Results: runs/bench_results/<name>-<timestamp>.json (logs and model_dirs in the folder).
"""

import argparse
import copy
import json
import os
import sys

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, BENCH_DIR)

import harness  # noqa: E402

ROOT = harness.ROOT
REFERENCE = "float32"
TARGET_RELATIVE_DIFFERENCE = 0.02


def relocate(value, old_prefix, new_prefix):
    """Rewrites every string under `value` that starts with `old_prefix`/ (the config's own
    model_dir, where the sample config builds its vocabularies) to start with `new_prefix`."""
    if isinstance(value, dict):
        return {key: relocate(item, old_prefix, new_prefix) for key, item in value.items()}
    if isinstance(value, str) and value.startswith(old_prefix.rstrip("/") + "/"):
        return os.path.join(new_prefix, value[len(old_prefix.rstrip("/")) + 1:])
    return value


def read_history(model_dir):
    """{step: evaluation record} from <model_dir>/eval/history.jsonl."""
    path = os.path.join(model_dir, "eval", "history.jsonl")
    history = {}
    with open(path, encoding="utf-8") as stream:
        for line in stream:
            if line.strip():
                record = json.loads(line)
                history[record["step"]] = record
    return history


def compare(histories, reference=REFERENCE):
    """Rows [step, {dtype: loss}, {dtype: relative difference to the reference}] at the steps
    every run evaluated."""
    steps = sorted(set.intersection(*(set(h) for h in histories.values())))
    rows = []
    for step in steps:
        losses = {dtype: history[step]["loss"] for dtype, history in histories.items()}
        base = losses[reference]
        rows.append(dict(step=step, loss=losses,
                         bleu={d: h[step].get("bleu") for d, h in histories.items()},
                         relative_difference={d: abs(v - base) / base for d, v in losses.items()
                                              if d != reference}))
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--config", default=os.path.join(ROOT, "configs", "sample.yml"))
    parser.add_argument("--dtype", nargs="+", choices=sorted(harness.DTYPE_TO_MIXED_PRECISION),
                        default=[REFERENCE, "mixed_bfloat16"])
    parser.add_argument("--steps", type=int, default=None, help="train.max_step (default: "
                        "the config's)")
    parser.add_argument("--set", default="", help='config overrides "key=value ...", all runs')
    parser.add_argument("--name", default="mixed-quality")
    parser.add_argument("--reuse", action="append", default=[], metavar="DTYPE=MODEL_DIR",
                        help="take DTYPE's evaluation history from this finished run")
    args = parser.parse_args(argv)
    dtypes = list(dict.fromkeys([REFERENCE] + args.dtype))
    reused = {}
    for item in args.reuse:
        dtype, _, model_dir = item.partition("=")
        if dtype not in harness.DTYPE_TO_MIXED_PRECISION or not model_dir:
            parser.error(f"--reuse {item!r}: expected DTYPE=MODEL_DIR with DTYPE in "
                         f"{sorted(harness.DTYPE_TO_MIXED_PRECISION)}")
        reused[dtype] = model_dir

    base = harness.load_yaml(args.config)
    for key, value in harness.parse_overrides(args.set):
        harness.set_dotted(base, key, value)
    if args.steps:
        base["train"]["max_step"] = args.steps
    if not (base.get("eval") or {}).get("steps") or "eval_labels_file" not in base["data"]:
        parser.error(f"{args.config}: needs data.eval_features_file/eval_labels_file and "
                     "eval.steps (the comparison reads the validation loss)")

    session = harness.Session(args.name)
    run_dir = session.run_dir
    shared = os.path.join(run_dir, "shared")

    runs, histories = {}, {}
    for dtype in dtypes:
        if dtype in reused:
            histories[dtype] = read_history(reused[dtype])
            runs[dtype] = dict(reused=reused[dtype])
            harness.log(f"{dtype}: evaluation history of {reused[dtype]} (not retrained)")
            continue
        model_dir = os.path.join(run_dir, dtype)
        config = copy.deepcopy(base)
        config["data"] = relocate(config["data"], base["model_dir"], shared)
        config["model_dir"] = model_dir
        config["train"]["mixed_precision"] = harness.DTYPE_TO_MIXED_PRECISION[dtype]
        config_path = os.path.join(run_dir, f"{dtype}.yml")
        harness.dump_yaml(config, config_path)
        cmd = [sys.executable, os.path.join(ROOT, "run.py"), "train", "--config", config_path]
        harness.log(f"{dtype}: {' '.join(cmd)}")
        record = harness.run_measured(cmd, os.path.join(run_dir, dtype))
        runs[dtype] = record
        if record["returncode"] != 0:
            harness.log(f"  {dtype} FAILED (exit status {record['returncode']}):\n"
                        + harness.tail(record["stderr"], 15))
            return 1
        histories[dtype] = read_history(model_dir)
        harness.log(f"  {dtype}: {record['wall_seconds']:.0f} s wall, peak RSS "
                    f"{record['peak_rss_bytes'] / harness.GB:.2f} GB, validation loss "
                    + ", ".join(f"{s}: {r['loss']:.4f}" for s, r in sorted(histories[dtype].items())))

    rows = compare(histories)
    others = [d for d in dtypes if d != REFERENCE]
    headers = ["step"] + [f"loss {d}" for d in dtypes] + [f"rel. diff {d}" for d in others] + [
        f"BLEU {d}" for d in dtypes]
    table = [[row["step"]] + [f"{row['loss'][d]:.4f}" for d in dtypes]
             + [f"{100 * row['relative_difference'][d]:.2f}%" for d in others]
             + [harness.fmt(row["bleu"][d], ".2f") for d in dtypes] for row in rows]
    print()
    print(f"Validation loss after the same steps ({args.config}, {len(rows)} evaluations)")
    print(harness.format_table(headers, table))
    verdicts = {}
    if rows:
        for dtype in others:
            final = rows[-1]["relative_difference"][dtype]
            verdicts[dtype] = final <= TARGET_RELATIVE_DIFFERENCE
            print(f"{dtype}: final relative difference {100 * final:.2f}% "
                  f"({'within' if verdicts[dtype] else 'NOT within'} the "
                  f"{100 * TARGET_RELATIVE_DIFFERENCE:.0f}% target)")
    session.finish(dict(
        benchmark="mixed_quality", arguments=vars(args), config=base, runs=runs,
        histories={d: list(h.values()) for d, h in histories.items()}, comparison=rows,
        within_target=verdicts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
