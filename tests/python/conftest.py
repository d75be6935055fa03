import os
import pathlib
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
CLI = os.environ.get("TOKENFLOW_CLI", str(ROOT / "build" / "tokenflow"))


def run_cli(*args, check=True):
    """Runs build/tokenflow with CI set (no progress bar); returns the CompletedProcess."""
    r = subprocess.run([CLI, *map(str, args)], capture_output=True, text=True, env={**os.environ, "CI": "1"})
    if check and r.returncode != 0:
        raise AssertionError(f"tokenflow {' '.join(map(str, args))} exited {r.returncode}: {r.stderr}")
    return r


@pytest.fixture
def cli():
    return run_cli
