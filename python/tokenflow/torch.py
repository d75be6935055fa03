"""PyTorch bridge: entropic optimal transport as differentiable torch operations.

    sinkhorn(C, a=None, b=None, epsilon=0.1, ...)              the plan pi (n x m), differentiable in C, a, b
    sinkhorn_divergence(x, y, a=None, b=None, epsilon=0.1, ...) S_eps, differentiable in x, y, a, b
    sinkhorn_samples(x, y, a=None, b=None, epsilon=0.1, ...)    batches of points: plans, potentials, cost,
                                                               objective, divergence (SamplesResult)
    SinkhornLayer(epsilon=0.1, ...)                            nn.Module: forward(C, a=None, b=None) -> pi
    cost_matrix(x, y, cost="sqeuclidean")                      C_ij = c(x_i, y_j) in torch
    ConvergenceError                                           raised when a solve stops short of tol

The forward solve is tokenflow's own Sinkhorn solver (:func:`tokenflow.sinkhorn` with the cost
matrix ``M``, the log-domain loop of include/tokenflow/ot.hpp) on a detached float64 copy, the
problems of a batch solved concurrently across cores in one call (each exactly as alone); the
backward pass is written here in float64 torch. Nothing is unrolled: the gradient is that of the
converged fixed point (implicit differentiation, derivation below), so memory and time do not
grow with the number of iterations.

The problem (docs/design.md section 1): for a cost C (n x m), weights a (n), b (m) summing to 1 and
epsilon > 0,

    OT_eps(a, b; C) = min_{pi 1 = a, pi^T 1 = b}  <C, pi> + eps KL(pi | a b^T),
    pi_ij = a_i b_j exp((f_i + g_j - C_ij) / eps),                                      (1)

with the dual potentials (f, g) fixed by the marginal conditions pi 1 = a, pi^T 1 = b, and
OT_eps = <a, f> + <b, g> there.

Implicit gradient of the plan (Luise et al. 2018, "Differential properties of Sinkhorn
approximation for learning with Wasserstein distance", NeurIPS; Eisenberger et al. 2022, "A
unified framework for implicit Sinkhorn differentiation", CVPR, Sec. 4). Differentiating (1) at
the fixed point, along variations that keep the weights on the simplex (1^T da = 1^T db = 0):

    d pi_ij = pi_ij [ (df_i + dg_j - dC_ij) / eps + da_i / a_i + db_j / b_j ].          (2)

The row sums of (2) must equal da and the column sums db, so (df, dg) solves

    H [df; dg] = [ (pi o dC) 1 - eps pi (db / b) ;  (pi o dC)^T 1 - eps pi^T (da / a) ],
    H = [[diag(a), pi], [pi^T, diag(b)]],                                                 (3)

("o" is the entrywise product). H is symmetric positive semidefinite, with the one null vector
(1, -1): the gauge (f + c, g - c), which leaves pi unchanged. For a loss L with G = dL/dpi and
P = G o pi, (2) gives dL = <P 1, df>/eps + <P^T 1, dg>/eps - <P, dC>/eps + <P 1 / a, da>
+ <P^T 1 / b, db>. The adjoint system

    H [w1; w2] = [P 1; P^T 1]                                                           (4)

is solvable (both blocks sum to sum(P), so the right side is orthogonal to (1, -1)), and by the
symmetry of H the first two terms equal <w, right side of (3)> / eps. Collecting terms, and using
the rows of (4) (a o w1 + pi w2 = P 1, b o w2 + pi^T w1 = P^T 1):

    dL/dC_ij = (pi_ij (w1_i + w2_j) - P_ij) / eps,    dL/da = w1,    dL/db = w2.          (5)

w is fixed up to (c, -c), which shifts dL/da and dL/db by constants: invisible along the simplex.
The weights are divided by their sums in torch before the solve, so the gradient reaching the
caller's a and b is exactly the simplex one. The gauge is fixed by w2_m = 0: H without its last
row and column is positive definite (a null vector of it, padded with 0, would be a null vector
of H with last entry 0, but the null vector (1, -1) has -1 there). That system is solved in C++
(include/tokenflow/plan_adjoint.hpp) through its Schur complement onto the smaller side, by
Cholesky: for m <= n, S w2 = P^T 1 - pi^T (P 1 / a) with S = diag(b) - pi^T diag(1 / a) pi, then
w1 = (P 1 - pi w2) / a (O(n m^2 + m^3) time, O(n m + m^2) memory); the problems of a batch are
solved concurrently.

Zero weights (empty bins): the rows with a_i = 0 and the columns with b_j = 0 are dropped, the
problem is solved on the support, and the plan gets zero rows and columns there (exactly: pi_ij
has the factor a_i b_j). The gradient in C is zero on those rows and columns (the plan is zero
for every C). The gradient in a zero weight is the one-sided derivative (the weight can only
grow): as a_i -> 0, row i of (4) gives w1_i = sum_j K_ij (G_ij - w2_j) with K_ij = pi_ij / a_i =
b_j exp((f_i + g_j - C_ij) / eps), f_i the soft-min of g over row i (which makes sum_j K_ij = 1);
the rest of (4) no longer involves row i. Columns alike.

Sinkhorn divergence (Feydy et al. 2019, "Interpolating between optimal transport and MMD using
Sinkhorn divergences", AISTATS): S_eps = OT_eps(a, b) - OT_eps(a, a) / 2 - OT_eps(b, b) / 2. By
the envelope theorem (OT_eps is the value of the dual problem at its maximizer), dOT_eps/dC = pi,
dOT_eps/da = f and dOT_eps/db = g (the dual objective <a, f> + <b, g> - eps <a b^T, exp((f + g -
C) / eps) - 1> has a-derivative f_i - eps (pi 1 / a - 1)_i = f_i at the fixed point); no linear
system is needed. The gradient in the points flows through C(x, y), computed in torch.

Unbalanced transport (marginal_penalty = rho, docs/design.md): the plan minimizes <C, pi> + eps KL(pi |
a b^T) + rho KL(pi 1 | a) + rho KL(pi^T 1 | b), with the same form (1) and the fixed point
pi 1 = a e^{-f/rho}, pi^T 1 = b e^{-g/rho}; a and b are free (their masses are data, not
normalized). Differentiating the fixed point as (2), with r = pi 1, c = pi^T 1 and kappa = 1 + eps / rho:

    H_rho [df; dg] = [ (pi o dC) 1 - eps pi (db / b) ;  (pi o dC)^T 1 - eps pi^T (da / a) ],
    H_rho = [[kappa diag(r), pi], [pi^T, kappa diag(c)]],                                 (6)

positive definite (H_rho = H + (kappa - 1) diag(r, c), and H is positive semidefinite with the null
vector (1, -1), on which the diagonal term is positive): no gauge. The adjoint H_rho [w1; w2] =
[P 1; P^T 1] gives, as (5),

    dL/dC_ij = (pi_ij (w1_i + w2_j) - P_ij) / eps,
    dL/da_i = kappa r_i w1_i / a_i = kappa e^{-f_i/rho} w1_i,   dL/db_j = kappa e^{-g_j/rho} w2_j,  (7)

(the a-terms: dL/da_i = ((P 1)_i - (pi w2)_i) / a_i, and the first row of the adjoint says
(P 1)_i - (pi w2)_i = kappa r_i w1_i). It is solved here in float64 torch through the Schur
complement onto the smaller side, S = kappa diag(c) - pi^T diag(1 / (kappa r)) pi >= (kappa - 1 /
kappa) diag(c), by Cholesky. The value OT_eps is the dual's, D(f, g) = rho <a, 1 - e^{-f/rho}> +
rho <b, 1 - e^{-g/rho}> - eps <a b^T, e^{(f + g - C) / eps} - 1>, whose envelope gradient is pi in C
and, at the fixed point (r_i / a_i = e^{-f_i/rho}),

    dOT_eps/da_i = rho (1 - e^{-f_i/rho}) - eps (e^{-f_i/rho} - m(b)),   b alike with m(a).     (8)

The unbalanced divergence adds eps / 2 (m(a) - m(b))^2 (Sejourne et al. 2019), in torch.

Double backward (create_graph=True): the backward pass is (4)-(8) written in differentiable torch
operations on the plan (the output of the same solve, its cached fixed point) and on the potentials
as functions of (C, a, b): their derivative solves (3) ((6) unbalanced) again, by the adjoint of
_Potentials. Autograd then differentiates the gradient itself, so second derivatives are those of
the converged fixed point (torch.autograd.gradgradcheck in tests/python/test_torch_double_backward.py).

A solve that stops at max_iter above tol raises :class:`ConvergenceError` (strict=True, the default
of the plans: its "plan" does not have the marginals a and b and the formulas above are not its
gradient); sinkhorn_divergence, a loss, warns instead by default and returns the value reached.
Every argument goes through tokenflow's input layer (tokenflow/_inputs.py): bad input, non-finite
costs and an epsilon too small for the costs raise :class:`tokenflow.InputError` naming it, as
:func:`tokenflow.sinkhorn` does.
"""
from __future__ import annotations

import math
import warnings
from typing import NamedTuple, Optional

import numpy as np

try:
    import torch as _torch  # absolute import: PyTorch itself, not this module (tokenflow.torch)
except ModuleNotFoundError as error:
    if error.name != "torch":
        raise
    raise ImportError("tokenflow.torch needs PyTorch (Debian: apt-get install python3-torch)") from None

from . import _tokenflow
from ._checks import ConvergenceWarning
from ._docstrings import shared
from ._inputs import (as_bool, as_float, as_int, as_str, as_tensor, check_memory, input_error, renamed_keys,
                      tensor_weights)
from .transport import _options as _transport_options
from .transport import _result as _transport_result

# The defaults of epsilon, tol and max_iter: those of `tokenflow ot` and tokenflow.sinkhorn (the
# library's OTSolveOptions, include/tokenflow/ot_solve.hpp).
_DEFAULTS = _tokenflow.OTOptions()
_EPSILON, _TOL, _MAX_ITER = _DEFAULTS.epsilon, _DEFAULTS.tol, _DEFAULTS.max_iter

__all__ = ["ConvergenceError", "SamplesResult", "SinkhornLayer", "cost_matrix", "sinkhorn", "sinkhorn_divergence",
           "sinkhorn_samples"]

_COSTS = ("sqeuclidean", "euclidean", "dot")

# The numpydoc parts that several functions of this module share.
_OPTIONS = """
epsilon : float, default 0.1
    The entropic regularization, > 0, in the units of the cost.
"""
_MAX_ITER_DOC = """
max_iter : int, default 10000
    The iteration budget of each solve, >= 1.
"""
_PENALTY = """
marginal_penalty : float or None, default None
    rho > 0 of unbalanced transport (None: balanced): the plan minimizes ``<C, pi> + epsilon
    KL(pi | a b^T) + rho KL(pi 1 | a) + rho KL(pi^T 1 | b)``, and a and b keep their masses (not
    divided by their sums).
"""
_STRICT = """
ConvergenceError
    With ``strict=True``, a solve that stopped at max_iter above tol.

Warns
-----
tokenflow.ConvergenceWarning
    With ``strict=False``, a solve that stopped at max_iter above tol.
"""
_INPUT_ERRORS = """
tokenflow.InputError
    Naming the argument: a cost or points of the wrong shape, empty, complex, boolean or with NaN
    or infinite entries; weights of the wrong shape, negative or all zero; epsilon <= 0, tol < 0,
    max_iter < 1, marginal_penalty <= 0; costs that overflow their dtype; an epsilon too small for
    the costs; problems too large for memory.
"""


class ConvergenceError(RuntimeError):
    """A Sinkhorn solve of :mod:`tokenflow.torch` stopped at max_iter, its marginal error above tol.

    Unlike :func:`tokenflow.sinkhorn`, which warns and returns what it reached, the torch bridge
    raises (with ``strict=True``, the default of :func:`sinkhorn`, :func:`sinkhorn_samples` and
    :class:`SinkhornLayer`): an unconverged iterate is not a coupling, and the implicit gradient is
    only the gradient of the fixed point. The message names the marginal error reached, tol, the
    problem's size on the support and epsilon; it also says when tol lies below the rounding floor
    of the plan (docs/ot.md), which no number of iterations reaches. Raise max_iter or epsilon, or
    tol above the floor. A subclass of RuntimeError.

    Examples
    --------
    >>> import torch, tokenflow.torch as tt
    >>> C = torch.tensor([[0.0, 1.0], [2.0, 0.0]], dtype=torch.float64)
    >>> tt.sinkhorn(C, a=[0.2, 0.8], epsilon=0.01, max_iter=1)
    Traceback (most recent call last):
    ...
    tokenflow.torch.ConvergenceError: Sinkhorn stopped at max_iter = 1 with marginal error ... > tol 1e-09 ...
    """


class _Solution:
    """The fixed point of one solve, on the full index range (float64 torch, CPU).

    plan  n x m, zero on the rows with a_i = 0 and the columns with b_j = 0
    f, g  potentials; on zero-weight rows (columns) the soft-min of g (f), the limit as the weight -> 0
    objective  OT_eps(a, b) (tokenflow's `objective`, = <a, f> + <b, g> at convergence)
    rows, cols the support (indices of the positive weights); a, b the weights there (sum 1)
    """

    def __init__(self, plan, f, g, objective, rows, cols, a, b, rho=np.inf):
        self.plan, self.f, self.g, self.objective = plan, f, g, objective
        self.rows, self.cols, self.a, self.b = rows, cols, a, b
        self.rho = rho  # the marginal penalty (inf: balanced; a and b then sum to 1)


def _softmin(eps: float, log_w: np.ndarray, h: np.ndarray, C: np.ndarray) -> np.ndarray:
    # out_i = -eps log sum_j w_j exp((h_j - C_ij) / eps), for C (k x l), w and h (l): the soft-min of
    # ot.hpp, in numpy, for the few zero-weight rows (columns) that the solve left out.
    z = log_w[None, :] + (h[None, :] - C) / eps
    top = z.max(axis=1, keepdims=True)
    return -eps * (top[:, 0] + np.log(np.exp(z - top).sum(axis=1)))


def _support(C: np.ndarray, a: np.ndarray, b: np.ndarray, normalize: bool = True, name: str = "C"):
    """The problem on the support of a and b: (rows, cols, C there, a and b there divided by their sums,
    or as given when not normalize: unbalanced). Non-finite costs (points whose squared distances
    overflow their dtype) are refused, naming `name`."""
    if not np.all(np.isfinite(C)):
        bad = int(C.size - np.count_nonzero(np.isfinite(C)))
        raise input_error(name, f"gives {bad} non-finite costs (of {C.size}): they overflow; accepted: costs "
                                "within the range of the dtype (rescale the data)")
    rows, cols = np.flatnonzero(a > 0), np.flatnonzero(b > 0)
    a_s, b_s = a[rows], b[cols]
    if normalize:
        a_s, b_s = a_s / a_s.sum(), b_s / b_s.sum()
    return rows, cols, C[np.ix_(rows, cols)], a_s, b_s


def _check_converged(r, tol: float, max_iter: int, n: int, m: int, epsilon: float, strict: bool = True,
                     tol_is_default: bool = False) -> None:
    if r.summary.get("status") == "below_floor" and tol_is_default:
        return  # the default tol asks for no more than the arithmetic gives: the value at the floor is the answer
    if not r.converged:
        why = (f"tol {tol:g} is not above the rounding floor {r.rounding_floor:g} (marginal error "
               f"{r.marginal_error:g})" if r.summary.get("status") == "below_floor" else
               f"Sinkhorn stopped at max_iter = {max_iter} with marginal error {r.marginal_error:g} > tol {tol:g}")
        where = f" (n = {n}, m = {m} on the support, epsilon = {epsilon:g})"
        if strict:
            raise ConvergenceError(f"{why}{where}: not a coupling, so no gradient either; raise max_iter or "
                                   "epsilon, or tol above the rounding floor")
        warnings.warn(f"{why}{where}: the value is returned as reached (its gradient is that of the fixed point "
                      "it approximates); strict=True raises instead", ConvergenceWarning, stacklevel=6)


def _is_prefix(index: np.ndarray) -> bool:
    return len(index) == 0 or index[-1] == len(index) - 1  # sorted and distinct (flatnonzero)


def _full_solution(C: np.ndarray, a: np.ndarray, b: np.ndarray, support, r, epsilon: float,
                   rho: float = np.inf) -> _Solution:
    """r (an OTResult on the support) on the full index range of C, with the zero-weight potentials
    (the damped soft-min tau T when unbalanced, tau = rho / (rho + eps): the fixed point's limit)."""
    rows, cols, _, a_s, b_s = support
    plan_s, f_s, g_s = r.plan, r.f, r.g
    # A line of positive weight whose plan mass underflowed (zero or subnormal: a weight near 1e-308
    # of the others') is taken as a zero weight: the adjoint's systems divide by each line's mass,
    # and its weight is below the rounding of the others'. Its potential and gradients are then the
    # one-sided limits below and in _plan_gradient.
    tiny = np.finfo(np.float64).tiny
    live_rows, live_cols = plan_s.sum(1) >= tiny, plan_s.sum(0) >= tiny
    if plan_s.size and not (live_rows.all() and live_cols.all()):
        rows, cols, a_s, b_s = rows[live_rows], cols[live_cols], a_s[live_rows], b_s[live_cols]
        plan_s, f_s, g_s = plan_s[np.ix_(live_rows, live_cols)], f_s[live_rows], g_s[live_cols]
    n, m = C.shape
    plan, f, g = np.zeros((n, m)), np.empty(n), np.empty(m)
    if _is_prefix(rows) and _is_prefix(cols):  # padding at the end: a block copy, no index arrays
        plan[:len(rows), :len(cols)] = plan_s
    else:
        plan[np.ix_(rows, cols)] = plan_s
    f[rows], g[cols] = f_s, g_s
    zero_rows = np.setdiff1d(np.arange(n), rows)
    zero_cols = np.setdiff1d(np.arange(m), cols)
    tau = 1.0 if np.isinf(rho) else rho / (rho + epsilon)
    if zero_rows.size:
        f[zero_rows] = tau * _softmin(epsilon, np.log(b_s), g_s, C[np.ix_(zero_rows, cols)])
    if zero_cols.size:
        g[zero_cols] = tau * _softmin(epsilon, np.log(a_s), f_s, C[np.ix_(rows, zero_cols)].T)
    as_torch = lambda v: _torch.from_numpy(np.ascontiguousarray(v))  # noqa: E731
    return _Solution(as_torch(plan), as_torch(f), as_torch(g), float(r.objective), _torch.from_numpy(rows),
                     _torch.from_numpy(cols), as_torch(a_s), as_torch(b_s), rho)


def _solve_batch(problems, solve) -> list:
    """tokenflow.sinkhorn on the support of each (C, a, b) of problems (float64 numpy), all of them
    in one call that solves them concurrently across cores (tokenflow._tokenflow.ot_batch: each
    result is bit for bit the one tokenflow.sinkhorn(a=a, b=b, M=C) gives); a list of _Solution.
    solve: a _Solve (solve.rho: the marginal penalty, inf: balanced). A solve that ends above
    solve.tol raises ConvergenceError when solve.strict, else warns."""
    epsilon, tol, max_iter, rho = solve.epsilon, solve.tol, solve.max_iter, solve.rho
    supports = [_support(C, a, b, normalize=np.isinf(rho), name=solve.cost_name) for C, a, b in problems]
    options = _transport_options(method="sinkhorn", epsilon=epsilon, tol=tol, max_iter=max_iter, plan=True)
    if not np.isinf(rho):
        options.marginal_penalty = rho
    with renamed_keys(lambda key: solve.cost_name if key == "cost_matrix" or key.startswith("M[") else None):
        runs = _tokenflow.ot_batch([s[2] for s in supports], [s[3] for s in supports], [s[4] for s in supports],
                                   options, None, [k in solve.symmetric for k in range(len(supports))])
    solutions = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)  # raised or issued below instead
        results = [_transport_result(run) for run in runs]
    for (C, a, b), support, r in zip(problems, supports, results):
        _check_converged(r, tol, max_iter, len(support[0]), len(support[1]), epsilon, solve.strict,
                         solve.tol_is_default)
        solutions.append(_full_solution(C, a, b, support, r, epsilon, rho))
    return solutions


def _float64_numpy(t) -> np.ndarray:
    return t.detach().to(device="cpu", dtype=_torch.float64).numpy()


def _like(value, reference):
    """value (float64, CPU) in the dtype and on the device of reference."""
    return value.to(device=reference.device, dtype=reference.dtype)


def _on_support(M, s: _Solution):
    """M (n x m) restricted to the support of s: a view when the support is a leading block (the
    padding of a batch), else a copy."""
    I, J = s.rows, s.cols
    if _is_prefix(I.numpy()) and _is_prefix(J.numpy()):
        return M[:len(I), :len(J)]
    return M[I][:, J]


def _plan_adjoints(items, eps: float) -> list:
    """[(dL/dC, dL/da, dL/db)] in float64 for the problems items = [(s, G, C)] (s a _Solution, G =
    dL/dpi, C the cost) by (4)-(5) of the module docstring, the systems solved concurrently in C++
    (_tokenflow.plan_adjoint_batch: the Schur complement onto the smaller side, gauge w2_m = 0;
    H of (3) with the plan's own marginals, = a, b to tol, so that (1, -1) is its null vector to
    rounding and the right side of (4) is consistent with it); zero weights by their one-sided
    limit."""
    systems = []
    for s, G, _ in items:
        pi = _on_support(s.plan, s)                    # (n', m')
        systems.append((pi, _on_support(G, s) * pi))   # P = G o pi
    balanced = [k for k, (s, _, _) in enumerate(items) if np.isinf(s.rho)]
    ws = [None] * len(items)
    for k, w in zip(balanced, _tokenflow.plan_adjoint_batch([systems[k][0].numpy() for k in balanced],
                                                             [systems[k][1].numpy() for k in balanced])):
        ws[k] = tuple(_torch.from_numpy(v) for v in w)
    # dL/dC of the balanced problems from the flow, not from (w1, w2): on near-permutation plans
    # the potentials reach 1e15-1e50 and their differences lose every digit (plan_adjoint.hpp).
    flows = [None] * len(items)
    for k, D in zip(balanced, _tokenflow.plan_cost_gradient_batch([systems[k][0].numpy() for k in balanced],
                                                                   [systems[k][1].numpy() for k in balanced])):
        flows[k] = _torch.from_numpy(D)
    for k, (s, _, _) in enumerate(items):
        if ws[k] is None:
            ws[k] = _unbalanced_adjoint(*systems[k], 1.0 + eps / s.rho)
    return [_plan_gradient(s, G, C, pi, P, w1, w2, eps, D)
            for (s, G, C), (pi, P), (w1, w2), D in zip(items, systems, ws, flows)]


def _unbalanced_adjoint(pi, P, kappa: float):
    """(w1, w2) of H_rho [w1; w2] = [P 1; P^T 1], (6) of the module docstring, by the Schur
    complement onto the smaller side (positive definite: Cholesky)."""
    p1, p2 = P.sum(1), P.sum(0)
    if pi.shape[1] > pi.shape[0]:  # eliminate w2 instead: the same system with the roles swapped
        w2, w1 = _unbalanced_adjoint(pi.T, P.T, kappa)
        return w1, w2
    D = kappa * pi.sum(1)                              # kappa r
    S = _torch.diag(kappa * pi.sum(0)) - pi.T @ (pi / D[:, None])
    factor = _torch.linalg.cholesky(S)
    w2 = _torch.cholesky_solve((p2 - pi.T @ (p1 / D))[:, None], factor)[:, 0]
    return (p1 - pi @ w2) / D, w2


def _plan_gradient(s: _Solution, G, C, pi, P, w1, w2, eps: float, D=None):
    """(5) from the adjoint (w1, w2) of one problem, on the full index range; D, when given, is
    (5)'s numerator pi (w1_i + w2_j) - P computed without the potentials."""
    I, J = s.rows, s.cols
    grad_C = _torch.zeros_like(s.plan)                 # (5): (pi (w1_i + w2_j) - P) / eps
    on_support = ((pi * (w1[:, None] + w2[None, :]) - P) if D is None else D) / eps
    if _is_prefix(I.numpy()) and _is_prefix(J.numpy()):
        grad_C[:len(I), :len(J)] = on_support
    else:
        grad_C[I[:, None], J[None, :]] = on_support
    ga, gb = _torch.zeros(len(s.f), dtype=_torch.float64), _torch.zeros(len(s.g), dtype=_torch.float64)
    if np.isinf(s.rho):
        ga[I], gb[J] = w1, w2
    else:  # (7): kappa r_i w1_i / a_i, kappa c_j w2_j / b_j
        kappa = 1.0 + eps / s.rho
        ga[I], gb[J] = kappa * pi.sum(1) * w1 / s.a, kappa * pi.sum(0) * w2 / s.b
    # Zero weights: the one-sided limit w1_i = sum_j K_ij (G_ij - w2_j), K_ij = b_j exp((f_i + g_j
    # - C_ij) / eps) (module docstring); columns alike.
    zero_rows = _torch.from_numpy(np.setdiff1d(np.arange(len(s.f)), I.numpy()))
    zero_cols = _torch.from_numpy(np.setdiff1d(np.arange(len(s.g)), J.numpy()))
    if len(zero_rows) or len(zero_cols):
        C64 = C.detach().to(device="cpu", dtype=_torch.float64)
    if len(zero_rows):
        K = s.b[None, :] * _torch.exp((s.f[zero_rows, None] + s.g[None, J] - C64[zero_rows][:, J]) / eps)
        ga[zero_rows] = (K * (G[zero_rows][:, J] - w2[None, :])).sum(1)
    if len(zero_cols):
        K = s.a[:, None] * _torch.exp((s.f[I, None] + s.g[None, zero_cols] - C64[I][:, zero_cols]) / eps)
        gb[zero_cols] = (K * (G[I][:, zero_cols] - w1[:, None])).sum(0)
    return grad_C, ga, gb


def _pair_gradients(solutions, grad_plans, grad_objectives, Cs, eps: float) -> list:
    """[(dL/dC, dL/da, dL/db)] in float64 per problem (None where neither its plan nor its value is
    used), from dL/dpi (None: pi not used) and dL/dOT_eps (None alike): (4)-(5) for the plans, all
    systems in one concurrent call, and the envelope theorem (pi, f, g) for the values."""
    grads = [None] * len(solutions)
    with_plan = [i for i, gp in enumerate(grad_plans) if gp is not None]
    items = [(solutions[i], grad_plans[i].detach().to(device="cpu", dtype=_torch.float64), Cs[i])
             for i in with_plan]
    for i, adjoint in zip(with_plan, _plan_adjoints(items, eps)):
        grads[i] = list(adjoint)
    for i, (s, go) in enumerate(zip(solutions, grad_objectives)):
        if go is None:
            continue
        go = go.detach().to(device="cpu", dtype=_torch.float64)
        value = [go * v for v in (s.plan, *_value_gradients(s, eps))]
        grads[i] = value if grads[i] is None else [u + v for u, v in zip(grads[i], value)]
    return grads


def _value_gradients(s: _Solution, eps: float):
    """dOT_eps/da and dOT_eps/db: f and g (balanced), (8) of the module docstring (unbalanced)."""
    if np.isinf(s.rho):
        return s.f, s.g
    ef, eg = _torch.exp(-s.f / s.rho), _torch.exp(-s.g / s.rho)
    return (s.rho * (1.0 - ef) - eps * (ef - float(s.b.sum())),
            s.rho * (1.0 - eg) - eps * (eg - float(s.a.sum())))


class _Solve(NamedTuple):
    """The options of one batch of solves (_Transport's first argument). rho: the marginal penalty
    (inf: balanced). strict: a solve that ends above tol raises ConvergenceError; else it warns
    (ConvergenceWarning) and its value is used as reached (sinkhorn_divergence's default).
    solutions: the fixed points of an earlier forward, reused without solving again (double
    backward: the plans as differentiable functions of the same inputs)."""
    epsilon: float
    tol: float
    max_iter: int
    rho: float = np.inf
    strict: bool = True
    tol_is_default: bool = False
    symmetric: tuple = ()  # the indices of self-transport problems (C symmetric, b = a): the symmetric loop
    cost_name: str = "C"  # the argument an error about the costs names ("x" where C comes from points)
    solutions: Optional[list] = None


class _Transport(_torch.autograd.Function):
    """k problems (C_i (n_i, m_i), a_i (n_i), b_i (m_i) on the simplex, zeros allowed; free masses
    when unbalanced), given as apply(solve, k, C_1..C_k, a_1..a_k, b_1..b_k) with solve a _Solve,
    solved in one parallel batch. Outputs: the plans pi_1..pi_k, the objectives OT_eps (k,), the
    potentials f_1..f_k, g_1..g_k (not differentiable: defined up to (f + c, g - c)). Backward:
    (4)-(5) ((6)-(7) unbalanced) of the module docstring for the plans, the envelope theorem for
    the objectives; under create_graph=True (double backward) the same formulas in differentiable
    torch operations (_differentiable_gradients), so that second derivatives are exact, not
    truncated."""

    @staticmethod
    def forward(ctx, solve, k, *tensors):
        Cs, As, Bs = tensors[:k], tensors[k:2 * k], tensors[2 * k:]
        if solve.solutions is None:
            ctx.solutions = _solve_batch([(_float64_numpy(C), _float64_numpy(a), _float64_numpy(b))
                                          for C, a, b in zip(Cs, As, Bs)], solve)
        else:
            ctx.solutions = solve.solutions
        ctx.solve, ctx.k = solve._replace(solutions=ctx.solutions), k
        ctx.save_for_backward(*tensors)
        ctx.set_materialize_grads(False)
        # Copies: the caller may modify a plan in place, and backward needs the solver's.
        plans = [s.plan.to(device=C.device, dtype=C.dtype, copy=True) for s, C in zip(ctx.solutions, Cs)]
        objective = _torch.tensor([s.objective for s in ctx.solutions], dtype=Cs[0].dtype, device=Cs[0].device)
        f = [_like(s.f, a) for s, a in zip(ctx.solutions, As)]
        g = [_like(s.g, b) for s, b in zip(ctx.solutions, Bs)]
        ctx.mark_non_differentiable(*f, *g)
        return (*plans, objective, *f, *g)

    @staticmethod
    def backward(ctx, *grad_outputs):
        k, tensors = ctx.k, ctx.saved_tensors
        grad_plans, grad_objective = grad_outputs[:k], grad_outputs[k]
        objectives = [None if grad_objective is None else grad_objective[i] for i in range(k)]
        if _torch.is_grad_enabled():  # create_graph=True: a graph of the gradient itself
            pair_grads = _differentiable_gradients(ctx, grad_plans, objectives, tensors)
        else:
            pair_grads = _pair_gradients(ctx.solutions, grad_plans, objectives, tensors[:k], ctx.solve.epsilon)
        grads = [None] * (3 * k)
        for i, pair in enumerate(pair_grads):
            if pair is None:
                continue
            for which, value in enumerate(pair):
                index = which * k + i
                if ctx.needs_input_grad[2 + index] and value is not None:
                    grads[index] = _like(value, tensors[index])
        return (None, None, *grads)


def _adjoint_solve(pi, r1, r2, kappa: float = 1.0):
    """(w1, w2) with H [w1; w2] = [r1; r2], H = [[kappa diag(pi 1), pi], [pi^T, kappa diag(pi^T 1)]]
    ((3)-(4) of the module docstring with the plan's own marginals; (6) when unbalanced, kappa =
    1 + eps / rho), by a dense solve in torch, differentiable in pi, r1 and r2 (O((n + m)^3); the
    first-order backward uses the Schur complement instead). Balanced (kappa = 1) H has the null
    vector (1, -1): the gauge w2_m = 0 is fixed by dropping its last row and column (positive
    definite); H_rho is positive definite."""
    n, m = pi.shape
    cols = m - 1 if kappa == 1.0 else m
    head = pi[:, :cols]
    H = _torch.cat([_torch.cat([_torch.diag(kappa * pi.sum(1)), head], 1),
                    _torch.cat([head.T, _torch.diag(kappa * pi.sum(0)[:cols])], 1)], 0)
    w = _torch.linalg.solve(H, _torch.cat([r1, r2[:cols]]))
    return w[:n], w[n:] if cols == m else _torch.cat([w[n:], w.new_zeros(1)])


class _Potentials(_torch.autograd.Function):
    """(f, g) of one solved problem on its support, as functions of (C, a, b) there (float64, CPU):
    forward returns the solver's potentials, backward the adjoint of (3) ((6) unbalanced) of the
    module docstring: for z = H^+ [dL/df; dL/dg] (balanced: the right side moved off the gauge
    direction (1, -1), along which the potentials are not defined), dL/dC_ij = pi_ij (z1_i + z2_j),
    dL/da = -eps (pi z2) / a, dL/db = -eps (pi^T z1) / b. Used by double backward only (the
    gradients in a and b of the objectives are functions of f and g)."""

    @staticmethod
    def forward(ctx, pi, epsilon, kappa, f, g, C, a, b):
        ctx.pi, ctx.epsilon, ctx.kappa = pi, epsilon, kappa
        ctx.save_for_backward(a, b)
        return f.clone(), g.clone()

    @staticmethod
    @_torch.autograd.function.once_differentiable
    def backward(ctx, grad_f, grad_g):
        pi, eps, kappa = ctx.pi, ctx.epsilon, ctx.kappa
        a, b = ctx.saved_tensors
        n, m = pi.shape
        grad_f = pi.new_zeros(n) if grad_f is None else grad_f
        grad_g = pi.new_zeros(m) if grad_g is None else grad_g
        if kappa == 1.0:
            shift = (grad_f.sum() - grad_g.sum()) / (n + m)
            grad_f, grad_g = grad_f - shift, grad_g + shift
        z1, z2 = _adjoint_solve(pi, grad_f, grad_g, kappa)
        return (None, None, None, None, None, pi * (z1[:, None] + z2[None, :]), -eps * (pi @ z2) / a,
                -eps * (pi.T @ z1) / b)


def _scatter(values, index, size):
    """A zero vector of `size` with values at index (differentiable in values)."""
    out = values.new_zeros(size)
    out[index] = values
    return out


def _differentiable_gradients(ctx, grad_plans, grad_objectives, tensors) -> list:
    """[(dL/dC, dL/da, dL/db)] per problem as the first-order backward computes them ((4)-(5),
    (6)-(7) unbalanced, for the plans; pi and (8) for the objectives), written in torch operations
    on the plans and potentials as differentiable functions of (C, a, b): the plans from _Transport
    again (its cached fixed points, no new solve), the potentials from _Potentials. Autograd then
    differentiates the gradient itself (create_graph=True: gradient penalties, Hessian-vector
    products, gradgradcheck)."""
    k, eps, rho = ctx.k, ctx.solve.epsilon, ctx.solve.rho
    balanced = np.isinf(rho)
    kappa, tau = (1.0, 1.0) if balanced else (1.0 + eps / rho, rho / (rho + eps))
    Cs, As, Bs = tensors[:k], tensors[k:2 * k], tensors[2 * k:]
    plans = _Transport.apply(ctx.solve, k, *tensors)[:k]
    f64 = dict(device="cpu", dtype=_torch.float64)
    out = []
    for i, s in enumerate(ctx.solutions):
        G, go = grad_plans[i], grad_objectives[i]
        if G is None and go is None:
            out.append(None)
            continue
        C, a, b = Cs[i].to(**f64), As[i].to(**f64), Bs[i].to(**f64)
        pi = plans[i].to(**f64)
        I, J = s.rows, s.cols
        n, m = pi.shape
        Z_rows = _torch.from_numpy(np.setdiff1d(np.arange(n), I.numpy()))
        Z_cols = _torch.from_numpy(np.setdiff1d(np.arange(m), J.numpy()))
        a_s, b_s = (a[I] / a[I].sum(), b[J] / b[J].sum()) if balanced else (a[I], b[J])
        pi_s, C_s = pi[I][:, J], C[I][:, J]
        f_s, g_s = _Potentials.apply(pi_s.detach(), eps, kappa, s.f[I], s.g[J], C_s, a_s, b_s)
        # The potentials on the full range: zero-weight rows (columns) take the (damped) soft-min of g (f).
        f, g = _scatter(f_s, I, n), _scatter(g_s, J, m)
        if len(Z_rows):
            f = f.index_put((Z_rows,), -tau * eps * _torch.logsumexp(
                _torch.log(b_s)[None, :] + (g_s[None, :] - C[Z_rows][:, J]) / eps, 1))
        if len(Z_cols):
            g = g.index_put((Z_cols,), -tau * eps * _torch.logsumexp(
                _torch.log(a_s)[:, None] + (f_s[:, None] - C[I][:, Z_cols]) / eps, 0))
        grad_C = grad_a = grad_b = 0
        if G is not None:
            G = G.to(**f64)
            P = G[I][:, J] * pi_s
            w1, w2 = _adjoint_solve(pi_s, P.sum(1), P.sum(0), kappa)
            grad_C = pi.new_zeros(n, m).index_put((I[:, None], J[None, :]), (pi_s * (w1[:, None] + w2[None, :]) - P) / eps)
            if balanced:
                grad_a, grad_b = _scatter(w1, I, n), _scatter(w2, J, m)
            else:  # (7)
                grad_a = _scatter(kappa * pi_s.sum(1) * w1 / a_s, I, n)
                grad_b = _scatter(kappa * pi_s.sum(0) * w2 / b_s, J, m)
            if len(Z_rows):  # the one-sided limit of the module docstring, as _plan_gradient
                K = b_s[None, :] * _torch.exp((f[Z_rows, None] + g_s[None, :] - C[Z_rows][:, J]) / eps)
                grad_a = grad_a.index_put((Z_rows,), (K * (G[Z_rows][:, J] - w2[None, :])).sum(1))
            if len(Z_cols):
                K = a_s[:, None] * _torch.exp((f_s[:, None] + g[None, Z_cols] - C[I][:, Z_cols]) / eps)
                grad_b = grad_b.index_put((Z_cols,), (K * (G[I][:, Z_cols] - w1[:, None])).sum(0))
        if go is not None:
            go = go.to(**f64)
            if balanced:
                value_a, value_b = f, g
            else:  # (8)
                ef, eg = _torch.exp(-f / rho), _torch.exp(-g / rho)
                value_a, value_b = rho * (1.0 - ef) - eps * (ef - b_s.sum()), rho * (1.0 - eg) - eps * (eg - a_s.sum())
            grad_C, grad_a, grad_b = grad_C + go * pi, grad_a + go * value_a, grad_b + go * value_b
        out.append((grad_C, grad_a, grad_b))
    return out


def _transport(Cs, As, Bs, epsilon: float, tol: float, max_iter: int, rho: float = np.inf, strict: bool = True,
               tol_is_default: bool = False, symmetric=(), cost_name: str = "C"):
    """The problems (Cs[i], As[i], Bs[i]) solved in one parallel batch (_Transport): (plans,
    objectives (k,), f's, g's). symmetric: the indices of self-transport problems (Cs[i] symmetric
    to the last bit and Bs[i] is As[i]; balanced only), solved by the symmetric loop (tens of
    iterations where the alternating one takes thousands)."""
    k = len(Cs)
    solve = _Solve(epsilon, tol, max_iter, rho, as_bool("strict", strict), tol_is_default,
                   tuple(symmetric) if np.isinf(rho) else (), cost_name)
    out = _Transport.apply(solve, k, *Cs, *As, *Bs)
    return list(out[:k]), out[k], list(out[k + 1:2 * k + 1]), list(out[2 * k + 1:])


def _weights(w, n: int, name: str, like, normalize: bool = True):
    """w divided by its sum (in torch, so that the gradient sees it; as given when not normalize:
    unbalanced), or uniform; checked (_inputs.tensor_weights)."""
    w = tensor_weights(_torch, name, w, n, like, normalize)
    if w.dim() != 1:
        raise input_error(name, f"has shape {tuple(w.shape)}; accepted: ({n},)")
    return w


def _weight_rows(w, batch, size: int, name: str, like, normalize: bool = True) -> list:
    """One weight vector per problem of a batch of shape `batch` (() for one problem), each divided
    by its sum (_inputs.tensor_weights): w None (uniform), (size) (the same for all) or (*batch, size)."""
    count = int(np.prod(batch))
    w = tensor_weights(_torch, name, w, size, like, normalize)
    if w.dim() == 1:
        return [w] * count  # one tensor: its gradient sums the problems'
    if not len(batch) or tuple(w.shape) not in ((*batch, size), (1,) * len(batch) + (size,)):
        accepted = f"({size},) or {(*batch, size)}" if len(batch) else f"({size},)"
        raise input_error(name, f"has shape {tuple(w.shape)}; accepted: {accepted}")
    return list(w.expand(*batch, size).reshape(-1, size))


def _check_options(epsilon, tol, max_iter) -> tuple[float, float, int]:
    return (as_float("epsilon", epsilon, 0.0, math.inf, finite=True, low_open=True),
            as_float("tol", tol, 0.0, math.inf, finite=True), as_int("max_iter", max_iter, 1))


def _check_cost_memory(name: str, count: int, n: int, m: int, dtype) -> None:
    """The cost matrices (and their float64 copies for the solver, and the plans) refused before
    they are formed when they cannot be held."""
    itemsize = _torch.empty((), dtype=dtype).element_size()
    check_memory(name, float(count) * n * m * (2 * itemsize + 16), f"{count} cost matrices of {n} x {m}")


def _penalty(marginal_penalty) -> float:
    """rho as a float (inf for None: balanced), checked by the input layer and here (> 0)."""
    if marginal_penalty is None:
        return np.inf
    rho = as_float("marginal_penalty", marginal_penalty)
    if not rho > 0:
        raise input_error("marginal_penalty", f"is {rho!r}; accepted: a positive number (None: balanced)")
    return rho


@shared(epsilon=_OPTIONS, max_iter=_MAX_ITER_DOC, penalty=_PENALTY, input_errors=_INPUT_ERRORS, strict=_STRICT)
def sinkhorn(C, a=None, b=None, epsilon: float = _EPSILON, tol: float = _TOL, max_iter: int = _MAX_ITER,
             marginal_penalty: Optional[float] = None, strict: bool = True):
    """The entropic optimal transport plan pi of the cost C, as a differentiable torch tensor.

    pi minimizes ``<C, pi> + epsilon KL(pi | a b^T)`` over the couplings of a and b:
    ``pi_ij = a_i b_j exp((f_i + g_j - C_ij) / epsilon)``. The pairs of a batch are solved
    concurrently across cores, each exactly as alone. The forward solve is
    :func:`tokenflow.sinkhorn` (float64, on a detached copy); the gradients in C, a and b are those
    of the converged fixed point (implicit differentiation, derived in the module docstring), with
    no unrolled iterations, so memory and time do not grow with the iterations. Double backward
    (``create_graph=True``) differentiates the implicit gradient itself. Zero weights are empty
    bins: the problem is solved on the support and pi has zero rows and columns there.

    Parameters
    ----------
    C : torch.Tensor or array_like of shape (n, m) or (B, n, m)
        The cost matrix, or a batch of B of them.
    a : torch.Tensor or array_like of shape (n,) or (B, n), optional
        Nonnegative source weights; uniform when None. Divided by their sums inside the graph (no
        warning: the normalization is part of the function differentiated).
    b : torch.Tensor or array_like of shape (m,) or (B, m), optional
        Nonnegative target weights, as a.
    {{epsilon}}
    tol : float, default 1e-09
        The marginal error to reach, ``|pi 1 - a|_1 + |pi^T 1 - b|_1 < tol``.
    {{max_iter}}
    {{penalty}}
        The gradients are then (6)-(7) of the module docstring.
    strict : bool, default True
        A solve that stops at max_iter above tol raises :class:`ConvergenceError`; False: it warns
        with :class:`tokenflow.ConvergenceWarning` and returns the plan reached, which is not a
        coupling to tol.

    Returns
    -------
    torch.Tensor of shape (n, m) or (B, n, m)
        The plan pi, in the dtype and on the device of C, with the implicit gradient in C, a and b.

    Raises
    ------
    {{input_errors}}
    {{strict}}

    Examples
    --------
    >>> import torch, tokenflow.torch as tt
    >>> C = torch.tensor([[0.0, 1.0], [1.0, 0.0]], dtype=torch.float64, requires_grad=True)
    >>> pi = tt.sinkhorn(C, epsilon=0.5)
    >>> pi.detach().numpy().round(4).tolist()
    [[0.4404, 0.0596], [0.0596, 0.4404]]
    >>> (pi * C).sum().backward()          # d<C, pi>/dC, through the fixed point
    >>> C.grad.numpy().round(4).tolist()
    [[0.5454, -0.0454], [-0.0454, 0.5454]]
    """
    C = as_tensor(_torch, "C", C, (2, 3))
    epsilon, tol, max_iter = _check_options(epsilon, tol, max_iter)
    batch, (n, m) = C.shape[:-2], C.shape[-2:]
    _check_cost_memory("C", int(np.prod(batch)), n, m, C.dtype)
    flat = C.reshape(-1, n, m)
    rho = _penalty(marginal_penalty)
    normalize = np.isinf(rho)
    a_rows, b_rows = _weight_rows(a, batch, n, "a", C, normalize), _weight_rows(b, batch, m, "b", C, normalize)
    plans = _transport(list(flat), a_rows, b_rows, epsilon, tol, max_iter, rho, strict)[0]
    return _torch.stack(plans).reshape(C.shape)


class _SquaredDistances(_torch.autograd.Function):
    """|x_i - y_j|^2 for x (..., n, d), y (..., m, d): (..., n, m). Differences, not |x|^2 + |y|^2 -
    2 <x, y>: exact zeros on the diagonal of C(x, x) and no cancellation; summed coordinate by
    coordinate in place (two (..., n, m) buffers, not a (..., n, m, d) one). Backward: dL/dx_i =
    2 (x_i sum_j G_ij - sum_j G_ij y_j), dL/dy_j = 2 (y_j sum_i G_ij - sum_i G_ij x_i), G = dL/dC."""

    @staticmethod
    def forward(ctx, x, y):
        ctx.save_for_backward(x, y)
        if x.shape[-1] == 0:  # no coordinates: every distance is 0
            return (x.sum(-1)[..., :, None] + y.sum(-1)[..., None, :]).detach()
        squared = x[..., :, None, 0] - y[..., None, :, 0]
        squared.mul_(squared)
        for k in range(1, x.shape[-1]):
            term = x[..., :, None, k] - y[..., None, :, k]
            squared.add_(term.mul_(term))
        return squared

    @staticmethod
    def backward(ctx, G):  # torch operations: differentiable again under create_graph=True
        x, y = ctx.saved_tensors
        grad_x = grad_y = None
        if ctx.needs_input_grad[0]:
            grad_x = 2 * (x * G.sum(-1)[..., None] - G @ y)
            grad_x = grad_x.sum_to_size(x.shape)
        if ctx.needs_input_grad[1]:
            grad_y = 2 * (y * G.sum(-2)[..., None] - G.transpose(-1, -2) @ x)
            grad_y = grad_y.sum_to_size(y.shape)
        return grad_x, grad_y


def cost_matrix(x, y, cost: str = "sqeuclidean"):
    """The cost matrix ``C_ij = c(x_i, y_j)`` in torch, differentiable in x and y.

    The costs of :func:`tokenflow.sinkhorn`. Squared distances are computed from the differences
    of the points, coordinate by coordinate (not as ``|x|^2 + |y|^2 - 2 <x, y>``): exact zeros on
    the diagonal of ``cost_matrix(x, x)`` and no cancellation.

    Parameters
    ----------
    x : torch.Tensor or array_like of shape (..., n, d)
        The first points (a tensor keeps its dtype, device and graph; an integer or list input
        becomes torch's default dtype). Leading batch dimensions broadcast with y's.
    y : torch.Tensor or array_like of shape (..., m, d)
        The second points, of the dimension d of x (converted to the dtype of x).
    cost : {"sqeuclidean", "euclidean", "dot"}, default "sqeuclidean"
        ``|x - y|^2``; ``|x - y|`` (its gradient at ``x_i = y_j`` is taken as 0); or the negative
        inner product ``-<x, y>``.

    Returns
    -------
    torch.Tensor of shape (..., n, m)
        The costs, in the dtype of x, on its device, in the graph of x and y.

    Raises
    ------
    tokenflow.InputError
        An unknown cost; x or y not 2-D to 8-D, empty, complex, boolean or with NaN or infinite
        entries; points of different dimensions; batch shapes that do not broadcast; costs that
        overflow the dtype (rescale x and y), or cost matrices too large for memory (named x).

    Examples
    --------
    >>> import torch, tokenflow.torch as tt
    >>> tt.cost_matrix(torch.tensor([[0.0, 0.0]]), torch.tensor([[3.0, 4.0]]), "euclidean").tolist()
    [[5.0]]
    """
    cost = as_str("cost", cost, _COSTS)
    x = as_tensor(_torch, "x", x, range(2, 9))
    y = as_tensor(_torch, "y", y, range(2, 9), dtype=x.dtype)
    if x.shape[-1] != y.shape[-1]:
        raise input_error("y", f"has points of dimension {y.shape[-1]} (shape {tuple(y.shape)}), x of dimension "
                               f"{x.shape[-1]}; accepted: points of the same dimension")
    try:
        batch = _torch.broadcast_shapes(x.shape[:-2], y.shape[:-2])
    except RuntimeError:
        raise input_error("y", f"has the batch shape {tuple(y.shape[:-2])}, which does not broadcast with x's "
                               f"{tuple(x.shape[:-2])}") from None
    _check_cost_memory("x", int(np.prod(batch)), x.shape[-2], y.shape[-2], x.dtype)
    if x.dtype != y.dtype:
        y = y.to(x.dtype)
    if cost == "dot":
        products = -x @ y.transpose(-1, -2)
        if not bool(_torch.isfinite(products.detach()).all()):
            raise input_error("x", f"gives inner products that overflow {x.dtype}; accepted: points whose products it "
                                   "holds (rescale x and y)")
        return products
    squared = _SquaredDistances.apply(x, y)
    finite = _torch.isfinite(squared.detach())
    if not bool(finite.all()):
        raise input_error("x", f"gives {int(finite.numel() - finite.sum())} squared distances (of {finite.numel()}) that "
                               f"overflow {x.dtype}; accepted: points whose distances it holds (rescale x and y)")
    if cost == "sqeuclidean":
        return squared
    positive = squared > 0
    return _torch.where(positive, _torch.sqrt(_torch.where(positive, squared, _torch.ones_like(squared))), 0.0)


def _loss_tolerance(dtype) -> float:
    """sinkhorn_divergence's default tol for points of `dtype`: tokenflow.sinkhorn's (1e-9) for
    float64, else 8 eps of the dtype (9.5e-7 for float32, 7.8e-3 for float16): a loss computed from
    float32 points is not resolved finer than float32, and asking for more only costs iterations."""
    return max(_TOL, 8.0 * float(_torch.finfo(dtype).eps))


@shared(epsilon=_OPTIONS, max_iter=_MAX_ITER_DOC, penalty=_PENALTY, input_errors=_INPUT_ERRORS)
def sinkhorn_divergence(x, y, a=None, b=None, epsilon: float = _EPSILON, cost: str = "sqeuclidean",
                        tol: Optional[float] = None, max_iter: int = _MAX_ITER,
                        marginal_penalty: Optional[float] = None, strict: bool = False):
    """The debiased Sinkhorn divergence, a differentiable torch scalar: a loss for training loops.

    ``S_eps = OT_eps(a, b) - OT_eps(a, a) / 2 - OT_eps(b, b) / 2``.

    OT_eps is the entropic objective ``<C, pi> + epsilon KL(pi | a b^T)`` at the optimal pi
    (tokenflow's ``objective``), with ``C = cost_matrix(x, y, cost)`` computed in torch. Gradients
    in x, y, a and b by the envelope theorem: the gradient of OT_eps is the plan in C and the
    potentials f, g in a, b (no linear solve). The value agrees with ``tokenflow.sinkhorn(x, y, a,
    b, epsilon, divergence=True).divergence`` (the same problem, solved here as three cost-matrix
    problems, concurrently; the self-transport terms by the symmetric loop).

    Parameters
    ----------
    x : torch.Tensor or array_like of shape (n, d)
        The source points.
    y : torch.Tensor or array_like of shape (m, d)
        The target points, of the dimension d of x (converted to the dtype of x).
    a : torch.Tensor or array_like of shape (n,), optional
        Nonnegative weights of x; uniform when None; divided by their sums (zero weights as in
        :func:`sinkhorn`).
    b : torch.Tensor or array_like of shape (m,), optional
        Nonnegative weights of y, as a.
    {{epsilon}}
    cost : {"sqeuclidean", "euclidean", "dot"}, default "sqeuclidean"
        The cost of :func:`cost_matrix`.
    tol : float or None, default None
        The marginal error of each solve. None: 1e-9 (tokenflow.sinkhorn's) for float64 points, 8
        machine epsilons of their dtype otherwise (9.5e-7 for float32), and a solve whose plan
        cannot be resolved that finely in double arithmetic (tol below its rounding floor,
        docs/ot.md) returns its value at the floor.
    {{max_iter}}
    {{penalty}}
        The divergence is then Sejourne et al.'s (2019), ``OT_eps(a, b) - OT_eps(a, a) / 2 -
        OT_eps(b, b) / 2 + epsilon / 2 (m(a) - m(b))^2`` with the unbalanced OT_eps and the masses
        m; its gradients are (8) of the module docstring.
    strict : bool, default False
        False: a solve that stops at max_iter above tol returns the value it reached with a
        :class:`tokenflow.ConvergenceWarning` naming its marginal error (a training loop goes on
        past an unlucky batch). True: it raises :class:`ConvergenceError`.

    Returns
    -------
    torch.Tensor of shape ()
        S_eps, in the dtype and on the device of x, differentiable in x, y, a and b.

    Raises
    ------
    {{input_errors}}
    ConvergenceError
        With ``strict=True``, a solve that stopped at max_iter above tol.

    Warns
    -----
    tokenflow.ConvergenceWarning
        With ``strict=False`` (the default), a solve that stopped at max_iter above tol.

    Examples
    --------
    >>> import torch, tokenflow.torch as tt
    >>> x = torch.tensor([[0.0], [1.0]], dtype=torch.float64, requires_grad=True)
    >>> s = tt.sinkhorn_divergence(x, x.detach() + 1.0, epsilon=0.3)
    >>> round(s.item(), 3)                 # ~ W_2^2 = 1
    1.0
    >>> s.backward(); x.grad.numpy().round(3).tolist()   # ~ 2 (x - T(x)) / n: each point moves +1
    [[-1.0], [-1.0]]
    """
    x = as_tensor(_torch, "x", x, (2,))
    y = as_tensor(_torch, "y", y, (2,), dtype=x.dtype)
    if x.shape[1] != y.shape[1]:
        raise input_error("y", f"has shape {tuple(y.shape)}, x {tuple(x.shape)}; accepted: (m, d) points of the "
                               "dimension d of x")
    tol_is_default = tol is None
    epsilon, tol, max_iter = _check_options(epsilon, _loss_tolerance(x.dtype) if tol is None else tol, max_iter)
    rho = _penalty(marginal_penalty)
    normalize = np.isinf(rho)
    a, b = _weights(a, x.shape[0], "a", x, normalize), _weights(b, y.shape[0], "b", y, normalize)
    costs = [cost_matrix(x, y, cost), cost_matrix(x, x, cost), cost_matrix(y, y, cost)]
    # OT_eps(a, b), (a, a), (b, b); the last two by the symmetric loop, whose costs (differences
    # squared, summed in one order) are symmetric to the last bit (not so for "dot": a matrix product).
    value = _transport(costs, [a, a, b], [b, a, b], epsilon, tol, max_iter, rho, strict, tol_is_default,
                       symmetric=(1, 2) if cost != "dot" else (), cost_name="x")[1]
    s_eps = value[0] - 0.5 * value[1] - 0.5 * value[2]
    return s_eps if normalize else s_eps + 0.5 * epsilon * (a.sum() - b.sum()) ** 2


class SamplesResult(NamedTuple):
    """What :func:`sinkhorn_samples` returns: a named tuple, one entry per pair of the batch.

    The leading dimension B is absent when x and y had no batch dimension. Every tensor is in the
    dtype and on the device of x.

    Attributes
    ----------
    plan : torch.Tensor of shape (B, n, m)
        ``pi = a_i b_j exp((f_i + g_j - C_ij) / epsilon)``, with the implicit gradient.
    f : torch.Tensor of shape (B, n)
        The source dual potentials, in the units of the cost. No gradient: the potentials are
        defined up to ``(f + c, g - c)`` (the gradients of ``objective`` in a and b are f and g).
    g : torch.Tensor of shape (B, m)
        The target dual potentials, as f.
    cost : torch.Tensor of shape (B,)
        The transport cost ``<C, pi>``.
    objective : torch.Tensor of shape (B,)
        ``OT_eps = <C, pi> + epsilon KL(pi | a b^T)`` (tokenflow's ``objective``; unbalanced: the
        dual's value), with the envelope-theorem gradient.
    divergence : torch.Tensor of shape (B,) or None
        ``S_eps = OT_eps(a, b) - OT_eps(a, a) / 2 - OT_eps(b, b) / 2`` (plus Sejourne et al.'s mass
        term when unbalanced), or None with ``divergence=False``.
    """
    plan: "_torch.Tensor"
    f: "_torch.Tensor"
    g: "_torch.Tensor"
    cost: "_torch.Tensor"
    objective: "_torch.Tensor"
    divergence: "Optional[_torch.Tensor]"


def _point_batches(x, y):
    """x, y as (B, n, d) and (B, m, d) tensors, and whether they came without the batch dimension."""
    x = as_tensor(_torch, "x", x, (2, 3))
    y = as_tensor(_torch, "y", y, (2, 3), dtype=x.dtype)
    single = x.dim() == 2 and y.dim() == 2
    if single:
        x, y = x[None], y[None]
    if x.dim() != 3 or y.dim() != 3 or x.shape[0] != y.shape[0] or x.shape[2] != y.shape[2]:
        raise input_error("y", f"has shape {tuple(y.shape)}, x {tuple(x.shape[1:] if single else x.shape)}; accepted: "
                               "(B, m, d) for x of shape (B, n, d), or (m, d) for (n, d)")
    return x, y, single


@shared(epsilon=_OPTIONS, max_iter=_MAX_ITER_DOC, penalty=_PENALTY, input_errors=_INPUT_ERRORS, strict=_STRICT)
def sinkhorn_samples(x, y, a=None, b=None, epsilon: float = _EPSILON, cost: str = "sqeuclidean", tol: float = _TOL,
                     max_iter: int = _MAX_ITER, divergence: bool = True,
                     marginal_penalty: Optional[float] = None, strict: bool = True) -> SamplesResult:
    """Entropic optimal transport between batches of point clouds: plans, potentials, transport
    cost, objective and Sinkhorn divergence, differentiable in x, y, a and b.

    ``C = cost_matrix(x, y, cost)`` in torch. The B problems (and, with divergence, the 2 B
    self-transport problems) are solved in one call, concurrently across cores, each exactly as
    :func:`tokenflow.sinkhorn` solves it alone (float64, stopping at marginal error tol). Gradients
    are those of the converged fixed point: the plan's by implicit differentiation
    (:func:`sinkhorn`), the objective's and divergence's by the envelope theorem
    (:func:`sinkhorn_divergence`); memory does not grow with the iterations. Pairs of different
    sizes go in one call padded with zero weights (empty bins: zero rows and columns of the plan).

    Parameters
    ----------
    x : torch.Tensor or array_like of shape (B, n, d) or (n, d)
        B source point clouds, or one.
    y : torch.Tensor or array_like of shape (B, m, d) or (m, d)
        The target point clouds, as many as x, of the same dimension d.
    a : torch.Tensor or array_like of shape (n,) or (B, n), optional
        Nonnegative weights of x; uniform when None; divided by their sums inside the graph.
    b : torch.Tensor or array_like of shape (m,) or (B, m), optional
        Nonnegative weights of y, as a.
    {{epsilon}}
    cost : {"sqeuclidean", "euclidean", "dot"}, default "sqeuclidean"
        The cost of :func:`cost_matrix` ("sqeuclidean" ``|x - y|^2`` is the cost of
        :func:`tokenflow.sinkhorn` and :func:`sinkhorn_divergence`).
    tol : float, default 1e-09
        The marginal error to reach, ``|pi 1 - a|_1 + |pi^T 1 - b|_1 < tol``.
    {{max_iter}}
    divergence : bool, default True
        Also solve the self-transport problems and return S_eps (False: ``divergence`` is None).
    {{penalty}}
    strict : bool, default True
        A solve that stops at max_iter above tol raises :class:`ConvergenceError`; False: it warns
        and returns what it reached.

    Returns
    -------
    SamplesResult
        Plans, potentials, costs, objectives and divergences of the B pairs (no leading B when x
        and y had no batch dimension).

    Raises
    ------
    {{input_errors}}
        Also y of a shape that does not match x's.
    {{strict}}

    Examples
    --------
    >>> import torch, tokenflow.torch as tt
    >>> x = torch.tensor([[[0.0], [1.0]], [[0.0], [2.0]]], dtype=torch.float64, requires_grad=True)
    >>> r = tt.sinkhorn_samples(x, x.detach() + 1.0, epsilon=0.3)
    >>> r.divergence.detach().numpy().round(3).tolist()   # ~ W_2^2 = 1 for both pairs
    [1.0, 1.0]
    >>> r.plan.shape, r.f.shape, r.cost.shape
    (torch.Size([2, 2, 2]), torch.Size([2, 2]), torch.Size([2]))
    >>> r.divergence.sum().backward(); x.grad[0].numpy().round(3).tolist()
    [[-1.0], [-1.0]]
    """
    x, y, single = _point_batches(x, y)
    epsilon, tol, max_iter = _check_options(epsilon, tol, max_iter)
    divergence = as_bool("divergence", divergence)
    B, n, m = x.shape[0], x.shape[1], y.shape[1]
    rho = _penalty(marginal_penalty)
    normalize = np.isinf(rho)
    a_rows, b_rows = _weight_rows(a, (B,), n, "a", x, normalize), _weight_rows(b, (B,), m, "b", y, normalize)
    C = cost_matrix(x, y, cost)
    costs, left, right = list(C), list(a_rows), list(b_rows)
    if divergence:  # the self-transport problems of S_eps, in the same parallel call
        costs += list(cost_matrix(x, x, cost)) + list(cost_matrix(y, y, cost))
        left, right = left + a_rows + b_rows, right + a_rows + b_rows
    symmetric = range(B, 3 * B) if divergence and cost != "dot" else ()  # the self-transport problems
    plans, objective, f, g = _transport(costs, left, right, epsilon, tol, max_iter, rho, strict, symmetric=symmetric,
                                        cost_name="x")
    plan = _torch.stack(plans[:B])
    value = objective[:B]
    s_eps = value - 0.5 * objective[B:2 * B] - 0.5 * objective[2 * B:] if divergence else None
    if divergence and not normalize:  # Sejourne et al.'s mass term
        s_eps = s_eps + 0.5 * epsilon * (_torch.stack([w.sum() for w in a_rows]) -
                                         _torch.stack([w.sum() for w in b_rows])) ** 2
    result = SamplesResult(plan, _torch.stack(f[:B]), _torch.stack(g[:B]), (C * plan).sum((-2, -1)), value, s_eps)
    if single:
        result = SamplesResult(*(None if t is None else t[0] for t in result))
    return result


@shared(epsilon=_OPTIONS, max_iter=_MAX_ITER_DOC, penalty=_PENALTY)
class SinkhornLayer(_torch.nn.Module):
    """A Sinkhorn layer for torch models (a ``torch.nn.Module``).

    ``forward(C, a=None, b=None)`` returns the plan ``sinkhorn(C, a, b, epsilon, tol, max_iter,
    marginal_penalty, strict)`` of :func:`sinkhorn`: (n, m), or (B, n, m) for a batch, uniform
    weights by default, with the implicit gradient. The layer has no trainable parameters;
    epsilon is fixed.

    Parameters
    ----------
    {{epsilon}}
    tol : float, default 1e-09
        The marginal error each solve reaches, ``|pi 1 - a|_1 + |pi^T 1 - b|_1 < tol``.
    {{max_iter}}
    {{penalty}}
    strict : bool, default True
        A solve that stops at max_iter above tol raises :class:`ConvergenceError`; False: it warns
        with :class:`tokenflow.ConvergenceWarning` and returns the plan reached.

    Raises
    ------
    tokenflow.InputError
        At construction: epsilon <= 0, tol < 0, max_iter < 1, marginal_penalty <= 0, or a strict
        that is not a bool, naming the argument. In forward, as :func:`sinkhorn`.

    Examples
    --------
    >>> import torch, tokenflow.torch as tt
    >>> layer = tt.SinkhornLayer(epsilon=0.5)
    >>> layer
    SinkhornLayer(epsilon=0.5, tol=1e-09, max_iter=10000)
    >>> layer(torch.zeros(2, 3, 3)).sum(-1)   # uniform rows: 1/3 each
    tensor([[0.3333, 0.3333, 0.3333],
            [0.3333, 0.3333, 0.3333]])
    """

    def __init__(self, epsilon: float = _EPSILON, tol: float = _TOL, max_iter: int = _MAX_ITER,
                 marginal_penalty: Optional[float] = None, strict: bool = True):
        super().__init__()
        self.epsilon, self.tol, self.max_iter = _check_options(epsilon, tol, max_iter)
        self.marginal_penalty = None if marginal_penalty is None else _penalty(marginal_penalty)
        self.strict = as_bool("strict", strict)

    def forward(self, C, a=None, b=None):
        """The plan of :func:`sinkhorn` for the cost C, with the layer's options.

        Parameters
        ----------
        C : torch.Tensor or array_like of shape (n, m) or (B, n, m)
            The cost matrix, or a batch of B of them.
        a : torch.Tensor or array_like of shape (n,) or (B, n), optional
            Nonnegative source weights; uniform when None (divided by their sums when balanced).
        b : torch.Tensor or array_like of shape (m,) or (B, m), optional
            Nonnegative target weights, as a.

        Returns
        -------
        torch.Tensor of shape (n, m) or (B, n, m)
            The plan, in the dtype and on the device of C, with the implicit gradient.
        """
        return sinkhorn(C, a, b, self.epsilon, self.tol, self.max_iter, self.marginal_penalty, self.strict)

    def extra_repr(self) -> str:
        """The options in the module's repr."""
        penalty = "" if self.marginal_penalty is None else f", marginal_penalty={self.marginal_penalty:g}"
        return f"epsilon={self.epsilon:g}, tol={self.tol:g}, max_iter={self.max_iter}{penalty}"
