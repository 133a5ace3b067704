"""Resident memory that TensorFlow keeps for each new shape of a matrix product.

    [DTYPES="bfloat16 float32"] [SHAPES=150] python bench/primitive_memory.py

With oneDNN on, TensorFlow creates one oneDNN primitive per product shape and keeps it in a
per-thread cache of 1 024 entries (a constant in TensorFlow's source, no setting), so a training
run whose batches keep taking new shapes grows until those caches are full. For each dtype and
each kind of product of the training step (a [tokens, 256] x [256, 256] projection; its input
gradient, x @ kernel^T; its kernel gradient, x^T @ dy, where the tokens are the contracted
dimension; an attention score product [8, 4, time, 64] x [8, 4, 64, time]), this runs the
product at its 30 largest shapes to warm up, then at `SHAPES` new smaller ones, and prints the
RSS added per new shape in KB. Run it once with oneDNN (the default on AVX-512 CPUs) and once
with `TF_ENABLE_ONEDNN_OPTS=0` (TensorFlow's own kernels, which keep nothing per shape).
"""

import json
import os
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, ROOT)


def rss_kb():
    return int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e3


def main():
    from opennmt_lite import cli, cpu

    cli.import_tensorflow_quietly()
    import tensorflow as tf

    # One thread per product, as in the training step's sub-batches. (Eager ops run on this
    # Python thread, so one cache holds every primitive measured.)
    tf.config.threading.set_intra_op_parallelism_threads(1)
    shapes = int(os.environ.get("SHAPES", "150"))
    results = {"onednn": cpu.onednn_enabled(), "cpu": cpu.cpu_features().describe(),
               "new_shapes": shapes, "kb_per_new_shape": {}}
    for name in os.environ.get("DTYPES", "bfloat16 float32").split():
        dtype = tf.as_dtype(name)
        kernel = tf.cast(tf.random.normal([256, 256]), dtype)

        def product(kind, n):
            if kind == "attention":
                queries = tf.cast(tf.random.normal([8, 4, n // 40, 64]), dtype)
                return tf.matmul(queries, queries, transpose_b=True)
            x = tf.cast(tf.random.normal([n, 256]), dtype)
            if kind == "projection":
                return tf.matmul(x, kernel)
            if kind == "input_gradient":
                return tf.matmul(x, kernel, transpose_b=True)
            return tf.matmul(x, x, transpose_a=True)  # kernel_gradient

        for kind in ("projection", "input_gradient", "kernel_gradient", "attention"):
            # Largest shapes first, so that the allocator has grown before the measurement.
            step = 40 if kind == "attention" else 16  # (a new time length per shape)
            sizes = [1000 + i * step for i in range(30 + shapes)][::-1]
            for n in sizes[:30]:
                product(kind, n)
            before = rss_kb()
            for n in sizes[30:]:
                product(kind, n)
            added = (rss_kb() - before) / shapes
            results["kb_per_new_shape"][f"{name} {kind}"] = round(added, 1)
            print(f"{name:9s} {kind:16s} {added:7.1f} KB per new shape", flush=True)
    print(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
