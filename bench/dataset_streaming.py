"""A dataset of 10^5 pairs trained from disk: peak memory and time per step of `tokenflow train` on
the folder form (one .npz a pair) and the single-file form (train.npz with offsets), which read each
batch's pairs when the step needs them, against training on the same pairs held in memory
(`tokenflow.train(config, pairs=..., test_pairs=...)`).

    /usr/bin/python3 bench/dataset_streaming.py [--pairs 100000] [--test-pairs 100] [--steps 40]
                                                [--dir DIR] [--cli build/tokenflow] [--json FILE]

The pairs: n and m uniform in 8..16, d = 2, points N(0, 1), dense targets (uniform entries,
normalized), fixed seed; written by tokenflow.tasks.save (folder form) and save(single_file=True).
The model: width 16, 1 layer, 2 heads, k 8, 8 Sinkhorn iterations, batch 32. Peak RSS is
/usr/bin/time -v's "Maximum resident set size" of the whole process; the time per step is the
training time of metrics.csv's last row over the steps; "start" is the process's wall time less
the training time (reading and checking every pair once, hashing the files, the evaluations).
--json writes the table for bench/update_docs.py --dataset-streaming (block "dataset-streaming" of
docs/sinkhorn-transformer.md). Needs PYTHONPATH=build/python.
"""
import argparse
import csv
import datetime
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

import numpy as np

import tokenflow.tasks
from tokenflow.tasks import TaskPair

MODEL = {"width": 16, "layers": 1, "heads": 2, "k": 8, "sinkhorn_iters": 8}
BATCH = 32
HEADER = ["training pairs", "peak RSS", "time per step", "start (read, check, hash)"]


def make_pairs(count, rng):
    pairs = []
    for _ in range(count):
        n, m = rng.integers(8, 17, size=2)
        target = rng.uniform(size=(n, m))
        pairs.append(TaskPair(rng.normal(size=(n, 2)), rng.normal(size=(m, 2)), target=target / target.sum()))
    return pairs


def timed(command):
    """Runs command under /usr/bin/time -v: (peak RSS in bytes, wall seconds, its stdout)."""
    r = subprocess.run(["/usr/bin/time", "-v", *command], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"dataset_streaming: {' '.join(command)} failed:\n{r.stderr[-2000:]}")
    rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", r.stderr).group(1)) * 1024
    clock = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): ([\d:.]+)", r.stderr).group(1)
    wall = sum(float(p) * 60**k for k, p in enumerate(reversed(clock.split(":"))))
    return rss, wall, r.stdout


def training_seconds(out):
    with open(os.path.join(out, "metrics.csv")) as f:
        return float(list(csv.DictReader(f))[-1]["seconds"])


IN_MEMORY = """
import json, sys, tokenflow, tokenflow.tasks
train, test = tokenflow.tasks.load(sys.argv[1])
r = tokenflow.train(json.loads(sys.argv[2]), pairs=train, test_pairs=test, progress=False)
print(json.dumps({"seconds": float(r.metrics["seconds"][-1])}))
"""


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pairs", type=int, default=100_000)
    ap.add_argument("--test-pairs", type=int, default=100)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--dir", help="where the datasets go (default: a temporary folder, removed at the end)")
    ap.add_argument("--cli", default="build/tokenflow")
    ap.add_argument("--json", help="also write the table here (for bench/update_docs.py --dataset-streaming)")
    args = ap.parse_args()
    root = args.dir or tempfile.mkdtemp(prefix="dataset-streaming-")
    os.makedirs(root, exist_ok=True)
    rng = np.random.default_rng(0)
    train, test = make_pairs(args.pairs, rng), make_pairs(args.test_pairs, rng)
    tokenflow.tasks.save(os.path.join(root, "folders"), train, test)
    tokenflow.tasks.save(os.path.join(root, "single"), train, test, single_file=True)
    del train, test
    sets = [f"model.{k}={v}" for k, v in MODEL.items()] + [f"train.batch={BATCH}", f"train.steps={args.steps}",
                                                         "train.eval_every=0"]
    rows, results = [], {}
    for form, label in (("folders", "from disk, one .npz a pair"), ("single", "from disk, single file")):
        out = os.path.join(root, "run-" + form)
        command = [args.cli, "train", "--set", "task.kind=dataset", "--set", f"task.path={os.path.join(root, form)}",
                   "--out", out]
        for s in sets:
            command += ["--set", s]
        rss, wall, _ = timed(command)
        results[form] = {"rss": rss, "wall": wall, "train_seconds": training_seconds(out)}
        rows.append([label, rss, results[form]["train_seconds"] / args.steps, wall - results[form]["train_seconds"]])
    config = {"model": MODEL, "train": {"batch": BATCH, "steps": args.steps}}
    rss, wall, stdout = timed([sys.executable, "-c", IN_MEMORY, os.path.join(root, "folders"), json.dumps(config)])
    seconds = json.loads(stdout.strip().splitlines()[-1])["seconds"]
    results["in_memory"] = {"rss": rss, "wall": wall, "train_seconds": seconds}
    rows.append(["in memory (tokenflow.train(pairs=...), Python)", rss, seconds / args.steps, wall - seconds])
    table = [[label, f"{rss / 2**20:.0f} MiB", f"{1e3 * step:.2f} ms", f"{start:.1f} s"] for label, rss, step, start in rows]
    print(" | ".join(HEADER))
    for row in table:
        print(" | ".join(row))
    sizes = {form: sum(os.path.getsize(os.path.join(dp, f)) for dp, _, fs in os.walk(os.path.join(root, form)) for f in fs)
             for form in ("folders", "single")}
    if args.json:  # for bench/update_docs.py (block "dataset-streaming")
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        from update_docs import cpu_model

        with open(args.json, "w") as f:
            json.dump({"date": datetime.date.today().isoformat(), "cpu": cpu_model(), "cores": os.cpu_count(),
                       "command": " ".join(["/usr/bin/python3 bench/dataset_streaming.py", *sys.argv[1:]]),
                       "pairs": args.pairs, "test_pairs": args.test_pairs, "steps": args.steps, "batch": BATCH,
                       "model": MODEL, "bytes": sizes, "load": os.getloadavg()[0], "header": HEADER, "rows": table, "results": results}, f, indent=1)
    if not args.dir:
        shutil.rmtree(root)


if __name__ == "__main__":
    main()
