"""tokenflow.pot against the installed POT, function by function, on fresh random inputs.

Each problem is drawn fresh (the seed is printed on failure through the test id's rng fixture):
weights from 1e-3 to 1, clouds of spread 0.2 to 5 in 1 to 3 dimensions, n and m from 3 to 40.
Tolerances come from the arithmetic, as each comment says; u = 2^-53 is double's unit roundoff.
"""
import os
import subprocess
import sys
import warnings
import zlib

import numpy as np
import pytest

ot = pytest.importorskip("ot")
import tokenflow  # noqa: E402
import tokenflow.pot as tp  # noqa: E402
from conftest import exact_cost_unit  # noqa: E402

U = 2.0 ** -53
SEED = int(os.environ.get("TOKENFLOW_TEST_SEED", np.random.SeedSequence().entropy % 2**31))


@pytest.fixture
def rng(request):
    seed = (SEED + zlib.crc32(request.node.name.encode())) % 2**31
    print(f"seed {seed} (TOKENFLOW_TEST_SEED={SEED})")
    return np.random.default_rng(seed)


def problem(rng, n=None, m=None):
    n = n or int(rng.integers(3, 40))
    m = m or int(rng.integers(3, 40))
    d = int(rng.integers(1, 4))
    x = rng.normal(size=(n, d)) * rng.uniform(0.2, 5)
    y = rng.normal(size=(m, d)) * rng.uniform(0.2, 5) + rng.normal(size=d)
    a, b = rng.uniform(1e-3, 1, n), rng.uniform(1e-3, 1, m)
    return x, y, a / a.sum(), b / b.sum()


def marginal_error(plan, a, b):
    return np.abs(plan.sum(1) - a).sum() + np.abs(plan.sum(0) - b).sum()


def test_unif_and_dist(rng):
    assert np.array_equal(tp.unif(7), ot.unif(7))
    x, y, _, _ = problem(rng)
    scale = (x ** 2).sum(1)[:, None] + (y ** 2).sum(1)[None, :]
    # POT expands |x|^2 + |y|^2 - 2 <x, y>: each entry is off by a few roundings of terms of size
    # |x|^2 + |y|^2 (d + 3 operations, d <= 3: 8 u of that scale); tokenflow sums (x - y)^2 directly.
    assert np.all(np.abs(tp.dist(x, y) - ot.dist(x, y)) <= 8 * U * scale)
    assert np.all(np.abs(tp.dist(x, y, metric="euclidean") ** 2 - ot.dist(x, y, metric="euclidean") ** 2)
                  <= 16 * U * scale)
    assert np.allclose(tp.dist(x, y, metric="cityblock"), ot.dist(x, y, metric="cityblock"), rtol=0, atol=0)


def test_emd_and_emd2_match_pot(rng):
    for _ in range(10):
        x, y, a, b = problem(rng)
        M = ot.dist(x, y)
        # With continuous random data the optimal plan is unique (almost surely), and both network
        # simplex codes return it: entries are sums and differences of at most n + m weights, so
        # they agree to (n + m) u; the costs to that times max M.
        tol = (len(a) + len(b)) * U
        G, G_pot = tp.emd(a, b, M), ot.emd(a, b, M)
        assert np.abs(G - G_pot).max() <= tol
        assert abs(tp.emd2(a, b, M) - ot.emd2(a, b, M)) <= tol * M.max() * 4
        cost, log = tp.emd2(a, b, M, log=True, return_matrix=True)
        assert set(log) >= {"u", "v", "G", "warning", "result_code"} and log["result_code"] == 1
        # The duals are an optimal pair for the costs rounded to exact_ot's unit (each within half
        # a unit of M_ij): feasible up to that and the centring's rounding, and tight.
        half_unit = exact_cost_unit(M) / 2
        assert np.all(log["u"][:, None] + log["v"][None, :] <= M + half_unit + 4 * U * M.max())
        assert abs(a @ log["u"] + b @ log["v"] - cost) <= half_unit + 8 * U * (len(a) + len(b)) * M.max()


def test_emd_of_unnormalized_histograms_scales_as_pot(rng):
    x, y, a, b = problem(rng)
    M = ot.dist(x, y)
    G = tp.emd(3 * a, 3 * b, M)
    assert abs(G.sum() - 3) <= 8 * U * 3 and np.abs(G - ot.emd(3 * a, 3 * b, M)).max() <= 3 * (len(a) + len(b)) * U
    with pytest.raises(AssertionError, match="same sum"):
        tp.emd(a, 2 * b, M)
    with pytest.raises(AssertionError, match="Dimension mismatch"):
        tp.emd(a[:-1], b, M)


def test_emd2_of_several_histograms_is_the_vector_of_costs(rng):
    x, y, a, b = problem(rng)
    M = ot.dist(x, y)
    B = np.stack([b, np.roll(b, 1), b[::-1]], axis=1)
    assert np.allclose(tp.emd2(a, B, M), [ot.emd2(a, np.ascontiguousarray(B[:, k]), M) for k in range(3)], rtol=0,
                       atol=(len(a) + len(b)) * U * M.max() * 4)


def test_sinkhorn_plans_match_pot_within_their_marginal_errors(rng):
    for _ in range(6):
        x, y, a, b = problem(rng)
        M = ot.dist(x, y)
        reg = float(rng.uniform(0.05, 1.0)) * M.max()
        G = tp.sinkhorn(a, b, M, reg, numItermax=100000, stopThr=1e-12)
        G_pot = ot.sinkhorn(a, b, M, reg, method="sinkhorn_log", numItermax=100000, stopThr=1e-12)
        e, e_pot = marginal_error(G, a, b), marginal_error(G_pot, a, b)
        assert e < 1e-12

        # F(pi) = <M, pi> + reg KL(pi | a b^T) is reg-strongly convex in l1 on the couplings
        # (Pinsker), and a plan of the scaling form with marginal error e is within e * range(M)
        # of the optimum in F (the duality gap: potentials oscillate at most range(M)); so each
        # plan is within sqrt(2 e range / reg) of the optimal one in l1, up to the rounding of
        # forming it ((n + m) u of its mass). Twice that bounds the distance between the two.
        def within(err):
            return np.sqrt(2 * max(err, (len(a) + len(b)) * U) * np.ptp(M) / reg)
        assert np.abs(G - G_pot).sum() <= within(e) + within(e_pot)
        assert tp.sinkhorn2(a, b, M, reg, numItermax=100000, stopThr=1e-12) == pytest.approx(
            float(np.sum(G * M)), rel=0, abs=(len(a) * len(b)) * U * M.max())


def test_sinkhorn_log_and_several_histograms(rng):
    x, y, a, b = problem(rng)
    M = ot.dist(x, y)
    reg = 0.5 * M.max()
    G, log = tp.sinkhorn(a, b, M, reg, log=True)
    assert set(log) >= {"niter", "err", "u", "v", "log_u", "log_v"}
    K = np.exp(-M / reg)
    # The scalings form the plan: pi = diag(u) K diag(v), up to the rounding of exp of terms of
    # size max M / reg (here 2) and of the products: a few tens of u relative.
    assert np.allclose(log["u"][:, None] * K * log["v"][None, :], G, rtol=64 * U * (1 + M.max() / reg), atol=0)
    B = np.stack([b, b[::-1]], axis=1)
    values = tp.sinkhorn(a, B, M, reg, stopThr=1e-12, numItermax=100000)
    assert values.shape == (2,)
    assert values[0] == tp.sinkhorn2(a, b, M, reg, stopThr=1e-12, numItermax=100000)


def test_sinkhorn_methods_and_errors(rng):
    x, y, a, b = problem(rng)
    M = ot.dist(x, y)
    reg = M.max()
    base = tp.sinkhorn(a, b, M, reg)
    for method in ("sinkhorn_log", "sinkhorn_stabilized", "sinkhorn_epsilon_scaling", "greenkhorn"):
        assert np.array_equal(tp.sinkhorn(a, b, M, reg, method=method, tau=1e3), base)
    with pytest.raises(ValueError, match="Unknown method"):
        tp.sinkhorn(a, b, M, reg, method="nosuch")
    with pytest.raises(ValueError, match="Unknown method"):
        tp.sinkhorn2(a, b, M, reg, method="greenkhorn")  # as POT's sinkhorn2
    with pytest.raises(ValueError, match="same sum"):
        tp.sinkhorn(a, 2 * b, M, reg)
    # Equal masses to rounding at any scale: 1e307 split in 4 and in 3 (sums differing in the last
    # bits) are one mass; 1e-6 apart (relative) they are not.
    big_a, big_b = np.full(4, 1e307), np.full(3, 4e307 / 3)
    assert big_a.sum() != big_b.sum()
    assert np.isfinite(tp.sinkhorn2(big_a, big_b, np.zeros((4, 3)), reg))
    with pytest.raises(ValueError, match="same sum"):
        tp.sinkhorn(big_a, big_b * (1 + 1e-6), np.zeros((4, 3)), reg)


def test_warn_follows_pot(rng):
    x, y, a, b = problem(rng, 30, 30)
    M = ot.dist(x, y)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        tp.sinkhorn(a, b, M, 1e-3 * M.max(), numItermax=2)
        tp.sinkhorn2(a, b, M, 1e-3 * M.max(), numItermax=2)  # POT's sinkhorn2 has warn=False
    assert [w.category for w in caught] == [tokenflow.ConvergenceWarning]
    assert issubclass(tokenflow.ConvergenceWarning, UserWarning)


def test_empirical_sinkhorn_and_divergence_match_pot(rng):
    x, y, a, b = problem(rng)
    M = ot.dist(x, y)
    reg = 0.3 * M.max()
    G = tp.empirical_sinkhorn(x, y, reg, a, b, stopThr=1e-12)
    assert marginal_error(G, a, b) < 1e-12
    G_tf = tokenflow.sinkhorn(x, y, a, b, epsilon=reg, tol=1e-12).plan  # the same solver on the points
    # Both within 1e-12 of the marginals: the Pinsker bound of the plan test.
    assert np.abs(G - G_tf).sum() <= 2 * np.sqrt(2 * 1e-12 * np.ptp(M) / reg)
    f, g = tp.empirical_sinkhorn(x, y, reg, a, b, isLazy=True, stopThr=1e-12)
    # POT's lazy pair forms the plan as exp(f_i + g_j - M_ij / reg); rounding of terms of size
    # max M / reg (a few) in the exponent.
    assert np.allclose(np.exp(f[:, None] + g[None, :] - M / reg), G, rtol=64 * U * (1 + M.max() / reg), atol=0)
    f_pot, g_pot = ot.bregman.empirical_sinkhorn(x, y, reg, a, b, isLazy=True, stopThr=1e-12, numIterMax=100000)
    G_pot = np.exp(f_pot[:, None] + g_pot[None, :] - M / reg)
    e_pot = marginal_error(G_pot, a, b)
    bound = 2 * np.sqrt(2 * max(e_pot, 1e-12) * np.ptp(M) / reg)  # as in the plan test above
    assert np.abs(G - G_pot).sum() <= bound
    # The costs <M, pi> differ by at most max M times the l1 distance of the plans.
    assert abs(tp.empirical_sinkhorn2(x, y, reg, a, b, stopThr=1e-12)
               - ot.bregman.empirical_sinkhorn2(x, y, reg, a, b, stopThr=1e-12, numIterMax=100000)) <= M.max() * bound
    div = tp.empirical_sinkhorn_divergence(x, y, reg, a, b)
    div_tf = tokenflow.sinkhorn(x, y, a, b, epsilon=reg, divergence=True).divergence_pot
    assert div == pytest.approx(max(0.0, div_tf), rel=0, abs=1e-9 * M.max() * 8)


def test_one_dimensional_functions_match_pot(rng):
    for _ in range(10):
        n, m = int(rng.integers(2, 40)), int(rng.integers(2, 40))
        xa, xb = rng.normal(size=n) * 3, rng.normal(size=m)
        a, b = rng.uniform(1e-3, 1, n), rng.uniform(1e-3, 1, m)
        a, b = a / a.sum(), b / b.sum()
        # Both return the monotone coupling; its masses are differences of cumulative sums of
        # n + m weights: (n + m) u each, and the costs that times the largest ground cost.
        tol = 4 * (n + m) * U
        big = (np.abs(xa).max() + np.abs(xb).max()) ** 3 + 1
        for metric in ("sqeuclidean", "euclidean", "cityblock", "minkowski"):
            assert np.abs(tp.emd_1d(xa, xb, a, b, metric=metric, p=1.5)
                          - ot.emd_1d(xa, xb, a, b, metric=metric, p=1.5)).max() <= tol
            assert abs(tp.emd2_1d(xa, xb, a, b, metric=metric, p=1.5)
                       - ot.emd2_1d(xa, xb, a, b, metric=metric, p=1.5)) <= tol * big
        for p in (1, 2, 3):
            assert abs(tp.wasserstein_1d(xa, xb, a, b, p) - ot.wasserstein_1d(xa, xb, a, b, p)) <= tol * big
    U2, V2 = rng.normal(size=(9, 3)), rng.normal(size=(7, 3))
    assert np.allclose(tp.wasserstein_1d(U2, V2, p=2), ot.wasserstein_1d(U2, V2, p=2), rtol=0, atol=64 * 16 * U * 100)
    sparse = tp.emd_1d(xa, xb, a, b, dense=False)
    assert np.abs(sparse.toarray() - tp.emd_1d(xa, xb, a, b)).max() == 0


def test_inputs_are_refused_with_the_argument_named():
    M = np.array([[0.0, 1.0], [1.0, 0.0]])
    with pytest.raises(tokenflow.InputError, match="^M: has dtype complex128"):
        tp.emd([0.5, 0.5], [0.5, 0.5], M.astype(complex))
    with pytest.raises(tokenflow.InputError, match="^x1: is a ragged list"):
        tp.dist([[0.0, 1.0], [2.0]])
    with pytest.raises(AttributeError, match="use POT's ot.gromov_wasserstein"):
        tp.gromov_wasserstein  # noqa: B018


def test_torch_tensors_in_and_out():
    torch = pytest.importorskip("torch")
    M = torch.tensor([[0.0, 1.0], [1.0, 0.0]], dtype=torch.float32)
    a = torch.tensor([0.5, 0.5])
    G = tp.emd(a, a, M)
    assert isinstance(G, torch.Tensor) and G.dtype == torch.float32
    value = tp.sinkhorn2(a, a, M, 1.0)
    assert isinstance(value, torch.Tensor) and value.dtype == torch.float32 and value.ndim == 0
    # Gradients flow through the solvers POT differentiates (emd2, sinkhorn, sinkhorn2); the others
    # take numbers, not graphs.
    with pytest.raises(tokenflow.InputError, match="^x1: is a torch tensor that requires grad"):
        tp.dist(M.clone().requires_grad_())


def test_gradients_as_pots(rng):
    # POT's differentiable functions give gradients with torch tensors that require them: emd2's
    # are the envelope theorem's (M: the plan; a, b: the centred duals), sinkhorn2's those of the
    # converged plan (tokenflow.torch's implicit gradient), checked here against central
    # differences of the value itself.
    torch = pytest.importorskip("torch")
    x, y, a, b = problem(rng, n=6, m=5)
    M = ot.dist(x, y)
    Mt = torch.tensor(M, requires_grad=True)
    at, bt = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
    cost, log = tp.emd2(at, bt, Mt, log=True)
    cost.backward()
    plan = tp.emd(a, b, M)
    assert torch.equal(Mt.grad, torch.tensor(plan))
    u = log["u"].numpy()
    assert np.array_equal(at.grad.numpy(), u - u.mean())
    Mt.grad = None
    reg = 0.5 * M.max()
    value = tp.sinkhorn2(a, b, Mt, reg, stopThr=1e-12)
    value.backward()
    # Central differences at step h: truncation h^2 |d3f| / 6, with |d3f| <= 3 / reg^2 + |M|_max / reg^3
    # (the plan's second and third derivatives along one entry, each 1 / reg per derivative, the
    # entries of a plan of mass 1 at most 1) = 20 / |M|_max^2 at reg = |M|_max / 2; plus the solves'
    # error, 1e-12 |M|_max each, over 2 h. With h = 1e-4 |M|_max: 3.4e-8 + 1e-8 < 1e-7.
    h = 1e-4 * M.max()
    i, j = int(rng.integers(6)), int(rng.integers(5))
    E = np.zeros_like(M)
    E[i, j] = h
    fd = (tp.sinkhorn2(a, b, M + E, reg, stopThr=1e-12) - tp.sinkhorn2(a, b, M - E, reg, stopThr=1e-12)) / (2 * h)
    assert abs(Mt.grad[i, j].item() - fd) <= 1e-7


POT_STYLE_SCRIPT = """
import numpy as np
import ot
from ot.datasets import make_1D_gauss as gauss

n = 100
x = np.arange(n, dtype=np.float64)
a, b = gauss(n, m=20, s=5), gauss(n, m=60, s=10)
M = ot.dist(x.reshape((n, 1)), x.reshape((n, 1)))
M /= M.max()
G0 = ot.emd(a, b, M)
Gs = ot.sinkhorn(a, b, M, 1e-3, verbose=True)
d = ot.emd2(a, np.stack([b, a], 1), M)
xs = np.random.default_rng(0).normal(size=(50, 2))
xt = np.random.default_rng(1).normal(size=(60, 2)) + 4
Ges = ot.bregman.empirical_sinkhorn(xs, xt, 1.0)
print(repr(float(np.sum(G0 * M))), repr(float(np.sum(Gs * M))), repr(float(d[0])), repr(float(Ges.sum())),
      repr(float(ot.emd2_1d(x, x[::-1] + 3, a, b))))
"""


def test_a_pot_script_runs_unchanged_through_tokenflow_pot(tmp_path):
    # The same script with `import ot` and with `import tokenflow.pot as ot`: the same numbers
    # (exact OT to the rounding of n + m weights; Sinkhorn within POT's stopThr 1e-9 of each
    # other's marginals, at a cost differing by at most max M (= 1) times the plans' l1 distance,
    # bounded as in the plan test: 2 sqrt(2 * 1e-9 / 1e-3) = 2.8e-3 is loose, and POT's own
    # sinkhorn at reg 1e-3 needs its 1000 iterations, so only the exact values are compared).
    outputs = []
    for line in ("import ot", "import tokenflow.pot as ot"):
        script = POT_STYLE_SCRIPT.replace("import ot\n", line + "\n", 1)
        r = subprocess.run([sys.executable, "-W", "error::UserWarning", "-c", script], capture_output=True,
                           text=True, env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)), timeout=300)
        outputs.append(r)
    pot_run, tf_run = outputs
    assert tf_run.returncode == 0, tf_run.stderr[-2000:]
    tf_numbers = [float(v) for v in tf_run.stdout.split()[-5:]]
    assert "It." in tf_run.stdout  # verbose prints POT's table
    if pot_run.returncode == 0:  # POT's sinkhorn may warn (an error here) at reg 1e-3
        pot_numbers = [float(v) for v in pot_run.stdout.split()[-5:]]
        # Exact costs: plans agree to the rounding of n + m = 200 weights, times the largest
        # ground cost (1 for the normalized M, (99 + 3)^2 for emd2_1d's squared distances).
        for k, largest in ((0, 1.0), (2, 1.0), (4, 102.0 ** 2)):
            assert tf_numbers[k] == pytest.approx(pot_numbers[k], rel=0, abs=4 * 200 * U * largest)
    assert tf_numbers[3] == pytest.approx(1.0, abs=1e-9)
