"""tokenflow.train and SinkhornTransformer.load(path).couple against `tokenflow train` and
`tokenflow couple` on the same input: equal to the last digit (only timings differ)."""
import threading
import time

import numpy as np
import pytest

import tokenflow
from conftest import interrupt_after, load_json, run_cli
from tokenflow.model_file import read_model
from tokenflow.plot import read_csv

# Timings, and the OpenMP thread count of the process: training gives the same numbers with any
# thread count (train.hpp), and importing POT (which imports torch) in another test of the same
# pytest run sets the process to torch's thread count.
TIMINGS = {"wall_seconds", "train_seconds", "pairs_per_second", "threads"}

CASES = {
    "matching_f64": {"task": {"kind": "matching", "n": 5, "min_n": 3},
                     "model": {"width": 8, "layers": 1, "heads": 2, "k": 4},
                     "train": {"steps": 12, "batch": 4, "test_pairs": 3, "seed": 7, "eval_every": 4}},
    "entropic_f32": {"dtype": "f32", "task": {"kind": "entropic-ot", "n": 4, "m": 5, "p": 1},
                     "model": {"width": 8, "layers": 2, "heads": 1, "k": 4, "sinkhorn_iters": 10},
                     "train": {"steps": 6, "batch": 3, "test_pairs": 2, "schedule": "cosine"}},
}


def without(d, keys):
    return {k: v for k, v in d.items() if k not in keys}


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """Each case trained by the CLI (its output directory) and by Python."""
    runs = {}
    for name, config in CASES.items():
        d = tmp_path_factory.mktemp(name)
        (d / "cfg.toml").write_text(tokenflow.to_toml(config))
        run_cli("train", "--config", d / "cfg.toml", "--out", d / "out")
        runs[name] = (d / "out", tokenflow.train(config))
    return runs


@pytest.mark.parametrize("case", sorted(CASES))
def test_train_equals_the_cli_to_the_last_digit(trained, case):
    out, r = trained[case]
    # The model: the same parameters, bit for bit, as model.bin (read by numpy alone, too).
    assert np.array_equal(r.model.params, tokenflow.SinkhornTransformer.load(out / "model.bin").params)
    config_toml, tensors = read_model(out / "model.bin")
    assert np.array_equal(r.model.params, np.concatenate([t.ravel() for t in tensors.values()]))
    assert r.model.config_toml == config_toml
    # metrics.csv, column by column (seconds are timings).
    csv = read_csv(out / "metrics.csv")
    assert list(csv) == list(r.metrics)
    for column, values in csv.items():
        if column != "seconds":
            assert np.array_equal(np.asarray(r.metrics[column], dtype=float), values, equal_nan=True), column
    assert without(r.summary, TIMINGS) == without(load_json(out / "summary.json"), TIMINGS)
    assert r.summary["steps"] == CASES[case]["train"]["steps"] and r.metrics["step"][-1] == r.summary["steps"]


def test_couple_equals_the_cli_to_the_last_digit(trained, tmp_path):
    out, r = trained["matching_f64"]
    rng = np.random.default_rng()
    x, y = rng.uniform(-1, 1, (6, 2)), rng.uniform(-1, 1, (4, 2))
    a, b = rng.uniform(0.5, 1.5, 6), rng.uniform(0.5, 1.5, 4)
    for name, v in (("x", x), ("y", y), ("a", a), ("b", b)):
        np.save(tmp_path / f"{name}.npy", v)
    model = tokenflow.SinkhornTransformer.load(out / "model.bin")
    run_cli("couple", "--model", out / "model.bin", "--x", tmp_path / "x.npy", "--y", tmp_path / "y.npy",
            "--a", tmp_path / "a.npy", "--b", tmp_path / "b.npy", "--out", tmp_path / "weighted")
    plan = model.couple(x, y, a, b)
    assert np.array_equal(plan, np.load(tmp_path / "weighted" / "plan.npy"))
    # The model returned by train couples the same way; uniform weights by default.
    run_cli("couple", "--model", out / "model.bin", "--x", tmp_path / "x.npy", "--y", tmp_path / "y.npy",
            "--out", tmp_path / "uniform")
    uniform = r.model.couple(x, y)
    assert np.array_equal(uniform, np.load(tmp_path / "uniform" / "plan.npy"))
    # A coupling of the normalized weights: the last Sinkhorn step matches the columns (b) up to
    # m roundings; the rows carry the truncation error that summary.json reports.
    s = load_json(tmp_path / "weighted" / "summary.json")
    a_n, b_n = a / a.sum(), b / b.sum()
    assert np.max(np.abs(plan.sum(axis=0) - b_n)) <= 8 * 6 * np.finfo(float).eps
    assert np.abs(plan.sum(axis=1) - a_n).sum() + np.abs(plan.sum(axis=0) - b_n).sum() == pytest.approx(
        s["marginal_error"], rel=1e-6, abs=1e-15)
    # Any array type converts once: float32 values and lists give the same plan as their float64.
    assert np.array_equal(model.couple(x.tolist(), y.astype(np.float32)), model.couple(x, y.astype(np.float32).astype(float)))


def test_save_and_load_round_trip(trained, tmp_path):
    _, r = trained["entropic_f32"]
    r.model.save(tmp_path / "m.bin")
    loaded = tokenflow.SinkhornTransformer.load(tmp_path / "m.bin")
    assert np.array_equal(loaded.params, r.model.params) and loaded.config == r.model.config
    assert "parameters=" in repr(loaded) and loaded.params.size == r.summary["parameters"]


def test_errors_name_the_argument(trained, tmp_path):
    out, r = trained["matching_f64"]
    with pytest.raises(ValueError, match="x: has dimension 3, the model 2"):
        r.model.couple(np.zeros((3, 3)), np.zeros((3, 2)))
    with pytest.raises(ValueError, match="b: has 2 entries"):
        r.model.couple(np.zeros((3, 2)), np.zeros((3, 2)), b=np.ones(2))
    (tmp_path / "bad.bin").write_bytes(b"not a model")
    with pytest.raises(ValueError, match="bad.bin"):
        tokenflow.SinkhornTransformer.load(tmp_path / "bad.bin")
    # Config errors: the CLI's line, with "config" as the source.
    bad = {"model": {"widht": 8}}
    (tmp_path / "bad.toml").write_text(tokenflow.to_toml(bad))
    cli = run_cli("train", "--config", tmp_path / "bad.toml", "--out", tmp_path / "o", check=False)
    assert cli.returncode == 2
    with pytest.raises(tokenflow.InputError) as e:
        tokenflow.train(bad)
    assert str(e.value) == cli.stderr.strip()[len("tokenflow: "):].replace(str(tmp_path / "bad.toml"), "config")


# 10 000 steps last 10-50 s (about 5 ms a step measured on 2 loaded cores): long next to the 0.5 s
# before Ctrl-C, but bounded, so that a lost signal fails the test instead of holding the suite.
LONG = {"task": {"n": 8}, "model": {"width": 16, "layers": 1, "k": 8},
        "train": {"steps": 10000, "batch": 8, "test_pairs": 2}}


@pytest.mark.skipif(threading.current_thread() is not threading.main_thread(), reason="signals go to the main thread")
def test_ctrl_c_stops_training(python_sigint_handler):
    start = time.monotonic()
    timer = interrupt_after(0.5)
    with pytest.raises(KeyboardInterrupt):
        tokenflow.train(LONG)
    timer.join()
    assert time.monotonic() - start < 30


def test_progress_callback_sees_every_step_and_can_stop_training():
    seen = []
    config = dict(CASES["matching_f64"])
    tokenflow.train(config, progress=lambda step, steps, loss, rate: seen.append((step, steps, loss)))
    assert [s for s, _, _ in seen] == list(range(1, 13)) and all(n == 12 for _, n, _ in seen)
    assert all(np.isfinite(loss) for _, _, loss in seen)

    class Stop(Exception):
        pass

    def stop_at_3(step, steps, loss, rate):
        if step == 3:
            raise Stop("enough")

    with pytest.raises(Stop, match="enough"):
        tokenflow.train(LONG, progress=stop_at_3)


def test_train_releases_the_gil():
    done = threading.Event()

    def work():
        tokenflow.train(dict(LONG, train=dict(LONG["train"], steps=300)))
        done.set()

    worker = threading.Thread(target=work)
    worker.start()
    time.sleep(0.05)
    ticks = 0
    while not done.is_set():  # pure Python: runs only while the worker does not hold the GIL
        ticks += 1
    worker.join()
    assert ticks > 10000, f"the main thread ran {ticks} loops while train ran"


def test_an_implicit_models_unrolled_plan_is_the_unrolled_one():
    # couple(unrolled=True) runs model.sinkhorn_iters unrolled iterations even for a model trained
    # with implicit gradients (whose own forward is the converged solve): 2 iterations leave the rows
    # off by far more than the converged plan's 1e-9 (l1), while the columns are exact in both. The
    # inputs are fixed (train.seed 0, rng 0): measured 3.9e-2.
    r = tokenflow.train({"task": {"n": 5}, "model": {"width": 8, "layers": 1, "heads": 2, "k": 4, "sinkhorn_iters": 2,
                                                     "sinkhorn_grad": "implicit"},
                         "train": {"steps": 5, "batch": 2, "test_pairs": 2}}, progress=False)
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(5, 2)), rng.normal(size=(6, 2))
    converged, unrolled = r.model.couple(x, y), r.model.couple(x, y, unrolled=True)
    assert np.abs(converged.sum(axis=1) - 1 / 5).sum() < 1e-9 + 1e-14
    assert np.abs(unrolled.sum(axis=1) - 1 / 5).sum() > 1e-6
    np.testing.assert_allclose(unrolled.sum(axis=0), 1 / 6, atol=1e-15)


def test_a_collapse_warns_as_it_happens_and_the_best_model_is_kept():
    # lr 1e5: every weight moves by about 1e5 in the first step, the test loss leaves its best (the
    # untrained model, step 0) by orders of magnitude.
    # TrainingWarning comes from inside the run (the progress callback sees later steps), the
    # summary lists the same lines, and best_model is the model of the lowest test loss.
    config = dict(CASES["matching_f64"], train=dict(CASES["matching_f64"]["train"], lr=1e5, steps=8, eval_every=1))
    events = []
    with pytest.warns(tokenflow.TrainingWarning, match="far above its best") as caught:
        r = tokenflow.train(config, progress=lambda step, steps, loss, rate: events.append(step))
    lines = [str(w.message) for w in caught if w.category is tokenflow.TrainingWarning]
    assert lines == r.summary["warnings"]
    assert r.summary["status"] == "finished"
    losses = r.metrics["test_loss"]
    best = int(np.argmin(losses))
    assert r.summary["best_step"] == r.metrics["step"][best] and r.summary["best_test_loss"] == losses[best]
    assert r.best_model.params.shape == r.model.params.shape
    with pytest.warns(tokenflow.TrainingWarning):
        again = tokenflow.train(config)
    assert np.array_equal(r.model.params, again.model.params)  # model is the last state


def test_a_training_warning_turned_into_an_error_stops_the_run():
    config = dict(CASES["matching_f64"], train=dict(CASES["matching_f64"]["train"], lr=1e5, steps=200, eval_every=1))
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error", tokenflow.TrainingWarning)
        with pytest.raises(tokenflow.TrainingWarning, match="far above its best"):
            tokenflow.train(config)
