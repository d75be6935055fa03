"""Double backward (create_graph=True) through tokenflow.torch: second derivatives of the converged
fixed point, checked against finite differences of the first derivatives
(torch.autograd.gradgradcheck, float64) on fresh random problems, and the gradient penalty of a
plan against finite differences of the penalty itself.

Tolerances: the solves run to tol = 1e-13 (above the rounding floor of these small problems, about
1e-15), so a plan and its first derivatives carry an error of about tol; gradgradcheck's central
differences with step h = 1e-6 then carry about tol / h = 1e-7 plus h^2 times the third derivative
(about 1e-12 * |C|^3 / eps^3 here, under 1e-9), below its atol 1e-5 / rtol 1e-3, which a dropped
second-order term (the old behaviour: 5% off in the example of the issue) exceeds by orders of
magnitude."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
import tokenflow.torch as tt  # noqa: E402

TOL = 1e-13


def rng_tensor(gen, *shape, low=0.0, high=1.0, grad=True):
    t = low + (high - low) * torch.rand(*shape, dtype=torch.float64, generator=gen)
    return t.requires_grad_(grad)


@pytest.fixture
def gen():
    seed = int(np.random.default_rng().integers(2**31))
    print("seed", seed)
    return torch.Generator().manual_seed(seed)


def test_plan_second_derivatives_in_cost_and_weights(gen):
    n, m = 3, 4
    C = rng_tensor(gen, n, m, high=2.0)
    a = rng_tensor(gen, n, low=0.3, high=1.0)
    b = rng_tensor(gen, m, low=0.3, high=1.0)
    assert torch.autograd.gradgradcheck(lambda C, a, b: tt.sinkhorn(C, a, b, epsilon=0.5, tol=TOL), (C, a, b))


def test_plan_second_derivatives_with_empty_bins(gen):
    C = rng_tensor(gen, 4, 3, high=2.0)
    a = torch.tensor([0.4, 0.0, 0.3, 0.3], dtype=torch.float64)
    b = torch.tensor([0.5, 0.5, 0.0], dtype=torch.float64)
    assert torch.autograd.gradgradcheck(lambda C: tt.sinkhorn(C, a, b, epsilon=0.7, tol=TOL), (C,))


def test_batched_plans(gen):
    C = rng_tensor(gen, 2, 3, 3, high=2.0)
    assert torch.autograd.gradgradcheck(lambda C: tt.sinkhorn(C, epsilon=0.6, tol=TOL), (C,))


def test_divergence_and_samples_second_derivatives(gen):
    x = rng_tensor(gen, 4, 2, low=-1.0)
    y = rng_tensor(gen, 3, 2, low=-1.0)
    a = rng_tensor(gen, 4, low=0.3)
    assert torch.autograd.gradgradcheck(lambda x, y, a: tt.sinkhorn_divergence(x, y, a, epsilon=0.5, tol=TOL),
                                        (x, y, a))
    assert torch.autograd.gradgradcheck(
        lambda x, y: tt.sinkhorn_samples(x, y, epsilon=0.5, tol=TOL).cost, (x[None].detach().requires_grad_(),
                                                                          y[None].detach().requires_grad_()))


def test_gradient_penalty_matches_finite_differences(gen):
    """The issue's case: d/dC of |dL/dC|^2 for L = <C, pi(C)>, against central differences of the
    penalty (each a first-order backward, exact to about tol)."""
    C = rng_tensor(gen, 3, 3, high=2.0)

    def penalty(C):
        pi = tt.sinkhorn(C, epsilon=0.3, tol=TOL)
        (grad,) = torch.autograd.grad((pi * C).sum(), C, create_graph=True)
        return (grad ** 2).sum()

    (analytic,) = torch.autograd.grad(penalty(C), C)
    h = 1e-6
    numeric = torch.zeros_like(C)
    for idx in np.ndindex(*C.shape):
        E = torch.zeros_like(C)
        E[idx] = h
        numeric[idx] = (penalty((C + E).detach().requires_grad_()) - penalty((C - E).detach().requires_grad_())) / (2 * h)
    assert torch.allclose(analytic, numeric, rtol=1e-5, atol=1e-7), (analytic, numeric)


def test_first_order_backward_is_unchanged_without_create_graph(gen):
    C = rng_tensor(gen, 4, 5, high=2.0)
    pi = tt.sinkhorn(C, epsilon=0.5, tol=TOL)
    G = torch.rand(4, 5, dtype=torch.float64, generator=gen)
    (first,) = torch.autograd.grad((pi * G).sum(), C)
    (again,) = torch.autograd.grad((tt.sinkhorn(C, epsilon=0.5, tol=TOL) * G).sum(), C, create_graph=True)
    assert torch.allclose(first, again.detach(), rtol=1e-9, atol=1e-12)


def test_unbalanced_plan_and_divergence_second_derivatives(gen):
    """marginal_penalty (unbalanced): H_rho has no gauge; the potentials' derivatives solve (6)."""
    C = rng_tensor(gen, 3, 4, high=2.0)
    a = rng_tensor(gen, 3, low=0.3, high=1.0)
    b = rng_tensor(gen, 4, low=0.3, high=1.0)
    assert torch.autograd.gradgradcheck(
        lambda C, a, b: tt.sinkhorn(C, a, b, epsilon=0.5, tol=TOL, marginal_penalty=2.0), (C, a, b))
    x = rng_tensor(gen, 3, 2, low=-1.0)
    y = rng_tensor(gen, 4, 2, low=-1.0)
    assert torch.autograd.gradgradcheck(
        lambda x, a: tt.sinkhorn_divergence(x, y.detach(), a, b.detach(), epsilon=0.5, tol=TOL, marginal_penalty=2.0),
        (x, a))
