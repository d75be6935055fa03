"""tokenflow.torch: the Sinkhorn plan and divergence as differentiable torch operations.

Checked against finite differences (torch.autograd.gradcheck), against autograd through 2000
unrolled log-domain iterations written here in torch, against tokenflow.sinkhorn itself, and in a
tiny training loop. Problems are small (n, m = 4 .. 7) with epsilon in [0.5, 1] relative to costs
in [0, 2], so that each solve is well conditioned and fast.
"""
import doctest
import os
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
tt = pytest.importorskip("tokenflow.torch")
import tokenflow  # noqa: E402

F64 = torch.float64
U = np.finfo(float).eps / 2  # unit roundoff of float64
# Fresh instances on every run; the seed is in each test's id, and TOKENFLOW_TEST_SEED=<seed> replays it.
BASE_SEED = int(os.environ.get("TOKENFLOW_TEST_SEED", np.random.SeedSequence().entropy % 2**31))
SEEDS = [BASE_SEED + k for k in range(3)]


def instance(seed, n=None, m=None, d=2):
    """Points in [0, 1]^d (so C = |x - y|^2 is in [0, d]), weights in [0.2, 1.2] (unnormalized),
    epsilon in [0.5, 1]."""
    rng = np.random.default_rng(seed)
    n = n or int(rng.integers(4, 8))
    m = m or int(rng.integers(4, 8))
    x, y = torch.tensor(rng.random((n, d)), dtype=F64), torch.tensor(rng.random((m, d)), dtype=F64)
    a, b = torch.tensor(0.2 + rng.random(n), dtype=F64), torch.tensor(0.2 + rng.random(m), dtype=F64)
    return x, y, a, b, float(0.5 + 0.5 * rng.random()), rng


def sqdist(x, y):
    return ((x[:, None, :] - y[None, :, :]) ** 2).sum(-1)


def unrolled_potentials(C, a, b, eps, iterations):
    """(f, g, log a, log b) after `iterations` log-domain Sinkhorn iterations (the loop of
    include/tokenflow/ot.hpp, g then f), differentiable by autograd through every iteration."""
    la, lb = torch.log(a / a.sum()), torch.log(b / b.sum())
    f = torch.zeros_like(la)
    for _ in range(iterations):
        g = -eps * torch.logsumexp(la[:, None] + (f[:, None] - C) / eps, 0)
        f = -eps * torch.logsumexp(lb[None, :] + (g[None, :] - C) / eps, 1)
    return f, g, la, lb


def unrolled_plan(C, a, b, eps, iterations=2000):
    f, g, la, lb = unrolled_potentials(C, a, b, eps, iterations)
    return torch.exp(la[:, None] + lb[None, :] + (f[:, None] + g[None, :] - C) / eps)


def unrolled_value(C, a, b, eps, iterations=2000):
    f, g, la, lb = unrolled_potentials(C, a, b, eps, iterations)
    return (la.exp() * f).sum() + (lb.exp() * g).sum()


def birkhoff_rate(C, eps):
    """The contraction factor of one Sinkhorn iteration in Hilbert's projective metric,
    tanh(Delta / 4)^2 with Delta = max (C_il + C_kj - C_ij - C_kl) / eps, the projective diameter of
    the kernel exp(-C / eps) (Birkhoff-Hopf; Franklin and Lorenz 1989): the unrolled iterate is
    within rate^k of the fixed point after k iterations."""
    delta = (C[:, None, :, None] + C[None, :, None, :] - C[:, None, None, :] - C[None, :, :, None]).max() / eps
    return float(np.tanh(float(delta) / 4) ** 2)


def adjoint_condition(pi, a, b):
    """kappa(H): largest over smallest nonzero eigenvalue of H = [[diag a, pi], [pi^T, diag b]], the
    matrix of the adjoint system (tokenflow/torch.py, (4))."""
    n = len(a)
    H = torch.zeros((n + len(b),) * 2, dtype=F64)
    H[:n, :n], H[:n, n:], H[n:, :n], H[n:, n:] = torch.diag(a), pi, pi.T, torch.diag(b)
    ev = torch.linalg.eigvalsh(H)
    return float(ev[-1] / ev[1])


@pytest.mark.parametrize("seed", SEEDS)
def test_plan_is_a_coupling_to_1e_9(seed):
    x, y, a, b, eps, _ = instance(seed)
    pi = tt.sinkhorn(sqdist(x, y), a, b, epsilon=eps)  # default tol 1e-9 on |pi 1 - a|_1 + |pi^T 1 - b|_1
    a, b = a / a.sum(), b / b.sum()
    assert pi.dtype == F64 and pi.shape == (len(a), len(b))
    error = (pi.sum(1) - a).abs().sum() + (pi.sum(0) - b).abs().sum()
    assert float(error) < 1e-9
    assert bool((pi > 0).all())


@pytest.mark.parametrize("seed", SEEDS[0:1])
def test_plan_is_tokenflow_sinkhorns_plan(seed):
    x, y, a, b, eps, _ = instance(seed)
    C = sqdist(x, y)
    pi = tt.sinkhorn(C, a, b, epsilon=eps, tol=1e-12)
    r = tokenflow.sinkhorn(a=(a / a.sum()).numpy(), b=(b / b.sum()).numpy(), M=C.numpy(), epsilon=eps, tol=1e-12,
                           progress=False)
    # The same solver on the same float64 numbers, but for the last bits of the weights (normalized
    # in torch, then again by tokenflow): the same plan to rounding, or, were the stopping iteration
    # to differ by one, two plans both within the marginal error 1e-12 of the fixed point.
    np.testing.assert_allclose(pi.numpy(), r.plan, rtol=1e-13, atol=1e-12)


@pytest.mark.parametrize("seed", SEEDS[0:1])
def test_dtype_and_device_follow_the_cost(seed):
    pi = tt.sinkhorn(torch.rand(3, 2, dtype=F64), a=[1, 2, 1], b=np.array([0.5, 0.5]))  # weights as given
    assert pi.dtype == F64 and float((pi.sum(1) - torch.tensor([0.25, 0.5, 0.25], dtype=F64)).abs().max()) < 1e-9
    x, y, a, b, eps, _ = instance(seed)
    C = sqdist(x, y).float().requires_grad_()
    pi = tt.sinkhorn(C, a.float(), b.float(), epsilon=eps)
    assert pi.dtype == torch.float32
    pi.sum().backward()
    assert C.grad.dtype == torch.float32
    # sum(pi) is 1 for every C: its gradient is 0 up to float32 rounding of (5).
    assert float(C.grad.abs().max()) < 1e-5


@pytest.mark.parametrize("seed", SEEDS)
def test_plan_gradcheck(seed):
    x, y, a, b, eps, _ = instance(seed)
    C = sqdist(x, y).requires_grad_()
    a.requires_grad_(), b.requires_grad_()
    # tol 1e-12: the plan is within ~1e-12 of the fixed point, far below gradcheck's finite-difference
    # step (1e-6) times its tolerance (atol 1e-5, rtol 1e-3).
    assert torch.autograd.gradcheck(lambda C, a, b: tt.sinkhorn(C, a, b, epsilon=eps, tol=1e-12), (C, a, b))


@pytest.mark.parametrize("seed", SEEDS[0:1])
@pytest.mark.parametrize("cost", ["sqeuclidean", "euclidean", "dot"])
def test_divergence_gradcheck(cost, seed):
    x, y, a, b, eps, _ = instance(seed)
    for v in (x, y, a, b):
        v.requires_grad_()
    assert torch.autograd.gradcheck(
        lambda x, y, a, b: tt.sinkhorn_divergence(x, y, a, b, epsilon=eps, cost=cost, tol=1e-12), (x, y, a, b))


def implicit_tolerance(pi, a, b, tol):
    """Relative tolerance for implicit against unrolled gradients. The unrolled iterate is within
    rate^2000 of the fixed point (birkhoff_rate; below 1e-30 in these tests, asserted), so the gap
    is the forward solve's: it stops at a marginal error below tol, a relative perturbation of H of
    at most tol / min(a, b), which (5) amplifies by at most kappa(H); plus float64 rounding, u per
    operation, as many as n + m per entry, amplified by kappa(H) likewise. Factor 10 for the
    constants of these first-order bounds."""
    kappa = adjoint_condition(pi, a / a.sum(), b / b.sum())
    w_min = float(min((a / a.sum()).min(), (b / b.sum()).min()))
    return 10 * kappa * (tol / w_min + (len(a) + len(b)) * U)


@pytest.mark.parametrize("seed", SEEDS)
def test_plan_gradient_matches_unrolled_iterations(seed):
    x, y, a0, b0, eps, rng = instance(seed)
    C0 = sqdist(x, y)
    assert birkhoff_rate(C0, eps) ** 2000 < 1e-30
    G = torch.tensor(rng.normal(size=C0.shape), dtype=F64)  # a random loss <G, pi>
    grads = []
    for plan in (lambda C, a, b: tt.sinkhorn(C, a, b, epsilon=eps, tol=1e-12),
                 lambda C, a, b: unrolled_plan(C, a, b, eps)):
        C, a, b = (v.clone().requires_grad_() for v in (C0, a0, b0))
        (plan(C, a, b) * G).sum().backward()
        grads.append((C.grad, a.grad, b.grad))
    rtol = implicit_tolerance(tt.sinkhorn(C0, a0, b0, epsilon=eps, tol=1e-12), a0, b0, 1e-12)
    for name, implicit, unrolled in zip("Cab", *grads):
        gap = float((implicit - unrolled).abs().max() / unrolled.abs().max())
        assert gap < rtol, f"d/d{name}: relative gap {gap:.2e} > {rtol:.2e}"


@pytest.mark.parametrize("seed", SEEDS[0:1])
def test_divergence_gradient_matches_unrolled_iterations(seed):
    x0, y0, a0, b0, eps, _ = instance(seed)
    grads = []
    for ot in (None, lambda C, a, b: unrolled_value(C, a, b, eps)):
        x, y, a, b = (v.clone().requires_grad_() for v in (x0, y0, a0, b0))
        if ot is None:
            s = tt.sinkhorn_divergence(x, y, a, b, epsilon=eps, tol=1e-12)
        else:
            s = ot(sqdist(x, y), a, b) - 0.5 * ot(sqdist(x, x), a, a) - 0.5 * ot(sqdist(y, y), b, b)
        s.backward()
        grads.append((s.detach(), x.grad, y.grad, a.grad, b.grad))
    for C, w, v in ((sqdist(x0, y0), a0, b0), (sqdist(x0, x0), a0, a0), (sqdist(y0, y0), b0, b0)):
        assert birkhoff_rate(C, eps) ** 2000 < 1e-30
    # The envelope gradient needs no solve; (pi, f, g) are within kappa(H) tol / min(w) of the
    # fixed point as in implicit_tolerance (the largest kappa of the three problems).
    rtol = max(implicit_tolerance(tt.sinkhorn(C, w, v, epsilon=eps, tol=1e-12), w, v, 1e-12)
               for C, w, v in ((sqdist(x0, y0), a0, b0), (sqdist(x0, x0), a0, a0), (sqdist(y0, y0), b0, b0)))
    for name, implicit, unrolled in zip(["S", "x", "y", "a", "b"], *grads):
        # The gradient in the weights is defined up to a constant (they are normalized): compare
        # the simplex components.
        if name in "ab":
            implicit, unrolled = implicit - implicit.mean(), unrolled - unrolled.mean()
        gap = float((implicit - unrolled).abs().max() / unrolled.abs().max())
        assert gap < rtol, f"d/d{name}: relative gap {gap:.2e} > {rtol:.2e}"


@pytest.mark.parametrize("seed", SEEDS[0:1])
def test_divergence_is_tokenflows(seed):
    x, y, a, b, eps, _ = instance(seed)
    s = tt.sinkhorn_divergence(x, y, a, b, epsilon=eps, tol=1e-12)
    r = tokenflow.sinkhorn(x.numpy(), y.numpy(), (a / a.sum()).numpy(), (b / b.sum()).numpy(), epsilon=eps,
                           tol=1e-12, divergence=True, progress=False)
    # Each OT_eps term is within marginal_error * cost range (< 1e-12 * 2) of its limit
    # (include/tokenflow/ot.hpp, `objective`); tokenflow solves OT(a, a) by the symmetric loop.
    assert abs(float(s) - r.divergence) < 1e-10
    assert float(s) > 0
    assert abs(float(tt.sinkhorn_divergence(x, x, a, a, epsilon=eps, tol=1e-12))) < 1e-10


@pytest.mark.parametrize("seed", SEEDS[0:1])
def test_zero_weights_are_empty_bins(seed):
    x, y, a, b, eps, rng = instance(seed, n=6, m=5)
    a[[1, 4]] = 0.0
    b[2] = 0.0
    C0 = sqdist(x, y)
    pi = tt.sinkhorn(C0, a, b, epsilon=eps, tol=1e-12)
    assert bool((pi[[1, 4]] == 0).all()) and bool((pi[:, 2] == 0).all())
    on = tt.sinkhorn(C0[[0, 2, 3, 5]][:, [0, 1, 3, 4]], a[[0, 2, 3, 5]], b[[0, 1, 3, 4]], epsilon=eps, tol=1e-12)
    # The same problem on the support, up to the last bits of the weights' normalization: both plans
    # are within marginal error 1e-12 of its fixed point.
    np.testing.assert_allclose(pi[[0, 2, 3, 5]][:, [0, 1, 3, 4]].numpy(), on.numpy(), rtol=0, atol=1e-11)
    assert float((pi.sum(1) - a / a.sum()).abs().sum() + (pi.sum(0) - b / b.sum()).abs().sum()) < 1e-12

    # The gradient: in C and in the positive weights by gradcheck (a zero weight cannot be
    # perturbed both ways); the rows and columns of zero weight get no gradient in C.
    G = torch.tensor(rng.normal(size=C0.shape), dtype=F64)
    support = a > 0

    def loss(C, a_pos, b):
        full = torch.zeros(len(a), dtype=F64).masked_scatter(support, a_pos)
        return (tt.sinkhorn(C, full, b, epsilon=eps, tol=1e-12) * G).sum()

    C, a_pos, bb = C0.clone().requires_grad_(), a[support].clone().requires_grad_(), b.clone()
    assert torch.autograd.gradcheck(loss, (C, a_pos, bb))
    loss(C, a_pos, bb).backward()
    assert bool((C.grad[[1, 4]] == 0).all()) and bool((C.grad[:, 2] == 0).all())

    # In a zero weight: the one-sided derivative, against the one-sided second-order difference
    # (-3 L(0) + 4 L(h) - L(2h)) / 2h, whose error is O(h^2 L''') + O(1e-12 / h) (solve tol):
    # about 1e-6 at h = 1e-4 for derivatives of order 1.
    aa, bb = a.clone().requires_grad_(), b.clone().requires_grad_()
    L = lambda a, b: (tt.sinkhorn(C0, a, b, epsilon=eps, tol=1e-12) * G).sum()  # noqa: E731
    L(aa, bb).backward()
    h = 1e-4
    for weights, grad, k in ((a, aa.grad, 1), (b, bb.grad, 2)):
        def at(t):
            w = weights.clone()
            w[k] = t
            return float(L(w, b) if weights is a else L(a, w))

        # d/dw_k of L(w / sum w) at w_k = 0, from the raw (unnormalized) weights, as autograd gives it
        one_sided = (-3 * at(0.0) + 4 * at(h) - at(2 * h)) / (2 * h)
        assert abs(float(grad[k]) - one_sided) < 1e-5 * max(1.0, abs(one_sided)), (float(grad[k]), one_sided)


@pytest.mark.parametrize("seed", SEEDS[0:1])
def test_weights_below_the_others_rounding_are_zero_weights(seed):
    # A weight near 1e-310 of the others': its plan line underflows (zero or subnormal), so its
    # gradients are those of a zero weight (the adjoint divides by each line's mass). The same
    # gradients, to the rounding of the others, as with the weight 0; and finite.
    x, y, a, b, eps, rng = instance(seed, n=6, m=5)
    C0 = sqdist(x, y)
    G = torch.tensor(rng.normal(size=C0.shape), dtype=F64)
    grads = []
    for w in (0.0, 1e-310, 1e-320):
        C, aa, bb = C0.clone().requires_grad_(), a.clone(), b.clone()
        aa[2], bb[3] = w, w
        aa.requires_grad_()
        bb.requires_grad_()
        pi = tt.sinkhorn(C, aa, bb, epsilon=eps, tol=1e-12)
        assert float(pi[2].abs().sum()) < 1e-300 and float(pi[:, 3].abs().sum()) < 1e-300
        (pi * G).sum().backward()
        grads.append([t.grad.clone() for t in (C, aa, bb)])
    for other in grads[1:]:
        for g0, g in zip(grads[0], other):
            assert bool(torch.isfinite(g).all())
            # Both solves are within marginal error 1e-12 of fixed points that differ by a weight of
            # 1e-310: their adjoints agree to the solve's tol times the gradient's scale.
            assert float((g - g0).abs().max()) < 1e-9 * max(1.0, float(g0.abs().max())), (g, g0)


@pytest.mark.parametrize("seed", SEEDS[0:1])
def test_zero_weights_in_the_divergence(seed):
    x, y, a, b, eps, _ = instance(seed, n=5, m=6)
    a[0] = 0.0
    s = tt.sinkhorn_divergence(x, y, a, b, epsilon=eps, tol=1e-12)
    s_support = tt.sinkhorn_divergence(x[1:], y, a[1:], b, epsilon=eps, tol=1e-12)
    assert abs(float(s) - float(s_support)) < 1e-12
    xx = x.clone().requires_grad_()
    aa = a.clone().requires_grad_()
    tt.sinkhorn_divergence(xx, y, aa, b, epsilon=eps, tol=1e-12).backward()
    assert bool((xx.grad[0] == 0).all())   # a point of no mass does not move the divergence
    assert bool(torch.isfinite(aa.grad).all())


def test_unconverged_solve_raises():
    C = torch.tensor([[0.0, 1.0], [2.0, 0.0]], dtype=F64)
    with pytest.raises(tt.ConvergenceError, match="max_iter = 2"):
        tt.sinkhorn(C, torch.tensor([0.2, 0.8], dtype=F64), epsilon=0.01, max_iter=2)
    with pytest.raises(tt.ConvergenceError):
        tt.sinkhorn_divergence(torch.tensor([[0.0], [1.0]]), torch.tensor([[0.5], [3.0]]), a=[0.2, 0.8], epsilon=0.01,
                               max_iter=2, strict=True)
    # A loss (strict=False, its default): the value reached, with a ConvergenceWarning naming the error.
    with pytest.warns(tokenflow.ConvergenceWarning, match="max_iter = 2 with marginal error"):
        s = tt.sinkhorn_divergence(torch.tensor([[0.0], [1.0]]), torch.tensor([[0.5], [3.0]]), a=[0.2, 0.8],
                                   epsilon=0.01, max_iter=2)
    assert torch.isfinite(s)
    with pytest.warns(tokenflow.ConvergenceWarning):
        pi = tt.sinkhorn(C, torch.tensor([0.2, 0.8], dtype=F64), epsilon=0.01, max_iter=2, strict=False)
    assert pi.shape == (2, 2) and bool(torch.isfinite(pi).all())


def test_bad_input_raises_input_error():
    C = torch.rand(3, 4, dtype=F64)
    with pytest.raises(tokenflow.InputError, match=r"a: has a negative entry \(-0.1\); accepted: nonnegative weights"):
        tt.sinkhorn(C, torch.tensor([0.5, -0.1, 0.6], dtype=F64))
    with pytest.raises(tokenflow.InputError, match=r"b: has shape \(3,\); accepted: \(4,\) weights"):
        tt.sinkhorn(C, b=torch.ones(3, dtype=F64))
    with pytest.raises(tokenflow.InputError, match="a: are all zero"):
        tt.sinkhorn(C, torch.zeros(3, dtype=F64))
    with pytest.raises(tokenflow.InputError, match="epsilon"):
        tt.SinkhornLayer(epsilon=0.0)
    with pytest.raises(tokenflow.InputError, match="unknown cost"):
        tt.sinkhorn_divergence(torch.rand(2, 2), torch.rand(2, 2), cost="euclidian")
    with pytest.raises(tokenflow.InputError, match="C: has 1 non-finite entries"):
        tt.sinkhorn(torch.tensor([[0.0, float("nan")]], dtype=F64))


@pytest.mark.parametrize("seed", SEEDS[0:1])
def test_batch_is_one_solve_each(seed):
    x, y, a, b, eps, rng = instance(seed, n=5, m=5)
    C = torch.stack([sqdist(x, y), sqdist(y, x), sqdist(x, x)]).requires_grad_()
    plans = tt.SinkhornLayer(epsilon=eps, tol=1e-12)(C, a)
    assert plans.shape == (3, 5, 5)
    for k in range(3):
        assert torch.equal(plans[k], tt.sinkhorn(C[k].detach(), a, None, epsilon=eps, tol=1e-12))
    G = torch.tensor(rng.normal(size=(3, 5, 5)), dtype=F64)
    (plans * G).sum().backward()
    single = C[1].detach().clone().requires_grad_()
    (tt.sinkhorn(single, a, None, epsilon=eps, tol=1e-12) * G[1]).sum().backward()
    assert torch.equal(C.grad[1], single.grad)
    # Weights per problem: (B, n).
    a_rows = torch.stack([a, a.flip(0), torch.ones(5, dtype=F64)])
    plans = tt.sinkhorn(C.detach(), a_rows, epsilon=eps, tol=1e-12)
    assert torch.equal(plans[1], tt.sinkhorn(C[1].detach(), a.flip(0), epsilon=eps, tol=1e-12))


def padded_batch(rng, sizes, d=2):
    """Pairs of point clouds of the given (n, m) sizes in [0, 1]^d, padded to the largest with zero
    weights; the weights are integers 1..4 on the support, so that their sums, and the normalized
    weights, are the same numbers with and without the padding."""
    N, M = max(n for n, _ in sizes), max(m for _, m in sizes)
    x, y = torch.zeros(len(sizes), N, d, dtype=F64), torch.zeros(len(sizes), M, d, dtype=F64)
    a, b = torch.zeros(len(sizes), N, dtype=F64), torch.zeros(len(sizes), M, dtype=F64)
    for k, (n, m) in enumerate(sizes):
        x[k, :n], y[k, :m] = torch.tensor(rng.random((n, d))), torch.tensor(rng.random((m, d)))
        a[k, :n] = torch.tensor(rng.integers(1, 5, n), dtype=F64)
        b[k, :m] = torch.tensor(rng.integers(1, 5, m), dtype=F64)
    return x, y, a, b


@pytest.mark.parametrize("seed", SEEDS[0:1])
def test_parallel_batch_is_each_problem_alone_bit_for_bit(seed):
    # Mixed sizes padded with zero weights, one of them large enough (>= 2^16 pairs) for the kernel
    # operator and for the row loops that run on several threads when it is solved alone: every plan
    # must be the one tokenflow.sinkhorn gives for that problem alone, to the last bit.
    rng = np.random.default_rng(seed)
    sizes = [(5, 7), (40, 23), (300, 260), (17, 64)]
    x, y, a, b = padded_batch(rng, sizes)
    eps = float(0.5 + 0.5 * rng.random())
    C = tt.cost_matrix(x, y).requires_grad_()
    plans = tt.sinkhorn(C, a, b, epsilon=eps)
    G = torch.tensor(rng.normal(size=C.shape), dtype=F64)
    (plans * G).sum().backward()
    for k, (n, m) in enumerate(sizes):
        a_k, b_k = (a[k, :n] / a[k, :n].sum()).numpy(), (b[k, :m] / b[k, :m].sum()).numpy()
        alone = tokenflow.sinkhorn(a=a_k / a_k.sum(), b=b_k / b_k.sum(), M=C[k, :n, :m].detach().numpy(), epsilon=eps,
                                   progress=False)
        assert np.array_equal(plans[k, :n, :m].detach().numpy(), alone.plan), k
        assert bool((plans[k, n:] == 0).all()) and bool((plans[k, :, m:] == 0).all())
        single = C[k, :n, :m].detach().clone().requires_grad_()
        (tt.sinkhorn(single, a[k, :n], b[k, :m], epsilon=eps) * G[k, :n, :m]).sum().backward()
        assert torch.equal(C.grad[k, :n, :m], single.grad), k


@pytest.mark.parametrize("seed", SEEDS[0:1])
def test_samples_gradcheck(seed):
    # Plan, cost, objective and divergence of a batch of two pairs, in x, y, a and b (positive
    # weights: a zero weight cannot be perturbed both ways). tol 1e-12 as in test_plan_gradcheck.
    rng = np.random.default_rng(seed)
    x = torch.tensor(rng.random((2, 5, 2)), dtype=F64, requires_grad=True)
    y = torch.tensor(rng.random((2, 4, 2)), dtype=F64, requires_grad=True)
    a = torch.tensor(0.2 + rng.random((2, 5)), dtype=F64, requires_grad=True)
    b = torch.tensor(0.2 + rng.random(4), dtype=F64, requires_grad=True)  # one b for both pairs
    eps = float(0.5 + 0.5 * rng.random())

    def outputs(x, y, a, b):
        r = tt.sinkhorn_samples(x, y, a, b, epsilon=eps, tol=1e-12)
        return r.plan, r.cost, r.objective, r.divergence

    assert torch.autograd.gradcheck(outputs, (x, y, a, b))


@pytest.mark.parametrize("seed", SEEDS)
def test_samples_are_the_one_pair_functions(seed):
    # Each pair of a padded batch: the plan of sinkhorn(cost_matrix(x, y)), the divergence of
    # sinkhorn_divergence, the objective of tokenflow.sinkhorn, cost <C, pi>, potentials of the plan
    # (pi_ij = a_i b_j exp((f_i + g_j - C_ij) / eps)); the gradients in x and y of the padded batch
    # are those of each pair alone (zero on the padding).
    rng = np.random.default_rng(seed)
    sizes = [(int(rng.integers(3, 9)), int(rng.integers(3, 9))) for _ in range(3)]
    x, y, a, b = padded_batch(rng, sizes)
    eps = float(0.5 + 0.5 * rng.random())
    x.requires_grad_(), y.requires_grad_()
    r = tt.sinkhorn_samples(x, y, a, b, epsilon=eps, tol=1e-12)
    (r.cost.sum() + r.divergence.sum()).backward()
    for k, (n, m) in enumerate(sizes):
        xk, yk = x[k, :n].detach().clone().requires_grad_(), y[k, :m].detach().clone().requires_grad_()
        one = tt.sinkhorn_samples(xk, yk, a[k, :n], b[k, :m], epsilon=eps, tol=1e-12)
        assert one.plan.shape == (n, m) and one.divergence.dim() == 0
        # Solved alone and padded: the same problem up to the last bits of the weights' sums (the
        # padded sum adds zeros in another order), both within marginal error 1e-12 of its fixed point.
        np.testing.assert_allclose(r.plan[k, :n, :m].detach().numpy(), one.plan.detach().numpy(), rtol=0, atol=1e-11)
        C = tt.cost_matrix(xk, yk)
        assert torch.equal(one.plan, tt.sinkhorn(C, a[k, :n], b[k, :m], epsilon=eps, tol=1e-12))
        assert torch.equal(one.cost, (C * one.plan).sum())
        s = tt.sinkhorn_divergence(xk, yk, a[k, :n], b[k, :m], epsilon=eps, tol=1e-12)
        assert torch.equal(one.divergence, s)
        wa, wb = a[k, :n] / a[k, :n].sum(), b[k, :m] / b[k, :m].sum()
        alone = tokenflow.sinkhorn(xk.detach().numpy(), yk.detach().numpy(), wa.numpy(), wb.numpy(), epsilon=eps,
                                   tol=1e-12, progress=False)
        assert abs(float(one.objective) - alone.objective) <= 1e-10, k  # operator and summation order differ
        gibbs = wa[:, None] * wb[None, :] * torch.exp((one.f[:, None] + one.g[None, :] - C.detach()) / eps)
        np.testing.assert_allclose(gibbs.numpy(), one.plan.detach().numpy(), rtol=1e-12, atol=0)
        (one.cost + one.divergence).backward()
        np.testing.assert_allclose(x.grad[k, :n].numpy(), xk.grad.numpy(), rtol=1e-8, atol=1e-10)
        np.testing.assert_allclose(y.grad[k, :m].numpy(), yk.grad.numpy(), rtol=1e-8, atol=1e-10)
        assert bool((x.grad[k, n:] == 0).all()) and bool((y.grad[k, m:] == 0).all())


def test_samples_defaults_are_the_solvers():
    import inspect
    options = tokenflow._tokenflow.OTOptions()
    for function in (tt.sinkhorn_samples, tt.sinkhorn, tt.sinkhorn_divergence):
        p = inspect.signature(function).parameters
        tol = options.tol if function is not tt.sinkhorn_divergence else None  # by dtype (test_divergence_tol...)
        assert (p["epsilon"].default, p["tol"].default, p["max_iter"].default) == \
            (options.epsilon, tol, options.max_iter)


def test_samples_bad_input():
    with pytest.raises(tokenflow.InputError, match=r"y: has shape \(3, 3, 2\), x \(2, 3, 2\)"):
        tt.sinkhorn_samples(torch.zeros(2, 3, 2), torch.zeros(3, 3, 2))
    with pytest.raises(tokenflow.InputError, match=r"a: has shape \(3, 3\); accepted: \(3,\) or \(2, 3\)"):
        tt.sinkhorn_samples(torch.zeros(2, 3, 2), torch.zeros(2, 3, 2), a=torch.ones(3, 3))


def test_layer_trains_a_linear_map_to_a_permutation():
    # y_{perm(i)} = Q x_i for an orthogonal Q: with the cost -<W x_i, y_j>, W = s Q makes the optimal
    # coupling the permutation (sum_i <x_i, x_sigma(i)> is largest at sigma = id). Starting from W = 0
    # (the uniform plan), gradient steps on KL(T | pi) through the layer must find it.
    rng = np.random.default_rng(3)
    n, d = 6, 3
    x = torch.tensor(rng.normal(size=(n, d)), dtype=F64)
    Q = torch.linalg.qr(torch.tensor(rng.normal(size=(d, d)), dtype=F64))[0]
    perm = torch.tensor(rng.permutation(n))
    y = torch.empty(n, d, dtype=F64)
    y[perm] = x @ Q.T
    target = torch.zeros(n, n, dtype=F64)
    target[torch.arange(n), perm] = 1.0 / n

    W = torch.nn.Parameter(torch.zeros(d, d, dtype=F64))
    layer = tt.SinkhornLayer(epsilon=0.5)
    optimizer = torch.optim.Adam([W], lr=0.05)
    losses = []
    # 10 steps: the plan's rows peak at the permutation from step 8 on. Not many more: as the plan
    # nears a permutation Sinkhorn's rate tends to 1 (here 22 iterations at step 1, 2244 at step 9).
    for _ in range(10):
        optimizer.zero_grad()
        pi = layer(-(x @ W.T) @ y.T)
        loss = (target * (target.clamp_min(1e-300).log() - pi.log())).sum()  # KL(T | pi), log n at W = 0
        loss.backward()
        optimizer.step()
        losses.append(float(loss))
    assert losses[-1] < 0.35 * losses[0], losses
    assert torch.equal(pi.argmax(1), perm)


def test_docstring_examples():
    result = doctest.testmod(tt, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE, verbose=False)
    assert result.attempted > 0 and result.failed == 0


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("eps", [0.1, 0.05])
def test_divergence_of_gaussian_clouds_is_a_value_not_an_error(dtype, eps):
    """The loss on ordinary data (Gaussian clouds of 200 and 300 points) with its defaults: no
    ConvergenceError, no warning (the self-transport terms by the symmetric loop, tol by dtype),
    and the value of tokenflow.sinkhorn(..., divergence=True) on the same points. Each OT_eps term
    is within about marginal_error * max|C| of its limit (docs/ot.md), so the two values differ by
    at most 4 tol max|C| (two solves of three terms each, tol = 1e-9 for float64, 9.5e-7 for
    float32) plus, in float32, the rounding of C itself: each entry is a difference, a square and
    a sum of two (3 roundings, 3 u relative, u = 2^-24), which moves OT_eps by at most <|dC|, pi>
    <= 3 u max|C| (the envelope theorem), and the terms enter with weights 1, 1/2, 1/2: 6 u max|C|."""
    gen = torch.Generator().manual_seed(int(np.random.default_rng().integers(2**31)))
    x = torch.randn(200, 2, generator=gen, dtype=F64).to(dtype)
    y = (torch.randn(300, 2, generator=gen, dtype=F64) + 1.0).to(dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        s = tt.sinkhorn_divergence(x, y, epsilon=eps)
    assert s.dtype == dtype
    reference = tokenflow.sinkhorn(x.double().numpy(), y.double().numpy(), epsilon=eps, tol=1e-12,
                                   divergence=True, progress=False).divergence
    max_cost = float(tt.cost_matrix(x.double(), y.double()).max())
    tol = 1e-9 if dtype == F64 else 8 * float(torch.finfo(torch.float32).eps)
    bound = 4 * tol * max_cost + (6 * 2.0**-24 * max_cost if dtype == torch.float32 else 0.0)
    assert abs(float(s) - reference) <= bound, (float(s), reference, bound)
