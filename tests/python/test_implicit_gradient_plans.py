"""The implicit gradient of a Sinkhorn plan on the plans trained models make, against the same
adjoint system solved in 200 digits.

A trained Sinkhorn Transformer's learned cost spans hundreds of epsilons, so its plans are close to
permutations with entries down to 1e-170: the adjoint system's potentials reach 1e15-1e50 while
the cost gradient D = pi o (w1 + w2^T) - P is their small differences. These plans are built as a
trained model's are (the Sinkhorn plan, eps 1, of a cost matching each point to a noisy partner,
spread over 50 to 400 epsilons), with both kinds of upstream gradient: the training losses' (the
target divided by the plan, so P = -target) and an arbitrary one (P = W o pi). D, as the Sinkhorn
Transformer's implicit layer and tokenflow.torch compute it (_tokenflow.plan_cost_gradient_batch),
must lie within Skeel's componentwise bound of the 200-digit solution (bench/adjoint_accuracy.py's
reference_gradient derives it); the potentials' route misses it by orders of magnitude there.
"""
import random
import sys
import warnings

import numpy as np
import pytest

import tokenflow
from conftest import ROOT
from tokenflow import _tokenflow

mp = pytest.importorskip("mpmath")

sys.path.insert(0, str(ROOT / "bench"))
from adjoint_accuracy import reference_gradient  # noqa: E402  (the 200-digit solve and Skeel's bound)


def reference_and_bound(P, G):
    return reference_gradient(P, G, digits=200, with_bound=True)


def trained_like_plan(rng, n, spread):
    x = rng.normal(size=(n, 2))
    y = x[rng.permutation(n)] + 0.05 * rng.normal(size=(n, 2))
    C = ((x[:, None, :] - y[None, :, :]) ** 2).sum(-1)
    C *= spread / C.max()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the plan need not be converged: both sides solve the system of this plan
        return np.asarray(tokenflow.sinkhorn(M=C, epsilon=1.0, tol=1e-9).plan)


@pytest.mark.parametrize("upstream", ["target", "general"])
def test_cost_gradient_on_near_permutation_plans(upstream):
    seed = random.SystemRandom().randrange(2**32)
    rng = np.random.default_rng(seed)
    for trial in range(6):
        n = int(rng.integers(6, 13))
        P = trained_like_plan(rng, n, spread=float(rng.uniform(50, 400)))
        G = -np.eye(n)[rng.permutation(n)] / n / 32 if upstream == "target" else rng.normal(size=P.shape) * P / 32
        reference, bound = reference_and_bound(P, G)
        D = _tokenflow.plan_cost_gradient_batch([P], [G])[0]
        excess = np.abs(D - reference) - bound
        worst = np.unravel_index(np.argmax(excess), P.shape)
        assert np.all(excess <= 0), (f"seed {seed}, trial {trial}: entry {worst}: {D[worst]!r} against "
                                     f"{reference[worst]!r} (bound {bound[worst]:.3g}, smallest plan entry {P.min():.1e})")


def test_torch_gradient_on_a_near_permutation_plan():
    """tokenflow.torch.sinkhorn's dL/dC on such a plan: (D / eps) with D as above."""
    torch = pytest.importorskip("torch")
    import tokenflow.torch as tt

    rng = np.random.default_rng(random.SystemRandom().randrange(2**32))
    n = 8
    x = rng.normal(size=(n, 2))
    y = x[rng.permutation(n)] + 0.05 * rng.normal(size=(n, 2))
    C = ((x[:, None, :] - y[None, :, :]) ** 2).sum(-1)
    C *= 300.0 / C.max()
    Ct = torch.tensor(C, requires_grad=True)
    W = rng.normal(size=C.shape)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        plan = tt.sinkhorn(Ct, epsilon=1.0, tol=1e-9, strict=False)
    (plan * torch.tensor(W)).sum().backward()
    pi = plan.detach().numpy()
    reference, bound = reference_and_bound(pi, W * pi)
    assert np.all(np.abs(Ct.grad.numpy() - reference) <= bound), (Ct.grad.numpy(), reference)
