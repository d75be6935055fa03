"""Long computations release the GIL, and Ctrl-C (SIGINT) stops them with KeyboardInterrupt."""
import threading
import time

import numpy as np
import pytest

import tokenflow
from conftest import interrupt_after

# Both long runs last 20-70 s if not interrupted (measured on 2 loaded cores: 1000 steps of
# 2.25e6 pairs; 5000 Sinkhorn iterations on 1.44e6 pairs): long next to the 0.5 s before Ctrl-C,
# but bounded, so that a lost signal fails the test instead of holding the suite for hours.
LONG_RUN = {"init": {"n": 1500}, "run": {"T": 10.0, "dt": 0.01}}


# Python's Ctrl-C handler for every test here (see the fixture in conftest.py).
pytestmark = pytest.mark.usefixtures("python_sigint_handler")


@pytest.mark.skipif(threading.current_thread() is not threading.main_thread(), reason="signals go to the main thread")
def test_ctrl_c_stops_simulate():
    start = time.monotonic()
    timer = interrupt_after(0.5)
    with pytest.raises(KeyboardInterrupt):
        tokenflow.simulate(LONG_RUN)
    timer.join()
    assert time.monotonic() - start < 30
    # The library is usable afterwards.
    assert tokenflow.simulate({"init": {"n": 8}, "run": {"T": 0.1}}).status == "finished"


def test_ctrl_c_stops_sinkhorn():
    x = np.random.default_rng().normal(size=(1200, 2))
    start = time.monotonic()
    timer = interrupt_after(0.5)
    with pytest.raises(KeyboardInterrupt):
        tokenflow.sinkhorn(x, x + 3.0, epsilon=1e-4, tol=1e-300, max_iter=5000)
    timer.join()
    assert time.monotonic() - start < 30


def test_simulate_releases_the_gil():
    done = threading.Event()
    result = {}

    def work():
        # About 8e8 attention pairs: long enough (a fraction of a second even with the fused
        # kernels) for the main thread to run many loops if, and only if, the GIL is released.
        result["r"] = tokenflow.simulate({"init": {"n": 2000}, "run": {"T": 0.5, "dt": 0.01}})
        done.set()

    worker = threading.Thread(target=work)
    worker.start()
    ticks = 0
    while not done.is_set():  # pure Python: runs only while the worker does not hold the GIL
        ticks += 1
    worker.join()
    assert result["r"].status == "finished"
    assert ticks > 10000, f"the main thread ran {ticks} loops while simulate ran"


# The held-out evaluation of a fresh run: 400 pairs of 64 tokens through the model and 60 unrolled
# Sinkhorn iterations each, far longer than the 1 s before Ctrl-C (3000 such pairs ran 15 minutes on
# 2 loaded cores). The untrained model is evaluated before the first step; a stop request is polled
# between pairs, so Ctrl-C lands within a pair's time.
LONG_EVALUATION = {"task": {"n": 64}, "model": {"sinkhorn_iters": 60}, "train": {"test_pairs": 400, "steps": 5}}


@pytest.mark.skipif(threading.current_thread() is not threading.main_thread(), reason="signals go to the main thread")
def test_ctrl_c_stops_train_during_an_evaluation():
    timer = interrupt_after(1.0)
    start = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        tokenflow.train(LONG_EVALUATION, progress=False)
    stopped = time.monotonic()
    timer.join()
    assert stopped - start < 1.0 + 2.0, f"Ctrl-C at 1 s, stopped at {stopped - start:.2f} s (the promise: 2 s)"


def test_ctrl_c_stops_the_train_command_during_an_evaluation(tmp_path):
    import os
    import signal
    import subprocess

    from conftest import CLI

    args = [str(CLI), "train", "--set", "task.n=64", "--set", "model.sinkhorn_iters=60", "--set",
            "train.test_pairs=400", "--set", "train.steps=5", "--out", str(tmp_path / "out")]
    p = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                         env=dict(os.environ, CI="1"))
    time.sleep(1.0)
    assert p.poll() is None, "the run ended before the signal: the evaluation is not long enough for the test"
    sent = time.monotonic()
    p.send_signal(signal.SIGINT)
    code = p.wait(timeout=60)
    took = time.monotonic() - sent
    err = p.stderr.read()
    assert code == 130, err
    assert "tokenflow: interrupted" in err, err
    assert took < 2.0, f"stopped {took:.2f} s after Ctrl-C (the promise: 2 s)"
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())
