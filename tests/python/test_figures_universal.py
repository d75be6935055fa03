"""`tokenflow reproduce universal-approximation` writes sweep.csv and the figure is drawn from it."""
import csv
import importlib.util
import os
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CLI = os.environ.get("TOKENFLOW_CLI", os.path.join(ROOT, "build", "tokenflow"))
spec = importlib.util.spec_from_file_location("figures_universal",
                                              os.path.join(ROOT, "python", "tokenflow", "figures_universal.py"))
figures_universal = importlib.util.module_from_spec(spec)
spec.loader.exec_module(figures_universal)


@pytest.mark.skipif(not os.path.exists(CLI), reason="the CLI is not built")
def test_tiny_sweep_writes_csv_and_figure(tmp_path):
    out = tmp_path / "ua"
    subprocess.run([CLI, "reproduce", "universal-approximation", "--grid", "4x1,8x1", "--set", "train.steps=4",
                    "--set", "train.test_pairs=3", "--set", "task.n=5", "--no-figure", "--out", str(out)],
                   check=True, env=dict(os.environ, CI="1"), capture_output=True)
    with open(out / "sweep.csv") as f:
        rows = list(csv.DictReader(f))
    assert [(r["width"], r["layers"]) for r in rows] == [("4", "1"), ("8", "1")]
    assert int(rows[0]["parameters"]) < int(rows[1]["parameters"])
    for r in rows:
        assert 0 <= float(r["test_w1"]) and float(r["test_w1_independent"]) > 0
    path = figures_universal.plot(str(out))
    assert os.path.getsize(path) > 1000
