"""One optimizer update over a group of accumulated batches.

OpenNMT-tf's accumulation: the gradients of the summed (label-smoothed) token losses of every
batch in the group are added up, then divided once by the group's total number of target tokens
(or of examples when `average_loss_in_time` is false), and applied in a single update. This is
exactly the gradient of one batch holding all the group's examples, not an average of per-batch
means (which Keras' `gradient_accumulation_steps` would compute, also advancing the learning
rate schedule per batch).

`TrainStep` runs one compiled function per batch, which adds its gradients to accumulator
variables (a batch's activations are freed before the next batch starts), then one compiled
function that applies the accumulated update. Under tf.distribute each replica accumulates its
own batches; the normalizer is summed over replicas before the division, and the optimizer sums
the replicas' gradients.

With `sub_batches` = n > 1, each batch is cut into n consecutive slices of its examples, each
trimmed to its own longest source and target, and their losses are summed in one graph: the n
forward and backward passes share no op until the gradients are added, so TensorFlow's
inter-op threads run them side by side. On a CPU with few cores, n single-threaded passes keep
the cores busier than one pass whose small ops are each split over all cores (see
`configure_threads`). The gradient is the same sum over the same tokens.

With contrastive learning (`max_margin_eta` set; OpenNMT-tf's `params.contrastive_learning`),
the training loss of a batch is instead OpenNMT-tf's max-margin loss, a scalar per batch (its
sub-batches' sums added before the division), and its normalizer 1: the update is the mean of
the accumulated batches' gradients, as OpenNMT-tf divides by accum_steps * replicas when the
loss returns no sample size. Evaluation keeps the cross-entropy, as in OpenNMT-tf.

Otherwise, with guided alignment (`GuidedAlignment`), each batch's summed loss also holds OpenNMT-tf's
guided-alignment cost of that batch (already divided by its target words, times the weight);
it is then normalised with the cross-entropy, as OpenNMT-tf adds it to its cumulated loss.
Sub-batches scale their slice's cost by the whole batch's totals, so the sum is unchanged.
Example weights do not weigh it, and contrastive learning's loss replaces it, as in OpenNMT-tf.

With `mask_outliers` (OpenNMT-tf's `params.mask_loss_outliers`), the examples of a batch whose mean
token loss is an outlier of that batch (training/losses.py, `outlier_mask`) count in neither the
summed loss nor the normalizer; a batch cut into sub-batches is judged whole (`outlier_keeps`).
"""

import logging
import os

import tensorflow as tf

from opennmt_lite.checkpointing.names import inner_optimizer
from opennmt_lite.data import batch_signature
from opennmt_lite.training.losses import guided_alignment_scale, max_margin_loss
# (the loss arithmetic shared with the JAX step, `forward` included; GuidedAlignment,
# reduce_loss, outlier_keeps and contrastive_sums are imported from here by the builder and the
# tests)
from opennmt_lite.training.objective import (  # noqa: F401
    GuidedAlignment, contrastive_sums, forward, outlier_keeps, reduce_loss)
from opennmt_lite.training.regularization import penalized_weights, weight_penalty

logger = logging.getLogger("opennmt_lite")


def compute_loss(model, batch, label_smoothing, average_loss_in_time, training,
                 guided_alignment=None, guided_scale=None):
    """-> (summed loss, normalizer) of one batch. With example weights (`example_weight` [B]),
    OpenNMT-tf's: each example's token losses are scaled by its weight, and the normalizer is the
    weighted token count (`average_loss_in_time`) or the sum of the weights. With
    `guided_alignment`, the summed loss includes the guided-alignment cost times `guided_scale`
    (`guided_alignment_scale` of the whole batch this one may be a slice of; not weighted)."""
    outputs = forward(model, batch, label_smoothing, training)
    return reduce_loss(batch, outputs, average_loss_in_time, guided_alignment, guided_scale)




def split_batch(batch, parts):
    """Cuts a batch into `parts` slices of consecutive examples (sizes differing by at most
    one), each trimmed to its own longest source and target; a slice of a batch smaller than
    `parts` can be empty ([0, 0] ids)."""
    size = tf.shape(batch["source_length"])[0]
    bounds = [size * k // parts for k in range(parts + 1)]
    slices = []
    for start, end in zip(bounds[:-1], bounds[1:]):
        part = {name: value[start:end] for name, value in batch.items()}
        # (max over an empty slice is the int32 minimum: clipped to 0)
        source_time = tf.maximum(tf.reduce_max(part["source_length"]), 0)
        target_time = tf.maximum(tf.reduce_max(part["target_length"]), 0)
        part["source_ids"] = part["source_ids"][:, :source_time]
        part["target_ids_in"] = part["target_ids_in"][:, :target_time]
        part["target_ids_out"] = part["target_ids_out"][:, :target_time]
        if "alignment" in part:
            part["alignment"] = part["alignment"][:, :target_time, :source_time]
        if "noisy_target_length" in part:
            noisy_time = tf.maximum(tf.reduce_max(part["noisy_target_length"]), 0)
            for name in ("noisy_target_ids_in", "noisy_target_ids_out"):
                part[name] = part[name][:, :noisy_time]
        slices.append(part)
    return slices


def batch_gradients(model, optimizer, batch, label_smoothing, average_loss_in_time, sub_batches=1,
                    max_margin_eta=None, guided_alignment=None, regularization=None,
                    mask_outliers=False):
    """-> (gradients of the batch's summed loss (loss-scaled in float16), loss, normalizer).
    Embedding gradients stay IndexedSlices. `sub_batches` > 1: the loss is summed over that many
    slices of the batch (split_batch), computed independently (see the module docstring).
    `max_margin_eta`: contrastive learning's loss instead (normalizer 1). `guided_alignment`: a
    `GuidedAlignment`, whose cost joins the cross-entropy (OpenNMT-tf's). `regularization`:
    (l1, l2) scales of OpenNMT-tf's weight penalty, added once to the batch's summed loss
    whichever loss it is (training/regularization.py). `mask_outliers`: OpenNMT-tf's
    `params.mask_loss_outliers` (`outlier_mask`, over the whole batch; not with contrastive
    learning, whose loss does not use it, as in OpenNMT-tf)."""
    scaled = inner_optimizer(optimizer) is not optimizer
    guided_scale = None
    if guided_alignment is not None:
        guided_scale = guided_alignment_scale(
            batch["target_length"] - 1, guided_alignment.source_time(batch), guided_alignment.type,
            guided_alignment.weight)
    with tf.GradientTape() as tape:
        parts = split_batch(batch, sub_batches) if sub_batches > 1 else [batch]
        if max_margin_eta is not None:
            sums = zip(*(contrastive_sums(model, part, training=True) for part in parts))
            loss = max_margin_loss(*(tf.add_n(list(terms)) for terms in sums), eta=max_margin_eta)
            normalizer = tf.constant(1.0)
        else:
            outputs = [forward(model, part, label_smoothing, training=True) for part in parts]
            keeps = outlier_keeps(outputs) if mask_outliers else [None] * len(parts)
            losses, normalizers = zip(*(
                reduce_loss(part, part_outputs, average_loss_in_time, guided_alignment,
                            guided_scale, keep)
                for part, part_outputs, keep in zip(parts, outputs, keeps)))
            loss, normalizer = tf.add_n(losses), tf.add_n(normalizers)
        if regularization is not None:
            loss += weight_penalty(penalized_weights(model), regularization)
        objective = optimizer.scale_loss(loss) if scaled else loss
    return tape.gradient(objective, model.trainable_variables), loss, normalizer


def clip_global_norm(grads, clip_norm, context=None):
    """`params.clip_gradients`: the gradients scaled by clip_norm / max(norm, clip_norm), norm
    being the global norm of their sum over the replicas of `context` (None: one replica), as
    tf.clip_by_global_norm (a non-finite norm makes every gradient NaN, so that loss scaling
    still skips the update)."""
    if context is None or context.num_replicas_in_sync == 1:
        return tf.clip_by_global_norm(grads, clip_norm)[0]
    norm = tf.linalg.global_norm(context.all_reduce("sum", grads))
    scale = clip_norm * tf.minimum(1.0 / norm, 1.0 / clip_norm)
    scale = tf.where(tf.math.is_finite(norm), scale, float("nan"))
    return [g * scale for g in grads]


def apply_gradients(optimizer, grads, variables, normalizer, clip_norm=None, context=None):
    """Divides by the normalizer, clips the global norm to `clip_norm` (if set; the gradient
    the update applies: accumulated, normalised, summed over the replicas of `context`, loss
    scale removed), and applies. With loss scaling, a skipped (non-finite) update still advances
    the step counter, as in OpenNMT-tf, so the learning-rate schedule moves on."""
    grads = [g / normalizer for g in grads]
    inner = inner_optimizer(optimizer)
    if clip_norm:
        # (the gradients still carry the loss scale, which the LossScaleOptimizer removes: the
        # threshold carries it too)
        scale = optimizer.dynamic_scale if inner is not optimizer else 1.0
        grads = clip_global_norm(grads, clip_norm * scale, context)
    # (tf.identity: a snapshot; Keras' `.value` is the variable itself, read again later.)
    before = tf.identity(inner.iterations.value)
    optimizer.apply(grads, variables)
    if inner is not optimizer:
        skipped = tf.equal(tf.identity(inner.iterations.value), before)
        inner.iterations.assign_add(tf.cast(skipped, inner.iterations.dtype))


def configure_threads(sub_batches):
    """Thread pools for `sub_batches` passes side by side: as many inter-op threads, and the
    cores shared among them for each op (one each on a 2-core CPU). Must run before TensorFlow
    starts; afterwards the pools are left as they are (logged)."""
    if sub_batches <= 1:
        return
    intra = max(1, (os.cpu_count() or 1) // sub_batches)
    try:
        tf.config.threading.set_inter_op_parallelism_threads(sub_batches)
        tf.config.threading.set_intra_op_parallelism_threads(intra)
    except RuntimeError:
        logger.warning(
            "train.sub_batches=%d: TensorFlow has already started, its thread pools stay as they "
            "are (%s inter-op, %s intra-op threads; 0 = one per core)", sub_batches,
            tf.config.threading.get_inter_op_parallelism_threads(),
            tf.config.threading.get_intra_op_parallelism_threads())
        return
    logger.info("train.sub_batches=%d: %d inter-op threads, %d intra-op thread(s) per op",
                sub_batches, sub_batches, intra)


def local_replicas(strategy):
    """Number of replicas this process drives (all of them, except in multi-worker training)."""
    if strategy.num_replicas_in_sync == 1:
        return 1
    return len(strategy.extended.worker_devices)


class TrainStep:
    """`train_step(groups)` -> statistics of the update (loss, loss_sum, normalizer, tokens).

    `groups` holds one group (a tuple of `accum_steps` batches) per local replica.
    """

    def __init__(self, model, optimizer, accum_steps, label_smoothing=0.0,
                 average_loss_in_time=True, jit_compile=False, strategy=None, sub_batches=1,
                 max_margin_eta=None, example_weights=False, guided_alignment=None,
                 regularization=None, clip_gradients=None, mask_outliers=False):
        """`regularization`: (l1, l2) scales of OpenNMT-tf's weight penalty, or None;
        `clip_gradients`: the global norm each update's gradient is clipped to, or None;
        `mask_outliers`: params.mask_loss_outliers (see `batch_gradients`)."""
        self.mask_outliers = mask_outliers
        self.model = model
        # (None: the cross-entropy; else contrastive learning's max-margin loss, see above)
        self.max_margin_eta = max_margin_eta
        self.guided_alignment = guided_alignment
        self.regularization = regularization
        self.clip_gradients = clip_gradients
        self.sub_batches = sub_batches
        self.optimizer = optimizer
        self.accum_steps = accum_steps
        self.label_smoothing = label_smoothing
        self.average_loss_in_time = average_loss_in_time
        self.strategy = strategy or tf.distribute.get_strategy()
        self.distributed = self.strategy.num_replicas_in_sync > 1
        self.replicas = local_replicas(self.strategy)
        self.variables = model.trainable_variables
        local = dict(trainable=False, synchronization=tf.VariableSynchronization.ON_READ,
                     aggregation=tf.VariableAggregation.SUM)
        with self.strategy.scope():
            # Per-replica sums of the gradients and of the normalizer (not checkpointed: they are
            # zero between updates).
            self.accumulators = [tf.Variable(tf.zeros(v.shape, tf.float32), **local) for v in self.variables]
            self.normalizer = tf.Variable(0.0, **local)
        # XLA compiles the single-device functions; cross-device collectives stay outside it.
        jit = (jit_compile and not self.distributed) or None
        negatives = max_margin_eta is not None
        # (`example_weights`: the batches carry `example_weight`, data.example_weights)
        signature = (tuple(batch_signature(negatives=negatives, with_weight=example_weights,
                                           with_alignment=guided_alignment is not None)
                           for _ in range(self.replicas)),)
        self._accumulate = tf.function(self._accumulate_fn, input_signature=signature, jit_compile=jit)
        self._apply = tf.function(self._apply_fn, jit_compile=jit)

    def _replica_accumulate(self, batch):
        grads, loss, normalizer = batch_gradients(
            self.model, self.optimizer, batch, self.label_smoothing, self.average_loss_in_time,
            self.sub_batches, max_margin_eta=self.max_margin_eta,
            guided_alignment=self.guided_alignment, regularization=self.regularization,
            mask_outliers=self.mask_outliers)
        for accumulator, grad in zip(self.accumulators, grads):
            # Embedding gradients (IndexedSlices) are added densely, as OpenNMT-tf did (replica-
            # local variables have no scatter_add).
            accumulator.assign_add(tf.cast(tf.convert_to_tensor(grad), tf.float32))
        self.normalizer.assign_add(normalizer)
        return {
            "loss_sum": loss,
            "normalizer": normalizer,
            "source_tokens": tf.reduce_sum(batch["source_length"]),
            "target_tokens": tf.reduce_sum(batch["target_length"]),
        }

    def _accumulate_fn(self, batches):
        if not self.distributed:
            return self._replica_accumulate(batches[0])
        resolver = self.strategy.cluster_resolver
        first = resolver.task_id * self.replicas if resolver else 0
        values = self.strategy.experimental_distribute_values_from_function(
            lambda context: batches[context.replica_id_in_sync_group - first])
        per_replica = self.strategy.run(self._replica_accumulate, args=(values,))
        return {k: self.strategy.reduce("sum", v, axis=None) for k, v in per_replica.items()}

    def _replica_apply(self):
        context = tf.distribute.get_replica_context()
        total = context.all_reduce("sum", self.normalizer.read_value())
        grads = [a.read_value() for a in self.accumulators]
        apply_gradients(self.optimizer, grads, self.variables, total, self.clip_gradients, context)
        for accumulator in self.accumulators:
            accumulator.assign(tf.zeros_like(accumulator))
        self.normalizer.assign(0.0)

    def _apply_fn(self):
        if self.distributed:
            self.strategy.run(self._replica_apply)
        else:
            self._replica_apply()

    def __call__(self, groups):
        stats = None
        for k in range(self.accum_steps):
            batch_stats = self._accumulate(tuple(group[k] for group in groups))
            stats = batch_stats if stats is None else {n: stats[n] + v for n, v in batch_stats.items()}
        self._apply()
        stats["loss"] = stats["loss_sum"] / stats["normalizer"]
        return stats
