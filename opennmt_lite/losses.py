"""Token-level cross-entropy with label smoothing, as OpenNMT-tf computes it."""

import tensorflow as tf


def cross_entropy_sequence_loss(logits, labels, sequence_length, label_smoothing=0.0, training=False):
    """Summed cross-entropy over the real target tokens, and their count.

    logits [batch, time, vocab] (any float dtype; computed in float32), labels [batch, time],
    sequence_length [batch] -> (loss_sum [], num_tokens []), both float32.

    With label smoothing eps (training only), the target distribution puts 1 - eps on the label
    and eps / (vocab - 1) on every other class, so
      loss = -(1 - eps) * log p[label] - eps / (vocab - 1) * (sum_k log p[k] - log p[label]),
    computed from log-softmax without materialising the [batch, time, vocab] one-hot tensor.
    """
    logits = tf.cast(logits, tf.float32)
    vocab = tf.cast(tf.shape(logits)[-1], tf.float32)
    log_probs = tf.nn.log_softmax(logits)
    gold = tf.gather(log_probs, labels, batch_dims=2)
    if training and label_smoothing > 0:
        on_value = 1.0 - label_smoothing
        off_value = label_smoothing / (vocab - 1.0)
        total = tf.reduce_sum(log_probs, axis=-1)
        token_loss = -(on_value * gold + off_value * (total - gold))
    else:
        token_loss = -gold
    weights = tf.sequence_mask(sequence_length, maxlen=tf.shape(labels)[1], dtype=tf.float32)
    return tf.reduce_sum(token_loss * weights), tf.reduce_sum(weights)
