"""A linear-chain CRF: the log-likelihood of OpenNMT-tf's tagger loss and its Viterbi decoding.

OpenNMT-tf's `SequenceTagger(crf_decoding=True)` calls TensorFlow Addons' `crf_log_likelihood`
and `crf_decode`; Addons has no Keras 3 release, so these are the same formulas written in
keras.ops (any backend). Conventions, as Addons': `transitions[i, j]` scores tag i followed by
tag j; there are no start or end transitions; a sequence of length 0 has log-likelihood 0.

Shapes: potentials [batch, time, num_tags] (the per-token logits), tags [batch, time] (int),
lengths [batch] (int), transitions [num_tags, num_tags].
"""

from keras import ops


def _time_mask(lengths, time):
    """[batch, time] bool: True at the real positions."""
    return ops.arange(time)[None, :] < ops.cast(lengths, "int32")[:, None]


def crf_sequence_score(potentials, tags, lengths, transitions):
    """[batch]: the unnormalised score of the tag sequences: the potentials of the tags at the
    real positions plus the transitions between consecutive real tags."""
    potentials = ops.cast(ops.convert_to_tensor(potentials), "float32")
    transitions = ops.cast(ops.convert_to_tensor(transitions), "float32")
    tags = ops.cast(tags, "int32")
    num_tags = ops.shape(potentials)[2]
    mask = ops.cast(_time_mask(lengths, ops.shape(potentials)[1]), "float32")
    unary = ops.take_along_axis(potentials, tags[:, :, None], axis=2)[:, :, 0]
    unary_score = ops.sum(unary * mask, axis=1)
    # transitions[tag_t, tag_t+1] for the pairs whose second position is real.
    pair_index = tags[:, :-1] * num_tags + tags[:, 1:]
    binary = ops.take(ops.reshape(transitions, [-1]), pair_index)
    binary_score = ops.sum(binary * mask[:, 1:], axis=1)
    return unary_score + binary_score


def _scanned(potentials, mask):
    """The potentials and mask of positions 1.. as ONE time-major tensor [time - 1, batch,
    num_tags + 1] (the mask as the last column): Keras' TensorFlow `scan` fails on several
    inputs of unknown time (a traced batch); `_unpacked` splits a step's slice back."""
    packed = ops.concatenate([potentials[:, 1:], ops.cast(mask[:, 1:], "float32")[:, :, None]],
                             axis=2)
    return ops.transpose(packed, [1, 0, 2])


def _unpacked(inputs):
    """(potentials [batch, num_tags], mask [batch] bool) of one `_scanned` slice."""
    return inputs[:, :-1], inputs[:, -1] > 0.5


def crf_log_norm(potentials, lengths, transitions):
    """[batch]: log of the sum of exp(score) over every tag sequence of each length (the forward
    algorithm); 0 for a sequence of length 0."""
    potentials = ops.cast(ops.convert_to_tensor(potentials), "float32")
    transitions = ops.cast(ops.convert_to_tensor(transitions), "float32")
    mask = _time_mask(lengths, ops.shape(potentials)[1])

    def step(alphas, inputs):
        step_potentials, step_mask = _unpacked(inputs)
        scores = alphas[:, :, None] + transitions[None, :, :]  # [batch, previous, next]
        new_alphas = step_potentials + ops.logsumexp(scores, axis=1)
        # Past the end of a sequence its alphas stay those of its last position.
        alphas = ops.where(step_mask[:, None], new_alphas, alphas)
        return alphas, alphas

    alphas, _ = ops.scan(step, potentials[:, 0], _scanned(potentials, mask))
    log_norm = ops.logsumexp(alphas, axis=1)
    return ops.where(ops.cast(lengths, "int32") > 0, log_norm, ops.zeros_like(log_norm))


def crf_log_likelihood(potentials, tags, lengths, transitions):
    """[batch]: log p(tags | potentials) of each sequence (OpenNMT-tf's loss is minus its
    batch mean)."""
    return crf_sequence_score(potentials, tags, lengths, transitions) - crf_log_norm(
        potentials, lengths, transitions
    )


def crf_decode(potentials, transitions, lengths):
    """Viterbi decoding: (tags [batch, time] int32, best_score [batch] float32): the tag
    sequence of highest score at each sequence's real positions (past its length, the tags
    repeat its last tag) and that score. A sequence of length 0 is decoded as one of length 1,
    as Addons does. Ties go to the lowest tag id, as argmax's."""
    potentials = ops.cast(ops.convert_to_tensor(potentials), "float32")
    transitions = ops.cast(ops.convert_to_tensor(transitions), "float32")
    num_tags = ops.shape(potentials)[2]
    mask = _time_mask(lengths, ops.shape(potentials)[1])
    batch = ops.shape(potentials)[0]
    stay = ops.broadcast_to(ops.arange(num_tags, dtype="int32")[None, :], (batch, num_tags))

    def forward(carry, inputs):
        scores, _ = carry
        step_potentials, step_mask = _unpacked(inputs)
        candidates = scores[:, :, None] + transitions[None, :, :]  # [batch, previous, next]
        new_scores = step_potentials + ops.max(candidates, axis=1)
        backpointers = ops.cast(ops.argmax(candidates, axis=1), "int32")
        # Past the end: the scores stay, and the backpointers keep the tag (so the path
        # followed back from the last position reaches the last real one unchanged).
        scores = ops.where(step_mask[:, None], new_scores, scores)
        backpointers = ops.where(step_mask[:, None], backpointers, stay)
        return (scores, backpointers), (scores, backpointers)

    (scores, _), (_, backpointers) = ops.scan(forward, (potentials[:, 0], stay),
                                              _scanned(potentials, mask))
    last_tags = ops.cast(ops.argmax(scores, axis=1), "int32")

    def backward(next_tags, step_backpointers):
        tags = ops.take_along_axis(step_backpointers, next_tags[:, None], axis=1)[:, 0]
        return tags, tags

    # backpointers [time - 1, batch, num_tags]: entry t maps the tag at t + 1 to the tag at t.
    _, earlier_tags = ops.scan(backward, last_tags, backpointers, reverse=True)
    tags = ops.concatenate([ops.transpose(earlier_tags, [1, 0]), last_tags[:, None]], axis=1)
    return tags, ops.max(scores, axis=1)
