"""One optimizer update over a group of accumulated batches.

OpenNMT-tf's accumulation: the gradients of the summed (label-smoothed) token losses of every
batch in the group are added up, then divided once by the group's total number of target tokens
(or of examples when `average_loss_in_time` is false), and applied in a single update. This is
exactly the gradient of one batch holding all the group's examples, not an average of per-batch
means (which Keras' `gradient_accumulation_steps` would compute, also advancing the learning
rate schedule per batch).
"""

import tensorflow as tf

from opennmt_lite.losses import cross_entropy_sequence_loss
from opennmt_lite.optimizers import inner_optimizer

FEATURE_KEYS = ("source_ids", "source_length", "target_ids_in", "target_ids_out", "target_length")


def batch_signature():
    """TensorSpecs of one batch: any batch size and length, so one trace serves every shape."""
    return {
        "source_ids": tf.TensorSpec([None, None], tf.int32),
        "source_length": tf.TensorSpec([None], tf.int32),
        "target_ids_in": tf.TensorSpec([None, None], tf.int32),
        "target_ids_out": tf.TensorSpec([None, None], tf.int32),
        "target_length": tf.TensorSpec([None], tf.int32),
    }


def compute_loss(model, batch, label_smoothing, average_loss_in_time, training):
    """-> (summed loss, normalizer) of one batch."""
    logits, _ = model(batch, training=training)
    loss, tokens = cross_entropy_sequence_loss(
        logits, batch["target_ids_out"], batch["target_length"],
        label_smoothing=label_smoothing, training=training,
    )
    normalizer = tokens if average_loss_in_time else tf.cast(tf.shape(batch["target_length"])[0], tf.float32)
    return loss, normalizer


def accumulate_gradients(model, optimizer, group, label_smoothing, average_loss_in_time):
    """Summed gradients of the group's summed losses -> (grads, loss_sum, normalizer)."""
    variables = model.trainable_variables
    scaled = inner_optimizer(optimizer) is not optimizer  # float16 loss scaling
    total_grads = None
    loss_sum = tf.constant(0.0)
    normalizer = tf.constant(0.0)
    for batch in group:
        with tf.GradientTape() as tape:
            loss, batch_normalizer = compute_loss(
                model, batch, label_smoothing, average_loss_in_time, training=True
            )
            objective = optimizer.scale_loss(loss) if scaled else loss
        # Embedding gradients come as IndexedSlices; summing them dense is what OpenNMT-tf did.
        grads = [tf.convert_to_tensor(g) for g in tape.gradient(objective, variables)]
        total_grads = grads if total_grads is None else [a + b for a, b in zip(total_grads, grads)]
        loss_sum += loss
        normalizer += batch_normalizer
    return total_grads, loss_sum, normalizer


def apply_gradients(optimizer, grads, variables, normalizer):
    """Divides by the normalizer and applies. With loss scaling, a skipped (non-finite) update
    still advances the step counter, as in OpenNMT-tf, so the learning-rate schedule moves on."""
    grads = [g / normalizer for g in grads]
    inner = inner_optimizer(optimizer)
    before = inner.iterations.value
    optimizer.apply(grads, variables)
    if inner is not optimizer:
        skipped = tf.equal(inner.iterations.value, before)
        inner.iterations.assign_add(tf.cast(skipped, inner.iterations.dtype))


def local_replicas(strategy):
    """Number of replicas this process drives (all of them, except in multi-worker training)."""
    if strategy.num_replicas_in_sync == 1:
        return 1
    return len(strategy.extended.worker_devices)


def make_train_step(model, optimizer, accum_steps, label_smoothing=0.0, average_loss_in_time=True,
                    jit_compile=False, strategy=None):
    """A tf.function running one update: `train_step(groups)` -> statistics dict.

    `groups` holds one group (a tuple of `accum_steps` batches) per local replica. Each replica
    sums the gradients of its group; the normalizer is summed over all replicas (all-reduce),
    each replica divides its gradients by it, and the optimizer sums the replicas' gradients: the
    update is the gradient of all the examples of all replicas divided by their token count,
    exactly as on a single device.
    """
    strategy = strategy or tf.distribute.get_strategy()
    replicas = local_replicas(strategy)
    group_signature = tuple(batch_signature() for _ in range(accum_steps))
    signature = (tuple(group_signature for _ in range(replicas)),)

    def replica_step(group):
        grads, loss_sum, normalizer = accumulate_gradients(
            model, optimizer, group, label_smoothing, average_loss_in_time
        )
        total = tf.distribute.get_replica_context().all_reduce("sum", normalizer)
        apply_gradients(optimizer, grads, model.trainable_variables, total)
        return {
            "loss_sum": loss_sum,
            "normalizer": normalizer,
            "source_tokens": tf.add_n([tf.reduce_sum(b["source_length"]) for b in group]),
            "target_tokens": tf.add_n([tf.reduce_sum(b["target_length"]) for b in group]),
        }

    distributed = strategy.num_replicas_in_sync > 1
    # XLA compiles the single-device step whole; cross-device collectives stay outside it.
    if jit_compile and distributed:
        replica_step = tf.function(replica_step, jit_compile=True)

    @tf.function(input_signature=signature, jit_compile=(jit_compile and not distributed) or None)
    def train_step(groups):
        if not distributed:
            stats = replica_step(groups[0])
        else:
            first = strategy.cluster_resolver.task_id * replicas if strategy.cluster_resolver else 0
            values = strategy.experimental_distribute_values_from_function(
                lambda context: groups[context.replica_id_in_sync_group - first]
            )
            per_replica = strategy.run(replica_step, args=(values,))
            stats = {k: strategy.reduce("sum", v, axis=None) for k, v in per_replica.items()}
        stats["loss"] = stats["loss_sum"] / stats["normalizer"]
        return stats

    return train_step
