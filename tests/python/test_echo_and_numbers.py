"""Messages quote the user's input briefly and as written, and numbers at the edges of their types are
read as given: every echo of a word or value is capped (include/tokenflow/echo.hpp), an integer
beyond int64 is quoted as written (never wrapped), weights up to the largest double normalize
without overflow, and data beyond float32's range is refused for dtype f32 naming dtype. Inputs are
drawn fresh each run (TOKENFLOW_TEST_SEED replays them)."""
import json
import os
import random
import subprocess

import numpy as np
import pytest

import tokenflow
from conftest import CLI

SEED = int(os.environ.get("TOKENFLOW_TEST_SEED") or random.SystemRandom().randrange(2**32))
RNG = random.Random(SEED)
# The longest line a message may be: one line, its quoted values capped at 80 characters each, a
# handful of them, plus paths.
LONGEST_LINE = 1200
TINY = {"model": {"width": 8, "layers": 1, "heads": 2, "k": 4, "sinkhorn_iters": 8},
        "train": {"steps": 2, "batch": 2, "lr": 1e-2, "test_pairs": 2}}


def cli(*args):
    return subprocess.run([str(CLI), *map(str, args)], capture_output=True, text=True,
                          env=dict(os.environ, CI="1"), timeout=300)


def long_word():
    """A word of 10^4 to 2 10^5 letters (no vector has it)."""
    return "".join(RNG.choice("abcdefghij") for _ in range(RNG.randrange(10_000, 200_000)))


def write_vectors(path, words, d=3):
    with open(path, "w") as f:
        for w in words:
            f.write(w + " " + " ".join(repr(RNG.gauss(0, 1)) for _ in range(d)) + "\n")


def test_unknown_words_are_echoed_briefly(tmp_path):
    write_vectors(tmp_path / "vectors.txt", ["alpha", "beta", "gamma"])
    words = [long_word() for _ in range(RNG.randrange(1, 4))]
    (tmp_path / "text.txt").write_text(" ".join(["alpha", *words, "beta"]))
    r = cli("embed", "--vectors", tmp_path / "vectors.txt", "--text-file", tmp_path / "text.txt", "--out", tmp_path / "e")
    assert r.returncode == 0, r.stderr[:2000]
    for line in r.stderr.splitlines():
        assert len(line) < LONGEST_LINE, f"seed {SEED}: a stderr line of {len(line)} characters"
    assert "unknown word" in r.stderr and "..." in r.stderr
    # The same words in a texts task: the run's notes (printed and in summary.json) are short too.
    pair = {"x": f"alpha {words[0]} beta", "y": "gamma beta", "links": [[0, 0], [2, 1]]}
    for name in ("train.jsonl", "test.jsonl"):
        (tmp_path / name).write_text(json.dumps(pair) + "\n")
    task = {"kind": "texts", "path": str(tmp_path / "train.jsonl"), "test_path": str(tmp_path / "test.jsonl"),
            "vectors": str(tmp_path / "vectors.txt")}
    result = tokenflow.train({**TINY, "task": task, "train": {**TINY["train"], "test_pairs": 1}}, progress=False)
    for note in result.summary["notes"]:
        assert len(note) < LONGEST_LINE, f"seed {SEED}: a note of {len(note)} characters"


@pytest.mark.parametrize("index", [2**64 - 1, 2**63, 2**63 + RNG.randrange(1, 2**62), 2**64 - RNG.randrange(2, 2**40)])
def test_a_link_index_beyond_int64_is_quoted_as_written(tmp_path, index):
    write_vectors(tmp_path / "vectors.txt", ["alpha", "beta"])
    good = {"x": "alpha beta", "y": "beta alpha", "links": [[0, 1], [1, 0]]}
    (tmp_path / "train.jsonl").write_text(json.dumps(good) + "\n" + json.dumps({**good, "links": [[index, 0]]}) + "\n")
    (tmp_path / "test.jsonl").write_text(json.dumps(good) + "\n")
    task = {"kind": "texts", "path": str(tmp_path / "train.jsonl"), "test_path": str(tmp_path / "test.jsonl"),
            "vectors": str(tmp_path / "vectors.txt")}
    with pytest.raises(tokenflow.InputError, match=rf"line 2: links: entry 0: i = {index} is out of range"):
        tokenflow.train({**TINY, "task": task, "train": {**TINY["train"], "test_pairs": 1}}, progress=False)


def test_weights_up_to_the_largest_double_normalize(tmp_path):
    """Weights whose sum overflows double are valid: the measures are the normalized ones."""
    n = RNG.randrange(2, 12)
    rng = np.random.default_rng(SEED)
    x, y = rng.normal(size=(n, 2)), rng.normal(size=(n + 1, 2))
    big = 1e308 * rng.uniform(0.9, 1.0, size=n)  # their sum overflows double
    a = (big / big.max()) / (big / big.max()).sum()
    for name, v in (("x", x), ("y", y), ("big", big)):
        np.save(tmp_path / f"{name}.npy", v)
    want = cli("ot", "--x", tmp_path / "x.npy", "--y", tmp_path / "y.npy", "--method", "exact",
               "--out", tmp_path / "small")
    np.save(tmp_path / "a.npy", a)
    small = cli("ot", "--x", tmp_path / "x.npy", "--y", tmp_path / "y.npy", "--a", tmp_path / "a.npy",
                "--method", "exact", "--out", tmp_path / "normalized")
    got = cli("ot", "--x", tmp_path / "x.npy", "--y", tmp_path / "y.npy", "--a", tmp_path / "big.npy",
              "--method", "exact", "--dense-plan", "--out", tmp_path / "huge")
    assert want.returncode == 0 and small.returncode == 0, small.stderr
    assert got.returncode == 0, f"seed {SEED}: {got.stderr}"
    s_small = json.loads((tmp_path / "normalized" / "summary.json").read_text())
    s_huge = json.loads((tmp_path / "huge" / "summary.json").read_text())
    assert s_huge["cost"] == pytest.approx(s_small["cost"], rel=1e-12)
    plan = np.load(tmp_path / "huge" / "plan.npy")
    assert plan.sum() == pytest.approx(1.0, abs=1e-12) and plan.sum(axis=1) == pytest.approx(a, abs=1e-12)
    w = cli("wasserstein", "--x", tmp_path / "x.npy", "--y", tmp_path / "y.npy", "--a", tmp_path / "big.npy",
            "--method", "exact", "--out", tmp_path / "w")
    assert w.returncode == 0, f"seed {SEED}: {w.stderr}"
    # Link weights of a texts pair: [1e308, 1e308] is a valid target (two links of equal mass).
    write_vectors(tmp_path / "vectors.txt", ["alpha", "beta"])
    pair = {"x": "alpha beta", "y": "beta alpha", "links": [[0, 1], [1, 0]], "weights": [1e308, 1e308]}
    for name in ("train.jsonl", "test.jsonl"):
        (tmp_path / name).write_text(json.dumps(pair) + "\n")
    task = {"kind": "texts", "path": str(tmp_path / "train.jsonl"), "test_path": str(tmp_path / "test.jsonl"),
            "vectors": str(tmp_path / "vectors.txt")}
    r = tokenflow.train({**TINY, "task": task, "train": {**TINY["train"], "test_pairs": 1}}, progress=False)
    assert np.isfinite(r.summary["test_w1"])


def test_float32_training_on_data_beyond_its_range_names_dtype(tmp_path):
    scale = 10.0 ** RNG.uniform(38.6, 300)
    rng = np.random.default_rng(SEED)
    pairs = []
    for _ in range(2):
        n = int(rng.integers(2, 6))
        pairs.append({"x": rng.normal(size=(n, 2)) * scale, "y": rng.normal(size=(n, 2)),
                      "target": np.eye(n) / n})
    for part in ("train", "test"):
        (tmp_path / "data" / part).mkdir(parents=True)
        for i, p in enumerate(pairs):
            np.savez(tmp_path / "data" / part / f"pair_{i}.npz", **p)
    r = cli("train", "--set", 'dtype="f32"', "--set", 'task.kind="dataset"', "--set",
            f'task.path="{tmp_path / "data"}"', "--set", "train.steps=2", "--out", tmp_path / "out")
    assert r.returncode == 2, f"seed {SEED}: exit {r.returncode}: {r.stderr}"
    assert r.stderr.count("\n") == 1 and "task.path" in r.stderr and 'use dtype = "f64"' in r.stderr, r.stderr
    assert "train.lr" not in r.stderr, r.stderr
    assert not (tmp_path / "out").exists()
    # f64 trains on the same data.
    r = cli("train", "--set", 'task.kind="dataset"', "--set", f'task.path="{tmp_path / "data"}"', "--set",
            "train.steps=2", "--out", tmp_path / "f64")
    assert r.returncode in (0, 1), r.stderr
    assert (tmp_path / "f64" / "summary.json").exists() or r.returncode == 1


def test_integer_lists_beyond_int64_are_refused_as_written(tmp_path):
    value = RNG.choice(["1e19", "9.3e18", "-1e30", "1e300"])
    r = cli("meanfield", "--set", f"meanfield.ns=[256, {value}]", "--out", tmp_path / "m")
    assert r.returncode == 2, r.stderr
    assert "meanfield.ns" in r.stderr and "outside the range of a 64-bit integer" in r.stderr, r.stderr
