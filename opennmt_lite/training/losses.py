"""Token-level cross-entropy with label smoothing, as OpenNMT-tf computes it."""

import tensorflow as tf


def _smoothed_cross_entropy(logits, labels, label_smoothing):
    """Per-token loss [batch, time] from float32 logits [batch, time, vocab].

    With eps = label_smoothing, the target distribution q puts 1 - eps on the label and
    eps / (vocab - 1) on every other class (OpenNMT-tf's smoothing). TensorFlow's fused sparse
    softmax cross-entropy kernel gives, in one pass over the logits, ce = lse - gold (lse the
    log-sum-exp, gold the label's logit) and backprop = softmax(logits) - onehot(label). Then
      loss = (1 - eps - off) * ce - off * (sum(logits) - vocab * lse),   off = eps / (vocab - 1)
      d loss / d logits = softmax - q = (backprop - off) + (eps + off) * onehot(label).
    Only `backprop` is kept for the backward pass (the logits can be freed once the forward pass
    has read them), and the gradient is built in place from it: one tensor of the logits' size
    instead of the log-softmax, one-hot and product tensors that automatic differentiation of the
    dense formula keeps. This is what bounds the memory of the output layer in training.
    """
    depth = tf.shape(logits)[-1]
    vocab = tf.cast(depth, tf.float32)
    off_value = label_smoothing / (vocab - 1.0)
    flat_logits = tf.reshape(logits, [-1, depth])
    flat_labels = tf.reshape(labels, [-1])

    @tf.custom_gradient
    def loss_fn(flat_logits):
        ce, backprop = tf.raw_ops.SparseSoftmaxCrossEntropyWithLogits(
            features=flat_logits, labels=flat_labels)
        loss = ce
        if label_smoothing > 0:
            lse = ce + tf.gather(flat_logits, flat_labels, batch_dims=1)
            loss = (1.0 - label_smoothing - off_value) * ce - off_value * (
                tf.reduce_sum(flat_logits, axis=-1) - vocab * lse)

        def grad(upstream):
            gradient = backprop
            if label_smoothing > 0:
                rows = tf.range(tf.shape(flat_labels)[0], dtype=flat_labels.dtype)
                gold = tf.stack([rows, flat_labels], axis=1)
                gradient = tf.tensor_scatter_nd_add(
                    gradient - off_value, gold,
                    tf.fill(tf.shape(flat_labels), label_smoothing + off_value))
            return gradient * upstream[:, tf.newaxis]

        return loss, grad

    return tf.reshape(loss_fn(flat_logits), tf.shape(labels))


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
