"""`tokenflow ot` and `tokenflow wasserstein` against POT (Debian's python3-pot), through the CLI.

The CLI is $TOKENFLOW_CLI (default: build/tokenflow under the repository root). Fresh random inputs
on every run; the seed is printed so that a failure can be replayed with TOKENFLOW_TEST_SEED.
"""
import json
import os
import subprocess
import time

import numpy as np
import ot
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CLI = os.environ.get("TOKENFLOW_CLI", os.path.join(ROOT, "build", "tokenflow"))
if not os.path.isabs(CLI):
    CLI = os.path.join(ROOT, CLI)
U = np.finfo(float).eps / 2  # unit roundoff


@pytest.fixture
def rng():
    seed = int(os.environ.get("TOKENFLOW_TEST_SEED", time.time_ns() % 2**32))
    print(f"seed {seed} (set TOKENFLOW_TEST_SEED to replay)")
    return np.random.default_rng(seed)


def run_ot(tmp_path, name, x, y, a, b, *args, command="ot"):
    """Saves the inputs, runs the CLI, returns (summary, output directory)."""
    work = tmp_path / name
    work.mkdir()
    for key, arr in dict(x=x, y=y, a=a, b=b).items():
        np.save(work / f"{key}.npy", arr)
    out = work / "out"
    argv = [CLI, command, "--x", str(work / "x.npy"), "--y", str(work / "y.npy"), "--a", str(work / "a.npy"),
            "--b", str(work / "b.npy"), "--out", str(out), *map(str, args)]
    r = subprocess.run(argv, capture_output=True, text=True, env=dict(os.environ, CI="1"), timeout=600)
    assert r.returncode == 0, r.stderr
    return json.load(open(out / "summary.json")), out


def weights(rng, n):
    w = rng.uniform(0.5, 1.5, n)
    return w / w.sum()


def contraction_ratio(C, eps):
    """Birkhoff's contraction ratio tanh(Delta / 4) of K = exp(-C / eps) in Hilbert's projective
    metric, Delta = max_{i,k,j,l} (C_il + C_kj - C_ij - C_kl) / eps (the projective diameter)."""
    D = C[None, :, :] - C[:, None, :]  # D[i, k, j] = C_kj - C_ij
    delta = (D.max(axis=2) - D.min(axis=2)).max() / eps
    return np.tanh(delta / 4)


def test_sinkhorn_plan_matches_pot_at_epsilon_half(tmp_path, rng):
    # Conventions. POT's ot.sinkhorn solves min <C, P> + reg sum_ij P_ij log P_ij over Pi(a, b);
    # tokenflow solves min <C, P> + eps KL(P | a b^T), KL = sum_ij P_ij log(P_ij / (a_i b_j)). On
    # Pi(a, b), sum_ij P_ij log(a_i b_j) = sum_i a_i log a_i + sum_j b_j log b_j is a constant, so
    # sum P log P = KL(P | a b^T) + const: with reg = eps the two objectives differ by reg * const
    # and have the same minimizer. Both write it P = diag(u) exp(-C / eps) diag(v) (tokenflow puts
    # a_i b_j into u, v). Costs: ot.dist is the squared Euclidean distance without 1/2, as ours.
    n, m, eps = 60, 45, 0.5
    x, y = rng.uniform(0, 1, (n, 2)), rng.uniform(0, 1, (m, 2))
    a, b = weights(rng, n), weights(rng, m)
    C = ot.dist(x, y)
    s, out = run_ot(tmp_path, "sinkhorn", x, y, a, b, "--epsilon", eps, "--tol", 1e-12, "--max-iter", 100000)
    assert s["converged"] and s["status"] == "converged"
    P = np.load(out / "plan.npy")
    Q = ot.sinkhorn(a, b, C, eps, stopThr=1e-15, numItermax=100000)

    # Derived bound (Franklin & Lorenz 1989). With kappa = tanh(Delta / 4) the Birkhoff ratio of K,
    # one full Sinkhorn sweep is a kappa^2-contraction in Hilbert's metric d_H. Our plan has exact
    # columns and rows r; the next sweep would multiply u by a / r, so d_H(u, u*) <= delta / (1 -
    # kappa^2) with delta = osc(log(a / r)), d_H(v, v*) <= kappa d_H(u, u*), and since both plans
    # have mass 1, |log(P_ij / P*_ij)| <= delta / (1 - kappa) =: t. POT ends on a row update (exact
    # rows), so the same holds with its columns. The sums that give r carry m u relative rounding.
    kappa = contraction_ratio(C, eps)
    d_ours = np.ptp(np.log(a / P.sum(axis=1))) + 2 * m * U
    d_pot = np.ptp(np.log(b / Q.sum(axis=0))) + 2 * n * U
    t_ours, t_pot = d_ours / (1 - kappa), d_pot / (1 - kappa)
    bound = P * np.exp(t_ours) * (np.expm1(t_ours) + np.expm1(t_pot)) + 8 * U * P
    print(f"kappa {kappa:.3f}, t_ours {t_ours:.1e}, t_pot {t_pot:.1e}, max |P - Q| {np.abs(P - Q).max():.1e}")
    assert np.all(np.abs(P - Q) <= bound)
    assert t_ours < 1e-9 and t_pot < 1e-9  # the bound is tight enough to mean something

    # The objectives under the two conventions: ours = POT's - reg * (sum a log a + sum b log b),
    # to first order in the plan difference (|d obj / d P_ij| = |C_ij + eps (log(P_ij / a_i b_j) + 1)|)
    # plus the column error of POT's plan in the constant (sum_j (c_j - b_j) log b_j).
    pot_objective = (C * Q).sum() + eps * (Q * np.log(Q)).sum()
    constant = (a * np.log(a)).sum() + (b * np.log(b)).sum()
    grad = np.abs(C + eps * (np.log(P / np.outer(a, b)) + 1))
    tol = 2 * (grad * bound).sum() + eps * np.abs((Q.sum(axis=0) - b) * np.log(b)).sum() + 1e-14
    assert abs(s["objective"] - (pot_objective - eps * constant)) <= tol
    assert abs(s["cost"] - (C * Q).sum()) <= 2 * (C * bound).sum() + 1e-14


@pytest.mark.parametrize("cost", ["sqeuclidean", "euclidean"])
def test_exact_cost_matches_emd2(tmp_path, rng, cost):
    # Both are network simplex solutions of the same linear program: they agree to rounding.
    n, m = 200, 170
    x, y = rng.normal(size=(n, 3)), rng.normal(size=(m, 3))
    a, b = weights(rng, n), weights(rng, m)
    C = ot.dist(x, y, metric=cost)
    s, out = run_ot(tmp_path, "exact", x, y, a, b, "--method", "exact", "--cost", cost)
    want = ot.emd2(a, b, C, numItermax=10**7)
    assert abs(s["cost"] - want) <= 1e-9 * want
    # The plan is written sparse: at most n + m - 1 entries that are not zero (a vertex of the
    # transport polytope), rebuilt as the docs say.
    indices, masses = np.load(out / "plan_indices.npy"), np.load(out / "plan_masses.npy")
    assert s["plan_format"] == "sparse" and indices.dtype == np.int64 and indices.shape == (masses.size, 2)
    assert masses.size == s["plan_entries"] <= n + m - 1 and (masses > 0).all()
    P = np.zeros((n, m))
    P[tuple(indices.T)] = masses
    assert abs((P * C).sum() - s["cost"]) <= 1e-12 * want
    # Masses in units of 2^-52, one unit of rounding per mass.
    assert np.abs(P.sum(axis=1) - a).max() <= 2 * 2.0**-52 and np.abs(P.sum(axis=0) - b).max() <= 2 * 2.0**-52


def test_wasserstein_matches_pot(tmp_path, rng):
    # 1-D by sorting against POT's quantile-function W_p^p, and exact W_p against emd2.
    x, y = rng.normal(size=(80, 1)), rng.normal(size=(60, 1)) * 1.5
    a, b = weights(rng, 80), weights(rng, 60)
    s, _ = run_ot(tmp_path, "w1d", x, y, a, b, "--p", 3, command="wasserstein")
    assert s["method"] == "sorted"
    want = ot.wasserstein_1d(x[:, 0], y[:, 0], a, b, p=3) ** (1 / 3)
    assert abs(s["value"] - want) <= 1e-12 * want
    x, y = rng.normal(size=(50, 2)), rng.normal(size=(40, 2))
    a, b = weights(rng, 50), weights(rng, 40)
    s, _ = run_ot(tmp_path, "wexact", x, y, a, b, "--p", 1.5, command="wasserstein")
    assert s["method"] == "exact"
    want = ot.emd2(a, b, ot.dist(x, y, metric="euclidean") ** 1.5) ** (1 / 1.5)
    assert abs(s["value"] - want) <= 1e-9 * want


def test_divergence_pot_is_pots_sinkhorn_divergence(tmp_path, rng):
    # POT's ot.bregman.empirical_sinkhorn_divergence combines the transport costs <C, P> of the
    # three plans (what ot.sinkhorn2 returns); tokenflow reports that as divergence_pot, beside its
    # divergence built from the entropic objectives. Each of POT's three costs is within
    # max|C| expm1(t_pot) of the exact plan's (the Birkhoff-Hopf bound of the test above, from its
    # own marginal error), and each of ours within max|C| expm1(t_ours) with t_ours from the
    # reported marginal error e: |log(a_i / r_i)| <= e / (min a - e), so osc <= 2 e / (min a - e).
    n, m, eps = 30, 25, 0.5
    x, y = rng.uniform(0, 1, (n, 2)), rng.uniform(0, 1, (m, 2))
    a, b = weights(rng, n), weights(rng, m)
    s, _ = run_ot(tmp_path, "divergence", x, y, a, b, "--epsilon", eps, "--tol", 1e-12, "--max-iter", 100000,
                  "--divergence")
    terms = s["divergence_terms"]
    assert s["divergence_pot"] == pytest.approx(terms["xy_cost"] - (terms["xx_cost"] + terms["yy_cost"]) / 2,
                                                rel=0, abs=4 * U * (abs(terms["xy_cost"]) + 1))
    with np.errstate(divide="ignore"):
        want = ot.bregman.empirical_sinkhorn_divergence(x, y, eps, a, b, numIterMax=100000, stopThr=1e-15)
    tol = 0.0
    # (points, weights) of each side, the reported marginal error, the term's weight in the sum.
    for (p, wp), (q, wq), e, weight in [((x, a), (y, b), s["marginal_error"], 1.0),
                                        ((x, a), (x, a), terms["xx_marginal_error"], 0.5),
                                        ((y, b), (y, b), terms["yy_marginal_error"], 0.5)]:
        C = ot.dist(p, q)
        kappa = contraction_ratio(C, eps)
        Q = ot.sinkhorn(wp, wq, C, eps, numItermax=100000, stopThr=1e-15)
        t_pot = (np.ptp(np.log(wq / Q.sum(axis=0))) + 2 * len(p) * U) / (1 - kappa)
        t_ours = (2 * e / (wp.min() - e) + 2 * len(q) * U) / (1 - kappa)
        tol += weight * np.abs(C).max() * (np.expm1(t_pot) + np.expm1(t_ours)) + 8 * U * np.abs(C).max()
    print(f"divergence_pot {s['divergence_pot']:.15g}, POT {float(want):.15g}, tol {tol:.1e}")
    assert abs(s["divergence_pot"] - float(want)) <= tol
    assert tol < 1e-8  # the bound is tight enough to mean something
    assert s["divergence"] >= 0
