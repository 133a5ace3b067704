"""Paired A/B of a training lever in one process: two trainers, steps alternated on the same batches.

    [CODE_ROOT=<checkout>] SETUP_A="python statements" SETUP_B="python statements" [ROUNDS=10]
    [WARM=2] [DTYPE=float32] [EXTRA="train.sub_batches=2 ..."] python bench/pair_ab.py

Builds the training benchmark's trainer twice (as bench/step_time.py does, same seed, so both
read the same batches), running `SETUP_A` before building and tracing the first and `SETUP_B`
before the second (e.g. a class attribute that a layer reads when it is traced), runs `WARM`
steps of each (tracing), then `ROUNDS` rounds of one step each, in the order AB, BA, AB, ...
Each step's wall time and the process' CPU time (user + system, both cores) are recorded; on a
machine shared with other jobs the CPU time moves much less than the wall time. Prints one line per
round and a JSON summary: tokens/s of each side, the medians of the paired ratios A/B of wall and
CPU time (> 1: B faster), the last losses and the process' peak RSS (both trainers).
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


def cpu_seconds():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def median(values):
    values = sorted(values)
    middle = len(values) // 2
    return values[middle] if len(values) % 2 else (values[middle - 1] + values[middle]) / 2


def main():
    paths = prepare.prepare(os.path.join(ROOT, "runs", "bench_cache"))
    dtype, extra = os.environ.get("DTYPE", "float32"), os.environ.get("EXTRA", "")
    sides = {}
    for name in "AB":
        exec(os.environ.get(f"SETUP_{name}", ""), {})
        trainer, groups = profile_step.benchmark_trainer(
            paths["cache_dir"], os.path.join(tempfile.mkdtemp(), "model"), dtype, extra)
        for _ in range(int(os.environ.get("WARM", "2"))):
            float(trainer.train_step(next(groups))["loss"])
        sides[name] = (trainer, groups)
    wall, cpu, losses, tokens = {"A": [], "B": []}, {"A": [], "B": []}, {}, []
    for round_ in range(int(os.environ.get("ROUNDS", "10"))):
        counts = set()
        for name in ("AB" if round_ % 2 == 0 else "BA"):
            trainer, groups = sides[name]
            group = next(groups)
            cpu_start, start = cpu_seconds(), time.perf_counter()
            result = trainer.train_step(group)
            losses[name] = float(result["loss"])  # waits for the step
            wall[name].append(time.perf_counter() - start)
            cpu[name].append(cpu_seconds() - cpu_start)
            counts.add(int(result["source_tokens"]) + int(result["target_tokens"]))
        if len(counts) != 1:
            raise RuntimeError(f"the two sides read different batches ({counts} tokens)")
        tokens.append(counts.pop())
        print(round_, tokens[-1], "wall", *(round(wall[n][-1], 2) for n in "AB"),
              "cpu", *(round(cpu[n][-1], 2) for n in "AB"), flush=True)
    print(json.dumps(dict(
        code_root=ROOT, dtype=dtype, extra=extra, setup_a=os.environ.get("SETUP_A", ""),
        setup_b=os.environ.get("SETUP_B", ""),
        tokens_per_sec_a=sum(tokens) / sum(wall["A"]), tokens_per_sec_b=sum(tokens) / sum(wall["B"]),
        median_wall_ratio=median([a / b for a, b in zip(wall["A"], wall["B"])]),
        median_cpu_ratio=median([a / b for a, b in zip(cpu["A"], cpu["B"])]),
        cpu_seconds_per_step_a=median(cpu["A"]), cpu_seconds_per_step_b=median(cpu["B"]),
        loss_a=losses["A"], loss_b=losses["B"],
        peak_rss_gb=round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6, 2))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
