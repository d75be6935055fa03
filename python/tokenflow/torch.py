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

A solve that stops at max_iter above tol raises :class:`ConvergenceError` (never a warning): its
"plan" does not have the marginals a and b and the formulas above are not its gradient.
Non-finite costs and an epsilon too small for the costs raise :class:`tokenflow.InputError`, as
:func:`tokenflow.sinkhorn` does.
"""
from __future__ import annotations

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
from ._inputs import as_float, input_error
from ._tokenflow import InputError
from .transport import _options as _transport_options
from .transport import _result as _transport_result

# The defaults of epsilon, tol and max_iter: those of `tokenflow ot` and tokenflow.sinkhorn (the
# library's OTSolveOptions, include/tokenflow/ot_solve.hpp).
_DEFAULTS = _tokenflow.OTOptions()
_EPSILON, _TOL, _MAX_ITER = _DEFAULTS.epsilon, _DEFAULTS.tol, _DEFAULTS.max_iter

__all__ = ["ConvergenceError", "SamplesResult", "SinkhornLayer", "cost_matrix", "sinkhorn", "sinkhorn_divergence",
           "sinkhorn_samples"]

_COSTS = ("sqeuclidean", "euclidean", "dot")


class ConvergenceError(RuntimeError):
    """A Sinkhorn solve of :mod:`tokenflow.torch` stopped at max_iter with its marginal error above
    tol. Unlike :func:`tokenflow.sinkhorn`, which warns and returns what it reached, the torch bridge
    raises: an unconverged iterate is not a coupling, and the implicit gradient is only the gradient
    of the fixed point. Raise max_iter or epsilon.

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


def _support(C: np.ndarray, a: np.ndarray, b: np.ndarray, normalize: bool = True):
    """The problem on the support of a and b: (rows, cols, C there, a and b there divided by their sums,
    or as given when not normalize: unbalanced)."""
    if not np.all(np.isfinite(C)):
        bad = int(C.size - np.count_nonzero(np.isfinite(C)))
        raise InputError(f"C: the cost matrix has {bad} non-finite entries (of {C.size})")
    rows, cols = np.flatnonzero(a > 0), np.flatnonzero(b > 0)
    a_s, b_s = a[rows], b[cols]
    if normalize:
        a_s, b_s = a_s / a_s.sum(), b_s / b_s.sum()
    return rows, cols, C[np.ix_(rows, cols)], a_s, b_s


def _check_converged(r, tol: float, max_iter: int, n: int, m: int, epsilon: float) -> None:
    if not r.converged:
        why = (f"tol {tol:g} is not above the rounding floor {r.rounding_floor:g} (marginal error "
               f"{r.marginal_error:g})" if r.summary.get("status") == "below_floor" else
               f"Sinkhorn stopped at max_iter = {max_iter} with marginal error {r.marginal_error:g} > tol {tol:g}")
        raise ConvergenceError(
            f"{why} (n = {n}, m = {m} on the support, epsilon = {epsilon:g}): not a coupling, "
            "so no gradient either; raise max_iter or epsilon, or tol above the rounding floor")


def _is_prefix(index: np.ndarray) -> bool:
    return len(index) == 0 or index[-1] == len(index) - 1  # sorted and distinct (flatnonzero)


def _full_solution(C: np.ndarray, a: np.ndarray, b: np.ndarray, support, r, epsilon: float,
                   rho: float = np.inf) -> _Solution:
    """r (an OTResult on the support) on the full index range of C, with the zero-weight potentials
    (the damped soft-min tau T when unbalanced, tau = rho / (rho + eps): the fixed point's limit)."""
    rows, cols, _, a_s, b_s = support
    n, m = C.shape
    plan, f, g = np.zeros((n, m)), np.empty(n), np.empty(m)
    if _is_prefix(rows) and _is_prefix(cols):  # padding at the end: a block copy, no index arrays
        plan[:len(rows), :len(cols)] = r.plan
    else:
        plan[np.ix_(rows, cols)] = r.plan
    f[rows], g[cols] = r.f, r.g
    zero_rows, zero_cols = np.flatnonzero(a <= 0), np.flatnonzero(b <= 0)
    tau = 1.0 if np.isinf(rho) else rho / (rho + epsilon)
    if zero_rows.size:
        f[zero_rows] = tau * _softmin(epsilon, np.log(b_s), r.g, C[np.ix_(zero_rows, cols)])
    if zero_cols.size:
        g[zero_cols] = tau * _softmin(epsilon, np.log(a_s), r.f, C[np.ix_(rows, zero_cols)].T)
    as_torch = lambda v: _torch.from_numpy(np.ascontiguousarray(v))  # noqa: E731
    return _Solution(as_torch(plan), as_torch(f), as_torch(g), float(r.objective), _torch.from_numpy(rows),
                     _torch.from_numpy(cols), as_torch(a_s), as_torch(b_s), rho)


def _solve_batch(problems, epsilon: float, tol: float, max_iter: int, rho: float = np.inf) -> list:
    """tokenflow.sinkhorn on the support of each (C, a, b) of problems (float64 numpy), all of them
    in one call that solves them concurrently across cores (tokenflow._tokenflow.ot_batch: each
    result is bit for bit the one tokenflow.sinkhorn(a=a, b=b, M=C) gives); a list of _Solution.
    rho: the marginal penalty (inf: balanced)."""
    supports = [_support(C, a, b, normalize=np.isinf(rho)) for C, a, b in problems]
    options = _transport_options(method="sinkhorn", epsilon=epsilon, tol=tol, max_iter=max_iter, plan=True)
    if not np.isinf(rho):
        options.marginal_penalty = rho
    runs = _tokenflow.ot_batch([s[2] for s in supports], [s[3] for s in supports], [s[4] for s in supports],
                               options)
    solutions = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)  # raised below instead
        for (C, a, b), support, run in zip(problems, supports, runs):
            r = _transport_result(run)
            _check_converged(r, tol, max_iter, len(support[0]), len(support[1]), epsilon)
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
    for k, (s, _, _) in enumerate(items):
        if ws[k] is None:
            ws[k] = _unbalanced_adjoint(*systems[k], 1.0 + eps / s.rho)
    return [_plan_gradient(s, G, C, pi, P, w1, w2, eps)
            for (s, G, C), (pi, P), (w1, w2) in zip(items, systems, ws)]


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


def _plan_gradient(s: _Solution, G, C, pi, P, w1, w2, eps: float):
    """(5) from the adjoint (w1, w2) of one problem, on the full index range."""
    I, J = s.rows, s.cols
    grad_C = _torch.zeros_like(s.plan)                 # (5): (pi (w1_i + w2_j) - P) / eps
    on_support = (pi * (w1[:, None] + w2[None, :]) - P) / eps
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


class _Transport(_torch.autograd.Function):
    """k problems (C_i (n_i, m_i), a_i (n_i), b_i (m_i) on the simplex, zeros allowed), given as
    apply(epsilon, tol, max_iter, rho, k, C_1..C_k, a_1..a_k, b_1..b_k), solved in one parallel batch
    (rho: the marginal penalty, inf when balanced; then a_i, b_i are free, not on the simplex).
    Outputs: the plans pi_1..pi_k, the objectives OT_eps (k,), the potentials f_1..f_k, g_1..g_k
    (not differentiable: defined up to (f + c, g - c)). Backward: (4)-(5) of the module docstring
    for the plans, the envelope theorem (pi, f, g) for the objectives."""

    @staticmethod
    def forward(ctx, epsilon, tol, max_iter, rho, k, *tensors):
        Cs, As, Bs = tensors[:k], tensors[k:2 * k], tensors[2 * k:]
        ctx.solutions = _solve_batch([(_float64_numpy(C), _float64_numpy(a), _float64_numpy(b))
                                      for C, a, b in zip(Cs, As, Bs)], epsilon, tol, max_iter, rho)
        ctx.epsilon, ctx.k = epsilon, k
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
    @_torch.autograd.function.once_differentiable
    def backward(ctx, *grad_outputs):
        k, tensors = ctx.k, ctx.saved_tensors
        grad_plans, grad_objective = grad_outputs[:k], grad_outputs[k]
        grads = [None] * (3 * k)
        objectives = [None if grad_objective is None else grad_objective[i] for i in range(k)]
        pair_grads = _pair_gradients(ctx.solutions, grad_plans, objectives, tensors[:k], ctx.epsilon)
        for i, pair in enumerate(pair_grads):
            if pair is None:
                continue
            for which, value in enumerate(pair):
                index = which * k + i
                if ctx.needs_input_grad[5 + index]:
                    grads[index] = _like(value, tensors[index])
        return (None, None, None, None, None, *grads)


def _transport(Cs, As, Bs, epsilon: float, tol: float, max_iter: int, rho: float = np.inf):
    """The problems (Cs[i], As[i], Bs[i]) solved in one parallel batch (_Transport): (plans,
    objectives (k,), f's, g's)."""
    k = len(Cs)
    out = _Transport.apply(epsilon, tol, max_iter, rho, k, *Cs, *As, *Bs)
    return list(out[:k]), out[k], list(out[k + 1:2 * k + 1]), list(out[2 * k + 1:])


def _as_floating(w, like):
    """w as a floating torch tensor on the device of like; not a tensor (a list, numpy) or integer:
    in the dtype of like."""
    if isinstance(w, _torch.Tensor) and w.is_floating_point():
        return w.to(device=like.device)
    return _torch.as_tensor(np.asarray(w) if not isinstance(w, _torch.Tensor) else w, device=like.device).to(like.dtype)


def _weights(w, n: int, name: str, like, normalize: bool = True):
    """w divided by its sum (in torch, so that the gradient sees it; as given when not normalize:
    unbalanced), or uniform; checked."""
    if w is None:
        return _torch.full((n,), 1.0 / n, dtype=like.dtype, device=like.device)
    w = _as_floating(w, like)
    if w.shape != (n,):
        raise InputError(f"{name}: shape {tuple(w.shape)}, expected ({n},)")
    values = _float64_numpy(w)
    if not np.all(np.isfinite(values)) or np.any(values < 0):
        raise InputError(f"{name}: weights must be finite and >= 0")
    if not values.sum() > 0:
        raise InputError(f"{name}: the weights sum to 0")
    return w / w.sum() if normalize else w


def _weight_rows(w, batch, size: int, name: str, like, normalize: bool = True) -> list:
    """One weight vector per problem of a batch of shape `batch` (() for one problem), each divided
    by its sum (_weights): w None (uniform), (size) (the same for all) or (*batch, size)."""
    count = int(np.prod(batch))
    if w is None or not len(batch) or _as_floating(w, like).dim() <= 1:
        return [_weights(w, size, name, like, normalize)] * count  # one tensor: its gradient sums the problems'
    w = _as_floating(w, like)
    try:
        rows = w.expand(*batch, size).reshape(-1, size)
    except RuntimeError:
        raise InputError(f"{name}: shape {tuple(w.shape)}, expected ({size},) or {(*batch, size)}") from None
    return [_weights(wk, size, name, like, normalize) for wk in rows]


def _check_options(epsilon: float, tol: float, max_iter: int) -> tuple[float, float, int]:
    epsilon, tol, max_iter = float(epsilon), float(tol), int(max_iter)
    if not (np.isfinite(epsilon) and epsilon > 0):
        raise InputError(f"epsilon: {epsilon:g}; must be finite and > 0")
    return epsilon, tol, max_iter


def _penalty(marginal_penalty) -> float:
    """rho as a float (inf for None: balanced), checked by the input layer and here (> 0)."""
    if marginal_penalty is None:
        return np.inf
    rho = as_float("marginal_penalty", marginal_penalty)
    if not rho > 0:
        raise input_error("marginal_penalty", f"is {rho!r}; accepted: a positive number (None: balanced)")
    return rho


def sinkhorn(C, a=None, b=None, epsilon: float = _EPSILON, tol: float = _TOL, max_iter: int = _MAX_ITER,
             marginal_penalty: Optional[float] = None):
    """The entropic optimal transport plan pi of the cost C, as a differentiable torch tensor.

    pi minimizes <C, pi> + epsilon KL(pi | a b^T) over the couplings of a and b:
    pi_ij = a_i b_j exp((f_i + g_j - C_ij) / epsilon). C is (n, m), or (B, n, m) for a batch (its
    pairs solved concurrently across cores, each exactly as alone); a (n) or (B, n) and b (m) or
    (B, m) are nonnegative weights, uniform when None, divided by their sums inside the graph (no
    warning: the normalization is part of the function differentiated). Zero weights are empty bins:
    the problem is solved on the support and pi has zero rows and columns there. The forward solve
    is :func:`tokenflow.sinkhorn` (float64, stopping when |pi 1 - a|_1 + |pi^T 1 - b|_1 < tol);
    gradients in C, a and b are those of the converged fixed point (implicit differentiation, the
    module docstring derives them), with no unrolled iterations. pi has the dtype and device of C. A
    solve that reaches max_iter first raises :class:`ConvergenceError` (it does not warn).
    marginal_penalty (rho > 0; None: balanced): unbalanced transport, pi minimizing <C, pi> + epsilon
    KL(pi | a b^T) + rho KL(pi 1 | a) + rho KL(pi^T 1 | b); a and b then keep their masses (not
    divided by their sums) and the gradients are (6)-(7) of the module docstring.

    >>> import torch, tokenflow.torch as tt
    >>> C = torch.tensor([[0.0, 1.0], [1.0, 0.0]], dtype=torch.float64, requires_grad=True)
    >>> pi = tt.sinkhorn(C, epsilon=0.5)
    >>> pi.detach().numpy().round(4).tolist()
    [[0.4404, 0.0596], [0.0596, 0.4404]]
    >>> (pi * C).sum().backward()          # d<C, pi>/dC, through the fixed point
    >>> C.grad.numpy().round(4).tolist()
    [[0.5454, -0.0454], [-0.0454, 0.5454]]
    """
    C = _torch.as_tensor(C)
    if not C.is_floating_point():
        C = C.to(_torch.get_default_dtype())
    if C.dim() < 2:
        raise InputError(f"C: {C.dim()} dimension(s); expected (n, m) or (B, n, m)")
    epsilon, tol, max_iter = _check_options(epsilon, tol, max_iter)
    batch, (n, m) = C.shape[:-2], C.shape[-2:]
    flat = C.reshape(-1, n, m)
    rho = _penalty(marginal_penalty)
    normalize = np.isinf(rho)
    a_rows, b_rows = _weight_rows(a, batch, n, "a", C, normalize), _weight_rows(b, batch, m, "b", C, normalize)
    plans = _transport(list(flat), a_rows, b_rows, epsilon, tol, max_iter, rho)[0]
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
    @_torch.autograd.function.once_differentiable
    def backward(ctx, G):
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
    """C_ij = c(x_i, y_j) in torch (differentiable): "sqeuclidean" |x - y|^2, "euclidean" |x - y|
    (its gradient at x_i = y_j is taken as 0) or "dot" -<x, y>, as :func:`tokenflow.sinkhorn`.
    x (..., n, d) and y (..., m, d) give C (..., n, m) (batches broadcast).

    >>> import torch, tokenflow.torch as tt
    >>> tt.cost_matrix(torch.tensor([[0.0, 0.0]]), torch.tensor([[3.0, 4.0]]), "euclidean").tolist()
    [[5.0]]
    """
    if cost not in _COSTS:
        raise InputError(f"cost: unknown cost '{cost}'; one of: {', '.join(_COSTS)}")
    if cost == "dot":
        return -x @ y.transpose(-1, -2)
    squared = _SquaredDistances.apply(x, y)
    if cost == "sqeuclidean":
        return squared
    positive = squared > 0
    return _torch.where(positive, _torch.sqrt(_torch.where(positive, squared, _torch.ones_like(squared))), 0.0)


def sinkhorn_divergence(x, y, a=None, b=None, epsilon: float = _EPSILON, cost: str = "sqeuclidean",
                        tol: float = _TOL, max_iter: int = _MAX_ITER, marginal_penalty: Optional[float] = None):
    """The debiased Sinkhorn divergence S_eps = OT_eps(a, b) - OT_eps(a, a) / 2 - OT_eps(b, b) / 2,
    a differentiable torch scalar.

    OT_eps is the entropic objective <C, pi> + epsilon KL(pi | a b^T) at the optimal pi (tokenflow's
    ``objective``), with C = cost_matrix(x, y, cost) computed in torch; x (n, d) and y (m, d) are
    points, a (n) and b (m) nonnegative weights (uniform when None; divided by their sums; zero
    weights as in :func:`sinkhorn`). Gradients in x, y, a and b by the envelope theorem: the gradient
    of OT_eps is the plan in C and the potentials f, g in a, b (no linear solve). The value agrees
    with ``tokenflow.sinkhorn(x, y, a, b, epsilon, divergence=True).divergence`` (same problem,
    solved as three cost-matrix problems here, concurrently). A solve that reaches max_iter first raises
    :class:`ConvergenceError`. marginal_penalty (rho; None: balanced): the unbalanced divergence of
    Sejourne et al. 2019, OT_eps(a, b) - OT_eps(a, a) / 2 - OT_eps(b, b) / 2 + epsilon / 2 (m(a) -
    m(b))^2 with the unbalanced OT_eps (weights not normalized; gradients (8) of the module docstring).

    >>> import torch, tokenflow.torch as tt
    >>> x = torch.tensor([[0.0], [1.0]], dtype=torch.float64, requires_grad=True)
    >>> s = tt.sinkhorn_divergence(x, x.detach() + 1.0, epsilon=0.3)
    >>> round(s.item(), 3)                 # ~ W_2^2 = 1
    1.0
    >>> s.backward(); x.grad.numpy().round(3).tolist()   # ~ 2 (x - T(x)) / n: each point moves +1
    [[-1.0], [-1.0]]
    """
    x, y = _torch.as_tensor(x), _torch.as_tensor(y)
    if x.dim() != 2 or y.dim() != 2 or x.shape[1] != y.shape[1]:
        raise InputError(f"x, y: shapes {tuple(x.shape)} and {tuple(y.shape)}; expected (n, d) and (m, d)")
    epsilon, tol, max_iter = _check_options(epsilon, tol, max_iter)
    rho = _penalty(marginal_penalty)
    normalize = np.isinf(rho)
    a, b = _weights(a, x.shape[0], "a", x, normalize), _weights(b, y.shape[0], "b", y, normalize)
    costs = [cost_matrix(x, y, cost), cost_matrix(x, x, cost), cost_matrix(y, y, cost)]
    value = _transport(costs, [a, a, b], [b, a, b], epsilon, tol, max_iter, rho)[1]  # OT_eps(a, b), (a, a), (b, b)
    s_eps = value[0] - 0.5 * value[1] - 0.5 * value[2]
    return s_eps if normalize else s_eps + 0.5 * epsilon * (a.sum() - b.sum()) ** 2


class SamplesResult(NamedTuple):
    """What :func:`sinkhorn_samples` returns, one entry per pair of the batch (no batch dimension
    when x and y had none).

    plan        (B, n, m)  pi = a_i b_j exp((f_i + g_j - C_ij) / epsilon), implicit gradient
    f, g        (B, n), (B, m)  the dual potentials (no gradient: they are defined up to
                (f + c, g - c); the gradients of ``objective`` in a and b are f and g)
    cost        (B,)  the transport cost <C, pi>
    objective   (B,)  OT_eps = <C, pi> + epsilon KL(pi | a b^T) (tokenflow's ``objective``)
    divergence  (B,)  S_eps = OT_eps(a, b) - OT_eps(a, a) / 2 - OT_eps(b, b) / 2, or None when not asked
    """
    plan: "_torch.Tensor"
    f: "_torch.Tensor"
    g: "_torch.Tensor"
    cost: "_torch.Tensor"
    objective: "_torch.Tensor"
    divergence: "Optional[_torch.Tensor]"


def _point_batches(x, y):
    """x, y as (B, n, d) and (B, m, d) tensors, and whether they came without the batch dimension."""
    x, y = _torch.as_tensor(x), _torch.as_tensor(y)
    if not x.is_floating_point():
        x = x.to(_torch.get_default_dtype())
    if not y.is_floating_point():
        y = y.to(x.dtype)
    single = x.dim() == 2 and y.dim() == 2
    if single:
        x, y = x[None], y[None]
    if x.dim() != 3 or y.dim() != 3 or x.shape[0] != y.shape[0] or x.shape[2] != y.shape[2]:
        raise InputError(f"x, y: shapes {tuple(x.shape)} and {tuple(y.shape)}; expected (B, n, d) and (B, m, d), "
                         "or (n, d) and (m, d)")
    return x, y, single


def sinkhorn_samples(x, y, a=None, b=None, epsilon: float = _EPSILON, cost: str = "sqeuclidean", tol: float = _TOL,
                     max_iter: int = _MAX_ITER, divergence: bool = True,
                     marginal_penalty: Optional[float] = None) -> SamplesResult:
    """Entropic optimal transport between batches of point clouds: plans, potentials, transport
    cost, objective and Sinkhorn divergence, differentiable in x, y, a and b.

    x (B, n, d) and y (B, m, d) are B pairs of point clouds (or one pair, (n, d) and (m, d)); a (n)
    or (B, n) and b (m) or (B, m) nonnegative weights, uniform when None, divided by their sums
    inside the graph. Pairs of different sizes go in one call padded with zero weights (empty bins:
    zero rows and columns of the plan). C = cost_matrix(x, y, cost) in torch ("sqeuclidean":
    |x - y|^2, the cost of :func:`tokenflow.sinkhorn` and :func:`sinkhorn_divergence`). The B
    problems (and, with divergence, the 2 B self-transport problems) are solved in one call,
    concurrently across cores, each exactly as :func:`tokenflow.sinkhorn` solves it alone
    (float64, stopping at marginal error tol). Gradients are those of the converged fixed point:
    the plan's by implicit differentiation (:func:`sinkhorn`), the objective's and divergence's by
    the envelope theorem (:func:`sinkhorn_divergence`); memory does not grow with the iterations.
    Returns a :class:`SamplesResult`. A solve that reaches max_iter first raises
    :class:`ConvergenceError`. marginal_penalty (rho; None: balanced): unbalanced transport, as
    :func:`sinkhorn` and :func:`sinkhorn_divergence` (weights keep their masses).

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
    B, n, m = x.shape[0], x.shape[1], y.shape[1]
    rho = _penalty(marginal_penalty)
    normalize = np.isinf(rho)
    a_rows, b_rows = _weight_rows(a, (B,), n, "a", x, normalize), _weight_rows(b, (B,), m, "b", y, normalize)
    C = cost_matrix(x, y, cost)
    costs, left, right = list(C), list(a_rows), list(b_rows)
    if divergence:  # the self-transport problems of S_eps, in the same parallel call
        costs += list(cost_matrix(x, x, cost)) + list(cost_matrix(y, y, cost))
        left, right = left + a_rows + b_rows, right + a_rows + b_rows
    plans, objective, f, g = _transport(costs, left, right, epsilon, tol, max_iter, rho)
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


class SinkhornLayer(_torch.nn.Module):
    """A Sinkhorn layer for torch models: forward(C, a=None, b=None) returns the plan
    :func:`sinkhorn` (C, a, b, epsilon, tol, max_iter): (n, m) or a batch (B, n, m), uniform weights
    by default, with the implicit gradient. It has no parameters; epsilon is fixed.

    >>> import torch, tokenflow.torch as tt
    >>> layer = tt.SinkhornLayer(epsilon=0.5)
    >>> layer
    SinkhornLayer(epsilon=0.5, tol=1e-09, max_iter=10000)
    >>> layer(torch.zeros(2, 3, 3)).sum(-1)   # uniform rows: 1/3 each
    tensor([[0.3333, 0.3333, 0.3333],
            [0.3333, 0.3333, 0.3333]])
    """

    def __init__(self, epsilon: float = _EPSILON, tol: float = _TOL, max_iter: int = _MAX_ITER,
                 marginal_penalty: Optional[float] = None):
        super().__init__()
        self.epsilon, self.tol, self.max_iter = _check_options(epsilon, tol, max_iter)
        self.marginal_penalty = None if marginal_penalty is None else _penalty(marginal_penalty)

    def forward(self, C, a=None, b=None):
        return sinkhorn(C, a, b, self.epsilon, self.tol, self.max_iter, self.marginal_penalty)

    def extra_repr(self) -> str:
        penalty = "" if self.marginal_penalty is None else f", marginal_penalty={self.marginal_penalty:g}"
        return f"epsilon={self.epsilon:g}, tol={self.tol:g}, max_iter={self.max_iter}{penalty}"
