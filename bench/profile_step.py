"""Where the time of one training step goes: TensorFlow's profiler, op time by category.

    python bench/profile_step.py [--dtype float32|mixed_bfloat16] [--steps 4] [--warmup 2]
                                 [--code-root PATH] [--top 25] [--side lite|onmt]

Builds the trainer of the training benchmark (bench/configs/train_benchmark.yml on the cached
benchmark data, bench/prepare.py), runs `--warmup` optimizer steps (tracing), then records
`--steps` steps with `tf.profiler` (data read from the pipeline inside the recorded window, as
in training) and sums the duration of every TensorFlow op executed, by category:

  matmul          MatMul, BatchMatMul, fused matmuls (with their bias and ReLU), Einsum (all
                  projections, attention scores and contexts, the output layer, their gradients)
  attention       the other ops under an attention layer's name scope (relative-position gather,
                  masking, head split/merge transposes, ...), softmax excluded
  softmax/norm    Softmax and its gradient, the layer norms, the loss (softmax cross-entropy)
  dropout         random number generation and the dropout masks
  optimizer       the update: accumulator reads/writes, gradient scaling, Adam
  input           tf.data (reading, tokenizing, batching) running in the recorded window
  cast            dtype casts (mixed precision)
  other           everything else (embeddings, residual adds, ReLU, reshapes, ...)

`--side onmt` profiles OpenNMT-tf 2.32 instead, on the same benchmark config, in its own
interpreter (bench/onmt_env.py): `bench/onmt_train.py --profile-dir` records the steps between
two of its reports (after `--warmup` steps, rounded up to a report, `--steps` rounded up to the
report interval), and the trace is categorized the same way (OpenNMT-tf's layer norm is the
fused batch norm, its dropout a float32 uniform draw).

Op time is summed over TensorFlow's threads (both cores), so it is CPU time, not wall time; the
wall time of the recorded steps is printed beside it. `--code-root` profiles another checkout of
opennmt-lite (e.g. a `git worktree` of an earlier commit) with the same script, for before/after.
"""

import argparse
import collections
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, BENCH_DIR)

import harness  # noqa: E402
import prepare  # noqa: E402
import bench_train  # noqa: E402

CATEGORIES = ("matmul", "attention", "softmax/norm", "dropout", "optimizer", "input", "cast",
              "other")
MATMUL_TYPES = {"MatMul", "BatchMatMul", "BatchMatMulV2", "BatchMatMulV3", "_FusedMatMul",
                "Einsum", "_MklMatMul", "_MklBatchMatMulV2", "_MklFusedMatMul",
                "_MklNativeFusedMatMul", "_MklEinsum"}
SOFTMAX_TYPES = {"Softmax", "LogSoftmax", "SoftmaxCrossEntropyWithLogits",
                 "SparseSoftmaxCrossEntropyWithLogits", "FusedBatchNormV3",
                 "FusedBatchNormGradV3", "_MklLayerNorm"}
RANDOM_TYPES = {"RandomUniform", "StatelessRandomUniformV2", "StatelessRandomGetKeyCounter",
                "StatelessRandomUniformFullIntV2", "RandomUniformInt", "StatelessRandomGetAlg",
                "RngReadAndSkip", "RngSkip"}
OPTIMIZER_TYPES = {"ResourceApplyAdam", "ResourceSparseApplyAdam", "AssignAddVariableOp",
                   "AssignVariableOp", "AssignSubVariableOp", "ReadVariableOp"}
NESTING_EVENTS = {"ParallelFor", "Process", "ExecutorState::Process"}


def categorize(scope, op_type, thread):
    """The category of one executed op, from its type, name scope and thread."""
    lowered = scope.lower().replace("loss_scale", "")
    if thread.startswith("tf_data") or "iterator" in lowered or op_type.startswith("Iterator"):
        return "input"
    if op_type in MATMUL_TYPES:
        return "matmul"
    if op_type == "Cast":
        return "cast"
    if op_type in RANDOM_TYPES or "dropout" in lowered:
        return "dropout"
    if op_type in SOFTMAX_TYPES or "softmax" in lowered or "layer_norm" in lowered \
            or "layernorm" in lowered or "loss" in lowered or "cross_entropy" in lowered:
        return "softmax/norm"
    if "attention" in lowered:
        return "attention"
    if (op_type in OPTIMIZER_TYPES or "optimizer" in lowered or "adam" in lowered
            or "apply" in lowered or "accumulat" in lowered):
        return "optimizer"
    return "other"


def benchmark_config(cache_dir, model_dir, dtype):
    """The lite config of the training benchmark, as bench_train.py renders it, never stopping."""
    benchmark = harness.load_yaml(harness.DEFAULT_BENCHMARK)
    common = bench_train.common_config(benchmark, cache_dir, 10**6,
                                       benchmark["train"]["save_summary_steps"])
    return dict(bench_train.lite_config(common, dtype), model_dir=model_dir)


def benchmark_trainer(cache_dir, model_dir, dtype, overrides=""):
    """(trainer, iterator of step groups) of the training benchmark, `overrides` applied
    ("train.sub_batches=2 ..."): one group of batches per replica, as Trainer.run reads them."""
    import tensorflow as tf

    config = benchmark_config(cache_dir, model_dir, dtype)
    for key, value in harness.parse_overrides(overrides):
        harness.set_dotted(config, key, value)
    trainer = harness.lite_trainer(config)
    return trainer, iter(tf.data.Dataset.zip(tuple(t.dataset() for t in trainer.training_inputs)))


def profile_lite(args, paths):
    """-> (events, wall seconds per step, steps) of `--steps` steps of opennmt-lite, in this process."""
    sys.path.insert(0, os.path.abspath(args.code_root))
    import tensorflow as tf

    work = tempfile.mkdtemp(prefix="profile_step_")
    try:
        trainer, groups = benchmark_trainer(paths["cache_dir"], os.path.join(work, "model"),
                                            args.dtype)
        for _ in range(args.warmup):
            trainer.train_step(next(groups))
        logdir = os.path.join(work, "trace")
        tf.profiler.experimental.start(logdir)
        start = time.perf_counter()
        for _ in range(args.steps):
            result = trainer.train_step(next(groups))
        float(result["loss"])  # waits for the last step
        wall = time.perf_counter() - start
        tf.profiler.experimental.stop()
        return read_trace(logdir), wall / args.steps, args.steps
    finally:
        shutil.rmtree(work, ignore_errors=True)


def profile_onmt(args, paths):
    """-> (events, wall seconds per step, steps) of OpenNMT-tf 2.32 on the benchmark config."""
    import onmt_env

    benchmark = harness.load_yaml(harness.DEFAULT_BENCHMARK)
    interval = benchmark["train"]["save_summary_steps"]
    after = -(-max(args.warmup, 1) // interval) * interval
    steps = -(-args.steps // interval) * interval
    work = tempfile.mkdtemp(prefix="profile_onmt_")
    try:
        config = bench_train.common_config(benchmark, paths["cache_dir"], after + steps, interval)
        config_path = os.path.join(work, "onmt.yml")
        harness.dump_yaml(dict(config, model_dir=os.path.join(work, "model")), config_path)
        logdir = os.path.join(work, "trace")
        command = [onmt_env.ensure_onmt_python(create=True), os.path.join(BENCH_DIR, "onmt_train.py"),
                   "--config", config_path, "--work-dir", os.path.join(work, "files"),
                   "--profile-dir", logdir, "--profile-after", str(after)]
        completed = subprocess.run(command, stdout=subprocess.PIPE, text=True, check=False)
        lines = [line for line in completed.stdout.splitlines() if line.startswith("{")]
        if completed.returncode != 0 or not lines:
            raise RuntimeError(f"OpenNMT-tf failed (exit {completed.returncode}): "
                               + " ".join(command))
        first, last, wall = json.loads(lines[-1])["profiled"]
        return read_trace(logdir), wall / (last - first), last - first
    finally:
        shutil.rmtree(work, ignore_errors=True)


def read_trace(logdir):
    """[(scope, op type, thread name, seconds)] of every TensorFlow op in the profile."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    paths = glob.glob(os.path.join(logdir, "**", "*.xplane.pb"), recursive=True)
    if not paths:
        raise RuntimeError(f"the profiler wrote no trace under {logdir}")
    space = xplane_pb2.XSpace()
    with open(paths[0], "rb") as stream:
        space.ParseFromString(stream.read())
    events = []
    for plane in space.planes:
        if not plane.name.startswith("/host:CPU"):
            continue
        names = {key: value.name for key, value in plane.event_metadata.items()}
        for line in plane.lines:
            # TensorFlow executes ops on its inter-op pool ("tf_Compute"/"tf_inter_op...") and
            # tf.data on "tf_data_..." threads; the Python thread only launches functions.
            if not re.match(r"tf_(Compute|inter|data)|TfCompute", line.name):
                continue
            for event in line.events:
                name = names.get(event.metadata_id, "?")
                # Executor and thread-pool events enclose the ops' own events: not counted.
                if name.startswith("ExecutorState") or name in NESTING_EVENTS:
                    continue
                scope, _, op_type = name.rpartition(":")
                events.append((scope, op_type or name, line.name, event.duration_ps / 1e12))
    return events


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dtype", choices=sorted(harness.DTYPE_TO_MIXED_PRECISION),
                        default="float32")
    parser.add_argument("--steps", type=int, default=4, help="recorded optimizer steps")
    parser.add_argument("--warmup", type=int, default=2, help="unrecorded steps first")
    parser.add_argument("--side", choices=("lite", "onmt"), default="lite",
                        help="profile opennmt-lite (this checkout or --code-root) or OpenNMT-tf")
    parser.add_argument("--code-root", default=harness.ROOT,
                        help="the opennmt-lite checkout to profile (default: this one)")
    parser.add_argument("--cache-dir", default=prepare.DEFAULT_CACHE_DIR)
    parser.add_argument("--top", type=int, default=25, help="op types listed")
    parser.add_argument("--show-scopes", type=int, default=0, metavar="N",
                        help="also list the N most expensive (name scope, op type) pairs, to "
                             "check the categories")
    parser.add_argument("--dump", metavar="JSON",
                        help="also write every op event [scope, op type, thread, seconds] there")
    args = parser.parse_args(argv)

    paths = prepare.prepare(args.cache_dir)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    profile = profile_onmt if args.side == "onmt" else profile_lite
    events, wall, steps = profile(args, paths)
    if args.dump:
        with open(args.dump, "w", encoding="utf-8") as stream:
            json.dump(dict(steps=steps, wall_per_step=wall, events=events), stream)

    by_category = collections.Counter()
    by_type = collections.Counter()
    by_scope = collections.Counter()
    for scope, op_type, thread, seconds in events:
        category = categorize(scope, op_type, thread)
        by_category[category] += seconds
        by_type[(op_type, category)] += seconds
        by_scope[(scope, op_type, category)] += seconds
    total = sum(by_category.values())
    name = ("OpenNMT-tf (float32)" if args.side == "onmt"
            else f"{os.path.abspath(args.code_root)} ({args.dtype})")
    print(f"{name}: {steps} steps recorded, wall {wall:.2f} s/step, "
          f"op time {total / steps:.2f} s/step (summed over threads)")
    rows = [[c, f"{by_category[c] / steps:.3f}", f"{100 * by_category[c] / total:.1f}%"]
            for c in CATEGORIES]
    print(harness.format_table(["category", "s/step", "share"], rows))
    print(f"\ntop {args.top} op types")
    rows = [[op_type, category, f"{seconds / steps:.3f}", f"{100 * seconds / total:.1f}%"]
            for (op_type, category), seconds in by_type.most_common(args.top)]
    print(harness.format_table(["op type", "category", "s/step", "share"], rows))
    if args.show_scopes:
        print(f"\ntop {args.show_scopes} (name scope, op type)")
        rows = [[scope[-90:], op_type, category, f"{seconds / steps:.3f}"]
                for (scope, op_type, category), seconds in by_scope.most_common(args.show_scopes)]
        print(harness.format_table(["scope", "op type", "category", "s/step"], rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
