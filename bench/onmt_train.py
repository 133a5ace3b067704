"""OpenNMT-tf 2.32 side of the training benchmark. Runs INSIDE the OpenNMT-tf virtual environment.

    bench/.venv-onmt/bin/python bench/onmt_train.py --config onmt.yml [--drop-first 1]
                                                   [--profile-dir DIR --profile-after STEP]

`--config` is an OpenNMT-tf config rendered by bench/bench_train.py from
bench/configs/train_benchmark.yml: the usual OpenNMT-tf keys (model_dir, data, params, train)
plus a `model:` section with the keyword arguments of `opennmt.models.Transformer`.

This script writes the model description `model.py` from the `model:` section
(`opennmt.models.Transformer(**model, position_encoder_class=None)`, as OpenNMT-tf's
TransformerRelative presets), the config without `model:`, and then runs OpenNMT-tf's own
command-line entry point in this process, exactly as

    onmt-main --model model.py --config config.yml --auto_config train

would (default intra/inter-op threads, no seed, fp32, no XLA). The only addition is a logging
handler that records OpenNMT-tf's training reports

    Step = 10 ; steps/s = 0.95, tokens/s = 7517 (3340 source, 4177 target) ; ...

With `--profile-dir`, TensorFlow's profiler records the steps between the report of step
`--profile-after` and the next report (bench/profile_step.py --side onmt reads the trace).

The first `--drop-first` reports (warm-up, tracing, the step-1 checkpoint) are dropped. Prints, as
the LAST line of stdout, one JSON object:

    {"framework": "opennmt-tf", "tokens_per_sec": median over the kept reports of source+target
     words/s, "steps_per_sec": median, "reports": [every report, with "kept": bool], "steps": N,
     ...}

OpenNMT-tf counts, per example, the source length n_src and the target length n_tgt + 1 (its
label sequence, which ends with </s>); padding is not counted.
"""

import argparse
import json
import logging
import os
import re
import resource
import shutil
import statistics
import sys
import tempfile
import time

REPORT = re.compile(
    r"Step = (?P<step>\d+) ; steps/s = (?P<steps_per_sec>[0-9.]+), tokens/s = (?P<tokens>\d+)"
    r" \((?P<detail>[^)]*)\) ; Learning rate = (?P<lr>\S+) ; Loss = (?P<loss>\S+)"
)
MODEL_KEYS = (
    "num_layers", "num_units", "num_heads", "ffn_inner_dim", "dropout", "attention_dropout",
    "ffn_dropout", "maximum_relative_position", "pre_norm",
)


class ReportRecorder(logging.Handler):
    def __init__(self, profile_dir=None, profile_after=None):
        super().__init__(level=logging.INFO)
        self.start = time.time()
        self.reports = []
        self.profile_dir = profile_dir
        self.profile_after = profile_after
        self.profiling = False
        self.profiled = None  # (first step, last step, wall seconds) once recorded

    def profile(self, step):
        """Starts the profiler at the report of step `profile_after`, stops it at the next one
        (reports are logged in the training loop, between steps)."""
        import tensorflow as tf

        if self.profiling:
            tf.profiler.experimental.stop()
            self.profiling = False
            self.profiled = (self.profile_after, step, time.time() - self.profile_start)
        elif step == self.profile_after:
            tf.profiler.experimental.start(self.profile_dir)
            self.profiling = True
            self.profile_start = time.time()

    def emit(self, record):
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - never break OpenNMT-tf's logging
            return
        match = REPORT.search(message)
        if not match:
            return
        words = {}
        for part in match.group("detail").split(","):
            part = part.strip()
            if part:
                value, name = part.split(" ", 1)
                words[name] = int(value)
        source = words.get("source", 0)
        target = words.get("target", 0)
        self.reports.append(dict(
            step=int(match.group("step")),
            steps_per_sec=float(match.group("steps_per_sec")),
            source_tokens_per_sec=source,
            target_tokens_per_sec=target,
            tokens_per_sec=source + target,
            learning_rate=float(match.group("lr")),
            loss=float(match.group("loss")),
            elapsed=time.time() - self.start,
        ))
        if self.profile_dir:
            self.profile(int(match.group("step")))


def render_model_file(model_config, path):
    unknown = set(model_config) - set(MODEL_KEYS)
    if unknown:
        raise ValueError(f"model keys not supported on the OpenNMT-tf side: {sorted(unknown)}")
    arguments = "".join(f"        {key}={model_config[key]!r},\n" for key in MODEL_KEYS
                        if key in model_config)
    text = (
        '"""Rendered by bench/onmt_train.py from the benchmark\'s model: section."""\n\n'
        "import opennmt\n\n\n"
        "def model():\n"
        "    return opennmt.models.Transformer(\n"
        f"{arguments}"
        "        position_encoder_class=None,\n"
        "    )\n"
    )
    with open(path, "w", encoding="utf-8") as stream:
        stream.write(text)
    return text


def main(argv=None):
    parser = argparse.ArgumentParser(description="OpenNMT-tf training throughput (onmt-main).")
    parser.add_argument("--config", required=True, help="rendered OpenNMT-tf config with model:")
    parser.add_argument("--drop-first", type=int, default=1, help="reports to drop (warm-up)")
    parser.add_argument("--work-dir", default=None,
                        help="where to write model.py/config.yml (default: a temporary dir)")
    parser.add_argument("--keep", action="store_true", help="keep the model_dir afterwards")
    parser.add_argument("--profile-dir", help="record a TensorFlow profile here")
    parser.add_argument("--profile-after", type=int, default=10,
                        help="profile from this step's report to the next")
    args = parser.parse_args(argv)

    import yaml

    with open(args.config, encoding="utf-8") as stream:
        config = yaml.safe_load(stream)
    model_config = config.pop("model")
    work_dir = args.work_dir or tempfile.mkdtemp(prefix="onmt-train-")
    os.makedirs(work_dir, exist_ok=True)
    if not config.get("model_dir"):
        config["model_dir"] = os.path.join(work_dir, "model_dir")
    model_dir = config["model_dir"]
    if os.path.exists(model_dir) and os.listdir(model_dir):
        raise SystemExit(f"model_dir {model_dir} is not empty: the benchmark needs a fresh one")
    model_file = os.path.join(work_dir, "model.py")
    config_file = os.path.join(work_dir, "config.yml")
    render_model_file(model_config, model_file)
    with open(config_file, "w", encoding="utf-8") as stream:
        yaml.safe_dump(config, stream, sort_keys=False)

    import tensorflow as tf
    import opennmt
    from opennmt.bin import main as onmt_main

    recorder = ReportRecorder(args.profile_dir, args.profile_after)
    initialize_logging = onmt_main._initialize_logging

    def _initialize_logging(log_level):
        initialize_logging(log_level)
        tf.get_logger().addHandler(recorder)

    onmt_main._initialize_logging = _initialize_logging
    command = ["onmt-main", "--model", model_file, "--config", config_file, "--auto_config",
               "train"]
    print("[onmt_train] " + " ".join(command), file=sys.stderr, flush=True)
    saved_argv = sys.argv
    sys.argv = command
    start = time.time()
    try:
        onmt_main.main()
    finally:
        sys.argv = saved_argv
    wall = time.time() - start

    reports = recorder.reports
    for index, report in enumerate(reports):
        report["kept"] = index >= args.drop_first
    kept = [r for r in reports if r["kept"]]
    result = dict(
        framework="opennmt-tf",
        version=opennmt.__version__,
        tensorflow=tf.__version__,
        steps=int(config["train"]["max_step"]),
        reports=reports,
        dropped_reports=min(args.drop_first, len(reports)),
        wall_seconds=wall,
        peak_rss_self_bytes=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
    )
    if args.profile_dir:
        result["profiled"] = recorder.profiled
    if kept:
        result.update(
            tokens_per_sec=statistics.median(r["tokens_per_sec"] for r in kept),
            source_tokens_per_sec=statistics.median(r["source_tokens_per_sec"] for r in kept),
            target_tokens_per_sec=statistics.median(r["target_tokens_per_sec"] for r in kept),
            steps_per_sec=statistics.median(r["steps_per_sec"] for r in kept),
        )
    else:
        result.update(tokens_per_sec=None, steps_per_sec=None,
                      error=f"no report left after dropping {args.drop_first} "
                            f"(got {len(reports)}; increase --steps or lower save_summary_steps)")
    if not args.keep and not args.work_dir:
        shutil.rmtree(work_dir, ignore_errors=True)
    sys.stdout.flush()
    print(json.dumps(result), flush=True)
    return 0 if kept else 1


if __name__ == "__main__":
    sys.exit(main())
