"""Progress of long calls: the user's callback, or a one-line bar on a terminal.

progress=None (the default) draws a bar on stderr when stderr is a terminal and CI is not set
(as the CLI does); progress=False draws nothing; a callable is called with the core's numbers
(simulate: t, T, steps; sinkhorn: iteration, marginal_error) and may raise to stop the call.
"""
from __future__ import annotations

import math
import os
import sys
import time


class TerminalBar:
    """``label [#####     ]  45% detail`` on stderr, redrawn at most 10 times a second."""

    def __init__(self, label: str, stream=None):
        self.label, self.stream = label, stream or sys.stderr
        self.last, self.drawn = 0.0, False

    def update(self, fraction: float, detail: str = "") -> None:
        now = time.monotonic()
        if now - self.last < 0.1 and fraction < 1.0:
            return
        self.last, self.drawn = now, True
        fraction = min(max(fraction, 0.0), 1.0)
        filled = int(round(30 * fraction))
        self.stream.write(f"\r{self.label} [{'#' * filled}{' ' * (30 - filled)}] {100 * fraction:3.0f}% {detail}\033[K")
        self.stream.flush()

    def close(self) -> None:
        if self.drawn:
            self.stream.write("\n")
            self.stream.flush()


def _terminal() -> bool:
    stream = sys.stderr
    return hasattr(stream, "isatty") and stream.isatty() and not os.environ.get("CI")


def reporter(progress, label: str, fraction, detail):
    """(callable for the core or None, bar or None): the user's callable, a bar's update through
    fraction(*args) and detail(*args), or nothing."""
    if progress is False or (progress is None and not _terminal()):
        return None, None
    if progress is not None:
        from ._inputs import as_callable_or_flag

        return as_callable_or_flag("progress", progress), None
    bar = TerminalBar(label)
    return (lambda *args: bar.update(fraction(*args), detail(*args))), bar


def log_fraction(error: float, tol: float) -> float:
    """Progress of an error falling from 1 to tol, on a log scale (the CLI's)."""
    if not error > tol:
        return 1.0
    return 0.0 if error >= 1.0 else math.log(error) / math.log(tol)


def call_with_progress(function, progress, label: str, fraction, detail, *args):
    """function(*args, callback) with the callback of ``reporter``; the bar is closed afterwards."""
    callback, bar = reporter(progress, label, fraction, detail)
    try:
        return function(*args, callback)
    finally:
        if bar is not None:
            bar.close()
