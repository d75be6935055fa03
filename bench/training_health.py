#!/usr/bin/python3
"""Training health: every coupling task, unrolled and implicit gradients, several fresh seeds, with
the training defaults a user starts from.

Run by hand from the repository root after `make build` (not part of the tests; `make test` runs a
small version of it, tests/python/test_training_health.py):
    /usr/bin/python3 bench/training_health.py                           # 3 fresh seeds, 1500 steps
    /usr/bin/python3 bench/training_health.py --seeds 5 --json build/training_health.json
    /usr/bin/python3 bench/update_docs.py --training-health build/training_health.json

Each run is tokenflow.train with the [train] defaults (learning rate, warm-up, schedule, clipping,
AdamW's moments) and the [model] defaults but for model.sinkhorn_grad; only steps, test_pairs and
the task vary. The tasks: the four built-in ones (matching, sorting, whitened-ot, entropic-ot with
p = 2), a dataset on disk (matching pairs of 12 points written by tokenflow.tasks.save), and texts
(a generated corpus of paraphrases with gold links and a vectors file, as in
examples/09_aligned_texts.py). For each run, from its metrics and summary: held-out accuracy (AER
for texts) and W_1 at the end and at their best over the evaluations, and its TrainingWarnings (the
test loss far above its best, or a non-finite loss). The table gives, per task
and mode, the worst seed's final value, the best value over the run, the runs that warned and the
runs that failed (status "failed": a non-finite loss or gradient stopped them).
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import random
import re
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "build" / "python"))
sys.path.insert(0, str(ROOT / "bench"))
import tokenflow  # noqa: E402
from update_docs import BLOCK, cpu_model  # noqa: E402

# The tasks of tasks(), in the table's order.
TASK_NAMES = ["matching", "sorting", "whitened-ot", "entropic-ot, p = 2", "dataset", "texts"]
HEADER = ["task", "sinkhorn_grad", "seeds", "final accuracy (worst seed)", "best accuracy (worst seed)",
          "final W_1 (worst seed)", "best W_1 (worst seed)", "runs warned", "runs failed", "s / run"]


def texts_corpus(folder: Path, rng: np.random.Generator, train: int = 1500, test: int = 64) -> dict:
    """A corpus of sentence pairs: a sentence of distinct concepts and its paraphrase (reordered, each
    word a random synonym, a word sometimes dropped); the links join a concept's two words."""
    d, concepts = 4, 50
    centers = rng.normal(size=(concepts, d))
    words = [[f"w{c}s{k}" for k in range(int(rng.integers(2, 4)))] for c in range(concepts)]
    with open(folder / "vectors.txt", "w") as f:
        f.write(f"{sum(map(len, words))} {d}\n")
        for c, group in enumerate(words):
            for w in group:
                f.write(w + " " + " ".join(f"{v:.6f}" for v in centers[c] + 0.5 * rng.normal(size=d)) + "\n")

    def pair():
        chosen = rng.choice(concepts, size=int(rng.integers(5, 10)), replace=False)
        kept = [i for i in range(len(chosen)) if not (len(chosen) > 5 and rng.random() < 0.1)]
        order = rng.permutation(kept)
        return {"x": " ".join(str(rng.choice(words[c])) for c in chosen),
                "y": " ".join(str(rng.choice(words[chosen[i]])) for i in order),
                "links": [[int(i), j] for j, i in enumerate(order)]}

    for name, count in (("train.jsonl", train), ("test.jsonl", test)):
        with open(folder / name, "w") as f:
            f.writelines(json.dumps(pair()) + "\n" for _ in range(count))
    return {"kind": "texts", "path": str(folder / "train.jsonl"), "test_path": str(folder / "test.jsonl"),
            "vectors": str(folder / "vectors.txt")}


def dataset_on_disk(folder: Path, seed: int, test: int) -> dict:
    """Matching pairs of 12 points saved as a dataset (tokenflow.tasks.save), trained as kind "dataset"."""
    generator = {"task": {"kind": "matching", "n": 12}}
    tokenflow.tasks.save(folder, tokenflow.tasks.sample(generator, count=2000, seed=seed),
                         tokenflow.tasks.sample(generator, count=test, seed=seed, test=True))
    return {"kind": "dataset", "path": str(folder)}


def tasks(work: Path, test_pairs: int) -> list[tuple[str, dict]]:
    (work / "dataset").mkdir()
    (work / "texts").mkdir()
    return [("matching", {"kind": "matching"}), ("sorting", {"kind": "sorting"}),
            ("whitened-ot", {"kind": "whitened-ot"}), ("entropic-ot, p = 2", {"kind": "entropic-ot", "p": 2}),
            ("dataset", dataset_on_disk(work / "dataset", 11, test_pairs)),
            ("texts", texts_corpus(work / "texts", np.random.default_rng(12)))]


def one_run(task: dict, grad: str, seed: int, steps: int, test_pairs: int) -> dict:
    """One training run: its final and best metrics, status and warnings."""
    config = {"task": task, "model": {"sinkhorn_grad": grad},
              "train": {"steps": steps, "seed": seed, "test_pairs": test_pairs, "eval_every": max(1, steps // 30)}}
    start = time.monotonic()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", tokenflow.TrainingWarning)
        r = tokenflow.train(config, progress=False)
    m, s = r.metrics, r.summary
    texts = task["kind"] == "texts"
    accuracy = np.asarray(m["test_aer"] if texts else m["test_accuracy"], dtype=float)
    w1 = np.asarray(m["test_w1"], dtype=float)
    has_accuracy = not np.all(np.isnan(accuracy))
    return {"seed": seed, "status": s["status"], "seconds": time.monotonic() - start,
            "final_accuracy": float(accuracy[-1]) if has_accuracy else None,
            # AER: lower is better; accuracy: higher.
            "best_accuracy": (float(np.nanmin(accuracy) if texts else np.nanmax(accuracy)) if has_accuracy else None),
            "final_w1": float(w1[-1]), "best_w1": float(np.nanmin(w1)), "best_step": s["best_step"],
            "warnings": [str(w.message) for w in caught if issubclass(w.category, tokenflow.TrainingWarning)]}


def row(name: str, grad: str, runs: list[dict], texts: bool) -> list[str]:
    def worst(key, higher_is_better):
        values = [r[key] for r in runs if r[key] is not None]
        if not values:
            return "n/a"
        return f"{(min(values) if higher_is_better else max(values)):.3f}"

    accuracy_better = not texts
    label = " (AER)" if texts else ""
    warned = sum(1 for r in runs if r["warnings"])
    failed = sum(1 for r in runs if r["status"] != "finished")
    return [name, grad, str(len(runs)), worst("final_accuracy", accuracy_better) + label,
            worst("best_accuracy", accuracy_better) + label, worst("final_w1", False), worst("best_w1", False),
            f"{warned} of {len(runs)}", f"{failed} of {len(runs)}", f"{np.mean([r['seconds'] for r in runs]):.0f}"]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", type=int, default=3, help="fresh seeds per task and mode")
    p.add_argument("--seed-list", type=int, nargs="*", help="these seeds instead of fresh ones")
    p.add_argument("--steps", type=int, default=1500)
    p.add_argument("--test-pairs", type=int, default=64)
    p.add_argument("--only", nargs="*", help="task names to run (default: all)")
    p.add_argument("--grads", nargs="*", default=["unrolled", "implicit"], choices=["unrolled", "implicit"])
    p.add_argument("--json", type=Path, help="write the table here, after every task and mode "
                                             "(bench/update_docs.py --training-health)")
    p.add_argument("--merge", type=Path, nargs="*",
                   help="no runs: the tables of these --json files (runs split over processes, "
                        "by task, mode or seed) as one; a .md file (docs/sinkhorn-transformer.md) "
                        "gives its generated table, whose rows stand for the tasks and modes that no "
                        "--json file ran")
    args = p.parse_args(argv)
    given = list(argv if argv is not None else sys.argv[1:])
    if "--json" in given:  # where this run wrote its table is not how to rerun it
        del given[given.index("--json"):given.index("--json") + 2]
    command = "bench/training_health.py " + " ".join(given)
    if args.merge:
        parts = [table_of_docs(path) if path.suffix == ".md" else json.loads(path.read_text())
                 for path in args.merge]
        runs: dict = {}  # a task and mode split over processes by seeds: their runs, in the parts' order
        kept: dict = {}  # rows of a docs table, for the tasks and modes whose runs it does not keep
        for part in parts:
            for key, value in part["runs"].items():
                runs.setdefault(key, {"texts": value["texts"], "runs": []})["runs"] += value["runs"]
            kept.update(part.get("kept_rows", {}))
        # A docs table's commands, less those whose tasks and modes were all rerun here.
        commands = [c for part in parts for c in part["command"].split(" + ")
                    if not ("kept_rows" in part and covered(c) <= set(runs))]
        report = {**parts[-1], "command": " + ".join(commands), "runs": runs,
                  "kept_rows": {k: r for k, r in kept.items() if k not in runs},
                  "seeds": sorted({s for part in parts for s in part["seeds"]}),
                  "date": max(part["date"] for part in parts)}
        return write_report(report, args.json)
    seeds = args.seed_list or [random.SystemRandom().randrange(1, 10**6) for _ in range(args.seeds)]
    report = {"date": datetime.date.today().isoformat(), "cpu": cpu_model(), "cores": os.cpu_count(),
              "command": command, "steps": args.steps, "seeds": seeds, "runs": {}}
    with tempfile.TemporaryDirectory(prefix="tf-training-health-") as work:
        for name, task in tasks(Path(work), args.test_pairs):
            if args.only and name.split(",")[0] not in args.only:
                continue
            for grad in args.grads:
                done = []
                for seed in seeds:
                    done.append(one_run(task, grad, seed, args.steps, args.test_pairs))
                    print(f"{name} {grad} seed {seed}: {json.dumps(done[-1])}", flush=True)
                report["runs"][f"{name}/{grad}"] = {"texts": task["kind"] == "texts", "runs": done}
                if args.json:  # after every group: a long run stopped early keeps what it measured
                    write_report(report, args.json, quiet=True)
    return write_report(report, args.json)


def covered(command: str) -> set:
    """The "task/mode" keys a command of this script runs (--only, --grads; all by default)."""
    words = command.split()

    def values(flag, default):
        if flag not in words:
            return default
        rest = words[words.index(flag) + 1:]
        return [w for w in rest[:next((i for i, w in enumerate(rest) if w.startswith("--")), len(rest))]]

    only = values("--only", None)
    return {f"{name}/{grad}" for name in TASK_NAMES if only is None or name.split(",")[0] in only
            for grad in values("--grads", ["unrolled", "implicit"])}


def table_of_docs(path: Path) -> dict:
    """The generated training-health table of a docs page as a --merge part: its rows (kept_rows,
    by "task/mode"; the runs behind them are not in the page) and its stamp's date, machine, steps,
    seeds and command."""
    block = next((m.group(3) for m in BLOCK.finditer(path.read_text()) if m.group(2) == "training-health"), None)
    if block is None:
        raise SystemExit(f"{path}: no generated training-health table")
    lines = [line for line in block.splitlines() if line.startswith("| ")]
    if not lines or [c.strip() for c in lines[0].strip("|").split("|")] != HEADER:
        raise SystemExit(f"{path}: the training-health table's header is not this script's")
    rows = [[c.strip() for c in line.strip().strip("|").split("|")] for line in lines[1:]]
    found = re.search(r"_Measured (\S+) on (.+) \((\d+) cores\); (\d+) steps per run, seeds ([\d, ]+), by `(.+)`\._",
                      block)
    if not found:
        raise SystemExit(f"{path}: the training-health table has no stamp this script can read")
    date, cpu, cores, steps, seeds, command = found.groups()
    return {"date": date, "cpu": cpu, "cores": int(cores), "steps": int(steps), "command": command,
            "seeds": [int(s) for s in seeds.split(",")], "runs": {},
            "kept_rows": {f"{r[0]}/{r[1]}": r for r in rows}}


def write_report(report: dict, path, quiet: bool = False) -> int:
    """The table of report["runs"] ({"task/grad": {"texts", "runs"}}), in the tasks' order, printed
    and written to path (JSON) when given."""
    kept = report.get("kept_rows", {})
    keys = sorted({*report["runs"], *kept},
                  key=lambda k: (TASK_NAMES.index(k.split("/")[0]) if k.split("/")[0] in TASK_NAMES else 99,
                                 k.split("/")[1] != "unrolled"))
    rows = [row(k.split("/")[0], k.split("/")[1], report["runs"][k]["runs"], report["runs"][k]["texts"])
            if k in report["runs"] else kept[k] for k in keys]
    report = {**report, "header": HEADER, "rows": rows}
    if not quiet:
        print("| " + " | ".join(HEADER) + " |\n|" + "---|" * len(HEADER))
        for r in rows:
            print("| " + " | ".join(r) + " |")
    if path:
        tmp = Path(str(path) + ".tmp")
        tmp.write_text(json.dumps(report, indent=1))
        tmp.replace(path)
    return 0

if __name__ == "__main__":
    sys.exit(main())
