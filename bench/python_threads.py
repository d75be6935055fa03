#!/usr/bin/python3
"""Python calls as installed against one thread, on a quiet machine and on a busy one.

tokenflow chooses its threads itself (docs/python.md, "Threads"): passive waiting, and threads
only for problems large enough to pay for them. This measures what a user sees, side by side in
one run: the median time of one call as installed (OpenMP's default thread count, every core)
against the same call with OMP_NUM_THREADS=1, for

  pot       tokenflow.pot.sinkhorn(a, b, M, reg): uniform weights, M = dist(x, y) of points
            uniform in [0, 1]^2 (y shifted by 0.3), reg = 1e-2 (POT's call, dense cost matrix)
  points    tokenflow.sinkhorn(x, y, epsilon=1e-2): the same points (the operator chosen by
            size: dense, kernel mode, then the grid)

at each size n (n x n points), on a quiet machine, while one process in a session of its own spins
a loop at the lowest priority (nice 19: "shared", as a compile started from another terminal; the
kernel's per-session groups give it half a core all the same), and while `--busy` other processes
(default: one per core) each spin a Python loop. Each measurement is a fresh interpreter (the OpenMP runtime
reads OMP_NUM_THREADS when it loads) that builds its problem, makes one call to warm up and then
`--calls` timed calls; the configurations alternate within each round (installed, one thread, and
again), `--rounds` rounds, so that a change of the machine's load falls on both. The table: the
median over all timed calls of a configuration, and the ratio installed / one thread (the goal:
at most 2 under both conditions).

Run by hand from the repository root after `make build` (not part of the tests):
    /usr/bin/python3 bench/python_threads.py [--sizes 100 300 1000 3000 10000] [--calls 5]
                                             [--rounds 3] [--busy N] [--json build/python_threads.json]
`bench/update_docs.py --python-threads build/python_threads.json` puts the table in docs/python.md.
"""
import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PYTHONPATH = os.environ.get("PYTHONPATH") or os.path.join(ROOT, "build", "python")
# The dense cost matrix of the pot call holds n^2 doubles (and the solver its transpose and the
# plan): above this size only the points call runs.
POT_MAX_N = 3000

CHILD = r"""
import sys, time
import numpy as np
kind, n, calls = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rng = np.random.default_rng(n)
x = rng.uniform(size=(n, 2))
y = rng.uniform(size=(n, 2)) + 0.3
if kind == "pot":
    import tokenflow.pot as ot
    a = b = ot.unif(n)
    M = ot.dist(x, y)
    call = lambda: ot.sinkhorn(a, b, M, 1e-2)
else:
    import tokenflow
    call = lambda: tokenflow.sinkhorn(x, y, epsilon=1e-2, progress=False)
call()
times = []
for _ in range(calls):
    t = time.perf_counter()
    call()
    times.append(time.perf_counter() - t)
print(" ".join(repr(t) for t in times))
"""


def measure(kind, n, calls, one_thread):
    env = dict(os.environ, PYTHONPATH=PYTHONPATH, CI="1")
    env.pop("OMP_NUM_THREADS", None)
    if one_thread:
        env["OMP_NUM_THREADS"] = "1"
    r = subprocess.run([sys.executable, "-c", CHILD, kind, str(n), str(calls)], env=env, capture_output=True,
                       text=True, timeout=3600)
    if r.returncode != 0:
        raise RuntimeError(f"{kind} n = {n}: {r.stderr[-2000:]}")
    return [float(t) for t in r.stdout.split()]


class Busy:
    """`count` processes that each spin a Python loop until stopped (`shared`: in sessions of their
    own, at nice 19)."""

    def __init__(self, count, shared=False):
        self.count, self.shared, self.procs = count, shared, []

    def __enter__(self):
        extra = {"start_new_session": True, "preexec_fn": lambda: os.nice(19)} if self.shared else {}
        self.procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"], **extra) for _ in range(self.count)]
        time.sleep(0.5)  # let them take their cores
        return self

    def __exit__(self, *exc):
        for p in self.procs:
            p.terminate()
        for p in self.procs:
            p.wait()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=[100, 300, 1000, 3000, 10000])
    ap.add_argument("--calls", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--busy", type=int, default=os.cpu_count() or 2, help="busy processes (default: one per core)")
    ap.add_argument("--json", help="write the run here (bench/update_docs.py --python-threads)")
    args = ap.parse_args()

    cases = [(kind, n) for n in args.sizes for kind in ("pot", "points") if kind == "points" or n <= POT_MAX_N]
    conditions = ("quiet", "shared", "busy")
    times = {(kind, n, cond, cfg): [] for kind, n in cases for cond in conditions
             for cfg in ("installed", "one thread")}
    loads = []
    for cond in conditions:
        for r in range(args.rounds):
            for kind, n in cases:
                with Busy({"quiet": 0, "shared": 1, "busy": args.busy}[cond], shared=cond == "shared"):
                    for cfg in ("installed", "one thread") if r % 2 == 0 else ("one thread", "installed"):
                        times[(kind, n, cond, cfg)] += measure(kind, n, args.calls, cfg == "one thread")
                    loads.append(os.getloadavg()[0])
                print(f"{cond} round {r + 1}: {kind} n = {n} done (load {loads[-1]:.1f})", file=sys.stderr)

    header = ["call", "n"] + [f"{cond}: {what}" for cond in conditions for what in ("installed", "1 thread", "ratio")]
    rows, worst = [], 0.0
    for kind, n in cases:
        row = ["`ot.sinkhorn(a, b, M, 1e-2)`" if kind == "pot" else "`tokenflow.sinkhorn(x, y)`, epsilon 1e-2", str(n)]
        for cond in conditions:
            mine = statistics.median(times[(kind, n, cond, "installed")])
            one = statistics.median(times[(kind, n, cond, "one thread")])
            worst = max(worst, mine / one)
            row += [f"{mine:.3g} s", f"{one:.3g} s", f"**{mine / one:.2f}x**"]
        rows.append(row)
    print("| " + " | ".join(header) + " |\n|" + "---|" * len(header))
    for row in rows:
        print("| " + " | ".join(row) + " |")
    print(f"worst ratio installed / one thread: {worst:.2f}")
    if args.json:
        cpu = "unknown"
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
        run = {"date": datetime.date.today().isoformat(), "cpu": cpu, "cores": os.cpu_count(),
               "command": "bench/python_threads.py " + " ".join(sys.argv[1:]), "header": header, "rows": rows,
               "worst_ratio": worst, "busy": args.busy, "calls": args.calls, "rounds": args.rounds,
               "load": [min(loads), max(loads)],
               "times": {" / ".join(map(str, k)): v for k, v in times.items()}}
        with open(args.json, "w") as f:
            json.dump(run, f, indent=1)


if __name__ == "__main__":
    main()
