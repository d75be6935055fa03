"""Hostile input files through Python: a deeply nested TOML file, a fifo, /dev/zero or a directory
given as a path raises tokenflow.InputError naming the file (a ValueError), without crashing the
interpreter and without blocking. Each check runs in a child interpreter with a time limit, so that
a crash or a hang fails the test instead of taking pytest down with it."""
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import tokenflow

PACKAGE_ROOT = str(Path(tokenflow.__file__).resolve().parent.parent)


def run_python(code, timeout=60):
    """Runs `code` in a fresh interpreter that imports tokenflow; returns the CompletedProcess."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([PACKAGE_ROOT, os.environ.get("PYTHONPATH", "")]))
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          env=env, timeout=timeout)


def expect_input_error(call, path, timeout=60):
    """`call` (Python source using `path`) raises tokenflow.InputError naming `path`."""
    r = run_python(f"""
        import tokenflow
        path = {str(path)!r}
        try:
            {call}
        except tokenflow.InputError as e:
            print("InputError:", e)
        else:
            print("no error")
        """, timeout=timeout)
    assert r.returncode == 0, f"the interpreter died (exit {r.returncode}): {r.stderr[-2000:]}"
    assert r.stdout.startswith("InputError:"), r.stdout + r.stderr
    assert str(path) in r.stdout, r.stdout
    return r.stdout


def model_bin(config: str) -> bytes:
    """A model.bin holding `config` and no tensors, sealed with its checksum (FNV-1a 64)."""
    import struct

    body = b"TFMODEL1" + struct.pack("<Q", len(config)) + config.encode() + struct.pack("<QQ", 0, 0)
    h = 0xCBF29CE484222325
    for byte in body:
        h = ((h ^ byte) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return body + struct.pack("<Q", h)


@pytest.mark.parametrize("kind", ["header", "arrays", "dotted"])
def test_deep_toml_raises_input_error(tmp_path, kind):
    text = {
        "header": "[" + ".".join(["a"] * 50000) + "]\nx = 1\n",
        "arrays": "a = " + "[" * 100000 + "1" + "]" * 100000 + "\n",
        "dotted": ".".join(["a"] * 50000) + " = 1\n",
    }[kind]
    path = tmp_path / "deep.toml"
    path.write_text(text)
    message = expect_input_error("tokenflow.simulate(path)", path, timeout=30)
    assert "levels deep" in message
    expect_input_error("tokenflow.gaussian(path)", path, timeout=30)
    # The config embedded in model.bin goes through the same checks.
    model = tmp_path / "model.bin"
    model.write_bytes(model_bin(text))
    expect_input_error("tokenflow.SinkhornTransformer.load(path)", model, timeout=30)


def test_deep_toml_in_process(tmp_path):
    """In this interpreter too (after the child checks above showed it does not crash)."""
    path = tmp_path / "deep.toml"
    path.write_text("[" + ".".join(["a"] * 50000) + "]\n")
    with pytest.raises(tokenflow.InputError, match="levels deep"):
        tokenflow.simulate(path)


@pytest.mark.parametrize("kind", ["fifo", "dev_zero", "directory"])
def test_special_files_raise_input_error_without_blocking(tmp_path, kind):
    if kind == "fifo":
        path = tmp_path / "fifo"
        os.mkfifo(path)
    elif kind == "dev_zero":
        path = Path("/dev/zero")
    else:
        path = tmp_path
    for call in ("tokenflow.simulate(path)", "tokenflow.SinkhornTransformer.load(path)",
                 "tokenflow.simulate({'init': {'kind': 'file', 'path': path}})"):
        message = expect_input_error(call, path, timeout=30)
        assert "not a regular file" in message, message


def test_model_file_promising_more_than_it_holds(tmp_path):
    path = tmp_path / "model.bin"
    path.write_bytes(model_bin("[model]\nd = 2\nwidth = 8\nheads = 2\nk = 4\nlayers = 100000\n"))
    assert path.stat().st_size < 600
    with pytest.raises(tokenflow.InputError, match="bytes left in the file"):
        tokenflow.SinkhornTransformer.load(path)
    path.write_bytes(model_bin("[model]\nd = 2\nwidth = 8\nheads = 2\nk = 4\nlayers = 200000000\n"))
    with pytest.raises(tokenflow.InputError, match="model.layers"):
        tokenflow.SinkhornTransformer.load(path)
