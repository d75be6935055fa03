"""Resources are checked before they are spent (include/tokenflow/memory_budget.hpp).

Every command and Python function that sizes arrays from its input refuses a request beyond the
memory limit before allocating it: exit 2 (InputError in Python) with one line naming the key and
the size. The limit is set low here with TOKENFLOW_MEMORY_LIMIT (a fresh random value each run), and
each refusal is checked to come before the allocation: the refused process's peak resident memory
stays far below what the request needs.
"""
import os
import random
import struct
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import numpy as np
import pytest

from conftest import CLI, ROOT

SEED = int(os.environ.get("TOKENFLOW_TEST_SEED") or random.SystemRandom().randrange(2**32))
RNG = random.Random(SEED)
PYTHONPATH = str(ROOT / "build" / "python")

# What a refused process may reach: the program and its libraries (about 30 MiB for the CLI, 200
# MiB for Python with numpy and the module), far below the requests refused here (each at least
# 4 times the limit, and the limit at least 48 MiB above this).
CLI_PEAK_MIB = 120
PYTHON_PEAK_MIB = 400


def limit_mib():
    """A fresh limit, in MiB."""
    return RNG.randrange(64, 256)


def run_measured(argv, env=None, timeout=120):
    """(exit code, stderr, peak resident MiB, seconds) of a process: a Python wrapper waits for it,
    so the peak is this child's alone (RUSAGE_CHILDREN of the wrapper)."""
    wrapper = ("import resource, subprocess, sys\n"
               "r = subprocess.run(sys.argv[1:], stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)\n"
               "sys.stderr.write(r.stderr)\n"
               "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
               "sys.exit(r.returncode)\n")
    full_env = dict(os.environ, CI="1", PYTHONPATH=PYTHONPATH, **(env or {}))
    start = time.monotonic()
    r = subprocess.run([sys.executable, "-c", wrapper, *map(str, argv)], capture_output=True, text=True,
                       env=full_env, timeout=timeout)
    seconds = time.monotonic() - start
    peak_mib = int(r.stdout.strip().splitlines()[-1]) / 1024
    return r.returncode, r.stderr.strip(), peak_mib, seconds


def assert_refused(code, err, peak, key, peak_limit=CLI_PEAK_MIB, context=""):
    ctx = f"seed {SEED}: {context}: exit {code}, peak {peak:.0f} MiB, stderr: {err[-600:]}"
    assert code == 2, ctx
    assert err.count("\n") == 0, ctx
    assert key in err, ctx
    assert " needs " in err and "TOKENFLOW_MEMORY_LIMIT" in err, ctx
    assert peak < peak_limit, f"refused only after allocating: {ctx}"


def bomb_pair(path, claimed):
    """A pair file (.npz) whose x.npy member claims `claimed` bytes uncompressed in its headers, while
    its compressed data is a few bytes: the sizes in the local header and the central directory are
    rewritten."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as z:
        z.writestr("x.npy", b"\0" * 64)
        z.writestr("y.npy", b"\0" * 64)
        z.writestr("target.npy", b"\0" * 64)
    data = bytearray(path.read_bytes())
    # Local file header: signature PK\3\4, uncompressed size at offset 22 (4 bytes).
    local = data.find(b"PK\x03\x04")
    struct.pack_into("<I", data, local + 22, claimed)
    # Central directory entry: signature PK\1\2, uncompressed size at offset 24.
    central = data.find(b"PK\x01\x02")
    struct.pack_into("<I", data, central + 24, claimed)
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("trial", range(2))
def test_a_pair_file_claiming_a_huge_member_is_refused_before_inflating(tmp_path, trial):
    claimed = RNG.randrange(200, 4000) << 20  # 200 MiB to 4 GiB (the 32-bit size field's range)
    data = tmp_path / "data"
    bomb_pair(data / "train" / "pair_0.npz", claimed)
    bomb_pair(data / "test" / "pair_0.npz", claimed)
    assert (data / "train" / "pair_0.npz").stat().st_size < 1000
    code, err, peak, _ = run_measured([CLI, "train", "--set", 'task.kind="dataset"', "--set", f'task.path="{data}"',
                                       "--set", "train.steps=1", "--out", tmp_path / "out"])
    ctx = f"seed {SEED}: claimed {claimed} bytes: exit {code}, peak {peak:.0f} MiB: {err}"
    assert code == 2 and err.count("\n") == 0, ctx
    assert "x: its header claims" in err and "pair_0.npz" in err, ctx
    assert peak < CLI_PEAK_MIB, ctx
    assert not (tmp_path / "out").exists(), ctx


def inflating_pair(path, mib, kind):
    """A pair file (.npz) whose x.npy member inflates to `mib` MiB from a file of about mib KiB
    (deflate's zeros), its headers true: all zeros ("zeros": not a .npy), or the .npy header of a
    small array followed by zeros ("trailing": the member holds more than the header promises)."""
    import io
    path.parent.mkdir(parents=True, exist_ok=True)
    small = io.BytesIO()
    np.lib.format.write_array(small, np.zeros((3, 2)))
    head = b"" if kind == "zeros" else small.getvalue()
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as z:
        with z.open("x.npy", "w", force_zip64=True) as member:
            member.write(head)
            for _ in range(mib):
                member.write(bytes(1 << 20))
        for name in ("y", "target"):
            small = io.BytesIO()
            np.lib.format.write_array(small, np.eye(3) / 3 if name == "target" else np.zeros((3, 2)))
            z.writestr(f"{name}.npy", small.getvalue())


@pytest.mark.parametrize("kind", ["zeros", "trailing"])
def test_a_member_larger_than_its_npy_header_promises_is_refused_before_inflating(tmp_path, kind):
    mib = RNG.randrange(2 * CLI_PEAK_MIB, 4 * CLI_PEAK_MIB)
    data = tmp_path / "data"
    for part in ("train", "test"):
        inflating_pair(data / part / "pair_0.npz", mib, kind)
    code, err, peak, seconds = run_measured([CLI, "train", "--set", 'task.kind="dataset"', "--set",
                                             f'task.path="{data}"', "--set", "train.steps=1", "--out", tmp_path / "out"])
    ctx = f"seed {SEED}: {kind}, {mib} MiB: exit {code}, peak {peak:.0f} MiB, {seconds:.1f} s: {err}"
    assert code == 2 and err.count("\n") == 0, ctx
    assert "pair_0.npz: x:" in err and ("bad magic" if kind == "zeros" else "header promises 48 bytes") in err, ctx
    assert peak < CLI_PEAK_MIB, f"inflated before the refusal: {ctx}"
    assert not (tmp_path / "out").exists(), ctx


def test_gaussian_frames_are_refused_before_allocating(tmp_path):
    limit = limit_mib()
    env = {"TOKENFLOW_MEMORY_LIMIT": f"{limit}M"}
    # dopri5's grid of frames, fixed steps saving every step, and a long grid with large d.
    frames = RNG.choice([int(1e9), RNG.randrange(10**7, 10**8)])
    cases = [(["--set", f"run.grid_frames={frames}"], "run.grid_frames"),
             (["--set", 'run.integrator="euler"', "--set", "run.save_every=1", "--set", "run.dt=1e-9"],
              "run.save_every")]
    for args, key in cases:
        start = time.monotonic()
        code, err, peak, seconds = run_measured([CLI, "gaussian", *args, "--out", tmp_path / "g"], env=env)
        assert_refused(code, err, peak, key, context=" ".join(args))
        assert seconds < 10, f"seed {SEED}: {args}: {seconds:.1f} s before the refusal"
        assert not (tmp_path / "g").exists()


def test_simulate_and_train_sizes_are_refused_before_allocating(tmp_path):
    limit = limit_mib()
    env = {"TOKENFLOW_MEMORY_LIMIT": f"{limit}M"}
    n = RNG.randrange(limit, 4 * limit) * (1 << 20) // 8  # 6 n d doubles: at least 12 times the limit
    code, err, peak, _ = run_measured([CLI, "simulate", "--set", f"init.n={n}", "--out", tmp_path / "s"], env=env)
    assert_refused(code, err, peak, "init.n", context=f"simulate init.n={n}")
    # Held-out pairs of a generated task: test_pairs x n^2 doubles, at least 4 times the limit and
    # the largest part of the estimate (the message names the key that grew it most): 4000 n^2
    # doubles (1.2 GiB at n = 200, 4.8 GiB at n = 400) are more than the rest of it with one thread
    # (OMP_NUM_THREADS=1): the activations (about 2 n^2 KiB) and W_1's exact OT between the
    # model's n^2 atoms and the matching target's n (16 n^3 bytes: 0.95 GiB at n = 400).
    tasks_n = RNG.randrange(200, 400)
    test_pairs = max((4 * limit << 20) // (8 * tasks_n * tasks_n) + 1, RNG.randrange(4000, 8000))
    code, err, peak, _ = run_measured([CLI, "train", "--set", f"task.n={tasks_n}", "--set",
                                       f"train.test_pairs={test_pairs}", "--out", tmp_path / "t"],
                                      env=dict(env, OMP_NUM_THREADS="1"))
    assert_refused(code, err, peak, "train.test_pairs", context=f"train task.n={tasks_n} test_pairs={test_pairs}")


def test_transport_plans_and_matrices_are_refused_before_solving(tmp_path):
    limit = limit_mib()
    env = {"TOKENFLOW_MEMORY_LIMIT": f"{limit}M"}
    # n m 8 bytes at least 4 times the limit.
    n = int(np.sqrt((4 * limit << 20) / 8)) + RNG.randrange(1, 500)
    rng = np.random.default_rng(SEED)
    np.save(tmp_path / "x.npy", rng.normal(size=(n, 2)))
    np.save(tmp_path / "y.npy", rng.normal(size=(n, 2)))
    for args, key in [(["--method", "exact"], "method"), (["--operator", "dense"], "operator"),
                      (["--operator", "kernel"], "operator")]:
        code, err, peak, seconds = run_measured([CLI, "ot", "--x", tmp_path / "x.npy", "--y", tmp_path / "y.npy", *args,
                                                 "--out", tmp_path / "o"], env=env)
        assert_refused(code, err, peak, key, context=f"ot {args} n = {n}")
    code, err, peak, _ = run_measured([CLI, "wasserstein", "--x", tmp_path / "x.npy", "--y", tmp_path / "y.npy",
                                       "--method", "exact", "--out", tmp_path / "w"], env=env)
    assert_refused(code, err, peak, "method", context=f"wasserstein exact n = {n}")
    # Without a plan asked for, the default online operator solves in O(n + m) memory.
    code, err, _, _ = run_measured([CLI, "ot", "--x", tmp_path / "x.npy", "--y", tmp_path / "y.npy",
                                    "--max-iter", "3", "--out", tmp_path / "fine"], env=env)
    assert code == 0, f"seed {SEED}: {err}"


def test_python_plan_is_refused_before_solving():
    """tokenflow.sinkhorn(..., plan=True) on 10^5 x 10^5 points: refused at once, naming the size."""
    import tokenflow

    n = RNG.randrange(80_000, 120_000)
    rng = np.random.default_rng(SEED)
    x, y = rng.normal(size=(n, 2)), rng.normal(size=(n + 1, 2))
    start = time.monotonic()
    with pytest.raises(tokenflow.InputError, match=r"plan.*needs .*GiB, more than"):
        tokenflow.sinkhorn(x, y, plan=True)
    assert time.monotonic() - start < 2.0, f"seed {SEED}: n = {n}"


def test_python_refusals_under_a_limit_come_before_allocating(tmp_path):
    limit = limit_mib()
    n = int(np.sqrt((4 * limit << 20) / 8)) + RNG.randrange(1, 500)
    script = tmp_path / "requests.py"
    script.write_text(
        "import sys, numpy as np, tokenflow\n"
        f"n = {n}\n"
        "x = np.random.default_rng(0).normal(size=(n, 2))\n"
        "kind = sys.argv[1]\n"
        "try:\n"
        "    if kind == 'plan': tokenflow.sinkhorn(x, x + 1, plan=True)\n"
        "    elif kind == 'exact': tokenflow.exact_ot(x, x + 1)\n"
        "    elif kind == 'gaussian': tokenflow.gaussian({'run': {'grid_frames': 10**9}})\n"
        "    elif kind == 'simulate': tokenflow.simulate({'init': {'n': 10**11}})\n"
        "except tokenflow.InputError as e:\n"
        "    sys.stderr.write(str(e))\n"
        "    sys.exit(2)\n"
        "sys.exit(0)\n")
    # Python names its own arguments (exact_ot's plan is sized by x and y), the configs their keys.
    for kind, key in [("plan", "plan"), ("exact", "x"), ("gaussian", "run.grid_frames"),
                      ("simulate", "init.n")]:
        code, err, peak, _ = run_measured([sys.executable, script, kind],
                                          env={"TOKENFLOW_MEMORY_LIMIT": f"{limit}M"})
        assert_refused(code, err, peak, key, peak_limit=PYTHON_PEAK_MIB, context=f"python {kind} n = {n}")


def test_a_bad_memory_limit_is_refused(tmp_path):
    r = subprocess.run([str(CLI), "gaussian", "--out", str(tmp_path / "g")], capture_output=True, text=True,
                       env=dict(os.environ, CI="1", TOKENFLOW_MEMORY_LIMIT="lots"))
    assert r.returncode == 2 and "TOKENFLOW_MEMORY_LIMIT" in r.stderr and "is not a size" in r.stderr, r.stderr
    assert not (tmp_path / "g").exists()
