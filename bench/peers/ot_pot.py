#!/usr/bin/python3
"""Optimal transport between two point clouds with POT (Debian's python3-pot), written as a
researcher would: M = ot.dist(x, y) (squared Euclidean), uniform weights, then one of
  sinkhorn       ot.sinkhorn(a, b, M, eps, method="sinkhorn")      (kernel mode, Sinkhorn-Knopp)
  sinkhorn_log   ot.sinkhorn(a, b, M, eps, method="sinkhorn_log")  (log domain)
  emd            ot.emd2(a, b, M)                                  (exact, network simplex)
POT stops Sinkhorn when the l2 norm of the column error, checked every 10 iterations, is below
stopThr, or after numItermax iterations. Reads --x and --y (.npy), writes --out (.json): the cost
<M, P>, the l1 marginal error, the iterations and the seconds of the solve call alone."""
import argparse
import json
import time
import warnings

import numpy as np
import ot


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--x", required=True)
    p.add_argument("--y", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--method", choices=["sinkhorn", "sinkhorn_log", "emd"], required=True)
    p.add_argument("--epsilon", type=float, default=0.1)
    p.add_argument("--tol", type=float, default=1e-6)
    p.add_argument("--max-iter", type=int, default=100000)
    a = p.parse_args()
    x, y = np.load(a.x), np.load(a.y)
    wa, wb = np.full(len(x), 1.0 / len(x)), np.full(len(y), 1.0 / len(y))
    M = ot.dist(x, y)
    start = time.perf_counter()
    if a.method == "emd":
        cost = float(ot.emd2(wa, wb, M))
        out = dict(cost=cost, iterations=None)
    else:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            P, log = ot.sinkhorn(wa, wb, M, a.epsilon, method=a.method, numItermax=a.max_iter,
                                 stopThr=a.tol, log=True, warn=False)
        errors = np.abs(P.sum(1) - wa).sum() + np.abs(P.sum(0) - wb).sum()
        out = dict(cost=float((P * M).sum()), iterations=int(log["niter"]) + 1,
                   l1_marginal_error=float(errors), l2_column_error_last=float(log["err"][-1]) if log["err"] else None)
    out["solve_seconds"] = time.perf_counter() - start
    json.dump(out, open(a.out, "w"))


if __name__ == "__main__":
    main()
