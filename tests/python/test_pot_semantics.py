"""tokenflow.pot's POT conventions beyond the numbers: log dictionaries, return types, several
target histograms, stopThr = 0, reg = 0, emd's numItermax, forbidden pairs (+inf in M), against
the installed POT on fresh random problems (the seed is printed on failure)."""
import os
import warnings
import zlib

import numpy as np
import pytest

ot = pytest.importorskip("ot")
import tokenflow  # noqa: E402
import tokenflow.pot as tp  # noqa: E402

SEED = int(os.environ.get("TOKENFLOW_TEST_SEED", np.random.SeedSequence().entropy % 2**31))
METHODS = ["sinkhorn", "sinkhorn_log", "greenkhorn", "sinkhorn_stabilized", "sinkhorn_epsilon_scaling"]


@pytest.fixture
def rng(request):
    seed = (SEED + zlib.crc32(request.node.name.encode())) % 2**31
    print(f"seed {seed} (TOKENFLOW_TEST_SEED={SEED})")
    return np.random.default_rng(seed)


def problem(rng, n=None, m=None, k=None):
    n, m = n or int(rng.integers(3, 30)), m or int(rng.integers(3, 30))
    x, y = rng.normal(size=(n, 2)), rng.normal(size=(m, 2)) + rng.normal(size=2)
    a = rng.uniform(0.05, 1, n)
    b = rng.uniform(0.05, 1, (m, k) if k else m)
    return a / a.sum(), b / b.sum(axis=0), ot.dist(x, y)


@pytest.mark.parametrize("method", METHODS)
def test_log_has_pots_keys_for_each_method(rng, method):
    a, b, M = problem(rng)
    reg = 0.5 * M.max()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # POT's methods may warn of their own convergence
        _, log_pot = ot.sinkhorn(a, b, M, reg, method=method, log=True)
    plan, log = tp.sinkhorn(a, b, M, reg, method=method, log=True, stopThr=1e-12)
    assert set(log_pot) <= set(log), set(log_pot) - set(log)
    assert {"log_u", "log_v", "converged", "marginal_error"} <= set(log)
    assert log["converged"] and isinstance(log["err"] if "err" in log else [], list)
    # The quantities define the returned plan (to the rounding of exp of exponents up to
    # max|M| / reg = 2 plus |log a|, |log b| < 10: 64 u relative).
    if "u" in log:
        assert np.allclose(log["u"][:, None] * np.exp(-M / reg) * log["v"][None, :], plan, rtol=64 * 2**-53, atol=0)
    if "alpha" in log:
        assert np.allclose(np.exp((log["alpha"][:, None] + log["beta"][None, :] - M) / reg), plan,
                           rtol=64 * 2**-53 * 2, atol=0)
        assert log["warmstart"][0] is log["alpha"] and log["warmstart"][1] is log["beta"]
    for key in ("niter", "n_iter"):
        if key in log_pot:
            assert isinstance(log[key], int) and log[key] >= 1


def test_err_is_a_history_ending_with_the_plans_error(rng):
    a, b, M = problem(rng, 20, 25)
    _, log = tp.sinkhorn(a, b, M, 0.01 * M.max(), log=True, stopThr=1e-11, numItermax=5000)
    # The solver reports every 10 iterations: a solve of N iterations records N // 10 errors, then
    # the returned plan's own.
    assert len(log["err"]) == log["niter"] // 10 + 1
    assert log["err"][-1] == log["marginal_error"] < 1e-11


@pytest.mark.parametrize("method", ["sinkhorn", "sinkhorn_log", "sinkhorn_stabilized"])
def test_several_targets(rng, method):
    a, b, M = problem(rng, k=3)
    reg = 0.3 * M.max()
    costs, log = tp.sinkhorn(a, b, M, reg, method=method, log=True, stopThr=1e-12)
    costs2 = tp.sinkhorn2(a, b, M, reg, method=method, stopThr=1e-12)
    assert isinstance(costs, np.ndarray) and costs.shape == (3,) and np.array_equal(costs, costs2)
    for k in range(3):
        assert costs[k] == tp.sinkhorn2(a, b[:, k], M, reg, method=method, stopThr=1e-12)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _, log_pot = ot.sinkhorn(a, b, M, reg, method=method, log=True)
    for key, value in log_pot.items():
        assert key in log
        if isinstance(value, np.ndarray):
            assert np.shape(log[key])[-1] == 3 and np.shape(log[key]) == np.shape(value), key
    # emd2 with several targets: POT's list, with log a list of [cost, log].
    exact = tp.emd2(a, b, M)
    assert isinstance(exact, list) and np.allclose(exact, ot.emd2(a, b, M), rtol=1e-12, atol=0)
    with_logs = tp.emd2(a, b, M, log=True, return_matrix=True)
    for k, (cost, lg) in enumerate(with_logs):
        assert cost == exact[k] and np.allclose(lg["G"].sum(0), b[:, k], rtol=0, atol=2**-50)


def test_return_types_follow_the_inputs(rng):
    a, b, M = problem(rng)
    a32, b32, M32 = a.astype(np.float32), b.astype(np.float32), M.astype(np.float32)
    reg = float(M.max())
    for value in (tp.sinkhorn2(a32, b32, M32, reg), tp.emd2(a32, b32, M32)):
        assert type(value) is np.float32
    assert tp.sinkhorn(a32, b32, M32, reg).dtype == np.float32 and tp.emd(a32, b32, M32).dtype == np.float32
    x = np.sort(rng.normal(size=8)).astype(np.float32)
    assert type(tp.wasserstein_1d(x, x + 1)) is np.float32 and type(tp.emd2_1d(x, x + 1)) is np.float32
    assert type(tp.sinkhorn2(a, b, M, reg)) is np.float64
    # Integer points: integer squared distances, as POT's dist gives them.
    xi, yi = rng.integers(-50, 50, (5, 3)), rng.integers(-50, 50, (4, 3))
    D = tp.dist(xi, yi)
    assert D.dtype == ot.dist(xi, yi).dtype == np.int64 and np.array_equal(D, ot.dist(xi, yi))


def test_stop_threshold_zero_runs_numitermax_iterations_and_warns(rng):
    a, b, M = problem(rng)
    reg = 0.1 * M.max()
    with pytest.warns(tokenflow.ConvergenceWarning, match="stopThr = 0 stops no solve.*numItermax = 300"):
        plan, log = tp.sinkhorn(a, b, M, reg, stopThr=0, numItermax=300, log=True)
    # numItermax iterations, or fewer when an iteration changed nothing (its error exactly 0)
    assert log["niter"] <= 300 and not log["converged"]
    # The plan is the best iterate: no worse than one that stopped at a tight threshold, or at
    # the rounding floor that every solve of this problem meets (the floor itself, below 1e-13).
    tight = tp.sinkhorn(a, b, M, reg, stopThr=1e-13, numItermax=300, log=True, warn=False)[1]
    assert log["marginal_error"] <= max(tight["marginal_error"], 1e-13)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tp.sinkhorn(a, b, M, reg, stopThr=0, numItermax=3, warn=False)


def test_zero_regularization_is_exact_ot(rng):
    a, b, M = problem(rng)
    for method in METHODS:
        with pytest.warns(tp.POTDifferenceWarning, match="reg = 0"):
            plan, log = tp.sinkhorn(a, b, M, 0, method=method, log=True)
        assert np.array_equal(plan, tp.emd(a, b, M))
        assert np.isfinite(log["alpha"]).all() and "u" not in log
    with pytest.warns(tp.POTDifferenceWarning):
        assert tp.sinkhorn2(a, b, M, 0.0) == tp.emd2(a, b, M)
    with pytest.raises(tokenflow.InputError, match="reg: is -1"):
        tp.sinkhorn(a, b, M, -1.0)


def test_emd_iteration_limit_is_reported_not_obeyed(rng):
    a, b, M = problem(rng, 30, 30)
    with pytest.warns(tp.POTDifferenceWarning, match="numItermax = 1 is below the") as caught:
        plan, log = tp.emd(a, b, M, numItermax=1, log=True)
    assert log["warning"] == str(caught[0].message) and log["result_code"] == 1
    assert np.array_equal(plan, tp.emd(a, b, M))  # the optimal plan all the same
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _, log = tp.emd(a, b, M, log=True)  # the default numItermax = 100000 is never the limit here
    assert log["warning"] is None


def north_west_support(a, b):
    """The pairs of the north-west corner coupling of (a, b): a plan, so a feasible pattern."""
    support, i, j, left_a, left_b = [], 0, 0, a[0], b[0]
    while i < len(a) and j < len(b):
        support.append((i, j))
        if left_a < left_b:
            left_b -= left_a
            i += 1
            left_a = a[i] if i < len(a) else 0
        else:
            left_a -= left_b
            j += 1
            left_b = b[j] if j < len(b) else 0
    return tuple(np.array(support).T)


def test_forbidden_pairs_carry_no_mass(rng):
    a, b, M = problem(rng, 12, 10)
    allowed = rng.uniform(size=M.shape) < 0.5
    allowed[north_west_support(a, b)] = True
    Minf = np.where(allowed, M, np.inf)
    G, log = tp.emd(a, b, Minf, log=True)
    assert np.all(G[~allowed] == 0) and np.isfinite(tp.emd2(a, b, Minf))
    assert np.abs(G.sum(1) - a).max() <= 2**-50 and np.abs(G.sum(0) - b).max() <= 2**-50
    # Optimal on the allowed pairs by complementary slackness: u_i + v_j <= M_ij wherever allowed,
    # with equality where the plan has mass, to exact_ot's cost unit (max|M| 2^(1 - k),
    # k = 50 - ceil(log2(n + m + 1)) = 45 here) plus the centring's rounding (4 u max|u + v|).
    # (POT's own emd reports such problems infeasible and returns a zero plan.)
    slack = M - log["u"][:, None] - log["v"][None, :]
    tol = 2.0**-44 * M.max() + 4 * 2**-53 * np.abs(slack).max()
    assert slack[allowed].min() >= -tol and np.abs(slack[G > 0]).max() <= tol
    P = tp.sinkhorn(a, b, Minf, 0.2 * M.max(), stopThr=1e-12)
    assert np.all(P[~allowed] == 0) and np.abs(P.sum(0) - b).sum() + np.abs(P.sum(1) - a).sum() < 1e-12
    with pytest.raises(tokenflow.InputError, match="row 0 .*no allowed pair"):
        tp.sinkhorn(a, b, np.vstack([np.full(10, np.inf), Minf[1:]]), 1.0)
    with pytest.raises(tokenflow.InputError, match="M: entry"):
        tp.emd(a, b, np.where(allowed, M, np.nan))


ONE_D = {"wasserstein_1d": lambda x, y, a, b: tp.wasserstein_1d(x, y, a, b),
         "emd_1d": lambda x, y, a, b: tp.emd_1d(x, y, a, b),
         "emd2_1d": lambda x, y, a, b: tp.emd2_1d(x, y, a, b)}


@pytest.mark.parametrize("function", sorted(ONE_D))
def test_one_dimensional_functions_refuse_what_has_no_plan(rng, function):
    # Every class of weights without a plan (all zero, negative entries, non-finite) and of values
    # without a cost (NaN, +-inf) is an InputError naming the argument, never a number: fresh sizes
    # and places each run.
    call = ONE_D[function]
    n, m = int(rng.integers(2, 9)), int(rng.integers(2, 9))
    x, y = rng.normal(size=n), rng.normal(size=m)
    a, b = rng.uniform(0.1, 1, n), rng.uniform(0.1, 1, m)
    a, b = a / a.sum(), b / b.sum()
    i = int(rng.integers(n))
    bad_weights = {"zero": np.zeros(n), "negative": np.where(np.arange(n) == i, -0.5, a + 0.5 / max(n - 1, 1)),
                   "nan": np.where(np.arange(n) == i, np.nan, a), "inf": np.where(np.arange(n) == i, np.inf, a)}
    for kind, w in bad_weights.items():
        for name, args in (("a", (x, y, w, b)), ("b", (y, x, b, w) if m == n else None)):
            if args is None:
                continue
            with pytest.raises(tokenflow.InputError) as caught:
                call(*args)
            assert str(caught.value).split(":")[0] in {"a", "b", "u_weights", "v_weights"}, (kind, caught.value)
    for value in (np.nan, np.inf, -np.inf):
        with pytest.raises(tokenflow.InputError) as caught:
            call(np.where(np.arange(n) == i, value, x), y, a, b)
        assert str(caught.value).split(":")[0] in {"x_a", "u_values"}, caught.value


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_entropic_costs_of_tensors_beyond_their_dtype_raise(rng, dtype):
    # Weights near the top of the dtype's range, tensors that require grad (the differentiable
    # path): the plan is finite, its cost <M, pi> is not. FloatingPointError, no inf.
    torch = pytest.importorskip("torch")
    top = float(np.finfo(dtype).max)
    n, m = 4, 2  # b = mass / 2 sums to mass exactly (POT's equal-mass check is absolute)
    a = torch.tensor([top / 2, *rng.uniform(0.5, 1.0, n - 1)], dtype=getattr(torch, dtype), requires_grad=True)
    mass = float(np.sum(a.detach().numpy().astype(float)))
    b = np.full(m, mass / m)
    M = rng.uniform(2.0, 4.0, (n, m)).astype(dtype)
    with pytest.raises(FloatingPointError, match="overflows"):
        tp.sinkhorn2(a, b, M, 1.0)
    # Weights of ordinary size on the same costs: a finite cost, with its gradient.
    a = torch.tensor(rng.uniform(0.5, 1.0, n), dtype=getattr(torch, dtype), requires_grad=True)
    mass = float(np.sum(a.detach().numpy().astype(float)))
    value = tp.sinkhorn2(a, np.full(m, mass / m), M, 1.0)
    assert np.isfinite(float(value))
    value.backward()
    assert torch.isfinite(a.grad).all()


def test_one_dimensional_costs_beyond_double_raise(rng):
    # Finite points whose distance (or its power) overflows double: FloatingPointError, no inf.
    x = np.array([0.0, 1e200]) * rng.uniform(1, 2)
    with pytest.raises(FloatingPointError, match="overflows the range of double"):
        tp.wasserstein_1d(x, -x, p=2)
    with pytest.raises(FloatingPointError, match="overflows the range of double"):
        tp.emd2_1d(x, -x)
