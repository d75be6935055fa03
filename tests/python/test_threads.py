"""tokenflow's choice of threads (docs/python.md, "Threads"): OpenMP's passive wait policy set when
the package loads OpenMP (and seen by OpenMP itself), the user's choice kept, the spinning case of
an OpenMP loaded by another library first, the overrides, and results that do not depend on it."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import tokenflow

PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(tokenflow.__file__)))


def run(code: str, **env) -> subprocess.CompletedProcess:
    """`code` in a fresh interpreter with the package on its path and `env` added (None removes)."""
    full = dict(os.environ, PYTHONPATH=PACKAGE)
    for key in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "TOKENFLOW_PARALLEL_MIN_PAIRS", "OMP_DISPLAY_ENV"):
        full.pop(key, None)
    full.update({k: v for k, v in env.items() if v is not None})
    return subprocess.run([sys.executable, "-c", code], env=full, capture_output=True, text=True, timeout=300)


POLICY = "import json, os, tokenflow; print(json.dumps([tokenflow.thread_policy(), os.environ.get('OMP_WAIT_POLICY')]))"


def test_passive_wait_policy_reaches_openmp_and_does_not_leak():
    r = run(POLICY, OMP_DISPLAY_ENV="TRUE")  # libgomp prints its settings when it loads
    assert r.returncode == 0, r.stderr
    policy, left = json.loads(r.stdout.splitlines()[-1])
    assert policy["wait_policy"] == "passive" and left is None  # removed again: child processes do not inherit it
    assert "OMP_WAIT_POLICY = 'PASSIVE'" in r.stderr, r.stderr
    assert policy["parallel_min_pairs"] == 2**15 and policy["threads"] >= 1


def test_the_users_wait_policy_is_kept():
    r = run(POLICY, OMP_WAIT_POLICY="active", OMP_DISPLAY_ENV="TRUE")
    policy, left = json.loads(r.stdout.splitlines()[-1])
    assert policy["wait_policy"].startswith("user's (OMP_WAIT_POLICY=active") and left == "active"
    assert "OMP_WAIT_POLICY = 'ACTIVE'" in r.stderr


def test_openmp_loaded_first_keeps_threads_for_large_problems_only():
    pytest.importorskip("torch")  # Debian's torch loads libgomp with its default (spinning) policy
    r = run("import torch\n" + POLICY)
    policy, _ = json.loads(r.stdout.splitlines()[-1])
    assert policy["wait_policy"].startswith("active") and policy["parallel_min_pairs"] == 2**22


def test_overrides():
    r = run(POLICY, TOKENFLOW_PARALLEL_MIN_PAIRS="1000")
    assert json.loads(r.stdout.splitlines()[-1])[0]["parallel_min_pairs"] == 1000
    r = run("import tokenflow", TOKENFLOW_PARALLEL_MIN_PAIRS="many")
    assert r.returncode != 0 and "TOKENFLOW_PARALLEL_MIN_PAIRS: is 'many'; accepted: an integer >= 0" in r.stderr
    before = tokenflow.set_thread_policy(threads=1, parallel_min_pairs=7)
    try:
        assert tokenflow.thread_policy()["threads"] == 1 and tokenflow.thread_policy()["parallel_min_pairs"] == 7
    finally:
        tokenflow.set_thread_policy(threads=before["threads"], parallel_min_pairs=before["parallel_min_pairs"])
    assert tokenflow.thread_policy() == before
    with pytest.raises(tokenflow.InputError, match="threads"):
        tokenflow.set_thread_policy(threads=0)
    with pytest.raises(tokenflow.InputError, match="parallel_min_pairs"):
        tokenflow.set_thread_policy(parallel_min_pairs=-1)
    assert tokenflow.thread_policy()["adaptive"] is True
    before = tokenflow.set_thread_policy(adaptive=False)
    try:
        assert tokenflow.thread_policy()["adaptive"] is False
    finally:
        tokenflow.set_thread_policy(adaptive=before["adaptive"])
    assert tokenflow.thread_policy()["adaptive"] is True
    for bad in (2, "yes", None.__class__):
        with pytest.raises(tokenflow.InputError, match="adaptive"):
            tokenflow.set_thread_policy(adaptive=bad)


def test_results_do_not_depend_on_the_threads():
    # Each soft-min row is summed in one thread and the column passes combine their blocks in a
    # fixed order (src/ot/stages.cpp), so one thread and several give the same bits.
    rng = np.random.default_rng()
    x, y = rng.normal(size=(300, 2)), rng.normal(size=(250, 2)) + 1.0
    plans = []
    # Every thread on every pass (the governor off), one thread, and the governor's choice.
    for threads, min_pairs, adaptive in ((None, 1, False), (1, 1, True), (None, 1, True)):
        before = tokenflow.set_thread_policy(threads=threads, parallel_min_pairs=min_pairs, adaptive=adaptive)
        try:
            plans.append(tokenflow.sinkhorn(x, y, epsilon=0.05, operator="dense", progress=False).plan)
        finally:
            tokenflow.set_thread_policy(threads=before["threads"], parallel_min_pairs=before["parallel_min_pairs"],
                                        adaptive=before["adaptive"])
    assert np.array_equal(plans[0], plans[1]) and np.array_equal(plans[0], plans[2])
