"""Optimal transport between weighted point clouds: entropic (Sinkhorn) and exact."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

from . import _tokenflow


@dataclass
class OTResult:
    """A transport plan and its dual potentials (DESIGN.md section 1, "Optimal transport").

    plan            n x m coupling pi (None when sinkhorn was asked not to form it)
    f, g            dual potentials (n and m)
    cost            <C, pi>
    objective       sinkhorn: <C, pi> + epsilon KL(pi | a b^T); exact: equal to cost
    iterations      sinkhorn iterations (None for exact OT)
    marginal_error  |pi 1 - a|_1 + |pi^T 1 - b|_1
    converged       sinkhorn: marginal_error < tol was reached (exact: True)
    a, b            the weights used (normalized to sum 1; uniform when not given)
    """

    plan: Optional[np.ndarray]
    f: np.ndarray
    g: np.ndarray
    cost: float
    objective: float
    iterations: Optional[int]
    marginal_error: float
    converged: bool
    a: np.ndarray
    b: np.ndarray


def sinkhorn(x, y, a=None, b=None, epsilon: float = 0.1, cost: str = "sqeuclidean", tol: float = 1e-9,
             max_iter: int = 10000, plan: Optional[bool] = None) -> OTResult:
    """Entropic optimal transport by the log-domain Sinkhorn loop.

    Solves  min_{pi in Pi(a, b)} <C, pi> + epsilon KL(pi | a b^T)  for C_ij = c(x_i, y_j), with
    cost "sqeuclidean" |x - y|^2, "euclidean" |x - y| or "dot" -<x, y>; stops when the marginal
    error is below tol. x (n x p) and y (m x p) are float64 arrays (others are converted once);
    a and b default to uniform and are normalized. Up to 2^24 pairs the cost matrix is held in
    memory and the plan returned; above, C is recomputed on the fly and the plan is formed only
    when plan=True. Runs without the GIL; Ctrl-C stops it (KeyboardInterrupt).

    >>> import tokenflow
    >>> x = np.array([[0.0], [1.0]]); y = np.array([[0.0], [1.0]])
    >>> r = tokenflow.sinkhorn(x, y, epsilon=0.01, tol=1e-12)
    >>> np.round(r.plan, 6).tolist(), r.marginal_error < 1e-12, r.converged
    ([[0.5, 0.0], [0.0, 0.5]], True, True)
    >>> round(r.cost, 9)
    0.0
    """
    out = _tokenflow.sinkhorn(x, y, a, b, float(epsilon), cost, float(tol), int(max_iter), plan)
    return OTResult(plan=out["plan"], f=out["f"], g=out["g"], cost=out["cost"], objective=out["objective"],
                    iterations=out["iterations"], marginal_error=out["marginal_error"], converged=out["converged"],
                    a=out["a"], b=out["b"])


def exact_ot(x, y, a=None, b=None, cost: str = "sqeuclidean") -> OTResult:
    """Exact optimal transport (LEMON's network simplex): min_{pi in Pi(a, b)} <C, pi>.

    Same arguments as :func:`sinkhorn`; the plan is always returned (n x m), with dual
    potentials f_i + g_j <= C_ij, equal on the plan's support.

    >>> import tokenflow
    >>> x = np.array([[0.0], [1.0], [2.0]]); y = np.array([[2.0], [0.0], [1.0]])
    >>> r = tokenflow.exact_ot(x, y)
    >>> (r.plan * 3).round(12).tolist(), round(r.cost, 12)
    ([[0.0, 1.0, 0.0], [0.0, 0.0, 1.0], [1.0, 0.0, 0.0]], 0.0)
    >>> tokenflow.exact_ot(x, y, cost="euclidian")
    Traceback (most recent call last):
    ...
    tokenflow.InputError: cost: unknown cost 'euclidian'; one of: sqeuclidean, euclidean, dot
    """
    out = _tokenflow.exact_ot(x, y, a, b, cost)
    return OTResult(plan=out["plan"], f=out["f"], g=out["g"], cost=out["cost"], objective=out["cost"],
                    iterations=None, marginal_error=out["marginal_error"], converged=True, a=out["a"], b=out["b"])
