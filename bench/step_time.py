"""Training tokens/s of a few steps in this process, on the same batches every run: a quick A/B.

    [CODE_ROOT=<checkout>] [EXTRA="train.sub_batches=2 ..."] [STEPS=5] [WARM=2] [STEADY=1]
    [DTYPE=float32] python bench/step_time.py

Builds the training benchmark's trainer (bench/configs/train_benchmark.yml on the cached data,
as bench/profile_step.py does) from `CODE_ROOT` (default: this checkout) with the `EXTRA`
overrides, runs `WARM` steps (tracing), then times `STEPS` steps. The seed is the config's, so
two runs see the same batches: alternate the variants and compare. `STEADY=1` repeats the first
group of batches (every shape already compiled: XLA's steady state). Prints one JSON line:
tokens/s over the timed steps, per step, the warm-up steps' seconds, the last loss and the
process' peak RSS. For figures to quote, use bench_train.py (fresh processes, the real command).
"""

import json
import os
import resource
import sys
import tempfile
import time

ROOT = os.path.abspath(os.environ.get("CODE_ROOT")
                       or os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(ROOT, "bench"))
sys.path.insert(0, ROOT)

import prepare  # noqa: E402
import profile_step  # noqa: E402


def main():
    steps, warm = int(os.environ.get("STEPS", "5")), int(os.environ.get("WARM", "2"))
    paths = prepare.prepare(os.path.join(ROOT, "runs", "bench_cache"))
    trainer, groups = profile_step.benchmark_trainer(
        paths["cache_dir"], os.path.join(tempfile.mkdtemp(), "model"),
        os.environ.get("DTYPE", "float32"), os.environ.get("EXTRA", ""))
    first = next(groups) if os.environ.get("STEADY") else None
    group = (lambda: first) if first is not None else (lambda: next(groups))
    warm_seconds = []
    for _ in range(warm):
        start = time.perf_counter()
        float(trainer.train_step(group())["loss"])
        warm_seconds.append(round(time.perf_counter() - start, 1))
    tokens, per_step, start = 0, [], time.perf_counter()
    for _ in range(steps):
        step_start = time.perf_counter()
        result = trainer.train_step(group())
        float(result["loss"])  # waits for the step
        count = int(result["source_tokens"]) + int(result["target_tokens"])
        tokens += count
        per_step.append(round(count / (time.perf_counter() - step_start)))
    print(json.dumps(dict(
        code_root=ROOT, extra=os.environ.get("EXTRA", ""),
        tokens_per_sec=tokens / (time.perf_counter() - start),
        per_step=per_step, warm_seconds=warm_seconds, loss=float(result["loss"]),
        peak_rss_gb=round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6, 2))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
