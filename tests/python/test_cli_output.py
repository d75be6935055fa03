"""What the CLI prints on success: one result line on stdout, read back from summary.json."""
import json

import numpy as np


def _summary(out):
    return json.loads((out / "summary.json").read_text())


def test_version_names_the_release_and_the_build(cli):
    r = cli("--version")
    assert r.returncode == 0
    assert r.stdout.startswith("tokenflow 0.1.0 (") and r.stdout.rstrip().endswith(")"), r.stdout
    assert "MPI" in r.stdout and ("AVX" in r.stdout or "baseline SIMD" in r.stdout)


def test_ot_and_wasserstein_print_their_headline_numbers(cli, tmp_path):
    rng = np.random.default_rng()
    np.save(tmp_path / "x.npy", rng.normal(size=(30, 2)))
    np.save(tmp_path / "y.npy", rng.normal(size=(25, 2)))
    out = tmp_path / "ot"
    r = cli("ot", "--x", tmp_path / "x.npy", "--y", tmp_path / "y.npy", "--out", out)
    s = _summary(out)
    lines = r.stdout.splitlines()
    assert len(lines) == 1 and lines[0].startswith("tokenflow ot: method sinkhorn, "), r.stdout
    assert f"cost {s['cost']:.6g}" in lines[0] and f"iterations {s['iterations']}" in lines[0]
    assert f"status {s['status']}" in lines[0] and lines[0].endswith(f"-> {out}")
    out = tmp_path / "w"
    r = cli("wasserstein", "--x", tmp_path / "x.npy", "--y", tmp_path / "y.npy", "--p", "1", "--out", out)
    s = _summary(out)
    assert r.stdout == f"tokenflow wasserstein: W_p {s['value']:.6g}, p 1, method exact, status optimal " \
                       f"({s['wall_seconds']:.3g} s) -> {out}\n"


def test_simulate_prints_the_final_state(cli, tmp_path):
    out = tmp_path / "run"
    r = cli("simulate", "--set", "init.n=40", "--set", "run.T=0.2", "--out", out)
    s = _summary(out)
    line = r.stdout.rstrip("\n")
    assert "\n" not in line and line.startswith("tokenflow simulate: n 40, d 2, kind softmax, ")
    assert f"effective rank {s['final']['effective_rank']:.6g}" in line
    assert f"clusters {s['final']['clusters']}" in line and f"status {s['status']}" in line


def test_reproduce_list_says_what_each_reproduction_recomputes(cli, tmp_path):
    # An earlier run's summary in --out is not this run's result: --list prints only the list.
    cli("simulate", "--set", "init.n=10", "--set", "run.T=0.1", "--out", tmp_path)
    rows = [line.split(None, 2) for line in cli("reproduce", "--list", "--out", tmp_path).stdout.splitlines()]
    assert rows and all(len(row) == 3 and row[1] in ("available", "pending") for row in rows)
    assert dict((row[0], row[2]) for row in rows)["blowup"].startswith("Softmax blows up")


def test_the_papers_names_point_to_the_keys(cli, tmp_path):
    # The papers' inverse temperature beta is attention.scale; POT's reg is epsilon.
    r = cli("simulate", "--set", "attention.beta=2", "--out", tmp_path / "a", check=False)
    assert r.returncode == 2 and "attention.beta: unknown key (did you mean 'attention.scale'?)" in r.stderr
    r = cli("simulate", "--set", "attention.reg=0.5", "--out", tmp_path / "b", check=False)
    assert r.returncode == 2 and "(did you mean 'attention.epsilon'?)" in r.stderr
