"""Serving speed, side by side and op by op: opennmt-lite's SavedModel `translate` against
OpenNMT-tf 2.32's `model.infer` on the same weights and batches.

    python bench/profile_serving.py [--sides onmt lite [lite:PATH ...]] [--rounds 3] [--passes 3]
        [--profile] [--top 25] [--onednn 0|1]

The weights and batches are bench/bench_ctranslate2.py's (OpenNMT-tf's fixture model
tests/fixtures/onmt_tf_relative, its 100 test sentences in batches of 32, beam 4, length
penalty 0, at most 250 tokens); `bench_ctranslate2.py --prepare` writes the batches. A side
`lite` is this checkout, `lite:PATH` another checkout of opennmt-lite (a git worktree of an
earlier commit, for before/after): each exports its SavedModel with its own code into
runs/bench_cache/profile_serving/<checkout name>-<commit>[-dirty-<hash of the diff>]/ (kept).

Each round runs every side once, in that order, in a fresh process (alternated, so that a busy
machine slows them alike): a warm-up pass over the batches, then --passes timed passes; the table
gives, per side, the median over rounds of the median pass (target tokens / s, the best
hypothesis without `</s>`) and its ratio to the first side. --profile records one more pass of
each side's last round with tf.profiler and lists the op time by op type (summed over
TensorFlow's threads: CPU time, not wall time), per pass. --onednn 0 sets
TF_ENABLE_ONEDNN_OPTS=0 in the workers (TensorFlow's Eigen kernels, as on a CPU without
AVX512_VNNI/BF16/AMX, where TensorFlow leaves oneDNN off).
"""

import argparse
import collections
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(BENCH_DIR)
FIXTURE = os.path.join(ROOT, "tests", "fixtures", "onmt_tf_relative")
FIXTURE_CONFIG = os.path.join("tests", "fixtures", "onmt_fixture.yml")
SENTENCES = os.path.join(FIXTURE, "test.first100.tok.en")
CACHE = os.path.join(ROOT, "runs", "bench_cache", "profile_serving")
ONMT_PYTHON = os.environ.get("ONMT_PYTHON", "/work/onmt-venv/bin/python")


def checkout_key(path):
    """<name>-<commit>[-dirty-<hash of the diff>]: which code a cached SavedModel was made with."""
    git = ["git", "-C", path]
    commit = subprocess.run(git + ["rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, check=True).stdout.strip()
    diff = subprocess.run(git + ["diff", "HEAD", "--", "opennmt_lite"], capture_output=True,
                          check=True).stdout
    key = f"{os.path.basename(os.path.abspath(path))}-{commit}"
    return key + (f"-dirty-{hashlib.sha256(diff).hexdigest()[:10]}" if diff else "")


def export(code_root, output_dir):
    """The fixture's SavedModel, beam 4, exported with the code of `code_root` (child process)."""
    sys.path.insert(0, code_root)
    os.chdir(code_root)
    from opennmt_lite import build
    from opennmt_lite.config import load_config
    from opennmt_lite.export import saved_model
    from opennmt_lite.inference.decoding import DecodingOptions

    config = load_config([FIXTURE_CONFIG])
    model, assets, _ = build.inference_model(config)
    options = DecodingOptions(beam_width=4, length_penalty=0.0, n_best=1,
                              maximum_decoding_length=250)
    saved_model.export_model(model, assets, options, config.data, output_dir)


def batches_path():
    output = subprocess.run([sys.executable, os.path.join(BENCH_DIR, "bench_ctranslate2.py"),
                             "--prepare"], check=True, stdout=subprocess.PIPE, cwd=ROOT).stdout
    return json.loads(output.decode().strip().splitlines()[-1])["batches"]


def load_batches(path):
    import numpy as np

    with np.load(path) as data:
        return [(data[f"ids_{i:05d}"], data[f"length_{i:05d}"], data[f"index_{i:05d}"])
                for i in range(int(data["num_batches"]))]


def lite_translator(model_dir):
    import tensorflow as tf

    with open(SENTENCES, encoding="utf-8") as f:
        sentences = [line.split() for line in f]
    signature = tf.saved_model.load(model_dir).signatures["translate"]

    def make(batch):
        tokens = [sentences[int(i)] for i in batch[2]]
        width = max(len(s) for s in tokens)
        return (tf.constant([s + [""] * (width - len(s)) for s in tokens]),
                tf.constant([len(s) for s in tokens], tf.int32))

    def translate(inputs):
        result = signature(tokens=inputs[0], length=inputs[1])
        return int(result["length"].numpy()[:, 0].sum())

    return make, translate


def onmt_translator():
    import numpy as np
    import tensorflow as tf

    sys.path.insert(0, BENCH_DIR)
    import onmt_translate

    benchmark = os.path.join(ROOT, "runs", "bench_cache", "ctranslate2", "onmt_fixture",
                             "onmt_benchmark.yml")
    params = dict(beam_width=4, length_penalty=0.0, maximum_decoding_length=250,
                  num_hypotheses=1)
    model = onmt_translate.build_model(benchmark, FIXTURE, params=params)
    onmt_translate.restore_checkpoint(model, FIXTURE)
    infer = tf.function(model.infer, input_signature=({
        "ids": tf.TensorSpec([None, None], tf.int64), "length": tf.TensorSpec([None], tf.int32)},))

    def make(batch):
        return {"ids": tf.constant(batch[0].astype(np.int64)), "length": tf.constant(batch[1])}

    def translate(inputs):
        return int(infer(inputs)["length"].numpy()[:, 0].sum())

    return make, translate


def read_ops(logdir):
    """{op type: seconds} of every TensorFlow op in the profile (profile_step's trace reader,
    without tf.data's threads)."""
    sys.path.insert(0, BENCH_DIR)
    import profile_step

    totals = collections.Counter()
    for _, op_type, thread, seconds in profile_step.read_trace(logdir):
        if not thread.startswith("tf_data"):
            totals[op_type] += seconds
    return totals


def worker(args):
    import tensorflow as tf

    make, translate = onmt_translator() if args.worker == "onmt" else lite_translator(args.model)
    inputs = [make(batch) for batch in load_batches(args.batches)]

    def one_pass():
        start, cpu = time.perf_counter(), time.process_time()
        tokens = sum(translate(x) for x in inputs)
        return tokens, time.perf_counter() - start, time.process_time() - cpu

    one_pass()  # warm-up (tracing)
    passes = [one_pass() for _ in range(args.passes)]
    record = dict(tokens=passes[0][0], seconds=[p[1] for p in passes],
                  cpu_seconds=[p[2] for p in passes])
    if args.profile:
        logdir = tempfile.mkdtemp(prefix="profile_serving-")
        tf.profiler.experimental.start(logdir)
        _, seconds, _ = one_pass()
        tf.profiler.experimental.stop()
        record.update(profiled_seconds=seconds, ops=read_ops(logdir))
    print(json.dumps(record), flush=True)
    return 0


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sides", nargs="+", default=["onmt", "lite"])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--onednn", choices=("0", "1"))
    parser.add_argument("--worker", choices=("onmt", "lite"), help=argparse.SUPPRESS)
    parser.add_argument("--model", help=argparse.SUPPRESS)
    parser.add_argument("--batches", help=argparse.SUPPRESS)
    parser.add_argument("--export", nargs=2, metavar=("CODE_ROOT", "DIR"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.export:
        return export(*args.export)
    if args.worker:
        return worker(args)

    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    if args.onednn is not None:
        env["TF_ENABLE_ONEDNN_OPTS"] = args.onednn
    batches = batches_path()
    commands = {}
    for side in args.sides:
        if side == "onmt":
            commands[side] = [ONMT_PYTHON, __file__, "--worker", "onmt"]
            continue
        code_root = ROOT if side == "lite" else os.path.abspath(side.split(":", 1)[1])
        model_dir = os.path.join(CACHE, checkout_key(code_root))
        if not os.path.isdir(model_dir):
            subprocess.run([sys.executable, __file__, "--export", code_root, model_dir],
                           check=True, env=env)
        commands[side] = [sys.executable, __file__, "--worker", "lite", "--model", model_dir]
    results = collections.defaultdict(list)
    for round_index in range(args.rounds):
        for side, command in commands.items():
            profile = args.profile and round_index == args.rounds - 1
            output = subprocess.run(
                command + ["--batches", batches, "--passes", str(args.passes)]
                + (["--profile"] if profile else []),
                check=True, stdout=subprocess.PIPE, env=env, cwd=ROOT).stdout
            record = json.loads(output.decode().strip().splitlines()[-1])
            results[side].append(record)
            rate = record["tokens"] / statistics.median(record["seconds"])
            print(f"round {round_index + 1} {side}: {rate:.1f} tok/s "
                  f"(passes {', '.join(f'{s:.2f}' for s in record['seconds'])} s; "
                  f"CPU {', '.join(f'{s:.2f}' for s in record['cpu_seconds'])} s)", flush=True)
    print(f"\nTF_ENABLE_ONEDNN_OPTS={env.get('TF_ENABLE_ONEDNN_OPTS', 'default')}, "
          f"load average {os.getloadavg()[0]:.1f}; medians over {args.rounds} rounds")
    first = None
    for side, records in results.items():
        rate = statistics.median(r["tokens"] / statistics.median(r["seconds"]) for r in records)
        first = first or rate
        cpu = statistics.median(statistics.median(r["cpu_seconds"]) for r in records)
        tokens = sorted({r["tokens"] for r in records})
        print(f"{side:>12}: {rate:7.1f} target tok/s  x{rate / first:.2f}  CPU {cpu:.2f} s/pass  "
              f"tokens {tokens}")
    if args.profile:
        for side, records in results.items():
            ops = records[-1]["ops"]
            total = sum(ops.values())
            print(f"\n{side}: profiled pass {records[-1]['profiled_seconds']:.2f} s wall, "
                  f"op time {total:.2f} s")
            for name, seconds in sorted(ops.items(), key=lambda kv: -kv[1])[:args.top]:
                print(f"  {name:<36} {seconds:7.3f} s  {100 * seconds / total:5.1f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
