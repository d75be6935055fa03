"""POT's ``ot.unbalanced`` under POT's names (``tokenflow.pot.unbalanced``): unbalanced entropic OT.

POT 0.8's problem (``ot.unbalanced.sinkhorn_unbalanced(a, b, M, reg, reg_m)``):

    min_{gamma >= 0} <gamma, M> + reg Omega(gamma) + reg_m KL(gamma 1 | a) + reg_m KL(gamma^T 1 | b),

solved by the scaling iteration u = (a / K v)^fi, v = (b / K^T u)^fi, fi = reg_m / (reg_m + reg),
K = exp(-M / reg), whose fixed point is the minimizer for Omega(gamma) = sum_ij gamma_ij (log gamma_ij
- 1) (the stationarity condition M + reg log gamma + reg_m log(gamma 1 / a) + reg_m log(gamma^T 1 /
b) = 0; POT's docstring writes sum gamma log gamma). tokenflow's unbalanced solver
(``tokenflow.sinkhorn(..., marginal_penalty=rho)``, docs/design.md) regularizes with
reg KL(gamma | a b^T) = reg Omega(gamma) - reg <gamma 1, log a> - reg <gamma^T 1, log b> + reg m(a)
m(b), so POT's problem on M is tokenflow's on M'_ij = M_ij + reg (log a_i + log b_j): the same plan,
computed by the log-domain loop (accelerated, epsilon-scaled where the cost range asks for it),
whatever reg. A zero weight is an empty bin in both (POT's scaling u_i = (0 / Kv_i)^fi is 0).

Where tokenflow differs from POT:

- It stops when the plan's marginals are within stopThr (l1) of their fixed point's,
  |gamma 1 - a e^{-f/reg_m}|_1 + |gamma^T 1 - b e^{-g/reg_m}|_1 < stopThr (POT: the relative change
  of the scalings), and warns with :class:`tokenflow.ConvergenceWarning` at numItermax.
- Every ``method`` POT names ("sinkhorn", "sinkhorn_stabilized", "sinkhorn_reg_scaling") runs the
  same log-domain solver; POT's per-method keyword arguments (tau, ...) are accepted and not used.
- ``log["err"]`` holds the final marginal error; ``log["logu"]``, ``log["logv"]`` are
  log(u + 1e-300) and log(v + 1e-300) as in POT (computed without forming u and v, which overflow
  at small reg); ``log["niter"]`` the iterations.
"""
from __future__ import annotations

import warnings

import numpy as np

from .. import transport as _transport
from .._checks import ConvergenceWarning
from .._docstrings import shared
from .._inputs import as_array, as_float, as_int, input_error
from . import _like, _missing_name, _verbose_progress

__all__ = ["sinkhorn_unbalanced", "sinkhorn_unbalanced2"]
__getattr__ = _missing_name("unbalanced", __all__)

_METHODS = ("sinkhorn", "sinkhorn_stabilized", "sinkhorn_reg_scaling")
_LOG_TINY = float(np.log(1e-300))  # POT's log(u + 1e-300)


# The parameters of both functions (numpydoc): POT's arguments.
_PARAMETERS = """
a : array_like of shape (n,)
    Source histogram (unnormalized; an empty list: uniform).
b : array_like of shape (m,) or (m, k)
    Target histogram, or k of them as columns (an empty list: uniform).
M : array_like of shape (n, m)
    The cost matrix; ``+inf`` forbids a pair (no mass there, as POT's kernel is 0 there).
reg : float
    The entropic regularization.
reg_m : float
    The marginal penalty (rho).
method : str, default "sinkhorn"
    POT's method names; every one solves the same problem with tokenflow's log-domain loop.
numItermax : int, default 1000
    The iteration budget.
stopThr : float, default 1e-6
    The marginal error to reach.
verbose : bool, default False
    Print the iterations as POT does.
log : bool, default False
    Also return a dict (err, logu, logv, niter).
**kwargs
    POT's other keyword arguments, accepted and not used.
"""


def _histogram(value, name: str, size: int, ndims=(1,)):
    """POT's weights: None or an empty list mean uniform (1 / size)."""
    array = as_array(name, value, ndims, nonempty=False)  # empty: uniform, as POT
    if array is None or array.size == 0:
        return np.full(size, 1.0 / size)
    return array


def _problem(a, b, M):
    M_ = as_array("M", M, (2,), allow_none=False)
    a_ = _histogram(a, "a", M_.shape[0])
    b_ = _histogram(b, "b", M_.shape[1], (1, 2))
    if a_.shape != (M_.shape[0],) or b_.shape[0] != M_.shape[1]:
        raise input_error("M", f"has shape {M_.shape}, which does not match a {a_.shape} and b {b_.shape}; "
                               "accepted: M of shape (len(a), len(b))")
    return a_, b_, M_


def _shifted_cost(M, a, b, reg):
    """M + reg (log a_i + log b_j), POT's problem as tokenflow's (module docstring); rows and columns
    of empty bins keep M (they carry no mass either way)."""
    with np.errstate(divide="ignore"):
        la = np.where(a > 0, np.log(np.where(a > 0, a, 1.0)), 0.0)
        lb = np.where(b > 0, np.log(np.where(b > 0, b, 1.0)), 0.0)
    return M + reg * la[:, None] + reg * lb[None, :]


def _solve(a, b, M, reg, reg_m, numItermax, stopThr, verbose):
    reg, reg_m = as_float("reg", reg), as_float("reg_m", reg_m)
    if not (reg > 0 and np.isfinite(reg)):
        raise input_error("reg", f"is {reg!r}; accepted: a positive, finite number")
    if not reg_m > 0:
        raise input_error("reg_m", f"is {reg_m!r}; accepted: a positive number (inf: balanced)")
    result = _transport.sinkhorn(a=a, b=b, M=_shifted_cost(M, a, b, reg), epsilon=reg, marginal_penalty=reg_m,
                                 tol=as_float("stopThr", stopThr), max_iter=as_int("numItermax", numItermax, 1),
                                 epsilon_start="auto", progress=_verbose_progress(verbose))
    plan = result.plan
    carried = plan > 0  # a forbidden pair (+inf in M) carries no mass and adds nothing (not 0 * inf)
    value = float(np.sum(plan[carried] * M[carried]))  # POT's <gamma, M>, on the original M
    with np.errstate(divide="ignore"):
        logu = np.where(a > 0, np.logaddexp(result.f / reg, _LOG_TINY), _LOG_TINY)
        logv = np.where(b > 0, np.logaddexp(result.g / reg, _LOG_TINY), _LOG_TINY)
    log = {"err": [result.marginal_error], "logu": logu, "logv": logv, "niter": result.iterations,
           "converged": result.converged}
    return plan, value, log


def _method(method, message):
    name = str(method).lower()
    if name not in _METHODS:
        raise ValueError(message % method)
    if name == "sinkhorn_reg_scaling":
        warnings.warn("Method not implemented yet. Using classic Sinkhorn Knopp")


def _values(a, b, M, reg, reg_m, numItermax, stopThr, verbose, log):
    """Several target histograms (b of shape (m, k)): the k values <gamma_k, M>, as POT."""
    values, logs = [], []
    for k in range(b.shape[1]):
        _, value, lg = _solve(a, np.ascontiguousarray(b[:, k]), M, reg, reg_m, numItermax, stopThr, verbose)
        values.append(value)
        logs.append(lg)
    values = np.array(values)
    if log:
        return values, {"err": [lg["err"][-1] for lg in logs], "logu": np.stack([lg["logu"] for lg in logs], 1),
                        "logv": np.stack([lg["logv"] for lg in logs], 1), "niter": [lg["niter"] for lg in logs]}
    return values


def _typed(result, M):
    return _like(result, M)


@shared(parameters=_PARAMETERS)
def sinkhorn_unbalanced(a, b, M, reg, reg_m, method="sinkhorn", numItermax=1000, stopThr=1e-6, verbose=False,
                        log=False, **kwargs):
    """The plan of POT's ``ot.unbalanced.sinkhorn_unbalanced(a, b, M, reg, reg_m)``.

    The argmin over ``gamma >= 0`` of ``<gamma, M> + reg sum gamma log gamma + reg_m KL(gamma 1 |
    a) + reg_m KL(gamma^T 1 | b)``.

    Parameters
    ----------
    {{parameters}}

    Returns
    -------
    numpy.ndarray
        The plan (n x m); with b of shape (m, k), the k values ``<gamma_k, M>`` (as POT). With
        ``log=True``, a pair (that, the log dict).

    Raises
    ------
    ValueError
        An unknown method (as POT).
    tokenflow.InputError
        Bad histograms or costs.

    Warns
    -----
    tokenflow.ConvergenceWarning
        Stopped at numItermax.

    Examples
    --------
    >>> import tokenflow.pot as ot
    >>> np.round(ot.unbalanced.sinkhorn_unbalanced([0.5, 0.5], [0.5, 0.5], [[0.0, 1.0], [1.0, 0.0]], 1, 1),
    ...          6).tolist()
    [[0.511228, 0.18807], [0.18807, 0.511228]]
    """
    _method(method, "Unknown method '%s'.")
    a_, b_, M_ = _problem(a, b, M)
    if b_.ndim == 2:
        out = _values(a_, b_, M_, reg, reg_m, numItermax, stopThr, verbose, log)
        return (_typed(out[0], M), out[1]) if log else _typed(out, M)
    with warnings.catch_warnings():
        warnings.simplefilter("always", ConvergenceWarning)
        plan, _, lg = _solve(a_, b_, M_, reg, reg_m, numItermax, stopThr, verbose)
    return (_typed(plan, M), lg) if log else _typed(plan, M)


@shared(parameters=_PARAMETERS)
def sinkhorn_unbalanced2(a, b, M, reg, reg_m, method="sinkhorn", numItermax=1000, stopThr=1e-6, verbose=False,
                         log=False, **kwargs):
    """POT's ``ot.unbalanced.sinkhorn_unbalanced2``: the values ``<gamma, M>`` of the plans of :func:`sinkhorn_unbalanced`.

    Parameters
    ----------
    {{parameters}}

    Returns
    -------
    numpy.ndarray of shape (k,)
        One value per target histogram (b of shape (m,) is one); with ``log=True``, a pair (that,
        the log dict).

    Raises
    ------
    ValueError
        An unknown method (as POT).
    tokenflow.InputError
        Bad histograms or costs.

    Examples
    --------
    >>> import tokenflow.pot as ot
    >>> np.round(ot.unbalanced.sinkhorn_unbalanced2([0.5, 0.1], [0.5, 0.5], [[0.0, 1.0], [1.0, 0.0]], 1.0, 1.0),
    ...          6).tolist()
    [0.319129]
    """
    _method(method, "Unknown method %s.")
    a_, b_, M_ = _problem(a, b, M)
    b2 = b_[:, None] if b_.ndim == 1 else b_
    out = _values(a_, b2, M_, reg, reg_m, numItermax, stopThr, verbose, log)
    return (_typed(out[0], M), out[1]) if log else _typed(out, M)
