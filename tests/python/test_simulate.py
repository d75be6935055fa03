"""tokenflow.simulate against `tokenflow simulate` on the same input: equal to the last digit."""
import json
import math

import numpy as np
import pytest

import tokenflow
from conftest import load_json, run_cli
from tokenflow.plot import read_csv

CASES = {
    "softmax_rk4": {"seed": 3, "init": {"n": 96, "cov": [[1.0, 0.3], [0.3, 0.5]]},
                    "attention": {"kind": "softmax", "Q": [[1.0, 0.5], [0.2, 0.7]], "K": [[0.4, -0.3], [0.1, 0.9]]},
                    "run": {"T": 0.6, "dt": 0.05, "save_every": 3}},
    "l2_dopri5_heads": {"seed": 5, "init": {"n": 40},
                        "attention": {"kind": "l2", "heads": 2, "Q": [[1.0, 0.0], [0.0, 1.0]],
                                      "K": [[0.5, 0.0], [0.0, 2.0]], "V": [[1.0, 0.0], [0.0, 1.0]],
                                      "W": [[0.5, 0.0], [0.0, 0.5]]},
                        "run": {"T": 0.5, "integrator": "dopri5", "tol": 1e-8, "save_every": 2}},
    "sphere_euler": {"seed": 2, "init": {"kind": "sphere", "n": 30, "d": 3},
                     "attention": {"kind": "softmax", "normalize": "sphere", "scale": 2.0,
                                   "Q": np.eye(3), "K": np.eye(3)},
                     "run": {"T": 1.0, "dt": 0.1, "integrator": "euler", "save_every": 5}},
    "sinkhorn_layers": {"seed": 9, "init": {"n": 24},
                        "attention": {"kind": "sinkhorn", "epsilon": 0.7},
                        "layers": [{"until": 0.2, "Q": [[0.0, 1.0], [1.0, 0.0]]}],
                        "run": {"T": 0.4, "dt": 0.1}},
    "f32": {"dtype": "f32", "seed": 4, "init": {"n": 50}, "run": {"T": 0.3, "save_every": 10}},
}


def cli_run(tmp_path, config, name="cfg.toml"):
    path = tmp_path / name
    path.write_text(tokenflow.to_toml(config))
    out = tmp_path / "out"
    run_cli("simulate", "--config", path, "--out", out)
    return path, out


def assert_same_as_cli(r, out):
    for name, value in [("positions", r.positions), ("initial", r.initial), ("trajectory", r.trajectory),
                        ("times", r.times)]:
        if value is None:
            assert not (out / f"{name}.npy").exists(), name
            continue
        expected = np.load(out / f"{name}.npy")
        assert value.dtype == expected.dtype and value.shape == expected.shape, name
        assert np.array_equal(value, expected), f"{name} differs from the CLI's"
    csv = read_csv(out / "diagnostics.csv")
    assert list(csv) == list(r.diagnostics)
    for column, values in csv.items():
        assert np.array_equal(values, r.diagnostics[column], equal_nan=True), column
    cli_summary = load_json(out / "summary.json")
    py_summary = dict(r.summary)
    assert cli_summary.pop("wall_seconds") >= 0 and py_summary.pop("wall_seconds") >= 0
    assert py_summary == cli_summary


@pytest.mark.parametrize("case", sorted(CASES))
def test_simulate_equals_the_cli_to_the_last_digit(tmp_path, case):
    config = CASES[case]
    path, out = cli_run(tmp_path, config)
    assert_same_as_cli(tokenflow.simulate(config), out)
    # The same through the TOML file.
    assert_same_as_cli(tokenflow.simulate(path), out)


def test_x0_weights_positions_equal_the_cli_file_init(tmp_path):
    rng = np.random.default_rng()
    n = 33
    x0, a, pos = rng.normal(size=(n, 2)), rng.uniform(0.5, 1.5, n), np.sort(rng.uniform(0, 1, n))
    for name, v in (("x0", x0), ("a", a), ("pos", pos)):
        np.save(tmp_path / f"{name}.npy", v)
    base = {"attention": {"kind": "softmax", "mask": "causal", "sink": 0.1}, "run": {"T": 0.3, "save_every": 2}}
    file_config = dict(base, init={"kind": "file", "path": str(tmp_path / "x0.npy"),
                                   "weights": str(tmp_path / "a.npy"), "positions": str(tmp_path / "pos.npy")})
    _, out = cli_run(tmp_path, file_config)
    assert_same_as_cli(tokenflow.simulate(base, x0=x0, weights=a, positions=pos), out)
    # Any array type converts once: float32 values, Fortran order and lists give the same numbers.
    r = tokenflow.simulate(base, x0=np.asfortranarray(x0), weights=list(a), positions=pos)
    assert np.array_equal(r.positions, np.load(out / "positions.npy"))


def test_results_are_numpy_arrays_that_own_their_memory():
    x0 = np.random.default_rng().normal(size=(20, 2))
    r = tokenflow.simulate({"run": {"T": 0.1}}, x0=x0)
    for a in (r.positions, r.initial):
        assert isinstance(a, np.ndarray) and a.flags.c_contiguous and a.dtype == np.float64
        assert not np.shares_memory(a, x0)
        assert a.base is not None and type(a.base).__name__ == "PyCapsule"  # owned by the C++ result
    r.positions[0, 0] = 5.0  # writable, and independent of the next call
    assert tokenflow.simulate({"run": {"T": 0.1}}, x0=x0).positions[0, 0] != 5.0


BAD_CONFIGS = [
    ({"run": {"TT": 1.0}}, "run.TT: unknown key (did you mean 'run.T'?)"),
    ({"init": {"T": 1.0}}, "init.T: unknown key (did you mean 'run.T'?)"),
    ({"attention": {"kind": "softmx"}}, "attention.kind: unknown value 'softmx' (did you mean 'softmax'?)"),
    ({"run": {"T": "long"}}, "run.T: must be a number, not a string"),
    ({"run": {"dt": -0.1}}, "run.dt: must be positive"),
    ({"attention": {"Q": [[1.0, 0.0, 0.0]]}}, "attention.Q: is 1 x 3"),
    ({"init": {"cov": [[1.0, 2.0], [2.0, 1.0]]}}, "init.cov: is not positive semidefinite"),
    ({"init": {"mean": [0.0, math.nan]}}, "init.mean"),
    ({"attention": {"kind": "l2"}, "layers": [{"Q": [[1.0, 0.0], [0.0, 1.0]]}]}, "layers.until"),
]


@pytest.mark.parametrize("config,expected", BAD_CONFIGS, ids=[e.split(":")[0] for _, e in BAD_CONFIGS])
def test_errors_raise_value_error_with_the_cli_message(tmp_path, config, expected):
    path = tmp_path / "cfg.toml"
    path.write_text(tokenflow.to_toml(config))
    cli = run_cli("simulate", "--config", path, "--out", tmp_path / "out", check=False)
    assert cli.returncode == 2
    line = cli.stderr.strip()
    assert line.count("\n") == 0 and line.startswith("tokenflow: ")
    cli_message = line[len("tokenflow: "):]
    assert expected in cli_message
    # From the file: the very same message.
    with pytest.raises(ValueError) as from_file:
        tokenflow.simulate(path)
    assert str(from_file.value) == cli_message
    # From a dict: the same, with "config" as the source.
    with pytest.raises(tokenflow.InputError) as from_dict:
        tokenflow.simulate(config)
    assert str(from_dict.value) == cli_message.replace(str(path), "config")
    assert from_dict.value.source == "config" and from_dict.value.key in cli_message


def test_bad_arrays_name_the_argument():
    x = np.zeros((4, 2))
    bad = x.copy()
    bad[1, 0] = np.nan
    cases = [(dict(x0=bad), "x0: non-finite value at row 1"),
             (dict(x0=x, weights=np.ones(3)), "weights: has 3 entries"),
             (dict(x0=x, weights=-np.ones(4)), "weights: entry 0"),
             (dict(x0=x, positions=np.full(4, 2.0)), "positions: entry 0"),
             (dict(x0=np.zeros((2, 2, 2))), "x0: must be a 2-D array")]
    for kwargs, message in cases:
        with pytest.raises(ValueError, match=message.replace("(", r"\(")):
            tokenflow.simulate({"run": {"T": 0.1}}, **kwargs)
    # Matrices are checked against the dimension of x0.
    with pytest.raises(ValueError, match="config: attention.Q: is 2 x 2"):
        tokenflow.simulate({"attention": {"Q": np.eye(2)}}, x0=np.zeros((4, 3)))


def test_summary_is_the_json_the_cli_writes(tmp_path):
    config = {"init": {"n": 16}, "run": {"T": 0.2}}
    r = tokenflow.simulate(config)
    assert r.trajectory is None and r.times is None  # run.save_every = 0: no frames, like the CLI
    assert set(r.summary) >= {"command", "status", "wall_seconds", "t_final", "steps", "n", "d", "final"}
    assert r.summary["command"] == "simulate" and r.status == "finished"
    assert json.loads(json.dumps(r.summary)) == r.summary


@pytest.mark.parametrize("attention", [
    {"kind": "softmax", "heads": 2, "random": True},
    {"kind": "l2", "scale": 0.7},
    {"kind": "sigmoid"},
    {"kind": "softmax", "mask": "causal", "sink": 0.2},
    {"kind": "softmax", "normalize": "sphere", "scale": 3.0},
])
def test_attention_field_is_the_velocity_simulate_integrates(attention):
    # One Euler step of simulate from x0 is x0 + dt * attention_field(x0): the same field (kernel,
    # summation, heads, mask, sink), evaluated once. The update x0 + dt v is rounded once or twice
    # on either side (a fused multiply-add or not): 2 eps (|x0| + dt |v|) per entry; on the sphere
    # simulate then divides by the norm, a few more roundings of numbers of size 1.
    rng = np.random.default_rng()
    n, d = 40, 3
    x0 = rng.normal(size=(n, d))
    attention = dict(attention)
    if attention.pop("random", False):  # random Q, K, V with entries N(0, 1/d), two heads of k = 2
        attention.update(Q=(rng.normal(size=(4, d)) / np.sqrt(d)).tolist(), K=(rng.normal(size=(4, d)) / np.sqrt(d)).tolist(),
                         V=(rng.normal(size=(2 * d, d)) / np.sqrt(d)).tolist(),
                         W=(rng.normal(size=(d, 2 * d)) / np.sqrt(2 * d)).tolist())
    sphere = attention.get("normalize") == "sphere"
    if sphere:
        x0 /= np.linalg.norm(x0, axis=1, keepdims=True)
    positions = np.sort(rng.uniform(size=n)) if attention.get("mask") == "causal" else None
    config = {"attention": attention, "run": {"T": 0.05, "dt": 0.05, "integrator": "euler"}}
    v = tokenflow.attention_field(config, x0, positions=positions)
    stepped = tokenflow.simulate(config, x0=x0, positions=positions).positions
    eps = np.finfo(float).eps
    expected = x0 + 0.05 * v
    if sphere:
        expected /= np.linalg.norm(expected, axis=1, keepdims=True)
        assert np.abs(stepped - expected).max() <= 8 * eps
        # Tangent: v = G - <G, x> x with G a softmax average of unit vectors (|G| <= 1), so <v, x>
        # is the rounding of a few products and sums of numbers of size 1.
        assert np.abs((v * x0).sum(axis=1)).max() <= 8 * eps
    else:
        assert np.all(np.abs(stepped - expected) <= 2 * eps * (np.abs(x0) + 0.05 * np.abs(v)))
