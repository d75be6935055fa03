"""Shared fixtures: the CLI (TOKENFLOW_CLI, default build/tokenflow), running it, and one demo
run (--quick) reused by the reproduce, figure and report tests."""
import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CLI = Path(os.environ.get("TOKENFLOW_CLI", ROOT / "build" / "tokenflow")).resolve()
if "tokenflow" not in sys.modules and not os.environ.get("PYTHONPATH"):
    sys.path.insert(0, str(ROOT / "build" / "python"))


def run_cli(*args, check=True, env=None):
    """Runs the CLI quietly (CI=1: no progress bar); returns the CompletedProcess."""
    full_env = dict(os.environ, CI="1", **(env or {}))
    r = subprocess.run([str(CLI), *map(str, args)], capture_output=True, text=True, env=full_env, timeout=600)
    if check and r.returncode != 0:
        raise AssertionError(f"tokenflow {' '.join(map(str, args))} exited {r.returncode}: {r.stderr}")
    return r


def cli_has(command):
    """Whether the CLI has a subcommand (listed in `tokenflow --help`)."""
    if not CLI.exists():
        return False
    listing = run_cli("--help", check=False).stdout
    return re.search(rf"^\s+{re.escape(command)}\s", listing, re.MULTILINE) is not None


def interrupt_after(seconds):
    """Sends this process SIGINT (Ctrl-C) after `seconds`; returns the started timer to join."""
    import signal
    import threading

    timer = threading.Timer(seconds, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    return timer


@pytest.fixture
def python_sigint_handler():
    """Python's own Ctrl-C handler for a test that sends itself SIGINT. A process started in the
    background by a non-interactive shell (`make test &`) inherits SIGINT ignored, and Python then
    keeps it ignored: the test's SIGINT would be lost and its long run would go on for hours."""
    import signal

    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


@pytest.fixture(scope="session")
def cli():
    assert CLI.exists(), f"{CLI} not found: run `make build` first"
    return run_cli


@pytest.fixture(scope="session")
def demo_dir(tmp_path_factory):
    """One `tokenflow demo --quick` run (data, figures, report), shared by several tests."""
    assert CLI.exists(), f"{CLI} not found: run `make build` first"
    out = tmp_path_factory.mktemp("demo") / "demo"
    r = run_cli("demo", "--quick", "--out", out)
    assert "report" in r.stdout
    (out.parent / "demo.stderr").write_text(r.stderr)  # beside the folder: test_reproduce.py reads it
    return out


def load_json(path):
    return json.loads(Path(path).read_text())


def exact_cost_unit(C):
    """Upper bound on exact_ot's cost unit (src/ot/exact.cpp): max|C| 2^(1 - k) with
    k = 50 - ceil(log2(n + m + 1)); its plan's cost is within one unit of the optimum."""
    k = 50 - math.ceil(math.log2(C.shape[0] + C.shape[1] + 1))
    return abs(C).max() * 2.0 ** (1 - k)
