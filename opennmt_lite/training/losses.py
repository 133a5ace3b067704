"""Token-level cross-entropy with label smoothing, and the max-margin loss of contrastive
learning, as OpenNMT-tf computes them."""

import tensorflow as tf


def _smoothed_cross_entropy(logits, labels, label_smoothing):
    """Per-token loss [batch, time] from float32 logits [batch, time, vocab].

    With eps = label_smoothing, the target distribution q puts 1 - eps on the label and
    eps / (vocab - 1) on every other class (OpenNMT-tf's smoothing), and the loss is
    -sum(q * log_softmax(logits)), computed by TensorFlow's fused softmax cross-entropy kernel
    exactly as OpenNMT-tf does: q written once by `one_hot`, then one pass over the logits that
    gives the loss and `softmax - q`. That difference is the only tensor of the logits' size kept
    for the backward pass (the logits and q are freed after the forward pass), and the gradient
    is one product with the incoming per-token gradient. (The sparse kernel followed by a
    hand-written smoothing correction, used before, needed four more passes over a [tokens,
    vocab] tensor, which cost time where TensorFlow does not fuse them, as on AVX2 CPUs without
    oneDNN.) Without smoothing, the sparse kernel: no q at all.
    """
    if label_smoothing == 0:
        return tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)
    vocab = tf.cast(tf.shape(logits)[-1], tf.float32)
    target = tf.one_hot(labels, tf.shape(logits)[-1], on_value=1.0 - label_smoothing,
                        off_value=label_smoothing / (vocab - 1.0), dtype=tf.float32)
    return tf.nn.softmax_cross_entropy_with_logits(labels=target, logits=logits)


def cross_entropy_sequence_loss(logits, labels, sequence_length, label_smoothing=0.0, training=False,
                                example_weight=None):
    """Summed cross-entropy over the real target tokens, and their count.

    logits [batch, time, vocab] (any float dtype; computed in float32), labels [batch, time],
    sequence_length [batch] -> (loss_sum [], num_tokens []), both float32. Label smoothing applies
    in training only, as in OpenNMT-tf. `example_weight` [batch] (`data.example_weights`) scales
    each example's token losses and token count, as OpenNMT-tf's `sequence_weight` does.
    """
    logits = tf.cast(logits, tf.float32)
    smoothing = label_smoothing if training else 0.0
    token_loss = _smoothed_cross_entropy(logits, labels, smoothing)
    weights = tf.sequence_mask(sequence_length, maxlen=tf.shape(labels)[1], dtype=tf.float32)
    if example_weight is not None:
        weights *= tf.expand_dims(tf.cast(example_weight, tf.float32), 1)
    return tf.reduce_sum(token_loss * weights), tf.reduce_sum(weights)


def max_margin_loss(true_sum, true_tokens, negative_sum, negative_tokens, eta=0.1):
    """OpenNMT-tf's `max_margin_loss` (Yang et al., 2019) of one batch, from the summed
    cross-entropies (no label smoothing) and token counts of the true targets and of their
    negatives (all [] float32): max(true_sum / true_tokens - negative_sum / negative_tokens + eta,
    0), a scalar for the whole batch (the token-averaged NLLs of the batch, not per example)."""
    return tf.maximum(true_sum / true_tokens - negative_sum / negative_tokens + eta, 0.0)
