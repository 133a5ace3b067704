"""The decoder's cross-attention on given or greedy targets, for the HTML walk-through.

    targets = greedy_targets(model, source_ids, source_length, maximum_length)   # or given ones
    attention = trace_cross_attention(model, source_ids, source_length, targets)
    attention[layer]   # [batch, heads, target_time, source_time]

A target is the list of tokens the decoder outputs, `</s>` included when the translation ends:
row i of an alignment is the decoder position that outputs target token i, fed `<s>` and the
tokens before it (teacher forcing).
"""

import numpy as np

from opennmt_lite.data.vocab import BOS_ID, EOS_TOKEN
from opennmt_lite.recorder import recording

# Decoding steps x decoder layers up to which greedy search runs eagerly (see greedy_targets).
EAGER_STEPS = 100


class Target:
    """One target: `tokens` output by the decoder and the `ids` fed to it ([<s>] + the tokens
    before the last), `finished` when the last token is </s>."""

    def __init__(self, tokens, ids, finished):
        self.tokens, self.ids, self.finished = list(tokens), list(ids), bool(finished)


def given_target(tokens, vocabulary):
    """The Target of a tokenized reference translation (then </s>)."""
    ids = [int(i) for i in vocabulary.lookup(tokens)]
    return Target(list(tokens) + [EOS_TOKEN], [BOS_ID] + ids, True)


def greedy_targets(model, source_ids, source_length, vocabulary, maximum_length):
    """The model's own greedy translations (at most `maximum_length` tokens each)."""
    from opennmt_lite import keras_backend
    from opennmt_lite.inference.options import DecodingOptions
    from opennmt_lite.inference.translate import translation_function

    options = DecodingOptions(beam_width=1, maximum_decoding_length=maximum_length)
    # A long loop runs as a tf.function: tracing it costs seconds, but an eager loop of 90 steps
    # through 6 layers takes minutes. A short one (the worked example) runs eagerly. On JAX the
    # loop is always compiled (jax.jit).
    if (keras_backend.selected() != "tensorflow"
            or maximum_length * len(model.decoder.layers) > EAGER_STEPS):
        run = translation_function(model, options)
    else:
        from opennmt_lite.inference.decoding import translate

        run = lambda ids, length: translate(model, ids, length, options)  # noqa: E731
    result = run(np.asarray(source_ids, np.int32), np.asarray(source_length, np.int32))
    targets = []
    for ids, length in zip(np.asarray(result.ids)[:, 0], np.asarray(result.lengths)[:, 0]):
        ids = [int(i) for i in ids[:length]]
        finished = bool(length < maximum_length)  # else stopped at the maximum length, without </s>
        tokens = vocabulary.to_tokens(ids) + ([EOS_TOKEN] if finished else [])
        targets.append(Target(tokens, [BOS_ID] + ids[: len(tokens) - 1], finished))
    return targets


def trace_cross_attention(model, source_ids, source_length, targets):
    """{layer: cross-attention weights [batch, heads, target_time, source_time]} with teacher
    forcing on `targets` (padded to the longest)."""
    source_ids = np.asarray(source_ids, np.int32)
    source_length = np.asarray(source_length, np.int32)
    time = max(len(t.ids) for t in targets)
    target_ids = np.zeros([len(targets), time], np.int32)
    for row, target in zip(target_ids, targets):
        row[: len(target.ids)] = target.ids
    target_length = np.array([len(t.ids) for t in targets], np.int32)
    memory = model.encode(source_ids, source_length, training=False)
    with recording() as tensors:
        model.decode(target_ids, target_length, memory, source_length, training=False)
    attention = {}
    for name, value in tensors.numpy().items():
        parts = name.split("/")
        if len(parts) == 5 and parts[0] == "decoder" and parts[3:] == ["attention", "attention"]:
            attention[int(parts[2])] = value
    return attention
