"""No non-finite array returned silently, no silent non-convergence (docs/design.md section 3): bad input
raises tokenflow.InputError, a non-finite or failed result raises FloatingPointError, an iterative
solve stopped short of its tolerance warns with tokenflow.ConvergenceWarning, as the CLI exits 2, exits
1 or prints a warning line on the same input."""
import warnings

import numpy as np
import pytest

import tokenflow
from conftest import load_json, run_cli


def clouds(rng, n=6, scale=1.0):
    return scale * rng.normal(size=(n, 2)), scale * (rng.normal(size=(n + 1, 2)) + 1.0)


def test_convergence_warning_is_a_user_warning_exported_by_the_package():
    assert issubclass(tokenflow.ConvergenceWarning, UserWarning)
    assert "ConvergenceWarning" in tokenflow.__all__
    assert tokenflow.ConvergenceWarning.__module__ == "tokenflow"


def test_sinkhorn_at_max_iter_warns_with_the_error_and_the_tolerance(tmp_path):
    rng = np.random.default_rng()
    x, y = clouds(rng)
    # Without epsilon-scaling: a stalled schedule's exact start can converge within 2 iterations.
    with pytest.warns(tokenflow.ConvergenceWarning) as caught:
        r = tokenflow.sinkhorn(x, y, epsilon=0.01, max_iter=2, epsilon_start="off")
    assert not r.converged and r.summary["status"] == "max_iter"
    message = str(caught[0].message)
    assert message.startswith("Sinkhorn stopped at max_iter = 2 with marginal error ")
    assert f"{r.marginal_error:g}" in message and "> tol 1e-09" in message
    # The CLI prints the same line on stderr (and exits 0, as documented, with status max_iter).
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y)
    p = run_cli("ot", "--x", tmp_path / "x.npy", "--y", tmp_path / "y.npy", "--epsilon", "0.01", "--max-iter", "2",
                "--epsilon-start", "off", "--out", tmp_path / "out")
    assert p.stderr == f"tokenflow: warning: {message}\n"


def test_converged_sinkhorn_does_not_warn():
    rng = np.random.default_rng()
    x, y = clouds(rng)
    with warnings.catch_warnings():
        warnings.simplefilter("error", tokenflow.ConvergenceWarning)
        r = tokenflow.sinkhorn(x, y, epsilon=0.5)
    assert r.converged


def test_wasserstein_sinkhorn_at_max_iter_warns():
    rng = np.random.default_rng()
    x, y = clouds(rng, n=20)
    with pytest.warns(tokenflow.ConvergenceWarning, match="max_iter = 2"):
        w = tokenflow.wasserstein(x, y, method="sinkhorn", max_iter=2)
    assert w.summary["status"] == "max_iter"


@pytest.mark.parametrize("epsilon", [1e-300, 1e-320])
def test_epsilon_below_what_the_costs_allow_is_input_error(epsilon):
    rng = np.random.default_rng()
    x, y = clouds(rng)
    with pytest.raises(tokenflow.InputError) as e:
        tokenflow.sinkhorn(x, y, epsilon=epsilon)
    assert e.value.key == "epsilon"
    with pytest.raises(tokenflow.InputError, match="epsilon"):
        tokenflow.wasserstein(x, y, method="sinkhorn", epsilon=epsilon)


def test_costs_that_overflow_are_input_error():
    rng = np.random.default_rng()
    x, y = clouds(rng)
    with pytest.raises(tokenflow.InputError) as e:
        tokenflow.sinkhorn(x * 1e160, y, epsilon=0.1)
    assert e.value.key == "x" and "not finite" in str(e.value)
    with pytest.raises(tokenflow.InputError):
        tokenflow.exact_ot(x, y * 1e160)


def test_small_epsilon_with_small_costs_is_still_solved():
    rng = np.random.default_rng()
    x, y = clouds(rng, scale=1e-6)
    r = tokenflow.sinkhorn(x, y, epsilon=1e-12)  # max|C| / epsilon ~ 10
    assert r.converged and np.isfinite(r.plan).all()


def test_attention_matrix_never_returns_non_finite_weights():
    x = np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 2.0]])
    # Linear attention with logits ~ 1e400: inf weights before.
    big = [[1e200, 0.0], [0.0, 1e200]]
    with pytest.raises(FloatingPointError, match="attention_matrix"):
        tokenflow.attention_matrix({"attention": {"kind": "linear", "Q": big, "K": big}}, x)
    # Sinkhorn attention at an epsilon the logits cannot be resolved at: bad input.
    with pytest.raises(tokenflow.InputError) as e:
        tokenflow.attention_matrix({"attention": {"kind": "sinkhorn", "epsilon": 1e-300}}, x)
    assert e.value.key == "attention.epsilon"


def test_simulate_refuses_steps_that_cannot_advance_time():
    with pytest.raises(tokenflow.InputError) as e:
        tokenflow.simulate({"init": {"n": 8}, "run": {"dt": 1e-300}})
    assert e.value.key == "run.dt"
    with pytest.raises(tokenflow.InputError) as e:
        tokenflow.simulate({"init": {"n": 8}, "run": {"integrator": "dopri5", "tol": 1e-300}})
    assert e.value.key == "run.tol"
    r = tokenflow.simulate({"init": {"n": 8}, "run": {"dt": 1e10}})  # one step to T
    assert r.summary["t_final"] == 1.0 and r.summary["steps"] == 1


STIFF = {"attention": {"V": [[-1e17, 0.0], [0.0, -1e17]]}, "run": {"integrator": "dopri5"}}


def test_simulate_stall_warns_and_says_where(tmp_path):
    with pytest.warns(tokenflow.ConvergenceWarning, match="dopri5 stalled at t = "):
        r = tokenflow.simulate(dict(STIFF, init={"n": 8}))
    assert r.status == "stalled" and r.summary["t_final"] < 1.0 and "floor" in r.summary["reason"]
    assert np.isfinite(r.positions).all()
    path = tmp_path / "stiff.toml"
    path.write_text(tokenflow.to_toml(dict(STIFF, init={"n": 8})))
    p = run_cli("simulate", "--config", path, "--out", tmp_path / "out", check=False)
    assert p.returncode == 1 and p.stderr.count("\n") == 1 and "simulate stalled" in p.stderr
    assert load_json(tmp_path / "out" / "summary.json")["status"] == "stalled"


def test_gaussian_refuses_moments_out_of_range_and_reports_stalls():
    with pytest.raises(tokenflow.InputError) as e:
        tokenflow.gaussian({"init": {"cov": [[1e300, 0.0], [0.0, 1e300]]}, "run": {"blowup": 1e308}})
    assert e.value.key == "init.cov"
    with pytest.warns(tokenflow.ConvergenceWarning, match="stalled"):
        r = tokenflow.gaussian(STIFF)
    assert r.status == "stalled" and r.blowup_time is None
    # A blow-up is still a blow-up (the refined time, not a stall), even with T far beyond it.
    with warnings.catch_warnings():
        warnings.simplefilter("error", tokenflow.ConvergenceWarning)
        r = tokenflow.gaussian({"run": {"T": 1e6}})
    assert r.status == "blowup" and abs(r.blowup_time - 2 ** -0.5) < 1e-6
