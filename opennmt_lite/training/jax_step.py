"""One optimizer update over a group of accumulated batches, on Keras' JAX backend.

The same semantics as training/step.py's `TrainStep` (OpenNMT-tf's accumulation: the gradients of
the summed token losses of every batch of the group are added up, divided once by the group's
total normalizer, and applied in one optimizer update, which advances the learning-rate schedule
once), with the loss arithmetic shared through training/objective.py. The mechanics are JAX's,
functional: the model and its loss run in a `keras.StatelessScope` (`JaxTrainStep._stateless`,
as `model.stateless_call` runs `call`; its non-trainable state, the dropout seeds, returned
updated), `jax.value_and_grad` differentiates the batch's summed loss with respect to the
trainable values, and `optimizer.stateless_apply` makes the update. Two compiled functions, as
on TensorFlow: one per batch (forward, backward, gradients added to float32
accumulators, donated so that they are updated in place), one per group (normalise, clip, apply).

`jax.jit` compiles the batch function once per batch shape: the batches should take few shapes
(the `batching.ShapePlan` of `train.xla_shapes`, which `build.training_inputs` uses on JAX).

After each update the new values are assigned back to the Keras variables (a reference, no copy),
so that the rest of the trainer (checkpoints, evaluation, the moving average, the reports) reads
the model and the optimizer as on TensorFlow.

Several devices (`mesh`: the 1-D device mesh of keras.distribution's `DataParallel`, whose
variables are replicated on every device): each update's batches (`accum_steps` from each
replica's input) are dealt to the devices in groups of one batch per device, paired by shape (so
that few padded shapes compile), each group stacked into [devices, batch, time] arrays padded to
its largest batch (`stack_batches`: rows of padding are marked and count nowhere). The batch
function runs the same single-batch objective on every device (`jax.shard_map`); the gradient
of the replicated weights is the sum over the devices (shard_map's transpose of a replicated
input), which the update divides by the total normalizer: OpenNMT-tf's multi-replica rule, and
exactly the update of one device accumulating all those batches.

Supported: every model type (a Transformer, a language model, a sequence tagger, its CRF
included, and a classifier, each with TrainStep's loss), label smoothing,
`average_loss_in_time`, example weights, guided alignment, the masking of outliers,
regularization, gradient clipping, the schedules, Adam/AdamW/SGD, bfloat16 mixed precision,
float16 with Keras' dynamic LossScaleOptimizer (a skipped update still advances the step, as on
TensorFlow), contrastive learning (`max_margin_eta`: OpenNMT-tf's max-margin loss of
each batch against its negatives, normalizer 1, so that the update is the mean of the group's
gradients; the encoder and the decoder's two passes run under a `keras.StatelessScope`, as
`stateless_call` runs `call`; one device), and the moving average (the trainer's, on the stored
variables); tests/test_jax_training_options.py compares each of them with TensorFlow's
`TrainStep`. Not here: sub-batches (train.sub_batches, a warning: XLA schedules one pass over
its threads).
"""

import jax
import jax.numpy as jnp
import keras
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec

from opennmt_lite.checkpointing.names import inner_optimizer
from opennmt_lite.training.losses import guided_alignment_scale, max_margin_loss, outlier_mask
from opennmt_lite.training.objective import (
    contrastive_sums, forward, outlier_keeps, reduce_loss)
from opennmt_lite.training.regularization import penalized_weights, weight_penalty


def _values(variables):
    return [v.value for v in variables]


def clip_global_norm(grads, clip_norm):
    """tf.clip_by_global_norm's rule: each gradient times clip_norm / max(norm, clip_norm), NaN
    when the global norm is not finite (so that loss scaling still skips the update)."""
    norm = jnp.sqrt(sum(jnp.sum(jnp.square(g)) for g in grads))
    scale = clip_norm * jnp.minimum(1.0 / norm, 1.0 / clip_norm)
    scale = jnp.where(jnp.isfinite(norm), scale, jnp.nan)
    return [g * scale for g in grads]


# The batch key that marks the rows of a stacked batch: 1 for examples, 0 for padding.
ROWS = "rows"


def stack_batches(batches):
    """One batch per device -> {name: [devices, batch, ...]} NumPy arrays, each batch padded to
    the largest size of every dimension, with `ROWS` [devices, batch] (1: an example, 0: a row
    of padding). A padding row holds one token of id 0 on each side (lengths 1, so that every
    softmax stays finite) and is weighed 0 wherever a batch is summed."""
    names = sorted(batches[0])
    shapes = {name: np.max([b[name].shape for b in batches], axis=0) for name in names}
    stacked = {}
    for name in names:
        padded = []
        for batch in batches:
            value = batch[name]
            widths = [(0, int(total) - size) for total, size in zip(shapes[name], value.shape)]
            fill = 1 if name.endswith("length") else 0
            padded.append(np.pad(value, widths, constant_values=fill))
        stacked[name] = np.stack(padded)
    size = int(shapes[names[0]][0])
    stacked[ROWS] = np.stack([(np.arange(size) < len(b[names[0]])).astype(np.float32)
                              for b in batches])
    return stacked


def paired_by_shape(groups):
    """The batches of an update's `groups` (one tuple per replica), dealt in groups of one per
    device: sorted by shape, so that a group's batches share or nearly share one. The update
    (a sum over all its batches) does not depend on which device takes which batch."""
    batches = [batch for group in groups for batch in group]
    order = sorted(range(len(batches)), key=lambda i: (
        [batches[i][name].shape[::-1] for name in sorted(batches[i])], i))
    devices = len(groups)
    return [[batches[i] for i in order[k:k + devices]] for k in range(0, len(order), devices)]


class JaxTrainStep:
    """`train_step(groups)` -> statistics of the update (loss, loss_sum, normalizer,
    source_tokens, target_tokens), as `TrainStep`. `groups` holds one group (a tuple of
    `accum_steps` NumPy batches) per device of `mesh` (None: one device)."""

    def __init__(self, model, optimizer, accum_steps, label_smoothing=0.0,
                 average_loss_in_time=True, guided_alignment=None, regularization=None,
                 clip_gradients=None, mask_outliers=False, max_margin_eta=None, mesh=None):
        """`max_margin_eta`: None, the cross-entropy; else contrastive learning's max-margin loss
        with this margin (the batches then hold the negatives, noisy_target_*; one device)."""
        self.model = model
        self.max_margin_eta = max_margin_eta
        self.optimizer = optimizer
        self.accum_steps = accum_steps
        self.label_smoothing = label_smoothing
        self.average_loss_in_time = average_loss_in_time
        self.guided_alignment = guided_alignment
        self.regularization = regularization
        self.clip_gradients = clip_gradients
        self.mask_outliers = mask_outliers
        self.trainable = list(model.trainable_variables)
        self.non_trainable = list(model.non_trainable_variables)
        self.optimizer_variables = list(optimizer.variables)
        penalized = {id(v) for v in penalized_weights(model)} if regularization else set()
        self.penalized = [i for i, v in enumerate(self.trainable) if id(v) in penalized]
        inner = inner_optimizer(optimizer)
        self.scaled = inner is not optimizer
        self.iterations_index = next(
            i for i, v in enumerate(self.optimizer_variables) if v is inner.iterations)
        self.scale_index = (next(i for i, v in enumerate(self.optimizer_variables)
                                 if v is optimizer.dynamic_scale) if self.scaled else None)
        self.mesh = mesh
        self.devices = 1 if mesh is None else mesh.size
        accumulate = self._accumulate_fn if mesh is None else self._sharded_accumulate_fn
        self._accumulate = jax.jit(accumulate, donate_argnums=(0,))
        self._apply = jax.jit(self._apply_fn, donate_argnums=(0, 1, 2))

    # -- the compiled functions --------------------------------------------------------------

    def _stateless(self, trainable, non_trainable, function):
        """-> (`function(model)`, the non-trainable values after it) with the given values in
        place of the model's variables: `stateless_call`'s mechanics for more than the model's
        `call` (the model type's loss, which reads a CRF's transitions outside it; contrastive
        learning's encoder and two decoder passes)."""
        mapping = (list(zip(self.trainable, trainable))
                   + list(zip(self.non_trainable, non_trainable)))
        with keras.StatelessScope(state_mapping=mapping) as scope:
            result = function(self.model)
        return result, [scope.get_current_value(v) for v in self.non_trainable]

    def _objective(self, trainable, non_trainable, loss_scale, batch):
        """-> (the loss differentiated (times `loss_scale`), (loss, normalizer, non_trainable)).
        A batch with `ROWS` (stacked for a device) counts its padding rows nowhere."""
        if self.max_margin_eta is not None:
            # contrastive learning: a scalar per batch, normalizer 1 (the update is the mean of
            # the group's gradients, as on TensorFlow); no outlier masking nor guided alignment
            sums, non_trainable = self._stateless(
                trainable, non_trainable, lambda model: contrastive_sums(model, batch, True))
            loss = max_margin_loss(*sums, eta=self.max_margin_eta)
            return self._penalized(loss, trainable, loss_scale, jnp.float32(1.0), non_trainable)
        rows = batch.get(ROWS)
        # (the model type's own loss, as TrainStep's `forward`: a tagger's CRF transitions, read
        # by the loss outside the model's call, included)
        outputs, non_trainable = self._stateless(
            trainable, non_trainable, lambda model: forward(model, batch, self.label_smoothing, True))
        if self.mask_outliers:
            keep = (outlier_keeps([outputs])[0] if rows is None else rows * outlier_mask(
                jnp.sum(outputs[0], -1), jnp.sum(outputs[1], -1), rows))
        else:
            keep = rows
        guided_scale = None
        if self.guided_alignment is not None:
            # (a padding row has one target token: no word)
            guided_scale = guided_alignment_scale(
                batch["target_length"] - 1, self.guided_alignment.source_time(batch),
                self.guided_alignment.type, self.guided_alignment.weight)
        loss, normalizer = reduce_loss(batch, outputs, self.average_loss_in_time,
                                       self.guided_alignment, guided_scale, keep)
        return self._penalized(loss, trainable, loss_scale, normalizer, non_trainable)

    def _penalized(self, loss, trainable, loss_scale, normalizer, non_trainable):
        """`_objective`'s result from a batch's loss, with the weight penalty added (whichever
        the loss)."""
        if self.regularization is not None:
            loss += weight_penalty([trainable[i] for i in self.penalized], self.regularization)
        return loss * loss_scale, (loss, normalizer, non_trainable)

    def _accumulate_fn(self, accumulators, trainable, non_trainable, loss_scale, batch):
        grad_fn = jax.value_and_grad(self._objective, has_aux=True)
        (_, (loss, normalizer, non_trainable)), grads = grad_fn(
            trainable, non_trainable, loss_scale, batch)
        accumulators = [a + g.astype(jnp.float32) for a, g in zip(accumulators, grads)]
        return accumulators, non_trainable, self._batch_stats(batch, loss, normalizer)

    @staticmethod
    def _batch_stats(batch, loss, normalizer):
        rows = batch.get(ROWS)
        counted = (lambda n: n) if rows is None else (lambda n: n * rows.astype(n.dtype))
        return {"loss_sum": loss, "normalizer": normalizer,
                "source_tokens": jnp.sum(counted(batch["source_length"])),
                "target_tokens": jnp.sum(counted(batch["target_length"]))}

    def _sharded_accumulate_fn(self, accumulators, trainable, non_trainable, loss_scale,
                               batches):
        """`_accumulate_fn` over the devices of the mesh: `batches` [devices, batch, ...] (one
        stacked group of `paired_by_shape`, split along the mesh's axis)."""
        axis = self.mesh.axis_names[0]

        def device_objective(trainable, non_trainable, loss_scale, batch):
            batch = {name: value[0] for name, value in batch.items()}
            objective, (loss, normalizer, non_trainable) = self._objective(
                trainable, non_trainable, loss_scale, batch)
            stats = self._batch_stats(batch, loss, normalizer)
            return objective[None], ({n: v[None] for n, v in stats.items()}, non_trainable)

        # (the weights and the random-seed state are the same on every device; a device's
        # objective and statistics are its own)
        sharded = jax.shard_map(
            device_objective, mesh=self.mesh,
            in_specs=(PartitionSpec(), PartitionSpec(), PartitionSpec(), PartitionSpec(axis)),
            out_specs=(PartitionSpec(axis), (PartitionSpec(axis), PartitionSpec())))

        def total(trainable, non_trainable, loss_scale, batches):
            objectives, aux = sharded(trainable, non_trainable, loss_scale, batches)
            return jnp.sum(objectives), aux

        (_, (stats, non_trainable)), grads = jax.value_and_grad(total, has_aux=True)(
            trainable, non_trainable, loss_scale, batches)
        accumulators = [a + g.astype(jnp.float32) for a, g in zip(accumulators, grads)]
        return accumulators, non_trainable, {n: jnp.sum(v) for n, v in stats.items()}

    def _apply_fn(self, accumulators, trainable, optimizer_variables, normalizer):
        grads = [a / normalizer for a in accumulators]
        if self.clip_gradients:
            loss_scale = (optimizer_variables[self.scale_index].astype(jnp.float32)
                          if self.scaled else 1.0)
            # (the gradients still carry the loss scale, which the LossScaleOptimizer removes:
            # the threshold carries it too)
            grads = clip_global_norm(grads, self.clip_gradients * loss_scale)
        iterations = optimizer_variables[self.iterations_index]
        trainable, optimizer_variables = self.optimizer.stateless_apply(
            optimizer_variables, grads, trainable)
        optimizer_variables = list(optimizer_variables)
        if self.scaled:
            # A skipped (non-finite) update still advances the step, as on TensorFlow (and in
            # OpenNMT-tf), so that the learning-rate schedule moves on.
            after = optimizer_variables[self.iterations_index]
            optimizer_variables[self.iterations_index] = jnp.where(
                after == iterations, after + 1, after)
        zeros = [jnp.zeros_like(a) for a in accumulators]
        return zeros, list(trainable), optimizer_variables

    # -- one update --------------------------------------------------------------------------

    def _loss_scale(self):
        if not self.scaled:
            return jnp.float32(1.0)
        return self.optimizer.dynamic_scale.value.astype(jnp.float32)

    def _device_batches(self, groups):
        """The batches of one update as the batch function takes them, on their devices."""
        if self.mesh is None:
            return [{name: jnp.asarray(value) for name, value in batch.items()}
                    for batch in groups[0]]
        sharding = NamedSharding(self.mesh, PartitionSpec(self.mesh.axis_names[0]))
        return [{name: jax.device_put(value, sharding)
                 for name, value in stack_batches(batches).items()}
                for batches in paired_by_shape(groups)]

    def __call__(self, groups):
        if len(groups) != self.devices:
            raise ValueError(f"the JAX train step drives {self.devices} device(s), got "
                             f"{len(groups)} groups")
        if not hasattr(self, "_accumulators"):
            self._accumulators = [jnp.zeros(v.shape, jnp.float32) for v in self.trainable]
        trainable = _values(self.trainable)
        non_trainable = _values(self.non_trainable)
        loss_scale = self._loss_scale()
        stats = None
        for batch in self._device_batches(groups):
            self._accumulators, non_trainable, batch_stats = self._accumulate(
                self._accumulators, trainable, non_trainable, loss_scale, batch)
            stats = batch_stats if stats is None else {
                name: stats[name] + value for name, value in batch_stats.items()}
        self._accumulators, trainable, optimizer_variables = self._apply(
            self._accumulators, trainable, _values(self.optimizer_variables),
            stats["normalizer"])
        self.store(trainable, non_trainable, optimizer_variables)
        stats["loss"] = stats["loss_sum"] / stats["normalizer"]
        return stats

    def store(self, trainable, non_trainable, optimizer_values):
        """Assigns an update's new values back to the Keras variables (references, no copy)."""
        for variables, values in ((self.trainable, trainable),
                                  (self.non_trainable, non_trainable),
                                  (self.optimizer_variables, optimizer_values)):
            for variable, value in zip(variables, values):
                variable.assign(value)

