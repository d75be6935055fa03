#!/usr/bin/python3
"""The final Sinkhorn layer trained unrolled against implicit (model.sinkhorn_grad), on the four
coupling tasks, in one run.

Run by hand from the repository root after `make build` (not part of the tests):
    /usr/bin/python3 bench/sinkhorn_grad.py                       # 500 steps per task and mode
    /usr/bin/python3 bench/sinkhorn_grad.py --steps 100 --json build/sinkhorn_grad.json

Each run is `tokenflow train` with the settings of docs/sinkhorn-transformer.md's "Other tasks"
(f32, cosine schedule with 50 warm-up steps, 128 test pairs, the default model) and
--set model.sinkhorn_grad=... Reported from its summary.json: test W_1 and accuracy of the model's
own plan, of the converged plan of its cost (what `tokenflow couple` returns), the model plan's
marginal error, training seconds per step; peak memory (max RSS) from /usr/bin/time -v.

The unrolled runs (train's default), with one more of matching with model.share_encoders = true,
also give the "Other tasks" table: test W_1 against the untrained model's and the independent
coupling's, accuracy (untrained), wall seconds of the process.
"""
import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CLI = os.environ.get("TOKENFLOW_CLI", os.path.join(ROOT, "build", "tokenflow"))
TASKS = [("matching", []), ("sorting", []), ("whitened-ot", []), ("entropic-ot, p = 2", ["--set", "task.p=2"])]
HEADER = ["task", "sinkhorn_grad", "test W_1", "accuracy", "W_1 of the converged plan", "its accuracy",
          "plan's marginal error", "ms / step", "peak MiB"]
OTHER_HEADER = ["task", "test W_1", "untrained", "independent", "accuracy (untrained)", "wall s"]


def train(task, extra, grad, steps, work, other=None):
    """One run: its row of the unrolled-against-implicit table; appends its "Other tasks" row to
    `other` when given."""
    out = os.path.join(work, f"{task.split(',')[0]}-{grad}-{len(extra)}")
    kind = task.split(",")[0]
    argv = ["/usr/bin/time", "-v", CLI, "train", "--set", 'dtype="f32"', "--set", f'task.kind="{kind}"', *extra,
            "--set", f"train.steps={steps}", "--set", "train.warmup=50", "--set", 'train.schedule="cosine"',
            "--set", f"train.eval_every={steps}", "--set", "train.test_pairs=128",
            "--set", f'model.sinkhorn_grad="{grad}"', "--out", out]
    r = subprocess.run(argv, capture_output=True, text=True, env=dict(os.environ, CI="1"))
    if r.returncode != 0:
        sys.exit(f"tokenflow train failed ({task}, {grad}): {r.stderr}")
    rss_kb = next(int(line.split(":")[1]) for line in r.stderr.splitlines() if "Maximum resident set size" in line)
    s = json.load(open(os.path.join(out, "summary.json")))

    def fmt(key, spec):
        v = s.get(key)
        return "n/a" if v is None else format(v, spec)

    if other is not None:
        accuracy = "n/a" if s.get("test_accuracy") is None else f"{fmt('test_accuracy', '.4f')} ({fmt('test_accuracy_untrained', '.3f')})"
        other.append([task, fmt("test_w1", ".4f"), fmt("test_w1_untrained", ".3f"), fmt("test_w1_independent", ".3f"),
                      accuracy, f"{s['wall_seconds']:.0f}"])
    return [task, grad, fmt("test_w1", ".4f"), fmt("test_accuracy", ".4f"), fmt("test_w1_converged", ".4f"),
            fmt("test_accuracy_converged", ".4f"), fmt("test_marginal_error", ".1e"),
            f"{1e3 * s['train_seconds'] / steps:.1f}", f"{rss_kb / 1024:.0f}"]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=500)
    p.add_argument("--json", help="also write the table here (for bench/update_docs.py --training)")
    args = p.parse_args()
    work = tempfile.mkdtemp(prefix="tf-sinkhorn-grad-")
    rows, other = [], []
    for task, extra in TASKS:
        for grad in ["unrolled", "implicit"]:
            rows.append(train(task, extra, grad, args.steps, work, other if grad == "unrolled" else None))
            print("  ".join(rows[-1]), flush=True)
        if task == "matching":
            train("matching, share_encoders", ["--set", "model.share_encoders=true"], "unrolled", args.steps, work, other)
            print("  ".join(other[-1]), flush=True)
    print("| " + " | ".join(HEADER) + " |\n|" + "---|" * len(HEADER))
    for r in rows:
        print("| " + " | ".join(r) + " |")
    if args.json:
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        from update_docs import cpu_model

        with open(args.json, "w") as f:
            json.dump({"date": datetime.date.today().isoformat(), "cpu": cpu_model(), "cores": os.cpu_count(),
                       "command": " ".join(["bench/sinkhorn_grad.py", *sys.argv[1:]]), "steps": args.steps,
                       "header": HEADER, "rows": rows, "other_header": OTHER_HEADER, "other_rows": other}, f, indent=1)


if __name__ == "__main__":
    main()
