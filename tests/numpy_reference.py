"""An independent NumPy (float64) Transformer encoder, written from the equations.

It shares no code with opennmt_lite: weights come in as a dict of arrays named like OpenNMT-tf's
checkpoint entries, and every intermediate is returned by name so that tests can compare the
layers step by step. Conventions (OpenNMT-tf 2.32): layer norm epsilon 1e-3; queries scaled by
depth_per_head ** -0.5 before both content and relative logits; padded keys masked with
logits * m + (1 - m) * float32.min; relative index clip(j - i, -k, k) + k; sinusoidal positions
start at 1 with [sin, cos] halves; pre-norm residuals x + f(norm(x)) with a final norm.
"""

import numpy as np

F32_MIN = float(np.finfo(np.float32).min)


def layer_norm(x, gamma, beta, epsilon=1e-3):
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(var + epsilon) * gamma + beta


def softmax(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def sinusoids(length, depth):
    half = depth // 2
    inv = np.exp(-np.arange(half) * np.log(10000.0) / (half - 1))
    t = np.arange(1, length + 1)[:, None] * inv[None, :]
    return np.concatenate([np.sin(t), np.cos(t)], axis=1)


def attention(x, w, prefix, num_heads, lengths, max_rel, out):
    """Self-attention of x [B, T, D]; records intermediates in `out` under `prefix`."""
    B, T, D = x.shape
    d = D // num_heads

    def proj(name):
        return x @ w[f"{prefix}/linear_{name}/kernel"] + w[f"{prefix}/linear_{name}/bias"]

    def heads(y):  # [B, T, D] -> [B, H, T, d]
        return y.reshape(B, T, num_heads, d).transpose(0, 2, 1, 3)

    q = heads(proj("queries")) * d**-0.5
    k = heads(proj("keys"))
    v = heads(proj("values"))
    out["queries"], out["keys"], out["values"] = q, k, v
    logits = np.einsum("bhid,bhjd->bhij", q, k)
    if max_rel is not None:
        idx = np.clip(np.arange(T)[None, :] - np.arange(T)[:, None], -max_rel, max_rel) + max_rel
        rk = w[f"{prefix}/relative_position_keys"][idx]  # [T, T, d]
        rv = w[f"{prefix}/relative_position_values"][idx]
        out["relative_positions"], out["relative_keys"], out["relative_values"] = idx, rk, rv
        out["content_logits"] = logits
        # explicit loops: the definition, not a vectorised trick
        rel = np.zeros_like(logits)
        for i in range(T):
            for j in range(T):
                rel[:, :, i, j] = q[:, :, i, :] @ rk[i, j]
        out["relative_logits"] = rel
        logits = logits + rel
    out["logits"] = logits
    m = (np.arange(T)[None, :] < np.asarray(lengths)[:, None]).astype(np.float64)[:, None, None, :]
    probs = softmax(logits * m + (1 - m) * F32_MIN)
    out["attention"] = probs
    ctx = np.einsum("bhij,bhjd->bhid", probs, v)
    if max_rel is not None:
        for i in range(T):
            ctx[:, :, i, :] += np.einsum("bhj,jd->bhd", probs[:, :, i, :], rv[i])
    out["heads"] = ctx
    combined = ctx.transpose(0, 2, 1, 3).reshape(B, T, D)
    out["combined_heads"] = combined
    y = combined @ w[f"{prefix}/linear_output/kernel"] + w[f"{prefix}/linear_output/bias"]
    out["output"] = y
    return y


def encoder(ids, lengths, w, num_layers, num_heads, max_rel=None, pre_norm=True):
    """Returns {name: array}: embeddings, scaled inputs, mask, per-layer steps, output."""
    w = {k: np.asarray(v, np.float64) for k, v in w.items()}
    r = {}
    emb = w["embedding"][np.asarray(ids)]
    r["embedded"] = emb
    D = emb.shape[-1]
    x = emb * np.sqrt(D)
    r["scaled_inputs"] = x
    if max_rel is None:
        x = x + sinusoids(x.shape[1], D)[None]
        r["position_encoded_inputs"] = x
    r["mask"] = (np.arange(x.shape[1])[None, :] < np.asarray(lengths)[:, None]).astype(np.float64)
    for n in range(num_layers):
        p = f"layers/{n}"
        att = {}
        norm = lambda name, y: layer_norm(y, w[f"{name}/gamma"], w[f"{name}/beta"])
        if pre_norm:
            h = norm(f"{p}/self_attention/input_layer_norm", x)
            r[f"{p}/self_attention/normalized_input"] = h
        else:
            h = x
        y = attention(h, w, f"{p}/self_attention/layer", num_heads, lengths, max_rel, att)
        for k, v in att.items():
            r[f"{p}/self_attention/{k}"] = v
        x = x + y
        r[f"{p}/self_attention/residual_output"] = x
        if not pre_norm:
            x = norm(f"{p}/self_attention/output_layer_norm", x)
            r[f"{p}/self_attention/normalized_output"] = x
        h = norm(f"{p}/ffn/input_layer_norm", x) if pre_norm else x
        if pre_norm:
            r[f"{p}/ffn/normalized_input"] = h
        inner = np.maximum(h @ w[f"{p}/ffn/layer/inner/kernel"] + w[f"{p}/ffn/layer/inner/bias"], 0)
        r[f"{p}/ffn/inner"] = inner
        y = inner @ w[f"{p}/ffn/layer/outer/kernel"] + w[f"{p}/ffn/layer/outer/bias"]
        r[f"{p}/ffn/output"] = y
        x = x + y
        r[f"{p}/ffn/residual_output"] = x
        if not pre_norm:
            x = norm(f"{p}/ffn/output_layer_norm", x)
            r[f"{p}/ffn/normalized_output"] = x
        r[f"{p}/output"] = x
    if pre_norm:
        x = layer_norm(x, w["layer_norm/gamma"], w["layer_norm/beta"])
    r["output"] = x
    return r
