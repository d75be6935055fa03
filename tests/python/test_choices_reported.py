"""A choice that did not do what was asked is said, and a call in another library's language gets
one line that points to ours:

- POT's positional order given to tokenflow.sinkhorn / exact_ot / wasserstein: one InputError that
  names M= and tokenflow.pot, with no warning before it; reg= is an alias of epsilon;
- summation = "fast" that sums most rows exactly: a SummationWarning (Python), a warning line
  (CLI) and summary["summation"]["exact_row_share"];
- --overrelaxation: what was asked (overrelaxation_requested) beside what the kernel loop ran;
- a misspelled key gets "did you mean" (run.steps: run.dt, with the reason).

Point clouds are fresh on every run; TOKENFLOW_TEST_SEED=<seed> replays one.
"""
import json
import os
import warnings

import numpy as np
import pytest

import tokenflow
from conftest import run_cli

SEED = int(os.environ.get("TOKENFLOW_TEST_SEED", np.random.SeedSequence().entropy % 2**31))


@pytest.fixture
def rng():
    print(f"TOKENFLOW_TEST_SEED={SEED}")
    return np.random.default_rng(SEED)


def _pot_problem(rng, n=6, m=5):
    a, b = rng.random(n) + 0.1, rng.random(m) + 0.1
    a, b = a / a.sum(), b / b.sum()
    return a, b, rng.random((n, m)) * 3.0


@pytest.mark.parametrize("call", [lambda a, b, M: tokenflow.sinkhorn(a, b, M, 0.1),
                                  lambda a, b, M: tokenflow.sinkhorn(a * 7, b, M),  # unnormalized: no warning first
                                  lambda a, b, M: tokenflow.exact_ot(a, b, M),
                                  lambda a, b, M: tokenflow.wasserstein(a, b, M)],
                         ids=["sinkhorn", "sinkhorn_unnormalized", "exact_ot", "wasserstein"])
def test_pots_positional_order_is_one_error_that_points_to_M_and_tokenflow_pot(rng, call):
    a, b, M = _pot_problem(rng)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a NormalizationWarning (or any) before the error fails here
        with pytest.raises(tokenflow.InputError) as caught:
            call(a, b, M)
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith("M: tokenflow.")
    assert "is POT's argument order" in message and "M=M" in message and "tokenflow.pot" in message


def test_the_calls_the_error_names_solve_pots_problem(rng):
    # The two spellings the message offers give POT's plan: by name, and through tokenflow.pot.
    import tokenflow.pot as tot
    a, b, M = _pot_problem(rng)
    named = tokenflow.sinkhorn(a=a, b=b, M=M, epsilon=0.1, tol=1e-12).plan
    # Both converge to 1e-12 in l1 marginal error from the same problem: plans of one fixed point,
    # equal to the rounding of the loop (entries ~ 1/30, a few hundred ulps of them at most).
    np.testing.assert_allclose(tot.sinkhorn(a, b, M, 0.1, stopThr=1e-12), named, rtol=0, atol=1e-12)


def test_reg_is_an_alias_of_epsilon_and_both_at_once_are_refused(rng):
    a, b, M = _pot_problem(rng)
    eps = float(rng.uniform(0.05, 0.5))
    by_reg = tokenflow.sinkhorn(a=a, b=b, M=M, reg=eps)
    by_epsilon = tokenflow.sinkhorn(a=a, b=b, M=M, epsilon=eps)
    # The same call underneath: the same numbers to the last bit.
    assert by_reg.summary["epsilon"] == eps
    assert np.array_equal(by_reg.plan, by_epsilon.plan) and by_reg.cost == by_epsilon.cost
    for epsilon in (eps, 0.1):  # 0.1 is the default's value: given explicitly, it is still "both"
        with pytest.raises(tokenflow.InputError, match=r"^reg: is POT's name for epsilon; give one"):
            tokenflow.sinkhorn(a=a, b=b, M=M, epsilon=epsilon, reg=eps)


def _fast_config(seed, scale, cov, n):
    # One euler step: each velocity evaluation runs the fast summation once per head.
    return {"seed": seed, "init": {"n": n, "cov": cov},
            "attention": {"kind": "softmax", "scale": scale, "summation": "fast"},
            "run": {"T": 0.01, "dt": 0.01, "integrator": "euler"}}


def _share(summary):
    s = summary["summation"]
    return s["rows_exact"] / (s["rows_expanded"] + s["rows_exact"])


def test_fast_summation_that_sums_most_rows_exactly_warns_and_records_the_share():
    # The wide cloud of the report (scale 10, covariance diag(25, 4)) at n = 2000: the grid cannot
    # certify rows 30 bandwidths apart, so most rows are summed exactly.
    config = _fast_config(SEED, 10.0, [[25.0, 0.0], [0.0, 4.0]], 2000)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        r = tokenflow.simulate(config)
    summation = r.summary["summation"]
    assert summation["mode"] == "fast" and summation["fast_evaluations"] > 0
    assert summation["exact_row_share"] == _share(r.summary) > 0.05
    assert [w.category for w in caught] == [tokenflow.SummationWarning]
    assert str(caught[0].message) == r.summary["warnings"][0]
    assert f"{100 * summation['exact_row_share']:.1f}% of the rows exactly" in r.summary["warnings"][0]


def test_fast_summation_on_a_narrow_cloud_says_nothing():
    # Standard normal tokens at scale 1: the grid certifies (nearly) every row.
    config = _fast_config(SEED, 1.0, [[1.0, 0.0], [0.0, 1.0]], 2000)
    with warnings.catch_warnings():
        warnings.simplefilter("error", tokenflow.SummationWarning)
        r = tokenflow.simulate(config)
    assert r.summary["summation"]["exact_row_share"] == _share(r.summary) <= 0.05
    assert "warnings" not in r.summary


def test_dense_summation_records_no_share():
    r = tokenflow.simulate({"init": {"n": 16}, "attention": {"summation": "dense"}})
    assert r.summary["summation"]["exact_row_share"] is None


def test_the_cli_prints_the_fast_summation_warning(tmp_path):
    r = run_cli("simulate", "--set", f"seed={SEED}", "--set", "init.n=2000", "--set", "init.cov=[[25.0, 0.0], [0.0, 4.0]]",
                "--set", "attention.scale=10.0", "--set", 'attention.summation="fast"', "--set", "run.T=0.01",
                "--set", "run.dt=0.01", "--set", 'run.integrator="euler"', "--out", tmp_path / "run")
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert r.stderr.splitlines() == [f"tokenflow: warning: {summary['warnings'][0]}"]
    assert summary["summation"]["exact_row_share"] > 0.05


@pytest.mark.parametrize("w", ["0", "1", "1.5"])
def test_overrelaxation_records_what_was_asked_and_what_ran(tmp_path, rng, w):
    x, y = rng.normal(size=(2, 300, 2))
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y)
    run_cli("ot", "--x", tmp_path / "x.npy", "--y", tmp_path / "y.npy", "--operator", "kernel", "--tol", "1e-6",
            "--overrelaxation", w, "--out", tmp_path / "out")
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["overrelaxation_requested"] == float(w)
    # What the kernel-mode loop ran: Anderson acceleration (w = 1 with a depth) for 0, plain steps
    # (w = 1, depth 0) for 1, the fixed w otherwise.
    assert summary["overrelaxation"] == (1.0 if w == "0" else float(w))
    assert (summary["anderson_depth"] > 0) == (w == "0")
    python = tokenflow.sinkhorn(x, y, operator="kernel", tol=1e-6, overrelaxation=float(w))
    assert python.summary["overrelaxation_requested"] == float(w)


@pytest.mark.parametrize("key,meant", [("run.steps", "run.dt"), ("run.n_steps", "run.dt"),
                                       ("run.dtt", "run.dt")])
def test_a_misspelled_key_gets_did_you_mean(tmp_path, key, meant):
    r = run_cli("simulate", "--set", f"{key}=10", "--out", tmp_path / "out", check=False)
    assert r.returncode == 2 and len(r.stderr.splitlines()) == 1, r.stderr
    assert f"{key}: unknown key (did you mean '{meant}'?" in r.stderr
    if "steps" in key:
        assert "the number of steps is T / dt" in r.stderr
    assert not (tmp_path / "out").exists()
    with pytest.raises(tokenflow.InputError, match="unknown key"):
        tokenflow.simulate({key.split(".")[0]: {key.split(".")[1]: 10}})
