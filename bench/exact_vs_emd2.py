#!/usr/bin/python3
"""Exact OT: `tokenflow.exact_ot(M=M)` against POT's `ot.emd2(a, b, M)` on the same cost matrices.

Run by hand from the repository root after `make build` (not part of the tests):
    /usr/bin/python3 bench/exact_vs_emd2.py                          # n = m = 500 ... 5000, d = 2, 3
    /usr/bin/python3 bench/exact_vs_emd2.py --sizes 2000 --dims 2 --repeat 3
    /usr/bin/python3 bench/exact_vs_emd2.py --json bench/results/exact_vs_emd2.json

Problems: x, y uniform in [0, 1]^d (n = m points each, a fresh draw per size and dimension from
--seed), uniform weights, M = ot.dist(x, y) (squared Euclidean), the same M for both solvers.
Two measurements per problem, each solver in its own fresh process (so that one's memory does not
count against the other):
  call     the solver call alone, given M (best of --repeat calls in one process);
  process  the whole process: start Python, import the package, draw the points, build M, solve
           (wall clock of the child process, and its peak resident memory, ru_maxrss).
  extra    peak resident memory minus the resident memory just before the call (M built): what the
           solver itself holds at its peak, plan included.
Costs: |tokenflow - POT| (absolute; the costs are O(d / 6)).
Threads: one (OMP_NUM_THREADS = OPENBLAS_NUM_THREADS = 1), both solvers are single-threaded.
"""
import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def resident_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def child(solver, n, d, seed, repeat):
    """One solver in this (fresh) process; prints one JSON line."""
    start = time.perf_counter()
    import numpy as np
    import ot
    if solver == "tokenflow":
        sys.path.insert(0, os.path.join(ROOT, "build", "python"))
        import tokenflow
    rng = np.random.default_rng(seed)
    x, y = rng.random((n, d)), rng.random((n, d))
    a = np.full(n, 1.0 / n)
    b = np.full(n, 1.0 / n)
    M = ot.dist(x, y)
    before = resident_bytes()
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        if solver == "pot":
            cost = float(ot.emd2(a, b, M, numItermax=10**9))
        else:
            cost = float(tokenflow.exact_ot(M=M, a=a, b=b).cost)
        best = min(best, time.perf_counter() - t)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps(dict(cost=cost, call_seconds=best, process_seconds=time.perf_counter() - start,
                          peak_bytes=peak, extra_bytes=peak - before)))


def run_child(solver, n, d, seed, repeat):
    t = time.perf_counter()
    r = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", solver, str(n), str(d),
                        str(seed), str(repeat)], capture_output=True, text=True)
    wall = time.perf_counter() - t
    if r.returncode != 0:
        sys.exit(f"{solver} failed at n = {n}, d = {d}: {r.stderr}")
    result = json.loads(r.stdout.strip().splitlines()[-1])
    result["process_seconds"] = wall  # the whole child, interpreter start included
    return result


HEADER = ["n = m", "d", "emd2 call s", "tokenflow call s", "emd2 / tokenflow (call)", "emd2 process s",
          "tokenflow process s", "emd2 / tokenflow (process)", "emd2 extra MB", "tokenflow extra MB",
          "|cost difference|"]


def markdown(header, rows):
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(map(str, r)) + " |" for r in rows]
    return "\n".join(lines)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[500, 1000, 2000, 3000, 5000])
    p.add_argument("--dims", type=int, nargs="+", default=[2, 3])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--repeat", type=int, default=1, help="calls per process; the best is reported")
    p.add_argument("--json", help="also write the table and the conditions to this file")
    args = p.parse_args()
    rows = []
    worst = 0.0
    for d in args.dims:
        for n in args.sizes:
            seed = args.seed * 1000003 + n * 10 + d
            pot = run_child("pot", n, d, seed, args.repeat)
            tf = run_child("tokenflow", n, d, seed, args.repeat)
            diff = abs(pot["cost"] - tf["cost"])
            worst = max(worst, diff)
            rows.append([n, d, f"{pot['call_seconds']:.3g}", f"{tf['call_seconds']:.3g}",
                         f"{pot['call_seconds'] / tf['call_seconds']:.2f}", f"{pot['process_seconds']:.3g}",
                         f"{tf['process_seconds']:.3g}", f"{pot['process_seconds'] / tf['process_seconds']:.2f}",
                         f"{pot['extra_bytes'] / 1e6:.0f}", f"{tf['extra_bytes'] / 1e6:.0f}", f"{diff:.1e}"])
            print(*rows[-1], flush=True)
    import datetime

    import ot
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from update_docs import cpu_model
    cpu = cpu_model()
    conditions = (f"{cpu}, {os.cpu_count()} cores, one thread each, POT {ot.__version__}, "
                  f"Python {platform.python_version()}, best of {args.repeat} call(s), seed {args.seed}, "
                  f"load {os.getloadavg()[0]:.1f} at the end")
    print(conditions)
    print(markdown(HEADER, rows))
    print(f"largest |cost difference|: {worst:.1e}")
    if args.json:  # for bench/update_docs.py (block "exact-vs-emd2")
        with open(args.json, "w") as f:
            json.dump({"date": datetime.date.today().isoformat(), "cpu": cpu, "cores": os.cpu_count(),
                       "command": " ".join(["bench/exact_vs_emd2.py", *sys.argv[1:]]), "load": os.getloadavg()[0],
                       "pot": ot.__version__, "repeat": args.repeat, "header": HEADER, "rows": rows,
                       "worst_cost_difference": worst}, f, indent=1)

if __name__ == "__main__":
    if len(sys.argv) == 6 and sys.argv[1] == "--child":
        child(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), 1)
    elif len(sys.argv) == 7 and sys.argv[1] == "--child":
        child(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6]))
    else:
        main()
