"""The encoder walk-through as one self-contained HTML page (`run.py inspect --html`).

    write_page(path, steps, sources, targets=None, about={...})

The page holds no link to anything outside itself: its style (page.css) and script (page.js)
are inlined, and the data is one JSON block, `<script type="application/json"
id="inspect-data">`, from which the script draws every heat map (HTML tables for small
tensors, canvases for larger ones). The JSON is what a test reads the values back from:

    {"about": {...}, "sources": [{"tokens", "ids", "length"}], "targets": [{"tokens", ...}] | null,
     "steps": [{"name", "group", "title", "equation", "kind", "tensor": {...} | null}]}

A tensor holds "shape", "dtype", "axes", "stats" (min, max, mean, std of every value) and the
grid to draw: its axes in "display" order (leading ones are panels, the last two rows and
columns) with "lead", "rows", "cols" and element "strides" into the values. A tensor of at most
EXACT_LIMIT values keeps every value exactly ("values": flat, in the tensor's own order, each
the shortest decimal that reads back as the same float32). A larger one is summarised: its
first panels, rows and columns (up to PREVIEW_LIMITS, attention maps whole) quantized to bytes
between "lo" and "hi" ("preview": base64, in display order; 255 marks a masked value).
"""

import base64
import html
import json
import os

import numpy as np

from opennmt_lite.files import atomic_write
from opennmt_lite.inspection.steps import FLOAT32_MIN

EXACT_LIMIT = 4096
PREVIEW_LIMITS = {"tensor": (16, 64, 64), "attention": (256, 256, 256), "alignment": (256, 256, 256)}
_HERE = os.path.dirname(os.path.abspath(__file__))


def statistics(value):
    as_float = np.asarray(value, np.float64)
    if not as_float.size:
        return None
    return {"min": float(as_float.min()), "max": float(as_float.max()),
            "mean": float(as_float.mean()), "std": float(as_float.std())}


def exact_values(value):
    """Flat values as JSON numbers (floats: the shortest decimal of the float32); None for
    NaN and infinities, which JSON cannot hold."""
    flat = np.asarray(value).reshape(-1)
    if np.issubdtype(flat.dtype, np.integer) or flat.dtype == bool:
        return [int(v) for v in flat]
    flat = flat.astype(np.float32)
    finite = np.isfinite(flat)
    return [float(text) if ok else None for text, ok in zip(flat.astype(str), finite)]


def grid(value, display):
    """(display order, leading shape, rows, columns, element strides in display order)."""
    value = np.asarray(value)
    rank = value.ndim
    display = list(display if display is not None else range(rank))
    strides = [int(np.prod(value.shape[axis + 1:])) for axis in range(rank)]
    shape = [value.shape[axis] for axis in display]
    display_strides = [strides[axis] for axis in display]
    # Rank 0 or 1: one row (and one column).
    while len(shape) < 2:
        shape.insert(0, 1)
        display_strides.insert(0, 0)
    return display, shape[:-2], shape[-2], shape[-1], display_strides


def preview(value, display, kind):
    """The first panels, rows and columns of `value` in display order, quantized to bytes."""
    value = np.asarray(value, np.float32)
    order, lead, rows, cols, _ = grid(value, display)
    grid_values = np.transpose(value, order) if value.ndim >= 2 else value
    grid_values = grid_values.reshape([int(np.prod(lead)), rows, cols])
    max_panels, max_rows, max_cols = PREVIEW_LIMITS.get(kind, PREVIEW_LIMITS["tensor"])
    kept = grid_values[:max_panels, :max_rows, :max_cols]
    masked = ~np.isfinite(kept) | (kept <= FLOAT32_MIN / 2)
    shown = kept[~masked]
    lo, hi = (float(shown.min()), float(shown.max())) if shown.size else (0.0, 0.0)
    scale = 254.0 / (hi - lo) if hi > lo else 0.0
    codes = np.where(masked, 255, np.rint((np.where(masked, lo, kept) - lo) * scale)).astype(np.uint8)
    return {"panels": kept.shape[0], "rows": kept.shape[1], "cols": kept.shape[2], "lo": lo, "hi": hi,
            "bytes": base64.b64encode(codes.tobytes()).decode("ascii")}


def tensor_data(step):
    value = np.asarray(step.value)
    display, lead, rows, cols, strides = grid(value, step.display)
    data = {"shape": list(value.shape), "dtype": value.dtype.name, "axes": list(step.axes),
            "display": display, "lead": lead, "rows": rows, "cols": cols, "strides": strides,
            "stats": statistics(value)}
    if value.size <= EXACT_LIMIT:
        data["values"] = exact_values(value)
    else:
        data["preview"] = preview(value, step.display, step.kind)
    return data


def step_data(step):
    return {"name": step.name, "group": step.group, "title": step.title, "equation": step.equation,
            "kind": step.kind, "tensor": None if step.value is None else tensor_data(step)}


def page_data(steps, sources, targets=None, about=None):
    return {
        "about": about or {},
        "sources": [{"tokens": list(tokens), "ids": [int(i) for i in ids], "length": len(tokens)}
                    for tokens, ids in sources],
        "targets": None if targets is None else [
            {"tokens": t.tokens, "ids": [int(i) for i in t.ids], "finished": t.finished}
            for t in targets],
        "steps": [step_data(step) for step in steps],
    }


def _asset(name):
    with open(os.path.join(_HERE, name), encoding="utf-8") as f:
        return f.read()


def render(data):
    """The page's text: inline style, the JSON data block, inline script."""
    # "</" written as "<\/" (the same JSON string) so that no token can close the script element.
    payload = json.dumps(data, ensure_ascii=False, separators=(",", ":")).replace("</", "<\\/")
    title = html.escape(data["about"].get("title", "opennmt-lite encoder walk-through"))
    return (f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n<title>{title}</title>\n'
            f'<style>\n{_asset("page.css")}</style>\n</head>\n<body data-status="loading">\n'
            f'<div id="app"><p>This page draws its content with JavaScript.</p></div>\n'
            f'<pre id="script-errors" hidden></pre>\n'
            f'<script type="application/json" id="inspect-data">{payload}</script>\n'
            f'<script>\n{_asset("page.js")}</script>\n</body>\n</html>\n')


def write_page(path, steps, sources, targets=None, about=None):
    """Writes the page to `path`; returns its size in bytes."""
    text = render(page_data(steps, sources, targets, about))
    with atomic_write(path, encoding="utf-8") as f:  # a full disk leaves no half page
        f.write(text)
    return len(text.encode("utf-8"))
