"""`run.py inspect`: run the encoder on one sentence and show every intermediate tensor.

API: `trace_encoder(model, source_ids, source_length)` -> {name: array}, in computation order:
source_embedded, encoder/scaled_inputs, encoder/mask, then per layer
encoder/layers/<i>/self_attention/{normalized_input, queries, keys, values, relative_positions,
relative_keys, relative_values, content_logits, relative_logits, logits, attention, heads,
combined_heads, output, residual_output}, encoder/layers/<i>/ffn/{normalized_input, inner,
output, residual_output}, encoder/layers/<i>/output, and encoder/output.
(Post-norm models record normalized_output instead of normalized_input; sinusoidal models record
position_encoded_inputs and no relative_* tensors.)
"""

import logging
import os

import numpy as np

from opennmt_lite.files import atomic_write
from opennmt_lite.recorder import recording

logger = logging.getLogger("opennmt_lite")


def trace_encoder(model, source_ids, source_length):
    """Every intermediate tensor of `model.encode` on one batch, as NumPy arrays.

    The model runs eagerly here: inside a `tf.function` nothing would be recorded.
    """
    with recording() as tensors:
        model.encode(np.asarray(source_ids, np.int32), np.asarray(source_length, np.int32),
                     training=False)
    return tensors.numpy()


def trace_language_model(model, ids, length):
    """Every intermediate tensor of a LanguageModel's forward pass on prefixes ids [batch, time]
    (embedded, decoder/scaled_inputs, decoder/position_encoded_inputs, decoder/mask [batch,
    query, key], decoder/layers/<i>/..., decoder/output, decoder/logits), eagerly."""
    with recording() as tensors:
        model(np.asarray(ids, np.int32), np.asarray(length, np.int32), training=False)
    return tensors.numpy()


def summarize(name, value, show_values=False):
    value = np.asarray(value)
    line = f"{name:<52} {str(list(value.shape)):<18} {value.dtype.name:<8}"
    if value.size:
        as_float = value.astype(np.float64)
        line += (f" min {as_float.min():>10.4g}  max {as_float.max():>10.4g}"
                 f"  mean {as_float.mean():>10.4g}  std {as_float.std():>10.4g}")
    if show_values:
        with np.printoptions(precision=4, suppress=True, threshold=200, linewidth=110):
            line += "\n" + np.array2string(value)
    return line


def save_attention_maps(tensors, tokens, directory):
    """One PNG per layer and head of the encoder's (a language model: the decoder's)
    self-attention weights; returns the paths."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    os.makedirs(directory, exist_ok=True)
    paths = []
    for name, value in tensors.items():
        if not name.endswith("self_attention/attention"):
            continue
        stack, layer = name.split("/")[0], name.split("/")[2]
        for head in range(value.shape[1]):
            weights = value[0, head]
            figure, axis = plt.subplots(figsize=(1 + 0.5 * len(tokens), 1 + 0.5 * len(tokens)))
            image = axis.imshow(weights, cmap="viridis", vmin=0.0, vmax=1.0)
            axis.set_xticks(range(len(tokens)), tokens, rotation=90)
            axis.set_yticks(range(len(tokens)), tokens)
            axis.set_xlabel("key")
            axis.set_ylabel("query")
            axis.set_title(f"{stack} layer {layer}, head {head}")
            figure.colorbar(image, ax=axis, fraction=0.046)
            figure.tight_layout()
            path = os.path.join(directory, f"{stack}_layer{layer}_head{head}.png")
            try:
                with atomic_write(path, "wb") as stream:  # a full disk leaves no half image
                    figure.savefig(stream, dpi=100, format="png")
            finally:
                plt.close(figure)
            paths.append(path)
    return paths
