"""Every example in README.md and docs/ runs as written from the repository root.

- Commands (found by bench/doc_examples.py): the CLI under test stands in for build/tokenflow and
  each ``--out`` folder is moved into a temporary folder (the repository is not written to);
  everything else is as written.
- Python: the ```python blocks of each document, run in order as one script (build/python on the
  path), in a temporary working folder; without PyTorch (optional: python3-torch), the blocks that
  use tokenflow.torch are left out.
- C++: the code blocks of docs/cpp.md are the files of tests/install, which the install test builds
  against an installed prefix.
The examples that take over 20 s (the demo, the README's simulate example, the default meanfield
sweep, the stability study) run when TOKENFLOW_DOC_EXAMPLES is "all" (``make test-docs``) or
"long"; the fast tier runs the others. "long" runs the long ones only: ``make check`` runs the fast
tier first, so each example runs once.
With TOKENFLOW_DOC_EXAMPLE_SIZES=ci (``make check``), the long studies whose statistics a C++ test
already checks at full strength run once more at a smaller size (CI_SIZES: the same command, its
size flags or keys changed, so the documented words, pipeline and outputs are still run); the
full-size runs stay in ``make test-docs`` and ``make docs-runs``.
"""
import importlib.util
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import CLI, ROOT

sys.path.insert(0, str(ROOT / "bench"))
from doc_examples import python_examples, shell_examples, split_fences  # noqa: E402

# Above 20 s each on 2 cores (AMD EPYC Zen 3): run by make check only. The README's simulate
# example (n = 4096, 40 rk4 steps) took 29 s, `demo --quick` 15 - 30 s, the sinkhorn meanfield
# study 44 s; the full demo, the default meanfield sweep, the stability study and the full
# universal-approximation sweep, the 3000-step matching training and the large-n studies (meanfield
# to n = 10^6, clustering of 10^5 tokens) take minutes; the metastability staircase at the authors'
# beta (`reproduce metastability --long`) 58 s.
LONG = ("demo ", "meanfield --out", "meanfield --set attention.kind=sinkhorn", "stability ",
        "simulate --config experiments/demo.toml", "reproduce universal-approximation --out",
        "train --config experiments/matching.toml", "reproduce meanfield --large", "reproduce clustering --out",
        "meanfield --large", "reproduce metastability --long", "simulate --config experiments/sinkhorn_large.toml",
        "reproduce clustering --random-weights", "train --config experiments/matching_implicit_w48.toml")
# make check's sizes for the long studies (TOKENFLOW_DOC_EXAMPLE_SIZES=ci): (the words as written,
# the words run instead). Each full-size study is checked elsewhere: the n^{-1/2} rate by the C++
# long test MeanField.ErrorsShrinkAtTheRateOneOverSqrtN, the fast summation's contract by
# FastSummationField.*, training by Train.* and test_model_api.py, the demo's pipeline by
# `demo --quick` (also a long example here) and OutputDirCli.ReproduceAndDemoKeepTheUsersSubfolders.
CI_SIZES = (
    ("meanfield --out", "meanfield --set meanfield.ns=[128,512,2048] --set meanfield.seeds=4 --out"),
    ("reproduce meanfield --large --out", "reproduce meanfield --tour --out"),  # n to 4096: fast summation
    ("reproduce clustering --out", "reproduce clustering --quick --out"),
    ("reproduce meanfield --large --random-weights --out", "reproduce meanfield --tour --random-weights --out"),
    ("reproduce clustering --random-weights --out", "reproduce clustering --quick --random-weights --out"),
    ("reproduce universal-approximation --out", "reproduce universal-approximation --quick --out"),
    ("train --config experiments/matching.toml --out", "train --config experiments/matching.toml --set train.steps=300 --out"),
    ("demo --out", None),  # None: not run again (demo --quick runs the same pipeline)
    # The implicit-gradient training-health runs (1500 steps, minutes each): 60 steps, the same keys.
    ("train --config experiments/matching_implicit_w48.toml --set train.seed=4",
     "train --config experiments/matching_implicit_w48.toml --set train.seed=4 --set train.steps=60"),
    # Sinkhorn attention through the grid from 10^5 tokens (the grid from n = 4096) and its dense
    # comparison at 10^4 (a minute): smaller n, the same settings.
    ("simulate --config experiments/sinkhorn_large.toml --out",
     "simulate --config experiments/sinkhorn_large.toml --set init.n=5000 --out"),
    ("simulate --config experiments/sinkhorn_large.toml --set init.n=10000 --set attention.summation=dense",
     "simulate --config experiments/sinkhorn_large.toml --set init.n=2000 --set attention.summation=dense"),
)
DOC_EXAMPLES = os.environ.get("TOKENFLOW_DOC_EXAMPLES", "")
CI_SIZED = os.environ.get("TOKENFLOW_DOC_EXAMPLE_SIZES", "written") == "ci"
RUN_ALL = DOC_EXAMPLES in ("all", "long")
ONLY_LONG = DOC_EXAMPLES == "long"
WITHOUT = () if importlib.util.find_spec("torch") else ("tokenflow.torch",)


def _example_id(example):
    return f"{example[0]}: {example[1][:70]}"


def test_the_docs_have_examples():
    assert len(shell_examples()) >= 10 and len(list(python_examples())) >= 1


def at_ci_size(command):
    """The command as make check runs it: CI_SIZES's smaller form where there is one, else as written
    (None: not run)."""
    args = command.split(" ", 1)[-1]
    for written, smaller in CI_SIZES:
        if args.startswith(written):
            return None if smaller is None else command.replace(written, smaller, 1)
    return command


def test_ci_sizes_name_documented_long_examples():
    """Every CI_SIZES entry matches a long example of the docs (a renamed example would otherwise run
    at full size in make check, or an entry would silently cover nothing)."""
    longs = [c.split(" ", 1)[-1] for _, c in shell_examples() if c.split(" ", 1)[-1].startswith(LONG)]
    for written, _ in CI_SIZES:
        assert any(a.startswith(written) for a in longs), written


@pytest.mark.parametrize("example", shell_examples(), ids=_example_id)
def test_command_runs_as_written(example, tmp_path):
    doc, command = example
    is_long = command.split(" ", 1)[-1].startswith(LONG)
    if is_long and not RUN_ALL:
        pytest.skip("takes minutes: make check runs it (TOKENFLOW_DOC_EXAMPLES=long or all)")
    if not is_long and ONLY_LONG:
        pytest.skip("the fast tier (make test) runs it")
    if CI_SIZED:
        command = at_ci_size(command)
        if command is None:
            pytest.skip("make check: its smaller form runs (CI_SIZES); make test-docs runs it as written")
    words = shlex.split(command)
    assert words[0] == "build/tokenflow"
    words[0] = str(CLI)
    if "--out" in words:
        k = words.index("--out") + 1
        words[k] = str(tmp_path / Path(words[k]).name)
    r = subprocess.run(words, cwd=ROOT, capture_output=True, text=True, env=dict(os.environ, CI="1"), timeout=1800)
    assert r.returncode == 0, f"{doc}: `{command}` exited {r.returncode}: {r.stderr[-2000:]}"
    assert r.stdout.strip(), f"{doc}: `{command}` printed nothing"


@pytest.mark.parametrize("doc,script", list(python_examples(without=WITHOUT)),
                         ids=lambda v: v if v.endswith(".md") else "")
def test_python_examples_run(doc, script, tmp_path):
    if ONLY_LONG:
        pytest.skip("the fast tier (make test) runs it")
    env = dict(os.environ, CI="1", PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    r = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, env=env,
                       timeout=600)
    assert r.returncode == 0, f"{doc}'s Python examples failed: {r.stderr[-3000:]}"


def test_cpp_example_is_the_built_consumer():
    if ONLY_LONG:
        pytest.skip("the fast tier (make test) runs it")
    _, blocks = split_fences((ROOT / "docs" / "cpp.md").read_text())
    shown = {language: body for language, body in blocks}
    assert shown["cmake"] == (ROOT / "tests/install/CMakeLists.txt").read_text()
    assert shown["cpp"] == (ROOT / "tests/install/consumer.cpp").read_text()
