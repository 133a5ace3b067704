"""A tagger's evaluation metrics as OpenNMT-tf 2.32 computes them: token accuracy over the real
positions and, with `tagging_scheme: bioes`, chunk precision, recall and F1.

OpenNMT-tf counts chunks in two passes over each sentence (its `flag_bioes_tags`): walking the
gold tags, a chunk opened by a `B` tag runs to the next `E` tag and is right only if every tag
of it, the `E` included, is predicted the same; any other tag is a one-token chunk. A right chunk
that is not `O` is a true positive, a wrong one a false negative. Walking the predicted tags the
same way against the gold ones, a wrong chunk that is not `O` is a false positive. Precision,
recall and F1 follow from these counts (Keras' Precision and Recall metrics on the flags).
"""


def _chunk_end_and_match(reference, hypothesis, index):
    """(index of the chunk's last tag, whether hypothesis equals reference over the chunk)."""
    length = len(reference)
    if not reference[index].startswith("B"):
        return index, reference[index] == hypothesis[index]
    match = True
    while index < length and not reference[index].startswith("E"):
        match = match and reference[index] == hypothesis[index]
        index += 1
    # A `B` chunk that the sentence ends before closing is wrong.
    return index, match and index < length and reference[index] == hypothesis[index]


def bioes_counts(gold, predicted):
    """(true positives, false positives, false negatives) of one sentence: gold and predicted
    are lists of tags of the same length."""
    true_positives = false_positives = false_negatives = 0
    index = 0
    while index < len(gold):
        tag = gold[index]
        index, match = _chunk_end_and_match(gold, predicted, index)
        if match and tag != "O":
            true_positives += 1
        elif not match and tag != "O":
            false_negatives += 1
        index += 1
    index = 0
    while index < len(predicted):
        tag = predicted[index]
        index, match = _chunk_end_and_match(predicted, gold, index)
        if not match and tag != "O":
            false_positives += 1
        index += 1
    return true_positives, false_positives, false_negatives


def tagging_metrics(gold, predicted, tagging_scheme=None):
    """{"accuracy"[, "precision", "recall", "f1"]} of sentences of tags (lists of lists, each
    predicted sentence as long as its gold one). F1 is NaN when precision and recall are 0
    (0 / 0, as OpenNMT-tf's)."""
    right = sum(g == p for gold_tags, tags in zip(gold, predicted)
                for g, p in zip(gold_tags, tags))
    total = sum(len(tags) for tags in gold)
    metrics = {"accuracy": right / total if total else 0.0}
    if tagging_scheme == "bioes":
        counts = [bioes_counts(g, p) for g, p in zip(gold, predicted)]
        tp, fp, fn = (sum(c[i] for c in counts) for i in range(3))
        precision = tp / (tp + fp) if tp + fp else 0.0
        recall = tp / (tp + fn) if tp + fn else 0.0
        f1 = (2 * precision * recall / (precision + recall) if precision + recall
              else float("nan"))
        metrics.update(precision=precision, recall=recall, f1=f1)
    return metrics
