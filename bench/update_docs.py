#!/usr/bin/python3
"""Rewrites the measured numbers of README.md and docs/*.md from the runs that measure them.

Two kinds of places in the Markdown, marked with HTML comments (invisible once rendered):

- Tables, regenerated whole from a benchmark run (`bench/compare.py --json FILE`, which `make bench`
  writes to build/bench.json), each followed by a line that says when, on which CPU and by which
  command the numbers were measured:

      <!-- generated: speed -->
      ...
      <!-- /generated -->

  Blocks: "speed" (whole-process times and ratios against the peers), "kernels" (the attention
  kernel's pairs/s and GFLOP/s against the machine's ceilings), "memory" (peak RSS of one Euler
  step at n = 200 000); "energy-dissipation" is made from the reproductions (below).

- Single numbers, taken from the summary.json of a reproduction (`tokenflow demo --out DIR` or
  `tokenflow reproduce NAME --out DIR/NAME`): a dotted path into DIR/NAME/summary.json (list
  indices allowed, -1 the last; NAME "." is DIR/summary.json) and a Python format ("json" writes
  the value as JSON: true, "text"):

      <!-- from: meanfield slope .3f -->-0.497<!-- /from -->

  and, once in a document, the line that says where those numbers come from:

      <!-- generated: reproductions -->
      ...
      <!-- /generated -->

- Single numbers of a command the page shows (`build/tokenflow stability --set run.T=1 --out
  out/st`): NAME is its --out folder, relative to the repository root, which `make docs-runs`
  (bench/doc_examples.py) fills by running the command as written; with --runs they are rewritten,
  and the block "runs" says when and where they ran:

      <!-- from: out/st growth_constant .2f -->4.23<!-- /from -->

  Tables too: "universal-approximation" (out/universal) and "matching" (out/matching, its
  metrics.csv and summary.json), from COMMAND_TABLES.

Usage: bench/update_docs.py [--bench build/bench.json] [--ot-vs-pot build/ot_vs_pot.json]
                            [--online-rate build/online_rate.json]
                            [--exact-vs-emd2 build/exact_vs_emd2.json]
                            [--sinkhorn-batch build/sinkhorn_batch.json]
                            [--python-threads build/python_threads.json]
                            [--training build/sinkhorn_grad.json]
                            [--train-vs-torch build/train_vs_torch.json]
                            [--fast-summation build/fast_summation.json]
                            [--fast-clusters build/fast_clusters.json]
                            [--dataset-streaming build/dataset_streaming.json]
                            [--training-health build/training_health.json]
                            [--reproductions out/demo] [--runs] [--check] [FILES]
(FILES default to README.md and docs/*.md). The blocks "ot-vs-pot" and "pot-problems" come from
`bench/ot_vs_pot.py --json FILE`, "online-rate" from `bench/ot_vs_pot.py --online-rate N --json FILE`, "exact-vs-emd2" from `bench/exact_vs_emd2.py --json FILE`, "sinkhorn-batch" from
`bench/sinkhorn_batch_vs_torch.py --configs ... --json FILE`, "python-threads" from
`bench/python_threads.py --json FILE`, "sinkhorn-grad" from `bench/sinkhorn_grad.py --json FILE`,
"train-vs-torch" from `bench/train_vs_torch.py --json FILE`, "fast-summation" from
`bench/fast_summation.py --json FILE`, "fast-clusters" from `bench/fast_summation.py --clustered --json FILE`,
"dataset-streaming" from `bench/dataset_streaming.py --json FILE`, "training-health" from
`bench/training_health.py --json FILE`. A place whose run is not given is
left as it is. --check writes nothing and exits 1 when a file would
change (and 0 when none would). A marker whose source is missing or malformed exits 2 with one
line naming the file and the marker.
"""
from __future__ import annotations

import argparse
import contextlib
import csv
import datetime
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BLOCK = re.compile(r"(<!-- generated: ([\w-]+) -->\n)(.*?)(<!-- /generated -->)", re.S)
# A marker quoted in inline code (`<!-- from: ... -->`, as in docs/ARCHITECTURE.md) is text, not a place.
NUMBER = re.compile(r"(?<!`)(<!-- from: ([\w./-]+) ([\w.-]+) ([^ ]+) -->)(.*?)(<!-- /from -->)")


class SourceError(Exception):
    pass


def cpu_model() -> str:
    """The model name of /proc/cpuinfo (e.g. "AMD EPYC"), or the machine type."""
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.machine()


def as_documented(command: str) -> str:
    """The command as a reader runs it: a private build folder the measurement used (build-pch,
    build-bench, ...; no make target creates those) is written as the default build/."""
    return re.sub(r"(?<![\w/.-])build-[\w.-]+(?=/|\s|$)", "build", command)


def stamp(date: str, cpu: str, cores: int, command: str, extra: str = "") -> str:
    return f"_Measured {date} on {cpu} ({cores} cores){extra}, by `{as_documented(command)}`._\n"


def seconds(t: float) -> str:
    return f"{t:.3g} s"


# ---- tables from bench/compare.py's JSON -----------------------------------------------------------

def speed_table(bench: dict) -> str:
    rows = ["| comparison (whole process, median) | tokenflow | peer | peer time | ratio | goal |",
            "|---|---|---|---|---|---|"]
    for c in bench["comparisons"]:
        names = list(c["median"])
        base = names[0]
        for peer in names[1:]:
            goal = c["goals"].get(peer)
            ratio = c["ratio"][peer]
            verdict = "" if not goal else f">= {goal:g}x: {'met' if ratio >= goal else 'not met'}"
            rows.append(f"| {c['title']} | {seconds(c['median'][base])} | {peer} | {seconds(c['median'][peer])} "
                        f"| **{ratio:.2f}x** | {verdict} |")
    loads = [c["load"][0] for c in bench["comparisons"]]
    extra = f", load {min(loads):.1f} - {max(loads):.1f}" if loads else ""
    return "\n".join(rows) + "\n\n" + stamp(bench["date"], bench["cpu"], bench["cores"], bench["command"], extra)


def kernels_table(bench: dict) -> str:
    if not bench.get("achieved"):
        raise SourceError("the benchmark run has no kernel rates (it ran with --skip-kernels)")
    gemm = bench["ceilings"]["gemm_gflops"]
    rows = ["| softmax step | n | d | ms per step | G pairs/s | GFLOP/s | of the GEMM ceiling |",
            "|---|---|---|---|---|---|---|"]
    for r in bench["achieved"]:
        rows.append(f"| {r['dtype']} | {r['n']} | {r['d']} | {1e3 * r['step_seconds']:.3g} | "
                    f"{r['pairs_per_s'] / 1e9:.2f} | {r['gflops']:.3g} | {100 * r['gflops'] / gemm[r['dtype']]:.0f}% |")
    return "\n".join(rows) + "\n\n" + stamp(bench["date"], bench["cpu"], bench["cores"], bench["command"])


def memory_line(bench: dict) -> str:
    m = bench.get("memory")
    if not m:
        raise SourceError("the benchmark run has no memory check (it ran with --quick)")
    return (f"One Euler step of n = {m['n']:,} tokens (d = {m['d']}): **{m['peak_rss_mib']:.0f} MiB** peak RSS; "
            f"NumPy's n x n float64 logits alone would need {m['numpy_logits_gib']:.0f} GiB.\n\n"
            + stamp(bench["date"], bench["cpu"], bench["cores"], bench["command"]))


def markdown_table(header, rows, numeric_after_first: bool = False) -> str:
    """A markdown table; numeric_after_first right-aligns every column but the first."""
    rule = "|---|" + "---:|" * (len(header) - 1) if numeric_after_first else "|" + "---|" * len(header)
    return "\n".join(["| " + " | ".join(header) + " |", rule] + ["| " + " | ".join(map(str, r)) + " |" for r in rows])


def ot_vs_pot_tables(run: dict) -> str:
    return (markdown_table(run["sinkhorn_header"], run["sinkhorn"]) + "\n\n"
            + stamp(run["date"], run["cpu"], run["cores"], run["command"],
                    f", {run['threads']} thread each, load {run['load']:.1f} at the end"))


def online_rate_table(run: dict) -> str:
    """bench/ot_vs_pot.py --online-rate N --json: the online operator's pair rate against its peers."""
    try:
        ratios = run["ratio_to_attention"]
        conditions = (f"n = m = {run['n']} in R^3, eps {run['epsilon']:g}, tol {run['tol']:g}, "
                      f"{run['iterations']} iterations each")
    except KeyError as e:
        raise SourceError(f"the bench/ot_vs_pot.py --online-rate run has no {e} (rerun it with this version)") from None
    return (markdown_table(run["header"], run["rows"]) + "\n\n"
            + f"Online Sinkhorn / attention step: **{ratios['f64']:.2f}x** (float64), {ratios['f32']:.2f}x (float32).\n\n"
            + stamp(run["date"], run["cpu"], run["cores"], run["command"],
                    f", {conditions}, {run['threads']} thread each, load {run['load']:.1f} at the end"))


def exact_vs_emd2_table(run: dict) -> str:
    """bench/exact_vs_emd2.py's table: exact_ot against ot.emd2, calls and whole processes."""
    return (markdown_table(run["header"], run["rows"]) + "\n\n"
            + stamp(run["date"], run["cpu"], run["cores"], run["command"],
                    f", one thread each, POT {run['pot']}, load {run['load']:.1f} at the end"))


def sinkhorn_batch_table(run: dict) -> str:
    """bench/sinkhorn_batch_vs_torch.py --configs ...: batches with gradients against a torch loop."""
    return (markdown_table(run["header"], run["rows"]) + "\n\n"
            + stamp(run["date"], run["cpu"], run["cores"], run["command"], f", {run['conditions']}"))


def python_threads_table(run: dict) -> str:
    """bench/python_threads.py --json: calls as installed against one thread, quiet, shared and busy."""
    load = run["load"]
    shared = "shared: one process in a session of its own spinning at nice 19; " if any(
        h.startswith("shared") for h in run["header"]) else ""
    return (markdown_table(run["header"], run["rows"]) + "\n\n"
            + stamp(run["date"], run["cpu"], run["cores"], run["command"],
                    f"; median of {run['calls'] * run['rounds']} calls each, in {run['rounds']} alternating rounds; "
                    f"{shared}busy: {run['busy']} other processes spinning a Python loop; load average {load[0]:.1f} - "
                    f"{load[1]:.1f} during the run (other users' work included)"))


def pot_problems_table(run: dict) -> str:
    """POT's own test problems from the same bench/ot_vs_pot.py --json run."""
    try:
        header, rows = run["pot_problems_header"], run["pot_problems"]
        budget, tol = run["pot_problems_budget"], run["pot_problems_tol"]
    except KeyError as e:
        raise SourceError(f"the bench/ot_vs_pot.py --json run has no {e} (rerun it with this version)") from None
    return (markdown_table(header, rows) + "\n\n"
            + stamp(run["date"], run["cpu"], run["cores"], run["command"],
                    f"; budget {budget} iterations, tol {tol:g}, {run['threads']} thread each"))


def unbalanced_vs_pot_table(run: dict) -> str:
    """bench/unbalanced_vs_pot.py --json: unbalanced Sinkhorn against POT's, and against the balanced solve."""
    return (markdown_table(run["header"], run["rows"]) + "\n\n"
            + stamp(run["date"], run["cpu"], run["cores"], run["command"],
                    f", {run['threads']} thread each, POT {run['pot']}, both plans within {run['tol']:g} of their "
                    f"fixed point, load {run['load']:.1f} at the end"))


def sinkhorn_grad_table(run: dict) -> str:
    """bench/sinkhorn_grad.py --json: unrolled against implicit training on the four tasks."""
    return (markdown_table(run["header"], run["rows"]) + "\n\n"
            + stamp(run["date"], run["cpu"], run["cores"], run["command"], f"; {run['steps']} steps per run"))


def other_tasks_table(run: dict) -> str:
    """bench/sinkhorn_grad.py --json: the unrolled runs against the untrained model and a b^T."""
    try:
        header, rows = run["other_header"], run["other_rows"]
    except KeyError as e:
        raise SourceError(f"the bench/sinkhorn_grad.py --json run has no {e} (rerun it with this version)") from None
    return (markdown_table(header, rows) + "\n\n"
            + stamp(run["date"], run["cpu"], run["cores"], run["command"], f"; {run['steps']} steps per run"))


def train_vs_torch_table(run: dict) -> str:
    """bench/train_vs_torch.py --json: one training step, tokenflow against the same model in PyTorch."""
    try:
        extra = (f"; torch {run['torch']} (BLAS_INFO={run['blas']}), best of {run['rounds']} rounds of "
                 f"{run['steps']} steps, load {run['load']:.1f} at the end")
    except KeyError as e:
        raise SourceError(f"the bench/train_vs_torch.py --json run has no {e} (rerun it with this version)") from None
    return (markdown_table(run["header"], run["rows"], numeric_after_first=True) + "\n\n"
            + stamp(run["date"], run["cpu"], run["cores"], run["command"], extra))


def training_health_table(run: dict) -> str:
    """bench/training_health.py --json: every task, unrolled and implicit, over fresh seeds."""
    seeds = ", ".join(str(s) for s in run["seeds"])
    return (markdown_table(run["header"], run["rows"]) + "\n\n"
            + stamp(run["date"], run["cpu"], run["cores"], run["command"],
                    f"; {run['steps']} steps per run, seeds {seeds}"))


def dataset_streaming_table(run: dict) -> str:
    """bench/dataset_streaming.py --json: peak RSS and time per step of training on a dataset from disk."""
    try:
        extra = (f"; {run['pairs']:,} training pairs (n, m in 8..16, d = 2; {run['bytes']['folders'] / 2**20:.0f} MiB "
                 f"as one .npz a pair, {run['bytes']['single'] / 2**20:.0f} MiB as one file), {run['test_pairs']} test "
                 f"pairs, batch {run['batch']}, {run['steps']} steps, width {run['model']['width']}"
                 + (f", load average {run['load']:.1f} at the end" if "load" in run else ""))
    except KeyError as e:
        raise SourceError(f"the bench/dataset_streaming.py --json run has no {e} (rerun it with this version)") from None
    return (markdown_table(run["header"], run["rows"], numeric_after_first=True) + "\n\n"
            + stamp(run["date"], run["cpu"], run["cores"], run["command"], extra))


def seconds_of(text: str) -> float:
    """A formatted time ("0.8 s", "~2.5 min", "1.8 h") in seconds."""
    value, unit = text.lstrip("~").split()
    return float(value) * {"s": 1.0, "min": 60.0, "h": 3600.0}[unit]


def fast_summation_targets(run: dict) -> str:
    """One sentence: per d, the fast times at the largest n over the main table and the draws, and
    the largest error / bound among them."""
    header, draws = run["header"], run.get("draws", {})
    rows = [dict(zip(header, r)) for r in run["rows"]] + [dict(zip(draws["header"], r)) for r in draws.get("rows", [])]
    parts, worst = [], 0.0
    for d in sorted({r["d"] for r in rows}):
        largest = max(int(str(r["n"]).replace(",", "")) for r in rows if r["d"] == d)
        at = [r for r in rows if r["d"] == d and int(str(r["n"]).replace(",", "")) == largest]
        times = [seconds_of(r["fast"]) for r in at]
        worst = max([worst] + [float(r["error / bound"]) for r in at])
        parts.append(f"n = {largest:,} in d = {d}: {min(times):.3g} to {max(times):.3g} s ({len(at)} runs)")
    return f"At the largest sizes, over the tables above: {'; '.join(parts)}; the largest error / bound {worst:.2g}.\n\n"


def fast_summation_table(run: dict) -> str:
    """bench/fast_summation.py --json: attention.summation fast against dense against NumPy."""
    crossover = ", ".join(f"{name}: n = {n:,}" for name, n in run["crossover"].items())
    weights = run.get("weights", "identity")
    conditions = ("Q, K, V with entries N(0, 1/d) (fixed seed; the matrices are in the JSON)" if weights == "random"
                  else "Q = K = V = I")
    exponents = ", ".join(f"{name}: {e:.2f}" for name, e in run.get("exponents", {}).items())
    load = f"; load average {run['load_average']:.1f} at the end" if "load_average" in run else ""
    draws = run.get("draws", {}).get("rows", [])
    draws_text = ("Further draws of Q, K, V ~ N(0, 1/d) (seeds 1, 2, ...) at the target sizes, fast only:\n\n"
                  + markdown_table(run["draws"]["header"], draws) + "\n\n") if draws else ""
    return (f"Weights: {conditions}, W = I, tokens N(0, I).\n\n" + markdown_table(run["header"], run["rows"]) + "\n\n"
            + f"The first n from which the fast process stays ahead of the dense one: {crossover}.\n\n"
            + (f"Exponent of the fast time in n (fitted over n >= 10^4 where the grid summed most rows; below, "
               f"the cost rule may send every row to exact sums, faster there and O(n^2)): {exponents}.\n\n"
               if exponents else "")
            + draws_text + fast_summation_targets(run)
            + stamp(run["date"], run["cpu"], run["cores"], run["command"], load))


def fast_clusters_table(run: dict) -> str:
    """bench/fast_summation.py --clustered --json: clustered clouds in d = 3, 1 to 4 heads."""
    load = f"; load average {run['load_average']:.1f} at the end" if "load_average" in run else ""
    return (markdown_table(run["header"], run["rows"]) + "\n\n"
            + stamp(run["date"], run["cpu"], run["cores"], run["command"], load))


def energy_dissipation_table(root: Path) -> str:
    """The gap of the energy-dissipation identity and its observed order for each integrator and dt."""
    file = root / "energy-dissipation" / "summary.json"
    with run_fields(file, f"{file}: no integrator table"):
        s = json.loads(file.read_text())
        integrators = s["integrators"]
        dts = integrators["rk4"]["dt"]
        rows = [f"| `tokenflow reproduce energy-dissipation` (n = {s['n']}) | " + " | ".join(
                    f"dt = {dt:g}" for dt in dts) + " |", "|---|" + "---|" * len(dts)]
        for name, entry in integrators.items():
            rows.append(f"| gap, {name} | " + " | ".join(f"{g:.2e}" for g in entry["gap"]) + " |")
            rows.append(f"| observed order, {name} | | " + " | ".join(f"{o:.2f}" for o in entry["observed_order"]) + " |")
    return "\n".join(rows) + "\n"


@contextlib.contextmanager
def run_fields(file: Path, missing: str):
    """Reading a run's files: an unreadable or malformed file is a SourceError naming it, a missing
    or unusable field one that starts with `missing`."""
    try:
        yield
    except (OSError, ValueError) as e:
        raise SourceError(f"{file}: {e}") from None
    except (KeyError, IndexError, TypeError, ZeroDivisionError) as e:
        raise SourceError(f"{missing} ({type(e).__name__}: {e})") from None


def universal_approximation_table(folder: Path) -> str:
    """The sweep of `tokenflow reproduce universal-approximation`: test W_1 against capacity."""
    file = folder / "summary.json"
    with run_fields(file, f"{file}: no sweep"):
        s = json.loads(file.read_text())
        rows = ["| width x layers (k = width/2) | parameters | test W_1 | untrained | independent |",
                "|---|---:|---:|---:|---:|"]
        for p in sorted(s["points"], key=lambda p: p["parameters"]):
            rows.append(f"| {p['width']}x{p['layers']} | {p['parameters']:,} | {p['test_w1']:.3g} | "
                        f"{p['test_w1_untrained']:.3g} | {p['test_w1_independent']:.3g} |")
        falls = "falls" if s["w1_falls_with_capacity"] else "does not fall monotonically"
        tail = (f"The error {falls} with capacity, by a factor of "
                f"{s['w1_smallest_model'] / s['w1_largest_model']:.1f} over the sweep "
                f"(`\"w1_falls_with_capacity\": {json.dumps(s['w1_falls_with_capacity'])}` in summary.json); "
                f"{s['wall_seconds']:.0f} s wall.")
    return "\n".join(rows) + "\n\n" + tail + "\n"


MATCHING_STEPS = (0, 250, 1000)  # the matching table's rows, with the last step


def matching_table(folder: Path) -> str:
    """`tokenflow train --config experiments/matching.toml`: test accuracy and W_1 at a few steps of
    its metrics.csv (MATCHING_STEPS and the last), against the independent coupling and the
    untrained model of its summary.json, and when the goal (accuracy >= 0.9) was first reached."""
    file = folder / "metrics.csv"
    with run_fields(file, f"{folder}: no training run"):
        s = json.loads((folder / "summary.json").read_text())
        with open(file, newline="") as f:
            metrics = list(csv.DictReader(f))
        last = metrics[-1]
        rows = ["| step | seconds | test accuracy | test W_1 |", "|---:|---:|---:|---:|"]
        for m in metrics:
            if int(m["step"]) in MATCHING_STEPS or m is last:
                step = "0 (untrained)" if int(m["step"]) == 0 else m["step"]
                accuracy, w1 = f"{float(m['test_accuracy']):.4g}", f"{float(m['test_w1']):.3g}"
                if m is last:
                    accuracy, w1 = f"**{accuracy}**", f"**{w1}**"
                rows.append(f"| {step} | {float(m['seconds']):.1f} | {accuracy} | {w1} |")
        goal = next((m for m in metrics if float(m["test_accuracy"]) >= 0.9), None)
        reached = "the goal (accuracy >= 0.9 within 10 minutes) was " + (
            f"first met at step {goal['step']}, after {float(goal['seconds']):.1f} s" if goal else "not met")
        tail = (f"{s['parameters']:,} parameters, {s['steps']} steps, evaluated on {s['test_pairs']} held-out pairs; "
                f"{s['wall_seconds']:.1f} s wall on {s['threads']} threads ({s['train_seconds']:.1f} s of training). "
                f"The independent coupling a b^T has accuracy {s['test_accuracy_independent']:.4g} (chance) and "
                f"W_1 {s['test_w1_independent']:.3g}; the untrained model has accuracy "
                f"{s['test_accuracy_untrained']:.3g} "
                f"({s['test_accuracy_untrained'] / s['test_accuracy_independent']:.1f} times chance) and "
                f"W_1 {s['test_w1_untrained']:.3g}; {reached}.")
    return "\n".join(rows) + "\n\n" + tail + "\n"


# Blocks made from the --out folder of a command the page shows (relative to the repository root).
COMMAND_TABLES = {"universal-approximation": ("out/universal", universal_approximation_table),
                  "matching": ("out/matching", matching_table)}

# Block name -> (the input it is made from, the function that makes it).
TABLES = {"speed": ("bench", speed_table), "kernels": ("bench", kernels_table), "memory": ("bench", memory_line),
          "ot-vs-pot": ("ot_vs_pot", ot_vs_pot_tables),
          "online-rate": ("online_rate", online_rate_table),
          "exact-vs-emd2": ("exact_vs_emd2", exact_vs_emd2_table),
          "sinkhorn-batch": ("sinkhorn_batch", sinkhorn_batch_table), "pot-problems": ("ot_vs_pot", pot_problems_table),
          "unbalanced-vs-pot": ("unbalanced_vs_pot", unbalanced_vs_pot_table),
          "python-threads": ("python_threads", python_threads_table),
          "sinkhorn-grad": ("training", sinkhorn_grad_table),
          "other-tasks": ("training", other_tasks_table),
          "train-vs-torch": ("train_vs_torch", train_vs_torch_table),
          "fast-summation": ("fast_summation", fast_summation_table),
          "fast-clusters": ("fast_clusters", fast_clusters_table),
          "dataset-streaming": ("dataset_streaming", dataset_streaming_table),
          "training-health": ("training_health", training_health_table),
          "energy-dissipation": ("reproductions", energy_dissipation_table)}


# ---- numbers from the reproductions' summary.json --------------------------------------------------

def lookup(document, path: str):
    for part in path.split("."):
        if isinstance(document, list):
            document = document[int(part)]
        else:
            document = document[part]
    return document


def reproduction_number(root: Path, name: str, path: str, form: str) -> str:
    """The number at `path` of NAME/summary.json under root: a reproduction of the demo, or, when
    NAME has a '/', the --out folder of a documented command (root is then the repository's)."""
    file = root / name / "summary.json"
    with run_fields(file, f"{file}: no number at {path}"):
        value = lookup(json.loads(file.read_text()), path)
        return json.dumps(value) if form == "json" else format(value, form)


def command_folders(text: str) -> set[str]:
    """The --out folders of documented commands that a page quotes: its numbers' and its tables'."""
    return ({m.group(2) for m in NUMBER.finditer(text) if "/" in m.group(2)}
            | {COMMAND_TABLES[m.group(2)][0] for m in BLOCK.finditer(text) if m.group(2) in COMMAND_TABLES})


def runs_line(root: Path, folders: list[str]) -> str:
    """Where the numbers of documented commands come from: when and where they ran."""
    summaries = [root / f / "summary.json" for f in folders]
    missing = [str(f) for f in summaries if not f.exists()]
    if missing:
        raise SourceError(f"{', '.join(missing)} missing: run `make docs-runs` first")
    date = max(datetime.date.fromtimestamp(f.stat().st_mtime) for f in summaries).isoformat()
    return (f"_The numbers marked so in this page come from the summary.json of the commands it shows, run as "
            f"written on {date} on {cpu_model()}: `make docs-runs` then `make docs-numbers`._\n")


def reproductions_line(root: Path) -> str:
    summaries = sorted(root.glob("*/summary.json"))  # the demo's own (date, cpu) is root/summary.json
    if not summaries:
        raise SourceError(f"{root}: no NAME/summary.json in it")
    first = json.loads(summaries[0].read_text())
    sizes = "quick sizes (`--quick`)" if first.get("quick") else "the demo's sizes (`--tour`)" if first.get(
        "tour") else "full sizes"
    machine = json.loads((root / "summary.json").read_text()) if (root / "summary.json").exists() else {}
    date = machine.get("date") or datetime.date.fromtimestamp(summaries[0].stat().st_mtime).isoformat()
    cpu = machine.get("cpu") or cpu_model()
    return (f"_The numbers marked so in this page come from the reproductions' summary.json at {sizes}, "
            f"computed {date} on {cpu}: `tokenflow demo --out {root}` then "
            f"`bench/update_docs.py --reproductions {root}`._\n")


# ---- rewriting -------------------------------------------------------------------------------------

def rewrite(text: str, where: str, runs: dict, reproductions: Path | None, commands: Path | None = None) -> str:
    """text with its marked places rewritten from runs ({"bench": compare.py's JSON, "ot_vs_pot":
    ot_vs_pot.py's}; a missing one leaves its places as they are), the reproductions folder, and
    `commands`, the folder the documented commands' --out paths are relative to (None: those
    numbers are left as they are)."""
    def block(m):
        name = m.group(2)
        if name == "reproductions":
            if reproductions is None:
                return m.group(0)
            body = reproductions_line(reproductions)
        elif name == "runs":
            if commands is None:
                return m.group(0)
            body = runs_line(commands, sorted(command_folders(text)))
        elif name in COMMAND_TABLES:
            if commands is None:
                return m.group(0)
            folder, make = COMMAND_TABLES[name]
            body = make(commands / folder)
        elif name in TABLES:
            source, make = TABLES[name]
            given = reproductions if source == "reproductions" else runs.get(source)
            if given is None:
                return m.group(0)
            body = make(given)
        else:
            raise SourceError(f"unknown generated block '{name}' (one of: reproductions, runs, "
                              f"{', '.join([*TABLES, *COMMAND_TABLES])})")
        return m.group(1) + body + m.group(4)

    def number(m):
        root = commands if "/" in m.group(2) else reproductions
        if root is None:
            return m.group(0)
        return m.group(1) + reproduction_number(root, m.group(2), m.group(3), m.group(4)) + m.group(6)

    try:
        return NUMBER.sub(number, BLOCK.sub(block, text))
    except SourceError as e:
        raise SourceError(f"{where}: {e}") from None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bench", type=Path, help="bench/compare.py --json output")
    ap.add_argument("--ot-vs-pot", type=Path, help="bench/ot_vs_pot.py --json output")
    ap.add_argument("--online-rate", type=Path, help="bench/ot_vs_pot.py --online-rate N --json output")
    ap.add_argument("--exact-vs-emd2", type=Path, help="bench/exact_vs_emd2.py --json output")
    ap.add_argument("--sinkhorn-batch", type=Path, help="bench/sinkhorn_batch_vs_torch.py --json output")
    ap.add_argument("--unbalanced-vs-pot", type=Path, help="bench/unbalanced_vs_pot.py --json output")
    ap.add_argument("--python-threads", type=Path, help="bench/python_threads.py --json output")
    ap.add_argument("--training", type=Path, help="bench/sinkhorn_grad.py --json output")
    ap.add_argument("--train-vs-torch", type=Path, help="bench/train_vs_torch.py --json output")
    ap.add_argument("--fast-summation", type=Path, help="bench/fast_summation.py --json output")
    ap.add_argument("--fast-clusters", type=Path, help="bench/fast_summation.py --clustered --json output")
    ap.add_argument("--dataset-streaming", type=Path, help="bench/dataset_streaming.py --json output")
    ap.add_argument("--training-health", type=Path, help="bench/training_health.py --json output")
    ap.add_argument("--reproductions", type=Path, help="a tokenflow demo (or reproduce) output folder")
    ap.add_argument("--runs", action="store_true",
                    help="also the numbers of documented commands (their --out folders, from `make docs-runs`)")
    ap.add_argument("--check", action="store_true", help="write nothing; exit 1 when a file would change")
    ap.add_argument("files", nargs="*", type=Path)
    args = ap.parse_args(argv)
    files = args.files or [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    try:
        runs = {}
        for source, path, keys, script in (("bench", args.bench, {"comparisons"}, "compare"),
                                           ("ot_vs_pot", args.ot_vs_pot, {"sinkhorn"}, "ot_vs_pot"),
                                           ("online_rate", args.online_rate, {"header", "rows", "ratio_to_attention"},
                                            "ot_vs_pot"),
                                           ("exact_vs_emd2", args.exact_vs_emd2, {"header", "rows", "pot"},
                                            "exact_vs_emd2"),
                                           ("sinkhorn_batch", args.sinkhorn_batch, {"header", "rows", "conditions"},
                                            "sinkhorn_batch_vs_torch"),
                                           ("unbalanced_vs_pot", args.unbalanced_vs_pot, {"header", "rows", "pot"},
                                            "unbalanced_vs_pot"),
                                           ("python_threads", args.python_threads, {"header", "rows", "load"},
                                            "python_threads"),
                                           ("training", args.training, {"rows", "steps"}, "sinkhorn_grad"),
                                           ("train_vs_torch", args.train_vs_torch, {"header", "rows"},
                                            "train_vs_torch"),
                                           ("fast_summation", args.fast_summation, {"header", "rows", "crossover"},
                                            "fast_summation"),
                                           ("fast_clusters", args.fast_clusters, {"header", "rows", "matrices_seed"},
                                            "fast_summation"),
                                           ("dataset_streaming", args.dataset_streaming, {"header", "rows", "pairs"},
                                            "dataset_streaming"),
                                           ("training_health", args.training_health, {"header", "rows", "seeds", "steps"},
                                            "training_health")):
            if path is not None:
                runs[source] = json.loads(path.read_text())
                if not {"date", "cpu", "cores", "command", *keys} <= runs[source].keys():
                    raise SourceError(f"{path}: not a bench/{script}.py --json file")
        if args.reproductions is not None and not args.reproductions.is_dir():
            raise SourceError(f"{args.reproductions}: not a folder")
        rewritten = {}
        for f in files:  # all of them first: a bad marker anywhere leaves every file as it was
            old = f.read_text()
            new = rewrite(old, str(f), runs, args.reproductions, ROOT if args.runs else None)
            if new != old:
                rewritten[f] = new
        if not args.check:
            for f, new in rewritten.items():
                f.write_text(new)
        changed = list(rewritten)
    except (SourceError, OSError, ValueError) as e:
        print(f"update_docs: {e}", file=sys.stderr)
        return 2
    for f in changed:
        print(f"{'would change' if args.check else 'updated'}: {f}")
    return 1 if args.check and changed else 0


if __name__ == "__main__":
    sys.exit(main())
