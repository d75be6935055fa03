"""Unbalanced transport against POT 0.8 (Debian's python3-pot): tokenflow.pot.unbalanced and
tokenflow.sinkhorn(..., marginal_penalty=rho), and `tokenflow ot --marginal-penalty`.

Random problems with unequal masses (a sums to about 0.7, b to about 1.3), reg in [0.05, 0.5] and
reg_m in [0.1, 10] (log-uniform), run tightly on both sides. Fresh seeds on every run (printed;
TOKENFLOW_TEST_SEED replays one).

The 1e-8 relative agreement, derived: POT's scaling loop contracts toward its fixed point by at most
fi^2 = (reg_m / (reg_m + reg))^2 <= 0.991 per iteration (each half-step is a power fi of a
1-Lipschitz map in log scale), and stops when the scalings' relative change is below stopThr =
1e-15, so its log-scalings are within about 1e-15 / (1 - 0.991) ~ 1.1e-13 of the fixed point's and
its plan within 2.2e-13 relative. tokenflow stops at an l1 marginal error of 1e-13 against the
fixed point; with the same contraction (tests/cpp/test_ot_unbalanced.cpp, solution_bound) its
entries' exponents are within (1 + fi) n tol / (t_min (1 - fi^2)) of the fixed point's, t_min the
smallest row target (~ 0.7 / n e^{-|f|/reg_m}): about 2 * 12 * 1e-13 / (0.03 * 0.009) ~ 1e-8 at the
worst corner of the ranges and 1e-10 or less elsewhere; measured far below both (see the asserts).
"""
import json
import os
import time
import warnings

import numpy as np
import ot
import pytest

import tokenflow
import tokenflow.pot as tfot
import tokenflow.pot.unbalanced as tf_unbalanced
from conftest import run_cli


@pytest.fixture
def rng():
    seed = int(os.environ.get("TOKENFLOW_TEST_SEED", time.time_ns() % 2**32))
    print(f"seed {seed} (set TOKENFLOW_TEST_SEED to replay)")
    return np.random.default_rng(seed)


def random_problem(rng, n=12, m=10, d=2):
    x, y = rng.uniform(0, 1, (n, d)), rng.uniform(0, 1, (m, d))
    M = ((x[:, None, :] - y[None, :, :]) ** 2).sum(-1)
    a, b = rng.uniform(0.5, 1.5, n), rng.uniform(0.5, 1.5, m)
    a *= 0.7 / a.sum()
    b *= 1.3 / b.sum()
    reg = float(np.exp(rng.uniform(np.log(0.05), np.log(0.5))))
    reg_m = float(np.exp(rng.uniform(np.log(0.1), np.log(10.0))))
    return x, y, a, b, M, reg, reg_m


def pot_tight(a, b, M, reg, reg_m):
    """POT's plan and value, run to a relative change of its scalings of 1e-15."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        plan = ot.unbalanced.sinkhorn_unbalanced(a, b, M, reg, reg_m, numItermax=400000, stopThr=1e-15)
    return plan, float(np.sum(plan * M))


def assert_plans_agree(P, Q, rel=1e-8):
    scale = np.abs(Q).max()
    assert np.abs(P - Q).max() <= rel * scale, f"max difference {np.abs(P - Q).max():.3g} against {scale:.3g}"


@pytest.mark.parametrize("trial", range(4))
def test_pot_face_matches_pot(rng, trial):
    _, _, a, b, M, reg, reg_m = random_problem(rng)
    expected, value = pot_tight(a, b, M, reg, reg_m)
    plan = tf_unbalanced.sinkhorn_unbalanced(a, b, M, reg, reg_m, stopThr=1e-13, numItermax=100000)
    assert_plans_agree(plan, expected)
    got = tfot.sinkhorn_unbalanced2(a, b, M, reg, reg_m, stopThr=1e-13, numItermax=100000)
    assert got.shape == (1,)
    assert abs(got[0] - value) <= 1e-8 * abs(value)


@pytest.mark.parametrize("trial", range(4))
def test_sinkhorn_face_matches_pot(rng, trial):
    """tokenflow.sinkhorn's problem (entropy KL(pi | a b^T)) on C is POT's on C - reg (log a_i + log
    b_j) (tokenflow/pot/unbalanced.py), through points and through a cost matrix."""
    x, y, a, b, C, reg, reg_m = random_problem(rng)
    expected, _ = pot_tight(a, b, C - reg * np.log(a)[:, None] - reg * np.log(b)[None, :], reg, reg_m)
    for r in (tokenflow.sinkhorn(x, y, a, b, epsilon=reg, marginal_penalty=reg_m, tol=1e-13, max_iter=100000),
              tokenflow.sinkhorn(a=a, b=b, M=C, epsilon=reg, marginal_penalty=reg_m, tol=1e-13, max_iter=100000)):
        assert r.converged and r.marginal_penalty == reg_m
        assert_plans_agree(r.plan, expected)
        value = float(np.sum(expected * C))
        assert abs(r.cost - value) <= 1e-8 * abs(value)
        np.testing.assert_array_equal(r.a, a)  # masses kept
        assert abs(r.plan_mass - r.plan.sum()) <= 1e-14 * r.plan_mass


def test_log_and_histograms_as_pot(rng):
    _, _, a, b, M, reg, reg_m = random_problem(rng)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _, pot_log = ot.unbalanced.sinkhorn_unbalanced(a, b, M, reg, reg_m, numItermax=400000, stopThr=1e-15, log=True)
    plan, log = tfot.unbalanced.sinkhorn_unbalanced(a, b, M, reg, reg_m, stopThr=1e-13, numItermax=100000, log=True)
    assert {"err", "logu", "logv"} <= set(log)
    # POT's u and v are unique (no gauge in the unbalanced problem); their logs agree as the plans do.
    np.testing.assert_allclose(log["logu"], pot_log["logu"], rtol=0, atol=1e-8)
    np.testing.assert_allclose(log["logv"], pot_log["logv"], rtol=0, atol=1e-8)
    # Several target histograms: one value each, as POT.
    B = np.stack([b, b[::-1], np.full(b.size, 0.1)], 1)
    values = tfot.sinkhorn_unbalanced2(a, B, M, reg, reg_m, stopThr=1e-13, numItermax=100000)
    assert values.shape == (3,)
    for k in range(3):
        assert abs(values[k] - pot_tight(a, B[:, k], M, reg, reg_m)[1]) <= 1e-8 * abs(values[k])
    np.testing.assert_allclose(tfot.sinkhorn_unbalanced(a, B, M, reg, reg_m, stopThr=1e-13), values, rtol=1e-12)
    # Empty lists: uniform histograms, as POT.
    np.testing.assert_allclose(tfot.sinkhorn_unbalanced([], [], M, reg, reg_m, stopThr=1e-13),
                               tfot.sinkhorn_unbalanced(ot.unif(M.shape[0]), ot.unif(M.shape[1]), M, reg, reg_m,
                                                        stopThr=1e-13), rtol=1e-12, atol=0)


def test_zero_weights_are_empty_bins_as_in_pot(rng):
    _, _, a, b, M, reg, reg_m = random_problem(rng)
    a[2] = 0.0
    b[[0, 5]] = 0.0
    expected, _ = pot_tight(a, b, M, reg, reg_m)
    plan = tfot.sinkhorn_unbalanced(a, b, M, reg, reg_m, stopThr=1e-13, numItermax=100000)
    assert np.all(plan[2] == 0) and np.all(plan[:, [0, 5]] == 0)
    assert_plans_agree(plan, expected)


def test_large_penalty_is_the_balanced_plan(rng):
    x, y, a, b, _, _, _ = random_problem(rng)
    a, b = a / a.sum(), b / b.sum()
    balanced = tokenflow.sinkhorn(x, y, a, b, epsilon=0.2, tol=1e-13)
    near = tokenflow.sinkhorn(x, y, a, b, epsilon=0.2, tol=1e-13, marginal_penalty=1e6)
    # First order in 1 / rho: the marginals move by a |f| / rho ~ 1e-6 |f| (tests/cpp/test_ot_unbalanced.cpp).
    assert np.abs(near.plan - balanced.plan).max() <= 1e-5 * balanced.plan.max()


def test_bad_arguments_name_themselves():
    M = np.array([[0.0, 1.0], [1.0, 0.0]])
    for bad in (0.0, -1.0, float("nan")):
        with pytest.raises(tokenflow.InputError, match="reg_m"):
            tfot.sinkhorn_unbalanced([0.5, 0.5], [0.5, 0.5], M, 1.0, bad)
        with pytest.raises(tokenflow.InputError, match="marginal_penalty"):
            tokenflow.sinkhorn(a=[0.5, 0.5], b=[0.5, 0.5], M=M, marginal_penalty=bad)
    with pytest.raises(tokenflow.InputError, match="reg_m"):
        tfot.sinkhorn_unbalanced([0.5, 0.5], [0.5, 0.5], M, 1.0, "1")
    with pytest.raises(tokenflow.InputError, match="^M"):
        tfot.sinkhorn_unbalanced([0.5, 0.5, 0.0], [0.5, 0.5], M, 1.0, 1.0)
    with pytest.raises(ValueError, match="Unknown method"):
        tfot.sinkhorn_unbalanced([0.5, 0.5], [0.5, 0.5], M, 1.0, 1.0, method="greenkhorn")
    with pytest.raises(tokenflow.InputError, match="operator"):
        tokenflow.sinkhorn(a=[0.5, 0.5], b=[0.5, 0.5], M=M, marginal_penalty=1.0, operator="kernel")


def test_cli_marginal_penalty_matches_python(tmp_path, rng):
    x, y, a, b, _, reg, reg_m = random_problem(rng)
    for name, arr in dict(x=x, y=y, a=a, b=b).items():
        np.save(tmp_path / f"{name}.npy", arr)
    out = tmp_path / "out"
    run_cli("ot", "--x", tmp_path / "x.npy", "--y", tmp_path / "y.npy", "--a", tmp_path / "a.npy", "--b",
            tmp_path / "b.npy", "--epsilon", repr(reg), "--marginal-penalty", repr(reg_m), "--tol", "1e-12",
            "--out", out)
    summary = json.load(open(out / "summary.json"))
    r = tokenflow.sinkhorn(x, y, a, b, epsilon=reg, marginal_penalty=reg_m, tol=1e-12)
    assert summary["status"] == "converged" and summary["marginal_penalty"] == reg_m
    # The same solver on the same input: the same numbers, to the last digit.
    for key in ("cost", "objective", "marginal_error", "plan_mass", "iterations", "rounding_floor"):
        assert summary[key] == r.summary[key], key
    assert summary["mass_a"] == pytest.approx(0.7, rel=1e-12) and summary["mass_b"] == pytest.approx(1.3, rel=1e-12)
    np.testing.assert_array_equal(np.load(out / "plan.npy"), r.plan)
    # Refused: the exact method and kernel mode with a penalty.
    bad = run_cli("ot", "--x", tmp_path / "x.npy", "--y", tmp_path / "y.npy", "--method", "exact",
                  "--marginal-penalty", "1", "--out", tmp_path / "bad", check=False)
    assert bad.returncode == 2 and "--marginal-penalty" in bad.stderr


def test_torch_tensors_come_back_as_tensors(rng):
    torch = pytest.importorskip("torch")
    _, _, a, b, M, reg, reg_m = random_problem(rng)
    plan = tfot.sinkhorn_unbalanced(torch.tensor(a), torch.tensor(b), torch.tensor(M), reg, reg_m, stopThr=1e-12)
    assert isinstance(plan, torch.Tensor) and plan.dtype == torch.float64


def test_torch_implicit_gradients_pass_gradcheck(rng):
    """tokenflow.torch's unbalanced plan and value: implicit gradients ((6)-(8) of tokenflow/torch.py)
    against torch.autograd.gradcheck's central differences in float64. Step h = 1e-5: truncation
    O(h^2) ~ 1e-10, and the solves' own error (tol 1e-12 on the marginals, a plan within about 1e-11
    of the fixed point) divided by h: 1e-6, which atol allows. (tol 1e-14 lay below the rounding
    floor of some draws, about 1.2e-14 here, and was refused.)"""
    torch = pytest.importorskip("torch")
    import tokenflow.torch as tt
    n, m = 5, 4
    C = torch.tensor(rng.uniform(0, 1, (n, m)), requires_grad=True)
    a = torch.tensor(rng.uniform(0.5, 1.5, n) * 0.2, requires_grad=True)
    b = torch.tensor(rng.uniform(0.5, 1.5, m) * 0.3, requires_grad=True)
    W = torch.tensor(rng.normal(size=(n, m)))
    rho = float(np.exp(rng.uniform(np.log(0.1), np.log(10.0))))

    def plan_loss(C, a, b):
        return (tt.sinkhorn(C, a, b, epsilon=0.3, tol=1e-12, max_iter=100000, marginal_penalty=rho) * W).sum()

    assert torch.autograd.gradcheck(plan_loss, (C, a, b), eps=1e-5, atol=1e-5, rtol=1e-4)
    x = torch.tensor(rng.normal(size=(n, 2)), requires_grad=True)
    y = torch.tensor(rng.normal(size=(m, 2)))

    def value(x, a, b):
        r = tt.sinkhorn_samples(x, y, a, b, epsilon=0.5, tol=1e-12, max_iter=100000, marginal_penalty=rho)
        return r.objective + r.divergence

    assert torch.autograd.gradcheck(value, (x, a, b), eps=1e-5, atol=1e-5, rtol=1e-4)
    # The plan is tokenflow.sinkhorn's, and the masses are kept.
    plan = tt.sinkhorn(C, a, b, epsilon=0.3, tol=1e-12, marginal_penalty=rho).detach().numpy()
    ref = tokenflow.sinkhorn(a=a.detach().numpy(), b=b.detach().numpy(), M=C.detach().numpy(), epsilon=0.3,
                             tol=1e-12, marginal_penalty=rho)
    np.testing.assert_array_equal(plan, ref.plan)
    # The divergence with the mass term, as the core computes it.
    d = tt.sinkhorn_divergence(x, y, a, b, epsilon=0.5, tol=1e-12, marginal_penalty=rho).item()
    core = tokenflow.sinkhorn(x.detach().numpy(), y.detach().numpy(), a.detach().numpy(), b.detach().numpy(),
                              epsilon=0.5, tol=1e-12, marginal_penalty=rho, divergence=True).divergence
    assert abs(d - core) <= 1e-9 * max(1.0, abs(core))


@pytest.mark.parametrize("trial", range(3))
def test_objective_is_the_primal_value_and_the_dual_at_convergence(rng, trial):
    """`objective` is <C, pi> + eps KL(pi | a b^T) + rho KL(pi 1 | a) + rho KL(pi^T 1 | b) on the
    returned plan (recomputed here from the plan, in numpy: the two sums differ by their rounding,
    a few u times the sum of the terms' sizes), and at convergence it equals the dual value
    rho <a, 1 - e^{-f/rho}> + rho <b, 1 - e^{-g/rho}> - eps <a b^T, e^{(f + g - C)/eps} - 1> to within
    the marginal error times the potentials' size (the duality gap of a plan with exact columns)."""
    x, y, a, b, C, eps, rho = random_problem(rng)
    r = tokenflow.sinkhorn(a=a, b=b, M=C, epsilon=eps, marginal_penalty=rho, tol=1e-13, max_iter=100000)
    P, f, g = r.plan, r.f, r.g

    def kl(p, q):
        return float(np.sum(np.where(p > 0, p * np.log(np.where(p > 0, p, 1.0) / q), 0.0) - p + q))

    terms = [np.sum(P * C), eps * kl(P, a[:, None] * b[None, :]), rho * kl(P.sum(1), a), rho * kl(P.sum(0), b)]
    primal = sum(terms)
    size = np.sum(P * (np.abs(C) + np.abs(f)[:, None] + np.abs(g)[None, :])) + eps * (a.sum() * b.sum() + P.sum())
    assert abs(r.objective - primal) <= 64 * C.size * 2.0**-53 * size + 1e-15
    dual = (rho * np.sum(a * (1 - np.exp(-f / rho))) + rho * np.sum(b * (1 - np.exp(-g / rho)))
            - eps * np.sum(a[:, None] * b[None, :] * (np.exp((f[:, None] + g[None, :] - C) / eps) - 1)))
    assert abs(r.objective - dual) <= r.marginal_error * (np.abs(f).max() + np.abs(g).max() + rho + eps) + 1e-13


def test_masses_whose_plan_underflows_keep_a_finite_objective(rng):
    """Masses of 1e-300 beside masses of order 1: row sums of the plan underflow to 0, where the
    generalized KL's term r log(r / a) - r + a tends to a (it was 0 * log 0 = NaN, a failed
    solve). The objective is the primal value recomputed in numpy, as in the test above."""
    _, _, a, b, C, eps, rho = random_problem(rng, n=4, m=5)
    a = a * 1e-300
    r = tokenflow.sinkhorn(a=a, b=b, M=C, epsilon=eps, marginal_penalty=rho, tol=1e-13, max_iter=100000)
    P = r.plan
    assert np.all(np.isfinite(P)) and P.min() >= 0 and np.isfinite(r.objective)

    def kl(p, q):
        return float(np.sum(np.where(p > 0, p * np.log(np.where(p > 0, p, 1.0) / q), 0.0) - p + q))

    primal = (np.sum(P * C) + eps * kl(P, a[:, None] * b[None, :]) + rho * kl(P.sum(1), a)
              + rho * kl(P.sum(0), b))
    size = np.sum(P * (np.abs(C) + np.abs(r.f)[:, None] + np.abs(r.g)[None, :])) + eps * (a.sum() * b.sum() + P.sum())
    assert abs(r.objective - primal) <= 64 * C.size * 2.0**-53 * (size + rho * (a.sum() + b.sum())) + 1e-15


def train_and_couple_by_the_cli(tmp_path, config, r):
    """`tokenflow train` on config into tmp_path/out (its test W_1 that of the Python run r), then
    `tokenflow couple` of its model.bin on x = three points of the plane and y = 2 x + 1, whose
    plan must be r.model.couple's bit for bit. Returns the CLI's summary.json."""
    (tmp_path / "cfg.toml").write_text(tokenflow.to_toml(config))
    run_cli("train", "--config", tmp_path / "cfg.toml", "--out", tmp_path / "out")
    cli = json.load(open(tmp_path / "out" / "summary.json"))
    assert cli["test_w1"] == r.summary["test_w1"]
    x = np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", 2 * x + 1)
    run_cli("couple", "--model", tmp_path / "out" / "model.bin", "--x", tmp_path / "x.npy", "--y", tmp_path / "y.npy",
            "--out", tmp_path / "couple")
    np.testing.assert_array_equal(np.load(tmp_path / "couple" / "plan.npy"), r.model.couple(x, 2 * x + 1))
    return cli


@pytest.mark.parametrize("grad", ["unrolled", "implicit"])
def test_model_with_an_unbalanced_final_layer(tmp_path, grad):
    """[model] marginal_penalty: training (both gradients) and couple, in Python and by the CLI, the
    same numbers; the plan is the unbalanced one (its columns are not b), and model.bin keeps rho."""
    config = {"task": {"kind": "matching", "n": 5, "min_n": 3},
              "model": {"width": 8, "layers": 1, "heads": 2, "k": 4, "marginal_penalty": 0.5, "sinkhorn_grad": grad},
              "train": {"steps": 8, "batch": 4, "test_pairs": 3, "seed": 3}}
    r = tokenflow.train(config)
    assert r.model.config["marginal_penalty"] == 0.5
    assert np.isfinite(r.summary["test_w1"])
    cli = train_and_couple_by_the_cli(tmp_path, config, r)
    x = np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
    plan = r.model.couple(x, 2 * x + 1)
    # Unbalanced: the columns are b e^{-g/rho}, not b = 1/3 (a balanced plan's are, to rounding).
    assert np.abs(plan.sum(0) - 1 / 3).max() > 1e-6
    # The converged plan is tokenflow.sinkhorn's on the learned cost (the same solver, rho and
    # epsilon): its error against the fixed point is below the default tol.
    unrolled = r.model.couple(x, 2 * x + 1, unrolled=True)
    assert unrolled.shape == (3, 3) and np.all(np.isfinite(unrolled))


@pytest.mark.parametrize("grad", ["unrolled", "implicit"])
def test_model_that_learns_its_marginal_penalty(tmp_path, grad):
    """model.learn_marginal_penalty: the relaxation eps / rho is the last parameter, trained from eps
    / marginal_penalty and kept >= 0; summary.json names the learned penalty; Python, the CLI,
    model.bin and couple agree on it."""
    eps, rho = 0.7, 0.5
    config = {"task": {"kind": "matching", "n": 5, "min_n": 3},
              "model": {"width": 8, "layers": 1, "heads": 2, "k": 4, "epsilon": eps, "marginal_penalty": rho,
                        "learn_marginal_penalty": True, "sinkhorn_grad": grad},
              "train": {"steps": 8, "batch": 4, "test_pairs": 3, "seed": 3, "lr": 1e-2}}
    r = tokenflow.train(config)
    s = r.summary
    relaxation = r.model.params[-1]
    assert relaxation >= 0.0
    assert relaxation != eps / rho  # it was trained (8 Adam steps of lr 1e-2 move it)
    assert s["marginal_relaxation_learned"] == relaxation
    assert r.model.config["learn_marginal_penalty"] is True and r.model.config["marginal_penalty"] == rho
    if relaxation > 0.0:
        assert s["marginal_penalty_learned"] == r.model.marginal_penalty == eps / relaxation
    else:
        assert s["marginal_penalty_learned"] is None and r.model.marginal_penalty is None
    cli = train_and_couple_by_the_cli(tmp_path, config, r)
    assert cli["marginal_relaxation_learned"] == relaxation
    loaded = tokenflow.SinkhornTransformer.load(tmp_path / "out" / "model.bin")
    np.testing.assert_array_equal(loaded.params, r.model.params)
    assert loaded.marginal_penalty == r.model.marginal_penalty
    x = np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
    plan = r.model.couple(x, 2 * x + 1)
    # couple solves with the learned penalty: the columns are b e^{-g/rho}, not b = 1/3, unless the
    # relaxation reached 0 (the balanced layer, whose columns are b within the default tol 1e-9).
    if relaxation > 0.0:
        assert np.abs(plan.sum(0) - 1 / 3).max() > 1e-6
    else:
        assert np.abs(plan.sum(0) - 1 / 3).sum() < 1e-9
