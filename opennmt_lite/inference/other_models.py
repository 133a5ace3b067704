"""Inference of the tagger, classifier and language model on lines of tokens, with OpenNMT-tf's
output formats: a line of tags per input, a label per input, a continuation per prefix
(`<unk>` for unknown tokens, the prefix included), `score ||| line` for a language model's
`score` (the score with `%f`, -sum log p over the line's tokens and `</s>`).

Batches of `batch_size` lines in file order; outputs in input order. On Keras' JAX backend a
tagger's and classifier's predictions are compiled by `jax.jit` (`label_function`), once per
padded batch shape.
"""

import numpy as np

from opennmt_lite.inference.portable_decoding import jit_with_weights, padded_size


def _batches(vocabulary, lines, batch_size, tokenize=str.split):
    for start in range(0, len(lines), batch_size):
        ids = [vocabulary.lookup(tokenize(line)) for line in lines[start:start + batch_size]]
        length = np.array([len(i) for i in ids], np.int32)
        padded = np.zeros((len(ids), max(1, int(length.max()))), np.int32)
        for row, values in zip(padded, ids):
            row[: len(values)] = values
        yield padded, length


def padded_batch(batch, rows_multiple=8, time_multiple=16, keep_time=()):
    """A batch of NumPy arrays ({name: [batch] or [batch, time]}) in one of few shapes for
    `jax.jit`: the rows padded to `padded_size` (at least `rows_multiple`) with copies of the
    first example (a real length: nothing empty is computed), each time axis but those of
    `keep_time` (names) with zeros to a multiple of `time_multiple` (past every length: masked).
    -> (padded batch, real rows); the outputs' first rows are the batch's."""
    rows = len(next(iter(batch.values())))
    total = padded_size(rows, minimum=rows_multiple)
    padded = {}
    for name, value in batch.items():
        value = np.asarray(value)
        value = np.concatenate([value, np.repeat(value[:1], total - rows, axis=0)])
        if value.ndim == 2 and name not in keep_time:
            time = -(-max(value.shape[1], 1) // time_multiple) * time_multiple
            value = np.pad(value, [(0, 0), (0, time - value.shape[1])])
        padded[name] = value
    return padded, rows


def predict(model, ids, length):
    """A tagger's tag ids [batch, time] or a classifier's label ids [batch] (inference mode)."""
    if hasattr(model, "predict_tags"):
        return model.predict_tags(ids, length)
    return model.predict_labels(ids, length)


def label_function(model):
    """`predict` as a function of NumPy ids [batch, time] and length [batch] -> NumPy: the
    model's eager call on TensorFlow; on JAX compiled by `jax.jit` on `padded_batch`'s shapes,
    the weights passed in (an eager JAX call would compile the CRF's scans at every batch)."""
    import keras

    if keras.backend.backend() != "jax":
        return lambda ids, length: np.asarray(predict(model, ids, length))
    compiled = jit_with_weights(model, lambda ids, length: predict(model, ids, length))

    def call(ids, length):
        batch, rows = padded_batch({"ids": ids, "length": length})
        result = compiled(batch["ids"], batch["length"])
        return np.asarray(result)[:rows]

    return call


def tag_lines(model, vocabulary, tags, lines, batch_size=32, tokenize=str.split):
    """A SequenceTagger's tags of each line: ["O S-CAP ...", ...] (`tokenize`: line -> tokens,
    the features' tokenizer)."""
    output = []
    tag = label_function(model)
    for ids, length in _batches(vocabulary, lines, batch_size, tokenize):
        predicted = tag(ids, length)
        output.extend(" ".join(tags[t] for t in row[:n]) for row, n in zip(predicted, length))
    return output


def classify_lines(model, vocabulary, labels, lines, batch_size=32, tokenize=str.split):
    """A SequenceClassifier's label of each line."""
    output = []
    classify = label_function(model)
    for ids, length in _batches(vocabulary, lines, batch_size, tokenize):
        output.extend(labels[i] for i in classify(ids, length))
    return output


def continue_lines(model, vocabulary, lines, maximum_length=250, batch_size=32):
    """A LanguageModel's greedy continuation of each prefix line (the prefix's tokens first)."""
    output = []
    for ids, length in _batches(vocabulary, lines, batch_size):
        generated = model.greedy_continue(ids, length, maximum_length=maximum_length)
        for row, n, continuation in zip(ids, length, generated):
            output.append(" ".join(vocabulary.to_tokens(row[:n]) +
                                   vocabulary.to_tokens(continuation)))
    return output


def score_lines(model, vocabulary, lines, batch_size=32):
    """A LanguageModel's `score` output: "%f ||| line" per line."""
    output = []
    for start, (ids, length) in zip(range(0, len(lines), batch_size),
                                    _batches(vocabulary, lines, batch_size)):
        scores = np.asarray(model.score(ids, length))
        output.extend("%f ||| %s" % (score, " ".join(line.split()))
                      for score, line in zip(scores, lines[start:start + batch_size]))
    return output


def label_lines(model, assets, lines, batch_size):
    """The output lines of a SequenceTagger (its tags) or SequenceClassifier (its label) on
    `lines`, the features tokenized by the assets' source tokenizer, as `onmt-main infer` writes
    them."""
    tokenize = lambda line: assets.source_tokenizer.tokenize_batch([line])[0]  # noqa: E731
    label = tag_lines if hasattr(model, "predict_tags") else classify_lines
    return label(model, assets.source_vocabulary, assets.target_vocabulary, lines, batch_size,
                 tokenize)
