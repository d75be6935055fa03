"""docs/outputs.md against real runs: each command runs at a small size, and the files it writes,
the shapes of its .npy files, the columns of its .csv files and the fields of its summary.json are
compared with the page's tables (a file or field marked "(with ...)" may be absent)."""
import csv
import json
import os
import re

import numpy as np
import pytest

from conftest import ROOT, run_cli

PAGE = (ROOT / "docs" / "outputs.md").read_text()
# Fresh point clouds on every run (only their shapes matter here); TOKENFLOW_TEST_SEED=<seed> replays.
SEED = int(os.environ.get("TOKENFLOW_TEST_SEED", np.random.SeedSequence().entropy % 2**31))


def _section(command):
    return PAGE.split(f"## `tokenflow {command}`", 1)[1].split("\n## ", 1)[0]


def _rows(command):
    """[(file, shape or columns, what it holds)] of a command's table."""
    return [tuple(c.strip() for c in line.strip("|").split("|"))
            for line in _section(command).splitlines() if re.match(r"\| `[^`]+` \|", line)]


def _columns(text, d):
    """The CSV columns a cell lists, `mean_0 .. mean_(d-1)` expanded."""
    names = []
    for item in re.findall(r"`([^`]+)`", text):
        m = re.fullmatch(r"(\w+)_0 \.\. \1_\(d-1\)", item)
        names += [f"{m.group(1)}_{i}" for i in range(d)] if m else [item]
    return names


def _fields(command):
    """(every field the page lists, the fields it marks optional) of a command's summary.json."""
    text = _section(command).split("summary.json:", 1)[1]
    text = re.sub(r"\n", " ", text)
    listed = set(re.findall(r"`(\w+)`", re.sub(r"\(with `[^)]*\)", lambda m: re.sub(r"`", "", m.group(0)), text)))
    optional = set()
    for m in re.finditer(r"((?:`\w+`(?:,| and)? )+)\(with", text):
        optional |= set(re.findall(r"`(\w+)`", m.group(1)))
    return listed, optional


def _check(command, out, sizes):
    rows = _rows(command)
    documented = {r[0].strip("`") for r in rows}
    written = {p.name for p in out.iterdir()} - {".tokenflow-outputs"}
    assert written <= documented, f"{command} writes {sorted(written - documented)}, which docs/outputs.md does not list"
    for name, shape, holds in rows:
        name = name.strip("`")
        if "(with" in holds or "(when" in holds:
            continue
        assert name in written, f"docs/outputs.md lists {name} for {command}; the run did not write it"
    for name, shape, _ in rows:
        path = out / name.strip("`")
        if not path.exists():
            continue
        if path.suffix == ".npy":
            dims = [sizes[s] if s in sizes else int(s) for s in shape.split(" x ")]
            assert list(np.load(path).shape) == dims, f"{command} {path.name}: shape {np.load(path).shape}, page {shape}"
        elif path.suffix == ".csv":
            header = next(csv.reader(path.open()))
            assert header == _columns(shape, sizes["d"]), f"{command} {path.name}: {header}"
    summary = set(json.loads((out / "summary.json").read_text()))
    listed, optional = _fields(command)
    assert summary <= listed, f"{command}: summary.json fields not on the page: {sorted(summary - listed)}"
    assert listed - optional <= summary, f"{command}: fields on the page the run lacks: {sorted(listed - optional - summary)}"


@pytest.fixture(scope="module")
def clouds(tmp_path_factory):
    d = tmp_path_factory.mktemp("clouds")
    rng = np.random.default_rng(SEED)
    print(f"TOKENFLOW_TEST_SEED={SEED}")
    np.save(d / "x.npy", rng.normal(size=(30, 2)))
    np.save(d / "y.npy", rng.normal(size=(20, 2)))
    (d / "vectors.txt").write_text("3 2\ncat 1 0\ndog 0 1\nmat 0.5 0.5\n")
    return d


def test_simulate(tmp_path):
    run_cli("simulate", "--set", "init.n=64", "--set", "run.T=0.1", "--set", "run.save_every=5",
            "--set", "run.checkpoint_every=5", "--out", tmp_path)
    _check("simulate", tmp_path, {"n": 64, "d": 2, "F": len(np.load(tmp_path / "times.npy"))})


def test_gaussian(tmp_path):
    run_cli("gaussian", "--set", "run.T=0.5", "--out", tmp_path)
    _check("gaussian", tmp_path, {"d": 2, "F": len(np.load(tmp_path / "times.npy"))})


def test_meanfield_and_stability(tmp_path):
    run_cli("meanfield", "--set", "meanfield.ns=[16,32]", "--set", "meanfield.seeds=1", "--out", tmp_path / "mf")
    _check("meanfield", tmp_path / "mf", {"d": 2})
    run_cli("stability", "--set", "init.n=32", "--set", "run.T=0.2", "--out", tmp_path / "st")
    _check("stability", tmp_path / "st", {"d": 2})


def test_ot_and_wasserstein(tmp_path, clouds):
    run_cli("ot", "--x", clouds / "x.npy", "--y", clouds / "y.npy", "--out", tmp_path / "ot")
    _check("ot", tmp_path / "ot", {"n": 30, "m": 20, "d": 2})
    run_cli("wasserstein", "--x", clouds / "x.npy", "--y", clouds / "y.npy", "--out", tmp_path / "w")
    _check("wasserstein", tmp_path / "w", {"n": 30, "m": 20, "d": 2})


def test_train_couple_and_embed(tmp_path, clouds):
    run_cli("train", "--set", "train.steps=3", "--set", "task.n=4", "--set", "train.test_pairs=4",
            "--set", "train.batch=2", "--out", tmp_path / "train")
    _check("train", tmp_path / "train", {"d": 2})
    run_cli("couple", "--model", tmp_path / "train" / "model.bin", "--x", clouds / "x.npy", "--y", clouds / "y.npy",
            "--out", tmp_path / "couple")
    _check("couple", tmp_path / "couple", {"n": 30, "m": 20, "d": 2})
    run_cli("embed", "--vectors", clouds / "vectors.txt", "--text", "cat dog cat", "--out", tmp_path / "embed")
    _check("embed", tmp_path / "embed", {"n": 2, "d": 2})


def test_getting_started_first_run_writes_what_the_page_says(tmp_path):
    """Getting started's first command, run as written: the files its paragraph names and no others
    (no frames: run.save_every defaults to 0), the diagnostics' rows at the times it names, and the
    frames the page says --set run.save_every=10 adds."""
    page = (ROOT / "docs" / "getting-started.md").read_text()
    section = page.split("## 2. A first run from the command line", 1)[1]
    command = re.search(r"^```sh\n(build/tokenflow simulate [^\n]*)\n```", section, re.M).group(1)
    prose = " ".join(section.split("```", 2)[2].strip().split("\n\n", 1)[0].split())
    named, added = prose.split("It saves no frames", 1)
    words = command.split()[1:]
    out = words.index("--out") + 1
    words[out] = str(tmp_path / "first")
    run_cli(*words)
    written = {p.name for p in (tmp_path / "first").iterdir()} - {".tokenflow-outputs"}
    assert written == set(re.findall(r"`(\w+\.(?:npy|csv|json))`", named)), written
    rows = np.loadtxt(tmp_path / "first" / "diagnostics.csv", delimiter=",", skiprows=1, ndmin=2)
    times = [float(t) for t in re.findall(r"at t = ([\d.]+) and t = ([\d.]+)", named)[0]]
    assert rows[:, 0].tolist() == times
    every = re.search(r"`--set run\.save_every=(\d+)` adds", added)
    words[out] = str(tmp_path / "frames")
    run_cli(*words, "--set", f"run.save_every={every.group(1)}")
    frames = {p.name for p in (tmp_path / "frames").iterdir()} - written - {".tokenflow-outputs"}
    assert frames == set(re.findall(r"`(\w+\.npy)`", added)), frames
