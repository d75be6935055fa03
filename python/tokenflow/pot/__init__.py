"""POT's functions under POT's names: ``import tokenflow.pot as ot`` runs a POT script unchanged.

Each function takes the arguments of the POT function of the same name (Python Optimal Transport
0.8, the version Debian ships: names, order, defaults) and returns what POT returns (arrays,
floats, ``(value, log)`` pairs with ``log=True``), computed by tokenflow's solvers:

    unif(n)                                           the uniform histogram
    dist(x1, x2=None, metric="sqeuclidean")           the cost matrix
    sinkhorn(a, b, M, reg), sinkhorn2(a, b, M, reg)   entropic plan / its cost <M, plan>
    emd(a, b, M), emd2(a, b, M)                       exact plan / its cost (network simplex)
    empirical_sinkhorn(X_s, X_t, reg), empirical_sinkhorn2, empirical_sinkhorn_divergence
    emd_1d(x_a, x_b), emd2_1d, wasserstein_1d         one-dimensional exact OT
    sinkhorn_unbalanced(a, b, M, reg, reg_m), sinkhorn_unbalanced2
                                                      unbalanced entropic plan / its cost (ot.unbalanced)

Where tokenflow differs from POT (docs/ot.md, "From POT"):

- Sinkhorn stops on the l1 error of *both* marginals, |pi 1 - a|_1 + |pi^T 1 - b|_1 < stopThr,
  which implies POT's test (the l2 error of one marginal), so it stops no earlier than POT and
  usually converges where POT stops short. Every ``method`` name POT accepts ("sinkhorn",
  "sinkhorn_log", "sinkhorn_stabilized", "sinkhorn_epsilon_scaling", "greenkhorn") solves the same
  problem with tokenflow's log-domain solver, so they agree to the tolerance; POT's per-method
  keyword arguments (tau, warmstart, ...) are accepted and not used. An unknown method raises
  ValueError, as in POT.
- A solve stopped at numItermax warns with :class:`tokenflow.ConvergenceWarning` (a UserWarning,
  as POT's "Sinkhorn did not converge"), unless ``warn=False``; a result the arithmetic could not
  carry raises FloatingPointError instead of returning NaN.
- Histograms a and b must have the same mass (POT's emd asserts it; its sinkhorn would iterate
  without converging): a plan of mass s = sum(a) is s times the plan of the normalized problem.
- ``log["u"]``, ``log["v"]`` of sinkhorn are the scalings (plan = u[:, None] * exp(-M / reg) *
  v[None, :]); they overflow at small reg as POT's do, so ``log["log_u"]``, ``log["log_v"]``
  (their logarithms) are always given as well. ``log["err"]`` holds the final marginal error.
- emd's numItermax and numThreads are accepted and not used: the network simplex runs to the
  optimum. Its dual potentials are an optimal pair (centred as POT centres them); where the dual
  optimum is not unique they may differ from POT's by more than the centring.
- Arrays are numpy arrays or lists; torch tensors that do not require grad are taken and the
  results come back as tensors (for gradients use :mod:`tokenflow.torch`).

>>> import numpy as np
>>> import tokenflow.pot as ot
>>> a, b = ot.unif(2), ot.unif(2)
>>> M = np.array([[0.0, 1.0], [1.0, 0.0]])
>>> ot.emd(a, b, M).tolist(), ot.emd2(a, b, M)
([[0.5, 0.0], [0.0, 0.5]], 0.0)
>>> np.round(ot.sinkhorn(a, b, M, 0.01), 6).tolist()
[[0.5, 0.0], [0.0, 0.5]]
"""
from __future__ import annotations

import contextlib
import warnings

import numpy as np

from .. import _inputs
from .. import transport as _transport
from .._checks import ConvergenceWarning
from .._inputs import echo
from .._docstrings import shared

__all__ = ["dist", "emd", "emd2", "emd2_1d", "emd_1d", "empirical_sinkhorn", "empirical_sinkhorn2",
           "empirical_sinkhorn_divergence", "sinkhorn", "sinkhorn2", "unif", "wasserstein_1d"]

_SINKHORN_METHODS = ("sinkhorn", "sinkhorn_log", "greenkhorn", "sinkhorn_stabilized", "sinkhorn_epsilon_scaling")
_SINKHORN2_METHODS = ("sinkhorn", "sinkhorn_log", "sinkhorn_stabilized")
# np.testing.assert_almost_equal's default (decimal=7), the test POT applies to the two masses.
_MASS_TOLERANCE = 1.5e-7


# ---- conversions: one place for every argument ---------------------------------------------------

def _array(value, name: str, allow_empty: bool = False):
    """(float64 numpy array, torch tensor it came from or None), converted by tokenflow's input layer
    (_inputs.real_array): lists, numpy arrays of real dtypes and torch tensors without grad are
    accepted; complex, boolean, string or object values, ragged lists, tensors that require grad,
    NaN and infinite entries and (unless allow_empty) empty arrays raise tokenflow.InputError (a
    ValueError) naming the argument."""
    tensor = value if _inputs._torch_tensor(value) else None
    array = _inputs.real_array(name, value, None, nonempty=not allow_empty)
    if array.ndim == 0:
        raise _inputs.input_error(name, f"is a number ({echo(value)}); accepted: an array")
    if array.dtype != np.float64:
        _inputs.check_memory(name, 8.0 * array.size, f"a float64 copy of shape {array.shape}")
    array = array.astype(np.float64, copy=False)
    if not np.all(np.isfinite(array)):
        bad = int(array.size - np.count_nonzero(np.isfinite(array)))
        raise _inputs.input_error(name, f"has {bad} non-finite entries (of {array.size}); accepted: finite numbers")
    return array, tensor


def _histogram(value, name: str, size: int, check_size: bool = False):
    """POT's weights: None or an empty list mean uniform; else nonnegative masses with a positive
    sum (not normalized: POT keeps the mass), else tokenflow.InputError naming the argument."""
    if value is None:
        return np.full(size, 1.0 / size), None
    array, tensor = _array(value, name, allow_empty=True)
    if array.size == 0:
        return np.full(size, 1.0 / size), tensor
    if check_size and array.shape[0] != size:  # emd and sinkhorn check it as POT does (AssertionError, ValueError)
        raise _inputs.input_error(name, f"has {array.shape[0]} entries for {size} samples; accepted: {size} masses")
    if np.any(array < 0):
        i = int(np.flatnonzero(array < 0)[0])
        raise _inputs.input_error(name, f"entry {i} is {array.flat[i]:g}; accepted: nonnegative masses")
    if not np.any(array):
        raise _inputs.input_error(name, "is all zero: there is no mass to transport; accepted: masses with a "
                                        "positive sum")
    return array, tensor


def _like(result, *references):
    """result as the first reference's type: a torch tensor of its dtype and device, or a numpy
    array in the precision of a floating-point numpy reference (POT's type_as)."""
    for ref in references:
        if ref is None:
            continue
        if type(ref).__module__.startswith("torch"):
            import torch
            dtype = ref.dtype if ref.is_floating_point() else torch.float64
            _fits(result, str(dtype).removeprefix("torch."), float(torch.finfo(dtype).max))
            return torch.as_tensor(np.asarray(result), dtype=dtype, device=ref.device)
        if isinstance(ref, np.ndarray) and ref.dtype.kind == "f" and np.ndim(result) > 0:
            _fits(result, ref.dtype.name, float(np.finfo(ref.dtype).max))
            return np.asarray(result, dtype=ref.dtype)
        break
    return result


def _fits(result, dtype: str, largest: float) -> None:
    """FloatingPointError (the documented error) when a finite result would round to inf in the
    inputs' dtype (a plan of mass 1e308 returned in float16), instead of returning inf."""
    values = np.asarray(result, dtype=float)
    if values.size and np.all(np.isfinite(values)) and np.abs(values).max() > largest:
        raise FloatingPointError(f"the result (largest magnitude {np.abs(values).max():.3g}) overflows {dtype}, the "
                                 f"dtype of the inputs (largest {largest:.3g}); rescale them or pass float64")


def _finite_scaled(what: str, result, mass: float) -> None:
    """FloatingPointError (the documented error) when the plan or cost of mass `mass` leaves the
    range of double (masses near 1e308), instead of returning inf."""
    with np.errstate(over="ignore"):
        if not np.isfinite(result.cost * mass) or (result.plan is not None and not np.all(np.isfinite(result.plan * mass))):
            raise FloatingPointError(f"{what}: the plan of mass {mass:g} or its cost overflows the range of double "
                                     "(rescale a and b)")


def _same_mass(a, b, what: str, assertion: bool) -> float:
    sa, sb = float(np.sum(a)), float(np.sum(b))
    if not (np.isfinite(sa) and np.isfinite(sb) and sa > 0 and sb > 0):  # _histogram refused the rest
        raise _inputs.input_error("a" if not np.isfinite(sa) else "b", f"{what}: a and b must have positive sums within "
                                                                      f"the range of double (got {sa:g} and {sb:g})")
    if abs(sa - sb) >= _MASS_TOLERANCE:
        message = f"{what}: a and b vector must have the same sum (got {sa:.17g} and {sb:.17g})"
        if assertion:  # POT's emd raises AssertionError (np.testing.assert_almost_equal)
            raise AssertionError(message)
        raise ValueError(message)
    return sa


@contextlib.contextmanager
def _warnings_if(warn: bool):
    """Drops ConvergenceWarning inside when warn is False (POT's warn=False)."""
    if warn:
        yield
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        yield


def _verbose_progress(verbose: bool):
    if not verbose:
        return False

    shown = [0]

    def show(iteration, error):  # POT's table: a header every 20 lines
        if shown[0] % 20 == 0:
            print("{:5s}|{:12s}".format("It.", "Err") + "\n" + "-" * 19)
        shown[0] += 1
        print("{:5d}|{:8e}|".format(iteration, error))
    return show


# ---- utilities ---------------------------------------------------------------------------------

def unif(n, type_as=None):
    """The uniform histogram of length n (POT's ``ot.unif``).

    Parameters
    ----------
    n : int
        Its length, n >= 1.
    type_as : array_like, optional
        A torch tensor to return the histogram as (its dtype and device), as POT's backends do.

    Returns
    -------
    numpy.ndarray of shape (n,)
        ``1 / n`` everywhere.

    Raises
    ------
    tokenflow.InputError
        n not a positive integer, or too large to hold.

    Examples
    --------
    >>> import tokenflow.pot as ot
    >>> ot.unif(4).tolist()
    [0.25, 0.25, 0.25, 0.25]
    """
    n = _inputs.as_int("n", n, 1, 2**62)
    _inputs.check_memory("n", 8.0 * n, f"a histogram of {n} entries")
    return _like(np.full(n, 1.0 / n), type_as)


def _pairwise_squared_distances(x, y):
    """|x_i - y_j|^2 from the differences, in blocks of rows (at most ~2^22 temporaries at once)."""
    _inputs.check_memory("x2", 8.0 * x.shape[0] * y.shape[0], f"the {x.shape[0]} x {y.shape[0]} cost matrix")
    M = np.empty((x.shape[0], y.shape[0]))
    rows = max(1, (1 << 22) // max(1, y.shape[0] * x.shape[1]))
    for start in range(0, x.shape[0], rows):
        diff = x[start:start + rows, None, :] - y[None, :, :]
        np.einsum("ijk,ijk->ij", diff, diff, out=M[start:start + rows])
    return M


def dist(x1, x2=None, metric="sqeuclidean", p=2, w=None):
    """The cost matrix between the rows of x1 and x2 (POT's ``ot.dist``).

    "sqeuclidean" and "euclidean" are computed by tokenflow, each entry from the difference of the
    points, so it is >= 0 and exact to rounding (POT expands ``|x|^2 + |y|^2 - 2 <x, y>``); any
    other metric by scipy's cdist, as POT does.

    Parameters
    ----------
    x1 : array_like of shape (n, d)
        The first points.
    x2 : array_like of shape (m, d), optional
        The second points; x1 when None.
    metric : str, default "sqeuclidean"
        ``|x - y|^2``, "euclidean" ``|x - y|``, or a metric of scipy's cdist.
    p : float, default 2
        The order of the Minkowski metrics.
    w : array_like of shape (d,), optional
        Weights of the coordinates (scipy's metrics that take them).

    Returns
    -------
    numpy.ndarray of shape (n, m)
        The costs (a tensor when x1 is one).

    Raises
    ------
    tokenflow.InputError
        x1 and x2 not 2-D with the same number of columns.
    FloatingPointError
        Distances beyond the range of double.

    Examples
    --------
    >>> import tokenflow.pot as ot
    >>> ot.dist([[0.0, 0.0], [1.0, 0.0]], [[0.0, 2.0]]).tolist()
    [[4.0], [5.0]]
    """
    x, tensor = _array(x1, "x1")
    y = x if x2 is None else _array(x2, "x2")[0]
    if x.ndim != 2 or y.ndim != 2 or x.shape[1] != y.shape[1]:
        raise _inputs.input_error("x1" if x.ndim != 2 else "x2", f"x1 and x2 must be 2-D with the same number of "
                                                                 f"columns (got {x.shape} and {y.shape})")
    if metric in ("sqeuclidean", "euclidean"):
        M = _pairwise_squared_distances(x, y)
        if metric == "euclidean":
            np.sqrt(M, out=M)
    else:
        from scipy.spatial.distance import cdist
        M = cdist(x, y, metric=metric, p=p, w=w) if metric.endswith("minkowski") else cdist(x, y, metric=metric, w=w)
    if not np.all(np.isfinite(M)):  # coordinates whose distances overflow: no cost matrix, not an inf in it
        raise FloatingPointError(f"dist: {int(M.size - np.count_nonzero(np.isfinite(M)))} distances overflow "
                                 "the range of double (rescale x1 and x2)")
    return _like(M, x1)


# ---- entropic OT --------------------------------------------------------------------------------

def _solve_entropic(a, b, M, reg, numItermax, stopThr, verbose, warn):
    """(tokenflow.OTResult of the normalized problem, mass s). a, b, M are float64 arrays."""
    if M.ndim != 2:
        raise _inputs.input_error("M", f"must be a 2-D cost matrix (got shape {M.shape})")
    if a.shape != (M.shape[0],) or b.shape != (M.shape[1],):
        raise _inputs.input_error("a" if a.shape != (M.shape[0],) else "b", f"Dimension mismatch, check dimensions of "
                                                                             f"M {M.shape} with a {a.shape} and b {b.shape}")
    mass = _same_mass(a, b, "sinkhorn", assertion=False)
    # POT stops when the l2 error of the column marginal of the mass-s plan is below stopThr; the
    # normalized problem's l1 error of both marginals below stopThr / s implies it.
    with _warnings_if(warn):
        result = _transport.sinkhorn(a=a / mass, b=b / mass, M=M, epsilon=float(reg), tol=float(stopThr) / mass,
                                     max_iter=int(numItermax), progress=_verbose_progress(verbose))
    return result, mass


def _sinkhorn_log(result, mass, reg):
    a, b = result.a, result.b
    with np.errstate(divide="ignore", over="ignore"):
        log_u = np.log(mass * a) + result.f / reg
        log_v = np.log(b) + result.g / reg
        return {"err": [result.marginal_error * mass], "niter": result.iterations, "log_u": log_u, "log_v": log_v,
                "u": np.exp(log_u), "v": np.exp(log_v), "converged": result.converged,
                "marginal_error": result.marginal_error * mass}


def _sinkhorn_histograms(a, b, M, reg, numItermax, stopThr, verbose, log, warn, return_plan):
    M_, _ = _array(M, "M")
    if M_.ndim != 2:
        raise _inputs.input_error("M", f"must be a 2-D cost matrix (got shape {M_.shape})")
    a_, _ = _histogram(a, "a", M_.shape[0])
    b_, _ = _histogram(b, "b", M_.shape[1])
    if b_.ndim == 2:  # several target histograms: POT returns the vector of costs
        values, logs = [], []
        for k in range(b_.shape[1]):
            result, mass = _solve_entropic(a_, b_[:, k], M_, reg, numItermax, stopThr, verbose, warn)
            values.append(result.cost * mass)
            logs.append(_sinkhorn_log(result, mass, reg))
        values = _like(np.array(values), M)
        return (values, {"logs": logs, "niter": [lg["niter"] for lg in logs]}) if log else values
    result, mass = _solve_entropic(a_, b_, M_, reg, numItermax, stopThr, verbose, warn)
    _finite_scaled("sinkhorn", result, mass)
    value = _like(result.plan * mass, M) if return_plan else float(result.cost * mass)
    return (value, _sinkhorn_log(result, mass, reg)) if log else value


# The parameters of sinkhorn and sinkhorn2 (numpydoc): POT's arguments.
_SINKHORN_PARAMETERS = """
a : array_like of shape (n,)
    Source histogram (an empty list: uniform).
b : array_like of shape (m,) or (m, k)
    Target histogram, or k of them as columns (an empty list: uniform), of the mass of a.
M : array_like of shape (n, m)
    The cost matrix.
reg : float
    The entropic regularization.
method : str, default "sinkhorn"
    Any of POT's method names; each solves the same problem to the same tolerance.
numItermax : int, default 1000
    The iteration budget.
stopThr : float, default 1e-9
    The l1 error of both marginals to reach (which implies POT's test).
verbose : bool, default False
    Print the iterations as POT does.
log : bool, default False
    Also return the log dict.
**kwargs
    POT's per-method keyword arguments, accepted and not used.
"""
_SINKHORN_RAISES = """
Raises
------
ValueError
    An unknown method (as POT).
tokenflow.InputError
    Bad histograms or costs, or histograms of different masses.
FloatingPointError
    A result the arithmetic could not carry.
"""


@shared(parameters=_SINKHORN_PARAMETERS, raises=_SINKHORN_RAISES)
def sinkhorn(a, b, M, reg, method="sinkhorn", numItermax=1000, stopThr=1e-9, verbose=False, log=False, warn=True,
             **kwargs):
    """The entropic OT plan of POT's ``ot.sinkhorn(a, b, M, reg)``.

    The argmin of ``<pi, M> + reg KL(pi | a b^T)`` over the couplings of a and b, by tokenflow's
    log-domain solver (every POT method name solves this problem; the differences from POT are
    listed in the module's description).

    Parameters
    ----------
    {{parameters}}
    warn : bool, default True
        Warn with :class:`tokenflow.ConvergenceWarning` when stopped at numItermax.

    Returns
    -------
    numpy.ndarray
        The plan (n x m); with b of shape (m, k), the k costs ``<M, pi_k>`` (as POT). With
        ``log=True``, a pair (that, a dict with niter, err, u, v, log_u, log_v).

    {{raises}}

    Examples
    --------
    >>> import tokenflow.pot as ot, numpy as np
    >>> np.round(ot.sinkhorn([0.5, 0.5], [0.5, 0.5], [[0.0, 1.0], [1.0, 0.0]], 1.0), 4).tolist()
    [[0.3655, 0.1345], [0.1345, 0.3655]]
    """
    if str(method).lower() not in _SINKHORN_METHODS:
        raise ValueError("Unknown method '%s'." % method)
    return _sinkhorn_histograms(a, b, M, reg, numItermax, stopThr, verbose, log, warn, return_plan=True)


@shared(parameters=_SINKHORN_PARAMETERS, raises=_SINKHORN_RAISES)
def sinkhorn2(a, b, M, reg, method="sinkhorn", numItermax=1000, stopThr=1e-9, verbose=False, log=False, warn=False,
              **kwargs):
    """The transport cost ``<M, pi>`` of the entropic plan of :func:`sinkhorn` (POT's ``ot.sinkhorn2``).

    The linear cost, without the entropy term.

    Parameters
    ----------
    {{parameters}}
    warn : bool, default False
        Warn with :class:`tokenflow.ConvergenceWarning` when stopped at numItermax.

    Returns
    -------
    float or numpy.ndarray
        The cost; with b of shape (m, k), the k costs. With ``log=True``, a pair (that, the log
        dict).

    {{raises}}

    Examples
    --------
    >>> import tokenflow.pot as ot
    >>> round(ot.sinkhorn2([0.5, 0.5], [0.5, 0.5], [[0.0, 1.0], [1.0, 0.0]], 1.0), 4)
    0.2689
    """
    if str(method).lower() not in _SINKHORN2_METHODS:
        raise ValueError("Unknown method '%s'." % method)
    return _sinkhorn_histograms(a, b, M, reg, numItermax, stopThr, verbose, log, warn, return_plan=False)


def _empirical(X_s, X_t, reg, a, b, metric, numIterMax, stopThr, isLazy, verbose, warn, want_plan=False):
    """(OTResult of the normalized problem, mass, a, b) between the samples; with want_plan, a plan
    that cannot be held is refused before the solve (InputError naming its size)."""
    xs, _ = _array(X_s, "X_s")
    xt, _ = _array(X_t, "X_t")
    if want_plan and xs.ndim and xt.ndim:
        _inputs.check_memory("X_t", 8.0 * xs.shape[0] * xt.shape[0], f"the {xs.shape[0]} x {xt.shape[0]} plan")
    if xs.ndim != 2 or xt.ndim != 2 or xs.shape[1] != xt.shape[1]:
        raise _inputs.input_error("X_s" if xs.ndim != 2 else "X_t", f"X_s and X_t must be 2-D with the same number of "
                                                                     f"columns (got {xs.shape} and {xt.shape})")
    a_, _ = _histogram(a, "a", xs.shape[0])
    b_, _ = _histogram(b, "b", xt.shape[0])
    mass = _same_mass(a_, b_, "empirical_sinkhorn", assertion=False)
    with _warnings_if(warn):
        common = dict(a=a_ / mass, b=b_ / mass, epsilon=float(reg), tol=float(stopThr) / mass,
                      max_iter=int(numIterMax), progress=_verbose_progress(verbose))
        if metric in ("sqeuclidean", "euclidean"):
            # Lazy: the cost recomputed from the points in tiles (memory O(n + m)), no plan formed.
            extra = dict(operator="online", plan=False) if isLazy else {}
            with _inputs.renamed_keys({"x": "X_s", "y": "X_t"}.get):  # the samples' names here
                result = _transport.sinkhorn(xs, xt, cost=metric, **common, **extra)
        elif isLazy:
            raise ValueError(f"isLazy=True supports metric 'sqeuclidean' and 'euclidean' (got {metric!r})")
        else:
            result = _transport.sinkhorn(M=dist(xs, xt, metric=metric), **common)
    return result, mass


def empirical_sinkhorn(X_s, X_t, reg, a=None, b=None, metric="sqeuclidean", numIterMax=10000, stopThr=1e-9,
                       isLazy=False, batchSize=100, verbose=False, log=False, warn=True, **kwargs):
    """POT's ``ot.bregman.empirical_sinkhorn``: the entropic plan between samples X_s (n x d) and X_t
    (m x d) for the cost dist(X_s, X_t, metric). isLazy=True returns POT's dual pair (f, g) with
    plan_ij = exp(f_i + g_j - M_ij / reg), computed without holding M (batchSize is not needed)."""
    result, mass = _empirical(X_s, X_t, reg, a, b, metric, numIterMax, stopThr, isLazy, verbose, warn,
                              want_plan=not isLazy)
    lg = _sinkhorn_log(result, mass, float(reg))
    if isLazy:
        f, g = _like(lg["log_u"], X_s), _like(lg["log_v"], X_s)
        return (f, g, lg) if log else (f, g)
    plan = _like(result.plan * mass, X_s)
    return (plan, lg) if log else plan


def empirical_sinkhorn2(X_s, X_t, reg, a=None, b=None, metric="sqeuclidean", numIterMax=10000, stopThr=1e-9,
                        isLazy=False, batchSize=100, verbose=False, log=False, warn=True, **kwargs):
    """POT's ``ot.bregman.empirical_sinkhorn2``: the transport cost <M, pi> of the plan of
    :func:`empirical_sinkhorn`."""
    result, mass = _empirical(X_s, X_t, reg, a, b, metric, numIterMax, stopThr, isLazy, verbose, warn)
    value = float(result.cost * mass)
    return (value, _sinkhorn_log(result, mass, float(reg))) if log else value


def empirical_sinkhorn_divergence(X_s, X_t, reg, a=None, b=None, metric="sqeuclidean", numIterMax=10000,
                                  stopThr=1e-9, verbose=False, log=False, warn=True, **kwargs):
    """POT's ``ot.bregman.empirical_sinkhorn_divergence``: max(0, W_ab - (W_aa + W_bb) / 2) of the
    transport costs W of three entropic plans (POT's convention, tokenflow's ``divergence_pot``; the
    debiased divergence built from the entropic objectives is tokenflow.sinkhorn(...,
    divergence=True).divergence). As POT, the three solves use stopThr = 1e-9."""
    args = dict(reg=reg, metric=metric, numIterMax=numIterMax, stopThr=1e-9, verbose=verbose, log=True, warn=warn)
    ab, log_ab = empirical_sinkhorn2(X_s, X_t, a=a, b=b, **args)
    aa, log_a = empirical_sinkhorn2(X_s, X_s, a=a, b=a, **args)
    bb, log_b = empirical_sinkhorn2(X_t, X_t, a=b, b=b, **args)
    value = max(0, ab - 0.5 * (aa + bb))
    if not log:
        return value
    return value, {"sinkhorn_loss_ab": ab, "sinkhorn_loss_a": aa, "sinkhorn_loss_b": bb,
                   "log_sinkhorn_ab": log_ab, "log_sinkhorn_a": log_a, "log_sinkhorn_b": log_b}


# ---- exact OT ---------------------------------------------------------------------------------

def _solve_exact(a, b, M):
    M_, _ = _array(M, "M")
    if M_.ndim != 2:
        raise _inputs.input_error("M", f"must be a 2-D cost matrix (got shape {M_.shape})")
    a_, _ = _histogram(a, "a", M_.shape[0])
    b_, _ = _histogram(b, "b", M_.shape[1])
    if a_.shape != (M_.shape[0],) or b_.shape != (M_.shape[1],):
        raise AssertionError("Dimension mismatch, check dimensions of M with a and b")
    mass = _same_mass(a_, b_, "emd", assertion=True)
    result = _transport.exact_ot(a=a_ / mass, b=b_ / mass, M=M_)
    # POT's centring of the duals: u + c, v - c with a.u = b.v balanced.
    c = ((b_ / mass) @ result.g - (a_ / mass) @ result.f) / ((a_ / mass).sum() + (b_ / mass).sum())  # no overflow
    _finite_scaled("emd", result, mass)
    log = {"cost": float(result.cost * mass), "u": _like(result.f + c, M), "v": _like(result.g - c, M),
           "warning": None, "result_code": 1}
    return result, mass, log


def emd(a, b, M, numItermax=100000, log=False, center_dual=True, numThreads=1):
    """The exact OT plan of POT's ``ot.emd(a, b, M)``, by tokenflow's network simplex.

    Parameters
    ----------
    a : array_like of shape (n,)
        Source histogram (an empty list: uniform).
    b : array_like of shape (m,)
        Target histogram (an empty list: uniform), of the same mass as a.
    M : array_like of shape (n, m)
        The cost matrix.
    numItermax : int, default 100000
        Accepted and not used: the network simplex runs to the optimum.
    log : bool, default False
        Also return a dict (cost, u, v, warning, result_code).
    center_dual : bool, default True
        Accepted: the dual potentials are centred as POT centres them.
    numThreads : int, default 1
        Accepted and not used.

    Returns
    -------
    numpy.ndarray of shape (n, m)
        The plan; with ``log=True``, a pair (plan, log).

    Raises
    ------
    tokenflow.InputError
        Bad histograms or costs, or histograms of different masses.

    Examples
    --------
    >>> import tokenflow.pot as ot
    >>> ot.emd([0.5, 0.5], [0.5, 0.5], [[0.0, 1.0], [1.0, 0.0]]).tolist()
    [[0.5, 0.0], [0.0, 0.5]]
    """
    result, mass, lg = _solve_exact(a, b, M)
    plan = _like(result.plan * mass, M)
    return (plan, lg) if log else plan


def emd2(a, b, M, processes=1, numItermax=100000, log=False, return_matrix=False, center_dual=True,
         numThreads=1):
    """The exact OT cost ``<M, pi>`` of POT's ``ot.emd2(a, b, M)``.

    Parameters
    ----------
    a : array_like of shape (n,)
        Source histogram (an empty list: uniform).
    b : array_like of shape (m,) or (m, k)
        Target histogram, or k of them as columns (an empty list: uniform).
    M : array_like of shape (n, m)
        The cost matrix.
    processes : int, default 1
        Accepted and not used.
    numItermax : int, default 100000
        Accepted and not used: the network simplex runs to the optimum.
    log : bool, default False
        Return ``[cost, log]``.
    return_matrix : bool, default False
        Return ``[cost, log]`` with ``log["G"]``, the plan.
    center_dual : bool, default True
        Accepted: the dual potentials are centred as POT centres them.
    numThreads : int, default 1
        Accepted and not used.

    Returns
    -------
    float or numpy.ndarray or list
        The cost (k costs when b has k columns), or ``[cost, log]``.

    Raises
    ------
    tokenflow.InputError
        Bad histograms or costs, or histograms of different masses.

    Examples
    --------
    >>> import tokenflow.pot as ot
    >>> ot.emd2([0.5, 0.5], [0.5, 0.5], [[0.0, 1.0], [1.0, 0.0]])
    0.0
    """
    b_array = _array(b, "b", allow_empty=True)[0]
    if b_array.ndim == 2:  # several target histograms: the vector of costs, as POT
        return _like(np.array([emd2(a, b_array[:, k], M) for k in range(b_array.shape[1])]), M)
    result, mass, lg = _solve_exact(a, b, M)
    cost = float(result.cost * mass)
    if log or return_matrix:
        if return_matrix:
            lg["G"] = _like(result.plan * mass, M)
        return [cost, lg]
    return cost


# ---- one dimension ------------------------------------------------------------------------------

def _monotone_coupling(x, y, a, b):
    """The monotone (north-west corner) coupling of the sorted points: (rows, cols, masses), rows
    and cols indices into the unsorted x and y. It is optimal for every cost convex in x - y.

    Written here (a sort and a merge of the two cumulative sums, O((n + m) log(n + m))) because the
    engine's sorted W_p returns the value, not the coupling, and POT's users ask for the plan."""
    px, py = np.argsort(x, kind="stable"), np.argsort(y, kind="stable")
    ca, cb = np.cumsum(a[px]), np.cumsum(b[py])
    cb *= ca[-1] / cb[-1]  # the same total mass, as POT rescales b
    breaks = np.union1d(ca, cb)
    breaks = breaks[breaks > 0]
    masses = np.diff(np.concatenate(([0.0], breaks)))
    # The segment ending at each break belongs to the first point whose cumulative mass reaches it.
    rows = np.minimum(np.searchsorted(ca, breaks, side="left"), len(ca) - 1)
    cols = np.minimum(np.searchsorted(cb, breaks, side="left"), len(cb) - 1)
    keep = masses > 0
    return px[rows[keep]], py[cols[keep]], masses[keep]


def _ground_1d(diff, metric, p):
    d = np.abs(diff)
    if metric == "sqeuclidean":
        return d * d
    if metric in ("euclidean", "cityblock"):
        return d
    if metric == "minkowski":
        return d ** p
    raise ValueError(f"metric {metric!r}: emd_1d supports sqeuclidean, euclidean, cityblock and minkowski")


def _points_1d(x, name):
    array, _ = _array(x, name)
    if not (array.ndim == 1 or (array.ndim == 2 and array.shape[1] == 1)):
        raise AssertionError("emd_1d should only be used with monodimensional data")
    return array.reshape(-1)


def _emd_1d(x_a, x_b, a, b, metric, p):
    x, y = _points_1d(x_a, "x_a"), _points_1d(x_b, "x_b")
    a_, _ = _histogram(a, "a", x.size, check_size=True)
    b_, _ = _histogram(b, "b", y.size, check_size=True)
    _same_mass(a_, b_, "emd_1d", assertion=True)
    rows, cols, masses = _monotone_coupling(x, y, a_, b_)
    with np.errstate(over="ignore"):
        cost = float(np.sum(masses * _ground_1d(x[rows] - y[cols], metric, p)))
    if not np.isfinite(cost):
        raise FloatingPointError("emd_1d: the transport cost overflows the range of double (rescale x_a and x_b)")
    return rows, cols, masses, cost, (x.size, y.size)


def emd_1d(x_a, x_b, a=None, b=None, metric="sqeuclidean", p=1.0, dense=True, log=False):
    """POT's ``ot.emd_1d``: the exact plan between 1-D samples (the monotone coupling); dense=False
    returns a scipy.sparse coo_matrix. log=True adds {"cost": ...}."""
    rows, cols, masses, cost, shape = _emd_1d(x_a, x_b, a, b, metric, p)
    if dense:
        plan = np.zeros(shape)
        np.add.at(plan, (rows, cols), masses)
        plan = _like(plan, x_a)
    else:
        from scipy.sparse import coo_matrix
        plan = coo_matrix((masses, (rows, cols)), shape=shape)
    return (plan, {"cost": cost}) if log else plan


def emd2_1d(x_a, x_b, a=None, b=None, metric="sqeuclidean", p=1.0, dense=True, log=False):
    """POT's ``ot.emd2_1d``: the exact OT cost between 1-D samples; log=True adds {"G": plan}."""
    rows, cols, masses, cost, shape = _emd_1d(x_a, x_b, a, b, metric, p)
    if not log:
        return cost
    plan = np.zeros(shape)
    np.add.at(plan, (rows, cols), masses)
    return cost, {"G": plan}


def wasserstein_1d(u_values, v_values, u_weights=None, v_weights=None, p=1, require_sort=True):
    """POT's ``ot.wasserstein_1d``: W_p^p (the p-th power, as POT returns it) between 1-D
    empirical measures; 2-D inputs (n x k) are k problems, one per column, and give k values."""
    u, _ = _array(u_values, "u_values")
    v, _ = _array(v_values, "v_values")
    if u.ndim != v.ndim or u.ndim not in (1, 2) or (u.ndim == 2 and u.shape[1] != v.shape[1]):
        raise _inputs.input_error("v_values" if u.ndim in (1, 2) and u.ndim == v.ndim else "u_values",
                                  f"u_values and v_values: both 1-D, or both 2-D with as many columns (got {u.shape}, {v.shape})")
    if float(p) < 1:
        raise ValueError(f"p must be at least 1 (got {p})")

    def weights(w, values, name):
        if w is None:
            return np.full(values.shape, 1.0 / values.shape[0])
        w, _ = _histogram(w, name, values.shape[0])
        if w.shape[0] != values.shape[0] or w.ndim not in (1, values.ndim):
            raise _inputs.input_error(name, f"has shape {w.shape}; accepted: ({values.shape[0]},) or the shape "
                                            f"{values.shape} of the values")
        if w.ndim == 2 and not np.all(w.sum(axis=0) > 0):
            raise _inputs.input_error(name, "has a column of zeros: no mass to transport there")
        return w if w.ndim == values.ndim else np.repeat(w[:, None], values.shape[1], axis=1)

    uw, vw = weights(u_weights, u, "u_weights"), weights(v_weights, v, "v_weights")
    columns = [(u, v, uw, vw)] if u.ndim == 1 else [(u[:, k], v[:, k], uw[:, k], vw[:, k]) for k in range(u.shape[1])]
    values = []
    for uc, vc, uwc, vwc in columns:
        rows, cols, masses = _monotone_coupling(uc, vc, uwc, vwc)
        with np.errstate(over="ignore"):
            values.append(float(np.sum(masses * np.abs(uc[rows] - vc[cols]) ** float(p))))
        if not np.isfinite(values[-1]):
            raise FloatingPointError("wasserstein_1d: W_p^p overflows the range of double (rescale the values)")
    return _like(values[0] if u.ndim == 1 else np.array(values), u_values if u.ndim == 2 else None)


# POT's helpers that solve nothing (data sets, drawing) are POT's own, when it is installed, so that
# its example scripts run unchanged; every solver name that tokenflow does not cover is an error
# rather than a silent call into POT.
_POT_HELPER_MODULES = ("datasets", "plot")


def __getattr__(name):
    if name in _POT_HELPER_MODULES:
        import importlib
        try:
            return importlib.import_module("ot." + name)
        except ImportError:
            raise AttributeError(f"tokenflow.pot.{name} is POT's ot.{name}, and POT is not installed "
                                 "(Debian: python3-pot)") from None
    raise AttributeError(f"tokenflow.pot has no {name!r}: it covers {', '.join(sorted(__all__))} "
                         f"(and POT's helper modules {', '.join(_POT_HELPER_MODULES)}); use POT's ot.{name}")


def _missing_name(submodule: str, names):
    """A submodule's __getattr__: a name it does not hold is an AttributeError that lists what it
    holds and points to POT's own submodule."""
    def missing(name):
        raise AttributeError(f"tokenflow.pot.{submodule} has no {name!r}: it covers {', '.join(sorted(names))}; "
                             f"use POT's ot.{submodule}.{name}")
    return missing


# POT's submodules (ot.bregman, ot.lp, ot.utils, ...): each is one file of this package,
# python/tokenflow/pot/<name>.py, holding POT's names of that submodule (its __all__). Every such
# file is imported here, and the names of its __all__ are also tokenflow.pot's, as POT lists them at
# the top of ``ot`` too: adding a submodule is adding its file.
def _import_submodules():
    import importlib
    import pkgutil

    names = []
    for info in pkgutil.iter_modules(__path__):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        globals()[info.name] = module
        for name in module.__all__:
            globals()[name] = getattr(module, name)
            if name not in __all__:
                __all__.append(name)
        names.append(info.name)
    return names


_SUBMODULES = _import_submodules()  # bregman, lp, utils, ...
