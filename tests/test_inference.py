"""Greedy and beam search on hand-built models whose best translations are known.

`StubModel` has the Transformer's decoding interface. Its next-token distribution is a Python
function of the sentence and of the prefix generated so far. It reads that prefix from the
self-attention cache (`self_kv`), so a wrong cache reordering shows up as wrong tokens. Token
ids: 0 padding, 1 `<s>`, 2 `</s>`, 3 "a", 4 "b", 5 "c". Tokens that a distribution leaves out
get the logit -50, which is negligible next to the tolerances used.

Every expected token list and score below was derived by hand (see the comments). The same
values came out of OpenNMT-tf 2.32's own `opennmt.utils.decoding.dynamic_decode`, run on the
same distributions, including the cases marked "quirk".
"""

import math

import keras
import numpy as np
import pytest
import tensorflow as tf

from opennmt_lite.hyperparameters import ModelHyperparameters
from opennmt_lite.inference.decoding import (
    DecodingOptions, DecodingResult, dynamic_decode, translate, translation_function)
from opennmt_lite.models import Transformer

PAD, BOS, EOS, A, B, C = 0, 1, 2, 3, 4, 5
VOCAB = 6
SOURCE_TIME = 6


def greedy_search(model, source_ids, source_length, return_attention=False, **options):
    """`translate` with beam_width 1 (greedy search)."""
    return translate(model, source_ids, source_length, DecodingOptions(beam_width=1, **options),
                     return_attention)


def beam_search(model, source_ids, source_length, beam_width=4, return_attention=False, **options):
    """`translate` with a beam (4 by default)."""
    return translate(model, source_ids, source_length,
                     DecodingOptions(beam_width=beam_width, **options), return_attention)


def rules(table, default=None):
    """A next-token distribution given as {prefix tuple: {token: probability}}.

    Prefixes not in the table end the sentence ({</s>: 1} unless another default is given).
    """
    default = {EOS: 1.0} if default is None else default
    return lambda prefix: table.get(tuple(prefix), default)


class StubModel:
    """`encode`, `target_inputter`, `decoder.initial_state` and `decoder.step` over
    `distributions[i]`, the next-token distribution of the sentence whose first source id is i."""

    def __init__(self, distributions, logits_dtype=tf.float32):
        self.distributions = distributions
        self.logits_dtype = logits_dtype
        self.decoder = self

    def encode(self, source_ids, source_length, training=None):
        # Memory [batch, SOURCE_TIME, 1]; every position holds the sentence number.
        first = tf.pad(source_ids, [[0, 0], [0, 1]])[:, :1]
        return tf.tile(tf.cast(first, tf.float32)[:, :, tf.newaxis], [1, SOURCE_TIME, 1])

    def target_inputter(self, ids):
        return ids

    def initial_state(self, memory, memory_length):
        empty = tf.zeros([tf.shape(memory)[0], 1, 0, 1])
        return {
            "memory": memory,
            "memory_mask": tf.sequence_mask(memory_length, SOURCE_TIME, tf.float32),
            "layers": [{"self_kv": (empty, empty), "memory_kv": (memory, memory)}],
        }

    def step(self, inputs, step, state, training=None):
        # The cache holds every input so far: <s>, then the generated tokens.
        keys, _ = state["layers"][0]["self_kv"]
        keys = tf.concat([keys, tf.cast(inputs, tf.float32)[:, tf.newaxis, tf.newaxis, tf.newaxis]], 2)
        sentences = state["memory"][:, 0, 0]
        logits = tf.py_function(self._logits, [sentences, keys[:, 0, :, 0]], tf.float32)
        logits = tf.cast(tf.ensure_shape(logits, [None, VOCAB]), self.logits_dtype)
        layers = [dict(state["layers"][0], self_kv=(keys, keys))]
        # Attention: a one-hot on the previous token's id, to follow the history's reordering.
        attention = tf.one_hot(inputs, SOURCE_TIME)
        return logits, dict(state, layers=layers), attention

    def _logits(self, sentences, histories):
        rows = np.full([len(sentences), VOCAB], -50.0, np.float32)
        for row, sentence, history in zip(rows, sentences.numpy(), histories.numpy()):
            prefix = tuple(int(token) for token in history[1:])
            for token, probability in self.distributions[int(sentence)](prefix).items():
                row[token] = math.log(probability)
        return rows


def sources(*sentences):
    """Source ids [batch, 1] naming the distribution of each sentence, and lengths [batch]."""
    return np.array(sentences, np.int32)[:, np.newaxis], np.ones(len(sentences), np.int32)


def check(result, ids, log_probs):
    """ids: per sentence, a list of n_best token lists; log_probs: the expected scores."""
    n_best = len(ids[0])
    time = max((len(tokens) for hyps in ids for tokens in hyps), default=0)
    expected_ids = np.zeros([len(ids), n_best, time], np.int32)
    for b, hyps in enumerate(ids):
        for n, tokens in enumerate(hyps):
            expected_ids[b, n, : len(tokens)] = tokens
    np.testing.assert_array_equal(result.ids.numpy(), expected_ids)
    assert result.ids.dtype == tf.int32
    lengths = [[len(tokens) for tokens in hyps] for hyps in ids]
    np.testing.assert_array_equal(result.lengths.numpy(), lengths)
    assert result.log_probs.dtype == tf.float32
    np.testing.assert_allclose(result.log_probs.numpy(), log_probs, rtol=0, atol=2e-6)


log = math.log

# () -> a .6, b .4 ; "a" -> </s> .4 ; "b" -> </s> .9
GREEDY_MISSES = rules({(): {A: 0.6, B: 0.4}, (A,): {A: 0.3, B: 0.3, EOS: 0.4}, (B,): {EOS: 0.9, A: 0.1}})


def test_beam_search_finds_the_sequence_greedy_misses():
    model = StubModel([GREEDY_MISSES])
    # Greedy: "a" (.6) then </s> (.4): 0.24. Beam 2 keeps "b" (.4), whose </s> (.9) gives 0.36.
    check(greedy_search(model, *sources(0)), [[[A]]], [[log(0.24)]])
    check(beam_search(model, *sources(0), beam_width=2, n_best=2), [[[B], [A]]], [[log(0.36), log(0.24)]])
    check(beam_search(model, *sources(0), beam_width=2), [[[B]]], [[log(0.36)]])


NBEST = rules({
    (): {A: 0.5, B: 0.3, C: 0.2},
    (A,): {EOS: 0.6, B: 0.4},
    (B,): {EOS: 0.9, A: 0.1},
    (C,): {EOS: 0.95, A: 0.05},
    (A, B): {EOS: 0.6, C: 0.4},
})


def test_n_best_list_is_sorted_and_finished_hypotheses_keep_their_score():
    model = StubModel([NBEST])
    # Step 1 keeps "a </s>" .30, "b </s>" .27 and "a b" .20 ("c </s>" .19 drops out). The two
    # finished ones stay in their slots with their scores while "a b" takes one more step:
    # "a b </s>" .12.
    result = beam_search(model, *sources(0), beam_width=3, n_best=3)
    check(result, [[[A], [B], [A, B]]], [[log(0.30), log(0.27), log(0.12)]])
    assert np.all(np.diff(result.log_probs.numpy(), axis=1) <= 0)
    check(beam_search(model, *sources(0), beam_width=3, n_best=2), [[[A], [B]]], [[log(0.30), log(0.27)]])


LENGTH = rules({
    (): {A: 0.55, B: 0.45},
    (A,): {EOS: 0.8, A: 0.1, B: 0.1},  # "a </s>": 0.44
    (B,): {B: 0.95, EOS: 0.05},
    (B, B): {B: 0.95, EOS: 0.05},
    (B, B, B): {EOS: 0.92, B: 0.08},  # "b b b </s>": 0.45 * .95 * .95 * .92 = 0.3736
})


def length_penalty(length, alpha):
    return ((5.0 + length) / 6.0) ** alpha


@pytest.mark.parametrize("alpha", [0.0, 1.0, 2.0])
def test_length_penalty_uses_opennmt_lengths(alpha):
    """Short "a </s>" (0.44) against long "b b b </s>" (0.3736): log ratio 1.199.

    At the step where the long one ends, OpenNMT-tf divides by ((5 + n + 1) / 6) ** alpha with n
    the length before the step: 4 for the long one (3 tokens + the new `</s>`), and 3 for the
    short one (finished earlier with n = 2, `</s>` included). So the long one wins iff
    1.199 < (9/8) ** alpha: not for alpha = 1 (the plain GNMT (5 + |Y|) / 6 would say 9/7 and
    pick the long one), yes for alpha = 2.
    """
    short, long = log(0.55 * 0.8), log(0.45 * 0.95 * 0.95 * 0.92)
    short_wins = short / length_penalty(3, alpha) > long / length_penalty(4, alpha)
    assert short_wins == (alpha < 2)
    result = beam_search(StubModel([LENGTH]), *sources(0), beam_width=2, n_best=2, length_penalty=alpha)
    if short_wins:
        check(result, [[[A], [B, B, B]]], [[short, long]])
    else:
        # quirk: the finished "a" moves from slot 0 to slot 1 and takes slot 1's previous score,
        # that of "b b b" (0.45 * .95 * .95), not its own.
        check(result, [[[B, B, B], [A]]], [[long, log(0.45 * 0.95 * 0.95)]])


def test_greedy_ignores_the_length_penalty():
    model = StubModel([LENGTH])
    greedy = greedy_search(model, *sources(0))
    check(greedy, [[[A]]], [[log(0.44)]])
    check(translate(model, *sources(0), DecodingOptions(beam_width=1, length_penalty=2.0)),
          [[[A]]], [[log(0.44)]])


QUIRK = rules({(): {A: 0.5, EOS: 0.4, B: 0.1}, (A,): {A: 0.5, B: 0.3, EOS: 0.2}, (A, A): {EOS: 0.9, A: 0.1}})


def test_beam_slot_score_quirk():
    """Step 0 keeps ["a" .5, "</s>" .4]. At step 1, the finished "</s>" (.4) beats "a a" (.25)
    and moves from slot 1 to slot 0, where it takes slot 0's previous score (.5) instead of its
    own. This is OpenNMT-tf 2.32's where(finished, previous scores by slot, new scores)."""
    result = beam_search(StubModel([QUIRK]), *sources(0), beam_width=2, n_best=2)
    check(result, [[[], [A, A]]], [[log(0.5), log(0.5 * 0.5 * 0.9)]])


FREEZE_0 = rules({(): {EOS: 0.5, A: 0.4, B: 0.1}, (A,): {EOS: 0.95, A: 0.03, B: 0.02}})
FREEZE_1 = rules({(): {C: 0.9, B: 0.1}, (C,): {C: 0.9, B: 0.1}, (C, C): {C: 0.9, B: 0.1}})


def test_sentence_finished_before_the_rest_of_the_batch_keeps_its_output():
    """Sentence 0 finishes at step 1 with ["</s>" .5 (length 1), "a </s>" .38 (length 2)].
    With alpha = 3 the next step ranks them in the other order ((7/6)^3 against (8/6)^3), and
    OpenNMT-tf does re-sort them while sentence 1 is still decoding. It still outputs the
    step-1 order, because gather_tree stops at the longest hypothesis and the scores stay
    per slot. Alone or in a batch, sentence 0 gives the same result."""
    model = StubModel([FREEZE_0, FREEZE_1])
    expected_0 = [[], [A]], [log(0.5), log(0.38)]
    alone = beam_search(model, *sources(0), beam_width=2, n_best=2, length_penalty=3.0)
    check(alone, [expected_0[0]], [expected_0[1]])
    batch = beam_search(model, *sources(0, 1), beam_width=2, n_best=2, length_penalty=3.0)
    # Sentence 1: "c c c" (.729, ended by the default </s>) and "b" (.1).
    check(batch, [expected_0[0], [[C, C, C], [B]]], [expected_0[1], [log(0.729), log(0.1)]])


def never_ends(prefix):
    # No </s> at all (logit -50): a .8 / b .2 first, then a .7 / b .3 after "a", a .6 / b .4 after "b".
    if not prefix:
        return {A: 0.8, B: 0.2}
    return {A: 0.7, B: 0.3} if prefix[-1] == A else {A: 0.6, B: 0.4}


def test_maximum_decoding_length_truncates_without_end_token():
    model = StubModel([never_ends, GREEDY_MISSES])
    check(
        greedy_search(model, *sources(0), maximum_decoding_length=4),
        [[[A, A, A, A]]],
        [[log(0.8 * 0.7**3)]],
    )
    # Step 2 keeps "a a a" .392 and "a a b" .168 (over "a b a" .144): 3 tokens each, no </s>.
    check(
        beam_search(model, *sources(0), beam_width=2, n_best=2, maximum_decoding_length=3),
        [[[A, A, A], [A, A, B]]],
        [[log(0.392), log(0.168)]],
    )
    # In a batch, a finished sentence is 0-padded next to a truncated one.
    check(
        greedy_search(model, *sources(1, 0), maximum_decoding_length=3),
        [[[A]], [[A, A, A]]],
        [[log(0.24)], [log(0.392)]],
    )
    # A hypothesis that ends at the last allowed step keeps its </s>: 1 token + </s> = 2 steps.
    check(greedy_search(model, *sources(1), maximum_decoding_length=2), [[[A]]], [[log(0.24)]])
    check(greedy_search(model, *sources(1), maximum_decoding_length=1), [[[A]]], [[log(0.6)]])
    empty = greedy_search(model, *sources(1), maximum_decoding_length=0)
    check(empty, [[[]]], [[0.0]])


MIN_LENGTH = rules({(): {EOS: 0.5, A: 0.3, B: 0.2}, (A,): {EOS: 0.6, A: 0.4}, (A, A): {EOS: 0.9, A: 0.1}})


def test_minimum_decoding_length_suppresses_end_token():
    """Before step m, -1e7 is added to the </s> logit; the others are renormalised without it."""
    model = StubModel([MIN_LENGTH])
    check(greedy_search(model, *sources(0)), [[[]]], [[log(0.5)]])
    # Step 0 without </s>: a .3 / .5 = .6; then </s> .6.
    check(greedy_search(model, *sources(0), minimum_decoding_length=1), [[[A]]], [[log(0.6 * 0.6)]])
    # Steps 0 and 1 without </s>: a .6, then a .4 / .4 = 1; then </s> .9.
    check(greedy_search(model, *sources(0), minimum_decoding_length=2), [[[A, A]]], [[log(0.6 * 0.9)]])
    # Beam 2: step 0 keeps "a" .6 and "b" .4; "b </s>" (.4) beats "a </s>" (.36).
    check(
        beam_search(model, *sources(0), beam_width=2, n_best=2, minimum_decoding_length=1),
        [[[B], [A]]],
        [[log(0.4), log(0.36)]],
    )


def test_attention_history_follows_the_hypotheses():
    # The stub's attention at each step is one-hot on the input token: <s>, then the tokens.
    model = StubModel([NBEST])
    result = beam_search(model, *sources(0), beam_width=3, n_best=3, return_attention=True)
    expected = np.zeros([1, 3, 2, SOURCE_TIME], np.float32)
    for n, tokens in enumerate([[A], [B], [A, B]]):
        for t, previous in enumerate([BOS] + tokens[:-1]):
            expected[0, n, t, previous] = 1.0
    np.testing.assert_array_equal(result.attention.numpy(), expected)
    assert greedy_search(model, *sources(0)).attention is None


def test_empty_batch():
    model = StubModel([NBEST])
    for ids in (np.zeros([0, 0], np.int32), np.zeros([0, 4], np.int32)):
        result = beam_search(model, ids, np.zeros([0], np.int32), beam_width=3, n_best=2,
                             return_attention=True)
        assert result.ids.shape == (0, 2, 0)
        assert result.lengths.shape == (0, 2)
        assert result.log_probs.shape == (0, 2)
        assert result.attention.shape == (0, 2, 0, SOURCE_TIME)
        assert greedy_search(model, ids, np.zeros([0], np.int32)).ids.shape == (0, 1, 0)


def test_zero_length_source_with_stub():
    model = StubModel([GREEDY_MISSES])
    # The stub reads the sentence number from the padded first id (0) even with length 0.
    check(greedy_search(model, np.zeros([1, 0], np.int32), np.zeros([1], np.int32)), [[[A]]], [[log(0.24)]])


def test_half_precision_logits_are_scored_in_float32():
    for dtype in (tf.float16, tf.bfloat16):
        model = StubModel([GREEDY_MISSES], logits_dtype=dtype)
        result = beam_search(model, *sources(0), beam_width=2, n_best=2)
        assert result.log_probs.dtype == tf.float32
        np.testing.assert_array_equal(result.ids.numpy(), [[[B], [A]]])
        # Only the logits are rounded: within half-precision rounding of log(.4), log(.9) ...
        np.testing.assert_allclose(result.log_probs.numpy(), [[log(0.36), log(0.24)]], atol=1e-2)


def test_dynamic_decode_in_tf_function_matches_eager():
    model = StubModel([NBEST, QUIRK, LENGTH])

    @tf.function(input_signature=[tf.TensorSpec([None, None], tf.int32), tf.TensorSpec([None], tf.int32)])
    def decode(ids, lengths):
        return beam_search(model, ids, lengths, beam_width=3, n_best=3, length_penalty=0.5)

    ids, lengths = sources(0, 1, 2)
    traced, eager = decode(ids, lengths), beam_search(model, ids, lengths, beam_width=3, n_best=3, length_penalty=0.5)
    assert isinstance(traced, DecodingResult)
    for a, b in zip(traced[:3], eager[:3]):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_invalid_options():
    model = StubModel([NBEST])
    with pytest.raises(ValueError, match="n_best"):
        beam_search(model, *sources(0), beam_width=2, n_best=3)
    with pytest.raises(ValueError, match="beam_width"):
        translate(model, *sources(0), DecodingOptions(beam_width=0))
    with pytest.raises(ValueError, match="maximum_decoding_length"):
        greedy_search(model, *sources(0), maximum_decoding_length=-1)
    with pytest.raises(ValueError, match="minimum_decoding_length"):
        greedy_search(model, *sources(0), minimum_decoding_length=1.5)
    with pytest.raises(ValueError, match="n_best"):
        dynamic_decode(lambda *args: None, {"layers": []}, 1, DecodingOptions(beam_width=1, n_best=2))


# A small random Transformer: the real decoder under the edge cases.


def small_transformer():
    model = Transformer(ModelHyperparameters(num_layers=1, num_units=8, num_heads=2, ffn_inner_dim=16,
                                             maximum_relative_position=4), 12, 12)
    model.build()
    return model


def test_transformer_empty_batch_and_zero_length_source():
    model = small_transformer()
    decode = translation_function(
        model, DecodingOptions(beam_width=3, n_best=2, maximum_decoding_length=6),
        return_attention=True)
    empty = decode(tf.zeros([0, 0], tf.int32), tf.zeros([0], tf.int32))
    assert empty.ids.shape == (0, 2, 0) and empty.log_probs.shape == (0, 2)
    empty = beam_search(model, np.zeros([0, 5], np.int32), np.zeros([0], np.int32), beam_width=3)
    assert empty.ids.shape == (0, 1, 0) and empty.lengths.shape == (0, 1)

    # A zero-length source next to real ones: its memory attention is uniform over padding.
    ids = np.array([[5, 6, 7, 8], [0, 0, 0, 0], [9, 3, 0, 0]], np.int32)
    lengths = np.array([4, 0, 2], np.int32)
    batch = decode(ids, lengths)
    assert np.isfinite(batch.log_probs.numpy()).all()
    assert np.isfinite(batch.attention.numpy()).all()
    attention = batch.attention.numpy()[1]
    inside = np.arange(attention.shape[1])[None, :] < batch.lengths.numpy()[1][:, None]
    np.testing.assert_allclose(attention[inside], 0.25, atol=1e-6)
    # A source of shape [1, 0] (no position at all): attention over nothing gives zeros.
    alone = decode(tf.zeros([1, 0], tf.int32), tf.zeros([1], tf.int32))
    assert np.isfinite(alone.log_probs.numpy()).all()
    np.testing.assert_array_equal(alone.attention.numpy(), 0.0)
    # Each real sentence decodes the same alone as in the padded batch.
    for b in (0, 2):
        single = decode(ids[b : b + 1, : lengths[b]], lengths[b : b + 1])
        np.testing.assert_array_equal(single.lengths.numpy()[0], batch.lengths.numpy()[b])
        np.testing.assert_allclose(single.log_probs.numpy()[0], batch.log_probs.numpy()[b], atol=1e-5)


def test_transformer_under_mixed_precision():
    keras.config.set_dtype_policy("mixed_float16")
    model = small_transformer()
    ids = np.array([[5, 6, 7, 8], [9, 3, 0, 0]], np.int32)
    result = beam_search(model, ids, np.array([4, 2], np.int32), beam_width=2, n_best=2,
                         maximum_decoding_length=5)
    assert result.log_probs.dtype == tf.float32
    assert np.isfinite(result.log_probs.numpy()).all()
    assert result.ids.dtype == tf.int32


# Random sampling (params.sampling_topk / sampling_temperature), seeded.

SAMPLED = rules({(): {A: 0.5, B: 0.3, C: 0.15, EOS: 0.05}}, default={EOS: 1.0})


def test_sampling_draws_from_the_tempered_top_k_distribution():
    """20 000 first tokens drawn with top-3 at temperature 0.7 follow softmax(log p / 0.7) over
    the 3 best (chi-square, 2 degrees of freedom: below 9.21, the 1 % critical value), and the
    4th token never appears."""
    rows = 20000
    model = StubModel([SAMPLED])
    ids = np.zeros([rows, 1], np.int32)
    result = translate(model, ids, np.ones(rows, np.int32), DecodingOptions(
        sampling_topk=3, sampling_temperature=0.7, maximum_decoding_length=1, seed=7))
    first = result.ids.numpy()[:, 0, 0]
    assert not np.any(first == EOS) and set(np.unique(first)) <= {A, B, C}
    tempered = np.array([0.5, 0.3, 0.15]) ** (1 / 0.7)
    expected = rows * tempered / tempered.sum()
    observed = np.array([np.sum(first == token) for token in (A, B, C)])
    chi_square = float(np.sum((observed - expected) ** 2 / expected))
    assert chi_square < 9.21, (observed, expected)
    # The scores are the untempered log-probabilities of the tokens drawn.
    np.testing.assert_allclose(result.log_probs.numpy()[:, 0],
                               np.log(np.array([0.5, 0.3, 0.15])[first - A]), atol=1e-5)


def test_sampling_is_seeded_and_varies_between_calls():
    model = small_transformer()
    ids = np.tile(np.array([[5, 6, 7, 8]], np.int32), [64, 1])
    lengths = np.full([64], 4, np.int32)
    options = DecodingOptions(sampling_topk=0, maximum_decoding_length=6, seed=3)
    first = translate(model, ids, lengths, options).ids.numpy()
    np.testing.assert_array_equal(translate(model, ids, lengths, options).ids.numpy(), first)
    other_seed = translate(model, ids, lengths, DecodingOptions(
        sampling_topk=0, maximum_decoding_length=6, seed=4)).ids.numpy()
    assert not np.array_equal(other_seed, first)
    assert len({tuple(row) for row in first[:, 0]}) > 1  # rows draw independently
    # A translation function draws anew at each call, and repeats its sequence of calls.
    runs = []
    for _ in range(2):
        decode = translation_function(model, options)
        runs.append([decode(ids, lengths).ids.numpy() for _ in range(2)])
    assert not np.array_equal(runs[0][0], runs[0][1])
    for a, b in zip(*runs):
        np.testing.assert_array_equal(a, b)


def test_sampling_topk_1_is_greedy_and_beams_sample_too():
    model = small_transformer()
    ids = np.array([[5, 6, 7, 8], [9, 3, 0, 0]], np.int32)
    lengths = np.array([4, 2], np.int32)
    greedy = translate(model, ids, lengths, DecodingOptions(maximum_decoding_length=6))
    top1 = translate(model, ids, lengths, DecodingOptions(
        sampling_topk=1, sampling_temperature=0.3, maximum_decoding_length=6, seed=1))
    for a, b in zip(greedy[:3], top1[:3]):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    sampled = translate(model, ids, lengths, DecodingOptions(
        beam_width=3, n_best=3, sampling_topk=5, maximum_decoding_length=6, seed=1))
    assert sampled.ids.shape[:2] == (2, 3) and np.isfinite(sampled.log_probs.numpy()).all()


def test_invalid_sampling_options():
    with pytest.raises(ValueError, match="sampling_topk"):
        DecodingOptions(sampling_topk=-1)
    with pytest.raises(ValueError, match="sampling_temperature"):
        DecodingOptions(sampling_topk=0, sampling_temperature=0.0)
