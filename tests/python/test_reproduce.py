"""`tokenflow reproduce` and `tokenflow demo`: the data behind each figure says what the figure
claims, the PNGs are real images, and the Python API computes the same numbers."""
import json
import math
import os
import re

import numpy as np
import pytest

import tokenflow
from conftest import load_json, run_cli
from tokenflow import figures

EPS64 = np.finfo(float).eps


def assert_png(path):
    import matplotlib.image

    assert path.stat().st_size > 10000
    pixels = matplotlib.image.imread(path)
    assert pixels.shape[0] > 200 and pixels.shape[1] > 200 and pixels.std() > 0.01


def test_demo_writes_data_figures_and_report(demo_dir):
    s = load_json(demo_dir / "summary.json")
    assert s["command"] == "demo" and s["status"] == "finished" and s["wall_seconds"] > 0
    names = [r["name"] for r in s["reproductions"]]
    listing = [line.split() for line in run_cli("reproduce", "--list").stdout.splitlines()]
    assert names == [row[0] for row in listing if row[1] == "available"]  # every available one, in order
    assert {p["name"] for p in s["pending"]} == {row[0] for row in listing if row[1] != "available"} == set()
    drawn = load_json(demo_dir / "figures.json")
    assert [e["file"] for e in drawn] == [f.file for n in names for f in figures.FIGURES[n]]
    for e in drawn:
        assert_png(demo_dir / e["file"])
        assert len(e["explanation"].split("\n")) == 2 and e["numbers"]
        # A quick demo's figures say that they are at test sizes (on the picture too).
        assert e["quick"] is True and e["explanation"].startswith(figures.QUICK_NOTE)
    assert (demo_dir / "report.html").stat().st_size > sum((demo_dir / e["file"]).stat().st_size for e in drawn)


def test_demo_prints_a_line_per_reproduction_without_a_terminal(demo_dir):
    """Its stderr a pipe (no progress bar), demo says when each reproduction is done, in order."""
    names = [r["name"] for r in load_json(demo_dir / "summary.json")["reproductions"]]
    lines = [line for line in (demo_dir.parent / "demo.stderr").read_text().splitlines() if line.startswith("tokenflow demo: ")]
    assert [line.split()[3] for line in lines] == names
    assert all(re.fullmatch(rf"tokenflow demo: {k + 1}/{len(names)} \S+ done \(\d+\.\d s\)", line)
               for k, line in enumerate(lines)), lines


def test_normalizations_row_versus_doubly_stochastic(demo_dir):
    d = demo_dir / "normalizations"
    softmax, sinkhorn, tokens = (np.load(d / f"{k}.npy") for k in ("softmax", "sinkhorn", "tokens"))
    n = len(tokens)
    # Softmax: each row is divided by its sum, so rows sum to 1 up to n roundings (n eps).
    assert np.max(np.abs(softmax.sum(axis=1) - 1)) <= n * EPS64
    # ... and its columns do not: the figure's point.
    assert np.max(np.abs(softmax.sum(axis=0) - 1)) > 0.1
    # Sinkhorn attention (uniform weights): w = n pi. With K = Q (the default) the cost is
    # symmetric and the plan is the symmetric fixed point (attention.hpp), so rows and columns
    # carry the same stopping error, |pi 1 - a|_1 = |pi^T 1 - a|_1 <= sinkhorn_tol: n * tol each,
    # plus n roundings of the sums.
    s = load_json(d / "summary.json")
    assert np.max(np.abs(sinkhorn.sum(axis=0) - 1)) <= n * (s["sinkhorn_tol"] + EPS64)
    assert np.max(np.abs(sinkhorn.sum(axis=1) - 1)) <= n * (s["sinkhorn_tol"] + EPS64)
    # The summary's column sums (Eigen's order of summation) against numpy's: n roundings apart.
    assert s["softmax"]["max_column_sum_error"] == pytest.approx(np.max(np.abs(softmax.sum(axis=0) - 1)),
                                                                 abs=4 * n * EPS64)
    # The Python API gives the same matrices from the same config, to the last digit.
    for kind, w in (("softmax", softmax), ("sinkhorn", sinkhorn)):
        assert np.array_equal(tokenflow.attention_matrix(d / f"config_{kind}.toml", tokens), w)
    numbers = next(e for e in load_json(demo_dir / "figures.json") if e["name"] == "normalizations")["numbers"]
    assert numbers["Sinkhorn: max |column sum - 1|"] == np.max(np.abs(sinkhorn.sum(axis=0) - 1))


def test_sphere_tokens_cluster(demo_dir):
    d = demo_dir / "sphere"
    traj = np.load(d / "snapshots" / "trajectory.npy")
    assert traj.shape[1:] == (64, 3)
    # On the sphere at every frame: renormalized after each step (a few roundings).
    assert np.max(np.abs(np.linalg.norm(traj, axis=2) - 1)) <= 8 * EPS64
    diag = tokenflow.plot.read_csv(d / "snapshots" / "diagnostics.csv")
    assert diag["clusters"][0] == 64 and diag["clusters"][-1] == 1  # beta = 1: a single cluster by T = 15
    # The snapshot run is a plain `simulate` run: the Python API reproduces it exactly.
    r = tokenflow.simulate(d / "snapshots" / "config.toml")
    assert np.array_equal(r.trajectory, traj)
    # The beta sweep: fractions of the 32 * 31 / 2 pairs, one cluster for small beta, not for large.
    fraction, betas = np.load(d / "clustered_fraction.npy"), np.load(d / "betas.npy")
    pairs = 32 * 31 // 2
    assert np.allclose(fraction * pairs, np.round(fraction * pairs), atol=1e-9)
    assert betas[0] == pytest.approx(0.1) and betas[-1] == pytest.approx(9.0)
    assert np.all(fraction[:, 0, -1] == 1.0)
    assert fraction[:, -1, -1].mean() < 1.0
    # The first initial condition is beta_sweep.toml's (seed 1000; sampling does not depend on beta):
    # at t = 0 the fraction is that of its pairs closer than pair_tol, for every beta.
    x0 = tokenflow.simulate(d / "beta_sweep.toml", x0=None).trajectory[0]
    close = np.linalg.norm(x0[:, None] - x0[None], axis=2)[np.triu_indices(32, 1)] < 0.01
    assert np.all(fraction[0, :, 0] == close.mean())
    s = load_json(d / "summary.json")
    assert s["beta_sweep"]["final_fraction"] == pytest.approx(fraction[:, :, -1].mean(axis=0).tolist(), abs=0)


def test_collapse_follows_the_closed_form(demo_dir):
    d = demo_dir / "collapse"
    run = tokenflow.plot.read_simulation(d / "simulation")
    lam = tokenflow.plot.diagnostics_eigenvalues(run["diagnostics"])
    import tomllib

    config = tomllib.loads((d / "simulation" / "config.toml").read_text())
    # The run is experiments/demo.toml (with fewer tokens under --quick).
    from conftest import ROOT

    expected = tomllib.loads((ROOT / "experiments" / "demo.toml").read_text())
    expected["init"]["n"] = config["init"]["n"]
    assert config == expected
    predicted = figures.collapse_prediction(config, run["initial"], run["diagnostics"]["t"])
    n = run["summary"]["n"]
    # The closed form is exact for a Gaussian measure; n samples of one deviate from it by
    # fluctuations of relative size O(n^-1/2): 3 / sqrt(n) bounds them.
    assert np.max(np.abs(lam - predicted) / predicted) <= 3 / math.sqrt(n)
    # d/dt log det S = tr(S^-1 dS/dt) = tr((A + A^T) S) = -2 scale q^T S q < 0: the area of the
    # cloud shrinks at every step, towards a line.
    assert np.all(np.diff(lam.prod(axis=1)) < 0)
    numbers = next(e for e in load_json(demo_dir / "figures.json") if e["name"] == "collapse")["numbers"]
    assert numbers["eigenvalues at T"] == lam[-1].tolist()


def test_reproduce_writes_one_result_and_its_figure(tmp_path):
    out = tmp_path / "norm"
    run_cli("reproduce", "normalizations", "--out", out)
    assert_png(out / "normalizations.png")
    assert load_json(out / "summary.json")["name"] == "normalizations"
    assert [e["file"] for e in load_json(out / "figures.json")] == ["normalizations.png"]
    assert not any(p.name.startswith(".staging") for p in out.iterdir())


def test_reproduce_errors(tmp_path):
    r = run_cli("reproduce", "spere", "--out", tmp_path / "x", check=False)
    assert r.returncode == 2 and "unknown reproduction 'spere' (did you mean 'sphere'?)" in r.stderr
    assert not (tmp_path / "x").exists()
    # Every reproduction of the issue is available now.
    listing = [line.split() for line in run_cli("reproduce", "--list").stdout.splitlines()]
    assert {row[0] for row in listing} >= {"sphere", "normalizations", "collapse", "cone", "ranks", "blowup",
                                           "meanfield", "universal-approximation"}
    assert all(row[1] == "available" for row in listing)


def test_missing_python_fails_fast_with_a_clear_message(tmp_path):
    r = run_cli("reproduce", "normalizations", "--out", tmp_path / "z", check=False,
                env={"TOKENFLOW_PYTHON": "/nonexistent/python3"})
    assert r.returncode == 1 and "figures need Python 3 with matplotlib" in r.stderr
    assert not (tmp_path / "z").exists()
    # Without matplotlib: an interpreter that cannot import it.
    fake = tmp_path / "python3"
    fake.write_text("#!/bin/sh\nexec /usr/bin/python3 -c 'raise ModuleNotFoundError(\"No module named matplotlib\")'\n")
    fake.chmod(0o755)
    r = run_cli("reproduce", "normalizations", "--out", tmp_path / "w", check=False, env={"TOKENFLOW_PYTHON": str(fake)})
    assert r.returncode == 1 and "No module named matplotlib" in r.stderr and "python3-matplotlib" in r.stderr
    # --no-figures needs no Python.
    run_cli("reproduce", "normalizations", "--no-figures", "--out", tmp_path / "v", env={"TOKENFLOW_PYTHON": "/nonexistent"})
    assert (tmp_path / "v" / "softmax.npy").exists() and not (tmp_path / "v" / "normalizations.png").exists()


def test_ctrl_c_stops_a_reproduction_and_leaves_nothing(tmp_path):
    import signal
    import subprocess
    import time

    from conftest import CLI

    out = tmp_path / "sphere"
    proc = subprocess.Popen([str(CLI), "reproduce", "sphere", "--no-figures", "--out", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=dict(os.environ, CI="1"))
    time.sleep(1.0)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130 and "interrupted" in err
    assert not out.exists()


def test_universal_approximation_sweep_data(demo_dir):
    """The sweep trains models of growing size on entropic-ot (p = 1) and records their test W_1."""
    d = demo_dir / "universal-approximation"
    rows = np.genfromtxt(d / "sweep.csv", delimiter=",", names=True)
    assert list(rows["width"]) == [4, 8] and list(rows["layers"]) == [1, 1]
    assert rows["parameters"][0] < rows["parameters"][1]
    # W_1 is a distance between couplings of measures in [-1, 1]^2 x R^2: positive and finite;
    # the product coupling a b^T is far from the (nearly deterministic) entropic-OT target.
    assert np.all(rows["test_w1"] >= 0) and np.all(np.isfinite(rows["test_w1"]))
    assert np.all(rows["test_w1_independent"] > 0)
    s = load_json(d / "summary.json")
    assert s["w1_smallest_model"] == pytest.approx(rows["test_w1"][0])


# ---- the Gaussian closure: cone, ranks, blowup, meanfield -------------------------------------------

def blowup_time_allowance(run_dir, tstar):
    """How far the ODE's blow-up time may be from a closed-form t*. The run stops at the first
    state with trace S > 1e8, at t_final < t*, and adds one Newton step on u = 1 / lambda_max,
    which is linear in t for these closed forms (S^-1, or 1 / S22, is affine in t): the step is
    exact for the computed S, so what remains is the integration error, at most steps x tol
    relative (dopri5, atol = rtol = tol per accepted step), plus at worst the step's own length
    t* - t_final."""
    s = load_json(run_dir / "summary.json")
    return (tstar - s["t_final"]) + s["steps"] * 1e-10 * tstar


EXPECTED_CONE_OUTCOMES = {
    # (kind, start of the regime's name): the outcome the theory predicts for every start
    ("softmax", "contracting:"): "to 0", ("softmax", "rank-one"): "to a line", ("softmax", "expanding"): "blow-up",
    ("l2", "contracting:"): "to 0", ("l2", "rank-one"): "to a line", ("l2", "expanding"): "grows",
    ("multihead", "two contracting"): "to 0", ("multihead", "one contracting head (on e1), one idle"): "to a line",
    ("multihead", "one contracting head (on e1), one expanding"): "blow-up",
    ("sinkhorn", "contracting:"): "to 0", ("sinkhorn", "contracting on e1"): "to a line",
    ("sinkhorn", "expanding"): "grows",
}


def test_cone_trajectories_do_what_the_theory_predicts(demo_dir):
    d = demo_dir / "cone"
    table = tokenflow.plot.read_csv(d / "cone.csv")
    s = load_json(d / "summary.json")
    assert len(table["kind"]) == s["runs"] == 12 * s["starts"]
    for k, (kind, regime, outcome) in enumerate(zip(table["kind"], table["regime"], table["outcome"])):
        expected = [v for (kd, start), v in EXPECTED_CONE_OUTCOMES.items() if kd == kind and regime.startswith(start)]
        assert len(expected) == 1 and outcome == expected[0], (kind, regime, outcome)
        run = d / kind / str(int(table["run"][k]))
        summary = load_json(run / "summary.json")
        assert not summary["psd"]["left_cone"]  # S stayed positive semidefinite (within the allowance)
        covs = np.load(run / "covs.npy")
        assert np.array_equal(covs, np.transpose(covs, (0, 2, 1)))
        if np.isfinite(table["predicted_blowup_time"][k]):
            tstar = table["predicted_blowup_time"][k]
            assert abs(table["blowup_time"][k] - tstar) <= blowup_time_allowance(run, tstar)
    # l2 and Sinkhorn never blow up (global existence), softmax does.
    assert "blow-up" not in s["outcomes"]["l2"] and "blow-up" not in s["outcomes"]["sinkhorn"]
    # Every run is a `tokenflow gaussian` directory: the Python API redoes it to the last digit.
    for kind in ("softmax", "multihead", "sinkhorn"):
        r = tokenflow.gaussian(d / kind / "2" / "config.toml")
        assert np.array_equal(r.covs, np.load(d / kind / "2" / "covs.npy"))
        assert np.array_equal(r.times, np.load(d / kind / "2" / "times.npy"))


def test_ranks_with_v_identity_are_d_plus_one_over_two(demo_dir):
    d = demo_dir / "ranks"
    table = tokenflow.plot.read_csv(d / "ranks.csv")
    s = load_json(d / "summary.json")
    identity = table["identity"] == 1
    expected = (table["d"] + 1) // 2
    # The claim, checked on the data: every V = I run ends at rank (d + 1) // 2 ...
    assert np.all(table["rank"][identity] == expected[identity])
    assert s["identity_runs_matching"] == s["identity_runs"] == int(np.sum(identity)) == 3 * s["trials_per_d"]
    for dim in (3, 4, 5):
        Q = np.load(d / f"d{dim}" / "Q.npy")
        finals = np.load(d / f"d{dim}" / "final_identity.npy")
        assert all(np.linalg.matrix_rank(q) == dim // 2 for q in Q)  # Q of rank d // 2
        # ... recomputed from the final covariances (eigenvalues above 1e-3 of the largest) ...
        for S in finals:
            lam = np.linalg.eigvalsh(S)
            assert np.sum(lam > 1e-3 * lam[-1]) == (dim + 1) // 2
        # V random PSD: a stationary S solves V X + X V = 0 for X = S Q^T Q S (A = -Q^T Q / sqrt(d)),
        # whose only solution is X = 0 when V is positive definite, so Q S = 0 and rank S <= d - d // 2.
        psd = table["rank"][(table["d"] == dim) & ~identity]
        status = np.array(table["status"])[(table["d"] == dim) & ~identity]
        assert np.all(psd[status == "converged"] <= (dim + 1) // 2)
    # ... and the Python API reproduces the runs: the example config, and a V random PSD run built
    # from the saved matrices.
    r = tokenflow.gaussian(d / "example.toml")
    assert np.array_equal(r.covs[-1], np.load(d / "d3" / "final_identity.npy")[0])
    Q, S0, V = (np.load(d / "d4" / f"{k}.npy")[1] for k in ("Q", "S0", "V"))
    r = tokenflow.gaussian({"init": {"mean": np.zeros(4), "cov": S0},
                            "attention": {"kind": "softmax", "Q": Q, "K": -Q, "V": V},
                            "run": {"T": 1e9, "converge_tol": 1e-12, "rank_tol": 1e-3}})
    assert np.array_equal(r.covs[-1], np.load(d / "d4" / "final_psd.npy")[1])


def test_blowup_softmax_at_t_star_and_l2_finite(demo_dir):
    d = demo_dir / "blowup"
    s = load_json(d / "summary.json")
    S0 = np.array([[1.0, 0.3], [0.3, 0.6]])
    # A = K^T Q / sqrt(k) = I / sqrt(2): t* = 1 / lambda_max(S0^1/2 (A + A^T) S0^1/2) = 1 / (sqrt(2) lambda_max(S0)).
    tstar = 1 / (np.sqrt(2) * np.linalg.eigvalsh(S0)[-1])
    assert s["predicted_blowup_time"] == pytest.approx(tstar, rel=8 * EPS64)
    assert s["softmax_status"] == "blowup"
    assert abs(s["softmax_blowup_time"] - tstar) <= blowup_time_allowance(d / "softmax", tstar)
    # l2: M = (I + 2 g S)^-1 2 g S has eigenvalues in [0, 1), so d/dt tr S = 2 tr(M S) <= 2 tr S and
    # tr S(t) <= e^{2t} tr S(0): finite at every t (the run reaches its horizon).
    assert s["l2_status"] == "horizon"
    times, covs = np.load(d / "l2" / "times.npy"), np.load(d / "l2" / "covs.npy")
    traces = np.trace(covs, axis1=1, axis2=2)
    assert np.all(np.isfinite(covs)) and np.all(np.diff(traces) > 0)
    assert np.all(traces <= np.exp(2 * times) * np.trace(S0) * (1 + 1e-8))
    # The particles are plain `simulate` runs: the Python API redoes them to the last digit.
    for kind in ("softmax", "l2"):
        run = d / "particles" / kind
        r = tokenflow.simulate(run / "config.toml")
        assert np.array_equal(r.trajectory, np.load(run / "trajectory.npy"))
        assert r.summary["final"]["cov_eigenvalues"] == s["particles"][kind]["final_cov_eigenvalues"]


def test_meanfield_rate(demo_dir):
    d = demo_dir / "meanfield"
    table = tokenflow.plot.read_csv(d / "meanfield.csv")
    s = load_json(d / "summary.json")
    ns = np.unique(table["n"])
    assert list(ns) == s["ns"] and np.all(np.array(table["status"]) == "finished")
    rms = np.array([np.sqrt(np.mean(table["bures_wasserstein"][table["n"] == n] ** 2)) for n in ns])
    # The summary's slope is the least-squares slope of log RMS against log n (the figure's).
    assert s["slope"] == pytest.approx(np.polyfit(np.log(ns), np.log(rms), 1)[0], rel=1e-9)
    assert rms[-1] < rms[0]
    # The same study through the Python API: the same numbers (the seconds column aside).
    r = tokenflow.meanfield(d / "config.toml")
    for column in ("n", "sample", "seed", "mean_error", "cov_error", "bures_wasserstein",
                   "bures_wasserstein_from_sample"):
        assert np.array_equal(np.asarray(r.table[column], dtype=float), table[column]), column
    assert r.summary["slopes"] == s["slopes"]


# ---- the gradient-flow structure: energy-dissipation, nonconvexity, sinkhorn-bures ------------------

def test_energy_dissipation_identity_inside_and_not_outside(demo_dir):
    d = demo_dir / "energy-dissipation"
    s = load_json(d / "summary.json")
    rk4, euler = s["integrators"]["rk4"], s["integrators"]["euler"]
    # The gap of E(t) - E(0) = int |dE|^2 is the integrator's error (order p) plus Simpson's (order
    # 4): it falls with dt at order 4 for rk4 and 1 for euler. With dt halved, gap ratios of 2^p
    # (1 + O(dt)): half an order either way covers the O(dt) correction at these step sizes.
    assert all(abs(o - 4) <= 0.5 for o in rk4["observed_order"][1:]), rk4
    assert all(abs(o - 1) <= 0.5 for o in euler["observed_order"]), euler
    # ... so the finest gap is below the coarsest times (dt ratio)^3.5.
    dt = rk4["dt"]
    assert s["max_relative_gap"] == rk4["gap"][-1] <= rk4["gap"][0] * (dt[-1] / dt[0]) ** 3.5
    # dopri5 at tol 1e-10 (each step integrated by Gauss-Legendre): below the finest rk4 gap.
    assert s["dopri5"]["gap"] <= s["max_relative_gap"]
    # Two time-dependent layers, each a gradient flow of its own energy (dt = 2^-6, below the
    # finest quick dt 0.025 and of order 4): at most the rk4 gap at dt = 0.025, the parameters of
    # layer 2 being of the same size as layer 1's (|A_2|_F = 0.85 |A_1|_F, c_2 = 2).
    assert s["layers_gap"] <= rk4["gap"][rk4["dt"].index(0.025)]
    # Outside (V = R A, R the rotation by 90 degrees, d = 2): dE/dt = <grad E, R grad E> / .. = 0
    # exactly, so E(T) - E(0) is integration error only (of the size of the gaps inside), and the
    # gap is 1 up to it.
    assert abs(s["gap_outside"] - 1) <= 100 * s["max_relative_gap"]
    assert abs(s["outside_energy_change"]) <= 100 * s["max_relative_gap"] * s["outside_dissipation"]
    # The identity is recomputed from the saved frames: dE/dt (chain rule) = |dE|^2 at every frame
    # inside (the same sum in two orders: n = 32 terms, logits |s| < 10, so below 1e-12 relative).
    run = d / "inside" / "dopri5"
    rate, slope2 = np.load(run / "rate.npy"), np.load(run / "slope_squared.npy")
    assert np.max(np.abs(rate - slope2)) <= 1e-12 * np.max(slope2)
    t, E = np.load(run / "times.npy"), np.load(run / "energy.npy")
    assert np.all(np.diff(E) > 0)  # a gradient ascent of E
    # The runs are `simulate` configs: the Python API gives the same energies.
    r = tokenflow.simulate(run / "config.toml")
    assert np.array_equal(r.times, t)
    import tomllib

    config = tomllib.loads((run / "config.toml").read_text())
    assert tokenflow.interaction_energy(config, r.trajectory[-1]) == pytest.approx(E[-1], rel=1e-13)


def test_nonconvexity_witness_is_certified(demo_dir):
    d = demo_dir / "nonconvexity"
    s = load_json(d / "summary.json")
    # Certified: a computed second difference below minus its rounding bound (derived in
    # src/cli/reproduce_nonconvexity.cpp); away from the origin, none below it.
    assert s["min_second_difference"] < -s["second_difference_bound"] and s["certified"]
    assert s["convex_min_second_difference"] > -s["convex_second_difference_bound"]
    # Recomputed here: the endpoints' energies by a numpy double loop (A = -I), the second
    # differences from the saved path. Relative rounding of either side <= n^2 u + (d + 2) u R^2.
    x = np.load(d / "through_origin_x.npy")
    n = len(x)
    E0 = 0.5 * np.sum(np.exp(-x @ x.T)) / n**2
    E = np.load(d / "through_origin_particles_energy.npy")
    R2 = np.max(np.sum(x * x, axis=1))
    assert abs(E[0] - E0) <= 2 * (n * n + 4 * R2) * EPS64 * E0
    second = E[:-2] - 2 * E[1:-1] + E[2:]
    assert np.min(second) == s["min_second_difference"]
    # The Gaussian closed form E(N(m, S)) = 1/2 det(I - S^2)^-1/2 exp(-m^T (I + S)^-1 m) at the start.
    m0, S0 = np.array([-1.0, -0.5]), np.array([[0.1, 0.02], [0.02, 0.05]])
    closed = 0.5 / np.sqrt(np.linalg.det(np.eye(2) - S0 @ S0)) * np.exp(-m0 @ np.linalg.solve(np.eye(2) + S0, m0))
    assert np.load(d / "through_origin_gaussian_energy.npy")[0] == pytest.approx(closed, rel=1e-13)


def test_sinkhorn_closure_is_the_bures_wasserstein_gradient(demo_dir):
    d = demo_dir / "sinkhorn-bures"
    s = load_json(d / "summary.json")
    table = tokenflow.plot.read_csv(d / "cases.csv")
    assert len(table["gap"]) == s["cases"] and set(table["epsilon"]) == set(s["epsilons"])
    # Every case within its finite-difference error bound (Richardson estimate plus rounding).
    assert np.all(table["gap"] <= table["allowance"]) and s["max_gap_over_allowance"] <= 1
    assert s["max_relative_gap"] == np.max(table["gap"])
    # The descent curve: F decreases at every frame along the closure.
    F = np.load(d / "descent" / "functional.npy")
    assert np.all(np.diff(F) < 0) and s["descent_largest_increase"] < 0


def test_clustering_on_the_circle(demo_dir):
    d = demo_dir / "clustering"
    s = load_json(d / "summary.json")
    traj = np.load(d / "run" / "trajectory.npy")
    assert traj.shape[1:] == (s["n"], 2)
    # On the circle at every frame: renormalized after each step (a few roundings).
    assert np.max(np.abs(np.linalg.norm(traj, axis=2) - 1)) <= 8 * EPS64
    clusters = np.load(d / "clusters.npy")
    assert clusters.tolist() == s["clusters"] and s["final_clusters"] == clusters[-1]
    # The count, independently: groups of sorted angles separated by gaps wider than gap_radians.
    for f in (0, len(clusters) - 1):
        angle = np.sort(np.arctan2(traj[f, :, 1], traj[f, :, 0]))
        gaps = np.diff(np.concatenate([angle, [angle[0] + 2 * np.pi]]))
        assert clusters[f] == max(1, int(np.sum(gaps > s["gap_radians"])))
    # n uniform tokens leave an empty arc wider than g with probability below n exp(-n g / 2 pi)
    # (2.5e-4 for the quick n = 2000, g = 0.05; the sample is fixed, seed 7): one group at t = 0.
    assert clusters[0] == 1
    # Velocities are the simulate run's: its summary names how they were summed.
    assert s["summation"]["fast_evaluations"] + s["summation"]["dense_evaluations"] > 0


# ---- the equiangular reduction and the long-context transition (Rigollet 2025) -------------------

def equiangular_rhs(rho, n, beta):
    """Eq. (E1) of include/tokenflow/equiangular.hpp, transcribed independently (numpy)."""
    return 2 * np.exp(beta * (rho - 1)) * (1 - rho) * (1 + (n - 1) * rho) / (1 + (n - 1) * np.exp(beta * (rho - 1)))


def test_equiangular_simulate_follows_the_reduction(demo_dir):
    d = demo_dir / "equiangular"
    s = load_json(d / "summary.json")
    assert s["rate_theory"] == 2.0
    # The target, and the error budget of docs/equiangular.md (dopri5 at 1e-12 on the
    # points, 1e-13 on the reduction, a few hundred steps: below 1e-9).
    assert 0 < s["max_abs_gap"] <= 1e-9
    for case in s["cases"]:
        run = d / "runs" / case["dir"]
        traj, times = np.load(run / "trajectory.npy"), np.load(run / "times.npy")
        table = np.load(run / "reduction.npy")  # t, rho, 1 - rho (ODE), particles' gap, deviation
        n, beta = case["n"], case["beta"]
        # The summary's gap is the largest pairwise deviation, recomputed here from the trajectory.
        gram = np.einsum("fid,fjd->fij", traj, traj)
        off = ~np.eye(n, dtype=bool)
        deviation = np.max(np.abs(gram[:, off] - table[:, 1:2]), axis=1)
        assert np.max(deviation) == pytest.approx(case["max_abs_gap"], rel=1e-6, abs=8 * n * EPS64)
        # The reduction's rho(t) against an independent RK4 of Eq. (E1) in numpy (h = 1e-3: global
        # error ~ h^4 max|F^(5)| T, below 1e-10 for these n and beta), at the frame times.
        rho, t, ours = 0.2, 0.0, []
        h = 1e-3
        for target in times:
            while t < target - 1e-15:
                step = min(h, target - t)
                k1 = equiangular_rhs(rho, n, beta)
                k2 = equiangular_rhs(rho + step / 2 * k1, n, beta)
                k3 = equiangular_rhs(rho + step / 2 * k2, n, beta)
                k4 = equiangular_rhs(rho + step * k3, n, beta)
                rho += step / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
                t += step
            ours.append(rho)
        assert np.max(np.abs(np.array(ours) - table[:, 1])) <= 1e-10
        # Near the cluster 1 - rho decays at rate 2: the fitted rate within its bias bound
        # (|G(u) - 2| <= 2 u (1 + beta / n) over the window) and the fit's own rounding.
        assert abs(case["rate_fitted"] - 2.0) <= case["rate_bias_bound"] + 1e-6
        assert case["rate_fit_frames"] >= 10


def test_long_context_transition(demo_dir):
    d = demo_dir / "long-context"
    s = load_json(d / "summary.json")
    ns, gammas = np.load(d / "ns.npy"), np.load(d / "gammas.npy")
    times, half = np.load(d / "times.npy"), np.load(d / "times_rho0_half.npy")
    n = ns[-1]
    assert s["critical_gamma_theory"] == 1.0 and s["rho0_half"]["critical_gamma_theory"] == 2.0
    for k, g in enumerate(gammas):
        key = f"{g:g}"
        assert s["growth_exponents_theory"][key] == max(0.0, g - 1.0)
        if g >= 1.5:
            # From orthogonal tokens: T ~ (n^{gamma - 1} / 2)(log(n / (gamma log n)) - Euler's gamma)
            # (docs/equiangular.md); the next order is relative 1/(gamma log n) (the Laplace width
            # against the factor 1/(1 - rho)), allowed twice.
            closed = n ** (g - 1) / 2 * (np.log(n / (g * np.log(n))) - 0.5772156649)
            assert times[k, -1] / closed == pytest.approx(1.0, abs=2 / (g * np.log(n)))
        if g < 1.0:
            # Below gamma_c from rho0 = 0: T = (1/2) log n + O(1), so T - (1/2) log n stops moving:
            # over the last decade it changes by far less than (1/2) log 10 = 1.15.
            last = np.searchsorted(ns, n / 10 * (1 - 1e-9))
            drift = (times[k, -1] - 0.5 * np.log(n)) - (times[k, last] - 0.5 * np.log(ns[last]))
            assert abs(drift) <= 0.1
        if g < 2.0:
            # From rho0 = 1/2 below gamma_c = 2: the logistic time (1/2) log(rho* (1 - rho0) /
            # ((1 - rho*) rho0)), to relative 2 n^{-(1 - gamma / 2)} + 2 / (n rho0) (F -> 2 rho (1 - rho)).
            logistic = 0.5 * np.log(0.99 * 0.5 / (0.01 * 0.5))
            assert half[k, -1] / logistic == pytest.approx(1.0, abs=4 * n ** (-(1 - g / 2)) + 4 / (n * 0.5) + 1e-9)
    # The fitted critical gamma: the exponents are within their log-factor bias of the theory's
    # line, so its zero lands near 1 and 2 (measured 0.977 and 2.009 with --quick, n <= 1e9;
    # 1.002 and 1.976 at n <= 1e30).
    assert s["critical_gamma"] == pytest.approx(1.0, abs=0.05)
    assert s["rho0_half"]["critical_gamma"] == pytest.approx(2.0, abs=0.1)
    # Particles: they reach rho = 0.99 at the reduction's time (dopri5 at tol 1e-10 over a few
    # hundred steps) and stay equiangular to rounding.
    p = s["particles"]
    assert p["max_relative_time_gap"] <= 1e-6
    assert p["max_equiangular_deviation"] <= 1e-9
    for key, value in p["exponents"].items():
        assert value == pytest.approx(p["reduction_exponents_same_sizes"][key], abs=1e-6)
    rows = np.load(d / "particles.npy")
    assert rows.shape == (len(p["sizes"]) * len(p["gammas"]), 6)
    assert np.all(np.abs(rows[:, 3] - 0.99) <= 1e-6)


# ---- dynamic metastability (Geshkovski, Koubbi, Polyanskiy, Rigollet 2024) -------------------------

def two_cluster_escape_time(p, q, beta, delta0, delta1):
    """Eq. (M4) of include/tokenflow/metastability.hpp, int du / G(u), by scipy's adaptive quadrature
    in v = log u, written independently of the C++ Simpson rule."""
    from scipy.integrate import quad

    def integrand(v):
        u = math.exp(v)
        k = math.exp(-beta * (1 - math.cos(u)))
        return u / math.sin(u) * math.exp(beta * (1 - math.cos(u))) / (q / (p + q * k) + p / (q + p * k))

    # The integrand peaks at v = log delta0 with width 1 / (beta sin(delta0) delta0): split there.
    width = 1.0 / (beta * math.sin(delta0) * delta0)
    lo, hi = math.log(delta1), math.log(delta0)
    cut = max(lo, hi - 60 * width)
    tail = quad(integrand, lo, cut, limit=400, epsrel=1e-12)[0] if cut > lo else 0.0
    return tail + quad(integrand, cut, hi, limit=400, epsrel=1e-12)[0]


def test_metastability_staircase_and_escape_times(demo_dir):
    d = demo_dir / "metastability"
    s = load_json(d / "summary.json")
    n = 5
    for run in s["staircase"]:
        beta = run["beta"]
        table = np.load(d / f"staircase_beta{beta:g}.npy")  # t, s, E, clusters per step
        # The authors' start: multiples {0, 1/4, 1, 2, 7/2} of log(beta)/sqrt(beta).
        unit = math.log(beta) / math.sqrt(beta)
        assert run["angles"] == pytest.approx([0, unit / 4, unit, 2 * unit, 3.5 * unit], rel=4 * EPS64)
        # Times never decrease (past t ~ 1e17 the short steps of a merge do not change t in float64),
        # the energy never decreases (gradient ascent; rounding of 25 terms with exponents of size
        # beta: relative (25 + 4 beta) eps per step, allowed twice), and it ends at 1.
        assert table[0, 0] == 0 and np.all(np.diff(table[:, 0]) >= 0) and np.all(np.diff(table[:, 1]) >= 0)
        assert np.all(np.diff(table[:, 2]) >= -2 * (25 + 4 * beta) * EPS64 * table[1:, 2])
        assert table[-1, 2] == pytest.approx(1.0, abs=4 * EPS64) and table[-1, 3] == 1
        # Plateaus: clusters 5, 4, 3, 2 one after the other (one merge at a time from this start),
        # levels sum m_c^2 / n^2 (multiples of 1/25), escape times growing along the staircase.
        plateaus = s["plateaus"][f"{beta:g}"]
        assert [p["clusters"] for p in plateaus] == [5, 4, 3, 2]
        for p in plateaus:
            assert p["energy_level"] * n * n == pytest.approx(round(p["energy_level"] * n * n), abs=1e-12)
            assert p["t_end"] > p["t_start"] and p["s_end"] > p["s_start"]
        assert [p["escape_time"] for p in plateaus] == sorted(p["escape_time"] for p in plateaus)
    # Escape times of two clusters (weights 2/5, 3/5) delta0 apart: the flow against an independent
    # quadrature of Eq. (M4). The flow's RK4 error at its default steps (h |dF/dtheta| <= 0.1) is near
    # 0.1^4 / 120 ~ 1e-6 relative (tests/cpp/test_metastability.cpp bounds it per run); allowed 1e-5.
    fit = s["log_escape_time_fit"]
    esc = np.load(d / "escape.npy")  # beta, measured, closed form, asymptotic
    for beta, measured, closed, asymptotic in esc:
        ours = two_cluster_escape_time(0.4, 0.6, beta, fit["delta0"], 1e-12)
        assert closed == pytest.approx(ours, rel=1e-8)  # Simpson on 2^20 panels against quad
        assert measured == pytest.approx(ours, rel=1e-5)
        # Laplace: relative O(1 / (beta sin^2 delta0)) from the closed form.
        assert asymptotic == pytest.approx(ours, rel=4 / (beta * math.sin(fit["delta0"]) ** 2))
    # The fitted slope of log T against beta: the closed form's to the flow's error; below
    # 1 - cos delta0 by the slope of log beta across the range (Laplace's prefactor 1 / beta), within
    # the O(1 / beta) of the next order.
    betas = esc[:, 0]
    assert s["log_escape_time_slope"] == fit["slope"]
    assert fit["slope"] == pytest.approx(np.polyfit(betas, np.log(esc[:, 1]), 1)[0], rel=1e-10)
    assert abs(fit["slope"] - fit["slope_closed_form"]) <= 2 * 1e-5 / (betas[-1] - betas[0])
    log_range = math.log(betas[-1] / betas[0]) / (betas[-1] - betas[0])
    assert fit["slope_asymptotic"] == 1 - math.cos(fit["delta0"])
    assert 0 < fit["slope_asymptotic"] - fit["slope"] <= log_range + 4 / (betas[0] * math.sin(fit["delta0"]) ** 2) / (
        betas[-1] - betas[0])
    # The sphere through `simulate`: energy (2 e^{-beta} interaction_energy) never decreases beyond
    # the float64 rounding of the engine's sums, and the cluster count never increases.
    sphere = np.load(d / "sphere" / "sphere.npy")  # t, E, clusters per frame
    beta = s["sphere"]["beta"]
    assert np.all(np.diff(sphere[:, 1]) >= -2 * (25 + 4 * beta) * EPS64 * sphere[1:, 1])
    assert np.all(np.diff(sphere[:, 2]) <= 0) and sphere[-1, 2] < n


def normalized_step_merges(angles, beta, h, merge=1e-3, max_steps=10 ** 6):
    """Eq. (M5) of include/tokenflow/metastability.hpp along Eq. (M1) in numpy, written independently:
    t_i += h F_i / |F| (|F|^2 = sum_c count_c F_c^2), pairs closer than `merge` joined at their
    weighted mean. Returns the step after which each merge happened."""
    t, a, c, merges = np.array(angles, float), np.full(len(angles), 1 / len(angles)), np.ones(len(angles)), []
    for step in range(1, max_steps + 1):
        d = t[None, :] - t[:, None]  # d_ij = t_j - t_i
        k = a[None, :] * np.exp(beta * (np.cos(d) - 1))
        f = (k * np.sin(d)).sum(1) / k.sum(1)
        scale = np.abs(f).max()
        t = t + h * f / (scale * np.sqrt((c * (f / scale) ** 2).sum()))
        i = 0
        while i < len(t):
            j = i + 1
            while j < len(t):
                if abs(math.remainder(t[j] - t[i], 2 * math.pi)) < merge:
                    x = a[i] * np.cos(t[i]) + a[j] * np.cos(t[j])
                    y = a[i] * np.sin(t[i]) + a[j] * np.sin(t[j])
                    t[i], a[i], c[i] = math.atan2(y, x), a[i] + a[j], c[i] + c[j]
                    t, a, c = np.delete(t, j), np.delete(a, j), np.delete(c, j)
                    merges.append(step)
                else:
                    j += 1
            i += 1
        if len(t) == 1:
            return merges
    return merges


def test_metastability_long_runs_through_the_engine(demo_dir):
    d = demo_dir / "metastability"
    s = load_json(d / "summary.json")
    exact = s["plateaus"]
    for run in s["long_runs"]:
        beta, h = run["beta"], run["h"]
        assert h == pytest.approx(1e-5 * math.log(beta), rel=EPS64)
        table = np.load(d / f"long_beta{beta:g}.npy")  # s, E, clusters, t, engine
        # One cluster within the authors' 10^6 steps; the engine's steps first, then Eq. (M1).
        assert run["status"] == "one_cluster" and run["steps"] < 10 ** 6 and table[-1, 2] == 1
        assert table[-1, 1] == pytest.approx(1.0, abs=4 * EPS64)
        assert np.all(np.diff(table[:, 0]) > 0) and np.all(np.diff(table[:, 2]) <= 0)
        assert np.all(np.diff(table[:, 4]) <= 0) and table[0, 4] == 1
        # E between merges: a step loses at most 2 beta h^2 / n + 2 beta h gap / sqrt(n) (its second
        # order and the engine's direction gap; tests/cpp/test_metastability.cpp derives it) plus E's
        # rounding; records 1000 steps apart add up 1000 such losses.
        loss = 1000 * (2 * beta * h * h / 5 + 2 * beta * h * run["max_direction_gap"] / math.sqrt(5))
        same = np.diff(table[:, 2]) == 0
        drop = table[1:, 1] - table[:-1, 1] * (1 - 2 * (25 + 4 * beta + 8) * EPS64)
        assert np.all(drop[same] >= -loss)
        # The plateaus: the exact flow's clusters and levels, in its order.
        plateaus = run["plateaus"]
        assert run["levels_match_exact_flow"] is True
        assert [p["clusters"] for p in plateaus] == [p["clusters"] for p in exact[f"{beta:g}"]] == [5, 4, 3, 2]
        for p, q in zip(plateaus, exact[f"{beta:g}"]):
            assert p["energy_level"] == pytest.approx(q["energy_level"], abs=4 * EPS64) == p["exact_flow_level"]
        # The merges against the independent numpy protocol along Eq. (M1): the engine's steps differ by
        # its direction gap (a state error of h gap per step, closing at >= h / 2 per step: 2 N gap
        # steps) and by turning atan(h u) instead of h u (h^3 / 3 per step: N h^2 steps); allowed 2 more.
        angles = next(r["angles"] for r in s["staircase"] if r["beta"] == beta)
        merges = normalized_step_merges(angles, beta, h)
        ours = [round(p["s_end"] * math.log(beta) / h) for p in plateaus]
        slack = 2 + 2 * run["engine_steps"] * run["max_direction_gap"] + run["steps"] * h * h
        assert len(merges) == len(ours) and all(abs(m - o) <= slack for m, o in zip(merges, ours)), (merges, ours)
        assert 0 < run["engine_steps"] < run["steps"] and run["engine_floor_clusters"] == 3


# ---- normalization schemes (Karagodin, Ge, Polyanskiy, Rigollet 2025) -------------------------------

def scheme_rhs(rho, r, n, beta, scheme):
    """Eq. (N1)-(N3) of include/tokenflow/normalization_schemes.hpp, transcribed independently:
    d(rho, r)/dt."""
    q = np.exp(-beta * (1 - rho))
    z = 1 + (n - 1) * q
    c = (1 + (n - 1) * rho * q) / z
    a = np.sqrt(1 + 2 * (n - 1) * rho * q + (n - 1) * q * q * (1 + (n - 2) * rho)) / z
    s = {"sphere": 1.0, "pre": r, "peri": r * a, "ngpt": a}[scheme]
    dr = {"pre": c, "peri": c / a}.get(scheme, 0.0)
    return equiangular_rhs(rho, n, beta) / s, dr


def test_normalization_schemes_speeds_and_laws(demo_dir):
    d = demo_dir / "normalization-schemes"
    s = load_json(d / "summary.json")
    # dopri5 at 1e-11 on the points, 1e-13 on the reduction, at most a few thousand steps.
    assert 0 < s["max_abs_gap"] <= 1e-7
    sc = s["schemes"]
    n, beta = s["n"], s["beta"]
    for name, entry in sc.items():
        table = np.load(d / "runs" / entry["dir"] / "reduction.npy")  # t, rho, 1-rho, r, gap, radius, dev
        # The reduction against an independent RK4 of (N1)-(N3) in numpy up to t = 2 (h = 1e-3);
        # Mix-LN is Post-LN before mix_until and Pre-LN after (no step crosses it).
        switch = entry.get("mix_until", np.inf)
        rho, r, t, h = s["rho0"], 1.0, 0.0, 1e-3
        for f in range(len(table)):
            if table[f, 0] > 2.0:
                break
            while t < table[f, 0] - 1e-15:
                step = min(h, table[f, 0] - t, switch - t if t < switch else np.inf)
                now = name if name != "mix" else ("sphere" if t < switch else "pre")
                k1 = scheme_rhs(rho, r, n, beta, now)
                k2 = scheme_rhs(rho + step / 2 * k1[0], r + step / 2 * k1[1], n, beta, now)
                k3 = scheme_rhs(rho + step / 2 * k2[0], r + step / 2 * k2[1], n, beta, now)
                k4 = scheme_rhs(rho + step * k3[0], r + step * k3[1], n, beta, now)
                rho += step / 6 * (k1[0] + 2 * k2[0] + 2 * k3[0] + k4[0])
                r += step / 6 * (k1[1] + 2 * k2[1] + 2 * k3[1] + k4[1])
                t += step
            assert abs(rho - table[f, 1]) <= 1e-9 and abs(r - table[f, 3]) <= 1e-9
        # Particles and reduction agree on the clustering time (log-linear between frames).
        assert entry["clustering_time"] == pytest.approx(entry["clustering_time_theory"], rel=1e-2)
    # The orderings of the speed factors (|A| <= 1): nGPT before Post-LN, Peri-LN before Pre-LN.
    assert sc["ngpt"]["clustering_time"] < sc["sphere"]["clustering_time"] < sc["pre"]["clustering_time"]
    assert sc["peri"]["clustering_time"] < sc["pre"]["clustering_time"]
    # Mix-LN: Post-LN up to a quarter of Post-LN's time, then Pre-LN from r = 1: between the two.
    assert sc["mix"]["mix_until"] == pytest.approx(s["mix_fraction"] * sc["sphere"]["clustering_time_theory"],
                                                   rel=1e-12)
    assert sc["sphere"]["clustering_time"] < sc["mix"]["clustering_time"] < sc["pre"]["clustering_time"]
    # The laws at the cluster: rate 2 in t, exponent 2 in r (biases O(u (beta + n)) on the window).
    for name, key in (("sphere", "rate_fitted"), ("ngpt", "rate_fitted"), ("pre", "exponent_fitted"),
                      ("peri", "exponent_fitted"), ("mix", "exponent_fitted")):
        assert sc[name][key] == pytest.approx(2.0, abs=0.05)
    # Pre-LN and Peri-LN tokens move at speed <= 1 (|A| <= 1; Peri-LN exactly 1): from unit
    # tokens the radii stay within 1 +- T.
    rs = s["random_start"]
    for name in ("pre", "peri"):
        assert 0.0 < rs["schemes"][name]["final_radius"] <= 1.0 + rs["T"] + 1e-9


# ---- --random-weights: meanfield and clustering with Q, K ~ N(0, 1/d) ----------------------------

def read_toml(path):
    import tomllib

    with open(path, "rb") as f:
        return tomllib.load(f)


def test_meanfield_random_weights_runs_a_nonsymmetric_draw_below_its_blowup(tmp_path):
    out = tmp_path / "mf"
    run_cli("reproduce", "meanfield", "--quick", "--random-weights", "--no-figures", "--out", out)
    s = load_json(out / "summary.json")
    config = read_toml(out / "config.toml")
    Q, K = np.array(config["attention"]["Q"]), np.array(config["attention"]["K"])
    assert s["random_weights"] is True and np.array_equal(Q, s["Q"]) and np.array_equal(K, s["K"])
    # Not the published weights, and QK^T not symmetric (a generic draw).
    assert not np.array_equal(Q, [[0.5, 0.25], [0.0, 0.5]])
    assert np.abs(Q @ K.T - (Q @ K.T).T).max() > 0.1
    # The run stays below the closure's blow-up time t* = 1 / lambda_max(S0^1/2 (A + A^T) S0^1/2),
    # A = K^T Q / sqrt(2) (the default scale; V = W = I): T = 1 unless t* < 2, else t* / 2 rounded
    # down to two digits; ten rk4 steps either way.
    S0 = np.array(config["init"]["cov"])
    w, U = np.linalg.eigh(S0)
    root = U @ np.diag(np.sqrt(w)) @ U.T
    A = K.T @ Q / np.sqrt(2)
    lam = np.linalg.eigvalsh(root @ (A + A.T) @ root).max()
    tstar = 1 / lam if lam > 0 else math.inf
    T = 1.0 if tstar >= 2 else math.floor(tstar * 50) / 100
    assert s["T"] == pytest.approx(T, rel=1e-15) and s["dt"] == pytest.approx(T / 10, rel=1e-15)
    assert s["meanfield_status"] == "finished" and math.isfinite(s["slope"])


def test_clustering_random_weights_keeps_the_circle(tmp_path):
    out = tmp_path / "cl"
    run_cli("reproduce", "clustering", "--quick", "--random-weights", "--no-figures", "--out", out)
    s = load_json(out / "summary.json")
    config = read_toml(out / "run" / "config.toml")
    Q, K = np.array(config["attention"]["Q"]), np.array(config["attention"]["K"])
    assert s["random_weights"] is True and np.array_equal(Q, s["Q"]) and np.array_equal(K, s["K"])
    assert np.abs(Q @ K.T - (Q @ K.T).T).max() > 0.1 and config["attention"]["V"] == [[1.0, 0.0], [0.0, 1.0]]
    traj = np.load(out / "run" / "trajectory.npy")
    assert np.max(np.abs(np.linalg.norm(traj, axis=2) - 1)) <= 8 * EPS64
    assert s["simulate_status"] == "finished" and s["final_clusters"] >= 1


def test_random_weights_is_refused_where_a_reproduction_has_no_such_form(tmp_path):
    r = run_cli("reproduce", "ranks", "--random-weights", "--no-figures", "--out", tmp_path / "r", check=False)
    assert r.returncode == 2 and "--random-weights" in r.stderr and "ranks" in r.stderr
    assert not (tmp_path / "r").exists()
