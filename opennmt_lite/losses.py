"""Token-level cross-entropy with label smoothing, as OpenNMT-tf computes it."""

import tensorflow as tf


def _smoothed_cross_entropy(logits, labels, label_smoothing):
    """Per-token loss [batch, time] from float32 logits [batch, time, vocab].

    With eps = label_smoothing, the target distribution q puts 1 - eps on the label and
    eps / (vocab - 1) on every other class (OpenNMT-tf's smoothing), so with lse = logsumexp(logits)
      loss = -(1 - eps) * (gold - lse) - eps / (vocab - 1) * (sum(logits) - vocab * lse - (gold - lse))
    and its gradient is softmax(logits) - q. The custom gradient keeps only `lse` from the forward
    pass and builds softmax - q once in the backward pass, instead of storing log-softmax and
    one-hot tensors of the logits' size.
    """
    vocab = tf.cast(tf.shape(logits)[-1], tf.float32)
    on_value = 1.0 - label_smoothing
    off_value = label_smoothing / (vocab - 1.0)

    @tf.custom_gradient
    def loss_fn(logits):
        lse = tf.reduce_logsumexp(logits, axis=-1)
        gold = tf.gather(logits, labels, batch_dims=2) - lse
        loss = -(on_value - off_value) * gold
        if label_smoothing > 0:
            loss -= off_value * (tf.reduce_sum(logits, axis=-1) - vocab * lse)

        def grad(upstream):
            target = tf.one_hot(labels, tf.shape(logits)[-1], on_value=on_value, off_value=off_value)
            return upstream[..., tf.newaxis] * (tf.exp(logits - lse[..., tf.newaxis]) - target)

        return loss, grad

    return loss_fn(logits)


def cross_entropy_sequence_loss(logits, labels, sequence_length, label_smoothing=0.0, training=False):
    """Summed cross-entropy over the real target tokens, and their count.

    logits [batch, time, vocab] (any float dtype; computed in float32), labels [batch, time],
    sequence_length [batch] -> (loss_sum [], num_tokens []), both float32. Label smoothing applies
    in training only, as in OpenNMT-tf.
    """
    logits = tf.cast(logits, tf.float32)
    smoothing = label_smoothing if training else 0.0
    token_loss = _smoothed_cross_entropy(logits, labels, smoothing)
    weights = tf.sequence_mask(sequence_length, maxlen=tf.shape(labels)[1], dtype=tf.float32)
    return tf.reduce_sum(token_loss * weights), tf.reduce_sum(weights)
