"""docs/sinkhorn-transformer.md's worked example of `embed` and `couple` ("Texts as measures,
worked") runs as written and prints what the page shows.

The commands are read from the page's console block (the lines after "$ "), run in order from the
repository root with each out/ folder moved into a temporary folder, and compared with the lines
the page shows below each command: embed's counts, train's step count, and couple's links (the
word pairs, their masses and shares) and sizes. Timings, W1 and the marginal error are the run's own
and are not compared. The example's inputs are the files experiments/texts/make_vectors.py writes.
"""
import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np

from conftest import ROOT, run_cli

PAGE = ROOT / "docs" / "sinkhorn-transformer.md"
FOLDER = ROOT / "experiments" / "texts"


def _worked_example():
    """[(command words, [lines shown below it])] of the page's console block."""
    text = PAGE.read_text()
    start = text.index("### Texts as measures, worked")
    block = text[text.index("```console\n", start) + len("```console\n"):]
    block = block[:block.index("```")]
    steps = []
    for line in block.splitlines():
        if line.startswith("$ "):
            steps.append((shlex.split(line[2:]), []))
        else:
            steps[-1][1].append(line)
    return steps


def _links(lines):
    """(x, y, pi, share) of each link line ("the -> a  0.1324  (39.7%)")."""
    found = re.findall(r"^\s*(\S+) -> (\S+)\s+([0-9.e-]+)\s+\(([0-9.]+)%\)$", "\n".join(lines), re.MULTILINE)
    return [(x, y, float(pi), float(share)) for x, y, pi, share in found]


def test_the_example_inputs_are_what_the_script_writes(tmp_path):
    subprocess.run([sys.executable, str(FOLDER / "make_vectors.py")], check=True, cwd=tmp_path)
    sys.path.insert(0, str(FOLDER))
    try:
        import make_vectors
    finally:
        sys.path.remove(str(FOLDER))
    make_vectors.main(tmp_path)
    for name in ("vectors.txt", "cat.txt", "dog.txt"):
        assert (tmp_path / name).read_text() == (FOLDER / name).read_text(), name


def test_the_worked_example_runs_as_shown(tmp_path):
    steps = _worked_example()
    assert [words[1] for words, _ in steps] == ["embed", "train", "couple"]
    for words, shown in steps:
        # out/... into the temporary folder, the inputs from the repository root
        words = [str(tmp_path / w[4:]) if w.startswith("out/") else str(ROOT / w) if w.startswith("experiments/")
                 else w for w in words]
        out = Path(words[words.index("--out") + 1])
        r = run_cli(*words[1:])
        if words[1] == "embed":
            # "7 distinct words of 12 tokens in R^2": the counts of the summary
            n, tokens = map(int, re.search(r"(\d+) distinct words of (\d+) tokens", shown[0]).groups())
            summary = json.loads((out / "summary.json").read_text())
            assert (summary["n"], summary["tokens"], sum(summary["counts"])) == (n, tokens, tokens)
            weights = np.load(out / "weights.npy")
            assert weights.tolist() == (np.array(summary["counts"]) / tokens).tolist()
            assert summary["unknown"] == []
        elif words[1] == "train":
            assert re.search(r"steps (\d+)", shown[0]).group(1) == re.search(r"steps (\d+)", r.stdout).group(1)
        else:
            got, expected = _links(r.stdout.splitlines()), _links(shown)
            assert len(expected) == 8
            # The masses and shares as printed (4 significant digits and 3 of the share): the same
            # words and, to the printed digits, the same numbers (a tie, mat -> rug and carpet at
            # 1/12 each, may come in either order).
            assert sorted(got) == sorted(expected), r.stdout
            sizes = re.search(r"n (\d+), m (\d+)", shown[-1]).groups()
            summary = json.loads((out / "summary.json").read_text())
            assert (str(summary["n"]), str(summary["m"])) == sizes
            plan = np.load(out / "plan.npy")
            # A coupling of the two texts' weights: the l1 marginal error below couple's tol, 1e-9.
            assert plan.shape == tuple(map(int, sizes))
            assert summary["converged"] and summary["marginal_error"] < 1e-9
