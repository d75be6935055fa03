"""One training step of the Sinkhorn Transformer: tokenflow (C++) against the same model in
Debian's PyTorch, side by side in one run.

    /usr/bin/python3 bench/train_vs_torch.py [--steps 10] [--rounds 2] [--threads 1 2] [--dtypes f32 f64]
                                             [--train-step EXE] [--json build/train_vs_torch.json]

The model and batch are `tokenflow train`'s defaults: matching, n = m = 16, d = 2, batch 32, width 64,
2 layers, 4 heads, k 32, epsilon 1, 30 Sinkhorn iterations, AdamW. PyTorch runs
tests/fixtures/torch_sinkhorn_transformer.py (the reference the C++ model is checked against) on a
fixed, pre-generated batch (B, n, d) tensors: forward, KL loss, autograd backward, AdamW step.
tokenflow runs build/bench/tokenflow_bench_train_step, whose steps also generate their 32 fresh pairs.
For each thread count and dtype the two alternate (torch, C++, torch, C++) so that they share the
machine's load; the table gives the median wall time per step, and the CPU time per step (the best
of the rounds). --json writes the table for bench/update_docs.py --train-vs-torch (block
"train-vs-torch" of docs/sinkhorn-transformer.md; `make docs-numbers` reads build/train_vs_torch.json).
--train-step (default build/bench/tokenflow_bench_train_step) names the C++ half when the build is
elsewhere.
"""
import argparse
import datetime
import json
import math
import os
import re
import statistics
import subprocess
import sys
import time

import numpy as np
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "fixtures"))
sys.path.insert(0, os.path.join(ROOT, "bench"))
from torch_sinkhorn_transformer import SinkhornTransformer, adamw, kl_loss  # noqa: E402

CONFIG = dict(d=2, width=64, layers=2, heads=4, k=32, epsilon=1.0, sinkhorn_iters=30)
B, N = 32, 16


def matching_batch(dtype, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1, 1, (B, N, 2))
    s = rng.uniform(0.5, 2.0, (B, 1, 1))
    t = rng.normal(0, 1, (B, 1, 2))
    perm = np.stack([rng.permutation(N) for _ in range(B)])
    y = np.stack([s[b] * x[b, perm[b]] + t[b] for b in range(B)]) + 0.02 * rng.normal(size=(B, N, 2))
    target = np.zeros((B, N, N))
    for b in range(B):
        target[b, perm[b], np.arange(N)] = 1.0 / N
    log_w = np.full((B, N), -math.log(N))
    return [torch.tensor(v, dtype=dtype) for v in (x, y, log_w, log_w, target)]


def torch_step_time(dtype_name, threads, steps):
    torch.set_num_threads(threads)
    dtype = torch.float32 if dtype_name == "f32" else torch.float64
    torch.manual_seed(0)
    model = SinkhornTransformer(**CONFIG).to(dtype)
    opt = adamw(model, 1e-3, 0.0)
    x, y, la, lb, target = matching_batch(dtype)

    def step():
        opt.zero_grad()
        log_plan, _, _ = model.log_plan(x, y, la, lb)
        loss = kl_loss(target, log_plan)
        loss.backward()
        opt.step()

    for _ in range(3):
        step()
    walls, cpu0 = [], time.process_time()
    for _ in range(steps):
        t0 = time.perf_counter()
        step()
        walls.append(time.perf_counter() - t0)
    return statistics.median(walls), (time.process_time() - cpu0) / steps


def cpp_step_time(exe, dtype_name, threads, steps):
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    out = subprocess.run([exe, "--set", f'dtype="{dtype_name}"', "--steps", str(steps), "--warmup", "3"],
                         env=env, check=True, capture_output=True, text=True).stdout
    r = json.loads(out)
    return r["seconds_per_step"], r["cpu_seconds_per_step"]


HEADER = ["dtype", "threads", "torch ms/step", "tokenflow ms/step", "speed-up", "torch CPU ms", "tokenflow CPU ms"]


def blas_info():
    """PyTorch's BLAS_INFO (Debian's build: "generic", the reference BLAS), or "unknown"."""
    m = re.search(r"BLAS_INFO=([^,\s]+)", torch.__config__.show())
    return m.group(1) if m else "unknown"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--dtypes", nargs="+", default=["f32", "f64"])
    ap.add_argument("--rounds", type=int, default=2, help="alternations of torch and C++ per setting")
    ap.add_argument("--train-step", default=os.path.join(ROOT, "build", "bench", "tokenflow_bench_train_step"),
                    help="the C++ half (a build's bench/tokenflow_bench_train_step)")
    ap.add_argument("--json", help="also write the table here (for bench/update_docs.py --train-vs-torch)")
    args = ap.parse_args()
    if not os.access(args.train_step, os.X_OK):
        sys.exit(f"train_vs_torch: {args.train_step} not found (configure with -DTOKENFLOW_BENCH=ON, or --train-step)")
    print(f"torch {torch.__version__}; model {CONFIG}, batch {B} pairs of n = m = {N}; load average "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    print(f"{'dtype':>5} {'threads':>7} {'torch ms/step':>14} {'tokenflow ms/step':>18} {'speed-up':>9}"
          f" {'torch cpu ms':>13} {'tokenflow cpu ms':>17}")
    results = []
    for dtype in args.dtypes:
        for threads in args.threads:
            tw, tc, cw, cc = [], [], [], []
            for _ in range(args.rounds):
                w, c = torch_step_time(dtype, threads, args.steps)
                tw.append(w)
                tc.append(c)
                w, c = cpp_step_time(args.train_step, dtype, threads, args.steps)
                cw.append(w)
                cc.append(c)
            r = dict(dtype=dtype, threads=threads, torch_seconds=min(tw), tokenflow_seconds=min(cw),
                     torch_cpu_seconds=min(tc), tokenflow_cpu_seconds=min(cc))
            r["speedup"] = r["torch_seconds"] / r["tokenflow_seconds"]
            results.append(r)
            print(f"{dtype:>5} {threads:>7} {1e3 * r['torch_seconds']:>14.1f} {1e3 * r['tokenflow_seconds']:>18.1f} "
                  f"{r['speedup']:>8.1f}x {1e3 * r['torch_cpu_seconds']:>13.1f} {1e3 * r['tokenflow_cpu_seconds']:>17.1f}",
                  flush=True)
    if args.json:  # for bench/update_docs.py (block "train-vs-torch")
        from update_docs import cpu_model

        rows = [[r["dtype"], r["threads"], f"{1e3 * r['torch_seconds']:.1f}", f"{1e3 * r['tokenflow_seconds']:.1f}",
                 f"{r['speedup']:.1f}x", f"{1e3 * r['torch_cpu_seconds']:.1f}",
                 f"{1e3 * r['tokenflow_cpu_seconds']:.1f}"] for r in results]
        with open(args.json, "w") as f:
            json.dump({"date": datetime.date.today().isoformat(), "cpu": cpu_model(), "cores": os.cpu_count(),
                       "command": " ".join(["/usr/bin/python3 bench/train_vs_torch.py", *sys.argv[1:]]),
                       "torch": torch.__version__, "blas": blas_info(), "rounds": args.rounds, "steps": args.steps,
                       "load": os.getloadavg()[0], "config": CONFIG, "batch": B, "n": N, "header": HEADER,
                       "rows": rows, "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
