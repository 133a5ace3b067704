"""A language model's continuations of prefixes (`run.py infer` / `onmt-main infer` of a
LanguageModel): greedy search, random sampling and beam search, with the decoder's key/value
cache, in eager steps.

As OpenNMT-tf's LanguageModel: the prefix is read whole (with `<s>` first when
data.sequence_controls has `start: true`; never a `</s>`), the next token is chosen from the
logits at its last position, and each chosen token is fed back until `</s>` or
params.maximum_decoding_length tokens (`</s>` counted); params.minimum_decoding_length forbids
`</s>` before that many. The output is the prefix's tokens (without `<s>`) and the generated ones,
detokenized. Unlike OpenNMT-tf, which asserts that a batch's prefixes have one length (its
`infer.length_bucket_width: 1`), a batch may mix lengths: its prefixes are decoded in groups of
one length. And where OpenNMT-tf 2.32's LanguageModel decodes with one hypothesis whatever
params.beam_width says, beam_width > 1 runs a beam search here (scores: the sum of the tokens'
log-probabilities, divided by OpenNMT-tf's length penalty ((5 + length) / 6) ** length_penalty
when ranking finished hypotheses).

Sampling (params.sampling_topk != 1): the next token is drawn from the sampling_topk best (0: all)
at params.sampling_temperature, with a NumPy generator seeded by the DecodingOptions' seed; a
hypothesis' score is its tokens' log-probabilities under the model (temperature 1).
"""

import logging
import sys

import keras
import numpy as np
from keras import ops
from tqdm import tqdm

from opennmt_lite.data import DataError
from opennmt_lite.inference.portable_decoding import jit_with_weights, padded_size
from opennmt_lite.models.language_model import END_ID

logger = logging.getLogger("opennmt_lite")


def _log_softmax(logits):
    logits = np.asarray(logits, np.float64)
    shifted = logits - logits.max(-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))


def _forbid_end(log_probs, step, options):
    if step < options.minimum_decoding_length:
        log_probs[..., END_ID] = -np.inf
    return log_probs


def _sample(log_probs, options, rng):
    """[rows] ids drawn from each row's distribution at the options' temperature and top-k."""
    scaled = log_probs / options.sampling_temperature
    if options.sampling_topk:
        k = min(options.sampling_topk, scaled.shape[-1])
        kth = np.partition(scaled, -k, axis=-1)[:, -k][:, None]
        scaled = np.where(scaled >= kth, scaled, -np.inf)
    probs = np.exp(scaled - scaled.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    return np.array([rng.choice(len(p), p=p) for p in probs], np.int32)


def _decode_next(model, ids, position, cache):
    """ids [rows] at `position` after the cache -> (logits [rows, vocabulary], the cache)."""
    logits, cache = model.decoder.decode_cached(
        model.examples_inputter(ids[:, None]), ops.arange(position, position + 1), cache)
    return ops.cast(logits[:, -1], "float32"), cache


def _jax_step(model):
    """`decode_slot` on Keras' JAX backend, on fixed-size cache buffers (`continue_prefixes`
    makes them): ids [rows, time] at `position` -> (the last position's float32 logits [rows,
    vocabulary], the buffers), compiled by `jax.jit` once per (rows, time, capacity) (one for
    a prefix length, one for all the steps after it), the weights and the position passed in:
    an eager JAX step dispatches and compiles each of its ops anew for every new cache length,
    several times slower."""
    def step(ids, position, cache):
        logits, cache = model.decoder.decode_slot(model.examples_inputter(ids), position, cache)
        return ops.cast(logits[:, -1], "float32"), cache

    compiled = jit_with_weights(model, step)
    return lambda ids, position, cache: compiled(np.asarray(ids, np.int32), np.int32(position),
                                                 cache)


def _jax_function(model):
    function = getattr(model, "_continuation_step", None)
    if function is None:  # (kept on the model, outside Keras' attribute tracking)
        function = _jax_step(model)
        object.__setattr__(model, "_continuation_step", function)
    return function


def _step(model, ids, position, cache):
    """_decode_next, traced once per model on TensorFlow (every cache length and batch size one
    graph: an eager step costs several times its arithmetic here); on JAX `_jax_step`."""
    if keras.backend.backend() == "jax":
        logits, cache = _jax_function(model)(np.asarray(ids)[:, None], position, cache)
        return np.asarray(logits), cache
    if keras.backend.backend() != "tensorflow":
        logits, cache = _decode_next(model, ids, position, cache)
        return np.asarray(logits), cache
    import tensorflow as tf

    function = getattr(model, "_continuation_step", None)
    if function is None:  # (kept on the model, outside Keras' attribute tracking)
        function = tf.function(lambda ids, position, cache: _decode_next(model, ids, position,
                                                                         cache),
                               reduce_retracing=True)
        object.__setattr__(model, "_continuation_step", function)
    logits, cache = function(tf.constant(ids, tf.int32), tf.constant(position, tf.int32), cache)
    return logits.numpy(), cache


def _search_one_hypothesis(model, logits, cache, time, options, rng):
    """Greedy search or sampling from the prefixes' last logits -> [(ids, score)] per row."""
    batch = logits.shape[0]
    generated = [[] for _ in range(batch)]
    scores = np.zeros(batch)
    done = np.zeros(batch, bool)
    for step in range(options.maximum_decoding_length):
        log_probs = _forbid_end(_log_softmax(logits), step, options)
        if options.sampling_topk == 1:
            next_ids = log_probs.argmax(-1).astype(np.int32)
        else:
            next_ids = _sample(log_probs, options, rng)
        for b in np.flatnonzero(~done):
            scores[b] += log_probs[b, next_ids[b]]
            if next_ids[b] == END_ID:
                done[b] = True
            else:
                generated[b].append(int(next_ids[b]))
        if done.all() or step == options.maximum_decoding_length - 1:
            break
        logits, cache = _step(model, next_ids, time + step, cache)
    return [[(ids, float(score))] for ids, score in zip(generated, scores)]


def _length_penalty(length, alpha):
    return ((5.0 + length) / 6.0) ** alpha if alpha else 1.0


def _beam_search(model, logits, cache, time, options):
    """Beam search of width options.beam_width -> the options.n_best best (ids, score) per row.
    A finished hypothesis stays in its beam, extended by `</s>` at no cost."""
    batch, vocabulary = logits.shape
    width = options.beam_width
    # every beam starts from the prefix; only the first counts at the first step
    cache = [(ops.repeat(k, width, axis=0), ops.repeat(v, width, axis=0)) for k, v in cache]
    logits = np.repeat(logits, width, axis=0)
    scores = np.tile(np.r_[0.0, np.full(width - 1, -np.inf)], batch)
    tokens = np.zeros((batch * width, 0), np.int32)
    finished = np.zeros(batch * width, bool)
    for step in range(options.maximum_decoding_length):
        log_probs = _forbid_end(_log_softmax(logits), step, options)
        log_probs[finished] = -np.inf
        log_probs[finished, END_ID] = 0.0
        total = (scores[:, None] + log_probs).reshape(batch, width * vocabulary)
        best = np.argsort(-total, axis=1, kind="stable")[:, :width]
        origin = (best // vocabulary + np.arange(batch)[:, None] * width).reshape(-1)
        next_ids = (best % vocabulary).reshape(-1).astype(np.int32)
        scores = np.take_along_axis(total, best, axis=1).reshape(-1)
        tokens = np.concatenate([tokens[origin], next_ids[:, None]], axis=1)
        finished = finished[origin] | (next_ids == END_ID)
        if finished.all() or step == options.maximum_decoding_length - 1:
            break
        cache = [(ops.take(k, origin, axis=0), ops.take(v, origin, axis=0)) for k, v in cache]
        logits, cache = _step(model, next_ids, time + step, cache)
    results = []
    for b in range(batch):
        hypotheses = []
        for row in range(b * width, (b + 1) * width):
            ids = [int(i) for i in tokens[row]]
            ids = ids[: ids.index(END_ID)] if END_ID in ids else ids
            length = len(ids) + (1 if finished[row] else 0)
            hypotheses.append((ids, float(scores[row]),
                               scores[row] / _length_penalty(length, options.length_penalty)))
        hypotheses.sort(key=lambda h: -h[2])
        results.append([(ids, score) for ids, score, _ in hypotheses[: options.n_best]])
    return results


def continue_prefixes(model, ids, length, options, rng=None):
    """Continuations of the prefixes ids[b, :length[b]] (lengths may differ): per row, a list of
    options.n_best (generated ids without `</s>`, log-probability). `rng`: a NumPy Generator
    (sampling)."""
    ids = np.asarray(ids, np.int32)
    length = np.asarray(length, np.int32)
    results = [None] * len(ids)
    for prefix_length in np.unique(length):
        rows = np.flatnonzero(length == prefix_length)
        prefix = ids[rows, :prefix_length]
        if keras.backend.backend() == "jax":  # (fixed-size buffers, `_jax_step`; few sizes)
            capacity = padded_size(int(prefix_length) + options.maximum_decoding_length,
                                   minimum=16)
            logits, cache = _jax_function(model)(
                prefix, 0, model.decoder.fixed_cache(len(rows), capacity))
        else:
            logits, cache = model.decoder.decode_cached(
                model.examples_inputter(prefix), ops.arange(int(prefix_length)),
                model.decoder.empty_cache(len(rows)))
            logits = ops.cast(logits[:, -1], "float32")
        logits = np.asarray(logits)
        if options.beam_width > 1:
            group = _beam_search(model, logits, cache, int(prefix_length), options)
        else:
            group = _search_one_hypothesis(model, logits, cache, int(prefix_length), options, rng)
        for row, hypotheses in zip(rows, group):
            results[row] = hypotheses
    return results


def continue_file(model, assets, inference_input, options, start=False, progress=True):
    """-> list (file order) of lists (n_best) of (detokenized prefix + continuation, log-prob):
    `inference_input` an InferenceInput of the prefixes (with `<s>` first if `start`)."""
    vocabulary = assets.target_vocabulary
    rng = np.random.default_rng(options.seed)
    results = [None] * len(inference_input.corpus)
    batches = inference_input.numpy_batches()
    if progress:
        batches = tqdm(batches, total=len(inference_input.batches), desc="continuing",
                       unit="batch", file=sys.stderr, leave=False)
    for batch in batches:
        empty = batch["index"][batch["source_length"] == 0]
        if len(empty):
            raise DataError(
                f"--features_file {inference_input.features_file}, line {int(empty.min()) + 1}: "
                "an empty prefix: a language model continues a context (for generation from "
                "nothing, train it with data.sequence_controls: {start: true})")
        output = continue_prefixes(model, batch["source_ids"], batch["source_length"], options,
                                   rng)
        for row, (index, hypotheses) in enumerate(zip(batch["index"], output)):
            prefix = batch["source_ids"][row, int(start): batch["source_length"][row]]
            results[int(index)] = [
                (assets.target_tokenizer.detokenize(vocabulary.to_tokens(prefix) +
                                                    vocabulary.to_tokens(generated)), score)
                for generated, score in hypotheses]
    return results
