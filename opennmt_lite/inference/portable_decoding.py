"""Greedy and beam search in keras.ops, one compiled loop over fixed shapes (Keras' JAX backend).

The same search as `decoding.dynamic_decode` (OpenNMT-tf's: the beams of a sentence contiguous,
greedy ranks this step's log-probabilities, beam search the cumulated ones divided by the length
penalty, a finished hypothesis keeps the previous score of its new slot, a sentence whose beams
have all finished stays in place), written for `keras.ops.while_loop`, whose state may not change
shape from one step to the next: the decoder's self-attention cache is made for
`maximum_decoding_length` positions at once (`SelfAttentionDecoder.initial_state(...,
maximum_length)`, the slots after the current step masked) and the tokens, each step's alignment
vectors and each step's parents go to [rows, maximum_decoding_length, ...] histories.
`translation_function` compiles the whole translation (encoder, loop) with `jax.jit`.

Every `DecodingOptions` field works here as in `decoding.py`: beam_width, n_best, length and
coverage penalties, minimum/maximum_decoding_length, sampling (sampling_topk, sampling_temperature,
seed: drawn by `keras.random.categorical` from a JAX key folded from the seed, the call's number
and the step, so a run repeats exactly with the same seed; the draws are not TensorFlow's, whose
stateless generator is another one), and the alignment that `infer` prints and that
replace_unknown_target reads (`onmt_attention`, as OpenNMT-tf gathers it; see decoding.py).
decoding_noise and replace_unknown_target apply to the decoded tokens (inference/translate.py),
sequence controls to the source ids (the data pipeline): both the same on either backend.

Shapes: `translation_function` pads each batch to `padded_size` rows and source positions (the
padded rows start finished, the padded positions are masked), so that `jax.jit` compiles once per
bucket, not once per batch, and cuts the results back to the batch's own shape.
"""

import numpy as np
from keras import ops

from opennmt_lite.inference.options import (END_ID, END_PENALTY, FLOAT32_MAX, PAD_ID, START_ID,
                                            DecodingResult)


def translate(model, source_ids, source_length, options, active=None, key=None,
              return_attention=False):
    """The search's raw result for `source_ids` [batch, src_time] / `source_length` [batch], a
    dict of [rows] / [rows, maximum_decoding_length, ...] tensors (rows = batch * beam_width; see
    `finalize`): "history" (tokens), "scores", "steps" (steps run), with `return_attention`
    "step_attention" (each step's alignment vectors by row as computed, [rows, steps, src_time])
    and "parents" (each step's parent rows). `active` [batch] bool: rows to decode (the others
    start finished and cost no steps); `key`: the JAX random key of sampling ([2] uint32).
    Traceable by `jax.jit` (shapes fixed by the inputs')."""
    beam_width, maximum_length = int(options.beam_width), int(options.maximum_decoding_length)
    coverage_penalty = options.coverage_penalty if beam_width > 1 else 0.0
    sampling = options.sampling_topk != 1
    source_ids = ops.cast(source_ids, "int32")
    source_length = ops.cast(source_length, "int32")
    batch = source_ids.shape[0]
    rows = batch * beam_width
    memory = model.encode(source_ids, source_length, training=False)
    memory = ops.repeat(memory, beam_width, axis=0)
    memory_length = ops.repeat(source_length, beam_width, axis=0)
    state = model.decoder.initial_state(memory, memory_length, maximum_length=maximum_length)
    first_beam = np.array([0.0] + [-np.inf] * (beam_width - 1), np.float32)
    finished = (ops.zeros((rows,), "bool") if active is None
                else ops.repeat(ops.logical_not(ops.cast(active, "bool")), beam_width))
    loop = {
        "step": ops.convert_to_tensor(0, "int32"),
        "ids": ops.full((rows,), START_ID, dtype="int32"),
        "finished": finished,
        "scores": ops.convert_to_tensor(np.tile(first_beam, batch)),
        "lengths": ops.zeros((rows,), "int32"),
        "history": ops.zeros((rows, maximum_length), "int32"),
        "state": state,
    }
    if coverage_penalty:  # the attention accumulated over the source, [rows, src_time]
        loop["coverage"] = ops.zeros((rows, memory.shape[1]), "float32")
    if return_attention:
        loop["step_attention"] = ops.zeros((rows, maximum_length, memory.shape[1]), "float32")
        loop["parents"] = ops.zeros((rows, maximum_length), "int32")

    def keep_going(loop):
        return ops.logical_and(loop["step"] < maximum_length,
                               ops.any(ops.logical_not(loop["finished"])))

    def one_step(loop):
        step, finished, scores, lengths = (loop["step"], loop["finished"], loop["scores"],
                                           loop["lengths"])
        logits, state, attention = model.decoder.step(model.target_inputter(loop["ids"]), step,
                                              loop["state"], training=False, fixed_cache=True)
        attention = ops.cast(attention, "float32")
        log_probs = next_token_log_probs(logits, step, finished, options.minimum_decoding_length)
        vocab_size = log_probs.shape[1]
        totals = log_probs + ops.expand_dims(scores, 1)
        if beam_width == 1:
            ranking = log_probs  # greedy: argmax of this step
        else:
            ranking = totals
            if options.length_penalty != 0:
                ranking = ranking / ops.expand_dims(
                    length_penalty(lengths + 1, options.length_penalty), 1)
            if coverage_penalty:
                coverage = loop["coverage"] + ops.where(ops.expand_dims(finished, 1), 0.0,
                                                        attention)
                ranking = ranking + coverage_penalty * ops.expand_dims(
                    coverage_penalty_term(coverage, finished), 1)
        ranking = ops.reshape(ranking, (batch, beam_width * vocab_size))
        if sampling:
            best = sample(ranking, beam_width, options.sampling_topk,
                          options.sampling_temperature, step_key(key, step))
        else:
            _, best = ops.top_k(ranking, k=beam_width)  # sorted; lower index first on ties
        best_totals = ops.take_along_axis(
            ops.reshape(totals, (batch, beam_width * vocab_size)), best, axis=1)
        words = ops.reshape(best % vocab_size, (rows,))
        offsets = ops.expand_dims(ops.arange(batch, dtype="int32") * beam_width, 1)
        parents = ops.reshape(best // vocab_size + offsets, (rows,))
        sentence_done = ops.all(ops.reshape(finished, (batch, beam_width)), axis=1)
        parents = ops.where(ops.repeat(sentence_done, beam_width), ops.arange(rows, dtype="int32"),
                            parents)
        lengths = ops.take(ops.where(finished, lengths, lengths + 1), parents, axis=0)
        parent_finished = ops.take(finished, parents, axis=0)
        scores = ops.where(parent_finished, scores, ops.reshape(best_totals, (rows,)))
        history = ops.slice_update(ops.take(loop["history"], parents, axis=0), (0, step),
                                   ops.expand_dims(words, 1))
        layers = [dict(layer, self_kv=tuple(ops.take(t, parents, axis=0)
                                            for t in layer["self_kv"]))
                  for layer in state["layers"]]
        new_loop = {
            "step": step + 1,
            "ids": words,
            "finished": ops.logical_or(parent_finished, words == END_ID),
            "scores": scores,
            "lengths": lengths,
            "history": history,
            "state": dict(state, layers=layers),
        }
        if coverage_penalty:
            new_loop["coverage"] = ops.take(coverage, parents, axis=0)
        if return_attention:  # (as computed, by row; `finalize` traces the hypotheses back)
            new_loop["step_attention"] = ops.slice_update(
                loop["step_attention"], (0, step, 0), ops.expand_dims(attention, 1))
            new_loop["parents"] = ops.slice_update(loop["parents"], (0, step),
                                                   ops.expand_dims(parents, 1))
        return (new_loop,)

    (loop,) = ops.while_loop(keep_going, one_step, (loop,))
    names = ("history", "scores", "step") + (("step_attention", "parents") if return_attention
                                             else ())
    return {"steps" if name == "step" else name: loop[name] for name in names}


def next_token_log_probs(logits, step, finished, minimum_decoding_length):
    """float32 log-probabilities of the next token, [rows, vocab], with `</s>` handled as
    `decoding._next_token_log_probs` does."""
    logits = ops.cast(logits, "float32")
    is_end = ops.arange(logits.shape[1], dtype="int32") == END_ID
    penalized = logits + ops.expand_dims(ops.where(is_end, END_PENALTY, 0.0), 0)
    end_only = ops.expand_dims(ops.where(is_end, FLOAT32_MAX, -FLOAT32_MAX), 0)
    forced = ops.where(ops.expand_dims(finished, 1), end_only, logits)
    logits = ops.where(step < minimum_decoding_length, penalized, forced)
    return ops.log_softmax(logits, axis=-1)


def length_penalty(length, alpha):
    """GNMT length penalty ((5 + length) / 6) ** alpha."""
    return ops.power((5.0 + ops.cast(length, "float32")) / 6.0, alpha)


def coverage_penalty_term(coverage, finished):
    """sum_j log(min(coverage_j, 1)) of the rows already `finished` (0 for the others),
    coverage [rows, src_time] -> [rows]; positions never attended (0) count as log 1 (as
    `decoding._coverage_penalty`)."""
    coverage = ops.where(coverage == 0.0, 1.0, coverage)
    penalty = ops.sum(ops.log(ops.minimum(coverage, 1.0)), axis=1)
    return penalty * ops.cast(finished, "float32")


def step_key(key, step):
    """The random key of one step's draws: `key` folded with the step."""
    import jax

    return jax.random.fold_in(key, step)


def sample(scores, num_samples, topk, temperature, key):
    """[rows, num_samples] indices into scores [rows, n], drawn independently from
    softmax(scores / temperature) restricted to the `topk` best (0: all), as decoding._sample."""
    import keras

    scores = ops.cast(scores, "float32")
    if topk == 0:
        return ops.cast(keras.random.categorical(scores / temperature, num_samples, seed=key),
                        "int32")
    top_scores, top_ids = ops.top_k(scores, k=min(int(topk), scores.shape[1]))
    drawn = keras.random.categorical(top_scores / temperature, num_samples, seed=key)
    return ops.take_along_axis(top_ids, ops.cast(drawn, "int32"), axis=1)


def finalize(raw, batch, beam_width, n_best):
    """A DecodingResult of NumPy arrays from `translate`'s result (NumPy): the first n_best slots,
    cut at `</s>`: ids [batch, n_best, time] PAD_ID-padded, lengths [batch, n_best], log_probs
    [batch, n_best]; with the attention histories, `attention` and `onmt_attention` [batch,
    n_best, time, src_time] as decoding._finalize makes them."""
    steps = int(raw["steps"])
    tokens = np.asarray(raw["history"])[:, :steps].reshape(batch, beam_width, steps)[:, :n_best]
    ended = np.cumsum(tokens == END_ID, axis=-1) > 0
    lengths = (~ended).sum(-1).astype(np.int32)
    time = int(lengths.max(initial=0))
    inside = ~ended[:, :, :time]
    ids = np.where(inside, tokens[:, :, :time], PAD_ID).astype(np.int32)
    log_probs = np.asarray(raw["scores"], np.float32).reshape(batch, beam_width)[:, :n_best]
    if "step_attention" not in raw:
        return DecodingResult(ids, lengths, log_probs)
    step_attention = np.asarray(raw["step_attention"], np.float32)[:, :steps]
    parents = np.asarray(raw["parents"])[:, :steps]
    returned = (np.arange(batch)[:, None] * beam_width + np.arange(n_best)).reshape(-1)
    attention = _traced_attention(step_attention, parents, returned)
    attention = attention.reshape(batch, n_best, steps, -1)[:, :, :time] * inside[..., None]
    aligned = min(time, steps - 1)
    history = np.asarray(raw["history"])[:, :steps].reshape(batch, beam_width, steps)
    onmt_attention = _onmt_attention(step_attention, parents, history, returned)
    onmt_attention = (onmt_attention.reshape(batch, n_best, steps, -1)[:, :, :aligned]
                      * inside[:, :, :aligned, None])
    return DecodingResult(ids, lengths, log_probs, attention, onmt_attention)


def _traced_attention(step_attention, parents, slots):
    """[len(slots), steps, src]: for the hypothesis in each of `slots` after the last step, the
    alignment vector that produced each of its tokens (the row its step-t ancestor was in when
    step t computed it; the reordered history of decoding.py's loop)."""
    steps = parents.shape[1]
    out = np.zeros((len(slots), steps, step_attention.shape[2]), np.float32)
    slot = slots
    for t in range(steps - 1, -1, -1):
        slot = parents[slot, t]
        out[:, t] = step_attention[slot, t]
    return out


def _onmt_attention(step_attention, parents, history, returned):
    """OpenNMT-tf's alignment history of the `returned` slots, [len(returned), steps, src]: its
    gather from step L - 1 back (L the sentence's longest hypothesis, over all its beam slots,
    counted without `</s>`), taking at step t the row in the slot after step t (see
    decoding._onmt_attention). history: [batch, beam_width, steps] tokens."""
    steps = parents.shape[1]
    ended = np.cumsum(history == END_ID, axis=-1) > 0
    longest = (~ended).sum(-1).max(axis=1)  # [batch]
    start = np.repeat(longest - 1, len(returned) // len(longest))
    out = np.zeros((len(returned), steps, step_attention.shape[2]), np.float32)
    slot = returned
    for t in range(steps - 1, -1, -1):
        out[:, t] = step_attention[slot, t]
        slot = np.where(t <= start, parents[slot, t], slot)
    return out


def jit_with_weights(model, function):
    """`function(*args)` compiled by `jax.jit` with `model`'s weights passed in at each call (read
    then, so that a model trained or restored since is used as it is now; not baked into the
    program as constants), `function` running under a `keras.StatelessScope` that maps them onto
    the model's variables. -> a function of the same `args`."""
    import jax
    import keras

    variables = model.trainable_variables + model.non_trainable_variables

    @jax.jit
    def compiled(values, *args):
        with keras.StatelessScope(state_mapping=list(zip(variables, values))):
            return function(*args)

    return lambda *args: compiled([v.value for v in variables], *args)


def padded_size(size, minimum=1):
    """The size a batch dimension is padded to: the smallest 2^k or 3 * 2^k, at least `minimum`,
    that holds `size` (at most half more; few shapes for `jax.jit` to compile)."""
    bucket = 1
    while bucket < max(size, minimum):  # 1, 2, 3, 4, 6, 8, 12, 16, 24, ...
        if bucket == 1:
            bucket = 2
        elif bucket & (bucket - 1) == 0:  # 2^k -> 3 * 2^(k-1)
            bucket = bucket // 2 * 3
        else:  # 3 * 2^(k-1) -> 2^(k+1)
            bucket = bucket // 3 * 4
    return bucket


def translation_function(model, options, return_attention=False):
    """A function (source_ids [batch, src_time], source_length [batch]) -> DecodingResult of
    NumPy arrays (`finalize`), that runs `translate` compiled by `jax.jit` (Keras' JAX backend),
    the model's weights passed in. With sampling, each call draws anew (its number is folded into
    the key) and the sequence of calls repeats exactly with the same seed."""
    import jax

    sampling = options.sampling_topk != 1
    seed_key = jax.random.key_data(jax.random.key(int(options.seed))) if sampling else None
    calls = [0]

    run = jit_with_weights(model, lambda source_ids, source_length, active, key: translate(
        model, source_ids, source_length, options, active=active, key=key,
        return_attention=return_attention))

    def call(source_ids, source_length):
        source_ids = np.asarray(source_ids, np.int32)
        source_length = np.asarray(source_length, np.int32)
        batch, time = source_ids.shape
        rows, width = padded_size(batch), padded_size(time, minimum=8)
        ids = np.zeros((rows, width), np.int32)
        ids[:batch, :time] = source_ids
        lengths = np.ones((rows,), np.int32)  # (padded rows: one masked position, never decoded)
        lengths[:batch] = source_length
        active = np.arange(rows) < batch
        key = None
        if sampling:
            key = jax.random.fold_in(seed_key, calls[0])
            calls[0] += 1
        raw = run(ids, lengths, active, key)
        # (the batch's own rows: a sentence's beams only ever take parents among themselves)
        real = batch * int(options.beam_width)
        raw = {name: np.asarray(value) if name == "steps" else np.asarray(value)[:real]
               for name, value in raw.items()}
        result = finalize(raw, batch, int(options.beam_width), int(options.n_best))
        if result.attention is None:
            return result
        return result._replace(attention=result.attention[..., :time],
                               onmt_attention=result.onmt_attention[..., :time])

    return call
