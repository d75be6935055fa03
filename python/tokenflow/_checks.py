"""What the package does instead of returning a non-result (docs/design.md section 3).

- A result that is not finite, or a run that computed no result (status "failed"), raises
  FloatingPointError with the reason; the CLI exits with code 1 on the same input.
- An iterative solve that stopped short of its tolerance (Sinkhorn at max_iter, a dopri5 run that
  stalled) issues :class:`ConvergenceWarning` with the reached error and the tolerance, and returns
  what it reached; the CLI prints the same line on stderr.
"""
from __future__ import annotations

import warnings

import numpy as np


class ConvergenceWarning(UserWarning):
    """An iterative solve stopped before reaching its tolerance (Sinkhorn at max_iter, a dopri5 run
    that stalled).

    The result is returned as reached; its summary says how far it got (the CLI prints the same line
    on stderr). A UserWarning.

    Examples
    --------
    >>> import warnings, numpy as np, tokenflow
    >>> x = np.array([[0.0], [1.0]])
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     r = tokenflow.sinkhorn(x, x + 0.5, epsilon=0.01, max_iter=1)
    >>> caught[0].category.__name__, r.converged, r.summary["status"]
    ('ConvergenceWarning', False, 'max_iter')
    """


ConvergenceWarning.__module__ = "tokenflow"


class SummationWarning(UserWarning):
    """``summation = "fast"`` summed so many rows exactly that the dense kernel would have been
    faster.

    Its grid could not certify those rows at summation_tol (tokens spread wide). The result is
    exact to summation_tol all the same; ``summary["summation"]["exact_row_share"]`` gives the
    share, and ``summation = "auto"`` (the default) or ``"dense"`` avoids the slow path. The CLI
    prints the same line on stderr. A UserWarning.

    Examples
    --------
    To turn it into an error in a script::

        import warnings, tokenflow
        warnings.simplefilter("error", tokenflow.SummationWarning)
    """


SummationWarning.__module__ = "tokenflow"


class NormalizationWarning(UserWarning):
    """Weights that do not sum to 1 (beyond rounding) were given: they are divided by their sum.

    As ``tokenflow ot`` does. POT would refuse them; tokenflow warns and goes on (the result's
    ``a`` and ``b`` are the normalized weights). Not issued for unbalanced transport
    (``marginal_penalty``), whose masses are data. A UserWarning.

    Examples
    --------
    >>> import warnings, numpy as np, tokenflow
    >>> x = np.array([[0.0], [1.0]])
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     r = tokenflow.exact_ot(x, x, a=[1.0, 3.0])
    >>> caught[0].category.__name__, r.a.tolist()
    ('NormalizationWarning', [0.25, 0.75])
    """


NormalizationWarning.__module__ = "tokenflow"


class TrainingWarning(UserWarning):
    """Training went wrong while it ran.

    Issued as it happens, as the CLI prints "tokenflow: warning: ..." lines: when the test loss rose
    far above its best (a collapse), or when a non-finite loss or gradient stopped the run (status
    "failed"). The result's ``best_model`` keeps the model of the lowest test loss (best_model.bin);
    ``summary["warnings"]`` lists every warning of the run. A UserWarning.

    Examples
    --------
    To stop at the first one in a script::

        import warnings, tokenflow
        with warnings.catch_warnings():
            warnings.simplefilter("error", tokenflow.TrainingWarning)
            result = tokenflow.train(config)
    """


TrainingWarning.__module__ = "tokenflow"


def warn_summary(summary: dict, stacklevel: int = 3) -> None:
    """Issue each line of summary["warnings"] of a simulation (the lines the CLI prints after
    "tokenflow: warning: ") as a SummationWarning."""
    for message in summary.get("warnings", []):
        warnings.warn(message, SummationWarning, stacklevel=stacklevel + 1)


def warn_convergence(message: str, stacklevel: int = 3) -> None:
    """Issue ``message`` (the CLI's warning line, without "tokenflow: warning: ") as a ConvergenceWarning."""
    if message:
        warnings.warn(message, ConvergenceWarning, stacklevel=stacklevel + 1)


def check_status(summary: dict, what: str, stacklevel: int = 3) -> None:
    """Raise FloatingPointError for status "failed"; warn (ConvergenceWarning) for "stalled"."""
    status = summary.get("status")
    if status == "failed":
        raise FloatingPointError(f"{what} failed: {summary.get('reason', 'no result')}")
    if status == "stalled":
        warn_convergence(f"{what} stalled: {summary.get('reason', '')}", stacklevel + 1)


def require_finite(what: str, **arrays) -> None:
    """Raise FloatingPointError naming the first array (keyword: name) with a non-finite entry."""
    for name, value in arrays.items():
        if value is None:
            continue
        a = np.asarray(value)
        if a.dtype.kind in "fc" and not np.all(np.isfinite(a)):
            bad = int(np.size(a) - np.count_nonzero(np.isfinite(a)))
            raise FloatingPointError(f"{what}: {name} has {bad} non-finite entries (of {a.size})")
