"""Optimal transport between weighted point clouds: entropic (Sinkhorn), exact, and W_p distances.

The same solver as ``tokenflow ot`` and ``tokenflow wasserstein`` (include/tokenflow/ot_solve.hpp):
the same inputs give the same numbers, to the last digit, and the same summary.json.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Union

import numpy as np

from . import _tokenflow
from ._checks import NormalizationWarning, require_finite, warn_convergence  # noqa: F401 (tokenflow.NormalizationWarning)
from ._inputs import (as_array, as_bool, as_callable_or_flag, as_float, as_int, as_str, as_weights, check_memory,
                      input_error, renamed_keys)
from ._progress import call_with_progress, log_fraction


@dataclass
class OTResult:
    """A transport plan and its dual potentials (docs/design.md section 1, "Optimal transport").

    What :func:`tokenflow.sinkhorn` and :func:`tokenflow.exact_ot` return, with the numbers of
    ``tokenflow ot`` on the same input.

    Attributes
    ----------
    plan : numpy.ndarray of shape (n, m) or None
        The coupling pi (plan.npy); None when sinkhorn was asked not to form it (``plan=False``).
    f : numpy.ndarray of shape (n,)
        The source dual potential, in the units of the cost.
    g : numpy.ndarray of shape (m,)
        The target dual potential.
    cost : float
        The transport cost ``<C, pi>``.
    objective : float
        sinkhorn: ``<C, pi> + epsilon KL(pi | a b^T)``; exact: equal to cost.
    iterations : int or None
        sinkhorn: the iterations run; None for exact OT.
    marginal_error : float
        ``|pi 1 - a|_1 + |pi^T 1 - b|_1`` of the returned plan (sinkhorn: of the plan formed from f
        and g, also when ``plan=False``; sums compensated).
    converged : bool
        sinkhorn: marginal_error < tol, with tol above rounding_floor; exact: True.
    a : numpy.ndarray of shape (n,)
        The source weights used: normalized to sum 1 (as given when marginal_penalty is set),
        uniform when not given.
    b : numpy.ndarray of shape (m,)
        The target weights used, as a.
    divergence : float or None
        sinkhorn(divergence=True): the debiased Sinkhorn divergence ``OT_eps(a, b) - (OT_eps(a, a) +
        OT_eps(b, b)) / 2``, built from the entropic objectives ``OT_eps = <C, pi> + eps KL(pi | a
        b^T)`` (>= 0); else None.
    divergence_pot : float or None
        The same combination of the transport costs ``<C, pi>`` of the three plans: POT's convention
        (``ot.bregman.empirical_sinkhorn_divergence``, which combines ``ot.sinkhorn2``'s values); it
        can be negative. Else None.
    marginal_penalty : float or None
        sinkhorn: rho of unbalanced transport; None: balanced (and for exact OT).
    plan_mass : float or None
        sinkhorn: ``sum_ij pi_ij`` of the returned plan (1 when balanced, up to its error); None
        for exact OT.
    rounding_floor : float or None
        sinkhorn: the smallest tol double arithmetic can honour for this plan (about ``4 * 2^-53 *
        <|f| + |g|>_pi / epsilon``, docs/ot.md); None for exact OT.
    epsilon_reached : float or None
        sinkhorn: the epsilon of the returned plan (epsilon, unless the solve ran out of iterations
        and an epsilon-scaling stage it reached was better); None for exact OT.
    summary : dict
        The summary.json of ``tokenflow ot`` on the same input (timings aside).
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
    divergence: Optional[float] = None
    divergence_pot: Optional[float] = None
    marginal_penalty: Optional[float] = None
    plan_mass: Optional[float] = None
    rounding_floor: Optional[float] = None
    epsilon_reached: Optional[float] = None
    summary: dict = field(default_factory=dict, repr=False)

    def __repr__(self) -> str:
        # The numbers, not the arrays (a plan can hold millions of entries).
        shape = "x".join(map(str, self.plan.shape)) if self.plan is not None else "not formed"
        parts = [f"status={self.summary.get('status', '?')!r}", f"cost={self.cost:.6g}",
                 f"objective={self.objective:.6g}", f"iterations={self.iterations}",
                 f"marginal_error={self.marginal_error:.3g}", f"plan={shape}"]
        if self.divergence is not None:
            parts.insert(3, f"divergence={self.divergence:.6g}")
        return "OTResult(" + ", ".join(parts) + ")"


def _options(**fields) -> "_tokenflow.OTOptions":
    # The CLI's options struct itself (include/tokenflow/ot_solve.hpp, OTSolveOptions): every field
    # is set by its name, and the C++ check_ot_options checks them as it does for `tokenflow ot`.
    options = _tokenflow.OTOptions()
    for name, value in fields.items():
        setattr(options, name, value)
    return options


def _ndim(value) -> int:
    try:
        return int(np.ndim(value))
    except Exception:  # anything numpy cannot take: left to as_array to describe
        return -1


def _size(value) -> int:
    try:
        return int(np.size(value))
    except Exception:  # as in _ndim
        return -1


def _shape(value) -> tuple:
    try:
        return tuple(np.shape(value))
    except Exception:  # as in _ndim
        return ()


def _refuse_pot_order(function: str, pot_call: str, x, y, third) -> None:
    """POT's positional order (1-D weights a and b first, the cost matrix M third) given to a
    function whose positional arguments are x, y, ...: refused with one InputError naming the two
    calls that work, before anything is converted or warned about. Empty x or y are not weights:
    they are refused as points, naming them."""
    if (_ndim(x) == 1 and _ndim(y) == 1 and _ndim(third) == 2 and _size(x) > 0 and _size(y) > 0
            and _shape(third) == (_size(x), _size(y))):  # M of shape (len(a), len(b)): POT's problem
        raise input_error("M", f"tokenflow.{function}(a, b, M, ...) is POT's argument order; tokenflow.{function} "
                               f"takes the points x and y first. Name the cost matrix, tokenflow.{pot_call}, "
                               f"or use POT's order with tokenflow.pot (import tokenflow.pot as ot)")


class _DefaultFloat(float):
    """A default that is the float it shows, told apart from the same number given by a caller by
    identity (``epsilon is _EPSILON_DEFAULT``)."""


# The defaults of the library's options structs (include/tokenflow/ot_solve.hpp, wasserstein.hpp),
# which `tokenflow ot` and `tokenflow wasserstein` use too: written once, in C++.
_OT = _tokenflow.OTOptions()
_W = _tokenflow.WassersteinOptions()
_EPSILON_DEFAULT = _DefaultFloat(_OT.epsilon)


def _epsilon_or_reg(epsilon, reg):
    """epsilon, or POT's name for it, reg (an alias); both given at once is refused."""
    if reg is None:
        return epsilon
    if epsilon is not _EPSILON_DEFAULT:
        raise input_error("reg", "is POT's name for epsilon; give one of the two, not both")
    return reg


def _points_and_weights(x, y, a, b, M, required: bool = False, stacklevel: int = 3, balanced: bool = True):
    """The arrays of an OT call, converted once (_inputs): points x, y (n x p, m x p; a 1-D array
    is n x 1), weights a, b (1-D, finite, >= 0, a positive sum; balanced: a NormalizationWarning
    when they do not sum to 1 beyond their dtype's rounding; unbalanced: their masses as given),
    cost matrix M (n x m)."""
    x, y = as_array("x", x, allow_none=not required), as_array("y", y, allow_none=not required)
    M = as_array("M", M, (2,))
    # The lengths the weights must have (the C++ side refuses points beside M, or neither).
    rows, cols = M.shape if M is not None and x is None and y is None else (
        None if x is None else len(x), None if y is None else len(y))
    weights = dict(stacklevel=stacklevel, warn=balanced, scale=balanced)
    return x, y, as_weights("a", a, rows, **weights), as_weights("b", b, cols, **weights), M


def _matrix_key(key: str):
    """The Python name of the cost matrix the C++ side names as the CLI's --cost-matrix."""
    return "M" if key == "cost_matrix" else None


def _plan_size(name: str, rows: int, cols: int, plan) -> None:
    """A plan (rows x cols float64) that would not fit in memory is refused before the solve, naming
    its size (a 10^5 x 10^5 plan is 75 GiB), unless plan=False."""
    if plan is not False:
        check_memory(name, 8.0 * rows * cols, f"the {rows} x {cols} transport plan")


def _result(run: "_tokenflow.OTRun") -> OTResult:
    # As `tokenflow ot`: status "failed" (exit 1 there) raises, max_iter warns (stderr there).
    r = run.solution  # the library's OTSolution (include/tokenflow/ot_solve.hpp)
    if r.status == "failed":
        raise FloatingPointError(f"optimal transport failed: {r.reason}")
    require_finite("optimal transport", plan=run.plan, f=run.f, g=run.g, cost=r.cost,
                   marginal_error=r.marginal_error)
    warn_convergence(run.warning, stacklevel=3)
    sinkhorn = r.method == "sinkhorn"
    return OTResult(plan=run.plan, f=run.f, g=run.g, cost=r.cost, objective=r.objective, iterations=r.iterations,
                    marginal_error=r.marginal_error, converged=r.converged, a=run.a, b=run.b,
                    divergence=r.divergence, divergence_pot=r.divergence_pot,
                    marginal_penalty=r.marginal_penalty if sinkhorn and np.isfinite(r.marginal_penalty) else None,
                    plan_mass=r.plan_mass if sinkhorn else None,
                    rounding_floor=run.summary.get("rounding_floor"),
                    epsilon_reached=run.summary.get("epsilon_reached"), summary=run.summary)


def sinkhorn(x=None, y=None, a=None, b=None, epsilon: float = _EPSILON_DEFAULT, cost: str = "sqeuclidean",
             tol: float = _OT.tol, max_iter: int = _OT.max_iter, plan: Optional[bool] = None,
             epsilon_start: Union[str, float] = _OT.epsilon_start, epsilon_decay: float = _OT.epsilon_decay,
             operator: str = _OT.operator,
             divergence: bool = False, overrelaxation: float = 0.0, M=None, progress=None,
             reg: Optional[float] = None, marginal_penalty: Optional[float] = None) -> OTResult:
    """Entropic optimal transport by Sinkhorn's algorithm (``tokenflow ot``).

    Solves ``min_{pi in Pi(a, b)} <C, pi> + epsilon KL(pi | a b^T)`` for ``C_ij = c(x_i, y_j)``,
    in the log domain, and stops when the marginal error ``|pi 1 - a|_1 + |pi^T 1 - b|_1`` is below
    tol. Zero weights are empty bins: they carry no mass (their plan rows or columns are 0). Runs
    without the GIL; Ctrl-C stops it (KeyboardInterrupt). Same arguments, same numbers as
    ``tokenflow ot --method sinkhorn``.

    Parameters
    ----------
    x : array_like of shape (n, p), optional
        The source points (float64; other dtypes are converted once). Give x and y, or M.
    y : array_like of shape (m, p), optional
        The target points.
    a : array_like of shape (n,), optional
        Source weights; uniform when None. Weights that do not sum to 1 are divided by their sum,
        with a :class:`tokenflow.NormalizationWarning` (not with ``marginal_penalty``).
    b : array_like of shape (m,), optional
        Target weights; uniform when None.
    epsilon : float, default 0.1
        The entropic regularization (same units as the cost).
    cost : {"sqeuclidean", "euclidean", "dot"}, default "sqeuclidean"
        ``|x - y|^2``, ``|x - y|`` or ``-<x, y>``.
    tol : float, default 1e-9
        The marginal error to reach.
    max_iter : int, default 10000
        Iterations in all (every epsilon stage counts).
    plan : bool or None, optional
        Whether to form the n x m plan; None: up to 2^26 pairs.
    epsilon_start : {"auto", "off", "range"} or float, default "auto"
        Epsilon-scaling from this epsilon down ("auto": from the cost range when epsilon is below
        1e-3 of it), dividing by ``epsilon_decay`` per stage.
    epsilon_decay : float, default 2.0
        The factor between epsilon stages.
    operator : {"auto", "dense", "kernel", "online", "grid"}, default "auto"
        "dense" holds C and runs the float64 log-domain loop; "kernel" holds C and runs the
        stabilized kernel mode (float32 when ``tol >= 16 * 2^-24``) with Anderson acceleration,
        checked and finished by the float64 loop; "online" recomputes C from the points (memory
        O(n + m)); "grid" (sqeuclidean, 1 to 3 dimensions) computes each soft-min as a Gauss
        transform (time and memory O(n + m), each sum within ``min(1e-7, tol / 16)`` relative
        error, included in the reported marginal error). "auto": dense below 2^16 pairs, kernel up
        to 2^24, then grid (sqeuclidean in 1 or 2 dimensions) or online.
    divergence : bool, default False
        Also compute the debiased Sinkhorn divergence (needs points).
    overrelaxation : float, default 0.0
        0: Anderson acceleration (plain steps when it stalls); 1: plain Sinkhorn iterations (POT's
        ``sinkhorn_log``); w in (1, 2): a fixed relaxation.
    M : array_like of shape (n, m), optional
        A cost matrix instead of x and y (POT's argument): ``sinkhorn(a=a, b=b, M=M,
        epsilon=reg)`` solves ``ot.sinkhorn(a, b, M, reg)`` (operator dense or kernel; no
        divergence).
    progress : callable, bool or None, optional
        Called as ``progress(iteration, marginal_error)`` every 10 iterations (an exception it
        raises stops the solve and is raised here); None: a progress bar on stderr when it is a
        terminal (and CI is not set); False: nothing.
    reg : float, optional
        POT's name for epsilon (giving both is refused).
    marginal_penalty : float, optional
        rho > 0 for unbalanced transport, which minimizes ``<C, pi> + epsilon KL(pi | a b^T) + rho
        KL(pi 1 | a) + rho KL(pi^T 1 | b)`` over all ``pi >= 0`` (POT's reg_m). The weights keep
        their masses, the marginal error is measured against the fixed point's marginals ``a
        exp(-f / rho)`` and ``b exp(-g / rho)``, and the divergence is Sejourne et al.'s. None: the
        balanced problem.

    Returns
    -------
    OTResult
        The plan (when formed), the potentials f and g, the cost ``<C, pi>``, the objective, the
        iterations, the marginal error and whether it converged, and the summary of
        ``tokenflow ot``.

    Raises
    ------
    tokenflow.InputError
        A bad argument, POT's positional order ``sinkhorn(a, b, M, reg)`` (``tokenflow.pot.sinkhorn``
        takes it), or an epsilon too small for the costs (``max|C| / epsilon > 2^50``).
    FloatingPointError
        A result the arithmetic could not carry.

    Warns
    -----
    tokenflow.ConvergenceWarning
        Stopped at max_iter (the result is returned, ``converged`` False).
    tokenflow.NormalizationWarning
        Weights that did not sum to 1.

    Examples
    --------
    >>> import tokenflow
    >>> x = np.array([[0.0], [1.0]]); y = np.array([[0.0], [1.0]])
    >>> r = tokenflow.sinkhorn(x, y, epsilon=0.01, tol=1e-12)
    >>> np.round(r.plan, 6).tolist(), r.marginal_error < 1e-12, r.converged
    ([[0.5, 0.0], [0.0, 0.5]], True, True)
    >>> round(r.cost, 9), r.summary["operator"], r.summary["status"]
    (0.0, 'dense', 'converged')
    >>> round(tokenflow.sinkhorn(x, y + 1.0, epsilon=0.3, divergence=True).divergence, 3)  # ~ W_2^2 = 1
    1.0
    >>> M = np.array([[0.0, 1.0], [1.0, 0.0]])  # POT style: weights and a cost matrix
    >>> tokenflow.sinkhorn(a=[0.5, 0.5], b=[0.5, 0.5], M=M, epsilon=0.01, tol=1e-12).plan.round(6).tolist()
    [[0.5, 0.0], [0.0, 0.5]]
    >>> tokenflow.sinkhorn(a=[0.5, 0.5], b=[0.5, 0.5], M=M, reg=0.01).summary["epsilon"]  # POT's name
    0.01
    >>> u = tokenflow.sinkhorn(a=[0.5, 0.1], b=[0.5, 0.5], M=M, epsilon=0.1, marginal_penalty=1.0)  # unbalanced
    >>> round(u.plan_mass, 4), u.summary["marginal_penalty"], u.converged
    (0.6944, 1.0, True)
    """
    _refuse_pot_order("sinkhorn", "sinkhorn(a=a, b=b, M=M, epsilon=reg)", x, y, a)
    epsilon = _epsilon_or_reg(epsilon, reg)
    options = _options(method="sinkhorn", epsilon=as_float("epsilon" if reg is None else "reg", epsilon),
                       tol=as_float("tol", tol),
                       max_iter=as_int("max_iter", max_iter),
                       epsilon_start=epsilon_start if isinstance(epsilon_start, str)
                       else repr(as_float("epsilon_start", epsilon_start)),
                       epsilon_decay=as_float("epsilon_decay", epsilon_decay), operator=as_str("operator", operator),
                       overrelaxation=as_float("overrelaxation", overrelaxation),
                       divergence=as_bool("divergence", divergence), plan=None if plan is None else as_bool("plan", plan))
    if marginal_penalty is not None:  # unbalanced: the masses are data, not normalized
        options.marginal_penalty = as_float("marginal_penalty", marginal_penalty)
    cost, progress = as_str("cost", cost), as_callable_or_flag("progress", progress)
    x, y, a, b, M = _points_and_weights(x, y, a, b, M, balanced=marginal_penalty is None)
    if plan:  # asked for: refused before the solve when it cannot be held (by default formed up to 2^26 pairs)
        _plan_size("plan", *(M.shape if M is not None else (len(x), len(y))), plan)
    with renamed_keys(_matrix_key):
        return _result(call_with_progress(_tokenflow.ot, progress, "sinkhorn",
                                          lambda it, err: log_fraction(err, options.tol),
                                          lambda it, err: f"iteration {it}, marginal error {err:.2e}",
                                          x, y, a, b, cost, options, M))


def exact_ot(x=None, y=None, a=None, b=None, cost: str = "sqeuclidean", M=None) -> OTResult:
    """Exact optimal transport by the network simplex: ``min_{pi in Pi(a, b)} <C, pi>``.

    Same numbers as ``tokenflow ot --method exact``.

    Parameters
    ----------
    x : array_like of shape (n, p), optional
        The source points. Give x and y, or M.
    y : array_like of shape (m, p), optional
        The target points.
    a : array_like of shape (n,), optional
        Source weights; uniform when None (normalized to sum 1).
    b : array_like of shape (m,), optional
        Target weights; uniform when None.
    cost : {"sqeuclidean", "euclidean", "dot"}, default "sqeuclidean"
        ``|x - y|^2``, ``|x - y|`` or ``-<x, y>``.
    M : array_like of shape (n, m), optional
        A cost matrix instead of x and y (POT's ``ot.emd(a, b, M)``).

    Returns
    -------
    OTResult
        The plan (always, n x m), dual potentials with ``f_i + g_j <= C_ij`` (equal on the plan's
        support), the cost and the summary.

    Raises
    ------
    tokenflow.InputError
        A bad argument (an unknown cost, points of different dimensions, a plan too large to hold).

    Examples
    --------
    >>> import tokenflow
    >>> x = np.array([[0.0], [1.0], [2.0]]); y = np.array([[2.0], [0.0], [1.0]])
    >>> r = tokenflow.exact_ot(x, y)
    >>> (r.plan * 3).round(12).tolist(), round(r.cost, 12), r.summary["status"]
    ([[0.0, 1.0, 0.0], [0.0, 0.0, 1.0], [1.0, 0.0, 0.0]], 0.0, 'optimal')
    >>> tokenflow.exact_ot(x, y, cost="euclidian")
    Traceback (most recent call last):
    ...
    tokenflow.InputError: cost: unknown cost 'euclidian'; one of: sqeuclidean, euclidean, dot
    """
    _refuse_pot_order("exact_ot", "exact_ot(a=a, b=b, M=M)", x, y, a)
    cost = as_str("cost", cost)
    x, y, a, b, M = _points_and_weights(x, y, a, b, M)
    rows, cols = M.shape if M is not None else (len(x), len(y))
    _plan_size("M" if M is not None else "x", rows, cols, True)
    with renamed_keys(_matrix_key):
        return _result(_tokenflow.ot(x, y, a, b, cost, _options(method="exact"), M))


class WassersteinResult(float):
    """W_p as ``tokenflow wasserstein`` computes it.

    A float (the value: ``w + 1``, ``float(w)``, comparisons and numpy work as for a number) that
    also carries the attributes below.

    Attributes
    ----------
    method : str
        The method used: sorted, exact, sinkhorn or conditional.
    summary : dict
        The summary.json of ``tokenflow wasserstein`` on the same input (timings aside).
    value : float
        The value as a plain float.
    """

    def __new__(cls, value: float, method: str, summary: dict):
        result = super().__new__(cls, value)
        result.method = method
        result.summary = summary
        return result

    def __getnewargs__(self):  # copy and pickle rebuild it with its attributes
        return (float(self), self.method, self.summary)

    @property
    def value(self) -> float:
        return float(self)

    def __repr__(self) -> str:
        return f"WassersteinResult({float(self)!r}, method={self.method!r})"


def wasserstein(x, y, p: float = 2, a=None, b=None, method: str = _W.method, epsilon: float = _W.epsilon,
                tol: float = _W.tol, max_iter: int = _W.max_iter, positions_x=None, positions_y=None,
                progress=None) -> WassersteinResult:
    """The Wasserstein distance ``W_p(mu, nu) = (min_{pi in Pi(a, b)} <|x - y|^p, pi>)^{1/p}``.

    Runs without the GIL; Ctrl-C stops it. Same arguments, same value as ``tokenflow
    wasserstein``.

    Parameters
    ----------
    x : array_like of shape (n, d)
        The points of mu.
    y : array_like of shape (m, d)
        The points of nu.
    p : float, default 2
        The order, p >= 1.
    a : array_like of shape (n,), optional
        Weights of mu; uniform when None.
    b : array_like of shape (m,), optional
        Weights of nu; uniform when None.
    method : {"auto", "sorted", "exact", "sinkhorn"}, default "auto"
        "auto" picks "sorted" (the monotone coupling, exact) for 1-D points, "exact" (network
        simplex) up to 2^22 pairs, else "sinkhorn" (entropic: an upper estimate, within
        ``summary["entropic_bias_bound"]`` of ``W_p^p``).
    epsilon : float, default 0.0
        The Sinkhorn method's regularization; 0: 1e-2 of the cost scale.
    tol : float, default 1e-9
        The Sinkhorn method's marginal error.
    max_iter : int, default 10000
        The Sinkhorn method's iterations.
    positions_x, positions_y : array_like of shape (n,) and (m,), optional
        Positions of the tokens: then the conditional W_p, ``(sum_r lambda(r) W_p(mu_r,
        nu_r)^p)^{1/p}`` (docs/design.md section 1).
    progress : callable, bool or None, optional
        The Sinkhorn method: called as ``progress(iteration, marginal_error)`` (an exception it
        raises stops the solve); None: a bar on a terminal; False: nothing.

    Returns
    -------
    WassersteinResult
        A float (the value) that also carries ``method`` and ``summary``.

    Raises
    ------
    tokenflow.InputError
        A bad argument.

    Examples
    --------
    >>> import tokenflow
    >>> x = np.array([[0.0], [1.0], [3.0]])
    >>> r = tokenflow.wasserstein(x, x + 2.0, p=1)
    >>> r.value, r.method, r + 1
    (2.0, 'sorted', 3.0)
    >>> round(float(tokenflow.wasserstein(np.eye(2), np.eye(2)[::-1] * 2)), 12)  # exact, in 2-D
    1.0
    """
    _refuse_pot_order("wasserstein", "exact_ot(a=a, b=b, M=M).cost for W_p^p", x, y, p)
    p = as_float("p", p)
    options = _tokenflow.WassersteinOptions()  # the CLI's options struct; checked in C++ as for the CLI
    options.method, options.epsilon = as_str("method", method), as_float("epsilon", epsilon)
    options.tol, options.max_iter = as_float("tol", tol), as_int("max_iter", max_iter)
    progress = as_callable_or_flag("progress", progress)
    x, y, a, b, _ = _points_and_weights(x, y, a, b, None, required=True)
    positions_x, positions_y = as_array("positions_x", positions_x, (1,)), as_array("positions_y", positions_y, (1,))
    run = call_with_progress(_tokenflow.wasserstein, progress, "wasserstein",
                             lambda it, err: log_fraction(err, options.tol),
                             lambda it, err: f"iteration {it}, marginal error {err:.2e}",
                             x, y, a, b, float(p), options, positions_x, positions_y)
    if run.reason:
        raise FloatingPointError(f"wasserstein failed: {run.reason}")
    require_finite("wasserstein", value=run.value)
    warn_convergence(run.warning, stacklevel=2)
    summary = run.summary
    return WassersteinResult(run.value, summary["method"], summary)
