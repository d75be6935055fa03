"""The figure functions on synthetic data in the documented layouts (docs/ARCHITECTURE-python.md):
numbers that can be checked exactly, independent of a CLI run. The figures of the real data are
tested in test_reproduce.py."""
import json

import numpy as np
import pytest

from tokenflow import figures


def test_meanfield_slope_is_the_rms_fit(tmp_path):
    ns = [100, 200, 400, 800]
    header = ("n,sample,seed,status,mean_error,cov_error,bures_wasserstein,mean_error_from_sample,"
              "cov_error_from_sample,bures_wasserstein_from_sample,seconds")
    rows = [header] + [f"{n},{k},{k},finished,0,0,{2.0 * n ** -0.5 * (1 + 0.01 * k)},0,0,{n ** -1.0},0"
                       for n in ns for k in range(3)]
    (tmp_path / "meanfield.csv").write_text("\n".join(rows) + "\n")
    summary = {"seeds": 3, "T": 1.0, "theory_slope": -0.5,
               "slopes": {"bures_wasserstein": -0.5, "bures_wasserstein_from_sample": -1.0}}
    (tmp_path / "summary.json").write_text(json.dumps(summary))
    fig, numbers = figures.draw_meanfield(tmp_path)
    assert numbers["samples per n"] == 3 and numbers["n from"] == 100 and numbers["n to"] == 800
    # One panel per error; the same factor at every n, so the RMS fits are exactly -1/2 and -1.
    labels = [[line.get_label() for line in ax.get_lines()] for ax in fig.axes]
    assert "fit: slope -0.500" in labels[0] and "fit: slope -1.000" in labels[1]
    rms = fig.axes[0].get_lines()[0].get_ydata()
    assert np.allclose(rms, [np.sqrt(np.mean([(2.0 * n ** -0.5 * (1 + 0.01 * k)) ** 2 for k in range(3)]))
                             for n in ns], rtol=1e-14)


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
