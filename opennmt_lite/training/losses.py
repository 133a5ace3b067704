"""Token-level cross-entropy with label smoothing, the masking of outlier examples
(`params.mask_loss_outliers`), the max-margin loss of contrastive learning and the guided-alignment
cost, as OpenNMT-tf computes them.

Written in `keras.ops`, so that the same functions compute the loss on Keras' TensorFlow and JAX
backends; only the label-smoothed cross-entropy has a TensorFlow form of its own (a custom
gradient that saves memory and time, `_smoothed_cross_entropy`), the portable formula beside it
(`_portable_smoothed_cross_entropy`) computing the same numbers within float rounding.
"""

from keras import ops

from opennmt_lite.layers.fast_paths import TENSORFLOW

if TENSORFLOW:
    import tensorflow as tf


def _smoothed_cross_entropy(logits, labels, label_smoothing):
    """Per-token loss [batch, time] (float32) from logits [batch, time, vocab] of any float dtype,
    computed in float32.

    With eps = label_smoothing, the target distribution q puts 1 - eps on the label and
    eps / (vocab - 1) on every other class (OpenNMT-tf's smoothing), and the loss is
    -sum(q * log_softmax(logits)). OpenNMT-tf computes it by the dense softmax cross-entropy
    kernel on a one-hot q; this computes the same sum without ever building q, to save memory and
    time. With off = eps / (vocab - 1) and lse the log-sum-exp of a token's logits x, the loss is
    (1 - eps - off) * (lse - x[label]) - off * (sum_v x_v - vocab * lse), and its gradient
    softmax - q = (p - off) - (1 - eps - off) * onehot. One softmax p [tokens, vocab] is kept for
    the backward pass; lse comes from it as max(x) - log(max(p)) (the largest probability is at
    least 1 / vocab, so its log is well conditioned), which saves the exponential of the backward
    pass and uses the softmax kernel, oneDNN's where TensorFlow runs it: forward and backward of a
    [1 650, 8 003] batch 46 -> 37 ms (bfloat16 logits; float32 51 -> 39) on one thread of an
    AVX-512 EPYC, against a log-softmax (docs/performance.md). The softmax runs after the
    reductions over the logits, so that the float32 logits are freed as it ends (otherwise the
    step's peak RSS grew by one such tensor, 55 MB on the training benchmark). At the end of the forward
    pass the logits and one tensor of their size are alive, not three (logits, q, softmax - q): on
    the training benchmark (2 048-token batches, 8 003 pieces: 65 MB per such tensor) the peak RSS
    is 55-65 MB lower than with the dense kernel. Same numbers within float rounding (the loss
    test compares with float64 and with the dense formula). Without smoothing, the sparse kernel
    alone. The gradient is formed in the logits' dtype before the label term is scattered in:
    with bfloat16 logits (mixed precision) the scatter, which copies its input, copies half the
    bytes.
    """
    if label_smoothing == 0:
        return tf.nn.sparse_softmax_cross_entropy_with_logits(
            labels=labels, logits=tf.cast(logits, tf.float32))
    depth = tf.shape(logits)[-1]
    vocab = tf.cast(depth, tf.float32)
    off_value = label_smoothing / (vocab - 1.0)
    on_weight = 1.0 - label_smoothing - off_value  # the label's weight beyond off_value
    flat_labels = tf.reshape(labels, [-1])

    @tf.custom_gradient
    def smoothed(logits):
        flat_logits = tf.cast(tf.reshape(logits, [-1, depth]), tf.float32)
        largest = tf.reduce_max(flat_logits, axis=-1)
        label_logit = tf.gather(flat_logits, flat_labels, batch_dims=1)
        logit_sum = tf.reduce_sum(flat_logits, axis=-1)
        with tf.control_dependencies([largest, label_logit, logit_sum]):
            probs = tf.nn.softmax(flat_logits)
        log_sum_exp = largest - tf.math.log(tf.reduce_max(probs, axis=-1))
        nll = log_sum_exp - label_logit
        loss = on_weight * nll - off_value * (logit_sum - vocab * log_sum_exp)

        def grad(upstream):
            upstream = tf.reshape(upstream, [-1, 1])
            d_logits = tf.cast((probs - off_value) * upstream, logits.dtype)
            rows = tf.range(tf.shape(flat_labels)[0], dtype=flat_labels.dtype)
            d_logits = tf.tensor_scatter_nd_add(
                d_logits, tf.stack([rows, flat_labels], axis=1),
                tf.cast(tf.reshape(upstream, [-1]) * -on_weight, logits.dtype))
            return tf.reshape(d_logits, tf.shape(logits))

        return tf.reshape(loss, tf.shape(labels)), grad

    return smoothed(logits)


def token_cross_entropy(logits, labels, sequence_length, label_smoothing=0.0, training=False):
    """Per-token loss of the real target tokens and their mask, both [batch, time] float32 (the
    loss 0 at padding), from logits [batch, time, vocab] (any float dtype; computed in float32),
    labels [batch, time], sequence_length [batch]. Label smoothing applies in training only, as in
    OpenNMT-tf."""
    smoothing = label_smoothing if training else 0.0
    if TENSORFLOW:
        token_loss = _smoothed_cross_entropy(logits, labels, smoothing)
    else:
        token_loss = _portable_smoothed_cross_entropy(logits, labels, smoothing)
    mask = sequence_mask(sequence_length, ops.shape(labels)[1])
    return token_loss * mask, mask


def sequence_mask(length, maxlen):
    """[batch, maxlen] float32: 1 at the first length[b] positions of row b, as
    tf.sequence_mask."""
    positions = ops.expand_dims(ops.arange(maxlen, dtype="int32"), 0)
    return ops.cast(positions < ops.expand_dims(ops.cast(length, "int32"), 1), "float32")


def _portable_smoothed_cross_entropy(logits, labels, label_smoothing):
    """`_smoothed_cross_entropy`'s loss [batch, time] float32 in `keras.ops`, differentiated by
    the backend: the same sum, (1 - eps - off) * (lse - x[label]) - off * (sum_v x_v - vocab *
    lse) with off = eps / (vocab - 1), lse the log-sum-exp of the float32 logits."""
    logits = ops.cast(logits, "float32")
    log_sum_exp = ops.logsumexp(logits, axis=-1)
    label_logit = ops.squeeze(
        ops.take_along_axis(logits, ops.expand_dims(ops.cast(labels, "int32"), -1), axis=-1), -1)
    nll = log_sum_exp - label_logit
    if label_smoothing == 0:
        return nll
    vocab = float(ops.shape(logits)[-1])
    off_value = label_smoothing / (vocab - 1.0)
    on_weight = 1.0 - label_smoothing - off_value
    return on_weight * nll - off_value * (ops.sum(logits, axis=-1) - vocab * log_sum_exp)


def cross_entropy_sequence_loss(logits, labels, sequence_length, label_smoothing=0.0, training=False,
                                example_weight=None):
    """Summed cross-entropy over the real target tokens, and their count.

    logits [batch, time, vocab] (any float dtype; computed in float32), labels [batch, time],
    sequence_length [batch] -> (loss_sum [], num_tokens []), both float32. Label smoothing applies
    in training only, as in OpenNMT-tf. `example_weight` [batch] (`data.example_weights`) scales
    each example's token losses and token count, as OpenNMT-tf's `sequence_weight` does.
    """
    token_loss, mask = token_cross_entropy(logits, labels, sequence_length, label_smoothing, training)
    return weighted_sums(token_loss, mask, example_weight)


def weighted_sums(token_loss, mask, example_weight=None):
    """(summed loss [], token count []) of `token_cross_entropy`'s [batch, time] outputs, each
    example's tokens scaled by `example_weight` [batch] if given."""
    if example_weight is not None:
        weight = ops.expand_dims(ops.cast(example_weight, "float32"), 1)
        token_loss, mask = token_loss * weight, mask * weight
    return ops.sum(token_loss), ops.sum(mask)


def nearest_percentiles(values, percents, count=None):
    """The `percents` percentiles of values [n] with the nearest-rank rule of
    tfp.stats.percentile's default interpolation ("nearest"): the sorted value at index
    round((n - 1) * p / 100), rounding half to even as tf.round does. -> [len(percents)].
    `count` (optional, [] int32): the percentiles of the `count` smallest values only."""
    ranked = ops.sort(values)
    if count is None:
        count = ops.shape(values)[0]
    # (float32 where float64 may be missing (JAX): exact for the ranks of any batch)
    wide = "float64" if TENSORFLOW else "float32"
    last = ops.cast(count - 1, wide)
    indices = ops.round(last * ops.convert_to_tensor(percents, wide) / 100.0)
    indices = ops.clip(ops.cast(indices, "int32"), 0, count - 1)
    return ops.take(ranked, indices)


def outlier_mask(example_loss, example_tokens, rows=None):
    """`params.mask_loss_outliers`, as OpenNMT-tf's training loss detects outliers: 0 for the
    examples whose mean token loss exceeds Q3 + 1.5 * (Q3 - Q1) of the batch's mean token
    losses (Q1, Q3: their 25th and 75th `nearest_percentiles`), 1 for the others.

    example_loss [batch] (summed token losses, label-smoothed as trained, not weighted),
    example_tokens [batch] -> [batch] float32. `rows` [batch] (optional): 1 for the batch's
    examples, 0 for rows of padding (a batch padded to a common shape across devices), which
    the quartiles leave out.
    """
    score = example_loss / example_tokens
    count = None
    if rows is not None:
        # (padding rows sort last, and the percentile ranks count the examples only)
        score = ops.where(rows > 0, score, float("inf"))
        count = ops.cast(ops.sum(rows), "int32")
    quartiles = nearest_percentiles(score, [25.0, 75.0], count)
    first, third = quartiles[0], quartiles[1]
    threshold = third + 1.5 * (third - first)
    return ops.where(score > threshold, 0.0, 1.0)  # (a NaN score is kept, as in OpenNMT-tf)


def max_margin_loss(true_sum, true_tokens, negative_sum, negative_tokens, eta=0.1):
    """OpenNMT-tf's `max_margin_loss` (Yang et al., 2019) of one batch, from the summed
    cross-entropies (no label smoothing) and token counts of the true targets and of their
    negatives (all [] float32): max(true_sum / true_tokens - negative_sum / negative_tokens + eta,
    0), a scalar for the whole batch (the token-averaged NLLs of the batch, not per example)."""
    return ops.maximum(true_sum / true_tokens - negative_sum / negative_tokens + eta, 0.0)


GUIDED_ALIGNMENT_TYPES = ("ce", "mse")
# Keras' clipping of probabilities in its categorical cross-entropy (OpenNMT-tf calls it).
_EPSILON = 1e-7


def guided_alignment_sum(attention, gold, word_length, cost_type):
    """The guided-alignment cost of a batch before OpenNMT-tf's division (see
    `guided_alignment_scale`), summed over its examples' target words.

    attention [batch, time, src_time] (any float dtype; computed in float32): row t is the step
    predicting target word t (the attention of the row with `</s>` as input is never
    constrained); gold [batch, time, src_time] float32; word_length [batch]: target words
    (without `</s>`), the rows counted. "ce": Keras' categorical cross-entropy on probabilities
    (each row divided by its sum, clipped to [1e-7, 1 - 1e-7]), -sum(gold * log(attention)) per
    row; "mse": the squared differences summed per row (Keras' mean over src_time is the
    division by the batch's source length in `guided_alignment_scale`). -> [] float32.
    """
    probs = ops.cast(attention, "float32")
    if cost_type == "ce":
        probs = probs / ops.sum(probs, axis=-1, keepdims=True)
        probs = ops.clip(probs, _EPSILON, 1.0 - _EPSILON)
        per_word = -ops.sum(gold * ops.log(probs), axis=-1)
    elif cost_type == "mse":
        per_word = ops.sum(ops.square(probs - gold), axis=-1)
    else:
        raise ValueError(f"guided alignment type must be one of {GUIDED_ALIGNMENT_TYPES}, got {cost_type!r}")
    mask = sequence_mask(word_length, ops.shape(probs)[1])
    return ops.sum(per_word * mask)


def guided_alignment_scale(word_length, source_length, cost_type, weight):
    """What a batch's `guided_alignment_sum` is multiplied by before it is added to the batch's
    summed cross-entropy, as OpenNMT-tf's `guided_alignment_cost` does: `weight` / the batch's
    target words (and, for "mse", / its padded source length, the longest source of the batch,
    over which Keras takes its mean). The sum then goes through the training loss's own
    normalisation (by tokens or examples of the whole update), as in OpenNMT-tf. An update is
    made of whole batches, so a batch cut into sub-batches is scaled by its own totals.

    word_length [batch] (target words, without `</s>`), source_length [batch] (or [], the padded
    source length) -> [] float32.
    """
    scale = ops.divide_no_nan(
        ops.cast(weight, "float32"), ops.cast(ops.sum(word_length), "float32"))
    if cost_type == "mse":
        scale = ops.divide_no_nan(scale, ops.cast(ops.max(source_length), "float32"))
    return scale


def encoder_model_losses(model, batch, label_smoothing=0.0, training=False):
    """(losses, mask, None) of a SequenceTagger's or SequenceClassifier's batch, in the form of
    `token_cross_entropy`'s outputs (the training step and evaluation sum them as a
    Transformer's): the batch holds the token ids as its source and the tags (one per token) or
    the label as `target_ids_out` / `target_length` (data/labels.py).

    As OpenNMT-tf 2.32's models compute it: a tagger without CRF, the cross-entropy of each tag
    (label smoothing in training); with CRF, minus each sequence's CRF log-likelihood, one value
    per example ([batch, 1], mask ones: normalized by the number of examples); a classifier, the
    cross-entropy of each label ([batch, 1])."""
    from opennmt_lite.layers import crf

    logits = model(batch["source_ids"], batch["source_length"], training=training)
    if getattr(model, "crf_decoding", False):
        log_likelihood = crf.crf_log_likelihood(
            ops.cast(logits, "float32"), batch["target_ids_out"], batch["source_length"],
            model.transition_params)
        return -log_likelihood[:, None], ops.ones_like(log_likelihood)[:, None], None
    if len(logits.shape) == 2:  # (a classifier: one label per example)
        logits = logits[:, None, :]
    token_loss, mask = token_cross_entropy(logits, batch["target_ids_out"], batch["target_length"],
                                           label_smoothing, training)
    return token_loss, mask, None
