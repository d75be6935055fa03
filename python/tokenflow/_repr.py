"""One-line reprs of the result objects: the shapes of their arrays and the numbers of their
summaries, never the arrays themselves (a trajectory can hold millions of entries)."""
from __future__ import annotations

import numpy as np


def shape_of(value) -> str:
    """'100x2x2 float64' for an array, 'None' for None, the repr of anything else (cut at 40)."""
    if value is None:
        return "None"
    if isinstance(value, np.ndarray):
        return "x".join(map(str, value.shape)) + f" {value.dtype}" if value.ndim else repr(value.item())
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def number(value) -> str:
    return f"{value:.6g}" if isinstance(value, float) else shape_of(value)


def result_repr(name: str, arrays: dict, summary: dict, keys, extra=()) -> str:
    """``name(status='finished', t_final=1, positions=4096x2 float64, ...)``: the summary's
    ``keys`` that it has, the arrays' shapes, then the ``extra`` parts ("key=text")."""
    parts = [f"{k}={summary[k]!r}" if isinstance(summary[k], str) else f"{k}={number(summary[k])}"
             for k in keys if k in summary]
    parts += [f"{k}={shape_of(v)}" for k, v in arrays.items()]
    return f"{name}(" + ", ".join(parts + list(extra)) + ")"
