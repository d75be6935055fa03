"""Progress of long Python calls: a callback with the core's numbers, or a bar on a terminal."""
import io

import numpy as np
import pytest

import tokenflow
from tokenflow._progress import TerminalBar, log_fraction


def test_simulate_reports_every_step_and_stops_when_the_callback_raises():
    seen = []
    r = tokenflow.simulate({"init": {"n": 20}, "run": {"T": 0.5, "dt": 0.1}},
                           progress=lambda t, T, steps: seen.append((t, T, steps)))
    assert [s for _, _, s in seen] == list(range(1, 6)) and all(T == 0.5 for _, T, _ in seen)
    assert seen[-1][0] == pytest.approx(0.5, abs=1e-15) and r.summary["steps"] == 5

    class Stop(Exception):
        pass

    def stop_at_third(t, T, steps):
        if steps == 3:
            raise Stop("enough")

    with pytest.raises(Stop, match="enough"):
        tokenflow.simulate({"init": {"n": 20}, "run": {"T": 0.5, "dt": 0.1}}, progress=stop_at_third)
    with pytest.raises(tokenflow.InputError, match="^progress: must be a callable, None .* or False, not str 'bar'"):
        tokenflow.simulate({"init": {"n": 20}}, progress="bar")


def test_sinkhorn_reports_its_iterations_and_errors():
    rng = np.random.default_rng()
    x, y = rng.normal(size=(30, 2)), rng.normal(size=(20, 2))
    seen = []
    r = tokenflow.sinkhorn(x, y, epsilon=0.05, operator="dense", progress=lambda it, err: seen.append((it, err)))
    assert seen and all(it % 10 == 0 for it, _ in seen) and seen[-1][0] <= r.iterations
    assert all(np.isfinite(err) and err >= 0 for _, err in seen)


def test_the_terminal_bar_draws_one_line():
    stream = io.StringIO()
    bar = TerminalBar("simulate", stream)
    bar.update(0.5, "t = 1")
    bar.update(1.0, "t = 2")  # the last update is always drawn
    bar.close()
    text = stream.getvalue()
    assert text.startswith("\rsimulate [###############               ]  50% t = 1")
    assert text.endswith("100% t = 2\033[K\n") and text.count("\n") == 1
    assert log_fraction(1e-5, 1e-10) == pytest.approx(0.5) and log_fraction(1e-11, 1e-10) == 1.0


def test_the_studies_report_progress():
    seen = []
    tokenflow.gaussian({"run": {"T": 0.5}}, progress=lambda t, T, steps: seen.append((t, T)))
    assert seen and seen[-1][1] == 0.5 and all(0 <= t <= T for t, T in seen)
    fractions = []
    tokenflow.meanfield({"meanfield": {"ns": [32, 64], "seeds": 1}}, progress=fractions.append)
    assert fractions and all(0 <= f <= 1 for f in fractions) and fractions == sorted(fractions)
    fractions.clear()
    tokenflow.stability({"init": {"n": 32}, "run": {"T": 0.2, "dt": 0.05}}, progress=fractions.append)
    assert fractions and all(0 <= f <= 1 for f in fractions)


def test_wasserstein_reports_its_sinkhorn_iterations():
    rng = np.random.default_rng()
    x, y = rng.normal(size=(30, 2)), rng.normal(size=(25, 2))
    seen = []
    w = tokenflow.wasserstein(x, y, method="sinkhorn", epsilon=0.05, progress=lambda it, err: seen.append((it, err)))
    iterations = [it for it, _ in seen]
    assert iterations and iterations == sorted(set(iterations)) and iterations[-1] <= w.summary["iterations"]
    assert all(np.isfinite(err) and err >= 0 for _, err in seen)

    class Stop(Exception):
        pass

    def stop(it, err):
        raise Stop("enough")

    with pytest.raises(Stop, match="enough"):
        tokenflow.wasserstein(x, y, method="sinkhorn", epsilon=0.05, progress=stop)


def test_train_draws_a_bar_with_the_loss(monkeypatch):
    import tokenflow._progress as progress_module

    stream = io.StringIO()
    monkeypatch.setattr(progress_module, "_terminal", lambda: True)
    monkeypatch.setattr(progress_module, "TerminalBar", lambda label: TerminalBar(label, stream))
    tokenflow.train({"task": {"kind": "matching", "n": 4}, "model": {"width": 8, "layers": 1, "heads": 2, "k": 4},
                     "train": {"steps": 5, "batch": 2, "test_pairs": 2}})
    text = stream.getvalue()
    assert text.startswith("\rtrain [") and "100% step 5 of 5, loss " in text and text.endswith("\033[K\n")
