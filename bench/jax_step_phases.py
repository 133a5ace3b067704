"""Where the JAX train step's time goes, in its steady state (every shape compiled).

    KERAS_BACKEND=jax [STEPS=5] [DTYPE=float32] [EXTRA="key=value ..."] python bench/jax_step_phases.py

Builds the training benchmark's trainer on Keras' JAX backend (bench/configs/train_benchmark.yml
on the cached data, as bench/profile_step.py does; build._jax_trainer), takes its first group of
batches, compiles for it (untimed), then times `STEPS` updates on that same group, each phase
waited for (`block_until_ready`): the forward pass alone (the model and the loss, compiled
apart), the batch function (forward + backward + the gradients added to the accumulators), the
apply (normalise, Adam, schedule), and the assignment of the new values to the Keras variables;
and, apart, the host's padding of a group (`TrainingInput.groups`, which the trainer runs ahead
in a thread). Prints one JSON line: seconds per update of each phase, and tokens/s of the
update. A quick profile on one process, not a figure to quote (bench_train.py --backend jax is).
"""

import json
import os
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(ROOT, "bench"))
sys.path.insert(0, ROOT)

import harness  # noqa: E402
import prepare  # noqa: E402
import profile_step  # noqa: E402


def main():
    import jax
    import jax.numpy as jnp

    steps = int(os.environ.get("STEPS", "5"))
    paths = prepare.prepare(os.path.join(ROOT, "runs", "bench_cache"))
    config = profile_step.benchmark_config(paths["cache_dir"],
                                           os.path.join(tempfile.mkdtemp(), "model"),
                                           os.environ.get("DTYPE", "float32"))
    for key, value in harness.parse_overrides(os.environ.get("EXTRA", "")):
        harness.set_dotted(config, key, value)
    trainer = harness.lite_trainer(config)
    step, model = trainer.train_step, trainer.model
    training_input = trainer.training_inputs[0]
    groups = training_input.groups()
    start = time.perf_counter()
    group = next(groups)
    for _ in range(steps - 1):
        next(groups)
    host = (time.perf_counter() - start) / steps
    batches = [{k: jnp.asarray(v) for k, v in batch.items()} for batch in group]
    tokens = sum(int(b["source_length"].sum() + b["target_length"].sum()) for b in batches)

    @jax.jit
    def forward(trainable, non_trainable, batch):
        return step._objective(trainable, non_trainable, jnp.float32(1.0), batch)[0]

    def values(variables):
        return [v.value for v in variables]

    start = time.perf_counter()
    step((group,))  # compiles the group's shapes and the apply
    compile_seconds = time.perf_counter() - start
    for batch in batches:
        jax.block_until_ready(forward(values(step.trainable), values(step.non_trainable), batch))
    phases = {"forward": 0.0, "forward_backward": 0.0, "apply": 0.0, "assign": 0.0}
    for _ in range(steps):
        trainable, non_trainable = values(step.trainable), values(step.non_trainable)
        t0 = time.perf_counter()
        for batch in batches:
            jax.block_until_ready(forward(trainable, non_trainable, batch))
        t1 = time.perf_counter()
        stats = None
        for batch in batches:
            step._accumulators, non_trainable, batch_stats = step._accumulate(
                step._accumulators, trainable, non_trainable, jnp.float32(1.0), batch)
            stats = batch_stats if stats is None else {
                name: stats[name] + value for name, value in batch_stats.items()}
        jax.block_until_ready(step._accumulators)
        t2 = time.perf_counter()
        step._accumulators, trainable, optimizer_values = step._apply(
            step._accumulators, trainable, values(step.optimizer_variables), stats["normalizer"])
        jax.block_until_ready(trainable)
        t3 = time.perf_counter()
        step.store(trainable, non_trainable, optimizer_values)
        t4 = time.perf_counter()
        for name, seconds in zip(phases, (t1 - t0, t2 - t1, t3 - t2, t4 - t3)):
            phases[name] += seconds / steps
    update = phases["forward_backward"] + phases["apply"] + phases["assign"]
    print(json.dumps({
        "backend": "jax", "model_parameters": sum(int(np.prod(v.shape)) for v in model.trainable_weights),
        "batches_per_update": len(batches), "tokens_per_update": tokens,
        "seconds_per_update": update, "tokens_per_sec": tokens / update,
        "phases_seconds": phases, "backward_seconds": phases["forward_backward"] - phases["forward"],
        "host_padding_seconds_per_group": host, "first_call_seconds": compile_seconds,
        "devices": [str(d) for d in jax.devices()]}))


if __name__ == "__main__":
    sys.exit(main())
