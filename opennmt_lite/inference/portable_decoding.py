"""Greedy and beam search in keras.ops, one compiled loop over fixed shapes (Keras' JAX backend).

The same search as `decoding.dynamic_decode` (OpenNMT-tf's: the beams of a sentence contiguous,
greedy ranks this step's log-probabilities, beam search the cumulated ones divided by the length
penalty, a finished hypothesis keeps the previous score of its new slot, a sentence whose beams
have all finished stays in place), written for `keras.ops.while_loop`, whose state may not change
shape from one step to the next: the decoder's self-attention cache is made for
`maximum_decoding_length` positions at once (`SelfAttentionDecoder.initial_state(...,
maximum_length)`, the slots after the current step masked) and the tokens go to a
[rows, maximum_decoding_length] history. `translation_function` compiles the whole translation
(encoder, loop) with `jax.jit`, once per shape of its inputs.

Options supported: beam_width, n_best, length_penalty, coverage_penalty, minimum_decoding_length,
maximum_decoding_length. The others (sampling, alignments, `replace_unknown_target`, sequence
controls) are still TensorFlow's (`decoding.py`): asking for sampling raises ValueError.
"""

import numpy as np
from keras import ops

from opennmt_lite.inference.decoding import END_ID, END_PENALTY, FLOAT32_MAX, PAD_ID, START_ID


def check_options(options):
    """Raises ValueError naming the first option this loop does not implement."""
    if options.sampling_topk != 1:
        raise ValueError("sampling is not implemented by the portable decoding loop")


def translate(model, source_ids, source_length, options):
    """(history [rows, maximum_decoding_length] int32, scores [rows] float32, steps int32): the
    search's raw result for `source_ids` [batch, src_time] / `source_length` [batch], rows =
    batch * beam_width (see `finalize`). Traceable by `jax.jit` (shapes fixed by the inputs')."""
    check_options(options)
    beam_width, maximum_length = int(options.beam_width), int(options.maximum_decoding_length)
    coverage_penalty = options.coverage_penalty if beam_width > 1 else 0.0
    source_ids = ops.cast(source_ids, "int32")
    source_length = ops.cast(source_length, "int32")
    batch = source_ids.shape[0]
    rows = batch * beam_width
    memory = model.encode(source_ids, source_length, training=False)
    memory = ops.repeat(memory, beam_width, axis=0)
    memory_length = ops.repeat(source_length, beam_width, axis=0)
    state = model.decoder.initial_state(memory, memory_length, maximum_length=maximum_length)
    first_beam = np.array([0.0] + [-np.inf] * (beam_width - 1), np.float32)
    loop = {
        "step": ops.convert_to_tensor(0, "int32"),
        "ids": ops.full((rows,), START_ID, dtype="int32"),
        "finished": ops.zeros((rows,), "bool"),
        "scores": ops.convert_to_tensor(np.tile(first_beam, batch)),
        "lengths": ops.zeros((rows,), "int32"),
        "history": ops.zeros((rows, maximum_length), "int32"),
        "state": state,
    }
    if coverage_penalty:  # the attention accumulated over the source, [rows, src_time]
        loop["coverage"] = ops.zeros((rows, memory.shape[1]), "float32")

    def keep_going(loop):
        return ops.logical_and(loop["step"] < maximum_length,
                               ops.any(ops.logical_not(loop["finished"])))

    def one_step(loop):
        step, finished, scores, lengths = (loop["step"], loop["finished"], loop["scores"],
                                           loop["lengths"])
        logits, state, attention = model.decoder.step(model.target_inputter(loop["ids"]), step,
                                              loop["state"], training=False, fixed_cache=True)
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
                coverage = loop["coverage"] + ops.where(
                    ops.expand_dims(finished, 1), 0.0, ops.cast(attention, "float32"))
                ranking = ranking + coverage_penalty * ops.expand_dims(
                    coverage_penalty_term(coverage, finished), 1)
        ranking = ops.reshape(ranking, (batch, beam_width * vocab_size))
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
        return (new_loop,)

    (loop,) = ops.while_loop(keep_going, one_step, (loop,))
    return loop["history"], loop["scores"], loop["step"]


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


def finalize(history, scores, steps, batch, beam_width, n_best):
    """NumPy (ids [batch, n_best, time] PAD_ID-padded, lengths [batch, n_best], log_probs
    [batch, n_best]) from `translate`'s result: the first n_best slots, cut at `</s>`."""
    history, scores, steps = np.asarray(history), np.asarray(scores), int(steps)
    tokens = history[:, :steps].reshape(batch, beam_width, steps)[:, :n_best]
    ended = np.cumsum(tokens == END_ID, axis=-1) > 0
    lengths = (~ended).sum(-1).astype(np.int32)
    time = int(lengths.max(initial=0))
    ids = np.where(~ended[:, :, :time], tokens[:, :, :time], PAD_ID)
    return ids, lengths, scores.reshape(batch, beam_width)[:, :n_best]


def translation_function(model, options):
    """A function (source_ids, source_length) -> `finalize`'s (ids, lengths, log_probs) that runs
    `translate` compiled by `jax.jit` (Keras' JAX backend), the model's weights passed in."""
    import jax
    import keras

    check_options(options)
    variables = model.trainable_variables + model.non_trainable_variables

    @jax.jit
    def run(values, source_ids, source_length):
        with keras.StatelessScope(state_mapping=list(zip(variables, values))):
            return translate(model, source_ids, source_length, options)

    def call(source_ids, source_length):
        source_ids = np.asarray(source_ids, np.int32)
        history, scores, steps = run([v.value for v in variables], source_ids,
                                     np.asarray(source_length, np.int32))
        return finalize(history, scores, steps, source_ids.shape[0], int(options.beam_width),
                        int(options.n_best))

    return call
