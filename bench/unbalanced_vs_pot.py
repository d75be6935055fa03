#!/usr/bin/python3
"""Unbalanced Sinkhorn: tokenflow.pot.unbalanced against POT's ot.unbalanced.sinkhorn_unbalanced
(Debian's python3-pot 0.8) on the same problems, and tokenflow's unbalanced solve against its
balanced solve of the same problem (iterations).

Run by hand from the repository root after `make build` (not part of the tests):
    /usr/bin/python3 bench/unbalanced_vs_pot.py                        # n = 200 and 1000
    /usr/bin/python3 bench/unbalanced_vs_pot.py --sizes 200 --json build/unbalanced_vs_pot.json

Problems: x ~ U[0, 1]^2 (n points), y ~ U[0, 1]^2 + 0.3 (n points), cost |x - y|^2, weights uniform
with masses 0.7 and 1.3; reg (eps) in {0.05, 0.2}, reg_m (rho) in {0.1, 1, 10}.
Solvers, both to the same accuracy of the plan (the l1 distance of its marginals to their fixed
point, |pi 1 - a e^{-f/rho}|_1 + |pi^T 1 - b e^{-g/rho}|_1 < 1e-9, measured on each plan here):
  POT        ot.unbalanced.sinkhorn_unbalanced (the scaling loop on K = exp(-M / reg)); its own
             stopping rule (relative change of the scalings) is tightened tenfold from 1e-9 until the
             plan's measured error is below 1e-9 (or 200 000 iterations); the time is that last run's.
  tokenflow  tokenflow.pot.unbalanced.sinkhorn_unbalanced(..., stopThr=1e-9) (the log-domain loop,
             Anderson-accelerated, one thread).
  balanced   tokenflow.sinkhorn on the same cost with the weights normalized (the balanced problem),
             tol 1e-9: its iterations, against the unbalanced solve's.
Threads: OMP_NUM_THREADS / OPENBLAS_NUM_THREADS, 1 each unless set.
"""
import argparse
import datetime
import json
import os
import sys
import time
import warnings

THREADS = os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", THREADS)
import numpy as np  # noqa: E402
import ot  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "build", "python"))
import tokenflow  # noqa: E402
import tokenflow.pot as tfot  # noqa: E402

TOL = 1e-9
HEADER = ["n", "reg", "reg_m", "POT s", "POT iterations", "POT error", "tokenflow s", "tokenflow iterations",
          "tokenflow error", "speed-up", "balanced iterations", "unbalanced / balanced"]


def fixed_point_error(P, a, b, log, reg, reg_m):
    """|P 1 - t|_1 + |P^T 1 - s|_1 for a plan P = u K v of POT's problem, with the fixed point's
    marginals t = a u^(-reg / reg_m), s = b v^(-reg / reg_m) (at POT's fixed point u = (a / Kv)^fi,
    fi = reg_m / (reg_m + reg), so P 1 = u Kv = a u^(1 - 1 / fi)); u, v from log["logu"], log["logv"],
    which both solvers return."""
    k = -reg / reg_m
    t, s = a * np.exp(k * log["logu"]), b * np.exp(k * log["logv"])
    return float(np.abs(P.sum(1) - t).sum() + np.abs(P.sum(0) - s).sum())


def pot_solve(a, b, M, reg, reg_m):
    """POT to a plan within TOL of its fixed point: (seconds, iterations, error, plan)."""
    thr = 1e-9
    while True:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            start = time.perf_counter()
            P, log = ot.unbalanced.sinkhorn_unbalanced(a, b, M, reg, reg_m, numItermax=200000, stopThr=thr, log=True)
            seconds = time.perf_counter() - start
        error = fixed_point_error(P, a, b, log, reg, reg_m)
        if error < TOL or thr < 1e-15 or len(log["err"]) >= 200000:
            return seconds, len(log["err"]), error, P
        thr /= 10.0


def tokenflow_solve(a, b, M, reg, reg_m):
    start = time.perf_counter()
    P, log = tfot.unbalanced.sinkhorn_unbalanced(a, b, M, reg, reg_m, stopThr=TOL, numItermax=200000, log=True)
    seconds = time.perf_counter() - start
    return seconds, log["niter"], fixed_point_error(P, a, b, log, reg, reg_m), P


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=[200, 1000])
    ap.add_argument("--json", help="write the table and its conditions here (bench/update_docs.py reads it)")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    rows = []
    for n in args.sizes:
        x, y = rng.uniform(0, 1, (n, 2)), rng.uniform(0, 1, (n, 2)) + 0.3
        M = ((x[:, None, :] - y[None, :, :]) ** 2).sum(-1)
        a, b = np.full(n, 0.7 / n), np.full(n, 1.3 / n)
        for reg in (0.05, 0.2):
            for reg_m in (0.1, 1.0, 10.0):
                pot_s, pot_it, pot_err, P = pot_solve(a, b, M, reg, reg_m)
                tf_s, tf_it, tf_err, Q = tokenflow_solve(a, b, M, reg, reg_m)
                # Tokenflow's problem for the balanced comparison: the same shifted cost (M' = M + reg (log a + log b),
                # a constant per row and column: the balanced plan of the normalized weights is that of M).
                balanced = tokenflow.sinkhorn(a=a / a.sum(), b=b / b.sum(), M=M, epsilon=reg, tol=TOL, max_iter=200000)
                gap = float(np.abs(P - Q).max() / np.abs(P).max())
                rows.append([n, reg, reg_m, f"{pot_s:.3g}", pot_it, f"{pot_err:.1e}", f"{tf_s:.3g}", tf_it,
                             f"{tf_err:.1e}", f"{pot_s / tf_s:.1f}x", balanced.iterations,
                             f"{tf_it / balanced.iterations:.2f}"])
                print(" | ".join(map(str, rows[-1])), f"(plans differ by {gap:.1e} relative)", flush=True)
    if args.json:
        sys.path.insert(0, os.path.join(ROOT, "bench"))
        from update_docs import cpu_model
        with open(args.json, "w") as f:
            json.dump({"date": datetime.date.today().isoformat(), "cpu": cpu_model(), "cores": os.cpu_count(),
                       "command": " ".join(["/usr/bin/python3 bench/unbalanced_vs_pot.py", *sys.argv[1:]]),
                       "threads": THREADS, "load": os.getloadavg()[0], "pot": ot.__version__, "tol": TOL,
                       "header": HEADER, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
