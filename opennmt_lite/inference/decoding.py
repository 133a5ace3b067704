"""Greedy search and beam search, decoding exactly as OpenNMT-tf 2.32 does.

Entry points:

    options = DecodingOptions(beam_width=4, n_best=1, ...)   validated once, when made
    translate(model, source_ids, source_length, options)  -> DecodingResult
        (beam_width 1 is greedy search, > 1 beam search)
    translation_function(model, options)  a tf.function over ([None, None] int32, [None] int32)

`DecodingOptions` is the one carrier of how to decode: `build.decoding_options` makes it from the
config (`params`, `infer`, command-line overrides), and `infer`, evaluation, the SavedModel and
the CTranslate2 export and decoding (`inference/ctranslate2.py: translate_options`) all take it.
A new decoding option is a field of `DecodingOptions` (`inference/options.py`, with its check),
its use in this loop and in the portable one (`inference/portable_decoding.py`, Keras' JAX
backend), its key in `config.py`, and its CTranslate2 equivalent in `inference/ctranslate2.py`.

`model` needs `encode(ids, length)`, `target_inputter(ids)` and a `decoder` with
`initial_state(memory, length)` and `step(inputs, step, state)` (see opennmt_lite.models).
`dynamic_decode` holds the search itself and only needs a step function.

Everything is TensorFlow: the steps run in one `tf.while_loop` whose self-attention cache and
output history grow in time, so the functions trace inside `tf.function` (and export in a
SavedModel) with unknown batch and source sizes; they also run eagerly.

OpenNMT-tf behaviour reproduced here (see the notes on OpenNMT-tf's `utils/decoding.py`):

* Hypotheses live in `batch * beam_width` rows, the beams of a sentence next to each other.
  At step 0 only beam 0 is alive (the others start at log-probability -inf).
* Log-probabilities are `log_softmax` of the float32 logits. Before step
  `minimum_decoding_length`, -1e7 is added to the `</s>` logit. From then on a finished row can
  only continue with `</s>`, at log-probability 0.
* Greedy search takes the most likely token (lowest id on ties). Beam search ranks the K * V
  continuations of a sentence by cumulative log-probability, divided by the GNMT length penalty
  ((5 + length + 1) / 6) ** length_penalty when length_penalty != 0, where `length` is the
  number of tokens before this step (`</s>` included; it stops growing when a hypothesis
  finishes). It keeps the best K, ordered by that score, lower index first on ties. Greedy
  search never applies the length penalty.
* With `coverage_penalty` β != 0 (beam search only, GNMT's penalty as OpenNMT-tf applies it),
  each row accumulates the attention vectors (the decoder's alignment: first head of the last
  layer) of the steps it was not yet finished at; a row that was already finished when the
  step began has β * sum_j log(min(coverage_j, 1)) added to its ranking score (source positions
  never attended, coverage 0, count as log 1 = 0). Unfinished rows get no coverage term: in
  OpenNMT-tf the penalty only re-ranks finished hypotheses against the others. The accumulated
  attention moves with its row when beams are reordered; printed scores stay log-probabilities.
* Random sampling (`sampling_topk` != 1, OpenNMT-tf's RandomSampler): instead of taking the best
  K continuations, K are drawn (independently, with replacement) from softmax(ranking /
  sampling_temperature) over the `sampling_topk` best (0: over all); greedy search draws from
  this step's log-probabilities, beam search from its ranking scores over the sentence's
  K * V continuations. Draws are stateless and seeded (`seed`; per call of a
  `translation_function`, per step), so a run repeats exactly.
* Finished hypotheses keep their beam slot until better unfinished ones push them out. Decoding
  stops when every row of the batch has finished, or after `maximum_decoding_length` steps
  (every step emits one token, `</s>` included, so an unfinished hypothesis then has exactly
  that many tokens and no `</s>`).
* The score kept for a row is `where(parent finished, old score of this SLOT, new score)`. A
  finished hypothesis that moves to another slot therefore takes that slot's previous score.
  This is OpenNMT-tf's quirk. It changes the scores OpenNMT-tf prints (and the later ranking),
  never the tokens of a correctly scored hypothesis, and it is reproduced on purpose.
* Output order is the beam-slot order; the first `n_best` slots are returned. Once all beams of
  a sentence have finished, OpenNMT-tf keeps re-sorting the slots while other sentences of the
  batch still decode, but it reads the tokens back from the step where the sentence finished
  (its `gather_tree` stops at the longest hypothesis) and the scores no longer change. Here the
  slots of such a sentence simply stay where they are, which gives the same output.

The result is a `DecodingResult`: `ids` [batch, n_best, time] int32 without `</s>` and
0-padded, `time` = the longest length in the batch; `lengths` [batch, n_best] int32 (tokens
before `</s>`); `log_probs` [batch, n_best] float32, the cumulative log-probability including
`</s>` that OpenNMT-tf prints with `with_scores`; `attention` [batch, n_best, time, src_time]
float32 when requested (the alignment vector that produced each returned token; zeros after
the end), else None; `onmt_attention`, the same shape (but one step shorter when a hypothesis
stopped at maximum_decoding_length, as OpenNMT-tf drops its last step), is the alignment
OpenNMT-tf 2.32 prints
(`with_alignments`) and replaces unknown targets with: in beam search its gather of the
attention history (`_gather_tree_from_array`) starts from the step of the sentence's longest
hypothesis without `</s>` and takes, at each step, the attention of the row in the hypothesis'
slot after that step rather than of its parent row; identical to `attention` in greedy search.
"""

import tensorflow as tf

from opennmt_lite.inference.options import (  # noqa: F401 (names other modules import from here)
    END_ID, END_PENALTY, FLOAT32_MAX, PAD_ID, START_ID, DecodingOptions, DecodingResult)


def translate(model, source_ids, source_length, options=DecodingOptions(), return_attention=False,
              call_index=0):
    """Encodes `source_ids` [batch, src_time] / `source_length` [batch] and decodes with
    `options` (a DecodingOptions). `call_index` (int32 scalar) varies the random draws of
    sampling from call to call (with the same seed)."""
    source_ids = tf.cast(source_ids, tf.int32)
    source_length = tf.cast(source_length, tf.int32)
    batch_size = tf.shape(source_ids)[0]
    memory = model.encode(source_ids, source_length, training=False)
    # Each sentence's beam_width copies are contiguous (OpenNMT-tf's tile_batch).
    memory = tf.repeat(memory, options.beam_width, axis=0)
    memory_length = tf.repeat(source_length, options.beam_width, axis=0)
    state = model.decoder.initial_state(memory, memory_length)

    def step_fn(ids, step, state):
        return model.decoder.step(model.target_inputter(ids), step, state, training=False)

    return dynamic_decode(step_fn, state, batch_size, options, source_time=tf.shape(memory)[1],
                          return_attention=return_attention, call_index=call_index)


def translation_function(model, options=DecodingOptions(), return_attention=False):
    """`translate(model, ..., options, return_attention)` as a tf.function with input signature
    ([None, None] int32 source ids, [None] int32 source lengths). With sampling, each call
    draws anew (a counter of the calls is part of the seed), and the sequence of calls repeats
    exactly with the same seed."""
    calls = tf.Variable(0, dtype=tf.int32, trainable=False) if options.sampling_topk != 1 else None

    @tf.function(
        input_signature=[
            tf.TensorSpec([None, None], tf.int32, name="source_ids"),
            tf.TensorSpec([None], tf.int32, name="source_length"),
        ]
    )
    def run(source_ids, source_length):
        call_index = 0 if calls is None else calls.assign_add(1)
        return translate(model, source_ids, source_length, options, return_attention, call_index)

    return run


def dynamic_decode(step_fn, initial_state, batch_size, options=DecodingOptions(),
                   source_time=None, return_attention=False, call_index=0):
    """The decoding loop, independent of the model.

    step_fn(ids [rows], step (int32 scalar), state) -> (logits [rows, vocab], state,
    attention [rows, src_time]), with rows = batch_size * beam_width, the beams of a sentence
    contiguous. The state is the decoder's: when beams are reordered only
    `state["layers"][i]["self_kv"]` ([rows, ..., time, depth]) is gathered, or, when the state
    has one, only `state["self_kv_index"]` [rows, time] (the index of the decoder's
    `DecodingCache` buffers, which grow in their first dimension and are left in place);
    everything else is the same for all beams.
    options: a DecodingOptions. source_time: the source length of the attention vectors (a
    scalar), needed to return the attention history (`return_attention`) and for the coverage
    penalty. call_index: varies sampling's draws between calls (see `translation_function`).
    """
    beam_width = int(options.beam_width)
    n_best = int(options.n_best)
    length_penalty = options.length_penalty
    coverage_penalty = options.coverage_penalty if beam_width > 1 else 0.0
    keep_attention = return_attention
    if (keep_attention or coverage_penalty) and source_time is None:
        raise ValueError("the source length (source_time) is needed for the attention history "
                         "and the coverage penalty")
    rows = batch_size * beam_width

    # Beam 0 of each sentence is alive, the others start at -inf (for greedy: just 0).
    first_beam = tf.constant([0.0] + [float("-inf")] * (beam_width - 1), tf.float32)
    loop = {
        "step": tf.constant(0, tf.int32),
        "ids": tf.fill([rows], START_ID),  # the last token of each row
        "finished": tf.zeros([rows], tf.bool),
        "scores": tf.tile(first_beam, [batch_size]),  # cumulative log-probabilities
        "lengths": tf.zeros([rows], tf.int32),  # tokens so far, `</s>` included
        "history": tf.zeros([rows, 0], tf.int32),  # the tokens of each row so far
        "state": initial_state,
    }
    if keep_attention:
        loop["attention"] = tf.zeros([rows, 0, source_time], tf.float32)
        # Each step's attention by row, as computed (not reordered), and each step's parents:
        # what OpenNMT-tf's alignment is gathered from (see _onmt_attention).
        loop["step_attention"] = tf.zeros([rows, 0, source_time], tf.float32)
        loop["parents"] = tf.zeros([rows, 0], tf.int32)
    if coverage_penalty:
        loop["coverage"] = tf.zeros([rows, source_time], tf.float32)  # accumulated attention
    if options.sampling_topk != 1:
        sampling_seed = tf.random.experimental.stateless_fold_in(
            tf.constant([options.seed, 0], tf.int32), tf.cast(call_index, tf.int32))

    def keep_going(loop):
        return tf.reduce_any(tf.logical_not(loop["finished"]))

    def one_step(loop):
        step, finished, scores, lengths = loop["step"], loop["finished"], loop["scores"], loop["lengths"]
        logits, state, attention = step_fn(loop["ids"], step, loop["state"])
        log_probs = _next_token_log_probs(logits, step, finished, options.minimum_decoding_length)
        vocab_size = tf.shape(log_probs)[1]
        totals = log_probs + scores[:, tf.newaxis]  # [rows, vocab]

        # Rank the beam_width * vocab continuations of each sentence.
        if beam_width == 1:
            ranking = log_probs  # greedy: argmax of this step (no penalty, no cumulated score)
        else:
            ranking = totals
            if length_penalty != 0:
                ranking = ranking / _length_penalty(lengths + 1, length_penalty)[:, tf.newaxis]
            if coverage_penalty:
                coverage = loop["coverage"] + tf.where(
                    finished[:, tf.newaxis], 0.0, tf.cast(attention, tf.float32))
                ranking = ranking + coverage_penalty * _coverage_penalty(coverage, finished)[:, tf.newaxis]
        ranking = tf.reshape(ranking, [batch_size, beam_width * vocab_size])
        if options.sampling_topk == 1:
            _, best = tf.math.top_k(ranking, k=beam_width)  # sorted; lower index first on ties
        else:
            seed = tf.random.experimental.stateless_fold_in(sampling_seed, step)
            best = _sample(ranking, beam_width, options.sampling_topk,
                           options.sampling_temperature, seed)
        best_totals = tf.gather(
            tf.reshape(totals, [batch_size, beam_width * vocab_size]), best, batch_dims=1
        )
        words = tf.reshape(best % vocab_size, [rows])
        parents = tf.reshape(
            best // vocab_size + tf.range(batch_size)[:, tf.newaxis] * beam_width, [rows]
        )
        # A sentence whose beams have all finished keeps its slots where they are (see the
        # module docstring); its words are then all `</s>` and its scores do not change.
        sentence_done = tf.reduce_all(tf.reshape(finished, [batch_size, beam_width]), axis=1)
        parents = tf.where(tf.repeat(sentence_done, beam_width), tf.range(rows), parents)

        # Move every row to its new slot.
        lengths = tf.gather(tf.where(finished, lengths, lengths + 1), parents)
        parent_finished = tf.gather(finished, parents)
        # OpenNMT-tf's quirk: a finished hypothesis takes the previous score of its new SLOT.
        scores = tf.where(parent_finished, scores, tf.reshape(best_totals, [rows]))
        new_loop = {
            "step": step + 1,
            "ids": words,
            "finished": tf.logical_or(parent_finished, tf.equal(words, END_ID)),
            "scores": scores,
            "lengths": lengths,
            "history": tf.concat([tf.gather(loop["history"], parents), words[:, tf.newaxis]], 1),
            "state": _reorder_self_attention_cache(state, parents),
        }
        if coverage_penalty:
            new_loop["coverage"] = tf.gather(coverage, parents)
        if keep_attention:
            attention = tf.cast(attention, tf.float32)[:, tf.newaxis, :]
            new_loop["attention"] = tf.gather(tf.concat([loop["attention"], attention], 1), parents)
            new_loop["step_attention"] = tf.concat([loop["step_attention"], attention], 1)
            new_loop["parents"] = tf.concat([loop["parents"], parents[:, tf.newaxis]], 1)
        return (new_loop,)

    (loop,) = tf.while_loop(
        keep_going,
        one_step,
        (loop,),
        shape_invariants=(
            dict(
                tf.nest.map_structure(_growing_shape, loop),
                state=_state_shape(loop["state"]),
                history=tf.TensorShape([loop["history"].shape[0], None]),
                **({"parents": tf.TensorShape([loop["parents"].shape[0], None])}
                   if "parents" in loop else {}),
            ),
        ),
        maximum_iterations=options.maximum_decoding_length,
        # One step at a time, as OpenNMT-tf: each step needs the previous one's output, and
        # the default (10) only lets the executor spread a step's small ops over more threads.
        parallel_iterations=1,
    )
    return _finalize(loop, batch_size, beam_width, n_best)


def _next_token_log_probs(logits, step, finished, minimum_decoding_length):
    """float32 log-probabilities of the next token, [rows, vocab], with `</s>` handled."""
    logits = tf.cast(logits, tf.float32)
    vocab_size = tf.shape(logits)[1]
    is_end = tf.one_hot(END_ID, vocab_size, on_value=True, off_value=False)
    # Before the minimum length: a large penalty on the `</s>` logit.
    penalized = logits + tf.where(is_end, END_PENALTY, 0.0)[tf.newaxis, :]
    # Afterwards, finished rows can only emit `</s>` (logits float32 max / min, as OpenNMT-tf).
    end_only = tf.where(is_end, FLOAT32_MAX, -FLOAT32_MAX)[tf.newaxis, :]
    forced = tf.where(finished[:, tf.newaxis], end_only, logits)
    logits = tf.where(step < minimum_decoding_length, penalized, forced)
    return tf.nn.log_softmax(logits)


def _length_penalty(length, alpha):
    """GNMT length penalty ((5 + length) / 6) ** alpha, computed as OpenNMT-tf does."""
    return tf.pow((5.0 + tf.cast(length, tf.float32)) / 6.0, alpha)


def _sample(scores, num_samples, topk, temperature, seed):
    """[rows, num_samples] indices into scores [rows, n], drawn independently from
    softmax(scores / temperature) restricted to the `topk` best (0: all)."""
    scores = tf.cast(scores, tf.float32)
    if topk == 0:
        return tf.random.stateless_categorical(scores / temperature, num_samples, seed,
                                               dtype=tf.int32)
    top_scores, top_ids = tf.math.top_k(scores, k=tf.minimum(topk, tf.shape(scores)[1]))
    drawn = tf.random.stateless_categorical(top_scores / temperature, num_samples, seed,
                                            dtype=tf.int32)
    return tf.gather(top_ids, drawn, batch_dims=1)


def _coverage_penalty(coverage, finished):
    """sum_j log(min(coverage_j, 1)) of the rows already `finished` (0 for the others),
    coverage [rows, src_time] -> [rows]; positions never attended (0) count as log 1."""
    coverage = tf.where(tf.equal(coverage, 0.0), 1.0, coverage)
    penalty = tf.reduce_sum(tf.math.log(tf.minimum(coverage, 1.0)), axis=1)
    return penalty * tf.cast(finished, tf.float32)


def _reorder_self_attention_cache(state, parents):
    """Gathers the rows of the growing self-attention keys/values (or of the index of the
    decoder's cache buffers, when it has one); memory entries are shared."""
    if "self_kv_index" in state:
        return dict(state, self_kv_index=tf.gather(state["self_kv_index"], parents))
    layers = [
        dict(layer, self_kv=tuple(tf.gather(tensor, parents) for tensor in layer["self_kv"]))
        for layer in state["layers"]
    ]
    return dict(state, layers=layers)


def _growing_shape(tensor):
    """Loop shape invariant: the middle dimensions (time) may grow; rows and depth are fixed."""
    shape = tensor.shape
    if shape.rank is None or shape.rank < 3:
        return shape
    return tf.TensorShape([shape[0]] + [None] * (shape.rank - 2) + [shape[-1]])


def _state_shape(state):
    """Loop shape invariant of the decoder's state: `_growing_shape`, except for the cache
    buffers of a state with "self_kv_index" (capacity and rows vary, then heads and depth) and
    that index (time varies)."""
    shapes = tf.nest.map_structure(_growing_shape, state)
    if "self_kv_index" not in state:
        return shapes
    shapes["self_kv_index"] = tf.TensorShape([state["self_kv_index"].shape[0], None])
    shapes["layers"] = [
        dict(shape, self_kv=tuple(tf.TensorShape([None, None]).concatenate(t.shape[2:])
                                  for t in layer["self_kv"]))
        for shape, layer in zip(shapes["layers"], state["layers"])
    ]
    return shapes


def _finalize(loop, batch_size, beam_width, n_best):
    """The first n_best slots of each sentence, cut at `</s>`, as a DecodingResult."""
    steps = tf.shape(loop["history"])[1]
    tokens = tf.reshape(loop["history"], [batch_size, beam_width, steps])[:, :n_best]
    ended = tf.cumsum(tf.cast(tf.equal(tokens, END_ID), tf.int32), axis=-1) > 0
    lengths = tf.reduce_sum(tf.cast(tf.logical_not(ended), tf.int32), axis=-1)
    time = tf.reduce_max(tf.concat([tf.reshape(lengths, [-1]), [0]], 0))
    inside = tf.logical_not(ended)[:, :, :time]
    ids = tf.where(inside, tokens[:, :, :time], PAD_ID)
    log_probs = tf.reshape(loop["scores"], [batch_size, beam_width])[:, :n_best]
    attention = None
    if "attention" in loop:
        source_time = tf.shape(loop["attention"])[2]
        attention = tf.reshape(loop["attention"], [batch_size, beam_width, steps, source_time])
        attention = attention[:, :n_best, :time]
        attention = attention * tf.cast(inside, tf.float32)[..., tf.newaxis]
        # OpenNMT-tf drops the history's last step (meant as the `</s>` step): a hypothesis
        # stopped by maximum_decoding_length, with no `</s>`, has one vector fewer than tokens.
        aligned = tf.minimum(time, steps - 1)
        onmt_attention = _onmt_attention(loop, batch_size, beam_width, n_best)[:, :, :aligned]
        onmt_attention = onmt_attention * tf.cast(inside[:, :, :aligned], tf.float32)[..., tf.newaxis]
        return DecodingResult(ids, lengths, log_probs, attention, onmt_attention)
    return DecodingResult(ids=ids, lengths=lengths, log_probs=log_probs, attention=attention)


def _onmt_attention(loop, batch_size, beam_width, n_best):
    """OpenNMT-tf's alignment history of the first n_best slots, [batch, n_best, steps, src].

    Its beam search gathers the per-step attention with the beam slots that gather_tree traces
    back from step L - 1, L being the longest hypothesis of the sentence counted without
    `</s>`: s_{L-1} = the returned slot, s_{t-1} = parent of s_t at step t, and the attention
    of step t is taken from row s_t (the row computed at step t in that slot, which is not the
    row that produced the hypothesis' token when beams moved). Steps from L on keep the slot.
    """
    step_attention, parents = loop["step_attention"], loop["parents"]
    steps = tf.shape(parents)[1]
    tokens = tf.reshape(loop["history"], [batch_size, beam_width, steps])
    ended = tf.cumsum(tf.cast(tf.equal(tokens, END_ID), tf.int32), axis=-1) > 0
    longest = tf.reduce_max(tf.reduce_sum(tf.cast(tf.logical_not(ended), tf.int32), -1), axis=1)
    start = tf.repeat(longest - 1, n_best)  # [batch * n_best]
    returned = tf.reshape(tf.range(batch_size)[:, tf.newaxis] * beam_width + tf.range(n_best), [-1])

    def previous_slot(slot, step):  # the slot after step - 1, from the slot after `step`
        return tf.where(step <= start, tf.gather(parents[:, step], slot), slot)

    def gather():
        earlier = tf.scan(previous_slot, tf.range(steps - 1, -1, -1), initializer=returned)
        slots = tf.concat([returned[tf.newaxis], earlier], 0)[:steps][::-1]  # [steps, k]
        by_step = tf.transpose(step_attention, [1, 0, 2])  # [steps, rows, src]
        return tf.transpose(tf.gather(by_step, slots, axis=1, batch_dims=1), [1, 0, 2])

    shape = [batch_size, n_best, steps, tf.shape(step_attention)[2]]
    # (no step: nothing to trace, and an empty scan cannot stack its unknown-shaped results)
    gathered = tf.cond(steps > 0, gather, lambda: tf.zeros([0, 0, shape[3]], tf.float32))
    return tf.reshape(gathered, shape)
