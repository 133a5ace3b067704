"""Where training's resident memory grows: RSS after each phase of the benchmark trainer.

    [CODE_ROOT=<checkout>] [DTYPE=float32] [STEPS=6] python bench/memory_phases.py

Imports TensorFlow as a command does (`cli.import_tensorflow_quietly`), builds the training
benchmark's trainer (bench/configs/train_benchmark.yml on the cached data, as step_time.py),
reads the first group of batches, then runs `STEPS` optimizer steps, printing the process' RSS
(and peak RSS) in MB after each phase.
"""

import os
import resource
import sys
import tempfile

ROOT = os.path.abspath(os.environ.get("CODE_ROOT")
                       or os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(ROOT, "bench"))
sys.path.insert(0, ROOT)


def rss_mb():
    return round(int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e6)


def peak_mb():
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e3)


def main():
    from opennmt_lite import cli

    cli.import_tensorflow_quietly()
    print("import", rss_mb(), flush=True)
    import prepare
    import profile_step

    paths = prepare.prepare(os.path.join(ROOT, "runs", "bench_cache"))
    trainer, groups = profile_step.benchmark_trainer(
        paths["cache_dir"], os.path.join(tempfile.mkdtemp(), "model"),
        os.environ.get("DTYPE", "float32"))
    print("trainer built", rss_mb(), flush=True)
    group = next(groups)
    print("first group", rss_mb(), flush=True)
    for step in range(int(os.environ.get("STEPS", "6"))):
        float(trainer.train_step(group if step == 0 else next(groups))["loss"])
        print("step", step + 1, rss_mb(), "peak", peak_mb(), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
