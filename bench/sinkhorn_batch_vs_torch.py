#!/usr/bin/python3
"""A batch of entropic OT problems with gradients: tokenflow.torch.sinkhorn_samples (the pairs solved
concurrently in C++, implicit gradients) against a batched log-domain Sinkhorn loop in plain torch
differentiated by autograd through its iterations, side by side in one run.

Run by hand from the repository root after `make build` (not part of the tests):
    /usr/bin/python3 bench/sinkhorn_batch_vs_torch.py [--pairs 64] [--sizes 200 1000] [--d 2]
                                                     [--epsilon 0.25] [--tol 1e-9] [--seed 0] [--json PATH]
    /usr/bin/python3 bench/sinkhorn_batch_vs_torch.py --configs 64:100-300 16:200-1000 64:200-1000 \
                                                     --json build/sinkhorn_batch.json   # docs/python.md's table

The problems: `pairs` pairs of point clouds, each side's size drawn uniformly from `sizes`, the
points uniform in [0, 1]^d, uniform weights, the squared Euclidean cost |x - y|^2; padded to the
largest sizes with zero weights (the torch loop needs one (B, n, m) tensor; tokenflow solves each
pair on its support). Both sides run in float64, with the same epsilon and the same stopping rule:
marginal error |pi 1 - a|_1 + |pi^T 1 - b|_1 below tol (torch checks it after every iteration, for
every pair; its rows are exact after its f step, so it is the column error). Two losses, each
timed forward and backward as one call, its gradient in x and y compared:
  value  sum over pairs of OT_eps (tokenflow: the envelope theorem, no linear solve)
  plan   sum over pairs of <C, pi> (tokenflow: the implicit gradient of the plan, one dense
         (n + m - 1) linear solve per pair)
Each side runs in its own process (a fresh interpreter that imports torch and builds the
problems), so that its peak resident memory (ru_maxrss) is its own; "peak MiB" is that peak minus
the process's resident memory before the solve. "grad rel. diff." is max |grad_tokenflow -
grad_torch| / max |grad_torch| over the entries of the gradient in (x, y).
The torch side keeps (B, n, m) float64 tensors of every iteration for its backward (64 x 1000 x
1000: 512 MB each); each side runs with its address space capped (--memory-gib, default 70% of
the available memory), so that a torch run that does not fit fails with an allocation error, and
its row says so, instead of taking the machine down.
"""
import argparse
import datetime
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "build", "python"))


def problems(pairs, sizes, d, seed):
    """x (B, N, d), y (B, M, d), a (B, N), b (B, M) float64, padded with zero weights."""
    rng = np.random.default_rng(seed)
    n = rng.integers(sizes[0], sizes[1] + 1, pairs)
    m = rng.integers(sizes[0], sizes[1] + 1, pairs)
    N, M = int(n.max()), int(m.max())
    x, y = np.zeros((pairs, N, d)), np.zeros((pairs, M, d))
    a, b = np.zeros((pairs, N)), np.zeros((pairs, M))
    for k in range(pairs):
        x[k, :n[k]], y[k, :m[k]] = rng.random((n[k], d)), rng.random((m[k], d))
        a[k, :n[k]], b[k, :m[k]] = 1.0 / n[k], 1.0 / m[k]
    return [torch.from_numpy(v) for v in (x, y, a, b)]


def torch_loop(x, y, a, b, epsilon, tol, max_iter, loss):
    """The batched log-domain loop (g then f, as include/tokenflow/ot.hpp), unrolled for autograd."""
    C = ((x[:, :, None, :] - y[:, None, :, :]) ** 2).sum(-1)
    la, lb = torch.log(a), torch.log(b)  # -inf on the padding: exp gives 0 there
    f = torch.zeros_like(a)
    for iteration in range(1, max_iter + 1):
        g = -epsilon * torch.logsumexp(la[:, :, None] + (f[:, :, None] - C) / epsilon, dim=1)
        f = -epsilon * torch.logsumexp(lb[:, None, :] + (g[:, None, :] - C) / epsilon, dim=2)
        with torch.no_grad():
            plan = torch.exp(la[:, :, None] + lb[:, None, :] + (f[:, :, None] + g[:, None, :] - C) / epsilon)
            error = float(((plan.sum(1) - b).abs().sum(1) + (plan.sum(2) - a).abs().sum(1)).max())
            del plan
        if error < tol:
            break
    else:
        sys.exit(f"torch: no convergence in {max_iter} iterations (marginal error {error:g})")
    if loss == "value":
        return (a * f).sum() + (b * g).sum(), iteration
    plan = torch.exp(la[:, :, None] + lb[:, None, :] + (f[:, :, None] + g[:, None, :] - C) / epsilon)
    return (C * plan).sum(), iteration


def run_side(args):
    """One side in this process: times forward + backward, writes the gradient and a JSON line."""
    torch.set_num_threads(os.cpu_count())  # both sides: torch's own operations on every core
    x, y, a, b = problems(args.pairs, args.sizes, args.d, args.seed)
    x.requires_grad_(), y.requires_grad_()
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    if args.memory_gib:  # address space: what is mapped now plus the budget (an allocation past it fails)
        with open("/proc/self/status") as f:
            mapped = next(int(line.split()[1]) for line in f if line.startswith("VmSize")) * 1024
        limit = mapped + int(args.memory_gib * 2**30)
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    start = time.perf_counter()
    if args.side == "tokenflow":
        import tokenflow.torch as tt
        r = tt.sinkhorn_samples(x, y, a, b, epsilon=args.epsilon, tol=args.tol, divergence=False)
        value = r.objective.sum() if args.loss == "value" else r.cost.sum()
        iterations = None
    else:
        try:
            value, iterations = torch_loop(x, y, a, b, args.epsilon, args.tol, 100000, args.loss)
            value.backward()
        except (RuntimeError, MemoryError) as error:
            if "memory" not in str(error).lower() and not isinstance(error, MemoryError):
                raise
            print(json.dumps(dict(error=f"out of memory within {args.memory_gib:g} GiB")))
            return
    forward = time.perf_counter() - start
    if args.side == "tokenflow":
        value.backward()
    seconds = time.perf_counter() - start
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    np.savez(args.grad_out, x=x.grad.numpy(), y=y.grad.numpy())
    print(json.dumps(dict(seconds=seconds, forward=forward, loss=float(value), iterations=iterations,
                          peak_mib=(rss - rss_before) / 1024)))


def side(args, which, loss, work):
    path = os.path.join(work, f"{which}-{loss}.npz")
    argv = [sys.executable, os.path.abspath(__file__), "--side", which, "--loss", loss, "--grad-out", path,
            "--pairs", str(args.pairs), "--sizes", *map(str, args.sizes), "--d", str(args.d),
            "--epsilon", repr(args.epsilon), "--tol", repr(args.tol), "--seed", str(args.seed),
            "--memory-gib", repr(args.memory_gib)]
    r = subprocess.run(argv, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"{which} ({loss}) failed: {r.stderr.strip()}")
    out = json.loads(r.stdout.strip().splitlines()[-1])
    if "error" in out:
        return out
    grad = np.load(path)
    out["grad"] = np.concatenate([grad["x"].ravel(), grad["y"].ravel()])
    return out


def cpu_name():
    with open("/proc/cpuinfo") as f:
        return next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "unknown")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--pairs", type=int, default=64)
    p.add_argument("--sizes", type=int, nargs=2, default=[200, 1000])
    p.add_argument("--d", type=int, default=2)
    p.add_argument("--epsilon", type=float, default=0.25)
    p.add_argument("--tol", type=float, default=1e-9)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--memory-gib", type=float, default=None,
                   help="address space each side may add (default: 70%% of MemAvailable); past it torch's "
                        "allocation fails and its row says so")
    p.add_argument("--configs", nargs="+", metavar="PAIRS:LOW-HIGH",
                   help="several batches in one run, one after the other (e.g. 64:100-300 16:200-1000); "
                        "default: --pairs and --sizes")
    p.add_argument("--json", help="also write the table here (bench/update_docs.py --sinkhorn-batch)")
    p.add_argument("--side", choices=["tokenflow", "torch"], help=argparse.SUPPRESS)
    p.add_argument("--loss", choices=["value", "plan"], help=argparse.SUPPRESS)
    p.add_argument("--grad-out", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.memory_gib is None:
        with open("/proc/meminfo") as f:
            available = next(int(line.split()[1]) for line in f if line.startswith("MemAvailable")) * 1024
        args.memory_gib = round(0.7 * available / 2**30, 1)
    if args.side:
        return run_side(args)
    configs = args.configs or [f"{args.pairs}:{args.sizes[0]}-{args.sizes[1]}"]
    header = ["pairs, sizes", "loss", "tokenflow s", "torch s", "ratio", "tokenflow peak MiB", "torch peak MiB",
              "torch iterations", "grad rel. diff."]
    rows = []
    for config in configs:
        try:
            pairs, sizes = config.split(":")
            args.pairs, args.sizes = int(pairs), [int(v) for v in sizes.split("-")]
            assert len(args.sizes) == 2 and 1 <= args.sizes[0] <= args.sizes[1] and args.pairs >= 1
        except (ValueError, AssertionError):
            sys.exit(f"--configs: {config!r} is not PAIRS:LOW-HIGH (e.g. 64:200-1000)")
        with tempfile.TemporaryDirectory() as work:
            for loss in ("value", "plan"):
                tf, tr = side(args, "tokenflow", loss, work), side(args, "torch", loss, work)
                if "error" in tf:
                    sys.exit(f"tokenflow ({loss}): {tf['error']}")
                label = f"{args.pairs}, {args.sizes[0]}-{args.sizes[1]}"
                if "error" in tr:
                    rows.append([label, loss, f"{tf['seconds']:.3g}", tr["error"], "", f"{tf['peak_mib']:.0f}", "", "",
                                 ""])
                else:
                    diff = float(np.abs(tf["grad"] - tr["grad"]).max() / np.abs(tr["grad"]).max())
                    rows.append([label, loss, f"{tf['seconds']:.3g}", f"{tr['seconds']:.3g}",
                                 f"**{tr['seconds'] / tf['seconds']:.1f}x**", f"{tf['peak_mib']:.0f}",
                                 f"{tr['peak_mib']:.0f}", str(tr["iterations"]), f"{diff:.1e}"])
                print("| " + " | ".join(rows[-1]) + " |", flush=True)
    conditions = (f"d = {args.d}, epsilon = {args.epsilon:g}, tol = {args.tol:g}, float64, forward + backward; "
                  f"torch {torch.__version__} with {os.cpu_count()} threads; each side's address space capped at "
                  f"{args.memory_gib:g} GiB above its start; load {os.getloadavg()[0]:.1f} at the end")
    print(f"CPU {cpu_name()}, {os.cpu_count()} cores; {conditions}; {datetime.date.today()}")
    print("| " + " | ".join(header) + " |\n|" + "---|" * len(header))
    for row in rows:
        print("| " + " | ".join(row) + " |")
    if args.json:  # for bench/update_docs.py (block "sinkhorn-batch")
        with open(args.json, "w") as f:
            json.dump(dict(date=datetime.date.today().isoformat(), cpu=cpu_name(), cores=os.cpu_count(),
                           command=" ".join(["/usr/bin/python3", "bench/sinkhorn_batch_vs_torch.py", *sys.argv[1:]]),
                           conditions=conditions, header=header, rows=rows), f, indent=1)

if __name__ == "__main__":
    main()
