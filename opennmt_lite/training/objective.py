"""The training objective of one batch in `keras.ops`, shared by the TensorFlow train step
(training/step.py) and the JAX one (training/jax_step.py): the loss each model type trains with
(`forward`: a Transformer's or language model's token cross-entropy, a sequence tagger's or
classifier's `encoder_model_losses`, the CRF's included), then the batch's summed loss and its
normalizer (example weights, guided alignment, the masking of outliers), and contrastive
learning's sums (`contrastive_sums`). The gradient mechanics of each backend live in those two
modules; the arithmetic of the loss is written once, here.
"""

import dataclasses

from keras import ops

from opennmt_lite.models.encoder_models import is_encoder_model
from opennmt_lite.training.losses import (
    cross_entropy_sequence_loss, encoder_model_losses, guided_alignment_sum, outlier_mask,
    token_cross_entropy, weighted_sums)


@dataclasses.dataclass(frozen=True)
class GuidedAlignment:
    """`params.guided_alignment_type` ("ce" or "mse") and `params.guided_alignment_weight`: the
    batches then hold "alignment", their gold matrices (see data/alignments.py).
    `bucket_width`: train.length_bucket_width when train.pad_to_bucket_boundary is set (else
    None); OpenNMT-tf's "mse" then averages over the source padded to the bucket boundary."""

    type: str
    weight: float = 1.0
    bucket_width: int = None

    def source_time(self, batch):
        """What "mse" averages a batch's rows over: its longest source, or with `bucket_width`
        the length both sides of the batch are padded to (batching.padded_lengths' rule;
        pad_to_multiple, which OpenNMT-tf lacks, left out)."""
        if not self.bucket_width:
            return batch["source_length"]
        longest = ops.maximum(ops.max(batch["source_length"]), ops.max(batch["target_length"]))
        return -(-longest // self.bucket_width) * self.bucket_width


def forward(model, batch, label_smoothing, training):
    """-> (token losses [batch, time], token mask [batch, time], attention) of one batch
    (`token_outputs`; attention: the first head of the last layer's, None for a language model).
    A sequence tagger or classifier: `encoder_model_losses` (no attention)."""
    if is_encoder_model(model):
        return encoder_model_losses(model, batch, label_smoothing, training)
    logits, attention = model(batch, training=training)
    return token_outputs(batch, logits, attention, label_smoothing, training)


def token_outputs(batch, logits, attention, label_smoothing, training):
    """-> (token losses [batch, time], token mask [batch, time], attention) of one batch from the
    model's outputs (`token_cross_entropy`; attention: the first head of the last layer's)."""
    token_loss, mask = token_cross_entropy(logits, batch["target_ids_out"], batch["target_length"],
                                           label_smoothing, training)
    return token_loss, mask, attention


def reduce_loss(batch, outputs, average_loss_in_time, guided_alignment=None, guided_scale=None,
                keep=None):
    """-> (summed loss, normalizer) of one batch from `token_outputs`. With example weights
    (`example_weight` [B]), OpenNMT-tf's: each example's token losses are scaled by its weight,
    and the normalizer is the weighted token count (`average_loss_in_time`) or the sum of the
    weights. With `guided_alignment`, the summed loss includes the guided-alignment cost times
    `guided_scale` (`guided_alignment_scale` of the whole batch this one may be a slice of; not
    weighted). `keep` [batch]: 0 for the examples masked as outliers
    (`params.mask_loss_outliers`), which then count in neither sum nor normalizer."""
    token_loss, mask, attention = outputs
    weight = batch.get("example_weight")
    if keep is not None:
        weight = keep if weight is None else ops.cast(weight, "float32") * keep
    loss, tokens = weighted_sums(token_loss, mask, weight)
    if guided_alignment is not None:
        loss += guided_scale * guided_alignment_sum(
            attention, batch["alignment"], batch["target_length"] - 1, guided_alignment.type)
    if average_loss_in_time:
        normalizer = tokens
    elif weight is not None:
        normalizer = ops.sum(ops.cast(weight, "float32"))
    else:
        normalizer = ops.cast(ops.shape(batch["target_length"])[0], "float32")
    return loss, normalizer


def outlier_keeps(outputs):
    """`params.mask_loss_outliers`: the `outlier_mask` of a whole batch from the `token_outputs`
    of its slices (its statistics are the batch's, however it is cut), split back into one
    [slice] mask per slice."""
    token_losses, masks = [o[0] for o in outputs], [o[1] for o in outputs]
    keep = outlier_mask(ops.concatenate([ops.sum(t, axis=-1) for t in token_losses], 0),
                        ops.concatenate([ops.sum(m, axis=-1) for m in masks], 0))
    if len(masks) == 1:
        return [keep]
    # (the slices' sizes may be dynamic under tf.function: cumulative split points)
    sizes = [ops.shape(m)[0] for m in masks]
    bounds, start = [], 0
    for size in sizes:
        bounds.append((start, start + size))
        start = start + size
    return [keep[begin:end] for begin, end in bounds]


def contrastive_sums(model, batch, training):
    """-> (true NLL sum, true tokens, negative NLL sum, negative tokens) of one batch (all []
    float32, no label smoothing), what `max_margin_loss` takes: one encoder pass, the decoder run
    on the targets and on their negatives (noisy_target_*)."""
    memory = model.encode(batch["source_ids"], batch["source_length"], training=training)
    sums = []
    for prefix in ("", "noisy_"):
        logits, _ = model.decode(batch[prefix + "target_ids_in"], batch[prefix + "target_length"],
                                 memory, batch["source_length"], training=training)
        sums.extend(cross_entropy_sequence_loss(
            logits, batch[prefix + "target_ids_out"], batch[prefix + "target_length"]))
    return tuple(sums)
