"""The encoder's computation as a list of described steps, for the HTML walk-through.

`walk(tensors, hyper)` turns the recording of `trace_encoder` ({name: array}, in computation
order) and the model's hyper-parameters (`Transformer.hyperparameters`, a `ModelHyperparameters`)
into `Step`s, in the same order: each with its operation, its equation in plain text and the
names of its axes. Between the recorded tensors it inserts what the recording cannot show: dropout (the identity
at inference) as a note, and the mask applied to the logits, computed here from the recorded
logits and mask (`.../masked_logits`, the exact values the softmax receives).

Axis names: batch, time (a source position), head, depth, inner (feed-forward units), query,
key (positions of an attention matrix), target (a target position), distance (a row of the
relative position tables).
"""

import dataclasses
import re
import typing

import numpy as np

FLOAT32_MIN = float(np.finfo(np.float32).min)


@dataclasses.dataclass
class Step:
    name: str            # the recorded name (or a derived one, or a note's)
    group: str           # "input", "layer <i>", "output", "alignment <i>"
    title: str
    equation: str
    axes: tuple = ()
    value: typing.Any = None  # None: a note without a tensor
    display: tuple = None     # axis order to draw: leading axes panels, then rows, then columns
    kind: str = "tensor"      # "tensor", "attention", "alignment" or "note"


def _layer_steps(hyper):
    """{recorded name after `layers/<i>/`: (title, equation, axes, display, kind)}."""
    k = hyper.maximum_relative_position
    d_head = hyper.num_units // hyper.num_heads
    norm = "γ · (x − mean(x)) / √(var(x) + 0.001) + β, over depth"
    relative = k is not None
    h = "h" if hyper.pre_norm else "x"  # a sub-layer's input: normalized first in pre-norm
    bthd, bhqk = ("batch", "head", "time", "depth"), ("batch", "head", "query", "key")
    return {
        "self_attention/normalized_input": (
            "Layer norm before self-attention", f"h = {norm}", ("batch", "time", "depth"), None, "tensor"),
        "self_attention/queries": (
            "Query projection, split into heads, scaled",
            f"Q = split_heads({h} · W_q + b_q) · {d_head}^-0.5   (depth per head {d_head})", bthd, None, "tensor"),
        "self_attention/keys": ("Key projection, split into heads", f"K = split_heads({h} · W_k + b_k)",
                                bthd, None, "tensor"),
        "self_attention/values": ("Value projection, split into heads", f"V = split_heads({h} · W_v + b_v)",
                                  bthd, None, "tensor"),
        "self_attention/relative_positions": (
            "Relative position indices: distance, clipped, shifted",
            f"R[i, j] = clip(j − i, −{k}, {k}) + {k}", ("query", "key"), None, "tensor"),
        "self_attention/relative_keys": (
            "Relative key representations (gathered)", "A_K[i, j, :] = relative_position_keys[R[i, j], :]",
            ("query", "key", "depth"), (2, 0, 1), "tensor"),
        "self_attention/relative_values": (
            "Relative value representations (gathered)",
            "A_V[i, j, :] = relative_position_values[R[i, j], :]", ("query", "key", "depth"), (2, 0, 1), "tensor"),
        "self_attention/content_logits": (
            "Dot products of queries and keys", "S_c[b, h, i, j] = Q[b, h, i, :] · K[b, h, j, :]",
            bhqk, None, "tensor"),
        "self_attention/relative_logits": (
            "Dot products of queries and relative keys", "S_r[b, h, i, j] = Q[b, h, i, :] · A_K[i, j, :]",
            bhqk, None, "tensor"),
        "self_attention/logits": (
            "Logits", "S = S_c + S_r" if relative else "S[b, h, i, j] = Q[b, h, i, :] · K[b, h, j, :]",
            bhqk, None, "tensor"),
        "self_attention/attention": (
            "Softmax: attention weights", "P[b, h, i, :] = softmax(S'[b, h, i, :])", bhqk, None, "attention"),
        "self_attention/heads": (
            "Weighted sum of the values" + (" and relative values" if relative else ""),
            "O[b, h, i, :] = Σ_j P[b, h, i, j] · " + ("(V[b, h, j, :] + A_V[i, j, :])" if relative
                                                     else "V[b, h, j, :]"), bthd, None, "tensor"),
        "self_attention/combined_heads": (
            "Heads combined", "C[b, t, :] = concat(O[b, 0, t, :], …, O[b, H−1, t, :])",
            ("batch", "time", "depth"), None, "tensor"),
        "self_attention/output": ("Output projection", "Y = C · W_o + b_o", ("batch", "time", "depth"),
                                  None, "tensor"),
        "self_attention/residual_output": (
            "Dropout and residual connection",
            f"x = x + dropout(Y)   (rate {hyper.dropout}; the identity at inference)",
            ("batch", "time", "depth"), None, "tensor"),
        "self_attention/normalized_output": (
            "Layer norm after self-attention (post-norm)", f"x = {norm}", ("batch", "time", "depth"), None, "tensor"),
        "ffn/normalized_input": ("Layer norm before the feed-forward network", f"h = {norm}",
                                 ("batch", "time", "depth"), None, "tensor"),
        "ffn/inner": (
            "Feed-forward inner layer",
            f"F = {hyper.ffn_activation}({h} · W_1 + b_1)   (ffn dropout {hyper.ffn_dropout}: "
            "the identity at inference)", ("batch", "time", "inner"), None, "tensor"),
        "ffn/output": ("Feed-forward outer layer", "Y = F · W_2 + b_2", ("batch", "time", "depth"), None, "tensor"),
        "ffn/residual_output": (
            "Dropout and residual connection",
            f"x = x + dropout(Y)   (rate {hyper.dropout}; the identity at inference)",
            ("batch", "time", "depth"), None, "tensor"),
        "ffn/normalized_output": ("Layer norm after the feed-forward network (post-norm)", f"x = {norm}",
                                  ("batch", "time", "depth"), None, "tensor"),
        "output": ("Layer output", "x_next = x", ("batch", "time", "depth"), None, "tensor"),
    }


def _input_steps(hyper, scope="encoder", learned_positions=False):
    units = hyper.num_units
    steps = {
        "source_embedded": ("Embedding lookup", "E[b, t, :] = embedding[ids[b, t], :]",
                            ("batch", "time", "depth")),
        "encoder/scaled_inputs": ("Scaling by √num_units", f"x = E · √{units} = E · {np.sqrt(units):.6g}",
                                  ("batch", "time", "depth")),
        "encoder/position_encoded_inputs": (
            "Sinusoidal position encoding",
            "x[b, t, :] = x[b, t, :] + [sin((t + 1) · ω), cos((t + 1) · ω)],  ω_i = 10000^(−i / (depth/2 − 1))",
            ("batch", "time", "depth")),
        "encoder/mask": ("Sequence mask", "m[b, t] = 1 if t < length[b] else 0", ("batch", "time")),
    }
    if scope == "encoder":
        return steps
    # a language model's decoder (opennmt_lite/models/language_model.py)
    learned = ("Learned position embedding",
               "x[b, t, :] = x[b, t, :] + position_embedding[min(t + 1, maximum_position), :]",
               ("batch", "time", "depth"))
    return {
        "embedded": steps["source_embedded"],
        "decoder/scaled_inputs": steps["encoder/scaled_inputs"],
        "decoder/position_encoded_inputs": (
            learned if learned_positions
            else steps["encoder/position_encoded_inputs"]),
        "decoder/mask": ("Causal mask over the real positions",
                         "m[b, i, j] = 1 if j ≤ i and j < length[b] else 0",
                         ("batch", "query", "key")),
    }


def _note(name, group, title, equation):
    return Step(name, group, title, equation, kind="note")


def walk(tensors, hyper, scope="encoder", learned_positions=False):
    """The steps of one encoder recording, in computation order (see the module docstring);
    `scope` "decoder": a language model's recording (`trace_language_model`: the causal mask,
    the final layer norm and the output logits; `learned_positions`: its position table)."""
    inputs, layer_steps = _input_steps(hyper, scope, learned_positions), _layer_steps(hyper)
    steps = []
    mask = tensors.get(f"{scope}/mask")
    for name, value in tensors.items():
        match = re.fullmatch(scope + r"/layers/(\d+)/(.+)", name)
        if match:
            group, tail = f"layer {match.group(1)}", match.group(2)
            title, equation, axes, display, kind = layer_steps.get(tail, (tail, "", (), None, "tensor"))
        elif name in inputs:
            group, (title, equation, axes), display, kind = "input", inputs[name], None, "tensor"
        elif name == "decoder/logits":
            group, axes, display, kind = "output", ("batch", "time", "vocabulary"), None, "tensor"
            title, equation = ("Output layer: next-token logits",
                               "z = y · embeddingᵀ + b   (the embedding, reused)")
        elif name == f"{scope}/output":
            group, axes, display, kind = "output", ("batch", "time", "depth"), None, "tensor"
            title, equation = (("Final layer norm", "y = γ · (x − mean(x)) / √(var(x) + 0.001) + β")
                               if hyper.pre_norm else ("Encoder output", "y = x (post-norm: already normalized)"))
        else:
            group, title, equation, axes, display, kind = "other", name, "", (), None, "tensor"
        if name == f"{scope}/mask":  # the inputs' dropout comes before the mask in the encoder
            steps.append(_note("encoder/dropout", "input", "Dropout",
                               f"x = dropout(x)   (rate {hyper.dropout}): the identity at inference"))
        if len(axes) != np.ndim(value):
            axes = tuple(f"axis {i}" for i in range(np.ndim(value)))
        steps.append(Step(name, group, title, equation, axes, value, display, kind))
        if name.endswith("self_attention/logits") and mask is not None:
            steps.append(masked_logits(name, group, value, mask))
        if name.endswith("self_attention/attention"):
            steps.append(_note(name.replace("/attention", "/attention_dropout"), group, "Attention dropout",
                               f"P = dropout(P)   (rate {hyper.attention_dropout}): the identity at inference"))
    return steps


def masked_logits(name, group, logits, mask):
    """The logits as the softmax receives them: padded keys set to float32.min."""
    m = np.asarray(mask, np.float32)
    # ([batch, key], or a language model's [batch, query, key])
    m = m[:, np.newaxis, np.newaxis, :] if m.ndim == 2 else m[:, np.newaxis, :, :]
    value = np.asarray(logits, np.float32) * m + (1.0 - m) * np.float32(FLOAT32_MIN)
    return Step(name.replace("/logits", "/masked_logits"), group, "Mask applied to the logits",
                "S'[b, h, i, j] = S[b, h, i, j] · m[b, j] + (1 − m[b, j]) · float32.min   "
                "(float32.min = −3.4028235e38; shown hatched)",
                ("batch", "head", "query", "key"), value, None, "tensor")


def alignment_steps(attention_by_layer):
    """Steps for the decoder's cross-attention: {layer: [batch, head, target, source]}."""
    return [Step(f"decoder/layers/{layer}/attention/attention", f"alignment {layer}",
                 f"Cross-attention of decoder layer {layer}",
                 "P[b, h, i, :] = softmax(Q_target[b, h, i, :] · K_source[b, h, :, :]ᵀ, padded source masked)",
                 ("batch", "head", "target", "key"), value, None, "alignment")
            for layer, value in sorted(attention_by_layer.items())]
