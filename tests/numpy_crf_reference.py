"""An independent NumPy (float64) linear-chain CRF, by enumeration of every tag sequence.

It shares no code with opennmt_lite/layers/crf.py: the score of a sequence is written from its
definition (sum of the potentials of its tags plus transitions[i, j] of each consecutive pair),
the normaliser is the log-sum-exp over all num_tags ** length sequences, and the Viterbi path
is the arg-max over them, ties to the lexicographically first (lowest ids). Only for small
lengths and tag counts.
"""

import itertools

import numpy as np


def sequence_score(potentials, tags, transitions):
    """Score of one sequence: potentials [length, num_tags], tags [length]."""
    score = sum(potentials[t, tag] for t, tag in enumerate(tags))
    score += sum(transitions[a, b] for a, b in zip(tags[:-1], tags[1:]))
    return float(score)


def all_scores(potentials, transitions):
    """(every tag sequence [count, length] in lexicographic order, their scores [count]) of
    potentials [length, num_tags]: the same sum as `sequence_score`, for all rows at once."""
    length, num_tags = potentials.shape
    tags = np.array(list(itertools.product(range(num_tags), repeat=length)), np.int64)
    scores = potentials[np.arange(length)[None, :], tags].sum(axis=1)
    scores += transitions[tags[:, :-1], tags[:, 1:]].sum(axis=1)
    return tags, scores


def log_likelihood(potentials, tags, length, transitions):
    """log p(tags[:length] | potentials[:length]); 0 for length 0."""
    if length == 0:
        return 0.0
    potentials = np.asarray(potentials, np.float64)[:length]
    transitions = np.asarray(transitions, np.float64)
    _, scores = all_scores(potentials, transitions)
    top = scores.max()
    log_norm = top + np.log(np.exp(scores - top).sum())
    return sequence_score(potentials, list(tags[:length]), transitions) - log_norm


def viterbi(potentials, length, transitions):
    """(best tag tuple, its score) of potentials[:length] (length >= 1)."""
    potentials = np.asarray(potentials, np.float64)[:length]
    tags, scores = all_scores(potentials, np.asarray(transitions, np.float64))
    best = int(np.argmax(scores))  # the first of equal maxima: the lowest ids
    return tuple(tags[best].tolist()), float(scores[best])
