"""XLA's steady-state gain, A/B in one process: the same model, the same group of batches,
one plain train step and one `jit_compile` train step, alternated.

    [LONG=1] [ROUNDS=6] [XLA_CACHE=DIR] [EXTRA="model.num_layers=1 ..."] python bench/xla_steady.py

Builds the training benchmark's trainer (bench/configs/train_benchmark.yml; `LONG=1`: on the
long-sentence cache, `bench/prepare.py --long`), takes its first group of batches (4 batches of
2 048 tokens), builds a second `TrainStep` with `jit_compile=True` on the same model and
optimizer, times the first XLA call (the compilations: one program per batch shape and the
update), then alternates plain and XLA steps `ROUNDS` times on that group (every shape already
compiled). Prints one JSON line: the compile seconds, each side's per-step seconds and their
medians, and the ratio. Both steps update the same weights, so the loss moves on; what is
compared is the time. Noisy on a shared machine: read the medians. `XLA_CACHE=DIR`: XLA's
persistent cache in DIR (TF_XLA_FLAGS); run twice, the second process's first XLA step reads
the programs the first one compiled. `ROUNDS=0`: the first steps only.
"""

import json
import os
import statistics
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(ROOT, "bench"))
sys.path.insert(0, ROOT)

import prepare  # noqa: E402
import profile_step  # noqa: E402


def timed(step, group):
    start = time.perf_counter()
    result = step(group)
    float(result["loss"])  # waits for the step
    return time.perf_counter() - start, int(result["source_tokens"]) + int(result["target_tokens"])


def main():
    rounds = int(os.environ.get("ROUNDS", "6"))
    if os.environ.get("XLA_CACHE"):
        os.environ["TF_XLA_FLAGS"] = (
            f"--tf_xla_persistent_cache_directory={os.environ['XLA_CACHE']}")
    cache = os.path.join(ROOT, "runs", "bench_cache")
    paths = prepare.prepare_long(cache) if os.environ.get("LONG") else prepare.prepare(cache)
    trainer, groups = profile_step.benchmark_trainer(
        paths["cache_dir"], os.path.join(tempfile.mkdtemp(), "model"), "float32",
        os.environ.get("EXTRA", ""))
    from opennmt_lite.training.step import TrainStep

    plain = trainer.train_step
    xla = TrainStep(plain.model, plain.optimizer, plain.accum_steps,
                    label_smoothing=plain.label_smoothing,
                    average_loss_in_time=plain.average_loss_in_time, jit_compile=True)
    group = next(groups)
    shapes = [tuple(batch["source_ids"].shape) + (int(batch["target_ids_in"].shape[1]),)
              for batch in group[0]]
    plain_first, tokens = timed(plain, group)
    compile_seconds, _ = timed(xla, group)
    times = {"plain": [], "xla": []}
    for _ in range(rounds):
        for name, step in (("plain", plain), ("xla", xla)):
            times[name].append(round(timed(step, group)[0], 3))
    medians = {name: statistics.median(values or [float("nan")]) for name, values in times.items()}
    print(json.dumps(dict(
        long=bool(os.environ.get("LONG")), shapes=shapes, tokens_per_step=tokens,
        first_plain_seconds=round(plain_first, 1), first_xla_seconds=round(compile_seconds, 1),
        seconds=times, median_seconds=medians,
        tokens_per_sec={n: tokens / m for n, m in medians.items()},
        xla_speedup=round(medians["plain"] / medians["xla"], 3))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
