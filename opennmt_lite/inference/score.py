"""Scoring existing translations (`run.py score`), as OpenNMT-tf 2.32's `score` run type.

For each pair (source line, target line) the model is run with teacher forcing on the target
tokens (the configured target tokenizer, `</s>` appended) and the line's score is its negative
log-likelihood: the sum over the target tokens and `</s>` of the cross-entropy of the logits
(no label smoothing), in float32. The output has one line per pair, in file order:
`NLL ||| tokens`, NLL with 6 decimals (`%f`), tokens the target tokens joined by spaces (not
detokenized), exactly OpenNMT-tf's format.
"""

import numpy as np
import tensorflow as tf

from opennmt_lite.data import batch_signature


def score_function(model):
    """A traced function: batch -> per-example negative log-likelihood [B] (float32)."""

    def nll(batch):
        logits, _ = model(batch, training=False)
        cross_entropy = tf.nn.sparse_softmax_cross_entropy_with_logits(
            tf.cast(batch["target_ids_out"], tf.int64), tf.cast(logits, tf.float32))
        mask = tf.sequence_mask(batch["target_length"], tf.shape(cross_entropy)[1], tf.float32)
        return tf.reduce_sum(cross_entropy * mask, axis=1)

    return tf.function(nll, input_signature=[batch_signature()])


def score_pairs(model, evaluation_input):
    """Negative log-likelihood of every pair of a built `EvaluationInput`, in file order
    (a float64 array of the float32 sums)."""
    compute = score_function(model)
    scores = np.zeros(len(evaluation_input.corpus.line_index), dtype=np.float64)
    for batch in evaluation_input.numpy_batches():
        values = compute({key: batch[key] for key in batch_signature()}).numpy()
        scores[batch["index"]] = values
    return scores


def format_lines(scores, target_tokens):
    """OpenNMT-tf's score lines: `%f ||| tokens`."""
    for score, tokens in zip(scores, target_tokens):
        yield "%f ||| %s" % (score, " ".join(tokens))
