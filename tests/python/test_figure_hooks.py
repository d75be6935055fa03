"""The figures of reproductions whose C++ side lands with other branches (cone, ranks, blowup,
meanfield, universal-approximation), drawn from synthetic data in the layouts documented in
docs/ARCHITECTURE-python.md: when the data arrives in that layout, the figures are ready."""
import json

import numpy as np
import pytest

from tokenflow import figures, plot


def gaussian_run(directory, covs, status, blowup_time=None):
    directory.mkdir(parents=True)
    np.save(directory / "times.npy", np.linspace(0, 1, len(covs)))
    np.save(directory / "covs.npy", np.asarray(covs))
    np.save(directory / "means.npy", np.zeros((len(covs), 2)))
    (directory / "summary.json").write_text(json.dumps({"command": "gaussian", "status": status,
                                                        "blowup_time": blowup_time}))


def softmax_closed_form(S0, B, t):
    return np.array([np.linalg.inv(np.linalg.inv(S0) - s * B) for s in t])


def test_cone(tmp_path):
    t = np.linspace(0, 1, 30)
    for kind in ("softmax", "l2", "multihead", "sinkhorn"):
        gaussian_run(tmp_path / kind / "0", [np.eye(2) * np.exp(-s) for s in t], "converged")
        gaussian_run(tmp_path / kind / "1", softmax_closed_form(np.eye(2), np.diag([1.0, 0.0]), 0.9 * t), "blowup", 1.0)
    (tmp_path / "summary.json").write_text("{}")
    entries = figures.draw("cone", tmp_path)
    assert (tmp_path / "cone.png").stat().st_size > 10000
    assert entries[0]["numbers"] == {f"{k}: {s}": 1 for k in ("softmax", "l2", "multihead", "sinkhorn")
                                     for s in ("converged", "blowup")}


def test_ranks(tmp_path):
    rng = np.random.default_rng()
    rows = ["d,identity,rank"]
    for d in (3, 4, 5):
        rows += [f"{d},1,{(d + 1) // 2}"] * 10 + [f"{d},0,{r}" for r in rng.integers(1, d + 1, 10)]
    rows.append("5,1,2")  # one V = I trial off the prediction
    (tmp_path / "ranks.csv").write_text("\n".join(rows) + "\n")
    entries = figures.draw("ranks", tmp_path)
    numbers = entries[0]["numbers"]
    assert numbers["d = 3, V = I: share with rank (d + 1) // 2 = 2"] == 1.0
    assert numbers["d = 5, V = I: share with rank (d + 1) // 2 = 3"] == pytest.approx(10 / 11)
    assert (tmp_path / "ranks.png").stat().st_size > 10000


def test_blowup(tmp_path):
    t = np.linspace(0, 0.99, 40)
    gaussian_run(tmp_path / "softmax", softmax_closed_form(np.eye(2), np.diag([1.0, 0.0]), t), "blowup", 0.999)
    gaussian_run(tmp_path / "l2", [np.eye(2) * (1 + s) for s in t], "horizon")
    (tmp_path / "summary.json").write_text(json.dumps({"predicted_blowup_time": 1.0}))
    numbers = figures.draw("blowup", tmp_path)[0]["numbers"]
    assert numbers == {"predicted t*": 1.0, "softmax: status": "blowup", "softmax: blow-up time": 0.999,
                       "l2: status": "horizon", "l2: blow-up time": None}


def test_meanfield(tmp_path):
    ns = [100, 200, 400, 800]
    rows = ["n,trial,error"] + [f"{n},{k},{2.0 * n ** -0.5 * (1 + 0.01 * k)}" for n in ns for k in range(3)]
    (tmp_path / "meanfield.csv").write_text("\n".join(rows) + "\n")
    numbers = figures.draw("meanfield", tmp_path)[0]["numbers"]
    assert numbers["fitted slope"] == pytest.approx(-0.5, abs=1e-12)  # the same factor at every n
    assert numbers["trials per n"] == 3


def test_universal_approximation(tmp_path):
    rows = ["width,layers,k,parameters,test_w1,test_w1_untrained,test_w1_independent,test_loss,seconds",
            "4,1,2,544,0.12,0.4,0.52,1.0,10", "16,1,8,6976,0.05,0.4,0.52,0.5,20", "64,2,32,204672,0.02,0.4,0.52,0.2,60"]
    (tmp_path / "sweep.csv").write_text("\n".join(rows) + "\n")
    summary = {"w1_smallest_model": 0.12, "w1_largest_model": 0.02, "w1_falls_with_capacity": True}
    (tmp_path / "summary.json").write_text(json.dumps(summary))
    entry = figures.draw("universal-approximation", tmp_path)[0]
    assert entry["numbers"] == {"models": 3, "W_1 smallest model": 0.12, "W_1 largest model": 0.02,
                                "falls with capacity": True}


def test_every_cpp_reproduction_has_figures(cli):
    names = [line.split()[0] for line in cli("reproduce", "--list").stdout.splitlines()]
    assert names and set(names) == set(figures.FIGURES)
