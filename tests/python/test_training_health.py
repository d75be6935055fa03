"""Training health, small and fast: bench/training_health.py (every task, unrolled and implicit,
fresh seeds, 1500 steps; the table in docs/sinkhorn-transformer.md) on a small model and short runs.

With the [train] defaults a user starts from (warm-up, cosine schedule, clipping), every run on fresh
seeds must learn (held-out accuracy at its best well above the untrained model's), end near its best
(no collapse: no TrainingWarning, status "finished"), and keep that best in best_model.
"""
import random
import warnings

import numpy as np
import pytest

import tokenflow

SMALL_MODEL = {"width": 16, "layers": 1, "heads": 2, "k": 8}


def fresh_seed() -> int:
    return random.SystemRandom().randrange(1, 10**6)


@pytest.mark.parametrize("grad", ["unrolled", "implicit"])
@pytest.mark.parametrize("task", [{"kind": "matching", "n": 6}, {"kind": "sorting", "n": 6}])
def test_default_training_learns_and_does_not_collapse(task, grad):
    seed = fresh_seed()
    config = {"task": task, "model": {**SMALL_MODEL, "sinkhorn_grad": grad},
              "train": {"steps": 200, "batch": 8, "seed": seed, "test_pairs": 32, "eval_every": 20}}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", tokenflow.TrainingWarning)
        r = tokenflow.train(config, progress=False)
    context = f"task {task}, {grad}, seed {seed}"
    health = [str(w.message) for w in caught if issubclass(w.category, tokenflow.TrainingWarning)]
    assert not health and r.summary["status"] == "finished" and not r.summary.get("warnings"), (context, health)
    accuracy = np.asarray(r.metrics["test_accuracy"], dtype=float)
    # Learned: a random plan on n = 6 points picks the right partner 1 time in 6; a model that
    # learned nothing stays there, one that learned the task is far above it.
    untrained = accuracy[0]
    assert accuracy.max() >= untrained + 0.3, (context, accuracy)
    # No collapse: the last evaluation keeps most of the best one's gain (a collapse falls back to
    # the untrained level, as the runs of docs/sinkhorn-transformer.md's "Training health" did
    # with the old defaults).
    assert accuracy[-1] - untrained >= 0.75 * (accuracy.max() - untrained), (context, accuracy)
    # best_model is the evaluation of the lowest test loss, and its own evaluation says so.
    losses = np.asarray(r.metrics["test_loss"], dtype=float)
    assert r.summary["best_test_loss"] == np.nanmin(losses[1:]) or r.summary["best_test_loss"] == np.nanmin(losses)
    assert r.metrics["step"][int(np.nanargmin(losses))] == r.summary["best_step"]


def test_defaults_are_the_stable_ones():
    """The defaults the health runs use: cosine, clipping at 1, warm-up min(100, steps / 10) when
    the config leaves it out (model.bin's config says what the run used)."""
    keys = {k["key"]: k["default"] for k in tokenflow.config_keys("train")}
    assert keys["train.schedule"] == '"cosine"' and keys["train.grad_clip"] == "1.0"
    for steps, warmup in ((20, 2), (1, 0)):
        r = tokenflow.train({"task": {"kind": "matching", "n": 3}, "model": {"width": 4, "layers": 1, "heads": 1, "k": 2},
                             "train": {"steps": steps, "batch": 2, "test_pairs": 2}}, progress=False)
        assert f"\nwarmup = {warmup}\n" in r.model.config_toml and '\nschedule = "cosine"\n' in r.model.config_toml
        assert "\ngrad_clip = 1.0\n" in r.model.config_toml
    r = tokenflow.train({"task": {"kind": "matching", "n": 3}, "model": {"width": 4, "layers": 1, "heads": 1, "k": 2},
                         "train": {"steps": 20, "batch": 2, "test_pairs": 2, "warmup": 7}}, progress=False)
    assert "\nwarmup = 7\n" in r.model.config_toml  # given: kept


def test_merge_joins_a_task_split_over_processes_by_seed(tmp_path):
    """bench/training_health.py --merge: the runs of one task and mode, split over processes by seed,
    become one row over all of them (the worst seed of all parts)."""
    import importlib.util
    import json
    from pathlib import Path

    script = Path(__file__).resolve().parents[2] / "bench" / "training_health.py"
    spec = importlib.util.spec_from_file_location("training_health", script)
    health = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(health)
    rng = random.Random(fresh_seed())
    parts, runs = [], []
    for k in range(3):
        run = {"seed": rng.randrange(1, 10**6), "status": "finished", "seconds": rng.uniform(1, 9),
               "final_accuracy": rng.uniform(0.5, 1), "best_accuracy": 1.0, "final_w1": rng.uniform(0, 0.1),
               "best_w1": 0.0, "best_step": 100, "warnings": []}
        runs.append(run)
        part = {"date": "2026-01-01", "cpu": "cpu", "cores": 2, "command": f"part {k}", "steps": 10,
                "seeds": [run["seed"]], "runs": {"matching/implicit": {"texts": False, "runs": [run]}}}
        parts.append(tmp_path / f"part{k}.json")
        parts[-1].write_text(json.dumps(part))
    merged = tmp_path / "merged.json"
    assert health.main(["--merge", *map(str, parts), "--json", str(merged)]) == 0
    report = json.loads(merged.read_text())
    assert report["runs"]["matching/implicit"]["runs"] == runs
    assert report["seeds"] == sorted(r["seed"] for r in runs)
    (row,) = report["rows"]
    assert row[2] == "3" and row[3] == f"{min(r['final_accuracy'] for r in runs):.3f}", row
