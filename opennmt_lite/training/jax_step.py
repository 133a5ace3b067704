"""One optimizer update over a group of accumulated batches, on Keras' JAX backend.

The same semantics as training/step.py's `TrainStep` (OpenNMT-tf's accumulation: the gradients of
the summed token losses of every batch of the group are added up, divided once by the group's
total normalizer, and applied in one optimizer update, which advances the learning-rate schedule
once), with the loss arithmetic shared through training/objective.py. The mechanics are JAX's,
functional: the model and its loss run in a `keras.StatelessScope` (`objective.stateless_forward`,
as `model.stateless_call`; its non-trainable state, the dropout seeds, returned updated),
`jax.value_and_grad` differentiates the batch's summed loss with respect to the trainable
values, and `optimizer.stateless_apply` makes the update. Two compiled
functions, as on TensorFlow: one per batch (forward, backward, gradients added to float32
accumulators, donated so that they are updated in place), one per group (normalise, clip, apply).

`jax.jit` compiles the batch function once per batch shape: the batches should take few shapes
(the `batching.ShapePlan` of `train.xla_shapes`, which `build.training_inputs` uses on JAX).

After each update the new values are assigned back to the Keras variables (a reference, no copy),
so that the rest of the trainer (checkpoints, evaluation, the moving average, the reports) reads
the model and the optimizer as on TensorFlow.

Supported: every model type (a Transformer, a language model, a sequence tagger, its CRF
included, and a classifier, each with TrainStep's loss), label smoothing, `average_loss_in_time`,
example weights, guided alignment, the masking of outliers, regularization, gradient clipping,
the schedules, Adam/AdamW/SGD, bfloat16 mixed precision, float16 with Keras' dynamic
LossScaleOptimizer (a skipped update still advances the step, as on TensorFlow). Not here
(refused by the builder on JAX): contrastive learning, sub-batches (train.sub_batches: XLA
schedules one pass over its threads), several devices.
"""

import jax
import jax.numpy as jnp

from opennmt_lite.checkpointing.names import inner_optimizer
from opennmt_lite.training.losses import guided_alignment_scale
from opennmt_lite.training.objective import outlier_keeps, reduce_loss, stateless_forward
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


class JaxTrainStep:
    """`train_step(groups)` -> statistics of the update (loss, loss_sum, normalizer,
    source_tokens, target_tokens), as `TrainStep`. `groups` holds one group (a tuple of
    `accum_steps` NumPy batches); one replica."""

    def __init__(self, model, optimizer, accum_steps, label_smoothing=0.0,
                 average_loss_in_time=True, guided_alignment=None, regularization=None,
                 clip_gradients=None, mask_outliers=False):
        self.model = model
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
        self._accumulate = jax.jit(self._accumulate_fn, donate_argnums=(0,))
        self._apply = jax.jit(self._apply_fn, donate_argnums=(0, 1, 2))

    # -- the compiled functions --------------------------------------------------------------

    def _objective(self, trainable, non_trainable, loss_scale, batch):
        """-> (the loss differentiated (times `loss_scale`), (loss, normalizer, non_trainable))."""
        # (the model type's own loss, as TrainStep's `forward`: a tagger's CRF included)
        outputs, values = stateless_forward(
            self.model, self.trainable + self.non_trainable, list(trainable) + list(non_trainable),
            batch, self.label_smoothing)
        non_trainable = values[len(self.trainable):]
        keep = outlier_keeps([outputs])[0] if self.mask_outliers else None
        guided_scale = None
        if self.guided_alignment is not None:
            guided_scale = guided_alignment_scale(
                batch["target_length"] - 1, self.guided_alignment.source_time(batch),
                self.guided_alignment.type, self.guided_alignment.weight)
        loss, normalizer = reduce_loss(batch, outputs, self.average_loss_in_time,
                                       self.guided_alignment, guided_scale, keep)
        if self.regularization is not None:
            loss += weight_penalty([trainable[i] for i in self.penalized], self.regularization)
        return loss * loss_scale, (loss, normalizer, non_trainable)

    def _accumulate_fn(self, accumulators, trainable, non_trainable, loss_scale, batch):
        grad_fn = jax.value_and_grad(self._objective, has_aux=True)
        (_, (loss, normalizer, non_trainable)), grads = grad_fn(
            trainable, non_trainable, loss_scale, batch)
        accumulators = [a + g.astype(jnp.float32) for a, g in zip(accumulators, grads)]
        stats = {"loss_sum": loss, "normalizer": normalizer,
                 "source_tokens": jnp.sum(batch["source_length"]),
                 "target_tokens": jnp.sum(batch["target_length"])}
        return accumulators, non_trainable, stats

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

    def __call__(self, groups):
        if len(groups) != 1:
            raise ValueError(f"the JAX train step drives one replica, got {len(groups)} groups")
        group = groups[0]
        if not hasattr(self, "_accumulators"):
            self._accumulators = [jnp.zeros(v.shape, jnp.float32) for v in self.trainable]
        trainable = _values(self.trainable)
        non_trainable = _values(self.non_trainable)
        loss_scale = self._loss_scale()
        stats = None
        for batch in group:
            batch = {name: jnp.asarray(value) for name, value in batch.items()}
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

