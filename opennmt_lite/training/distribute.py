"""Choosing the tf.distribute strategy: one device, several devices of this machine
(MirroredStrategy), or several machines (MultiWorkerMirroredStrategy, configured by TF_CONFIG).

OpenNMT-tf's convention is kept: the batch size is per replica, and the gradient-accumulation
count is computed from the effective batch size over all replicas.
"""

import json
import os

from opennmt_lite.errors import UserError


class DistributionError(UserError, ValueError):
    pass


def parse_tf_config(text):
    """Validates a TF_CONFIG value; returns (cluster dict, task type, task index)."""
    try:
        config = json.loads(text)
    except json.JSONDecodeError as error:
        raise DistributionError(f"TF_CONFIG is not valid JSON: {error}") from None
    if not isinstance(config, dict) or not isinstance(config.get("cluster"), dict):
        raise DistributionError('TF_CONFIG must be a JSON object with a "cluster" mapping')
    task = config.get("task")
    if not isinstance(task, dict) or "type" not in task or "index" not in task:
        raise DistributionError('TF_CONFIG must have a "task" with "type" and "index"')
    cluster = config["cluster"]
    for job, addresses in cluster.items():
        if not isinstance(addresses, list) or not all(isinstance(a, str) and ":" in a for a in addresses):
            raise DistributionError(f'TF_CONFIG cluster "{job}" must be a list of "host:port" strings')
    members = cluster.get(task["type"])
    if members is None:
        raise DistributionError(f'TF_CONFIG task type "{task["type"]}" is not in the cluster')
    if not isinstance(task["index"], int) or not 0 <= task["index"] < len(members):
        raise DistributionError(
            f'TF_CONFIG task index {task["index"]!r} out of range for the {len(members)} '
            f'"{task["type"]}" address(es)'
        )
    unsupported = set(cluster) - {"worker", "chief"}
    if unsupported:
        raise DistributionError(
            f"TF_CONFIG: only 'worker' and 'chief' jobs are used by MultiWorkerMirroredStrategy, "
            f"got {sorted(unsupported)}"
        )
    return cluster, task["type"], task["index"]


def configure_devices(num_devices):
    """Makes `num_devices` devices available before TensorFlow starts: GPUs if there are enough,
    otherwise the CPU split into logical devices, at most one per core. Returns their names."""
    import tensorflow as tf  # (tf.distribute's devices: the TensorFlow backend's only)

    gpus = tf.config.list_physical_devices("GPU")
    if gpus:
        if num_devices > len(gpus):
            raise DistributionError(
                f"train.num_devices is {num_devices} but this machine has {len(gpus)} GPU(s): "
                + ", ".join(g.name for g in gpus)
            )
        return [f"/gpu:{i}" for i in range(num_devices)]
    cores = os.cpu_count() or 1
    if num_devices > cores:
        raise DistributionError(
            f"train.num_devices is {num_devices} but only {cores} device(s) exist: no GPU, and the "
            f"CPU ({cores} cores) can be split into at most {cores} logical devices"
        )
    cpu = tf.config.list_physical_devices("CPU")[0]
    try:
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(num_devices)]
        )
    except RuntimeError:
        pass  # TensorFlow already started: use what exists
    logical = tf.config.list_logical_devices("CPU")
    if len(logical) < num_devices:
        raise DistributionError(
            f"train.num_devices is {num_devices} but only {len(logical)} device(s) exist "
            f"(no GPU; the CPU can be split only before TensorFlow starts)"
        )
    return [f"/cpu:{i}" for i in range(num_devices)]


def make_strategy(num_devices=1):
    """None for plain single-device training, else the strategy to train under."""
    import tensorflow as tf  # (tf.distribute: the TensorFlow backend's only)

    if os.environ.get("TF_CONFIG"):
        parse_tf_config(os.environ["TF_CONFIG"])
        return tf.distribute.MultiWorkerMirroredStrategy()
    if num_devices < 1:
        raise DistributionError(f"train.num_devices must be at least 1, got {num_devices}")
    if num_devices == 1:
        return None
    return tf.distribute.MirroredStrategy(configure_devices(num_devices))


def jax_data_parallel(num_devices):
    """Keras' JAX backend on `num_devices` devices: keras.distribution's `DataParallel` over the
    first `num_devices` devices JAX sees, set as Keras' distribution (before the model is built,
    so that its variables are replicated on each device). Returns the JAX mesh of its one
    "batch" axis, or None for one device (nothing set)."""
    if num_devices < 1:
        raise DistributionError(f"train.num_devices must be at least 1, got {num_devices}")
    if num_devices == 1:
        return None
    import jax
    import keras

    devices = jax.devices()
    if num_devices > len(devices):
        hint = (f": on a CPU, start with XLA_FLAGS=--xla_force_host_platform_device_count="
                f"{num_devices}" if devices[0].platform == "cpu" else "")
        raise DistributionError(
            f"train.num_devices is {num_devices} but JAX sees {len(devices)} device(s) "
            f"({', '.join(str(d) for d in devices)}){hint}")
    distribution = keras.distribution.DataParallel(
        devices=[f"{d.platform}:{d.id}" for d in devices[:num_devices]])
    keras.distribution.set_distribution(distribution)
    return distribution.device_mesh.backend_mesh


def replica_shards(strategy, devices=1):
    """[(num_shards, shard_index)] of the data for each replica this process drives (without a
    strategy: one per device of this process, `devices`, as Keras' JAX backend)."""
    if strategy is None:
        return [(devices, index) for index in range(devices)]
    total = strategy.num_replicas_in_sync
    local = len(strategy.extended.worker_devices)
    first = strategy.cluster_resolver.task_id * local if strategy.cluster_resolver else 0
    return [(total, first + i) for i in range(local)]


def is_chief(strategy):
    """Whether this process writes checkpoints, logs and evaluations."""
    if strategy is None or strategy.cluster_resolver is None:
        return True
    resolver = strategy.cluster_resolver
    if resolver.task_type == "chief":
        return True
    has_chief = "chief" in resolver.cluster_spec().as_dict()
    return not has_chief and resolver.task_type == "worker" and resolver.task_id == 0


def is_chief_task(environ=os.environ):
    """Whether this process will be the chief (see is_chief), known from TF_CONFIG before any
    strategy exists: always without TF_CONFIG."""
    if not environ.get("TF_CONFIG"):
        return True
    cluster, task_type, task_index = parse_tf_config(environ["TF_CONFIG"])
    if task_type == "chief":
        return True
    return "chief" not in cluster and task_type == "worker" and task_index == 0
