"""POT's functions under POT's names: ``import tokenflow.pot as ot`` runs a POT script unchanged.

Each function takes the arguments of the POT function of the same name (Python Optimal Transport
0.8, the version Debian ships: names, order, defaults) and returns what POT returns (arrays and
numbers in the type of the inputs, ``(value, log)`` pairs with log=True, POT's log keys), computed
by tokenflow's solvers::

    unif(n)                                           the uniform histogram
    dist(x1, x2=None, metric="sqeuclidean")           the cost matrix
    sinkhorn(a, b, M, reg), sinkhorn2(a, b, M, reg)   entropic plan / its cost <M, plan>
    emd(a, b, M), emd2(a, b, M)                       exact plan / its cost (network simplex)
    empirical_sinkhorn(X_s, X_t, reg), empirical_sinkhorn2, empirical_sinkhorn_divergence
    emd_1d(x_a, x_b), emd2_1d, wasserstein_1d         one-dimensional exact OT
    sinkhorn_unbalanced(a, b, M, reg, reg_m), sinkhorn_unbalanced2
                                                      unbalanced entropic plan / its cost (ot.unbalanced)

and POT's submodules as modules: ``tokenflow.pot.bregman`` (with the five Sinkhorn methods
``sinkhorn_knopp``, ``sinkhorn_log``, ``greenkhorn``, ``sinkhorn_stabilized``,
``sinkhorn_epsilon_scaling``), ``tokenflow.pot.lp``, ``tokenflow.pot.utils``,
``tokenflow.pot.unbalanced``. POT's own tests for these functions pass through this module
(tests/third_party/pot). Where tokenflow differs from POT (docs/ot.md, "From POT", lists every
difference):

- Sinkhorn stops on the l1 error of *both* marginals, ``|pi 1 - a|_1 + |pi^T 1 - b|_1 <
  stopThr``, which implies POT's test (the l2 error of one marginal), so it stops no earlier than
  POT. Every
  ``method`` solves the same problem with tokenflow's log-domain solver; POT's per-method keyword
  arguments (tau, warmstart, ...) are accepted and not used. stopThr = 0 runs numItermax
  iterations (or until the iterates stop changing) and warns, as in POT. reg = 0 is exact OT,
  solved by the network simplex, with a :class:`POTDifferenceWarning` (POT's scalings overflow to
  NaN there).
- A solve stopped at numItermax warns with :class:`tokenflow.ConvergenceWarning` (a UserWarning,
  as POT's "Sinkhorn did not converge"), unless ``warn=False``; a result the arithmetic could not
  carry raises FloatingPointError instead of returning NaN.
- Histograms a and b must have the same mass (POT's emd asserts it; its sinkhorn would iterate
  without converging): a plan of mass s = sum(a) is s times the plan of the normalized problem.
- emd runs the network simplex to the optimum whatever numItermax; when it needed more pivots,
  a POTDifferenceWarning (also in log["warning"]) says that POT would have stopped short.
- ``+inf`` in M forbids a pair, as in POT; NaN is refused.
- torch tensors come back as tensors; emd2's gradients are POT's, sinkhorn's and sinkhorn2's the
  implicit gradient of the converged plan (:mod:`tokenflow.torch`).

Examples
--------
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

__all__ = ["POTDifferenceWarning", "dist", "emd", "emd2", "emd2_1d", "emd_1d", "empirical_sinkhorn",
           "empirical_sinkhorn2", "empirical_sinkhorn_divergence", "sinkhorn", "sinkhorn2", "unif", "wasserstein_1d"]

_SINKHORN_METHODS = ("sinkhorn", "sinkhorn_log", "greenkhorn", "sinkhorn_stabilized", "sinkhorn_epsilon_scaling")
_SINKHORN2_METHODS = ("sinkhorn", "sinkhorn_log", "sinkhorn_stabilized")
# np.testing.assert_almost_equal's default (decimal=7), the test POT applies to the two masses; for
# masses above 1 it is taken relative to the larger (an absolute 1.5e-7 is below the rounding of sums
# of 1e10 and refused equal masses of 1e307 that differ in their last bit).
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
    finite = np.isfinite(array)
    if not finite.all():
        bad, first = int(array.size - np.count_nonzero(finite)), tuple(int(i) for i in np.argwhere(~finite)[0])
        raise _inputs.input_error(name, f"has {bad} non-finite entries (of {array.size}; entry "
                                        f"{first if len(first) > 1 else first[0]} is {array[first]}); accepted: finite numbers")
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


def _like(result, *references, check: bool = True):
    """result (an array or a number) as the first reference's type: a torch tensor of its dtype
    and device (a 0-d tensor for a number), or a numpy array or scalar (np.float32, np.float64) in
    the precision of a floating-point numpy reference (POT's type_as). With check, a finite result
    that the dtype cannot hold is a FloatingPointError (_fits); without, it becomes inf there (the
    scalings of a log, which overflow as POT's do)."""
    for ref in references:
        if ref is None:
            continue
        if type(ref).__module__.startswith("torch"):
            import torch
            dtype = ref.dtype if ref.is_floating_point() else torch.float64
            if check:
                _fits(result, str(dtype).removeprefix("torch."), float(torch.finfo(dtype).max))
            return torch.as_tensor(np.asarray(result), dtype=dtype, device=ref.device)
        if isinstance(ref, np.ndarray) and ref.dtype.kind == "f":
            if check:
                _fits(result, ref.dtype.name, float(np.finfo(ref.dtype).max))
            return np.asarray(result, dtype=ref.dtype) if np.ndim(result) > 0 else ref.dtype.type(result)
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
    if abs(sa - sb) >= _MASS_TOLERANCE * max(1.0, sa, sb):
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


def _integer_points(*values) -> bool:
    return all(v is None or (hasattr(v, "dtype") and np.dtype(str(v.dtype).replace("torch.", "")).kind in "iu")
               for v in values)


def _integer_costs(M, like):
    """Squared distances of integer points (computed in float64, exact below 2^53) as integers of
    like's dtype (int64 for numpy's and torch's default), as POT's dist returns them."""
    if M.size and not float(M.max()) < 2.0 ** 53:
        raise _inputs.input_error("x1", f"integer points whose squared distances reach {float(M.max()):.3g}, beyond "
                                        "the 2^53 that float64 and int64 share exactly; accepted: floats")
    dtype = np.dtype(str(like.dtype).replace("torch.", ""))
    _fits(M, dtype.name, float(np.iinfo(dtype).max))  # no wrap-around (uint8 points of 255 give 65025)
    if type(like).__module__.startswith("torch"):
        import torch
        return torch.as_tensor(M.astype(np.int64), dtype=like.dtype, device=like.device)
    return M.astype(dtype)


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
        The costs in the type of x1 (a tensor when x1 is one; integer points give integer
        squared distances, as POT's).

    Raises
    ------
    tokenflow.InputError
        x1 and x2 not 2-D with the same number of columns, tensors that require grad, integer
        points whose squared distances reach 2^53.
    FloatingPointError
        Distances beyond the range of double, or of the integer dtype of the points.

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
        elif _integer_points(x1, x2):  # integer points: integer costs, as POT returns them
            return _integer_costs(M, x1)
    else:
        from scipy.spatial.distance import cdist
        M = cdist(x, y, metric=metric, p=p, w=w) if metric.endswith("minkowski") else cdist(x, y, metric=metric, w=w)
    if not np.all(np.isfinite(M)):  # coordinates whose distances overflow: no cost matrix, not an inf in it
        raise FloatingPointError(f"dist: {int(M.size - np.count_nonzero(np.isfinite(M)))} distances overflow "
                                 "the range of double (rescale x1 and x2)")
    return _like(M, x1)


# ---- entropic OT --------------------------------------------------------------------------------

# A stopThr that no error meets (POT's stopThr = 0): the solve runs numItermax iterations, or until
# its iterates stop changing in double precision (an error of exactly 0).
_NO_STOP = float(np.finfo(np.float64).tiny)


class POTDifferenceWarning(UserWarning):
    """tokenflow.pot returned a valid result where POT 0.8 would have warned about a failure.

    Issued (a UserWarning) in two cases, and the message says which: ``reg = 0`` in the entropic
    solvers (solved as exact optimal transport by the network simplex, where POT's scalings
    overflow to NaN), and emd's or emd2's ``numItermax`` below the pivots the network simplex
    needed (POT stops there, before optimality, with "numItermax reached before optimality";
    tokenflow returns the optimal plan, and the same message is in ``log["warning"]``).

    Examples
    --------
    >>> import warnings, tokenflow.pot as ot
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     plan = ot.sinkhorn([0.5, 0.5], [0.5, 0.5], [[0.0, 1.0], [1.0, 0.0]], 0.0)
    >>> caught[0].category.__name__, plan.tolist()
    ('POTDifferenceWarning', [[0.5, 0.0], [0.0, 0.5]])
    """


# The C++ side's and tokenflow.sinkhorn's names of the options, as POT's functions call them.
_POT_NAMES = {"epsilon": "reg", "tol": "stopThr", "max_iter": "numItermax"}


def _options(numItermax, stopThr, name="numItermax", **flags):
    """(numItermax, stopThr, flags...) through the input layer: an iteration count >= 1, a finite
    stopThr >= 0 (0: no stop before numItermax, as POT) and True/False flags (log, warn, ...),
    else InputError naming the argument (POT's name)."""
    return (_inputs.as_int(name, numItermax, 1), _inputs.as_float("stopThr", stopThr, 0.0, finite=True),
            *(_inputs.as_bool(key, value) for key, value in flags.items()))


def _regularization(reg) -> float:
    reg = _inputs.as_float("reg", reg)
    if not (reg >= 0.0 and np.isfinite(reg)):
        raise _inputs.input_error("reg", f"is {reg!r}; accepted: a finite number >= 0 (0: exact optimal transport, "
                                         "with a warning)")
    return reg


def _cost_matrix(M):
    """M as a float64 n x m array; +inf entries are forbidden pairs (the plan is 0 there, as in
    POT); NaN and -inf are refused."""
    array = _inputs.as_array("M", _detached(M), (2,), allow_none=False)
    if array.size == 0:
        raise _inputs.input_error("M", f"is empty (shape {array.shape}); accepted: an n x m cost matrix, n, m >= 1")
    bad = np.isnan(array) | (array == -np.inf)
    if bad.any():
        i, j = np.argwhere(bad)[0]
        raise _inputs.input_error("M", f"entry ({i}, {j}) is {array[i, j]}; accepted: real costs, +inf for a "
                                       "forbidden pair")
    return array


def _detached(value):
    """A torch tensor's detached copy (tokenflow.pot computes without autograd; the functions that
    give gradients attach them afterwards), anything else as it is."""
    if type(value).__module__.split(".")[0] == "torch" and hasattr(value, "detach"):
        return value.detach()
    return value


def _requires_grad(*values) -> bool:
    return any(getattr(v, "requires_grad", False) for v in values)


def _type_as(*candidates):
    """POT's type_as: the first candidate that is a non-empty numpy array or torch tensor (lists
    are numpy float64 in POT)."""
    for c in candidates:
        if c is not None and hasattr(c, "dtype") and hasattr(c, "shape") and int(np.prod(c.shape)) > 0:
            return c
    return None


def _with_gradients(value, pairs):
    """value (a number) as a 0-d tensor whose gradient with respect to each tensor t of pairs
    (t, d) that requires grad is d (an array of t's shape): the envelope theorem's gradient of an
    optimal value, as POT's set_gradients gives it. The value has the dtype and device of the first
    tensor that requires grad (FloatingPointError when that dtype cannot hold it)."""
    import torch

    pairs = [(t, d) for t, d in pairs if getattr(t, "requires_grad", False)]
    inputs = [t for t, _ in pairs]
    like = inputs[0]
    _fits(value, str(like.dtype).removeprefix("torch."), float(torch.finfo(like.dtype).max))
    grads = [torch.as_tensor(np.asarray(d), dtype=t.dtype, device=t.device) for t, d in pairs]

    class Envelope(torch.autograd.Function):
        @staticmethod
        def forward(ctx, *tensors):
            return torch.as_tensor(value, dtype=like.dtype, device=like.device)

        @staticmethod
        def backward(ctx, grad):
            return tuple(grad * d for d in grads)

    return Envelope.apply(*inputs)


def _history_recorder(mass: float, verbose: bool):
    """(progress callback, history list): the marginal error every 10 iterations (of the problem
    with mass `mass`, as POT's log["err"] keeps its error every 10 iterations), printed in POT's
    table when verbose."""
    history = []
    show = _verbose_progress(verbose)

    def record(iteration, error):
        history.append(error * mass)
        if show:
            show(iteration, error * mass)
    return record, history


def _solve_entropic(a, b, M, reg, numItermax, stopThr, verbose, warn):
    """(tokenflow.OTResult of the normalized problem, mass s, error history). a, b, M are float64
    (M checked by _cost_matrix)."""
    if a.shape != (M.shape[0],) or b.shape != (M.shape[1],):
        raise _inputs.input_error("a" if a.shape != (M.shape[0],) else "b", f"Dimension mismatch, check dimensions of "
                                                                             f"M {M.shape} with a {a.shape} and b {b.shape}")
    mass = _same_mass(a, b, "sinkhorn", assertion=False)
    record, history = _history_recorder(mass, verbose)
    # POT stops when the l2 error of the column marginal of the mass-s plan is below stopThr; the
    # normalized problem's l1 error of both marginals below stopThr / s implies it.
    never = not stopThr > 0
    tol = _NO_STOP if never else float(stopThr) / mass
    with warnings.catch_warnings(record=True) as caught, _inputs.renamed_keys(_POT_NAMES.get):
        warnings.simplefilter("always", ConvergenceWarning)
        result = _transport.sinkhorn(a=a / a.sum(), b=b / b.sum(), M=M, epsilon=reg, tol=tol,
                                     max_iter=int(numItermax), progress=record)
    for w in caught:  # the solver's ConvergenceWarning (POT's "did not converge"), in POT's terms for stopThr = 0
        if not issubclass(w.category, ConvergenceWarning):
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
        elif warn:
            message = (f"Sinkhorn did not converge: stopThr = {stopThr:g} stops no solve; it ran {result.iterations} "
                       f"iterations (numItermax = {int(numItermax)}, or until its iterates stopped changing), to "
                       f"marginal error {result.marginal_error * mass:.3g}"
                       if never else f"Sinkhorn did not converge: {w.message}")
            warnings.warn(message, ConvergenceWarning, stacklevel=4)
    history.append(result.marginal_error * mass)  # the returned plan's own error, last
    return result, mass, history


# POT's log keys for each method (POT 0.8.2, one target histogram); every log also holds
# tokenflow's log_u, log_v, converged and marginal_error.
_LOG_KEYS = {"sinkhorn": ("err", "niter", "u", "v"),
             "sinkhorn_log": ("err", "niter", "log_u", "log_v", "u", "v"),
             "greenkhorn": ("n_iter", "u", "v"),
             "sinkhorn_stabilized": ("err", "n_iter", "logu", "logv", "alpha", "beta", "warmstart"),
             "sinkhorn_epsilon_scaling": ("err", "niter", "alpha", "beta", "warmstart")}


def _method_log(method, result, mass, reg, history):
    """POT's log of `method` for a solve of the normalized problem scaled to mass `mass`: the
    scalings u = exp(log_u), v = exp(log_v) with plan = diag(u) exp(-M / reg) diag(v), and
    alpha = reg log_u, beta = reg log_v (plan = exp((alpha_i + beta_j - M_ij) / reg))."""
    with np.errstate(divide="ignore", over="ignore"):
        log_u = np.log(mass * result.a) + result.f / reg
        log_v = np.log(result.b) + result.g / reg
        u, v = np.exp(log_u), np.exp(log_v)
    alpha, beta = reg * log_u, reg * log_v
    values = {"err": history, "niter": result.iterations, "n_iter": result.iterations, "log_u": log_u,
              "log_v": log_v, "u": u, "v": v, "logu": log_u, "logv": log_v, "alpha": alpha, "beta": beta,
              "warmstart": (alpha, beta), "converged": result.converged,
              "marginal_error": result.marginal_error * mass}
    keys = _LOG_KEYS[method] + ("log_u", "log_v", "converged", "marginal_error")
    return {k: values[k] for k in dict.fromkeys(keys)}


def _exact_log(method, plan_result, mass, lg):
    """The log of reg = 0 (solved as exact OT): POT's keys of `method` that stay finite (alpha and
    beta are the optimal dual potentials, the limit of reg log u as reg -> 0; the scalings
    themselves have none), iterations 0 and the plan's marginal error."""
    alpha, beta = lg["u"], lg["v"]
    values = {"err": [0.0], "niter": 0, "n_iter": 0, "alpha": alpha, "beta": beta, "warmstart": (alpha, beta),
              "converged": True, "marginal_error": 0.0}
    keys = [k for k in _LOG_KEYS[method] + ("converged", "marginal_error") if k in values]
    if "alpha" not in keys:
        keys += ["alpha", "beta"]
    return {k: values[k] for k in keys}


def _combine_logs(logs):
    """The logs of several target histograms as one, as POT returns it: arrays stacked as columns
    (n x k), iteration counts their maximum, the error histories their maximum step by step."""
    out = {}
    for key, first in logs[0].items():
        values = [lg[key] for lg in logs]
        if key == "err":
            length = max(len(h) for h in values)
            out[key] = [max(h[min(i, len(h) - 1)] for h in values) for i in range(length)]
        elif key == "warmstart":
            out[key] = (np.stack([w[0] for w in values], 1), np.stack([w[1] for w in values], 1))
        elif isinstance(first, np.ndarray):
            out[key] = np.stack(values, 1)
        elif key == "converged":
            out[key] = all(values)
        else:
            out[key] = max(values)
    return out


def _log_like(log, like):
    """The arrays of a log in like's type (POT gives them in the type of its inputs); the scalings
    u and v may overflow there as POT's do (log_u and log_v are always given)."""
    out = {}
    for key, value in log.items():
        if isinstance(value, np.ndarray):
            with np.errstate(over="ignore"):
                value = _like(value, like, check=key not in ("u", "v"))
        elif key == "warmstart":
            value = tuple(_like(w, like) for w in value)
        out[key] = value
    return out


def _entropic(a, b, M, reg, method, numItermax, stopThr, verbose, log, warn, return_plan):
    """POT's sinkhorn (return_plan) and sinkhorn2 for every method: a plan or its cost <M, pi>, the
    vector of costs for several target histograms (b of shape m x k), and POT's log of the method."""
    method = str(method).lower()
    numItermax, stopThr, verbose, log, warn = _options(numItermax, stopThr, verbose=verbose, log=log, warn=warn)
    reg = _regularization(reg)
    if _requires_grad(a, b, M):
        return _entropic_with_gradients(a, b, M, reg, numItermax, stopThr, log, warn, return_plan)
    like = _type_as(M, a, b)
    M_ = _cost_matrix(M)
    a_, _ = _histogram(_detached(a), "a", M_.shape[0])
    b_, _ = _histogram(_detached(b), "b", M_.shape[1])
    targets = [b_] if b_.ndim == 1 else [b_[:, k] for k in range(b_.shape[1])]
    values, logs = [], []
    for target in targets:
        if reg == 0.0:
            warnings.warn(f"sinkhorn: reg = 0 is exact optimal transport, solved by tokenflow's network simplex "
                          f"(POT's method {method!r} meets numerical errors there)", POTDifferenceWarning,
                          stacklevel=3)
            result, mass, lg = _solve_exact(a_, target, M_, like, what="sinkhorn")
            plan, cost = result.plan * mass, float(result.cost * mass)
            logs.append(_exact_log(method, result, mass, lg))
        else:
            result, mass, history = _solve_entropic(a_, target, M_, reg, numItermax, stopThr, verbose, warn)
            _finite_scaled("sinkhorn", result, mass)
            plan, cost = result.plan * mass if return_plan and b_.ndim == 1 else None, float(result.cost * mass)
            logs.append(_method_log(method, result, mass, reg, history))
        values.append(plan if return_plan and b_.ndim == 1 else cost)
    if b_.ndim == 1:
        value = _like(values[0], like)
        lg = logs[0]
    else:  # several target histograms: POT returns the vector of costs
        value = _like(np.array(values), like)
        lg = _combine_logs(logs)
    return (value, _log_like(lg, like)) if log else value


def _entropic_with_gradients(a, b, M, reg, numItermax, stopThr, log, warn, return_plan):
    """sinkhorn / sinkhorn2 on torch tensors that require grad: the plan of tokenflow.torch.sinkhorn
    (the converged fixed point, differentiated implicitly in M, a and b), scaled to the mass of a
    (tokenflow.torch normalizes the weights in torch, so the gradients stay on the simplex). Every
    argument is checked as without grad first (InputError naming it); the log holds what this solve
    knows: the returned plan's marginal error and whether it meets stopThr."""
    import torch

    import tokenflow.torch as tt

    M_ = _cost_matrix(M)
    a_, _ = _histogram(_detached(a), "a", M_.shape[0])
    b_, _ = _histogram(_detached(b), "b", M_.shape[1])
    if b_.ndim != 1:
        raise _inputs.input_error("b", f"has shape {b_.shape}; accepted with tensors that require grad: one target "
                                       f"histogram ({M_.shape[1]},)")
    if a_.shape != (M_.shape[0],) or b_.shape != (M_.shape[1],):
        raise _inputs.input_error("a" if a_.shape != (M_.shape[0],) else "b", f"Dimension mismatch, check dimensions "
                                                                               f"of M {M_.shape} with a {a_.shape} and b {b_.shape}")
    if np.isinf(M_).any():
        raise _inputs.input_error("M", "has +inf entries (forbidden pairs) while tensors require grad; accepted: "
                                       "finite costs (gradients are not defined through forbidden pairs)")
    if reg == 0.0:
        raise _inputs.input_error("reg", "is 0 (exact optimal transport) while tensors require grad; accepted: reg > 0 "
                                         "(emd2 gives exact OT's gradients)")
    mass = _same_mass(a_, b_, "sinkhorn", assertion=False)
    # The first floating-point tensor gives the dtype and device (POT's type_as; one requires grad).
    like = next(t for t in (M, a, b) if torch.is_tensor(t) and t.is_floating_point())
    M_t = M if torch.is_tensor(M) and M.is_floating_point() else torch.as_tensor(M_, dtype=like.dtype)
    a_t = a if torch.is_tensor(a) and a.numel() else None if a is None or a_.size == 0 else a_
    b_t = b if torch.is_tensor(b) and b.numel() else None if b is None or b_.size == 0 else b_
    tol = stopThr / mass  # POT's absolute stopThr on the plan of mass s; 0 runs numItermax iterations
    with _warnings_if(warn), _inputs.renamed_keys({"C": "M", "epsilon": "reg", "tol": "stopThr",
                                                   "max_iter": "numItermax"}.get):
        plan = tt.sinkhorn(M_t, a_t, b_t, epsilon=reg, tol=tol, max_iter=numItermax, strict=False)
    # The mass of a, inside the graph when a is a tensor (its gradient sees the scaling), summed in
    # float64 (a float16 sum rounds at 2^-11).
    scale = a.sum(dtype=torch.float64) if torch.is_tensor(a) and a.numel() else mass
    plan = (plan.to(torch.float64) * scale).to(plan.dtype)
    value = plan if return_plan else (M_t * plan).sum()
    dtype = str(value.dtype).removeprefix("torch.")
    if not bool(torch.isfinite(value.detach()).all()):  # the inputs are finite: the scaling or the sum overflowed
        raise FloatingPointError(f"sinkhorn: the plan of mass {mass:g} or its cost overflows the range of {dtype} "
                                 "(rescale a and b)")
    _fits(value.detach().cpu().numpy(), dtype, float(torch.finfo(value.dtype).max))
    if not log:
        return value
    P = plan.detach().cpu().numpy().astype(np.float64)
    error = float(np.abs(P.sum(1) - a_ * (mass / a_.sum())).sum() + np.abs(P.sum(0) - b_ * (mass / b_.sum())).sum())
    return value, {"err": [error], "marginal_error": error, "converged": bool(error < stopThr)}


# The parameters of the entropic solvers (numpydoc): POT's arguments, each written once.
_PROBLEM = """
a : array_like of shape (n,)
    Source histogram (an empty list: uniform).
b : array_like of shape (m,) or (m, k)
    Target histogram, or k of them as columns (an empty list: uniform), of the mass of a.
M : array_like of shape (n, m)
    The cost matrix; ``+inf`` forbids a pair (the plan is 0 there).
reg : float
    The entropic regularization; 0 is exact optimal transport (the network simplex), with a
    :class:`POTDifferenceWarning`.
"""
_STOP = """
stopThr : float, default 1e-9
    The l1 error of both marginals to reach (which implies POT's test); 0 runs the whole
    iteration budget (or until the iterates stop changing) and warns, as POT.
"""
_VERBOSE_LOG = """
verbose : bool, default False
    Print the iterations as POT does.
log : bool, default False
    Also return the log dict, with POT's keys for the method (docs/ot.md, "From POT").
"""
_WARN = """
warn : bool, default True
    Warn with :class:`tokenflow.ConvergenceWarning` when stopped at numItermax.
"""
_KWARGS = """
**kwargs
    POT's per-method keyword arguments, accepted and not used.
"""


def _parts(*parts: str) -> str:
    return "\n".join(part.strip("\n") for part in parts)


_SINKHORN_PARAMETERS = _parts(_PROBLEM, """
method : str, default "sinkhorn"
    Any of POT's method names; each solves the same problem to the same tolerance.
numItermax : int, default 1000
    The iteration budget.
""", _STOP, _VERBOSE_LOG, _KWARGS)
_ENTROPIC_ERRORS = """
tokenflow.InputError
    Bad histograms, costs or options, forbidden pairs that no plan avoids; with torch tensors
    that require grad, also reg = 0, +inf in M and several targets.
FloatingPointError
    A result the arithmetic (or the inputs' dtype) could not carry.
"""
_SINKHORN_RAISES = _parts("""
Raises
------
ValueError
    An unknown method, or histograms of different masses (as POT).
""", _ENTROPIC_ERRORS)
_METHOD_RAISES = _parts("""
Raises
------
ValueError
    Histograms of different masses (as POT).
""", _ENTROPIC_ERRORS)
_PLAN_RETURNS = """
Returns
-------
numpy.ndarray or torch.Tensor
    The plan (n x m) in the type of M (a tensor with the implicit gradient when tensors require
    grad); with b of shape (m, k), the k costs ``<M, pi_k>`` (as POT). With ``log=True``, a pair
    (that, the log dict).
"""
# The sections after the parameters of their own of sinkhorn_stabilized and sinkhorn_epsilon_scaling.
_METHOD_TAIL = "\n\n".join([_parts(_WARN, _KWARGS), _PLAN_RETURNS.strip("\n"), _METHOD_RAISES])
# The sections of the methods of ot.bregman that take POT's sinkhorn arguments alone.
_METHOD_SECTIONS = "\n\n".join([_parts("""
Parameters
----------
""", _PROBLEM, """
numItermax : int, default 1000
    The iteration budget.
""", _STOP, _VERBOSE_LOG, _WARN, _KWARGS), _PLAN_RETURNS.strip("\n"), _METHOD_RAISES])


@shared(parameters=_SINKHORN_PARAMETERS, warn=_WARN, returns=_PLAN_RETURNS, raises=_SINKHORN_RAISES)
def sinkhorn(a, b, M, reg, method="sinkhorn", numItermax=1000, stopThr=1e-9, verbose=False, log=False, warn=True,
             **kwargs):
    """The entropic OT plan of POT's ``ot.sinkhorn(a, b, M, reg)``.

    The argmin of ``<pi, M> + reg KL(pi | a b^T)`` over the couplings of a and b, by tokenflow's
    log-domain solver (every POT method name solves this problem; the differences from POT are
    listed in the module's description).

    Parameters
    ----------
    {{parameters}}
    {{warn}}

    {{returns}}

    {{raises}}

    Examples
    --------
    >>> import tokenflow.pot as ot, numpy as np
    >>> np.round(ot.sinkhorn([0.5, 0.5], [0.5, 0.5], [[0.0, 1.0], [1.0, 0.0]], 1.0), 4).tolist()
    [[0.3655, 0.1345], [0.1345, 0.3655]]
    """
    if str(method).lower() not in _SINKHORN_METHODS:
        raise ValueError("Unknown method '%s'." % method)
    return _entropic(a, b, M, reg, method, numItermax, stopThr, verbose, log, warn, return_plan=True)


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
    float or numpy.ndarray or torch.Tensor
        The cost in the type of M (np.float32 for float32, a 0-d tensor with the implicit gradient
        for torch); with b of shape (m, k), the k costs. With ``log=True``, a pair (that, the log
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
    return _entropic(a, b, M, reg, method, numItermax, stopThr, verbose, log, warn, return_plan=False)


@shared(sections=_METHOD_SECTIONS)
def sinkhorn_knopp(a, b, M, reg, numItermax=1000, stopThr=1e-9, verbose=False, log=False, warn=True, **kwargs):
    """POT's ``ot.bregman.sinkhorn_knopp``: :func:`sinkhorn` with method "sinkhorn".

    The log holds POT's keys err, niter, u, v (the scalings: ``plan = diag(u) exp(-M / reg)
    diag(v)``), and tokenflow's log_u, log_v, converged and marginal_error.

    {{sections}}

    Examples
    --------
    >>> import tokenflow.pot as ot
    >>> plan, log = ot.bregman.sinkhorn_knopp([0.5, 0.5], [0.5, 0.5], [[0.0, 1.0], [1.0, 0.0]], 1.0, log=True)
    >>> sorted(log)[:6], log["u"].shape
    (['converged', 'err', 'log_u', 'log_v', 'marginal_error', 'niter'], (2,))
    """
    return _entropic(a, b, M, reg, "sinkhorn", numItermax, stopThr, verbose, log, warn, return_plan=True)


@shared(sections=_METHOD_SECTIONS)
def sinkhorn_log(a, b, M, reg, numItermax=1000, stopThr=1e-9, verbose=False, log=False, warn=True, **kwargs):
    """POT's ``ot.bregman.sinkhorn_log``: :func:`sinkhorn` with method "sinkhorn_log".

    The log holds POT's keys err, niter, log_u, log_v, u, v, and tokenflow's converged and
    marginal_error.

    {{sections}}

    Examples
    --------
    >>> import tokenflow.pot as ot
    >>> ot.bregman.sinkhorn_log([0.5, 0.5], [0.5, 0.5], [[0.0, 1.0], [1.0, 0.0]], 1.0).round(4).tolist()
    [[0.3655, 0.1345], [0.1345, 0.3655]]
    """
    return _entropic(a, b, M, reg, "sinkhorn_log", numItermax, stopThr, verbose, log, warn, return_plan=True)


@shared(problem=_PROBLEM, stop=_STOP, verbose_log=_VERBOSE_LOG, warn=_WARN, returns=_PLAN_RETURNS,
        raises=_METHOD_RAISES)
def greenkhorn(a, b, M, reg, numItermax=10000, stopThr=1e-9, verbose=False, log=False, warn=True):
    """POT's ``ot.bregman.greenkhorn``: the plan of :func:`sinkhorn`.

    POT updates one row or column at a time (greedy); tokenflow solves the same problem with its
    log-domain solver, to the same stopThr. The log holds POT's keys n_iter, u, v, and tokenflow's
    log_u, log_v, converged and marginal_error.

    Parameters
    ----------
    {{problem}}
    numItermax : int, default 10000
        The iteration budget: at most numItermax of tokenflow's iterations (each updates every
        row and column).
    {{stop}}
    {{verbose_log}}
    {{warn}}

    {{returns}}

    {{raises}}

    Examples
    --------
    >>> import tokenflow.pot as ot
    >>> ot.bregman.greenkhorn([0.5, 0.5], [0.5, 0.5], [[0.0, 1.0], [1.0, 0.0]], 1.0).round(4).tolist()
    [[0.3655, 0.1345], [0.1345, 0.3655]]
    """
    return _entropic(a, b, M, reg, "greenkhorn", numItermax, stopThr, verbose, log, warn, return_plan=True)


@shared(problem=_PROBLEM, stop=_STOP, verbose_log=_VERBOSE_LOG, tail=_METHOD_TAIL)
def sinkhorn_stabilized(a, b, M, reg, numItermax=1000, tau=1e3, stopThr=1e-9, warmstart=None, verbose=False,
                        print_period=20, log=False, warn=True, **kwargs):
    """POT's ``ot.bregman.sinkhorn_stabilized``: :func:`sinkhorn` with method "sinkhorn_stabilized".

    The log holds POT's keys err, n_iter, logu, logv, alpha, beta (``alpha = reg log u``: ``plan =
    exp((alpha_i + beta_j - M_ij) / reg)``), warmstart (alpha, beta), and tokenflow's log_u,
    log_v, converged and marginal_error.

    Parameters
    ----------
    {{problem}}
    numItermax : int, default 1000
        The iteration budget.
    tau : float, default 1e3
        Accepted and not used: tokenflow's solver works in the log domain throughout, with no
        absorption threshold.
    {{stop}}
    warmstart : tuple of array_like, optional
        Accepted and not used.
    {{verbose_log}}
    print_period : int, default 20
        Accepted and not used.
    {{tail}}

    Examples
    --------
    >>> import tokenflow.pot as ot
    >>> plan, log = ot.bregman.sinkhorn_stabilized([0.5, 0.5], [0.5, 0.5], [[0.0, 1.0], [1.0, 0.0]], 1.0, log=True)
    >>> [k for k in ("alpha", "beta", "logu", "logv", "n_iter", "warmstart") if k in log]
    ['alpha', 'beta', 'logu', 'logv', 'n_iter', 'warmstart']
    """
    return _entropic(a, b, M, reg, "sinkhorn_stabilized", numItermax, stopThr, verbose, log, warn, return_plan=True)


@shared(problem=_PROBLEM, stop=_STOP, verbose_log=_VERBOSE_LOG, tail=_METHOD_TAIL)
def sinkhorn_epsilon_scaling(a, b, M, reg, numItermax=100, epsilon0=1e4, numInnerItermax=100, tau=1e3,
                             stopThr=1e-9, warmstart=None, verbose=False, print_period=10, log=False, warn=True,
                             **kwargs):
    """POT's ``ot.bregman.sinkhorn_epsilon_scaling``: :func:`sinkhorn` with method
    "sinkhorn_epsilon_scaling".

    tokenflow's solver chooses its own epsilon schedule. The log holds POT's keys err, niter,
    alpha, beta, warmstart, and tokenflow's log_u, log_v, converged and marginal_error.

    Parameters
    ----------
    {{problem}}
    numItermax : int, default 100
        POT's outer iterations: the budget is ``max(35, numItermax) * numInnerItermax`` of
        tokenflow's iterations (POT's outer and inner loops).
    epsilon0 : float, default 1e4
        Accepted and not used (tokenflow's solver chooses its own epsilon schedule).
    numInnerItermax : int, default 100
        POT's inner iterations, a factor of the budget.
    tau : float, default 1e3
        Accepted and not used.
    {{stop}}
    warmstart : tuple of array_like, optional
        Accepted and not used.
    {{verbose_log}}
    print_period : int, default 10
        Accepted and not used.
    {{tail}}

    Examples
    --------
    >>> import tokenflow.pot as ot
    >>> ot.bregman.sinkhorn_epsilon_scaling([0.5, 0.5], [0.5, 0.5], [[0.0, 1.0], [1.0, 0.0]], 1.0).round(4).tolist()
    [[0.3655, 0.1345], [0.1345, 0.3655]]
    """
    budget = max(35, _inputs.as_int("numItermax", numItermax, 1)) * _inputs.as_int("numInnerItermax", numInnerItermax, 1)
    return _entropic(a, b, M, reg, "sinkhorn_epsilon_scaling", budget, stopThr, verbose, log, warn,
                     return_plan=True)


# The parameters of the empirical solvers (numpydoc), written once.
_SAMPLES = """
X_s : array_like of shape (n, d)
    The source samples (a numpy array, a list or a torch tensor without grad).
X_t : array_like of shape (m, d)
    The target samples, of the dimension d of X_s.
reg : float
    The entropic regularization, > 0, in the units of the cost.
a : array_like of shape (n,), optional
    Source histogram; uniform when None.
b : array_like of shape (m,), optional
    Target histogram, of the mass of a; uniform when None.
metric : str, default "sqeuclidean"
    The cost ``dist(X_s, X_t, metric)``: "sqeuclidean" and "euclidean" are computed by tokenflow
    from the points, any other metric by scipy's cdist (as :func:`dist`).
numIterMax : int, default 10000
    The iteration budget.
"""
_EMPIRICAL_OPTIONS = """
verbose : bool, default False
    Print the iterations as POT does.
log : bool, default False
    Also return POT's log of sinkhorn (err, niter, u, v) with tokenflow's log_u, log_v,
    converged and marginal_error.
warn : bool, default True
    Warn with :class:`tokenflow.ConvergenceWarning` when stopped at numIterMax.
**kwargs
    POT's other keyword arguments, accepted and not used.
"""
_LAZY = """
isLazy : bool, default False
    True: the cost is recomputed from the points in tiles (memory O(n + m)) and no cost matrix or
    plan is formed; "sqeuclidean" and "euclidean" only.
batchSize : int, default 100
    Accepted and not used (the tiles are tokenflow's own).
"""
_EMPIRICAL_PARAMETERS = _parts(_SAMPLES, _STOP, _LAZY, _EMPIRICAL_OPTIONS)
_COST_RETURNS = """
Returns
-------
float or numpy.floating or torch.Tensor
    The cost, in the type of {samples} (np.float32 for float32 samples, a 0-d tensor for a
    tensor); with ``log=True``, a pair (cost, log).
"""
_EMPIRICAL_RAISES = """
Raises
------
tokenflow.InputError
    Naming the argument: X_s and X_t not 2-D with as many columns, non-finite or empty samples,
    tensors that require grad, bad histograms, reg <= 0, numIterMax < 1, stopThr < 0, flags that
    are not bools, a plan too large for memory.
ValueError
    Histograms of different masses (as POT), or isLazy=True with a metric other than
    "sqeuclidean" and "euclidean".
FloatingPointError
    A result the arithmetic (or the samples' dtype) could not carry.
"""


def _empirical(X_s, X_t, reg, a, b, metric, numIterMax, stopThr, isLazy, verbose, warn, want_plan=False):
    """(OTResult of the normalized problem, mass, error history) between the samples; with
    want_plan, a plan that cannot be held is refused before the solve (InputError naming its size)."""
    numIterMax, stopThr, verbose, warn = _options(numIterMax, stopThr, "numIterMax", verbose=verbose, warn=warn)
    isLazy = _inputs.as_bool("isLazy", isLazy)
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
    record, history = _history_recorder(mass, verbose)
    with _warnings_if(warn):
        common = dict(a=a_ / a_.sum(), b=b_ / b_.sum(), epsilon=_inputs.as_float("reg", reg),
                      tol=float(stopThr) / mass if stopThr > 0 else _NO_STOP, max_iter=numIterMax, progress=record)
        with _inputs.renamed_keys({"x": "X_s", "y": "X_t", **_POT_NAMES, "max_iter": "numIterMax"}.get):
            if metric in ("sqeuclidean", "euclidean"):
                # Lazy: the cost recomputed from the points in tiles (memory O(n + m)), no plan formed.
                extra = dict(operator="online", plan=False) if isLazy else {}
                result = _transport.sinkhorn(xs, xt, cost=metric, **common, **extra)
            elif isLazy:
                raise ValueError(f"isLazy=True supports metric 'sqeuclidean' and 'euclidean' (got {metric!r})")
            else:
                result = _transport.sinkhorn(M=dist(xs, xt, metric=metric), **common)
    history.append(result.marginal_error * mass)
    return result, mass, history


@shared(parameters=_EMPIRICAL_PARAMETERS, raises=_EMPIRICAL_RAISES)
def empirical_sinkhorn(X_s, X_t, reg, a=None, b=None, metric="sqeuclidean", numIterMax=10000, stopThr=1e-9,
                       isLazy=False, batchSize=100, verbose=False, log=False, warn=True, **kwargs):
    """POT's ``ot.bregman.empirical_sinkhorn``: the entropic plan between two sets of samples.

    The plan of :func:`sinkhorn` for the cost ``M = dist(X_s, X_t, metric)``, by tokenflow's
    log-domain solver.

    Parameters
    ----------
    {{parameters}}

    Returns
    -------
    numpy.ndarray or torch.Tensor of shape (n, m), or a pair of arrays
        The plan, in the type of X_s. With ``isLazy=True``, POT's dual pair (f, g) of shapes (n,)
        and (m,), with ``plan_ij = exp(f_i + g_j - M_ij / reg)``, computed without holding M.
        With ``log=True``, the log dict is appended: (plan, log) or (f, g, log).

    {{raises}}

    Examples
    --------
    >>> import tokenflow.pot as ot, numpy as np
    >>> x = np.array([[0.0], [1.0]])
    >>> ot.bregman.empirical_sinkhorn(x, x, 0.01).round(6).tolist()
    [[0.5, 0.0], [0.0, 0.5]]
    """
    result, mass, history = _empirical(X_s, X_t, reg, a, b, metric, numIterMax, stopThr, isLazy, verbose, warn,
                                       want_plan=not isLazy)
    lg = _log_like(_method_log("sinkhorn", result, mass, float(reg), history), X_s)
    if isLazy:
        f, g = lg["log_u"], lg["log_v"]
        return (f, g, lg) if log else (f, g)
    plan = _like(result.plan * mass, X_s)
    return (plan, lg) if log else plan


@shared(parameters=_EMPIRICAL_PARAMETERS, returns=_COST_RETURNS.format(samples="X_s"), raises=_EMPIRICAL_RAISES)
def empirical_sinkhorn2(X_s, X_t, reg, a=None, b=None, metric="sqeuclidean", numIterMax=10000, stopThr=1e-9,
                        isLazy=False, batchSize=100, verbose=False, log=False, warn=True, **kwargs):
    """POT's ``ot.bregman.empirical_sinkhorn2``: the transport cost ``<M, pi>`` of the plan of
    :func:`empirical_sinkhorn`.

    The linear cost, without the entropy term.

    Parameters
    ----------
    {{parameters}}

    {{returns}}

    {{raises}}

    Examples
    --------
    >>> import tokenflow.pot as ot, numpy as np
    >>> x = np.array([[0.0], [1.0]])
    >>> round(ot.bregman.empirical_sinkhorn2(x, x + 1.0, 0.01), 6)
    1.0
    """
    result, mass, history = _empirical(X_s, X_t, reg, a, b, metric, numIterMax, stopThr, isLazy, verbose, warn)
    value = _like(float(result.cost * mass), _type_as(X_s))
    return (value, _log_like(_method_log("sinkhorn", result, mass, float(reg), history), X_s)) if log else value


@shared(samples=_SAMPLES, options=_EMPIRICAL_OPTIONS, raises=_EMPIRICAL_RAISES)
def empirical_sinkhorn_divergence(X_s, X_t, reg, a=None, b=None, metric="sqeuclidean", numIterMax=10000,
                                  stopThr=1e-9, verbose=False, log=False, warn=True, **kwargs):
    """POT's ``ot.bregman.empirical_sinkhorn_divergence``: ``max(0, W_ab - (W_aa + W_bb) / 2)``.

    W are the transport costs ``<M, pi>`` of three entropic plans (:func:`empirical_sinkhorn2`
    between X_s and X_t, X_s and itself, X_t and itself): POT's convention, tokenflow's
    ``divergence_pot``. The debiased divergence built from the entropic objectives is
    ``tokenflow.sinkhorn(..., divergence=True).divergence``.

    Parameters
    ----------
    {{samples}}
    stopThr : float, default 1e-9
        Accepted and not used: as in POT, the three solves use stopThr = 1e-9.
    {{options}}

    Returns
    -------
    float or numpy.floating or torch.Tensor
        The divergence, >= 0, in the type of X_s; with ``log=True``, a pair (divergence, log) whose
        log holds sinkhorn_loss_ab, sinkhorn_loss_a, sinkhorn_loss_b and the three solves' logs
        log_sinkhorn_ab, log_sinkhorn_a, log_sinkhorn_b.

    {{raises}}

    Examples
    --------
    >>> import tokenflow.pot as ot, numpy as np
    >>> x = np.array([[0.0], [1.0]])
    >>> round(float(ot.bregman.empirical_sinkhorn_divergence(x, x + 1.0, 0.5)), 6)   # ~ W_2^2 = 1
    1.0
    """
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

def _exact_inputs(a, b, M):
    """(a, b, M) of an exact problem as float64 arrays (empty a or b: uniform); b may hold several
    target histograms as columns (m x k)."""
    M_ = _cost_matrix(M)
    a_, _ = _histogram(_detached(a), "a", M_.shape[0])
    b_, _ = _histogram(_detached(b), "b", M_.shape[1])
    if a_.shape != (M_.shape[0],) or b_.ndim not in (1, 2) or b_.shape[0] != M_.shape[1]:
        raise AssertionError("Dimension mismatch, check dimensions of M with a and b")
    return a_, b_, M_


def _solve_exact(a_, b_, M_, like, numItermax=None, what="emd"):
    """(tokenflow.OTResult of the normalized problem with its duals centred as POT centres them,
    mass s, POT's log: cost, u, v, warning, result_code). With numItermax below the pivots the network simplex needed, the log's warning
    says so and a POTDifferenceWarning is issued (the plan is optimal all the same)."""
    mass = _same_mass(a_, b_, what, assertion=what == "emd")
    result = _transport.exact_ot(a=a_ / a_.sum(), b=b_ / b_.sum(), M=M_)  # each of sum 1, as POT rescales b
    # POT's centring of the duals: u + c, v - c with a.u = b.v balanced.
    c = ((b_ / mass) @ result.g - (a_ / mass) @ result.f) / ((a_ / mass).sum() + (b_ / mass).sum())  # no overflow
    _finite_scaled(what, result, mass)
    warning = None
    pivots = result.summary.get("pivots")
    if numItermax is not None and pivots is not None and pivots > numItermax:
        warning = (f"numItermax = {numItermax} is below the {pivots} pivots the network simplex needed: POT "
                   "stops there, before optimality (\"numItermax reached before optimality\"); tokenflow returns "
                   "the optimal plan")
        warnings.warn(warning, POTDifferenceWarning, stacklevel=4)
    result.f, result.g = result.f + c, result.g - c
    log = {"cost": _like(float(result.cost * mass), like), "u": _like(result.f, like),
           "v": _like(result.g, like), "warning": warning, "result_code": 1}
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
        The cost matrix; ``+inf`` forbids a pair (the plan is 0 there).
    numItermax : int, default 100000
        POT's pivot limit. The network simplex runs to the optimum all the same; when it needed
        more pivots, a :class:`POTDifferenceWarning` (also ``log["warning"]``) says that POT would
        have stopped short.
    log : bool, default False
        Also return a dict (cost, u, v, warning, result_code).
    center_dual : bool, default True
        Accepted: the dual potentials are centred as POT centres them.
    numThreads : int, default 1
        Accepted and not used.

    Returns
    -------
    numpy.ndarray or torch.Tensor of shape (n, m)
        The plan, in the type of the inputs; with ``log=True``, a pair (plan, log).

    Raises
    ------
    tokenflow.InputError
        Bad histograms or costs, or forbidden pairs that no plan avoids.
    AssertionError
        Histograms of different masses, or of the wrong lengths (as POT).

    Examples
    --------
    >>> import tokenflow.pot as ot
    >>> ot.emd([0.5, 0.5], [0.5, 0.5], [[0.0, 1.0], [1.0, 0.0]]).tolist()
    [[0.5, 0.0], [0.0, 0.5]]
    """
    numItermax, _, log = _options(numItermax, 0.0, log=log)
    like = _type_as(a, b, M)
    a_, b_, M_ = _exact_inputs(a, b, M)
    if b_.ndim != 1:
        raise AssertionError("Dimension mismatch, check dimensions of M with a and b")
    result, mass, lg = _solve_exact(a_, b_, M_, like, numItermax)
    plan = _like(result.plan * mass, like)
    return (plan, lg) if log else plan


def _emd2_one(a, b, a_, b_, M, M_, like, numItermax, log, return_matrix):
    result, mass, lg = _solve_exact(a_, b_, M_, like, numItermax)
    plan = result.plan * mass
    cost = _like(float(result.cost * mass), like)
    if _requires_grad(a, b, M):
        u, v = result.f, result.g
        cost = _with_gradients(float(result.cost * mass), [(a, u - u.mean()), (b, v - v.mean()), (M, plan)])
    if not (log or return_matrix):
        return cost
    if return_matrix:
        lg["G"] = _like(plan, like)
    return [cost, lg]


def emd2(a, b, M, processes=1, numItermax=100000, log=False, return_matrix=False, center_dual=True,
         numThreads=1):
    """The exact OT cost ``<M, pi>`` of POT's ``ot.emd2(a, b, M)``.

    In the type of a (of b or M when a is empty), with POT's gradients when torch tensors require
    them (a: the centred dual u, b: the centred v, M: the plan).

    Parameters
    ----------
    a : array_like of shape (n,)
        Source histogram (an empty list: uniform).
    b : array_like of shape (m,) or (m, k)
        Target histogram, or k of them as columns (an empty list: uniform).
    M : array_like of shape (n, m)
        The cost matrix; ``+inf`` forbids a pair.
    processes : int, default 1
        Accepted and not used.
    numItermax : int, default 100000
        POT's pivot limit: the optimum all the same, with a :class:`POTDifferenceWarning` when the
        simplex needed more pivots.
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
    float or numpy.ndarray or torch.Tensor or list
        The cost, or ``[cost, log]``; with b of shape (m, k), the list of the k results (as POT).

    Raises
    ------
    tokenflow.InputError
        Bad histograms or costs, forbidden pairs that no plan avoids, or several targets with
        tensors that require grad.
    AssertionError
        Histograms of different masses, or of the wrong lengths (as POT).

    Examples
    --------
    >>> import tokenflow.pot as ot
    >>> ot.emd2([0.5, 0.5], [0.5, 0.5], [[0.0, 1.0], [1.0, 0.0]])
    0.0
    """
    numItermax, _, log, return_matrix = _options(numItermax, 0.0, log=log, return_matrix=return_matrix)
    like = _type_as(a, b, M)
    a_, b_, M_ = _exact_inputs(a, b, M)
    if b_.ndim == 1:
        return _emd2_one(a, b, a_, b_, M, M_, like, numItermax, log, return_matrix)
    if _requires_grad(a, b, M):
        raise _inputs.input_error("b", "with tensors that require grad, one target histogram (a 1-D b)")
    return [_emd2_one(a, None, a_, b_[:, k], M, M_, like, numItermax, log, return_matrix)
            for k in range(b_.shape[1])]


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
    for name, w in (("a", a_), ("b", b_)):
        if w.ndim != 1:  # one histogram per side (POT's emd_1d takes vectors only)
            raise _inputs.input_error(name, f"has shape {w.shape}; accepted: a vector of {w.shape[0]} masses")
    _same_mass(a_, b_, "emd_1d", assertion=True)
    rows, cols, masses = _monotone_coupling(x, y, a_, b_)
    with np.errstate(over="ignore"):
        cost = float(np.sum(masses * _ground_1d(x[rows] - y[cols], metric, p)))
    if not np.isfinite(cost):
        raise FloatingPointError("emd_1d: the transport cost overflows the range of double (rescale x_a and x_b)")
    return rows, cols, masses, cost, (x.size, y.size)


_SAMPLES_1D = """
x_a : array_like of shape (n,) or (n, 1)
    The source samples (a numpy array, a list or a torch tensor without grad).
x_b : array_like of shape (m,) or (m, 1)
    The target samples.
a : array_like of shape (n,), optional
    Source histogram; uniform when None (or an empty list).
b : array_like of shape (m,), optional
    Target histogram, of the mass of a; uniform when None (or an empty list).
metric : {"sqeuclidean", "euclidean", "cityblock", "minkowski"}, default "sqeuclidean"
    The ground cost of two samples: ``|x - y|^2``, ``|x - y|`` (euclidean and cityblock alike in
    one dimension), or ``|x - y|^p`` (minkowski).
p : float, default 1.0
    The exponent of the minkowski metric.
"""
_RAISES_1D = """
Raises
------
tokenflow.InputError
    Naming the argument: non-finite or empty samples, tensors that require grad, histograms of
    the wrong length, with a negative entry or all zero.
AssertionError
    Samples that are not one-dimensional, or histograms of different masses (as POT).
ValueError
    Another metric.
FloatingPointError
    A transport cost beyond the range of double.
"""


@shared(samples=_SAMPLES_1D, raises=_RAISES_1D)
def emd_1d(x_a, x_b, a=None, b=None, metric="sqeuclidean", p=1.0, dense=True, log=False):
    """POT's ``ot.emd_1d``: the exact OT plan between one-dimensional samples.

    The monotone (north-west corner) coupling of the sorted samples, optimal for every cost convex
    in ``x - y``; O((n + m) log(n + m)) time.

    Parameters
    ----------
    {{samples}}
    dense : bool, default True
        Return the plan as a dense (n, m) array; False: a scipy.sparse ``coo_matrix`` with at most
        n + m - 1 entries.
    log : bool, default False
        Also return ``{"cost": <M, plan>}``.

    Returns
    -------
    numpy.ndarray or torch.Tensor of shape (n, m), or scipy.sparse.coo_matrix
        The plan, of the mass of a (dense: in the type of x_a); with ``log=True``, a pair (plan,
        log).

    {{raises}}

    Examples
    --------
    >>> import tokenflow.pot as ot
    >>> ot.emd_1d([0.0, 1.0], [3.0, 2.0]).tolist()   # sorted: 0 -> 2 and 1 -> 3
    [[0.0, 0.5], [0.5, 0.0]]
    """
    rows, cols, masses, cost, shape = _emd_1d(x_a, x_b, a, b, metric, p)
    if dense:
        plan = np.zeros(shape)
        np.add.at(plan, (rows, cols), masses)
        plan = _like(plan, x_a)
    else:
        from scipy.sparse import coo_matrix
        plan = coo_matrix((masses, (rows, cols)), shape=shape)
    return (plan, {"cost": _like(cost, _type_as(x_a))}) if log else plan


@shared(samples=_SAMPLES_1D, returns=_COST_RETURNS.format(samples="x_a"), raises=_RAISES_1D)
def emd2_1d(x_a, x_b, a=None, b=None, metric="sqeuclidean", p=1.0, dense=True, log=False):
    """POT's ``ot.emd2_1d``: the exact OT cost ``<M, plan>`` between one-dimensional samples.

    The cost of the monotone coupling of :func:`emd_1d`.

    Parameters
    ----------
    {{samples}}
    dense : bool, default True
        Accepted and not used: the log's plan is dense.
    log : bool, default False
        Also return ``{"G": plan}``.

    {{returns}}

    {{raises}}

    Examples
    --------
    >>> import tokenflow.pot as ot
    >>> ot.emd2_1d([0.0, 1.0], [2.0, 3.0])   # each sample moves by 2: cost 2^2
    4.0
    """
    rows, cols, masses, cost, shape = _emd_1d(x_a, x_b, a, b, metric, p)
    like = _type_as(x_a)
    if not log:
        return _like(cost, like)
    plan = np.zeros(shape)
    np.add.at(plan, (rows, cols), masses)
    return _like(cost, like), {"G": _like(plan, like)}


def wasserstein_1d(u_values, v_values, u_weights=None, v_weights=None, p=1, require_sort=True):
    """POT's ``ot.wasserstein_1d``: ``W_p^p`` between one-dimensional empirical measures.

    The p-th power, as POT returns it, from the monotone coupling of the sorted values: ``sum
    pi_ij |u_i - v_j|^p``, with the masses of u_weights (v_weights rescaled to the same total, as
    POT does). 2-D inputs (n, k) are k problems, one per column, and give k values. Unlike POT,
    tensors that require grad are refused (no gradient is computed).

    Parameters
    ----------
    u_values : array_like of shape (n,) or (n, k)
        The values of the first measure.
    v_values : array_like of shape (m,) or (m, k)
        The values of the second measure, of the dimension of u_values (as many columns).
    u_weights : array_like of shape (n,) or (n, k), optional
        Nonnegative weights of u_values; uniform (sum 1) when None.
    v_weights : array_like of shape (m,) or (m, k), optional
        Nonnegative weights of v_values; uniform when None.
    p : float, default 1
        The order, >= 1.
    require_sort : bool, default True
        Accepted and not used: the values are always sorted.

    Returns
    -------
    float or numpy.ndarray or torch.Tensor
        ``W_p^p``, in the type of u_values; for (n, k) values, the k values.

    Raises
    ------
    tokenflow.InputError
        Naming the argument: values not both 1-D or both 2-D with as many columns, non-finite or
        empty values, tensors that require grad, weights of the wrong shape, with a negative entry,
        all zero, or with a column of zeros.
    ValueError
        p < 1.
    FloatingPointError
        ``W_p^p`` beyond the range of double.

    Examples
    --------
    >>> import tokenflow.pot as ot
    >>> ot.wasserstein_1d([0.0, 1.0], [2.0, 3.0]), ot.wasserstein_1d([0.0, 1.0], [2.0, 3.0], p=2)
    (2.0, 4.0)
    """
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
    return _like(values[0] if u.ndim == 1 else np.array(values), _type_as(u_values))


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
