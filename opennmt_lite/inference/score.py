"""Scoring existing translations (`run.py score`), as OpenNMT-tf 2.32's `score` run type.

For each pair (source line, target line) the model is run with teacher forcing on the target
tokens (the configured target tokenizer, `</s>` appended) and the line's score is its negative
log-likelihood: the sum over the target tokens and `</s>` of the cross-entropy of the logits
(no label smoothing), in float32. The output has one line per pair, in file order:
`NLL ||| tokens`, NLL with 6 decimals (`%f`), tokens the target tokens joined by spaces (not
detokenized), exactly OpenNMT-tf's format. Then, as OpenNMT-tf's `format_translation_output`:
- `score.with_token_level`: ` ||| ` and the cross-entropy of each target token (`%f`, `</s>`'s
  left out, though the NLL counts it);
- `score.with_alignments` (`hard` or `soft`): ` ||| ` and the decoder's alignment (first head of
  the last layer's source attention) of each target token, `</s>`'s row left out: row i is the
  attention that predicted token i; `hard`, `SOURCE-TARGET` pairs of the most attended source
  position; `soft`, each row's vector over the batch's padded source positions (`%.6f`, rows
  separated by ` ; `), so its width depends on the batch, as OpenNMT-tf's does.
Both keep as many rows as the target has pieces (OpenNMT-tf's length without special tokens):
with other `data.target_sequence_controls` these are the first rows the decoder computes
(without a target `</s>`, every row; without a `<s>`, the last is `</s>`'s).
"""

import numpy as np

from opennmt_lite import keras_backend
from opennmt_lite.data.corpus import num_controls
from opennmt_lite.inference.translate import format_alignment

# The keys of a scoring batch the model reads.
BATCH_KEYS = ("source_ids", "source_length", "target_ids_in", "target_ids_out", "target_length")


def score_function(model, details=False):
    """A compiled function: batch -> per-example negative log-likelihood [B] (float32); with
    `details`, (NLL [B], token cross-entropies [B, T], alignment [B, T, S]), float32; a
    tf.function on Keras' TensorFlow backend, `jax.jit` on JAX (`jax_score_function`)."""
    if keras_backend.selected() == "jax":
        return jax_score_function(model, details)
    import tensorflow as tf

    from opennmt_lite.data import batch_signature

    def nll(batch):
        logits, attention = model(batch, training=False)
        cross_entropy = tf.nn.sparse_softmax_cross_entropy_with_logits(
            tf.cast(batch["target_ids_out"], tf.int64), tf.cast(logits, tf.float32))
        mask = tf.sequence_mask(batch["target_length"], tf.shape(cross_entropy)[1], tf.float32)
        scores = tf.reduce_sum(cross_entropy * mask, axis=1)
        if not details:
            return scores
        if attention is None:  # (a language model: no source, an empty alignment)
            attention = tf.zeros([tf.shape(scores)[0], tf.shape(cross_entropy)[1], 0])
        return scores, cross_entropy, tf.cast(attention, tf.float32)

    return tf.function(nll, input_signature=[batch_signature()])


def jax_score_function(model, details=False):
    """`score_function` on Keras' JAX backend: the same sums in keras.ops under `jax.jit`, the
    model's weights passed in; each batch padded to `portable_decoding.padded_size` rows and
    lengths (padded rows and positions masked) so that few shapes compile, the results cut back
    to the batch's own shape. Returns NumPy arrays."""
    from keras import ops

    from opennmt_lite.inference.portable_decoding import jit_with_weights, padded_size

    def sums(batch):
        logits, attention = model(batch, training=False)
        log_probs = ops.log_softmax(ops.cast(logits, "float32"), axis=-1)
        targets = ops.expand_dims(ops.cast(batch["target_ids_out"], "int32"), -1)
        cross_entropy = -ops.squeeze(ops.take_along_axis(log_probs, targets, axis=-1), -1)
        positions = ops.arange(cross_entropy.shape[1], dtype="int32")
        mask = ops.cast(ops.expand_dims(positions, 0) < ops.expand_dims(batch["target_length"], 1),
                        "float32")
        if attention is None:  # (a language model: no source, an empty alignment)
            attention = ops.zeros(cross_entropy.shape + (0,))
        return ops.sum(cross_entropy * mask, axis=1), cross_entropy, ops.cast(attention, "float32")

    run = jit_with_weights(model, sums)

    def nll(batch):
        rows, source_time = np.shape(batch["source_ids"])
        target_time = np.shape(batch["target_ids_in"])[1]
        sizes = (padded_size(rows), padded_size(source_time, 8), padded_size(target_time, 8))
        padded = {}
        for name in BATCH_KEYS:
            value = np.asarray(batch[name], np.int32)
            if value.ndim == 1:  # lengths: 1 in padded rows (one masked position)
                padded[name] = np.ones([sizes[0]], np.int32)
                padded[name][:rows] = value
            else:
                width = sizes[1] if name == "source_ids" else sizes[2]
                padded[name] = np.zeros([sizes[0], width], np.int32)
                padded[name][:rows, :value.shape[1]] = value
        scores, cross_entropy, attention = (
            np.asarray(value) for value in run(padded))
        if not details:
            return scores[:rows]
        return (scores[:rows], cross_entropy[:rows, :target_time],
                attention[:rows, :target_time, :source_time])

    return nll


def score_pairs(model, evaluation_input, details=False):
    """Negative log-likelihood of every pair of a built `EvaluationInput`, in file order
    (a float64 array of the float32 sums). With `details`, (scores, token_scores, alignments):
    per pair its target tokens' cross-entropies [tokens] and alignment [tokens, batch source
    width], `</s>` left out."""
    compute = score_function(model, details)
    count = len(evaluation_input.corpus.line_index)
    scores = np.zeros(count, dtype=np.float64)
    token_scores, alignments = [None] * count, [None] * count
    for batch in evaluation_input.numpy_batches():
        values = compute({key: batch[key] for key in BATCH_KEYS})
        if not details:
            scores[batch["index"]] = np.asarray(values)
            continue
        values, cross_entropy, attention = (np.asarray(value) for value in values)
        scores[batch["index"]] = values
        # (OpenNMT-tf's length without the special tokens: the target's pieces, the rows kept)
        pieces = batch["target_length"] + 1 - num_controls(evaluation_input.corpus.target_controls)
        for row, index in enumerate(batch["index"]):
            tokens = int(pieces[row])
            token_scores[index] = cross_entropy[row, :tokens]
            alignments[index] = attention[row, :tokens]
    if not details:
        return scores
    return scores, token_scores, alignments


def format_lines(scores, target_tokens, token_scores=None, alignments=None, alignment_type=None):
    """OpenNMT-tf's score lines: `%f ||| tokens[ ||| token scores][ ||| alignment]`."""
    for i, (score, tokens) in enumerate(zip(scores, target_tokens)):
        line = "%f ||| %s" % (score, " ".join(tokens))
        if token_scores is not None:
            line += " ||| " + " ".join("%f" % value for value in token_scores[i])
        if alignment_type:
            line += " ||| " + format_alignment(alignments[i], alignment_type)
        yield line
