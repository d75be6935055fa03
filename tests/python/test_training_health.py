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


def test_merge_with_the_docs_table_replaces_only_the_rows_rerun(tmp_path):
    """bench/training_health.py --merge PAGE.md part.json: the page's generated table keeps the rows
    of the tasks and modes the part did not run (their runs are not in the page), the part's rows
    replace the others, and the stamp joins both (seeds, commands), as update_docs writes it."""
    import importlib.util
    import json
    import sys
    from pathlib import Path

    bench = Path(__file__).resolve().parents[2] / "bench"
    sys.path.insert(0, str(bench))
    modules = {}
    for name in ("training_health", "update_docs"):
        spec = importlib.util.spec_from_file_location(name, bench / f"{name}.py")
        modules[name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(modules[name])
    health, docs = modules["training_health"], modules["update_docs"]
    rng = random.Random(fresh_seed())

    def run(seed):
        return {"seed": seed, "status": "finished", "seconds": rng.uniform(1, 900),
                "final_accuracy": rng.uniform(0, 1), "best_accuracy": rng.uniform(0, 1),
                "final_w1": rng.uniform(0, 0.2), "best_w1": rng.uniform(0, 0.2), "best_step": 10,
                "warnings": ["test loss far above its best"] if rng.random() < 0.5 else []}

    old_seeds, new_seeds = [rng.randrange(1, 10**6) for _ in range(2)], [rng.randrange(1, 10**6) for _ in range(3)]
    old = {"date": "2026-01-01", "cpu": "Some CPU", "cores": 2, "command": "bench/training_health.py --seeds 2",
           "steps": 1500, "seeds": old_seeds,
           "runs": {f"{task}/{grad}": {"texts": task == "texts", "runs": [run(s) for s in old_seeds]}
                    for task in ("matching", "texts") for grad in ("unrolled", "implicit")}}
    health.write_report(old, tmp_path / "old.json", quiet=True)
    page = tmp_path / "page.md"
    page.write_text("# Page\n\n<!-- generated: training-health -->\n"
                    + docs.training_health_table(json.loads((tmp_path / "old.json").read_text()))
                    + "<!-- /generated -->\n\nAfter.\n")
    rerun = [run(s) for s in new_seeds]
    part = {"date": "2026-02-02", "cpu": "Some CPU", "cores": 2, "steps": 1500, "seeds": new_seeds,
            "command": "bench/training_health.py --only texts --grads implicit",
            "runs": {"texts/implicit": {"texts": True, "runs": rerun}}}
    (tmp_path / "part.json").write_text(json.dumps(part))
    assert health.main(["--merge", str(page), str(tmp_path / "part.json"), "--json", str(tmp_path / "m.json")]) == 0
    merged = json.loads((tmp_path / "m.json").read_text())
    old_rows = {f"{r[0]}/{r[1]}": r for r in json.loads((tmp_path / "old.json").read_text())["rows"]}
    rows = {f"{r[0]}/{r[1]}": r for r in merged["rows"]}
    assert list(rows) == ["matching/unrolled", "matching/implicit", "texts/unrolled", "texts/implicit"]
    for key in ("matching/unrolled", "matching/implicit", "texts/unrolled"):
        assert rows[key] == old_rows[key], key
    assert rows["texts/implicit"] == health.row("texts", "implicit", rerun, True)
    assert merged["seeds"] == sorted(old_seeds + new_seeds) and merged["date"] == "2026-02-02"
    assert merged["command"] == "bench/training_health.py --seeds 2 + bench/training_health.py --only texts --grads implicit"
    # A later rerun of the same rows: the page's command for them is replaced, the rest kept.
    page.write_text("<!-- generated: training-health -->\n" + docs.training_health_table(merged) + "<!-- /generated -->\n")
    part["command"] = "bench/training_health.py --grads implicit --only texts --seed-list 3"
    (tmp_path / "part.json").write_text(json.dumps(part))
    assert health.main(["--merge", str(page), str(tmp_path / "part.json"), "--json", str(tmp_path / "m.json")]) == 0
    assert json.loads((tmp_path / "m.json").read_text())["command"] == (
        "bench/training_health.py --seeds 2 + bench/training_health.py --grads implicit --only texts --seed-list 3")
    assert health.covered("bench/training_health.py --only sorting entropic-ot --grads unrolled") == {
        "sorting/unrolled", "entropic-ot, p = 2/unrolled"}
    # The merged table renders, and reads back as the same rows.
    page.write_text("<!-- generated: training-health -->\n" + docs.training_health_table(merged) + "<!-- /generated -->\n")
    assert health.table_of_docs(page)["kept_rows"] == rows


def test_the_command_of_a_run_leaves_out_where_it_wrote(tmp_path, monkeypatch):
    """--json PATH is where a run wrote its table, not part of how to rerun it."""
    import importlib.util
    import json
    from pathlib import Path

    script = Path(__file__).resolve().parents[2] / "bench" / "training_health.py"
    spec = importlib.util.spec_from_file_location("training_health", script)
    health = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(health)
    monkeypatch.setattr(health, "one_run", lambda task, grad, seed, steps, test_pairs: {
        "seed": seed, "status": "finished", "seconds": 1.0, "final_accuracy": 0.5, "best_accuracy": 0.5,
        "final_w1": 0.1, "best_w1": 0.1, "best_step": 1, "warnings": []})
    out = tmp_path / "t.json"
    assert health.main(["--only", "matching", "--grads", "unrolled", "--seed-list", "5", "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["command"] == "bench/training_health.py --only matching --grads unrolled --seed-list 5"
    assert [r[:3] for r in report["rows"]] == [["matching", "unrolled", "1"]]
