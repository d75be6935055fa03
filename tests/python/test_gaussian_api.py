"""tokenflow.gaussian, meanfield and stability against `tokenflow gaussian/meanfield/stability` on
the same config: equal to the last digit (only timings differ)."""
import numpy as np
import pytest

import tokenflow
from conftest import load_json, run_cli
from tokenflow.plot import read_csv

TIMINGS = {"wall_seconds"}

GAUSSIAN_CASES = {
    "softmax_blowup": {"init": {"cov": [[1.0, 0.3], [0.3, 0.6]]}, "run": {"T": 2.0}},
    "softmax_collapse": {"attention": {"Q": [[1.0, 0.5], [0.0, 0.0]], "K": [[-1.0, -0.5], [0.0, 0.0]]},
                         "run": {"T": 50.0, "grid_frames": 40}},
    "l2_rk4": {"init": {"mean": [0.5, -0.2]}, "attention": {"kind": "l2"},
               "run": {"T": 1.0, "integrator": "rk4", "dt": 0.05, "save_every": 4}},
    "sinkhorn_heads": {"attention": {"kind": "sinkhorn", "heads": 2, "epsilon": 0.5,
                                     "Q": [[1.0, 0.2], [0.0, 1.0], [0.5, 0.0], [0.0, -1.0]],
                                     "K": [[-1.0, 0.0], [0.3, 1.0], [1.0, 0.0], [0.0, 0.5]],
                                     "V": np.eye(2), "W": [[1.0, 0.0], [0.0, 1.0]]},
                       "run": {"T": 1.5}},
    "linear_layers": {"attention": {"kind": "linear", "Q": [[0.2, 0.0], [0.0, 0.1]]},
                      "layers": [{"until": 0.3, "K": [[-0.2, 0.0], [0.0, 0.3]]}], "run": {"T": 0.8}},
}


def without(d, keys):
    return {k: v for k, v in d.items() if k not in keys}


def write_config(tmp_path, config):
    path = tmp_path / "cfg.toml"
    path.write_text(tokenflow.to_toml(config))
    return path


@pytest.mark.parametrize("case", sorted(GAUSSIAN_CASES))
def test_gaussian_equals_the_cli_to_the_last_digit(tmp_path, case):
    config = GAUSSIAN_CASES[case]
    path = write_config(tmp_path, config)
    run_cli("gaussian", "--config", path, "--out", tmp_path / "out")
    for r in (tokenflow.gaussian(config), tokenflow.gaussian(path)):
        for name in ("times", "means", "covs"):
            expected = np.load(tmp_path / "out" / f"{name}.npy")
            value = getattr(r, name)
            assert value.dtype == expected.dtype and value.shape == expected.shape, name
            assert np.array_equal(value, expected), f"{name} differs from the CLI's"
        assert without(r.summary, TIMINGS) == without(load_json(tmp_path / "out" / "summary.json"), TIMINGS)
        assert r.status in ("blowup", "converged", "horizon")
        assert r.summary["wall_seconds"] >= 0


def test_gaussian_invariants():
    # Symmetric covariances on every frame, means of the right shape, frames in time order.
    r = tokenflow.gaussian(GAUSSIAN_CASES["sinkhorn_heads"])
    assert np.array_equal(r.covs, np.transpose(r.covs, (0, 2, 1)))
    assert np.all(np.diff(r.times) > 0) and r.times[0] == 0.0 and r.times[-1] == r.summary["t_final"]
    assert np.array_equal(r.covs[-1], np.array(r.summary["final"]["cov"]))


@pytest.mark.parametrize("config,expected", [
    ({"attention": {"kind": "sigmoid"}}, "attention.kind: sigmoid attention has no Gaussian closure"),
    ({"init": {"kind": "sphere"}}, "init.kind: tokenflow gaussian starts from N(mean, cov)"),
    ({"run": {"grid_frames": 0}}, "run.grid_frames: must be at least 1"),
    ({"run": {"converge": 1e-3}}, "run.converge: unknown key (did you mean 'run.converge_tol'?)"),
])
def test_gaussian_errors_are_the_cli_errors(tmp_path, config, expected):
    path = write_config(tmp_path, config)
    cli = run_cli("gaussian", "--config", path, "--out", tmp_path / "out", check=False)
    assert cli.returncode == 2
    cli_message = cli.stderr.strip()[len("tokenflow: "):]
    assert expected in cli_message
    with pytest.raises(ValueError) as from_file:
        tokenflow.gaussian(path)
    assert str(from_file.value) == cli_message
    with pytest.raises(tokenflow.InputError) as from_dict:
        tokenflow.gaussian(config)
    assert str(from_dict.value) == cli_message.replace(str(path), "config")


def assert_table_equals_csv(table, csv_path, skip=("seconds",)):
    csv = read_csv(csv_path)
    for column, values in csv.items():
        if column in skip:
            continue
        if column == "status":
            assert table[column] == values
            continue
        ours = np.asarray(table[column], dtype=float)
        assert np.array_equal(ours, values), column


def test_meanfield_equals_the_cli_to_the_last_digit(tmp_path):
    config = {"seed": 4, "init": {"cov": [[1.0, 0.2], [0.2, 0.5]]},
              "attention": {"kind": "l2", "Q": [[1.0, 0.0], [0.0, 0.5]]},
              "meanfield": {"ns": [32, 128], "seeds": 2}, "run": {"T": 0.2, "dt": 0.05}}
    path = write_config(tmp_path, config)
    run_cli("meanfield", "--config", path, "--out", tmp_path / "out")
    r = tokenflow.meanfield(config)
    assert_table_equals_csv(r.table, tmp_path / "out" / "meanfield.csv")
    assert list(r.table) == list(read_csv(tmp_path / "out" / "meanfield.csv"))
    # The seeds are uint64 hashes: exact, not rounded through float64.
    seeds = [int(line.split(",")[2]) for line in (tmp_path / "out" / "meanfield.csv").read_text().splitlines()[1:]]
    assert r.table["seed"].tolist() == seeds
    assert r.table["status"] == ["finished"] * 4
    assert without(r.summary, TIMINGS) == without(load_json(tmp_path / "out" / "summary.json"), TIMINGS)


def test_stability_equals_the_cli_to_the_last_digit(tmp_path):
    config = {"seed": 2, "init": {"n": 48}, "attention": {"kind": "softmax", "K": [[-1.0, 0.0], [0.0, 0.5]]},
              "stability": {"delta": 0.02, "frames": 5}, "run": {"T": 0.4, "dt": 0.02}}
    path = write_config(tmp_path, config)
    run_cli("stability", "--config", path, "--out", tmp_path / "out")
    r = tokenflow.stability(config)
    assert_table_equals_csv(r.table, tmp_path / "out" / "stability.csv")
    assert list(r.table) == list(read_csv(tmp_path / "out" / "stability.csv"))
    assert without(r.summary, TIMINGS) == without(load_json(tmp_path / "out" / "summary.json"), TIMINGS)
    with pytest.raises(ValueError, match="run.integrator: stability compares the two runs at equal times"):
        tokenflow.stability(dict(config, run={"integrator": "dopri5"}))
