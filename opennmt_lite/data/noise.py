"""Word-level noise over token sequences, with OpenNMT-tf 2.32's semantics (`opennmt/data/noise.py`).

Noise acts on words, not pieces: a sequence of tokens is first cut into words (`tokens_to_words`),
each word a list of its pieces, the noise modules drop, replace or move whole words, and the
pieces are joined back in order. Used by `params.decoding_noise` (the translations of `infer`,
for back-translation) and by `params.contrastive_learning` (WordOmission builds the negative
target of each training example).

Every draw comes from the NumPy `Generator` passed in, so a seeded run repeats exactly.
"""

import numpy as np

from opennmt_lite.data.vocab import UNK_TOKEN as UNKNOWN_TOKEN


def tokens_to_words(tokens, subword_token="￭", is_spacer=None):
    """[token] -> [[token]]: the words of a token sequence (OpenNMT-tf's `tokens_to_words`).

    Joiner mode (BPE, the OpenNMT Tokenizer's `￭`): a token continues the previous word when it
    starts with `subword_token` or the previous token ends with it. Spacer mode (SentencePiece's
    `▁`; `is_spacer` None means `subword_token == "▁"`): a token starts a word when it starts with
    `subword_token` or the previous token ends with it (after at least one other character).
    The first token always starts a word (OpenNMT-tf's joiner mode wraps around to the last
    token there, and then fails on a sequence ending with a joiner)."""
    if is_spacer is None:
        is_spacer = subword_token == "▁"
    words = []
    for i, token in enumerate(tokens):
        previous = tokens[i - 1] if i else None
        if is_spacer:
            starts = (i == 0 or token.startswith(subword_token)
                      or (len(previous) > len(subword_token) and previous.endswith(subword_token)))
        else:
            starts = i == 0 or not (token.startswith(subword_token) or previous.endswith(subword_token))
        if starts:
            words.append([token])
        else:
            words[-1].append(token)
    return words


class WordDropout:
    """Drops each word with probability `dropout`; keeps one word (drawn uniformly) when all
    would go."""

    def __init__(self, dropout):
        self.dropout = dropout

    def __call__(self, words, rng):
        if self.dropout == 0 or not words:
            return list(words)
        keep = np.flatnonzero(rng.random(len(words)) < 1 - self.dropout)
        if keep.size == 0:
            keep = [int(rng.integers(len(words)))]
        return [words[i] for i in keep]


class WordOmission:
    """Omits exactly `count` words drawn at random (at least one word is kept), the rest in order."""

    def __init__(self, count):
        self.count = count

    def __call__(self, words, rng):
        if self.count == 0 or not words:
            return list(words)
        keep = max(len(words) - self.count, 1)
        return [words[i] for i in sorted(rng.permutation(len(words))[:keep])]


class WordReplacement:
    """Replaces each word, with probability `probability`, by the single token `filler`."""

    def __init__(self, probability, filler=UNKNOWN_TOKEN):
        self.probability = probability
        self.filler = filler

    def __call__(self, words, rng):
        if self.probability == 0 or not words:
            return list(words)
        replace = rng.random(len(words)) < self.probability
        return [[self.filler] if replaced else word for word, replaced in zip(words, replace)]


class WordPermutation:
    """Shuffles words locally: word i is sorted by the key i + floor(U(0, 1) * (max_distance + 1)),
    so no word moves more than `max_distance` positions (Lample et al., 2018)."""

    def __init__(self, max_distance):
        self.max_distance = max_distance

    def __call__(self, words, rng):
        if self.max_distance == 0 or not words:
            return list(words)
        offsets = np.floor(rng.random(len(words)) * (self.max_distance + 1)).astype(np.int64)
        order = np.argsort(np.arange(len(words)) + offsets, kind="stable")
        return [words[i] for i in order]


# `params.decoding_noise`'s module names (checked in opennmt_lite.config) and their classes.
DECODING_NOISES = {"dropout": WordDropout, "replacement": WordReplacement,
                   "permutation": WordPermutation}


class WordNoiser:
    """Applies `noises` in order to the words of a token sequence: noiser(tokens, rng) -> tokens."""

    def __init__(self, noises, subword_token="￭", is_spacer=None):
        self.noises = list(noises)
        self.subword_token = subword_token
        self.is_spacer = is_spacer

    @classmethod
    def from_config(cls, modules, subword_token="￭", is_spacer=None):
        """The noiser of `params.decoding_noise` as opennmt_lite.config leaves it: a sequence of
        (name, arguments) pairs, e.g. (("dropout", (0.1,)), ("replacement", (0.1, "⦅unk⦆")))."""
        noises = []
        for name, arguments in modules:
            if name not in DECODING_NOISES:
                raise ValueError(f"unknown noise module {name!r} (one of {', '.join(DECODING_NOISES)})")
            noises.append(DECODING_NOISES[name](*arguments))
        return cls(noises, subword_token=subword_token, is_spacer=is_spacer)

    def __call__(self, tokens, rng):
        words = tokens_to_words(list(tokens), self.subword_token, self.is_spacer)
        for noise in self.noises:
            words = noise(words, rng)
        return [token for word in words for token in word]


class NoisyIds:
    """`noiser` over id sequences: ids -> tokens of `vocabulary` -> noise -> ids. An
    out-of-vocabulary piece takes part by its `<unk>` form (OpenNMT-tf's noise sees the piece
    itself, which differs only in where a word starts around it)."""

    def __init__(self, vocabulary, noiser):
        self.vocabulary = vocabulary
        self.noiser = noiser

    def __call__(self, ids, rng):
        return self.vocabulary.lookup(self.noiser(self.vocabulary.to_tokens(ids), rng))


def contrastive_negatives(vocabulary, subword_token="￭", is_spacer=None):
    """The negative targets of `params.contrastive_learning` (Yang et al., 2019, CL_one, as
    OpenNMT-tf builds them): each target with one word omitted."""
    return NoisyIds(vocabulary, WordNoiser([WordOmission(1)], subword_token, is_spacer))
