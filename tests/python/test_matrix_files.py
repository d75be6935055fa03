"""attention.Q, K, V, W (and those of [[layers]]) from .npy files: the same positions, to the last
bit, as the same matrices written inline; a bad file exits 2 with one line naming it and the key."""
import os

import numpy as np
import pytest

from conftest import ROOT, run_cli

# Fresh matrices on every run; TOKENFLOW_TEST_SEED=<seed> replays one.
SEED = int(os.environ.get("TOKENFLOW_TEST_SEED", np.random.SeedSequence().entropy % 2**31))


def _inline(m):
    return "[" + ", ".join("[" + ", ".join(repr(float(v)) for v in row) + "]" for row in m) + "]"


@pytest.fixture
def weights():
    print(f"TOKENFLOW_TEST_SEED={SEED}")
    rng = np.random.default_rng(SEED)
    return {"Q": rng.normal(size=(3, 2)), "K": rng.normal(size=(3, 2)), "V": rng.normal(size=(2, 2)) / 2,
            "W": rng.normal(size=(2, 2)) / 2}


def _positions(folder):
    return np.load(folder / "positions.npy")


def test_npy_matrices_give_the_positions_of_inline_ones(tmp_path, weights):
    (tmp_path / "cfg" / "w").mkdir(parents=True)
    base = "seed = 3\n[init]\nn = 48\n[run]\nT = 0.2\ndt = 0.05\n[attention]\n"
    (tmp_path / "inline.toml").write_text(base + "".join(f"{k} = {_inline(m)}\n" for k, m in weights.items()))
    for k, m in weights.items():
        np.save(tmp_path / "cfg" / "w" / f"{k}.npy", m)
    # Paths in a config file are relative to its folder, whatever the working directory.
    (tmp_path / "cfg" / "files.toml").write_text(base + "".join(f'{k} = "w/{k}.npy"\n' for k in weights))
    run_cli("simulate", "--config", tmp_path / "inline.toml", "--out", tmp_path / "a")
    run_cli("simulate", "--config", tmp_path / "cfg" / "files.toml", "--out", tmp_path / "b")
    assert np.array_equal(_positions(tmp_path / "a"), _positions(tmp_path / "b"))
    # --set: relative to the working directory (here an absolute path, and a relative one from cfg/).
    run_cli("simulate", "--config", tmp_path / "inline.toml", "--set", f"attention.Q={tmp_path / 'cfg' / 'w' / 'Q.npy'}",
            "--out", tmp_path / "c")
    assert np.array_equal(_positions(tmp_path / "a"), _positions(tmp_path / "c"))


def test_layers_take_npy_files(tmp_path, weights):
    for k, m in weights.items():
        np.save(tmp_path / f"{k}.npy", m)
    head = "seed = 5\n[init]\nn = 32\n[run]\nT = 0.4\ndt = 0.1\n[attention]\nQ = " + _inline(weights["Q"]) + \
           "\nK = " + _inline(weights["K"]) + "\n[[layers]]\nuntil = 0.2\n"
    (tmp_path / "inline.toml").write_text(head + "".join(f"{k} = {_inline(m)}\n" for k, m in weights.items()))
    (tmp_path / "files.toml").write_text(head + "".join(f'{k} = "{k}.npy"\n' for k in weights))
    run_cli("simulate", "--config", tmp_path / "inline.toml", "--out", tmp_path / "a")
    run_cli("simulate", "--config", tmp_path / "files.toml", "--out", tmp_path / "b")
    assert np.array_equal(_positions(tmp_path / "a"), _positions(tmp_path / "b"))


@pytest.mark.parametrize("content,message", [
    (None, "Q.npy"),                                   # missing
    (np.array([[1.0, np.nan], [0.0, 1.0]]), "non-finite"),
    (np.zeros((2, 2, 2)), "2-D"),
    ("not a .npy file", "Q.npy"),
])
def test_a_bad_matrix_file_exits_2_naming_it(tmp_path, content, message):
    path = tmp_path / "Q.npy"
    if isinstance(content, str):
        path.write_text(content)
    elif content is not None:
        np.save(path, content)
    r = run_cli("simulate", "--set", f"attention.Q={path}", "--out", tmp_path / "out", check=False)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "attention.Q" in r.stderr and message in r.stderr and str(path) in r.stderr, r.stderr
    assert not (tmp_path / "out").exists()

