"""Inference of the tagger, classifier and language model on lines of tokens, with OpenNMT-tf's
output formats: a line of tags per input, a label per input, a continuation per prefix
(`<unk>` for unknown tokens, the prefix included), `score ||| line` for a language model's
`score` (the score with `%f`, -sum log p over the line's tokens and `</s>`).

Batches of `batch_size` lines in file order; outputs in input order.
"""

import numpy as np


def _batches(vocabulary, lines, batch_size, tokenize=str.split):
    for start in range(0, len(lines), batch_size):
        ids = [vocabulary.lookup(tokenize(line)) for line in lines[start:start + batch_size]]
        length = np.array([len(i) for i in ids], np.int32)
        padded = np.zeros((len(ids), max(1, int(length.max()))), np.int32)
        for row, values in zip(padded, ids):
            row[: len(values)] = values
        yield padded, length


def tag_lines(model, vocabulary, tags, lines, batch_size=32, tokenize=str.split):
    """A SequenceTagger's tags of each line: ["O S-CAP ...", ...] (`tokenize`: line -> tokens,
    the features' tokenizer)."""
    output = []
    for ids, length in _batches(vocabulary, lines, batch_size, tokenize):
        predicted = np.asarray(model.predict_tags(ids, length))
        output.extend(" ".join(tags[t] for t in row[:n]) for row, n in zip(predicted, length))
    return output


def classify_lines(model, vocabulary, labels, lines, batch_size=32, tokenize=str.split):
    """A SequenceClassifier's label of each line."""
    output = []
    for ids, length in _batches(vocabulary, lines, batch_size, tokenize):
        output.extend(labels[i] for i in np.asarray(model.predict_labels(ids, length)))
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
